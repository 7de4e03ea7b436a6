/*
 * Many messages in flight on one connection, rendezvous ones among them.
 *
 * Part 1: the sender posts windows of messages of mixed sizes (0 bytes,
 * eager, rendezvous, one of them larger than its receive buffer), each
 * with its sequence number in the xheader and a pattern in the body, and
 * closes the connection as soon as the sends of the last window are done.
 * The receiver posts half of each window's receives before the window is
 * sent and the other half later, so some messages arrive unexpected. Every
 * receive must get its own message (posting order is matching order) with
 * the right data and an intact guard behind its buffer, the short receive
 * must end TRUNCATED with the first bytes in place, and the connection's
 * end must be reported only after every message of the last window: bodies
 * that a transport moves out of line and that are still arriving when the
 * peer's close arrives complete first.
 *
 * Part 2: the sender streams large messages into a window of posted
 * receives and is killed while several bodies are on their way. Every
 * receive must end within a deadline, successfully with the right data or
 * with ERROR; con_error must be called and no receive may succeed after it;
 * and the buffer of a receive that ended must not change afterwards (the
 * transport must stop writing into a buffer before its receive fails).
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Part 1                                                                 */

#define ROUNDS 3
#define WINDOW 12
#define SHORT  6 /* the receive whose buffer holds half of its message */
#define EARLY  (WINDOW / 2) /* receives posted before the window is sent */

static const size_t sizes[WINDOW] = {
    0, 100, 8192, 65536, 65537, (1 << 20) + 3, 1 << 20, 17,
    (3 << 20) + 5, 65535, 300000, 2 << 20,
};

static uint32_t msg_seed(uint32_t seq)
{
    return 0x7d3a0000u + seq;
}

static int sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *req[WINDOW];
    void *buf[WINDOW];

    con = itest_connect_to_peer(link, "sender", &sock);
    for (int i = 0; i < WINDOW; i++) {
        req[i] = itest_request(8);
        buf[i] = malloc(sizes[i] ? sizes[i] : 1);
        ITEST_ASSERT(buf[i] != NULL, "out of memory");
    }
    for (uint32_t r = 0; r < ROUNDS; r++) {
        itest_step("round %u: waiting until the receiver is ready", r);
        itest_link_wait_note(link);
        itest_step("round %u: sending a window of %d messages", r, WINDOW);
        for (uint32_t i = 0; i < WINDOW; i++) {
            uint32_t seq = r * WINDOW + i;
            itest_fill(buf[i], sizes[i], msg_seed(seq));
            pscom_req_prepare(req[i], con, buf[i], sizes[i], &seq,
                              sizeof(seq));
            pscom_post_send(req[i]);
        }
        for (int i = 0; i < WINDOW; i++) {
            pscom_wait(req[i]);
            ITEST_ASSERT_REQ_OK(req[i], "round %u, send %d", r, i);
        }
    }
    itest_step("closing the connection right after the last window");
    pscom_close_connection(con);
    for (int i = 0; i < WINDOW; i++) {
        pscom_request_free(req[i]);
        free(buf[i]);
    }
    itest_link_send_str(link, "closed");
    pscom_close_socket(sock);
    return 0;
}

static void post_window_recv(pscom_request_t *req, pscom_connection_t *con,
                             void *buf, int i)
{
    req->connection  = con;
    req->socket      = con->socket;
    req->data        = buf;
    req->data_len    = i == SHORT ? sizes[i] / 2 : sizes[i];
    req->xheader_len = sizeof(uint32_t);
    pscom_post_recv(req);
}

static void check_window_recv(pscom_request_t *req, void *buf, uint32_t seq,
                              int i)
{
    uint32_t got;
    size_t len = req->data_len;

    if (i == SHORT)
        ITEST_ASSERT_REQ_STATE(req, PSCOM_REQ_STATE_TRUNCATED,
                               "message %u into a receive of half its size",
                               seq);
    else
        ITEST_ASSERT_REQ_OK(req, "message %u", seq);
    memcpy(&got, &req->xheader.user, sizeof(got));
    ITEST_ASSERT_EQ(got, seq, "the receive posted %d-th in the window got "
                              "another message", i);
    ITEST_ASSERT_EQ(req->header.data_len, sizes[i], "length of message %u",
                    seq);
    if (i == SHORT) {
        /* The first half of the message's pattern. */
        void *full = malloc(sizes[i]);
        ITEST_ASSERT(full != NULL, "out of memory");
        itest_fill(full, sizes[i], msg_seed(seq));
        ITEST_ASSERT(memcmp(full, buf, len) == 0,
                     "the truncated message %u holds wrong bytes", seq);
        free(full);
    } else {
        ITEST_ASSERT_PATTERN(buf, len, msg_seed(seq), "message %u", seq);
    }
    ITEST_ASSERT_GUARD(buf, len, "behind message %u", seq);
}

