/*
 * blk.h - types and prototypes shared by the virtio-blk driver and the
 * mode=blk load generator: PCI, virtio-pci transport, split virtqueue,
 * virtio-blk requests, workload options/results, statistics, hostile
 * cases, the BLK report and the shared memory layout (blkmem.c).
 *
 * Ring split: pci.c, virtio_pci.c, apic.c, mmu.c and blk_main.c run in
 * ring 0 (set-up, resets). virtqueue.c, blk.c's request helpers,
 * workload.c, hostile.c, stats.c, fmt.c and blk_report.c are plain memory
 * + MMIO code that runs in ring 3 via run_in_user (it also works in ring 0,
 * only slowly).
 */
#ifndef OSPREY_BLK_H
#define OSPREY_BLK_H

#include "guest.h"

/* ---- limits and memory layout (blkmem.c) ---- */
#define BLK_MAX_QUEUES   8
#define BLK_MAX_QSIZE    256
#define BLK_RING_BYTES   16384          /* desc @0, avail @4K, used @8K */
#define BLK_DATA_POOL    (8u << 20)     /* data buffers for all slots */
#define BLK_MAX_SAMPLES  65536          /* latency samples per run */
#define BLK_MISC_BYTES   (128u << 10)   /* single requests, hostile cases */
#define BLK_REPORT_BYTES 32768
#define BLK_MAX_HOSTILE  16
#define BLK_IND_MAX      4              /* descriptors per indirect table */


/* ---- pci.c (ring 0: config mechanism #1, bus 0) ---- */
u32 pci_read32(u8 slot, u8 off);
u16 pci_read16(u8 slot, u8 off);
u8 pci_read8(u8 slot, u8 off);
void pci_write16(u8 slot, u8 off, u16 v);
void pci_write32(u8 slot, u8 off, u32 v);
int pci_find(u16 vendor, u16 device, u32 nth);  /* slot of the nth match (from 0), or -1 */
u64 pci_bar(u8 slot, int bar);          /* decoded address, 0 if none */
void pci_enable_mem_master(u8 slot);

/* ---- mmu.c (ring 0) ---- */
int mmio_map_uc(u64 addr, u64 len);     /* 0 ok, -1 unsupported */

/* ---- apic.c + isr.S (ring 0) ---- */
#define IRQ_VEC_BASE  0x40              /* vector of queue q = base + q */
#define IRQ_VEC_SPUR  0x4f
#define IDT_ENTRIES   0x50
extern volatile u64 irq_counts[BLK_MAX_QUEUES];
extern volatile u64 irq_total;
u32 apic_init_for_msi(void);            /* returns this CPU's APIC id */
void idt_set_gate(int vec, u64 handler, int dpl);

/* ---- virtio_pci.c (ring 0 for set-up; notify/common are MMIO) ---- */
#define VIRTIO_STATUS_ACK        1
#define VIRTIO_STATUS_DRIVER     2
#define VIRTIO_STATUS_DRIVER_OK  4
#define VIRTIO_STATUS_FEATURES_OK 8
#define VIRTIO_STATUS_NEEDS_RESET 0x40
#define VIRTIO_STATUS_FAILED     0x80
#define VIRTIO_NO_VECTOR         0xffff

struct vpci {
    u8 slot;
    u64 bar[6];                 /* decoded BAR addresses */
    u8 common_bar, notify_bar;
    u64 common, notify, isr, devcfg;    /* mapped addresses */
    u32 notify_mult;
    u8 msix_cap;                /* config offset, 0 if none */
    u16 msix_size;
    u64 msix_table;             /* mapped address, 0 if none */
};
int vp_probe(struct vpci *vp, u16 device_id, u32 nth);  /* 0 / -error */
int vp_reset(struct vpci *vp);                           /* 0 / -1 timeout */
u8 vp_status(const struct vpci *vp);
void vp_set_status(struct vpci *vp, u8 s);
u64 vp_device_features(struct vpci *vp);
void vp_driver_features(struct vpci *vp, u64 f);
u16 vp_num_queues(struct vpci *vp);
u16 vp_queue_max(struct vpci *vp, u16 q);
struct vq;
int vp_queue_setup(struct vpci *vp, struct vq *vq, u16 q, u16 size, u16 msix_vec);
int vp_msix_enable(struct vpci *vp, u32 apic_id, u32 nvec);
u32 vp_cfg32(struct vpci *vp, u32 off);
u8 vp_cfg8(struct vpci *vp, u32 off);
u8 vp_cfg_generation(struct vpci *vp);

