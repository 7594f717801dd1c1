/*
 * apic.c - local APIC set-up for MSI-X completions (ring 0, irq=1 only).
 *
 * Owns: masking the legacy 8259 PICs, software-enabling the xAPIC (SVR
 * with a spurious vector), TPR 0, masking the LVT timer/LINT0/LINT1/error
 * entries so nothing but the device's MSIs arrive, reading the APIC id for
 * the MSI address, and installing the IDT gates for the per-queue vectors
 * (stubs in isr.S count into irq_counts[] and write the EOI register).
 */
#include "blk.h"
#include "hw.h"

#define LAPIC 0xfee00000ULL
#define LAPIC_ID    0x20
#define LAPIC_TPR   0x80
#define LAPIC_SVR   0xf0
#define LAPIC_LVT_TIMER 0x320
#define LAPIC_LVT_LINT0 0x350
#define LAPIC_LVT_LINT1 0x360
#define LAPIC_LVT_ERR   0x370
#define LVT_MASK (1u << 16)

extern const u64 irq_stub_table[BLK_MAX_QUEUES];
extern char irq_spurious[];

u32 apic_init_for_msi(void)
{
    outb(0x21, 0xff);                   /* mask both 8259s */
    outb(0xa1, 0xff);
    mmio_w32(LAPIC + LAPIC_LVT_TIMER, LVT_MASK);
    mmio_w32(LAPIC + LAPIC_LVT_LINT0, LVT_MASK);
    mmio_w32(LAPIC + LAPIC_LVT_LINT1, LVT_MASK);
    mmio_w32(LAPIC + LAPIC_LVT_ERR, LVT_MASK);
    mmio_w32(LAPIC + LAPIC_TPR, 0);
    mmio_w32(LAPIC + LAPIC_SVR, 0x100 | IRQ_VEC_SPUR);
    for (int q = 0; q < BLK_MAX_QUEUES; q++)
        idt_set_gate(IRQ_VEC_BASE + q, irq_stub_table[q], 0);
    idt_set_gate(IRQ_VEC_SPUR, (u64)irq_spurious, 0);
    return mmio_r32(LAPIC + LAPIC_ID) >> 24;
}
