// net-tap-echo: the floor of scripts/net-side-by-side.sh (row `tap-echo`): a host process that
// answers ARP and ICMP echo on a tap for one IPv4 address, the way the test guest's
// `mode=net-echo` does, with no VM and no virtqueue in between.
//
// One thread (`tap-echo`) sleeps in a blocking read(2) of the tap, builds the reply in the same
// buffer and writes it back: the least a VMM's device thread that sleeps between frames can do
// per echo (a wake-up, a read, a write). With --spinner, a second thread named `vcpu0` spins on
// the CPU without sleeping, as the test guest's polling vCPU does under every VMM, so the host's
// two CPUs are as crowded as in the VMM rows; scripts/lib/vmm_cpu.py counts it as a vCPU and
// the echo thread as the device.
//
// Usage: net-tap-echo --tap NAME --ip A.B.C.D --mac XX:XX:XX:XX:XX:XX [--spinner]
// Prints `net-echo ready` once the tap is attached; runs until killed.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>

static uint8_t my_mac[6];
static uint32_t my_ip; // network order

static void *spin(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "vcpu0");
    for (volatile uint64_t n = 0;; n++)
        __asm__ volatile("pause");
    return NULL;
}

// The one's-complement sum of `len` bytes at `p`, folded, not inverted.
static uint16_t csum(const uint8_t *p, size_t len)
{
    uint32_t s = 0;
    for (size_t i = 0; i + 1 < len; i += 2)
        s += (uint32_t)(p[i] << 8 | p[i + 1]);
    if (len & 1)
        s += (uint32_t)(p[len - 1] << 8);
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)s;
}

// Turns the frame in `f` (length `n`) into its reply in place; the reply's length, or 0 for a
// frame this address does not answer.
static size_t answer(uint8_t *f, size_t n)
{
    if (n < 14)
        return 0;
    uint16_t type = (uint16_t)(f[12] << 8 | f[13]);
    if (type == 0x0806 && n >= 42) { // ARP request for my_ip
        uint8_t *a = f + 14;
        if (a[7] != 1 || memcmp(a + 24, &my_ip, 4))
            return 0;
        memcpy(f, f + 6, 6);
        memcpy(f + 6, my_mac, 6);
        a[7] = 2;
        memcpy(a + 18, a + 8, 10); // target := sender (MAC and IP)
        memcpy(a + 8, my_mac, 6);
        memcpy(a + 14, &my_ip, 4);
        return 42;
    }
    if (type != 0x0800 || n < 14 + 20 + 8)
        return 0;
    uint8_t *ip = f + 14;
    size_t ihl = (size_t)(ip[0] & 15) * 4;
    size_t total = (size_t)(ip[2] << 8 | ip[3]);
    if (ihl < 20 || total < ihl + 8 || 14 + total > n || ip[9] != 1 || memcmp(ip + 16, &my_ip, 4))
        return 0;
    uint8_t *icmp = ip + ihl;
    if (icmp[0] != 8)
        return 0;
    memcpy(f, f + 6, 6);
    memcpy(f + 6, my_mac, 6);
    memcpy(ip + 16, ip + 12, 4);
    memcpy(ip + 12, &my_ip, 4); // the IP header's sum is unchanged: the same words, swapped
    icmp[0] = 0;
    icmp[2] = icmp[3] = 0;
    uint16_t c = (uint16_t)~csum(icmp, total - ihl);
    icmp[2] = (uint8_t)(c >> 8);
    icmp[3] = (uint8_t)c;
    return 14 + total;
}

int main(int argc, char **argv)
{
    const char *tap = NULL, *ip = NULL, *mac = NULL;
    int spinner = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--spinner"))
            spinner = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--tap"))
            tap = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--ip"))
            ip = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--mac"))
            mac = argv[++i];
        else {
            fprintf(stderr, "net-tap-echo: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    unsigned m[6];
    if (!tap || !ip || !mac || inet_pton(AF_INET, ip, &my_ip) != 1 ||
        sscanf(mac, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6 ||
        strlen(tap) >= IFNAMSIZ) {
        fprintf(stderr, "usage: net-tap-echo --tap NAME --ip A.B.C.D --mac XX:..:XX [--spinner]\n");
        return 2;
    }
    for (int i = 0; i < 6; i++)
        my_mac[i] = (uint8_t)m[i];
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    struct ifreq ifr = {0};
    strcpy(ifr.ifr_name, tap);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr)) {
        fprintf(stderr, "net-tap-echo: attach to %s: %s\n", tap, strerror(errno));
        return 1;
    }
    pthread_t t;
    if (spinner && pthread_create(&t, NULL, spin, NULL)) {
        fprintf(stderr, "net-tap-echo: spinner thread: %s\n", strerror(errno));
        return 1;
    }
    prctl(PR_SET_NAME, "tap-echo");
    printf("net-echo ready\n");
    fflush(stdout);
    static uint8_t f[65536];
    for (;;) {
        ssize_t n = read(fd, f, sizeof f);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, "net-tap-echo: read: %s\n", strerror(errno));
            return 1;
        }
        size_t r = answer(f, (size_t)n);
        if (r && write(fd, f, r) < 0 && errno != EAGAIN && errno != EIO) {
            fprintf(stderr, "net-tap-echo: write: %s\n", strerror(errno));
            return 1;
        }
    }
}