/* ---- virtqueue.c (any ring) ---- */
struct vring_desc {
    u64 addr;
    u32 len;
    u16 flags;
    u16 next;
};
#define VRING_DESC_F_NEXT  1
#define VRING_DESC_F_WRITE 2
#define VRING_DESC_F_INDIRECT 4
#define VRING_AVAIL_F_NO_INTERRUPT 1
#define VRING_USED_F_NO_NOTIFY     1

struct vq {
    u16 index, size;
    volatile struct vring_desc *desc;
    volatile u16 *avail;        /* [0] flags, [1] idx, [2+i] ring, [2+size] used_event */
    volatile u8 *used;          /* +0 flags, +2 idx, +4+8i {id,len}, +4+8*size avail_event */
    u64 notify_addr;
    u16 avail_shadow;           /* next avail idx (not yet published) */
    u16 avail_published;        /* idx at the last publish */
    u16 last_used;
    u16 used_event;             /* last value written to used_event */
    int event_idx;
    int want_irq;               /* keep interrupts enabled (irq mode) */
    u64 kicks;
    u64 publishes;
};
void vq_layout(struct vq *vq, u8 *mem, u16 index, u16 size);
void vq_push(struct vq *vq, u16 head);
void vq_kick(struct vq *vq);            /* publish avail idx, kick if needed */
int vq_pop_used(struct vq *vq, u32 *id, u32 *len);   /* 1 if one popped */
u16 vq_used_idx(const struct vq *vq);

/* ---- blk.c ---- */
#define VIRTIO_BLK_T_IN           0
#define VIRTIO_BLK_T_OUT          1
#define VIRTIO_BLK_T_FLUSH        4
#define VIRTIO_BLK_T_GET_ID       8
#define VIRTIO_BLK_T_DISCARD      11
#define VIRTIO_BLK_T_WRITE_ZEROES 13
#define VIRTIO_BLK_S_OK     0
#define VIRTIO_BLK_S_IOERR  1
#define VIRTIO_BLK_S_UNSUPP 2

#define VIRTIO_BLK_F_SIZE_MAX   1
#define VIRTIO_BLK_F_SEG_MAX    2
#define VIRTIO_BLK_F_RO         5
#define VIRTIO_BLK_F_BLK_SIZE   6
#define VIRTIO_BLK_F_FLUSH      9
#define VIRTIO_BLK_F_MQ         12
#define VIRTIO_BLK_F_DISCARD    13
#define VIRTIO_BLK_F_WRITE_ZEROES 14
#define VIRTIO_F_INDIRECT_DESC  28
#define VIRTIO_F_EVENT_IDX      29
#define VIRTIO_F_VERSION_1      32

struct blk_req {                /* one per slot, in blkmem.misc/req area */
    u32 type;
    u32 reserved;
    u64 sector;
    u8 status;
    u8 kind;                    /* workload bookkeeping */
    u8 pad[6];
    u64 seg_sector;             /* discard / write-zeroes segment */
    u32 seg_num;
    u32 seg_flags;
    u64 t_submit;
    u64 lba;                    /* first sector of the data */
};

struct blk_opts;
struct blk_dev {
    struct vpci vp;
    int probed;
    u64 offered, accepted;
    u64 capacity;               /* sectors */
    u32 blk_size, seg_max, size_max;
    u16 dev_queues;             /* num_queues from config (1 without MQ) */
    u32 max_discard_sectors, max_discard_seg;
    u32 max_wz_sectors, max_wz_seg;
    u8 wz_may_unmap;
    int ro;
    u16 nq, qsize, ndesc;       /* queues in use, size, descs per request */
    u16 ring_ndesc;             /* ring descriptors per slot (1 when indirect) */
    int indirect;               /* VIRTIO_F_INDIRECT_DESC negotiated (indirect=1) */
    int irq;
    u32 apic_id;
    int msix_ok;
    struct vq vq[BLK_MAX_QUEUES];
    struct blk_req *req[BLK_MAX_QUEUES];    /* per-queue slot array */
    char serial[21];
    int serial_status;
    u64 resets;
};
int blk_init(struct blk_dev *d, const struct blk_opts *o);  /* ring 0 */
u16 blk_build(struct blk_dev *d, u16 q, u16 slot, u32 type, u64 sector,
              u64 data, u32 len);       /* returns head; data may be 0 */
int blk_sync(struct blk_dev *d, u32 type, u64 sector, u64 data, u32 len,
             u64 timeout);              /* status, or -1 timeout */
