/*
 * vsock_proto.c - the virtio-vsock stream protocol, driver side (ring 3 via run_in_user).
 *
 * Owns: the buffer layout on the three queues (rx chain i = descriptors 2i (header) and
 * 2i+1 (4 KiB data), both device-writable; tx slot i = descriptors 2i and 2i+1; event
 * buffer j = descriptor j), the tx free list, sending packets, the connection table with
 * credit flow control both ways (buf_alloc = the 64 KiB echo buffer per connection;
 * fwd_cnt advances as bytes are echoed or verified; CREDIT_UPDATE once half the buffer was
 * consumed unreported; CREDIT_REQUEST when the peer's credit runs out), the echo loop
 * (mode=vsock-echo: accept REQUESTs to the listening port, echo RW data, RST on SHUTDOWN
 * once drained), the connect loop (mode=vsock-connect: REQUESTs to the host (CID 2),
 * a per-connection byte pattern sent and its echo verified, then RST), TRANSPORT_RESET
 * (all connections dropped, guest_cid re-read) and the VSOCK report text. Every packet
 * from the device is checked (lengths, type, ids); a bad one is counted, never trusted.
 */
#include "vsock.h"
#include "hw.h"

struct vsockmem vsockmem __attribute__((section(".blkmem"), aligned(4096)));

u64 vsock_read_cid(struct vsock_dev *d);

long vsock_zero_job(void *arg)
{
    struct vsock_dev *d = arg;
    memset(vsockmem.rings, 0, sizeof(vsockmem.rings));
    memset(vsockmem.events, 0, sizeof(vsockmem.events));
    memset(&d->s, 0, sizeof(d->s));
    for (u32 i = 0; i < VSOCK_MAX_CONNS; i++) {
        memset(&d->conns[i], 0, sizeof(d->conns[i]));
        d->conns[i].index = i;
        d->conns[i].buf = vsockmem.conn_buf[i];
    }
    d->opened = 0;
    d->next_local_port = 49152;
    d->timed_out = 0;
    d->reset_seen = 0;
    d->error = 0;
    return 0;
}

/* Publish without a notify: the device is not live yet (ring 0 kicks after DRIVER_OK). */
static void publish(struct vq *vq)
{
    barrier();
    vq->avail[1] = vq->avail_shadow;
    vq->avail_published = vq->avail_shadow;
}

long vsock_prime_job(void *arg)
{
    struct vsock_dev *d = arg;
    u16 chains = d->qsize / 2;
    for (u16 i = 0; i < chains; i++) {
        volatile struct vring_desc *h = &d->rxq.desc[2 * i], *b = &d->rxq.desc[2 * i + 1];
        h->addr = (u64)vsockmem.rx_hdr[i];
        h->len = VSOCK_HDR_LEN;
        h->flags = VRING_DESC_F_NEXT | VRING_DESC_F_WRITE;
        h->next = (u16)(2 * i + 1);
        b->addr = (u64)vsockmem.rx_data[i];
        b->len = VSOCK_BUF;
        b->flags = VRING_DESC_F_WRITE;
        b->next = 0;
        vq_push(&d->rxq, (u16)(2 * i));
    }
    publish(&d->rxq);
    u16 nev = d->qsize < VSOCK_EVENTS ? d->qsize : VSOCK_EVENTS;
    for (u16 j = 0; j < nev; j++) {
        volatile struct vring_desc *e = &d->evq.desc[j];
        e->addr = (u64)&vsockmem.events[j];
        e->len = 4;
        e->flags = VRING_DESC_F_WRITE;
        e->next = 0;
        vq_push(&d->evq, j);
    }
    publish(&d->evq);
    d->tx_slots = chains;
    d->tx_nfree = 0;
    for (u16 i = chains; i > 0; i--)
        d->tx_free[d->tx_nfree++] = (u16)(i - 1);
    return 0;
}

/* ---- tx ---- */

static int reap_tx(struct vsock_dev *d)
{
    u32 id, len;
    int n = 0;
    for (u32 guard = 0; guard < d->qsize && vq_pop_used(&d->txq, &id, &len); guard++) {
        u32 slot = id / 2;
        if ((id & 1) || slot >= d->tx_slots || d->tx_nfree >= d->tx_slots) {
            d->s.bad_pkts++;            /* a used id we never posted */
            continue;
        }
        d->tx_free[d->tx_nfree++] = (u16)slot;
        n++;
    }
    return n > 0;
}

