/*
 * Unit tests of pscom_run's publish/lookup datastore (bin/pscom_run/datastore.c).
 * No PMIx library is running: values are plain strings.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "datastore.h"

/* Values are strdup'ed strings; `live` counts those not yet released. */
static int live;

static void *copy_str(const void *v)
{
    live++;
    return strdup(v);
}

static void release_str(void *v)
{
    live--;
    free(v);
}

static const psr_ds_value_ops_t ops = { .copy = copy_str, .release = release_str };

static void *val(const char *s)
{
    live++;
    return strdup(s);
}

static psr_ds_client_t client(const char *ns, pmix_rank_t rank)
{
    psr_ds_client_t c;
    memset(&c, 0, sizeof(c));
    PMIX_LOAD_PROCID(&c.proc, ns, rank);
    c.uid = 1000;
    c.gid = 100;
    return c;
}

static pmix_proc_t proc(const char *ns, pmix_rank_t rank)
{
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, ns, rank);
    return p;
}

static int setup(void **state)
{
    live = 0;
    *state = psr_ds_create(&ops);
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    psr_ds_result_t *done = NULL;
    psr_ds_destroy(*state, PMIX_ERR_LOST_CONNECTION, &done);
    while (done) {
        psr_ds_result_t *next = done->next;
        free(done->hits);
        free(done);
        done = next;
    }
    assert_int_equal(live, 0);      /* every value released */
    return 0;
}

/* Publish one key; returns the status, values stay with the caller on error. */
static pmix_status_t pub(psr_ds_t *ds, const psr_ds_client_t *who, const char *key,
                         const char *value, pmix_data_range_t range,
                         pmix_persistence_t persist, const pmix_proc_t *custom, size_t ncustom,
                         const psr_ds_access_t *access)
{
    psr_ds_kv_t kv = { .key = key, .value = val(value) };
    psr_ds_scope_t scope = { .range = range, .custom = custom, .ncustom = ncustom };
    psr_ds_result_t *done = NULL;
    pmix_status_t st = psr_ds_publish(ds, who, &scope, persist, access, &kv, 1, 0, &done);
    if (st != PMIX_SUCCESS) release_str(kv.value);
    assert_null(done);
    return st;
}

#define PUB(ds, who, key, range) \
    pub(ds, who, key, key, range, PMIX_PERSIST_SESSION, NULL, 0, NULL)

/* Look up keys at once; returns the status and, on success, the publisher of the first. */
static pmix_status_t look(psr_ds_t *ds, const psr_ds_client_t *who, pmix_data_range_t search,
                          const char *k1, const char *k2, pmix_proc_t *from, char *value,
                          size_t vlen)
{
    const char *keys[2] = { k1, k2 };
    psr_ds_scope_t scope = { .range = search };
    psr_ds_result_t *res = NULL;
    pmix_status_t st = psr_ds_lookup(ds, who, &scope, keys, k2 ? 2 : 1, 0, 0, NULL, &res);
    assert_int_equal(st, PMIX_SUCCESS);
    assert_non_null(res);
    st = res->status;
    if (res->nhits && from) *from = res->hits[0].publisher;
    if (res->nhits && value) snprintf(value, vlen, "%s", (char *)res->hits[0].value);
    psr_ds_result_free(res);
    return st;
}

#define LOOK(ds, who, key) look(ds, who, PMIX_RANGE_UNDEF, key, NULL, NULL, NULL, 0)

static void test_range_admits(void **state)
{
    (void)state;
    pmix_proc_t a0 = proc("A", 0), a1 = proc("A", 1), b0 = proc("B", 0);
    pmix_proc_t members[] = { proc("B", PMIX_RANK_WILDCARD), proc("A", 1) };

    for (pmix_data_range_t r = PMIX_RANGE_UNDEF; r <= PMIX_RANGE_PROC_LOCAL; r++) {
        bool self = psr_ds_range_admits(r, &a0, &a0, members, 2);
        bool same_ns = psr_ds_range_admits(r, &a0, &a1, members, 2);
        bool other_ns = psr_ds_range_admits(r, &a0, &b0, members, 2);
        switch (r) {
        case PMIX_RANGE_UNDEF:
        case PMIX_RANGE_LOCAL:
        case PMIX_RANGE_SESSION:
        case PMIX_RANGE_GLOBAL:
            assert_true(self && same_ns && other_ns);
            break;
        case PMIX_RANGE_NAMESPACE:
            assert_true(self && same_ns && !other_ns);
            break;
        case PMIX_RANGE_PROC_LOCAL:
            assert_true(self && !same_ns && !other_ns);
            break;
        case PMIX_RANGE_CUSTOM:
            assert_true(!self && same_ns && other_ns);
            break;
        case PMIX_RANGE_RM:
            assert_true(!self && !same_ns && !other_ns);
            break;
        }
    }
    /* An empty namespace is not a wildcard. */
    pmix_proc_t empty = proc("", 0);
    assert_false(psr_ds_range_admits(PMIX_RANGE_NAMESPACE, &a0, &empty, NULL, 0));
    assert_false(psr_ds_range_admits(PMIX_RANGE_PROC_LOCAL, &empty, &a0, NULL, 0));
}

