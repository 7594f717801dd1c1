/*
 * net.c - mode=net-echo: a virtio-net driver and an echo responder.
 *
 * Owns: probing the first virtio-net-pci device (modern id 0x1041),
 * negotiating VERSION_1 (+ MAC; no offloads, no MRG_RXBUF, so every frame
 * fits one 2 KiB buffer and carries its 12-byte header), setting up rx (0)
 * and tx (1) in ring 0 over the mode=blk memory (blkmem: rings[0..1], the
 * data pool for buffers), then a ring-3 loop, for as long as the VM runs,
 * that answers ARP requests for ip=A.B.C.D, ICMP echo requests to it and
 * UDP datagrams to its port 7 with the same payload. Polled, no interrupts.
 * net_start()/net_step() give mode=agent the same device and one round at a time.
 */
#include "blk.h"
#include "hw.h"

#define NET_QSIZE   256
#define NET_BUF     2048
#define VNET_HDR    12
#define VIRTIO_NET_F_MAC 5

struct net_state {
    struct vq rx, tx;
    u8 mac[6];
    u8 ip[4];
    u8 *rxbuf, *txbuf;      /* NET_QSIZE buffers each */
    u16 tx_next;            /* next tx slot (descriptor = slot) */
    u16 tx_free;            /* tx slots free */
    u64 rx_frames, tx_frames;
};

static struct net_state net;

static u16 ld16(const u8 *p) { return (u16)(p[0] << 8 | p[1]); }
static void st16(u8 *p, u16 v) { p[0] = (u8)(v >> 8); p[1] = (u8)v; }
static void cpy(u8 *d, const u8 *s, u32 n) { for (u32 i = 0; i < n; i++) d[i] = s[i]; }
static int eq(const u8 *a, const u8 *b, u32 n)
{
    for (u32 i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* The Internet checksum of n bytes, folded. */
static u16 csum(const u8 *p, u32 n)
{
    u32 s = 0;
    for (u32 i = 0; i + 1 < n; i += 2)
        s += ld16(p + i);
    if (n & 1)
        s += (u32)p[n - 1] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (u16)~s;
}

static void rx_post(u16 slot)
{
    net.rx.desc[slot].addr = (u64)(net.rxbuf + (u64)slot * NET_BUF);
    net.rx.desc[slot].len = NET_BUF;
    net.rx.desc[slot].flags = VRING_DESC_F_WRITE;
    net.rx.desc[slot].next = 0;
    vq_push(&net.rx, slot);
}

/* Reclaims sent tx slots. */
static void tx_reap(void)
{
    u32 id, len;
    while (vq_pop_used(&net.tx, &id, &len))
        net.tx_free++;
}

/* Sends `len` bytes of frame (after the header) from `f`. Drops it when the ring is full. */
static void tx_send(const u8 *f, u32 len)
{
    tx_reap();
    if (!net.tx_free || len + VNET_HDR > NET_BUF)
        return;
    u16 slot = net.tx_next;
    net.tx_next = (u16)((slot + 1) & (NET_QSIZE - 1));
    net.tx_free--;
    u8 *b = net.txbuf + (u64)slot * NET_BUF;
    for (u32 i = 0; i < VNET_HDR; i++)
        b[i] = 0;
    cpy(b + VNET_HDR, f, len);
    net.tx.desc[slot].addr = (u64)b;
    net.tx.desc[slot].len = VNET_HDR + len;
    net.tx.desc[slot].flags = 0;
    net.tx.desc[slot].next = 0;
    vq_push(&net.tx, slot);
    vq_kick(&net.tx);
    net.tx_frames++;
}

/* Answers one received Ethernet frame `f` of `len` bytes, in place (f is the rx buffer). */
static void answer(u8 *f, u32 len)
{
    if (len < 14)
        return;
    u16 type = ld16(f + 12);
    u8 *p = f + 14;
    u32 plen = len - 14;
    if (type == 0x0806 && plen >= 28) {                 /* ARP */
        if (ld16(p) != 1 || ld16(p + 2) != 0x0800 || ld16(p + 6) != 1 || !eq(p + 24, net.ip, 4))
            return;
        st16(p + 6, 2);                                 /* reply */
        cpy(p + 18, p + 8, 10);                         /* target = sender (mac, ip) */
        cpy(p + 8, net.mac, 6);
        cpy(p + 14, net.ip, 4);
        cpy(f, p + 18, 6);
        cpy(f + 6, net.mac, 6);
        tx_send(f, 42);
        return;
    }
    if (type != 0x0800 || plen < 20 || (p[0] >> 4) != 4)
        return;
    u32 ihl = (u32)(p[0] & 15) * 4;
    u32 total = ld16(p + 2);
    if (ihl < 20 || total < ihl || total > plen || !eq(p + 16, net.ip, 4))
        return;
    if ((ld16(p + 6) & 0x3fff) != 0)
        return;                                         /* fragments: not answered */
    u8 *l4 = p + ihl;
    u32 l4len = total - ihl;
    if (p[9] == 1 && l4len >= 8 && l4[0] == 8) {        /* ICMP echo request */
        l4[0] = 0;
        st16(l4 + 2, 0);
        st16(l4 + 2, csum(l4, l4len));
    } else if (p[9] == 17 && l4len >= 8 && ld16(l4 + 2) == 7) {    /* UDP echo */
        u16 sp = ld16(l4);
        st16(l4, 7);
        st16(l4 + 2, sp);                               /* the checksum stays valid */
    } else {
        return;
    }
    u8 t[4];
    cpy(t, p + 12, 4);
    cpy(p + 12, p + 16, 4);
    cpy(p + 16, t, 4);
    p[8] = 64;                                          /* TTL; header checksum redone */
    st16(p + 10, 0);
    st16(p + 10, csum(p, ihl));
    cpy(f, f + 6, 6);
    cpy(f + 6, net.mac, 6);
    tx_send(f, 14 + total);
}

/* Ring 3: one round of rx -> answer -> tx, rx buffers reposted in a batch; 1 if frames came. */
int net_step(void)
{
    u32 id, len;
    int got = 0;
    while (vq_pop_used(&net.rx, &id, &len)) {
        if (id < NET_QSIZE && len > VNET_HDR && len <= NET_BUF) {
            u8 *b = net.rxbuf + (u64)id * NET_BUF;
            answer(b + VNET_HDR, len - VNET_HDR);
            net.rx_frames++;
        }
        if (id < NET_QSIZE)
            rx_post((u16)id);
        got = 1;
    }
    if (got)
        vq_kick(&net.rx);
    else
        tx_reap();
    return got;
}

/* Ring 3, for as long as the VM runs. */
static long net_echo_job(void *arg)
{
    (void)arg;
    for (;;)
        net_step();
    return 0;
}

static long net_zero_job(void *arg)
{
    (void)arg;
    memset(blkmem.rings[0], 0, BLK_RING_BYTES);
    memset(blkmem.rings[1], 0, BLK_RING_BYTES);
    return 0;
}

/* Parses A.B.C.D. */
static int parse_ip(const char *v, size_t n, u8 ip[4])
{
    u32 part = 0, dots = 0, digits = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || v[i] == '.') {
            if (!digits || part > 255 || dots > 3)
                return -1;
            ip[dots++] = (u8)part;
            part = digits = 0;
        } else if (v[i] >= '0' && v[i] <= '9' && digits < 3) {
            part = part * 10 + (u32)(v[i] - '0');
            digits++;
        } else {
            return -1;
        }
    }
    return dots == 4 ? 0 : -1;
}

