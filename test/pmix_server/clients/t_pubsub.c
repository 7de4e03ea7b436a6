/*
 * Publish/lookup across the two namespaces of one MPMD launch:
 *   pscom_run -n 2 t_pubsub 2 : -n 2 t_pubsub 2
 * Ranges (namespace, session, global, local, process-local, custom), the
 * requester's search range, duplicates, permissions, partial success,
 * unpublish, and the persistence kinds (first read, process, application,
 * indefinite, session).  A = app 0, B = app 1; "A0" is app 0's rank 0.
 * Prints "pubsub ok" from every process on success.
 */
#include "tclient.h"

#define NONE (-1)

typedef struct {
    const char *key;
    const char *value;
    int range;                  /* NONE: library default */
    int persist;                /* NONE: library default */
    const pmix_proc_t *custom;  /* PMIX_EVENT_CUSTOM_RANGE members */
    size_t ncustom;
    const uint32_t *uids;       /* PMIX_ACCESS_USERIDS */
    size_t nuids;
    const uint32_t *gids;       /* PMIX_ACCESS_GRPIDS */
    size_t ngids;
    const char *key2;           /* a second key in the same publish, or NULL */
} pub_t;

static pmix_status_t publish(const pub_t *p)
{
    pmix_info_t info[8];
    size_t n = 0;
    PMIX_INFO_LOAD(&info[n], p->key, p->value, PMIX_STRING);
    n++;
    if (p->key2) {
        PMIX_INFO_LOAD(&info[n], p->key2, p->value, PMIX_STRING);
        n++;
    }
    if (p->range != NONE) {
        pmix_data_range_t r = (pmix_data_range_t)p->range;
        PMIX_INFO_LOAD(&info[n], PMIX_RANGE, &r, PMIX_DATA_RANGE);
        n++;
    }
    if (p->persist != NONE) {
        pmix_persistence_t ps = (pmix_persistence_t)p->persist;
        PMIX_INFO_LOAD(&info[n], PMIX_PERSISTENCE, &ps, PMIX_PERSIST);
        n++;
    }
    if (p->ncustom) {
        pmix_data_array_t d = { .type = PMIX_PROC, .size = p->ncustom, .array = (void *)p->custom };
        PMIX_INFO_LOAD(&info[n], PMIX_EVENT_CUSTOM_RANGE, &d, PMIX_DATA_ARRAY);
        n++;
    }
    if (p->nuids) {
        pmix_data_array_t d = { .type = PMIX_UINT32, .size = p->nuids, .array = (void *)p->uids };
        PMIX_INFO_LOAD(&info[n], PMIX_ACCESS_USERIDS, &d, PMIX_DATA_ARRAY);
        n++;
    }
    if (p->ngids) {
        pmix_data_array_t d = { .type = PMIX_UINT32, .size = p->ngids, .array = (void *)p->gids };
        PMIX_INFO_LOAD(&info[n], PMIX_ACCESS_GRPIDS, &d, PMIX_DATA_ARRAY);
        n++;
    }
    pmix_status_t rc = PMIx_Publish(info, n);
    for (size_t i = 0; i < n; i++) PMIX_INFO_DESTRUCT(&info[i]);
    return rc;
}

#define PUB(want, ...)                                                         \
    do {                                                                       \
        pub_t p_ = { .range = NONE, .persist = NONE, __VA_ARGS__ };            \
        char what_[128];                                                       \
        snprintf(what_, sizeof(what_), "publish of %s", p_.key);               \
        T_STATUS(publish(&p_), (want), what_);                                 \
    } while (0)

/*
 * Look up one or two keys (key2 may be NULL) with an optional search range.
 * Checks the status and, on success, that key came from `from`.
 */