long blk_get_id_job(void *arg);         /* ring 3: fills d->serial */
long user_zero_job(void *arg);          /* ring 3: zero rings + slots */

/* ---- blk_cmdline.c ---- */
enum blk_rw { RW_READ, RW_WRITE, RW_RANDREAD, RW_RANDWRITE, RW_VERIFY, RW_STAMP };
/* The TSC frequencies the guest accepts, from tsc_khz= or kvmclock (kHz). */
#define TSC_KHZ_MIN 1000
#define TSC_KHZ_MAX 100000000

/* Where blk_opts.tsc_khz came from. */
enum tsc_source { TSC_DEFAULT, TSC_CMDLINE, TSC_KVMCLOCK };

struct blk_opts {
    enum blk_rw rw;
    u32 bs, qd, queues, qsize;
    u64 count, range, seed;
    u64 flush_every;
    int event_idx, irq, discard, write_zeroes, hostile, reinit, indirect;
    int pattern_check;     /* pattern=: only read back and compare (no write, no flush) */
    int hang;              /* after the BLK line: 1 halt, 2 idle in ring 3 for ever */
    u64 broken_idle_ms;    /* break queue 0 and leave it alone this long (0: off) */
    int pattern_set;
    u64 pattern_lba;
    u32 pattern;
    u64 tsc_khz;
    enum tsc_source tsc_source;
    u64 timeout_ms;
    u64 think_us;          /* ring-3 pause after each completion round before issuing more */
    int tsc_stamp;         /* reads: the submit rdtsc in the buffer's first 8 bytes (stage stamps) */
    u32 dev;               /* drive the nth virtio-blk device found (from 0) */
    int stamp_until_set;   /* rw=stamp: end once STAMP_UNTIL_REQUESTS read this tag */
    u32 stamp_until;
};
/* Defaults + every blk token of the command line; 0, or -1 after printing
 * an error line (the caller exits with status 2). */
int blk_opts_parse(const char *s, size_t len, struct blk_opts *o);
const char *blk_rw_name(enum blk_rw rw);

/* ---- stats.c (ring 3) ---- */
struct lat_stats {
    u64 samples, mean, p50, p99, min, max;
};
/* Every request of a run: count, sum, min, max (the exact mean, min and max). */
struct lat_all {
    u64 count, sum, min, max;
};
void lat_compute(u64 *v, u64 *tmp, u64 n, const struct lat_all *all, struct lat_stats *out);
u64 cycles_to_ns(u64 cycles, u64 khz);

/* ---- workload.c (ring 3) ---- */
struct blk_run {
    const char *name;
    const char *rw;
    u32 bs, qd, queues;
    u64 requests, bytes, errors, mismatches, first_mismatch_sector;
    u64 flushes, kicks, interrupts, irq_waits_timed_out, irq_lost;
    u64 elapsed_cycles, iops;
    int timed_out, needs_reset;
    struct lat_stats lat;
    int done;
};
struct wl_job {
    struct blk_dev *d;
    const struct blk_opts *o;
    enum blk_rw rw;
    u64 nreq;                   /* requests (verify: per phase) */
    u64 nblocks;                /* blocks in range */
    u64 seed;
    struct blk_run *run;
    struct stamp_state *stamp;  /* rw=stamp */
};
/* 0 when the run ended; 1 (rw=stamp) when the tag changed: print, then call again. */
long workload_job(void *arg);
long extra_ops_job(void *arg);  /* discard / write-zeroes / pattern */
struct extra_result {
    int ran;                    /* option given */
    int status;                 /* request status; -1 timeout, -2 not offered */
    int prep_status;            /* write before write-zeroes; flush after pattern */
    int readback_status;        /* read after write-zeroes / pattern */
    u64 sector, sectors;
    u64 bad_sectors;            /* non-zero / wrong-pattern sectors read back */
};
struct extra_job {
    struct blk_dev *d;
    const struct blk_opts *o;
    struct extra_result discard, wz, pattern;
    int which;                  /* 1 discard+wz, 2 pattern */
};
u64 pattern_word(u64 seed, u64 sector, u32 j);

