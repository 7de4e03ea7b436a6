/*
 * A large send failed by its close's timeout gives its buffer back to the
 * application, which writes it again at once; the receiver, which did not
 * progress meanwhile, must then not complete a receive with those bytes.
 *
 * B connects twice to A. A posts a send of 1 MiB on the first connection
 * and closes it with PSP_SHUTDOWN_TIMEOUT=200 while B makes no progress:
 * the send cannot end. A tells B and goes on making progress; the second
 * connection stays open, so what the transport keeps per socket (a UCX
 * worker, an ofi endpoint) lives on. As soon as the send is done (failed),
 * A fills the buffer with other bytes, as an application may. That is at
 * once where the transport can withdraw the send, and only once it has
 * let go of the buffer where it cannot. B only now posts its receive. The
 * receive may fail (the connection ended) or deliver the message A sent,
 * never the bytes written after the send was done.
 *
 * With CLOSE_TIMEOUT_LAST set, A closes the second connection before the
 * first: the connection that gives up on the send is the last of its
 * transport, which must still see its send through. The ofi plugin lent
 * such a send to the core and was then no longer progressed: the send never
 * ended, and over tcp;ofi_rxm B never got the message.
 *
 * Transports whose receiver copies straight from the sender's memory (shm
 * with cross-memory attach, ofi's pull mode) delivered the new bytes: their
 * description of the buffer outlived the send; so did ucx and ofi over tcp,
 * whose sends went on reading the buffer after it was reported failed.
 */
#include "itest.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define LEN (1u << 20)

static void say_hello(pscom_connection_t *con, uint32_t seed)
{
    char hello[8];
    itest_fill(hello, sizeof(hello), seed);
    pscom_send(con, NULL, 0, hello, sizeof(hello));
}

/* Receive the next 8-byte message of con; its seed (2 or 3). */
static uint32_t hello_seed(pscom_connection_t *con)
{
    char hello[8];
    pscom_request_t *h = itest_request(0);
    pscom_req_prepare(h, con, hello, sizeof(hello), NULL, 0);
    pscom_post_recv(h);
    pscom_wait(h);
    ITEST_ASSERT_REQ_OK(h, "hello");
    pscom_request_free(h);
    for (uint32_t seed = 2; seed <= 3; seed++)
        if (itest_pattern_mismatch(hello, sizeof(hello), seed) < 0)
            return seed;
    ITEST_FAIL("a hello of neither connection");
    return 0;
}

static int sender(itest_link_t *link, void *arg)
{
    (void)arg;
    setenv("PSP_SHUTDOWN_TIMEOUT", "200", 1);
    pscom_socket_t *sock;
    itest_accept_peer(link, "A", &sock);
    itest_wait_accept(2);
    /* One small message each way first: libfabric's shm provider sends to
     * a peer only after that peer has answered its first contact. B's
     * hello on the connection to close has seed 2, on the other 3. */
    pscom_connection_t *con = itest_accepted(0), *keep = itest_accepted(1);
    if (hello_seed(con) != 2) {
        con = itest_accepted(1);
        keep = itest_accepted(0);
    }
    ITEST_ASSERT_EQ(hello_seed(keep), 3, "the other connection's hello");
    say_hello(con, 1);
    if (getenv("CLOSE_TIMEOUT_LAST")) {
        itest_step("closing the other connection first");
        pscom_close_connection(keep);
    }
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
    itest_note("send after the close: %s", pscom_req_state_str(r->state));
    itest_link_send_u64(link, 0);
    itest_step("progressing until the receiver's verdict");
    bool written = false;
    for (;;) {
        /* A send that is done gives its buffer back. */
        if (!written && pscom_req_is_done(r)) {
            memset(buf, 'X', LEN);
            written = true;
        }
        if (itest_link_ready(link, 0)) break;
        itest_progress_once();
    }
    itest_link_recv_u64(link);
    /* (It may also have succeeded: the transport took it all in time.) */
    ITEST_PROGRESS_UNTIL(pscom_req_is_done(r));
    itest_note("send at the end: %s", pscom_req_state_str(r->state));
    pscom_request_free(r);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

static int receiver(itest_link_t *link, void *arg)
{
    (void)arg;
    itest_pscom_init();
    pscom_socket_t *sock = itest_open_socket("B", 0);
    char *ep = itest_link_recv_str(link);
    pscom_connection_t *con = itest_connect(sock, ep);
    pscom_connection_t *keep = itest_connect(sock, ep);
    free(ep);
    say_hello(con, 2);
    say_hello(keep, 3);
    char hello[8];
    pscom_request_t *h = itest_request(0);
    ITEST_RECV_PATTERN(h, con, hello, sizeof(hello), 1, "A's hello");
    pscom_request_free(h);
    /* Until the sends have gone out: no progress after this. */
    itest_progress_ms(100);
    itest_link_send_u64(link, 0);
    itest_link_recv_u64(link); /* A closed */
    itest_sleep_ms(100); /* A progresses meanwhile */
    char *buf = itest_alloc_guarded(LEN);
    pscom_request_t *r = itest_request(0);
    pscom_req_prepare(r, con, buf, LEN, NULL, 0);
    itest_step("receiving after the sender's close");
    pscom_post_recv(r);
    pscom_wait(r);
    itest_note("receive: %s", pscom_req_state_str(r->state));
    if (pscom_req_successful(r)) {
        ITEST_ASSERT_EQ(r->header.data_len, LEN, "received length");
        ITEST_ASSERT_PATTERN(buf, LEN, 7, "the message received");
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
    itest_link_send_u64(&b.link, itest_link_recv_u64(&a.link)); /* closed */
    itest_link_send_u64(&a.link, itest_link_recv_u64(&b.link)); /* verdict */
    return itest_children_check((itest_child_t *[]){&a, &b}, 2);
}
