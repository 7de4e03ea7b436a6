/*
 * Codecs of the verbs plugin's wire formats (layouts in wireup.h).
 */
#include <errno.h>
#include <string.h>

#include "wireup.h"

void vb_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void vb_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void vb_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

uint16_t vb_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

uint32_t vb_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

uint64_t vb_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* The range checks shared by encoder and decoder. */
static int wireup_valid(const vb_wireup_t *w)
{
    if (w->flags & ~VB_WIREUP_GID_VALID) return 0;
    if (w->mtu < 1 || w->mtu > 5) return 0; /* IBV_MTU_256 .. IBV_MTU_4096 */
    if (!w->qpn || w->qpn >= (1u << 24)) return 0;
    if (w->psn >= (1u << 24)) return 0;
    if (!w->port) return 0;
    if (w->link_layer > 2) return 0;
    if (w->ring < 3) return 0; /* VB_CREDIT_RING_MIN */
    if (w->slot_size < VB_SLOT_MIN || w->slot_size > VB_SLOT_MAX) return 0;
    return 1;
}

int vb_wireup_encode(const vb_wireup_t *w, void *buf, size_t len)
{
    if (len < VB_WIREUP_LEN) return -ENOSPC;
    if (!wireup_valid(w)) return -EINVAL;
    uint8_t *p = buf;
    memset(p, 0, VB_WIREUP_LEN);
    p[0] = 'V';
    p[1] = 'B';
    p[2] = VB_WIREUP_VERSION;
    p[3] = w->flags;
    vb_put16(p + 4, VB_WIREUP_LEN);
    p[6] = w->mtu;
    p[7] = w->rd_atom;
    vb_put32(p + 8, w->qpn);
    vb_put32(p + 12, w->psn);
    vb_put16(p + 16, w->lid);
    p[18] = w->port;
    p[19] = w->link_layer;
    memcpy(p + 20, w->gid, 16);
    vb_put16(p + 36, w->ring);
    vb_put32(p + 40, w->slot_size);
    return VB_WIREUP_LEN;
}

int vb_wireup_decode(const void *buf, size_t len, vb_wireup_t *w)
{
    const uint8_t *p = buf;
    if (!buf || len != VB_WIREUP_LEN) return -EPROTO;
    if (p[0] != 'V' || p[1] != 'B' || p[2] != VB_WIREUP_VERSION) return -EPROTO;
    if (vb_get16(p + 4) != VB_WIREUP_LEN || vb_get16(p + 38) != 0)
        return -EPROTO;
    vb_wireup_t t = {
        .flags = p[3],
        .mtu = p[6],
        .rd_atom = p[7],
        .qpn = vb_get32(p + 8),
        .psn = vb_get32(p + 12),
        .lid = vb_get16(p + 16),
        .port = p[18],
        .link_layer = p[19],
        .ring = vb_get16(p + 36),
        .slot_size = vb_get32(p + 40),
    };
    memcpy(t.gid, p + 20, 16);
    if (!wireup_valid(&t)) return -EPROTO;
    *w = t;
    return 0;
}

int vb_rndv_encode(const vb_rndv_desc_t *d, void *buf, size_t len)
{
    if (len < VB_RNDV_LEN) return -ENOSPC;
    if (!d->len || d->addr + d->len < d->addr) return -EINVAL;
    uint8_t *p = buf;
    memset(p, 0, VB_RNDV_LEN);
    p[0] = VB_RNDV_VERSION;
    vb_put32(p + 4, d->rkey);
    vb_put64(p + 8, d->addr);
    vb_put64(p + 16, d->len);
    vb_put32(p + 24, d->handle);
    return VB_RNDV_LEN;
}

int vb_rndv_decode(const void *buf, size_t len, vb_rndv_desc_t *d)
{
    const uint8_t *p = buf;
    if (!buf || len != VB_RNDV_LEN) return -EPROTO;
    if (p[0] != VB_RNDV_VERSION || p[1] || p[2] || p[3]) return -EPROTO;
    vb_rndv_desc_t t = {
        .rkey = vb_get32(p + 4),
        .addr = vb_get64(p + 8),
        .len = vb_get64(p + 16),
        .handle = vb_get32(p + 24),
    };
    if (!t.len || t.addr + t.len < t.addr) return -EPROTO;
    *d = t;
    return 0;
}

static int rmakey_valid(const vb_rmakey_t *k)
{
    return !(k->flags & ~VB_WIREUP_GID_VALID) && k->len &&
           k->addr + k->len >= k->addr;
}

int vb_rmakey_encode(const vb_rmakey_t *k, void *buf, size_t len)
{
    if (len < VB_RMAKEY_LEN) return -ENOSPC;
    if (!rmakey_valid(k)) return -EINVAL;
    uint8_t *p = buf;
    p[0] = VB_RMAKEY_VERSION;
    p[1] = k->flags;
    vb_put16(p + 2, k->lid);
    vb_put32(p + 4, k->rkey);
    vb_put64(p + 8, k->addr);
    vb_put64(p + 16, k->len);
    memcpy(p + 24, k->gid, 16);
    return VB_RMAKEY_LEN;
}

int vb_rmakey_decode(const void *buf, size_t len, vb_rmakey_t *k)
{
    const uint8_t *p = buf;
    if (!buf || len != VB_RMAKEY_LEN || p[0] != VB_RMAKEY_VERSION)
        return -EPROTO;
    vb_rmakey_t t = {
        .flags = p[1],
        .lid = vb_get16(p + 2),
        .rkey = vb_get32(p + 4),
        .addr = vb_get64(p + 8),
        .len = vb_get64(p + 16),
    };
    memcpy(t.gid, p + 24, 16);
    if (!rmakey_valid(&t)) return -EPROTO;
    *k = t;
    return 0;
}

void vb_msg_encode(const vb_msg_hdr_t *h, void *buf)
{
    uint8_t *p = buf;
    vb_put16(p, h->credits);
    p[2] = h->nrel;
    p[3] = 0;
    vb_put32(p + 4, h->len);
}

int vb_msg_decode(const void *buf, size_t msg_len, vb_msg_hdr_t *h)
{
    const uint8_t *p = buf;
    if (!buf || msg_len < VB_MSG_HDR_LEN || p[3]) return -EPROTO;
    vb_msg_hdr_t t = {
        .credits = vb_get16(p),
        .nrel = p[2],
        .len = vb_get32(p + 4),
    };
    /* 64-bit sum: no overflow with a 32-bit len. */
    uint64_t need = (uint64_t)VB_MSG_HDR_LEN + 4u * (uint64_t)t.nrel + t.len;
    if (need != msg_len) return -EPROTO;
    *h = t;
    return 0;
}

uint32_t vb_msg_handle(const void *buf, unsigned i)
{
    return vb_get32((const uint8_t *)buf + VB_MSG_HDR_LEN + 4 * i);
}

void vb_msg_put_handle(void *buf, unsigned i, uint32_t handle)
{
    vb_put32((uint8_t *)buf + VB_MSG_HDR_LEN + 4 * i, handle);
}

const void *vb_msg_payload(const void *buf, const vb_msg_hdr_t *h)
{
    return (const uint8_t *)buf + VB_MSG_HDR_LEN + 4 * (size_t)h->nrel;
}
