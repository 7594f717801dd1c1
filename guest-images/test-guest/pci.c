/*
 * pci.c - PCI configuration access for bus 0 (ring 0 only).
 *
 * Owns: configuration mechanism #1 (address port 0xCF8, data 0xCFC), the
 * function-0 scan of slots 0-31 for a vendor/device pair, BAR decoding
 * (32- and 64-bit memory BARs, the address the firmware/VMM assigned) and
 * setting the command register's memory-space and bus-master bits.
 * Every access is two port exits; callers keep the number of accesses small.
 */
#include "blk.h"
#include "hw.h"

#define PCI_ADDR 0xcf8
#define PCI_DATA 0xcfc

static void pci_select(u8 slot, u8 off)
{
    outl(PCI_ADDR, 0x80000000u | ((u32)(slot & 31) << 11) | (off & 0xfc));
}

u32 pci_read32(u8 slot, u8 off)
{
    pci_select(slot, off);
    return inl(PCI_DATA);
}

u16 pci_read16(u8 slot, u8 off)
{
    pci_select(slot, off);
    return inw(PCI_DATA + (off & 2));
}

u8 pci_read8(u8 slot, u8 off)
{
    pci_select(slot, off);
    return inb(PCI_DATA + (off & 3));
}

void pci_write16(u8 slot, u8 off, u16 v)
{
    pci_select(slot, off);
    outw(PCI_DATA + (off & 2), v);
}

void pci_write32(u8 slot, u8 off, u32 v)
{
    pci_select(slot, off);
    outl(PCI_DATA, v);
}

int pci_find(u16 vendor, u16 device, u32 nth)
{
    u32 want = ((u32)device << 16) | vendor;
    for (int slot = 0; slot < 32; slot++)
        if (pci_read32((u8)slot, 0) == want && nth-- == 0)
            return slot;
    return -1;
}

u64 pci_bar(u8 slot, int bar)
{
    if (bar < 0 || bar > 5)
        return 0;
    u8 off = (u8)(0x10 + 4 * bar);
    u32 lo = pci_read32(slot, off);
    if (lo & 1)
        return 0;                       /* I/O BAR: not used */
    u64 a = lo & ~0xfu;
    if (((lo >> 1) & 3) == 2 && bar < 5)
        a |= (u64)pci_read32(slot, (u8)(off + 4)) << 32;
    return a;
}

void pci_enable_mem_master(u8 slot)
{
    u16 cmd = pci_read16(slot, 0x04);
    if ((cmd & 6) != 6)
        pci_write16(slot, 0x04, cmd | 6);
}
