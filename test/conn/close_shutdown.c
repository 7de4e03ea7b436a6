/*
 * Closing with traffic in flight.
 *
 *   close_shutdown flush     the sender posts N_FLUSH sends of 64 KiB and at
 *                            once calls pscom_close_connection. The
 *                            receiver posts its receives slowly (one every
 *                            SLOW_MS, not driving progress in between) and
 *                            must get all of them intact, then see
 *                            con_error(READ, PSCOM_ERR_EOF). The sender's
 *                            requests all end successfully. With
 *                            PSP_RENDEZVOUS=4096 the sends are rendezvous
 *                            sends, so the close has to wait for the
 *                            receiver's receives.
 *   close_shutdown all       a process with three sockets and connections
 *                            in every state (accepted, connected, two to
 *                            the same peer, on-demand with its handshake
 *                            just started by a send) and pending requests
 *                            (receives by connection, by socket, on any
 *                            socket; eager sends of 4 MiB, more than the
 *                            socket buffers hold) calls
 *                            pscom_close_socket(NULL). Every request ends
 *                            DONE; the receives (nothing was sent to them)
 *                            with ERROR, the sends on established
 *                            connections successfully; the process exits
 *                            0. The peer gets every flushed message intact
 *                            and an EOF on each of its connections.
 *   close_shutdown exit      as flush, but the sender calls exit(0) right
 *                            after posting, without closing anything: the
 *                            library's exit handler flushes the sends (and
 *                            releases the plugins), the receiver gets all
 *                            of them intact and then the EOF.
 *   close_shutdown timeout   run with PSP_SHUTDOWN_TIMEOUT=500 and
 *                            PSP_RENDEZVOUS=4096: the receiver never posts
 *                            receives; the sender posts small (eager) and
 *                            large (rendezvous) sends and closes. The close
 *                            returns within CLOSE_BOUND_S, the rendezvous
 *                            sends end with ERROR, the eager ones were
 *                            delivered, and the receiver sees the EOF.
 *
 * CLOSE_FLUSH_LEN sets the length of the messages of flush and exit
 * (default 64 KiB).
 */
#include "conn_util.h"
#include "itest.h"

#include <stdlib.h>
#include <string.h>

#define N_FLUSH       100
#define SLOW_MS       2
#define ALL_LEN       (4 * 1024 * 1024) /* more than the socket buffers hold */
#define N_SMALL       5
#define SMALL_LEN     1000
#define N_LARGE       10
#define LARGE_LEN     (64 * 1024)
#define CLOSE_BOUND_S 3.0

/* flush and exit: the length of the messages, 64 KiB unless
 * CLOSE_FLUSH_LEN says otherwise (a small length lets a transport finish
 * the sends at once, from copies of its own that must still arrive) */
static size_t flush_len = 64 * 1024;

static uint32_t seed_of(uint32_t k)
{
    return 0xc105e000u + k;
}

/* Drive progress until `con` got a con_error; that event. */
static const itest_con_event_t *wait_con_error(pscom_connection_t *con)
{
    ITEST_PROGRESS_UNTIL(itest_con_error_of(con) != NULL);
    return itest_con_error_of(con);
}

/* ---------------------------------------------------------------------- */
/* flush                                                                  */

