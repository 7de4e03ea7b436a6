/*
 * Unit tests of the pre-connection record codec (lib/pscom/precon_codec.c):
 * round trips, the exact wire bytes, every header and payload error, the
 * writer at every buffer size, and a brute-force pass over truncated and
 * mutated records.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "precon_codec.h"

#define BUF_MAX 16384
#define GUARD   0xA5

/* ---------------------------------------------------------------------- */
/* A record with every field                                              */
/* ---------------------------------------------------------------------- */

static const char full_name[PSC_PRECON_NAME_LEN] = {'s', 'o', 'c', 'k',
                                                    '\0', 'x', '\xff', '7'};
static const char *const full_plugins[] = {"ucx", "ofi", "tcp"};
static const uint8_t full_blob[] = {0x00, 0x01, 0xfe, 0xff, 0x00, 0x42};

/* Write every known field into w, in tag order. */
static void put_full(struct psc_precon_writer *w)
{
    psc_precon_put(w, PSC_TAG_NAME, full_name, sizeof(full_name));
    psc_precon_put_i32(w, PSC_TAG_RANK, -3);
    psc_precon_put_i32(w, PSC_TAG_NODE_ID, INT32_MIN);
    psc_precon_put_str(w, PSC_TAG_BOOT_ID,
                       "6c3f0a52-8d7e-4a53-9f0e-0c1d2e3f4a5b");
    psc_precon_put_str(w, PSC_TAG_HOSTNAME, "node042.cluster");
    psc_precon_put_u32(w, PSC_TAG_PID, 0xfedcba98u);
    psc_precon_put_plugins(w, full_plugins, 3);
    psc_precon_put_str(w, PSC_TAG_PLUGIN, "ofi");
    psc_precon_put(w, PSC_TAG_PLUGIN_DATA, full_blob, sizeof(full_blob));
    psc_precon_put_i32(w, PSC_TAG_ERROR_CODE, -7);
    psc_precon_put_str(w, PSC_TAG_ERROR_TEXT, "protocol version 2 != 1");
    psc_precon_put_u32(w, PSC_TAG_PORT, 40123);
    psc_precon_put_u64(w, PSC_TAG_CON_ID, UINT64_C(0x0123456789abcdef));
    psc_precon_put_u64(w, PSC_TAG_PEER_CON_ID, UINT64_MAX);
    psc_precon_put_u32(w, PSC_TAG_FLAGS, PSC_PRECON_F_ONDEMAND | 0x80000000u);
}

static void check_full(const struct psc_precon_msg *m, const uint8_t *payload,
                       size_t len)
{
    assert_true(m->has_name);
    assert_memory_equal(m->name, full_name, PSC_PRECON_NAME_LEN);
    assert_true(m->has_rank);
    assert_int_equal(m->rank, -3);
    assert_true(m->has_node_id);
    assert_int_equal(m->node_id, INT32_MIN);
    assert_string_equal(m->boot_id, "6c3f0a52-8d7e-4a53-9f0e-0c1d2e3f4a5b");
    assert_string_equal(m->hostname, "node042.cluster");
    assert_true(m->has_pid);
    assert_int_equal(m->pid, 0xfedcba98u);
    assert_int_equal(m->plugin_count, 3);
    assert_string_equal(m->plugins[0], "ucx");
    assert_string_equal(m->plugins[1], "ofi");
    assert_string_equal(m->plugins[2], "tcp");
    assert_string_equal(m->plugin, "ofi");
    assert_int_equal(m->plugin_data_len, sizeof(full_blob));
    assert_memory_equal(m->plugin_data, full_blob, sizeof(full_blob));
    /* The blob is not copied: it points into the payload. */
    assert_true((const uint8_t *)m->plugin_data >= payload);
    assert_true((const uint8_t *)m->plugin_data + m->plugin_data_len <=
                payload + len);
    assert_true(m->has_error_code);
    assert_int_equal(m->error_code, -7);
    assert_string_equal(m->error_text, "protocol version 2 != 1");
    assert_true(m->has_port);
    assert_int_equal(m->port, 40123);
    assert_true(m->has_con_id);
    assert_true(m->con_id == UINT64_C(0x0123456789abcdef));
    assert_true(m->has_peer_con_id);
    assert_true(m->peer_con_id == UINT64_MAX);
    assert_true(m->has_flags);
    assert_int_equal(m->flags, PSC_PRECON_F_ONDEMAND | 0x80000000u);
}

/* Encode the full record of `type` into buf; returns its length. */
static size_t make_full(uint8_t *buf, size_t cap, uint8_t type)
{
    struct psc_precon_writer w;
    long n;

    psc_precon_begin(&w, buf, cap, type);
    put_full(&w);
    n = psc_precon_finish(&w);
    assert_true(n > PSC_PRECON_HDR_LEN);
    return (size_t)n;
}

/* ---------------------------------------------------------------------- */
/* Raw payloads, for what the writer refuses to produce                   */
/* ---------------------------------------------------------------------- */

struct raw {
    uint8_t b[70000];
    size_t len;
};

static void raw_bytes(struct raw *r, const void *p, size_t n)
{
    assert_true(n <= sizeof(r->b) - r->len);
    memcpy(r->b + r->len, p, n);
    r->len += n;
}

static void raw_hdr(struct raw *r, uint16_t tag, uint16_t len)
{
    uint8_t h[4] = {(uint8_t)tag, (uint8_t)(tag >> 8), (uint8_t)len,
                    (uint8_t)(len >> 8)};

    raw_bytes(r, h, sizeof(h));
}

