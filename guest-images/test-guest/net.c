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
 *
 * hostile=1: for one second before the ready line, pair 0's tx ring carries nothing but
 * chains that are not frames (a device-writable buffer, one outside guest memory, one longer
 * than any frame), posted as fast as the device hands them back, between the lines
 * `osprey-test-guest: net hostile start` and `... net hostile sent=N returned=M`.
 *
 * Multi-queue: with pairs=N (1..3) on the command line and VIRTIO_NET_F_MQ and
 * CTRL_VQ offered, it negotiates both, sets up every pair the device has
 * (max_virtqueue_pairs, at most 3: rx 2k and tx 2k+1 in rings[2k], [2k+1],
 * the control queue 2*max in rings[2*max]), sends VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET
 * with min(N, max) and serves every enabled pair, each answer leaving on the
 * pair its request came in on. Each pair's first frame comes back to ring 0 once
 * to print `osprey-test-guest: net-echo pair K carried frames`.
 */
#include "blk.h"
#include "hw.h"

#define NET_QSIZE   256
#define NET_BUF     2048
#define VNET_HDR    12
#define VIRTIO_NET_F_MAC 5
#define VIRTIO_NET_F_CTRL_VQ 17
#define VIRTIO_NET_F_MQ 22
#define NET_MAX_PAIRS 3     /* 2*3+1 rings of blkmem.rings */

struct net_pair {
    struct vq rx, tx;
    u8 *rxbuf, *txbuf;      /* NET_QSIZE buffers each */
    u16 tx_next;            /* next tx slot (descriptor = slot) */
    u16 tx_free;            /* tx slots free */
    u64 rx_frames, tx_frames;
};

struct net_state {
    struct net_pair pair[NET_MAX_PAIRS];
    u32 pairs;              /* enabled pairs */
    u32 reported;           /* bit k: pair k's first frame was printed */
    u8 mac[6];
    u8 ip[4];
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

static void rx_post(struct net_pair *q, u16 slot)
{
    q->rx.desc[slot].addr = (u64)(q->rxbuf + (u64)slot * NET_BUF);
    q->rx.desc[slot].len = NET_BUF;
    q->rx.desc[slot].flags = VRING_DESC_F_WRITE;
    q->rx.desc[slot].next = 0;
    vq_push(&q->rx, slot);
}

/* Reclaims sent tx slots. */
static void tx_reap(struct net_pair *q)
{
    u32 id, len;
    while (vq_pop_used(&q->tx, &id, &len))
        q->tx_free++;
}

/* Sends `len` bytes of frame (after the header) from `f` on pair `q`. Drops it when the ring
 * is full. */
static void tx_send(struct net_pair *q, const u8 *f, u32 len)
{
    tx_reap(q);
    if (!q->tx_free || len + VNET_HDR > NET_BUF)
        return;
    u16 slot = q->tx_next;
    q->tx_next = (u16)((slot + 1) & (NET_QSIZE - 1));
    q->tx_free--;
    u8 *b = q->txbuf + (u64)slot * NET_BUF;
    for (u32 i = 0; i < VNET_HDR; i++)
        b[i] = 0;
    cpy(b + VNET_HDR, f, len);
    q->tx.desc[slot].addr = (u64)b;
    q->tx.desc[slot].len = VNET_HDR + len;
    q->tx.desc[slot].flags = 0;
    q->tx.desc[slot].next = 0;
    vq_push(&q->tx, slot);
    vq_kick(&q->tx);
    q->tx_frames++;
}

/* Answers one frame `f` of `len` bytes received on pair `q`, in place (f is the rx buffer). */
static void answer(struct net_pair *q, u8 *f, u32 len)
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
        tx_send(q, f, 42);
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
    tx_send(q, f, 14 + total);
}

/* Ring 3: one round of rx -> answer -> tx on pair `q`, rx buffers reposted in a batch. */
static int pair_step(struct net_pair *q)
{
    u32 id, len;
    int got = 0;
    while (vq_pop_used(&q->rx, &id, &len)) {
        if (id < NET_QSIZE && len > VNET_HDR && len <= NET_BUF) {
            u8 *b = q->rxbuf + (u64)id * NET_BUF;
            answer(q, b + VNET_HDR, len - VNET_HDR);
            q->rx_frames++;
        }
        if (id < NET_QSIZE)
            rx_post(q, (u16)id);
        got = 1;
    }
    if (got)
        vq_kick(&q->rx);
    else
        tx_reap(q);
    return got;
}

/* Ring 3: one round on every enabled pair; 1 if frames came. */
int net_step(void)
{
    int got = 0;
    for (u32 k = 0; k < net.pairs; k++)
        got |= pair_step(&net.pair[k]);
    return got;
}

