// qd1-ring-floor: the floor of a virtqueue at QD1 on this host: the test guest's driver loop and
// the least a device can do, in two bare threads, with no VMM and no guest.
//
// qd1-handoff.c passes each read across one cache line each way. A virtio-blk request crosses
// more: the driver writes a header, descriptors, an avail entry and the avail index; the device
// follows them one after another (index → entry → descriptor → header); on the way back the
// driver reads the used index, then the used element, then the request's status byte (each
// load names the next line). This program does exactly those loads and stores, laid out as the
// test guest lays them out (descriptor table, avail ring, used ring, a 56-byte request slot,
// a 4 KiB data buffer in shared anonymous memory, as guest RAM is), with a device that does
// nothing else: no bounds checks, no bookkeeping, no statistics. The driver side is the test
// guest's: build the request, stamp the TSC, publish, fence, read the device's suppression
// field, spin on the used index with `pause`. The mean is the driver's (TSC from its stamp to
// the used index seen), as the test guest reports it.
//
// Layouts: `split` (virtio 1.0's split ring, EVENT_IDX, what the test guest and Linux use with
// Osprey), `split-prefetch` (the same, with the device loading the lines Osprey's `HostRing`
// prefetches), and `packed` (virtio 1.1's packed ring: the driver writes descriptors with their
// flags, the device writes the used descriptor in place; one line fewer each way).
//
// Usage: qd1-ring-floor FILE SECONDS DIRECT(0|1) [LAYOUT...]
// Prints one line per layout: `<layout> <mean µs> p50 <µs> p99 <µs>` (default layout:
// split-prefetch).
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define BS 4096
#define QSIZE 256
#define NDESC 3 // header, data, status

// Offsets in the shared region, as the test guest's rings (virtqueue.c) and slots (blk.h).
#define DESC_OFF 0
#define AVAIL_OFF 4096
#define USED_OFF 8192
#define REQ_OFF 16384
#define DATA_OFF 65536
#define DESC_F_NEXT 1
#define DESC_F_WRITE 2
#define PACKED_F_AVAIL (1 << 7)
#define PACKED_F_USED (1 << 15)

struct desc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next; // split: next index; packed: buffer id
};

struct req { // the test guest's struct blk_req: 56 bytes
    uint32_t type, reserved;
    uint64_t sector;
    uint8_t status, kind, pad[6];
    uint64_t seg_sector;
    uint32_t seg_num, seg_flags;
    uint64_t t_submit, lba;
};

enum layout { SPLIT, SPLIT_PREFETCH, PACKED };

static int fd;
static uint8_t *mem;
static uint64_t blocks;
static _Atomic int stop;
static enum layout layout;
// Every request's latency in TSC ticks (the driver stores one per request, as the test guest
// keeps its sample), for the percentiles.
#define MAX_SAMPLES (1u << 24)
static uint32_t *samples;

#define AT(off) ((void *)(mem + (off)))
#define U16(off) (*(volatile uint16_t *)AT(off))

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t next_block(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x % blocks;
}

// Device: the header, then the read into the data descriptor's buffer, then the status byte.
static uint32_t serve(volatile struct desc *d0, volatile struct desc *d1, volatile struct desc *d2) {
    volatile struct req *hdr = AT(d0->addr);
    uint64_t sector = hdr->sector;
    struct iovec iov = {.iov_base = AT(d1->addr), .iov_len = d1->len};
    if (preadv2(fd, &iov, 1, (off_t)(sector * 512), 0) != (ssize_t)d1->len) {
        perror("qd1-ring-floor: preadv2");
        exit(1);
    }
    *(volatile uint8_t *)AT(d2->addr) = 0; // VIRTIO_BLK_S_OK
    return d1->len + 1;
}

