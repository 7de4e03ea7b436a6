/*
 * The verbs plugin's wire formats (plugins/verbs/wireup.c): round trips,
 * every truncation and extension rejected, random mutations either rejected
 * or decoded into something that encodes back to the same bytes, version
 * and field checks. Inputs live in heap buffers of their exact length, so
 * valgrind or ASan catch any read past the end.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "wireup.h"

static vb_wireup_t sample(void)
{
    vb_wireup_t w = {
        .flags = VB_WIREUP_GID_VALID,
        .mtu = 5,
        .rd_atom = 16,
        .qpn = 0x123456,
        .psn = 0xabcdef,
        .lid = 0x1234,
        .port = 1,
        .link_layer = 1,
        .ring = 16,
        .slot_size = 16384,
    };
    for (int i = 0; i < 16; i++) w.gid[i] = (uint8_t)(0xf0 + i);
    return w;
}

static uint8_t *dup_exact(const uint8_t *src, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    memcpy(p, src, len);
    return p;
}

static void wireup_round_trip(void **state)
{
    vb_wireup_t w = sample(), r;
    uint8_t buf[VB_WIREUP_LEN];
    assert_int_equal(vb_wireup_encode(&w, buf, sizeof(buf)), VB_WIREUP_LEN);
    /* Explicit little-endian layout. */
    assert_int_equal(buf[0], 'V');
    assert_int_equal(buf[1], 'B');
    assert_int_equal(buf[2], VB_WIREUP_VERSION);
    assert_int_equal(buf[8], 0x56);
    assert_int_equal(buf[9], 0x34);
    assert_int_equal(buf[10], 0x12);
    assert_int_equal(buf[11], 0);
    assert_int_equal(buf[16], 0x34);
    assert_int_equal(buf[17], 0x12);
    assert_int_equal(vb_wireup_decode(buf, sizeof(buf), &r), 0);
    assert_memory_equal(&r.gid, &w.gid, 16);
    assert_int_equal(r.qpn, w.qpn);
    assert_int_equal(r.psn, w.psn);
    assert_int_equal(r.lid, w.lid);
    assert_int_equal(r.mtu, w.mtu);
    assert_int_equal(r.rd_atom, w.rd_atom);
    assert_int_equal(r.port, w.port);
    assert_int_equal(r.link_layer, w.link_layer);
    assert_int_equal(r.flags, w.flags);
    assert_int_equal(r.ring, w.ring);
    assert_int_equal(r.slot_size, w.slot_size);
}

static void wireup_encode_errors(void **state)
{
    vb_wireup_t w = sample();
    uint8_t buf[VB_WIREUP_LEN];
    assert_int_equal(vb_wireup_encode(&w, buf, VB_WIREUP_LEN - 1), -ENOSPC);
    w.qpn = 0;
    assert_int_equal(vb_wireup_encode(&w, buf, sizeof(buf)), -EINVAL);
    w = sample();
    w.ring = 1;
    assert_int_equal(vb_wireup_encode(&w, buf, sizeof(buf)), -EINVAL);
}

static void wireup_truncations(void **state)
{
    vb_wireup_t w = sample(), r;
    uint8_t buf[VB_WIREUP_LEN + 8] = {0};
    assert_int_equal(vb_wireup_encode(&w, buf, sizeof(buf)), VB_WIREUP_LEN);
    for (size_t len = 0; len < VB_WIREUP_LEN; len++) {
        uint8_t *p = dup_exact(buf, len);
        assert_int_equal(vb_wireup_decode(p, len, &r), -EPROTO);
        free(p);
    }
    /* Longer than version 1 (trailing bytes): refused too. */
    for (size_t len = VB_WIREUP_LEN + 1; len <= sizeof(buf); len++) {
        uint8_t *p = dup_exact(buf, len);
        assert_int_equal(vb_wireup_decode(p, len, &r), -EPROTO);
        free(p);
    }
    assert_int_equal(vb_wireup_decode(NULL, 0, &r), -EPROTO);
}

