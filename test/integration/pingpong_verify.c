/*
 * Ping-pong between two processes over every message size from 0 B to
 * 16 MiB, with xheaders of 0 and 37 bytes, every byte checked on both
 * sides; then a burst of 200 sends alternating small and large messages
 * whose order and contents the receiver checks.
 *
 * meson runs it twice: with the default settings and with
 * PSP_RENDEZVOUS=4096, so both the eager and the rendezvous path carry the
 * large messages.
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>

#define MAX_XH 64

static const size_t sizes[] = {
    0,          1,          7,         64,        1000,
    4096,       32 * 1024,  64 * 1024, 256 * 1024, 1024 * 1024,
    4u << 20,   16u << 20,
};
static const size_t xlens[] = {0, 37};

#define BURST       200
#define BURST_SMALL 16
#define BURST_LARGE (300 * 1024)
#define BURST_FIRST 100 /* receives posted before the pause */

struct burst_xh {
    uint32_t seq;
    uint32_t len;
};

#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))
#define N_XLENS (sizeof(xlens) / sizeof(xlens[0]))

/* dir 0: client to server, dir 1: the answer. */
static uint32_t data_seed(int dir, size_t size, size_t xlen)
{
    return (uint32_t)(size * 31u + xlen * 7u + (unsigned)dir * 1000003u + 1u);
}

static uint32_t xh_seed(int dir, size_t size, size_t xlen)
{
    return data_seed(dir, size, xlen) ^ 0x5eed5eedu;
}

static void send_checked(pscom_connection_t *con, size_t size, size_t xlen,
                         uint32_t dseed, uint32_t xseed)
{
    pscom_request_t *req = itest_request(MAX_XH);
    void *buf = itest_alloc_guarded(size);

    itest_fill(buf, size, dseed);
    req->connection  = con;
    req->data        = buf;
    req->data_len    = size;
    req->xheader_len = xlen;
    itest_fill(&req->xheader.user, xlen, xseed);
    pscom_post_send(req);
    pscom_wait(req);
    ITEST_ASSERT_REQ_OK(req, "send of %zu bytes, xheader %zu", size, xlen);
    /* The library must leave the caller's buffer alone. */
    ITEST_ASSERT_PATTERN(buf, size, dseed, "send buffer after the send");
    pscom_request_free(req);
    free(buf);
}

static void recv_checked(pscom_connection_t *con, size_t size, size_t xlen,
                         uint32_t dseed, uint32_t xseed)
{
    pscom_request_t *req = itest_request(MAX_XH);
    void *buf = itest_alloc_guarded(size);

    req->connection  = con;
    req->socket      = con->socket;
    req->data        = buf;
    req->data_len    = size;
    req->xheader_len = xlen;
    pscom_post_recv(req);
    pscom_wait(req);
    ITEST_ASSERT_REQ_OK(req, "receive of %zu bytes, xheader %zu", size, xlen);
    ITEST_ASSERT_EQ(req->header.data_len, size, "received header.data_len");
    ITEST_ASSERT_EQ(req->header.xheader_len, xlen,
                    "received header.xheader_len");
    ITEST_ASSERT(req->connection == con,
                 "req->connection of a receive posted on a connection changed");
    ITEST_ASSERT_PATTERN(&req->xheader.user, xlen, xseed,
                         "xheader of the %zu-byte message", size);
    ITEST_ASSERT_PATTERN(buf, size, dseed, "data of the %zu-byte message",
                         size);
    ITEST_ASSERT_GUARD(buf, size, "receive of %zu bytes", size);
    pscom_request_free(req);
    free(buf);
}

static void pingpong(pscom_connection_t *con, int is_client)
{
    for (size_t x = 0; x < N_XLENS; x++) {
        for (size_t s = 0; s < N_SIZES; s++) {
            size_t size = sizes[s], xlen = xlens[x];
            itest_substep("ping-pong %zu bytes, xheader %zu (%s)", size, xlen,
                          is_client ? "client" : "server");
            if (is_client) {
                send_checked(con, size, xlen, data_seed(0, size, xlen),
                             xh_seed(0, size, xlen));
                recv_checked(con, size, xlen, data_seed(1, size, xlen),
                             xh_seed(1, size, xlen));
            } else {
                recv_checked(con, size, xlen, data_seed(0, size, xlen),
                             xh_seed(0, size, xlen));
                send_checked(con, size, xlen, data_seed(1, size, xlen),
                             xh_seed(1, size, xlen));
            }
        }
    }
}

static size_t burst_len(int i)
{
    return (i % 2) ? BURST_LARGE : BURST_SMALL;
}

static uint32_t burst_seed(int i)
{
    return 0xb0000000u + (uint32_t)i;
}

