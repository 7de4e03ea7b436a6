/*
 * Group messages (pscom_post_bcast) at a rank that is not the root, fed
 * into a connection without a transport: the broadcast is carried out by
 * a receive of the group's own, so the user's request is in no queue.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

#define GROUP 7

static pscom_socket_t *sock;
static pscom_connection_t *parent;
static pscom_group_t *group;

/* Rank 1 of two; rank 0 (the root) is behind a fresh connection. */
static int open_group(void **state)
{
    (void)state;
    sock = pscom_open_socket(0, 0, 0, 0);
    parent = pscom_open_connection(sock);
    pscom_connection_t *cons[2] = {parent, NULL};
    group = pscom_group_open(sock, GROUP, 1, 2, cons);
    assert_non_null(group);
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
 * core's hold, as in a plugin's progress op): the message is dropped with
 * its connection, as one that was in before the EOF, instead of staying
 * queued for a later broadcast of the group to take. */
static void message_before_the_eof_goes_with_it(void **state)
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
    pscom_request_t *r = post_bcast();
    pscom_test_any();
    assert_int_equal(done_calls, 1);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_string_equal(buf, "");
    pscom_request_free(r);
}

int main(void)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(bcast_is_not_cancelled, open_group,
                                        close_group),
        cmocka_unit_test_setup_teardown(message_before_the_eof_goes_with_it,
                                        open_group, close_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
