/*
 * pscom_run: the publish/lookup datastore.  See datastore.h for the rules.
 *
 * Items live in a singly linked list in publication order (newest last):
 * the store is small (what a job publishes by name), so a lookup scans it.
 * Parked lookups are in a list in arrival order and, for each of their
 * keys, among that key's waiters (a hash table of the keys that parked
 * lookups wait for).  A publish walks only the waiters of its own keys,
 * merged by arrival, so it still serves the longest-waiting lookup first
 * while lookups waiting for other keys cost it nothing: scanning every
 * parked lookup on every publish made 4000 publishes with 500 lookups
 * waiting take seconds of the PMIx progress thread.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "datastore.h"
/* The project's one intrusive list; header only (pscom_run does not link libpscom). */
#include "../../lib/pscom/list.h"

typedef struct ds_item {
    struct ds_item *next;           /* ds->items, publication order */
    char key[PMIX_MAX_KEYLEN + 1];
    void *value;
    pmix_proc_t publisher;
    uint32_t uid;
    uint32_t gid;
    pmix_data_range_t range;
    pmix_proc_t *custom;            /* members of PMIX_RANGE_CUSTOM */
    size_t ncustom;
    pmix_persistence_t persist;
    bool uids_given;
    uint32_t *uids;
    size_t nuids;
    bool gids_given;
    uint32_t *gids;
    size_t ngids;
    unsigned long seq;              /* publication order, newer is larger */
} ds_item_t;

typedef struct ds_waitkey ds_waitkey_t;

/* A parked lookup's place among the waiters of one of its keys. */
typedef struct ds_waiter {
    struct psc_list link;           /* wk->waiters, arrival order */
    ds_waitkey_t *wk;
    struct ds_parked *parked;
} ds_waiter_t;

typedef struct ds_parked {
    struct psc_list link;           /* ds->parked, arrival order */
    unsigned long seq;              /* arrival order, later is larger */
    psr_ds_client_t who;
    pmix_data_range_t range;
    pmix_proc_t *custom;
    size_t ncustom;
    char **keys;
    size_t nkeys;
    size_t nwait;                   /* keys that must be found, never 0 */
    double deadline;                /* 0: none */
    void *cookie;
    ds_waiter_t *waiters;           /* one per distinct key, nwaiters of them */
    size_t nwaiters;
} ds_parked_t;

/* A key that parked lookups wait for. */
struct ds_waitkey {
    struct ds_waitkey *next;        /* ds->waitkeys[bucket] chain */
    struct psc_list waiters;        /* ds_waiter_t.link, arrival order */
    bool pinned;                    /* a publish is walking its waiters: keep it */
    char key[PMIX_MAX_KEYLEN + 1];
};

struct psr_ds {
    psr_ds_value_ops_t ops;
    ds_item_t *items;
    struct psc_list parked;         /* ds_parked_t.link, arrival order */
    ds_waitkey_t **waitkeys;        /* hash table: nbuckets chains, a power of 2 (or none) */
    size_t nbuckets;
    size_t nwaitkeys;
    unsigned long next_seq;
    unsigned long next_parked_seq;
    unsigned long rechecks;         /* parked lookups checked by publishes */
};

/*
 * Exact comparisons.  PMIX_CHECK_NSPACE and PMIX_CHECK_PROCID treat an empty
 * namespace and PMIX_RANK_WILDCARD as matching anything, which is not what
 * a publisher's identity means.
 */
static bool same_ns(const char *a, const char *b)
{
    return strncmp(a, b, PMIX_MAX_NSLEN) == 0;
}

static bool same_proc(const pmix_proc_t *a, const pmix_proc_t *b)
{
    return same_ns(a->nspace, b->nspace) && a->rank == b->rank;
}

/* Is proc one of the members (rank PMIX_RANK_WILDCARD: a whole namespace)? */
static bool member(const pmix_proc_t *proc, const pmix_proc_t *members, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (same_ns(members[i].nspace, proc->nspace) &&
            (members[i].rank == PMIX_RANK_WILDCARD || members[i].rank == proc->rank))
            return true;
    }
    return false;
}

