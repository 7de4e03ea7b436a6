/*
 * pscom_suspend_listen / pscom_resume_listen.
 *
 * The server listens, takes its endpoint string and suspends listening. A
 * client process starts pscom_connect (direct) to that endpoint. For
 * SUSPEND_WINDOW_MS the server drives pscom_test_any and must see no
 * con_accept: the connection must not complete while listening is
 * suspended. The server resumes; the client's connect then completes (after
 * the resume, by the monotonic clock both share), a verified message goes
 * each way, and the endpoint string after the resume equals the one before.
 */
#include "conn_util.h"
#include "itest.h"

#include <stdlib.h>
#include <string.h>

#define SUSPEND_WINDOW_MS 500
#define ACCEPT_DEADLINE_S 30 /* the waiting client is taken at once */
#define MSG_LEN           (64 * 1024 + 3)
#define SEED_C2S          0x5005e001u
#define SEED_S2C          0x5005e002u

static void exchange(pscom_connection_t *con, uint32_t out_seed,
                     uint32_t in_seed, int send_first)
{
    uint8_t *out = malloc(MSG_LEN), *in = itest_alloc_guarded(MSG_LEN);
    pscom_request_t *s = itest_request(0), *r = itest_request(0);

    ITEST_ASSERT(out != NULL, "out of memory");
    itest_fill(out, MSG_LEN, out_seed);
    pscom_req_prepare(r, con, in, MSG_LEN, NULL, 0);
    pscom_req_prepare(s, con, out, MSG_LEN, NULL, 0);
    pscom_post_recv(r);
    if (send_first) {
        pscom_post_send(s);
        pscom_wait(r);
    } else {
        pscom_wait(r);
        pscom_post_send(s);
    }
    pscom_wait(s);
    ITEST_ASSERT_REQ_OK(s, "send");
    ITEST_ASSERT_REQ_OK(r, "receive");
    ITEST_ASSERT_EQ(r->header.data_len, MSG_LEN, "message length");
    ITEST_ASSERT_PATTERN(in, MSG_LEN, in_seed, "received message");
    ITEST_ASSERT_GUARD(in, MSG_LEN, "receive buffer");
    pscom_request_free(s);
    pscom_request_free(r);
    free(out);
    free(in);
}

static int server(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    char *ep_before, *ep_after;
    int port_before;
    double t_end, t_resume;

    (void)arg;
    itest_pscom_init();
    sock = itest_open_socket("server", 1);
    ep_before = itest_ep_str(sock);
    port_before = pscom_get_portno(sock);
    itest_step("suspending the listener of %s", ep_before);
    pscom_suspend_listen(sock);
    itest_link_send_str(link, ep_before);

    itest_link_recv_u64(link); /* the client is calling pscom_connect */
    itest_step("suspended: %d ms of pscom_test_any without a con_accept",
               SUSPEND_WINDOW_MS);
    t_end = itest_now() + SUSPEND_WINDOW_MS / 1000.0;
    while (itest_now() < t_end) {
        pscom_test_any();
        ITEST_ASSERT_EQ(itest_accept_count(), 0,
                        "connections accepted while listening is suspended");
    }
    ITEST_ASSERT(pscom_get_next_connection(sock, NULL) == NULL,
                 "the socket has a connection while suspended");

    itest_step("resuming");
    t_resume = itest_now();
    pscom_resume_listen(sock);
    itest_link_send_double(link, t_resume);
    ep_after = itest_ep_str(sock);
    ITEST_ASSERT(!strcmp(ep_before, ep_after),
                 "endpoint after the resume \"%s\", before \"%s\"", ep_after,
                 ep_before);
    ITEST_ASSERT_EQ(pscom_get_portno(sock), port_before, "port");

    itest_step("accepting the waiting client after the resume");
    itest_watchdog(ACCEPT_DEADLINE_S);
    con = itest_wait_accept(1);
    itest_watchdog(ITEST_DEFAULT_TIMEOUT);
    itest_note("accepted %.3f s after the resume", itest_now() - t_resume);
    exchange(con, SEED_S2C, SEED_C2S, 0);
    ITEST_ASSERT_EQ(itest_accept_count(), 1, "accepted connections");

    itest_link_send_u64(link, 1); /* done */
    itest_link_recv_u64(link);    /* bye */
    free(ep_before);
    free(ep_after);
    pscom_close_socket(sock);
    return 0;
}

static int client(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    double t_start, t_done;
    char *ep;

    (void)arg;
    itest_pscom_init();
    sock = itest_open_socket("client", 0);
    ep = itest_link_recv_str(link);
    itest_step("pscom_connect(DIRECT) to the suspended listener %s", ep);
    itest_link_send_u64(link, 1); /* calling pscom_connect now */
    t_start = itest_now();
    con = itest_connect(sock, ep);
    t_done = itest_now();
    itest_note("pscom_connect returned after %.3f s", t_done - t_start);
    itest_link_send_double(link, t_done);
    exchange(con, SEED_C2S, SEED_S2C, 1);
    itest_link_send_u64(link, 1); /* done */
    itest_link_recv_u64(link);    /* bye */
    free(ep);
    pscom_close_socket(sock);
    return 0;
}

int main(int argc, char **argv)
{
    itest_child_t srv, cli;
    itest_child_t *list[2] = {&srv, &cli};
    double t_resume, t_connected;
    char *ep;
    int rc;

    (void)argc;
    (void)argv;
    itest_set_role("orchestrator");
    itest_watchdog(120);
    itest_spawn(&srv, "server", server, NULL);
    itest_spawn(&cli, "client", client, NULL);
    ep = itest_link_recv_str(&srv.link);
    itest_link_send_str(&cli.link, ep);
    free(ep);
    itest_link_recv_u64(&cli.link); /* connecting */
    itest_link_send_u64(&srv.link, 1);
    t_resume = itest_link_recv_double(&srv.link);
    t_connected = itest_link_recv_double(&cli.link);
    ITEST_ASSERT(t_connected >= t_resume,
                 "the client's pscom_connect returned %.3f s before the "
                 "server resumed listening",
                 t_resume - t_connected);
    itest_link_recv_u64(&srv.link);
    itest_link_recv_u64(&cli.link);
    itest_link_send_u64(&srv.link, 1);
    itest_link_send_u64(&cli.link, 1);
    rc = itest_children_check(list, 2);
    if (rc == 0) itest_note("PASS");
    return rc;
}