static void lookup(const char *key, const char *key2, int range, pmix_status_t want,
                   const pmix_proc_t *from)
{
    pmix_pdata_t pd[2];
    size_t n = key2 ? 2 : 1;
    PMIX_PDATA_CONSTRUCT(&pd[0]);
    PMIX_PDATA_CONSTRUCT(&pd[1]);
    PMIX_LOAD_KEY(pd[0].key, key);
    if (key2) PMIX_LOAD_KEY(pd[1].key, key2);
    pmix_info_t info;
    pmix_data_range_t r = (pmix_data_range_t)range;
    if (range != NONE) PMIX_INFO_LOAD(&info, PMIX_RANGE, &r, PMIX_DATA_RANGE);
    pmix_status_t rc = PMIx_Lookup(pd, n, range != NONE ? &info : NULL, range != NONE);
    char what[160];
    snprintf(what, sizeof(what), "lookup of %s%s%s (search range %s)", key, key2 ? "+" : "",
             key2 ? key2 : "", range == NONE ? "default" : PMIx_Data_range_string(r));
    T_STATUS(rc, want, what);
    if (rc == PMIX_SUCCESS && from) {
        T_CHECK(PMIX_CHECK_PROCID(&pd[0].proc, from) && pd[0].proc.rank == from->rank,
                "%s: published by %s:%u, expected %s:%u", what, pd[0].proc.nspace,
                pd[0].proc.rank, from->nspace, from->rank);
        T_CHECK(pd[0].value.type == PMIX_STRING, "%s: value of type %s", what,
                PMIx_Data_type_string(pd[0].value.type));
    }
    if (range != NONE) PMIX_INFO_DESTRUCT(&info);
    PMIX_PDATA_DESTRUCT(&pd[0]);
    PMIX_PDATA_DESTRUCT(&pd[1]);
}

static void unpublish(const char *key, int range, pmix_status_t want)
{
    char *keys[] = { (char *)key, NULL };
    pmix_info_t info;
    pmix_data_range_t r = (pmix_data_range_t)range;
    if (range != NONE) PMIX_INFO_LOAD(&info, PMIX_RANGE, &r, PMIX_DATA_RANGE);
    pmix_status_t rc = PMIx_Unpublish(keys, range != NONE ? &info : NULL, range != NONE);
    char what[128];
    snprintf(what, sizeof(what), "unpublish of %s", key);
    T_STATUS(rc, want, what);
    if (range != NONE) PMIX_INFO_DESTRUCT(&info);
}

/* Wait until a lookup of key gives want (data leaving with its owner). */
static void await_lookup(const char *key, pmix_status_t want, double limit_s)
{
    double t0 = t_now();
    for (;;) {
        pmix_pdata_t pd;
        PMIX_PDATA_CONSTRUCT(&pd);
        PMIX_LOAD_KEY(pd.key, key);
        pmix_status_t rc = PMIx_Lookup(&pd, 1, NULL, 0);
        PMIX_PDATA_DESTRUCT(&pd);
        if (rc == want) return;
        T_CHECK(t_now() - t0 < limit_s, "lookup of %s still gives %s after %.0f s, expected %s",
                key, PMIx_Error_string(rc), limit_s, PMIx_Error_string(want));
        usleep(50000);
    }
}

static void fence_ns(const char *ns)
{
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, ns, PMIX_RANK_WILDCARD);
    pmix_status_t rc = PMIx_Fence(&p, 1, NULL, 0);
    T_STATUS(rc, PMIX_SUCCESS, "fence within one app");
}

