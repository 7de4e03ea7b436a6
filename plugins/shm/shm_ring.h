/*
 * One direction of a shared-memory connection: a single-producer,
 * single-consumer ring that carries a byte stream.
 *
 * Layout in the shared segment (every part 128-byte aligned, so that the
 * adjacent-line prefetcher never pairs lines that the two sides write):
 *
 *   struct shm_ring_ctl   written by the consumer only: how far it has read
 *   struct shm_slot[n]    n = 2^k slots of 128 bytes, written by the producer
 *   data[dsize]           dsize = 2^k bytes, written by the producer
 *
 * A slot is one cache line of header and inline bytes (plus a second line
 * for up to 120 inline bytes). Its first word, hdr, is the slot's publication:
 * the producer writes the bytes, then release-stores hdr = seq << 32 | flags |
 * len, where seq is the slot's running number + 1 (never 0, so zeroed memory
 * is not a message, and a slot's value from the previous lap differs from
 * the expected one). The consumer acquire-loads hdr of its next slot and
 * compares seq: one load, in the line that also holds the bytes of a small
 * message. An 8-byte send and its reply thus touch one line per direction.
 *
 * Streams longer than a slot's inline room go to the data area in chunks;
 * the slot then only says how long the chunk is (SHM_SLOT_EXTERN). The
 * chunk's place is implicit: both sides advance the same running data
 * position (rounded to 64 bytes per chunk), and a chunk never crosses the
 * end of the data area. Because slot headers live only in the slot array,
 * stale bytes in the data area can never be mistaken for a header.
 *
 * The consumer gives slots and data back by release-storing its positions
 * in shm_ring_ctl after it has copied the bytes out. The producer keeps its
 * own copies of the limits and reads the consumer's line only when they say
 * the ring is full, so in steady state the control line does not move
 * between the caches.
 *
 * Nothing here makes a system call or takes a lock. The producer and
 * consumer state structs are private to their process.
 */
#ifndef SHM_RING_H
#define SHM_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define SHM_CACHE_LINE  64
#define SHM_SLOT_SIZE   128
#define SHM_SLOT_INLINE (SHM_SLOT_SIZE - 8)
#define SHM_DATA_ALIGN  64
#define SHM_MIN_CHUNK   2048 /* a long write is split into >= 4 chunks of >= this */

#define SHM_SLOT_EXTERN 0x80000000u /* hdr bit: the bytes are in the data area */
#define SHM_SLOT_LEN    0x7fffffffu /* hdr bits: byte count */

/* Smallest and largest ring geometry accepted from a peer. */
#define SHM_SLOTS_MIN 8u
#define SHM_SLOTS_MAX (1u << 20)
#define SHM_DATA_MIN  ((uint64_t)4096)
#define SHM_DATA_MAX  ((uint64_t)1 << 30)

struct shm_slot {
    _Atomic uint64_t hdr;
    uint8_t data[SHM_SLOT_INLINE];
};

/* The consumer's published positions. */
struct shm_ring_ctl {
    _Atomic uint64_t tail;  /* slots read */
    _Atomic uint64_t dtail; /* data bytes released (a multiple of 64) */
    uint8_t pad[SHM_SLOT_SIZE - 16];
};

_Static_assert(sizeof(struct shm_slot) == SHM_SLOT_SIZE, "slot size");
_Static_assert(sizeof(struct shm_ring_ctl) == SHM_SLOT_SIZE, "ctl size");

/* Producer state (private). */
struct shm_tx {
    struct shm_slot *slots;
    uint8_t *data;
    struct shm_ring_ctl *ctl;
    uint32_t mask;      /* slots - 1 */
    uint64_t dsize;
    uint64_t head;      /* next slot to write */
    uint64_t dhead;     /* next data byte to write */
    uint64_t slot_lim;  /* head may go up to here (consumer tail + slots) */
    uint64_t data_lim;  /* dhead may go up to here */
    size_t chunk;       /* largest chunk per slot */
    size_t min_chunk;   /* smallest chunk when splitting a write */
};