static void test_ranges_serve(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), a1 = client("A", 1), b0 = client("B", 0),
                    b1 = client("B", 1);
    pmix_proc_t target = proc("B", 1);

    assert_int_equal(PUB(ds, &a0, "ns", PMIX_RANGE_NAMESPACE), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a0, "sess", PMIX_RANGE_SESSION), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a0, "glob", PMIX_RANGE_GLOBAL), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a0, "local", PMIX_RANGE_LOCAL), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a0, "self", PMIX_RANGE_PROC_LOCAL), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a0, "rm", PMIX_RANGE_RM), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a0, "cust", "c", PMIX_RANGE_CUSTOM, PMIX_PERSIST_SESSION,
                         &target, 1, NULL), PMIX_SUCCESS);

    pmix_proc_t from;
    assert_int_equal(look(ds, &a1, 0, "ns", NULL, &from, NULL, 0), PMIX_SUCCESS);
    assert_string_equal(from.nspace, "A");
    assert_int_equal(from.rank, 0);
    assert_int_equal(LOOK(ds, &b0, "ns"), PMIX_ERR_NOT_FOUND);
    assert_int_equal(LOOK(ds, &b0, "sess"), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &b0, "glob"), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &b0, "local"), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &a0, "self"), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &a1, "self"), PMIX_ERR_NOT_FOUND);
    assert_int_equal(LOOK(ds, &a0, "rm"), PMIX_ERR_NOT_FOUND);
    assert_int_equal(LOOK(ds, &b1, "cust"), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &b0, "cust"), PMIX_ERR_NOT_FOUND);
    assert_int_equal(LOOK(ds, &a0, "cust"), PMIX_ERR_NOT_FOUND);
}

static void test_search_range(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), a1 = client("A", 1), b0 = client("B", 0);
    assert_int_equal(PUB(ds, &a0, "k", PMIX_RANGE_SESSION), PMIX_SUCCESS);

    assert_int_equal(look(ds, &a1, PMIX_RANGE_NAMESPACE, "k", NULL, NULL, NULL, 0), PMIX_SUCCESS);
    assert_int_equal(look(ds, &b0, PMIX_RANGE_NAMESPACE, "k", NULL, NULL, NULL, 0),
                     PMIX_ERR_NOT_FOUND);
    assert_int_equal(look(ds, &a1, PMIX_RANGE_PROC_LOCAL, "k", NULL, NULL, NULL, 0),
                     PMIX_ERR_NOT_FOUND);
    assert_int_equal(look(ds, &a0, PMIX_RANGE_PROC_LOCAL, "k", NULL, NULL, NULL, 0),
                     PMIX_SUCCESS);

    /* A custom search range lists the publishers to consider. */
    pmix_proc_t only_b = proc("B", PMIX_RANK_WILDCARD), only_a0 = proc("A", 0);
    const char *keys[] = { "k" };
    psr_ds_result_t *res = NULL;
    psr_ds_scope_t s = { .range = PMIX_RANGE_CUSTOM, .custom = &only_b, .ncustom = 1 };
    assert_int_equal(psr_ds_lookup(ds, &b0, &s, keys, 1, 0, 0, NULL, &res), PMIX_SUCCESS);
    assert_int_equal(res->status, PMIX_ERR_NOT_FOUND);
    psr_ds_result_free(res);
    s.custom = &only_a0;
    assert_int_equal(psr_ds_lookup(ds, &b0, &s, keys, 1, 0, 0, NULL, &res), PMIX_SUCCESS);
    assert_int_equal(res->status, PMIX_SUCCESS);
    psr_ds_result_free(res);
}

