/*
 * The ofi handshake blob and frame parsing (see ofi_proto.h).
 *
 * Blob layout, little endian:
 *
 *   off size
 *     0    4  magic "OFI" and version (1)
 *     4    2  flags: OFI_BLOB_PULL (unknown bits are ignored)
 *     6    2  addr_len, 1..OFW_ADDR_MAX
 *     8    4  conid
 *    12    4  bounce, OFI_BOUNCE_MIN..OFI_BOUNCE_MAX
 *    16    8  max_msg, at least bounce
 *    24    4  addr_format
 *    28    1  prov_len, 1..OFI_PROV_MAX
 *    29    n  provider name (no NUL), then the endpoint name
 *
 * The blob ends exactly after the endpoint name.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "ofi_proto.h"
#include "pscom.h"

#define HDR_LEN 29

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

size_t ofi_blob_encode(const ofi_blob_t *b, void *buf, size_t cap)
{
    size_t plen = strnlen(b->prov, sizeof(b->prov));
    size_t len = HDR_LEN + plen + b->addr_len;
    uint8_t *p = buf;

    if (!plen || plen > OFI_PROV_MAX || !b->addr_len ||
        b->addr_len > OFW_ADDR_MAX || len > cap)
        return 0;
    memcpy(p, "OFI", 3);
    p[3] = OFI_BLOB_VERSION;
    put16(p + 4, b->flags & OFI_BLOB_PULL);
    put16(p + 6, (uint16_t)b->addr_len);
    put32(p + 8, b->conid);
    put32(p + 12, b->bounce);
    put64(p + 16, b->max_msg);
    put32(p + 24, b->addr_format);
    p[28] = (uint8_t)plen;
    memcpy(p + HDR_LEN, b->prov, plen);
    memcpy(p + HDR_LEN + plen, b->addr, b->addr_len);
    return len;
}

int ofi_blob_decode(const void *buf, size_t len, ofi_blob_t *b,
                    const char **why)
{
    const uint8_t *p = buf;

    if (!buf || len < 4 || memcmp(p, "OFI", 3)) {
        *why = "not an ofi handshake blob (bad magic)";
        return -EPROTO;
    }
    if (p[3] != OFI_BLOB_VERSION) {
        *why = "ofi handshake blob of another version";
        return -EPROTONOSUPPORT;
    }
    if (len < HDR_LEN) {
        *why = "ofi handshake blob too short";
        return -EPROTO;
    }
    size_t alen = get16(p + 6);
    size_t plen = p[28];
    if (!plen || plen > OFI_PROV_MAX) {
        *why = "ofi handshake blob: bad provider name length";
        return -EPROTO;
    }
    if (!alen || alen > OFW_ADDR_MAX) {
        *why = "ofi handshake blob: bad address length";
        return -EPROTO;
    }
    if (len != HDR_LEN + plen + alen) {
        *why = "ofi handshake blob: length does not match its contents";
        return -EPROTO;
    }
    if (memchr(p + HDR_LEN, 0, plen)) {
        *why = "ofi handshake blob: NUL in the provider name";
        return -EPROTO;
    }
    for (size_t i = 0; i < plen; i++)
        if (p[HDR_LEN + i] < 0x20 || p[HDR_LEN + i] > 0x7e) {
            /* (it goes into log lines) */
            *why = "ofi handshake blob: the provider name has characters "
                   "other than printable ASCII";
            return -EPROTO;
        }
    uint32_t bounce = get32(p + 12);
    uint64_t max_msg = get64(p + 16);
    if (bounce < OFI_BOUNCE_MIN || bounce > OFI_BOUNCE_MAX) {
        *why = "ofi handshake blob: receive buffer size out of range";
        return -EPROTO;
    }
    if (max_msg < bounce) {
        *why = "ofi handshake blob: largest message smaller than the "
               "receive buffers";
        return -EPROTO;
    }
    b->flags = get16(p + 4) & OFI_BLOB_PULL;
    b->conid = get32(p + 8);
    b->bounce = bounce;
    b->max_msg = max_msg;
    b->addr_format = get32(p + 24);
    memcpy(b->prov, p + HDR_LEN, plen);
    b->prov[plen] = 0;
    b->addr_len = alen;
    memcpy(b->addr, p + HDR_LEN + plen, alen);
    return 0;
}