static int receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *req[WINDOW];
    void *buf[WINDOW];
    const itest_con_event_t *ev;

    con = itest_accept_peer(link, "receiver", &sock);
    for (int i = 0; i < WINDOW; i++) {
        req[i] = itest_request(8);
        buf[i] = itest_alloc_guarded(i == SHORT ? sizes[i] / 2 : sizes[i]);
    }
    for (uint32_t r = 0; r < ROUNDS; r++) {
        itest_step("round %u: posting the first %d receives", r, EARLY);
        for (int i = 0; i < EARLY; i++) post_window_recv(req[i], con, buf[i], i);
        itest_link_send_str(link, "ready");
        /* The rest of the window arrives unexpected meanwhile. */
        itest_progress_ms(30);
        itest_step("round %u: posting the other receives", r);
        for (int i = EARLY; i < WINDOW; i++)
            post_window_recv(req[i], con, buf[i], i);
        for (int i = 0; i < WINDOW; i++) {
            uint32_t seq = r * WINDOW + i;
            itest_substep("round %u: waiting for message %u", r, seq);
            pscom_wait(req[i]);
            check_window_recv(req[i], buf[i], seq, i);
        }
    }
    itest_step("waiting for the sender's close");
    ITEST_PROGRESS_UNTIL(itest_con_error_of(con) != NULL);
    ev = itest_con_error_of(con);
    ITEST_ASSERT_EQ(ev->err, PSCOM_ERR_EOF, "error reported for the sender's "
                                            "close (%s)",
                    pscom_err_str(ev->err));
    for (int i = 0; i < WINDOW; i++) {
        pscom_request_free(req[i]);
        free(buf[i]);
    }
    itest_link_wait_note(link);
    pscom_close_socket(sock);
    return 0;
}

static int part1(void)
{
    itest_child_t rcv, snd;

    itest_note("part 1: windows of mixed messages, then the sender closes");
    itest_spawn(&rcv, "receiver", receiver, NULL);
    itest_spawn(&snd, "sender", sender, NULL);
    itest_link_relay(&rcv.link, &snd.link); /* the endpoint */
    /* Relay the receiver's notes to the sender and the sender's last note
     * back. */
    for (int r = 0; r < ROUNDS; r++) itest_link_relay(&rcv.link, &snd.link);
    itest_link_relay(&snd.link, &rcv.link);
    return itest_children_check((itest_child_t *[]){&snd, &rcv}, 2);
}

/* ---------------------------------------------------------------------- */
/* Part 2                                                                 */

#define STREAM_WINDOW 8
#define STREAM_LEN    (1 << 20)
#define STREAM_NOTE   24  /* messages received before the sender is killed */
#define DEADLINE      5.0 /* seconds from the kill to every request's end */

static uint32_t stream_seed(uint32_t seq)
{
    return 0x5e9d0000u + seq;
}

static int streamer(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *req[STREAM_WINDOW];
    void *buf[STREAM_WINDOW];
    uint32_t seq = 0;

    con = itest_connect_to_peer(link, "streamer", &sock);
    itest_step("streaming until killed");
    for (int i = 0; i < STREAM_WINDOW; i++) {
        req[i] = itest_request(8);
        buf[i] = malloc(STREAM_LEN);
        ITEST_ASSERT(buf[i] != NULL, "out of memory");
        itest_fill(buf[i], STREAM_LEN, stream_seed(seq));
        pscom_req_prepare(req[i], con, buf[i], STREAM_LEN, &seq, sizeof(seq));
        pscom_post_send(req[i]);
        seq++;
    }
    for (;;) {
        for (int i = 0; i < STREAM_WINDOW; i++) {
            if (!pscom_req_is_done(req[i])) continue;
            ITEST_ASSERT_REQ_OK(req[i], "stream send");
            itest_fill(buf[i], STREAM_LEN, stream_seed(seq));
            pscom_req_prepare(req[i], con, buf[i], STREAM_LEN, &seq,
                              sizeof(seq));
            pscom_post_send(req[i]);
            seq++;
        }
        itest_progress_once();
    }
    return 0;
}

static pscom_connection_t *stream_con;
static int ok_after_error; /* receives that succeeded after con_error */

