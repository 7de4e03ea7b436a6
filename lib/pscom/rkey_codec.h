/*
 * The packed remote key (pscom_rkey_buffer_pack): encoding and strict
 * decoding. A peer sends these bytes by any means; pscom_rkey_generate
 * decodes them, so everything here treats its input as untrusted.
 *
 *   head:   u32 magic, u16 version (PSC_RKEY_VERSION), u16 plugin_len,
 *           u64 region id, u64 addr, u64 len                  (32 bytes)
 *   then plugin_len bytes of plugin entries, each
 *           u8 name_len (1..PSC_RKEY_NAME_MAX), u8 0, u16 data_len
 *           (0..PSCOM_PLUGIN_RKEY_MAX), name_len bytes of plugin name
 *           (printable ASCII, no NUL), data_len bytes of the plugin's key
 *
 * Integers are in the host's byte order: both ends of a connection have the
 * same architecture. A buffer is valid only when it is exactly head +
 * plugin_len bytes, the entries cover plugin_len exactly, no name repeats
 * and there are at most PSC_RKEY_ENTRIES_MAX entries.
 *
 * Nothing here allocates; decoded entries point into the buffer.
 */
#ifndef PSC_RKEY_CODEC_H
#define PSC_RKEY_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define PSC_RKEY_MAGIC       0x70524b42u /* "BKRp" */
#define PSC_RKEY_VERSION     2           /* 1: no plugin entries */
#define PSC_RKEY_NAME_MAX    31
#define PSC_RKEY_ENTRIES_MAX 16
#define PSC_RKEY_ENTRY_HDR   4

struct psc_rkey_head {
    uint32_t magic;
    uint16_t version;
    uint16_t plugin_len; /* bytes of plugin entries behind the head */
    uint64_t memh_id;
    uint64_t addr;
    uint64_t len;
};

_Static_assert(sizeof(struct psc_rkey_head) == 32, "packed key head size");

/* One plugin entry; name and data point into a buffer (not NUL
 * terminated). */
struct psc_rkey_entry {
    const char *name;
    size_t name_len;
    const void *data;
    size_t data_len;
};

/* Bytes a key with these entries takes, or 0 when they cannot be packed
 * (a name or key too long, too many entries, more than 65535 bytes). */
size_t psc_rkey_size(const struct psc_rkey_entry *e, unsigned n);

/* Write the key into buf (psc_rkey_size bytes); head->magic, version and
 * plugin_len are filled in here. 0, or -1 when psc_rkey_size says 0. */
int psc_rkey_encode(void *buf, const struct psc_rkey_head *head,
                    const struct psc_rkey_entry *e, unsigned n);

/* Check a whole buffer and read its head. 0, or -1 with *why a static text
 * for the log line. */
int psc_rkey_decode(const void *buf, size_t len, struct psc_rkey_head *head,
                    const char **why);

/* Walk the entries of a decoded key: `entries` are the plugin_len bytes
 * behind the head, *off starts at 0. 1 with *e filled, 0 at the end, -1
 * when malformed (*why set; never for a buffer psc_rkey_decode accepted). */
int psc_rkey_next(const void *entries, size_t plugin_len, size_t *off,
                  struct psc_rkey_entry *e, const char **why);

/* The entry of plugin `name` in a decoded key's entries, or NULL. */
const struct psc_rkey_entry *psc_rkey_find(const void *entries,
                                           size_t plugin_len, const char *name,
                                           struct psc_rkey_entry *e);

#endif