/* Outcome of searching one key for one requester. */
enum key_state { KEY_ABSENT, KEY_DENIED, KEY_FOUND };

bool psr_ds_range_admits(pmix_data_range_t range, const pmix_proc_t *anchor,
                         const pmix_proc_t *subject,
                         const pmix_proc_t *custom, size_t ncustom)
{
    switch (range) {
    case PMIX_RANGE_UNDEF:
    case PMIX_RANGE_SESSION:
    case PMIX_RANGE_GLOBAL:
    case PMIX_RANGE_LOCAL:
        /* One launcher is one session on one node. */
        return true;
    case PMIX_RANGE_NAMESPACE:
        return same_ns(anchor->nspace, subject->nspace);
    case PMIX_RANGE_PROC_LOCAL:
        return same_proc(anchor, subject);
    case PMIX_RANGE_CUSTOM:
        return member(subject, custom, ncustom);
    default:
        /* PMIX_RANGE_RM is the host's own; no client lies inside it. */
        return false;
    }
}

static bool valid_range(pmix_data_range_t range)
{
    return range <= PMIX_RANGE_PROC_LOCAL;
}

static bool valid_persist(pmix_persistence_t p)
{
    return p <= PMIX_PERSIST_SESSION;
}

static bool valid_key(const char *key)
{
    return key && key[0] && strlen(key) <= PMIX_MAX_KEYLEN;
}

/* Ranks that both custom lists admit, or both ranges reach: do they overlap? */
static bool custom_overlap(const pmix_proc_t *a, size_t na,
                           const pmix_proc_t *b, size_t nb)
{
    for (size_t i = 0; i < na; i++) {
        for (size_t j = 0; j < nb; j++) {
            if (!same_ns(a[i].nspace, b[j].nspace)) continue;
            if (a[i].rank == PMIX_RANK_WILDCARD ||
                b[j].rank == PMIX_RANK_WILDCARD || a[i].rank == b[j].rank)
                return true;
        }
    }
    return false;
}

/* Would an item published by pub on scope collide with existing item it? */
static bool same_range_instance(const ds_item_t *it, const pmix_proc_t *pub,
                                pmix_data_range_t range,
                                const pmix_proc_t *custom, size_t ncustom)
{
    if (it->range != range) return false;
    switch (range) {
    case PMIX_RANGE_NAMESPACE:
        return same_ns(it->publisher.nspace, pub->nspace);
    case PMIX_RANGE_PROC_LOCAL:
    case PMIX_RANGE_RM:
        return same_proc(&it->publisher, pub);
    case PMIX_RANGE_CUSTOM:
        return custom_overlap(it->custom, it->ncustom, custom, ncustom);
    default:
        return true;
    }
}