static void raw_field(struct raw *r, uint16_t tag, const void *v, size_t n)
{
    raw_hdr(r, tag, (uint16_t)n);
    raw_bytes(r, v, n);
}

static void raw_fill(struct raw *r, uint16_t tag, int c, size_t n)
{
    raw_hdr(r, tag, (uint16_t)n);
    assert_true(n <= sizeof(r->b) - r->len);
    memset(r->b + r->len, c, n);
    r->len += n;
}

/* Decode r's bytes from a heap block of exactly that size, so that a read
 * past the end shows up under valgrind or ASan. */
static int decode_raw(const struct raw *r, struct psc_precon_msg *m)
{
    uint8_t *copy = malloc(r->len ? r->len : 1);
    int rc;

    assert_non_null(copy);
    memcpy(copy, r->b, r->len);
    rc = psc_precon_msg_decode(PSC_PRECON_HELLO, copy, r->len, m);
    if (rc == 0 && m->plugin_data) {
        /* Re-point at r so the caller may look at it after the free. */
        m->plugin_data = r->b + ((const uint8_t *)m->plugin_data - copy);
    }
    free(copy);
    return rc;
}

static struct psc_precon_msg msg; /* large; kept off the stack */

static const uint16_t string_tags[] = {PSC_TAG_BOOT_ID, PSC_TAG_HOSTNAME,
                                       PSC_TAG_PLUGIN, PSC_TAG_ERROR_TEXT};