static u64 ms_to_tsc(const struct vsock_dev *d, u64 ms)
{
    return ms * d->tsc_khz;
}

/* A free tx slot; with wait, kick and reap until one frees (bounded by timeout_ms). */
int vsock_tx_slot(struct vsock_dev *d, int wait)
{
    if (d->tx_nfree == 0)
        reap_tx(d);
    if (d->tx_nfree == 0 && wait) {
        vq_kick(&d->txq);
        u64 t0 = rdtsc(), limit = ms_to_tsc(d, d->o.timeout_ms);
        while (d->tx_nfree == 0) {
            if (rdtsc() - t0 > limit) {
                d->error = "tx queue stalled";
                return -1;
            }
            cpu_relax();
            reap_tx(d);
        }
    }
    if (d->tx_nfree == 0)
        return -1;
    return d->tx_free[--d->tx_nfree];
}

/* Fill slot's header; the data (len bytes) is already in tx_data[slot]. */
static void tx_post(struct vsock_dev *d, int slot, u64 dst_cid, u32 src_port, u32 dst_port,
                    u16 op, u32 flags, u32 len, u32 fwd_cnt)
{
    struct vsock_hdr *h = (struct vsock_hdr *)vsockmem.tx_hdr[slot];
    h->src_cid = d->cid;
    h->dst_cid = dst_cid;
    h->src_port = src_port;
    h->dst_port = dst_port;
    h->len = len;
    h->type = VSOCK_TYPE_STREAM;
    h->op = op;
    h->flags = flags;
    h->buf_alloc = VSOCK_CONN_BUF;
    h->fwd_cnt = fwd_cnt;
    volatile struct vring_desc *hd = &d->txq.desc[2 * slot], *bd = &d->txq.desc[2 * slot + 1];
    hd->addr = (u64)h;
    hd->len = VSOCK_HDR_LEN;
    hd->flags = len ? VRING_DESC_F_NEXT : 0;
    hd->next = (u16)(2 * slot + 1);
    bd->addr = (u64)vsockmem.tx_data[slot];
    bd->len = len;
    bd->flags = 0;
    bd->next = 0;
    vq_push(&d->txq, (u16)(2 * slot));
    d->s.tx_pkts++;
    d->s.tx_bytes += len;
    if (op == VSOCK_OP_RST)
        d->s.rst_sent++;
}

void vsock_tx_raw(struct vsock_dev *d, int slot, const struct vsock_hdr *h, u32 hdr_len,
                  u32 data_len)
{
    memcpy(vsockmem.tx_hdr[slot], h, sizeof(*h));
    volatile struct vring_desc *hd = &d->txq.desc[2 * slot], *bd = &d->txq.desc[2 * slot + 1];
    hd->addr = (u64)vsockmem.tx_hdr[slot];
    hd->len = hdr_len;
    hd->flags = data_len ? VRING_DESC_F_NEXT : 0;
    hd->next = (u16)(2 * slot + 1);
    bd->addr = (u64)vsockmem.tx_data[slot];
    bd->len = data_len;
    bd->flags = 0;
    bd->next = 0;
    vq_push(&d->txq, (u16)(2 * slot));
    d->s.tx_pkts++;
}

/* A control packet (no data) on a connection; 0, or -1 when the tx queue stalled. */
static int send_ctl(struct vsock_dev *d, struct vsock_conn *c, u16 op, u32 flags)
{
    int slot = vsock_tx_slot(d, 1);
    if (slot < 0)
        return -1;
    tx_post(d, slot, VSOCK_HOST_CID, c->local_port, c->peer_port, op, flags, 0, c->fwd_cnt);
    c->fwd_reported = c->fwd_cnt;
    return 0;
}

static void rst_unknown(struct vsock_dev *d, const struct vsock_hdr *h)
{
    if (h->op == VSOCK_OP_RST)
        return;                         /* never answer an RST */
    int slot = vsock_tx_slot(d, 1);
    if (slot >= 0)
        tx_post(d, slot, h->src_cid, h->dst_port, h->src_port, VSOCK_OP_RST, 0, 0, 0);
}

