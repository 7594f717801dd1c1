/*
 * virtio_pci.c - the virtio 1.2 modern PCI transport (ring 0 set-up).
 *
 * Owns: finding the device (pci.c), walking its capability list (virtio
 * vendor caps 0x09: common/notify/ISR/device config, and MSI-X 0x11),
 * enabling memory space + bus mastering, mapping the BAR windows uncached
 * (mmu.c), and the common-config operations: reset (write 0, wait for 0),
 * status bits, 64-bit feature words, per-queue set-up (size, ring
 * addresses, MSI-X vector with read-back, notify address, enable) and
 * MSI-X table programming. Device-specific config is read via vp_cfg*.
 */
#include "blk.h"
#include "hw.h"

/* struct virtio_pci_common_cfg offsets */
#define CC_DFSELECT   0
#define CC_DF         4
#define CC_GFSELECT   8
#define CC_GF         12
#define CC_MSIX       16
#define CC_NUMQ       18
#define CC_STATUS     20
#define CC_CFGGEN     21
#define CC_Q_SELECT   22
#define CC_Q_SIZE     24
#define CC_Q_MSIX     26
#define CC_Q_ENABLE   28
#define CC_Q_NOFF     30
#define CC_Q_DESC     32
#define CC_Q_AVAIL    40
#define CC_Q_USED     48

#define CAP_VNDR 0x09
#define CAP_MSIX 0x11

static int map_region(struct vpci *vp, u8 bar, u32 off, u32 len, u64 *out)
{
    if (bar > 5 || vp->bar[bar] == 0)
        return -1;
    u64 a = vp->bar[bar] + off;
    if (mmio_map_uc(a, len ? len : 1))
        return -2;
    *out = a;
    return 0;
}

int vp_probe(struct vpci *vp, u16 device_id, u32 nth)
{
    int slot = pci_find(0x1af4, device_id, nth);
    if (slot < 0)
        return -1;
    vp->slot = (u8)slot;
    for (int i = 0; i < 6; i++)
        vp->bar[i] = 0;
    vp->common = vp->notify = vp->isr = vp->devcfg = vp->msix_table = 0;
    vp->msix_cap = 0;
    vp->msix_size = 0;

    if (!(pci_read16(vp->slot, 0x06) & 0x10))
        return -2;                      /* no capability list */
    u8 bars_needed = 0;
    struct { u8 bar; u32 off, len; } cfg[5] = { { 0, 0, 0 } };
    u8 seen[5] = { 0 };
    u8 msix_bir = 0;
    u32 msix_off = 0;
    u8 p = pci_read8(vp->slot, 0x34) & 0xfc;
    for (int guard = 0; p && guard < 48; guard++) {
        u32 w0 = pci_read32(vp->slot, p);
        u8 id = (u8)w0, next = (u8)(w0 >> 8) & 0xfc;
        if (id == CAP_VNDR) {
            u8 type = (u8)(w0 >> 24);
            if (type >= 1 && type <= 4 && !seen[type]) {
                seen[type] = 1;
                cfg[type].bar = pci_read8(vp->slot, (u8)(p + 4));
                cfg[type].off = pci_read32(vp->slot, (u8)(p + 8));
                cfg[type].len = pci_read32(vp->slot, (u8)(p + 12));
                bars_needed |= (u8)(1u << (cfg[type].bar & 7));
                if (type == 2)
                    vp->notify_mult = pci_read32(vp->slot, (u8)(p + 16));
            }
        } else if (id == CAP_MSIX) {
            vp->msix_cap = p;
            vp->msix_size = (u16)(((w0 >> 16) & 0x7ff) + 1);
            u32 t = pci_read32(vp->slot, (u8)(p + 4));
            msix_bir = t & 7;
            msix_off = t & ~7u;
            bars_needed |= (u8)(1u << msix_bir);
        }
        p = next;
    }
    if (!seen[1] || !seen[2] || !seen[4])
        return -3;                      /* not a modern virtio-pci device */

    vp->bar[0] = pci_bar(vp->slot, 0);  /* reported as "bar0" */
    for (int i = 1; i < 6; i++)
        if (bars_needed & (1u << i))
            vp->bar[i] = pci_bar(vp->slot, i);
    pci_enable_mem_master(vp->slot);

    vp->common_bar = cfg[1].bar;
    vp->notify_bar = cfg[2].bar;
    if (map_region(vp, cfg[1].bar, cfg[1].off, cfg[1].len, &vp->common) ||
        map_region(vp, cfg[2].bar, cfg[2].off, cfg[2].len, &vp->notify) ||
        map_region(vp, cfg[4].bar, cfg[4].off, cfg[4].len, &vp->devcfg))
        return -4;
    if (seen[3] && map_region(vp, cfg[3].bar, cfg[3].off, cfg[3].len, &vp->isr))
        return -4;
    if (vp->msix_cap &&
        map_region(vp, msix_bir, msix_off, 16u * vp->msix_size, &vp->msix_table))
        vp->msix_table = 0;
    return 0;
}