static const struct {
    uint16_t tag;
    size_t len;
} fixed_tags[] = {
    {PSC_TAG_NAME, PSC_PRECON_NAME_LEN}, {PSC_TAG_RANK, 4},
    {PSC_TAG_NODE_ID, 4},                {PSC_TAG_PID, 4},
    {PSC_TAG_PORT, 4},                   {PSC_TAG_FLAGS, 4},
    {PSC_TAG_ERROR_CODE, 4},             {PSC_TAG_CON_ID, 8},
    {PSC_TAG_PEER_CON_ID, 8},
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---------------------------------------------------------------------- */
/* Round trips and wire bytes                                             */
/* ---------------------------------------------------------------------- */

static void test_roundtrip_every_type(void **state)
{
    (void)state;
    for (unsigned type = 1; type <= PSC_PRECON_TYPE_MAX; type++) {
        uint8_t buf[1024];
        struct psc_precon_hdr h;
        size_t n = make_full(buf, sizeof(buf), (uint8_t)type);

        assert_int_equal(psc_precon_hdr_decode(buf, &h, PSC_PRECON_MAX_PAYLOAD),
                         PSC_PRECON_OK);
        assert_int_equal(h.magic, PSC_PRECON_MAGIC);
        assert_int_equal(h.version, PSC_PRECON_VERSION);
        assert_int_equal(h.type, type);
        assert_int_equal(h.flags, 0);
        assert_int_equal(h.len, n - PSC_PRECON_HDR_LEN);

        assert_int_equal(psc_precon_msg_decode(h.type, buf + PSC_PRECON_HDR_LEN,
                                               h.len, &msg),
                         PSC_PRECON_OK);
        assert_int_equal(msg.type, type);
        check_full(&msg, buf + PSC_PRECON_HDR_LEN, h.len);
    }
}

static void test_roundtrip_empty(void **state)
{
    uint8_t buf[PSC_PRECON_HDR_LEN];
    struct psc_precon_writer w;
    struct psc_precon_hdr h;

    (void)state;
    psc_precon_begin(&w, buf, sizeof(buf), PSC_PRECON_ESTABLISHED);
    assert_int_equal(psc_precon_finish(&w), PSC_PRECON_HDR_LEN);
    assert_int_equal(psc_precon_hdr_decode(buf, &h, 0), PSC_PRECON_OK);
    assert_int_equal(h.len, 0);

    memset(&msg, 0x5a, sizeof(msg));
    assert_int_equal(psc_precon_msg_decode(h.type, NULL, 0, &msg),
                     PSC_PRECON_OK);
    assert_int_equal(msg.type, PSC_PRECON_ESTABLISHED);
    assert_false(msg.has_name || msg.has_rank || msg.has_node_id ||
                 msg.has_pid || msg.has_port || msg.has_con_id ||
                 msg.has_peer_con_id || msg.has_flags || msg.has_error_code);
    assert_null(msg.boot_id);
    assert_null(msg.hostname);
    assert_null(msg.plugin);
    assert_null(msg.error_text);
    assert_int_equal(msg.plugin_count, 0);
    assert_null(msg.plugin_data);
    assert_int_equal(msg.plugin_data_len, 0);
}

/* Every string and the plugin list at their limits fill strbuf exactly. */
static void test_roundtrip_limits(void **state)
{
    static uint8_t buf[BUF_MAX];
    static uint8_t blob[PSC_PRECON_PLUGIN_DATA_MAX];
    char s[4][PSC_PRECON_STR_MAX + 1];
    char pn[PSC_PRECON_MAX_PLUGINS][PSC_PRECON_STR_MAX + 1];
    const char *pnames[PSC_PRECON_MAX_PLUGINS];
    struct psc_precon_writer w;
    struct psc_precon_hdr h;
    long n;

    (void)state;
    for (int i = 0; i < 4; i++) {
        memset(s[i], 'a' + i, PSC_PRECON_STR_MAX);
        s[i][PSC_PRECON_STR_MAX] = '\0';
    }
    for (int i = 0; i < PSC_PRECON_MAX_PLUGINS; i++) {
        memset(pn[i], 'A' + i, PSC_PRECON_STR_MAX);
        pn[i][PSC_PRECON_STR_MAX] = '\0';
        pnames[i] = pn[i];
    }
    for (size_t i = 0; i < sizeof(blob); i++) blob[i] = (uint8_t)(i * 7);

    psc_precon_begin(&w, buf, sizeof(buf), PSC_PRECON_HELLO);
    for (int i = 0; i < 4; i++) psc_precon_put_str(&w, string_tags[i], s[i]);
    psc_precon_put_plugins(&w, pnames, PSC_PRECON_MAX_PLUGINS);
    psc_precon_put(&w, PSC_TAG_PLUGIN_DATA, blob, sizeof(blob));
    psc_precon_put_i32(&w, PSC_TAG_RANK, INT32_MAX);
    psc_precon_put_u32(&w, PSC_TAG_PID, 0);
    n = psc_precon_finish(&w);
    assert_true(n > 0);

    assert_int_equal(psc_precon_hdr_decode(buf, &h, PSC_PRECON_MAX_PAYLOAD),
                     PSC_PRECON_OK);
    assert_int_equal(psc_precon_msg_decode(h.type, buf + PSC_PRECON_HDR_LEN,
                                           h.len, &msg),
                     PSC_PRECON_OK);
    assert_string_equal(msg.boot_id, s[0]);
    assert_string_equal(msg.hostname, s[1]);
    assert_string_equal(msg.plugin, s[2]);
    assert_string_equal(msg.error_text, s[3]);
    assert_int_equal(msg.plugin_count, PSC_PRECON_MAX_PLUGINS);
    for (int i = 0; i < PSC_PRECON_MAX_PLUGINS; i++)
        assert_string_equal(msg.plugins[i], pn[i]);
    assert_int_equal(msg.plugin_data_len, sizeof(blob));
    assert_memory_equal(msg.plugin_data, blob, sizeof(blob));
    assert_int_equal(msg.rank, INT32_MAX);
    assert_true(msg.has_pid);
    assert_int_equal(msg.pid, 0);
    /* The last plugin name ends at the last byte of strbuf. */
    assert_ptr_equal(msg.plugins[PSC_PRECON_MAX_PLUGINS - 1] +
                         PSC_PRECON_STR_MAX + 1,
                     msg.strbuf + sizeof(msg.strbuf));
}

/* The exact bytes of a small record: little endian everywhere. */
static void test_wire_bytes(void **state)
{
    static const uint8_t want[] = {
        'P', 'S', 'C', 'P', 1, 2, 0, 0, 37, 0, 0, 0, /* header, TRY */
        2, 0, 4, 0, 0x04, 0x03, 0x02, 0x01,           /* RANK */
        13, 0, 8, 0, 0x08, 0x07, 0x06, 0x05,          /* CON_ID */
        0x04, 0x03, 0x02, 0x01,
        8, 0, 3, 0, 't', 'c', 'p',                    /* PLUGIN */
        7, 0, 6, 0, 'a', 0, 'b', 'c', 'd', 0,         /* PLUGINS */
    };
    static const char *const names[] = {"a", "bcd"};
    uint8_t buf[64];
    struct psc_precon_writer w;
    struct psc_precon_hdr h;

    (void)state;
    memset(buf, GUARD, sizeof(buf));
    psc_precon_begin(&w, buf, sizeof(buf), PSC_PRECON_TRY);
    psc_precon_put_i32(&w, PSC_TAG_RANK, 0x01020304);
    psc_precon_put_u64(&w, PSC_TAG_CON_ID, UINT64_C(0x0102030405060708));
    psc_precon_put_str(&w, PSC_TAG_PLUGIN, "tcp");
    psc_precon_put_plugins(&w, names, 2);
    assert_int_equal(psc_precon_finish(&w), sizeof(want));
    assert_memory_equal(buf, want, sizeof(want));
    assert_int_equal(buf[sizeof(want)], GUARD);

    /* And the decoder reads the same bytes back. */
    assert_int_equal(psc_precon_hdr_decode(want, &h, 37), PSC_PRECON_OK);
    assert_int_equal(h.type, PSC_PRECON_TRY);
    assert_int_equal(h.len, 37);
    assert_int_equal(psc_precon_msg_decode(h.type, want + 12, h.len, &msg),
                     PSC_PRECON_OK);
    assert_int_equal(msg.rank, 0x01020304);
    assert_true(msg.con_id == UINT64_C(0x0102030405060708));
    assert_string_equal(msg.plugin, "tcp");
    assert_int_equal(msg.plugin_count, 2);
    assert_string_equal(msg.plugins[0], "a");
    assert_string_equal(msg.plugins[1], "bcd");
}

/* ---------------------------------------------------------------------- */
/* Header errors                                                          */
/* ---------------------------------------------------------------------- */

static void make_hdr(uint8_t *b, uint32_t magic, uint8_t version,
                     uint8_t type, uint16_t flags, uint32_t len)
{
    b[0] = (uint8_t)magic;
    b[1] = (uint8_t)(magic >> 8);
    b[2] = (uint8_t)(magic >> 16);
    b[3] = (uint8_t)(magic >> 24);
    b[4] = version;
    b[5] = type;
    b[6] = (uint8_t)flags;
    b[7] = (uint8_t)(flags >> 8);
    b[8] = (uint8_t)len;
    b[9] = (uint8_t)(len >> 8);
    b[10] = (uint8_t)(len >> 16);
    b[11] = (uint8_t)(len >> 24);
}

static void test_hdr_magic(void **state)
{
    uint8_t b[PSC_PRECON_HDR_LEN];
    struct psc_precon_hdr h;

    (void)state;
    make_hdr(b, PSC_PRECON_MAGIC, 1, 1, 0, 0);
    assert_memory_equal(b, "PSCP", 4);
    assert_int_equal(psc_precon_hdr_decode(b, &h, 0), PSC_PRECON_OK);

    /* Byte-swapped magic, an HTTP request, all zeros. */
    make_hdr(b, 0x50534350u, 1, 1, 0, 0);
    assert_int_equal(psc_precon_hdr_decode(b, &h, 0), PSC_PRECON_E_MAGIC);
    memcpy(b, "GET / HTTP/1", 12);
    assert_int_equal(psc_precon_hdr_decode(b, &h, 0), PSC_PRECON_E_MAGIC);
    memset(b, 0, sizeof(b));
    assert_int_equal(psc_precon_hdr_decode(b, &h, 0), PSC_PRECON_E_MAGIC);
}

static void test_hdr_version(void **state)
{
    uint8_t b[PSC_PRECON_HDR_LEN];
    struct psc_precon_hdr h;
    const uint8_t versions[] = {0, 2, 255};

    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(versions); i++) {
        make_hdr(b, PSC_PRECON_MAGIC, versions[i], PSC_PRECON_HELLO, 0, 10);
        memset(&h, 0, sizeof(h));
        assert_int_equal(psc_precon_hdr_decode(b, &h, PSC_PRECON_MAX_PAYLOAD),
                         PSC_PRECON_E_VERSION);
        /* The peer's version is reported for the log line. */
        assert_int_equal(h.version, versions[i]);
    }
}

