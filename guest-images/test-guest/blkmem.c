/*
 * blkmem.c - the big buffers of mode=blk, in the NOLOAD .blkmem section.
 *
 * Owns: the one `struct blkmem` (virtqueue rings, request slots, the 8 MiB
 * data pool, scratch space, latency samples and the report buffer). It is
 * not zeroed at boot (ring-0 stores are emulated and slow on kvm_pvm);
 * ring-3 code zeroes what must start at zero (user_zero_job).
 */
#include "blk.h"

struct blkmem blkmem __attribute__((section(".blkmem"), aligned(4096)));