static void burst_send(pscom_connection_t *con)
{
    pscom_request_t *reqs[BURST + 1];
    void *bufs[BURST];

    itest_step("posting a burst of %d sends (16 B / 300 KiB alternating)",
               BURST);
    for (int i = 0; i < BURST; i++) {
        struct burst_xh xh = {.seq = (uint32_t)i, .len = (uint32_t)burst_len(i)};
        bufs[i] = malloc(burst_len(i));
        ITEST_ASSERT(bufs[i] != NULL, "out of memory");
        itest_fill(bufs[i], burst_len(i), burst_seed(i));
        reqs[i] = itest_request(MAX_XH);
        pscom_req_prepare(reqs[i], con, bufs[i], burst_len(i), &xh,
                          sizeof(xh));
        pscom_post_send(reqs[i]);
    }
    reqs[BURST] = NULL;
    itest_step("waiting for the burst sends");
    pscom_wait_all(reqs);
    for (int i = 0; i < BURST; i++) {
        ITEST_ASSERT_REQ_OK(reqs[i], "burst send %d", i);
        pscom_request_free(reqs[i]);
        free(bufs[i]);
    }
}

static void post_burst_recv(pscom_connection_t *con, pscom_request_t **reqs,
                            void **bufs, int i)
{
    bufs[i] = itest_alloc_guarded(burst_len(i));
    reqs[i] = itest_request(MAX_XH);
    reqs[i]->connection  = con;
    reqs[i]->socket      = con->socket;
    reqs[i]->data        = bufs[i];
    reqs[i]->data_len    = burst_len(i);
    reqs[i]->xheader_len = sizeof(struct burst_xh);
    pscom_post_recv(reqs[i]);
}

static void burst_recv(pscom_connection_t *con)
{
    pscom_request_t *reqs[BURST + 1];
    void *bufs[BURST];

    itest_step("posting the first %d burst receives", BURST_FIRST);
    for (int i = 0; i < BURST_FIRST; i++) post_burst_recv(con, reqs, bufs, i);
    /* Let the rest arrive with no receive posted for it: they are matched
     * as unexpected messages when their receives come. */
    itest_progress_ms(100);
    itest_step("posting the other %d burst receives", BURST - BURST_FIRST);
    for (int i = BURST_FIRST; i < BURST; i++) post_burst_recv(con, reqs, bufs, i);
    reqs[BURST] = NULL;
    itest_step("waiting for the burst receives");
    pscom_wait_all(reqs);
    for (int i = 0; i < BURST; i++) {
        struct burst_xh xh;
        pscom_request_t *r = reqs[i];
        ITEST_ASSERT_REQ_OK(r, "burst receive %d (message out of order or "
                               "lost?)", i);
        ITEST_ASSERT_EQ(r->header.xheader_len, sizeof(xh),
                        "burst receive %d: xheader length", i);
        memcpy(&xh, &r->xheader.user, sizeof(xh));
        ITEST_ASSERT_EQ(xh.seq, i,
                        "burst receive %d got message seq %u: out of order", i,
                        xh.seq);
        ITEST_ASSERT_EQ(xh.len, burst_len(i), "burst receive %d: length in "
                                              "xheader", i);
        ITEST_ASSERT_EQ(r->header.data_len, burst_len(i),
                        "burst receive %d: header.data_len", i);
        ITEST_ASSERT_PATTERN(bufs[i], burst_len(i), burst_seed(i),
                             "burst message %d", i);
        ITEST_ASSERT_GUARD(bufs[i], burst_len(i), "burst receive %d", i);
        pscom_request_free(r);
        free(bufs[i]);
    }
}

static int server(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    char *ep;

    itest_pscom_init();
    sock = itest_open_socket("server", 1);
    ep   = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);

    itest_step("waiting for the client to connect");
    con = itest_wait_accept(1);
    itest_step("ping-pong (server side)");
    pingpong(con, 0);
    burst_recv(con);
    itest_step("sending the final ack");
    send_checked(con, 0, 0, 0, 0);
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

static int client(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    char *ep;

    itest_pscom_init();
    sock = itest_open_socket("client", 0);
    ep   = itest_link_recv_str(link);
    itest_step("connecting to %s", ep);
    con = itest_connect(sock, ep);
    free(ep);
    ITEST_ASSERT(con->state & PSCOM_CON_STATE_RW,
                 "connection state after pscom_connect: %s",
                 pscom_con_state_str(con->state));
    itest_step("ping-pong (client side)");
    pingpong(con, 1);
    burst_send(con);
    itest_step("waiting for the final ack");
    recv_checked(con, 0, 0, 0, 0);
    itest_step("closing");
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_child_t srv, cli;
    char *ep;
    int failed;
    const char *rdv = getenv("PSP_RENDEZVOUS");

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_note("transport %s, PSP_RENDEZVOUS=%s", itest_transport_name(),
               rdv ? rdv : "(default)");
    itest_spawn(&srv, "server", server, NULL);
    ep = itest_link_recv_str(&srv.link);
    itest_spawn(&cli, "client", client, NULL);
    itest_link_send_str(&cli.link, ep);
    free(ep);

    failed = itest_children_check((itest_child_t *[]){&srv, &cli}, 2);
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
