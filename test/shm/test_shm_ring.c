/*
 * The shared-memory ring on its own (plugins/shm/shm_ring.c, compiled into
 * this program with a publication hook): inline and out-of-line slots and
 * the boundary between them, wrap-around of the slots and of the data area,
 * a full ring, stale and corrupt headers, gathering from many iovecs, the
 * order of publication, and a two-thread stream with random sizes.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "shm_ring.h"

/* ---------------------------------------------------------------------- */
/* Publication hook: runs just before each header is release-stored       */
/* ---------------------------------------------------------------------- */

static int hook_calls;
static int hook_check = 1;
/* What the bytes looked like at each publication, in order. */
static uint8_t snapshot[1 << 16];
static size_t snapshot_len;

void test_publish_hook(const struct shm_slot *slot, uint64_t hdr,
                       const uint8_t *bytes, size_t len);

void test_publish_hook(const struct shm_slot *slot, uint64_t hdr,
                       const uint8_t *bytes, size_t len)
{
    hook_calls++;
    if (!hook_check) return;
    /* The slot is not published yet: its header still holds what it had
     * before (another sequence number), so a consumer cannot see the new
     * bytes before they are all in place. */
    uint64_t old = atomic_load_explicit(&slot->hdr, memory_order_relaxed);
    assert_int_not_equal(old >> 32, hdr >> 32);
    /* The bytes the header announces are already where the consumer will
     * look for them. */
    assert_int_equal(hdr & SHM_SLOT_LEN, len);
    if (!(hdr & SHM_SLOT_EXTERN)) assert_ptr_equal(bytes, slot->data);
    if (snapshot_len + len > sizeof(snapshot)) snapshot_len = 0;
    memcpy(snapshot + snapshot_len, bytes, len);
    snapshot_len += len;
}

/* ---------------------------------------------------------------------- */
/* Helpers                                                                */
/* ---------------------------------------------------------------------- */

struct ring {
    void *mem;
    struct shm_tx tx;
    struct shm_rx rx;
    uint32_t slots;
    uint64_t dsize;
};

static struct ring *ring_new(uint32_t slots, uint64_t dsize, size_t chunk)
{
    struct ring *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    assert_true(shm_ring_geometry_ok(slots, dsize));
    r->mem = aligned_alloc(4096, (shm_ring_size(slots, dsize) + 4095) & ~4095ul);
    assert_non_null(r->mem);
    memset(r->mem, 0xee, shm_ring_size(slots, dsize)); /* not zero: format */
    shm_ring_format(r->mem, slots, dsize);
    shm_tx_init(&r->tx, r->mem, slots, dsize, chunk);
    shm_rx_init(&r->rx, r->mem, slots, dsize);
    r->slots = slots;
    r->dsize = dsize;
    return r;
}

static void ring_free(struct ring *r)
{
    free(r->mem);
    free(r);
}

static uint8_t pat(uint64_t off)
{
    return (uint8_t)(off * 131 + (off >> 8) * 7 + 1);
}

static void fill(uint8_t *buf, size_t len, uint64_t start)
{
    for (size_t i = 0; i < len; i++) buf[i] = pat(start + i);
}

static size_t write_buf(struct ring *r, const void *buf, size_t len)
{
    struct iovec iov = {(void *)buf, len};
    return shm_tx_write(&r->tx, &iov, 1, len);
}

/* Read every published slot into out (up to cap bytes); returns the byte
 * count and the number of slots in *nslots. Releases what it read. */
static size_t read_all(struct ring *r, uint8_t *out, size_t cap, int *nslots)
{
    uint64_t hdr;
    size_t got = 0;
    int n = 0;
    while (shm_rx_ready(&r->rx, &hdr)) {
        size_t len;
        const uint8_t *p = shm_rx_bytes(&r->rx, hdr, &len);
        assert_non_null(p);
        assert_true(got + len <= cap);
        memcpy(out + got, p, len);
        got += len;
        shm_rx_consume(&r->rx, hdr);
        n++;
    }
    shm_rx_release(&r->rx);
    if (nslots) *nslots = n;
    return got;
}

/* ---------------------------------------------------------------------- */
/* Tests                                                                  */
/* ---------------------------------------------------------------------- */

