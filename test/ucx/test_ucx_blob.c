/*
 * The ucx handshake blob (plugins/ucx/ucx_blob.c): what comes from the
 * network is checked field by field, and nothing malformed is accepted or
 * read past its end.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ucx_blob.h"

static const uint8_t addr[40] = "some UCX worker address, opaque to us";

static size_t good(uint8_t *buf, size_t cap)
{
    ux_blob_t b = {.flags = UX_BLOB_F_PEER_ERRORS,
                   .slot = 0x01020304, .gen = 0xa0b0c0d0,
                   .rndv = 0x1122334455667788ull, .addr = addr,
                   .addr_len = sizeof(addr)};
    size_t len = cap;
    assert_int_equal(ux_blob_encode(&b, buf, &len), 0);
    assert_int_equal(len, UX_BLOB_FIXED + sizeof(addr));
    return len;
}

static void round_trip(void **state)
{
    uint8_t buf[256];
    size_t len = good(buf, sizeof(buf));
    ux_blob_t d;
    const char *why = NULL;
    assert_int_equal(ux_blob_decode(buf, len, &d, &why), 0);
    assert_int_equal(d.flags, UX_BLOB_F_PEER_ERRORS);
    assert_int_equal(d.slot, 0x01020304);
    assert_int_equal(d.gen, 0xa0b0c0d0);
    assert_true(d.rndv == 0x1122334455667788ull);
    assert_int_equal(d.addr_len, sizeof(addr));
    assert_ptr_equal(d.addr, buf + UX_BLOB_FIXED);
    assert_memory_equal(d.addr, addr, sizeof(addr));
    /* Little-endian on the wire, whatever the host. */
    assert_int_equal(buf[0], 0x70);
    assert_int_equal(buf[8], 0x04);
}

static void encode_refuses_what_does_not_fit(void **state)
{
    uint8_t buf[256];
    ux_blob_t b = {.addr = addr, .addr_len = sizeof(addr)};
    size_t len = UX_BLOB_FIXED + sizeof(addr) - 1;
    assert_int_equal(ux_blob_encode(&b, buf, &len), -EMSGSIZE);
    b.addr_len = 0;
    len = sizeof(buf);
    assert_int_equal(ux_blob_encode(&b, buf, &len), -EMSGSIZE);
    b.addr_len = UX_BLOB_ADDR_MAX + 1;
    len = sizeof(buf);
    assert_int_equal(ux_blob_encode(&b, buf, &len), -EMSGSIZE);
    b.addr_len = sizeof(addr);
    b.flags = 0x8000;
    len = sizeof(buf);
    assert_int_equal(ux_blob_encode(&b, buf, &len), -EMSGSIZE);
}

static void expect_bad(const uint8_t *buf, size_t len, const char *what)
{
    ux_blob_t d;
    const char *why = NULL;
    assert_int_equal(ux_blob_decode(buf, len, &d, &why), -EPROTO);
    assert_non_null(why);
    assert_non_null(strstr(why, what));
}

static void malformed_blobs(void **state)
{
    uint8_t buf[256], bad[256];
    size_t len = good(buf, sizeof(buf));

    expect_bad(NULL, 0, "shorter");
    for (size_t n = 0; n < UX_BLOB_FIXED; n++) expect_bad(buf, n, "shorter");

    memcpy(bad, buf, len);
    bad[1] ^= 1;
    expect_bad(bad, len, "magic");

    memcpy(bad, buf, len);
    bad[4] = 2;
    expect_bad(bad, len, "version");

    memcpy(bad, buf, len);
    bad[7] = 0x80;
    expect_bad(bad, len, "flags");
    memcpy(bad, buf, len);
    bad[6] = 0x02;
    expect_bad(bad, len, "flags");

    /* Address length: zero, huge, one more or less than what is there. */
    memcpy(bad, buf, len);
    memset(bad + 24, 0, 4);
    expect_bad(bad, len, "out of range");
    memcpy(bad, buf, len);
    memset(bad + 24, 0xff, 4);
    expect_bad(bad, len, "out of range");
    memcpy(bad, buf, len);
    bad[24]++;
    expect_bad(bad, len, "does not match");
    memcpy(bad, buf, len);
    bad[24]--;
    expect_bad(bad, len, "does not match");
    /* Truncated address, trailing garbage. */
    expect_bad(buf, len - 1, "does not match");
    memcpy(bad, buf, len);
    bad[len] = 0;
    expect_bad(bad, len + 1, "does not match");
}

/* Random bytes and random damage of a good blob: decoding either refuses
 * them or describes an address inside the given bytes. Run under valgrind
 * or ASan, this also shows that nothing outside is read. */
static void random_damage(void **state)
{
    uint8_t buf[256], bad[256];
    size_t len = good(buf, sizeof(buf));
    unsigned seed = 12345;
    for (int i = 0; i < 20000; i++) {
        size_t n;
        if (i & 1) {
            n = (size_t)rand_r(&seed) % sizeof(bad);
            for (size_t k = 0; k < n; k++) bad[k] = (uint8_t)rand_r(&seed);
        } else {
            memcpy(bad, buf, len);
            n = len;
            int flips = 1 + rand_r(&seed) % 3;
            for (int f = 0; f < flips; f++)
                bad[rand_r(&seed) % len] ^= (uint8_t)(1 + rand_r(&seed) % 255);
            if (rand_r(&seed) % 4 == 0) n = (size_t)rand_r(&seed) % (len + 8);
        }
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, bad, n);
        ux_blob_t d;
        const char *why = NULL;
        if (ux_blob_decode(copy, n, &d, &why) == 0) {
            assert_true(d.addr_len > 0);
            assert_ptr_equal(d.addr, copy + UX_BLOB_FIXED);
            assert_int_equal(UX_BLOB_FIXED + d.addr_len, n);
        } else {
            assert_non_null(why);
        }
        free(copy);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(encode_refuses_what_does_not_fit),
        cmocka_unit_test(malformed_blobs),
        cmocka_unit_test(random_damage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
