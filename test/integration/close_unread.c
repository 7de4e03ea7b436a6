/*
 * Closing a tcp connection while the peer's last message is still unread
 * in the socket loses nothing of what we sent before.
 *
 * A sends a message of 512 KiB with a large send buffer (PSP_TCP_SNDBUF):
 * the send is done once the kernel has it, most of it still queued, since
 * B (with a small PSP_TCP_RCVBUF) does not read for a while. B sends A a
 * small message, which A never receives, and A closes the connection (or,
 * with CLOSE_UNREAD_EXIT=1, closes it and exits at once); B sends another
 * small one after the close, before it reads again. A plain close()
 * of a socket with bytes unread makes the kernel send a reset, which
 * throws away the queued tail of A's message: B's receive then failed with
 * a reset (ECONNRESET) before the socket lingered (lib/pscom/linger.c).
 *
 * Checked: A's send succeeded, B receives the whole message intact, and B
 * then sees the connection end (a receive posted after fails, no hang).
 */
#include "itest.h"

#include <stdlib.h>

#define BIG  (512 * 1024)
#define SEED 7

static int sender(itest_link_t *link, void *arg)
{
    (void)arg;
    setenv("PSP_TCP_SNDBUF", "2M", 1);
    pscom_socket_t *s;
    pscom_connection_t *con = itest_accept_peer(link, "A", &s);
    char *buf = malloc(BIG);
    ITEST_ASSERT(buf, "allocation");
    itest_fill(buf, BIG, SEED);
    pscom_request_t *r = itest_request(0);
    pscom_req_prepare(r, con, buf, BIG, NULL, 0);
    pscom_post_send(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "A's send of %d bytes", BIG);
    itest_sleep_ms(600); /* B's small message arrives and stays unread */
    pscom_close_connection(con);
    pscom_request_free(r);
    free(buf); /* the kernel has it */
    if (getenv("CLOSE_UNREAD_EXIT")) return 0; /* the exit handler's turn */
    itest_sleep_ms(2000);
    pscom_close_socket(s);
    return 0;
}

static int receiver(itest_link_t *link, void *arg)
{
    (void)arg;
    setenv("PSP_TCP_RCVBUF", "64k", 1);
    pscom_socket_t *s;
    pscom_connection_t *con = itest_connect_to_peer(link, "B", &s);
    char small[8] = "unread";
    pscom_request_t *r = itest_request(0);
    for (int i = 0; i < 2; i++) {
        /* The first before A's close, the second after it (when A, with
         * CLOSE_UNREAD_EXIT, is in its exit handler). */
        itest_sleep_ms(i ? 600 : 300);
        pscom_req_prepare(r, con, small, sizeof(small), NULL, 0);
        pscom_post_send(r);
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "B's small send %d", i);
    }
    itest_sleep_ms(400); /* B has not read since A's close */

    char *buf = calloc(1, BIG);
    ITEST_ASSERT(buf, "allocation");
    pscom_request_t *q = itest_request(0);
    ITEST_RECV_PATTERN(q, con, buf, BIG, SEED, "A's message");

    pscom_req_prepare(q, con, buf, BIG, NULL, 0);
    pscom_post_recv(q);
    pscom_wait(q);
    ITEST_ASSERT_REQ_STATE(q, PSCOM_REQ_STATE_ERROR, "a receive after A's "
                           "close");
    pscom_request_free(q);
    pscom_request_free(r);
    pscom_close_socket(s);
    free(buf);
    return 0;
}

int main(void)
{
    setenv("PSCOM_TEST_TRANSPORT", "tcp", 1);
    return itest_run_pair(60, "A", sender, "B", receiver);
}
