/*
 * The busy wait's polls (progress.c, psc_progress_until): while one plugin
 * has connections, a wait polls it by itself between full rounds (which
 * also look at descriptors and timers), and stops as soon as what it waits
 * for holds; a request a poll completes has its callback run only after
 * the plugin returned. Every call is a full round with two plugins, and
 * when the wait yields, a descriptor is hot, threads share the library,
 * the node is oversubscribed (psc_oversubscribed, wrapped) or the wait
 * rests.
 *
 * Polling plugins that all ask for it (PSCOM_PLUGIN_SPIN_RELAX), the wait
 * adds the spin-wait hint (psc_cpu_relax, wrapped and counted) once
 * RELAX_AFTER polls or full rounds in a row found nothing.
 *
 * The plugins are fake progress ops put into the core's list of active
 * ones (psc_active), as psc_plugin_con_opened does for a real plugin.
 *
 * A bounded wait whose sleeps keep being woken ends at its deadline; the
 * monotonic clock is the test's there (clock_gettime, wrapped).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "frames.h"

static unsigned calls_a, calls_b;
static struct psc_active saved;
static struct psc_settings saved_settings;

/* psc_oversubscribed as the test says (-Wl,--wrap). */
static bool fake_oversubscribed;
bool __real_psc_oversubscribed(void);
bool __wrap_psc_oversubscribed(void);
bool __wrap_psc_oversubscribed(void)
{
    return fake_oversubscribed || __real_psc_oversubscribed();
}

/* psc_cpu_relax counted (-Wl,--wrap). */
static unsigned relaxes;
void __wrap_psc_cpu_relax(void);
void __wrap_psc_cpu_relax(void)
{
    relaxes++;
}

/* CLOCK_MONOTONIC as the test sets it while fake_clock is on
 * (-Wl,--wrap=clock_gettime); else the real clock. */
static bool fake_clock;
static uint64_t fake_now_ms;
int __real_clock_gettime(clockid_t clk, struct timespec *ts);
int __wrap_clock_gettime(clockid_t clk, struct timespec *ts);
int __wrap_clock_gettime(clockid_t clk, struct timespec *ts)
{
    if (!fake_clock || clk != CLOCK_MONOTONIC)
        return __real_clock_gettime(clk, ts);
    ts->tv_sec = (time_t)(fake_now_ms / 1000);
    ts->tv_nsec = (long)(fake_now_ms % 1000) * 1000000;
    return 0;
}

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
    saved_settings = psc_settings;
    calls_a = calls_b = relaxes = 0;
    return 0;
}

static int teardown(void **state)
{
    psc_active = saved;
    psc_settings = saved_settings;
    fake_oversubscribed = false;
    fake_clock = false;
    return 0;
}

