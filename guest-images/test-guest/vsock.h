/*
 * vsock.h - types and prototypes of the virtio-vsock driver (mode=vsock-echo and
 * mode=vsock-connect): packet header, connection table, device state, options, the
 * shared memory (vsockmem) and the report.
 *
 * Ring split: vsock_init.c (PCI probe, reset, features, queue set-up) and vsock_main.c
 * (options, orchestration, printing) run in ring 0; vsock_proto.c (rings, packets,
 * connections, the echo/connect loops, the report text) runs in ring 3 via run_in_user.
 * The transport and split virtqueue are virtio_pci.c and virtqueue.c, shared with mode=blk.
 */
#ifndef OSPREY_VSOCK_H
#define OSPREY_VSOCK_H

#include "blk.h"

#define VIRTIO_ID_VSOCK_PCI   0x1053    /* 0x1040 + device type 19 */
#define VSOCK_HOST_CID        2
#define VSOCK_QSIZE_MAX       256
#define VSOCK_BUF             4096      /* data bytes per rx / tx buffer */
#define VSOCK_MAX_CONNS       128
#define VSOCK_CONN_BUF        65536     /* echo buffer per connection == buf_alloc */
#define VSOCK_EVENTS          4
#define VSOCK_REPORT_BYTES    2048

/* Packet header (virtio spec 5.10.6), little endian, 44 bytes. */
struct vsock_hdr {
    u64 src_cid;
    u64 dst_cid;
    u32 src_port;
    u32 dst_port;
    u32 len;
    u16 type;
    u16 op;
    u32 flags;
    u32 buf_alloc;
    u32 fwd_cnt;
} __attribute__((packed));
#define VSOCK_HDR_LEN 44

#define VSOCK_TYPE_STREAM        1
#define VSOCK_OP_REQUEST         1
#define VSOCK_OP_RESPONSE        2
#define VSOCK_OP_RST             3
#define VSOCK_OP_SHUTDOWN        4
#define VSOCK_OP_RW              5
#define VSOCK_OP_CREDIT_UPDATE   6
#define VSOCK_OP_CREDIT_REQUEST  7
#define VSOCK_SHUTDOWN_RCV       1
#define VSOCK_SHUTDOWN_SEND      2
#define VSOCK_EVENT_TRANSPORT_RESET 0

enum vsock_conn_state { VC_FREE, VC_CONNECTING, VC_ESTABLISHED };

struct vsock_conn {
    enum vsock_conn_state state;
    u32 index;                  /* slot number (pattern seed in connect mode) */
    u32 local_port, peer_port;
    u32 peer_buf_alloc, peer_fwd_cnt;
    u32 tx_cnt;                 /* bytes sent to the peer (wrapping) */
    u32 fwd_cnt;                /* bytes consumed from the peer (wrapping) */
    u32 fwd_reported;           /* fwd_cnt the peer last heard of */
    u64 rx_bytes;               /* bytes received */
    u64 sent;                   /* connect mode: bytes of the pattern sent */
    u32 pend_head, pend_len;    /* echo mode: unechoed bytes in buf */
    u32 peer_shut;              /* SHUTDOWN flags received */
    int asked;                  /* a CREDIT_REQUEST is unanswered */
    int mismatched;             /* connect mode: an echoed byte was wrong */
    u8 *buf;                    /* VSOCK_CONN_BUF bytes (vsockmem.conn_buf) */
};

enum vsock_mode { VSOCK_ECHO, VSOCK_CONNECT };

struct vsock_opts {
    enum vsock_mode mode;
    u32 port;                   /* echo: listening port; connect: host port */
    u64 count;                  /* connect: connections; echo: stop after this many (0: never) */
    u64 bytes;                  /* connect: bytes per connection */
    u32 par;                    /* connect: connections open at once */
    u64 timeout_ms;             /* no progress for this long: stop (connect, echo count>0) */
    int hostile;                /* connect: malformed packets first (vsock_hostile.c);
                                   2: then a REQUEST flood */
};

