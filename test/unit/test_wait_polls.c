/*
 * The busy wait's polls (progress.c, psc_progress_until): while one plugin
 * has connections, a wait polls it by itself between full rounds (which
 * also look at descriptors and timers), and stops as soon as what it waits
 * for holds; a request a poll completes has its callback run only after
 * the plugin returned. With two plugins, or a wait that yields, every call
 * is a full round.
 *
 * The plugins are fake progress ops put into the core's list of active
 * ones (psc_active), as psc_plugin_con_opened does for a real plugin.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

static unsigned calls_a, calls_b;
static struct psc_active saved;

static int fake_a(void)
{
    calls_a++;
    return 0;
}

static int fake_b(void)
{
    calls_b++;
    return 0;
}

static bool a_called_enough(void *arg)
{
    return calls_a >= *(const unsigned *)arg;
}

static int setup(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    saved = psc_active;
    calls_a = calls_b = 0;
    return 0;
}

static int teardown(void **state)
{
    psc_active = saved;
    psc_settings.sched_yield = 0;
    return 0;
}

static void only(int (*op)(void))
{
    psc_active.n = 1;
    psc_active.progress[0] = op;
}

/* Wait until fake_a was called `want` times; the full rounds it took. */
static unsigned long wait_for_calls(unsigned want)
{
    unsigned long r0 = psc_ctx.round;
    assert_int_equal(psc_progress_until(a_called_enough, &want, 0), 0);
    return psc_ctx.round - r0;
}

static void one_plugin_is_polled_between_full_rounds(void **state)
{
    only(fake_a);
    unsigned long rounds = wait_for_calls(100);
    /* It stopped at once, not at the end of a batch of polls. */
    assert_int_equal(calls_a, 100);
    /* Most calls were polls; full rounds still came between them. */
    assert_true(rounds > 0);
    assert_true(rounds * 4 < calls_a);
}

static void two_plugins_get_full_rounds(void **state)
{
    psc_active.n = 2;
    psc_active.progress[0] = fake_a;
    psc_active.progress[1] = fake_b;
    unsigned long rounds = wait_for_calls(20);
    assert_int_equal(calls_a, 20);
    assert_int_equal(rounds, calls_a);
    assert_int_equal(calls_b, calls_a);
}

static void yielding_wait_gets_full_rounds(void **state)
{
    psc_settings.sched_yield = 1;
    only(fake_a);
    unsigned long rounds = wait_for_calls(20);
    assert_int_equal(rounds, calls_a);
}

/* A request completed inside a poll: its io_done runs after the op
 * returned, before the wait sees it done. */
static pscom_request_t *poll_req;
static bool in_op, cb_ran, cb_in_op;

static void record_cb(pscom_request_t *r)
{
    cb_ran = true;
    cb_in_op = in_op;
}

static int completes_on_third_call(void)
{
    in_op = true;
    if (++calls_a == 3) psc_req_done(req_of(poll_req), 0);
    in_op = false;
    return calls_a == 3;
}

static bool req_done(void *arg)
{
    return pscom_req_is_done(arg);
}

static void callback_runs_after_the_plugin_returns(void **state)
{
    poll_req = pscom_request_create(0, 0);
    poll_req->ops.io_done = record_cb;
    poll_req->state = PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED;
    cb_ran = cb_in_op = false;
    only(completes_on_third_call);
    assert_int_equal(psc_progress_until(req_done, poll_req, 0), 0);
    assert_true(cb_ran);
    assert_false(cb_in_op);
    assert_int_equal(calls_a, 3);
    pscom_request_free(poll_req);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            one_plugin_is_polled_between_full_rounds, setup, teardown),
        cmocka_unit_test_setup_teardown(two_plugins_get_full_rounds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(yielding_wait_gets_full_rounds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            callback_runs_after_the_plugin_returns, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
