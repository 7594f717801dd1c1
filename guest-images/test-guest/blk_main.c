/*
 * blk_main.c - mode=blk: the ring-0 orchestration of the virtio-blk test.
 *
 * Owns: the order of the phases (parse options, init + GET_ID, the main
 * workload in ring 3 (rw=stamp: with a `stamp tag=` line each time the
 * tag read changes), discard/write-zeroes, hostile cases, reset +
 * reinit + short verify, the pattern= write), recovering the device after
 * a stalled run, counting failures, printing the BLK line built in ring 3
 * and the exit status (0 when nothing failed, 1 otherwise, 2 for a bad
 * command line).
 */
#include "blk.h"
#include "hw.h"

#define DEFAULT_RANGE_CAP (1ULL << 30)
#define REINIT_VERIFY_BLOCKS 16

static struct blk_dev dev;
static struct blk_opts opts;
static struct blk_run run_main, run_reinit;
static struct extra_job extra;
static struct hostile_result hres;
static struct blk_summary sum;
static struct wl_job job;
static struct stamp_state stamp;
static const char *blk_cmdline;
static size_t blk_cmdline_len;

static const char *init_error(int r)
{
    switch (r) {
    case -1: return "no virtio-blk (1af4:1042) on bus 0";
    case -2: return "no PCI capability list";
    case -3: return "virtio caps missing (common/notify/device cfg)";
    case -4: return "cannot map a BAR (above 512 GiB or two high windows)";
    case -5: return "reset timed out";
    case -6: return "device does not offer VERSION_1";
    case -7: return "FEATURES_OK did not stick";
    case -8: return "no queues";
    case -9: return "bs needs more segments than seg_max";
    case -10: return "queue not available (size 0)";
    case -11: return "queue too small for one request";
    case -12: return "MSI-X not usable";
    case -13: return "queue MSI-X vector not accepted";
    case -14: return "device failed or needs reset after DRIVER_OK";
    default: return "init failed";
    }
}

/* hang=2: the vCPU stays in ring 3 (no exit), so the VM stays up for the test; hang=3: the
 * device reset, then mode=agent's services (vsock and net echo) for as long as the VM runs. */
static long idle_forever_job(void *arg)
{
    (void)arg;
    for (;;)
        cpu_relax();
    return 0;
}

static NORETURN void finish(void)
{
    sum.d = &dev;
    sum.o = &opts;
    run_in_user(blk_report_job, &sum);
    ensure_line_start();
    puts_serial(blkmem.report);
    putc_serial('\n');
    if (opts.hang) {
        puts_serial("osprey-test-guest: hang\n");
        if (opts.hang == 3) {
            if (vp_reset(&dev.vp))
                puts_serial("osprey-test-guest: error: blk reset before the agent timed out\n");
            agent_main(blk_cmdline, blk_cmdline_len);
        }
        if (opts.hang == 2)
            run_in_user(idle_forever_job, 0);
        for (;;)
            __asm__ volatile("cli; hlt");
    }
    guest_exit(sum.failures ? 1 : 0);
}

static long run_user(user_fn fn, void *arg)
{
    if (dev.irq)
        return run_in_user_rflags(fn, arg, user_stack_top, 0x202);
    return run_in_user(fn, arg);
}

static void run_workload(struct blk_run *r, const char *name, enum blk_rw rw,
                         u64 nreq, u64 nblocks, u64 seed)
{
    r->name = name;
    r->rw = blk_rw_name(rw);
    r->bs = opts.bs;
    r->qd = opts.qd;
    r->queues = dev.nq;
    job.d = &dev;
    job.o = &opts;
    job.rw = rw;
    job.nreq = nreq;
    job.nblocks = nblocks;
    job.seed = seed;
    job.run = r;
    job.stamp = rw == RW_STAMP ? &stamp : 0;
    if (job.stamp) {
        stamp.gen = vp_cfg_generation(&dev.vp);
        stamp.capacity = dev.capacity;
        sum.stamp = &stamp;
    }
    while (run_user(workload_job, &job) == 1)
        stamp_announce(&stamp, &dev);
    sum.runs[sum.nruns++] = r;
    if (job.stamp && opts.stamp_until_set && !stamp_until_reached(&stamp, &opts))
        sum.failures++;                 /* count ran out before the awaited tag */
    sum.failures += r->errors + r->mismatches + (u64)r->timed_out;
    if (r->timed_out) {                 /* recover for the later phases */
        dev.resets++;
        if (blk_init(&dev, &opts)) {
            sum.error = "reinit after a stalled run failed";
            sum.failures++;
            finish();
        }
    }
}