static int flush_receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *r = itest_request(4);
    uint8_t *buf = itest_alloc_guarded(flush_len);
    const itest_con_event_t *ev;
    int eof_before = -1;
    char *ep;

    (void)arg;
    itest_pscom_init();
    sock = itest_open_socket("receiver", 1);
    ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    con = itest_wait_accept(1);

    itest_step("receiving %d messages, one every %d ms", N_FLUSH, SLOW_MS);
    for (uint32_t k = 0; k < N_FLUSH; k++) {
        uint32_t got;
        itest_substep("receive %u", k);
        itest_sleep_ms(SLOW_MS);
        if (eof_before < 0 && itest_con_error_of(con)) eof_before = (int)k;
        memset(buf, 0, flush_len);
        pscom_req_prepare(r, con, buf, flush_len, NULL, 4);
        pscom_post_recv(r);
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "message %u of %d", k, N_FLUSH);
        memcpy(&got, &r->xheader.user, 4);
        ITEST_ASSERT_EQ(got, k, "message order");
        ITEST_ASSERT_EQ(r->header.data_len, flush_len, "length of %u", k);
        ITEST_ASSERT_PATTERN(buf, flush_len, seed_of(k), "message %u", k);
        ITEST_ASSERT_GUARD(buf, flush_len, "message %u", k);
    }
    if (eof_before >= 0)
        itest_note("the EOF arrived before receive %d was posted (the rest "
                   "were kept as unexpected messages)", eof_before);

    itest_step("all %d received; waiting for the EOF", N_FLUSH);
    ev = wait_con_error(con);
    ITEST_ASSERT(ev->op == PSCOM_OP_READ && ev->err == PSCOM_ERR_EOF,
                 "con_error(%s, %s), expected (read, EOF)",
                 pscom_op_str(ev->op), pscom_err_str(ev->err));
    ITEST_ASSERT_EQ(itest_con_error_count(), 1, "con_error events");
    pscom_req_prepare(r, con, buf, flush_len, NULL, 4);
    pscom_post_recv(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_STATE(r, PSCOM_REQ_STATE_ERROR,
                           "a receive after the EOF (nothing more was sent)");

    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_request_free(r);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

/* The sender's side of flush and exit: connect to the receiver and post
 * N_FLUSH sends of flush_len bytes (numbered in their xheader). */
static pscom_socket_t *post_flush_sends(itest_link_t *link,
                                        pscom_connection_t **con,
                                        pscom_request_t **s, uint8_t **buf)
{
    pscom_socket_t *sock;
    char *ep;

    itest_pscom_init();
    sock = itest_open_socket("sender", 0);
    ep = itest_link_recv_str(link);
    *con = itest_connect(sock, ep);
    free(ep);

    itest_step("posting %d sends of %d bytes", N_FLUSH, (int)flush_len);
    for (uint32_t k = 0; k < N_FLUSH; k++) {
        buf[k] = malloc(flush_len);
        ITEST_ASSERT(buf[k] != NULL, "out of memory");
        itest_fill(buf[k], flush_len, seed_of(k));
        s[k] = itest_request(4);
        pscom_req_prepare(s[k], *con, buf[k], flush_len, &k, 4);
        pscom_post_send(s[k]);
    }
    return sock;
}

static int flush_sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *s[N_FLUSH];
    uint8_t *buf[N_FLUSH];
    double t0;

    (void)arg;
    sock = post_flush_sends(link, &con, s, buf);
    itest_step("closing at once");
    t0 = itest_now();
    pscom_close_connection(con);
    itest_note("pscom_close_connection returned after %.3f s",
               itest_now() - t0);
    for (int k = 0; k < N_FLUSH; k++) {
        ITEST_ASSERT_REQ_OK(s[k], "send %d after the close", k);
        pscom_request_free(s[k]);
        free(buf[k]);
    }
    ITEST_ASSERT(pscom_get_next_connection(sock, NULL) == NULL,
                 "the closed connection is still listed");
    ITEST_ASSERT_EQ(itest_con_error_count(), 0,
                    "con_error on the side that closed");
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* exit: the library closes at exit                                       */

static int exit_sender(itest_link_t *link, void *arg)
{
    static pscom_request_t *s[N_FLUSH];
    static uint8_t *buf[N_FLUSH];
    pscom_connection_t *con;

    (void)arg;
    post_flush_sends(link, &con, s, buf);
    itest_step("exit(0) without closing");
    itest_link_send_u64(link, 1);
    exit(0);
}

static int run_exit(void)
{
    itest_child_t r, s;
    itest_child_t *list[2] = {&r, &s};
    char *ep;

    itest_spawn(&r, "receiver", flush_receiver, NULL);
    itest_spawn(&s, "sender", exit_sender, NULL);
    ep = itest_link_recv_str(&r.link);
    itest_link_send_str(&s.link, ep);
    free(ep);
    itest_link_recv_u64(&s.link); /* posted, exiting */
    itest_link_recv_u64(&r.link); /* all received, EOF seen */
    itest_link_send_u64(&r.link, 1);
    return itest_children_check(list, 2);
}

/* ---------------------------------------------------------------------- */
/* all: pscom_close_socket(NULL)                                          */

enum { N_ALL_SENDS = 4 }; /* eager sends of the closing process, ids 1..4 */

static int all_peer(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *to_s1;
    uint8_t *buf = itest_alloc_guarded(ALL_LEN);
    int seen[N_ALL_SENDS + 2] = {0}, errors = 0;
    char *ep;

    (void)arg;
    itest_pscom_init();
    sock = itest_open_socket("peer", 1);
    ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);

    ep = itest_link_recv_str(link); /* the closer's listening socket */
    itest_step("connecting to the closer's socket s1");
    to_s1 = itest_connect(sock, ep);
    free(ep);

    itest_step("serving (posting no receives) until the closer is done");
    conn_progress_until_link(link);
    itest_link_recv_u64(link);

    /* Our connection to s1, the two from s2, maybe the on-demand one. */
    itest_step("waiting for the EOF on all connections");
    ITEST_PROGRESS_UNTIL(itest_con_error_count() >= 1 + itest_accept_count());
    for (int i = 0; i < itest_con_error_count(); i++) {
        const itest_con_event_t *ev = itest_con_error_get(i);
        ITEST_ASSERT(ev->op == PSCOM_OP_READ && ev->err == PSCOM_ERR_EOF,
                     "con_error %d is (%s, %s), expected (read, EOF)", i,
                     pscom_op_str(ev->op), pscom_err_str(ev->err));
        errors++;
    }
    ITEST_ASSERT(itest_con_error_of(to_s1) != NULL,
                 "no con_error on our connection to s1");

    itest_step("taking the flushed messages");
    for (;;) {
        pscom_request_t *r = itest_request(4);
        uint32_t id;
        r->socket = sock;
        r->connection = NULL;
        r->data = buf;
        r->data_len = ALL_LEN;
        r->xheader_len = 4;
        if (!pscom_iprobe(r)) {
            pscom_request_free(r);
            break;
        }
        pscom_post_recv(r);
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "a flushed message");
        memcpy(&id, &r->xheader.user, 4);
        ITEST_ASSERT(id >= 1 && id <= N_ALL_SENDS + 1, "message id %u", id);
        ITEST_ASSERT_EQ(r->header.data_len, ALL_LEN, "length of %u", id);
        ITEST_ASSERT_PATTERN(buf, ALL_LEN, seed_of(id), "message %u", id);
        ITEST_ASSERT_GUARD(buf, ALL_LEN, "message %u", id);
        seen[id]++;
        pscom_request_free(r);
    }
    for (int id = 1; id <= N_ALL_SENDS; id++)
        ITEST_ASSERT_EQ(seen[id], 1, "copies of flushed message %d", id);
    itest_note("%d connections ended with EOF; all %d flushed messages "
               "arrived intact; the on-demand one %s",
               errors, N_ALL_SENDS,
               seen[N_ALL_SENDS + 1] ? "too" : "did not (its handshake was cut)");

    itest_link_send_u64(link, 1);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