static void test_hdr_type(void **state)
{
    uint8_t b[PSC_PRECON_HDR_LEN];
    struct psc_precon_hdr h;
    const uint8_t bad[] = {0, PSC_PRECON_TYPE_MAX + 1, 255};

    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        make_hdr(b, PSC_PRECON_MAGIC, PSC_PRECON_VERSION, bad[i], 0, 0);
        assert_int_equal(psc_precon_hdr_decode(b, &h, PSC_PRECON_MAX_PAYLOAD),
                         PSC_PRECON_E_TYPE);
        assert_int_equal(h.type, bad[i]);
    }
    for (unsigned t = 1; t <= PSC_PRECON_TYPE_MAX; t++) {
        make_hdr(b, PSC_PRECON_MAGIC, PSC_PRECON_VERSION, (uint8_t)t, 0, 0);
        assert_int_equal(psc_precon_hdr_decode(b, &h, PSC_PRECON_MAX_PAYLOAD),
                         PSC_PRECON_OK);
    }
}

static void test_hdr_toobig(void **state)
{
    uint8_t b[PSC_PRECON_HDR_LEN];
    struct psc_precon_hdr h;

    (void)state;
    make_hdr(b, PSC_PRECON_MAGIC, 1, 1, 0, PSC_PRECON_MAX_PAYLOAD);
    assert_int_equal(psc_precon_hdr_decode(b, &h, PSC_PRECON_MAX_PAYLOAD),
                     PSC_PRECON_OK);
    make_hdr(b, PSC_PRECON_MAGIC, 1, 1, 0, PSC_PRECON_MAX_PAYLOAD + 1);
    assert_int_equal(psc_precon_hdr_decode(b, &h, PSC_PRECON_MAX_PAYLOAD),
                     PSC_PRECON_E_TOOBIG);
    assert_int_equal(h.len, PSC_PRECON_MAX_PAYLOAD + 1);
    make_hdr(b, PSC_PRECON_MAGIC, 1, 1, 0, UINT32_MAX);
    assert_int_equal(psc_precon_hdr_decode(b, &h, PSC_PRECON_MAX_PAYLOAD),
                     PSC_PRECON_E_TOOBIG);
    assert_int_equal(psc_precon_hdr_decode(b, &h, UINT32_MAX), PSC_PRECON_OK);
    make_hdr(b, PSC_PRECON_MAGIC, 1, 1, 0, 1);
    assert_int_equal(psc_precon_hdr_decode(b, &h, 0), PSC_PRECON_E_TOOBIG);
}

/* Magic before version before type before length; flags are ignored. */
static void test_hdr_order_and_flags(void **state)
{
    uint8_t b[PSC_PRECON_HDR_LEN];
    struct psc_precon_hdr h;

    (void)state;
    make_hdr(b, 0, 2, 0, 0, UINT32_MAX);
    assert_int_equal(psc_precon_hdr_decode(b, &h, 0), PSC_PRECON_E_MAGIC);
    make_hdr(b, PSC_PRECON_MAGIC, 2, 0, 0, UINT32_MAX);
    assert_int_equal(psc_precon_hdr_decode(b, &h, 0), PSC_PRECON_E_VERSION);
    make_hdr(b, PSC_PRECON_MAGIC, 1, 0, 0, UINT32_MAX);
    assert_int_equal(psc_precon_hdr_decode(b, &h, 0), PSC_PRECON_E_TYPE);
    make_hdr(b, PSC_PRECON_MAGIC, 1, 1, 0xffff, 0);
    assert_int_equal(psc_precon_hdr_decode(b, &h, 0), PSC_PRECON_OK);
    assert_int_equal(h.flags, 0xffff);
}

/* ---------------------------------------------------------------------- */
/* Malformed payloads                                                     */
/* ---------------------------------------------------------------------- */

static void test_truncated_field_header(void **state)
{
    static struct raw r;

    (void)state;
    for (size_t n = 1; n < 4; n++) {
        memset(&r, 0, sizeof(r));
        raw_bytes(&r, "\x02\x00\x04\x00", n);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    }
    /* A whole field, then part of the next header. */
    for (size_t n = 1; n < 4; n++) {
        r.len = 0;
        raw_field(&r, PSC_TAG_PORT, "\x01\x00\x00\x00", 4);
        raw_bytes(&r, "\x0c\x00\x04", n);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    }
}

