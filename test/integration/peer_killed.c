/*
 * A peer killed with SIGKILL.
 *
 * Part 1: the survivor streams 64 KiB messages to the victim with a window
 * of 8 posted sends and has 2 receives posted on that connection; it also
 * has a connection to a third process. The orchestrator kills the victim in
 * the middle of the stream. The survivor must see con_error for that
 * connection and every pending request end with PSCOM_REQ_STATE_ERROR
 * within 2 seconds (a generous behavioural deadline), no request complete
 * successfully after con_error, a later send on the dead connection fail,
 * no SIGPIPE, and its connection to the third process keep working.
 *
 * Part 2: the survivor (this time the passive side) is blocked in
 * pscom_wait() on a receive when the peer is killed: the wait returns, with
 * PSCOM_REQ_STATE_ERROR, within 2 seconds.
 *
 * Part 3: the peer is killed while the connection is idle, and only then
 * the survivor sends: con_error is called and every send ends within 2
 * seconds (those the kernel took before the reset may succeed; none may
 * succeed after con_error), writing to the reset connection does not raise
 * SIGPIPE, and a send posted after con_error fails.
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>

#define MSG_LEN      (64 * 1024)
#define SEND_WINDOW  8
#define RECV_POSTED  2
#define STREAM_NOTE  20  /* messages the victim takes before it is killed */
#define DEADLINE     2.0 /* seconds from the kill to the errors */
#define GIVE_UP      5.0

static uint32_t stream_seed(uint32_t seq)
{
    return 0x57e40000u + seq;
}

/* ---------------------------------------------------------------------- */
/* Part 1                                                                 */

static int victim(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *req;
    void *buf;

    con = itest_accept_peer(link, "victim", &sock);

    itest_step("receiving the stream until killed");
    req = itest_request(8);
    buf = itest_alloc_guarded(MSG_LEN);
    for (uint32_t seq = 0;; seq++) {
        uint32_t xseq;
        req->connection  = con;
        req->socket      = sock;
        req->data        = buf;
        req->data_len    = MSG_LEN;
        req->xheader_len = sizeof(xseq);
        pscom_post_recv(req);
        pscom_wait(req);
        ITEST_ASSERT_REQ_OK(req, "stream message %u", seq);
        memcpy(&xseq, &req->xheader.user, sizeof(xseq));
        ITEST_ASSERT_EQ(xseq, seq, "stream order");
        ITEST_ASSERT_PATTERN(buf, MSG_LEN, stream_seed(seq),
                             "stream message %u", seq);
        if (seq == STREAM_NOTE) itest_link_send_str(link, "streaming");
    }
    return 0;
}

/* Echo every message back until the connection ends. */
static int third(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    unsigned echoed = 0;

    con = itest_accept_peer(link, "third", &sock);

    for (;;) {
        pscom_request_t *req = itest_request(64);
        void *buf            = malloc(1 << 20);
        ITEST_ASSERT(buf != NULL, "out of memory");
        itest_substep("waiting for message %u to echo", echoed);
        req->connection  = con;
        req->socket      = sock;
        req->data        = buf;
        req->data_len    = 1 << 20;
        req->xheader_len = 64;
        pscom_post_recv(req);
        pscom_wait(req);
        if (req->state & PSCOM_REQ_STATE_ERROR) {
            itest_note("connection ended after %u echoes (%s)", echoed,
                       pscom_req_state_str(req->state));
            pscom_request_free(req);
            free(buf);
            break;
        }
        ITEST_ASSERT_REQ_OK(req, "message %u to echo", echoed);
        {
            pscom_request_t *s = itest_request(64);
            pscom_req_prepare(s, con, buf, req->header.data_len,
                              &req->xheader.user, req->header.xheader_len);
            pscom_post_send(s);
            pscom_wait(s);
            ITEST_ASSERT_REQ_OK(s, "echo %u", echoed);
            pscom_request_free(s);
        }
        echoed++;
        pscom_request_free(req);
        free(buf);
    }
    ITEST_ASSERT(echoed >= 2, "the survivor exchanged %u messages with the "
                              "third process, expected 2", echoed);
    pscom_close_socket(sock);
    return 0;
}