/* Consumer state (private). */
struct shm_rx {
    struct shm_slot *slots;
    const uint8_t *data;
    struct shm_ring_ctl *ctl;
    uint32_t mask;
    uint64_t dsize;
    uint64_t head;      /* next slot to read */
    uint64_t dhead;     /* data position of the next chunk */
    uint64_t released;  /* head as last given back */
};

/* Bytes of shared memory a ring of `slots` slots and `dsize` data bytes
 * needs (both powers of two). */
size_t shm_ring_size(uint32_t slots, uint64_t dsize);

/* 1 when slots and dsize are an acceptable geometry. */
int shm_ring_geometry_ok(uint32_t slots, uint64_t dsize);

/* Zero a ring's control part and slots in fresh memory `mem`. */
void shm_ring_format(void *mem, uint32_t slots, uint64_t dsize);

/* Attach the two sides to the ring at `mem`. chunk: largest number of bytes
 * per data chunk (at least 64). */
void shm_tx_init(struct shm_tx *tx, void *mem, uint32_t slots, uint64_t dsize,
                 size_t chunk);
void shm_rx_init(struct shm_rx *rx, void *mem, uint32_t slots, uint64_t dsize);

/* Copy up to `total` bytes of iov[0..cnt) into the ring and publish them.
 * Returns the number written: less than total when the ring is full. */
size_t shm_tx_write(struct shm_tx *tx, const struct iovec *iov, int cnt,
                    size_t total);

/* 1 when the consumer has given back room since the producer last looked
 * (reads the consumer's line). */
int shm_tx_room_changed(const struct shm_tx *tx);

static inline uint32_t shm_seq(uint64_t n)
{
    return (uint32_t)(n + 1);
}

/* The header word the consumer waits for in slot `head`. */
static inline const _Atomic uint64_t *shm_rx_next_hdr(const struct shm_rx *rx)
{
    return &rx->slots[rx->head & rx->mask].hdr;
}

/* 1 and *hdr set when the next slot is published. */
static inline int shm_rx_ready(const struct shm_rx *rx, uint64_t *hdr)
{
    uint64_t h = atomic_load_explicit(shm_rx_next_hdr(rx), memory_order_acquire);
    if ((uint32_t)(h >> 32) != shm_seq(rx->head)) return 0;
    *hdr = h;
    return 1;
}

/* Where the bytes of the ready slot are. NULL when the header is out of
 * bounds (a broken peer). */
static inline const uint8_t *shm_rx_bytes(const struct shm_rx *rx, uint64_t hdr,
                                          size_t *len)
{
    size_t n = (size_t)(hdr & SHM_SLOT_LEN);
    *len = n;
    if (!(hdr & SHM_SLOT_EXTERN)) {
        if (n > SHM_SLOT_INLINE) return NULL;
        return rx->slots[rx->head & rx->mask].data;
    }
    uint64_t off = rx->dhead & (rx->dsize - 1);
    if (n == 0 || n > rx->dsize - off) return NULL;
    return rx->data + off;
}

/* The ready slot's bytes are used up (not yet given back). */
static inline void shm_rx_consume(struct shm_rx *rx, uint64_t hdr)
{
    rx->head++;
    if (hdr & SHM_SLOT_EXTERN)
        rx->dhead += ((hdr & SHM_SLOT_LEN) + SHM_DATA_ALIGN - 1) &
                     ~(uint64_t)(SHM_DATA_ALIGN - 1);
}

/* Give everything consumed back to the producer. */
static inline void shm_rx_release(struct shm_rx *rx)
{
    atomic_store_explicit(&rx->ctl->dtail, rx->dhead, memory_order_release);
    atomic_store_explicit(&rx->ctl->tail, rx->head, memory_order_release);
    rx->released = rx->head;
}

/* Give consumed slots back once a quarter of the ring is used up: the
 * producer still sees three quarters free, and the consumer's control line
 * is written once per many small messages. (Data chunks are given back at
 * once with shm_rx_release().) */
static inline void shm_rx_release_lazy(struct shm_rx *rx)
{
    if (rx->head - rx->released >= (rx->mask + 1) / 4) shm_rx_release(rx);
}

#endif
