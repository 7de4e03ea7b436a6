/*
 * Unit tests of plugins/ofi/ofi_watch.c, the watchdog over provider calls:
 * a call that does not return is reported once, after the timeout, with
 * its name and the registered peers whose processes ended (gone or
 * zombie), and not the live ones; calls that return in time are never
 * reported, also back to back and in a process stopped and continued
 * (SIGSTOP, SIGCONT) inside them; a forked child stops nothing of its
 * parent's, is in no call, and can watch its own; starts and stops racing
 * in two threads end. The end-to-end check with libfabric's shm provider
 * is test/check-ofi-stall.sh.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dead_pid.h"
#include "ofi_watch.h"

/* Built with ThreadSanitizer (gcc says so directly, clang by feature). */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

/* What the callback saw. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    unsigned reports;
    char call[64];
    double seconds;
    unsigned peers, gone;
    char gone_list[1024];
} seen = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static void record(const owd_report_t *r, void *arg)
{
    if (arg != &seen) abort(); /* cmocka's asserts are for the main thread */
    pthread_mutex_lock(&seen.mu);
    seen.reports++;
    snprintf(seen.call, sizeof(seen.call), "%s", r->call);
    seen.seconds = r->seconds;
    seen.peers = r->peers;
    seen.gone = r->gone;
    snprintf(seen.gone_list, sizeof(seen.gone_list), "%s", r->gone_list);
    pthread_cond_broadcast(&seen.cond);
    pthread_mutex_unlock(&seen.mu);
}

static unsigned reports(void)
{
    pthread_mutex_lock(&seen.mu);
    unsigned n = seen.reports;
    pthread_mutex_unlock(&seen.mu);
    return n;
}

/* Wait (at most 30 s) until the callback ran n times; its count. */
static unsigned wait_reports(unsigned n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&seen.mu);
    while (seen.reports < n &&
           pthread_cond_timedwait(&seen.cond, &seen.mu, &until) != ETIMEDOUT)
        ;
    unsigned got = seen.reports;
    pthread_mutex_unlock(&seen.mu);
    return got;
}

static void sleep_ms(unsigned ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) && errno == EINTR)
        ;
}

static int reset(void **state)
{
    (void)state;
    pthread_mutex_lock(&seen.mu);
    seen.reports = 0;
    seen.call[0] = seen.gone_list[0] = 0;
    pthread_mutex_unlock(&seen.mu);
    return 0;
}

/* The entries' keys. */
static int keys[64];

/* What a failed test left: the call it was in, the thread, its peers. */
static int cleanup(void **state)
{
    (void)state;
    owd_leave();
    owd_stop();
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        owd_peer_del(&keys[i]);
    return 0;
}

/* A child that ended and was not waited for (a zombie): kill(pid, 0)
 * still succeeds for it. */
static pid_t zombie_pid(void)
{
    pid_t c = fork();
    if (c == 0) _exit(0);
    assert_true(c > 0);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)c, &si, WEXITED | WNOWAIT), 0);
    assert_int_equal(kill(c, 0), 0);
    return c;
}

static void stalled_call_reported_once(void **state)
{
    (void)state;
    pid_t gone = dead_pid(), zombie = zombie_pid();
    assert_int_equal(owd_peer_add(&keys[0], getpid(), "alive-peer"), 0);
    assert_int_equal(owd_peer_add(&keys[1], gone, "gone-peer"), 0);
    assert_int_equal(owd_peer_add(&keys[2], zombie, "zombie-peer"), 0);
    assert_int_equal(owd_peer_add(&keys[3], gone, "forgotten-peer"), 0);
    owd_peer_del(&keys[3]);
    assert_int_equal(owd_peer_add(&keys[3], 0, "remote-peer"), 0);

    assert_int_equal(owd_start(400, record, &seen), 0);
    owd_enter("fi_test_call");
    assert_int_equal(wait_reports(1), 1);
    /* Still in the call: no second report for it. */
    sleep_ms(1000);
    owd_leave();
    owd_stop();
    assert_int_equal(reports(), 1);

    assert_string_equal(seen.call, "fi_test_call");
    assert_true(seen.seconds >= 0.4);
    assert_int_equal(seen.peers, 3);
    assert_int_equal(seen.gone, 2);
    char want[64];
    snprintf(want, sizeof(want), "gone-peer (pid %d)", (int)gone);
    assert_non_null(strstr(seen.gone_list, want));
    snprintf(want, sizeof(want), "zombie-peer (pid %d)", (int)zombie);
    assert_non_null(strstr(seen.gone_list, want));
    assert_null(strstr(seen.gone_list, "alive"));
    assert_null(strstr(seen.gone_list, "forgotten"));

    assert_int_equal(waitpid(zombie, NULL, 0), zombie);
}

/* Calls far shorter than the timeout, in bursts and with pauses between
 * them, for ten timeouts: none is reported. */
