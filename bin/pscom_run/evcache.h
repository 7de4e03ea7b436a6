/*
 * pscom_run: the cache of the events the launcher sends (a process's
 * termination), so that processes that connect later still get them.
 *
 * A ring buffer of the last `capacity` events, oldest first; adding to a
 * full ring evicts the oldest.  For every event it knows which processes
 * it concerns (from its range, source and custom targets) and which of
 * them already have it, so that a process that turns up late receives each
 * cached event once, in order, and only events meant for its namespace.
 *
 * A pure data structure: PMIx types and constants from <pmix_common.h>
 * only, no calls into the PMIx library.  The payload (the event's info
 * array) is opaque and released with the function given at creation.
 * Not thread-safe: the caller serialises all calls.
 */
#ifndef PSR_EVCACHE_H
#define PSR_EVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pmix_common.h>

typedef struct psr_evc psr_evc_t;

/* One cached event.  Read-only for users; valid until the next add or destroy. */
typedef struct psr_evc_entry {
    uint64_t seq;               /* 1, 2, ... in order of arrival */
    pmix_status_t code;
    pmix_proc_t source;
    pmix_data_range_t range;
    pmix_proc_t *targets;       /* members of PMIX_RANGE_CUSTOM */
    size_t ntargets;
    void *payload;              /* owned by the cache */
    pmix_proc_t *delivered;     /* processes that have this event */
    size_t ndelivered;
    size_t delivered_cap;
} psr_evc_entry_t;

/* What psr_evc_add copies in.  targets is read during the call only. */
typedef struct psr_evc_event {
    pmix_status_t code;
    pmix_proc_t source;
    pmix_data_range_t range;
    const pmix_proc_t *targets;
    size_t ntargets;
    void *payload;              /* passes to the cache */
} psr_evc_event_t;

/*
 * Create a cache for capacity (>= 1) events.  release frees a payload (may
 * be NULL when payloads need no freeing).  NULL when out of memory.
 */
psr_evc_t *psr_evc_create(size_t capacity, void (*release)(void *payload));

/* Destroy the cache and every payload in it. */
void psr_evc_destroy(psr_evc_t *evc);

/*
 * Add an event; the payload belongs to the cache from now on, even on
 * failure.  A full ring drops its oldest event first; *evicted_p (may be
 * NULL) counts them.  Returns the event's sequence number, 0 when out of
 * memory.
 */
uint64_t psr_evc_add(psr_evc_t *evc, const psr_evc_event_t *ev, size_t *evicted_p);

/*
 * Does the entry concern proc?  PMIX_RANGE_NAMESPACE: the source's
 * namespace; PMIX_RANGE_CUSTOM: the targets (rank PMIX_RANK_WILDCARD is the
 * whole namespace); PMIX_RANGE_PROC_LOCAL and PMIX_RANGE_RM: nobody else;
 * local, session, global and undefined: everybody.  The source itself is
 * never concerned: it knows its own event.
 */
bool psr_evc_concerns(const psr_evc_entry_t *e, const pmix_proc_t *proc);

/*
 * Collect, oldest first, up to max entries that concern proc, whose code is
 * one of codes (ncodes 0: any code) and that proc does not have yet, and
 * record them as delivered to proc.  Returns how many were stored in out.
 */
size_t psr_evc_take(psr_evc_t *evc, const pmix_proc_t *proc,
                    const pmix_status_t *codes, size_t ncodes,
                    const psr_evc_entry_t **out, size_t max);

/* Record that proc has the event seq (delivered when it happened). */
void psr_evc_mark(psr_evc_t *evc, uint64_t seq, const pmix_proc_t *proc);

/* Has proc got event seq? (false also when seq is no longer cached) */
bool psr_evc_has(const psr_evc_t *evc, uint64_t seq, const pmix_proc_t *proc);

/* Events cached now, capacity, and the total evicted so far. */
size_t psr_evc_count(const psr_evc_t *evc);
size_t psr_evc_capacity(const psr_evc_t *evc);
uint64_t psr_evc_evicted(const psr_evc_t *evc);

/* The i-th cached event, oldest first (i < count), for iteration. */
const psr_evc_entry_t *psr_evc_at(const psr_evc_t *evc, size_t i);

#endif /* PSR_EVCACHE_H */
