/*
 * Pre-connection record codec; the format is described in precon_codec.h
 * and doc/wire-protocol.md.
 *
 * Every byte handed to the decoder may come from an unauthenticated peer.
 * Integers are assembled from single bytes (no casts of the buffer, no
 * alignment needed), and a length read from the wire is always compared
 * with the bytes that are left before it is used. The writer keeps counting
 * the length a record would need after it ran out of room, but it never
 * stores a byte at or past `cap`.
 */
#include "precon_codec.h"

#include <limits.h>
#include <string.h>

#define FIELD_HDR_LEN 4

/* ---------------------------------------------------------------------- */
/* Little-endian helpers                                                  */
/* ---------------------------------------------------------------------- */

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void set16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void set32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void set64(uint8_t *p, uint64_t v)
{
    set32(p, (uint32_t)v);
    set32(p + 4, (uint32_t)(v >> 32));
}

/* ---------------------------------------------------------------------- */
/* Decoder                                                                */
/* ---------------------------------------------------------------------- */

int psc_precon_hdr_decode(const void *buf, struct psc_precon_hdr *out,
                          uint32_t max_payload)
{
    const uint8_t *p = buf;

    /* Fill in everything first so the caller can log what the peer sent,
     * whichever check fails. */
    out->magic = get32(p);
    out->version = p[4];
    out->type = p[5];
    out->flags = get16(p + 6);
    out->len = get32(p + 8);

    if (out->magic != PSC_PRECON_MAGIC) return PSC_PRECON_E_MAGIC;
    if (out->version != PSC_PRECON_VERSION) return PSC_PRECON_E_VERSION;
    if (out->type == 0 || out->type > PSC_PRECON_TYPE_MAX)
        return PSC_PRECON_E_TYPE;
    if (out->len > max_payload) return PSC_PRECON_E_TOOBIG;
    return PSC_PRECON_OK;
}

/* Decoding state of one payload. `used` counts the bytes of out->strbuf
 * handed out so far. */
struct dec {
    struct psc_precon_msg *out;
    size_t used;
};

/* Copy a string value (1..PSC_PRECON_STR_MAX bytes, no NUL) into strbuf. */
static int take_str(struct dec *d, const uint8_t *v, size_t n,
                    const char **dst)
{
    char *s;

    if (n < 1 || n > PSC_PRECON_STR_MAX) return PSC_PRECON_E_MALFORMED;
    if (memchr(v, 0, n)) return PSC_PRECON_E_MALFORMED;
    /* strbuf has room for the four single strings and the largest plugin
     * list, each tag at most once, so this only guards against a future
     * change of those limits. */
    if (sizeof(d->out->strbuf) - d->used < n + 1)
        return PSC_PRECON_E_MALFORMED;

    s = d->out->strbuf + d->used;
    memcpy(s, v, n);
    s[n] = '\0';
    /* Strings end up in messages: a peer's control characters (a newline,
     * a terminal escape) are shown as '?', not written into a log. */
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) s[i] = '?';
    d->used += n + 1;
    *dst = s;
    return PSC_PRECON_OK;
}

/* An empty value is an empty list: an acceptor that shares no plugin with
 * the connector says so with zero names. */
static int take_plugins(struct dec *d, const uint8_t *v, size_t n)
{
    struct psc_precon_msg *out = d->out;
    size_t i = 0;

    while (i < n) {
        const uint8_t *nul = memchr(v + i, 0, n - i);
        size_t nlen;
        int rc;

        if (!nul) return PSC_PRECON_E_MALFORMED; /* last name unterminated */
        nlen = (size_t)(nul - (v + i));
        if (out->plugin_count >= PSC_PRECON_MAX_PLUGINS)
            return PSC_PRECON_E_MALFORMED;
        rc = take_str(d, v + i, nlen, &out->plugins[out->plugin_count]);
        if (rc) return rc;
        out->plugin_count++;
        i += nlen + 1;
    }
    return PSC_PRECON_OK;
}

static int take_u32(const uint8_t *v, size_t n, uint32_t *dst, int *has)
{
    if (n != 4) return PSC_PRECON_E_MALFORMED;
    *dst = get32(v);
    *has = 1;
    return PSC_PRECON_OK;
}

static int take_i32(const uint8_t *v, size_t n, int32_t *dst, int *has)
{
    if (n != 4) return PSC_PRECON_E_MALFORMED;
    *dst = (int32_t)get32(v);
    *has = 1;
    return PSC_PRECON_OK;
}

static int take_u64(const uint8_t *v, size_t n, uint64_t *dst, int *has)
{
    if (n != 8) return PSC_PRECON_E_MALFORMED;
    *dst = get64(v);
    *has = 1;
    return PSC_PRECON_OK;
}

