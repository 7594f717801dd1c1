/*
 * kvmclock.c - the TSC frequency from KVM's paravirtual clock (ring 0).
 *
 * Owns: asking KVM for vCPU 0's pvclock (MSR_KVM_SYSTEM_TIME_NEW), turning its
 * tsc_to_system_mul and tsc_shift into kHz as Linux's pvclock_tsc_khz does,
 * and switching the clock off again. The blk mode's clock (latencies, IOPS,
 * timeouts) uses it when the command line names no tsc_khz=, so that the
 * guest measures time right on any host.
 */
#include "guest.h"
#include "hw.h"

#define MSR_KVM_SYSTEM_TIME_NEW 0x4b564d01
#define KVMCLOCK_ENABLE         1ULL
/* Reads of the version word before giving up (ring 0 is emulated: ~ms). */
#define KVMCLOCK_TRIES          4096

/* KVM's pvclock_vcpu_time_info (32 bytes, 4-byte aligned at least). */
struct pvclock_time {
    u32 version;
    u32 pad0;
    u64 tsc_timestamp;
    u64 system_time;
    u32 tsc_to_system_mul;
    signed char tsc_shift;
    u8 flags;
    u8 pad[2];
} __attribute__((packed, aligned(64)));

static struct pvclock_time pvclock;

static inline void wrmsr(u32 msr, u64 v)
{
    __asm__ volatile("wrmsr" ::"c"(msr), "a"((u32)v), "d"((u32)(v >> 32)) : "memory");
}

u64 kvmclock_tsc_khz(void)
{
    volatile struct pvclock_time *pv = &pvclock;
    /* Identity mapped below 4 GiB: the address is the guest-physical one. */
    wrmsr(MSR_KVM_SYSTEM_TIME_NEW, (u64)(unsigned long)&pvclock | KVMCLOCK_ENABLE);
    u32 version = 0;
    for (int i = 0; i < KVMCLOCK_TRIES; i++) {
        version = pv->version;
        if (version != 0 && !(version & 1))
            break;
        cpu_relax();
    }
    u32 mul = pv->tsc_to_system_mul;
    int shift = pv->tsc_shift;
    wrmsr(MSR_KVM_SYSTEM_TIME_NEW, 0);
    if (version == 0 || (version & 1) || mul == 0 || shift < -31 || shift > 31)
        return 0;
    u64 khz = (1000000ULL << 32) / mul;
    return shift < 0 ? khz << -shift : khz >> shift;
}