static void test_value_past_end(void **state)
{
    static struct raw r;

    (void)state;
    r.len = 0;
    raw_hdr(&r, PSC_TAG_PID, 4);
    raw_bytes(&r, "\x01\x02\x03", 3);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);

    /* Unknown tags are skipped, but only if their value is there. */
    r.len = 0;
    raw_hdr(&r, 999, 10);
    raw_bytes(&r, "123456789", 9);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);

    r.len = 0;
    raw_hdr(&r, PSC_TAG_HOSTNAME, 0xffff);
    raw_bytes(&r, "host", 4);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
}

static void test_wrong_fixed_lengths(void **state)
{
    static const uint8_t zero[16];
    static struct raw r;

    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(fixed_tags); i++) {
        size_t want = fixed_tags[i].len;
        const size_t bad[] = {0, 1, want - 1, want + 1, 16};

        for (size_t j = 0; j < ARRAY_LEN(bad); j++) {
            r.len = 0;
            raw_field(&r, fixed_tags[i].tag, zero, bad[j]);
            assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
        }
        r.len = 0;
        raw_field(&r, fixed_tags[i].tag, zero, want);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
    }
}

/* The decoded string of a string tag. */
static const char *decoded_str(const struct psc_precon_msg *m, uint16_t tag)
{
    switch (tag) {
    case PSC_TAG_BOOT_ID: return m->boot_id;
    case PSC_TAG_HOSTNAME: return m->hostname;
    case PSC_TAG_PLUGIN: return m->plugin;
    default: return m->error_text;
    }
}

static void test_bad_strings(void **state)
{
    static struct raw r;

    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(string_tags); i++) {
        uint16_t tag = string_tags[i];

        /* Embedded NUL, trailing NUL, only a NUL. */
        r.len = 0;
        raw_field(&r, tag, "ab\0c", 4);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
        r.len = 0;
        raw_field(&r, tag, "abc\0", 4);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
        r.len = 0;
        raw_field(&r, tag, "\0", 1);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
        /* Empty. */
        r.len = 0;
        raw_field(&r, tag, "", 0);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
        /* Too long, and the longest allowed. */
        r.len = 0;
        raw_fill(&r, tag, 'x', PSC_PRECON_STR_MAX + 1);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
        r.len = 0;
        raw_fill(&r, tag, 'x', 1000);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
        r.len = 0;
        raw_fill(&r, tag, 'x', PSC_PRECON_STR_MAX);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
        r.len = 0;
        raw_field(&r, tag, "y", 1);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
        /* Control characters arrive as '?': they end up in log lines. */
        r.len = 0;
        raw_field(&r, tag, "a\nb\x1b[31mc\x7f\xc3\xa9", 12);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
        assert_string_equal(decoded_str(&msg, tag), "a?b?[31mc?\xc3\xa9");
    }
}

/* Raw PLUGINS field with `count` names "p0", "p1", ... */
static void raw_plugin_names(struct raw *r, unsigned count)
{
    char v[4096];
    size_t n = 0;

    for (unsigned i = 0; i < count; i++)
        n += (size_t)snprintf(v + n, sizeof(v) - n, "p%u", i) + 1;
    raw_field(r, PSC_TAG_PLUGINS, v, n);
}

static void test_bad_plugin_lists(void **state)
{
    static struct raw r;
    char v[PSC_PRECON_STR_MAX + 2];

    (void)state;
    r.len = 0;
    raw_plugin_names(&r, PSC_PRECON_MAX_PLUGINS);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
    assert_int_equal(msg.plugin_count, PSC_PRECON_MAX_PLUGINS);
    assert_string_equal(msg.plugins[15], "p15");

    r.len = 0;
    raw_plugin_names(&r, PSC_PRECON_MAX_PLUGINS + 1);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);

    /* Unterminated: last byte is not a NUL. */
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGINS, "tcp\0ucx", 7);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGINS, "tcp", 3);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);

    /* Empty names. */
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGINS, "\0", 1);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGINS, "tcp\0\0", 5);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGINS, "\0tcp\0", 5);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);

    /* A name over PSC_PRECON_STR_MAX, and one at it. */
    memset(v, 'n', sizeof(v));
    v[PSC_PRECON_STR_MAX + 1] = '\0';
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGINS, v, PSC_PRECON_STR_MAX + 2);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    v[PSC_PRECON_STR_MAX] = '\0';
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGINS, v, PSC_PRECON_STR_MAX + 1);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
    assert_int_equal(strlen(msg.plugins[0]), PSC_PRECON_STR_MAX);

    /* An empty field is an empty list. */
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGINS, "", 0);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
    assert_int_equal(msg.plugin_count, 0);
}

static void test_duplicate_tags(void **state)
{
    static const uint8_t zero[16];
    static struct raw r;

    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(fixed_tags); i++) {
        r.len = 0;
        raw_field(&r, fixed_tags[i].tag, zero, fixed_tags[i].len);
        raw_field(&r, PSC_TAG_HOSTNAME, "h", 1);
        raw_field(&r, fixed_tags[i].tag, zero, fixed_tags[i].len);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    }
    for (size_t i = 0; i < ARRAY_LEN(string_tags); i++) {
        r.len = 0;
        raw_field(&r, string_tags[i], "same", 4);
        raw_field(&r, string_tags[i], "same", 4);
        assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    }
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGINS, "a\0", 2);
    raw_field(&r, PSC_TAG_PLUGINS, "b\0", 2);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGIN_DATA, "", 0);
    raw_field(&r, PSC_TAG_PLUGIN_DATA, "", 0);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);

    /* Unknown tags may repeat. */
    r.len = 0;
    raw_field(&r, 100, "x", 1);
    raw_field(&r, 100, "x", 1);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
}

