/*
 * vsock.c - mode=vsock-echo: a virtio-vsock driver that accepts every connection to one port
 * and echoes each byte back.
 *
 * Owns: the device set-up (ring 0: probe 1af4:1053, reset, VERSION_1 only, three queues of
 * VS_QSIZE without interrupts, DRIVER_OK), the `VSOCK ready cid=C port=P` line, and the echo
 * loop in ring 3 (polling the rx used ring; REQUEST to the port -> RESPONSE, RW -> the same
 * bytes back, SHUTDOWN -> RST, CREDIT_REQUEST -> CREDIT_UPDATE, anything for another port ->
 * RST). Its rings and buffers live in the NOLOAD .blkmem section, zeroed in ring 3.
 * Not done yet: mode=vsock-connect, credit checks on the host's window (the host's 256 KiB
 * window and a client that reads keep it from filling).
 */
#include "blk.h"
#include "hw.h"

#define VS_QSIZE   64
#define VS_BUF     4096
#define VS_HDR     44
#define VS_RXN     VS_QSIZE
#define VS_TXN     VS_QSIZE
#define VS_CONNS   256
#define VS_BUF_ALLOC (VS_RXN * VS_BUF)

enum { OP_REQUEST = 1, OP_RESPONSE, OP_RST, OP_SHUTDOWN, OP_RW, OP_CREDIT_UPDATE,
       OP_CREDIT_REQUEST };

struct vs_hdr {
    u64 src_cid, dst_cid;
    u32 src_port, dst_port, len;
    u16 type, op;
    u32 flags, buf_alloc, fwd_cnt;
} __attribute__((packed));

struct vs_conn {
    u32 used, peer_port, fwd_cnt;
};

struct vsockmem {
    u8 rings[3][BLK_RING_BYTES] __attribute__((aligned(4096)));
    u8 rx[VS_RXN][VS_HDR + VS_BUF];
    u8 tx[VS_TXN][VS_HDR + VS_BUF];
    u16 tx_free[VS_TXN];
    struct vs_conn conns[VS_CONNS];
};

static struct vsockmem vsm __attribute__((section(".blkmem"), aligned(4096)));

struct vs_dev {
    struct vpci vp;
    struct vq rxq, txq, evq;
    u64 cid;
    u32 port;
    u32 ntx_free;
};

static struct vs_dev vd;

static long vs_zero_job(void *arg)
{
    (void)arg;
    memset(&vsm, 0, sizeof(vsm));
    return 0;
}

static const char *vs_init(struct vs_dev *d)
{
    struct vpci *vp = &d->vp;
    if (vp_probe(vp, 0x1053, 0))
        return "no virtio-vsock (1af4:1053) on bus 0";
    if (vp_reset(vp))
        return "reset timed out";
    vp_set_status(vp, VIRTIO_STATUS_ACK);
    vp_set_status(vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER);
    u64 offered = vp_device_features(vp);
    if (!(offered & (1ULL << VIRTIO_F_VERSION_1)))
        return "device does not offer VERSION_1";
    vp_driver_features(vp, 1ULL << VIRTIO_F_VERSION_1);
    vp_set_status(vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK);
    if (!(vp_status(vp) & VIRTIO_STATUS_FEATURES_OK))
        return "FEATURES_OK did not stick";
    d->cid = vp_cfg32(vp, 0) | (u64)vp_cfg32(vp, 4) << 32;
    if (vp_num_queues(vp) < 3)
        return "fewer than 3 queues";
    run_in_user(vs_zero_job, 0);
    struct vq *qs[3] = { &d->rxq, &d->txq, &d->evq };
    for (u16 q = 0; q < 3; q++) {
        if (vp_queue_max(vp, q) < VS_QSIZE)
            return "queue too small";
        qs[q]->event_idx = 0;
        qs[q]->want_irq = 0;
        vq_layout(qs[q], vsm.rings[q], q, VS_QSIZE);
        if (vp_queue_setup(vp, qs[q], q, VS_QSIZE, VIRTIO_NO_VECTOR))
            return "queue set-up failed";
    }
    vp_set_status(vp, VIRTIO_STATUS_ACK | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK |
                      VIRTIO_STATUS_DRIVER_OK);
    if (vp_status(vp) & (VIRTIO_STATUS_NEEDS_RESET | VIRTIO_STATUS_FAILED))
        return "device failed after DRIVER_OK";
    return 0;
}

/* ---- ring 3 ---- */

static void rx_post(struct vs_dev *d, u16 i)
{
    d->rxq.desc[i].addr = (u64)vsm.rx[i];
    d->rxq.desc[i].len = VS_HDR + VS_BUF;
    d->rxq.desc[i].flags = VRING_DESC_F_WRITE;
    d->rxq.desc[i].next = 0;
    vq_push(&d->rxq, i);
}

static void tx_reclaim(struct vs_dev *d)
{
    u32 id, len;
    while (d->ntx_free < VS_TXN && vq_pop_used(&d->txq, &id, &len))
        if (id < VS_TXN)
            vsm.tx_free[d->ntx_free++] = (u16)id;
}

