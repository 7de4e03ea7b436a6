/*
 * libFuzzer harness for the packed remote key decoder (rkey_codec.c): the
 * input is a key as a peer might send it to pscom_rkey_generate.
 *
 * A key the decoder accepts is encoded again from its decoded entries; the
 * result must be byte for byte the input (the format has one encoding per
 * key), and every entry must lie inside the input. A disagreement aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "rkey_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact copy, so that reading one byte past it is caught. */
    uint8_t *in = malloc(size ? size : 1);
    if (!in) return 0;
    memcpy(in, data, size);

    struct psc_rkey_head h;
    const char *why;
    if (psc_rkey_decode(in, size, &h, &why)) {
        CHECK(why != NULL);
        free(in);
        return 0;
    }
    struct psc_rkey_entry e[PSC_RKEY_ENTRIES_MAX];
    unsigned n = 0;
    size_t off = 0;
    const uint8_t *pe = in + sizeof(h);
    while (psc_rkey_next(pe, h.plugin_len, &off, &e[n], &why) > 0) {
        CHECK(n < PSC_RKEY_ENTRIES_MAX);
        CHECK((const uint8_t *)e[n].data + e[n].data_len <= in + size);
        n++;
    }
    CHECK(off == h.plugin_len);
    CHECK(psc_rkey_size(e, n) == size);
    uint8_t *again = malloc(size);
    CHECK(again != NULL);
    CHECK(psc_rkey_encode(again, &h, e, n) == 0);
    CHECK(!memcmp(again, in, size));
    free(again);
    free(in);
    return 0;
}
