/*
 * vsock_main.c - mode=vsock-echo and mode=vsock-connect: the ring-0 side.
 *
 * Owns: parsing the vsock tokens (port=, count=, bytes=, par=, timeout_ms=, hostile= (2: and a REQUEST flood)), the TSC
 * frequency for the stall limit, device init, the `VSOCK ready cid=C port=N` (echo) /
 * `osprey-test-guest: vsock connecting cid=C port=N` lines, re-entering the ring-3 loop
 * after each TRANSPORT_RESET (printing `osprey-test-guest: vsock transport-reset cid=C`),
 * the `VSOCK {...}` line built in ring 3 and the exit status (0 when nothing failed, 1
 * otherwise, 2 for a bad option).
 */
#include "vsock.h"
#include "hw.h"

#define TSC_KHZ_FALLBACK 2596146

static struct vsock_dev dev;

static NORETURN void bad_option(const char *t, size_t n)
{
    ensure_line_start();
    puts_serial("osprey-test-guest: error: bad vsock option '");
    for (size_t i = 0; i < n && i < 64; i++)
        putc_serial(t[i]);
    puts_serial("'\n");
    guest_exit(EXIT_BAD_ARG);
}

static void parse(const char *s, size_t len, struct vsock_opts *o)
{
    size_t i = 0;
    while (i < len) {
        const char *t;
        size_t n = cmdline_token(s, len, &i, &t), k;
        u64 v;
        if (n == 0)
            break;
        if ((k = prefix_len(t, n, "port="))) {
            if (parse_decimal(t + k, n - k, &v) || v > 0xffffffffULL)
                bad_option(t, n);
            o->port = (u32)v;
        } else if ((k = prefix_len(t, n, "count="))) {
            if (parse_decimal(t + k, n - k, &v) || v > 1000000000ULL)
                bad_option(t, n);
            o->count = v;
        } else if ((k = prefix_len(t, n, "bytes="))) {
            if (parse_decimal(t + k, n - k, &v) || v > (1ULL << 40))
                bad_option(t, n);
            o->bytes = v;
        } else if ((k = prefix_len(t, n, "par="))) {
            if (parse_decimal(t + k, n - k, &v) || v == 0 || v > VSOCK_MAX_CONNS)
                bad_option(t, n);
            o->par = (u32)v;
        } else if ((k = prefix_len(t, n, "hostile="))) {
            if (parse_decimal(t + k, n - k, &v) || v > 2)
                bad_option(t, n);
            o->hostile = (int)v;
        } else if ((k = prefix_len(t, n, "timeout_ms="))) {
            if (parse_decimal(t + k, n - k, &v) || v == 0 || v > 3600000)
                bad_option(t, n);
            o->timeout_ms = v;
        }
    }
}

/* "osprey-test-guest: vsock <what> sent=N rst=M": the hostile phases' line. */
static void put_sent_rst(const char *what, u64 sent, u64 rst)
{
    puts_serial("osprey-test-guest: vsock ");
    puts_serial(what);
    puts_serial(" sent=");
    put_u64(sent);
    puts_serial(" rst=");
    put_u64(rst);
    putc_serial('\n');
}

static u64 failures(const struct vsock_dev *d)
{
    const struct vsock_stats *s = &d->s;
    u64 f = s->bad_pkts + s->mismatches + s->drops + (u64)d->timed_out + (d->error != 0);
    if (d->o.mode == VSOCK_CONNECT)
        f += s->refused + (d->o.count - (s->verified < d->o.count ? s->verified : d->o.count));
    return f;
}

static NORETURN void finish(struct vsock_dev *d)
{
    run_in_user(vsock_report_job, d);
    ensure_line_start();
    puts_serial(vsockmem.report);
    putc_serial('\n');
    guest_exit(failures(d) ? 1 : 0);
}

static NORETURN void init_failed(int r)
{
    ensure_line_start();
    puts_serial("osprey-test-guest: error: vsock init: ");
    puts_serial(vsock_init_error(r));
    for (int i = 0; i < 6; i++)
        if (dev.vp.bar[i]) {
            puts_serial(" bar");
            put_u64((u64)i);
            putc_serial('=');
            put_hex(dev.vp.bar[i]);
        }
    putc_serial('\n');
    guest_exit(1);
}

struct vsock_dev *vsock_agent_start(u32 port)
{
    struct vpci probe;
    if (vp_probe(&probe, VIRTIO_ID_VSOCK_PCI, 0))
        return NULL;
    struct vsock_opts *o = &dev.o;
    o->mode = VSOCK_ECHO;
    o->port = port;
    o->count = 0;
    o->bytes = 65536;
    o->par = 8;
    o->timeout_ms = 10000;
    u64 khz = kvmclock_tsc_khz();
    dev.tsc_khz = (khz >= TSC_KHZ_MIN && khz <= TSC_KHZ_MAX) ? khz : TSC_KHZ_FALLBACK;
    int r = vsock_init(&dev);
    if (r)
        init_failed(r);
    puts_serial("VSOCK ready cid=");
    put_u64(dev.cid);
    puts_serial(" port=");
    put_u64(port);
    putc_serial('\n');
    return &dev;
}

NORETURN void vsock_main(const char *cmdline, size_t len, int connect)
{
    struct vsock_opts *o = &dev.o;
    o->mode = connect ? VSOCK_CONNECT : VSOCK_ECHO;
    o->port = connect ? 10789 : 1024;
    o->count = connect ? 1 : 0;
    o->bytes = 65536;
    o->par = 8;
    o->timeout_ms = 10000;
    parse(cmdline, len, o);
    u64 khz = kvmclock_tsc_khz();
    dev.tsc_khz = (khz >= TSC_KHZ_MIN && khz <= TSC_KHZ_MAX) ? khz : TSC_KHZ_FALLBACK;

    int r = vsock_init(&dev);
    if (r)
        init_failed(r);
    puts_serial(connect ? "osprey-test-guest: vsock connecting cid=" : "VSOCK ready cid=");
    put_u64(dev.cid);
    puts_serial(" port=");
    put_u64(o->port);
    putc_serial('\n');
    if (o->hostile && o->mode == VSOCK_CONNECT) {
        run_in_user(vsock_hostile_job, &dev);
        put_sent_rst("hostile", dev.s.hostile_sent, dev.s.hostile_rst);
    }
    if (o->hostile >= 2 && o->mode == VSOCK_CONNECT) {
        puts_serial("osprey-test-guest: vsock flood start\n");
        run_in_user(vsock_flood_job, &dev);
        put_sent_rst("flood", dev.s.flood_sent, dev.s.flood_rst);
    }
    for (u32 round = 0;; round++) {
        long res = run_in_user(vsock_loop_job, &dev);
        if (res != VSOCK_LOOP_RESET || round >= 1000000)
            break;
        puts_serial("osprey-test-guest: vsock transport-reset cid=");
        put_u64(dev.cid);
        putc_serial('\n');
    }
    finish(&dev);
}