static void test_plugin_data_size(void **state)
{
    static struct raw r;

    (void)state;
    r.len = 0;
    raw_fill(&r, PSC_TAG_PLUGIN_DATA, 0x11, PSC_PRECON_PLUGIN_DATA_MAX + 1);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);
    r.len = 0;
    raw_fill(&r, PSC_TAG_PLUGIN_DATA, 0x11, 0xffff);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_E_MALFORMED);

    r.len = 0;
    raw_fill(&r, PSC_TAG_PLUGIN_DATA, 0x11, PSC_PRECON_PLUGIN_DATA_MAX);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
    assert_int_equal(msg.plugin_data_len, PSC_PRECON_PLUGIN_DATA_MAX);
    assert_ptr_equal(msg.plugin_data, r.b + 4);

    /* Present but empty: a pointer and length 0. */
    r.len = 0;
    raw_field(&r, PSC_TAG_PLUGIN_DATA, "", 0);
    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
    assert_non_null(msg.plugin_data);
    assert_int_equal(msg.plugin_data_len, 0);
}

static void test_unknown_tags_skipped(void **state)
{
    static struct raw r;
    static const uint16_t unknown[] = {0, PSC_TAG_FLAGS + 1, 31, 32, 0x7fff,
                                       0xffff};
    static const size_t lens[] = {0, 5, 300};

    (void)state;
    r.len = 0;
    for (size_t i = 0; i < ARRAY_LEN(unknown); i++)
        raw_fill(&r, unknown[i], 0, lens[i % ARRAY_LEN(lens)]);
    raw_field(&r, PSC_TAG_HOSTNAME, "host", 4);
    for (size_t i = 0; i < ARRAY_LEN(unknown); i++)
        raw_fill(&r, unknown[i], 'z', lens[(i + 1) % ARRAY_LEN(lens)]);
    raw_field(&r, PSC_TAG_RANK, "\x05\x00\x00\x00", 4);
    raw_fill(&r, 0xffff, 0xff, 0);

    assert_int_equal(decode_raw(&r, &msg), PSC_PRECON_OK);
    assert_string_equal(msg.hostname, "host");
    assert_true(msg.has_rank);
    assert_int_equal(msg.rank, 5);
    assert_false(msg.has_pid);
}

/* ---------------------------------------------------------------------- */
/* Writer                                                                 */
/* ---------------------------------------------------------------------- */

/* For every capacity below the full record's size, finish fails and no byte
 * at or past the capacity is touched; at the full size the bytes match. */
static void test_writer_every_cap(void **state)
{
    enum { SLACK = 64 };
    uint8_t ref[1024];
    static uint8_t buf[1024 + SLACK];
    size_t need = make_full(ref, sizeof(ref), PSC_PRECON_HELLO);

    (void)state;
    assert_true(need + SLACK <= sizeof(buf));
    for (size_t cap = 0; cap <= need + 1; cap++) {
        struct psc_precon_writer w;
        long n;

        memset(buf, GUARD, sizeof(buf));
        psc_precon_begin(&w, buf, cap, PSC_PRECON_HELLO);
        put_full(&w);
        n = psc_precon_finish(&w);
        for (size_t i = cap; i < sizeof(buf); i++) {
            if (buf[i] != GUARD)
                fail_msg("cap %zu: byte %zu written", cap, i);
        }
        /* The writer counts what it would have needed. */
        assert_int_equal(w.len, need);
        if (cap < need) {
            assert_int_equal(n, PSC_PRECON_E_SHORT);
            assert_true(w.overflow);
        } else {
            assert_int_equal(n, (long)need);
            assert_memory_equal(buf, ref, need);
        }
    }

    /* A NULL buffer measures. */
    {
        struct psc_precon_writer w;

        psc_precon_begin(&w, NULL, 0, PSC_PRECON_HELLO);
        put_full(&w);
        assert_int_equal(psc_precon_finish(&w), PSC_PRECON_E_SHORT);
        assert_int_equal(w.len, need);
    }
}