static void test_duplicates(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), a1 = client("A", 1), b0 = client("B", 0);

    assert_int_equal(PUB(ds, &a0, "s", PMIX_RANGE_SESSION), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a0, "s", PMIX_RANGE_SESSION), PMIX_ERR_DUPLICATE_KEY);
    assert_int_equal(PUB(ds, &b0, "s", PMIX_RANGE_SESSION), PMIX_ERR_DUPLICATE_KEY);
    /* UNDEF is the default range, SESSION. */
    assert_int_equal(PUB(ds, &b0, "s", PMIX_RANGE_UNDEF), PMIX_ERR_DUPLICATE_KEY);
    /* Another range is another instance. */
    assert_int_equal(PUB(ds, &b0, "s", PMIX_RANGE_NAMESPACE), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a0, "s", PMIX_RANGE_GLOBAL), PMIX_SUCCESS);

    assert_int_equal(PUB(ds, &a0, "n", PMIX_RANGE_NAMESPACE), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a1, "n", PMIX_RANGE_NAMESPACE), PMIX_ERR_DUPLICATE_KEY);
    assert_int_equal(PUB(ds, &b0, "n", PMIX_RANGE_NAMESPACE), PMIX_SUCCESS);

    assert_int_equal(PUB(ds, &a0, "p", PMIX_RANGE_PROC_LOCAL), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a1, "p", PMIX_RANGE_PROC_LOCAL), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a1, "p", PMIX_RANGE_PROC_LOCAL), PMIX_ERR_DUPLICATE_KEY);

    /* Custom ranges collide when they share a member. */
    pmix_proc_t b_all = proc("B", PMIX_RANK_WILDCARD), b1 = proc("B", 1), a_1 = proc("A", 1);
    assert_int_equal(pub(ds, &a0, "c", "1", PMIX_RANGE_CUSTOM, 0, &b_all, 1, NULL), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a1, "c", "2", PMIX_RANGE_CUSTOM, 0, &b1, 1, NULL),
                     PMIX_ERR_DUPLICATE_KEY);
    assert_int_equal(pub(ds, &a1, "c", "3", PMIX_RANGE_CUSTOM, 0, &a_1, 1, NULL), PMIX_SUCCESS);
}

static void test_publish_all_or_nothing(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0);
    assert_int_equal(PUB(ds, &a0, "old", PMIX_RANGE_SESSION), PMIX_SUCCESS);
    size_t before = psr_ds_count(ds);

    psr_ds_kv_t kvs[] = { { "new", val("n") }, { "old", val("o") } };
    psr_ds_scope_t scope = { .range = PMIX_RANGE_SESSION };
    assert_int_equal(psr_ds_publish(ds, &a0, &scope, PMIX_PERSIST_SESSION, NULL, kvs, 2, 0, NULL),
                     PMIX_ERR_DUPLICATE_KEY);
    assert_int_equal(psr_ds_count(ds), before);
    /* The same key twice in one publish. */
    psr_ds_kv_t twice[] = { { "x", kvs[0].value }, { "x", kvs[1].value } };
    assert_int_equal(psr_ds_publish(ds, &a0, &scope, PMIX_PERSIST_SESSION, NULL, twice, 2, 0,
                                    NULL), PMIX_ERR_DUPLICATE_KEY);
    release_str(kvs[0].value);
    release_str(kvs[1].value);
    assert_int_equal(LOOK(ds, &a0, "new"), PMIX_ERR_NOT_FOUND);
}

static void test_bad_params(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0);
    char long_key[PMIX_MAX_KEYLEN + 2];
    memset(long_key, 'k', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';

    assert_int_equal(pub(ds, &a0, "c", "v", PMIX_RANGE_CUSTOM, 0, NULL, 0, NULL),
                     PMIX_ERR_BAD_PARAM);
    assert_int_equal(PUB(ds, &a0, "", PMIX_RANGE_SESSION), PMIX_ERR_BAD_PARAM);
    assert_int_equal(PUB(ds, &a0, long_key, PMIX_RANGE_SESSION), PMIX_ERR_BAD_PARAM);
    assert_int_equal(pub(ds, &a0, "k", "v", PMIX_RANGE_SESSION, 17, NULL, 0, NULL),
                     PMIX_ERR_BAD_PARAM);
    assert_int_equal(PUB(ds, &a0, "k", 42), PMIX_ERR_BAD_PARAM);
    assert_int_equal(psr_ds_count(ds), 0);

    const char *keys[] = { "k" };
    psr_ds_result_t *res = NULL;
    psr_ds_scope_t custom = { .range = PMIX_RANGE_CUSTOM };
    assert_int_equal(psr_ds_lookup(ds, &a0, &custom, keys, 1, 0, 0, NULL, &res),
                     PMIX_ERR_BAD_PARAM);
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 0, 0, 0, NULL, &res), PMIX_ERR_BAD_PARAM);
    assert_null(res);
}