int ofi_frame_parse(const void *msg, size_t len, size_t *head,
                    uint64_t *total, uint8_t *type)
{
    pscom_header_net_t h;
    if (len < sizeof(h)) return -1;
    memcpy(&h, msg, sizeof(h));
    *head = sizeof(h) + (size_t)h.xheader_len;
    *total = sizeof(h) + (uint64_t)h.xheader_len + (uint64_t)h.data_len;
    *type = h.msg_type;
    return 0;
}

void ofi_pull_desc_encode(const ofi_pull_desc_t *d, void *buf)
{
    uint8_t *p = buf;
    put64(p, d->addr);
    put64(p + 8, d->len);
    put64(p + 16, d->ack);
    put32(p + 24, d->pid);
    put32(p + 28, d->flags);
}

void ofi_pull_desc_decode(const void *buf, ofi_pull_desc_t *d)
{
    const uint8_t *p = buf;
    d->addr = get64(p);
    d->len = get64(p + 8);
    d->ack = get64(p + 16);
    d->pid = get32(p + 24);
    d->flags = get32(p + 28);
}

/* A socket address of `family`: len bytes at addr, which must be `size`
 * long and say that family. */
static int sockaddr_check(const uint8_t *addr, size_t len, sa_family_t family,
                          size_t size, const char *name, char *why,
                          size_t why_len)
{
    sa_family_t f;
    if (len != size) {
        snprintf(why, why_len, "%s endpoint name of %zu bytes, not %zu",
                 name, len, size);
        return -EPROTO;
    }
    memcpy(&f, addr + offsetof(struct sockaddr, sa_family), sizeof(f));
    if (f != family) {
        snprintf(why, why_len, "%s endpoint name of address family %u, not "
                 "%u", name, (unsigned)f, (unsigned)family);
        return -EPROTO;
    }
    return 0;
}

int ofi_addr_check(uint32_t format, const uint8_t *addr, size_t len,
                   size_t own_len, char *why, size_t why_len)
{
    sa_family_t f = 0;
    switch (format) {
    case OFI_FMT_STR:
        if (len < 2 || addr[len - 1] || memchr(addr, 0, len - 1)) {
            snprintf(why, why_len, "string endpoint name of %zu byte%s %s",
                     len, len == 1 ? "" : "s",
                     len < 2 ? "(too short for a character and a NUL)"
                     : addr[len - 1] ? "without a NUL at its end"
                                     : "with a NUL before its end");
            return -EPROTO;
        }
        return 0;
    case OFI_FMT_SOCKADDR_IN:
        return sockaddr_check(addr, len, AF_INET, sizeof(struct sockaddr_in),
                              "FI_SOCKADDR_IN", why, why_len);
    case OFI_FMT_SOCKADDR_IN6:
        return sockaddr_check(addr, len, AF_INET6,
                              sizeof(struct sockaddr_in6), "FI_SOCKADDR_IN6",
                              why, why_len);
    case OFI_FMT_SOCKADDR:
        if (len >= sizeof(f))
            memcpy(&f, addr + offsetof(struct sockaddr, sa_family), sizeof(f));
        if (f == AF_INET6)
            return sockaddr_check(addr, len, AF_INET6,
                                  sizeof(struct sockaddr_in6), "FI_SOCKADDR",
                                  why, why_len);
        return sockaddr_check(addr, len, AF_INET, sizeof(struct sockaddr_in),
                              "FI_SOCKADDR", why, why_len);
    default:
        if (len != own_len) {
            snprintf(why, why_len, "endpoint name of %zu bytes in address "
                     "format %u, whose names have %zu", len, format, own_len);
            return -EPROTO;
        }
        return 0;
    }
}
