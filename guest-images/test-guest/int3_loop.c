/*
 * int3_loop.c - mode=int3-loop: ring-3 int3 round trips, forever.
 *
 * Owns: int3_loop_main(): enters ring 3 (run_in_user) with a job that returns
 * at once, so nearly all of the vCPU's time is spent on the ring-0 <-> ring-3
 * path, the int3 back to ring 0 included. Prints "INT3LOOP ready" once and
 * "INT3LOOP n=<round trips>" every INT3_LOOP_BEAT round trips, so a test can
 * pause and snapshot the vCPU in that path and see a restored guest go on
 * (or stop at the ud2 after the int3 if the exception was lost).
 */
#include "guest.h"

#define INT3_LOOP_BEAT 4096

static long int3_loop_job(void *arg)
{
    return (long)arg + 1;
}

NORETURN void int3_loop_main(void)
{
    puts_serial("INT3LOOP ready\n");
    u64 n = 0;
    for (;;) {
        long r = run_in_user(int3_loop_job, (void *)(long)n);
        if (r != (long)n + 1) {
            puts_serial("INT3LOOP error: ring 3 returned a wrong value\n");
            guest_exit(EXIT_INTERNAL);
        }
        n++;
        if (n % INT3_LOOP_BEAT == 0) {
            puts_serial("INT3LOOP n=");
            put_u64(n);
            puts_serial("\n");
        }
    }
}
