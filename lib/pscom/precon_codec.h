/*
 * Encoding and decoding of pre-connection (precon) records.
 *
 * A record is a 12-byte header followed by a payload of TLV fields; all
 * integers little endian:
 *
 *   header:  u32 magic "PSCP" (0x50435350 read as little endian "PSCP")
 *            u8  protocol version (PSC_PRECON_VERSION)
 *            u8  record type (enum psc_precon_type)
 *            u16 flags (0; unknown bits are ignored)
 *            u32 payload length (at most the receiver's limit)
 *   field:   u16 tag, u16 length, `length` bytes of value
 *
 * Unknown tags are skipped (room for later fields, authentication and
 * plugin-specific records). Every field has a fixed or bounded length; a
 * field that runs past the payload, a known tag with a wrong length, or a
 * string with an embedded NUL makes the record malformed.
 *
 * Nothing here allocates: decoded strings and blobs point into the record.
 */
#ifndef PSC_PRECON_CODEC_H
#define PSC_PRECON_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define PSC_PRECON_MAGIC       0x50435350u /* bytes 'P' 'S' 'C' 'P' */
#define PSC_PRECON_VERSION     1
#define PSC_PRECON_HDR_LEN     12
#define PSC_PRECON_MAX_PAYLOAD 65536 /* default receive limit */
#define PSC_PRECON_MAX_PLUGINS 16
#define PSC_PRECON_NAME_LEN    8
#define PSC_PRECON_STR_MAX     255 /* hostname, boot id, plugin names, text */

enum psc_precon_type {
    PSC_PRECON_HELLO       = 1, /* identity; the acceptor adds its plugin list */
    PSC_PRECON_TRY         = 2, /* connector: use plugin P, here is my blob */
    PSC_PRECON_ACCEPT      = 3, /* acceptor: P is fine, here is my blob */
    PSC_PRECON_REJECT      = 4, /* acceptor: P failed here, try the next */
    PSC_PRECON_ESTABLISHED = 5, /* connector: P works, switch to it */
    PSC_PRECON_FAILED      = 6, /* connector: P failed here, will try the next */
    PSC_PRECON_ERROR       = 7, /* fatal: error code and text, then close */
    PSC_PRECON_BACKCONNECT = 8, /* on-demand: please connect to me */
    PSC_PRECON_TYPE_MAX    = 8,
};

enum psc_precon_tag {
    PSC_TAG_NAME        = 1,  /* 8 bytes, socket name (not NUL terminated) */
    PSC_TAG_RANK        = 2,  /* i32 */
    PSC_TAG_NODE_ID     = 3,  /* i32 */
    PSC_TAG_BOOT_ID     = 4,  /* string */
    PSC_TAG_HOSTNAME    = 5,  /* string */
    PSC_TAG_PID         = 6,  /* u32 */
    PSC_TAG_PLUGINS     = 7,  /* plugin names, each NUL terminated, in order */
    PSC_TAG_PLUGIN      = 8,  /* string: the plugin a TRY/ACCEPT/... is about */
    PSC_TAG_PLUGIN_DATA = 9,  /* blob for the plugin (at most 4096 bytes) */
    PSC_TAG_ERROR_CODE  = 10, /* i32 pscom_err_t */
    PSC_TAG_ERROR_TEXT  = 11, /* string */
    PSC_TAG_PORT        = 12, /* u32: the sender's listening port or 0 */
    PSC_TAG_CON_ID      = 13, /* u64: the sender's connection id */
    PSC_TAG_PEER_CON_ID = 14, /* u64: the receiver's connection id, if known */
    PSC_TAG_FLAGS       = 15, /* u32: PSC_PRECON_F_* */
};

#define PSC_PRECON_PLUGIN_DATA_MAX 4096

/* PSC_TAG_FLAGS bits. */
#define PSC_PRECON_F_ONDEMAND 0x1 /* the connector is an on-demand connection */