static void *split_device(void *arg) {
    (void)arg;
    volatile struct desc *table = AT(DESC_OFF);
    uint16_t next_avail = 0, next_used = 0, last_head = 0;
    const uint8_t *last_header = NULL;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint16_t idx = __atomic_load_n((uint16_t *)AT(AVAIL_OFF + 2), __ATOMIC_ACQUIRE);
        if (idx == next_avail)
            continue;
        if (layout == SPLIT_PREFETCH) {
            _mm_prefetch((const char *)AT(AVAIL_OFF + 4 + 2 * (next_avail % QSIZE)), _MM_HINT_T0);
            _mm_prefetch((const char *)&table[last_head], _MM_HINT_T0);
            if (last_header)
                __builtin_prefetch(last_header, 1);
        }
        uint16_t head = U16(AVAIL_OFF + 4 + 2 * (next_avail % QSIZE));
        next_avail++;
        volatile struct desc *d0 = &table[head % QSIZE];
        volatile struct desc *d1 = &table[d0->next % QSIZE];
        volatile struct desc *d2 = &table[d1->next % QSIZE];
        last_head = head;
        last_header = AT(d0->addr);
        uint32_t len = serve(d0, d1, d2);
        volatile uint32_t *elem = AT(USED_OFF + 4 + 8 * (next_used % QSIZE));
        elem[0] = head;
        elem[1] = len;
        next_used++;
        __atomic_store_n((uint16_t *)AT(USED_OFF + 2), next_used, __ATOMIC_RELEASE);
    }
    return NULL;
}

// A packed ring's next chain: NDESC slots on, wrapping (and flipping the wrap counter) where a
// whole chain no longer fits, at 255.
static void next_chain(uint16_t *pos, int *wrap) {
    *pos += NDESC;
    if (*pos >= QSIZE - QSIZE % NDESC) {
        *pos = 0;
        *wrap ^= 1;
    }
}

static void *packed_device(void *arg) {
    (void)arg;
    volatile struct desc *ring = AT(DESC_OFF);
    uint16_t pos = 0;
    int wrap = 1;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint16_t flags = __atomic_load_n((uint16_t *)&ring[pos].flags, __ATOMIC_ACQUIRE);
        int avail = !!(flags & PACKED_F_AVAIL), used = !!(flags & PACKED_F_USED);
        if (avail != wrap || used == wrap)
            continue;
        volatile struct desc *d0 = &ring[pos];
        volatile struct desc *d1 = &ring[(pos + 1) % QSIZE];
        volatile struct desc *d2 = &ring[(pos + 2) % QSIZE];
        uint16_t id = d2->next; // the chain's id is in its last descriptor
        uint32_t len = serve(d0, d1, d2);
        // The used descriptor in place of the chain's first: id, length, then the flags.
        ring[pos].next = id;
        ring[pos].len = len;
        uint16_t f = wrap ? (PACKED_F_AVAIL | PACKED_F_USED) : 0;
        __atomic_store_n((uint16_t *)&ring[pos].flags, f | DESC_F_WRITE, __ATOMIC_RELEASE);
        next_chain(&pos, &wrap);
    }
    return NULL;
}

static void set_desc(volatile struct desc *d, uint64_t addr, uint32_t len, uint16_t flags,
                     uint16_t next) {
    d->addr = addr;
    d->len = len;
    d->next = next;
    d->flags = flags;
}

