/*
 * main.c - kmain(): the test guest's top-level flow.
 *
 * Owns: the ready line, start_info validation, reading the command line,
 * dispatching on mode= (report, user, triple-fault, reset, halt,
 * exception, mmio-exec, blk, kbd, int3-loop, vsock-echo, vsock-connect, net-echo, agent), the
 * boot-complete
 * byte of `boot_timer` (Firecracker's
 * boot timer: 123 written to 0xc0000000, as its rootfs init does) and the debug exit (final
 * `osprey-test-guest: exit N` line, then outb to 0xf4).
 */
#include "guest.h"

#define CMDLINE_MAX 4096
#define USER_ITERATIONS 1000000
#define MMIO_EXEC_ADDR 0xd0000000ULL
#define BOOT_TIMER_ADDR 0xc0000000ULL
#define BOOT_TIMER_DONE 123

static struct mp_info mp;

NORETURN void guest_exit(u8 status)
{
    ensure_line_start();
    puts_serial("osprey-test-guest: exit ");
    put_u64(status);
    putc_serial('\n');
    outb(PORT_DEBUG_EXIT, status);
    /* Osprey and QEMU's isa-debug-exit stop the VM on the write above (Osprey's vCPU may
     * still run the next write, which no Osprey device claims). Cloud Hypervisor has no
     * debug-exit device: power off through its ACPI sleep-control register; the status is
     * then only on the serial line above. */
    outb(PORT_ACPI_SLEEP_CONTROL, ACPI_SLEEP_S5);
    halt_forever();
}

static NORETURN void fail(const char *msg, u8 status)
{
    ensure_line_start();
    puts_serial("osprey-test-guest: error: ");
    puts_serial(msg);
    putc_serial('\n');
    guest_exit(status);
}

void kmain(u64 start_info_paddr)
{
    puts_serial("osprey-test-guest: ready\n");
    cpu_init();

    if (start_info_paddr == 0 ||
        start_info_paddr + sizeof(struct hvm_start_info) > 0x100000000ULL)
        fail("no start_info", EXIT_INTERNAL);
    const struct hvm_start_info *si = (const void *)start_info_paddr;
    if (si->magic != HVM_START_MAGIC)
        fail("bad start_info magic", EXIT_INTERNAL);

    const char *cmdline = "";
    size_t cmdline_len = 0;
    if (si->cmdline_paddr && si->cmdline_paddr < 0x100000000ULL) {
        u64 room = 0x100000000ULL - si->cmdline_paddr;
        cmdline = (const char *)si->cmdline_paddr;
        cmdline_len = strnlen(cmdline, room < CMDLINE_MAX ? room : CMDLINE_MAX);
    }

    struct cmdline_opts opts;
    if (cmdline_parse(cmdline, cmdline_len, &opts))
        guest_exit(EXIT_BAD_ARG);

    if (opts.boot_timer)
        *(volatile u8 *)BOOT_TIMER_ADDR = BOOT_TIMER_DONE;

    struct user_bench ub, *ubp = NULL;
    switch (opts.mode) {
    case MODE_TRIPLE_FAULT:
        trigger_triple_fault();
    case MODE_RESET:
        outb(PORT_I8042_CMD, 0xfe);
        halt_forever();
    case MODE_HALT:
        halt_forever();
    case MODE_EXCEPTION:
        __asm__ volatile("ud2");    /* -> EXCEPTION vector=6, exit 3 */
        halt_forever();
    case MODE_MMIO_EXEC:
        /* Jump into the MMIO gap, where no RAM backs the address: KVM cannot fetch the
         * instruction and stops the vCPU with an internal error on every KVM flavour. */
        ((void (*)(void))MMIO_EXEC_ADDR)();
        halt_forever();
    case MODE_USER:
        ub.iterations = USER_ITERATIONS;
        ub.cycles = ub.result = 0;
        if (run_in_user(user_bench, &ub) != USER_BENCH_MAGIC)
            fail("run_in_user returned a wrong value", EXIT_INTERNAL);
        ubp = &ub;
        break;
    case MODE_BLK:
        blk_main(cmdline, cmdline_len);     /* prints BLK, exits */
    case MODE_KBD:
        kbd_main();                         /* resets on Ctrl+Alt+Del */
    case MODE_INT3_LOOP:
        int3_loop_main();                   /* never returns */
    case MODE_VSOCK_ECHO:
    case MODE_VSOCK_CONNECT:
        vsock_main(cmdline, cmdline_len, opts.mode == MODE_VSOCK_CONNECT);  /* exits */
    case MODE_NET_ECHO:
        net_main(cmdline, cmdline_len);     /* answers for as long as the VM runs */
    case MODE_AGENT:
        agent_main(cmdline, cmdline_len);   /* serves for as long as the VM runs */
    case MODE_REPORT:
        break;
    }

    mp_scan(&mp);
    print_report(si, cmdline, cmdline_len, &mp, ubp);
    guest_exit(opts.exit_status);
}