/* Send a pattern to the third process and check the echo. */
static void exchange(pscom_connection_t *con, uint32_t seed, const char *when)
{
    pscom_request_t *s = itest_request(8), *r = itest_request(8);
    size_t len         = 64 * 1024;
    void *out          = malloc(len);
    void *in           = itest_alloc_guarded(len);

    itest_step("exchanging a message with the third process (%s)", when);
    ITEST_ASSERT(out != NULL, "out of memory");
    itest_fill(out, len, seed);
    r->connection  = con;
    r->socket      = con->socket;
    r->data        = in;
    r->data_len    = len;
    r->xheader_len = 4;
    pscom_post_recv(r);
    pscom_req_prepare(s, con, out, len, &seed, sizeof(seed));
    pscom_post_send(s);
    pscom_wait(s);
    ITEST_ASSERT_REQ_OK(s, "send to the third process (%s)", when);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "echo from the third process (%s)", when);
    ITEST_ASSERT_EQ(r->header.data_len, len, "echo length");
    ITEST_ASSERT(memcmp(&r->xheader.user, &seed, sizeof(seed)) == 0,
                 "echoed xheader");
    ITEST_ASSERT_PATTERN(in, len, seed, "echo from the third process (%s)",
                         when);
    pscom_request_free(s);
    pscom_request_free(r);
    free(out);
    free(in);
}

static pscom_connection_t *con_v;
static double t_last_done;
static int done_after_error_ok; /* requests done successfully after con_error */

static void stream_io_done(pscom_request_t *req)
{
    t_last_done = itest_now();
    if (itest_con_error_of(con_v) && pscom_req_successful(req))
        done_after_error_ok++;
}

static const char *states_str(pscom_request_t **sends, pscom_request_t **recvs)
{
    static char buf[2048];
    size_t n = 0;
    for (int i = 0; i < SEND_WINDOW; i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "send[%d]=%s ", i,
                              pscom_req_state_str(sends[i]->state));
    for (int i = 0; i < RECV_POSTED && n < sizeof(buf); i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "recv[%d]=%s ", i,
                              pscom_req_state_str(recvs[i]->state));
    return buf;
}