/* Values the decoder would reject fail the record in the writer. */
static void test_writer_refuses_bad_values(void **state)
{
    static uint8_t buf[1 << 17];
    static uint8_t big[UINT16_MAX];
    static char longstr[PSC_PRECON_STR_MAX + 2];
    const char *names[PSC_PRECON_MAX_PLUGINS + 1];
    const char *with_null[] = {"tcp", NULL};
    const char *with_empty[] = {"tcp", ""};
    const char *with_long[] = {"tcp", longstr};
    struct psc_precon_writer w;

    (void)state;
    memset(longstr, 'l', PSC_PRECON_STR_MAX + 1);
    for (int i = 0; i <= PSC_PRECON_MAX_PLUGINS; i++) names[i] = "p";

#define EXPECT_SHORT(stmt)                                                     \
    do {                                                                       \
        psc_precon_begin(&w, buf, sizeof(buf), PSC_PRECON_HELLO);              \
        stmt;                                                                  \
        psc_precon_put_u32(&w, PSC_TAG_PID, 1);                                \
        assert_int_equal(psc_precon_finish(&w), PSC_PRECON_E_SHORT);           \
    } while (0)

    EXPECT_SHORT(psc_precon_put_str(&w, PSC_TAG_HOSTNAME, ""));
    EXPECT_SHORT(psc_precon_put_str(&w, PSC_TAG_HOSTNAME, NULL));
    EXPECT_SHORT(psc_precon_put_str(&w, PSC_TAG_HOSTNAME, longstr));
    EXPECT_SHORT(psc_precon_put_plugins(&w, names, PSC_PRECON_MAX_PLUGINS + 1));
    EXPECT_SHORT(psc_precon_put_plugins(&w, NULL, 1));
    EXPECT_SHORT(psc_precon_put_plugins(&w, with_null, 2));
    EXPECT_SHORT(psc_precon_put_plugins(&w, with_empty, 2));
    EXPECT_SHORT(psc_precon_put_plugins(&w, with_long, 2));
    EXPECT_SHORT(psc_precon_put(&w, 100, buf, (size_t)UINT16_MAX + 1));
    EXPECT_SHORT(psc_precon_put(&w, 100, NULL, 1));
#undef EXPECT_SHORT

    /* The largest field and an empty plugin list are fine. */
    psc_precon_begin(&w, buf, sizeof(buf), PSC_PRECON_HELLO);
    psc_precon_put(&w, 100, big, UINT16_MAX);
    psc_precon_put_plugins(&w, NULL, 0);
    assert_int_equal(psc_precon_finish(&w),
                     PSC_PRECON_HDR_LEN + 4 + UINT16_MAX + 4);
    {
        struct psc_precon_hdr h;

        /* Over the default receive limit, so pass a larger one. */
        assert_int_equal(psc_precon_hdr_decode(buf, &h, UINT32_MAX),
                         PSC_PRECON_OK);
        assert_int_equal(psc_precon_msg_decode(h.type, buf + 12, h.len, &msg),
                         PSC_PRECON_OK);
        assert_int_equal(msg.plugin_count, 0);
    }
}

/* ---------------------------------------------------------------------- */
/* Names                                                                  */
/* ---------------------------------------------------------------------- */

static void test_names(void **state)
{
    static const char *const types[] = {
        "?",           "HELLO",  "TRY",   "ACCEPT",     "REJECT",
        "ESTABLISHED", "FAILED", "ERROR", "BACKCONNECT"};
    const int statuses[] = {PSC_PRECON_OK,       PSC_PRECON_E_MAGIC,
                            PSC_PRECON_E_VERSION, PSC_PRECON_E_TOOBIG,
                            PSC_PRECON_E_TYPE,    PSC_PRECON_E_MALFORMED,
                            PSC_PRECON_E_SHORT};

    (void)state;
    for (unsigned t = 0; t < ARRAY_LEN(types); t++)
        assert_string_equal(psc_precon_type_str(t), types[t]);
    assert_string_equal(psc_precon_type_str(PSC_PRECON_TYPE_MAX + 1), "?");
    assert_string_equal(psc_precon_type_str(~0u), "?");

    assert_string_equal(psc_precon_status_str(PSC_PRECON_E_MAGIC),
                        "wrong magic (not a pscom peer)");
    for (size_t i = 0; i < ARRAY_LEN(statuses); i++) {
        const char *s = psc_precon_status_str(statuses[i]);

        assert_non_null(s);
        assert_true(strlen(s) > 0);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(s, psc_precon_status_str(statuses[j]));
    }
    assert_non_null(psc_precon_status_str(12345));
    assert_non_null(psc_precon_status_str(-12345));
}

/* ---------------------------------------------------------------------- */
/* Brute force                                                            */
/* ---------------------------------------------------------------------- */

/* What must hold for any record the decoder accepted. */
static void check_invariants(const struct psc_precon_msg *m,
                             const uint8_t *payload, size_t len)
{
    const char *strs[4 + PSC_PRECON_MAX_PLUGINS];
    unsigned n = 0;

    strs[n++] = m->boot_id;
    strs[n++] = m->hostname;
    strs[n++] = m->plugin;
    strs[n++] = m->error_text;
    assert_true(m->plugin_count <= PSC_PRECON_MAX_PLUGINS);
    for (unsigned i = 0; i < m->plugin_count; i++) {
        assert_non_null(m->plugins[i]);
        strs[n++] = m->plugins[i];
    }
    for (unsigned i = 0; i < n; i++) {
        const char *s = strs[i];
        size_t room, sl;

        if (!s) continue;
        assert_true(s >= m->strbuf && s < m->strbuf + sizeof(m->strbuf));
        room = (size_t)(m->strbuf + sizeof(m->strbuf) - s);
        sl = strnlen(s, room);
        assert_true(sl < room);
        assert_true(sl >= 1 && sl <= PSC_PRECON_STR_MAX);
        for (size_t k = 0; k < sl; k++)
            assert_true((unsigned char)s[k] >= 0x20 && s[k] != 0x7f);
    }
    if (m->plugin_data) {
        const uint8_t *d = m->plugin_data;

        assert_true(m->plugin_data_len <= PSC_PRECON_PLUGIN_DATA_MAX);
        assert_true(d >= payload && d <= payload + len);
        assert_true(m->plugin_data_len <= (size_t)(payload + len - d));
    } else {
        assert_int_equal(m->plugin_data_len, 0);
    }
}

