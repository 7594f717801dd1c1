/*
 * workload.c - the ring-3 load generator for mode=blk.
 *
 * Owns: workload_job() (run via run_in_user): keeps qd requests in flight
 * on each of the queues, round-robin, for rw=read|write|randread|randwrite
 * (nreq requests) or verify (a write phase over nreq blocks with a
 * per-sector pattern from (sector, seed), then a read phase comparing
 * every sector); optional FLUSH after every flush_every writes; per-request
 * latency samples (rdtsc at submit and at the poll that saw completion);
 * irq mode waits on the interrupt counter before re-checking the used
 * rings; a stall longer than timeout ends the run (timed_out, and
 * needs_reset if the device says so). rw=stamp reads like rw=read and
 * checks each sector's stamp (stamp.c); when the tag read changes it stops
 * issuing, drains, and returns 1 so ring 0 can print the tag, then goes on
 * where it stopped. Also extra_ops_job(): the discard / write-zeroes passes
 * and the pattern= block write.
 */
#include "blk.h"
#include "hw.h"

enum { KIND_FREE = 0, KIND_DATA = 1, KIND_FLUSH = 2 };

u64 pattern_word(u64 seed, u64 sector, u32 j)
{
    u64 x = seed * 0x9e3779b97f4a7c15ULL ^ sector * 0xbf58476d1ce4e5b9ULL ^
            ((u64)j + 1) * 0x94d049bb133111ebULL;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static void fill_pattern(u64 *buf, u64 seed, u64 sector, u32 bytes)
{
    for (u32 s = 0; s < bytes / 512; s++)
        for (u32 j = 0; j < 64; j++)
            buf[s * 64 + j] = pattern_word(seed, sector + s, j);
}

/* Returns the number of mismatching sectors; *first = the first one. */
static u64 check_pattern(const u64 *buf, u64 seed, u64 sector, u32 bytes, u64 *first)
{
    u64 bad = 0;
    for (u32 s = 0; s < bytes / 512; s++)
        for (u32 j = 0; j < 64; j++)
            if (buf[s * 64 + j] != pattern_word(seed, sector + s, j)) {
                if (!bad)
                    *first = sector + s;
                bad++;
                break;
            }
    return bad;
}

struct phase {
    struct wl_job *job;
    int write, random, verify, stamp;
    u64 nreq;
    u64 issued, done;           /* kept across a stamp pause */
};

/* rw=stamp: issue nothing more (the tag changed, or stamp_until= was reached). */
static int stamp_holds(const struct phase *ph)
{
    struct stamp_state *st = ph->job->stamp;
    return ph->stamp && (st->pause || stamp_until_reached(st, ph->job->o));
}

static u64 xorshift(u64 *s)
{
    u64 x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static u8 *slot_buf(const struct wl_job *j, u16 q, u16 s)
{
    return blkmem.data + ((u64)q * j->o->qd + s) * j->o->bs;
}

/* Every request's latency counts in the exact mean, min and max (struct lat_all); p50 and p99
 * come from a uniform sample of the whole run (reservoir sampling, algorithm R): a run's
 * first BLK_MAX_SAMPLES requests alone would show only its first ~150 ms at 400k IOPS. */
static struct lat_all lat_whole;
static u64 lat_rng = 0x9e3779b97f4a7c15ull;

static void lat_record(u64 *lat_n, u64 v)
{
    struct lat_all *a = &lat_whole;
    a->count++;
    a->sum += v;
    if (a->count == 1 || v < a->min)
        a->min = v;
    if (v > a->max)
        a->max = v;
    if (*lat_n < BLK_MAX_SAMPLES) {
        blkmem.lat[(*lat_n)++] = v;
        return;
    }
    lat_rng ^= lat_rng << 13;
    lat_rng ^= lat_rng >> 7;
    lat_rng ^= lat_rng << 17;
    /* A uniform index in [0, count): the high half of a 64x64 product, no division. */
    u64 k = (u64)(((unsigned __int128)lat_rng * a->count) >> 64);
    if (k < BLK_MAX_SAMPLES)
        blkmem.lat[k] = v;
}

static void run_phase(struct phase *ph, u64 *lat_n)
{
    struct wl_job *j = ph->job;
    struct blk_dev *d = j->d;
    struct blk_run *r = j->run;
    const struct blk_opts *o = j->o;
    u32 nq = d->nq, qd = o->qd, bs = o->bs, spb = bs / 512;
    if (qd * d->ring_ndesc > d->qsize)
        qd = d->qsize / d->ring_ndesc;   /* a slot needs ndesc descriptors */
    r->qd = qd;
    u32 inflight[BLK_MAX_QUEUES], nfree[BLK_MAX_QUEUES];
    for (u32 q = 0; q < nq; q++) {
        inflight[q] = 0;
        nfree[q] = qd;
        for (u32 s = 0; s < qd; s++) {
            blkmem.freelist[q][s] = (u16)(qd - 1 - s);
            d->req[q][s].kind = KIND_FREE;
        }
    }
    int do_flush = o->flush_every && ph->write &&
                   (d->accepted & (1u << VIRTIO_BLK_F_FLUSH));
    u64 rng = j->seed * 2654435761ULL + 0x1234567ULL;
    if (!rng)
        rng = 1;
    u64 issued = ph->issued, done = ph->done, writes_since_flush = 0, total_inflight = 0;
    struct stamp_state *st = j->stamp;
    u64 timeout = o->timeout_ms * o->tsc_khz;
    u64 irq_cap = 50 * o->tsc_khz;      /* max wait per interrupt: 50 ms */
    u64 last_progress = rdtsc();

    while ((done < ph->nreq && !stamp_holds(ph)) || total_inflight) {
        u64 snap = irq_total;
        int progress = 0;
        for (u32 q = 0; q < nq; q++) {
            struct vq *vq = &d->vq[q];
            u32 id, len;
            while (vq_pop_used(vq, &id, &len)) {
                u64 now = rdtsc();
                u16 s = (u16)(id / d->ring_ndesc);
                struct blk_req *rq = &d->req[q][s];
                progress = 1;
                if (s >= qd || id % d->ring_ndesc || rq->kind == KIND_FREE) {
                    r->errors++;        /* bogus used id */
                    continue;
                }
                if (rq->status != VIRTIO_BLK_S_OK)
                    r->errors++;
                if (rq->kind == KIND_DATA) {
                    done++;
                    r->requests++;
                    if (rq->status == VIRTIO_BLK_S_OK)
                        r->bytes += bs;
                    lat_record(lat_n, now - rq->t_submit);
                    if (ph->verify && !ph->write && rq->status == VIRTIO_BLK_S_OK) {
                        u64 first = 0;
                        u64 bad = check_pattern((const u64 *)slot_buf(j, (u16)q, s),
                                                j->seed, rq->lba, bs, &first);
                        if (bad && !r->mismatches)
                            r->first_mismatch_sector = first;
                        r->mismatches += bad;
                    }
                    if (ph->stamp && rq->status == VIRTIO_BLK_S_OK) {
                        u64 bad = stamp_check(st, slot_buf(j, (u16)q, s), rq->lba, bs);
                        if (bad && !r->mismatches)
                            r->first_mismatch_sector = rq->lba;
                        r->mismatches += bad;
                        if (j->o->stamp_until_set && st->have_cur &&
                            st->cur_tag == j->o->stamp_until)
                            st->until_seen++;
                        if (st->have_cur && (!st->printed || st->cur_tag != st->printed_tag))
                            st->pause = 1;
                        if (++st->checks >= STAMP_CONFIG_EVERY)
                            stamp_poll_config(st, d);
                    }
                } else {
                    r->flushes++;
                }
                rq->kind = KIND_FREE;
                blkmem.freelist[q][nfree[q]++] = s;
                inflight[q]--;
                total_inflight--;
            }
            if (o->think_us && progress) {
                /* Think time: the guest idles (natively, in ring 3) before issuing more. */
                u64 t = rdtsc(), want = o->think_us * o->tsc_khz / 1000;
                while (rdtsc() - t < want)
                    __asm__ volatile("pause");
            }
            while (nfree[q] && ((issued < ph->nreq && !stamp_holds(ph)) ||
                                (do_flush && writes_since_flush >= o->flush_every))) {
                u16 s = blkmem.freelist[q][--nfree[q]];
                struct blk_req *rq = &d->req[q][s];
                u16 head;
                if (do_flush && writes_since_flush >= o->flush_every) {
                    head = blk_build(d, (u16)q, s, VIRTIO_BLK_T_FLUSH, 0, 0, 0);
                    rq->kind = KIND_FLUSH;
                    writes_since_flush = 0;
                } else {
                    u64 blk = ph->random ? xorshift(&rng) % j->nblocks : issued % j->nblocks;
                    u64 sector = blk * spb;
                    u8 *buf = slot_buf(j, (u16)q, s);
                    if (ph->verify && ph->write)
                        fill_pattern((u64 *)buf, j->seed, sector, bs);
                    head = blk_build(d, (u16)q, s,
                                     ph->write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN,
                                     sector, (u64)buf, bs);
                    rq->kind = KIND_DATA;
                    rq->lba = sector;
                    issued++;
                    if (st)
                        st->issued++;
                    if (ph->write)
                        writes_since_flush++;
                }
                rq->t_submit = rdtsc();
                if (o->tsc_stamp && rq->kind == KIND_DATA && !ph->write)
                    /* For the host's stage stamps (docs/performance.md); the read overwrites it. */
                    *(volatile u64 *)slot_buf(j, (u16)q, s) = rq->t_submit;
                vq_push(vq, head);
                inflight[q]++;
                total_inflight++;
            }
            vq_kick(vq);
        }
        u64 now = rdtsc();
        if (progress) {
            last_progress = now;
            continue;
        }
        if (d->irq && total_inflight) {
            while (irq_total == snap) {
                if (rdtsc() - now > irq_cap) {
                    r->irq_waits_timed_out++;
                    for (u32 q = 0; q < nq; q++)    /* completed, no irq? */
                        if (vq_used_idx(&d->vq[q]) != d->vq[q].last_used) {
                            r->irq_lost++;
                            break;
                        }
                    break;
                }
                cpu_relax();
            }
        } else {
            cpu_relax();
        }
        if (rdtsc() - last_progress > timeout) {
            r->timed_out = 1;
            r->needs_reset = (vp_status(&d->vp) & VIRTIO_STATUS_NEEDS_RESET) != 0;
            break;
        }
    }
    ph->issued = issued;
    ph->done = done;
}

/* What a run keeps between workload_job calls (rw=stamp pauses). */
static struct {
    struct phase ph;
    u64 k0, lat_n, irq0, t0;
    int paused;
} cur;

long workload_job(void *arg)
{
    struct wl_job *j = arg;
    struct blk_run *r = j->run;
    struct blk_dev *d = j->d;
    struct phase *ph = &cur.ph;
    if (!cur.paused) {
        memset(&cur, 0, sizeof(cur));
        memset(&lat_whole, 0, sizeof(lat_whole));
        cur.irq0 = irq_total;
        for (u32 q = 0; q < d->nq; q++)
            cur.k0 += d->vq[q].kicks;
        ph->job = j;
        ph->nreq = j->nreq;
        switch (j->rw) {
        case RW_READ: break;
        case RW_WRITE: ph->write = 1; break;
        case RW_RANDREAD: ph->random = 1; break;
        case RW_RANDWRITE: ph->write = 1; ph->random = 1; break;
        case RW_VERIFY: ph->verify = 1; ph->write = 1; break;
        case RW_STAMP: ph->stamp = 1; break;
        }
        if (ph->write && !ph->verify)    /* plain writes: fill each buffer once */
            for (u32 q = 0; q < d->nq; q++)
                for (u32 s = 0; s < j->o->qd; s++)
                    fill_pattern((u64 *)slot_buf(j, (u16)q, (u16)s), j->seed, s, j->o->bs);
        cur.t0 = rdtsc();
    }
    cur.paused = 0;
    run_phase(ph, &cur.lat_n);
    if (ph->stamp && j->stamp->pause && !r->timed_out) {
        cur.paused = 1;                 /* ring 0 prints the tag, then calls again */
        return 1;
    }
    if (ph->verify && !r->timed_out) {
        ph->write = 0;
        ph->issued = ph->done = 0;
        run_phase(ph, &cur.lat_n);
    }
    r->elapsed_cycles = rdtsc() - cur.t0;
    u64 k1 = 0;
    for (u32 q = 0; q < d->nq; q++)
        k1 += d->vq[q].kicks;
    r->kicks = k1 - cur.k0;
    r->interrupts = irq_total - cur.irq0;
    if (r->elapsed_cycles)
        r->iops = r->requests * j->o->tsc_khz * 1000 / r->elapsed_cycles;
    lat_compute(blkmem.lat, blkmem.lat_tmp, cur.lat_n, &lat_whole, &r->lat);
    r->done = 1;
    return 0;
}

/* ---- discard / write-zeroes / pattern (one request at a time) ---- */

static int sync_seg(struct blk_dev *d, u32 type, u64 sector, u32 n, u64 timeout)
{
    struct blk_req *rq = &d->req[0][0];
    rq->seg_sector = sector;
    rq->seg_num = n;
    rq->seg_flags = 0;
    return blk_sync(d, type, 0, 0, 0, timeout);
}

/* Reads or writes nsec sectors from/to buf in requests of at most bs. */
static int sync_io(struct blk_dev *d, u32 type, u64 sector, u64 nsec, u8 *buf,
                   u32 bs, u64 timeout)
{
    int st = 0;
    for (u64 done = 0; done < nsec && st == 0;) {
        u64 n = nsec - done < bs / 512 ? nsec - done : bs / 512;
        st = blk_sync(d, type, sector + done, (u64)(buf + done * 512), (u32)(n * 512), timeout);
        done += n;
    }
    return st;
}

long extra_ops_job(void *arg)
{
    struct extra_job *x = arg;
    struct blk_dev *d = x->d;
    const struct blk_opts *o = x->o;
    u64 timeout = o->timeout_ms * o->tsc_khz;
    u8 *buf = blkmem.data;
    u64 want = 8ULL * o->bs / 512;
    if (want > d->capacity)
        want = d->capacity;

    if (x->which == 1 && o->discard) {
        struct extra_result *e = &x->discard;
        e->ran = 1;
        e->status = e->prep_status = e->readback_status = -2;
        if (d->accepted & (1u << VIRTIO_BLK_F_DISCARD)) {
            u64 n = want;
            if (d->max_discard_sectors && n > d->max_discard_sectors)
                n = d->max_discard_sectors;
            e->sectors = n;
            e->status = sync_seg(d, VIRTIO_BLK_T_DISCARD, 0, (u32)n, timeout);
        }
    }
    if (x->which == 1 && o->write_zeroes) {
        struct extra_result *e = &x->wz;
        e->ran = 1;
        e->status = e->prep_status = e->readback_status = -2;
        if (d->accepted & (1u << VIRTIO_BLK_F_WRITE_ZEROES)) {
            u64 n = want;
            if (d->max_wz_sectors && n > d->max_wz_sectors)
                n = d->max_wz_sectors;
            e->sectors = n;
            fill_pattern((u64 *)buf, o->seed ^ 0x5a5a, 0, (u32)(n * 512));
            e->prep_status = sync_io(d, VIRTIO_BLK_T_OUT, 0, n, buf, o->bs, timeout);
            e->status = sync_seg(d, VIRTIO_BLK_T_WRITE_ZEROES, 0, (u32)n, timeout);
            memset(buf, 0xee, n * 512);
            e->readback_status = sync_io(d, VIRTIO_BLK_T_IN, 0, n, buf, o->bs, timeout);
            for (u64 s = 0; s < n; s++) {
                const u64 *w = (const u64 *)(buf + s * 512);
                for (int i = 0; i < 64; i++)
                    if (w[i]) {
                        e->bad_sectors++;
                        break;
                    }
            }
        }
    }
    if (x->which == 2 && o->pattern_set) {
        struct extra_result *e = &x->pattern;
        u64 n = o->bs / 512;
        e->ran = 1;
        e->sector = o->pattern_lba;
        e->sectors = n;
        e->status = e->prep_status = e->readback_status = -4;
        if (o->pattern_lba + n <= d->capacity) {
            e->prep_status = -2;
            u32 *w = (u32 *)buf;
            for (u32 i = 0; i < o->bs / 4; i++)
                w[i] = o->pattern;
            if (o->pattern_check) {
                e->status = e->prep_status = -5;    /* skipped: verify only */
            } else {
                e->status = blk_sync(d, VIRTIO_BLK_T_OUT, o->pattern_lba, (u64)buf, o->bs,
                                     timeout);
                if (d->accepted & (1u << VIRTIO_BLK_F_FLUSH))
                    e->prep_status = blk_sync(d, VIRTIO_BLK_T_FLUSH, 0, 0, 0, timeout);
            }
            memset(buf, 0, o->bs);
            e->readback_status = blk_sync(d, VIRTIO_BLK_T_IN, o->pattern_lba, (u64)buf, o->bs, timeout);
            for (u64 s = 0; s < n; s++)
                for (int i = 0; i < 128; i++)
                    if (w[s * 128 + i] != o->pattern) {
                        e->bad_sectors++;
                        break;
                    }
        }
    }
    return 0;
}