static void conn_free(struct vsock_dev *d, struct vsock_conn *c)
{
    (void)d;
    u32 i = c->index;
    u8 *buf = c->buf;
    memset(c, 0, sizeof(*c));
    c->index = i;
    c->buf = buf;
}

static void conn_close(struct vsock_dev *d, struct vsock_conn *c, int send_rst)
{
    if (send_rst)
        send_ctl(d, c, VSOCK_OP_RST, 0);
    d->s.closed++;
    conn_free(d, c);
}

static u32 peer_credit(const struct vsock_conn *c)
{
    u32 in_flight = c->tx_cnt - c->peer_fwd_cnt;
    return in_flight >= c->peer_buf_alloc ? 0 : c->peer_buf_alloc - in_flight;
}

/* ---- connections ---- */

static struct vsock_conn *conn_find(struct vsock_dev *d, u32 local, u32 peer)
{
    for (u32 i = 0; i < VSOCK_MAX_CONNS; i++) {
        struct vsock_conn *c = &d->conns[i];
        if (c->state != VC_FREE && c->local_port == local && c->peer_port == peer)
            return c;
    }
    return 0;
}

static struct vsock_conn *conn_alloc(struct vsock_dev *d)
{
    for (u32 i = 0; i < VSOCK_MAX_CONNS; i++)
        if (d->conns[i].state == VC_FREE)
            return &d->conns[i];
    return 0;
}

static u8 pattern(u32 conn, u64 off)
{
    return (u8)(off * 7 + (off >> 9) + conn * 13 + 1);
}

/* ---- rx ---- */

static void on_rw(struct vsock_dev *d, struct vsock_conn *c, const u8 *data, u32 len)
{
    c->rx_bytes += len;
    d->s.rx_bytes += len;
    if (d->o.mode == VSOCK_CONNECT) {
        for (u32 i = 0; i < len; i++)
            if (data[i] != pattern(c->index, c->rx_bytes - len + i) ||
                c->rx_bytes - len + i >= d->o.bytes) {
                d->s.mismatches++;
                c->mismatched = 1;
                break;
            }
        c->fwd_cnt += len;              /* consumed: verified */
        return;
    }
    if (len > VSOCK_CONN_BUF - c->pend_len) {
        d->s.bad_pkts++;                /* past the credit we gave: reset */
        conn_close(d, c, 1);
        return;
    }
    u32 tail = (c->pend_head + c->pend_len) % VSOCK_CONN_BUF;
    u32 first = VSOCK_CONN_BUF - tail < len ? VSOCK_CONN_BUF - tail : len;
    memcpy(c->buf + tail, data, first);
    memcpy(c->buf, data + first, len - first);
    c->pend_len += len;
}

static void on_packet(struct vsock_dev *d, const struct vsock_hdr *h, const u8 *data)
{
    d->s.rx_pkts++;
    if (h->type != VSOCK_TYPE_STREAM || h->dst_cid != d->cid) {
        d->s.bad_pkts++;
        d->last_bad = *h;
        rst_unknown(d, h);
        return;
    }
    struct vsock_conn *c = conn_find(d, h->dst_port, h->src_port);
    if (h->op == VSOCK_OP_REQUEST) {
        if (d->o.mode != VSOCK_ECHO || h->dst_port != d->o.port || c ||
            !(c = conn_alloc(d))) {
            rst_unknown(d, h);
            return;
        }
        c->state = VC_ESTABLISHED;
        c->local_port = h->dst_port;
        c->peer_port = h->src_port;
        c->peer_buf_alloc = h->buf_alloc;
        c->peer_fwd_cnt = h->fwd_cnt;
        d->s.accepted++;
        send_ctl(d, c, VSOCK_OP_RESPONSE, 0);
        return;
    }
    if (!c) {
        if (h->op == VSOCK_OP_RST)
            d->s.rst_rcvd++;
        rst_unknown(d, h);
        return;
    }
    c->peer_buf_alloc = h->buf_alloc;
    c->peer_fwd_cnt = h->fwd_cnt;
    c->asked = 0;
    switch (h->op) {
    case VSOCK_OP_RESPONSE:
        if (c->state != VC_CONNECTING) {
            d->s.bad_pkts++;
            conn_close(d, c, 1);
            return;
        }
        c->state = VC_ESTABLISHED;
        d->s.connected++;
        return;
    case VSOCK_OP_RST:
        d->s.rst_rcvd++;
        if (c->state == VC_CONNECTING) {
            d->s.refused++;
            conn_free(d, c);
        } else {
            if (d->o.mode == VSOCK_CONNECT)
                d->s.drops++;           /* reset before the echo was verified */
            conn_close(d, c, 0);
        }
        return;
    case VSOCK_OP_SHUTDOWN:
        c->peer_shut |= h->flags & (VSOCK_SHUTDOWN_RCV | VSOCK_SHUTDOWN_SEND);
        if ((c->peer_shut & VSOCK_SHUTDOWN_RCV) || c->pend_len == 0)
            conn_close(d, c, 1);
        return;
    case VSOCK_OP_RW:
        if (c->state != VC_ESTABLISHED) {
            d->s.bad_pkts++;
            conn_close(d, c, 1);
            return;
        }
        on_rw(d, c, data, h->len);
        return;
    case VSOCK_OP_CREDIT_UPDATE:
        return;
    case VSOCK_OP_CREDIT_REQUEST:
        send_ctl(d, c, VSOCK_OP_CREDIT_UPDATE, 0);
        return;
    default:
        d->s.bad_pkts++;
        conn_close(d, c, 1);
    }
}

