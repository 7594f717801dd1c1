/*
 * guest.h - common C types, port/CPU inline helpers and the prototypes
 * shared between the test guest's C files.
 */
#ifndef OSPREY_GUEST_H
#define OSPREY_GUEST_H

#include "layout.h"

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long u64;
typedef long i64;
typedef unsigned long size_t;

#define NULL ((void *)0)
#define NORETURN __attribute__((noreturn))

static inline void outb(u16 port, u8 val)
{
    __asm__ volatile("outb %0, %1" : : "a"(val), "Nd"(port) : "memory");
}

static inline u64 rdtsc(void)
{
    u32 lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((u64)hi << 32) | lo;
}

static inline NORETURN void halt_forever(void)
{
    for (;;)
        __asm__ volatile("cli; hlt" ::: "memory");
}

/* libc.c */
void *memset(void *dst, int c, size_t n);
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strnlen(const char *s, size_t max);

/* cmdline.c: tokens of a command line (shared with blk_cmdline.c). */
/* The next whitespace-separated token of s[0..len) from *at (advanced past it): its length,
 * 0 at the end, and its start in *tok. */
size_t cmdline_token(const char *s, size_t len, size_t *at, const char **tok);
/* The length of key (NUL-terminated) when token [t, t+n) starts with it, else 0. */
size_t prefix_len(const char *t, size_t n, const char *key);

/* serial.c: COM1 output, no LSR polling. */
void putc_serial(char c);
void puts_serial(const char *s);
void put_u64(u64 v);
void put_hex(u64 v);
void put_json_string(const char *s, size_t len);
void ensure_line_start(void);

/* main.c */
NORETURN void guest_exit(u8 status);

/* kbd.c: mode=kbd, the polled i8042 keyboard driver (resets on Ctrl+Alt+Del). */
NORETURN void kbd_main(void);
void kbd_start(void);   /* the probe and the ready line (mode=agent) */
void kbd_poll(void);    /* ring 0: the key bytes waiting; resets on Ctrl+Alt+Del */

/* cpu.c: GDT TSS slot, IDT, exception reporting. */
void cpu_init(void);
NORETURN void trigger_triple_fault(void);

/* user.S: run fn(arg) in ring 3 (CPL 3, interrupts off, no port I/O),
 * return its return value. Ring-3 exceptions are fatal (status 3). */
typedef long (*user_fn)(void *arg);
long run_in_user_on(user_fn fn, void *arg, void *stack_top);
extern char user_stack_top[];   /* default ring-3 stack (boot.S) */
static inline long run_in_user(user_fn fn, void *arg)
{
    return run_in_user_on(fn, arg, user_stack_top);
}

/* cmdline.c */
enum guest_mode {
    MODE_REPORT, MODE_USER, MODE_TRIPLE_FAULT, MODE_RESET, MODE_HALT, MODE_EXCEPTION,
    MODE_MMIO_EXEC, MODE_BLK, MODE_KBD, MODE_INT3_LOOP, MODE_VSOCK_ECHO, MODE_VSOCK_CONNECT,
    MODE_NET_ECHO, MODE_AGENT
};
struct cmdline_opts {
    enum guest_mode mode;
    u8 exit_status;
    int boot_timer;     /* `boot_timer`: signal "booted" as Firecracker's guests do */
};
/* Returns 0, or prints an error line and returns -1. */
int cmdline_parse(const char *s, size_t len, struct cmdline_opts *out);
int parse_decimal(const char *v, size_t n, u64 *out);

/* mptable.c */
#define MP_MAX_CPUS 256
struct mp_info {
    int found;              /* floating pointer + config table valid */
    u32 cpus;               /* processor entries seen */
    u8 apic_ids[MP_MAX_CPUS];
    int bsp_apic_id;        /* -1 if no entry has the BP flag */
};
void mp_scan(struct mp_info *out);

/* user_bench.c: the ring-3 integer loop. */
struct user_bench {
    u64 iterations;
    u64 cycles;
    u64 result;
};
#define USER_BENCH_MAGIC 0x05e9
long user_bench(void *arg);

/* int3_loop.c: mode=int3-loop, ring-3 int3 round trips forever. */
NORETURN void int3_loop_main(void);

/* start_info (PVH), see xen/include/public/arch-x86/hvm/start_info.h */
#define HVM_START_MAGIC 0x336ec578
struct hvm_start_info {
    u32 magic;
    u32 version;
    u32 flags;
    u32 nr_modules;
    u64 modlist_paddr;
    u64 cmdline_paddr;
    u64 rsdp_paddr;
    u64 memmap_paddr;       /* version >= 1 */
    u32 memmap_entries;     /* version >= 1 */
    u32 reserved;
};
struct hvm_memmap_entry {
    u64 addr;
    u64 size;
    u32 type;
    u32 reserved;
};
#define E820_RAM 1

/* blk_main.c: mode=blk (virtio-blk driver + load generator), see blk.h */
NORETURN void blk_main(const char *cmdline, size_t len);
/* net.c: mode=net-echo (virtio-net driver; ARP, ICMP echo, UDP port 7 answered for ip=) */
NORETURN void net_main(const char *cmdline, size_t len);
/* Ring 0: the device set up and the ready line when the command line has ip=; 0 without
 * ip= (no device touched); a failed set-up exits 1. */
int net_start(const char *cmdline, size_t len);
int net_step(void);     /* ring 3: one round; 1 if frames came */

/* agent.c: mode=agent and blk's hang=3: vsock echo, net echo and Ctrl+Alt+Del at once */
NORETURN void agent_main(const char *cmdline, size_t len);

/* vsock_main.c: mode=vsock-echo / mode=vsock-connect (virtio-vsock), see vsock.h */
NORETURN void vsock_main(const char *cmdline, size_t len, int connect);

/* report.c */
struct user_bench;
void print_report(const struct hvm_start_info *si, const char *cmdline,
                  size_t cmdline_len, const struct mp_info *mp,
                  const struct user_bench *ub);

#endif