static void empty_ring_not_ready(void **state)
{
    struct ring *r = ring_new(8, 4096, 1024);
    uint64_t hdr;
    assert_false(shm_rx_ready(&r->rx, &hdr));
    /* A header of the previous lap in the slot is not a message either. */
    atomic_store(&r->rx.slots[0].hdr, ((uint64_t)shm_seq(0 - 8ull) << 32) | 5);
    assert_false(shm_rx_ready(&r->rx, &hdr));
    ring_free(r);
}

static void small_message_inline(void **state)
{
    struct ring *r = ring_new(8, 4096, 1024);
    uint8_t hdr8[8], data[8], out[64];
    fill(hdr8, 8, 0);
    fill(data, 8, 8);
    struct iovec iov[2] = {{hdr8, 8}, {data, 8}};
    hook_calls = 0;
    assert_int_equal(shm_tx_write(&r->tx, iov, 2, 16), 16);
    assert_int_equal(hook_calls, 1);

    uint64_t h = 0;
    assert_true(shm_rx_ready(&r->rx, &h));
    assert_false(h & SHM_SLOT_EXTERN);
    assert_int_equal(h & SHM_SLOT_LEN, 16);
    size_t len;
    const uint8_t *p = shm_rx_bytes(&r->rx, h, &len);
    assert_ptr_equal(p, r->rx.slots[0].data); /* in the header's slot */
    int n;
    assert_int_equal(read_all(r, out, sizeof(out), &n), 16);
    assert_int_equal(n, 1);
    for (int i = 0; i < 16; i++) assert_int_equal(out[i], pat(i));
    assert_int_equal(r->tx.dhead, 0); /* the data area was not used */
    ring_free(r);
}

static void inline_boundary(void **state)
{
    struct ring *r = ring_new(8, 4096, 1024);
    uint8_t buf[SHM_SLOT_INLINE + 1], out[256];
    fill(buf, sizeof(buf), 0);
    uint64_t h = 0;

    /* Exactly the inline room: one inline slot. */
    assert_int_equal(write_buf(r, buf, SHM_SLOT_INLINE), SHM_SLOT_INLINE);
    assert_true(shm_rx_ready(&r->rx, &h));
    assert_false(h & SHM_SLOT_EXTERN);
    assert_int_equal(read_all(r, out, sizeof(out), NULL), SHM_SLOT_INLINE);
    assert_memory_equal(out, buf, SHM_SLOT_INLINE);

    /* One byte more: the data area, rounded to 64 bytes. */
    assert_int_equal(write_buf(r, buf, SHM_SLOT_INLINE + 1), SHM_SLOT_INLINE + 1);
    assert_true(shm_rx_ready(&r->rx, &h));
    assert_true(h & SHM_SLOT_EXTERN);
    assert_int_equal(h & SHM_SLOT_LEN, SHM_SLOT_INLINE + 1);
    assert_int_equal(read_all(r, out, sizeof(out), NULL), SHM_SLOT_INLINE + 1);
    assert_memory_equal(out, buf, SHM_SLOT_INLINE + 1);
    assert_int_equal(r->tx.dhead, 128);
    assert_int_equal(r->rx.dhead, 128);
    assert_int_equal(atomic_load(&r->rx.ctl->dtail), 128);
    ring_free(r);
}

static void slot_wrap_around(void **state)
{
    struct ring *r = ring_new(8, 4096, 1024);
    uint8_t buf[64], out[64];
    /* Many laps of the 8 slots, one message at a time. */
    for (uint64_t i = 0; i < 8 * 40 + 3; i++) {
        size_t len = 1 + i % SHM_SLOT_INLINE % 60;
        fill(buf, len, i);
        assert_int_equal(write_buf(r, buf, len), len);
        int n;
        assert_int_equal(read_all(r, out, sizeof(out), &n), len);
        assert_int_equal(n, 1);
        for (size_t k = 0; k < len; k++) assert_int_equal(out[k], pat(i + k));
    }
    assert_int_equal(r->rx.head, 8 * 40 + 3);
    ring_free(r);
}