/* What a receive buffer held when its receive ended. */
static uint64_t sum_of(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void stream_recv_done(pscom_request_t *req)
{
    if (itest_con_error_of(stream_con) && pscom_req_successful(req))
        ok_after_error++;
}

static void post_stream_recv(pscom_request_t *req, void *buf)
{
    pscom_req_prepare(req, stream_con, buf, STREAM_LEN, NULL,
                      sizeof(uint32_t));
    req->socket = stream_con->socket;
    pscom_post_recv(req);
}

static int sink(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_request_t *req[STREAM_WINDOW];
    void *buf[STREAM_WINDOW];
    uint32_t expect[STREAM_WINDOW];
    uint64_t sum[STREAM_WINDOW];
    uint32_t posted = 0, received = 0;
    int n_err = 0;
    double t_kill = -1.0;

    stream_con = itest_accept_peer(link, "sink", &sock);
    for (int i = 0; i < STREAM_WINDOW; i++) {
        req[i] = itest_request(8);
        buf[i] = itest_alloc_guarded(STREAM_LEN);
        req[i]->ops.io_done = stream_recv_done;
        post_stream_recv(req[i], buf[i]);
        expect[i] = posted++;
    }

    itest_step("receiving the stream until the streamer is killed");
    for (;;) {
        int pending = 0;
        itest_progress_once();
        for (int i = 0; i < STREAM_WINDOW; i++) {
            uint32_t got;
            if (!pscom_req_is_done(req[i])) {
                pending = 1;
                continue;
            }
            if (pscom_req_successful(req[i]) &&
                !itest_con_error_of(stream_con)) {
                ITEST_ASSERT_REQ_OK(req[i], "stream message %u", expect[i]);
                memcpy(&got, &req[i]->xheader.user, sizeof(got));
                ITEST_ASSERT_EQ(got, expect[i], "stream order");
                ITEST_ASSERT_PATTERN(buf[i], STREAM_LEN,
                                     stream_seed(expect[i]),
                                     "stream message %u", expect[i]);
                if (++received == STREAM_NOTE)
                    itest_link_send_str(link, "streaming");
                itest_substep("receiving the stream (%u messages so far)",
                              received);
                post_stream_recv(req[i], buf[i]);
                expect[i] = posted++;
                pending = 1;
            }
        }
        t_kill = itest_kill_time(link, t_kill, 0);
        if (!pending && itest_con_error_of(stream_con)) break;
        if (t_kill > 0 && itest_now() - t_kill > DEADLINE)
            ITEST_FAIL("%.0f s after the streamer was killed: con_error %s, "
                       "%u messages received",
                       DEADLINE,
                       itest_con_error_of(stream_con) ? "called" : "not called",
                       received);
    }
    t_kill = itest_kill_time(link, t_kill, 1);

    itest_step("checking how the receives ended");
    for (int i = 0; i < STREAM_WINDOW; i++) {
        if (req[i]->state & PSCOM_REQ_STATE_ERROR) {
            n_err++;
        } else {
            ITEST_ASSERT_REQ_OK(req[i], "stream message %u ended neither "
                                        "successful nor with ERROR",
                                expect[i]);
            ITEST_ASSERT_PATTERN(buf[i], STREAM_LEN, stream_seed(expect[i]),
                                 "stream message %u", expect[i]);
        }
        sum[i] = sum_of(buf[i], STREAM_LEN);
        ITEST_ASSERT_GUARD(buf[i], STREAM_LEN, "receive buffer %d", i);
    }
    itest_note("%u messages received, %d of %d receives ended with ERROR",
               received, n_err, STREAM_WINDOW);
    ITEST_ASSERT_EQ(ok_after_error, 0,
                    "receives that succeeded after con_error");

    itest_step("no receive buffer changes after its receive ended");
    itest_progress_ms(300);
    pscom_close_connection(stream_con);
    itest_progress_ms(100);
    for (int i = 0; i < STREAM_WINDOW; i++) {
        ITEST_ASSERT(sum_of(buf[i], STREAM_LEN) == sum[i],
                     "receive buffer %d (message %u, %s) changed after its "
                     "receive ended",
                     i, expect[i], pscom_req_state_str(req[i]->state));
        ITEST_ASSERT_GUARD(buf[i], STREAM_LEN, "receive buffer %d", i);
        pscom_request_free(req[i]);
        free(buf[i]);
    }
    pscom_close_socket(sock);
    return 0;
}

static int part2(void)
{
    itest_child_t snk, str;
    int failed;

    /* A transport that cannot survive a peer killed mid-stream, for a
     * reason outside this library, names it here (the conformance suite
     * sets it); the part is then reported as skipped, not passed. */
    const char *why = getenv("RNDV_WINDOW_NO_KILL");
    if (why && *why) {
        itest_note("part 2 SKIPPED: %s", why);
        return 0;
    }
    itest_note("part 2: the sender is killed with several bodies in flight");
    itest_spawn(&snk, "sink", sink, NULL);
    itest_spawn(&str, "streamer", streamer, NULL);
    itest_link_relay(&snk.link, &str.link); /* the endpoint */
    itest_step("waiting until the stream runs");
    itest_link_wait_note(&snk.link);
    failed = itest_kill_peer(&str, &snk.link);
    failed |= itest_children_check((itest_child_t *[]){&snk}, 1);
    return failed;
}

int main(void)
{
    return itest_run_parts((const itest_part_fn_t[]){part1, part2}, 2);
}
