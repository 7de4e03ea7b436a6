/*
 * Receive callbacks that answer and wait, as an MPI device's do.
 *
 * The asker sends small messages in windows of 4 and waits for one answer
 * per message. The answerer posts all its receives at once, each with an
 * io_done callback that sends the answer (the message's sequence number,
 * its data reversed). The callback of every 4th message first waits, with
 * pscom_wait, for the receive of the message after it: a wait inside a
 * callback drives progress, so that message arrives — and its own callback
 * runs — nested in the first one.
 *
 * The core runs the callbacks of requests that complete inside a plugin
 * only once its call into the plugin returned: before, a tcp receiver took
 * the next message out of order (the rest of the socket's read-ahead,
 * still being pushed, came after what the nested wait read) and shm's
 * receiver hung (its ring was in the middle of being drained).
 *
 * A transport that hands small messages to the core from inside its own
 * callback (ucx: pscom_plugin_rx_now) must not run these callbacks there
 * either: the nested wait would re-enter the transport's progress.
 * Checked: every answer arrives once with the right contents, every
 * message reached its own receive, the callbacks started in arrival order,
 * and none ran twice.
 */
#include "itest.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define N_MSGS  200
#define WINDOW  4
#define MSG_LEN 16

struct xh {
    uint32_t seq;
};

static pscom_request_t *recvs[N_MSGS];
static char rbufs[N_MSGS][MSG_LEN];
static int order[N_MSGS]; /* callbacks in the order they ran: seqs */
static int n_done;
static int depth, max_depth;

static uint32_t seq_of(pscom_request_t *r)
{
    struct xh x;
    memcpy(&x, &r->xheader.user, sizeof(x));
    return x.seq;
}

static void fill(char *buf, uint32_t seq)
{
    for (int i = 0; i < MSG_LEN; i++) buf[i] = (char)(seq * 7 + i);
}

static void send_one(pscom_connection_t *con, uint32_t seq, const char *data)
{
    pscom_request_t *s = itest_request(sizeof(struct xh));
    char *buf = malloc(MSG_LEN);
    ITEST_ASSERT(buf != NULL, "out of memory");
    memcpy(buf, data, MSG_LEN);
    struct xh x = {.seq = seq};
    pscom_req_prepare(s, con, buf, MSG_LEN, &x, sizeof(x));
    pscom_post_send(s);
    pscom_wait(s);
    ITEST_ASSERT_REQ_OK(s, "answer %u", seq);
    pscom_request_free(s);
    free(buf);
}

/* The io_done callback of each receive of the answerer. */
static void answer(pscom_request_t *r)
{
    uint32_t seq = seq_of(r);
    ITEST_ASSERT_REQ_OK(r, "message %u", seq);
    ITEST_ASSERT(seq < N_MSGS, "sequence number %u out of range", seq);
    ITEST_ASSERT(r == recvs[seq], "message %u went to the receive of another "
                                  "message (out of order?)", seq);
    ITEST_ASSERT(n_done < N_MSGS, "more callbacks than messages");
    order[n_done++] = (int)seq;
    depth++;
    if (depth > max_depth) max_depth = depth;
    if (seq % WINDOW == 0 && seq + 1 < N_MSGS) {
        /* Nested progress from inside a callback. */
        pscom_wait(recvs[seq + 1]);
        ITEST_ASSERT_REQ_OK(recvs[seq + 1], "message %u, waited for in the "
                                            "callback of %u", seq + 1, seq);
    }
    char rev[MSG_LEN];
    for (int k = 0; k < MSG_LEN; k++) rev[k] = rbufs[seq][MSG_LEN - 1 - k];
    send_one(r->connection, seq, rev);
    depth--;
}

static int answerer(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_accept_peer(link, "answerer", &sock);

    itest_step("posting %d receives with answering callbacks", N_MSGS);
    for (int i = 0; i < N_MSGS; i++) {
        pscom_request_t *r = itest_request(sizeof(struct xh));
        r->connection = con;
        r->socket = con->socket;
        r->data = rbufs[i];
        r->data_len = MSG_LEN;
        r->xheader_len = sizeof(struct xh);
        r->ops.io_done = answer;
        recvs[i] = r;
        pscom_post_recv(r);
    }
    itest_link_send_str(link, "ready");
    itest_step("answering");
    ITEST_PROGRESS_UNTIL(n_done == N_MSGS);
    /* The callback of the message waited for runs inside the waiting one
     * (and, where a transport delivered several messages in one go, the
     * others behind it, too). */
    ITEST_ASSERT(max_depth >= 2, "no callback ran inside another one "
                                 "(deepest nesting %d)", max_depth);
    /* They start in arrival order all the same. */
    for (int i = 0; i < N_MSGS; i++)
        ITEST_ASSERT_EQ(order[i], i, "callback %d ran for message %d", i,
                        order[i]);
    itest_step("waiting for the asker to finish");
    itest_link_wait_note(link);
    for (int i = 0; i < N_MSGS; i++) pscom_request_free(recvs[i]);
    pscom_close_socket(sock);
    return 0;
}

static int asker(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_connect_to_peer(link, "asker", &sock);
    itest_link_wait_note(link); /* the answerer's receives are posted */

    static char got[N_MSGS][MSG_LEN];
    static bool seen[N_MSGS];
    for (int w = 0; w < N_MSGS; w += WINDOW) {
        itest_substep("window from message %d", w);
        pscom_request_t *ans[WINDOW + 1];
        for (int k = 0; k < WINDOW; k++) {
            ans[k] = itest_request(sizeof(struct xh));
            ans[k]->connection = con;
            ans[k]->socket = con->socket;
            ans[k]->data = got[w + k];
            ans[k]->data_len = MSG_LEN;
            ans[k]->xheader_len = sizeof(struct xh);
            pscom_post_recv(ans[k]);
        }
        ans[WINDOW] = NULL;
        for (int k = 0; k < WINDOW; k++) {
            char data[MSG_LEN];
            fill(data, (uint32_t)(w + k));
            send_one(con, (uint32_t)(w + k), data);
        }
        pscom_wait_all(ans);
        for (int k = 0; k < WINDOW; k++) {
            ITEST_ASSERT_REQ_OK(ans[k], "answer %d of window %d", k, w);
            uint32_t seq = seq_of(ans[k]);
            ITEST_ASSERT(seq >= (uint32_t)w && seq < (uint32_t)(w + WINDOW),
                         "answer %u in the window from %d", seq, w);
            ITEST_ASSERT(!seen[seq], "answer %u came twice", seq);
            seen[seq] = true;
            char want[MSG_LEN], data[MSG_LEN];
            fill(data, seq);
            for (int b = 0; b < MSG_LEN; b++) want[b] = data[MSG_LEN - 1 - b];
            /* ans[k] holds answer `seq`, in its own buffer got[w + k]. */
            ITEST_ASSERT(memcmp(ans[k]->data, want, MSG_LEN) == 0,
                         "contents of answer %u", seq);
            pscom_request_free(ans[k]);
        }
    }
    itest_link_send_str(link, "done");
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_child_t a, q;

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_note("transport %s", itest_transport_name());
    itest_spawn(&a, "answerer", answerer, NULL);
    itest_spawn(&q, "asker", asker, NULL);
    itest_link_relay(&a.link, &q.link); /* the endpoint */
    itest_link_relay(&a.link, &q.link); /* ready */
    itest_link_relay(&q.link, &a.link); /* done */
    int failed = itest_children_check((itest_child_t *[]){&a, &q}, 2);
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
