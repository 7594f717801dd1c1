/*
 * mmu.c - uncached mappings for device MMIO (ring 0).
 *
 * Owns: making a BAR range usable: below 4 GiB it is already identity
 * mapped by boot.S (the top GiB, 0xC0000000 up, is PCD|PWT; lower 2 MiB
 * pages get PCD|PWT set here); above 4 GiB (firmware may place 64-bit BARs
 * there, e.g. SeaBIOS under QEMU) one extra page directory maps one 1 GiB
 * window identity, PCD|PWT, through a free PDPT slot (one window; above 512
 * GiB through a spare PDPT in a free PML4 slot, below 128 TiB, as Cloud
 * Hypervisor puts 64-bit BARs near 64 TiB). Only the few 2 MiB entries
 * covering the range are written.
 */
#include "blk.h"

#define PTE_FLAGS_UC 0x9f   /* P|RW|US|PWT|PCD|PS(0x80) */
#define GIB (1ULL << 30)

extern u64 pml4[512], pdpt[512], pd[2048], pd_high[512], pdpt_high[512];
static u64 high_window = 0;     /* base of the mapped 1 GiB window, 0 = none */

static void flush_tlb(void)
{
    u64 cr3;
    __asm__ volatile("mov %%cr3, %0; mov %0, %%cr3" : "=r"(cr3) : : "memory");
}

int mmio_map_uc(u64 addr, u64 len)
{
    if (len == 0)
        return 0;
    u64 end = addr + len;
    if (end <= 4 * GIB) {
        int changed = 0;
        for (u64 i = addr >> 21; i <= (end - 1) >> 21; i++) {
            if ((pd[i] & 0x18) != 0x18) {
                pd[i] |= 0x18;
                changed = 1;
            }
        }
        if (changed)
            flush_tlb();
        return 0;
    }
    if (addr < 4 * GIB || end > (1ULL << 47))
        return -1;
    u64 base = addr & ~(GIB - 1);
    if ((end - 1) >> 30 != addr >> 30)
        return -1;                      /* straddles two GiB windows */
    if (high_window && high_window != base)
        return -1;
    if (!high_window) {
        high_window = base;
        u64 *dir = pdpt;
        if (base >> 39) {
            pml4[base >> 39] = (u64)pdpt_high | 7;
            dir = pdpt_high;
        }
        dir[(base >> 30) & 511] = (u64)pd_high | 7;
    }
    for (u64 i = (addr - base) >> 21; i <= (end - 1 - base) >> 21; i++)
        pd_high[i] = (base + (i << 21)) | PTE_FLAGS_UC;
    flush_tlb();
    return 0;
}
