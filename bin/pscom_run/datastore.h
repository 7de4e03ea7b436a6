/*
 * pscom_run: the publish/lookup datastore of the launcher's PMIx host.
 *
 * A pure data structure: it knows PMIx ranges, persistence kinds and status
 * codes (from <pmix_common.h>, header only) but never calls the PMIx
 * library, so it can be unit-tested without a PMIx server.  Values are
 * opaque; the owner supplies how to copy and release them.
 *
 * Rules implemented (doc/pscom_run.md has the long form):
 * - Retrieval needs three things: the requester lies inside the range the
 *   publisher named, the publisher lies inside the range the requester
 *   searched, and the publisher's access lists admit the requester.
 * - A key may exist once per range instance: a second publish of a key on
 *   the same range reaching an overlapping set of processes is
 *   PMIX_ERR_DUPLICATE_KEY.  Publishing is all or nothing.
 * - Persistence: FIRST_READ items leave on their first successful read,
 *   PROC items when the publisher ends, APP items when the publisher's
 *   namespace has ended, INDEF and SESSION items when the store is
 *   destroyed (the launcher is the session); all leave on unpublish.
 * - A lookup that may wait (PMIX_WAIT) and is not yet satisfied is parked
 *   and completed by a later publish, by its deadline (PMIX_ERR_TIMEOUT) or
 *   by the end of its requester.  A publish looks only at the parked
 *   lookups that name one of its keys (an index by key), so many parked
 *   lookups do not slow down publishes of other keys.
 *
 * Not thread-safe: the caller serialises all calls.
 */
#ifndef PSR_DATASTORE_H
#define PSR_DATASTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pmix_common.h>

typedef struct psr_ds psr_ds_t;

/* How the store copies and releases the opaque values it holds. */
typedef struct psr_ds_value_ops {
    /* Return a deep copy of value for a lookup result, NULL when out of memory. */
    void *(*copy)(const void *value);
    /* Release a value the store owns (or a copy it made). */
    void (*release)(void *value);
} psr_ds_value_ops_t;

/* The process calling publish, lookup or unpublish, with its credentials. */
typedef struct psr_ds_client {
    pmix_proc_t proc;
    uint32_t uid;
    uint32_t gid;
} psr_ds_client_t;

/*
 * A range as given with a publish (who may read) or a lookup (whose data to
 * search).  custom lists the members of PMIX_RANGE_CUSTOM (rank
 * PMIX_RANK_WILDCARD admits a whole namespace); it is only read during the
 * call.
 */
typedef struct psr_ds_scope {
    pmix_data_range_t range;
    const pmix_proc_t *custom;
    size_t ncustom;
} psr_ds_scope_t;

/*
 * Access lists of a publish (PMIX_ACCESS_USERIDS / PMIX_ACCESS_GRPIDS).  A
 * list that is given is a requirement: the requester's id must be in it.
 * With no list given only the publisher's own uid and gid may read.
 */
typedef struct psr_ds_access {
    bool uids_given;
    const uint32_t *uids;
    size_t nuids;
    bool gids_given;
    const uint32_t *gids;
    size_t ngids;
} psr_ds_access_t;

/* One key/value pair of a publish.  value passes to the store on success. */
typedef struct psr_ds_kv {
    const char *key;
    void *value;
} psr_ds_kv_t;

/* One key found by a lookup; value is a copy owned by the result. */
typedef struct psr_ds_hit {
    char key[PMIX_MAX_KEYLEN + 1];
    pmix_proc_t publisher;
    void *value;
} psr_ds_hit_t;

/*
 * The answer to one lookup.  Results come back one at a time from
 * psr_ds_lookup, or as a list (linked by next) of parked lookups that some
 * other call completed.  The caller owns them: psr_ds_result_free, which
 * needs no store, so results may outlive the store that made them.
 */
typedef struct psr_ds_result {
    struct psr_ds_result *next;    /* list of completed lookups handed to the caller */
    pmix_status_t status;       /* PMIX_SUCCESS, PMIX_ERR_PARTIAL_SUCCESS, ..._NOT_FOUND, ... */
    void *cookie;            /* as given to psr_ds_lookup */
    psr_ds_hit_t *hits;
    size_t nhits;
    void (*release)(void *value);   /* the store's ops.release, for the hits' values */
} psr_ds_result_t;

/* A lookup's wait request: nwait 0 = answer at once; PSR_DS_WAIT_ALL = every key. */
#define PSR_DS_WAIT_ALL ((size_t)-1)

/* Create an empty store.  ops is copied.  NULL when out of memory. */
psr_ds_t *psr_ds_create(const psr_ds_value_ops_t *ops);