static int take_field(struct dec *d, uint16_t tag, const uint8_t *v,
                      size_t n)
{
    struct psc_precon_msg *out = d->out;

    switch (tag) {
    case PSC_TAG_NAME:
        if (n != PSC_PRECON_NAME_LEN) return PSC_PRECON_E_MALFORMED;
        memcpy(out->name, v, PSC_PRECON_NAME_LEN);
        out->has_name = 1;
        return PSC_PRECON_OK;
    case PSC_TAG_RANK:
        return take_i32(v, n, &out->rank, &out->has_rank);
    case PSC_TAG_NODE_ID:
        return take_i32(v, n, &out->node_id, &out->has_node_id);
    case PSC_TAG_BOOT_ID:
        return take_str(d, v, n, &out->boot_id);
    case PSC_TAG_HOSTNAME:
        return take_str(d, v, n, &out->hostname);
    case PSC_TAG_PID:
        return take_u32(v, n, &out->pid, &out->has_pid);
    case PSC_TAG_PLUGINS:
        return take_plugins(d, v, n);
    case PSC_TAG_PLUGIN:
        return take_str(d, v, n, &out->plugin);
    case PSC_TAG_PLUGIN_DATA:
        if (n > PSC_PRECON_PLUGIN_DATA_MAX) return PSC_PRECON_E_MALFORMED;
        out->plugin_data = v;
        out->plugin_data_len = n;
        return PSC_PRECON_OK;
    case PSC_TAG_ERROR_CODE:
        return take_i32(v, n, &out->error_code, &out->has_error_code);
    case PSC_TAG_ERROR_TEXT:
        return take_str(d, v, n, &out->error_text);
    case PSC_TAG_PORT:
        return take_u32(v, n, &out->port, &out->has_port);
    case PSC_TAG_CON_ID:
        return take_u64(v, n, &out->con_id, &out->has_con_id);
    case PSC_TAG_PEER_CON_ID:
        return take_u64(v, n, &out->peer_con_id, &out->has_peer_con_id);
    case PSC_TAG_FLAGS:
        return take_u32(v, n, &out->flags, &out->has_flags);
    default:
        return PSC_PRECON_OK; /* unknown: skipped */
    }
}

/* Known tags are 1..PSC_TAG_FLAGS; one bit each in the `seen` mask. */
#define KNOWN_TAG_MAX PSC_TAG_FLAGS

int psc_precon_msg_decode(uint8_t type, const void *payload, size_t len,
                          struct psc_precon_msg *out)
{
    const uint8_t *p = payload;
    struct dec d = {.out = out, .used = 0};
    uint32_t seen = 0;
    size_t off = 0;

    /* All has_* flags, counts and lengths become 0 and all pointers NULL. */
    memset(out, 0, sizeof(*out));
    out->type = type;

    /* Invariant: off <= len. */
    while (off < len) {
        uint16_t tag, flen;
        int rc;

        if (len - off < FIELD_HDR_LEN) return PSC_PRECON_E_MALFORMED;
        tag = get16(p + off);
        flen = get16(p + off + 2);
        off += FIELD_HDR_LEN;
        if (flen > len - off) return PSC_PRECON_E_MALFORMED;

        if (tag >= 1 && tag <= KNOWN_TAG_MAX) {
            uint32_t bit = UINT32_C(1) << tag;

            if (seen & bit) return PSC_PRECON_E_MALFORMED;
            seen |= bit;
        }
        rc = take_field(&d, tag, p + off, flen);
        if (rc) return rc;
        off += flen;
    }
    return PSC_PRECON_OK;
}

/* ---------------------------------------------------------------------- */
/* Writer                                                                 */
/* ---------------------------------------------------------------------- */

/* Count n more bytes; saturates instead of wrapping. */
static void grow(struct psc_precon_writer *w, size_t n)
{
    w->len = (SIZE_MAX - w->len < n) ? SIZE_MAX : w->len + n;
}

/* Does an n-byte write at w->len stay below w->cap? */
static int fits(const struct psc_precon_writer *w, size_t n)
{
    return !w->overflow && w->buf && w->len <= w->cap &&
           n <= w->cap - w->len;
}

/* Start a field of `n` value bytes. Returns where the value goes, or NULL
 * when it does not fit (the writer is then marked as overflowed). */
static uint8_t *field(struct psc_precon_writer *w, uint16_t tag, size_t n)
{
    uint8_t *v = NULL;

    if (n > UINT16_MAX) {
        w->overflow = 1;
        return NULL;
    }
    if (fits(w, FIELD_HDR_LEN + n)) {
        v = w->buf + w->len;
        set16(v, tag);
        set16(v + 2, (uint16_t)n);
        v += FIELD_HDR_LEN;
    } else {
        w->overflow = 1;
    }
    grow(w, FIELD_HDR_LEN + n);
    return v;
}