static bool id_in(uint32_t id, const uint32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static bool access_allows(const ds_item_t *it, const psr_ds_client_t *who)
{
    if (!it->uids_given && !it->gids_given)
        return who->uid == it->uid && who->gid == it->gid;
    if (it->uids_given && !id_in(who->uid, it->uids, it->nuids)) return false;
    if (it->gids_given && !id_in(who->gid, it->gids, it->ngids)) return false;
    return true;
}

/* A narrower range is the more specific answer when a key is visible twice. */
static int range_breadth(pmix_data_range_t r)
{
    switch (r) {
    case PMIX_RANGE_PROC_LOCAL: return 0;
    case PMIX_RANGE_CUSTOM: return 1;
    case PMIX_RANGE_NAMESPACE: return 2;
    case PMIX_RANGE_LOCAL: return 3;
    case PMIX_RANGE_SESSION: return 4;
    default: return 5;
    }
}

/* The item that answers key for who, or NULL; *state says why not. */
static ds_item_t *find_key(psr_ds_t *ds, const psr_ds_client_t *who,
                           pmix_data_range_t search_range,
                           const pmix_proc_t *search_custom, size_t nsearch_custom,
                           const char *key, enum key_state *state)
{
    ds_item_t *best = NULL;
    bool denied = false;

    for (ds_item_t *it = ds->items; it; it = it->next) {
        if (strcmp(it->key, key) != 0) continue;
        /* The requester must lie in the publisher's range ... */
        if (!psr_ds_range_admits(it->range, &it->publisher, &who->proc,
                                 it->custom, it->ncustom))
            continue;
        /* ... and the publisher in the range the requester searches. */
        if (!psr_ds_range_admits(search_range, &who->proc, &it->publisher,
                                 search_custom, nsearch_custom))
            continue;
        if (!access_allows(it, who)) {
            denied = true;
            continue;
        }
        if (!best || range_breadth(it->range) < range_breadth(best->range) ||
            (range_breadth(it->range) == range_breadth(best->range) &&
             it->seq > best->seq))
            best = it;
    }
    *state = best ? KEY_FOUND : denied ? KEY_DENIED : KEY_ABSENT;
    return best;
}

static void item_free(psr_ds_t *ds, ds_item_t *it)
{
    if (it->value) ds->ops.release(it->value);
    free(it->custom);
    free(it->uids);
    free(it->gids);
    free(it);
}

static void item_unlink(psr_ds_t *ds, ds_item_t *victim)
{
    for (ds_item_t **pp = &ds->items; *pp; pp = &(*pp)->next) {
        if (*pp == victim) {
            *pp = victim->next;
            return;
        }
    }
}

/* FNV-1a. */
static size_t key_hash(const char *key)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *key; key++) h = (h ^ (unsigned char)*key) * 1099511628211ULL;
    return (size_t)h;
}

/* Where key's record is or would be linked in; the table must exist. */
static ds_waitkey_t **waitkey_slot(psr_ds_t *ds, const char *key)
{
    ds_waitkey_t **pp = &ds->waitkeys[key_hash(key) & (ds->nbuckets - 1)];
    while (*pp && strcmp((*pp)->key, key) != 0) pp = &(*pp)->next;
    return pp;
}

static ds_waitkey_t *waitkey_find(psr_ds_t *ds, const char *key)
{
    return ds->nbuckets ? *waitkey_slot(ds, key) : NULL;
}

/* Double the table (16 chains at first); out of memory keeps the old one. */
static void waitkeys_grow(psr_ds_t *ds)
{
    size_t n = ds->nbuckets ? 2 * ds->nbuckets : 16;
    ds_waitkey_t **table = calloc(n, sizeof(*table));
    if (!table) return;
    for (size_t b = 0; b < ds->nbuckets; b++) {
        while (ds->waitkeys[b]) {
            ds_waitkey_t *wk = ds->waitkeys[b];
            ds->waitkeys[b] = wk->next;
            size_t to = key_hash(wk->key) & (n - 1);
            wk->next = table[to];
            table[to] = wk;
        }
    }
    free(ds->waitkeys);
    ds->waitkeys = table;
    ds->nbuckets = n;
}

/* The record of key (a valid key), made when there is none; NULL when out of memory. */
static ds_waitkey_t *waitkey_get(psr_ds_t *ds, const char *key)
{
    if (ds->nwaitkeys >= ds->nbuckets) waitkeys_grow(ds);
    if (!ds->nbuckets) return NULL;
    ds_waitkey_t **pp = waitkey_slot(ds, key);
    if (*pp) return *pp;
    ds_waitkey_t *wk = calloc(1, sizeof(*wk));
    if (!wk) return NULL;
    psc_list_init(&wk->waiters);
    strcpy(wk->key, key);
    *pp = wk;
    ds->nwaitkeys++;
    return wk;
}

