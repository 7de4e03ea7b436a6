/*
 * What the verbs plugin puts on the wire besides the core's frames, as
 * explicit little-endian byte layouts. All of it comes from the network:
 * the decoders check every field and never read past `len`.
 *
 * 1. The wire-up blob, exchanged in the pre-connection handshake (hs_start /
 *    hs_connect), version 1, 44 bytes:
 *
 *      off size field
 *        0    2 magic "VB"
 *        2    1 version (1; another version is refused)
 *        3    1 flags: bit 0 = the GID is valid; other bits 0
 *        4    2 length of the blob (44)
 *        6    1 path MTU of the sender's port (enum ibv_mtu, 1..5)
 *        7    1 RDMA read depth the sender can serve and issue (0: none)
 *        8    4 QP number (1 .. 2^24-1)
 *       12    4 initial packet sequence number (< 2^24)
 *       16    2 LID (0 on RoCE)
 *       18    1 port number (>= 1)
 *       19    1 link layer (0 unspecified, 1 InfiniBand, 2 Ethernet)
 *       20   16 GID (network byte order, as the HCA reports it)
 *       36    2 receive slots posted for the peer: its initial credits (>= 3)
 *       38    2 reserved, 0
 *       40    4 bytes per receive slot, header included (64 .. 16 MiB)
 *
 * 2. The rendezvous blob (rndv_describe -> rndv_pull), version 1, 28 bytes:
 *
 *        0    1 version (1)
 *        1    3 reserved, 0
 *        4    4 rkey of the sender's registration
 *        8    8 address of the send buffer
 *       16    8 length of the send buffer (> 0, address + length fits)
 *       24    4 handle the receiver returns when it has read the buffer
 *
 * 4. The key of a region for one-sided operations (rma_register -> the
 *    peer's rma_rkey; it travels inside pscom's packed key), version 1,
 *    40 bytes:
 *
 *        0    1 version (1)
 *        1    1 flags: bit 0 = the GID is valid; other bits 0
 *        2    2 LID of the owner's port
 *        4    4 rkey of the region's registration
 *        8    8 address of the region
 *       16    8 length of the region (> 0, address + length fits)
 *       24   16 GID of the owner's port (0 when not valid)
 *
 *    LID and GID name the port of the process that registered the region,
 *    so that a key used on a connection to another node is refused.
 *
 * 3. The header of every message in a receive slot, 8 bytes, followed by
 *    `nrel` 4-byte rendezvous handles to release and `len` bytes of the
 *    core's frame stream; the three parts fill the message exactly:
 *
 *        0    2 credits returned (slots consumed and posted again)
 *        2    1 nrel
 *        3    1 flags, 0
 *        4    4 len
 */
#ifndef VB_WIREUP_H
#define VB_WIREUP_H

#include <stddef.h>
#include <stdint.h>

#define VB_WIREUP_VERSION 1
#define VB_WIREUP_LEN 44
#define VB_WIREUP_GID_VALID 0x01
#define VB_SLOT_MIN 64u
#define VB_SLOT_MAX (16u << 20)

typedef struct vb_wireup {
    uint8_t flags;       /* VB_WIREUP_GID_VALID */
    uint8_t mtu;         /* enum ibv_mtu */
    uint8_t rd_atom;     /* RDMA read depth, 0: none */
    uint32_t qpn;
    uint32_t psn;
    uint16_t lid;
    uint8_t port;
    uint8_t link_layer;  /* IBV_LINK_LAYER_* (0, 1, 2) */
    uint8_t gid[16];
    uint16_t ring;       /* receive slots = the peer's initial credits */
    uint32_t slot_size;  /* bytes per receive slot */
} vb_wireup_t;

/* Write w to buf (at least VB_WIREUP_LEN bytes). Returns the length, or
 * -ENOSPC when buf is too small, -EINVAL when a field is out of range. */
int vb_wireup_encode(const vb_wireup_t *w, void *buf, size_t len);

/* Parse a peer's blob. 0, or -EPROTO for anything malformed (wrong magic,
 * version or length, a field out of range, reserved bits set). */
int vb_wireup_decode(const void *buf, size_t len, vb_wireup_t *w);

#define VB_RNDV_VERSION 1
#define VB_RNDV_LEN 28

typedef struct vb_rndv_desc {
    uint32_t rkey;
    uint64_t addr;
    uint64_t len;
    uint32_t handle;
} vb_rndv_desc_t;

/* Returns VB_RNDV_LEN, or -ENOSPC / -EINVAL as vb_wireup_encode. */
int vb_rndv_encode(const vb_rndv_desc_t *d, void *buf, size_t len);
/* 0, or -EPROTO. */
int vb_rndv_decode(const void *buf, size_t len, vb_rndv_desc_t *d);

#define VB_RMAKEY_VERSION 1
#define VB_RMAKEY_LEN 40

typedef struct vb_rmakey {
    uint8_t flags; /* VB_WIREUP_GID_VALID */
    uint16_t lid;
    uint32_t rkey;
    uint64_t addr;
    uint64_t len;
    uint8_t gid[16];
} vb_rmakey_t;

/* Returns VB_RMAKEY_LEN, or -ENOSPC / -EINVAL as vb_wireup_encode. */
int vb_rmakey_encode(const vb_rmakey_t *k, void *buf, size_t len);
/* 0, or -EPROTO. */
int vb_rmakey_decode(const void *buf, size_t len, vb_rmakey_t *k);

#define VB_MSG_HDR_LEN 8

typedef struct vb_msg_hdr {
    uint16_t credits;
    uint8_t nrel;
    uint32_t len;
} vb_msg_hdr_t;

/* Write the header (VB_MSG_HDR_LEN bytes) at buf. */
void vb_msg_encode(const vb_msg_hdr_t *h, void *buf);
/* Check a received message of msg_len bytes. 0, or -EPROTO when the header
 * is malformed or its parts do not fill the message exactly. */
int vb_msg_decode(const void *buf, size_t msg_len, vb_msg_hdr_t *h);
/* The i-th release handle of a checked message, and where its stream
 * bytes start. */
uint32_t vb_msg_handle(const void *buf, unsigned i);
const void *vb_msg_payload(const void *buf, const vb_msg_hdr_t *h);
/* Write the i-th release handle. */
void vb_msg_put_handle(void *buf, unsigned i, uint32_t handle);

/* Little-endian helpers, also for tests. */
void vb_put16(uint8_t *p, uint16_t v);
void vb_put32(uint8_t *p, uint32_t v);
void vb_put64(uint8_t *p, uint64_t v);
uint16_t vb_get16(const uint8_t *p);
uint32_t vb_get32(const uint8_t *p);
uint64_t vb_get64(const uint8_t *p);

#endif
