/*
 * kbd.c - mode=kbd: an i8042 keyboard driver, polled in ring 0.
 *
 * Owns: probing the controller as Linux's i8042 driver does (flush, self
 * test 0xaa -> 0x55, config byte read with translation required, written
 * back with the keyboard interrupt off and read again, keyboard interface
 * test 0xab -> 0x00) and the keyboard as atkbd does (identify 0xf2 -> fa ab
 * 41, translated); then polling the status register for key bytes (set 1)
 * until Ctrl, Alt and Delete are down together, and resetting through the
 * controller (0xfe on port 0x64), as Linux's ctrl_alt_del() with reboot=k.
 * kbd_start()/kbd_poll() give mode=agent the same probe and a non-blocking
 * check between its ring-3 rounds.
 * Lines: `osprey-test-guest: kbd ready ctr=<config byte, hex>`, then
 * `osprey-test-guest: kbd ctrl-alt-del` before the reset. A probe step that
 * fails prints `osprey-test-guest: error: kbd ...` and exits 4.
 */
#include "guest.h"
#include "hw.h"

#define PORT_I8042_DATA 0x60
#define STATUS_OUTPUT_FULL 0x01
#define CONFIG_KEYBOARD_INTERRUPT 0x01
#define CONFIG_TRANSLATE 0x40
/* A byte not there after this many status reads never comes (each read exits to the VMM). */
#define WAIT_READS 100000
#define FLUSH_MAX 32

#define SET1_EXTENDED 0xe0
#define SET1_RELEASE 0x80
#define SET1_CTRL 0x1d
#define SET1_ALT 0x38
#define SET1_DELETE 0x53    /* after 0xe0 */

static NORETURN void kbd_fail(const char *what, u64 got)
{
    ensure_line_start();
    puts_serial("osprey-test-guest: error: kbd ");
    puts_serial(what);
    puts_serial(" got=");
    put_hex(got);
    putc_serial('\n');
    guest_exit(EXIT_INTERNAL);
}

/* The next byte from port 0x60, or -1 if none came. */
static int read_byte(void)
{
    for (u32 i = 0; i < WAIT_READS; i++) {
        if (inb(PORT_I8042_CMD) & STATUS_OUTPUT_FULL)
            return inb(PORT_I8042_DATA);
    }
    return -1;
}

static void expect(const char *what, int want)
{
    int got = read_byte();
    if (got != want)
        kbd_fail(what, (u64)(i64)got);
}

static int controller(u8 cmd)
{
    outb(PORT_I8042_CMD, cmd);
    return read_byte();
}

static void probe(void)
{
    for (u32 i = 0; i < FLUSH_MAX && (inb(PORT_I8042_CMD) & STATUS_OUTPUT_FULL); i++)
        (void)inb(PORT_I8042_DATA);
    if (inb(PORT_I8042_CMD) & STATUS_OUTPUT_FULL)
        kbd_fail("output buffer does not drain", 0);
    outb(PORT_I8042_CMD, 0xaa);
    expect("self test", 0x55);
    int ctr = controller(0x20);
    if (ctr < 0 || !(ctr & CONFIG_TRANSLATE))
        kbd_fail("config byte without translation", (u64)(i64)ctr);
    u8 polled = (u8)ctr & ~CONFIG_KEYBOARD_INTERRUPT;
    outb(PORT_I8042_CMD, 0x60);
    outb(PORT_I8042_DATA, polled);
    if (controller(0x20) != polled)
        kbd_fail("config byte write", (u64)polled);
    outb(PORT_I8042_CMD, 0xab);
    expect("keyboard interface test", 0x00);
    outb(PORT_I8042_DATA, 0xf2);
    expect("identify ack", 0xfa);
    expect("identify id[0]", 0xab);
    expect("identify id[1] (translated)", 0x41);
    puts_serial("osprey-test-guest: kbd ready ctr=");
    put_hex(polled);
    putc_serial('\n');
}

/* Ctrl, Alt and Delete as the set-1 bytes say they are (make/break, 0xe0 for Delete). */
static int ctrl, alt, del, extended;

/* Feeds one key byte; on Ctrl+Alt+Del prints the line and resets (never returns). */
static void feed(u8 b)
{
    if (b == SET1_EXTENDED) {
        extended = 1;
        return;
    }
    int down = !(b & SET1_RELEASE);
    u8 key = b & ~SET1_RELEASE;
    if (extended && key == SET1_DELETE)
        del = down;
    else if (!extended && key == SET1_CTRL)
        ctrl = down;
    else if (!extended && key == SET1_ALT)
        alt = down;
    extended = 0;
    if (ctrl && alt && del) {
        puts_serial("osprey-test-guest: kbd ctrl-alt-del\n");
        outb(PORT_I8042_CMD, 0xfe);
        halt_forever();
    }
}

void kbd_start(void)
{
    probe();
}

void kbd_poll(void)
{
    for (u32 i = 0; i < FLUSH_MAX && (inb(PORT_I8042_CMD) & STATUS_OUTPUT_FULL); i++)
        feed(inb(PORT_I8042_DATA));
}

NORETURN void kbd_main(void)
{
    probe();
    for (;;) {
        if (!(inb(PORT_I8042_CMD) & STATUS_OUTPUT_FULL)) {
            __asm__ volatile("pause");
            continue;
        }
        feed(inb(PORT_I8042_DATA));
    }
}