static int do_rx(struct vsock_dev *d)
{
    u32 id, len;
    int n = 0;
    for (u32 guard = 0; guard < d->qsize && vq_pop_used(&d->rxq, &id, &len); guard++) {
        u32 chain = id / 2;
        if ((id & 1) || chain >= d->qsize / 2u) {
            d->s.bad_pkts++;
            continue;
        }
        struct vsock_hdr h;
        memcpy(&h, vsockmem.rx_hdr[chain], sizeof(h));
        if (len < VSOCK_HDR_LEN || h.len > VSOCK_BUF || len < VSOCK_HDR_LEN + h.len ||
            (h.op != VSOCK_OP_RW && h.len != 0)) {
            d->s.bad_pkts++;
            d->last_bad = h;
        } else
            on_packet(d, &h, vsockmem.rx_data[chain]);
        vq_push(&d->rxq, (u16)id);      /* the descriptors are unchanged */
        n++;
    }
    if (n)
        vq_kick(&d->rxq);
    return n > 0;
}

static int do_events(struct vsock_dev *d)
{
    u32 id, len;
    int n = 0;
    for (u32 guard = 0; guard < d->qsize && vq_pop_used(&d->evq, &id, &len); guard++) {
        if (id >= VSOCK_EVENTS || len < 4) {
            d->s.bad_pkts++;
            continue;
        }
        if (vsockmem.events[id] == VSOCK_EVENT_TRANSPORT_RESET) {
            for (u32 i = 0; i < VSOCK_MAX_CONNS; i++)
                if (d->conns[i].state != VC_FREE) {
                    d->s.closed++;
                    conn_free(d, &d->conns[i]);
                }
            d->cid = vsock_read_cid(d);
            d->s.resets++;
            d->reset_seen = 1;
        }
        vq_push(&d->evq, (u16)id);
        n++;
    }
    if (n)
        vq_kick(&d->evq);
    return n > 0;
}

/* ---- the loops ---- */

static int pump_echo(struct vsock_dev *d, struct vsock_conn *c)
{
    int moved = 0;
    while (c->pend_len) {
        u32 credit = peer_credit(c);
        if (credit == 0) {
            if (!c->asked && send_ctl(d, c, VSOCK_OP_CREDIT_REQUEST, 0) == 0)
                c->asked = 1;           /* once, until the peer speaks again */
            break;
        }
        int slot = vsock_tx_slot(d, 0);
        if (slot < 0)
            break;
        u32 n = c->pend_len;
        if (n > VSOCK_BUF)
            n = VSOCK_BUF;
        if (n > credit)
            n = credit;
        if (n > VSOCK_CONN_BUF - c->pend_head)
            n = VSOCK_CONN_BUF - c->pend_head;
        memcpy(vsockmem.tx_data[slot], c->buf + c->pend_head, n);
        c->pend_head = (c->pend_head + n) % VSOCK_CONN_BUF;
        c->pend_len -= n;
        c->fwd_cnt += n;                /* consumed: echoed */
        tx_post(d, slot, VSOCK_HOST_CID, c->local_port, c->peer_port, VSOCK_OP_RW, 0, n,
                c->fwd_cnt);
        c->fwd_reported = c->fwd_cnt;
        c->tx_cnt += n;
        moved = 1;
    }
    if (c->pend_len == 0 && (c->peer_shut & VSOCK_SHUTDOWN_SEND))
        conn_close(d, c, 1);
    return moved;
}

