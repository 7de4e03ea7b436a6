/*
 * pscom_run: the cache of environment events, a ring of entries.
 */
#include <stdlib.h>
#include <string.h>

#include "evcache.h"

struct psr_evc {
    psr_evc_entry_t *ring;      /* capacity slots */
    size_t capacity;
    size_t head;                /* slot of the oldest entry */
    size_t count;
    uint64_t next_seq;
    uint64_t evicted;
    void (*release)(void *payload);
};

/* Exact comparisons (PMIX_CHECK_PROCID lets a wildcard rank match anything). */
static bool same_ns(const char *a, const char *b)
{
    return strncmp(a, b, PMIX_MAX_NSLEN) == 0;
}

static bool same_proc(const pmix_proc_t *a, const pmix_proc_t *b)
{
    return same_ns(a->nspace, b->nspace) && a->rank == b->rank;
}

static void entry_clear(psr_evc_t *evc, psr_evc_entry_t *e)
{
    if (e->payload && evc->release) evc->release(e->payload);
    free(e->targets);
    free(e->delivered);
    memset(e, 0, sizeof(*e));
}

psr_evc_t *psr_evc_create(size_t capacity, void (*release)(void *payload))
{
    if (capacity == 0) return NULL;
    psr_evc_t *evc = calloc(1, sizeof(*evc));
    if (!evc) return NULL;
    evc->ring = calloc(capacity, sizeof(*evc->ring));
    if (!evc->ring) {
        free(evc);
        return NULL;
    }
    evc->capacity = capacity;
    evc->next_seq = 1;
    evc->release = release;
    return evc;
}

void psr_evc_destroy(psr_evc_t *evc)
{
    if (!evc) return;
    for (size_t i = 0; i < evc->count; i++)
        entry_clear(evc, &evc->ring[(evc->head + i) % evc->capacity]);
    free(evc->ring);
    free(evc);
}

uint64_t psr_evc_add(psr_evc_t *evc, const psr_evc_event_t *ev, size_t *evicted_p)
{
    size_t evicted = 0;
    pmix_proc_t *targets = NULL;
    if (ev->ntargets) {
        targets = malloc(ev->ntargets * sizeof(*targets));
        if (!targets) {
            if (ev->payload && evc->release) evc->release(ev->payload);
            if (evicted_p) *evicted_p = 0;
            return 0;
        }
        memcpy(targets, ev->targets, ev->ntargets * sizeof(*targets));
    }
    if (evc->count == evc->capacity) {
        entry_clear(evc, &evc->ring[evc->head]);
        evc->head = (evc->head + 1) % evc->capacity;
        evc->count--;
        evc->evicted++;
        evicted++;
    }
    psr_evc_entry_t *e = &evc->ring[(evc->head + evc->count) % evc->capacity];
    e->seq = evc->next_seq++;
    e->code = ev->code;
    e->source = ev->source;
    e->range = ev->range;
    e->targets = targets;
    e->ntargets = ev->ntargets;
    e->payload = ev->payload;
    evc->count++;
    if (evicted_p) *evicted_p = evicted;
    return e->seq;
}

bool psr_evc_concerns(const psr_evc_entry_t *e, const pmix_proc_t *proc)
{
    if (same_proc(&e->source, proc)) return false;
    switch (e->range) {
    case PMIX_RANGE_NAMESPACE:
        return same_ns(e->source.nspace, proc->nspace);
    case PMIX_RANGE_CUSTOM:
        for (size_t i = 0; i < e->ntargets; i++) {
            if (same_ns(e->targets[i].nspace, proc->nspace) &&
                (e->targets[i].rank == PMIX_RANK_WILDCARD ||
                 e->targets[i].rank == proc->rank))
                return true;
        }
        return false;
    case PMIX_RANGE_PROC_LOCAL:
    case PMIX_RANGE_RM:
        return false;
    default:
        return true;
    }
}

static bool delivered_to(const psr_evc_entry_t *e, const pmix_proc_t *proc)
{
    for (size_t i = 0; i < e->ndelivered; i++)
        if (same_proc(&e->delivered[i], proc)) return true;
    return false;
}

/* Record delivery; out of memory only means a possible second delivery. */
static void mark_entry(psr_evc_entry_t *e, const pmix_proc_t *proc)
{
    if (delivered_to(e, proc)) return;
    if (e->ndelivered == e->delivered_cap) {
        size_t cap = e->delivered_cap ? 2 * e->delivered_cap : 4;
        pmix_proc_t *d = realloc(e->delivered, cap * sizeof(*d));
        if (!d) return;
        e->delivered = d;
        e->delivered_cap = cap;
    }
    e->delivered[e->ndelivered++] = *proc;
}

static bool code_wanted(pmix_status_t code, const pmix_status_t *codes, size_t ncodes)
{
    if (ncodes == 0) return true;
    for (size_t i = 0; i < ncodes; i++)
        if (codes[i] == code) return true;
    return false;
}

size_t psr_evc_take(psr_evc_t *evc, const pmix_proc_t *proc,
                    const pmix_status_t *codes, size_t ncodes,
                    const psr_evc_entry_t **out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < evc->count && n < max; i++) {
        psr_evc_entry_t *e = &evc->ring[(evc->head + i) % evc->capacity];
        if (!code_wanted(e->code, codes, ncodes)) continue;
        if (!psr_evc_concerns(e, proc) || delivered_to(e, proc)) continue;
        mark_entry(e, proc);
        out[n++] = e;
    }
    return n;
}

static psr_evc_entry_t *find_seq(const psr_evc_t *evc, uint64_t seq)
{
    if (evc->count == 0) return NULL;
    uint64_t oldest = evc->ring[evc->head].seq;
    if (seq < oldest || seq >= oldest + evc->count) return NULL;
    return &evc->ring[(evc->head + (seq - oldest)) % evc->capacity];
}

void psr_evc_mark(psr_evc_t *evc, uint64_t seq, const pmix_proc_t *proc)
{
    psr_evc_entry_t *e = find_seq(evc, seq);
    if (e) mark_entry(e, proc);
}

bool psr_evc_has(const psr_evc_t *evc, uint64_t seq, const pmix_proc_t *proc)
{
    const psr_evc_entry_t *e = find_seq(evc, seq);
    return e && delivered_to(e, proc);
}

size_t psr_evc_count(const psr_evc_t *evc)
{
    return evc->count;
}

size_t psr_evc_capacity(const psr_evc_t *evc)
{
    return evc->capacity;
}

uint64_t psr_evc_evicted(const psr_evc_t *evc)
{
    return evc->evicted;
}

const psr_evc_entry_t *psr_evc_at(const psr_evc_t *evc, size_t i)
{
    if (i >= evc->count) return NULL;
    return &evc->ring[(evc->head + i) % evc->capacity];
}
