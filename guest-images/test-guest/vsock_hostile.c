/*
 * vsock_hostile.c - mode=vsock-connect hostile=1: malformed packets on the tx queue (ring 3).
 *
 * Owns: the list of bad packets posted before the connect workload, one at a time, each
 * followed by a 50 ms settle of the receive side: RW for a connection that does not exist, a
 * non-stream type, an unknown op, a header claiming 1 MiB behind a 16-byte data descriptor,
 * a header descriptor shorter than the header, a foreign source CID, a destination CID that
 * is not the host, a REQUEST carrying data. The device may answer with RST or drop them; it
 * must not stop: the connect workload that follows has to verify as usual. The RSTs drawn
 * are counted (`hostile_rst`).
 *
 * With hostile=2, then a flood: for FLOOD_MS, REQUESTs to a host port nobody listens on, as
 * fast as tx slots free, each from a new local port (`flood_sent`, and the RSTs drawn,
 * `flood_rst`). The device may throttle them; it must serve the workload that follows.
 */
#include "vsock.h"

#define HOSTILE_LOCAL_PORT 40000

struct vsock_bad_pkt {
    u16 type, op;
    u32 len, hdr_desc, data_desc;
    u64 src_cid_add;            /* added to our CID as the source */
    u64 dst_cid;                /* 0: the host */
};

static const struct vsock_bad_pkt cases[] = {
    { VSOCK_TYPE_STREAM, VSOCK_OP_RW, 16, VSOCK_HDR_LEN, 16, 0, 0 },          /* no such conn */
    { 2, VSOCK_OP_REQUEST, 0, VSOCK_HDR_LEN, 0, 0, 0 },                     /* seqpacket */
    { VSOCK_TYPE_STREAM, 99, 0, VSOCK_HDR_LEN, 0, 0, 0 },                   /* unknown op */
    { VSOCK_TYPE_STREAM, VSOCK_OP_RW, 1u << 20, VSOCK_HDR_LEN, 16, 0, 0 },  /* len > data */
    { VSOCK_TYPE_STREAM, VSOCK_OP_REQUEST, 0, 20, 0, 0, 0 },                /* short header */
    { VSOCK_TYPE_STREAM, VSOCK_OP_REQUEST, 0, VSOCK_HDR_LEN, 0, 100, 0 },   /* foreign src */
    { VSOCK_TYPE_STREAM, VSOCK_OP_REQUEST, 0, VSOCK_HDR_LEN, 0, 0, 99 },    /* dst not host */
    { VSOCK_TYPE_STREAM, VSOCK_OP_REQUEST, 100, VSOCK_HDR_LEN, 100, 0, 0 }, /* REQUEST + data */
};

long vsock_hostile_job(void *arg)
{
    struct vsock_dev *d = arg;
    u64 rst0 = d->s.rst_rcvd;
    for (u32 i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct vsock_bad_pkt *k = &cases[i];
        int slot = vsock_tx_slot(d, 1);
        if (slot < 0)
            return -1;
        struct vsock_hdr h;
        h.src_cid = d->cid + k->src_cid_add;
        h.dst_cid = k->dst_cid ? k->dst_cid : VSOCK_HOST_CID;
        h.src_port = HOSTILE_LOCAL_PORT + i;
        h.dst_port = d->o.port;
        h.len = k->len;
        h.type = k->type;
        h.op = k->op;
        h.flags = 0;
        h.buf_alloc = VSOCK_CONN_BUF;
        h.fwd_cnt = 0;
        memset(vsockmem.tx_data[slot], 0xa5, k->data_desc);
        vsock_tx_raw(d, slot, &h, k->hdr_desc, k->data_desc);
        d->s.hostile_sent++;
        vsock_settle(d, 50);
    }
    d->s.hostile_rst = d->s.rst_rcvd - rst0;
    return 0;
}

#define FLOOD_MS 1000
#define FLOOD_PORT 7                    /* no host program listens on <uds_path>_7 */
#define FLOOD_FIRST_PORT 50000

long vsock_flood_job(void *arg)
{
    struct vsock_dev *d = arg;
    u64 rst0 = d->s.rst_rcvd, t0 = rdtsc(), limit = FLOOD_MS * d->tsc_khz;
    u32 port = FLOOD_FIRST_PORT;
    while (rdtsc() - t0 < limit) {
        int slot = vsock_tx_slot(d, 0);
        if (slot >= 0) {
            struct vsock_hdr h;
            h.src_cid = d->cid;
            h.dst_cid = VSOCK_HOST_CID;
            h.src_port = port++;
            h.dst_port = FLOOD_PORT;
            h.len = 0;
            h.type = VSOCK_TYPE_STREAM;
            h.op = VSOCK_OP_REQUEST;
            h.flags = 0;
            h.buf_alloc = VSOCK_CONN_BUF;
            h.fwd_cnt = 0;
            vsock_tx_raw(d, slot, &h, VSOCK_HDR_LEN, 0);
            d->s.flood_sent++;
        }
        vsock_step(d);                  /* reap tx, take the RSTs, publish (kick if asked) */
    }
    d->s.flood_rst = d->s.rst_rcvd - rst0;
    return 0;
}
