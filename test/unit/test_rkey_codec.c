/*
 * Unit tests of the packed remote key (lib/pscom/rkey_codec.c, the format
 * of doc/rma.md): round trips with 0..16 plugin entries, the exact bytes,
 * every malformation the decoder must refuse, every truncation and single
 * byte change of a valid key (refused or decoded, never read past the
 * end), and pscom_rkey_generate refusing what the decoder refuses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pscom.h"
#include "pscom_plugin.h"
#include "rkey_codec.h"

static const struct psc_rkey_head head = {
    .memh_id = 0x1122334455667788ull,
    .addr = 0x00007f0012345000ull,
    .len = 4096,
};

static const uint8_t shm_key[8] = {1, 2, 3, 4, 5, 6, 7, 8};
static uint8_t big_key[PSCOM_PLUGIN_RKEY_MAX];

/* A buffer holding exactly the encoded key (malloc: ASan sees overreads). */
static uint8_t *encode(const struct psc_rkey_entry *e, unsigned n, size_t *len)
{
    *len = psc_rkey_size(e, n);
    assert_true(*len >= sizeof(struct psc_rkey_head));
    uint8_t *buf = malloc(*len);
    assert_non_null(buf);
    assert_int_equal(psc_rkey_encode(buf, &head, e, n), 0);
    return buf;
}

static void roundtrip(void **state)
{
    struct psc_rkey_entry e[3] = {
        {"shm", 3, shm_key, sizeof(shm_key)},
        {"ucx", 3, big_key, sizeof(big_key)},
        {"verbs", 5, NULL, 0},
    };
    for (unsigned n = 0; n <= 3; n++) {
        size_t len;
        uint8_t *buf = encode(e, n, &len);
        struct psc_rkey_head h;
        const char *why = NULL;
        assert_int_equal(psc_rkey_decode(buf, len, &h, &why), 0);
        assert_int_equal(h.magic, PSC_RKEY_MAGIC);
        assert_int_equal(h.version, PSC_RKEY_VERSION);
        assert_int_equal(h.memh_id, head.memh_id);
        assert_int_equal(h.addr, head.addr);
        assert_int_equal(h.len, head.len);
        assert_int_equal(h.plugin_len, len - sizeof(h));
        const uint8_t *pe = buf + sizeof(h);
        for (unsigned i = 0; i < 3; i++) {
            struct psc_rkey_entry got;
            char name[8];
            memcpy(name, e[i].name, e[i].name_len);
            name[e[i].name_len] = 0;
            const struct psc_rkey_entry *f =
                psc_rkey_find(pe, h.plugin_len, name, &got);
            if (i >= n) {
                assert_null(f);
                continue;
            }
            assert_non_null(f);
            assert_int_equal(got.data_len, e[i].data_len);
            if (got.data_len)
                assert_memory_equal(got.data, e[i].data, got.data_len);
        }
        assert_null(psc_rkey_find(pe, h.plugin_len, "sh", &(struct psc_rkey_entry){0}));
        free(buf);
    }
}

static void exact_bytes(void **state)
{
    static const uint8_t k[2] = {0xab, 0xcd};
    struct psc_rkey_entry e = {"shm", 3, k, 2};
    size_t len;
    uint8_t *buf = encode(&e, 1, &len);
    assert_int_equal(len, 32 + 4 + 3 + 2);
    uint32_t magic;
    uint16_t version, plen;
    memcpy(&magic, buf, 4);
    memcpy(&version, buf + 4, 2);
    memcpy(&plen, buf + 6, 2);
    assert_int_equal(magic, 0x70524b42u);
    assert_int_equal(version, 2);
    assert_int_equal(plen, 9);
    static const uint8_t entry[] = {3, 0, 2, 0, 's', 'h', 'm', 0xab, 0xcd};
    uint8_t want[sizeof(entry)];
    memcpy(want, entry, sizeof(entry));
    if (*(const uint8_t *)&(uint16_t){1} == 0) { /* big endian host */
        want[2] = 0;
        want[3] = 2;
    }
    assert_memory_equal(buf + 32, want, sizeof(want));
    free(buf);
}

static void sixteen_entries(void **state)
{
    struct psc_rkey_entry e[PSC_RKEY_ENTRIES_MAX + 1];
    char names[PSC_RKEY_ENTRIES_MAX + 1][4];
    for (unsigned i = 0; i <= PSC_RKEY_ENTRIES_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "p%02u", i);
        e[i] = (struct psc_rkey_entry){names[i], 3, big_key, sizeof(big_key)};
    }
    size_t len;
    uint8_t *buf = encode(e, PSC_RKEY_ENTRIES_MAX, &len);
    struct psc_rkey_head h;
    const char *why;
    assert_int_equal(psc_rkey_decode(buf, len, &h, &why), 0);
    free(buf);
    assert_int_equal(psc_rkey_size(e, PSC_RKEY_ENTRIES_MAX + 1), 0);
}