int main(int argc, char **argv)
{
    t_init(argc, argv, 60);
    T_CHECK(t_napps == 2, "run as: -n 2 t_pubsub 2 : -n 2 t_pubsub 2");
    t_exchange();
    T_CHECK(!PMIX_CHECK_NSPACE(t_ns[0], t_ns[1]), "the two apps share a namespace");
    pmix_proc_t A0 = t_proc(0, 0), A1 = t_proc(0, 1), B0 = t_proc(1, 0), B1 = t_proc(1, 1);
    uint32_t stranger = (uint32_t)getuid() + 4711, mygid = (uint32_t)getgid();

    /* Phase 1: A0 publishes on every range. */
    if (t_is(0, 0)) {
        PUB(PMIX_SUCCESS, .key = "k.ns", .value = "ns", .range = PMIX_RANGE_NAMESPACE);
        PUB(PMIX_SUCCESS, .key = "k.sess", .value = "sess", .range = PMIX_RANGE_SESSION);
        PUB(PMIX_SUCCESS, .key = "k.glob", .value = "glob", .range = PMIX_RANGE_GLOBAL);
        PUB(PMIX_SUCCESS, .key = "k.local", .value = "local", .range = PMIX_RANGE_LOCAL);
        PUB(PMIX_SUCCESS, .key = "k.self", .value = "self", .range = PMIX_RANGE_PROC_LOCAL);
        PUB(PMIX_SUCCESS, .key = "k.cust", .value = "cust", .range = PMIX_RANGE_CUSTOM,
            .custom = &B1, .ncustom = 1);
        PUB(PMIX_SUCCESS, .key = "k.defaults", .value = "defaults");
        PUB(PMIX_SUCCESS, .key = "k.dup", .value = "dup", .range = PMIX_RANGE_SESSION);
        PUB(PMIX_ERR_DUPLICATE_KEY, .key = "k.dup", .value = "again", .range = PMIX_RANGE_SESSION);
        /* All or nothing: k.new must not be stored beside the duplicate. */
        PUB(PMIX_ERR_DUPLICATE_KEY, .key = "k.new", .key2 = "k.sess", .value = "x",
            .range = PMIX_RANGE_SESSION);
        PUB(PMIX_SUCCESS, .key = "k.nsdup", .value = "nsdup", .range = PMIX_RANGE_NAMESPACE);
        PUB(PMIX_SUCCESS, .key = "k.perm.other", .value = "secret", .uids = &stranger, .nuids = 1);
        PUB(PMIX_SUCCESS, .key = "k.perm.grp", .value = "group", .gids = &mygid, .ngids = 1);
        PUB(PMIX_SUCCESS, .key = "k.first", .value = "first", .persist = PMIX_PERSIST_FIRST_READ);
        PUB(PMIX_SUCCESS, .key = "k.unpub", .value = "unpub", .range = PMIX_RANGE_GLOBAL);
    }
    t_fence_all();

    /* Phase 2: duplicates are per range instance. */
    if (t_is(1, 0)) {
        PUB(PMIX_ERR_DUPLICATE_KEY, .key = "k.dup", .value = "b", .range = PMIX_RANGE_SESSION);
        PUB(PMIX_SUCCESS, .key = "k.dup", .value = "b", .range = PMIX_RANGE_NAMESPACE);
        PUB(PMIX_SUCCESS, .key = "k.nsdup", .value = "b", .range = PMIX_RANGE_NAMESPACE);
        /* A custom range not overlapping A0's {B1}: no collision. */
        PUB(PMIX_SUCCESS, .key = "k.cust", .value = "b", .range = PMIX_RANGE_CUSTOM,
            .custom = &A1, .ncustom = 1);
    }
    if (t_is(0, 1))
        PUB(PMIX_ERR_DUPLICATE_KEY, .key = "k.nsdup", .value = "a1", .range = PMIX_RANGE_NAMESPACE);
    t_fence_all();

    /* Phase 3: who is served. */
    if (t_is(0, 0)) {
        lookup("k.self", NULL, NONE, PMIX_SUCCESS, &A0);
    }
    if (t_is(0, 1)) {
        lookup("k.ns", NULL, NONE, PMIX_SUCCESS, &A0);
        lookup("k.self", NULL, NONE, PMIX_ERR_NOT_FOUND, NULL);
        lookup("k.cust", NULL, NONE, PMIX_SUCCESS, &B0);        /* B0's, naming A1 */
        lookup("k.sess", NULL, PMIX_RANGE_NAMESPACE, PMIX_SUCCESS, &A0);
        lookup("k.nsdup", NULL, NONE, PMIX_SUCCESS, &A0);
    }
    if (t_is(1, 0)) {
        lookup("k.ns", NULL, NONE, PMIX_ERR_NOT_FOUND, NULL);
        lookup("k.sess", NULL, NONE, PMIX_SUCCESS, &A0);
        lookup("k.glob", NULL, NONE, PMIX_SUCCESS, &A0);
        lookup("k.local", NULL, NONE, PMIX_SUCCESS, &A0);
        lookup("k.defaults", NULL, NONE, PMIX_SUCCESS, &A0);
        lookup("k.self", NULL, NONE, PMIX_ERR_NOT_FOUND, NULL);
        lookup("k.cust", NULL, NONE, PMIX_ERR_NOT_FOUND, NULL);
        lookup("k.new", NULL, NONE, PMIX_ERR_NOT_FOUND, NULL);
        /* The requester's own range: A0 is outside B's namespace. */
        lookup("k.sess", NULL, PMIX_RANGE_NAMESPACE, PMIX_ERR_NOT_FOUND, NULL);
        lookup("k.sess", NULL, PMIX_RANGE_PROC_LOCAL, PMIX_ERR_NOT_FOUND, NULL);
        /* Two k.dup are visible; the narrower range (B0's own) answers. */
        lookup("k.dup", NULL, NONE, PMIX_SUCCESS, &B0);
        lookup("k.nsdup", NULL, NONE, PMIX_SUCCESS, &B0);
        /* Permissions, partial success. */
        lookup("k.perm.other", NULL, NONE, PMIX_ERR_NO_PERMISSIONS, NULL);
        lookup("k.perm.grp", NULL, NONE, PMIX_SUCCESS, &A0);
        lookup("k.perm.grp", "k.perm.other", NONE, PMIX_ERR_PARTIAL_SUCCESS, NULL);
        lookup("k.sess", "k.none", NONE, PMIX_ERR_PARTIAL_SUCCESS, NULL);
        lookup("k.perm.other", "k.none", NONE, PMIX_ERR_NO_PERMISSIONS, NULL);
        lookup("k.none", NULL, NONE, PMIX_ERR_NOT_FOUND, NULL);
        /* First read consumes it. */
        lookup("k.first", NULL, NONE, PMIX_SUCCESS, &A0);
    }
    if (t_is(1, 1)) {
        lookup("k.cust", NULL, NONE, PMIX_SUCCESS, &A0);
        lookup("k.ns", NULL, NONE, PMIX_ERR_NOT_FOUND, NULL);
    }
    t_fence_all();

    /* Phase 4: first read is gone; unpublish is the owner's. */
    if (t_is(1, 1)) lookup("k.first", NULL, NONE, PMIX_ERR_NOT_FOUND, NULL);
    if (t_is(0, 0)) {
        unpublish("k.unpub", NONE, PMIX_SUCCESS);
        unpublish("k.glob", PMIX_RANGE_NAMESPACE, PMIX_ERR_NOT_FOUND);
    }
    if (t_is(1, 0)) unpublish("k.sess", NONE, PMIX_ERR_NOT_FOUND);
    t_fence_all();

    if (t_is(1, 0)) {
        lookup("k.unpub", NULL, NONE, PMIX_ERR_NOT_FOUND, NULL);
        lookup("k.sess", NULL, NONE, PMIX_SUCCESS, &A0);
        lookup("k.glob", NULL, NONE, PMIX_SUCCESS, &A0);
    }

    /* Phase 5: persistence bound to the publisher and its app. */
    if (t_is(0, 1)) {
        PUB(PMIX_SUCCESS, .key = "k.p.proc", .value = "proc", .persist = PMIX_PERSIST_PROC);
        PUB(PMIX_SUCCESS, .key = "k.p.app", .value = "app", .persist = PMIX_PERSIST_APP);
        PUB(PMIX_SUCCESS, .key = "k.p.indef", .value = "indef", .persist = PMIX_PERSIST_INDEF);
        PUB(PMIX_SUCCESS, .key = "k.p.sess", .value = "sess", .persist = PMIX_PERSIST_SESSION);
    }
    t_fence_all();
    if (t_is(1, 0)) {
        lookup("k.p.proc", NULL, NONE, PMIX_SUCCESS, &A1);
        lookup("k.p.app", NULL, NONE, PMIX_SUCCESS, &A1);
    }
    t_fence_all();

    if (t_is(0, 1)) {
        /* Ends here: its PERSIST_PROC item must go. */
        printf("pubsub ok %u:%u\n", t_appnum, t_arank);
        t_finalize();
        return 0;
    }
    if (t_is(0, 0)) {
        /* Stay until B0 saw k.p.proc go while k.p.app stayed. */
        pmix_pdata_t pd;
        PMIX_PDATA_CONSTRUCT(&pd);
        PMIX_LOAD_KEY(pd.key, "b.ack.proc");
        pmix_info_t dir[2];
        bool yes = true;
        int timeout = 20;
        PMIX_INFO_LOAD(&dir[0], PMIX_WAIT, &yes, PMIX_BOOL);
        PMIX_INFO_LOAD(&dir[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
        T_STATUS(PMIx_Lookup(&pd, 1, dir, 2), PMIX_SUCCESS, "waiting for B0's ack");
        PMIX_PDATA_DESTRUCT(&pd);
        printf("pubsub ok %u:%u\n", t_appnum, t_arank);
        t_finalize();
        return 0;
    }
    if (t_is(1, 0)) {
        await_lookup("k.p.proc", PMIX_ERR_NOT_FOUND, 10);
        lookup("k.p.app", NULL, NONE, PMIX_SUCCESS, &A1);   /* A0 still runs */
        PUB(PMIX_SUCCESS, .key = "b.ack.proc", .value = "ack");
        await_lookup("k.p.app", PMIX_ERR_NOT_FOUND, 10);    /* app A has ended */
        lookup("k.p.indef", NULL, NONE, PMIX_SUCCESS, &A1);
        lookup("k.p.sess", NULL, NONE, PMIX_SUCCESS, &A1);
    }
    fence_ns(t_ns[1]);
    printf("pubsub ok %u:%u\n", t_appnum, t_arank);
    t_finalize();
    return 0;
}
