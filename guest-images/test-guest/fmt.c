/*
 * fmt.c - a bounded string builder (any ring; used in ring 3 to format
 * the BLK report so ring 0 only has to copy bytes to the serial port).
 *
 * Owns: appending chars, strings, decimal numbers, "0x.." hex strings,
 * JSON-escaped strings and `"key":` separators. Output past the capacity
 * is dropped (the buffer always stays NUL-terminated).
 */
#include "blk.h"

void sb_putc(struct sbuf *b, char c)
{
    if (b->len + 1 < b->cap) {
        b->p[b->len++] = c;
        b->p[b->len] = 0;
    }
}

void sb_puts(struct sbuf *b, const char *s)
{
    while (*s)
        sb_putc(b, *s++);
}

void sb_u64(struct sbuf *b, u64 v)
{
    char buf[20];
    int n = 0;
    do {
        buf[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        sb_putc(b, buf[--n]);
}

void sb_i64(struct sbuf *b, i64 v)
{
    if (v < 0) {
        sb_putc(b, '-');
        sb_u64(b, (u64)0 - (u64)v);
    } else {
        sb_u64(b, (u64)v);
    }
}

void sb_hex(struct sbuf *b, u64 v)
{
    static const char digits[] = "0123456789abcdef";
    int shift = 60;
    sb_puts(b, "\"0x");
    while (shift > 0 && !((v >> shift) & 0xf))
        shift -= 4;
    for (; shift >= 0; shift -= 4)
        sb_putc(b, digits[(v >> shift) & 0xf]);
    sb_putc(b, '"');
}

void sb_str(struct sbuf *b, const char *s, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    sb_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        u8 c = (u8)s[i];
        if (c == '"' || c == '\\') {
            sb_putc(b, '\\');
            sb_putc(b, (char)c);
        } else if (c < 0x20 || c >= 0x7f) {
            sb_puts(b, "\\u00");
            sb_putc(b, digits[c >> 4]);
            sb_putc(b, digits[c & 0xf]);
        } else {
            sb_putc(b, (char)c);
        }
    }
    sb_putc(b, '"');
}

void sb_key(struct sbuf *b, const char *k)
{
    if (b->len && b->p[b->len - 1] != '{' && b->p[b->len - 1] != '[')
        sb_putc(b, ',');
    sb_putc(b, '"');
    sb_puts(b, k);
    sb_puts(b, "\":");
}