static void test_permissions(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), b0 = client("B", 0), stranger = client("B", 1),
                    groupie = client("B", 2);
    stranger.uid = 2000;
    stranger.gid = 200;
    groupie.uid = 3000;             /* another user in the publisher's group */

    uint32_t uid_b = 2000, gid_pub = 100, uid_x = 4711;
    psr_ds_access_t to_uid = { .uids_given = true, .uids = &uid_b, .nuids = 1 };
    psr_ds_access_t to_gid = { .gids_given = true, .gids = &gid_pub, .ngids = 1 };
    psr_ds_access_t both = { .uids_given = true, .uids = &uid_x, .nuids = 1,
                             .gids_given = true, .gids = &gid_pub, .ngids = 1 };
    psr_ds_access_t nobody = { .uids_given = true };

    assert_int_equal(PUB(ds, &a0, "own", PMIX_RANGE_SESSION), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a0, "to.uid", "u", 0, 0, NULL, 0, &to_uid), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a0, "to.gid", "g", 0, 0, NULL, 0, &to_gid), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a0, "both", "b", 0, 0, NULL, 0, &both), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a0, "nobody", "x", 0, 0, NULL, 0, &nobody), PMIX_SUCCESS);

    /* No list: the publisher's uid and gid. */
    assert_int_equal(LOOK(ds, &b0, "own"), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &stranger, "own"), PMIX_ERR_NO_PERMISSIONS);
    assert_int_equal(LOOK(ds, &groupie, "own"), PMIX_ERR_NO_PERMISSIONS);
    /* A list replaces the default and is a requirement. */
    assert_int_equal(LOOK(ds, &stranger, "to.uid"), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &a0, "to.uid"), PMIX_ERR_NO_PERMISSIONS);
    assert_int_equal(LOOK(ds, &groupie, "to.gid"), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &stranger, "to.gid"), PMIX_ERR_NO_PERMISSIONS);
    assert_int_equal(LOOK(ds, &groupie, "both"), PMIX_ERR_NO_PERMISSIONS);
    assert_int_equal(LOOK(ds, &a0, "nobody"), PMIX_ERR_NO_PERMISSIONS);

    /* Out of range is "not found", not "no permission". */
    assert_int_equal(pub(ds, &a0, "ns.secret", "s", PMIX_RANGE_NAMESPACE, 0, NULL, 0, &to_uid),
                     PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &stranger, "ns.secret"), PMIX_ERR_NOT_FOUND);
}

static void test_lookup_status(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), b0 = client("B", 0);
    uint32_t uid_x = 4711;
    psr_ds_access_t other = { .uids_given = true, .uids = &uid_x, .nuids = 1 };
    assert_int_equal(PUB(ds, &a0, "yes", PMIX_RANGE_SESSION), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a0, "denied", "d", 0, 0, NULL, 0, &other), PMIX_SUCCESS);

    char value[32];
    assert_int_equal(look(ds, &b0, 0, "yes", NULL, NULL, value, sizeof(value)), PMIX_SUCCESS);
    assert_string_equal(value, "yes");
    assert_int_equal(look(ds, &b0, 0, "yes", "no", NULL, NULL, 0), PMIX_ERR_PARTIAL_SUCCESS);
    assert_int_equal(look(ds, &b0, 0, "yes", "denied", NULL, NULL, 0), PMIX_ERR_PARTIAL_SUCCESS);
    assert_int_equal(look(ds, &b0, 0, "no", "denied", NULL, NULL, 0), PMIX_ERR_NO_PERMISSIONS);
    assert_int_equal(look(ds, &b0, 0, "no", "never", NULL, NULL, 0), PMIX_ERR_NOT_FOUND);
}

static void test_narrowest_range_answers(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), b0 = client("B", 0), b1 = client("B", 1);
    assert_int_equal(pub(ds, &a0, "k", "session", PMIX_RANGE_SESSION, 0, NULL, 0, NULL),
                     PMIX_SUCCESS);
    assert_int_equal(pub(ds, &b0, "k", "ns", PMIX_RANGE_NAMESPACE, 0, NULL, 0, NULL),
                     PMIX_SUCCESS);
    assert_int_equal(pub(ds, &b0, "k", "mine", PMIX_RANGE_PROC_LOCAL, 0, NULL, 0, NULL),
                     PMIX_SUCCESS);
    char v[32];
    assert_int_equal(look(ds, &b0, 0, "k", NULL, NULL, v, sizeof(v)), PMIX_SUCCESS);
    assert_string_equal(v, "mine");
    assert_int_equal(look(ds, &b1, 0, "k", NULL, NULL, v, sizeof(v)), PMIX_SUCCESS);
    assert_string_equal(v, "ns");
    assert_int_equal(look(ds, &a0, 0, "k", NULL, NULL, v, sizeof(v)), PMIX_SUCCESS);
    assert_string_equal(v, "session");
}

