/*
 * vsock_init.c - ring-0 set-up of the virtio-vsock device (spec 3.1.1 and 5.10).
 *
 * Owns: finding the first virtio-vsock PCI function (1af4:1053), reset, the feature
 * handshake (VERSION_1 only), reading guest_cid from the device config, laying out and
 * enabling the rx, tx and event queues (polled: no MSI-X vectors), priming them through a
 * ring-3 job, and DRIVER_OK.
 */
#include "vsock.h"
#include "hw.h"

#define VIRTIO_F_VERSION_1 32

const char *vsock_init_error(int r)
{
    switch (r) {
    case -1: return "no virtio-vsock (1af4:1053) on bus 0";
    case -2: return "no PCI capability list";
    case -3: return "virtio caps missing (common/notify/device cfg)";
    case -4: return "cannot map a BAR";
    case -5: return "reset timed out";
    case -6: return "device does not offer VERSION_1";
    case -7: return "FEATURES_OK did not stick";
    case -8: return "fewer than three queues";
    case -10: return "queue not available (size < 2)";
    case -13: return "queue set-up refused";
    case -14: return "device failed or needs reset after DRIVER_OK";
    default: return "init failed";
    }
}

static u16 pow2_floor16(u16 x)
{
    u16 p = 1;
    while ((u16)(p << 1) != 0 && (u16)(p << 1) <= x)
        p = (u16)(p << 1);
    return p;
}

u64 vsock_read_cid(struct vsock_dev *d);
u64 vsock_read_cid(struct vsock_dev *d)
{
    return (u64)vp_cfg32(&d->vp, 0) | (u64)vp_cfg32(&d->vp, 4) << 32;
}

int vsock_init(struct vsock_dev *d)
{
    struct vpci *vp = &d->vp;
    int r = vp_probe(vp, VIRTIO_ID_VSOCK_PCI, 0);
    if (r)
        return r;
    if (vp_reset(vp))
        return -5;
    vp_set_status(vp, VIRTIO_STATUS_ACK);
    vp_set_status(vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER);
    u64 feat = vp_device_features(vp);
    if (!(feat >> VIRTIO_F_VERSION_1 & 1))
        return -6;
    vp_driver_features(vp, 1ULL << VIRTIO_F_VERSION_1);
    u8 st = VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK;
    vp_set_status(vp, st);
    if (!(vp_status(vp) & VIRTIO_STATUS_FEATURES_OK))
        return -7;
    if (vp_num_queues(vp) < 3)
        return -8;
    u16 size = VSOCK_QSIZE_MAX;
    for (u16 q = 0; q < 3; q++) {
        u16 m = vp_queue_max(vp, q);
        if (m < 2)
            return -10;
        if (m < size)
            size = m;
    }
    d->qsize = pow2_floor16(size);
    d->cid = vsock_read_cid(d);

    run_in_user(vsock_zero_job, d);
    struct vq *qs[3] = { &d->rxq, &d->txq, &d->evq };
    for (u16 q = 0; q < 3; q++) {
        qs[q]->event_idx = 0;
        qs[q]->want_irq = 0;
        vq_layout(qs[q], vsockmem.rings[q], q, d->qsize);
        if (vp_queue_setup(vp, qs[q], q, d->qsize, VIRTIO_NO_VECTOR))
            return -13;
    }
    run_in_user(vsock_prime_job, d);
    vp_set_status(vp, st | VIRTIO_STATUS_DRIVER_OK);
    if (vp_status(vp) & (VIRTIO_STATUS_NEEDS_RESET | VIRTIO_STATUS_FAILED))
        return -14;
    /* The buffers were published before DRIVER_OK; notify only now (spec 3.1.1). */
    mmio_w16(d->rxq.notify_addr, d->rxq.index);
    mmio_w16(d->evq.notify_addr, d->evq.index);
    return 0;
}
