/*
 * blk.c - virtio-blk device bring-up and request construction.
 *
 * Owns: blk_init() (ring 0, spec 3.1.1: reset, ACKNOWLEDGE, DRIVER,
 * feature negotiation, FEATURES_OK check, config read, queue set-up with
 * optional MSI-X, DRIVER_OK), the request layout (16-byte header,
 * data or discard/write-zeroes segment, 1-byte status, one fixed group of
 * descriptors per slot: slot s of a queue uses descriptors s*ndesc ...;
 * with indirect=1 slot s uses ring descriptor s, which points at the
 * slot's indirect table blkmem.ind[q][s]),
 * blk_sync() for one request at a time on queue 0 slot 0, and the ring-3
 * jobs that zero the ring memory and fetch the GET_ID serial.
 */
#include "blk.h"
#include "hw.h"

long user_zero_job(void *arg)
{
    struct blk_dev *d = arg;
    for (u16 q = 0; q < d->nq; q++) {
        memset(blkmem.rings[q], 0, BLK_RING_BYTES);
        memset(blkmem.reqs[q], 0, sizeof(blkmem.reqs[q]));
    }
    return 0;
}

static u16 pow2_floor(u32 v)
{
    u32 p = 1;
    while (p * 2 <= v)
        p *= 2;
    return (u16)p;
}

static void read_config(struct blk_dev *d)
{
    struct vpci *vp = &d->vp;
    for (int tries = 0; tries < 4; tries++) {
        u8 gen = vp_cfg_generation(vp);
        d->capacity = vp_cfg32(vp, 0) | (u64)vp_cfg32(vp, 4) << 32;
        d->size_max = (d->accepted & (1u << VIRTIO_BLK_F_SIZE_MAX)) ? vp_cfg32(vp, 8) : 0;
        d->seg_max = (d->accepted & (1u << VIRTIO_BLK_F_SEG_MAX)) ? vp_cfg32(vp, 12) : 0;
        d->blk_size = (d->accepted & (1u << VIRTIO_BLK_F_BLK_SIZE)) ? vp_cfg32(vp, 20) : 512;
        d->dev_queues = (d->offered & (1u << VIRTIO_BLK_F_MQ)) ? (u16)(vp_cfg32(vp, 32) >> 16) : 1;
        if (d->accepted & (1u << VIRTIO_BLK_F_DISCARD)) {
            d->max_discard_sectors = vp_cfg32(vp, 36);
            d->max_discard_seg = vp_cfg32(vp, 40);
        }
        if (d->accepted & (1u << VIRTIO_BLK_F_WRITE_ZEROES)) {
            d->max_wz_sectors = vp_cfg32(vp, 48);
            d->max_wz_seg = vp_cfg32(vp, 52);
            d->wz_may_unmap = vp_cfg8(vp, 56);
        }
        if (vp_cfg_generation(vp) == gen)
            break;
    }
    if (d->dev_queues == 0)
        d->dev_queues = 1;
}

/* Returns 0, or a negative code (see blk_main.c's init_error()). */
int blk_init(struct blk_dev *d, const struct blk_opts *o)
{
    struct vpci *vp = &d->vp;
    if (!d->probed) {
        int r = vp_probe(vp, 0x1042, o->dev);
        if (r)
            return r;                   /* -1 .. -4 */
        d->probed = 1;
    }
    if (vp_reset(vp))
        return -5;
    vp_set_status(vp, VIRTIO_STATUS_ACK);
    vp_set_status(vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER);

    d->offered = vp_device_features(vp);
    if (!(d->offered & (1ULL << VIRTIO_F_VERSION_1)))
        return -6;
    u64 want = (1ULL << VIRTIO_F_VERSION_1) | (1u << VIRTIO_BLK_F_FLUSH) |
               (1u << VIRTIO_BLK_F_BLK_SIZE) | (1u << VIRTIO_BLK_F_SEG_MAX) |
               (1u << VIRTIO_BLK_F_SIZE_MAX) | (1u << VIRTIO_BLK_F_DISCARD) |
               (1u << VIRTIO_BLK_F_WRITE_ZEROES) | (1u << VIRTIO_BLK_F_RO);
    if (o->event_idx)
        want |= 1ULL << VIRTIO_F_EVENT_IDX;
    if (o->queues > 1)
        want |= 1u << VIRTIO_BLK_F_MQ;
    if (o->indirect)
        want |= 1u << VIRTIO_F_INDIRECT_DESC;
    d->accepted = d->offered & want;
    vp_driver_features(vp, d->accepted);
    vp_set_status(vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK);
    if (!(vp_status(vp) & VIRTIO_STATUS_FEATURES_OK)) {
        vp_set_status(vp, VIRTIO_STATUS_FAILED);
        return -7;
    }

    read_config(d);
    d->ro = (d->accepted >> VIRTIO_BLK_F_RO) & 1;
    u32 nq = o->queues;
    if (!(d->accepted & (1u << VIRTIO_BLK_F_MQ)))
        nq = 1;
    if (nq > d->dev_queues)
        nq = d->dev_queues;
    if (nq > BLK_MAX_QUEUES)
        nq = BLK_MAX_QUEUES;
    if (nq > vp_num_queues(vp))
        nq = vp_num_queues(vp);
    if (nq == 0)
        return -8;
    d->nq = (u16)nq;

    u32 nseg = 1;
    if (d->size_max && o->bs > d->size_max)
        nseg = (o->bs + d->size_max - 1) / d->size_max;
    if (d->seg_max && nseg > d->seg_max)
        return -9;
    d->ndesc = (u16)(2 + nseg);
    d->indirect = (d->accepted >> VIRTIO_F_INDIRECT_DESC) & 1;
    if (d->indirect && d->ndesc > BLK_IND_MAX)
        return -9;
    d->ring_ndesc = d->indirect ? 1 : d->ndesc;

    u32 size = o->qsize < BLK_MAX_QSIZE ? o->qsize : BLK_MAX_QSIZE;
    for (u16 q = 0; q < nq; q++) {
        u16 m = vp_queue_max(vp, q);
        if (m == 0)
            return -10;
        if (m < size)
            size = m;
    }
    d->qsize = pow2_floor(size);
    if ((u32)d->qsize < d->ring_ndesc)
        return -11;

    d->irq = o->irq;
    d->msix_ok = 0;
    if (o->irq) {
        d->apic_id = apic_init_for_msi();
        if (vp_msix_enable(vp, d->apic_id, nq))
            return -12;
        d->msix_ok = 1;
    }
    run_in_user(user_zero_job, d);
    for (u16 q = 0; q < nq; q++) {
        struct vq *vq = &d->vq[q];
        vq->event_idx = (d->accepted >> VIRTIO_F_EVENT_IDX) & 1;
        vq->want_irq = o->irq;
        vq_layout(vq, blkmem.rings[q], q, d->qsize);
        if (vp_queue_setup(vp, vq, q, d->qsize, o->irq ? q : VIRTIO_NO_VECTOR))
            return -13;
        d->req[q] = blkmem.reqs[q];
    }
    vp_set_status(vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER |
                  VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DRIVER_OK);
    u8 st = vp_status(vp);
    if (st & (VIRTIO_STATUS_NEEDS_RESET | VIRTIO_STATUS_FAILED))
        return -14;
    return 0;
}

