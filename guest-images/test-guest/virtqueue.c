/*
 * virtqueue.c - the split virtqueue, driver side (any ring; the hot path
 * runs in ring 3).
 *
 * Owns: the ring layout inside a 16 KiB region (descriptor table @0,
 * avail @4 KiB, used @8 KiB), adding heads to the avail ring, publishing
 * the avail index and deciding whether to kick (VRING_USED_F_NO_NOTIFY, or
 * with EVENT_IDX the device's avail_event via vring_need_event), the kick
 * itself (a 16-bit MMIO store of the queue index to its notify address,
 * counted), and popping used elements while keeping the interrupt
 * suppression state right (used_event / VRING_AVAIL_F_NO_INTERRUPT).
 * The rings must be zeroed before vq_layout (user_zero_job in blk.c).
 */
#include "blk.h"
#include "hw.h"

#define USED_FLAGS(vq)  (*(volatile u16 *)((vq)->used + 0))
#define USED_IDX(vq)    (*(volatile u16 *)((vq)->used + 2))
#define USED_ID(vq, i)  (*(volatile u32 *)((vq)->used + 4 + 8 * (i)))
#define USED_LEN(vq, i) (*(volatile u32 *)((vq)->used + 8 + 8 * (i)))
#define AVAIL_EVENT(vq) (*(volatile u16 *)((vq)->used + 4 + 8 * (vq)->size))
#define USED_EVENT(vq)  ((vq)->avail[2 + (vq)->size])

void vq_layout(struct vq *vq, u8 *mem, u16 index, u16 size)
{
    vq->index = index;
    vq->size = size;
    vq->desc = (volatile struct vring_desc *)mem;
    vq->avail = (volatile u16 *)(mem + 4096);
    vq->used = mem + 8192;
    vq->avail_shadow = vq->avail_published = vq->last_used = 0;
    vq->kicks = vq->publishes = 0;
    /* Poll mode: ask for no interrupts (flag without EVENT_IDX, a far-away
     * used_event with it). Irq mode: interrupt on every new completion. */
    vq->avail[0] = (!vq->want_irq && !vq->event_idx) ? VRING_AVAIL_F_NO_INTERRUPT : 0;
    vq->used_event = vq->want_irq ? 0 : 0x7fff;
    USED_EVENT(vq) = vq->used_event;
}

void vq_push(struct vq *vq, u16 head)
{
    vq->avail[2 + (vq->avail_shadow & (vq->size - 1))] = head;
    vq->avail_shadow++;
}

void vq_kick(struct vq *vq)
{
    u16 new = vq->avail_shadow, old = vq->avail_published;
    if (new == old)
        return;
    barrier();                  /* descriptors and ring entries first (TSO) */
    vq->avail[1] = new;
    vq->avail_published = new;
    vq->publishes++;
    mb();                       /* idx store before the suppression loads */
    int need;
    if (vq->event_idx) {
        u16 ev = AVAIL_EVENT(vq);
        need = (u16)(new - ev - 1) < (u16)(new - old);
    } else {
        need = !(USED_FLAGS(vq) & VRING_USED_F_NO_NOTIFY);
    }
    if (need) {
        mmio_w16(vq->notify_addr, vq->index);
        vq->kicks++;
    }
}

u16 vq_used_idx(const struct vq *vq)
{
    return USED_IDX(vq);
}

int vq_pop_used(struct vq *vq, u32 *id, u32 *len)
{
    if (USED_IDX(vq) == vq->last_used) {
        if (!vq->event_idx)
            return 0;
        if (!vq->want_irq) {
            /* Poll mode: keep used_event far ahead (no interrupts); only
             * store when it gets within 16K of last_used. */
            if ((u16)(vq->used_event - vq->last_used) < 0x4000) {
                vq->used_event = (u16)(vq->last_used + 0x7fff);
                USED_EVENT(vq) = vq->used_event;
            }
            return 0;
        }
        /* Irq mode: re-arm for the next completion, then re-check. */
        if (vq->used_event != vq->last_used) {
            vq->used_event = vq->last_used;
            USED_EVENT(vq) = vq->used_event;
        }
        mb();
        if (USED_IDX(vq) == vq->last_used)
            return 0;
    }
    barrier();                  /* idx before the element (loads are ordered) */
    u16 i = vq->last_used & (vq->size - 1);
    *id = USED_ID(vq, i);
    *len = USED_LEN(vq, i);
    vq->last_used++;
    return 1;
}