static void wireup_version_and_fields(void **state)
{
    vb_wireup_t w = sample(), r;
    uint8_t good[VB_WIREUP_LEN], b[VB_WIREUP_LEN];
    vb_wireup_encode(&w, good, sizeof(good));
    struct {
        size_t off;
        uint8_t val;
        const char *what;
    } bad[] = {
        {0, 'X', "magic"},
        {1, 'X', "magic"},
        {2, 2, "a newer version"},
        {2, 0, "version 0"},
        {3, 0x02, "an unknown flag"},
        {4, 45, "the length field"},
        {5, 1, "the length field"},
        {6, 0, "MTU 0"},
        {6, 6, "MTU 6"},
        {11, 1, "a QP number >= 2^24"},
        {15, 1, "a PSN >= 2^24"},
        {18, 0, "port 0"},
        {19, 3, "a link layer"},
        {37, 0, "ring 16 -> 16 (high byte 0 is fine)"},
        {38, 1, "reserved bytes"},
        {43, 2, "a slot size above 16 MiB"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memcpy(b, good, sizeof(b));
        b[bad[i].off] = bad[i].val;
        int rc = vb_wireup_decode(b, sizeof(b), &r);
        if (bad[i].off == 37) {
            assert_int_equal(rc, 0); /* a control: still valid */
            continue;
        }
        if (rc != -EPROTO) fail_msg("%s was accepted", bad[i].what);
    }
    /* QP number 0, ring 1, tiny slots. */
    memcpy(b, good, sizeof(b));
    memset(b + 8, 0, 4);
    assert_int_equal(vb_wireup_decode(b, sizeof(b), &r), -EPROTO);
    memcpy(b, good, sizeof(b));
    b[36] = 1;
    b[37] = 0;
    assert_int_equal(vb_wireup_decode(b, sizeof(b), &r), -EPROTO);
    memcpy(b, good, sizeof(b));
    memset(b + 40, 0, 4);
    b[40] = 63;
    assert_int_equal(vb_wireup_decode(b, sizeof(b), &r), -EPROTO);
}

/* xorshift: reproducible, no libc rand state. */
static uint32_t rnd(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void wireup_random_mutations(void **state)
{
    vb_wireup_t w = sample(), r;
    uint8_t good[VB_WIREUP_LEN];
    vb_wireup_encode(&w, good, sizeof(good));
    uint32_t s = 12345;
    unsigned accepted = 0;
    for (int it = 0; it < 200000; it++) {
        size_t len = VB_WIREUP_LEN;
        if (it % 7 == 0) len = rnd(&s) % (VB_WIREUP_LEN + 9);
        uint8_t *p = malloc(len ? len : 1);
        for (size_t i = 0; i < len; i++)
            p[i] = i < VB_WIREUP_LEN ? good[i] : (uint8_t)rnd(&s);
        int flips = 1 + (int)(rnd(&s) % 4);
        for (int f = 0; f < flips && len; f++)
            p[rnd(&s) % len] ^= (uint8_t)(1u << (rnd(&s) % 8));
        if (it % 11 == 0)
            for (size_t i = 0; i < len; i++) p[i] = (uint8_t)rnd(&s);
        int rc = vb_wireup_decode(p, len, &r);
        if (rc == 0) {
            /* Accepted: canonical, so it encodes back to the same bytes. */
            uint8_t again[VB_WIREUP_LEN];
            assert_int_equal(len, VB_WIREUP_LEN);
            assert_int_equal(vb_wireup_encode(&r, again, sizeof(again)),
                             VB_WIREUP_LEN);
            assert_memory_equal(again, p, VB_WIREUP_LEN);
            accepted++;
        } else {
            assert_int_equal(rc, -EPROTO);
        }
        free(p);
    }
    /* Flips in the GID, PSN, LID, ... are still valid blobs. */
    assert_true(accepted > 0);
}

static void rndv_blob(void **state)
{
    vb_rndv_desc_t d = {.rkey = 0xdeadbeef,
                        .addr = 0x00007fff12345678ull,
                        .len = 1ull << 33,
                        .handle = 0x00050003},
                   r;
    uint8_t buf[64];
    assert_int_equal(vb_rndv_encode(&d, buf, sizeof(buf)), VB_RNDV_LEN);
    assert_true(VB_RNDV_LEN <= 64); /* fits the core's rendezvous blob */
    assert_int_equal(vb_rndv_decode(buf, VB_RNDV_LEN, &r), 0);
    assert_int_equal(r.rkey, d.rkey);
    assert_int_equal(r.addr, d.addr);
    assert_int_equal(r.len, d.len);
    assert_int_equal(r.handle, d.handle);
    for (size_t len = 0; len < VB_RNDV_LEN; len++) {
        uint8_t *p = dup_exact(buf, len);
        assert_int_equal(vb_rndv_decode(p, len, &r), -EPROTO);
        free(p);
    }
    assert_int_equal(vb_rndv_decode(buf, VB_RNDV_LEN + 1, &r), -EPROTO);
    uint8_t b[VB_RNDV_LEN];
    memcpy(b, buf, sizeof(b));
    b[0] = 2;
    assert_int_equal(vb_rndv_decode(b, sizeof(b), &r), -EPROTO);
    memcpy(b, buf, sizeof(b));
    b[2] = 1;
    assert_int_equal(vb_rndv_decode(b, sizeof(b), &r), -EPROTO);
    memcpy(b, buf, sizeof(b));
    memset(b + 16, 0, 8); /* length 0 */
    assert_int_equal(vb_rndv_decode(b, sizeof(b), &r), -EPROTO);
    memcpy(b, buf, sizeof(b));
    memset(b + 8, 0xff, 8); /* address + length wraps */
    assert_int_equal(vb_rndv_decode(b, sizeof(b), &r), -EPROTO);
    d.len = 0;
    assert_int_equal(vb_rndv_encode(&d, buf, sizeof(buf)), -EINVAL);
    d.len = 1;
    assert_int_equal(vb_rndv_encode(&d, buf, VB_RNDV_LEN - 1), -ENOSPC);
}

static void rma_key(void **state)
{
    vb_rmakey_t k = {.flags = VB_WIREUP_GID_VALID, .lid = 0x0102,
                     .rkey = 0xcafef00d, .addr = 0x00007fff00001000ull,
                     .len = 3ull << 30},
                r;
    for (int i = 0; i < 16; i++) k.gid[i] = (uint8_t)(0xa0 + i);
    uint8_t buf[VB_RMAKEY_LEN + 8];
    assert_int_equal(vb_rmakey_encode(&k, buf, sizeof(buf)), VB_RMAKEY_LEN);
    assert_true(VB_RMAKEY_LEN <= 128); /* PSCOM_PLUGIN_RKEY_MAX */
    assert_int_equal(buf[4], 0x0d); /* little-endian rkey */
    assert_int_equal(vb_rmakey_decode(buf, VB_RMAKEY_LEN, &r), 0);
    assert_int_equal(r.flags, k.flags);
    assert_int_equal(r.lid, k.lid);
    assert_int_equal(r.rkey, k.rkey);
    assert_int_equal(r.addr, k.addr);
    assert_int_equal(r.len, k.len);
    assert_memory_equal(r.gid, k.gid, 16);
    /* Every other length, a newer version, unknown flags, length 0, a
     * range that wraps. */
    for (size_t len = 0; len < sizeof(buf); len++) {
        if (len == VB_RMAKEY_LEN) continue;
        uint8_t *p = dup_exact(buf, len);
        assert_int_equal(vb_rmakey_decode(p, len, &r), -EPROTO);
        free(p);
    }
    uint8_t b[VB_RMAKEY_LEN];
    const struct {
        size_t off, n;
        uint8_t val;
    } bad[] = {{0, 1, 2}, {1, 1, 0x02}, {16, 8, 0}, {8, 8, 0xff}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memcpy(b, buf, sizeof(b));
        memset(b + bad[i].off, bad[i].val, bad[i].n);
        assert_int_equal(vb_rmakey_decode(b, sizeof(b), &r), -EPROTO);
    }
    assert_int_equal(vb_rmakey_encode(&k, buf, VB_RMAKEY_LEN - 1), -ENOSPC);
    k.len = 0;
    assert_int_equal(vb_rmakey_encode(&k, buf, sizeof(buf)), -EINVAL);
}

static void msg_header(void **state)
{
    uint8_t buf[64] = {0};
    vb_msg_hdr_t h = {.credits = 0x1234, .nrel = 2, .len = 10}, r;
    vb_msg_encode(&h, buf);
    vb_msg_put_handle(buf, 0, 0x11223344);
    vb_msg_put_handle(buf, 1, 0x55667788);
    memcpy(buf + VB_MSG_HDR_LEN + 8, "0123456789", 10);
    size_t total = VB_MSG_HDR_LEN + 8 + 10;
    assert_int_equal(vb_msg_decode(buf, total, &r), 0);
    assert_int_equal(r.credits, 0x1234);
    assert_int_equal(r.nrel, 2);
    assert_int_equal(r.len, 10);
    assert_int_equal(vb_msg_handle(buf, 0), 0x11223344);
    assert_int_equal(vb_msg_handle(buf, 1), 0x55667788);
    assert_memory_equal(vb_msg_payload(buf, &r), "0123456789", 10);
    /* The parts must fill the message exactly. */
    for (size_t len = 0; len < 64; len++) {
        uint8_t *p = dup_exact(buf, len);
        int rc = vb_msg_decode(p, len, &r);
        assert_int_equal(rc, len == total ? 0 : -EPROTO);
        free(p);
    }
    buf[3] = 1; /* flags */
    assert_int_equal(vb_msg_decode(buf, total, &r), -EPROTO);
    buf[3] = 0;
    /* A huge len cannot wrap the size check. */
    h.len = 0xffffffffu;
    h.nrel = 255;
    vb_msg_encode(&h, buf);
    assert_int_equal(vb_msg_decode(buf, 64, &r), -EPROTO);
    /* A credit-only message: the header alone. */
    h = (vb_msg_hdr_t){.credits = 3};
    vb_msg_encode(&h, buf);
    assert_int_equal(vb_msg_decode(buf, VB_MSG_HDR_LEN, &r), 0);
    assert_int_equal(r.credits, 3);
    assert_int_equal(r.len, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wireup_round_trip),
        cmocka_unit_test(wireup_encode_errors),
        cmocka_unit_test(wireup_truncations),
        cmocka_unit_test(wireup_version_and_fields),
        cmocka_unit_test(wireup_random_mutations),
        cmocka_unit_test(rndv_blob),
        cmocka_unit_test(rma_key),
        cmocka_unit_test(msg_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