static void set_desc(volatile struct vring_desc *t, u16 i, u64 addr, u32 len,
                     u16 flags, u16 next)
{
    t[i].addr = addr;
    t[i].len = len;
    t[i].flags = flags;
    t[i].next = next;
}

u16 blk_build(struct blk_dev *d, u16 q, u16 slot, u32 type, u64 sector,
              u64 data, u32 len)
{
    struct blk_req *r = &d->req[q][slot];
    volatile struct vring_desc *t = d->vq[q].desc;
    u16 base = (u16)(slot * d->ring_ndesc), i = base;
    if (d->indirect) {
        t = blkmem.ind[q][slot];
        i = 0;
    }
    r->type = type;
    r->reserved = 0;
    r->sector = sector;
    r->status = 0xff;
    set_desc(t, i, (u64)&r->type, 16, VRING_DESC_F_NEXT, (u16)(i + 1));
    i++;
    if (type == VIRTIO_BLK_T_DISCARD || type == VIRTIO_BLK_T_WRITE_ZEROES) {
        set_desc(t, i, (u64)&r->seg_sector, 16, VRING_DESC_F_NEXT, (u16)(i + 1));
        i++;
    } else if (len) {
        u16 wflag = (type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID) ?
                    VRING_DESC_F_WRITE : 0;
        u32 seg = d->size_max ? d->size_max : len;
        while (len) {
            u32 n = len < seg ? len : seg;
            set_desc(t, i, data, n, VRING_DESC_F_NEXT | wflag, (u16)(i + 1));
            i++;
            data += n;
            len -= n;
        }
    }
    set_desc(t, i, (u64)&r->status, 1, VRING_DESC_F_WRITE, 0);
    if (d->indirect)
        set_desc(d->vq[q].desc, base, (u64)t, (u32)(i + 1) * sizeof(struct vring_desc),
                 VRING_DESC_F_INDIRECT, 0);
    return base;
}

int blk_sync(struct blk_dev *d, u32 type, u64 sector, u64 data, u32 len, u64 timeout)
{
    struct vq *vq = &d->vq[0];
    u16 head = blk_build(d, 0, 0, type, sector, data, len);
    vq_push(vq, head);
    vq_kick(vq);
    u64 t0 = rdtsc();
    u32 id, ulen;
    while (!vq_pop_used(vq, &id, &ulen)) {
        if (rdtsc() - t0 > timeout)
            return -1;
        cpu_relax();
    }
    return d->req[0][0].status;
}

/* arg: struct blk_dev *; d->serial_status = status (or -1). */
long blk_get_id_job(void *arg)
{
    struct blk_dev *d = arg;
    u8 *buf = blkmem.misc;
    memset(buf, 0, 32);
    u64 timeout = 2600000000ULL;        /* ~1 s at 2.6 GHz */
    d->serial_status = blk_sync(d, VIRTIO_BLK_T_GET_ID, 0, (u64)buf, 20, timeout);
    int n = 0;
    if (d->serial_status == 0)
        while (n < 20 && buf[n]) {
            d->serial[n] = (char)buf[n];
            n++;
        }
    d->serial[n] = 0;
    return 0;
}