static void data_wrap_splits_at_end(void **state)
{
    /* chunk 1024 in a 4096-byte area; start at 3000 (rounded to 3008) so
     * that the next long write meets the end. */
    struct ring *r = ring_new(16, 4096, 1024);
    uint8_t *buf = malloc(8192), *out = malloc(8192);
    fill(buf, 3000, 0);
    assert_int_equal(write_buf(r, buf, 3000), 3000);
    assert_int_equal(read_all(r, out, 8192, NULL), 3000);
    assert_int_equal(r->tx.dhead, 3008);

    fill(buf, 2000, 77);
    assert_int_equal(write_buf(r, buf, 2000), 2000);
    /* Slots: 1024 would cross 4096 at 3008, so the first chunk is 1088
     * bytes up to the end, then the rest from offset 0. */
    uint64_t h = 0;
    size_t len;
    assert_true(shm_rx_ready(&r->rx, &h));
    const uint8_t *p = shm_rx_bytes(&r->rx, h, &len);
    assert_int_equal(len, 1024);
    assert_ptr_equal(p, r->rx.data + 3008);
    shm_rx_consume(&r->rx, h);
    assert_true(shm_rx_ready(&r->rx, &h));
    p = shm_rx_bytes(&r->rx, h, &len);
    assert_int_equal(len, 64);
    assert_ptr_equal(p, r->rx.data + 4032);
    shm_rx_consume(&r->rx, h);
    assert_true(shm_rx_ready(&r->rx, &h));
    p = shm_rx_bytes(&r->rx, h, &len);
    assert_ptr_equal(p, r->rx.data); /* wrapped */
    assert_int_equal(len, 2000 - 1024 - 64);
    shm_rx_consume(&r->rx, h);
    assert_false(shm_rx_ready(&r->rx, &h));
    shm_rx_release(&r->rx);

    /* And the bytes are the stream, in order, through the wrap. */
    r->rx.head -= 3;
    r->rx.dhead = 3008;
    assert_int_equal(read_all(r, out, 8192, NULL), 2000);
    assert_memory_equal(out, buf, 2000);
    free(buf);
    free(out);
    ring_free(r);
}

static void full_slots(void **state)
{
    struct ring *r = ring_new(8, 4096, 1024);
    uint8_t buf[16], out[16 * 8];
    fill(buf, 16, 0);
    for (int i = 0; i < 8; i++) assert_int_equal(write_buf(r, buf, 16), 16);
    /* Ninth: no slot free, nothing written, nothing published. */
    hook_calls = 0;
    assert_int_equal(write_buf(r, buf, 16), 0);
    assert_int_equal(hook_calls, 0);
    assert_false(shm_tx_room_changed(&r->tx));

    /* The consumer reads one slot but has not given it back: still full. */
    uint64_t h = 0;
    assert_true(shm_rx_ready(&r->rx, &h));
    shm_rx_consume(&r->rx, h);
    assert_int_equal(write_buf(r, buf, 16), 0);
    /* Given back: the producer notices and can write exactly one more. */
    shm_rx_release(&r->rx);
    assert_true(shm_tx_room_changed(&r->tx));
    assert_int_equal(write_buf(r, buf, 16), 16);
    assert_int_equal(write_buf(r, buf, 16), 0);
    int n;
    assert_int_equal(read_all(r, out, sizeof(out), &n), 16 * 8);
    assert_int_equal(n, 8);
    ring_free(r);
}

static void full_data(void **state)
{
    struct ring *r = ring_new(64, 4096, 2048);
    uint8_t *buf = malloc(16384), *out = malloc(16384);
    fill(buf, 16384, 0);
    /* Two chunks fill the 4096 data bytes, then the ring is full. */
    assert_int_equal(write_buf(r, buf, 10000), 4096);
    assert_int_equal(write_buf(r, buf + 4096, 10000 - 4096), 0);
    assert_false(shm_tx_room_changed(&r->tx));
    /* A short tail still fits inline while the data area is full. */
    assert_int_equal(write_buf(r, buf + 4096, 100), 100);

    assert_int_equal(read_all(r, out, 16384, NULL), 4196);
    assert_memory_equal(out, buf, 4196);
    assert_true(shm_tx_room_changed(&r->tx));
    /* Everything given back: the next long write gets the whole area. */
    assert_int_equal(write_buf(r, buf + 4196, 4096), 4096);
    ring_free(r);
    free(buf);
    free(out);
}

static void partial_write_resumes(void **state)
{
    /* A long write stops when the ring is full and continues where it left
     * off once the consumer gives room back: the stream stays intact. */
    struct ring *r = ring_new(8, 4096, 512);
    size_t total = 100000, sent = 0, got = 0;
    uint8_t *buf = malloc(total), *out = malloc(total);
    fill(buf, total, 5);
    int rounds = 0;
    while (got < total) {
        if (sent < total) {
            struct iovec iov = {buf + sent, total - sent};
            sent += shm_tx_write(&r->tx, &iov, 1, total - sent);
        }
        got += read_all(r, out + got, total - got, NULL);
        assert_true(++rounds < 100000);
    }
    assert_memory_equal(out, buf, total);
    free(buf);
    free(out);
    ring_free(r);
}

static void gather_many_iovecs(void **state)
{
    struct ring *r = ring_new(64, 8192, 1000);
    uint8_t src[3000], out[3000];
    fill(src, sizeof(src), 9);
    struct iovec iov[40];
    size_t off = 0;
    int cnt = 0;
    /* Pieces of 0..150 bytes, empty ones included (a frame without body). */
    for (int i = 0; off < sizeof(src) && cnt < 40; i++, cnt++) {
        size_t len = (size_t)(i * 37) % 151;
        if (off + len > sizeof(src) || cnt == 39) len = sizeof(src) - off;
        iov[cnt].iov_base = src + off;
        iov[cnt].iov_len = len;
        off += len;
    }
    assert_int_equal(off, sizeof(src));
    assert_int_equal(shm_tx_write(&r->tx, iov, cnt, off), off);
    int n;
    assert_int_equal(read_all(r, out, sizeof(out), &n), off);
    assert_memory_equal(out, src, off);
    assert_int_equal(n, 3); /* chunks of 1000 bytes across the pieces */
    ring_free(r);
}

static void corrupt_headers_rejected(void **state)
{
    struct ring *r = ring_new(8, 4096, 1024);
    size_t len;
    uint64_t seq = (uint64_t)shm_seq(0) << 32;
    /* Inline length beyond the slot. */
    assert_null(shm_rx_bytes(&r->rx, seq | (SHM_SLOT_INLINE + 1), &len));
    /* Out-of-line chunk crossing the end of the data area. */
    r->rx.dhead = 4032;
    assert_null(shm_rx_bytes(&r->rx, seq | SHM_SLOT_EXTERN | 65, &len));
    assert_non_null(shm_rx_bytes(&r->rx, seq | SHM_SLOT_EXTERN | 64, &len));
    assert_null(shm_rx_bytes(&r->rx, seq | SHM_SLOT_EXTERN | 0, &len));
    ring_free(r);
}

/* Every publication comes after its bytes: the hook, which runs just
 * before the header store, already sees the final bytes of each slot, and
 * the slot still carries its old header. */
static void publish_order(void **state)
{
    struct ring *r = ring_new(8, 4096, 256);
    uint8_t src[1500], out[1600];
    fill(src, sizeof(src), 3);
    struct iovec iov[3] = {{src, 8}, {src + 8, 40}, {src + 48, 1452}};
    snapshot_len = 0;
    hook_calls = 0;
    assert_int_equal(shm_tx_write(&r->tx, iov, 3, 1500), 1500);
    assert_int_equal(hook_calls, 6); /* 5 chunks of 256 + 220 */
    assert_int_equal(snapshot_len, 1500);
    assert_memory_equal(snapshot, src, 1500);
    /* A short one after them, inline. */
    snapshot_len = 0;
    assert_int_equal(write_buf(r, src, 30), 30);
    assert_int_equal(snapshot_len, 30);
    assert_memory_equal(snapshot, src, 30);
    assert_int_equal(read_all(r, out, sizeof(out), NULL), 1530);
    assert_memory_equal(out, src, 1500);
    assert_memory_equal(out + 1500, src, 30);
    ring_free(r);
}

/* A long write is split so that the consumer can start early: at least
 * four chunks, none smaller than SHM_MIN_CHUNK, none larger than chunk. */
static void long_write_split(void **state)
{
    struct ring *r = ring_new(64, 1 << 20, 16384);
    uint8_t *buf = malloc(1 << 20), *out = malloc(1 << 20);
    fill(buf, 1 << 20, 1);
    static const struct {
        size_t total, chunks;
    } cases[] = {
        {16384, 4},   /* 4 x 4 KiB */
        {4096, 2},    /* 2 x SHM_MIN_CHUNK */
        {65536, 4},   /* 4 x 16 KiB */
        {262144, 16}, /* the chunk size caps it */
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        hook_calls = 0;
        assert_int_equal(write_buf(r, buf, cases[k].total), cases[k].total);
        assert_int_equal(hook_calls, cases[k].chunks);
        int n;
        assert_int_equal(read_all(r, out, 1 << 20, &n), cases[k].total);
        assert_int_equal(n, cases[k].chunks);
        assert_memory_equal(out, buf, cases[k].total);
    }
    free(buf);
    free(out);
    ring_free(r);
}

