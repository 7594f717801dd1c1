/*
 * boot.S - PVH 32-bit entry and the switch to 64-bit long mode.
 *
 * Owns: the GDT, the precomputed identity page tables (first 4 GiB, 2 MiB
 * pages, P|RW|US; the top GiB, 0xC0000000-0xFFFFFFFF, i.e. the whole MMIO
 * gap, PCD|PWT; plus an empty spare PD for mmu.c), the boot/RSP0/IST stacks, EFER/CR0/CR4 setup, the far
 * jump to 64-bit code, .bss clearing and the call into kmain().
 *
 * PVH ABI on entry: 32-bit protected mode, paging off, flat CS/DS,
 * EBX = physical address of struct hvm_start_info. No stack is assumed.
 */
#include "layout.h"

#define CR0_PE  (1 << 0)
#define CR0_WP  (1 << 16)
#define CR0_PG  (1 << 31)
#define CR4_PAE (1 << 5)
#define CR4_OSFXSR (1 << 9)
#define CR4_OSXMMEXCPT (1 << 10)
#define MSR_EFER 0xC0000080
#define EFER_LME (1 << 8)

/* Page-table entry bits. */
#define PTE_P   0x001
#define PTE_RW  0x002
#define PTE_US  0x004
#define PTE_PWT 0x008
#define PTE_PCD 0x010
#define PTE_PS  0x080

    .section .text.pvh_entry, "ax", @progbits
    .code32
    .globl pvh_start32
pvh_start32:
    cli
    cld
    lgdt    gdt_ptr32
    movl    $SEL_KERNEL_DS, %eax
    movl    %eax, %ds
    movl    %eax, %es
    movl    %eax, %ss
    movl    $boot_stack_top, %esp

    /* CR4: PAE (+ OSFXSR/OSXMMEXCPT so ring-3 code may use SSE later). */
    movl    %cr4, %eax
    orl     $(CR4_PAE | CR4_OSFXSR | CR4_OSXMMEXCPT), %eax
    movl    %eax, %cr4

    movl    $pml4, %eax
    movl    %eax, %cr3

    movl    $MSR_EFER, %ecx
    rdmsr
    orl     $EFER_LME, %eax
    wrmsr

    movl    %cr0, %eax
    orl     $(CR0_PG | CR0_WP | CR0_PE), %eax
    movl    %eax, %cr0

    ljmp    $SEL_KERNEL_CS, $long_entry

    .code64
long_entry:
    movl    $SEL_KERNEL_DS, %eax
    movl    %eax, %ds
    movl    %eax, %es
    movl    %eax, %ss
    xorl    %eax, %eax
    movl    %eax, %fs
    movl    %eax, %gs
    movq    $boot_stack_top, %rsp
    movl    %ebx, %ebx              /* zero-extend start_info paddr */

    /* Clear .bss (small; the stacks live in .stacks and are not cleared). */
    movq    $__bss_start, %rdi
    movq    $__bss_end, %rcx
    subq    %rdi, %rcx
    shrq    $3, %rcx
    xorl    %eax, %eax
    rep stosq

    movq    %rbx, %rdi
    call    kmain
1:  cli
    hlt
    jmp     1b

/* ------------------------------------------------------------------ */
    .section .rodata
    .balign 8
gdt_ptr32:
    .word   gdt_end - gdt - 1
    .long   gdt

/* ------------------------------------------------------------------ */
    .section .data
    .balign 16
    .globl gdt
gdt:
    .quad   0                       /* 0x00 null */
    .quad   0x00cf9a000000ffff      /* 0x08 kernel CS32 */
    .quad   0x00af9a000000ffff      /* 0x10 kernel CS64 */
    .quad   0x00cf92000000ffff      /* 0x18 kernel DS */
    .quad   0x00cffa000000ffff      /* 0x20 user CS32 (DPL 3) */
    .quad   0x00cff2000000ffff      /* 0x28 user DS (DPL 3) */
    .quad   0x00affa000000ffff      /* 0x30 user CS64 (DPL 3) */
    .quad   0                       /* 0x38 unused */
    .quad   0, 0                    /* 0x40 TSS, filled in by cpu_init() */
gdt_end:

/*
 * Identity map of 0..4 GiB with 2 MiB pages, all P|RW|US. The top GiB
 * (MMIO: IOAPIC, LAPIC, ...) is additionally PCD|PWT. Precomputed here so
 * ring 0 (emulated, ~600 ns/instruction on kvm_pvm) runs no setup loop.
 */
    .section .data.pagetables, "aw", @progbits
    .balign 4096
    .globl pml4
pml4:
    .quad   pdpt + (PTE_P | PTE_RW | PTE_US)
    .fill   511, 8, 0
    .globl pdpt, pd, pd_high
pdpt:
    .quad   pd + 0x0000 + (PTE_P | PTE_RW | PTE_US)
    .quad   pd + 0x1000 + (PTE_P | PTE_RW | PTE_US)
    .quad   pd + 0x2000 + (PTE_P | PTE_RW | PTE_US)
    .quad   pd + 0x3000 + (PTE_P | PTE_RW | PTE_US)
    .fill   508, 8, 0
pd:
    .set    i, 0
    .rept   2048
    .if     i >= 1536
    .quad   (i << 21) | (PTE_P | PTE_RW | PTE_US | PTE_PS | PTE_PCD | PTE_PWT)
    .else
    .quad   (i << 21) | (PTE_P | PTE_RW | PTE_US | PTE_PS)
    .endif
    .set    i, i + 1
    .endr
/* Spare page directory for one 1 GiB MMIO window above 4 GiB (mmu.c). */
pd_high:
    .fill   512, 8, 0
/* Spare PDPT for that window when it lies above 512 GiB (Cloud Hypervisor's 64-bit BARs sit
 * near the top of the physical address space). */
    .globl pdpt_high
pdpt_high:
    .fill   512, 8, 0

/* ------------------------------------------------------------------ */
    .section .stacks, "aw", @nobits
    .balign 4096
boot_stack:
    .skip   KERNEL_STACK_SIZE
boot_stack_top:
    .globl rsp0_stack_top
    .skip   RSP0_STACK_SIZE
rsp0_stack_top:
    .globl df_stack_top
    .skip   DF_STACK_SIZE
df_stack_top:
    .globl user_stack_top
    .skip   USER_STACK_SIZE
user_stack_top:
