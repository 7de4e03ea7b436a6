/*
 * pscom_wait_any after pscom_init_thread: it returns after one round even
 * when nothing happens in the library, because what the caller waits for
 * may end in another thread. ParaStation MPI releases its own lock around
 * the call and loops on its request: a generalized request that another
 * thread completes, or a request whose completion another thread's round
 * reported just before this wait began, is seen only when the call
 * returns (MPICH's threads/pt2pt/greq_wait and alltoall hung before).
 * Idle rounds count across calls, so that such a loop still yields.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

static void returns_when_nothing_happens(void **state)
{
    (void)state;
    assert_int_equal(pscom_init_thread(PSCOM_VERSION), PSCOM_SUCCESS);
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(s);
    assert_int_equal(pscom_listen(s, PSCOM_ANYPORT), PSCOM_SUCCESS);
    unsigned long events = psc_ctx.events;
    watchdog_start(10);
    for (int i = 0; i < 3; i++) pscom_wait_any();
    watchdog_stop();
    assert_int_equal(psc_ctx.events, events); /* nothing happened */
    pscom_close_socket(s);
}

/* The library's own sched_yield calls (linked with --wrap). */
static unsigned long yields;
int __real_sched_yield(void);
int __wrap_sched_yield(void);
int __wrap_sched_yield(void)
{
    __atomic_add_fetch(&yields, 1, __ATOMIC_RELAXED);
    return __real_sched_yield();
}

/* Calls of pscom_wait_any that find nothing, until one yields. */
static void wait_until_resting(void)
{
    yields = 0;
    for (int i = 0; i < 200000 && !yields; i++) pscom_wait_any();
    assert_true(yields > 0);
}

/* A caller that keeps finding nothing (one round per call) still comes to
 * rest, as one long wait would: with threads that means yielding the CPU
 * on every call, which an oversubscribed node needs. */
static void idle_calls_come_to_yield(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(s);
    wait_until_resting();
    pscom_close_socket(s);
}

/* Once anything has happened since a caller's last call (here: another
 * thread's round completed a request, which counts an event), its next
 * call polls again instead of going on resting. */
static void activity_starts_the_count_again(void **state)
{
    (void)state;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(s);
    wait_until_resting();
    unsigned long resting = yields;
    pscom_wait_any();
    assert_true(yields > resting); /* still resting */
    psc_lock();
    psc_ctx.events++; /* what another thread's completion does */
    psc_unlock();
    resting = yields;
    pscom_wait_any();
    assert_int_equal(yields, resting);
    pscom_close_socket(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(returns_when_nothing_happens),
        cmocka_unit_test(idle_calls_come_to_yield),
        cmocka_unit_test(activity_starts_the_count_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
