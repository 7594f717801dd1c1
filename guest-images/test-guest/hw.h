/*
 * hw.h - inline hardware access helpers for the virtio-blk driver:
 * 8/16/32-bit port I/O (ring 0 only: ring-3 port I/O is a #GP on kvm_pvm),
 * volatile MMIO loads/stores (any ring), and the barriers the split
 * virtqueue needs (compiler barrier; mfence for store->load ordering).
 */
#ifndef OSPREY_HW_H
#define OSPREY_HW_H

#include "guest.h"

static inline void outw(u16 port, u16 val)
{
    __asm__ volatile("outw %0, %1" : : "a"(val), "Nd"(port) : "memory");
}

static inline void outl(u16 port, u32 val)
{
    __asm__ volatile("outl %0, %1" : : "a"(val), "Nd"(port) : "memory");
}

static inline u8 inb(u16 port)
{
    u8 v;
    __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port) : "memory");
    return v;
}

static inline u16 inw(u16 port)
{
    u16 v;
    __asm__ volatile("inw %1, %0" : "=a"(v) : "Nd"(port) : "memory");
    return v;
}

static inline u32 inl(u16 port)
{
    u32 v;
    __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port) : "memory");
    return v;
}

static inline u8 mmio_r8(u64 a) { return *(volatile u8 *)a; }
static inline u16 mmio_r16(u64 a) { return *(volatile u16 *)a; }
static inline u32 mmio_r32(u64 a) { return *(volatile u32 *)a; }
static inline void mmio_w8(u64 a, u8 v) { *(volatile u8 *)a = v; }
static inline void mmio_w16(u64 a, u16 v) { *(volatile u16 *)a = v; }
static inline void mmio_w32(u64 a, u32 v) { *(volatile u32 *)a = v; }

#define barrier() __asm__ volatile("" ::: "memory")
static inline void mb(void) { __asm__ volatile("mfence" ::: "memory"); }
static inline void cpu_relax(void) { __asm__ volatile("pause" ::: "memory"); }

#endif
