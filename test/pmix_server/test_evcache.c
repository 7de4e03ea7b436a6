/*
 * Unit tests of pscom_run's environment event cache (bin/pscom_run/evcache.c):
 * ring overflow and order, which processes an event concerns, delivery
 * bookkeeping.  No PMIx library is running: payloads are counted tokens.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "evcache.h"

static int released;

static void release(void *payload)
{
    released++;
    free(payload);
}

static pmix_proc_t proc(const char *ns, pmix_rank_t rank)
{
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, ns, rank);
    return p;
}

static uint64_t add(psr_evc_t *evc, pmix_status_t code, const char *src_ns, pmix_rank_t src_rank,
                    pmix_data_range_t range, const pmix_proc_t *targets, size_t ntargets,
                    size_t *evicted)
{
    int *token = malloc(sizeof(int));
    *token = code;
    psr_evc_event_t ev = { .code = code, .source = proc(src_ns, src_rank), .range = range,
                           .targets = targets, .ntargets = ntargets, .payload = token };
    return psr_evc_add(evc, &ev, evicted);
}

static void test_create(void **state)
{
    (void)state;
    assert_null(psr_evc_create(0, release));
    psr_evc_t *evc = psr_evc_create(4, NULL);
    assert_non_null(evc);
    assert_int_equal(psr_evc_capacity(evc), 4);
    assert_int_equal(psr_evc_count(evc), 0);
    assert_null(psr_evc_at(evc, 0));
    psr_evc_destroy(evc);
}

static void test_overflow_keeps_newest_in_order(void **state)
{
    (void)state;
    released = 0;
    psr_evc_t *evc = psr_evc_create(3, release);
    size_t evicted;
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(add(evc, -1000 - i, "A", 0, PMIX_RANGE_SESSION, NULL, 0, &evicted), i);
        assert_int_equal(evicted, 0);
    }
    for (int i = 4; i <= 7; i++) {
        assert_int_equal(add(evc, -1000 - i, "A", 0, PMIX_RANGE_SESSION, NULL, 0, &evicted), i);
        assert_int_equal(evicted, 1);
    }
    assert_int_equal(psr_evc_count(evc), 3);
    assert_int_equal(psr_evc_evicted(evc), 4);
    assert_int_equal(released, 4);
    for (size_t i = 0; i < 3; i++) {
        const psr_evc_entry_t *e = psr_evc_at(evc, i);
        assert_int_equal(e->seq, 5 + i);
        assert_int_equal(e->code, -1005 - (int)i);
        assert_int_equal(*(int *)e->payload, -1005 - (int)i);
    }
    /* A late process gets the surviving events, oldest first. */
    const psr_evc_entry_t *out[8];
    pmix_proc_t late = proc("B", 0);
    assert_int_equal(psr_evc_take(evc, &late, NULL, 0, out, 8), 3);
    assert_int_equal(out[0]->seq, 5);
    assert_int_equal(out[2]->seq, 7);
    psr_evc_destroy(evc);
    assert_int_equal(released, 7);
}

static void test_capacity_one(void **state)
{
    (void)state;
    released = 0;
    psr_evc_t *evc = psr_evc_create(1, release);
    add(evc, -1, "A", 0, PMIX_RANGE_SESSION, NULL, 0, NULL);
    add(evc, -2, "A", 0, PMIX_RANGE_SESSION, NULL, 0, NULL);
    assert_int_equal(psr_evc_count(evc), 1);
    assert_int_equal(psr_evc_at(evc, 0)->code, -2);
    psr_evc_destroy(evc);
    assert_int_equal(released, 2);
}

static void test_concerns(void **state)
{
    (void)state;
    psr_evc_t *evc = psr_evc_create(16, release);
    pmix_proc_t a0 = proc("A", 0), a1 = proc("A", 1), b0 = proc("B", 0), b1 = proc("B", 1);
    pmix_proc_t custom[] = { proc("B", 1), proc("C", PMIX_RANK_WILDCARD) };
    pmix_proc_t c7 = proc("C", 7), empty = proc("", 1);

    add(evc, -1, "A", 0, PMIX_RANGE_NAMESPACE, NULL, 0, NULL);
    add(evc, -2, "A", 0, PMIX_RANGE_SESSION, NULL, 0, NULL);
    add(evc, -3, "A", 0, PMIX_RANGE_CUSTOM, custom, 2, NULL);
    add(evc, -4, "A", 0, PMIX_RANGE_PROC_LOCAL, NULL, 0, NULL);
    add(evc, -5, "A", 0, PMIX_RANGE_RM, NULL, 0, NULL);
    add(evc, -6, "A", 0, PMIX_RANGE_GLOBAL, NULL, 0, NULL);
    add(evc, -7, "A", 0, PMIX_RANGE_LOCAL, NULL, 0, NULL);

    const psr_evc_entry_t *ns = psr_evc_at(evc, 0), *sess = psr_evc_at(evc, 1),
                          *cust = psr_evc_at(evc, 2), *self = psr_evc_at(evc, 3),
                          *rm = psr_evc_at(evc, 4), *glob = psr_evc_at(evc, 5),
                          *local = psr_evc_at(evc, 6);
    assert_true(psr_evc_concerns(ns, &a1));
    assert_false(psr_evc_concerns(ns, &b0));
    assert_false(psr_evc_concerns(ns, &a0));        /* the source */
    assert_false(psr_evc_concerns(ns, &empty));     /* empty is no wildcard */
    assert_true(psr_evc_concerns(sess, &b0));
    assert_true(psr_evc_concerns(glob, &b1));
    assert_true(psr_evc_concerns(local, &c7));
    assert_true(psr_evc_concerns(cust, &b1));
    assert_false(psr_evc_concerns(cust, &b0));
    assert_true(psr_evc_concerns(cust, &c7));
    assert_false(psr_evc_concerns(cust, &a1));
    assert_false(psr_evc_concerns(self, &a1));
    assert_false(psr_evc_concerns(rm, &a1));
    psr_evc_destroy(evc);
}

