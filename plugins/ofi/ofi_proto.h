/*
 * The ofi plugin's own protocol: the handshake blob, the tag layout and how
 * a frame is cut into libfabric messages. Pure functions without state,
 * shared by the plugin and its unit tests. doc/plugins/ofi.md describes
 * the format for people.
 *
 * Tags (64 bits):
 *
 *   63            32 31                     8 7        0
 *   +---------------+------------------------+----------+
 *   | receiver conid|  frame sequence (24)   |   part   |
 *   +---------------+------------------------+----------+
 *
 * The conid is chosen by the receiving side (unique in its process, never
 * reused) and travels in its handshake blob; the sequence number counts the
 * frames of one direction of one connection; part 0 is the first message
 * of a frame (the whole frame, or its head), parts 1..255 carry the rest in
 * chunks (chunk k has part 1 + k % 255).
 *
 * Connections in pull mode (both blobs have OFI_BLOB_PULL; processes of
 * one host) send no chunks: a first message shorter than its frame ends
 * with a pull descriptor, which says where the rest lies in the sender's
 * memory. The receiver copies the rest itself (process_vm_readv) and then
 * writes the frame's number + 1 to the acknowledgement word the descriptor
 * names (process_vm_writev); the sender's frame is done when it sees it.
 * No send then waits for the receiver inside the provider, and the
 * receiver holds none of the provider's locks of the sender while it
 * copies.
 *
 * Receives are posted for exact tags, except the sink of a closed
 * connection: the shm provider of libfabric 1.17 matches a receive against
 * unexpected messages without the receive's ignore mask.
 */
#ifndef OFI_PROTO_H_
#define OFI_PROTO_H_

#include <stddef.h>
#include <stdint.h>

#include "ofi_wrap.h"

#define OFI_SEQ_BITS 24
#define OFI_SEQ_MASK ((1u << OFI_SEQ_BITS) - 1)
#define OFI_PART_FIRST 0u
/* Ignore mask that matches every message to one conid. */
#define OFI_TAG_ANY_OF_CONID 0xffffffffull

static inline uint64_t ofi_tag(uint32_t conid, uint32_t seq, unsigned part)
{
    return ((uint64_t)conid << 32) | ((uint64_t)(seq & OFI_SEQ_MASK) << 8) |
           (part & 0xffu);
}


/* The part number of remainder chunk k (0-based). */
static inline unsigned ofi_chunk_part(uint64_t k)
{
    return 1u + (unsigned)(k % 255u);
}

/* Bytes of the first message of a frame of hl head bytes (header and
 * extended header) and bl body bytes, when the receiver takes first
 * messages of at most `bounce` bytes: the whole frame when it fits, else the
 * head alone (so that the body lands in one piece, possibly straight in the
 * user's buffer), else the first `bounce` bytes. */
static inline size_t ofi_first_len(size_t hl, size_t bl, size_t bounce)
{
    if (hl + bl <= bounce) return hl + bl;
    if (hl <= bounce) return hl;
    return bounce;
}

/* The frame a message begins, from its 8-byte pscom_header_net_t: the
 * length of its head (header and extended header), its total length and
 * its message type. -1 when msg has fewer than 8 bytes. */
int ofi_frame_parse(const void *msg, size_t len, size_t *head,
                    uint64_t *total, uint8_t *type);

/* ---------------------------------------------------------------------- */
/* Pull mode                                                              */
/* ---------------------------------------------------------------------- */

/* Where the rest of a frame lies in the sender's memory. */
typedef struct ofi_pull_desc {
    uint64_t addr; /* the rest's address */
    uint64_t len;  /* bytes of the rest */
    uint64_t ack;  /* address of the 8-byte acknowledgement word */
    uint32_t pid;  /* the sender's process id */
    uint32_t flags; /* OFI_DESC_SPLIT */
} ofi_pull_desc_t;

#define OFI_PULL_DESC_LEN 32

/* What a sender that closes writes into the acknowledgement word of a
 * frame the peer may still copy from the core's buffer: that buffer goes
 * back to the application. A receiver reads the word after its copy and
 * drops what it copied when it finds this. */
#define OFI_ACK_REVOKED UINT64_MAX

