/*
 * user.S - ring-0 <-> ring-3 transitions for run_in_user().
 *
 * Owns: run_in_user_on(fn, arg, stack_top): saves the callee-saved
 * registers and kernel RSP, builds an iretq frame (CS = user CS64|3,
 * SS = user DS|3, RFLAGS = 0x2, interrupts off) and enters fn(arg) in ring 3
 * with its return address set to the ring-3 trampoline user_exit. The
 * run_in_user_rflags(fn, arg, stack_top, rflags) is the same with the
 * given RFLAGS (mode=blk irq=1 passes 0x202 so MSIs arrive in ring 3). The
 * trampoline executes int3 (DPL-3 gate); isr_3 recognises it and jumps to
 * user_return, which restores the kernel context and returns fn's RAX as
 * run_in_user_on's result. Not reentrant (single CPU, one level).
 */
#include "layout.h"

    .bss
    .balign 8
saved_kernel_rsp:
    .quad   0

    .text
/* long run_in_user_on(long (*fn)(void *), void *arg, void *stack_top) */
    .globl run_in_user_on, run_in_user_rflags
run_in_user_on:
    movl    $0x2, %ecx              /* RFLAGS: IF=0, IOPL=0 */
/* long run_in_user_rflags(fn, arg, stack_top, u64 rflags) */
run_in_user_rflags:
    pushq   %rbx
    pushq   %rbp
    pushq   %r12
    pushq   %r13
    pushq   %r14
    pushq   %r15
    movq    %rsp, saved_kernel_rsp(%rip)

    andq    $-16, %rdx
    subq    $8, %rdx                /* ABI: (rsp + 8) % 16 == 0 at entry */
    movq    $user_exit, %rax
    movq    %rax, (%rdx)            /* fn returns into the trampoline */

    pushq   $SEL_USER_DS            /* SS */
    pushq   %rdx                    /* RSP */
    andq    $0x200, %rcx            /* only IF may be chosen */
    orq     $0x2, %rcx
    pushq   %rcx                    /* RFLAGS */
    pushq   $SEL_USER_CS            /* CS */
    pushq   %rdi                    /* RIP = fn */
    movq    %rsi, %rdi              /* arg */
    xorl    %eax, %eax              /* don't leak kernel values */
    xorl    %ebx, %ebx
    xorl    %ecx, %ecx
    xorl    %edx, %edx
    xorl    %esi, %esi
    xorl    %ebp, %ebp
    xorl    %r8d, %r8d
    xorl    %r9d, %r9d
    xorl    %r10d, %r10d
    xorl    %r11d, %r11d
    xorl    %r12d, %r12d
    xorl    %r13d, %r13d
    xorl    %r14d, %r14d
    xorl    %r15d, %r15d
    iretq

/* Reached from isr_3 on the RSP0 stack; RAX still holds fn's result. */
    .globl user_return
user_return:
    movq    saved_kernel_rsp(%rip), %rsp
    movl    $SEL_KERNEL_DS, %ecx
    movl    %ecx, %ds
    movl    %ecx, %es
    popq    %r15
    popq    %r14
    popq    %r13
    popq    %r12
    popq    %rbp
    popq    %rbx
    ret

/* Ring-3-only code: the one place int3 is allowed (see check.sh). */
    .section .user_text, "ax", @progbits
    .globl user_exit, user_exit_after_int3
user_exit:
    int3
user_exit_after_int3:
    ud2                             /* never resumed */
