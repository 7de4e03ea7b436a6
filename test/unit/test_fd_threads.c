/*
 * The progress engine's table of descriptors with two threads (after
 * pscom_init_thread): one adds and removes descriptors outside any API
 * call, as libpscom_pmix does with its event pipe, while the other's
 * progress dispatches them. The descriptors' numbers climb past 64, 128,
 * 256 and 512, so the table is reallocated under the other thread. Without
 * the library lock around pscom_plugin_fd_add/_mod/_del this fails under
 * ThreadSanitizer (the build of packaging/test.sh). And
 * pscom_plugin_wait_until ending on a flag another thread sets.
 */
#include "pscom.h"
#include "pscom_plugin.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cmocka.h>

#define ROUNDS 300
#define HELD_FDS 8 /* pipes kept open at once */
#define FIRST_FD 16
#define FD_STEP 2 /* the last round's descriptor: 16 + 2 * 299 = 614 */

static int stop;
static unsigned long fired; /* under the library lock (callbacks) */

static void on_readable(int fd, uint32_t events, void *arg)
{
    char buf[16];
    (void)events;
    (void)arg;
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    fired++;
}

static void *progress_thread(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) pscom_test_any();
    return NULL;
}

static void fd_table_with_a_progressing_thread(void **state)
{
    (void)state;
    assert_int_equal(pscom_init_thread(PSCOM_VERSION), PSCOM_SUCCESS);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, progress_thread, NULL), 0);

    int held[HELD_FDS][2];
    for (int i = 0; i < HELD_FDS; i++) held[i][0] = held[i][1] = -1;
    unsigned long wrote = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int *p = held[round % HELD_FDS];
        if (p[0] >= 0) {
            pscom_plugin_fd_del(p[0]);
            close(p[0]);
            close(p[1]);
        }
        assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
        /* The read end moved to a higher number each round. */
        int high = fcntl(p[0], F_DUPFD_CLOEXEC, FIRST_FD + round * FD_STEP);
        assert_true(high >= FIRST_FD + round * FD_STEP);
        close(p[0]);
        p[0] = high;
        assert_int_equal(pscom_plugin_fd_add(p[0], EPOLLOUT, 1, on_readable,
                                             NULL),
                         0);
        assert_int_equal(pscom_plugin_fd_mod(p[0], EPOLLIN), 0);
        assert_int_equal(write(p[1], "x", 1), 1);
        wrote++;
        usleep(100);
    }
    /* Let the other thread see the last ones before they go. */
    usleep(20000);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    for (int i = 0; i < HELD_FDS; i++) {
        pscom_plugin_fd_del(held[i][0]);
        close(held[i][0]);
        close(held[i][1]);
    }
    /* The other thread's progress ran the callbacks: not necessarily for
     * every write (a pipe may go before its turn). */
    assert_true(fired > 0);
    assert_true(fired <= wrote);
}

/* pscom_plugin_wait_until: a condition another thread makes true, with no
 * wake-up at all, ends the wait (it is asked after every round). */
static int flag;

static void *set_flag_later(void *arg)
{
    (void)arg;
    usleep(20000);
    __atomic_store_n(&flag, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int flag_set(void *arg)
{
    return __atomic_load_n((int *)arg, __ATOMIC_ACQUIRE);
}

static int calls;

static int count_calls(void *arg)
{
    (void)arg;
    return ++calls;
}

static void wait_until_a_flag_another_thread_sets(void **state)
{
    (void)state;
    assert_int_equal(pscom_init_thread(PSCOM_VERSION), PSCOM_SUCCESS);
    /* True at once: asked before the first round, once. */
    pscom_plugin_wait_until(count_calls, NULL);
    assert_int_equal(calls, 1);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, set_flag_later, NULL), 0);
    pscom_plugin_wait_until(flag_set, &flag);
    assert_int_equal(__atomic_load_n(&flag, __ATOMIC_ACQUIRE), 1);
    pthread_join(th, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fd_table_with_a_progressing_thread),
        cmocka_unit_test(wait_until_a_flag_another_thread_sets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
