/*
 * Credit-based flow control and send-ring arithmetic (see credits.h).
 */
#include <errno.h>

#include "credits.h"

int vb_credit_init(vb_credit_t *c, uint32_t ring, uint32_t peer_ring,
                   uint32_t threshold)
{
    if (ring < VB_CREDIT_RING_MIN || ring > VB_CREDIT_RING_MAX ||
        peer_ring < VB_CREDIT_RING_MIN || peer_ring > VB_CREDIT_RING_MAX)
        return -EINVAL;
    if (!threshold) threshold = ring / 2;
    if (threshold > ring - VB_CREDIT_RESERVE) threshold = ring - VB_CREDIT_RESERVE;
    if (threshold < 2) threshold = 2;
    *c = (vb_credit_t){
        .avail = peer_ring,
        .peer_ring = peer_ring,
        .owed = 0,
        .ring = ring,
        .threshold = threshold,
    };
    return 0;
}

bool vb_credit_can_send(const vb_credit_t *c)
{
    return c->avail > VB_CREDIT_RESERVE;
}

bool vb_credit_want_update(const vb_credit_t *c)
{
    return c->owed && c->owed + c->held >= c->threshold && c->avail >= 1;
}

void vb_credit_hold(vb_credit_t *c)
{
    c->held++;
}

void vb_credit_unhold(vb_credit_t *c)
{
    if (c->held) c->held--;
}

uint32_t vb_credit_take(vb_credit_t *c)
{
    if (c->avail) c->avail--;
    uint32_t n = c->owed > VB_CREDIT_RING_MAX ? VB_CREDIT_RING_MAX : c->owed;
    c->owed -= n;
    return n;
}

int vb_credit_returned(vb_credit_t *c, uint32_t n)
{
    if (n > c->peer_ring - c->avail) return -EPROTO;
    c->avail += n;
    return 0;
}

int vb_credit_consumed(vb_credit_t *c)
{
    if (c->owed >= c->ring) return -EPROTO;
    c->owed++;
    return 0;
}

void vb_ring_init(vb_ring_t *r, uint32_t size)
{
    *r = (vb_ring_t){.size = size};
}

bool vb_ring_full(const vb_ring_t *r)
{
    return r->count == r->size;
}

bool vb_ring_empty(const vb_ring_t *r)
{
    return r->count == 0;
}

uint32_t vb_ring_push(vb_ring_t *r)
{
    uint32_t i = r->head;
    r->head = r->head + 1 == r->size ? 0 : r->head + 1;
    r->count++;
    return i;
}

uint32_t vb_ring_tail(const vb_ring_t *r)
{
    return r->head >= r->count ? r->head - r->count
                               : r->head + r->size - r->count;
}

void vb_ring_pop(vb_ring_t *r)
{
    r->count--;
}