struct vsock_stats {
    u64 accepted, connected, closed, refused, verified;
    u64 rx_bytes, tx_bytes, rx_pkts, tx_pkts;
    u64 rst_sent, rst_rcvd, bad_pkts, mismatches, resets, drops;
    u64 hostile_sent, hostile_rst;      /* malformed packets posted, RSTs they drew */
    u64 flood_sent, flood_rst;          /* the REQUEST flood's packets, RSTs they drew */
};

struct vsock_dev {
    struct vpci vp;
    u64 cid;
    u16 qsize;
    struct vq rxq, txq, evq;
    u16 tx_free[VSOCK_QSIZE_MAX / 2];   /* free tx slots (stack) */
    u16 tx_nfree;
    u16 tx_slots;
    u64 tsc_khz;
    struct vsock_opts o;
    struct vsock_stats s;
    struct vsock_conn conns[VSOCK_MAX_CONNS];
    u64 opened;                 /* connect mode: connections started */
    u32 next_local_port;
    int timed_out;
    int reset_seen;             /* a TRANSPORT_RESET arrived (ring 0 prints it) */
    const char *error;
    struct vsock_hdr last_bad;  /* the last packet counted in bad_pkts */
};

struct vsockmem {
    u8 rings[3][BLK_RING_BYTES];                        /* rx, tx, event */
    u8 rx_hdr[VSOCK_QSIZE_MAX / 2][64];
    u8 rx_data[VSOCK_QSIZE_MAX / 2][VSOCK_BUF];
    u8 tx_hdr[VSOCK_QSIZE_MAX / 2][64];
    u8 tx_data[VSOCK_QSIZE_MAX / 2][VSOCK_BUF];
    u32 events[VSOCK_EVENTS];
    char report[VSOCK_REPORT_BYTES];
    u8 conn_buf[VSOCK_MAX_CONNS][VSOCK_CONN_BUF];
};
extern struct vsockmem vsockmem;

/* vsock_init.c (ring 0): probe, reset, VERSION_1, three queues, DRIVER_OK; 0 or -error. */
int vsock_init(struct vsock_dev *d);
const char *vsock_init_error(int r);

/* vsock_proto.c (ring 3) */
long vsock_zero_job(void *arg);         /* zero the rings and the connection table */
long vsock_prime_job(void *arg);        /* post rx and event buffers, tx free list */
#define VSOCK_LOOP_DONE   0
#define VSOCK_LOOP_RESET  1             /* a TRANSPORT_RESET: ring 0 prints, re-enters */
#define VSOCK_LOOP_FAIL   2
long vsock_loop_job(void *arg);
int vsock_step(struct vsock_dev *d);    /* one round of the loop; 1 if anything moved */
long vsock_report_job(void *arg);       /* VSOCK line into vsockmem.report */
int vsock_tx_slot(struct vsock_dev *d, int wait);   /* a free tx slot or -1 */
/* Post hdr (hdr_len bytes of descriptor) and data_len bytes of tx_data[slot] as they are. */
void vsock_tx_raw(struct vsock_dev *d, int slot, const struct vsock_hdr *h, u32 hdr_len,
                  u32 data_len);
void vsock_settle(struct vsock_dev *d, u64 ms);    /* poll rx/tx/events for ms */

/* vsock_hostile.c (ring 3): malformed packets, then the device must still work. */
long vsock_hostile_job(void *arg);
long vsock_flood_job(void *arg);

/* vsock_main.c (ring 0) */
NORETURN void vsock_main(const char *cmdline, size_t len, int connect);
/* mode=agent: echo on `port` for ever; the `VSOCK ready` line; NULL when there is no
 * virtio-vsock device (a failed init of one that is there exits 1). */
struct vsock_dev *vsock_agent_start(u32 port);

#endif
