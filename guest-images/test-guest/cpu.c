/*
 * cpu.c - descriptor tables and exception reporting.
 *
 * Owns: the 64-bit TSS (RSP0 for ring-3 -> ring-0 entries, IST1 for #DF),
 * its GDT descriptor and ltr; the IDT for vectors 0-31 (vector 3 is a
 * DPL-3 gate, the ring-3 return path of run_in_user; IDT_ENTRIES slots so
 * apic.c can add device vectors with idt_set_gate()); the C exception
 * handler printing `EXCEPTION vector=N rip=0x.. err=0x..` and exiting with
 * status 3; and the triple-fault trigger (empty IDT + ud2).
 */
#include "guest.h"
#include "blk.h"

struct exception_frame {
    u64 r15, r14, r13, r12, r11, r10, r9, r8;
    u64 rdi, rsi, rbp, rbx, rdx, rcx, rax;
    u64 vector, error;
    u64 rip, cs, rflags, rsp, ss;
};

struct idt_gate {
    u16 off_lo;
    u16 selector;
    u8 ist;
    u8 type_attr;
    u16 off_mid;
    u32 off_hi;
    u32 zero;
} __attribute__((packed));

struct desc_ptr {
    u16 limit;
    u64 base;
} __attribute__((packed));

extern u64 gdt[GDT_ENTRIES];
extern const u64 isr_table[32];
extern char rsp0_stack_top[], df_stack_top[];

static struct idt_gate idt[IDT_ENTRIES] __attribute__((aligned(16)));
static u8 tss[TSS_SIZE] __attribute__((aligned(16)));

static void put64(u8 *p, u64 v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (u8)(v >> (8 * i));
}

void cpu_init(void)
{
    /* TSS: RSP0, IST1, no I/O bitmap (offset past the limit). */
    put64(tss + TSS_RSP0, (u64)rsp0_stack_top);
    put64(tss + TSS_IST1, (u64)df_stack_top);
    tss[TSS_IOMAP] = TSS_SIZE & 0xff;
    tss[TSS_IOMAP + 1] = TSS_SIZE >> 8;

    u64 base = (u64)tss, limit = TSS_SIZE - 1;
    gdt[SEL_TSS / 8] = (limit & 0xffff) | ((base & 0xffffff) << 16) |
                       (0x89ULL << 40) /* present, 64-bit TSS available */ |
                       ((limit >> 16 & 0xf) << 48) | ((base >> 24 & 0xff) << 56);
    gdt[SEL_TSS / 8 + 1] = base >> 32;
    __asm__ volatile("ltr %w0" : : "r"(SEL_TSS) : "memory");

    for (int v = 0; v < 32; v++) {
        u64 h = isr_table[v];
        idt[v].off_lo = (u16)h;
        idt[v].selector = SEL_KERNEL_CS;
        idt[v].ist = (v == 8) ? 1 : 0;
        /* Interrupt gate; DPL 3 only for int3 (ring-3 return path). */
        idt[v].type_attr = (v == 3) ? 0xee : 0x8e;
        idt[v].off_mid = (u16)(h >> 16);
        idt[v].off_hi = (u32)(h >> 32);
        idt[v].zero = 0;
    }
    struct desc_ptr p = { sizeof(idt) - 1, (u64)idt };
    __asm__ volatile("lidt %0" : : "m"(p) : "memory");
}

void idt_set_gate(int vec, u64 h, int dpl)
{
    if (vec < 0 || vec >= IDT_ENTRIES)
        return;
    idt[vec].off_lo = (u16)h;
    idt[vec].selector = SEL_KERNEL_CS;
    idt[vec].ist = 0;
    idt[vec].type_attr = (u8)(0x8e | (dpl & 3) << 5);
    idt[vec].off_mid = (u16)(h >> 16);
    idt[vec].off_hi = (u32)(h >> 32);
    idt[vec].zero = 0;
}

void exception_handler(struct exception_frame *f)
{
    u64 cr2;
    __asm__ volatile("mov %%cr2, %0" : "=r"(cr2));
    ensure_line_start();
    puts_serial("EXCEPTION vector=");
    put_u64(f->vector);
    puts_serial(" rip=0x");
    put_hex(f->rip);
    puts_serial(" err=0x");
    put_hex(f->error);
    puts_serial("\nEXCEPTION-DETAIL cs=0x");
    put_hex(f->cs);
    puts_serial(" rsp=0x");
    put_hex(f->rsp);
    puts_serial(" rflags=0x");
    put_hex(f->rflags);
    puts_serial(" cr2=0x");
    put_hex(cr2);
    putc_serial('\n');
    guest_exit(EXIT_EXCEPTION);
}

NORETURN void trigger_triple_fault(void)
{
    struct desc_ptr p = { 0, 0 };
    __asm__ volatile("lidt %0; ud2" : : "m"(p) : "memory");
    halt_forever();
}