static void test_persistence(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), a1 = client("A", 1), b0 = client("B", 0);
    uint32_t uid_x = 4711;
    psr_ds_access_t other = { .uids_given = true, .uids = &uid_x, .nuids = 1 };

    assert_int_equal(pub(ds, &a0, "first", "f", 0, PMIX_PERSIST_FIRST_READ, NULL, 0, NULL),
                     PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a0, "first.denied", "f", 0, PMIX_PERSIST_FIRST_READ, NULL, 0,
                         &other), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a1, "proc", "p", 0, PMIX_PERSIST_PROC, NULL, 0, NULL), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a1, "app", "a", 0, PMIX_PERSIST_APP, NULL, 0, NULL), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a1, "indef", "i", 0, PMIX_PERSIST_INDEF, NULL, 0, NULL), PMIX_SUCCESS);
    assert_int_equal(pub(ds, &a1, "sess", "s", 0, PMIX_PERSIST_SESSION, NULL, 0, NULL),
                     PMIX_SUCCESS);

    /* First read: a failed or denied read does not consume it. */
    assert_int_equal(LOOK(ds, &b0, "first.denied"), PMIX_ERR_NO_PERMISSIONS);
    assert_int_equal(look(ds, &b0, 0, "first", "first", NULL, NULL, 0), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &b0, "first"), PMIX_ERR_NOT_FOUND);

    psr_ds_result_t *done = NULL;
    pmix_proc_t p_a0 = proc("A", 0), p_a1 = proc("A", 1);
    psr_ds_proc_ended(ds, &p_a0, &done);   /* not the publisher */
    assert_int_equal(LOOK(ds, &b0, "proc"), PMIX_SUCCESS);
    psr_ds_proc_ended(ds, &p_a1, &done);
    assert_null(done);
    assert_int_equal(LOOK(ds, &b0, "proc"), PMIX_ERR_NOT_FOUND);
    assert_int_equal(LOOK(ds, &b0, "app"), PMIX_SUCCESS);
    psr_ds_app_ended(ds, "B");
    assert_int_equal(LOOK(ds, &b0, "app"), PMIX_SUCCESS);
    psr_ds_app_ended(ds, "A");
    assert_int_equal(LOOK(ds, &b0, "app"), PMIX_ERR_NOT_FOUND);
    assert_int_equal(LOOK(ds, &b0, "indef"), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &b0, "sess"), PMIX_SUCCESS);
}

static void test_unpublish(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), b0 = client("B", 0);
    assert_int_equal(PUB(ds, &a0, "x", PMIX_RANGE_SESSION), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a0, "y", PMIX_RANGE_NAMESPACE), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &a0, "z", PMIX_RANGE_GLOBAL), PMIX_SUCCESS);
    assert_int_equal(PUB(ds, &b0, "b", PMIX_RANGE_SESSION), PMIX_SUCCESS);

    const char *x[] = { "x" }, *y[] = { "y" };
    /* Not the owner. */
    assert_int_equal(psr_ds_unpublish(ds, &b0, PMIX_RANGE_UNDEF, x, 1), PMIX_ERR_NOT_FOUND);
    assert_int_equal(LOOK(ds, &b0, "x"), PMIX_SUCCESS);
    /* The owner, on the wrong range, then on any range. */
    assert_int_equal(psr_ds_unpublish(ds, &a0, PMIX_RANGE_SESSION, y, 1), PMIX_ERR_NOT_FOUND);
    assert_int_equal(psr_ds_unpublish(ds, &a0, PMIX_RANGE_NAMESPACE, y, 1), PMIX_SUCCESS);
    assert_int_equal(psr_ds_unpublish(ds, &a0, PMIX_RANGE_UNDEF, x, 1), PMIX_SUCCESS);
    assert_int_equal(LOOK(ds, &b0, "x"), PMIX_ERR_NOT_FOUND);
    /* No keys: everything the caller published. */
    assert_int_equal(psr_ds_unpublish(ds, &a0, PMIX_RANGE_UNDEF, NULL, 0), PMIX_SUCCESS);
    assert_int_equal(psr_ds_count(ds), 1);
    assert_int_equal(LOOK(ds, &a0, "b"), PMIX_SUCCESS);
}

