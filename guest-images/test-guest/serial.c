/*
 * serial.c - console output on COM1 (port 0x3f8).
 *
 * Owns: byte output with a bare outb to THR (no LSR polling: each port
 * access is a VM exit and the VMM's UART is always ready), decimal/hex
 * number printing, JSON string escaping, and tracking whether we are at the
 * start of a line (so an exception message always starts on a fresh line).
 */
#include "blk.h"

static int at_line_start = 1;

void putc_serial(char c)
{
    outb(PORT_COM1, (u8)c);
    at_line_start = (c == '\n');
}

void puts_serial(const char *s)
{
    while (*s)
        putc_serial(*s++);
}

void ensure_line_start(void)
{
    if (!at_line_start)
        putc_serial('\n');
}

void put_u64(u64 v)
{
    char buf[21];
    struct sbuf b = { buf, 0, sizeof buf };
    buf[0] = 0;
    sb_u64(&b, v);          /* fmt.c's digits: one decimal formatter in the guest */
    puts_serial(buf);
}

void put_hex(u64 v)
{
    static const char digits[] = "0123456789abcdef";
    int shift = 60;
    while (shift > 0 && !((v >> shift) & 0xf))
        shift -= 4;
    for (; shift >= 0; shift -= 4)
        putc_serial(digits[(v >> shift) & 0xf]);
}

void put_json_string(const char *s, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    putc_serial('"');
    for (size_t i = 0; i < len; i++) {
        u8 c = (u8)s[i];
        if (c == '"' || c == '\\') {
            putc_serial('\\');
            putc_serial((char)c);
        } else if (c == '\n') {
            puts_serial("\\n");
        } else if (c == '\t') {
            puts_serial("\\t");
        } else if (c < 0x20 || c == 0x7f) {
            puts_serial("\\u00");
            putc_serial(digits[c >> 4]);
            putc_serial(digits[c & 0xf]);
        } else {
            putc_serial((char)c);   /* bytes >= 0x80 pass through */
        }
    }
    putc_serial('"');
}