/* ---- stamp.c (ring 3, stamp_announce ring 0): rw=stamp ---- */
#define STAMP_MAX_TAGS 4
#define STAMP_UNTIL_REQUESTS 1000       /* stamp_until=: requests of the tag before the end */
#define STAMP_CONFIG_EVERY 256          /* completions between config generation checks */
struct stamp_state {
    u32 tags[STAMP_MAX_TAGS];   /* distinct tags in the order first seen */
    u64 sectors[STAMP_MAX_TAGS];        /* good sectors read per tag */
    u32 ntags;
    u64 other_tags;             /* good sectors of a fifth or later tag */
    u64 bad_magic, bad_sector, bad_fill;
    u32 cur_tag;                /* tag of the last good sector checked */
    int have_cur;
    u32 printed_tag;            /* tag of the last `stamp tag=` line */
    int printed;
    int pause;                  /* the tag changed: drain, return to ring 0 to print */
    u64 until_seen;             /* requests that read opts.stamp_until */
    u8 gen;                     /* config generation last seen */
    u64 config_changes;         /* generation changes seen */
    u64 capacity;               /* sectors, re-read at each generation change */
    u64 issued;                 /* data requests issued (all completed at the end) */
    u64 checks;                 /* completions since the last generation check */
};
/* Checks bytes/512 sectors at buf read from sector; returns the bad ones. */
u64 stamp_check(struct stamp_state *st, const u8 *buf, u64 sector, u32 bytes);
/* Re-reads the capacity when the config generation moved (one MMIO read otherwise). */
void stamp_poll_config(struct stamp_state *st, struct blk_dev *d);
/* Ring 0: prints `osprey-test-guest: stamp tag=T capacity_bytes=C config_changes=G`. */
void stamp_announce(struct stamp_state *st, struct blk_dev *d);
int stamp_until_reached(const struct stamp_state *st, const struct blk_opts *o);

/* ---- hostile.c ---- */
struct hostile_case {
    const char *name;
    int status;                 /* >=0 byte; -1 timeout; -2 needs_reset; -3 unwritten */
    u8 expected;
    u8 ok;
};
struct hostile_result {
    u32 n;
    struct hostile_case c[BLK_MAX_HOSTILE];
    int post_ok;                /* a normal read works afterwards */
};
void hostile_run(struct blk_dev *d, const struct blk_opts *o,
                 struct hostile_result *r);  /* ring 0 driver of ring-3 cases */

/* ---- broken_idle.c ---- */
void broken_idle_run(struct blk_dev *d, const struct blk_opts *o);  /* ring 0 */

/* ---- fmt.c (any ring): bounded string builder ---- */
struct sbuf {
    char *p;
    size_t len, cap;
};
void sb_putc(struct sbuf *b, char c);
void sb_puts(struct sbuf *b, const char *s);
void sb_u64(struct sbuf *b, u64 v);
void sb_i64(struct sbuf *b, i64 v);
void sb_hex(struct sbuf *b, u64 v);     /* "0x..." as a JSON string */
void sb_str(struct sbuf *b, const char *s, size_t n);  /* JSON string */
void sb_key(struct sbuf *b, const char *k);    /* ,"k": (comma unless first) */

/* ---- blk_report.c (ring 3) ---- */
struct blk_summary {
    struct blk_dev *d;
    const struct blk_opts *o;
    const char *error;
    struct blk_run *runs[4];
    u32 nruns;
    struct extra_job *extra;
    struct hostile_result *hostile;
    int reinit_done;
    struct stamp_state *stamp;  /* rw=stamp */
    u64 failures;               /* -> exit 1 when non-zero */
};
long blk_report_job(void *arg); /* writes blkmem.report, NUL-terminated */

/* ---- blk_main.c (ring 0) ---- */
NORETURN void blk_main(const char *cmdline, size_t len);

/* ---- user.S: run_in_user with RFLAGS.IF=1 (irq mode) ---- */
long run_in_user_rflags(user_fn fn, void *arg, void *stack_top, u64 rflags);

/* ---- blkmem.c: big ring-3-visible buffers ---- */
struct blkmem {
    u8 rings[BLK_MAX_QUEUES][BLK_RING_BYTES];
    u8 data[BLK_DATA_POOL];
    u8 misc[BLK_MISC_BYTES];
    struct blk_req reqs[BLK_MAX_QUEUES][BLK_MAX_QSIZE];
    struct vring_desc ind[BLK_MAX_QUEUES][BLK_MAX_QSIZE][BLK_IND_MAX];  /* indirect=1 tables */
    u16 freelist[BLK_MAX_QUEUES][BLK_MAX_QSIZE];
    u64 lat[BLK_MAX_SAMPLES];
    u64 lat_tmp[BLK_MAX_SAMPLES];
    char report[BLK_REPORT_BYTES];
};
extern struct blkmem blkmem;            /* NOLOAD, not zeroed at boot */

/* kvmclock.c: the TSC frequency KVM's pvclock gives, in kHz; 0 without one. */
u64 kvmclock_tsc_khz(void);

#endif
