/*
 * blk_cmdline.c - the mode=blk command-line tokens.
 *
 * Owns: defaults and parsing of rw= bs= qd= queues= qsize= count= range=
 * seed= flush_every= event_idx= irq= discard= write_zeroes= hostile=
 * reinit= pattern_lba= pattern= tsc_khz= timeout_ms= think_us= indirect= pattern_check= hang= broken_idle_ms=
 * dev= stamp_until= tsc_stamp=, and their range
 * checks. Numbers are decimal (range= also takes a k/m/g suffix, powers of
 * 1024); pattern= is hex with an optional 0x. Unknown tokens are ignored
 * (cmdline.c owns mode= and exit=); a bad value prints
 * `osprey-test-guest: error: ...` and the guest exits with status 2.
 */
#include "blk.h"

static int parse_size(const char *v, size_t n, u64 *out)
{
    u64 mul = 1;
    if (n > 1) {
        char c = v[n - 1];
        if (c == 'k' || c == 'K') mul = 1ULL << 10;
        else if (c == 'm' || c == 'M') mul = 1ULL << 20;
        else if (c == 'g' || c == 'G') mul = 1ULL << 30;
        if (mul > 1)
            n--;
    }
    if (parse_decimal(v, n, out) || *out > (1ULL << 50) / mul)
        return -1;
    *out *= mul;
    return 0;
}

static int parse_hex32(const char *v, size_t n, u32 *out)
{
    if (n > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
        v += 2;
        n -= 2;
    }
    if (n == 0 || n > 8)
        return -1;
    u32 x = 0;
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        u32 d;
        if (c >= '0' && c <= '9') d = (u32)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (u32)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (u32)(c - 'A' + 10);
        else return -1;
        x = x << 4 | d;
    }
    *out = x;
    return 0;
}

static const char *const rw_names[] = { "read", "write", "randread", "randwrite", "verify",
                                        "stamp" };
#define RW_NAMES ((int)(sizeof(rw_names) / sizeof(rw_names[0])))

const char *blk_rw_name(enum blk_rw rw)
{
    return rw_names[rw];
}

static void blk_opts_default(struct blk_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->rw = RW_READ;
    o->bs = 4096;
    o->qd = 1;
    o->queues = 1;
    o->qsize = 256;
    o->count = 1000;
    o->seed = 1;
    o->event_idx = 1;
    o->tsc_khz = 2596146;
    o->timeout_ms = 5000;
}

static void bad(const char *t, size_t n, const char *why)
{
    ensure_line_start();
    puts_serial("osprey-test-guest: error: bad blk option '");
    for (size_t i = 0; i < n; i++)
        putc_serial(t[i]);
    puts_serial("': ");
    puts_serial(why);
    putc_serial('\n');
}

struct num_opt {
    const char *key;
    u64 min, max;
};
static const struct num_opt num_opts[] = {
    { "bs=", 512, 1 << 20 }, { "qd=", 1, BLK_MAX_QSIZE }, { "queues=", 1, BLK_MAX_QUEUES },
    { "qsize=", 4, 32768 }, { "count=", 1, 1ULL << 32 }, { "range=", 512, 1ULL << 50 },
    { "seed=", 0, ~0ULL }, { "flush_every=", 0, 1ULL << 32 }, { "event_idx=", 0, 1 },
    { "irq=", 0, 1 }, { "discard=", 0, 1 }, { "write_zeroes=", 0, 1 }, { "hostile=", 0, 1 },
    { "reinit=", 0, 1 }, { "pattern_lba=", 0, ~0ULL }, { "tsc_khz=", TSC_KHZ_MIN, TSC_KHZ_MAX },
    { "timeout_ms=", 1, 3600000 }, { "think_us=", 0, 10000000 }, { "indirect=", 0, 1 },
    { "pattern_check=", 0, 1 }, { "hang=", 0, 3 }, { "broken_idle_ms=", 0, 600000 },
    { "dev=", 0, 31 }, { "stamp_until=", 0, 0xffffffffULL }, { "tsc_stamp=", 0, 1 },
};

static void store(struct blk_opts *o, int idx, u64 v)
{
    switch (idx) {
    case 0: o->bs = (u32)v; break;
    case 1: o->qd = (u32)v; break;
    case 2: o->queues = (u32)v; break;
    case 3: o->qsize = (u32)v; break;
    case 4: o->count = v; break;
    case 5: o->range = v; break;
    case 6: o->seed = v; break;
    case 7: o->flush_every = v; break;
    case 8: o->event_idx = (int)v; break;
    case 9: o->irq = (int)v; break;
    case 10: o->discard = (int)v; break;
    case 11: o->write_zeroes = (int)v; break;
    case 12: o->hostile = (int)v; break;
    case 13: o->reinit = (int)v; break;
    case 14: o->pattern_lba = v; break;
    case 15: o->tsc_khz = v; o->tsc_source = TSC_CMDLINE; break;
    case 16: o->timeout_ms = v; break;
    case 17: o->think_us = v; break;
    case 18: o->indirect = (int)v; break;
    case 19: o->pattern_check = (int)v; break;
    case 20: o->hang = (int)v; break;
    case 21: o->broken_idle_ms = v; break;
    case 22: o->dev = (u32)v; break;
    case 23: o->stamp_until = (u32)v; o->stamp_until_set = 1; break;
    case 24: o->tsc_stamp = (int)v; break;
    }
}

static int token(struct blk_opts *o, const char *t, size_t n)
{
    size_t k;
    if ((k = prefix_len(t, n, "rw="))) {
        for (int i = 0; i < RW_NAMES; i++)
            if (prefix_len(t + k, n - k, rw_names[i]) == n - k && n > k) {
                o->rw = (enum blk_rw)i;
                return 0;
            }
        bad(t, n, "want read|write|randread|randwrite|verify|stamp");
        return -1;
    }
    if ((k = prefix_len(t, n, "pattern="))) {
        if (parse_hex32(t + k, n - k, &o->pattern)) {
            bad(t, n, "want up to 8 hex digits");
            return -1;
        }
        o->pattern_set = 1;
        return 0;
    }
    for (int i = 0; i < (int)(sizeof(num_opts) / sizeof(num_opts[0])); i++) {
        if (!(k = prefix_len(t, n, num_opts[i].key)))
            continue;
        u64 v;
        int r = (i == 5) ? parse_size(t + k, n - k, &v) : parse_decimal(t + k, n - k, &v);
        if (r || v < num_opts[i].min || v > num_opts[i].max) {
            bad(t, n, "not a number in range");
            return -1;
        }
        store(o, i, v);
        return 0;
    }
    return 0;                           /* not ours: ignored */
}

int blk_opts_parse(const char *s, size_t len, struct blk_opts *o)
{
    blk_opts_default(o);
    size_t i = 0;
    while (i < len) {
        const char *t;
        size_t n = cmdline_token(s, len, &i, &t);
        if (n && token(o, t, n))
            return -1;
    }
    if (o->bs % 512) {
        bad("bs", 2, "must be a multiple of 512");
        return -1;
    }
    if ((u64)o->bs * o->qd * o->queues > BLK_DATA_POOL) {
        bad("bs*qd*queues", 12, "exceeds the 8 MiB data pool");
        return -1;
    }
    if (o->indirect && o->hostile) {
        bad("indirect", 8, "cannot be combined with hostile=1");
        return -1;
    }
    if (o->range && o->range < o->bs) {
        bad("range", 5, "smaller than bs");
        return -1;
    }
    return 0;
}
