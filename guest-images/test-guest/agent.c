/*
 * agent.c - mode=agent (and mode=blk's hang=3): an orchestrator's in-guest agent, stood in for.
 *
 * Owns: serving at once, for as long as the VM runs, what an agent's host side reaches: the
 * virtio-vsock echo on `port=` (default 1024, Kata's agent port; firecracker-containerd's is
 * 10789) when there is a vsock device, the virtio-net echo for `ip=` when given, and with
 * `kbd=1` the i8042 probe and a reset on Ctrl+Alt+Del (Linux's `reboot=k`). The ring-3 loop
 * steps vsock and net in turn and comes back to ring 0 every ~10 ms for the keyboard (ring 3
 * has no port I/O) and on a vsock TRANSPORT_RESET (printed, as mode=vsock-echo does). Line:
 * `osprey-test-guest: agent ready vsock=0|1 net=0|1 kbd=0|1`, after each part's own line.
 * The vsock and net parts use their own memory (vsockmem; net takes blkmem, so hang=3 resets
 * the virtio-blk device first).
 */
#include "vsock.h"
#include "hw.h"

#define AGENT_KBD_EVERY_MS 10
#define AGENT_KBD_CHECK 1
#define AGENT_RESET 2
#define AGENT_FAIL 3
#define AGENT_TSC_KHZ_FALLBACK 2596146

struct agent {
    struct vsock_dev *vsock;
    int net, kbd;
    u64 kbd_every;      /* TSC ticks between keyboard checks */
};

static struct agent agent;

static long agent_job(void *arg)
{
    struct agent *a = arg;
    u64 t0 = rdtsc();
    if (a->vsock)
        a->vsock->reset_seen = 0;
    for (;;) {
        if (a->vsock) {
            vsock_step(a->vsock);
            if (a->vsock->error)
                return AGENT_FAIL;
            if (a->vsock->reset_seen)
                return AGENT_RESET;
        }
        if (a->net)
            net_step();
        if (a->kbd && rdtsc() - t0 > a->kbd_every)
            return AGENT_KBD_CHECK;
        cpu_relax();
    }
    return AGENT_FAIL;
}

static void flag(const char *name, int on)
{
    puts_serial(name);
    putc_serial(on ? '1' : '0');
}

NORETURN void agent_main(const char *cmdline, size_t len)
{
    u32 port = 1024;
    size_t at = 0;
    const char *t;
    size_t n, k;
    u64 v;
    while ((n = cmdline_token(cmdline, len, &at, &t))) {
        if ((k = prefix_len(t, n, "port="))) {
            if (parse_decimal(t + k, n - k, &v) || v > 0xffffffffULL) {
                puts_serial("osprey-test-guest: error: agent: bad port=\n");
                guest_exit(EXIT_BAD_ARG);
            }
            port = (u32)v;
        } else if ((k = prefix_len(t, n, "kbd=")) && k == n - 1 && t[k] == '1') {
            agent.kbd = 1;
        }
    }
    if (agent.kbd)
        kbd_start();
    agent.vsock = vsock_agent_start(port);
    agent.net = net_start(cmdline, len);
    u64 khz = kvmclock_tsc_khz();
    if (khz < TSC_KHZ_MIN || khz > TSC_KHZ_MAX)
        khz = AGENT_TSC_KHZ_FALLBACK;
    agent.kbd_every = khz * AGENT_KBD_EVERY_MS;
    puts_serial("osprey-test-guest: agent ready");
    flag(" vsock=", agent.vsock != NULL);
    flag(" net=", agent.net);
    flag(" kbd=", agent.kbd);
    putc_serial('\n');
    for (;;) {
        long r = run_in_user(agent_job, &agent);
        if (r == AGENT_KBD_CHECK) {
            kbd_poll();                 /* resets on Ctrl+Alt+Del */
        } else if (r == AGENT_RESET) {
            puts_serial("osprey-test-guest: vsock transport-reset cid=");
            put_u64(agent.vsock->cid);
            putc_serial('\n');
        } else {
            break;
        }
    }
    ensure_line_start();
    puts_serial("osprey-test-guest: error: agent: ");
    puts_serial(agent.vsock && agent.vsock->error ? agent.vsock->error : "the loop ended");
    putc_serial('\n');
    guest_exit(1);
}
