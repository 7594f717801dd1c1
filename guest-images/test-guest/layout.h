/*
 * layout.h - constants shared by the assembly and C sides: GDT selectors,
 * stack sizes, TSS offsets, I/O ports and exit statuses.
 */
#ifndef OSPREY_LAYOUT_H
#define OSPREY_LAYOUT_H

/* GDT selectors (Linux-like layout). */
#define SEL_KERNEL_CS32 0x08
#define SEL_KERNEL_CS   0x10
#define SEL_KERNEL_DS   0x18
#define SEL_USER_CS32   0x23    /* 0x20 | RPL 3 */
#define SEL_USER_DS     0x2b    /* 0x28 | RPL 3 */
#define SEL_USER_CS     0x33    /* 0x30 | RPL 3 */
#define SEL_TSS         0x40    /* 16-byte 64-bit TSS descriptor */
#define GDT_ENTRIES     10      /* 8-byte slots, TSS uses slots 8 and 9 */

/* Stacks (bytes). */
#define KERNEL_STACK_SIZE 16384 /* boot / kmain stack */
#define RSP0_STACK_SIZE   8192  /* TSS.RSP0: entries from ring 3 */
#define DF_STACK_SIZE     4096  /* TSS.IST1: double fault */
#define USER_STACK_SIZE   16384 /* default ring-3 stack for run_in_user */

/* 64-bit TSS field offsets. */
#define TSS_RSP0   4
#define TSS_IST1   36
#define TSS_IOMAP  102
#define TSS_SIZE   104

/* I/O ports. */
#define PORT_COM1       0x3f8
#define PORT_DEBUG_EXIT 0xf4
#define PORT_I8042_CMD  0x64
/* Cloud Hypervisor's ACPI sleep-control register (its FADT's SLEEP_CONTROL_REG): writing
 * SLP_EN (bit 5) with SLP_TYP 5 (S5, bits 2-4) powers the VM off. */
#define PORT_ACPI_SLEEP_CONTROL 0x600
#define ACPI_SLEEP_S5           ((5 << 2) | (1 << 5))

/* Exit statuses. */
#define EXIT_OK         0
#define EXIT_BAD_ARG    2
#define EXIT_EXCEPTION  3
#define EXIT_INTERNAL   4

#endif
