/*
 * report.c - the one-line `REPORT {json}` printed in mode=report/user.
 *
 * Owns: the JSON field set and its formatting: cpus, apic_ids,
 * bsp_apic_id, mem_ram_bytes, mem_top, memmap, cmdline, mp_table and, when
 * the ring-3 test ran, user {iterations, cycles, result}.
 */
#include "guest.h"

#define MEMMAP_MAX 128

static void key(const char *k, int first)
{
    if (!first)
        putc_serial(',');
    putc_serial('"');
    puts_serial(k);
    puts_serial("\":");
}

void print_report(const struct hvm_start_info *si, const char *cmdline,
                  size_t cmdline_len, const struct mp_info *mp,
                  const struct user_bench *ub)
{
    const struct hvm_memmap_entry *mm = NULL;
    u32 n = 0;
    if (si->version >= 1 && si->memmap_paddr) {
        n = si->memmap_entries;
        if (n > MEMMAP_MAX)
            n = MEMMAP_MAX;
        if (si->memmap_paddr + (u64)n * sizeof(*mm) > 0x100000000ULL)
            n = 0;
        mm = (const struct hvm_memmap_entry *)si->memmap_paddr;
    }
    u64 ram = 0, top = 0;
    for (u32 i = 0; i < n; i++) {
        if (mm[i].type != E820_RAM)
            continue;
        ram += mm[i].size;
        if (mm[i].addr + mm[i].size > top)
            top = mm[i].addr + mm[i].size;
    }

    puts_serial("REPORT {");
    key("cpus", 1);
    put_u64(mp->cpus);
    key("apic_ids", 0);
    putc_serial('[');
    for (u32 i = 0; i < mp->cpus && i < MP_MAX_CPUS; i++) {
        if (i)
            putc_serial(',');
        put_u64(mp->apic_ids[i]);
    }
    putc_serial(']');
    key("bsp_apic_id", 0);
    if (mp->bsp_apic_id < 0)
        puts_serial("null");
    else
        put_u64((u64)mp->bsp_apic_id);
    key("mem_ram_bytes", 0);
    put_u64(ram);
    key("mem_top", 0);
    put_u64(top);
    key("memmap", 0);
    putc_serial('[');
    for (u32 i = 0; i < n; i++) {
        if (i)
            putc_serial(',');
        puts_serial("{\"addr\":");
        put_u64(mm[i].addr);
        puts_serial(",\"size\":");
        put_u64(mm[i].size);
        puts_serial(",\"type\":");
        put_u64(mm[i].type);
        putc_serial('}');
    }
    putc_serial(']');
    key("cmdline", 0);
    put_json_string(cmdline, cmdline_len);
    key("mp_table", 0);
    puts_serial(mp->found ? "true" : "false");
    if (ub) {
        key("user", 0);
        puts_serial("{\"iterations\":");
        put_u64(ub->iterations);
        puts_serial(",\"cycles\":");
        put_u64(ub->cycles);
        puts_serial(",\"result\":");
        put_u64(ub->result);
        putc_serial('}');
    }
    puts_serial("}\n");
}
