/*
 * blk_report.c - the one-line `BLK {json}` report of mode=blk.
 *
 * Owns: the field set and its formatting, done in ring 3 (blk_report_job)
 * into blkmem.report; ring 0 (blk_main.c) then only copies the bytes to
 * the serial port. Status numbers are the virtio status byte; negative
 * internal codes are printed as strings: "timeout", "needs_reset",
 * "unwritten", "not_offered", "out_of_range", "skipped".
 */
#include "blk.h"

static void status_val(struct sbuf *b, int st)
{
    if (st >= 0)
        sb_u64(b, (u64)st);
    else if (st == -1)
        sb_puts(b, "\"timeout\"");
    else if (st == -2)
        sb_puts(b, "\"not_offered\"");
    else if (st == -4)
        sb_puts(b, "\"out_of_range\"");
    else if (st == -5)
        sb_puts(b, "\"skipped\"");
    else
        sb_puts(b, "\"unwritten\"");
}

static void hostile_status(struct sbuf *b, int st)
{
    if (st == -2)
        sb_puts(b, "\"needs_reset\"");
    else
        status_val(b, st);
}

static void kv_u(struct sbuf *b, const char *k, u64 v)
{
    sb_key(b, k);
    sb_u64(b, v);
}

static void kv_b(struct sbuf *b, const char *k, int v)
{
    sb_key(b, k);
    sb_puts(b, v ? "true" : "false");
}

static void kv_s(struct sbuf *b, const char *k, const char *s)
{
    sb_key(b, k);
    sb_str(b, s, strnlen(s, 256));
}

static void lat_obj(struct sbuf *b, const char *k, const struct lat_stats *l, u64 khz, int ns)
{
    sb_key(b, k);
    sb_putc(b, '{');
    kv_u(b, "mean", ns ? cycles_to_ns(l->mean, khz) : l->mean);
    kv_u(b, "p50", ns ? cycles_to_ns(l->p50, khz) : l->p50);
    kv_u(b, "p99", ns ? cycles_to_ns(l->p99, khz) : l->p99);
    kv_u(b, "min", ns ? cycles_to_ns(l->min, khz) : l->min);
    kv_u(b, "max", ns ? cycles_to_ns(l->max, khz) : l->max);
    sb_putc(b, '}');
}

static void run_obj(struct sbuf *b, const struct blk_run *r, u64 khz)
{
    sb_putc(b, '{');
    kv_s(b, "name", r->name);
    kv_s(b, "rw", r->rw);
    kv_u(b, "bs", r->bs);
    kv_u(b, "qd", r->qd);
    kv_u(b, "queues", r->queues);
    kv_u(b, "requests", r->requests);
    kv_u(b, "bytes", r->bytes);
    kv_u(b, "errors", r->errors);
    kv_u(b, "mismatches", r->mismatches);
    sb_key(b, "first_mismatch_sector");
    if (r->mismatches)
        sb_u64(b, r->first_mismatch_sector);
    else
        sb_puts(b, "null");
    kv_u(b, "flushes", r->flushes);
    kv_u(b, "kicks", r->kicks);
    kv_u(b, "interrupts", r->interrupts);
    kv_u(b, "irq_wait_timeouts", r->irq_waits_timed_out);
    kv_u(b, "irq_lost", r->irq_lost);
    kv_b(b, "timed_out", r->timed_out);
    kv_b(b, "needs_reset", r->needs_reset);
    kv_u(b, "elapsed_cycles", r->elapsed_cycles);
    kv_u(b, "elapsed_ns", cycles_to_ns(r->elapsed_cycles, khz));
    kv_u(b, "iops", r->iops);
    kv_u(b, "lat_samples", r->lat.samples);
    lat_obj(b, "lat_cycles", &r->lat, khz, 0);
    lat_obj(b, "lat_ns", &r->lat, khz, 1);
    sb_putc(b, '}');
}

static void extra_obj(struct sbuf *b, const char *k, const struct extra_result *e,
                      const char *prep, const char *rb)
{
    if (!e->ran)
        return;
    sb_key(b, k);
    sb_putc(b, '{');
    sb_key(b, "status");
    status_val(b, e->status);
    if (prep) {
        sb_key(b, prep);
        status_val(b, e->prep_status);
    }
    if (rb) {
        sb_key(b, rb);
        status_val(b, e->readback_status);
        kv_u(b, "bad_sectors", e->bad_sectors);
    }
    kv_u(b, "sector", e->sector);
    kv_u(b, "sectors", e->sectors);
    sb_putc(b, '}');
}

/* rw=stamp: "stamp":{"tags":[{"tag":T,"sectors":N}],...} */
static void stamp_obj(struct sbuf *b, const struct stamp_state *st)
{
    sb_key(b, "stamp");
    sb_putc(b, '{');
    sb_key(b, "tags");
    sb_putc(b, '[');
    for (u32 i = 0; i < st->ntags; i++) {
        if (i)
            sb_putc(b, ',');
        sb_putc(b, '{');
        kv_u(b, "tag", st->tags[i]);
        kv_u(b, "sectors", st->sectors[i]);
        sb_putc(b, '}');
    }
    sb_putc(b, ']');
    kv_u(b, "other_tags", st->other_tags);
    kv_u(b, "issued", st->issued);
    kv_u(b, "bad_magic", st->bad_magic);
    kv_u(b, "bad_sector", st->bad_sector);
    kv_u(b, "bad_fill", st->bad_fill);
    kv_u(b, "until_seen", st->until_seen);
    kv_u(b, "config_changes", st->config_changes);
    kv_u(b, "capacity_bytes", st->capacity * 512);
    sb_putc(b, '}');
}

