/*
 * libFuzzer harness for what the transport plugins decode from their peers
 * besides the core's frames: the ucx handshake blob, the ofi handshake
 * blob, frame head and pull descriptor, and the verbs wire-up blob,
 * rendezvous descriptor, one-sided key and receive-slot header. The first
 * input byte picks the decoder, the rest is its input (copied to a buffer
 * of its exact size, so that reading past it is caught).
 *
 * What must hold, else the run aborts:
 * - a refusal names its reason where the decoder gives one;
 * - what a decoder accepts, its encoder writes again: byte for byte the
 *   input where the format has one encoding for each value (ucx, the pull
 *   descriptor, verbs), else a blob that decodes to the same values (ofi,
 *   whose decoder drops unknown flag bits);
 * - a verbs slot header that is accepted describes exactly the message:
 *   its release handles and payload lie inside it and fill it.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "../../plugins/ofi/ofi_proto.h"
#include "../../plugins/ucx/ucx_blob.h"
#include "../../plugins/verbs/wireup.h"


enum which {
    UCX_BLOB,
    OFI_BLOB,
    OFI_FRAME,
    OFI_PULL_DESC,
    VB_WIREUP,
    VB_RNDV,
    VB_RMAKEY,
    VB_MSG,
    WHICH_COUNT
};

static uint8_t out[8192];
static volatile uint32_t sink; /* reads that must stay in the message */

static void ucx_blob(const uint8_t *in, size_t len)
{
    ux_blob_t b;
    const char *why = NULL;
    if (ux_blob_decode(in, len, &b, &why)) {
        CHECK(why);
        return;
    }
    CHECK(b.addr == in + UX_BLOB_FIXED && b.addr_len == len - UX_BLOB_FIXED);
    size_t n = sizeof(out);
    CHECK(ux_blob_encode(&b, out, &n) == 0);
    CHECK(n == len && !memcmp(out, in, len));
}

static void ofi_blob(const uint8_t *in, size_t len)
{
    static ofi_blob_t a, b;
    const char *why = NULL;
    int rc = ofi_blob_decode(in, len, &a, &why);
    if (rc) {
        CHECK(why && (rc == -EPROTO || rc == -EPROTONOSUPPORT));
        return;
    }
    CHECK(strlen(a.prov) > 0 && strlen(a.prov) <= OFI_PROV_MAX);
    size_t n = ofi_blob_encode(&a, out, sizeof(out));
    CHECK(n == len);
    CHECK(ofi_blob_decode(out, n, &b, &why) == 0);
    CHECK(a.flags == b.flags && a.conid == b.conid && a.bounce == b.bounce &&
          a.max_msg == b.max_msg && a.addr_format == b.addr_format &&
          !strcmp(a.prov, b.prov) && a.addr_len == b.addr_len &&
          !memcmp(a.addr, b.addr, a.addr_len));
}

static void ofi_frame(const uint8_t *in, size_t len)
{
    size_t head;
    uint64_t total;
    uint8_t type;
    if (ofi_frame_parse(in, len, &head, &total, &type)) {
        CHECK(len < 8);
        return;
    }
    CHECK(head >= 8 && head <= 8 + 0xffff && total >= head);
}

static void ofi_pull_desc(const uint8_t *in, size_t len)
{
    if (len != OFI_PULL_DESC_LEN) return;
    ofi_pull_desc_t d;
    ofi_pull_desc_decode(in, &d);
    ofi_pull_desc_encode(&d, out);
    CHECK(!memcmp(out, in, len));
}

static void vb_wireup(const uint8_t *in, size_t len)
{
    vb_wireup_t w;
    if (vb_wireup_decode(in, len, &w)) return;
    CHECK(len == VB_WIREUP_LEN);
    CHECK(vb_wireup_encode(&w, out, sizeof(out)) == VB_WIREUP_LEN);
    CHECK(!memcmp(out, in, len));
}

static void vb_rndv(const uint8_t *in, size_t len)
{
    vb_rndv_desc_t d;
    if (vb_rndv_decode(in, len, &d)) return;
    CHECK(len == VB_RNDV_LEN && d.len && d.addr + d.len >= d.addr);
    CHECK(vb_rndv_encode(&d, out, sizeof(out)) == VB_RNDV_LEN);
    CHECK(!memcmp(out, in, len));
}

static void vb_rmakey(const uint8_t *in, size_t len)
{
    vb_rmakey_t k;
    if (vb_rmakey_decode(in, len, &k)) return;
    CHECK(len == VB_RMAKEY_LEN && k.len && k.addr + k.len >= k.addr);
    CHECK(vb_rmakey_encode(&k, out, sizeof(out)) == VB_RMAKEY_LEN);
    CHECK(!memcmp(out, in, len));
}

static void vb_msg(const uint8_t *in, size_t len)
{
    vb_msg_hdr_t h;
    if (vb_msg_decode(in, len, &h)) return;
    const uint8_t *payload = vb_msg_payload(in, &h);
    CHECK(payload >= in + VB_MSG_HDR_LEN && payload + h.len == in + len);
    for (unsigned i = 0; i < h.nrel; i++) sink += vb_msg_handle(in, i);
    if (h.len) sink += payload[0] + payload[h.len - 1];
    vb_msg_encode(&h, out);
    CHECK(!memcmp(out, in, VB_MSG_HDR_LEN));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size) return 0;
    size_t len = size - 1;
    uint8_t *in = malloc(len); /* (ASan gives even 0 bytes an address) */
    if (!in) return 0;
    memcpy(in, data + 1, len);
    switch (data[0] % WHICH_COUNT) {
    case UCX_BLOB: ucx_blob(in, len); break;
    case OFI_BLOB: ofi_blob(in, len); break;
    case OFI_FRAME: ofi_frame(in, len); break;
    case OFI_PULL_DESC: ofi_pull_desc(in, len); break;
    case VB_WIREUP: vb_wireup(in, len); break;
    case VB_RNDV: vb_rndv(in, len); break;
    case VB_RMAKEY: vb_rmakey(in, len); break;
    case VB_MSG: vb_msg(in, len); break;
    }
    free(in);
    return 0;
}
