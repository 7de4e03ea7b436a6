/*
 * A descriptor removed by a callback and replaced by a new one of the same
 * number in the same batch of events: the old one's events left in the
 * batch must not reach the new one's callback.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <cmocka.h>

#include "pscom.h"
#include "pscom_plugin.h"

/* Two pipes, both readable: one batch brings both read ends. The first
 * callback to run replaces the other read end by an empty pipe's, under
 * the same number; the second event of the batch is then the old one's. */
static int rd[2], wr[2];
static int replaced = -1;   /* index of the read end replaced */
static int new_calls;       /* calls of the replacement's callback */
static uint32_t new_events;

static void on_new(int fd, uint32_t events, void *arg)
{
    (void)fd;
    (void)arg;
    new_calls++;
    new_events = events;
}

static void on_old(int fd, uint32_t events, void *arg)
{
    (void)events;
    int me = (int)(intptr_t)arg, other = 1 - me;
    char c;
    assert_int_equal(read(fd, &c, 1), 1);
    if (replaced >= 0) return;
    replaced = other;
    pscom_plugin_fd_del(rd[other]);
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    assert_int_equal(dup2(p[0], rd[other]), rd[other]); /* closes the old */
    close(p[0]);
    close(wr[other]);
    wr[other] = p[1];
    assert_int_equal(pscom_plugin_fd_add(rd[other], EPOLLIN, 1, on_new, NULL),
                     0);
}

static void stale_event_skips_new_registration(void **state)
{
    (void)state;
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    for (int i = 0; i < 2; i++) {
        int p[2];
        assert_int_equal(pipe2(p, O_NONBLOCK), 0);
        rd[i] = p[0];
        wr[i] = p[1];
        assert_int_equal(write(wr[i], "x", 1), 1);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pscom_plugin_fd_add(rd[i], EPOLLIN, 1, on_old,
                                             (void *)(intptr_t)i), 0);

    for (int round = 0; round < 100 && replaced < 0; round++) pscom_test_any();
    assert_true(replaced >= 0);
    for (int round = 0; round < 100; round++) pscom_test_any();
    /* Its pipe is empty: nothing may have told it of input. */
    assert_int_equal(new_calls, 0);

    /* It still gets its own events. */
    assert_int_equal(write(wr[replaced], "y", 1), 1);
    for (int round = 0; round < 100 && !new_calls; round++) pscom_test_any();
    assert_int_equal(new_calls, 1);
    assert_true(new_events & EPOLLIN);

    pscom_plugin_fd_del(rd[0]);
    pscom_plugin_fd_del(rd[1]);
    for (int i = 0; i < 2; i++) {
        close(rd[i]);
        close(wr[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stale_event_skips_new_registration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