static void calls_in_time_not_reported(void **state)
{
    (void)state;
    assert_int_equal(owd_start(500, record, &seen), 0);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned calls = 0;
    do {
        owd_enter(calls % 2 ? "fi_short" : "fi_shorter");
        if (calls % 1000 == 0) sleep_ms(20);
        owd_leave();
        if (calls % 100 == 0) sleep_ms(5);
        calls++;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (t.tv_sec - t0.tv_sec < 5);
    owd_stop();
    assert_int_equal(reports(), 0);
}

/* Spin until this thread has used ms of CPU time: time while the process
 * is stopped does not count. */
static void spin_cpu_ms(unsigned ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do {
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000.0 + (t.tv_nsec - t0.tv_nsec) / 1e6 <
             ms);
}

/* A child stopped for 2 s (SIGSTOP) inside a call that needs 50 ms of CPU,
 * twice; the timeout is 1 s. After SIGCONT the watchdog looks once, not
 * once for each of the eight looks it missed, and the call returns long
 * before four more: nothing is reported. */
static void stopped_process_not_reported(void **state)
{
    (void)state;
    int in_call[2], go_on[2];
    assert_int_equal(pipe(in_call), 0);
    assert_int_equal(pipe(go_on), 0);
    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0) {
        char b = 0;
        if (owd_start(1000, record, &seen)) _exit(2);
        for (int i = 0; i < 2; i++) {
            owd_enter("fi_stopped");
            if (write(in_call[1], "x", 1) != 1) _exit(5);
            spin_cpu_ms(50);
            owd_leave();
            if (read(go_on[0], &b, 1) != 1) _exit(6);
        }
        owd_stop();
        _exit(reports() ? 3 : 0);
    }
    for (int i = 0; i < 2; i++) {
        char b;
        assert_int_equal(read(in_call[0], &b, 1), 1);
        assert_int_equal(kill(c, SIGSTOP), 0);
        sleep_ms(2000);
        assert_int_equal(kill(c, SIGCONT), 0);
        assert_int_equal(write(go_on[1], "x", 1), 1);
    }
    int status;
    assert_int_equal(waitpid(c, &status, 0), c);
    for (int i = 0; i < 2; i++) {
        close(in_call[i]);
        close(go_on[i]);
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* owd_start and owd_stop from two threads at once, many times: each stop
 * ends the thread it let go, also when a start came in between. */
static void *start_stop(void *arg)
{
    (void)arg;
    for (int i = 0; i < 500; i++) {
        if (owd_start(1000, record, &seen)) return (void *)1;
        owd_stop();
    }
    return NULL;
}

static void start_stop_race_ends(void **state)
{
    (void)state;
    pthread_t t[2];
    void *rc[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, start_stop, NULL), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(t[i], &rc[i]), 0);
        assert_null(rc[i]);
    }
    assert_int_equal(reports(), 0);
}

/* Calls of 30% of the timeout back to back, for four timeouts: every look
 * finds a call running, never the same one for long enough. */
static void back_to_back_calls_not_reported(void **state)
{
    (void)state;
    assert_int_equal(owd_start(1000, record, &seen), 0);
    for (int i = 0; i < 13; i++) {
        owd_enter("fi_back_to_back");
        sleep_ms(300);
        owd_leave();
    }
    owd_stop();
    assert_int_equal(reports(), 0);
}

/* A call after a long idle time is measured from when the watchdog sees
 * it, and reported without peers. */
static void late_call_reported(void **state)
{
    (void)state;
    assert_int_equal(owd_start(200, record, &seen), 0);
    sleep_ms(600);
    assert_int_equal(reports(), 0);
    owd_enter("fi_late");
    assert_int_equal(wait_reports(1), 1);
    owd_leave();
    owd_stop();
    assert_string_equal(seen.call, "fi_late");
    assert_int_equal(seen.gone, 0);
    assert_string_equal(seen.gone_list, "");
}

/* A child forked while the parent's watchdog runs has no watchdog: its
 * owd_stop returns at once and stops nothing, and its own owd_start
 * watches its calls. The parent's watchdog still reports afterwards. */
static void forked_child_watches_its_own(void **state)
{
    (void)state;
    assert_int_equal(owd_start(200, record, &seen), 0);
    owd_enter("fi_at_fork"); /* as if another thread were in a call */
    pid_t c = fork();
    assert_true(c >= 0);
    if (c > 0) owd_leave(); /* long before the timeout */
    if (c == 0) {
        if (owd_busy()) _exit(4);
        owd_stop();
#ifdef UNDER_TSAN
        /* TSan ends a process that starts threads after a fork of a
         * multi-threaded one: check only that owd_stop returned. */
        _exit(0);
#endif
        reset(NULL);
        if (owd_start(200, record, &seen)) _exit(2);
        owd_enter("fi_in_child");
        unsigned n = wait_reports(1);
        owd_leave();
        owd_stop();
        _exit(n == 1 && !strcmp(seen.call, "fi_in_child") ? 0 : 3);
    }
    int status;
    assert_int_equal(waitpid(c, &status, 0), c);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(reports(), 0); /* the parent left its call */

    owd_enter("fi_in_parent");
    assert_int_equal(wait_reports(1), 1);
    owd_leave();
    owd_stop();
    assert_string_equal(seen.call, "fi_in_parent");
}

/* Many peers: the list is cut with a count of those left out, never
 * overflowing. */
static void long_gone_list_cut(void **state)
{
    (void)state;
    enum { N = 40 };
    pid_t gone = dead_pid();
    char name[128];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "peer-%02d-%0100d", i, 0);
        assert_int_equal(owd_peer_add(&keys[i], gone, name), 0);
    }
    assert_int_equal(owd_start(100, record, &seen), 0);
    owd_enter("fi_many");
    assert_int_equal(wait_reports(1), 1);
    owd_leave();
    owd_stop();
    assert_int_equal(seen.peers, N);
    assert_int_equal(seen.gone, N);
    assert_non_null(strstr(seen.gone_list, "peer-00-"));
    assert_null(strstr(seen.gone_list, "peer-39-"));
    assert_non_null(strstr(seen.gone_list, " more"));
}

#define T(f) cmocka_unit_test_setup_teardown(f, reset, cleanup)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(stalled_call_reported_once),
        T(calls_in_time_not_reported),
        T(back_to_back_calls_not_reported),
        T(stopped_process_not_reported),
        T(start_stop_race_ends),
        T(late_call_reported),
        T(forked_child_watches_its_own),
        T(long_gone_list_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
