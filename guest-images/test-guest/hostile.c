/*
 * hostile.c - malformed virtio-blk requests (hostile=1).
 *
 * Owns: the case list, building each malformed chain on queue 0 (from
 * ring 3, via run_in_user), waiting for it with a short timeout, reading
 * the status byte (pre-set to 0xff, so "unwritten" is visible), and, from
 * ring 0, resetting + reinitialising the device when a case left it in
 * DEVICE_NEEDS_RESET or stuck. Status codes in the result: 0-255 the
 * status byte, -1 timeout, -2 needs_reset (DEVICE_NEEDS_RESET set and no
 * status byte written, whether or not the chain came back in the used
 * ring), -3 unwritten (completed, no status, no NEEDS_RESET). Which outcomes count as ok is per case:
 * the expected status (IOERR 1 / UNSUPP 2) always; for chains the device
 * cannot answer through (loops, bad status descriptor) also needs_reset
 * and unwritten.
 */
#include "blk.h"
#include "hw.h"

#define OOB_ADDR 0x4000000000ULL        /* 256 GiB: no guest RAM there */

enum hcase {
    H_OOB, H_TOO_LONG, H_LOOP, H_WRONG_DIR, H_STATUS_ZERO, H_STATUS_RO,
    H_PAST_END, H_STRADDLE, H_WRITE_RO, H_UNKNOWN_TYPE, H_COUNT
};
static const char *const hnames[H_COUNT] = {
    "desc_addr_oob", "chain_too_long", "chain_loop", "data_wrong_dir",
    "status_zero_len", "status_readonly", "past_end", "straddle_end",
    "write_ro", "unknown_type",
};

struct hjob {
    struct blk_dev *d;
    const struct blk_opts *o;
    enum hcase c;
    int status;
};

static long hostile_job(void *arg)
{
    struct hjob *h = arg;
    struct blk_dev *d = h->d;
    struct vq *vq = &d->vq[0];
    volatile struct vring_desc *t = vq->desc;
    struct blk_req *rq = &d->req[0][0];
    u64 buf = (u64)blkmem.misc + 4096;
    u16 head = 0;

    switch (h->c) {
    case H_OOB:
        head = blk_build(d, 0, 0, VIRTIO_BLK_T_IN, 0, buf, 512);
        t[1].addr = OOB_ADDR;
        break;
    case H_TOO_LONG:        /* OUT whose readable chain runs over every
                             * descriptor and back to the head: longer than
                             * the queue, no direction-order violation */
        head = blk_build(d, 0, 0, VIRTIO_BLK_T_OUT, 0, buf, 512);
        for (u16 i = 1; i < vq->size; i++) {
            t[i].addr = buf;
            t[i].len = 512;
            t[i].flags = VRING_DESC_F_NEXT;
            t[i].next = (u16)((i + 1) & (vq->size - 1));
        }
        break;
    case H_LOOP:            /* status descriptor's next points back at data */
        head = blk_build(d, 0, 0, VIRTIO_BLK_T_IN, 0, buf, 512);
        t[2].flags = VRING_DESC_F_NEXT | VRING_DESC_F_WRITE;
        t[2].next = 1;
        break;
    case H_WRONG_DIR:       /* IN with a device-readable data buffer */
        head = blk_build(d, 0, 0, VIRTIO_BLK_T_IN, 0, buf, 512);
        t[1].flags = VRING_DESC_F_NEXT;
        break;
    case H_STATUS_ZERO:
        head = blk_build(d, 0, 0, VIRTIO_BLK_T_IN, 0, buf, 512);
        t[2].len = 0;
        break;
    case H_STATUS_RO:
        head = blk_build(d, 0, 0, VIRTIO_BLK_T_IN, 0, buf, 512);
        t[2].flags = 0;
        break;
    case H_PAST_END:
        head = blk_build(d, 0, 0, VIRTIO_BLK_T_IN, d->capacity, buf, 512);
        break;
    case H_STRADDLE:
        head = blk_build(d, 0, 0, VIRTIO_BLK_T_IN, d->capacity - 1, buf, 1024);
        break;
    case H_WRITE_RO:
        head = blk_build(d, 0, 0, VIRTIO_BLK_T_OUT, 0, buf, 512);
        break;
    case H_UNKNOWN_TYPE:
        head = blk_build(d, 0, 0, 0xff, 0, 0, 0);
        break;
    default:
        break;
    }
    rq->status = 0xff;
    vq_push(vq, head);
    vq_kick(vq);
    u64 t0 = rdtsc(), limit = 300 * h->o->tsc_khz;  /* 300 ms */
    u32 id, len;
    while (!vq_pop_used(vq, &id, &len)) {
        if (rdtsc() - t0 > limit) {
            h->status = (vp_status(&d->vp) & VIRTIO_STATUS_NEEDS_RESET) ? -2 : -1;
            return 0;
        }
        cpu_relax();
    }
    if (rq->status != 0xff) {
        h->status = rq->status;
        return 0;
    }
    /* Returned without a status: does the device flag NEEDS_RESET (it may
     * set the bit just after returning the chain)? Look for up to 10 ms. */
    h->status = -3;
    t0 = rdtsc();
    do {
        if (vp_status(&d->vp) & VIRTIO_STATUS_NEEDS_RESET) {
            h->status = -2;
            break;
        }
    } while (rdtsc() - t0 < 10 * h->o->tsc_khz);
    return 0;
}

static long post_job(void *arg)
{
    struct hjob *h = arg;
    h->status = blk_sync(h->d, VIRTIO_BLK_T_IN, 0, (u64)blkmem.misc + 4096, 512,
                         h->o->timeout_ms * h->o->tsc_khz);
    return 0;
}

static int accepted(enum hcase c, int st, u8 expected)
{
    if (st == expected)
        return 1;
    int lenient = c == H_TOO_LONG || c == H_LOOP || c == H_STATUS_ZERO || c == H_STATUS_RO;
    return lenient && (st == -2 || st == -3);
}

void hostile_run(struct blk_dev *d, const struct blk_opts *o, struct hostile_result *r)
{
    struct hjob h = { d, o, H_OOB, 0 };
    r->n = 0;
    for (int c = 0; c < H_COUNT && r->n < BLK_MAX_HOSTILE; c++) {
        if (c == H_WRITE_RO && !d->ro)
            continue;
        h.c = (enum hcase)c;
        h.status = -1;
        if (d->irq)
            run_in_user_rflags(hostile_job, &h, user_stack_top, 0x202);
        else
            run_in_user(hostile_job, &h);
        struct hostile_case *hc = &r->c[r->n++];
        hc->name = hnames[c];
        hc->status = h.status;
        hc->expected = c == H_UNKNOWN_TYPE ? VIRTIO_BLK_S_UNSUPP : VIRTIO_BLK_S_IOERR;
        hc->ok = (u8)accepted((enum hcase)c, h.status, hc->expected);
        /* Stuck or broken device, or a device-visible chain we scribbled
         * over (too_long used every descriptor): start from a clean reset. */
        u8 st = vp_status(&d->vp);
        if (h.status == -1 || h.status == -2 || (st & VIRTIO_STATUS_NEEDS_RESET) ||
            c == H_TOO_LONG) {
            d->resets++;
            if (blk_init(d, o)) {
                r->post_ok = 0;
                return;
            }
        }
    }
    h.status = -1;
    run_in_user(post_job, &h);
    r->post_ok = h.status == 0;
}
