// vsock-bench: the host side of one vsock measurement round (scripts/vsock-side-by-side.sh).
//
// Talks Firecracker's hybrid-vsock protocol to a guest that echoes (the test guest's
// `mode=vsock-echo port=N`): connect to the VMM's Unix socket, `CONNECT <port>\n`, expect
// `OK <host_port>\n`, then:
//
// - rtt: one connection, ROUNDS round trips of 64 bytes (write, read the 64 bytes back), each
//   timed with CLOCK_MONOTONIC after 100 untimed ones; mean and p99 in microseconds.
// - bulk1 / bulk8: 1 and 8 connections at once, each writing its share of TOTAL bytes (a
//   pseudo-random pattern, compared as it comes back) while reading the echo, all from one
//   thread: non-blocking sockets under one epoll, writes and reads of up to 256 KiB; MB/s of
//   payload echoed (one direction, MB = 10^6 bytes) from the first write to the last byte read.
// - CPU: the VMM's on-CPU time over each bulk phase (/proc/PID/task/*/schedstat, as
//   scripts/lib/vmm_cpu.py reads it: kernel workers such as KVM's `kvm-nx-lpage-re` left out)
//   divided by the payload MB, split into the vCPU threads (`vcpu_ms_per_MB`; by name: `vcpuN`,
//   `fc_vcpu N`, `CPU n/KVM`) and all other threads (`vmm_ms_per_MB`: the device side).
//
// The client does as little as it can per byte (one thread, large buffers, no copies but the
// kernel's), so on this 2-CPU host it takes less of the CPU the VMM and its guest need than
// scripts/vsock-bench.py did.
//
// Usage: vsock-bench --uds PATH --pid PID [--port N (1024)] [--rounds N (10000)]
//                    [--total BYTES (64 MiB)] [--timeout SECONDS (30)]
// Prints one JSON object (the keys vsock-side-by-side.sh reads); on a refused CONNECT, a
// mismatched echo or a stall of TIMEOUT seconds, {"error": "..."} and exit status 1.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 8
#define CHUNK (256 * 1024)
#define PF_KTHREAD 0x00200000UL
#define PF_USER_WORKER 0x00004000UL // KVM's worker on recent kernels (io_uring's: also PF_IO_WORKER)
#define PF_IO_WORKER 0x00000010UL

static char err_msg[256];

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

// ---- the VMM's CPU time, per kind of thread (scripts/lib/vmm_cpu.py's rules) ----

struct cpu {
    uint64_t dev, vcpu, kernel;
};

static int read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = 0;
    return 0;
}

static int is_vcpu_name(const char *c)
{
    unsigned a;
    char tail;
    // vcpuN (Osprey, Cloud Hypervisor), fc_vcpu N (Firecracker), CPU n/KVM (QEMU).
    if (sscanf(c, "vcpu%u%c", &a, &tail) == 1 && c[4] >= '0' && c[4] <= '9')
        return 1;
    if (sscanf(c, "fc_vcpu %u%c", &a, &tail) == 1 && c[8] >= '0' && c[8] <= '9')
        return 1;
    if (strncmp(c, "CPU ", 4) == 0 && c[4] >= '0' && c[4] <= '9') {
        const char *p = c + 4;
        while (*p >= '0' && *p <= '9')
            p++;
        return strcmp(p, "/KVM") == 0;
    }
    return 0;
}

static struct cpu cpu_now(int pid)
{
    struct cpu out = {0, 0, 0};
    char path[96], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d)
        return out;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char comm[64];
        unsigned long flags = 0;
        unsigned long long ns;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/comm", pid, e->d_name);
        if (read_small(path, comm, sizeof comm))
            continue;
        comm[strcspn(comm, "\n")] = 0;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/stat", pid, e->d_name);
        if (read_small(path, buf, sizeof buf))
            continue;
        // Field 9 (flags), counted after the ")" that closes the name (which may hold spaces).
        char *rp = strrchr(buf, ')');
        if (!rp || sscanf(rp + 2, "%*s %*s %*s %*s %*s %*s %lu", &flags) != 1)
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/schedstat", pid, e->d_name);
        if (read_small(path, buf, sizeof buf) || sscanf(buf, "%llu", &ns) != 1)
            continue;
        if ((flags & PF_KTHREAD) || ((flags & PF_USER_WORKER) && !(flags & PF_IO_WORKER)))
            out.kernel += ns;
        else if (is_vcpu_name(comm))
            out.vcpu += ns;
        else
            out.dev += ns;
    }
    closedir(d);
    return out;
}

// ---- connections ----

static int set_timeout(int fd, double secs)
{
    struct timeval tv = {(time_t)secs, (suseconds_t)((secs - (time_t)secs) * 1e6)};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv))
        return fail("setsockopt timeout: %s", strerror(errno));
    return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fail("write: %s", w < 0 ? strerror(errno) : "wrote nothing");
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_exact(int fd, void *p, size_t n)
{
    char *c = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, c + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return fail("read: %s", strerror(errno));
        if (r == 0)
            return fail("connection closed after %zu of %zu bytes", got, n);
        got += (size_t)r;
    }
    return 0;
}

