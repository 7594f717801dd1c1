/*
 * user_bench.c - the ring-3 smoke-test workload for mode=user.
 *
 * Owns: user_bench(), run via run_in_user(): an integer-only xorshift/sum
 * loop over b->iterations, timed with rdtsc, storing cycles and result in
 * the struct and returning USER_BENCH_MAGIC so the caller can check the
 * ring-3 return path carried RAX back.
 */
#include "guest.h"

long user_bench(void *arg)
{
    struct user_bench *b = arg;
    u64 n = b->iterations;
    u64 x = 0x9e3779b97f4a7c15ULL, sum = 0;
    u64 t0 = rdtsc();
    for (u64 i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sum += x ^ i;
    }
    u64 t1 = rdtsc();
    b->cycles = t1 - t0;
    b->result = sum;
    return USER_BENCH_MAGIC;
}
