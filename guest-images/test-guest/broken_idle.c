/*
 * broken_idle.c - a guest that breaks its queue and then leaves it alone
 * (broken_idle_ms=N).
 *
 * Owns: posting, on queue 0, one valid 512-byte read (slot 0) and a
 * looping chain (slot 1: its status descriptor's next points back at its
 * data descriptor), one kick, then N ms of ring-3 idling without a reset,
 * framed by the console markers "osprey-test-guest: broken-idle begin" and
 * "... end" (the test samples the VMM's iothread CPU time at each), then a
 * line with what the device did: the read's status byte (255: unwritten),
 * used entries returned and whether DEVICE_NEEDS_RESET is set. The caller
 * (blk_main.c) resets and reinitialises the device afterwards.
 */
#include "blk.h"
#include "hw.h"

struct bjob {
    struct blk_dev *d;
    const struct blk_opts *o;
    u64 ms;
};

static long broken_post_job(void *arg)
{
    struct bjob *b = arg;
    struct blk_dev *d = b->d;
    struct vq *vq = &d->vq[0];
    volatile struct vring_desc *t = vq->desc;
    u64 buf = (u64)blkmem.misc + 4096;
    u16 good = blk_build(d, 0, 0, VIRTIO_BLK_T_IN, 0, buf, 512);
    u16 bad = blk_build(d, 0, 1, VIRTIO_BLK_T_IN, 0, buf + 512, 512);
    t[bad + 2].flags = VRING_DESC_F_NEXT | VRING_DESC_F_WRITE;
    t[bad + 2].next = (u16)(bad + 1);
    d->req[0][0].status = 0xff;
    d->req[0][1].status = 0xff;
    vq_push(vq, good);
    vq_push(vq, bad);
    vq_kick(vq);
    return 0;
}

static long idle_job(void *arg)
{
    struct bjob *b = arg;
    u64 t0 = rdtsc(), limit = b->ms * b->o->tsc_khz;
    while (rdtsc() - t0 < limit)
        cpu_relax();
    return 0;
}

void broken_idle_run(struct blk_dev *d, const struct blk_opts *o)
{
    struct bjob b = { d, o, o->broken_idle_ms };
    run_in_user(broken_post_job, &b);
    puts_serial("osprey-test-guest: broken-idle begin\n");
    run_in_user(idle_job, &b);
    puts_serial("osprey-test-guest: broken-idle end read_status=");
    put_u64(d->req[0][0].status);
    puts_serial(" used=");
    put_u64((u16)(vq_used_idx(&d->vq[0]) - d->vq[0].last_used));
    puts_serial(" needs_reset=");
    put_u64((vp_status(&d->vp) & VIRTIO_STATUS_NEEDS_RESET) ? 1 : 0);
    putc_serial('\n');
}