// A connected, handshaken stream to the guest's `port` (blocking, with `timeout`), or -1.
static int vconnect(const char *uds, int port, double timeout)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(uds) >= sizeof a.sun_path)
        return fail("uds path too long");
    strcpy(a.sun_path, uds);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail("socket: %s", strerror(errno));
    if (set_timeout(fd, timeout) || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (!err_msg[0])
            fail("connect %s: %s", uds, strerror(errno));
        close(fd);
        return -1;
    }
    char line[64];
    int n = snprintf(line, sizeof line, "CONNECT %d\n", port);
    if (write_all(fd, line, (size_t)n)) {
        close(fd);
        return -1;
    }
    // Byte by byte up to the newline: nothing of the stream may be read with the line.
    size_t len = 0;
    while (len < sizeof line - 1) {
        ssize_t r = read(fd, line + len, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (line[len++] == '\n')
            break;
    }
    line[len] = 0;
    if (len < 3 || strncmp(line, "OK ", 3) != 0 || line[len - 1] != '\n') {
        line[strcspn(line, "\n")] = 0;
        close(fd);
        return fail("CONNECT %d answered '%s'", port, line);
    }
    int big = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    return fd;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        p[i] = (unsigned char)(rng >> 24);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int rtt(const char *uds, int port, long rounds, double timeout, double *mean, double *p99)
{
    int fd = vconnect(uds, port, timeout);
    if (fd < 0)
        return -1;
    unsigned char msg[64], back[64];
    fill_random(msg, sizeof msg);
    uint64_t *samples = calloc((size_t)rounds, sizeof *samples);
    if (!samples) {
        close(fd);
        return fail("out of memory");
    }
    int rc = 0;
    for (long i = -100; i < rounds && !rc; i++) { // 100 warm-up round trips, not counted
        uint64_t t0 = now_ns();
        rc = write_all(fd, msg, sizeof msg) || read_exact(fd, back, sizeof back);
        uint64_t t = now_ns() - t0;
        if (!rc && memcmp(back, msg, sizeof msg))
            rc = fail("rtt: echo mismatch");
        if (!rc && i >= 0)
            samples[i] = t;
    }
    close(fd);
    if (!rc) {
        uint64_t sum = 0;
        for (long i = 0; i < rounds; i++)
            sum += samples[i];
        qsort(samples, (size_t)rounds, sizeof *samples, cmp_u64);
        long k = rounds * 99 / 100;
        *mean = (double)sum / (double)rounds / 1000.0;
        *p99 = (double)samples[k < rounds ? k : rounds - 1] / 1000.0;
    }
    free(samples);
    return rc ? -1 : 0;
}

struct conn {
    int fd;
    unsigned char *data; // what this connection writes, and must read back
    size_t len, wrote, got;
};

static int bulk(const char *uds, int port, int nconns, size_t total, int pid, double timeout,
                double *mbps, double *dev_ms, double *vcpu_ms)
{
    size_t share = total / (size_t)nconns;
    struct conn c[MAX_CONNS];
    int ep = -1, rc = -1, n = 0;
    unsigned char *scratch = malloc(CHUNK);
    if (!scratch)
        return fail("out of memory");
    for (; n < nconns; n++) {
        c[n].fd = -1;
        c[n].data = malloc(share);
        c[n].len = share;
        c[n].wrote = c[n].got = 0;
        if (!c[n].data) {
            fail("out of memory");
            n++;
            goto out;
        }
        fill_random(c[n].data, share);
        c[n].fd = vconnect(uds, port, timeout);
        if (c[n].fd < 0) {
            n++;
            goto out;
        }
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) {
        fail("epoll_create1: %s", strerror(errno));
        goto out;
    }
    for (int i = 0; i < n; i++) {
        int fl = fcntl(c[i].fd, F_GETFL);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = (uint32_t)i};
        if (fl < 0 || fcntl(c[i].fd, F_SETFL, fl | O_NONBLOCK) ||
            epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev)) {
            fail("epoll set-up: %s", strerror(errno));
            goto out;
        }
    }
    struct cpu c0 = cpu_now(pid);
    uint64_t t0 = now_ns();
    int left = n;
    while (left) {
        struct epoll_event evs[MAX_CONNS];
        int k = epoll_wait(ep, evs, MAX_CONNS, (int)(timeout * 1000));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            fail("epoll_wait: %s", strerror(errno));
            goto out;
        }
        if (k == 0) {
            fail("bulk: no progress for %.0f s", timeout);
            goto out;
        }
        for (int j = 0; j < k; j++) {
            struct conn *x = &c[evs[j].data.u32];
            if ((evs[j].events & (EPOLLOUT | EPOLLERR)) && x->wrote < x->len) {
                size_t want = x->len - x->wrote;
                ssize_t w = write(x->fd, x->data + x->wrote, want < CHUNK ? want : CHUNK);
                if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    fail("bulk: write: %s", strerror(errno));
                    goto out;
                }
                if (w > 0)
                    x->wrote += (size_t)w;
                if (x->wrote == x->len) { // all written: wait for reads only
                    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = evs[j].data.u32};
                    if (epoll_ctl(ep, EPOLL_CTL_MOD, x->fd, &ev)) {
                        fail("epoll_ctl: %s", strerror(errno));
                        goto out;
                    }
                }
            }
            if ((evs[j].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && x->got < x->len) {
                size_t want = x->len - x->got;
                ssize_t r = read(x->fd, scratch, want < CHUNK ? want : CHUNK);
                if (r < 0 && errno != EAGAIN && errno != EINTR) {
                    fail("bulk: read: %s", strerror(errno));
                    goto out;
                }
                if (r == 0) {
                    fail("bulk: connection closed after %zu of %zu bytes", x->got, x->len);
                    goto out;
                }
                if (r > 0) {
                    if (memcmp(scratch, x->data + x->got, (size_t)r)) {
                        fail("bulk: echo mismatch");
                        goto out;
                    }
                    x->got += (size_t)r;
                    if (x->got == x->len) {
                        epoll_ctl(ep, EPOLL_CTL_DEL, x->fd, NULL);
                        left--;
                    }
                }
            }
        }
    }
    uint64_t secs_ns = now_ns() - t0;
    struct cpu c1 = cpu_now(pid);
    double mb = (double)share * nconns / 1e6;
    *mbps = mb / ((double)secs_ns / 1e9);
    *dev_ms = (double)(c1.dev - c0.dev) / 1e6 / mb;
    *vcpu_ms = (double)(c1.vcpu - c0.vcpu) / 1e6 / mb;
    rc = 0;
