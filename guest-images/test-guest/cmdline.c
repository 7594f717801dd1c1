/*
 * cmdline.c - kernel command line parsing.
 *
 * Owns: splitting the command line into whitespace-separated tokens and
 * interpreting `mode=`, `exit=` and `boot_timer` (mode=blk's own tokens are parsed by
 * blk_cmdline.c). Unknown tokens are ignored; an unknown
 * mode or a malformed exit value prints an error line and fails (the caller
 * exits with status 2). Later tokens override earlier ones.
 */
#include "guest.h"

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t cmdline_token(const char *s, size_t len, size_t *at, const char **tok)
{
    size_t i = *at;
    while (i < len && is_space(s[i]))
        i++;
    size_t start = i;
    while (i < len && !is_space(s[i]))
        i++;
    *at = i;
    *tok = s + start;
    return i - start;
}

size_t prefix_len(const char *t, size_t n, const char *key)
{
    size_t k = 0;
    while (key[k]) {
        if (k >= n || t[k] != key[k])
            return 0;
        k++;
    }
    return k;
}

static int token_eq(const char *t, size_t n, const char *s)
{
    size_t k = prefix_len(t, n, s);
    return k && k == n;
}

static void put_token(const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        putc_serial(t[i]);
}

static int parse_mode(const char *v, size_t n, enum guest_mode *mode)
{
    if (token_eq(v, n, "report"))
        *mode = MODE_REPORT;
    else if (token_eq(v, n, "user"))
        *mode = MODE_USER;
    else if (token_eq(v, n, "triple-fault"))
        *mode = MODE_TRIPLE_FAULT;
    else if (token_eq(v, n, "reset"))
        *mode = MODE_RESET;
    else if (token_eq(v, n, "halt"))
        *mode = MODE_HALT;
    else if (token_eq(v, n, "exception"))
        *mode = MODE_EXCEPTION;
    else if (token_eq(v, n, "mmio-exec"))
        *mode = MODE_MMIO_EXEC;
    else if (token_eq(v, n, "blk"))
        *mode = MODE_BLK;
    else if (token_eq(v, n, "kbd"))
        *mode = MODE_KBD;
    else if (token_eq(v, n, "int3-loop"))
        *mode = MODE_INT3_LOOP;
    else if (token_eq(v, n, "vsock-echo"))
        *mode = MODE_VSOCK_ECHO;
    else if (token_eq(v, n, "vsock-connect"))
        *mode = MODE_VSOCK_CONNECT;
    else if (token_eq(v, n, "net-echo"))
        *mode = MODE_NET_ECHO;
    else if (token_eq(v, n, "agent"))
        *mode = MODE_AGENT;
    else
        return -1;
    return 0;
}

/* Decimal digits only, 1 to 19 of them (no overflow); shared with blk_cmdline.c. */
int parse_decimal(const char *v, size_t n, u64 *out)
{
    u64 x = 0;
    if (n == 0 || n > 19)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (u64)(v[i] - '0');
    }
    *out = x;
    return 0;
}

static int parse_u8_decimal(const char *v, size_t n, u8 *out)
{
    u64 x;
    if (n > 3 || parse_decimal(v, n, &x) || x > 255)
        return -1;
    *out = (u8)x;
    return 0;
}

int cmdline_parse(const char *s, size_t len, struct cmdline_opts *out)
{
    out->mode = MODE_REPORT;
    out->exit_status = EXIT_OK;
    out->boot_timer = 0;

    size_t i = 0;
    while (i < len) {
        const char *t;
        size_t n = cmdline_token(s, len, &i, &t), k;
        if (n == 0)
            break;
        if ((k = prefix_len(t, n, "mode="))) {
            if (parse_mode(t + k, n - k, &out->mode)) {
                puts_serial("osprey-test-guest: error: unknown mode '");
                put_token(t + k, n - k);
                puts_serial("'\n");
                return -1;
            }
        } else if ((k = prefix_len(t, n, "exit="))) {
            if (parse_u8_decimal(t + k, n - k, &out->exit_status)) {
                puts_serial("osprey-test-guest: error: bad exit status '");
                put_token(t + k, n - k);
                puts_serial("' (want decimal 0-255)\n");
                return -1;
            }
        } else if (token_eq(t, n, "boot_timer")) {
            out->boot_timer = 1;
        }
        /* anything else: ignored, Linux-style */
    }
    return 0;
}