/* Parked lookups. */
static void test_wait_for_publish(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), b0 = client("B", 0);
    const char *keys[] = { "later", "also" };
    psr_ds_result_t *res = NULL, *done = NULL;
    int cookie1, cookie2;

    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 2, PSR_DS_WAIT_ALL, 0, &cookie1, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    assert_null(res);
    /* Wait for one of two keys. */
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 2, 1, 0, &cookie2, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    assert_int_equal(psr_ds_parked(ds), 2);

    psr_ds_kv_t kv = { "later", val("1") };
    psr_ds_scope_t scope = { .range = PMIX_RANGE_SESSION };
    assert_int_equal(psr_ds_publish(ds, &b0, &scope, PMIX_PERSIST_SESSION, NULL, &kv, 1, 0, &done),
                     PMIX_SUCCESS);
    assert_non_null(done);
    assert_ptr_equal(done->cookie, &cookie2);
    assert_int_equal(done->status, PMIX_ERR_PARTIAL_SUCCESS);
    assert_int_equal(done->nhits, 1);
    assert_string_equal(done->hits[0].key, "later");
    assert_null(done->next);
    psr_ds_result_free(done);
    done = NULL;

    kv.key = "also";
    kv.value = val("2");
    assert_int_equal(psr_ds_publish(ds, &b0, &scope, PMIX_PERSIST_SESSION, NULL, &kv, 1, 0, &done),
                     PMIX_SUCCESS);
    assert_non_null(done);
    assert_ptr_equal(done->cookie, &cookie1);
    assert_int_equal(done->status, PMIX_SUCCESS);
    assert_int_equal(done->nhits, 2);
    assert_string_equal((char *)done->hits[1].value, "2");
    psr_ds_result_free(done);
    assert_int_equal(psr_ds_parked(ds), 0);

    /* Already there: answered at once even with a wait. */
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 2, PSR_DS_WAIT_ALL, 0, NULL, &res),
                     PMIX_SUCCESS);
    assert_int_equal(res->status, PMIX_SUCCESS);
    psr_ds_result_free(res);
}

static void test_wait_respects_range(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), b0 = client("B", 0);
    const char *keys[] = { "k" };
    psr_ds_result_t *res = NULL, *done = NULL;
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 1, PSR_DS_WAIT_ALL, 0, NULL, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    /* B0 publishes k for its namespace only: not for A0. */
    psr_ds_kv_t kv = { "k", val("b") };
    psr_ds_scope_t scope = { .range = PMIX_RANGE_NAMESPACE };
    assert_int_equal(psr_ds_publish(ds, &b0, &scope, PMIX_PERSIST_SESSION, NULL, &kv, 1, 0, &done),
                     PMIX_SUCCESS);
    assert_null(done);
    assert_int_equal(psr_ds_parked(ds), 1);
}

static void test_wait_first_read_goes_to_oldest(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), a1 = client("A", 1), b0 = client("B", 0);
    const char *keys[] = { "once" };
    psr_ds_result_t *res = NULL, *done = NULL;
    int first, second;
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 1, PSR_DS_WAIT_ALL, 0, &first, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    assert_int_equal(psr_ds_lookup(ds, &a1, NULL, keys, 1, PSR_DS_WAIT_ALL, 0, &second, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    psr_ds_kv_t kv = { "once", val("1") };
    psr_ds_scope_t scope = { .range = PMIX_RANGE_SESSION };
    assert_int_equal(psr_ds_publish(ds, &b0, &scope, PMIX_PERSIST_FIRST_READ, NULL, &kv, 1, 0,
                                    &done), PMIX_SUCCESS);
    assert_non_null(done);
    assert_ptr_equal(done->cookie, &first);
    assert_null(done->next);
    psr_ds_result_free(done);
    assert_int_equal(psr_ds_count(ds), 0);
    assert_int_equal(psr_ds_parked(ds), 1);
}

static void test_wait_timeout(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0);
    const char *keys[] = { "never" };
    psr_ds_result_t *res = NULL, *done = NULL;
    int c1, c2, c3;

    assert_true(psr_ds_next_deadline(ds) == 0);
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 1, PSR_DS_WAIT_ALL, 20.0, &c1, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 1, PSR_DS_WAIT_ALL, 10.0, &c2, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 1, PSR_DS_WAIT_ALL, 0, &c3, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    assert_true(psr_ds_next_deadline(ds) == 10.0);

    psr_ds_expire(ds, 9.99, &done);
    assert_null(done);
    psr_ds_expire(ds, 10.0, &done);
    assert_non_null(done);
    assert_ptr_equal(done->cookie, &c2);
    assert_int_equal(done->status, PMIX_ERR_TIMEOUT);
    assert_int_equal(done->nhits, 0);
    psr_ds_result_free(done);
    done = NULL;
    assert_true(psr_ds_next_deadline(ds) == 20.0);
    psr_ds_expire(ds, 1e9, &done);
    assert_ptr_equal(done->cookie, &c1);
    psr_ds_result_free(done);
    /* No deadline: waits until its requester ends. */
    assert_int_equal(psr_ds_parked(ds), 1);
    assert_true(psr_ds_next_deadline(ds) == 0);
}