u8 vp_status(const struct vpci *vp)
{
    return mmio_r8(vp->common + CC_STATUS);
}

void vp_set_status(struct vpci *vp, u8 s)
{
    mmio_w8(vp->common + CC_STATUS, s);
}

int vp_reset(struct vpci *vp)
{
    mmio_w8(vp->common + CC_STATUS, 0);
    for (int i = 0; i < 100000; i++)
        if (mmio_r8(vp->common + CC_STATUS) == 0)
            return 0;
    return -1;
}

u64 vp_device_features(struct vpci *vp)
{
    mmio_w32(vp->common + CC_DFSELECT, 0);
    u64 lo = mmio_r32(vp->common + CC_DF);
    mmio_w32(vp->common + CC_DFSELECT, 1);
    u64 hi = mmio_r32(vp->common + CC_DF);
    return lo | hi << 32;
}

void vp_driver_features(struct vpci *vp, u64 f)
{
    mmio_w32(vp->common + CC_GFSELECT, 0);
    mmio_w32(vp->common + CC_GF, (u32)f);
    mmio_w32(vp->common + CC_GFSELECT, 1);
    mmio_w32(vp->common + CC_GF, (u32)(f >> 32));
}

u16 vp_num_queues(struct vpci *vp)
{
    return mmio_r16(vp->common + CC_NUMQ);
}

u16 vp_queue_max(struct vpci *vp, u16 q)
{
    mmio_w16(vp->common + CC_Q_SELECT, q);
    return mmio_r16(vp->common + CC_Q_SIZE);
}

static void w64(u64 a, u64 v)
{
    mmio_w32(a, (u32)v);
    mmio_w32(a + 4, (u32)(v >> 32));
}

/* vq must already be laid out (vq_layout) with the chosen size. */
int vp_queue_setup(struct vpci *vp, struct vq *vq, u16 q, u16 size, u16 msix_vec)
{
    u64 c = vp->common;
    mmio_w16(c + CC_Q_SELECT, q);
    mmio_w16(c + CC_Q_SIZE, size);
    w64(c + CC_Q_DESC, (u64)vq->desc);
    w64(c + CC_Q_AVAIL, (u64)vq->avail);
    w64(c + CC_Q_USED, (u64)vq->used);
    if (msix_vec != VIRTIO_NO_VECTOR) {
        mmio_w16(c + CC_Q_MSIX, msix_vec);
        if (mmio_r16(c + CC_Q_MSIX) != msix_vec)
            return -1;
    }
    u16 noff = mmio_r16(c + CC_Q_NOFF);
    vq->notify_addr = vp->notify + (u64)noff * vp->notify_mult;
    mmio_w16(c + CC_Q_ENABLE, 1);
    return 0;
}

int vp_msix_enable(struct vpci *vp, u32 apic_id, u32 nvec)
{
    if (!vp->msix_cap || !vp->msix_table || nvec > vp->msix_size)
        return -1;
    u8 ctl = (u8)(vp->msix_cap + 2);
    u16 mc = pci_read16(vp->slot, ctl);
    pci_write16(vp->slot, ctl, (u16)(mc | 0xc000));  /* enable + function mask */
    for (u32 i = 0; i < nvec; i++) {
        u64 e = vp->msix_table + 16 * i;
        mmio_w32(e + 0, 0xfee00000u | (apic_id << 12));
        mmio_w32(e + 4, 0);
        mmio_w32(e + 8, IRQ_VEC_BASE + i);
        mmio_w32(e + 12, 0);                        /* unmask */
    }
    pci_write16(vp->slot, ctl, (u16)((mc | 0x8000) & ~0x4000));
    mmio_w16(vp->common + CC_MSIX, VIRTIO_NO_VECTOR);  /* no config irq */
    return 0;
}

u32 vp_cfg32(struct vpci *vp, u32 off)
{
    return mmio_r32(vp->devcfg + off);
}

u8 vp_cfg8(struct vpci *vp, u32 off)
{
    return mmio_r8(vp->devcfg + off);
}

u8 vp_cfg_generation(struct vpci *vp)
{
    return mmio_r8(vp->common + CC_CFGGEN);
}