static void test_take_filters_and_delivers_once(void **state)
{
    (void)state;
    psr_evc_t *evc = psr_evc_create(16, release);
    pmix_proc_t a1 = proc("A", 1), b0 = proc("B", 0);
    const psr_evc_entry_t *out[16];

    uint64_t s1 = add(evc, PMIX_EVENT_NODE_DOWN, "A", 0, PMIX_RANGE_NAMESPACE, NULL, 0, NULL);
    uint64_t s2 = add(evc, PMIX_EVENT_NODE_OFFLINE, "A", 0, PMIX_RANGE_SESSION, NULL, 0, NULL);
    uint64_t s3 = add(evc, PMIX_EVENT_NODE_DOWN, "B", 0, PMIX_RANGE_SESSION, NULL, 0, NULL);

    /* Only the codes asked for. */
    pmix_status_t offline = PMIX_EVENT_NODE_OFFLINE;
    assert_int_equal(psr_evc_take(evc, &a1, &offline, 1, out, 16), 1);
    assert_int_equal(out[0]->seq, s2);
    /* Any code: what is left for a1, in order. */
    assert_int_equal(psr_evc_take(evc, &a1, NULL, 0, out, 16), 2);
    assert_int_equal(out[0]->seq, s1);
    assert_int_equal(out[1]->seq, s3);
    assert_int_equal(psr_evc_take(evc, &a1, NULL, 0, out, 16), 0);
    assert_true(psr_evc_has(evc, s1, &a1));

    /* b0: not its namespace's event s1, not its own s3. */
    assert_int_equal(psr_evc_take(evc, &b0, NULL, 0, out, 1), 1);
    assert_int_equal(out[0]->seq, s2);
    assert_int_equal(psr_evc_take(evc, &b0, NULL, 0, out, 16), 0);
    assert_false(psr_evc_has(evc, s1, &b0));
    psr_evc_destroy(evc);
}

static void test_mark_and_batches(void **state)
{
    (void)state;
    psr_evc_t *evc = psr_evc_create(8, release);
    pmix_proc_t b0 = proc("B", 0);
    const psr_evc_entry_t *out[2];
    uint64_t seq[5];
    for (int i = 0; i < 5; i++) seq[i] = add(evc, -1, "A", 0, PMIX_RANGE_SESSION, NULL, 0, NULL);

    /* Delivered when it happened: not again. */
    psr_evc_mark(evc, seq[1], &b0);
    psr_evc_mark(evc, seq[1], &b0);
    psr_evc_mark(evc, 999, &b0);            /* unknown sequence: ignored */
    assert_true(psr_evc_has(evc, seq[1], &b0));
    assert_int_equal(psr_evc_take(evc, &b0, NULL, 0, out, 2), 2);
    assert_int_equal(out[0]->seq, seq[0]);
    assert_int_equal(out[1]->seq, seq[2]);
    assert_int_equal(psr_evc_take(evc, &b0, NULL, 0, out, 2), 2);
    assert_int_equal(out[0]->seq, seq[3]);
    assert_int_equal(out[1]->seq, seq[4]);
    assert_int_equal(psr_evc_take(evc, &b0, NULL, 0, out, 2), 0);

    /* Many processes on one event. */
    for (pmix_rank_t r = 0; r < 100; r++) {
        pmix_proc_t p = proc("C", r);
        psr_evc_mark(evc, seq[0], &p);
    }
    pmix_proc_t c99 = proc("C", 99), c100 = proc("C", 100);
    assert_true(psr_evc_has(evc, seq[0], &c99));
    assert_false(psr_evc_has(evc, seq[0], &c100));
    psr_evc_destroy(evc);
}

static void test_evicted_entries_are_gone(void **state)
{
    (void)state;
    psr_evc_t *evc = psr_evc_create(2, release);
    pmix_proc_t b0 = proc("B", 0);
    uint64_t s1 = add(evc, -1, "A", 0, PMIX_RANGE_SESSION, NULL, 0, NULL);
    psr_evc_mark(evc, s1, &b0);
    add(evc, -2, "A", 0, PMIX_RANGE_SESSION, NULL, 0, NULL);
    add(evc, -3, "A", 0, PMIX_RANGE_SESSION, NULL, 0, NULL);
    assert_false(psr_evc_has(evc, s1, &b0));
    const psr_evc_entry_t *out[4];
    assert_int_equal(psr_evc_take(evc, &b0, NULL, 0, out, 4), 2);
    assert_int_equal(out[0]->code, -2);
    psr_evc_destroy(evc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create),
        cmocka_unit_test(test_overflow_keeps_newest_in_order),
        cmocka_unit_test(test_capacity_one),
        cmocka_unit_test(test_concerns),
        cmocka_unit_test(test_take_filters_and_delivers_once),
        cmocka_unit_test(test_mark_and_batches),
        cmocka_unit_test(test_evicted_entries_are_gone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