/* Drop wk once nobody waits for its key, unless a publish is walking it. */
static void waitkey_put(psr_ds_t *ds, ds_waitkey_t *wk)
{
    if (wk->pinned || !psc_list_empty(&wk->waiters)) return;
    ds_waitkey_t **pp = waitkey_slot(ds, wk->key);
    *pp = wk->next;
    ds->nwaitkeys--;
    free(wk);
}

static void parked_unindex(psr_ds_t *ds, ds_parked_t *p)
{
    for (size_t i = 0; i < p->nwaiters; i++) {
        psc_list_del(&p->waiters[i].link);
        waitkey_put(ds, p->waiters[i].wk);
    }
    p->nwaiters = 0;
}

/* Put p among the waiters of each of its keys (once per key); -1 when out
 * of memory, and then among none. */
static int parked_index(psr_ds_t *ds, ds_parked_t *p)
{
    p->waiters = calloc(p->nkeys, sizeof(*p->waiters));
    if (!p->waiters) return -1;
    for (size_t k = 0; k < p->nkeys; k++) {
        bool again = false;
        for (size_t j = 0; j < k && !again; j++) again = strcmp(p->keys[j], p->keys[k]) == 0;
        if (again) continue;
        ds_waitkey_t *wk = waitkey_get(ds, p->keys[k]);
        if (!wk) {
            parked_unindex(ds, p);
            return -1;
        }
        ds_waiter_t *w = &p->waiters[p->nwaiters++];
        w->wk = wk;
        w->parked = p;
        psc_list_add_tail(&w->link, &wk->waiters);
    }
    return 0;
}

static void parked_free(ds_parked_t *p)
{
    for (size_t i = 0; i < p->nkeys; i++) free(p->keys[i]);
    free(p->keys);
    free(p->custom);
    free(p->waiters);
    free(p);
}

/* Take p out of the store and free it. */
static void parked_remove(psr_ds_t *ds, ds_parked_t *p)
{
    psc_list_del(&p->link);
    parked_unindex(ds, p);
    parked_free(p);
}

static void append_result(psr_ds_result_t **list_p, psr_ds_result_t *res)
{
    if (!list_p) return;
    while (*list_p) list_p = &(*list_p)->next;
    *list_p = res;
}

static psr_ds_result_t *result_new(psr_ds_t *ds, pmix_status_t status, void *cookie)
{
    psr_ds_result_t *res = calloc(1, sizeof(*res));
    if (!res) return NULL;
    res->status = status;
    res->cookie = cookie;
    res->release = ds->ops.release;
    return res;
}

/*
 * Count what a lookup would find now, without touching anything.
 * Returns the number of keys found; *denied_p whether any key exists that
 * who may not read.
 */
static size_t count_found(psr_ds_t *ds, const psr_ds_client_t *who,
                          pmix_data_range_t range, const pmix_proc_t *custom,
                          size_t ncustom, const char *const keys[], size_t nkeys,
                          bool *denied_p)
{
    size_t found = 0;
    bool denied = false;
    for (size_t k = 0; k < nkeys; k++) {
        enum key_state st;
        find_key(ds, who, range, custom, ncustom, keys[k], &st);
        if (st == KEY_FOUND) found++;
        else if (st == KEY_DENIED) denied = true;
    }
    *denied_p = denied;
    return found;
}

/*
 * Build the answer for a lookup and consume FIRST_READ items it returns.
 * Returns NULL only when out of memory.
 */
