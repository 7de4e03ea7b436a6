/*
 * The socket-close watch (pscom_plugin_sock_watch): it runs once, inside
 * the close of its own socket and before that socket's connections close;
 * pscom_plugin_sock_unwatch forgets it; closing every socket at once runs
 * the watches of each.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "pscom.h"
#include "pscom_plugin.h"

struct seen {
    int calls;
    pscom_socket_t *socket;
    pscom_connection_t *con;       /* read in the callback, if set */
    pscom_con_state_t con_state;   /* its state then */
    int order;                     /* of this call among all calls */
};

static int calls_so_far;

static void on_close(pscom_socket_t *socket, void *arg)
{
    struct seen *seen = arg;
    seen->calls++;
    seen->socket = socket;
    seen->order = ++calls_so_far;
    if (seen->con) seen->con_state = seen->con->state;
}

static pscom_connection_t *accepted;

static void on_accept(pscom_connection_t *c)
{
    accepted = c;
}

/* A socket with a connection to itself. */
static pscom_socket_t *connected_socket(pscom_connection_t **con)
{
    char *ep = NULL;
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(s);
    s->ops.con_accept = on_accept;
    assert_int_equal(pscom_listen(s, PSCOM_ANYPORT), PSCOM_SUCCESS);
    assert_int_equal(pscom_socket_get_ep_str(s, &ep), PSCOM_SUCCESS);
    *con = pscom_open_connection(s);
    accepted = NULL;
    assert_int_equal(pscom_connect(*con, ep, 0, PSCOM_CON_FLAG_DIRECT),
                     PSCOM_SUCCESS);
    while (!accepted) pscom_test_any();
    pscom_socket_free_ep_str(ep);
    return s;
}

static int setup(void **state)
{
    (void)state;
    calls_so_far = 0;
    return pscom_init(PSCOM_VERSION) == PSCOM_SUCCESS ? 0 : -1;
}

static void runs_once_before_the_connections_close(void **state)
{
    (void)state;
    pscom_connection_t *con;
    pscom_socket_t *s = connected_socket(&con);
    struct seen first = {.con = con}, second = {0};
    assert_int_equal(pscom_plugin_sock_watch(s, on_close, &first), 0);
    assert_int_equal(pscom_plugin_sock_watch(s, on_close, &second), 0);

    pscom_close_socket(s);
    assert_int_equal(first.calls, 1);
    assert_ptr_equal(first.socket, s);
    assert_int_equal(first.con_state, PSCOM_CON_STATE_RW);
    assert_int_equal(second.calls, 1);
    assert_int_equal(first.order, 1); /* in the order they were made */
    assert_int_equal(second.order, 2);

    /* Gone once run: closing everything calls neither again. */
    pscom_close_socket(NULL);
    assert_int_equal(first.calls, 1);
    assert_int_equal(second.calls, 1);
}

static void unwatched_does_not_run(void **state)
{
    (void)state;
    pscom_socket_t *a = pscom_open_socket(0, 0, 0, 0);
    pscom_socket_t *b = pscom_open_socket(0, 0, 1, 0);
    struct seen seen_a = {0}, seen_b = {0};
    assert_int_equal(pscom_plugin_sock_watch(a, on_close, &seen_a), 0);
    assert_int_equal(pscom_plugin_sock_watch(b, on_close, &seen_b), 0);
    assert_int_equal(pscom_plugin_sock_watch(b, on_close, &seen_a), 0);

    /* Both of seen_a's watches go, on whichever socket. */
    pscom_plugin_sock_unwatch(on_close, &seen_a);
    pscom_close_socket(a);
    assert_int_equal(seen_a.calls, 0);
    assert_int_equal(seen_b.calls, 0); /* not b's close */

    pscom_close_socket(NULL); /* every socket: b */
    assert_int_equal(seen_a.calls, 0);
    assert_int_equal(seen_b.calls, 1);
    assert_ptr_equal(seen_b.socket, b);

    /* Nothing left to forget: harmless. */
    pscom_plugin_sock_unwatch(on_close, &seen_b);
}

static void bad_arguments_refused(void **state)
{
    (void)state;
    struct seen seen = {0};
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, 0);
    assert_int_equal(pscom_plugin_sock_watch(NULL, on_close, &seen), -EINVAL);
    assert_int_equal(pscom_plugin_sock_watch(s, NULL, &seen), -EINVAL);
    pscom_close_socket(s);
    assert_int_equal(seen.calls, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(runs_once_before_the_connections_close, setup),
        cmocka_unit_test_setup(unwatched_does_not_run, setup),
        cmocka_unit_test_setup(bad_arguments_refused, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
