/*
 * Requests freed while one thread uses the library are kept for reuse
 * (lib/pscom/req.c). A reused request must be indistinguishable from a
 * fresh one, only requests of the same size may be reused, large ones are
 * never kept, and after pscom_init_thread nothing is reused any more.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core.h"

static const char zeros[1 << 20];

/* Dirty every field and the user area the way an application would. */
static void scribble(pscom_request_t *r)
{
    r->data = (void *)0x1234;
    r->data_len = 99;
    r->connection = (pscom_connection_t *)0x5678;
    r->ops.io_done = (void (*)(pscom_request_t *))0x9abc;
    r->xheader_len = 3;
    memset(&r->xheader, 0x77, 3);
    r->state = PSCOM_REQ_STATE_ERROR;
    if (r->user) memset(r->user, 0xee, r->user_size);
}

static void assert_fresh(pscom_request_t *r, size_t xlen, size_t user_size)
{
    assert_non_null(r);
    assert_int_equal(r->state, PSCOM_REQ_STATE_DONE);
    assert_null(r->data);
    assert_int_equal(r->data_len, 0);
    assert_null(r->connection);
    assert_null(r->socket);
    assert_null(r->ops.io_done);
    assert_null(r->ops.recv_accept);
    assert_int_equal(r->max_xheader_len, xlen);
    assert_int_equal(r->xheader_len, xlen);
    assert_memory_equal(&r->xheader, zeros, xlen);
    assert_int_equal(r->user_size, user_size);
    if (user_size) {
        assert_non_null(r->user);
        assert_memory_equal(r->user, zeros, user_size);
    } else {
        assert_null(r->user);
    }
}

static void reused_is_fresh(void **state)
{
    pscom_request_t *a = pscom_request_create(16, 64);
    assert_fresh(a, 16, 64);
    scribble(a);
    pscom_request_free(a);
    pscom_request_t *b = pscom_request_create(16, 64);
    assert_ptr_equal(b, a); /* it is the cached one */
    assert_fresh(b, 16, 64);
    pscom_request_free(b);
}

static void other_size_not_reused(void **state)
{
    pscom_request_t *a = pscom_request_create(16, 64);
    scribble(a);
    pscom_request_free(a);
    pscom_request_t *b = pscom_request_create(16, 640);
    assert_fresh(b, 16, 640);
    pscom_request_t *c = pscom_request_create(16, 64);
    assert_ptr_equal(c, a);
    assert_fresh(c, 16, 64);
    pscom_request_free(b);
    pscom_request_free(c);
}

static void large_not_kept(void **state)
{
    unsigned before = psc_req_cache_count();
    pscom_request_t *a = pscom_request_create(0, 1 << 20);
    scribble(a);
    pscom_request_free(a);
    assert_int_equal(psc_req_cache_count(), before);
    pscom_request_t *b = pscom_request_create(0, 64);
    pscom_request_free(b);
    assert_int_equal(psc_req_cache_count(), before + 1);
    pscom_request_t *c = pscom_request_create(0, 1 << 20);
    assert_fresh(c, 0, 1 << 20);
    assert_int_equal(psc_req_cache_count(), before + 1);
    pscom_request_free(c);
}

static void double_free_still_detected(void **state)
{
    pscom_request_t *a = pscom_request_create(0, 0);
    pscom_request_free(a);
    unsigned n = psc_req_cache_count();
    pscom_request_free(a); /* reported, not crashing, not cached twice */
    assert_int_equal(psc_req_cache_count(), n);
    pscom_request_t *b = pscom_request_create(0, 0);
    pscom_request_t *c = pscom_request_create(0, 0);
    assert_ptr_not_equal(b, c);
    pscom_request_free(b);
    pscom_request_free(c);
}

static void no_reuse_with_threads(void **state)
{
    pscom_request_t *a = pscom_request_create(8, 32);
    pscom_request_free(a);
    assert_true(psc_req_cache_count() > 0);
    assert_int_equal(pscom_init_thread(PSCOM_VERSION), PSCOM_SUCCESS);
    assert_int_equal(psc_req_cache_count(), 0); /* drained */
    pscom_request_t *b = pscom_request_create(8, 32);
    assert_fresh(b, 8, 32);
    scribble(b);
    pscom_request_free(b);
    assert_int_equal(psc_req_cache_count(), 0);
    pscom_request_t *c = pscom_request_create(8, 32);
    assert_fresh(c, 8, 32);
    pscom_request_free(c);
}

int main(void)
{
#if defined(__SANITIZE_ADDRESS__)
    puts("the request cache is off under AddressSanitizer");
    return 77; /* skipped */
#endif
    setenv("PSP_DEBUG", "0", 1);
    if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reused_is_fresh),
        cmocka_unit_test(other_size_not_reused),
        cmocka_unit_test(large_not_kept),
        cmocka_unit_test(double_free_still_detected),
        cmocka_unit_test(no_reuse_with_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