static psr_ds_result_t *answer(psr_ds_t *ds, const psr_ds_client_t *who,
                               pmix_data_range_t range, const pmix_proc_t *custom,
                               size_t ncustom, const char *const keys[], size_t nkeys,
                               void *cookie)
{
    psr_ds_result_t *res = result_new(ds, PMIX_SUCCESS, cookie);
    if (!res) return NULL;
    res->hits = calloc(nkeys ? nkeys : 1, sizeof(*res->hits));
    if (!res->hits) {
        free(res);
        return NULL;
    }

    bool denied = false;
    ds_item_t **consumed = calloc(nkeys ? nkeys : 1, sizeof(*consumed));
    size_t nconsumed = 0;
    if (!consumed) {
        free(res->hits);
        free(res);
        return NULL;
    }
    for (size_t k = 0; k < nkeys; k++) {
        enum key_state st;
        ds_item_t *it = find_key(ds, who, range, custom, ncustom, keys[k], &st);
        if (st == KEY_DENIED) denied = true;
        if (!it) continue;
        void *copy = ds->ops.copy(it->value);
        if (!copy) {
            psr_ds_result_free(res);
            free(consumed);
            return NULL;
        }
        psr_ds_hit_t *hit = &res->hits[res->nhits++];
        strcpy(hit->key, it->key);
        hit->publisher = it->publisher;
        hit->value = copy;
        if (it->persist == PMIX_PERSIST_FIRST_READ) {
            bool seen = false;
            for (size_t i = 0; i < nconsumed; i++) seen |= consumed[i] == it;
            if (!seen) consumed[nconsumed++] = it;
        }
    }
    for (size_t i = 0; i < nconsumed; i++) {
        item_unlink(ds, consumed[i]);
        item_free(ds, consumed[i]);
    }
    free(consumed);

    if (res->nhits == nkeys) res->status = PMIX_SUCCESS;
    else if (res->nhits > 0) res->status = PMIX_ERR_PARTIAL_SUCCESS;
    else if (denied) res->status = PMIX_ERR_NO_PERMISSIONS;
    else res->status = PMIX_ERR_NOT_FOUND;
    return res;
}

/* Answer p and take it out of the store if enough of its keys are there now. */
static void serve_one(psr_ds_t *ds, ds_parked_t *p, psr_ds_result_t **done_p)
{
    bool denied;
    ds->rechecks++;
    size_t found = count_found(ds, &p->who, p->range, p->custom, p->ncustom,
                               (const char *const *)p->keys, p->nkeys, &denied);
    if (found < p->nwait) return;
    psr_ds_result_t *res = answer(ds, &p->who, p->range, p->custom, p->ncustom,
                                  (const char *const *)p->keys, p->nkeys, p->cookie);
    /* Out of memory: it stays parked until a later publish of one of its
     * keys serves it, its deadline passes or its requester ends. */
    if (!res) return;
    parked_remove(ds, p);
    append_result(done_p, res);
}

/* A walk through the waiters of one key. */
typedef struct ds_cursor {
    ds_waitkey_t *wk;
    struct psc_list *pos;           /* the next waiter to look at */
} ds_cursor_t;

static ds_parked_t *cursor_parked(const ds_cursor_t *c)
{
    if (c->pos == &c->wk->waiters) return NULL;
    return psc_list_entry(c->pos, ds_waiter_t, link)->parked;
}

/*
 * Serve the parked lookups that wait for a key of the items from `first`
 * to the end of the list (those just published), the longest-waiting
 * first: the waiter lists of those keys, each in arrival order, merged.
 * cur has room for one cursor per item.
 */
static void serve_waiters(psr_ds_t *ds, ds_item_t *first, ds_cursor_t *cur,
                          psr_ds_result_t **done_p)
{
    size_t n = 0;
    for (ds_item_t *it = first; it; it = it->next) {
        ds_waitkey_t *wk = waitkey_find(ds, it->key);
        if (!wk) continue;
        wk->pinned = true;
        cur[n].wk = wk;
        cur[n++].pos = wk->waiters.next;
    }
    for (;;) {
        ds_parked_t *next = NULL;
        for (size_t i = 0; i < n; i++) {
            ds_parked_t *p = cursor_parked(&cur[i]);
            if (p && (!next || p->seq < next->seq)) next = p;
        }
        if (!next) break;
        /* Every walk steps past next before serving may free its waiters. */
        for (size_t i = 0; i < n; i++)
            if (cursor_parked(&cur[i]) == next) cur[i].pos = cur[i].pos->next;
        serve_one(ds, next, done_p);
    }
    for (size_t i = 0; i < n; i++) {
        cur[i].wk->pinned = false;
        waitkey_put(ds, cur[i].wk);
    }
}