/* The pairs that carried frames and were not yet printed. */
static u32 net_unreported(void)
{
    u32 fresh = 0;
    for (u32 k = 0; k < net.pairs; k++)
        if (net.pair[k].rx_frames && !(net.reported & (1u << k)))
            fresh |= 1u << k;
    return fresh;
}

/* Ring 3, for as long as the VM runs; back to ring 0 when a pair carries its first frame
 * (with several pairs: at most once per pair). */
static long net_echo_job(void *arg)
{
    (void)arg;
    for (;;) {
        net_step();
        if (net.pairs > 1 && net_unreported())
            return 1;
    }
    return 0;
}

#define NET_HOSTILE_MS 1000
#define NET_TSC_KHZ_FALLBACK 2000000

static struct {
    u64 khz, sent, returned;
} hostile;

/* Ring 3: the hostile=1 flood on pair `arg`'s tx ring, then up to 300 ms for the device to
 * hand back what it holds (a device that rations such chains returns them period by period). */
static long net_hostile_job(void *arg)
{
    struct net_pair *q = arg;
    u64 t0 = rdtsc(), limit = NET_HOSTILE_MS * hostile.khz;
    u32 kind = 0, id, len;
    while (rdtsc() - t0 < limit) {
        while (vq_pop_used(&q->tx, &id, &len)) {
            q->tx_free++;
            hostile.returned++;
        }
        if (!q->tx_free) {
            cpu_relax();
            continue;
        }
        u16 slot = q->tx_next;
        q->tx_next = (u16)((slot + 1) & (NET_QSIZE - 1));
        q->tx_free--;
        u64 addr = (u64)(q->txbuf + (u64)slot * NET_BUF);
        u32 dlen = NET_BUF;
        u16 flags = 0;
        switch (kind++ % 3) {
        case 0: flags = VRING_DESC_F_WRITE; break;  /* not device-readable */
        case 1: addr = 1ull << 46; break;           /* outside guest memory */
        default: dlen = 70000; break;               /* longer than any frame */
        }
        q->tx.desc[slot].addr = addr;
        q->tx.desc[slot].len = dlen;
        q->tx.desc[slot].flags = flags;
        q->tx.desc[slot].next = 0;
        vq_push(&q->tx, slot);
        vq_kick(&q->tx);
        hostile.sent++;
    }
    t0 = rdtsc();
    while (q->tx_free < NET_QSIZE && rdtsc() - t0 < 300 * hostile.khz) {
        while (vq_pop_used(&q->tx, &id, &len)) {
            q->tx_free++;
            hostile.returned++;
        }
        vq_kick(&q->tx);
        cpu_relax();
    }
    return 0;
}

static u32 zero_rings;

static long net_zero_job(void *arg)
{
    (void)arg;
    for (u32 i = 0; i < zero_rings && i < BLK_MAX_QUEUES; i++)
        memset(blkmem.rings[i], 0, BLK_RING_BYTES);
    return 0;
}

/* Ring 0: VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET(n) on the control queue; the ack byte, or -1 when
 * the device did not answer. */