static void only(int (*op)(void))
{
    psc_active.n = 1;
    psc_active.relax = false;
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

static void ignore_fd(int fd, uint32_t events, void *arg)
{
    (void)fd;
    (void)events;
    (void)arg;
}

/* A hot descriptor (a plugin waiting for a socket to become writable, say)
 * is looked at on every full round: no polls in between. */
static void hot_descriptor_gets_full_rounds(void **state)
{
    int fd = eventfd(0, EFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(pscom_plugin_fd_add(fd, EPOLLIN, 1, ignore_fd, NULL), 0);
    only(fake_a);
    unsigned long rounds = wait_for_calls(20);
    assert_int_equal(rounds, calls_a);
    pscom_plugin_fd_del(fd);
    close(fd);

    /* A cold one does not stop the polls. */
    fd = eventfd(0, EFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(pscom_plugin_fd_add(fd, EPOLLIN, 0, ignore_fd, NULL), 0);
    calls_a = 0;
    rounds = wait_for_calls(100);
    assert_true(rounds * 4 < calls_a);
    pscom_plugin_fd_del(fd);
    close(fd);
}

/* With threads, every full round lets the others have the lock: a wait
 * of one thread must not poll on without them. */
static void threaded_wait_gets_full_rounds(void **state)
{
    only(fake_a);
    psc_ctx.threaded = true;
    psc_lock();
    unsigned long rounds = wait_for_calls(20);
    psc_unlock();
    psc_ctx.threaded = false;
    assert_int_equal(rounds, calls_a);
}

static void oversubscribed_node_gets_full_rounds(void **state)
{
    fake_oversubscribed = true;
    only(fake_a);
    unsigned long rounds = wait_for_calls(20);
    assert_int_equal(rounds, calls_a);
}

/* A wait that made no progress for PSP_WAIT_SPIN (0 here) rests, and from
 * then on every call is a full round (which yields: PSP_WAIT_SLEEP=0).
 * Until then it polls: 9 calls a round. */
static void resting_wait_gets_full_rounds(void **state)
{
    psc_settings.wait_spin_us = 0;
    psc_settings.wait_sleep = 0;
    only(fake_a);
    unsigned long rounds = wait_for_calls(9 * 1024 + 2000);
    /* Resting came after at most 1024 idle rounds (it needs 512: the clock
     * is read from the 256th on, every 256); then 1 call a round. */
    assert_true(rounds >= 1024 + 2000 - 1);
    assert_true(rounds < calls_a);
}

/* Finds something on every third call. */
static int busy_every_third(void)
{
    return ++calls_a % 3 == 0;
}

static void idle_polls_relax_for_a_plugin_that_asks(void **state)
{
    only(fake_a);
    wait_for_calls(100);
    assert_int_equal(relaxes, 0); /* not asked */

    only(fake_a);
    psc_active.relax = true;
    calls_a = 0;
    unsigned long rounds = wait_for_calls(100);
    /* Not after the first two idle polls of a batch, nor after the poll
     * that ends the wait; more than the full rounds alone give (one
     * each at most). */
    assert_true(relaxes > 0);
    assert_true(relaxes > rounds);
    assert_true(relaxes <= calls_a - 3);

    /* Two idle polls in a row at most: never. */
    only(busy_every_third);
    psc_active.relax = true;
    calls_a = relaxes = 0;
    wait_for_calls(100);
    assert_int_equal(relaxes, 0);
}

/* Full rounds (two plugins: no polls in between, as pscom_wait_any's
 * rounds) get the hint too, from the third idle round on. */
static void idle_full_rounds_relax_when_asked(void **state)
{
    psc_active.n = 2;
    psc_active.progress[0] = fake_a;
    psc_active.progress[1] = fake_b;
    psc_active.relax = false;
    wait_for_calls(20);
    assert_int_equal(relaxes, 0);

    psc_active.relax = true;
    calls_a = 0;
    unsigned long rounds = wait_for_calls(20);
    assert_int_equal(rounds, calls_a);
    assert_true(relaxes > 0);
    assert_true(relaxes <= rounds - 2);
}

/* psc_active.relax holds while every plugin with connections asks: shm
 * does, tcp does not. */
static void relax_only_while_every_active_plugin_asks(void **state)
{
    struct psc_plugin *shm = psc_plugin_find("shm"), *tcp = psc_plugin_find("tcp");
    assert_non_null(shm);
    assert_non_null(tcp);
    assert_non_null(shm->desc);
    assert_non_null(tcp->desc);
    psc_plugin_con_opened(shm);
    assert_true(psc_active.relax);
    psc_plugin_con_opened(tcp);
    assert_int_equal(psc_active.n, 2);
    assert_false(psc_active.relax);
    psc_plugin_con_closed(shm);
    assert_false(psc_active.relax);
    psc_plugin_con_closed(tcp);
    assert_int_equal(psc_active.n, 0);
    assert_false(psc_active.relax);
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

/* A descriptor that brings the waiter nothing, and each of its wake-ups
 * takes 50 ms of the test's clock. */
#define TICK_MS 50
static unsigned ticks;

static void tick(int fd, uint32_t events, void *arg)
{
    ticks++;
    fake_now_ms += TICK_MS;
}

static bool never(void *arg)
{
    return false;
}

/* Every sleep of a bounded wait is woken at once (an eventfd that stays
 * readable), and the wait rests again after a few idle rounds (an
 * oversubscribed node): it still looks at the clock after each of those
 * sleeps, and ends at the first wake-up past its 200 ms, not a few hundred
 * rounds (and wake-ups) later. */
static void woken_sleeps_end_at_the_deadline(void **state)
{
    fake_oversubscribed = true;
    psc_settings.wait_sleep = 1;
    psc_active.n = 0;
    int fd = eventfd(1, EFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(pscom_plugin_fd_add(fd, EPOLLIN, 0, tick, NULL), 0);
    fake_now_ms = 1000000;
    ticks = 0;
    fake_clock = true;
    assert_int_equal(psc_progress_until(never, NULL, 200), -1);
    fake_clock = false;
    /* 4 wake-ups reach the deadline; a round's own look at the cold
     * descriptor may have been one of them. */
    assert_in_range(ticks, 200 / TICK_MS, 200 / TICK_MS + 1);
    pscom_plugin_fd_del(fd);
    close(fd);
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
        cmocka_unit_test_setup_teardown(hot_descriptor_gets_full_rounds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(threaded_wait_gets_full_rounds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(oversubscribed_node_gets_full_rounds,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(resting_wait_gets_full_rounds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            callback_runs_after_the_plugin_returns, setup, teardown),
        cmocka_unit_test_setup_teardown(
            idle_polls_relax_for_a_plugin_that_asks, setup, teardown),
        cmocka_unit_test_setup_teardown(
            relax_only_while_every_active_plugin_asks, setup, teardown),
        cmocka_unit_test_setup_teardown(idle_full_rounds_relax_when_asked,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(woken_sleeps_end_at_the_deadline,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