static void encoder_refuses(void **state)
{
    uint8_t too_long[PSCOM_PLUGIN_RKEY_MAX + 1] = {0};
    struct psc_rkey_entry bad[] = {
        {"", 0, NULL, 0},                                  /* empty name */
        {"0123456789abcdef0123456789abcdef", 32, NULL, 0}, /* 32 bytes */
        {"a b", 3, NULL, 0},                               /* blank */
        {"ucx", 3, too_long, sizeof(too_long)},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(psc_rkey_size(&bad[i], 1), 0);
    uint8_t buf[64];
    assert_int_equal(psc_rkey_encode(buf, &head, &bad[0], 1), -1);
}

/* Raw keys written byte by byte, the way a broken or hostile peer might. */
struct raw {
    uint8_t b[512];
    size_t len;
};

static void raw_head(struct raw *r, uint16_t version, uint16_t plen)
{
    struct psc_rkey_head h = head;
    h.magic = PSC_RKEY_MAGIC;
    h.version = version;
    h.plugin_len = plen;
    memcpy(r->b, &h, sizeof(h));
    r->len = sizeof(h);
}

static void raw_entry(struct raw *r, uint8_t nl, uint8_t rsv, uint16_t dl,
                      const char *name, size_t name_bytes, size_t data_bytes)
{
    r->b[r->len] = nl;
    r->b[r->len + 1] = rsv;
    memcpy(r->b + r->len + 2, &dl, 2);
    r->len += 4;
    memcpy(r->b + r->len, name, name_bytes);
    r->len += name_bytes;
    memset(r->b + r->len, 0x5a, data_bytes);
    r->len += data_bytes;
}

/* Set plugin_len to what follows the head. */
static void raw_fix(struct raw *r)
{
    uint16_t plen = (uint16_t)(r->len - sizeof(struct psc_rkey_head));
    memcpy(r->b + 6, &plen, 2);
}

static void expect_refused(const struct raw *r, const char *what)
{
    uint8_t *copy = malloc(r->len ? r->len : 1);
    memcpy(copy, r->b, r->len);
    struct psc_rkey_head h;
    const char *why = NULL;
    if (psc_rkey_decode(copy, r->len, &h, &why) != -1)
        fail_msg("accepted: %s", what);
    assert_non_null(why);
    free(copy);
}

static void decoder_refuses(void **state)
{
    struct raw r;

    raw_head(&r, PSC_RKEY_VERSION, 0);
    r.len = 31;
    expect_refused(&r, "short head");

    raw_head(&r, 1, 0);
    expect_refused(&r, "version 1");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    r.b[0] ^= 1;
    expect_refused(&r, "magic");

    raw_head(&r, PSC_RKEY_VERSION, 5);
    expect_refused(&r, "plugin_len beyond the buffer");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 3, 0, 0, "shm", 3, 0);
    expect_refused(&r, "entries beyond plugin_len (trailing bytes)");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 0, 0, 0, "", 0, 0);
    raw_fix(&r);
    expect_refused(&r, "empty name");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 32, 0, 0, "0123456789abcdef0123456789abcdef", 32, 0);
    raw_fix(&r);
    expect_refused(&r, "32-byte name");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 3, 1, 0, "shm", 3, 0);
    raw_fix(&r);
    expect_refused(&r, "reserved byte");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 3, 0, 0, "s\0m", 3, 0);
    raw_fix(&r);
    expect_refused(&r, "NUL in the name");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 3, 0, PSCOM_PLUGIN_RKEY_MAX + 1, "ucx", 3,
              PSCOM_PLUGIN_RKEY_MAX + 1);
    raw_fix(&r);
    expect_refused(&r, "key longer than PSCOM_PLUGIN_RKEY_MAX");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 3, 0, 8, "ucx", 3, 4); /* says 8, has 4 */
    raw_fix(&r);
    expect_refused(&r, "key data running past the end");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 3, 0, 0, "shm", 3, 0);
    r.b[r.len++] = 1; /* 1..3 bytes of a next entry header */
    raw_fix(&r);
    expect_refused(&r, "truncated entry header");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 3, 0, 1, "shm", 3, 1);
    raw_entry(&r, 3, 0, 2, "shm", 3, 2);
    raw_fix(&r);
    expect_refused(&r, "the same plugin twice");

    raw_head(&r, PSC_RKEY_VERSION, 0);
    for (unsigned i = 0; i <= PSC_RKEY_ENTRIES_MAX; i++) {
        char n[3] = {'p', (char)('a' + i), 0};
        raw_entry(&r, 2, 0, 0, n, 2, 0);
    }
    raw_fix(&r);
    expect_refused(&r, "17 entries");
}