/*
 * Destroy the store and every value in it.  Parked lookups are completed
 * with status and returned through done_p (NULL: they are dropped).
 */
void psr_ds_destroy(psr_ds_t *ds, pmix_status_t status, psr_ds_result_t **done_p);

/*
 * Publish nkvs pairs for who.  scope->range PMIX_RANGE_UNDEF means the
 * PMIx default, PMIX_RANGE_SESSION; access may be NULL.  On success the
 * values belong to the store and parked lookups that the new data completes
 * are appended to *done_p.  On error nothing is stored and the values stay
 * with the caller:
 *   PMIX_ERR_DUPLICATE_KEY  a key exists on the same range instance (or twice in kvs)
 *   PMIX_ERR_BAD_PARAM      empty or over-long key, unknown persistence or range,
 *                           PMIX_RANGE_CUSTOM without members
 *   PMIX_ERR_NOMEM
 */
pmix_status_t psr_ds_publish(psr_ds_t *ds, const psr_ds_client_t *who,
                 const psr_ds_scope_t *scope, pmix_persistence_t persist,
                 const psr_ds_access_t *access,
                 const psr_ds_kv_t *kvs, size_t nkvs, double now,
                 psr_ds_result_t **done_p);

/*
 * Look up nkeys keys for who within search (NULL: the session).
 * nwait 0 answers at once; otherwise the lookup waits until nwait keys
 * (PSR_DS_WAIT_ALL: all of them) are found, at most until deadline
 * (0: no deadline).
 * Returns PMIX_SUCCESS with *res_p set when answered now: res->status is
 * PMIX_SUCCESS (all found), PMIX_ERR_PARTIAL_SUCCESS (some found),
 * PMIX_ERR_NO_PERMISSIONS (none found, but some exist that who may not
 * read) or PMIX_ERR_NOT_FOUND.  Returns PMIX_OPERATION_IN_PROGRESS when
 * parked: the store keeps cookie and hands it back in a later result.
 * PMIX_ERR_BAD_PARAM / PMIX_ERR_NOMEM: nothing answered, nothing parked.
 */
pmix_status_t psr_ds_lookup(psr_ds_t *ds, const psr_ds_client_t *who,
                const psr_ds_scope_t *search,
                const char *const keys[], size_t nkeys,
                size_t nwait, double deadline, void *cookie,
                psr_ds_result_t **res_p);

/*
 * Remove who's own items: the given keys (keys NULL: all of them), on
 * range only, or on any range when range is PMIX_RANGE_UNDEF.
 * PMIX_SUCCESS when something was removed or keys is NULL, else
 * PMIX_ERR_NOT_FOUND.
 */
pmix_status_t psr_ds_unpublish(psr_ds_t *ds, const psr_ds_client_t *who,
                   pmix_data_range_t range,
                   const char *const keys[], size_t nkeys);

/*
 * The process proc has ended: its PMIX_PERSIST_PROC items go, and its
 * parked lookups are completed with PMIX_ERR_LOST_CONNECTION (appended to
 * *done_p).
 */
void psr_ds_proc_ended(psr_ds_t *ds, const pmix_proc_t *proc, psr_ds_result_t **done_p);

/* Every process of namespace nspace has ended: its PMIX_PERSIST_APP items go. */
void psr_ds_app_ended(psr_ds_t *ds, const char *nspace);

/* Complete parked lookups whose deadline is <= now with PMIX_ERR_TIMEOUT. */
void psr_ds_expire(psr_ds_t *ds, double now, psr_ds_result_t **done_p);

/* The earliest deadline of a parked lookup, 0 when none has one. */
double psr_ds_next_deadline(const psr_ds_t *ds);

/* Number of stored items and of parked lookups (for tests and diagnostics). */
size_t psr_ds_count(const psr_ds_t *ds);
size_t psr_ds_parked(const psr_ds_t *ds);

/*
 * How many times publishes have checked whether a parked lookup is now
 * satisfied, since the store was created (for tests and diagnostics): a
 * publish checks only the lookups that wait for one of its keys.
 */
unsigned long psr_ds_rechecks(const psr_ds_t *ds);

/* Free a list of results and the values they hold (any thread, no store
 * needed; the cookies stay the caller's). */
void psr_ds_result_free(psr_ds_result_t *res);

/*
 * Does subject lie inside range as seen from anchor?  custom lists the
 * members of PMIX_RANGE_CUSTOM.  Exposed for tests.
 */
bool psr_ds_range_admits(pmix_data_range_t range, const pmix_proc_t *anchor,
             const pmix_proc_t *subject,
             const pmix_proc_t *custom, size_t ncustom);

#endif /* PSR_DATASTORE_H */