/* Split frames (pull mode): a descriptor with flag OFI_DESC_SPLIT (and
 * neither process nor acknowledgement word) announces the rest as injected
 * chunks of `addr` bytes (at most OFI_SPLIT_CHUNK_MAX), only with providers
 * whose inject size is at least OFI_SPLIT_INJECT_MIN. */
#define OFI_DESC_SPLIT 0x1u
#define OFI_SPLIT_CHUNK_MAX 65536
#define OFI_SPLIT_INJECT_MIN 1024

/* Little endian, OFI_PULL_DESC_LEN bytes. */
void ofi_pull_desc_encode(const ofi_pull_desc_t *d, void *buf);
void ofi_pull_desc_decode(const void *buf, ofi_pull_desc_t *d);

/* Bytes of a frame's head that go in a first message with a pull
 * descriptor, when first messages may be `max` bytes long (at least
 * OFI_PULL_DESC_LEN + 8): the head, or as much of it as fits. */
static inline size_t ofi_pull_first_len(size_t hl, size_t max)
{
    return hl + OFI_PULL_DESC_LEN <= max ? hl : max - OFI_PULL_DESC_LEN;
}

/* The message type of a rendezvous body (doc/wire-protocol.md): its
 * receive buffer is a posted request's, so the body may be received into
 * it directly. */
#define OFI_MSG_RNDV_DATA 3
/* The message type of the end-of-connection message. */
#define OFI_MSG_EOF 4

/* ---------------------------------------------------------------------- */
/* Handshake blob                                                         */
/* ---------------------------------------------------------------------- */

#define OFI_BLOB_VERSION 1
#define OFI_BOUNCE_MIN 64u
#define OFI_BOUNCE_MAX (1u << 30)
#define OFI_PROV_MAX 63

/* Flags of the blob. */
#define OFI_BLOB_PULL 0x1 /* I read the rest of large frames from the
                           * sender's memory, and let the peer read mine
                           * (pull mode) */

/* One side's description of its end, sent in the pre-connection. */
typedef struct ofi_blob {
    uint16_t flags;       /* OFI_BLOB_*; unknown bits are dropped */
    uint32_t conid;       /* put this in the tags of messages to me */
    uint32_t bounce;      /* largest first message of a frame I accept */
    uint64_t max_msg;     /* largest message I accept */
    uint32_t addr_format; /* libfabric address format of addr */
    char prov[OFI_PROV_MAX + 1]; /* my provider, NUL terminated */
    size_t addr_len;
    uint8_t addr[OFW_ADDR_MAX]; /* my endpoint name */
} ofi_blob_t;

/* Encode b into buf (cap bytes): the length, or 0 when it does not fit or
 * b is not valid. */
size_t ofi_blob_encode(const ofi_blob_t *b, void *buf, size_t cap);

/* Decode a blob from the network: 0, or -EPROTO (malformed),
 * -EPROTONOSUPPORT (another version) with a reason in *why. Never reads
 * past len. */
int ofi_blob_decode(const void *buf, size_t len, ofi_blob_t *b,
                    const char **why);

/* libfabric's address formats whose names are checked by their contents
 * (values of enum fi_addr_format; ofi_wrap.c asserts that they match). */
#define OFI_FMT_SOCKADDR 1     /* struct sockaddr_in or _in6 */
#define OFI_FMT_SOCKADDR_IN 2  /* struct sockaddr_in */
#define OFI_FMT_SOCKADDR_IN6 3 /* struct sockaddr_in6 */
#define OFI_FMT_STR 9          /* a string with its NUL */

/* Is the endpoint name of a peer's blob (addr, len bytes, address format
 * `format`, which is ours) whole? fi_av_insert takes a name without its
 * length: the provider reads as much as its format says (a string up to
 * its NUL), so a name from the network must hold exactly that. A string
 * must end with its only NUL (at least one character before it), a socket
 * address must have its family's size and that family; a name of another
 * format must be as long as our own (own_len): those formats have names of
 * one size. 0, or -EPROTO and what is wrong in why. */
int ofi_addr_check(uint32_t format, const uint8_t *addr, size_t len,
                   size_t own_len, char *why, size_t why_len);

#endif /* OFI_PROTO_H_ */
