/*
 * Three sender processes connect to one receiver and each send 500 messages
 * of 0..100k bytes with (sender id, seq) in the xheader. The receiver posts
 * only any-source receives (connection NULL, socket set), handles them in
 * posting order, and checks: every message intact, each sender's messages in
 * order, exactly 1500 in all, and req->connection naming the same, distinct
 * connection for each sender (whose socket name it also checks).
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>

#define N_SENDERS  3
#define N_MSGS     500
#define MAX_LEN    100000
#define WINDOW     16
#define FILL_BYTE  0x5a

struct msg_xh {
    uint32_t id;
    uint32_t seq;
    uint32_t len;
};

static size_t msg_len(uint32_t id, uint32_t seq)
{
    if (seq % 50 == 7) return 0;
    return (size_t)((seq * 2654435761u + id * 40503u + 13u) % (MAX_LEN + 1));
}

static uint32_t msg_seed(uint32_t id, uint32_t seq)
{
    return (id << 16) + seq + 7u;
}

static void sender_name(char *buf, size_t len, uint32_t id)
{
    snprintf(buf, len, "snd%u", id);
}

/* ---------------------------------------------------------------------- */

struct sender_arg {
    uint32_t id;
};

static int sender(itest_link_t *link, void *arg)
{
    uint32_t id = ((struct sender_arg *)arg)->id;
    pscom_request_t *slot[WINDOW];
    void *buf[WINDOW];
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *ack;
    char name[16], *ep;

    itest_pscom_init();
    sender_name(name, sizeof(name), id);
    sock = itest_open_socket(name, 0);
    ep   = itest_link_recv_str(link);
    itest_step("connecting to %s", ep);
    con = itest_connect(sock, ep);
    free(ep);

    itest_step("sending %d messages", N_MSGS);
    for (int i = 0; i < WINDOW; i++) {
        slot[i] = itest_request(sizeof(struct msg_xh));
        buf[i]  = malloc(MAX_LEN);
        ITEST_ASSERT(buf[i] != NULL, "out of memory");
    }
    for (uint32_t seq = 0; seq < N_MSGS; seq++) {
        int s = (int)(seq % WINDOW);
        struct msg_xh xh = {.id = id, .seq = seq, .len = (uint32_t)msg_len(id, seq)};
        if (seq >= WINDOW) {
            itest_substep("waiting for send %u", seq - WINDOW);
            pscom_wait(slot[s]);
            ITEST_ASSERT_REQ_OK(slot[s], "send %u", seq - WINDOW);
        }
        itest_fill(buf[s], xh.len, msg_seed(id, seq));
        pscom_req_prepare(slot[s], con, buf[s], xh.len, &xh, sizeof(xh));
        pscom_post_send(slot[s]);
    }
    itest_step("waiting for the last sends");
    for (int i = 0; i < WINDOW; i++) {
        pscom_wait(slot[i]);
        ITEST_ASSERT_REQ_OK(slot[i], "one of the last %d sends", WINDOW);
        pscom_request_free(slot[i]);
        free(buf[i]);
    }

    itest_step("waiting for the receiver's ack");
    ack = itest_request(16);
    ack->connection  = con;
    ack->socket      = sock;
    ack->data        = NULL;
    ack->data_len    = 0;
    ack->xheader_len = 4;
    pscom_post_recv(ack);
    pscom_wait(ack);
    ITEST_ASSERT_REQ_OK(ack, "ack");
    ITEST_ASSERT(memcmp(&ack->xheader.user, "ack", 4) == 0,
                 "the ack carries \"ack\"");
    pscom_request_free(ack);
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */

static void post_any(pscom_socket_t *sock, pscom_request_t *req, void *buf)
{
    memset(buf, FILL_BYTE, MAX_LEN);
    req->connection  = NULL;
    req->socket      = sock;
    req->data        = buf;
    req->data_len    = MAX_LEN;
    req->xheader_len = sizeof(struct msg_xh);
    req->ops.recv_accept = NULL;
    pscom_post_recv(req);
}

static void check_untouched(const uint8_t *buf, size_t from, size_t to,
                            const char *what)
{
    for (size_t i = from; i < to; i++) {
        if (buf[i] != FILL_BYTE)
            ITEST_FAIL("byte %zu of the receive buffer was written although "
                       "the message has only %zu bytes: %s",
                       i, from, what);
    }
}

static int receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_request_t *ring[WINDOW];
    void *buf[WINDOW];
    pscom_connection_t *con_of[N_SENDERS] = {NULL};
    uint32_t next_seq[N_SENDERS] = {0};
    unsigned total = 0;
    pscom_request_t *extra;
    char *ep;

    itest_pscom_init();
    sock = itest_open_socket("recv", 1);
    ep   = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);

    itest_step("receiving %d messages with any-source receives",
               N_SENDERS * N_MSGS);
    for (int i = 0; i < WINDOW; i++) {
        ring[i] = itest_request(sizeof(struct msg_xh));
        buf[i]  = itest_alloc_guarded(MAX_LEN);
        post_any(sock, ring[i], buf[i]);
    }
    /* Handle the receives in posting order: any two of them that took
     * messages of one sender must have taken them in the sender's order. */
    for (unsigned k = 0; k < N_SENDERS * N_MSGS; k++) {
        int s = (int)(k % WINDOW);
        pscom_request_t *r = ring[s];
        struct msg_xh xh;
        char name[16];

        itest_substep("waiting for any-source receive %u (%u done)", k, total);
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "any-source receive %u", k);
        ITEST_ASSERT_EQ(r->header.xheader_len, sizeof(xh),
                        "receive %u: xheader length", k);
        memcpy(&xh, &r->xheader.user, sizeof(xh));
        ITEST_ASSERT(xh.id < N_SENDERS, "receive %u: sender id %u", k, xh.id);
        ITEST_ASSERT_EQ(xh.seq, next_seq[xh.id],
                        "receive %u: sender %u's messages out of order (or "
                        "one lost)",
                        k, xh.id);
        ITEST_ASSERT_EQ(xh.len, msg_len(xh.id, xh.seq),
                        "receive %u: length in the xheader", k);
        ITEST_ASSERT_EQ(r->header.data_len, xh.len,
                        "receive %u: header.data_len (sender %u seq %u)", k,
                        xh.id, xh.seq);
        ITEST_ASSERT_PATTERN(buf[s], xh.len, msg_seed(xh.id, xh.seq),
                             "sender %u message %u", xh.id, xh.seq);
        check_untouched(buf[s], xh.len, MAX_LEN,
                        itest_fmt("sender %u message %u", xh.id, xh.seq));
        ITEST_ASSERT_GUARD(buf[s], MAX_LEN, "receive %u", k);

        ITEST_ASSERT(r->connection != NULL,
                     "receive %u: req->connection is NULL after an "
                     "any-source receive completed",
                     k);
        if (!con_of[xh.id]) {
            for (uint32_t o = 0; o < N_SENDERS; o++) {
                ITEST_ASSERT(con_of[o] != r->connection,
                             "senders %u and %u arrive on the same "
                             "connection",
                             o, xh.id);
            }
            con_of[xh.id] = r->connection;
            sender_name(name, sizeof(name), xh.id);
            ITEST_ASSERT(strncmp(r->connection->remote_con_info.name, name,
                                 sizeof(r->connection->remote_con_info.name)) ==
                             0,
                         "sender %u's connection names the peer socket "
                         "\"%.8s\", expected \"%s\"",
                         xh.id, r->connection->remote_con_info.name, name);
        }
        ITEST_ASSERT(r->connection == con_of[xh.id],
                     "receive %u: sender %u seq %u arrived on connection %p, "
                     "its earlier messages on %p",
                     k, xh.id, xh.seq, (void *)r->connection,
                     (void *)con_of[xh.id]);

        next_seq[xh.id]++;
        total++;
        if (k + WINDOW < N_SENDERS * N_MSGS) {
            post_any(sock, r, buf[s]);
        } else {
            pscom_request_free(r);
            free(buf[s]);
        }
    }
    for (uint32_t i = 0; i < N_SENDERS; i++) {
        ITEST_ASSERT_EQ(next_seq[i], N_MSGS, "messages from sender %u", i);
    }
    ITEST_ASSERT_EQ(itest_accept_count(), N_SENDERS, "accepted connections");

    itest_step("checking that no further message arrives");
    extra = itest_request(sizeof(struct msg_xh));
    {
        void *b = itest_alloc_guarded(MAX_LEN);
        post_any(sock, extra, b);
        itest_progress_ms(200);
        ITEST_ASSERT(!pscom_req_is_done(extra),
                     "a message beyond the %d expected arrived (state %s, "
                     "%zu bytes)",
                     N_SENDERS * N_MSGS, pscom_req_state_str(extra->state),
                     (size_t)extra->header.data_len);
        ITEST_ASSERT_EQ(pscom_cancel(extra), 1,
                        "cancelling the extra any-source receive");
        pscom_request_free(extra);
        free(b);
    }
    itest_note("received %u messages", total);

    itest_step("sending acks");
    for (uint32_t i = 0; i < N_SENDERS; i++) {
        pscom_request_t *a = itest_request(16);
        char text[4] = "ack";
        pscom_req_prepare(a, con_of[i], NULL, 0, text, sizeof(text));
        pscom_post_send(a);
        pscom_wait(a);
        ITEST_ASSERT_REQ_OK(a, "ack to sender %u", i);
        pscom_request_free(a);
    }
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_child_t rcv, snd[N_SENDERS];
    struct sender_arg args[N_SENDERS];
    itest_child_t *all[N_SENDERS + 1];
    char *ep;
    int failed;

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_note("transport %s", itest_transport_name());
    itest_spawn(&rcv, "receiver", receiver, NULL);
    ep     = itest_link_recv_str(&rcv.link);
    all[0] = &rcv;
    for (uint32_t i = 0; i < N_SENDERS; i++) {
        char role[32];
        snprintf(role, sizeof(role), "sender %u", i);
        args[i].id = i;
        itest_spawn(&snd[i], role, sender, &args[i]);
        itest_link_send_str(&snd[i].link, ep);
        all[i + 1] = &snd[i];
    }
    free(ep);
    failed = itest_children_check(all, N_SENDERS + 1);
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