static int pump_connect(struct vsock_dev *d, struct vsock_conn *c)
{
    int moved = 0;
    while (c->sent < d->o.bytes) {
        u32 credit = peer_credit(c);
        if (credit == 0) {
            if (!c->asked && send_ctl(d, c, VSOCK_OP_CREDIT_REQUEST, 0) == 0)
                c->asked = 1;
            break;
        }
        int slot = vsock_tx_slot(d, 0);
        if (slot < 0)
            break;
        u64 left = d->o.bytes - c->sent;
        u32 n = left < VSOCK_BUF ? (u32)left : VSOCK_BUF;
        if (n > credit)
            n = credit;
        for (u32 i = 0; i < n; i++)
            vsockmem.tx_data[slot][i] = pattern(c->index, c->sent + i);
        tx_post(d, slot, VSOCK_HOST_CID, c->local_port, c->peer_port, VSOCK_OP_RW, 0, n,
                c->fwd_cnt);
        c->fwd_reported = c->fwd_cnt;
        c->tx_cnt += n;
        c->sent += n;
        moved = 1;
    }
    if (c->rx_bytes >= d->o.bytes) {
        if (c->rx_bytes == d->o.bytes && !c->mismatched)
            d->s.verified++;
        conn_close(d, c, 1);
        moved = 1;
    }
    return moved;
}

static int pump(struct vsock_dev *d)
{
    int moved = 0;
    if (d->o.mode == VSOCK_CONNECT) {
        u32 active = 0;
        for (u32 i = 0; i < VSOCK_MAX_CONNS; i++)
            active += d->conns[i].state != VC_FREE;
        while (d->opened < d->o.count && active < d->o.par) {
            struct vsock_conn *c = conn_alloc(d);
            if (!c)
                break;
            c->state = VC_CONNECTING;
            c->local_port = d->next_local_port++;
            c->peer_port = d->o.port;
            c->index = (u32)(c - d->conns);
            d->opened++;
            active++;
            if (send_ctl(d, c, VSOCK_OP_REQUEST, 0))
                return moved;
            moved = 1;
        }
    }
    for (u32 i = 0; i < VSOCK_MAX_CONNS; i++) {
        struct vsock_conn *c = &d->conns[i];
        if (c->state != VC_ESTABLISHED)
            continue;
        if (d->o.mode == VSOCK_ECHO)
            moved |= pump_echo(d, c);
        else
            moved |= pump_connect(d, c);
        if (c->state == VC_ESTABLISHED && c->fwd_cnt - c->fwd_reported >= VSOCK_CONN_BUF / 2) {
            send_ctl(d, c, VSOCK_OP_CREDIT_UPDATE, 0);
            moved = 1;
        }
    }
    return moved;
}

static int finished(const struct vsock_dev *d)
{
    if (d->o.mode == VSOCK_CONNECT)
        return d->opened >= d->o.count && d->s.closed + d->s.refused >= d->o.count;
    return d->o.count && d->s.closed >= d->o.count;
}

/* Run the receive side for a while (the hostile cases wait for the device's answers). */
void vsock_settle(struct vsock_dev *d, u64 ms)
{
    u64 t0 = rdtsc(), limit = ms_to_tsc(d, ms);
    while (rdtsc() - t0 < limit) {
        reap_tx(d);
        do_events(d);
        do_rx(d);
        vq_kick(&d->txq);
        cpu_relax();
    }
}

int vsock_step(struct vsock_dev *d)
{
    int progress = reap_tx(d);
    progress |= do_events(d);
    progress |= do_rx(d);
    progress |= pump(d);
    vq_kick(&d->txq);
    return progress;
}

