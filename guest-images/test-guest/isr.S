/*
 * isr.S - entry stubs for exception vectors 0-31.
 *
 * Owns: pushing a uniform frame (GPRs, vector, error code, CPU frame) and
 * calling exception_handler() in C, which prints and exits with status 3.
 * Vector 3 (int3, DPL-3 gate) first checks whether it is the ring-3 exit
 * trampoline of run_in_user(); if so it hands off to user_return (user.S).
 * The address table isr_table[] is used by cpu_init() to build the IDT.
 * Also the device interrupt stubs for mode=blk irq=1 (vectors IRQ_VEC_BASE
 * + queue): count into irq_counts[q] and irq_total, write the LAPIC EOI,
 * iretq; and the spurious-vector stub (iretq only, no EOI).
 */
#include "layout.h"

    .text

/* Vectors that push a hardware error code. */
.macro ISR vec
    .balign 16
isr_\vec:
    .if (\vec == 8) || (\vec == 10) || (\vec == 11) || (\vec == 12) || (\vec == 13) || (\vec == 14) || (\vec == 17) || (\vec == 21) || (\vec == 29) || (\vec == 30)
    .else
    pushq   $0
    .endif
    pushq   $\vec
    jmp     isr_common
.endm

/* int3: frame is RIP, CS, RFLAGS, RSP, SS (no error code). */
    .balign 16
isr_3:
    cmpq    $user_exit_after_int3, 0(%rsp)
    jne     1f
    testb   $3, 8(%rsp)
    jz      1f
    jmp     user_return
1:  pushq   $0
    pushq   $3
    jmp     isr_common

    ISR 0
    ISR 1
    ISR 2
    ISR 4
    ISR 5
    ISR 6
    ISR 7
    ISR 8
    ISR 9
    ISR 10
    ISR 11
    ISR 12
    ISR 13
    ISR 14
    ISR 15
    ISR 16
    ISR 17
    ISR 18
    ISR 19
    ISR 20
    ISR 21
    ISR 22
    ISR 23
    ISR 24
    ISR 25
    ISR 26
    ISR 27
    ISR 28
    ISR 29
    ISR 30
    ISR 31

/* Stack now: vector, error code, RIP, CS, RFLAGS, RSP, SS. */
isr_common:
    pushq   %rax
    pushq   %rcx
    pushq   %rdx
    pushq   %rbx
    pushq   %rbp
    pushq   %rsi
    pushq   %rdi
    pushq   %r8
    pushq   %r9
    pushq   %r10
    pushq   %r11
    pushq   %r12
    pushq   %r13
    pushq   %r14
    pushq   %r15
    movl    $SEL_KERNEL_DS, %eax    /* DS/ES may have been nulled by ring 3 */
    movl    %eax, %ds
    movl    %eax, %es
    cld
    movq    %rsp, %rdi              /* struct exception_frame * */
    call    exception_handler
2:  cli
    hlt
    jmp     2b

    .section .rodata
    .balign 8
    .globl isr_table
isr_table:
    .irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .quad   isr_\v
    .endr

/* ---- MSI-X completion interrupts (apic.c installs the gates) ---- */
    .text
.macro IRQ q
    .balign 16
irq_q\q:
    pushq   %rax
    incq    irq_counts+8*\q(%rip)
    incq    irq_total(%rip)
    movq    $0xfee000b0, %rax       /* LAPIC EOI */
    movl    $0, (%rax)
    popq    %rax
    iretq
.endm
    IRQ 0
    IRQ 1
    IRQ 2
    IRQ 3
    IRQ 4
    IRQ 5
    IRQ 6
    IRQ 7

    .balign 16
    .globl irq_spurious
irq_spurious:
    iretq

    .section .rodata
    .balign 8
    .globl irq_stub_table
irq_stub_table:
    .irp q, 0,1,2,3,4,5,6,7
    .quad   irq_q\q
    .endr

    .bss
    .balign 8
    .globl irq_counts, irq_total
irq_counts:
    .skip   8 * 8
irq_total:
    .quad   0