/* Slots of small messages are given back once a quarter of the ring is
 * consumed, not one by one; data chunks at once. */
static void lazy_release(void **state)
{
    struct ring *r = ring_new(16, 4096, 1024);
    uint8_t buf[16];
    uint64_t h = 0;
    fill(buf, sizeof(buf), 0);
    for (int i = 0; i < 16; i++) assert_int_equal(write_buf(r, buf, 16), 16);
    for (int i = 0; i < 3; i++) {
        assert_true(shm_rx_ready(&r->rx, &h));
        shm_rx_consume(&r->rx, h);
        shm_rx_release_lazy(&r->rx);
        assert_int_equal(atomic_load(&r->rx.ctl->tail), 0);
    }
    assert_true(shm_rx_ready(&r->rx, &h));
    shm_rx_consume(&r->rx, h);
    shm_rx_release_lazy(&r->rx); /* the fourth of 16 slots */
    assert_int_equal(atomic_load(&r->rx.ctl->tail), 4);
    /* The producer, full, sees the four slots. */
    assert_true(shm_tx_room_changed(&r->tx));
    for (int i = 0; i < 4; i++) assert_int_equal(write_buf(r, buf, 16), 16);
    assert_int_equal(write_buf(r, buf, 16), 0);
    ring_free(r);
}

static void geometry(void **state)
{
    assert_true(shm_ring_geometry_ok(8, 4096));
    assert_false(shm_ring_geometry_ok(12, 4096));
    assert_false(shm_ring_geometry_ok(4, 4096));
    assert_false(shm_ring_geometry_ok(8, 6000));
    assert_false(shm_ring_geometry_ok(8, 2048));
    assert_int_equal(shm_ring_size(8, 4096), 128 + 8 * 128 + 4096);
}

/* Two threads: the producer writes random-sized pieces of a patterned
 * stream, the consumer checks every byte. Catches a header published before
 * its bytes or room given back before the bytes were read, as far as the
 * machine shows it. */
struct stream {
    struct ring *r;
    size_t total;
    int failed;
};

static void *producer(void *arg)
{
    struct stream *s = arg;
    uint8_t *buf = malloc(70000);
    unsigned seed = 12345;
    size_t off = 0;
    while (off < s->total) {
        size_t len = (size_t)rand_r(&seed) % (rand_r(&seed) % 4 ? 200 : 70000);
        if (len > s->total - off) len = s->total - off;
        fill(buf, len, off);
        size_t done = 0;
        while (done < len) {
            struct iovec iov = {buf + done, len - done};
            done += shm_tx_write(&s->r->tx, &iov, 1, len - done);
        }
        off += len;
    }
    free(buf);
    return NULL;
}

static void threaded_stream(void **state)
{
    hook_check = 0; /* the hook's reads would race with the consumer */
    struct ring *r = ring_new(64, 16384, 2048);
    struct stream s = {r, 20u << 20, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, producer, &s), 0);
    size_t got = 0;
    uint64_t hdr;
    while (got < s.total) {
        if (!shm_rx_ready(&r->rx, &hdr)) continue;
        size_t len;
        const uint8_t *p = shm_rx_bytes(&r->rx, hdr, &len);
        assert_non_null(p);
        for (size_t i = 0; i < len; i++)
            if (p[i] != pat(got + i)) {
                fail_msg("byte %zu of the stream is %u, expected %u", got + i,
                         p[i], pat(got + i));
            }
        got += len;
        shm_rx_consume(&r->rx, hdr);
        shm_rx_release(&r->rx);
    }
    pthread_join(t, NULL);
    assert_int_equal(got, s.total);
    ring_free(r);
    hook_check = 1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty_ring_not_ready),
        cmocka_unit_test(small_message_inline),
        cmocka_unit_test(inline_boundary),
        cmocka_unit_test(slot_wrap_around),
        cmocka_unit_test(data_wrap_splits_at_end),
        cmocka_unit_test(full_slots),
        cmocka_unit_test(full_data),
        cmocka_unit_test(partial_write_resumes),
        cmocka_unit_test(gather_many_iovecs),
        cmocka_unit_test(corrupt_headers_rejected),
        cmocka_unit_test(publish_order),
        cmocka_unit_test(long_write_split),
        cmocka_unit_test(lazy_release),
        cmocka_unit_test(geometry),
        cmocka_unit_test(threaded_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