out:
    for (int i = 0; i < n; i++) {
        if (c[i].fd >= 0)
            close(c[i].fd);
        free(c[i].data);
    }
    if (ep >= 0)
        close(ep);
    free(scratch);
    return rc;
}

static void json_error(const char *done)
{
    printf("{%s\"error\": \"", done);
    for (const char *p = err_msg; *p; p++) {
        if (*p == '"' || *p == '\\')
            putchar('\\');
        putchar((unsigned char)*p < 0x20 ? '?' : *p);
    }
    printf("\"}\n");
}

int main(int argc, char **argv)
{
    const char *uds = NULL;
    int port = 1024, pid = -1;
    long rounds = 10000;
    size_t total = 64 << 20;
    double timeout = 30.0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "vsock-bench: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--uds"))
            uds = v;
        else if (!strcmp(argv[i], "--port"))
            port = atoi(v);
        else if (!strcmp(argv[i], "--pid"))
            pid = atoi(v);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atol(v);
        else if (!strcmp(argv[i], "--total"))
            total = (size_t)strtoull(v, NULL, 10);
        else if (!strcmp(argv[i], "--timeout"))
            timeout = atof(v);
        else {
            fprintf(stderr, "vsock-bench: unknown argument %s\n", argv[i]);
            return 2;
        }
        i++;
    }
    if (!uds || pid <= 0 || rounds < 1 || rounds > 10000000 || total < 8 * MAX_CONNS ||
        timeout <= 0) {
        fprintf(stderr, "usage: vsock-bench --uds PATH --pid PID [--port N] [--rounds N] "
                        "[--total BYTES] [--timeout SECONDS]\n");
        return 2;
    }
    double mean = 0, p99 = 0, mbps[2] = {0, 0}, dev[2] = {0, 0}, vcpu[2] = {0, 0};
    char done[512] = "";
    if (rtt(uds, port, rounds, timeout, &mean, &p99)) {
        json_error(done);
        return 1;
    }
    snprintf(done, sizeof done, "\"rtt_mean_us\": %.3f, \"rtt_p99_us\": %.3f, ", mean, p99);
    const int ns[2] = {1, MAX_CONNS};
    for (int i = 0; i < 2; i++) {
        if (bulk(uds, port, ns[i], total, pid, timeout, &mbps[i], &dev[i], &vcpu[i])) {
            json_error(done);
            return 1;
        }
        size_t l = strlen(done);
        snprintf(done + l, sizeof done - l,
                 "\"bulk%d_MBps\": %.3f, \"bulk%d_vmm_ms_per_MB\": %.3f, "
                 "\"bulk%d_vcpu_ms_per_MB\": %.3f, ",
                 ns[i], mbps[i], ns[i], dev[i], ns[i], vcpu[i]);
    }
    done[strlen(done) - 2] = 0; // the last ", "
    printf("{%s}\n", done);
    return 0;
}
