/*
 * stamp.c - rw=stamp: reading a disk the host wrote with stamps.
 *
 * Owns: the stamp format's check (every 512-byte sector starts with
 * "OSPSTAMP", a little-endian u32 tag and the u32 sector number, and its
 * other 62 words are stamp_word(tag, sector, j), the same function the
 * host's writer in tests/common/stamp.rs uses), the per-tag counts, the
 * config generation watch (capacity re-read when it moves) and, in ring 0,
 * the `osprey-test-guest: stamp tag=` line printed each time the tag read
 * changes (a backing file swapped under the guest).
 */
#include "blk.h"
#include "hw.h"

static const char magic[8] = { 'O', 'S', 'P', 'S', 'T', 'A', 'M', 'P' };

static u64 stamp_word(u32 tag, u64 sector, u32 j)
{
    return pattern_word(((u64)tag << 32) | 0x5354414dULL, sector, j);
}

static u32 le32(const u8 *p)
{
    return (u32)p[0] | (u32)p[1] << 8 | (u32)p[2] << 16 | (u32)p[3] << 24;
}

static void count_tag(struct stamp_state *st, u32 tag)
{
    for (u32 i = 0; i < st->ntags; i++)
        if (st->tags[i] == tag) {
            st->sectors[i]++;
            return;
        }
    if (st->ntags < STAMP_MAX_TAGS) {
        st->tags[st->ntags] = tag;
        st->sectors[st->ntags++] = 1;
    } else {
        st->other_tags++;
    }
}

u64 stamp_check(struct stamp_state *st, const u8 *buf, u64 sector, u32 bytes)
{
    u64 bad = 0;
    for (u32 s = 0; s < bytes / 512; s++) {
        const u8 *p = buf + s * 512;
        u64 sec = sector + s;
        if (memcmp(p, magic, sizeof(magic))) {
            st->bad_magic++;
            bad++;
            continue;
        }
        u32 tag = le32(p + 8);
        if (le32(p + 12) != (u32)sec) {
            st->bad_sector++;
            bad++;
            continue;
        }
        const u64 *w = (const u64 *)p;
        u32 j = 2;
        while (j < 64 && w[j] == stamp_word(tag, sec, j))
            j++;
        if (j < 64) {
            st->bad_fill++;
            bad++;
            continue;
        }
        count_tag(st, tag);
        st->cur_tag = tag;
        st->have_cur = 1;
    }
    return bad;
}

static u64 read_capacity(struct blk_dev *d, u8 *gen)
{
    u64 cap = 0;
    for (int tries = 0; tries < 4; tries++) {
        *gen = vp_cfg_generation(&d->vp);
        cap = vp_cfg32(&d->vp, 0) | (u64)vp_cfg32(&d->vp, 4) << 32;
        if (vp_cfg_generation(&d->vp) == *gen)
            break;
    }
    return cap;
}

void stamp_poll_config(struct stamp_state *st, struct blk_dev *d)
{
    st->checks = 0;
    if (vp_cfg_generation(&d->vp) == st->gen)
        return;
    st->capacity = read_capacity(d, &st->gen);
    d->capacity = st->capacity;
    st->config_changes++;
}

void stamp_announce(struct stamp_state *st, struct blk_dev *d)
{
    stamp_poll_config(st, d);
    ensure_line_start();
    puts_serial("osprey-test-guest: stamp tag=");
    put_u64(st->cur_tag);
    puts_serial(" capacity_bytes=");
    put_u64(st->capacity * 512);
    puts_serial(" config_changes=");
    put_u64(st->config_changes);
    putc_serial('\n');
    st->printed_tag = st->cur_tag;
    st->printed = 1;
    st->pause = 0;
}

int stamp_until_reached(const struct stamp_state *st, const struct blk_opts *o)
{
    return o->stamp_until_set && st->until_seen >= STAMP_UNTIL_REQUESTS;
}