static NORETURN void net_fail(const char *why)
{
    puts_serial("osprey-test-guest: error: net-echo: ");
    puts_serial(why);
    puts_serial("\n");
    guest_exit(1);
}

int net_start(const char *cmdline, size_t len)
{
    size_t at = 0;
    const char *t;
    size_t n;
    int have_ip = 0;
    while ((n = cmdline_token(cmdline, len, &at, &t))) {
        size_t k = prefix_len(t, n, "ip=");
        if (k) {
            if (parse_ip(t + k, n - k, net.ip))
                net_fail("ip= is not A.B.C.D");
            have_ip = 1;
        }
    }
    if (!have_ip)
        return 0;
    struct vpci vp;
    if (vp_probe(&vp, 0x1041, 0))
        net_fail("no virtio-net-pci device");
    if (vp_reset(&vp))
        net_fail("reset timed out");
    vp_set_status(&vp, VIRTIO_STATUS_ACK);
    vp_set_status(&vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER);
    u64 offered = vp_device_features(&vp);
    if (!(offered & (1ull << VIRTIO_F_VERSION_1)))
        net_fail("VERSION_1 not offered");
    u64 want = (1ull << VIRTIO_F_VERSION_1) | (offered & (1ull << VIRTIO_NET_F_MAC));
    vp_driver_features(&vp, want);
    vp_set_status(&vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK);
    if (!(vp_status(&vp) & VIRTIO_STATUS_FEATURES_OK))
        net_fail("FEATURES_OK did not stick");
    if (want & (1ull << VIRTIO_NET_F_MAC)) {
        for (u32 i = 0; i < 6; i++)
            net.mac[i] = vp_cfg8(&vp, i);
    } else {
        static const u8 dflt[6] = { 0x06, 0x00, 0x0a, 0x00, 0x00, 0x02 };
        cpy(net.mac, dflt, 6);
    }
    u16 qs = NET_QSIZE;
    if (vp_queue_max(&vp, 0) < qs || vp_queue_max(&vp, 1) < qs)
        net_fail("queues smaller than 256");
    run_in_user(net_zero_job, NULL);
    net.rx.event_idx = net.tx.event_idx = 0;
    net.rx.want_irq = net.tx.want_irq = 0;
    vq_layout(&net.rx, blkmem.rings[0], 0, qs);
    vq_layout(&net.tx, blkmem.rings[1], 1, qs);
    net.rxbuf = blkmem.data;
    net.txbuf = blkmem.data + (u64)NET_QSIZE * NET_BUF;
    if (vp_queue_setup(&vp, &net.rx, 0, qs, VIRTIO_NO_VECTOR) ||
        vp_queue_setup(&vp, &net.tx, 1, qs, VIRTIO_NO_VECTOR))
        net_fail("queue set-up failed");
    net.tx_next = 0;
    net.tx_free = qs;
    for (u16 i = 0; i < qs; i++)
        rx_post(i);
    vp_set_status(&vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER |
                  VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DRIVER_OK);
    vq_kick(&net.rx);
    puts_serial("osprey-test-guest: net-echo ready mac=");
    for (u32 i = 0; i < 6; i++) {
        static const char hex[] = "0123456789abcdef";
        if (i)
            putc_serial(':');
        putc_serial(hex[net.mac[i] >> 4]);
        putc_serial(hex[net.mac[i] & 15]);
    }
    puts_serial("\n");
    return 1;
}

NORETURN void net_main(const char *cmdline, size_t len)
{
    if (!net_start(cmdline, len))
        net_fail("ip=A.B.C.D is required");
    run_in_user(net_echo_job, NULL);
    net_fail("the echo loop returned");
}