static void test_wait_requester_ends(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), a1 = client("A", 1);
    const char *keys[] = { "never" };
    psr_ds_result_t *res = NULL, *done = NULL;
    int c0, c1;
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 1, 1, 0, &c0, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    assert_int_equal(psr_ds_lookup(ds, &a1, NULL, keys, 1, 1, 0, &c1, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    psr_ds_proc_ended(ds, &a1.proc, &done);
    assert_non_null(done);
    assert_ptr_equal(done->cookie, &c1);
    assert_int_equal(done->status, PMIX_ERR_LOST_CONNECTION);
    assert_null(done->next);
    psr_ds_result_free(done);
    assert_int_equal(psr_ds_parked(ds), 1);
}

static void test_destroy_completes_parked(void **state)
{
    (void)state;
    live = 0;
    psr_ds_t *ds = psr_ds_create(&ops);
    psr_ds_client_t a0 = client("A", 0);
    const char *keys[] = { "never" };
    psr_ds_result_t *res = NULL, *done = NULL;
    int c;
    assert_int_equal(PUB(ds, &a0, "kept", PMIX_RANGE_SESSION), PMIX_SUCCESS);
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 1, 1, 0, &c, &res),
                     PMIX_OPERATION_IN_PROGRESS);
    psr_ds_destroy(ds, PMIX_ERR_UNREACH, &done);
    assert_non_null(done);
    assert_ptr_equal(done->cookie, &c);
    assert_int_equal(done->status, PMIX_ERR_UNREACH);
    free(done->hits);
    free(done);
    assert_int_equal(live, 0);
}

/* Park a lookup by who that waits for all of keys. */
static void park(psr_ds_t *ds, const psr_ds_client_t *who, const char *const keys[],
                 size_t nkeys, void *cookie)
{
    psr_ds_result_t *res = NULL;
    assert_int_equal(psr_ds_lookup(ds, who, NULL, keys, nkeys, PSR_DS_WAIT_ALL, 0, cookie,
                                   &res), PMIX_OPERATION_IN_PROGRESS);
    assert_null(res);
}

/*
 * A publish checks only the parked lookups that wait for one of its keys:
 * with every parked lookup checked on every publish, 4000 publishes with
 * 500 lookups waiting took 19 s of the PMIx progress thread.
 */
static void test_publish_checks_only_its_waiters(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), b0 = client("B", 0);
    psr_ds_result_t *done = NULL;
    enum { NPARKED = 200 };
    int cookies[NPARKED];
    char key[32];

    for (int i = 0; i < NPARKED; i++) {
        snprintf(key, sizeof(key), "wanted%d", i);
        const char *keys[] = { key };
        park(ds, &a0, keys, 1, &cookies[i]);
    }
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "other%d", i);
        assert_int_equal(PUB(ds, &b0, key, PMIX_RANGE_SESSION), PMIX_SUCCESS);
    }
    assert_int_equal(psr_ds_rechecks(ds), 0);
    assert_int_equal(psr_ds_parked(ds), NPARKED);

    psr_ds_kv_t kv = { "wanted7", val("7") };
    psr_ds_scope_t scope = { .range = PMIX_RANGE_SESSION };
    assert_int_equal(psr_ds_publish(ds, &b0, &scope, PMIX_PERSIST_SESSION, NULL, &kv, 1, 0,
                                    &done), PMIX_SUCCESS);
    assert_int_equal(psr_ds_rechecks(ds), 1);
    assert_non_null(done);
    assert_ptr_equal(done->cookie, &cookies[7]);
    assert_int_equal(done->status, PMIX_SUCCESS);
    assert_null(done->next);
    psr_ds_result_free(done);
    assert_int_equal(psr_ds_parked(ds), NPARKED - 1);

    /* A lookup that ended otherwise is no longer among the waiters. */
    psr_ds_proc_ended(ds, &a0.proc, NULL);
    assert_int_equal(psr_ds_parked(ds), 0);
    assert_int_equal(PUB(ds, &b0, "wanted8", PMIX_RANGE_SESSION), PMIX_SUCCESS);
    assert_int_equal(psr_ds_rechecks(ds), 1);
}

