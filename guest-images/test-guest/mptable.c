/*
 * mptable.c - Intel MultiProcessor Specification 1.4 table discovery.
 *
 * Owns: finding the MP floating pointer ("_MP_", 16-byte aligned, valid
 * checksum) in spec order (first KiB of the EBDA via the segment at 0x40E,
 * the last KiB of base memory at 0x9FC00, then 0xF0000-0xFFFFF), validating
 * the "PCMP" configuration table and collecting processor entries (type 0,
 * 20 bytes; every other entry type 8 bytes). Every read is bounds-checked
 * against the structure's own length and the 4 GiB identity map.
 */
#include "guest.h"

#define MPF_SIG   0x5f504d5fu   /* "_MP_" */
#define PCMP_SIG  0x504d4350u   /* "PCMP" */
#define PCMP_HDR_LEN 44
#define MAPPED_LIMIT 0x100000000ULL

static u32 rd32(u64 a) { return *(const volatile u32 *)a; }
static u16 rd16(u64 a) { return *(const volatile u16 *)a; }
static u8 rd8(u64 a) { return *(const volatile u8 *)a; }

static u8 checksum(u64 a, u64 n)
{
    u8 s = 0;
    for (u64 i = 0; i < n; i++)
        s = (u8)(s + rd8(a + i));
    return s;
}

/* Return the address of a valid floating pointer in [start, end), or 0. */
static u64 scan_region(u64 start, u64 end)
{
    start = (start + 15) & ~15ULL;
    for (u64 a = start; a + 16 <= end; a += 16) {
        if (rd32(a) != MPF_SIG)
            continue;
        u64 len = (u64)rd8(a + 8) * 16;
        if (len < 16 || a + len > end)
            continue;
        if (checksum(a, len) == 0)
            return a;
    }
    return 0;
}

static u64 find_floating_pointer(void)
{
    u64 ebda = (u64)rd16(0x40e) << 4, mpf;
    if (ebda >= 0x400 && ebda + 1024 <= 0xa0000 && (mpf = scan_region(ebda, ebda + 1024)))
        return mpf;
    if ((mpf = scan_region(0x9fc00, 0xa0000)))
        return mpf;
    return scan_region(0xf0000, 0x100000);
}

static int parse_config_table(u64 t, struct mp_info *out)
{
    if (t == 0 || t + PCMP_HDR_LEN > MAPPED_LIMIT || rd32(t) != PCMP_SIG)
        return -1;
    u64 len = rd16(t + 4);
    if (len < PCMP_HDR_LEN || t + len > MAPPED_LIMIT || checksum(t, len) != 0)
        return -1;
    u32 count = rd16(t + 34);
    u64 off = PCMP_HDR_LEN;
    for (u32 i = 0; i < count; i++) {
        if (off + 1 > len)
            return -1;
        u8 type = rd8(t + off);
        u64 size = (type == 0) ? 20 : 8;
        if (off + size > len)
            return -1;
        if (type == 0) {
            u8 apic_id = rd8(t + off + 1);
            u8 flags = rd8(t + off + 3);
            if (out->cpus < MP_MAX_CPUS)
                out->apic_ids[out->cpus] = apic_id;
            out->cpus++;
            if ((flags & 2) && out->bsp_apic_id < 0)
                out->bsp_apic_id = apic_id;
        }
        off += size;
    }
    return 0;
}

void mp_scan(struct mp_info *out)
{
    out->found = 0;
    out->cpus = 0;
    out->bsp_apic_id = -1;

    u64 mpf = find_floating_pointer();
    if (!mpf)
        return;
    if (parse_config_table(rd32(mpf + 4), out) == 0) {
        out->found = 1;
    } else {
        out->cpus = 0;
        out->bsp_apic_id = -1;
    }
}