/* Every prefix and every single-byte change of a valid key is either
 * refused or decodes to entries that lie inside the buffer. */
static void truncations_and_mutations(void **state)
{
    struct psc_rkey_entry e[2] = {{"shm", 3, shm_key, sizeof(shm_key)},
                                  {"ucx", 3, big_key, 40}};
    size_t len;
    uint8_t *good = encode(e, 2, &len);
    struct psc_rkey_head h;
    const char *why;

    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *p = malloc(cut ? cut : 1);
        memcpy(p, good, cut);
        assert_int_equal(psc_rkey_decode(p, cut, &h, &why), -1);
        free(p);
    }
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            uint8_t *p = malloc(len);
            memcpy(p, good, len);
            p[i] ^= (uint8_t)(1u << bit);
            if (!psc_rkey_decode(p, len, &h, &why)) {
                size_t off = 0;
                struct psc_rkey_entry x;
                const uint8_t *pe = p + sizeof(h);
                while (psc_rkey_next(pe, h.plugin_len, &off, &x, &why) > 0) {
                    assert_true((const uint8_t *)x.data + x.data_len <=
                                p + len);
                    assert_true(x.name_len >= 1 &&
                                x.name_len <= PSC_RKEY_NAME_MAX);
                }
                assert_int_equal(off, h.plugin_len);
            }
            free(p);
        }
    }
    free(good);
}

/* The public call refuses what the decoder refuses, and accepts keys with
 * entries of plugins this process does not have. */
static void generate_refuses_malformed(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    pscom_set_debug(0); /* the refusals are on purpose */
    pscom_socket_t *sock = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *con = pscom_open_connection(sock);
    pscom_rkey_t key = (pscom_rkey_t)(uintptr_t)1;

    struct raw r;
    raw_head(&r, PSC_RKEY_VERSION, 0);
    raw_entry(&r, 3, 0, 8, "ucx", 3, 4);
    raw_fix(&r);
    assert_int_equal(pscom_rkey_generate(con, r.b, r.len, &key),
                     PSCOM_ERR_INVALID);
    assert_int_equal(pscom_rkey_generate(con, r.b, 20, &key),
                     PSCOM_ERR_INVALID);

    struct psc_rkey_entry e[2] = {{"nosuchplugin", 12, shm_key, 8},
                                  {"shm", 3, shm_key, 8}};
    size_t len;
    uint8_t *good = encode(e, 2, &len);
    assert_int_equal(pscom_rkey_generate(con, good, len, &key), PSCOM_SUCCESS);
    assert_non_null(key);
    assert_int_equal(pscom_rkey_destroy(key), PSCOM_SUCCESS);
    assert_int_equal(pscom_rkey_generate(con, good, len + 1, &key),
                     PSCOM_ERR_INVALID);
    free(good);

    /* What this process packs decodes. */
    static char mem[64];
    pscom_memh_t memh;
    void *buf;
    assert_int_equal(pscom_mem_register(sock, mem, sizeof(mem), &memh),
                     PSCOM_SUCCESS);
    assert_int_equal(pscom_rkey_buffer_pack(&buf, &len, memh), PSCOM_SUCCESS);
    struct psc_rkey_head h;
    const char *why;
    assert_int_equal(psc_rkey_decode(buf, len, &h, &why), 0);
    assert_int_equal(h.addr, (uint64_t)(uintptr_t)mem);
    assert_int_equal(h.len, sizeof(mem));
    assert_int_equal(pscom_rkey_generate(con, buf, len, &key), PSCOM_SUCCESS);
    pscom_rkey_destroy(key);
    pscom_rkey_buffer_release(buf);
    pscom_mem_deregister(memh);

    pscom_close_connection(con);
    pscom_close_socket(sock);
}

int main(void)
{
    for (size_t i = 0; i < sizeof(big_key); i++) big_key[i] = (uint8_t)i;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roundtrip),
        cmocka_unit_test(exact_bytes),
        cmocka_unit_test(sixteen_entries),
        cmocka_unit_test(encoder_refuses),
        cmocka_unit_test(decoder_refuses),
        cmocka_unit_test(truncations_and_mutations),
        cmocka_unit_test(generate_refuses_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
