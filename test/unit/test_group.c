/*
 * Group messages (pscom_post_bcast) at a rank that is not the root, fed
 * into connections without a transport: the broadcast is carried out by
 * a receive of the group's own, so the user's request is in no queue.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

#define GROUP 7
#define MAX_MEMBERS 2

static pscom_socket_t *sock;
static pscom_connection_t *parent;
static pscom_connection_t *cons[MAX_MEMBERS];
static pscom_group_t *group;

/* Rank 1 of n; the others are behind fresh connections. Rank 0 is the
 * root and our parent. */
static void open_members(uint32_t n)
{
    sock = pscom_open_socket(0, 0, 0, 0);
    for (uint32_t i = 0; i < n; i++)
        cons[i] = i == 1 ? NULL : pscom_open_connection(sock);
    parent = cons[0];
    group = pscom_group_open(sock, GROUP, 1, n, cons);
    assert_non_null(group);
}

/* Rank 1 of two. */
static int open_group(void **state)
{
    (void)state;
    open_members(2);
    return 0;
}

static int close_group(void **state)
{
    (void)state;
    pscom_group_close(group);
    pscom_close_socket(sock);
    return 0;
}

static unsigned done_calls;

static void count_done(pscom_request_t *r)
{
    (void)r;
    done_calls++;
}

static char buf[16];

static pscom_request_t *post_bcast(void)
{
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_bcast_t), 0);
    r->socket = sock;
    r->data = buf;
    r->data_len = sizeof(buf);
    r->xheader_len = sizeof(pscom_xheader_bcast_t);
    r->xheader.bcast.group_id = GROUP;
    r->xheader.bcast.bcast_root = 0;
    r->ops.io_done = count_done;
    memset(buf, 0, sizeof(buf));
    done_calls = 0;
    pscom_post_bcast(r);
    return r;
}

/* The root's broadcast, "hello", for a subtree of one. */
static void bcast_frame(struct frame *f)
{
    pscom_xheader_bcast_t x = {.group_id = GROUP, .bcast_root = 0,
                               .bcast_arg1 = 1};
    frame_make(f, PSC_MSG_BCAST, &x, sizeof(x), "hello", 6, 6);
}

/* A broadcast posted now takes the "hello" that waits for it. */
static void later_bcast_gets_hello(void)
{
    pscom_request_t *r = post_bcast();
    pscom_test_any();
    assert_int_equal(done_calls, 1);
    assert_true(pscom_req_successful(r));
    assert_string_equal(buf, "hello");
    pscom_request_free(r);
}

/* Cancelling it is refused: the message that comes later completes it
 * once, into the buffer the caller still owns. (It used to be reported
 * cancelled, and then completed again when the message came.) */
static void bcast_is_not_cancelled(void **state)
{
    (void)state;
    pscom_request_t *r = post_bcast();
    assert_int_equal(pscom_cancel(r), 0);
    assert_int_equal(pscom_cancel_recv(r), 0);
    assert_int_equal(done_calls, 0);
    struct frame f;
    bcast_frame(&f);
    assert_int_equal(feed(parent, &f), 0);
    pscom_test_any();
    assert_int_equal(done_calls, 1);
    assert_true(pscom_req_successful(r));
    assert_false(r->state & PSCOM_REQ_STATE_CANCELED);
    assert_string_equal(buf, "hello");
    pscom_request_free(r);
}

/* A broadcast and the root's EOF in one read of the transport (inside the
 * core's hold, as in a plugin's progress op): the message arrived whole,
 * so it stays receivable after the failure, as a point-to-point one does,
 * and the broadcast posted later takes it. (It used to be dropped.) */
static void message_before_the_eof_stays(void **state)
{
    (void)state;
    struct frame f, eof;
    bcast_frame(&f);
    frame_make(&eof, PSC_MSG_EOF, NULL, 0, NULL, 0, 0);
    memcpy(f.buf + f.len, eof.buf, eof.len);
    f.len += eof.len;
    psc_hold();
    feed(parent, &f);
    psc_unhold();
    pscom_test_any();
    assert_int_equal(parent->state, PSCOM_CON_STATE_CLOSED);
    later_bcast_gets_hello();
}

/* The same when the connection fails after the message was in (the
 * failure used to drop it). */
static void message_before_a_failure_stays(void **state)
{
    (void)state;
    struct frame f;
    bcast_frame(&f);
    assert_int_equal(feed(parent, &f), 0);
    assert_int_equal(pscom_fail_connection(parent, PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    later_bcast_gets_hello();
}

/* A broadcast whose message never came fails with the connection. */
static void failure_without_message_fails(void **state)
{
    (void)state;
    assert_int_equal(pscom_fail_connection(parent, PSCOM_ERR_IOERROR),
                     PSCOM_SUCCESS);
    pscom_request_t *r = post_bcast();
    assert_int_equal(done_calls, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
}

/* Closing the connection drops the message (no receive took it) and the
 * group forgets the connection: the broadcast posted later fails at once,
 * without touching the freed connection (valgrind). */
static void message_goes_with_the_close(void **state)
{
    (void)state;
    struct frame f;
    bcast_frame(&f);
    assert_int_equal(feed(parent, &f), 0);
    pscom_close_connection(parent);
    pscom_test_any();
    pscom_request_t *r = post_bcast();
    assert_int_equal(done_calls, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_string_equal(buf, "");
    pscom_request_free(r);
}

/* Closing a socket takes its groups with it: they are found no more, the
 * id can be opened again on another socket, their collectives fail
 * cleanly, and pscom_group_close frees them. */
static void socket_close_retires_its_groups(void **state)
{
    (void)state;
    pscom_socket_t *s1 = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *c[2] = {NULL, pscom_open_connection(s1)};
    pscom_group_t *g1 = pscom_group_open(s1, GROUP, 0, 1, NULL);
    pscom_group_t *g2 = pscom_group_open(s1, GROUP + 1, 0, 2, c);
    assert_non_null(g1);
    assert_non_null(g2);
    assert_ptr_equal(pscom_group_find(NULL, GROUP), g1);
    pscom_close_socket(s1);
    assert_null(pscom_group_find(NULL, GROUP));
    assert_null(pscom_group_find(NULL, GROUP + 1));

    pscom_socket_t *s2 = pscom_open_socket(0, 0, 0, 0);
    pscom_group_t *g3 = pscom_group_open(s2, GROUP, 0, 1, NULL);
    assert_non_null(g3);
    assert_ptr_equal(pscom_group_find(s2, GROUP), g3);
    assert_ptr_equal(pscom_group_find(NULL, GROUP), g3);

    char data[4] = "abc";
    pscom_bcast(g2, 0, NULL, 0, data, sizeof(data));
    pscom_barrier(g2);
    pscom_bcast(g1, 0, NULL, 0, data, sizeof(data));
    assert_int_equal(pscom_group_get_id(g2), GROUP + 1);
    pscom_group_close(g1);
    pscom_group_close(g2);
    pscom_group_close(g3);
    pscom_close_socket(s2);
}

int main(void)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(bcast_is_not_cancelled, open_group,
                                        close_group),
        cmocka_unit_test_setup_teardown(message_before_the_eof_stays,
                                        open_group, close_group),
        cmocka_unit_test_setup_teardown(message_before_a_failure_stays,
                                        open_group, close_group),
        cmocka_unit_test_setup_teardown(failure_without_message_fails,
                                        open_group, close_group),
        cmocka_unit_test_setup_teardown(message_goes_with_the_close,
                                        open_group, close_group),
        cmocka_unit_test(socket_close_retires_its_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
