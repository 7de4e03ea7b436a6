/*
 * libFuzzer harness for the pre-connection record decoder.
 *
 * Each input is a record as it would arrive from a peer: a 12-byte header
 * (checked with the default 65536-byte limit) and a payload. The rest of
 * the input is decoded as the payload whatever the header said, so the
 * field decoder is exercised even before the fuzzer has found the magic.
 *
 * Every record the decoder accepts is also encoded again and decoded a
 * second time; the two decodings must agree (the writer must accept
 * whatever the decoder accepted). A disagreement aborts the run.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "precon_codec.h"

/* Large; kept out of the stack frame. */
static struct psc_precon_msg first, second;
static uint8_t rebuilt[4 * (4 + PSC_PRECON_STR_MAX) +
                       4 + PSC_PRECON_MAX_PLUGINS * (PSC_PRECON_STR_MAX + 1) +
                       4 + PSC_PRECON_PLUGIN_DATA_MAX + 4096];

static void put_str_if(struct psc_precon_writer *w, uint16_t tag,
                       const char *s)
{
    if (s) psc_precon_put_str(w, tag, s);
}

static long encode(const struct psc_precon_msg *m, uint8_t *buf, size_t cap)
{
    struct psc_precon_writer w;

    psc_precon_begin(&w, buf, cap, m->type);
    if (m->has_name)
        psc_precon_put(&w, PSC_TAG_NAME, m->name, PSC_PRECON_NAME_LEN);
    if (m->has_rank) psc_precon_put_i32(&w, PSC_TAG_RANK, m->rank);
    if (m->has_node_id) psc_precon_put_i32(&w, PSC_TAG_NODE_ID, m->node_id);
    put_str_if(&w, PSC_TAG_BOOT_ID, m->boot_id);
    put_str_if(&w, PSC_TAG_HOSTNAME, m->hostname);
    if (m->has_pid) psc_precon_put_u32(&w, PSC_TAG_PID, m->pid);
    if (m->plugin_count)
        psc_precon_put_plugins(&w, m->plugins, m->plugin_count);
    put_str_if(&w, PSC_TAG_PLUGIN, m->plugin);
    if (m->plugin_data)
        psc_precon_put(&w, PSC_TAG_PLUGIN_DATA, m->plugin_data,
                       m->plugin_data_len);
    if (m->has_error_code)
        psc_precon_put_i32(&w, PSC_TAG_ERROR_CODE, m->error_code);
    put_str_if(&w, PSC_TAG_ERROR_TEXT, m->error_text);
    if (m->has_port) psc_precon_put_u32(&w, PSC_TAG_PORT, m->port);
    if (m->has_con_id) psc_precon_put_u64(&w, PSC_TAG_CON_ID, m->con_id);
    if (m->has_peer_con_id)
        psc_precon_put_u64(&w, PSC_TAG_PEER_CON_ID, m->peer_con_id);
    if (m->has_flags) psc_precon_put_u32(&w, PSC_TAG_FLAGS, m->flags);
    return psc_precon_finish(&w);
}

static int same_str(const char *a, const char *b)
{
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

static void check_same(const struct psc_precon_msg *a,
                       const struct psc_precon_msg *b)
{
    CHECK(a->type == b->type);
    CHECK(a->has_name == b->has_name);
    CHECK(!a->has_name || memcmp(a->name, b->name, PSC_PRECON_NAME_LEN) == 0);
    CHECK(a->has_rank == b->has_rank && a->rank == b->rank);
    CHECK(a->has_node_id == b->has_node_id && a->node_id == b->node_id);
    CHECK(a->has_pid == b->has_pid && a->pid == b->pid);
    CHECK(a->has_port == b->has_port && a->port == b->port);
    CHECK(a->has_con_id == b->has_con_id && a->con_id == b->con_id);
    CHECK(a->has_peer_con_id == b->has_peer_con_id &&
          a->peer_con_id == b->peer_con_id);
    CHECK(a->has_flags == b->has_flags && a->flags == b->flags);
    CHECK(a->has_error_code == b->has_error_code &&
          a->error_code == b->error_code);
    CHECK(same_str(a->boot_id, b->boot_id));
    CHECK(same_str(a->hostname, b->hostname));
    CHECK(same_str(a->plugin, b->plugin));
    CHECK(same_str(a->error_text, b->error_text));
    CHECK(a->plugin_count == b->plugin_count);
    for (unsigned i = 0; i < a->plugin_count; i++)
        CHECK(same_str(a->plugins[i], b->plugins[i]));
    CHECK((a->plugin_data == NULL) == (b->plugin_data == NULL));
    CHECK(a->plugin_data_len == b->plugin_data_len);
    CHECK(a->plugin_data_len <= PSC_PRECON_PLUGIN_DATA_MAX);
    CHECK(a->plugin_data_len == 0 ||
          memcmp(a->plugin_data, b->plugin_data, a->plugin_data_len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct psc_precon_hdr h, h2;
    const uint8_t *payload;
    size_t plen;
    long n;
    int rc;

    if (size < PSC_PRECON_HDR_LEN) return 0;
    rc = psc_precon_hdr_decode(data, &h, PSC_PRECON_MAX_PAYLOAD);
    CHECK(psc_precon_status_str(rc) != NULL);
    CHECK(psc_precon_type_str(h.type) != NULL);

    payload = data + PSC_PRECON_HDR_LEN;
    plen = size - PSC_PRECON_HDR_LEN;
    rc = psc_precon_msg_decode(h.type, payload, plen, &first);
    CHECK(rc == PSC_PRECON_OK || rc == PSC_PRECON_E_MALFORMED);
    if (rc != PSC_PRECON_OK) return 0;
    if (first.plugin_data) {
        const uint8_t *d = first.plugin_data;

        CHECK(d >= payload && d <= payload + plen);
        CHECK(first.plugin_data_len <= (size_t)(payload + plen - d));
    }

    /* Whatever was accepted can be sent again and reads back the same. */
    n = encode(&first, rebuilt, sizeof(rebuilt));
    CHECK(n >= PSC_PRECON_HDR_LEN);
    rc = psc_precon_hdr_decode(rebuilt, &h2, UINT32_MAX);
    /* The writer copies the type as given, valid or not. */
    CHECK(rc == PSC_PRECON_OK || (rc == PSC_PRECON_E_TYPE && h.type == 0) ||
          (rc == PSC_PRECON_E_TYPE && h.type > PSC_PRECON_TYPE_MAX));
    CHECK(h2.type == h.type && h2.flags == 0);
    CHECK(h2.len == (size_t)n - PSC_PRECON_HDR_LEN);
    CHECK(psc_precon_msg_decode(h2.type, rebuilt + PSC_PRECON_HDR_LEN, h2.len,
                                &second) == PSC_PRECON_OK);
    check_same(&first, &second);
    return 0;
}