/* Run the receive path over rec[0..n) held in an exact-size heap block. */
static int receive(const uint8_t *rec, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1);
    struct psc_precon_hdr h;
    int rc;

    assert_non_null(copy);
    memcpy(copy, rec, n);
    if (n < PSC_PRECON_HDR_LEN) {
        rc = -100; /* the caller would wait for more bytes */
    } else {
        rc = psc_precon_hdr_decode(copy, &h, PSC_PRECON_MAX_PAYLOAD);
        if (rc == PSC_PRECON_OK) {
            size_t plen = n - PSC_PRECON_HDR_LEN;

            if (h.len < plen) plen = h.len;
            rc = psc_precon_msg_decode(h.type, copy + PSC_PRECON_HDR_LEN,
                                       plen, &msg);
            assert_true(rc == PSC_PRECON_OK || rc == PSC_PRECON_E_MALFORMED);
            if (rc == PSC_PRECON_OK)
                check_invariants(&msg, copy + PSC_PRECON_HDR_LEN, plen);
        }
    }
    free(copy);
    return rc;
}

static void test_every_truncation(void **state)
{
    uint8_t rec[1024];
    size_t n = make_full(rec, sizeof(rec), PSC_PRECON_HELLO);
    unsigned ok = 0, malformed = 0;

    (void)state;
    for (size_t t = 0; t <= n; t++) {
        int rc = receive(rec, t);

        if (rc == PSC_PRECON_OK) ok++;
        if (rc == PSC_PRECON_E_MALFORMED) malformed++;
    }
    /* Cut at one of the 16 field boundaries (including none): accepted. */
    assert_int_equal(ok, 16);
    assert_int_equal(malformed, n + 1 - PSC_PRECON_HDR_LEN - 16);
    assert_int_equal(receive(rec, n), PSC_PRECON_OK);
    assert_string_equal(msg.hostname, "node042.cluster");
}

static uint64_t rng_state;

static uint32_t rng(void)
{
    /* xorshift64* with a fixed seed: the same mutations every run. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * UINT64_C(2685821657736338717)) >> 32);
}

static void test_random_mutations(void **state)
{
    enum { ROUNDS = 5000 };
    uint8_t seeds[3][1024];
    size_t seed_len[3];
    static uint8_t rec[2048];
    unsigned count[8] = {0};

    (void)state;
    rng_state = UINT64_C(0x9e3779b97f4a7c15);
    seed_len[0] = make_full(seeds[0], sizeof(seeds[0]), PSC_PRECON_HELLO);
    seed_len[1] = make_full(seeds[1], sizeof(seeds[1]), PSC_PRECON_ACCEPT);
    {
        struct psc_precon_writer w;
        const char *names[] = {"a", "bb", "ccc", "dddd"};

        psc_precon_begin(&w, seeds[2], sizeof(seeds[2]), PSC_PRECON_TRY);
        psc_precon_put(&w, 77, "unknown", 7);
        psc_precon_put_plugins(&w, names, 4);
        psc_precon_put(&w, PSC_TAG_PLUGIN_DATA, "", 0);
        psc_precon_put_str(&w, PSC_TAG_PLUGIN, "bb");
        seed_len[2] = (size_t)psc_precon_finish(&w);
    }

    for (unsigned round = 0; round < ROUNDS; round++) {
        unsigned s = rng() % 3, edits = 1 + rng() % 4;
        size_t n = seed_len[s];
        int rc;

        memcpy(rec, seeds[s], n);
        for (unsigned e = 0; e < edits; e++) {
            /* Mostly payload edits: header edits only hit the checks. */
            size_t pos = (rng() % 8 == 0) ? rng() % n
                                           : PSC_PRECON_HDR_LEN +
                                                 rng() % (n - PSC_PRECON_HDR_LEN);

            switch (rng() % 6) {
            case 0: rec[pos] ^= (uint8_t)(1u << (rng() % 8)); break;
            case 1: rec[pos] = (uint8_t)rng(); break;
            case 2: rec[pos] = 0; break;
            case 3: rec[pos] = 0xff; break;
            case 4: n = pos > PSC_PRECON_HDR_LEN ? pos : n; break; /* cut */
            case 5: /* grow with random bytes */
                for (unsigned k = rng() % 16; k > 0 && n < sizeof(rec); k--)
                    rec[n++] = (uint8_t)rng();
                break;
            }
        }
        rc = receive(rec, n);
        count[-rc < 8 && rc <= 0 ? -rc : 7]++;
    }
    /* Both outcomes must have been reached, or the test proves little. */
    assert_true(count[0] > 0);
    assert_true(count[-PSC_PRECON_E_MALFORMED] > ROUNDS / 4);
    print_message("mutations: %u ok, %u malformed, %u header errors\n",
                  count[0], count[-PSC_PRECON_E_MALFORMED],
                  ROUNDS - count[0] - count[-PSC_PRECON_E_MALFORMED]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_every_type),
        cmocka_unit_test(test_roundtrip_empty),
        cmocka_unit_test(test_roundtrip_limits),
        cmocka_unit_test(test_wire_bytes),
        cmocka_unit_test(test_hdr_magic),
        cmocka_unit_test(test_hdr_version),
        cmocka_unit_test(test_hdr_type),
        cmocka_unit_test(test_hdr_toobig),
        cmocka_unit_test(test_hdr_order_and_flags),
        cmocka_unit_test(test_truncated_field_header),
        cmocka_unit_test(test_value_past_end),
        cmocka_unit_test(test_wrong_fixed_lengths),
        cmocka_unit_test(test_bad_strings),
        cmocka_unit_test(test_bad_plugin_lists),
        cmocka_unit_test(test_duplicate_tags),
        cmocka_unit_test(test_plugin_data_size),
        cmocka_unit_test(test_unknown_tags_skipped),
        cmocka_unit_test(test_writer_every_cap),
        cmocka_unit_test(test_writer_refuses_bad_values),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_random_mutations),
    };

    return cmocka_run_group_tests_name("precon_codec", tests, NULL, NULL);
}
