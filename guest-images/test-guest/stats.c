/*
 * stats.c - latency statistics (ring 3, integer only).
 *
 * Owns: the LSD radix sort of the per-request latency samples (8-bit
 * digits, only as many passes as the largest sample needs), nearest-rank
 * p50 and p99 of the samples, mean / min / max of every request, and the cycles -> ns conversion with a
 * given TSC frequency in kHz (overflow-safe split division).
 */
#include "blk.h"

static void radix_sort(u64 *v, u64 *tmp, u64 n, u64 maxv)
{
    u64 *src = v, *dst = tmp;
    for (int shift = 0; shift < 64 && (maxv >> shift); shift += 8) {
        u64 cnt[256];
        for (int i = 0; i < 256; i++)
            cnt[i] = 0;
        for (u64 i = 0; i < n; i++)
            cnt[(src[i] >> shift) & 0xff]++;
        u64 sum = 0;
        for (int i = 0; i < 256; i++) {
            u64 c = cnt[i];
            cnt[i] = sum;
            sum += c;
        }
        for (u64 i = 0; i < n; i++)
            dst[cnt[(src[i] >> shift) & 0xff]++] = src[i];
        u64 *t = src;
        src = dst;
        dst = t;
    }
    if (src != v)
        for (u64 i = 0; i < n; i++)
            v[i] = src[i];
}

static u64 rank(const u64 *v, u64 n, u64 pct)
{
    u64 r = (n * pct + 99) / 100;       /* nearest rank, 1-based */
    return v[r ? r - 1 : 0];
}

void lat_compute(u64 *v, u64 *tmp, u64 n, const struct lat_all *all, struct lat_stats *out)
{
    out->samples = n;
    out->mean = out->p50 = out->p99 = out->min = out->max = 0;
    if (n == 0)
        return;
    u64 sum = 0, maxv = 0;
    for (u64 i = 0; i < n; i++) {
        sum += v[i];
        if (v[i] > maxv)
            maxv = v[i];
    }
    radix_sort(v, tmp, n, maxv);
    out->mean = sum / n;
    out->min = v[0];
    out->max = v[n - 1];
    if (all && all->count >= n) {
        out->mean = all->sum / all->count;
        out->min = all->min;
        out->max = all->max;
    }
    out->p50 = rank(v, n, 50);
    out->p99 = rank(v, n, 99);
}

u64 cycles_to_ns(u64 c, u64 khz)
{
    if (!khz)
        return 0;
    return (c / khz) * 1000000 + (c % khz) * 1000000 / khz;
}
