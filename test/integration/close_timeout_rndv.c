/*
 * A large send failed by its close's timeout gives its buffer back to the
 * application, which writes it again at once; the receiver, which did not
 * progress meanwhile, must then not complete a receive with those bytes.
 *
 * A (the sender) posts a send of 1 MiB to B and closes the connection with
 * PSP_SHUTDOWN_TIMEOUT=200 while B makes no progress: the send cannot end
 * and fails. A then fills the buffer with other bytes and tells B, which
 * only now posts its receive. The receive may fail (the connection ended)
 * or deliver the message A sent, never the bytes written after the failure.
 *
 * Transports whose receiver copies straight from the sender's memory (shm
 * with cross-memory attach, ofi's pull mode) delivered the new bytes: their
 * description of the buffer outlived the send's failure.
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>

#define LEN (1u << 20)

static int sender(itest_link_t *link, void *arg)
{
    (void)arg;
    setenv("PSP_SHUTDOWN_TIMEOUT", "200", 1);
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_accept_peer(link, "A", &sock);
    /* One small message each way first: libfabric's shm provider sends to
     * a peer only after that peer has answered its first contact. */
    char hello[8];
    itest_fill(hello, sizeof(hello), 1);
    pscom_send(con, NULL, 0, hello, sizeof(hello));
    pscom_request_t *h = itest_request(0);
    ITEST_RECV_PATTERN(h, con, hello, sizeof(hello), 2, "B's hello");
    pscom_request_free(h);
    itest_link_recv_u64(link); /* B stops making progress now */
    char *buf = malloc(LEN);
    ITEST_ASSERT(buf, "allocation");
    itest_fill(buf, LEN, 7);
    pscom_request_t *r = itest_request(0);
    pscom_req_prepare(r, con, buf, LEN, NULL, 0);
    pscom_post_send(r);
    itest_progress_ms(100); /* what the transport sends at once is out */
    itest_step("closing with the send pending");
    pscom_close_connection(con);
    ITEST_ASSERT(pscom_req_is_done(r), "the send is not done after the close "
                 "(state %s)", pscom_req_state_str(r->state));
    int failed = !pscom_req_successful(r);
    itest_note("send after the close: %s", pscom_req_state_str(r->state));
    /* A failed send's buffer is the application's again. */
    if (failed) memset(buf, 'X', LEN);
    itest_link_send_u64(link, (uint64_t)failed);
    itest_step("waiting for the receiver's verdict");
    itest_link_recv_u64(link);
    pscom_request_free(r);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

static int receiver(itest_link_t *link, void *arg)
{
    (void)arg;
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_connect_to_peer(link, "B", &sock);
    char hello[8];
    pscom_request_t *h = itest_request(0);
    ITEST_RECV_PATTERN(h, con, hello, sizeof(hello), 1, "A's hello");
    pscom_request_free(h);
    itest_fill(hello, sizeof(hello), 2);
    pscom_send(con, NULL, 0, hello, sizeof(hello));
    /* Until the send has gone out: no progress after this. */
    itest_progress_ms(100);
    itest_link_send_u64(link, 0);
    uint64_t send_failed = itest_link_recv_u64(link);
    char *buf = itest_alloc_guarded(LEN);
    pscom_request_t *r = itest_request(0);
    pscom_req_prepare(r, con, buf, LEN, NULL, 0);
    itest_step("receiving after the sender's close");
    pscom_post_recv(r);
    pscom_wait(r);
    itest_note("receive: %s (the send %s)", pscom_req_state_str(r->state),
               send_failed ? "failed" : "succeeded");
    if (pscom_req_successful(r)) {
        ITEST_ASSERT_EQ(r->header.data_len, LEN, "received length");
        ITEST_ASSERT_PATTERN(buf, LEN, 7, "the message received");
    } else {
        ITEST_ASSERT(send_failed, "the send succeeded, the receive failed");
    }
    ITEST_ASSERT_GUARD(buf, LEN, "the receive");
    itest_link_send_u64(link, 0);
    pscom_request_free(r);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_watchdog(ITEST_DEFAULT_TIMEOUT);
    itest_child_t a, b;
    itest_spawn(&a, "A", sender, NULL);
    itest_spawn(&b, "B", receiver, NULL);
    itest_link_relay(&a.link, &b.link);                       /* endpoint */
    itest_link_send_u64(&a.link, itest_link_recv_u64(&b.link)); /* connected */
    itest_link_send_u64(&b.link, itest_link_recv_u64(&a.link)); /* reused */
    itest_link_send_u64(&a.link, itest_link_recv_u64(&b.link)); /* verdict */
    return itest_children_check((itest_child_t *[]){&a, &b}, 2);
}