long vsock_loop_job(void *arg)
{
    struct vsock_dev *d = arg;
    u64 last = rdtsc(), limit = ms_to_tsc(d, d->o.timeout_ms);
    d->reset_seen = 0;
    for (;;) {
        int progress = reap_tx(d);
        progress |= do_events(d);
        progress |= do_rx(d);
        progress |= pump(d);
        vq_kick(&d->txq);
        if (d->error)
            return VSOCK_LOOP_FAIL;
        if (finished(d))
            return VSOCK_LOOP_DONE;
        if (d->reset_seen)
            return VSOCK_LOOP_RESET;
        if (progress) {
            last = rdtsc();
            continue;
        }
        int watched = d->o.mode == VSOCK_CONNECT || (d->o.count && d->s.accepted);
        if (watched && rdtsc() - last > limit) {
            d->timed_out = 1;
            return VSOCK_LOOP_FAIL;
        }
        cpu_relax();
    }
}

long vsock_report_job(void *arg)
{
    struct vsock_dev *d = arg;
    struct sbuf b = { vsockmem.report, 0, sizeof(vsockmem.report) };
    vsockmem.report[0] = 0;
    const struct vsock_stats *s = &d->s;
    sb_puts(&b, "VSOCK {");
    sb_key(&b, "mode");
    sb_puts(&b, d->o.mode == VSOCK_ECHO ? "\"echo\"" : "\"connect\"");
    sb_key(&b, "cid"); sb_u64(&b, d->cid);
    sb_key(&b, "port"); sb_u64(&b, d->o.port);
    sb_key(&b, "count"); sb_u64(&b, d->o.count);
    sb_key(&b, "bytes"); sb_u64(&b, d->o.bytes);
    sb_key(&b, "accepted"); sb_u64(&b, s->accepted);
    sb_key(&b, "connected"); sb_u64(&b, s->connected);
    sb_key(&b, "closed"); sb_u64(&b, s->closed);
    sb_key(&b, "refused"); sb_u64(&b, s->refused);
    sb_key(&b, "verified"); sb_u64(&b, s->verified);
    sb_key(&b, "rx_bytes"); sb_u64(&b, s->rx_bytes);
    sb_key(&b, "tx_bytes"); sb_u64(&b, s->tx_bytes);
    sb_key(&b, "rx_pkts"); sb_u64(&b, s->rx_pkts);
    sb_key(&b, "tx_pkts"); sb_u64(&b, s->tx_pkts);
    sb_key(&b, "rst_sent"); sb_u64(&b, s->rst_sent);
    sb_key(&b, "rst_rcvd"); sb_u64(&b, s->rst_rcvd);
    sb_key(&b, "bad_pkts"); sb_u64(&b, s->bad_pkts);
    sb_key(&b, "mismatches"); sb_u64(&b, s->mismatches);
    sb_key(&b, "drops"); sb_u64(&b, s->drops);
    sb_key(&b, "resets"); sb_u64(&b, s->resets);
    sb_key(&b, "hostile_sent"); sb_u64(&b, s->hostile_sent);
    sb_key(&b, "hostile_rst"); sb_u64(&b, s->hostile_rst);
    sb_key(&b, "flood_sent"); sb_u64(&b, s->flood_sent);
    sb_key(&b, "flood_rst"); sb_u64(&b, s->flood_rst);
    sb_key(&b, "tx_kicks"); sb_u64(&b, d->txq.kicks);
    if (s->bad_pkts) {                  /* the last packet refused, for the log */
        const struct vsock_hdr *h = &d->last_bad;
        sb_key(&b, "last_bad");
        sb_puts(&b, "{\"op\":"); sb_u64(&b, h->op);
        sb_puts(&b, ",\"type\":"); sb_u64(&b, h->type);
        sb_puts(&b, ",\"len\":"); sb_u64(&b, h->len);
        sb_puts(&b, ",\"src_cid\":"); sb_u64(&b, h->src_cid);
        sb_puts(&b, ",\"dst_cid\":"); sb_u64(&b, h->dst_cid);
        sb_puts(&b, ",\"src_port\":"); sb_u64(&b, h->src_port);
        sb_puts(&b, ",\"dst_port\":"); sb_u64(&b, h->dst_port);
        sb_putc(&b, '}');
    }
    sb_key(&b, "timed_out"); sb_puts(&b, d->timed_out ? "true" : "false");
    sb_key(&b, "error");
    if (d->error)
        sb_str(&b, d->error, strnlen(d->error, 80));
    else
        sb_puts(&b, "null");
    sb_putc(&b, '}');
    return 0;
}