static int net_pairs_set(struct vq *ctrl, u16 n)
{
    u8 *cmd = blkmem.misc;
    u8 *ack = blkmem.misc + 64;
    cmd[0] = 4;                 /* VIRTIO_NET_CTRL_MQ */
    cmd[1] = 0;                 /* VQ_PAIRS_SET */
    cmd[2] = (u8)n;
    cmd[3] = (u8)(n >> 8);
    *ack = 0xff;
    ctrl->desc[0].addr = (u64)cmd;
    ctrl->desc[0].len = 4;
    ctrl->desc[0].flags = VRING_DESC_F_NEXT;
    ctrl->desc[0].next = 1;
    ctrl->desc[1].addr = (u64)ack;
    ctrl->desc[1].len = 1;
    ctrl->desc[1].flags = VRING_DESC_F_WRITE;
    ctrl->desc[1].next = 0;
    vq_push(ctrl, 0);
    vq_kick(ctrl);
    u32 id, len;
    for (u64 i = 0; i < 2000000000ull; i++) {
        if (vq_pop_used(ctrl, &id, &len))
            return *(volatile u8 *)ack;
        cpu_relax();
    }
    return -1;
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
    u32 want_pairs = 1;
    int flood = 0;
    while ((n = cmdline_token(cmdline, len, &at, &t))) {
        if (n == 9 && prefix_len(t, n, "hostile=1"))
            flood = 1;
        size_t k = prefix_len(t, n, "ip=");
        if (k) {
            if (parse_ip(t + k, n - k, net.ip))
                net_fail("ip= is not A.B.C.D");
            have_ip = 1;
        }
        k = prefix_len(t, n, "pairs=");
        if (k) {
            if (n - k != 1 || t[k] < '1' || t[k] > '0' + NET_MAX_PAIRS)
                net_fail("pairs= is not 1, 2 or 3");
            want_pairs = (u32)(t[k] - '0');
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
    u64 mq = (1ull << VIRTIO_NET_F_MQ) | (1ull << VIRTIO_NET_F_CTRL_VQ);
    if (want_pairs > 1 && (offered & mq) == mq)
        want |= mq;
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
    /* Every pair the device has is set up (at most NET_MAX_PAIRS); `pairs` are enabled. */
    u32 max_pairs = 1;
    if (want & mq) {
        max_pairs = (u32)vp_cfg8(&vp, 8) | (u32)vp_cfg8(&vp, 9) << 8;
        if (max_pairs < 2 || max_pairs > NET_MAX_PAIRS)
            net_fail("max_virtqueue_pairs is not 2 or 3");
    }
    u16 qs = NET_QSIZE;
    for (u16 i = 0; i < 2 * max_pairs; i++)
        if (vp_queue_max(&vp, i) < qs)
            net_fail("queues smaller than 256");
    zero_rings = 2 * max_pairs + (max_pairs > 1);
    run_in_user(net_zero_job, NULL);
    for (u32 k = 0; k < max_pairs; k++) {
        struct net_pair *q = &net.pair[k];
        u16 r = (u16)(2 * k), w = (u16)(2 * k + 1);
        q->rx.event_idx = q->tx.event_idx = 0;
        q->rx.want_irq = q->tx.want_irq = 0;
        vq_layout(&q->rx, blkmem.rings[r], r, qs);
        vq_layout(&q->tx, blkmem.rings[w], w, qs);
        q->rxbuf = blkmem.data + (u64)k * 2 * NET_QSIZE * NET_BUF;
        q->txbuf = q->rxbuf + (u64)NET_QSIZE * NET_BUF;
        if (vp_queue_setup(&vp, &q->rx, r, qs, VIRTIO_NO_VECTOR) ||
            vp_queue_setup(&vp, &q->tx, w, qs, VIRTIO_NO_VECTOR))
            net_fail("queue set-up failed");
        q->tx_next = 0;
        q->tx_free = qs;
        q->rx_frames = q->tx_frames = 0;
        for (u16 i = 0; i < qs; i++)
            rx_post(q, i);
    }
    static struct vq ctrl;
    if (max_pairs > 1) {
        u16 c = (u16)(2 * max_pairs);
        ctrl.event_idx = 0;
        ctrl.want_irq = 0;
        vq_layout(&ctrl, blkmem.rings[c], c, 16);
        if (vp_queue_setup(&vp, &ctrl, c, 16, VIRTIO_NO_VECTOR))
            net_fail("control queue set-up failed");
    }
    net.pairs = 1;
    net.reported = 0;
    vp_set_status(&vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER |
                  VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DRIVER_OK);
    if (max_pairs > 1) {
        u32 n = want_pairs < max_pairs ? want_pairs : max_pairs;
        if (net_pairs_set(&ctrl, (u16)n) != 0)
            net_fail("VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET refused");
        net.pairs = n;
    }
    for (u32 k = 0; k < max_pairs; k++)
        vq_kick(&net.pair[k].rx);
    if (flood) {
        u64 khz = kvmclock_tsc_khz();
        hostile.khz = (khz >= TSC_KHZ_MIN && khz <= TSC_KHZ_MAX) ? khz : NET_TSC_KHZ_FALLBACK;
        puts_serial("osprey-test-guest: net hostile start\n");
        run_in_user(net_hostile_job, &net.pair[0]);
        puts_serial("osprey-test-guest: net hostile sent=");
        put_u64(hostile.sent);
        puts_serial(" returned=");
        put_u64(hostile.returned);
        puts_serial("\n");
    }
    if (net.pairs > 1) {
        puts_serial("osprey-test-guest: net-echo pairs=");
        putc_serial((char)('0' + net.pairs));
        puts_serial("\n");
    }
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
    for (;;) {
        if (!run_in_user(net_echo_job, NULL))
            break;
        u32 fresh = net_unreported();
        for (u32 k = 0; k < net.pairs; k++) {
            if (!(fresh & (1u << k)))
                continue;
            net.reported |= 1u << k;
            puts_serial("osprey-test-guest: net-echo pair ");
            putc_serial((char)('0' + k));
            puts_serial(" carried frames\n");
        }
    }
    net_fail("the echo loop returned");
}
