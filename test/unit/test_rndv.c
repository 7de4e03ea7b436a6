/*
 * The rendezvous protocol with an asynchronous transport: a clear-to-send
 * that arrives before the transport reported its announcement written.
 *
 * Frames are fed into connections with no transport through the plugin
 * upcalls, and the send queue is read and completed through
 * pscom_plugin_tx_peek/_done as a plugin would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "frames.h"

static pscom_socket_t *sock;
static int errors;
static pscom_err_t last_err;

static void on_error(pscom_connection_t *c, pscom_op_t op, pscom_err_t err)
{
    errors++;
    last_err = err;
}

static int setup(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    pscom_set_debug(0); /* some input is malformed on purpose */
    sock = pscom_open_socket(0, 0, 0, 0);
    sock->ops.con_error = on_error;
    return 0;
}

static int teardown(void **state)
{
    pscom_close_socket(sock);
    return 0;
}

static pscom_connection_t *fresh(void)
{
    errors = 0;
    return pscom_open_connection(sock);
}

/* A message plugin reports frames written in queue order, so the answer to
 * an announcement can come before the announcement is reported written
 * (it was sent behind a large body that is still moving). */
static void clear_to_send_before_the_announcement_was_reported(void **state)
{
    pscom_connection_t *c = fresh();
    struct psc_con *pc = con_of(c);
    static char data[500];
    pc->rndv_threshold = 100;

    pscom_request_t *s = pscom_request_create(4, 0);
    pscom_req_prepare(s, c, data, sizeof(data), "tag!", 4);
    pscom_post_send(s);
    struct iovec iov[4];
    size_t total;
    assert_int_equal(pscom_plugin_tx_peek(pc, iov, 4, &total), 1);
    pscom_header_net_t h;
    memcpy(&h, iov[0].iov_base, sizeof(h));
    assert_int_equal(h.msg_type, PSC_MSG_RNDV_REQ);
    struct psc_rndv_info info;
    memcpy(&info, (char *)iov[0].iov_base + total - sizeof(info),
           sizeof(info));

    /* The answer arrives: the body is sent once the announcement is
     * reported written. */
    struct psc_rndv_cts cts = {.sender_id = info.sender_id, .receiver_id = 42};
    struct frame f;
    frame_make(&f, PSC_MSG_RNDV_CTS, &cts, sizeof(cts), NULL, 0, 0);
    assert_int_equal(feed(c, &f), 0);
    assert_int_equal(errors, 0);
    assert_int_equal(pscom_plugin_tx_done(pc, total), 0);
    assert_int_equal(pscom_plugin_tx_peek(pc, iov, 4, &total), 2);
    memcpy(&h, iov[0].iov_base, sizeof(h));
    assert_int_equal(h.msg_type, PSC_MSG_RNDV_DATA);
    struct psc_rndv_data_hdr dh;
    memcpy(&dh, (char *)iov[0].iov_base + sizeof(h), sizeof(dh));
    assert_int_equal(dh.receiver_id, 42);
    assert_ptr_equal(iov[1].iov_base, data);
    assert_int_equal(pscom_plugin_tx_done(pc, total), 0);
    assert_true(pscom_req_successful(s));

    /* An answer for an announcement never sent is still refused. */
    cts.sender_id += 1000;
    frame_make(&f, PSC_MSG_RNDV_CTS, &cts, sizeof(cts), NULL, 0, 0);
    assert_int_equal(feed(c, &f), -1);
    assert_int_equal(errors, 1);
    assert_int_equal(last_err, PSCOM_ERR_IOERROR);
    pscom_request_free(s);
    pscom_close_connection(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(clear_to_send_before_the_announcement_was_reported),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
