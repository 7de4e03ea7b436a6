/*
 * The sender's side of the rendezvous protocol with an asynchronous
 * transport: the receiver's answer (RNDV_CTS, or RNDV_FIN after a pull)
 * may arrive before the transport reported the announcement (RNDV_REQ)
 * written. A plugin that reports frames in queue order (ofi: a frame
 * injected behind a large send still in flight) sees this whenever the
 * peer answers faster than the earlier send completes.
 *
 * The connection has no transport: the test plays the plugin through the
 * same upcalls (tx_peek, tx_done, rx_push).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

#define BODY_LEN 4096

static pscom_socket_t *sock;
static pscom_connection_t *con;
static char body[BODY_LEN];

static int setup(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    sock = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(sock);
    return 0;
}

static int teardown(void **state)
{
    pscom_close_socket(sock);
    return 0;
}

static int con_setup(void **state)
{
    con = pscom_open_connection(sock);
    assert_non_null(con);
    con_of(con)->rndv_threshold = 1024;
    memset(body, 'b', sizeof(body));
    return 0;
}

static int con_teardown(void **state)
{
    pscom_close_connection(con);
    return 0;
}

/* A rendezvous send, queued. */
static pscom_request_t *post_rndv_send_queued(void)
{
    pscom_request_t *r = pscom_request_create(4, 0);
    uint32_t tag = 42;
    pscom_req_prepare(r, con, body, BODY_LEN, &tag, sizeof(tag));
    pscom_post_send(r);
    return r;
}

/* Peek at the frame the plugin is to send next into iov[4]: it has n_iov
 * pieces and the message type `type`; its header, and its length in
 * *total. */
static const pscom_header_net_t *peek_frame(struct iovec *iov, int n_iov,
                                            uint8_t type, size_t *total)
{
    *total = 0;
    int n = pscom_plugin_tx_peek(con_of(con), iov, 4, total);
    assert_int_equal(n, n_iov);
    const pscom_header_net_t *h = iov[0].iov_base;
    assert_int_equal(h->msg_type, type);
    return h;
}

/* A rendezvous send, handed to the "transport" (peeked) but not reported
 * written. */
static pscom_request_t *post_rndv_send(size_t *frame_len)
{
    pscom_request_t *r = post_rndv_send_queued();
    struct iovec iov[4];
    peek_frame(iov, 1, PSC_MSG_RNDV_REQ, frame_len);
    return r;
}

/* The upcall's result for a control message from the peer. */
static int feed_control(uint8_t type, const void *x, size_t xlen)
{
    struct frame f;
    frame_make(&f, type, x, xlen, NULL, 0, 0);
    return pscom_plugin_rx_push(con_of(con), f.buf, f.len);
}

static int feed_cts(uint64_t sender_id, uint64_t receiver_id)
{
    struct psc_rndv_cts cts = {.sender_id = sender_id,
                               .receiver_id = receiver_id};
    return feed_control(PSC_MSG_RNDV_CTS, &cts, sizeof(cts));
}

/* The connection failed, and with it the send. */
static void expect_failed(pscom_request_t *r)
{
    assert_true(con_of(con)->failed);
    assert_true(pscom_req_is_done(r));
    assert_false(pscom_req_successful(r));
}

/* The frame the plugin is to send next: the rendezvous data for
 * receiver_id, with the whole body. Reported written, it completes r. */
static void expect_data_frame(pscom_request_t *r, uint64_t receiver_id)
{
    struct iovec iov[4];
    size_t total;
    const pscom_header_net_t *h =
        peek_frame(iov, 2, PSC_MSG_RNDV_DATA, &total);
    assert_int_equal(h->data_len, BODY_LEN);
    struct psc_rndv_data_hdr dh;
    memcpy(&dh, h + 1, sizeof(dh));
    assert_int_equal(dh.receiver_id, receiver_id);
    assert_ptr_equal(iov[1].iov_base, body);
    assert_int_equal(iov[1].iov_len, BODY_LEN);

    assert_false(pscom_req_is_done(r));
    assert_int_equal(pscom_plugin_tx_done(con_of(con), total), 0);
    assert_true(pscom_req_successful(r));
}

static void cts_after_req_written(void **state)
{
    size_t len;
    pscom_request_t *r = post_rndv_send(&len);
    assert_int_equal(pscom_plugin_tx_done(con_of(con), len), 0);
    assert_int_equal(feed_cts(req_of(r)->id, 7), 0);
    expect_data_frame(r, 7);
    pscom_request_free(r);
}

static void cts_before_req_reported(void **state)
{
    size_t len;
    pscom_request_t *r = post_rndv_send(&len);
    /* The answer overtakes the report of the announcement. */
    assert_int_equal(feed_cts(req_of(r)->id, 9), 0);
    assert_false(con_of(con)->failed);
    assert_false(pscom_req_is_done(r));

    /* Only once the announcement is reported does the data follow. */
    assert_int_equal(pscom_plugin_tx_done(con_of(con), len), 0);
    expect_data_frame(r, 9);
    pscom_request_free(r);
}

static void fin_before_req_reported(void **state)
{
    size_t len;
    pscom_request_t *r = post_rndv_send(&len);
    struct psc_rndv_fin fin = {.sender_id = req_of(r)->id};
    assert_int_equal(feed_control(PSC_MSG_RNDV_FIN, &fin, sizeof(fin)), 0);
    assert_false(con_of(con)->failed);
    /* The transport may still read the announcement: not done yet. */
    assert_false(pscom_req_is_done(r));

    assert_int_equal(pscom_plugin_tx_done(con_of(con), len), 0);
    assert_true(pscom_req_successful(r));
    assert_true(psc_list_empty(&con_of(con)->sendq));
    pscom_request_free(r);
}

/* An answer to an announcement the transport was never given cannot come
 * from a correct peer. */
static void cts_for_unsent_req_fails(void **state)
{
    pscom_request_t *r = post_rndv_send_queued();
    assert_int_equal(feed_cts(req_of(r)->id, 1), -1);
    expect_failed(r);
    pscom_request_free(r);
}

static void two_cts_for_one_send_fail(void **state)
{
    size_t len;
    pscom_request_t *r = post_rndv_send(&len);
    assert_int_equal(feed_cts(req_of(r)->id, 3), 0);
    assert_int_equal(feed_cts(req_of(r)->id, 4), -1);
    expect_failed(r);
    pscom_request_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(cts_after_req_written, con_setup,
                                        con_teardown),
        cmocka_unit_test_setup_teardown(cts_before_req_reported, con_setup,
                                        con_teardown),
        cmocka_unit_test_setup_teardown(fin_before_req_reported, con_setup,
                                        con_teardown),
        cmocka_unit_test_setup_teardown(cts_for_unsent_req_fails, con_setup,
                                        con_teardown),
        cmocka_unit_test_setup_teardown(two_cts_for_one_send_fail, con_setup,
                                        con_teardown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