long blk_report_job(void *arg)
{
    struct blk_summary *s = arg;
    const struct blk_dev *d = s->d;
    const struct blk_opts *o = s->o;
    struct sbuf sb = { blkmem.report, 0, BLK_REPORT_BYTES }, *b = &sb;
    blkmem.report[0] = 0;
    sb_puts(b, "BLK {");
    if (s->error) {
        kv_s(b, "error", s->error);
    }
    kv_b(b, "found", d->probed);
    if (d->probed) {
        sb_key(b, "device");
        sb_putc(b, '{');
        kv_u(b, "slot", d->vp.slot);
        sb_key(b, "bar0");
        sb_hex(b, d->vp.bar[0]);
        kv_u(b, "cfg_bar", d->vp.common_bar);
        sb_key(b, "cfg_bar_addr");
        sb_hex(b, d->vp.bar[d->vp.common_bar]);
        kv_u(b, "notify_off_multiplier", d->vp.notify_mult);
        kv_u(b, "msix_table_size", d->vp.msix_size);
        sb_putc(b, '}');
        sb_key(b, "features_offered");
        sb_hex(b, d->offered);
        sb_key(b, "features_accepted");
        sb_hex(b, d->accepted);
        kv_u(b, "capacity_bytes", d->capacity * 512);
        kv_u(b, "blk_size", d->blk_size);
        kv_u(b, "num_queues", d->dev_queues);
        kv_u(b, "queues_used", d->nq);
        kv_u(b, "queue_size", d->qsize);
        kv_u(b, "seg_max", d->seg_max);
        kv_u(b, "size_max", d->size_max);
        kv_b(b, "ro", d->ro);
        kv_b(b, "event_idx", (d->accepted >> VIRTIO_F_EVENT_IDX) & 1);
        kv_b(b, "indirect", d->indirect);
        kv_b(b, "flush", (d->accepted >> VIRTIO_BLK_F_FLUSH) & 1);
        sb_key(b, "discard_limits");
        sb_putc(b, '{');
        kv_u(b, "max_sectors", d->max_discard_sectors);
        kv_u(b, "max_seg", d->max_discard_seg);
        sb_putc(b, '}');
        sb_key(b, "write_zeroes_limits");
        sb_putc(b, '{');
        kv_u(b, "max_sectors", d->max_wz_sectors);
        kv_u(b, "max_seg", d->max_wz_seg);
        kv_b(b, "may_unmap", d->wz_may_unmap);
        sb_putc(b, '}');
        sb_key(b, "serial");
        sb_str(b, d->serial, strnlen(d->serial, 20));
        sb_key(b, "serial_status");
        status_val(b, d->serial_status);
        kv_b(b, "irq", o->irq);
        kv_b(b, "msix", d->msix_ok);
        if (d->msix_ok)
            kv_u(b, "apic_id", d->apic_id);
    }
    kv_u(b, "tsc_khz", o->tsc_khz);
    static const char *const tsc_sources[] = {
        [TSC_DEFAULT] = "default", [TSC_CMDLINE] = "cmdline", [TSC_KVMCLOCK] = "kvmclock",
    };
    kv_s(b, "tsc_khz_source", tsc_sources[o->tsc_source]);
    sb_key(b, "runs");
    sb_putc(b, '[');
    for (u32 i = 0; i < s->nruns; i++) {
        if (i)
            sb_putc(b, ',');
        run_obj(b, s->runs[i], o->tsc_khz);
    }
    sb_putc(b, ']');
    if (s->extra) {
        extra_obj(b, "discard", &s->extra->discard, NULL, NULL);
        extra_obj(b, "write_zeroes", &s->extra->wz, "prep_write_status", "readback_status");
        extra_obj(b, "pattern", &s->extra->pattern, "flush_status", "readback_status");
        if (s->extra->pattern.ran) {
            sb_key(b, "pattern_value");
            sb_hex(b, o->pattern);
        }
    }
    if (s->hostile) {
        sb_key(b, "hostile");
        sb_putc(b, '[');
        for (u32 i = 0; i < s->hostile->n; i++) {
            const struct hostile_case *c = &s->hostile->c[i];
            if (i)
                sb_putc(b, ',');
            sb_putc(b, '{');
            kv_s(b, "case", c->name);
            sb_key(b, "status");
            hostile_status(b, c->status);
            kv_u(b, "expected", c->expected);
            kv_b(b, "ok", c->ok);
            sb_putc(b, '}');
        }
        sb_putc(b, ']');
        kv_b(b, "hostile_post_ok", s->hostile->post_ok);
    }
    if (s->stamp)
        stamp_obj(b, s->stamp);
    if (o->reinit)
        kv_b(b, "reinit_ok", s->reinit_done);
    kv_u(b, "resets", d->resets);
    kv_u(b, "failures", s->failures);
    sb_putc(b, '}');
    return 0;
}