static pscom_request_t *post_recv_on(pscom_connection_t *con,
                                     pscom_socket_t *sock, void *buf)
{
    pscom_request_t *r = itest_request(4);
    r->connection = con;
    r->socket = sock;
    r->data = buf;
    r->data_len = ALL_LEN;
    r->xheader_len = 4;
    pscom_post_recv(r);
    return r;
}

static pscom_request_t *post_send_on(pscom_connection_t *con, void *buf,
                                     uint32_t id)
{
    pscom_request_t *s = itest_request(4);
    itest_fill(buf, ALL_LEN, seed_of(id));
    pscom_req_prepare(s, con, buf, ALL_LEN, &id, 4);
    pscom_post_send(s);
    return s;
}

static int all_closer(itest_link_t *link, void *arg)
{
    pscom_socket_t *s1, *s2, *s3;
    pscom_connection_t *a, *b1, *b2, *c;
    pscom_request_t *recvs[5], *sends[N_ALL_SENDS + 1];
    uint8_t *rbuf[5], *sbuf[N_ALL_SENDS + 1];
    const char *recv_what[5] = {"receive on the accepted connection",
                                "receive on s2's first connection",
                                "any-source receive on s2",
                                "receive on any socket",
                                "receive on the on-demand connection"};
    char *peer_ep, *ep;
    double t0;
    int bad = 0;

    (void)arg;
    itest_pscom_init();
    s1 = itest_open_socket("s1", 1);
    s2 = itest_open_socket("s2", 0);
    s3 = itest_open_socket("s3", 0);
    peer_ep = itest_link_recv_str(link);
    ep = itest_ep_str(s1);
    itest_link_send_str(link, ep);
    free(ep);

    itest_step("setting up connections");
    a = itest_wait_accept(1); /* the peer connects to s1 */
    b1 = itest_connect(s2, peer_ep);
    b2 = itest_connect(s2, peer_ep);
    c = pscom_open_connection(s3);
    ITEST_ASSERT(c != NULL, "pscom_open_connection");
    ITEST_ASSERT_EQ(pscom_connect(c, peer_ep, PSCOM_RANK_UNDEFINED,
                                  PSCOM_CON_FLAG_ONDEMAND),
                    PSCOM_SUCCESS, "on-demand connect");
    free(peer_ep);

    itest_step("posting receives and sends");
    for (int i = 0; i < 5; i++) rbuf[i] = itest_alloc_guarded(ALL_LEN);
    for (int i = 0; i <= N_ALL_SENDS; i++) {
        sbuf[i] = malloc(ALL_LEN);
        ITEST_ASSERT(sbuf[i] != NULL, "out of memory");
    }
    recvs[0] = post_recv_on(a, s1, rbuf[0]);
    recvs[1] = post_recv_on(b1, s2, rbuf[1]);
    recvs[2] = post_recv_on(NULL, s2, rbuf[2]);
    recvs[3] = post_recv_on(NULL, NULL, rbuf[3]);
    recvs[4] = post_recv_on(c, s3, rbuf[4]);
    sends[0] = post_send_on(a, sbuf[0], 1);
    sends[1] = post_send_on(b1, sbuf[1], 2);
    sends[2] = post_send_on(b2, sbuf[2], 3);
    sends[3] = post_send_on(b1, sbuf[3], 4);
    /* The first send on an on-demand connection starts its handshake. */
    sends[4] = post_send_on(c, sbuf[4], N_ALL_SENDS + 1);
    pscom_test_any();

    itest_step("pscom_close_socket(NULL)");
    t0 = itest_now();
    pscom_close_socket(NULL);
    itest_note("pscom_close_socket(NULL) returned after %.3f s",
               itest_now() - t0);

    /* Check every request before failing, so one report names them all. */
    for (int i = 0; i < 5; i++) {
        pscom_req_state_t st = recvs[i]->state;
        if (!(st & PSCOM_REQ_STATE_DONE) || !(st & PSCOM_REQ_STATE_ERROR)) {
            itest_note("%s: state %s, expected DONE and ERROR", recv_what[i],
                       pscom_req_state_str(st));
            bad++;
        }
    }
    for (int i = 0; i < N_ALL_SENDS; i++) {
        if (!pscom_req_successful(sends[i])) {
            itest_note("eager send %d on an established connection: state "
                       "%s, expected DONE (flushed by the close)",
                       i + 1, pscom_req_state_str(sends[i]->state));
            bad++;
        }
    }
    if (!pscom_req_is_done(sends[4])) {
        itest_note("the send that started the on-demand handshake: state "
                   "%s, expected DONE", pscom_req_state_str(sends[4]->state));
        bad++;
    } else {
        itest_note("the on-demand send ended %s",
                   pscom_req_state_str(sends[4]->state));
    }
    ITEST_ASSERT_EQ(bad, 0, "requests that did not end as they should after "
                    "pscom_close_socket(NULL)");
    for (int i = 0; i < 5; i++) {
        pscom_request_free(recvs[i]);
        free(rbuf[i]);
    }
    for (int i = 0; i <= N_ALL_SENDS; i++) {
        pscom_request_free(sends[i]);
        free(sbuf[i]);
    }
    itest_link_send_u64(link, 1); /* closed */
    return 0;
}

