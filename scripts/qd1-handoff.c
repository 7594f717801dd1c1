// qd1-handoff: the floor of a polling VMM's QD1 read on this host, with no VMM in it.
//
// Two threads stand in for a guest's vCPU and an iothread, each spinning as Osprey's do at QD1
// (the guest on its used ring, the iothread on the avail ring): the "guest" publishes an offset
// and a sequence number on one cache line and spins on a second line; the "iothread" spins on the
// first, reads 4 KiB at that offset with preadv2 into the guest's buffer (shared anonymous memory,
// as guest RAM is), and publishes the sequence number on the second line. No parsing, no
// bookkeeping: what is left is the read and the two cross-core hand-offs. The same program also
// times the read alone in one thread (what `fio --ioengine=psync` measures), so one run gives
// both and their ratio.
//
// Usage: qd1-handoff FILE SECONDS DIRECT(0|1)
// Prints: `pread <µs> handoff <µs> ratio <x>` (means over the run; each phase runs SECONDS).
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BS 4096

struct line {
    _Atomic uint64_t v;
    uint64_t offset;
    char pad[48];
} __attribute__((aligned(64)));

static struct line avail, used;
static int fd;
static void *buf;
static uint64_t blocks;
static _Atomic int stop;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t next_offset(uint64_t *x) {
    // xorshift64: the offsets of a random read, cheap and the same in both phases.
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return (*x % blocks) * BS;
}

static int read_at(uint64_t offset) {
    struct iovec iov = {.iov_base = buf, .iov_len = BS};
    return preadv2(fd, &iov, 1, (off_t)offset, 0) == BS ? 0 : -1;
}

static void *iothread(void *arg) {
    (void)arg;
    uint64_t seen = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint64_t v = atomic_load_explicit(&avail.v, memory_order_acquire);
        if (v == seen)
            continue;
        seen = v;
        if (read_at(avail.offset) != 0) {
            perror("qd1-handoff: preadv2");
            exit(1);
        }
        atomic_store_explicit(&used.v, v, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: qd1-handoff FILE SECONDS DIRECT(0|1)\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    fd = open(argv[1], O_RDONLY | (atoi(argv[3]) ? O_DIRECT : 0));
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < BS || seconds <= 0) {
        perror("qd1-handoff: open");
        return 1;
    }
    blocks = (uint64_t)st.st_size / BS;
    buf = mmap(NULL, 1 << 21, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("qd1-handoff: mmap");
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;

    // Phase 1: the read alone, one thread.
    uint64_t n1 = 0;
    double t0 = now_s(), t1 = t0;
    while (t1 - t0 < seconds) {
        for (int i = 0; i < 256; i++, n1++)
            if (read_at(next_offset(&x)) != 0) {
                perror("qd1-handoff: preadv2");
                return 1;
            }
        t1 = now_s();
    }
    double pread_us = (t1 - t0) / (double)n1 * 1e6;

    // Phase 2: the same reads handed to a polling thread and back.
    pthread_t t;
    if (pthread_create(&t, NULL, iothread, NULL) != 0) {
        perror("qd1-handoff: pthread_create");
        return 1;
    }
    uint64_t n2 = 0;
    t0 = now_s();
    t1 = t0;
    while (t1 - t0 < seconds) {
        for (int i = 0; i < 256; i++) {
            n2++;
            avail.offset = next_offset(&x);
            atomic_store_explicit(&avail.v, n2, memory_order_release);
            while (atomic_load_explicit(&used.v, memory_order_acquire) != n2)
                ;
        }
        t1 = now_s();
    }
    double handoff_us = (t1 - t0) / (double)n2 * 1e6;
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    printf("pread %.3f handoff %.3f ratio %.2f\n", pread_us, handoff_us, handoff_us / pread_us);
    return 0;
}