void psc_precon_begin(struct psc_precon_writer *w, void *buf, size_t cap,
                      uint8_t type)
{
    w->buf = buf;
    w->cap = cap;
    w->len = 0;
    w->overflow = 0;

    if (fits(w, PSC_PRECON_HDR_LEN)) {
        uint8_t *p = w->buf;

        set32(p, PSC_PRECON_MAGIC);
        p[4] = PSC_PRECON_VERSION;
        p[5] = type;
        set16(p + 6, 0);
        set32(p + 8, 0); /* payload length, filled in by finish */
    } else {
        w->overflow = 1;
    }
    grow(w, PSC_PRECON_HDR_LEN);
}

void psc_precon_put(struct psc_precon_writer *w, uint16_t tag,
                    const void *val, size_t len)
{
    uint8_t *v;

    if (len && !val) {
        w->overflow = 1;
        return;
    }
    v = field(w, tag, len);
    if (v && len) memcpy(v, val, len);
}

void psc_precon_put_u32(struct psc_precon_writer *w, uint16_t tag, uint32_t v)
{
    uint8_t *p = field(w, tag, 4);

    if (p) set32(p, v);
}

void psc_precon_put_i32(struct psc_precon_writer *w, uint16_t tag, int32_t v)
{
    psc_precon_put_u32(w, tag, (uint32_t)v);
}

void psc_precon_put_u64(struct psc_precon_writer *w, uint16_t tag, uint64_t v)
{
    uint8_t *p = field(w, tag, 8);

    if (p) set64(p, v);
}

/* A string the decoder would reject (empty or longer than
 * PSC_PRECON_STR_MAX) fails the record instead of reaching the peer. */
void psc_precon_put_str(struct psc_precon_writer *w, uint16_t tag,
                        const char *s)
{
    size_t n = s ? strlen(s) : 0;

    if (n < 1 || n > PSC_PRECON_STR_MAX) {
        w->overflow = 1;
        return;
    }
    psc_precon_put(w, tag, s, n);
}

void psc_precon_put_plugins(struct psc_precon_writer *w,
                            const char *const *names, unsigned count)
{
    size_t total = 0;
    uint8_t *v;

    if (count > PSC_PRECON_MAX_PLUGINS || (count && !names)) {
        w->overflow = 1;
        return;
    }
    for (unsigned i = 0; i < count; i++) {
        size_t n = names[i] ? strlen(names[i]) : 0;

        if (n < 1 || n > PSC_PRECON_STR_MAX) {
            w->overflow = 1;
            return;
        }
        total += n + 1;
    }

    v = field(w, PSC_TAG_PLUGINS, total);
    if (!v) return;
    for (unsigned i = 0; i < count; i++) {
        size_t n = strlen(names[i]) + 1;

        memcpy(v, names[i], n);
        v += n;
    }
}

long psc_precon_finish(struct psc_precon_writer *w)
{
    size_t payload;

    if (w->overflow || !w->buf || w->len > w->cap ||
        w->len < PSC_PRECON_HDR_LEN)
        return PSC_PRECON_E_SHORT;
    payload = w->len - PSC_PRECON_HDR_LEN;
    if (payload > UINT32_MAX || w->len > (size_t)LONG_MAX)
        return PSC_PRECON_E_SHORT;
    set32(w->buf + 8, (uint32_t)payload);
    return (long)w->len;
}

/* ---------------------------------------------------------------------- */
/* Names                                                                  */
/* ---------------------------------------------------------------------- */

const char *psc_precon_type_str(unsigned type)
{
    static const char *const names[PSC_PRECON_TYPE_MAX + 1] = {
        [PSC_PRECON_HELLO] = "HELLO",
        [PSC_PRECON_TRY] = "TRY",
        [PSC_PRECON_ACCEPT] = "ACCEPT",
        [PSC_PRECON_REJECT] = "REJECT",
        [PSC_PRECON_ESTABLISHED] = "ESTABLISHED",
        [PSC_PRECON_FAILED] = "FAILED",
        [PSC_PRECON_ERROR] = "ERROR",
        [PSC_PRECON_BACKCONNECT] = "BACKCONNECT",
    };

    if (type > PSC_PRECON_TYPE_MAX || !names[type]) return "?";
    return names[type];
}

const char *psc_precon_status_str(int status)
{
    switch (status) {
    case PSC_PRECON_OK:
        return "ok";
    case PSC_PRECON_E_MAGIC:
        return "wrong magic (not a pscom peer)";
    case PSC_PRECON_E_VERSION:
        return "unsupported pre-connection protocol version";
    case PSC_PRECON_E_TOOBIG:
        return "record larger than the receive limit";
    case PSC_PRECON_E_TYPE:
        return "unknown record type";
    case PSC_PRECON_E_MALFORMED:
        return "malformed record (field overruns the payload, wrong length, "
               "bad string or repeated field)";
    case PSC_PRECON_E_SHORT:
        return "record does not fit the buffer (or a value is over a limit)";
    default:
        return "unknown pre-connection status";
    }
}