psr_ds_t *psr_ds_create(const psr_ds_value_ops_t *ops)
{
    psr_ds_t *ds = calloc(1, sizeof(*ds));
    if (!ds) return NULL;
    ds->ops = *ops;
    ds->next_seq = 1;
    psc_list_init(&ds->parked);
    return ds;
}

static void complete_parked_if(psr_ds_t *ds, pmix_status_t status,
                               bool (*pick)(const ds_parked_t *, const void *),
                               const void *arg, psr_ds_result_t **done_p)
{
    struct psc_list *pos, *tmp;
    psc_list_for_each_safe(pos, tmp, &ds->parked) {
        ds_parked_t *p = psc_list_entry(pos, ds_parked_t, link);
        if (!pick(p, arg)) continue;
        if (done_p) {
            psr_ds_result_t *res = result_new(ds, status, p->cookie);
            /* Out of memory here loses the answer; the requester is gone
             * or timed out, so nothing better can be done. */
            if (res) append_result(done_p, res);
        }
        parked_remove(ds, p);
    }
}

static bool pick_all(const ds_parked_t *p, const void *arg)
{
    (void)p;
    (void)arg;
    return true;
}

void psr_ds_destroy(psr_ds_t *ds, pmix_status_t status, psr_ds_result_t **done_p)
{
    if (!ds) return;
    complete_parked_if(ds, status, pick_all, NULL, done_p);
    while (ds->items) {
        ds_item_t *it = ds->items;
        ds->items = it->next;
        item_free(ds, it);
    }
    free(ds->waitkeys);     /* its keys went with the last parked lookup */
    free(ds);
}

static void *dup_array(const void *src, size_t n, size_t size)
{
    if (n == 0) return NULL;
    void *p = malloc(n * size);
    if (p) memcpy(p, src, n * size);
    return p;
}

pmix_status_t psr_ds_publish(psr_ds_t *ds, const psr_ds_client_t *who,
                             const psr_ds_scope_t *scope, pmix_persistence_t persist,
                             const psr_ds_access_t *access,
                             const psr_ds_kv_t *kvs, size_t nkvs, double now,
                             psr_ds_result_t **done_p)
{
    (void)now;
    pmix_data_range_t range = scope ? scope->range : PMIX_RANGE_UNDEF;
    const pmix_proc_t *custom = scope ? scope->custom : NULL;
    size_t ncustom = scope ? scope->ncustom : 0;

    if (range == PMIX_RANGE_UNDEF) range = PMIX_RANGE_SESSION;
    if (!valid_range(range) || !valid_persist(persist) || nkvs == 0)
        return PMIX_ERR_BAD_PARAM;
    if (range == PMIX_RANGE_CUSTOM && (ncustom == 0 || !custom))
        return PMIX_ERR_BAD_PARAM;

    for (size_t i = 0; i < nkvs; i++) {
        if (!valid_key(kvs[i].key)) return PMIX_ERR_BAD_PARAM;
        for (size_t j = 0; j < i; j++)
            if (strcmp(kvs[i].key, kvs[j].key) == 0) return PMIX_ERR_DUPLICATE_KEY;
        for (ds_item_t *it = ds->items; it; it = it->next) {
            if (strcmp(it->key, kvs[i].key) == 0 &&
                same_range_instance(it, &who->proc, range, custom, ncustom))
                return PMIX_ERR_DUPLICATE_KEY;
        }
    }

    /* Build every item first so that a failure stores nothing. */
    ds_item_t *first = NULL, **tail = &first;
    ds_cursor_t *cur = malloc(nkvs * sizeof(*cur));
    if (!cur) return PMIX_ERR_NOMEM;
    for (size_t i = 0; i < nkvs; i++) {
        ds_item_t *it = calloc(1, sizeof(*it));
        if (!it) goto undo;
        *tail = it;
        tail = &it->next;
        strcpy(it->key, kvs[i].key);
        it->publisher = who->proc;
        it->uid = who->uid;
        it->gid = who->gid;
        it->range = range;
        it->persist = persist;
        if (range == PMIX_RANGE_CUSTOM) {
            it->custom = dup_array(custom, ncustom, sizeof(*custom));
            if (!it->custom) goto undo;
            it->ncustom = ncustom;
        }
        if (access && access->uids_given) {
            it->uids_given = true;
            it->nuids = access->nuids;
            it->uids = dup_array(access->uids, access->nuids, sizeof(uint32_t));
            if (access->nuids && !it->uids) goto undo;
        }
        if (access && access->gids_given) {
            it->gids_given = true;
            it->ngids = access->ngids;
            it->gids = dup_array(access->gids, access->ngids, sizeof(uint32_t));
            if (access->ngids && !it->gids) goto undo;
        }
    }

    /* Commit: take the values and append in order. */
    size_t i = 0;
    for (ds_item_t *it = first; it; it = it->next) {
        it->value = kvs[i++].value;
        it->seq = ds->next_seq++;
    }
    ds_item_t **end = &ds->items;
    while (*end) end = &(*end)->next;
    *end = first;

    serve_waiters(ds, first, cur, done_p);
    free(cur);
    return PMIX_SUCCESS;

undo:
    while (first) {
        ds_item_t *it = first;
        first = it->next;
        it->value = NULL;       /* still the caller's */
        item_free(ds, it);
    }
    free(cur);
    return PMIX_ERR_NOMEM;
}