/* ---------------------------------------------------------------------- */
/* timeout: PSP_SHUTDOWN_TIMEOUT                                          */

static int timeout_receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *r = itest_request(4);
    uint8_t *buf = itest_alloc_guarded(LARGE_LEN);
    const itest_con_event_t *ev;
    char *ep;

    (void)arg;
    itest_pscom_init();
    sock = itest_open_socket("receiver", 1);
    ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    con = itest_wait_accept(1);

    itest_step("alive, posting no receives, until the sender has closed");
    ev = wait_con_error(con);
    ITEST_ASSERT(ev->op == PSCOM_OP_READ && ev->err == PSCOM_ERR_EOF,
                 "con_error(%s, %s), expected (read, EOF)",
                 pscom_op_str(ev->op), pscom_err_str(ev->err));

    itest_step("taking the %d eager messages", N_SMALL);
    for (uint32_t k = 0; k < N_SMALL; k++) {
        uint32_t got;
        pscom_req_prepare(r, con, buf, LARGE_LEN, NULL, 4);
        pscom_post_recv(r);
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "eager message %u", k);
        memcpy(&got, &r->xheader.user, 4);
        ITEST_ASSERT_EQ(got, k, "eager message order");
        ITEST_ASSERT_EQ(r->header.data_len, SMALL_LEN, "length");
        ITEST_ASSERT_PATTERN(buf, SMALL_LEN, seed_of(k), "eager message %u", k);
    }
    pscom_req_prepare(r, con, buf, LARGE_LEN, NULL, 4);
    pscom_post_recv(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_STATE(r, PSCOM_REQ_STATE_ERROR,
                           "a receive for a rendezvous message the sender "
                           "gave up");

    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_request_free(r);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

static int timeout_sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *s[N_SMALL + N_LARGE];
    uint8_t *buf[N_SMALL + N_LARGE];
    double t0, dt;
    char *ep;

    (void)arg;
    itest_pscom_init();
    sock = itest_open_socket("sender", 0);
    ep = itest_link_recv_str(link);
    con = itest_connect(sock, ep);
    free(ep);

    itest_step("posting %d eager and %d rendezvous sends", N_SMALL, N_LARGE);
    for (uint32_t k = 0; k < N_SMALL + N_LARGE; k++) {
        size_t len = k < N_SMALL ? SMALL_LEN : LARGE_LEN;
        buf[k] = malloc(len);
        ITEST_ASSERT(buf[k] != NULL, "out of memory");
        itest_fill(buf[k], len, seed_of(k));
        s[k] = itest_request(4);
        pscom_req_prepare(s[k], con, buf[k], len, &k, 4);
        pscom_post_send(s[k]);
    }

    itest_step("closing; the receiver posts nothing (PSP_SHUTDOWN_TIMEOUT=%s)",
               getenv("PSP_SHUTDOWN_TIMEOUT") ? getenv("PSP_SHUTDOWN_TIMEOUT")
                                              : "unset");
    itest_watchdog(30);
    t0 = itest_now();
    pscom_close_connection(con);
    dt = itest_now() - t0;
    itest_watchdog(ITEST_DEFAULT_TIMEOUT);
    itest_note("pscom_close_connection returned after %.3f s", dt);
    ITEST_ASSERT(dt < CLOSE_BOUND_S,
                 "the close took %.2f s, expected less than %.1f s", dt,
                 CLOSE_BOUND_S);
    for (int k = 0; k < N_SMALL + N_LARGE; k++) {
        if (k < N_SMALL)
            ITEST_ASSERT_REQ_OK(s[k], "eager send %d", k);
        else
            ITEST_ASSERT_REQ_STATE(s[k], PSCOM_REQ_STATE_ERROR,
                                   "rendezvous send %d nobody received", k);
        pscom_request_free(s[k]);
        free(buf[k]);
    }
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */

static int run_pair(itest_child_fn_t recv_fn, itest_child_fn_t send_fn)
{
    itest_child_t r, s;
    itest_child_t *list[2] = {&r, &s};
    char *ep;

    itest_spawn(&r, "receiver", recv_fn, NULL);
    itest_spawn(&s, "sender", send_fn, NULL);
    ep = itest_link_recv_str(&r.link);
    itest_link_send_str(&s.link, ep);
    free(ep);
    itest_link_recv_u64(&s.link);
    itest_link_recv_u64(&r.link);
    itest_link_send_u64(&s.link, 1);
    itest_link_send_u64(&r.link, 1);
    return itest_children_check(list, 2);
}

static int run_all(void)
{
    itest_child_t p, c;
    itest_child_t *list[2] = {&p, &c};
    char *ep;

    itest_spawn(&p, "peer", all_peer, NULL);
    itest_spawn(&c, "closer", all_closer, NULL);
    ep = itest_link_recv_str(&p.link);
    itest_link_send_str(&c.link, ep);
    free(ep);
    ep = itest_link_recv_str(&c.link);
    itest_link_send_str(&p.link, ep);
    free(ep);
    itest_link_recv_u64(&c.link); /* closed */
    itest_link_send_u64(&p.link, 1);
    itest_link_recv_u64(&p.link);
    return itest_children_check(list, 2);
}

int main(int argc, char **argv)
{
    int rc = 2;
    const char *len = getenv("CLOSE_FLUSH_LEN");

    if (len && *len) flush_len = strtoul(len, NULL, 10);
    itest_set_role("orchestrator");
    itest_watchdog(120);
    if (argc == 2 && !strcmp(argv[1], "flush"))
        rc = run_pair(flush_receiver, flush_sender);
    else if (argc == 2 && !strcmp(argv[1], "all"))
        rc = run_all();
    else if (argc == 2 && !strcmp(argv[1], "exit"))
        rc = run_exit();
    else if (argc == 2 && !strcmp(argv[1], "timeout"))
        rc = run_pair(timeout_receiver, timeout_sender);
    else
        fprintf(stderr, "usage: %s flush|all|exit|timeout\n", argv[0]);
    if (rc == 0) itest_note("PASS");
    return rc;
}
