/*
 * A message that the peer sent before it closed the connection is
 * received even when our next write meets the reset its closed socket
 * answers with.
 *
 * A sends M (64 bytes), closes the connection and keeps driving progress:
 * its socket lingers until B's kernel has acknowledged everything, then
 * is closed. B has not read meanwhile. It posts two small sends, 200 ms
 * apart: A's kernel answers the first with a reset, so the second write
 * fails (ECONNRESET or EPIPE). M and A's EOF message are still readable in
 * B's socket: the tcp plugin reads them before it reports the end. Before,
 * the write error failed the connection at once and B's receive of M
 * failed.
 *
 * Checked: A's send succeeded; B receives M intact; B's sends end (done or
 * failed, nothing hangs); then a receive on the connection fails.
 */
#include "itest.h"

#include <stdlib.h>

#define SEED 3

static int sender(itest_link_t *link, void *arg)
{
    (void)arg;
    pscom_socket_t *s;
    pscom_connection_t *con = itest_accept_peer(link, "A", &s);
    char m[64];
    itest_fill(m, sizeof(m), SEED);
    pscom_request_t *r = itest_request(0);
    pscom_req_prepare(r, con, m, sizeof(m), NULL, 0);
    pscom_post_send(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "A's send of M");
    pscom_close_connection(con);
    pscom_request_free(r);
    itest_progress_ms(1500); /* the socket lingers, then is closed */
    pscom_close_socket(s);
    return 0;
}

static int receiver(itest_link_t *link, void *arg)
{
    (void)arg;
    pscom_socket_t *s;
    pscom_connection_t *con = itest_connect_to_peer(link, "B", &s);
    itest_sleep_ms(500); /* M, A's EOF and its FIN arrive, unread */
    char x[8] = "x";
    pscom_request_t *w[2] = {itest_request(0), itest_request(0)};
    for (int i = 0; i < 2; i++) {
        if (i) itest_sleep_ms(200); /* the reset comes back */
        pscom_req_prepare(w[i], con, x, sizeof(x), NULL, 0);
        pscom_post_send(w[i]);
    }
    char buf[64];
    pscom_request_t *q = itest_request(0);
    ITEST_RECV_PATTERN(q, con, buf, sizeof(buf), SEED, "M, sent before A's "
                       "close");
    for (int i = 0; i < 2; i++) pscom_wait(w[i]);
    pscom_req_prepare(q, con, buf, sizeof(buf), NULL, 0);
    pscom_post_recv(q);
    pscom_wait(q);
    ITEST_ASSERT_REQ_STATE(q, PSCOM_REQ_STATE_ERROR, "a receive after the "
                           "end");
    for (int i = 0; i < 2; i++) pscom_request_free(w[i]);
    pscom_request_free(q);
    pscom_close_socket(s);
    return 0;
}

int main(void)
{
    setenv("PSCOM_TEST_TRANSPORT", "tcp", 1);
    return itest_run_pair(60, "A", sender, "B", receiver);
}
