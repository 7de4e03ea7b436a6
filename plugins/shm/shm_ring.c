/*
 * The producer side of the shared-memory ring (see shm_ring.h).
 */
#include "shm_ring.h"

#include "../copy_small.h"

#include <string.h>

#ifdef SHM_RING_TEST_HOOK
/* Unit tests see every publication just before the header is stored. */
void SHM_RING_TEST_HOOK(const struct shm_slot *slot, uint64_t hdr,
                        const uint8_t *bytes, size_t len);
#endif

#define RING_OFF_SLOTS SHM_SLOT_SIZE

size_t shm_ring_size(uint32_t slots, uint64_t dsize)
{
    return RING_OFF_SLOTS + (size_t)slots * SHM_SLOT_SIZE + dsize;
}

static int pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

int shm_ring_geometry_ok(uint32_t slots, uint64_t dsize)
{
    return pow2(slots) && slots >= SHM_SLOTS_MIN && slots <= SHM_SLOTS_MAX &&
           pow2(dsize) && dsize >= SHM_DATA_MIN && dsize <= SHM_DATA_MAX;
}

void shm_ring_format(void *mem, uint32_t slots, uint64_t dsize)
{
    (void)dsize;
    memset(mem, 0, RING_OFF_SLOTS + (size_t)slots * SHM_SLOT_SIZE);
}

void shm_tx_init(struct shm_tx *tx, void *mem, uint32_t slots, uint64_t dsize,
                 size_t chunk)
{
    uint8_t *m = mem;
    memset(tx, 0, sizeof(*tx));
    tx->ctl = (struct shm_ring_ctl *)m;
    tx->slots = (struct shm_slot *)(m + RING_OFF_SLOTS);
    tx->data = m + RING_OFF_SLOTS + (size_t)slots * SHM_SLOT_SIZE;
    tx->mask = slots - 1;
    tx->dsize = dsize;
    tx->slot_lim = slots;
    tx->data_lim = dsize;
    if (chunk < SHM_DATA_ALIGN) chunk = SHM_DATA_ALIGN;
    tx->chunk = chunk;
    tx->min_chunk = chunk < SHM_MIN_CHUNK ? chunk : SHM_MIN_CHUNK;
}

void shm_rx_init(struct shm_rx *rx, void *mem, uint32_t slots, uint64_t dsize)
{
    uint8_t *m = mem;
    memset(rx, 0, sizeof(*rx));
    rx->ctl = (struct shm_ring_ctl *)m;
    rx->slots = (struct shm_slot *)(m + RING_OFF_SLOTS);
    rx->data = m + RING_OFF_SLOTS + (size_t)slots * SHM_SLOT_SIZE;
    rx->mask = slots - 1;
    rx->dsize = dsize;
}

/* Read both of the consumer's positions: called when the ring is full, so
 * that shm_tx_room_changed() compares against fresh values. */
static void refresh(struct shm_tx *tx)
{
    tx->slot_lim = atomic_load_explicit(&tx->ctl->tail, memory_order_acquire) +
                   tx->mask + 1;
    tx->data_lim = atomic_load_explicit(&tx->ctl->dtail, memory_order_acquire) +
                   tx->dsize;
}

int shm_tx_room_changed(const struct shm_tx *tx)
{
    uint64_t tail = atomic_load_explicit(&tx->ctl->tail, memory_order_relaxed);
    uint64_t dtail = atomic_load_explicit(&tx->ctl->dtail, memory_order_relaxed);
    return tail + tx->mask + 1 != tx->slot_lim || dtail + tx->dsize != tx->data_lim;
}

/* A cursor over the iovecs being written. */
struct cursor {
    const struct iovec *iov;
    int cnt;
    int i;
    size_t off;
};

/* Copy the next len bytes of the cursor to dst. */
static inline void gather(struct cursor *c, uint8_t *dst, size_t len)
{
    while (len) {
        const struct iovec *v = &c->iov[c->i];
        size_t n = v->iov_len - c->off;
        if (n > len) n = len;
        memcpy(dst, (const uint8_t *)v->iov_base + c->off, n);
        dst += n;
        len -= n;
        c->off += n;
        if (c->off == v->iov_len) {
            c->i++;
            c->off = 0;
        }
    }
}

static inline void publish(struct shm_tx *tx, struct shm_slot *s, uint64_t hdr,
                           const uint8_t *bytes, size_t len)
{
#ifdef SHM_RING_TEST_HOOK
    SHM_RING_TEST_HOOK(s, hdr, bytes, len);
#else
    (void)bytes;
    (void)len;
#endif
    atomic_store_explicit(&s->hdr, hdr, memory_order_release);
    tx->head++;
}

/* Writes that need the data area (kept out of line so that the small case
 * stays lean). */
static size_t __attribute__((noinline))
write_long(struct shm_tx *tx, const struct iovec *iov, int cnt, size_t total)
{
    struct cursor c = {iov, cnt, 0, 0};
    size_t done = 0;

    /* Split a long write into at least four chunks (of at least
     * min_chunk bytes), so that the consumer's copy out overlaps ours. */
    size_t piece = tx->chunk;
    if (total / 4 < piece)
        piece = total / 4 > tx->min_chunk ? (total / 4 + 63) & ~(size_t)63
                                           : tx->min_chunk;

    /* Skip empty leading entries so that the cursor always has bytes. */
    while (c.i < cnt && !iov[c.i].iov_len) c.i++;

    while (done < total) {
        if (tx->head == tx->slot_lim) {
            refresh(tx);
            if (tx->head == tx->slot_lim) break;
        }
        struct shm_slot *s = &tx->slots[tx->head & tx->mask];
        uint64_t seq = (uint64_t)shm_seq(tx->head) << 32;
        size_t rest = total - done;

        if (rest <= SHM_SLOT_INLINE) {
            gather(&c, s->data, rest);
            publish(tx, s, seq | rest, s->data, rest);
            done += rest;
            break;
        }

        uint64_t off = tx->dhead & (tx->dsize - 1);
        size_t len = rest;
        if (len > piece) len = piece;
        if (len > tx->dsize - off) len = (size_t)(tx->dsize - off);
        uint64_t room = tx->data_lim - tx->dhead;
        if (room < len) {
            /* Look at the consumer's line only when our view is short. */
            refresh(tx);
            room = tx->data_lim - tx->dhead;
            if (!room) break;
            if (len > room) len = (size_t)room;
        }
        uint8_t *dst = tx->data + off;
        gather(&c, dst, len);
        tx->dhead += (len + SHM_DATA_ALIGN - 1) & ~(uint64_t)(SHM_DATA_ALIGN - 1);
        publish(tx, s, seq | SHM_SLOT_EXTERN | len, dst, len);
        done += len;
    }
    return done;
}

size_t shm_tx_write(struct shm_tx *tx, const struct iovec *iov, int cnt,
                    size_t total)
{
    if (total > SHM_SLOT_INLINE) return write_long(tx, iov, cnt, total);

    /* The common small case: one slot. */
    if (tx->head == tx->slot_lim) {
        refresh(tx);
        if (tx->head == tx->slot_lim) return 0;
    }
    struct shm_slot *s = &tx->slots[tx->head & tx->mask];
    uint8_t *d = s->data;
    for (int i = 0; i < cnt; i++) {
        copy_small(d, iov[i].iov_base, iov[i].iov_len);
        d += iov[i].iov_len;
    }
    publish(tx, s, ((uint64_t)shm_seq(tx->head) << 32) | total, s->data, total);
    return total;
}
