/*
 * Encoding and checking of the ucx handshake blob (see ucx_blob.h).
 */
#include <errno.h>
#include <string.h>

#include "ucx_blob.h"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int ux_blob_encode(const ux_blob_t *b, void *buf, size_t *len)
{
    if (!b->addr_len || b->addr_len > UX_BLOB_ADDR_MAX ||
        *len < UX_BLOB_FIXED + b->addr_len || (b->flags & ~UX_BLOB_F_PEER_ERRORS))
        return -EMSGSIZE;
    uint8_t *p = buf;
    put32(p, UX_BLOB_MAGIC);
    p[4] = UX_BLOB_VERSION & 0xff;
    p[5] = UX_BLOB_VERSION >> 8;
    p[6] = b->flags & 0xff;
    p[7] = b->flags >> 8;
    put32(p + 8, b->slot);
    put32(p + 12, b->gen);
    put64(p + 16, b->rndv);
    put32(p + 24, (uint32_t)b->addr_len);
    memcpy(p + UX_BLOB_FIXED, b->addr, b->addr_len);
    *len = UX_BLOB_FIXED + b->addr_len;
    return 0;
}

int ux_blob_decode(const void *buf, size_t len, ux_blob_t *b, const char **why)
{
    const uint8_t *p = buf;
    if (!buf || len < UX_BLOB_FIXED) {
        *why = "shorter than its fixed part";
        return -EPROTO;
    }
    if (get32(p) != UX_BLOB_MAGIC) {
        *why = "wrong magic (not a pscom ucx peer)";
        return -EPROTO;
    }
    unsigned version = p[4] | (unsigned)p[5] << 8;
    if (version != UX_BLOB_VERSION) {
        *why = "unsupported version of the ucx handshake";
        return -EPROTO;
    }
    unsigned flags = p[6] | (unsigned)p[7] << 8;
    if (flags & ~UX_BLOB_F_PEER_ERRORS) {
        *why = "unknown flags";
        return -EPROTO;
    }
    uint32_t alen = get32(p + 24);
    if (alen == 0 || alen > UX_BLOB_ADDR_MAX) {
        *why = "worker address length out of range";
        return -EPROTO;
    }
    if (alen != len - UX_BLOB_FIXED) {
        *why = "worker address length does not match the blob length";
        return -EPROTO;
    }
    b->flags = (uint16_t)flags;
    b->slot = get32(p + 8);
    b->gen = get32(p + 12);
    b->rndv = get64(p + 16);
    b->addr = p + UX_BLOB_FIXED;
    b->addr_len = alen;
    return 0;
}