/* Sends one packet (header fields from the arguments, `len` payload bytes from `data`). */
static void tx_send(struct vs_dev *d, const struct vs_hdr *to, u16 op, const u8 *data, u32 len,
                    u32 fwd_cnt)
{
    while (d->ntx_free == 0) {
        tx_reclaim(d);
        cpu_relax();
    }
    u16 i = vsm.tx_free[--d->ntx_free];
    struct vs_hdr *h = (struct vs_hdr *)vsm.tx[i];
    h->src_cid = d->cid;
    h->dst_cid = to->src_cid;
    h->src_port = to->dst_port;
    h->dst_port = to->src_port;
    h->len = len;
    h->type = 1;
    h->op = op;
    h->flags = 0;
    h->buf_alloc = VS_BUF_ALLOC;
    h->fwd_cnt = fwd_cnt;
    if (len)
        memcpy(vsm.tx[i] + VS_HDR, data, len);
    d->txq.desc[i].addr = (u64)vsm.tx[i];
    d->txq.desc[i].len = VS_HDR + len;
    d->txq.desc[i].flags = 0;
    d->txq.desc[i].next = 0;
    vq_push(&d->txq, i);
    vq_kick(&d->txq);
}

static struct vs_conn *conn_find(u32 peer_port, int add)
{
    struct vs_conn *free = 0;
    for (u32 i = 0; i < VS_CONNS; i++) {
        struct vs_conn *c = &vsm.conns[i];
        if (c->used && c->peer_port == peer_port)
            return c;
        if (!c->used && !free)
            free = c;
    }
    if (add && free) {
        free->used = 1;
        free->peer_port = peer_port;
        free->fwd_cnt = 0;
        return free;
    }
    return 0;
}

static void handle(struct vs_dev *d, const struct vs_hdr *h, const u8 *payload, u32 got)
{
    if (h->dst_port != d->port || h->type != 1) {
        if (h->op != OP_RST)
            tx_send(d, h, OP_RST, 0, 0, 0);
        return;
    }
    struct vs_conn *c = conn_find(h->src_port, h->op == OP_REQUEST);
    if (!c) {
        if (h->op != OP_RST)
            tx_send(d, h, OP_RST, 0, 0, 0);
        return;
    }
    switch (h->op) {
    case OP_REQUEST:
        c->fwd_cnt = 0;
        tx_send(d, h, OP_RESPONSE, 0, 0, 0);
        break;
    case OP_RW: {
        u32 n = h->len <= got ? h->len : got;
        c->fwd_cnt += n;
        tx_send(d, h, OP_RW, payload, n, c->fwd_cnt);
        break;
    }
    case OP_CREDIT_REQUEST:
        tx_send(d, h, OP_CREDIT_UPDATE, 0, 0, c->fwd_cnt);
        break;
    case OP_SHUTDOWN:
        tx_send(d, h, OP_RST, 0, 0, c->fwd_cnt);
        c->used = 0;
        break;
    case OP_RST:
        c->used = 0;
        break;
    default:
        break;
    }
}

static long vs_echo_job(void *arg)
{
    struct vs_dev *d = arg;
    d->ntx_free = 0;
    for (u16 i = 0; i < VS_TXN; i++)
        vsm.tx_free[d->ntx_free++] = i;
    for (u16 i = 0; i < VS_RXN; i++)
        rx_post(d, i);
    vq_kick(&d->rxq);
    for (;;) {
        u32 id, len;
        int any = 0;
        while (vq_pop_used(&d->rxq, &id, &len)) {
            any = 1;
            if (id >= VS_RXN)
                continue;
            if (len >= VS_HDR) {
                struct vs_hdr h;
                memcpy(&h, vsm.rx[id], VS_HDR);
                handle(d, &h, vsm.rx[id] + VS_HDR, len - VS_HDR);
            }
            rx_post(d, (u16)id);
        }
        if (any)
            vq_kick(&d->rxq);
        tx_reclaim(d);
        cpu_relax();
    }
    return 0;
}

NORETURN void vsock_main(const char *cmdline, size_t len)
{
    u64 port = 0;
    size_t i = 0;
    while (i < len) {
        const char *t;
        size_t n = cmdline_token(cmdline, len, &i, &t);
        if (n == 0)
            break;
        if (n > 5 && t[0] == 'p' && t[1] == 'o' && t[2] == 'r' && t[3] == 't' && t[4] == '=') {
            if (parse_decimal(t + 5, n - 5, &port) || port > 0xffffffffULL) {
                puts_serial("osprey-test-guest: error: bad port\n");
                guest_exit(EXIT_BAD_ARG);
            }
        }
    }
    vd.port = (u32)port;
    const char *e = vs_init(&vd);
    if (e) {
        puts_serial("osprey-test-guest: error: vsock: ");
        puts_serial(e);
        putc_serial('\n');
        guest_exit(1);
    }
    puts_serial("VSOCK ready cid=");
    put_u64(vd.cid);
    puts_serial(" port=");
    put_u64(vd.port);
    putc_serial('\n');
    run_in_user(vs_echo_job, &vd);
    guest_exit(EXIT_INTERNAL);
}