static int survivor(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con_t;
    pscom_request_t *sends[SEND_WINDOW], *recvs[RECV_POSTED], *late;
    void *sbuf[SEND_WINDOW], *rbuf[RECV_POSTED];
    uint32_t seq = 0;
    double t_kill = -1.0;
    const itest_con_event_t *ev;
    char *ep_v, *ep_t;

    itest_pscom_init();
    sock = itest_open_socket("survivor", 0);
    ep_v = itest_link_recv_str(link);
    ep_t = itest_link_recv_str(link);
    itest_step("connecting to the victim %s", ep_v);
    con_v = itest_connect(sock, ep_v);
    itest_step("connecting to the third process %s", ep_t);
    con_t = itest_connect(sock, ep_t);
    free(ep_v);
    free(ep_t);
    exchange(con_t, 0x3b0001u, "before the kill");

    itest_step("streaming to the victim until it is killed");
    for (int i = 0; i < RECV_POSTED; i++) {
        rbuf[i]  = itest_alloc_guarded(MSG_LEN);
        recvs[i] = itest_request(8);
        recvs[i]->connection  = con_v;
        recvs[i]->socket      = sock;
        recvs[i]->data        = rbuf[i];
        recvs[i]->data_len    = MSG_LEN;
        recvs[i]->xheader_len = 4;
        recvs[i]->ops.io_done = stream_io_done;
        pscom_post_recv(recvs[i]);
    }
    for (int i = 0; i < SEND_WINDOW; i++) {
        sbuf[i]  = malloc(MSG_LEN);
        sends[i] = itest_request(8);
        ITEST_ASSERT(sbuf[i] != NULL, "out of memory");
        itest_fill(sbuf[i], MSG_LEN, stream_seed(seq));
        pscom_req_prepare(sends[i], con_v, sbuf[i], MSG_LEN, &seq, sizeof(seq));
        sends[i]->ops.io_done = stream_io_done;
        pscom_post_send(sends[i]);
        seq++;
    }
    for (;;) {
        int all_done = 1;
        int errored  = itest_con_error_of(con_v) != NULL;

        itest_progress_once();
        for (int i = 0; i < SEND_WINDOW; i++) {
            pscom_request_t *s = sends[i];
            if (!pscom_req_is_done(s)) {
                all_done = 0;
            } else if (pscom_req_successful(s) && !errored &&
                       !itest_con_error_of(con_v)) {
                itest_fill(sbuf[i], MSG_LEN, stream_seed(seq));
                pscom_req_prepare(s, con_v, sbuf[i], MSG_LEN, &seq,
                                  sizeof(seq));
                pscom_post_send(s);
                seq++;
                all_done = 0;
            }
        }
        for (int i = 0; i < RECV_POSTED; i++) {
            if (!pscom_req_is_done(recvs[i])) all_done = 0;
        }
        if (all_done && itest_con_error_of(con_v)) break;
        if (t_kill < 0) {
            t_kill = itest_kill_time(link, t_kill, 0);
            if (t_kill >= 0)
                itest_note("victim killed; %u sends posted so far", seq);
        }
        if (t_kill > 0 && itest_now() - t_kill > GIVE_UP)
            ITEST_FAIL("%.0f s after the victim was killed: con_error %s, "
                       "requests: %s",
                       GIVE_UP,
                       itest_con_error_of(con_v) ? "called" : "not called",
                       states_str(sends, recvs));
    }
    t_kill = itest_kill_time(link, t_kill, 1);

    itest_step("checking how the requests ended");
    ev = itest_con_error_of(con_v);
    itest_note("con_error %.3f s after the kill (op %s, %s); last request "
               "done %.3f s after the kill; %u sends posted; %s",
               ev->t - t_kill, pscom_op_str(ev->op), pscom_err_str(ev->err),
               t_last_done - t_kill, seq, states_str(sends, recvs));
    ITEST_ASSERT(ev->t >= t_kill,
                 "con_error was called %.3f s before the victim was killed",
                 t_kill - ev->t);
    ITEST_ASSERT(ev->t - t_kill <= DEADLINE,
                 "con_error came %.3f s after the kill, more than %.1f s",
                 ev->t - t_kill, DEADLINE);
    ITEST_ASSERT(t_last_done - t_kill <= DEADLINE,
                 "the last pending request ended %.3f s after the kill, more "
                 "than %.1f s",
                 t_last_done - t_kill, DEADLINE);
    ITEST_ASSERT_EQ(done_after_error_ok, 0,
                    "requests that completed successfully after con_error");
    for (int i = 0; i < RECV_POSTED; i++) {
        ITEST_ASSERT_REQ_STATE(recvs[i], PSCOM_REQ_STATE_ERROR,
                               "receive %d posted on the killed peer's "
                               "connection",
                               i);
    }
    {
        int n_err = 0;
        for (int i = 0; i < SEND_WINDOW; i++) {
            if (sends[i]->state & PSCOM_REQ_STATE_ERROR) {
                ITEST_ASSERT_REQ_STATE(sends[i], PSCOM_REQ_STATE_ERROR,
                                       "send slot %d", i);
                n_err++;
            } else {
                ITEST_ASSERT_REQ_OK(sends[i], "send slot %d ended neither "
                                              "successful nor with ERROR",
                                    i);
            }
        }
        itest_note("%d of %d send slots ended with ERROR", n_err, SEND_WINDOW);
    }
    for (int i = 0; i < itest_con_error_count(); i++) {
        ITEST_ASSERT(itest_con_error_get(i)->con != con_t,
                     "con_error was called for the connection to the third "
                     "process");
    }

    itest_step("a send posted on the dead connection fails");
    late = itest_request(8);
    pscom_req_prepare(late, con_v, sbuf[0], MSG_LEN, &seq, sizeof(seq));
    {
        double t0 = itest_now();
        pscom_post_send(late);
        while (!pscom_req_is_done(late) && itest_now() - t0 < DEADLINE)
            itest_progress_once();
        ITEST_ASSERT_REQ_STATE(late, PSCOM_REQ_STATE_ERROR,
                               "send posted after con_error (waited %.1f s)",
                               DEADLINE);
    }

    exchange(con_t, 0x3b0002u, "after the kill");

    for (int i = 0; i < SEND_WINDOW; i++) {
        pscom_request_free(sends[i]);
        free(sbuf[i]);
    }
    for (int i = 0; i < RECV_POSTED; i++) {
        pscom_request_free(recvs[i]);
        free(rbuf[i]);
    }
    pscom_request_free(late);
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Part 2: blocked in pscom_wait                                          */

static int waiter(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *req;
    char buf[256];
    double t_kill, t_ret;

    con = itest_accept_peer(link, "waiter", &sock);

    req = itest_request(8);
    req->connection  = con;
    req->socket      = sock;
    req->data        = buf;
    req->data_len    = sizeof(buf);
    req->xheader_len = 0;
    pscom_post_recv(req);
    itest_link_send_str(link, "waiting");
    itest_step("blocked in pscom_wait() on a receive from the victim");
    itest_watchdog(8); /* the kill comes within a second */
    pscom_wait(req);
    t_ret = itest_now();
    itest_watchdog(ITEST_DEFAULT_TIMEOUT);
    t_kill = itest_kill_time(link, -1.0, 1);
    itest_step("checking the receive");
    itest_note("pscom_wait returned %.3f s after the kill, state %s",
               t_ret - t_kill, pscom_req_state_str(req->state));
    ITEST_ASSERT(t_ret >= t_kill,
                 "pscom_wait returned %.3f s before the peer was killed "
                 "(state %s)",
                 t_kill - t_ret, pscom_req_state_str(req->state));
    ITEST_ASSERT_REQ_STATE(req, PSCOM_REQ_STATE_ERROR,
                           "receive from the killed peer");
    ITEST_ASSERT(t_ret - t_kill <= DEADLINE,
                 "pscom_wait returned %.3f s after the kill, more than %.1f s",
                 t_ret - t_kill, DEADLINE);
    ITEST_ASSERT(itest_con_error_of(con) != NULL,
                 "con_error was not called for the killed peer's connection");
    pscom_request_free(req);
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

/* Receive into buf on con and wait for the receive to end. */
static pscom_request_t *recv_wait(pscom_connection_t *con, void *buf,
                                  size_t len)
{
    pscom_request_t *req = itest_request(0);
    req->connection      = con;
    req->socket          = con->socket;
    req->data            = buf;
    req->data_len        = len;
    pscom_post_recv(req);
    pscom_wait(req);
    return req;
}

static int victim2(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *req;
    char buf[16];

    con = itest_connect_to_peer(link, "victim2", &sock);
    itest_step("waiting to be killed");
    req = recv_wait(con, buf, sizeof(buf));
    ITEST_FAIL("a receive completed that nobody sent (state %s)",
               pscom_req_state_str(req->state));
}


/* ---------------------------------------------------------------------- */
/* Part 3: sends to a peer that died while the connection was idle       */

static int idle_victim(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *req;
    char buf[16];

    con = itest_accept_peer(link, "victim3", &sock);
    itest_step("waiting for the sender's hello");
    req = recv_wait(con, buf, sizeof(buf));
    ITEST_ASSERT_REQ_OK(req, "hello");
    itest_link_send_str(link, "idle");
    itest_step("idle until killed");
    for (;;) itest_progress_once();
    return 0;
}

#define LATE_MAX 64 /* sends of MSG_LEN: more than any socket buffer */

static int late_sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *sends[LATE_MAX + 1], *hello;
    void *buf;
    double t_kill, t0;
    int n_posted = 0, n_err = 0, posted_at_error = -1;
    char hello_text[] = "hello";

    con = itest_connect_to_peer(link, "sender3", &sock);
    hello = itest_request(0);
    pscom_req_prepare(hello, con, hello_text, sizeof(hello_text), NULL, 0);
    pscom_post_send(hello);
    pscom_wait(hello);
    ITEST_ASSERT_REQ_OK(hello, "hello");
    pscom_request_free(hello);

    /* No progress from here until the peer is dead and its FIN is here: the
     * library learns of the death only by writing. A write after the peer's
     * reset must not raise SIGPIPE. */
    itest_step("waiting (without progress) until the peer was killed");
    t_kill = itest_kill_time(link, -1.0, 1);
    itest_sleep_ms(200);

    /* The first writes may still be taken by the kernel; keep sending until
     * the library notices. */
    itest_step("sending to the dead peer until the library notices");
    buf = malloc(MSG_LEN);
    ITEST_ASSERT(buf != NULL, "out of memory");
    itest_fill(buf, MSG_LEN, 3);
    t0    = itest_now();
    con_v = con; /* for stream_io_done() */
    while (n_posted < LATE_MAX && !itest_con_error_of(con) &&
           itest_now() - t0 < DEADLINE) {
        sends[n_posted] = itest_request(0);
        pscom_req_prepare(sends[n_posted], con, buf, MSG_LEN, NULL, 0);
        sends[n_posted]->ops.io_done = stream_io_done;
        pscom_post_send(sends[n_posted]);
        n_posted++;
        /* The first few back to back, so that writes follow the reset
         * before the library reads the EOF. */
        if (n_posted > SEND_WINDOW) {
            for (int k = 0; k < 10; k++) itest_progress_once();
        }
    }
    if (itest_con_error_of(con)) posted_at_error = n_posted;

    itest_step("waiting for the sends to the dead peer to end");
    for (int i = 0; i < n_posted; i++) {
        while (!pscom_req_is_done(sends[i]) && itest_now() - t0 < DEADLINE)
            itest_progress_once();
        ITEST_ASSERT(pscom_req_is_done(sends[i]),
                     "send %d to the dead peer still pending %.1f s after the "
                     "first was posted (state %s)",
                     i, DEADLINE, pscom_req_state_str(sends[i]->state));
        if (sends[i]->state & PSCOM_REQ_STATE_ERROR) n_err++;
    }
    itest_note("%d sends posted (con_error after %d), %d ended with ERROR, "
               "%.3f s after the kill",
               n_posted, posted_at_error, n_err, itest_now() - t_kill);
    ITEST_ASSERT(itest_con_error_of(con) != NULL,
                 "con_error was not called for the dead peer's connection "
                 "within %.1f s of sending to it (%d sends of %d bytes)",
                 DEADLINE, n_posted, MSG_LEN);
    /* Sends the kernel took before the reset count as done; what was still
     * pending when con_error came must fail. */
    ITEST_ASSERT_EQ(done_after_error_ok, 0,
                    "sends that completed successfully after con_error");

    itest_step("a send posted after con_error fails");
    sends[n_posted] = itest_request(0);
    pscom_req_prepare(sends[n_posted], con, buf, MSG_LEN, NULL, 0);
    t0 = itest_now();
    pscom_post_send(sends[n_posted]);
    while (!pscom_req_is_done(sends[n_posted]) && itest_now() - t0 < DEADLINE)
        itest_progress_once();
    ITEST_ASSERT_REQ_STATE(sends[n_posted], PSCOM_REQ_STATE_ERROR,
                           "send posted after con_error (waited %.1f s)",
                           DEADLINE);
    n_posted++;
    for (int i = 0; i < n_posted; i++) pscom_request_free(sends[i]);
    free(buf);
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */

static int part1(void)
{
    itest_child_t vic, thr, sur;
    int failed;

    itest_note("part 1: victim killed while the survivor streams to it");
    itest_spawn(&vic, "victim", victim, NULL);
    itest_spawn(&thr, "third", third, NULL);
    itest_spawn(&sur, "survivor", survivor, NULL);
    itest_link_relay(&vic.link, &sur.link); /* the endpoints */
    itest_link_relay(&thr.link, &sur.link);
    itest_step("waiting until the stream runs");
    itest_link_wait_note(&vic.link);
    failed = itest_kill_peer(&vic, &sur.link);
    itest_step("victim killed, waiting for the others");
    failed |= itest_children_check((itest_child_t *[]){&sur, &thr}, 2);
    return failed;
}

static int part2(void)
{
    itest_child_t wai, vic;
    int failed;

    itest_note("part 2: peer killed while the survivor is blocked in "
               "pscom_wait");
    itest_spawn(&wai, "waiter", waiter, NULL);
    itest_spawn(&vic, "victim2", victim2, NULL);
    itest_link_relay(&wai.link, &vic.link); /* the endpoint */
    itest_step("waiting until the waiter blocks");
    itest_link_wait_note(&wai.link);
    itest_sleep_ms(300);
    failed = itest_kill_peer(&vic, &wai.link);
    failed |= itest_children_check((itest_child_t *[]){&wai}, 1);
    return failed;
}

static int part3(void)
{
    itest_child_t vic, snd;
    int failed;

    itest_note("part 3: sends to a peer killed while the connection was "
               "idle");
    itest_spawn(&vic, "victim3", idle_victim, NULL);
    itest_spawn(&snd, "sender3", late_sender, NULL);
    itest_link_relay(&vic.link, &snd.link); /* the endpoint */
    itest_step("waiting until the victim is idle");
    itest_link_wait_note(&vic.link);
    /* The sender starts writing when it learns of the kill, after the
     * victim is gone. */
    failed = itest_kill_peer(&vic, &snd.link);
    failed |= itest_children_check((itest_child_t *[]){&snd}, 1);
    return failed;
}

int main(void)
{
    return itest_run_parts((const itest_part_fn_t[]){part1, part2, part3},
                           3);
}