/* Errors of the decoder (negative). */
enum psc_precon_status {
    PSC_PRECON_OK         = 0,
    PSC_PRECON_E_MAGIC    = -1, /* not a precon record (wrong magic) */
    PSC_PRECON_E_VERSION  = -2, /* other protocol version */
    PSC_PRECON_E_TOOBIG   = -3, /* payload over the limit */
    PSC_PRECON_E_TYPE     = -4, /* unknown record type */
    PSC_PRECON_E_MALFORMED = -5, /* field overruns, wrong length, bad string */
    PSC_PRECON_E_SHORT    = -6, /* buffer too small (encoder) */
};

struct psc_precon_hdr {
    uint32_t magic;
    uint8_t version;
    uint8_t type;
    uint16_t flags;
    uint32_t len;
};

/* A decoded record. Fields not present have has_* = 0 / NULL / 0 count. */
struct psc_precon_msg {
    uint8_t type;
    int has_name, has_rank, has_node_id, has_pid, has_port, has_con_id,
        has_peer_con_id, has_flags, has_error_code;
    char name[PSC_PRECON_NAME_LEN];
    int32_t rank;
    int32_t node_id;
    uint32_t pid;
    uint32_t port;
    uint64_t con_id;
    uint64_t peer_con_id;
    uint32_t flags;
    int32_t error_code;
    const char *boot_id;  /* NUL terminated copies live in strbuf */
    const char *hostname;
    const char *plugin;
    const char *error_text;
    unsigned plugin_count;
    const char *plugins[PSC_PRECON_MAX_PLUGINS];
    const void *plugin_data;
    size_t plugin_data_len;
    /* storage for the NUL-terminated strings above */
    char strbuf[4 * (PSC_PRECON_STR_MAX + 1) +
                PSC_PRECON_MAX_PLUGINS * (PSC_PRECON_STR_MAX + 1)];
};

/* Decode a 12-byte header. Checks magic, then version, then type and that
 * len <= max_payload. On PSC_PRECON_E_VERSION, out->version holds the peer's
 * version. */
int psc_precon_hdr_decode(const void *buf, struct psc_precon_hdr *out,
                          uint32_t max_payload);

/* Decode a payload of type `type`. 0 or PSC_PRECON_E_MALFORMED. plugin_data
 * points into `payload`. More than PSC_PRECON_MAX_PLUGINS plugin names is
 * malformed. */
int psc_precon_msg_decode(uint8_t type, const void *payload, size_t len,
                          struct psc_precon_msg *out);

/* Encoder: start a record of `type` in buf (capacity cap). */
struct psc_precon_writer {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int overflow; /* set when a put did not fit; finish then fails */
};

void psc_precon_begin(struct psc_precon_writer *w, void *buf, size_t cap,
                      uint8_t type);
void psc_precon_put(struct psc_precon_writer *w, uint16_t tag,
                    const void *val, size_t len);
void psc_precon_put_u32(struct psc_precon_writer *w, uint16_t tag, uint32_t v);
void psc_precon_put_i32(struct psc_precon_writer *w, uint16_t tag, int32_t v);
void psc_precon_put_u64(struct psc_precon_writer *w, uint16_t tag, uint64_t v);
void psc_precon_put_str(struct psc_precon_writer *w, uint16_t tag,
                        const char *s); /* without the NUL */
/* Plugin names as one PSC_TAG_PLUGINS field. */
void psc_precon_put_plugins(struct psc_precon_writer *w,
                            const char *const *names, unsigned count);
/* Write the header; returns the record's total length, or
 * PSC_PRECON_E_SHORT when something did not fit. */
long psc_precon_finish(struct psc_precon_writer *w);

/* Name of a record type for log lines ("HELLO", "?" when unknown). */
const char *psc_precon_type_str(unsigned type);
/* Text of a decoder status. */
const char *psc_precon_status_str(int status);

#endif