// Driver: one request at a time, slot 0, as workload.c does at qd=1 (event index on, polling).
static double driver(double seconds, uint64_t *n_out, double *tsc_per_us_out) {
    volatile struct req *r = AT(REQ_OFF);
    volatile struct desc *table = AT(DESC_OFF);
    uint64_t x = 0x9e3779b97f4a7c15ull, n = 0, lat = 0;
    uint16_t shadow = 0, last_used = 0, pos = 0;
    int wrap = 1;
    double t0 = now_s(), t1 = t0;
    uint64_t c0 = __rdtsc();
    while (t1 - t0 < seconds) {
        for (int i = 0; i < 256; i++, n++) {
            uint64_t sector = next_block(&x) * (BS / 512);
            r->type = 0; // VIRTIO_BLK_T_IN
            r->reserved = 0;
            r->sector = sector;
            r->status = 0xff;
            r->kind = 1;
            r->lba = sector;
            uint64_t now;
            if (layout == PACKED) {
                uint16_t f = wrap ? PACKED_F_AVAIL : PACKED_F_USED;
                set_desc(&table[(pos + 1) % QSIZE], DATA_OFF, BS, f | DESC_F_NEXT | DESC_F_WRITE, 0);
                set_desc(&table[(pos + 2) % QSIZE], REQ_OFF + 16, 1, f | DESC_F_WRITE, 0);
                r->t_submit = __rdtsc();
                // The head's flags last: they make the chain available.
                table[pos].addr = REQ_OFF;
                table[pos].len = 16;
                table[pos].next = 0;
                __atomic_store_n((uint16_t *)&table[pos].flags, f | DESC_F_NEXT, __ATOMIC_RELEASE);
                _mm_mfence();
                (void)U16(AVAIL_OFF); // the device's event suppression (as Linux reads it)
                uint16_t want = wrap ? (PACKED_F_AVAIL | PACKED_F_USED) : 0;
                while ((table[pos].flags & (PACKED_F_AVAIL | PACKED_F_USED)) != want)
                    _mm_pause();
                now = __rdtsc();
                if (table[pos].next != 0 || r->status != 0) {
                    fprintf(stderr, "qd1-ring-floor: bad completion\n");
                    exit(1);
                }
                next_chain(&pos, &wrap);
            } else {
                set_desc(&table[0], REQ_OFF, 16, DESC_F_NEXT, 1);
                set_desc(&table[1], DATA_OFF, BS, DESC_F_NEXT | DESC_F_WRITE, 2);
                set_desc(&table[2], REQ_OFF + 16, 1, DESC_F_WRITE, 0);
                r->t_submit = __rdtsc();
                U16(AVAIL_OFF + 4 + 2 * (shadow % QSIZE)) = 0;
                shadow++;
                __asm__ volatile("" ::: "memory");
                U16(AVAIL_OFF + 2) = shadow;
                _mm_mfence();
                (void)U16(USED_OFF + 4 + 8 * QSIZE); // avail_event (vring_need_event)
                while (U16(USED_OFF + 2) == last_used)
                    _mm_pause();
                now = __rdtsc();
                __asm__ volatile("" ::: "memory");
                uint32_t id = *(volatile uint32_t *)AT(USED_OFF + 4 + 8 * (last_used % QSIZE));
                last_used++;
                // The status byte of the slot the used element names (one slot here: `r`).
                volatile struct req *rq = AT(REQ_OFF + sizeof(struct req) * (id / NDESC));
                if (rq != r || rq->status != 0) {
                    fprintf(stderr, "qd1-ring-floor: bad completion\n");
                    exit(1);
                }
            }
            lat += now - r->t_submit;
            samples[n % MAX_SAMPLES] = (uint32_t)(now - r->t_submit);
        }
        t1 = now_s();
    }
    double tsc_per_us = (double)(__rdtsc() - c0) / ((now_s() - t0) * 1e6);
    *n_out = n;
    *tsc_per_us_out = tsc_per_us;
    return (double)lat / (double)n / tsc_per_us;
}

static int by_value(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int parse_layout(const char *s, enum layout *out) {
    if (!strcmp(s, "split"))
        *out = SPLIT;
    else if (!strcmp(s, "split-prefetch"))
        *out = SPLIT_PREFETCH;
    else if (!strcmp(s, "packed"))
        *out = PACKED;
    else
        return -1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: qd1-ring-floor FILE SECONDS DIRECT(0|1) [split|split-prefetch|packed...]\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    fd = open(argv[1], O_RDONLY | (atoi(argv[3]) ? O_DIRECT : 0));
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < BS || seconds <= 0) {
        perror("qd1-ring-floor: open");
        return 1;
    }
    blocks = (uint64_t)st.st_size / BS;
    samples = malloc(sizeof(uint32_t) * MAX_SAMPLES);
    if (!samples) {
        perror("qd1-ring-floor: malloc");
        return 1;
    }
    const char *deflt[] = {"split-prefetch"};
    const char **names = argc > 4 ? (const char **)argv + 4 : deflt;
    int count = argc > 4 ? argc - 4 : 1;
    for (int i = 0; i < count; i++) {
        if (parse_layout(names[i], &layout) != 0) {
            fprintf(stderr, "qd1-ring-floor: unknown layout %s (split, split-prefetch, packed)\n",
                    names[i]);
            return 2;
        }
        mem = mmap(NULL, 1 << 21, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) {
            perror("qd1-ring-floor: mmap");
            return 1;
        }
        atomic_store(&stop, 0);
        pthread_t t;
        if (pthread_create(&t, NULL, layout == PACKED ? packed_device : split_device, NULL) != 0) {
            perror("qd1-ring-floor: pthread_create");
            return 1;
        }
        uint64_t n;
        double tsc_per_us;
        double mean = driver(seconds, &n, &tsc_per_us);
        atomic_store(&stop, 1);
        pthread_join(t, NULL);
        munmap(mem, 1 << 21);
        size_t kept = n < MAX_SAMPLES ? n : MAX_SAMPLES;
        qsort(samples, kept, sizeof(uint32_t), by_value);
        printf("%s %.3f p50 %.3f p99 %.3f\n", names[i], mean,
               samples[kept / 2] / tsc_per_us, samples[kept * 99 / 100] / tsc_per_us);
    }
    return 0;
}