pmix_status_t psr_ds_lookup(psr_ds_t *ds, const psr_ds_client_t *who,
                            const psr_ds_scope_t *search,
                            const char *const keys[], size_t nkeys,
                            size_t nwait, double deadline, void *cookie,
                            psr_ds_result_t **res_p)
{
    pmix_data_range_t range = search ? search->range : PMIX_RANGE_UNDEF;
    const pmix_proc_t *custom = search ? search->custom : NULL;
    size_t ncustom = search ? search->ncustom : 0;

    if (range == PMIX_RANGE_UNDEF) range = PMIX_RANGE_SESSION;
    if (!valid_range(range) || nkeys == 0 || !keys) return PMIX_ERR_BAD_PARAM;
    if (range == PMIX_RANGE_CUSTOM && (ncustom == 0 || !custom))
        return PMIX_ERR_BAD_PARAM;
    for (size_t k = 0; k < nkeys; k++)
        if (!valid_key(keys[k])) return PMIX_ERR_BAD_PARAM;

    size_t need = nwait == PSR_DS_WAIT_ALL || nwait > nkeys ? nkeys : nwait;
    if (need > 0) {
        bool denied;
        size_t found = count_found(ds, who, range, custom, ncustom, keys, nkeys,
                                   &denied);
        if (found < need) {
            ds_parked_t *p = calloc(1, sizeof(*p));
            if (!p) return PMIX_ERR_NOMEM;
            psc_list_init(&p->link);
            p->who = *who;
            p->range = range;
            p->nwait = need;
            p->deadline = deadline;
            p->cookie = cookie;
            p->keys = calloc(nkeys, sizeof(*p->keys));
            if (!p->keys) goto nomem;
            for (size_t k = 0; k < nkeys; k++) {
                p->keys[k] = strdup(keys[k]);
                if (!p->keys[k]) goto nomem;
                p->nkeys++;
            }
            if (range == PMIX_RANGE_CUSTOM) {
                p->custom = dup_array(custom, ncustom, sizeof(*custom));
                if (!p->custom) goto nomem;
                p->ncustom = ncustom;
            }
            p->seq = ds->next_parked_seq++;
            if (parked_index(ds, p) != 0) goto nomem;
            psc_list_add_tail(&p->link, &ds->parked);
            return PMIX_OPERATION_IN_PROGRESS;
        nomem:
            parked_free(p);
            return PMIX_ERR_NOMEM;
        }
    }

    psr_ds_result_t *res = answer(ds, who, range, custom, ncustom, keys, nkeys, cookie);
    if (!res) return PMIX_ERR_NOMEM;
    *res_p = res;
    return PMIX_SUCCESS;
}

