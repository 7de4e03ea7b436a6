/*
 * The packed remote key: encoding and strict decoding (rkey_codec.h).
 */
#include <string.h>

#include "pscom_plugin.h"
#include "rkey_codec.h"

static size_t entry_size(const struct psc_rkey_entry *e)
{
    return PSC_RKEY_ENTRY_HDR + e->name_len + e->data_len;
}

static int name_ok(const char *name, size_t len)
{
    if (len < 1 || len > PSC_RKEY_NAME_MAX) return 0;
    for (size_t i = 0; i < len; i++)
        if (name[i] < 0x21 || name[i] > 0x7e) return 0;
    return 1;
}

size_t psc_rkey_size(const struct psc_rkey_entry *e, unsigned n)
{
    size_t plen = 0;
    if (n > PSC_RKEY_ENTRIES_MAX) return 0;
    for (unsigned i = 0; i < n; i++) {
        if (!name_ok(e[i].name, e[i].name_len) ||
            e[i].data_len > PSCOM_PLUGIN_RKEY_MAX)
            return 0;
        plen += entry_size(&e[i]);
    }
    if (plen > UINT16_MAX) return 0;
    return sizeof(struct psc_rkey_head) + plen;
}

int psc_rkey_encode(void *buf, const struct psc_rkey_head *head,
                    const struct psc_rkey_entry *e, unsigned n)
{
    size_t size = psc_rkey_size(e, n);
    if (!size) return -1;
    struct psc_rkey_head h = *head;
    h.magic = PSC_RKEY_MAGIC;
    h.version = PSC_RKEY_VERSION;
    h.plugin_len = (uint16_t)(size - sizeof(h));
    uint8_t *p = buf;
    memcpy(p, &h, sizeof(h));
    p += sizeof(h);
    for (unsigned i = 0; i < n; i++) {
        uint16_t dl = (uint16_t)e[i].data_len;
        p[0] = (uint8_t)e[i].name_len;
        p[1] = 0;
        memcpy(p + 2, &dl, sizeof(dl));
        memcpy(p + PSC_RKEY_ENTRY_HDR, e[i].name, e[i].name_len);
        if (dl) memcpy(p + PSC_RKEY_ENTRY_HDR + e[i].name_len, e[i].data, dl);
        p += entry_size(&e[i]);
    }
    return 0;
}

int psc_rkey_next(const void *entries, size_t plugin_len, size_t *off,
                  struct psc_rkey_entry *e, const char **why)
{
    const uint8_t *p = (const uint8_t *)entries + *off;
    size_t left = plugin_len - *off;
    uint16_t dl;

    if (!left) return 0;
    if (left < PSC_RKEY_ENTRY_HDR) {
        *why = "a plugin entry's header runs past the end";
        return -1;
    }
    memcpy(&dl, p + 2, sizeof(dl));
    if (p[1]) {
        *why = "a plugin entry's reserved byte is not 0";
        return -1;
    }
    if (p[0] < 1 || p[0] > PSC_RKEY_NAME_MAX) {
        *why = "a plugin name is empty or too long";
        return -1;
    }
    if (dl > PSCOM_PLUGIN_RKEY_MAX) {
        *why = "a plugin's key is longer than PSCOM_PLUGIN_RKEY_MAX";
        return -1;
    }
    if ((size_t)PSC_RKEY_ENTRY_HDR + p[0] + dl > left) {
        *why = "a plugin entry runs past the end";
        return -1;
    }
    e->name = (const char *)p + PSC_RKEY_ENTRY_HDR;
    e->name_len = p[0];
    e->data = p + PSC_RKEY_ENTRY_HDR + p[0];
    e->data_len = dl;
    if (!name_ok(e->name, e->name_len)) {
        *why = "a plugin name has characters other than printable ASCII";
        return -1;
    }
    *off += entry_size(e);
    return 1;
}

int psc_rkey_decode(const void *buf, size_t len, struct psc_rkey_head *head,
                    const char **why)
{
    struct psc_rkey_head h;
    struct psc_rkey_entry seen[PSC_RKEY_ENTRIES_MAX], e;
    unsigned n = 0;
    size_t off = 0;
    int rc;

    if (!buf || len < sizeof(h)) {
        *why = "shorter than a key's head";
        return -1;
    }
    memcpy(&h, buf, sizeof(h));
    if (h.magic != PSC_RKEY_MAGIC) {
        *why = "not a packed key (wrong magic)";
        return -1;
    }
    if (h.version != PSC_RKEY_VERSION) {
        *why = "a packed key of another library version";
        return -1;
    }
    if (len != sizeof(h) + h.plugin_len) {
        *why = "its length does not match the plugin length of its head";
        return -1;
    }
    const uint8_t *entries = (const uint8_t *)buf + sizeof(h);
    while ((rc = psc_rkey_next(entries, h.plugin_len, &off, &e, why)) > 0) {
        if (n == PSC_RKEY_ENTRIES_MAX) {
            *why = "more plugin entries than plugins can exist";
            return -1;
        }
        for (unsigned i = 0; i < n; i++) {
            if (seen[i].name_len == e.name_len &&
                !memcmp(seen[i].name, e.name, e.name_len)) {
                *why = "a plugin has two entries";
                return -1;
            }
        }
        seen[n++] = e;
    }
    if (rc < 0) return -1;
    *head = h;
    return 0;
}

const struct psc_rkey_entry *psc_rkey_find(const void *entries,
                                           size_t plugin_len, const char *name,
                                           struct psc_rkey_entry *e)
{
    size_t off = 0, nl = strlen(name);
    const char *why;
    while (psc_rkey_next(entries, plugin_len, &off, e, &why) > 0)
        if (e->name_len == nl && !memcmp(e->name, name, nl)) return e;
    return NULL;
}