static int extra_failed(const struct extra_result *e)
{
    if (!e->ran || e->status == -2)
        return 0;                       /* not offered: not a failure */
    /* -5: skipped by pattern_check=1 (the read-back still counts) */
    return (e->status != 0 && e->status != -5) ||
           (e->prep_status != 0 && e->prep_status != -2 && e->prep_status != -5) ||
           (e->readback_status != 0 && e->readback_status != -2) || e->bad_sectors != 0;
}

NORETURN void blk_main(const char *cmdline, size_t len)
{
    blk_cmdline = cmdline;
    blk_cmdline_len = len;
    if (blk_opts_parse(cmdline, len, &opts))
        guest_exit(EXIT_BAD_ARG);
    if (opts.tsc_source == TSC_DEFAULT) {
        /* The host's TSC frequency, unless the command line names one. */
        u64 khz = kvmclock_tsc_khz();
        if (khz >= TSC_KHZ_MIN && khz <= TSC_KHZ_MAX) {
            opts.tsc_khz = khz;
            opts.tsc_source = TSC_KVMCLOCK;
        }
    }

    int r = blk_init(&dev, &opts);
    if (r) {
        sum.error = init_error(r);
        sum.failures = 1;
        finish();
    }
    run_in_user(blk_get_id_job, &dev);

    u64 cap = dev.capacity * 512;
    u64 range = opts.range ? opts.range : DEFAULT_RANGE_CAP;
    if (range > cap)
        range = cap;
    u64 nblocks = range / opts.bs;
    if (nblocks == 0) {
        sum.error = "disk smaller than bs";
        sum.failures = 1;
        finish();
    }
    u64 nreq = opts.count;
    if (opts.rw == RW_VERIFY) {
        nreq = opts.count / 2 ? opts.count / 2 : 1;
        if (nreq > nblocks)
            nreq = nblocks;
    }
    run_workload(&run_main, "main", opts.rw, nreq, nblocks, opts.seed);

    if (opts.discard || opts.write_zeroes || opts.pattern_set) {
        extra.d = &dev;
        extra.o = &opts;
        sum.extra = &extra;
    }
    if (opts.discard || opts.write_zeroes) {
        extra.which = 1;
        run_user(extra_ops_job, &extra);
        sum.failures += (u64)extra_failed(&extra.discard) + (u64)extra_failed(&extra.wz);
    }
    if (opts.broken_idle_ms) {
        broken_idle_run(&dev, &opts);
        dev.resets++;
        if (blk_init(&dev, &opts)) {
            sum.error = "reinit after broken_idle failed";
            sum.failures++;
            finish();
        }
    }
    if (opts.hostile) {
        hostile_run(&dev, &opts, &hres);
        sum.hostile = &hres;
        for (u32 i = 0; i < hres.n; i++)
            sum.failures += !hres.c[i].ok;
        sum.failures += !hres.post_ok;
    }
    if (opts.reinit) {
        dev.resets++;
        if (blk_init(&dev, &opts)) {
            sum.error = "reinit failed";
            sum.failures++;
            finish();
        }
        u64 n = nblocks < REINIT_VERIFY_BLOCKS ? nblocks : REINIT_VERIFY_BLOCKS;
        run_workload(&run_reinit, "reinit_verify", RW_VERIFY, n, nblocks, opts.seed + 1);
        sum.reinit_done = run_reinit.requests == 2 * n && !run_reinit.errors &&
                          !run_reinit.mismatches;
    }
    if (opts.pattern_set) {
        extra.which = 2;
        run_user(extra_ops_job, &extra);
        sum.failures += (u64)extra_failed(&extra.pattern);
    }
    finish();
}
