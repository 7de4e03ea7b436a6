/*
 * Credit-based flow control of the verbs plugin's eager ring, and the index
 * arithmetic of its send ring. Pure logic: no verbs, no core.
 *
 * Each side of a connection posts `ring` receive buffers (slots). A message
 * may only be sent into a slot the peer has posted, so the sender counts
 * credits: it starts with the peer's ring size, spends one per message, and
 * gets them back when the peer reports slots it has consumed and re-posted.
 * Reports ride in the header of every message ("piggy-backed"); when a side
 * has nothing to send but owes at least `threshold` slots, it sends a
 * credit-only message.
 *
 * Deadlock freedom: one credit is reserved for credit-only messages, so a
 * side that cannot send data can still return credits. A side whose sends
 * stall (avail <= reserve) has at least ring - 1 messages outstanding at the
 * peer; once the peer has consumed them it owes >= ring - 1 >= threshold
 * and sends an update, which it can always do: a side spends its reserve
 * only on an update, and that update returns credits to the other side,
 * which returns the slot in turn.
 *
 * No endless exchange of credit-only messages: the threshold is at least 2,
 * so an update returns at least two credits while consuming it makes the
 * receiver owe only one; without data the credits owed on both sides shrink
 * with every update. Hence rings have at least 3 slots (2 <= threshold <=
 * ring - 1). The unit test runs both sides against each other with random
 * traffic to check both properties.
 *
 * Held slots: a slot whose message an upcall is still reading (the
 * application's callback waits, in a nested progress call, for messages
 * behind it) is consumed but can be re-posted only when the upcall returns.
 * The stalled peer then has ring - 1 messages outstanding of which only
 * ring - 1 - held can be consumed: held slots count toward the threshold
 * (an update goes out when owed >= 1 and owed + held >= threshold), so
 * the nested wait still returns credits, one per message. That holds while
 * held <= ring - 2 (upcalls nested less deep on one connection than the
 * ring has slots, less two); while both sides hold slots, each update can
 * make the other owe enough for one back, so updates may flow until one
 * side lets go.
 */
#ifndef VB_CREDITS_H
#define VB_CREDITS_H

#include <stdbool.h>
#include <stdint.h>

/* Credits kept back for credit-only messages. */
#define VB_CREDIT_RESERVE 1u
/* Smallest ring (see above). */
#define VB_CREDIT_RING_MIN 3u
/* Largest ring: credits travel in a 16-bit field. */
#define VB_CREDIT_RING_MAX 0xffffu

typedef struct vb_credit {
    uint32_t avail;     /* slots the peer has posted for us and we may fill */
    uint32_t peer_ring; /* the peer's ring size; avail never exceeds it */
    uint32_t owed;      /* our slots consumed and re-posted, not reported yet */
    uint32_t ring;      /* our ring size */
    uint32_t threshold; /* owed that warrants a credit-only message */
    uint32_t held;      /* our slots consumed, still read by an upcall */
} vb_credit_t;

/* Start a connection: our ring and the peer's (both VB_CREDIT_RING_MIN ..
 * VB_CREDIT_RING_MAX) and the update threshold (clamped to 2..ring-1; 0
 * picks ring/2).
 * 0, or -EINVAL for a ring size out of range. */
int vb_credit_init(vb_credit_t *c, uint32_t ring, uint32_t peer_ring,
                   uint32_t threshold);

/* 1 when a message carrying data may be sent now. */
bool vb_credit_can_send(const vb_credit_t *c);

/* 1 when a credit-only message should be sent now: enough is owed and a
 * credit (possibly the reserved one) is left. Callers with data to send
 * piggy-back instead. */
bool vb_credit_want_update(const vb_credit_t *c);

/* Spend one credit on a message. Returns the credits to report in its
 * header (all that is owed, up to VB_CREDIT_RING_MAX), which are no longer
 * owed. The caller checked vb_credit_can_send() for a message with data, or
 * vb_credit_want_update() for a credit-only one. */
uint32_t vb_credit_take(vb_credit_t *c);

/* The peer reported n consumed slots. 0, or -EPROTO when that would give
 * more credits than the peer has slots (a broken or malicious peer). */
int vb_credit_returned(vb_credit_t *c, uint32_t n);

/* One of our slots was consumed and posted again: it is owed to the peer.
 * 0, or -EPROTO when more is owed than the ring holds (a bug). */
int vb_credit_consumed(vb_credit_t *c);

/* One of our slots is read by an upcall that may wait for more messages
 * (it counts toward the update threshold), and is no longer. The slot is
 * owed (vb_credit_consumed) only once posted again, after vb_credit_unhold. */
void vb_credit_hold(vb_credit_t *c);
void vb_credit_unhold(vb_credit_t *c);

/* A ring of `size` slots used in order: the send buffers. */
typedef struct vb_ring {
    uint32_t size;  /* number of slots */
    uint32_t head;  /* next slot to take */
    uint32_t count; /* slots taken and not yet given back */
} vb_ring_t;

void vb_ring_init(vb_ring_t *r, uint32_t size);
bool vb_ring_full(const vb_ring_t *r);
bool vb_ring_empty(const vb_ring_t *r);
/* Take the next slot (the ring is not full); returns its index. */
uint32_t vb_ring_push(vb_ring_t *r);
/* Index of the oldest taken slot (the ring is not empty). */
uint32_t vb_ring_tail(const vb_ring_t *r);
/* Give the oldest slot back (the ring is not empty). */
void vb_ring_pop(vb_ring_t *r);

#endif