pmix_status_t psr_ds_unpublish(psr_ds_t *ds, const psr_ds_client_t *who,
                               pmix_data_range_t range,
                               const char *const keys[], size_t nkeys)
{
    size_t removed = 0;
    ds_item_t **pp = &ds->items;
    while (*pp) {
        ds_item_t *it = *pp;
        bool match = same_proc(&it->publisher, &who->proc) &&
                     (range == PMIX_RANGE_UNDEF || it->range == range);
        if (match && keys) {
            match = false;
            for (size_t k = 0; k < nkeys && !match; k++)
                match = keys[k] && strcmp(keys[k], it->key) == 0;
        }
        if (!match) {
            pp = &it->next;
            continue;
        }
        *pp = it->next;
        item_free(ds, it);
        removed++;
    }
    return removed > 0 || !keys ? PMIX_SUCCESS : PMIX_ERR_NOT_FOUND;
}

static bool pick_requester(const ds_parked_t *p, const void *arg)
{
    return same_proc(&p->who.proc, (const pmix_proc_t *)arg);
}

void psr_ds_proc_ended(psr_ds_t *ds, const pmix_proc_t *proc, psr_ds_result_t **done_p)
{
    ds_item_t **pp = &ds->items;
    while (*pp) {
        ds_item_t *it = *pp;
        if (it->persist == PMIX_PERSIST_PROC && same_proc(&it->publisher, proc)) {
            *pp = it->next;
            item_free(ds, it);
        } else {
            pp = &it->next;
        }
    }
    complete_parked_if(ds, PMIX_ERR_LOST_CONNECTION, pick_requester, proc, done_p);
}

void psr_ds_app_ended(psr_ds_t *ds, const char *nspace)
{
    ds_item_t **pp = &ds->items;
    while (*pp) {
        ds_item_t *it = *pp;
        if (it->persist == PMIX_PERSIST_APP && same_ns(it->publisher.nspace, nspace)) {
            *pp = it->next;
            item_free(ds, it);
        } else {
            pp = &it->next;
        }
    }
}

static bool pick_expired(const ds_parked_t *p, const void *arg)
{
    double now = *(const double *)arg;
    return p->deadline > 0 && p->deadline <= now;
}

void psr_ds_expire(psr_ds_t *ds, double now, psr_ds_result_t **done_p)
{
    complete_parked_if(ds, PMIX_ERR_TIMEOUT, pick_expired, &now, done_p);
}

double psr_ds_next_deadline(const psr_ds_t *ds)
{
    double next = 0;
    struct psc_list *pos;
    psc_list_for_each(pos, &ds->parked) {
        const ds_parked_t *p = psc_list_entry(pos, ds_parked_t, link);
        if (p->deadline > 0 && (next == 0 || p->deadline < next)) next = p->deadline;
    }
    return next;
}

size_t psr_ds_count(const psr_ds_t *ds)
{
    size_t n = 0;
    for (const ds_item_t *it = ds->items; it; it = it->next) n++;
    return n;
}

size_t psr_ds_parked(const psr_ds_t *ds)
{
    return psc_list_count(&ds->parked);
}

unsigned long psr_ds_rechecks(const psr_ds_t *ds)
{
    return ds->rechecks;
}

void psr_ds_result_free(psr_ds_result_t *res)
{
    while (res) {
        psr_ds_result_t *next = res->next;
        for (size_t i = 0; i < res->nhits; i++)
            if (res->hits[i].value) res->release(res->hits[i].value);
        free(res->hits);
        free(res);
        res = next;
    }
}
