/*
 * The ucx plugin's handshake blob: what one side tells the other in the
 * pre-connection (precon TRY/ACCEPT records). It comes from the network, so
 * the decoder checks every field and never reads past the given length.
 *
 * Layout (little-endian, UX_BLOB_FIXED bytes, then the address):
 *    0  u32  magic UX_BLOB_MAGIC
 *    4  u16  version UX_BLOB_VERSION
 *    6  u16  flags: UX_BLOB_F_PEER_ERRORS; others are refused
 *    8  u32  key slot: what the peer puts in front of every message to us
 *   12  u32  key generation
 *   16  u64  our core rendezvous threshold (UINT64_MAX: none)
 *   24  u32  length of the UCX worker address
 *   28  ...  the worker address (opaque to us, parsed by UCX)
 */
#ifndef PSCOM_UCX_BLOB_H
#define PSCOM_UCX_BLOB_H

#include <stddef.h>
#include <stdint.h>

#define UX_BLOB_MAGIC   0x78756370u /* "pcux" */
#define UX_BLOB_VERSION 1
#define UX_BLOB_FIXED   28
/* The sender wants endpoints in UCX's peer error-handling mode. */
#define UX_BLOB_F_PEER_ERRORS 0x1
/* Largest worker address accepted (the precon carries 4096 bytes). */
#define UX_BLOB_ADDR_MAX (4096 - UX_BLOB_FIXED)

typedef struct ux_blob {
    uint16_t flags;   /* UX_BLOB_F_* */
    uint32_t slot;
    uint32_t gen;
    uint64_t rndv;    /* the sender's rendezvous threshold */
    const void *addr; /* decode: points into the decoded buffer */
    size_t addr_len;
} ux_blob_t;

/* Write b to buf (room for *len bytes); *len gets the length.
 * 0, or -EMSGSIZE when it does not fit (nothing is promised about buf). */
int ux_blob_encode(const ux_blob_t *b, void *buf, size_t *len);

/* Read buf[0..len). 0 with *b filled (b->addr points into buf), or -EPROTO
 * with *why set to a static description of the first fault. */
int ux_blob_decode(const void *buf, size_t len, ux_blob_t *b, const char **why);

#endif /* PSCOM_UCX_BLOB_H */