/* The waiters of several published keys are served in arrival order, each
 * once, also when it waits for more than one of them. */
static void test_publish_serves_waiters_in_arrival_order(void **state)
{
    psr_ds_t *ds = *state;
    psr_ds_client_t a0 = client("A", 0), a1 = client("A", 1), b0 = client("B", 0);
    psr_ds_result_t *done = NULL;
    const char *k_b[] = { "b" }, *k_a[] = { "a" }, *k_ab[] = { "a", "b", "a" };
    const char *k_c[] = { "c" };
    int c1, c2, c3, c4, c5;

    park(ds, &a0, k_b, 1, &c1);
    park(ds, &a1, k_c, 1, &c2);
    park(ds, &a0, k_a, 1, &c3);
    park(ds, &a1, k_ab, 3, &c4);
    park(ds, &a1, k_a, 1, &c5);     /* competes with c3, older, for a first-read "a" */

    psr_ds_kv_t kvs[] = { { "a", val("1") }, { "b", val("2") } };
    psr_ds_scope_t scope = { .range = PMIX_RANGE_SESSION };
    assert_int_equal(psr_ds_publish(ds, &b0, &scope, PMIX_PERSIST_FIRST_READ, NULL, kvs, 2, 0,
                                    &done), PMIX_SUCCESS);
    /* c1 takes "b", c3 takes "a": c4 then finds neither, c5 not "a". */
    assert_int_equal(psr_ds_rechecks(ds), 4);
    assert_non_null(done);
    assert_ptr_equal(done->cookie, &c1);
    assert_non_null(done->next);
    assert_ptr_equal(done->next->cookie, &c3);
    assert_null(done->next->next);
    psr_ds_result_free(done);
    done = NULL;
    assert_int_equal(psr_ds_count(ds), 0);
    assert_int_equal(psr_ds_parked(ds), 3);

    kvs[0].value = val("3");
    kvs[1].value = val("4");
    assert_int_equal(psr_ds_publish(ds, &b0, &scope, PMIX_PERSIST_SESSION, NULL, kvs, 2, 0,
                                    &done), PMIX_SUCCESS);
    assert_non_null(done);
    assert_ptr_equal(done->cookie, &c4);
    assert_int_equal(done->status, PMIX_SUCCESS);
    assert_int_equal(done->nhits, 3);
    assert_non_null(done->next);
    assert_ptr_equal(done->next->cookie, &c5);
    assert_null(done->next->next);
    psr_ds_result_free(done);
    assert_int_equal(psr_ds_parked(ds), 1);         /* c2, waiting for "c" */
}

/* A result needs no store: it may be freed after the store is gone (the
 * PMIx thread hands answers over while the main thread ends the job). */
static void test_result_outlives_store(void **state)
{
    (void)state;
    live = 0;
    psr_ds_t *ds = psr_ds_create(&ops);
    psr_ds_client_t a0 = client("A", 0);
    const char *keys[] = { "k" };
    psr_ds_result_t *res = NULL;
    assert_int_equal(PUB(ds, &a0, "k", PMIX_RANGE_SESSION), PMIX_SUCCESS);
    assert_int_equal(psr_ds_lookup(ds, &a0, NULL, keys, 1, 0, 0, NULL, &res), PMIX_SUCCESS);
    assert_int_equal(res->nhits, 1);
    psr_ds_destroy(ds, PMIX_ERR_LOST_CONNECTION, NULL);
    assert_int_equal(live, 1);
    psr_ds_result_free(res);
    assert_int_equal(live, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_admits),
        cmocka_unit_test_setup_teardown(test_ranges_serve, setup, teardown),
        cmocka_unit_test_setup_teardown(test_search_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_all_or_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_permissions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lookup_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_narrowest_range_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persistence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unpublish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_for_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_respects_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_first_read_goes_to_oldest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_requester_ends, setup, teardown),
        cmocka_unit_test(test_destroy_completes_parked),
        cmocka_unit_test_setup_teardown(test_publish_checks_only_its_waiters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_serves_waiters_in_arrival_order, setup,
                                        teardown),
        cmocka_unit_test(test_result_outlives_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
