/*
 * A listener flooded with half-open connections.
 *
 *   halfopen_flood flood     500 raw TCP connections to a pscom listener
 *                            that send nothing, and a few that send 1..11
 *                            bytes of garbage and stall. The listener must
 *                            take them all in (ACCEPT_DEADLINE_S); while
 *                            they are open, a real pscom client connects
 *                            and exchanges a verified 1 MiB message each way
 *                            within CLIENT_DEADLINE. The listener then
 *                            closes its socket and exits cleanly with the
 *                            raw connections still open.
 *   halfopen_flood timeout   run with PSP_CONNECT_TIMEOUT=1000: the listener
 *                            must close every stalled handshake by itself
 *                            (the raw sockets see EOF or a reset) within
 *                            STALL_DEADLINE_S; then a real client still
 *                            gets through.
 *
 * The orchestrator holds the raw connections, so it raises its own
 * RLIMIT_NOFILE first. It watches the listener's descriptor count in
 * /proc to know that the listener has accepted the whole flood before the
 * real client starts.
 */
#include "conn_util.h"
#include "itest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define N_SILENT          500
#define N_GARBAGE         8
#define N_RAW             (N_SILENT + N_GARBAGE)
#define MSG_LEN           (1024 * 1024)
#define SEED_C2S          0xf100d001u
#define SEED_S2C          0xf100d002u
#define STALL_DEADLINE_S  10.0 /* to drop every stalled handshake */
#define CLIENT_DEADLINE   30   /* seconds for connect + exchange */
#define ACCEPT_DEADLINE_S 20.0 /* for the listener to take in the flood */

enum { CMD_QUIT = 1 };

/* ---------------------------------------------------------------------- */
/* The listener and the real client                                       */

static int listener(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_request_t *in, *out;
    void *buf, *ans;
    char *ep;

    (void)arg;
    itest_pscom_init();
    sock = itest_open_socket("listener", 1);
    ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    itest_link_send_u64(link, (uint64_t)conn_count_fds(0));

    itest_step("serving while flooded: waiting for the real client's 1 MiB");
    buf = itest_alloc_guarded(MSG_LEN);
    in = itest_request(4);
    in->socket = sock;
    in->connection = NULL;
    in->data = buf;
    in->data_len = MSG_LEN;
    in->xheader_len = 0;
    pscom_post_recv(in);
    ITEST_PROGRESS_UNTIL(pscom_req_is_done(in));
    ITEST_ASSERT_REQ_OK(in, "the real client's message");
    ITEST_ASSERT_EQ(in->header.data_len, MSG_LEN, "message length");
    ITEST_ASSERT_PATTERN(buf, MSG_LEN, SEED_C2S, "the client's 1 MiB");
    ITEST_ASSERT_GUARD(buf, MSG_LEN, "receive buffer");

    itest_step("answering with 1 MiB");
    ans = malloc(MSG_LEN);
    ITEST_ASSERT(ans != NULL, "out of memory");
    itest_fill(ans, MSG_LEN, SEED_S2C);
    out = itest_request(4);
    pscom_req_prepare(out, in->connection, ans, MSG_LEN, NULL, 0);
    pscom_post_send(out);
    ITEST_PROGRESS_UNTIL(pscom_req_is_done(out));
    ITEST_ASSERT_REQ_OK(out, "the answer to the real client");

    itest_step("serving until told to quit");
    conn_progress_until_link(link);
    ITEST_ASSERT_EQ(itest_link_recv_u64(link), CMD_QUIT, "command");
    ITEST_ASSERT_EQ(itest_accept_count(), 1,
                    "accepted connections: the flood must never become a "
                    "connection");

    itest_step("closing the socket with the flood still connected");
    pscom_request_free(in);
    pscom_request_free(out);
    free(buf);
    free(ans);
    pscom_close_socket(sock);
    itest_step("closed");
    return 0;
}

static int client(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *s, *r;
    void *out, *in;
    char *ep;
    double t0;

    (void)arg;
    itest_pscom_init();
    sock = itest_open_socket("client", 0);
    ep = itest_link_recv_str(link);
    itest_link_recv_u64(link); /* go */

    itest_watchdog(CLIENT_DEADLINE);
    t0 = itest_now();
    itest_step("connecting to the flooded listener %s", ep);
    con = itest_connect(sock, ep);
    free(ep);
    itest_note("connected after %.3f s", itest_now() - t0);

    itest_step("exchanging 1 MiB each way");
    out = malloc(MSG_LEN);
    ITEST_ASSERT(out != NULL, "out of memory");
    itest_fill(out, MSG_LEN, SEED_C2S);
    in = itest_alloc_guarded(MSG_LEN);
    r = itest_request(4);
    pscom_req_prepare(r, con, in, MSG_LEN, NULL, 0);
    pscom_post_recv(r);
    s = itest_request(4);
    pscom_req_prepare(s, con, out, MSG_LEN, NULL, 0);
    pscom_post_send(s);
    pscom_wait(s);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(s, "sending 1 MiB");
    ITEST_ASSERT_REQ_OK(r, "receiving 1 MiB");
    ITEST_ASSERT_EQ(r->header.data_len, MSG_LEN, "answer length");
    ITEST_ASSERT_PATTERN(in, MSG_LEN, SEED_S2C, "the listener's answer");
    ITEST_ASSERT_GUARD(in, MSG_LEN, "receive buffer");
    itest_note("connect and exchange took %.3f s", itest_now() - t0);
    itest_watchdog(ITEST_DEFAULT_TIMEOUT);

    itest_link_send_u64(link, 1); /* done */
    itest_link_recv_u64(link);    /* bye */
    pscom_request_free(s);
    pscom_request_free(r);
    free(out);
    free(in);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* The raw connections                                                    */

static int raw_connect(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) ITEST_FAIL("socket(): %s", strerror(errno));
    while (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0) {
        if (errno == EINTR) continue;
        ITEST_FAIL("raw connect to port %d: %s", ntohs(sa->sin_port),
                   strerror(errno));
    }
    return fd;
}

/* Garbage of 1..11 bytes: never a whole 12-byte record header. Two of them
 * start like a real header (magic "PSCP", version 1) and then stall. */
static void send_garbage(int fd, int i)
{
    static const uint8_t real_start[] = {'P', 'S', 'C', 'P', 1, 1, 0, 0,
                                         0,   0,   0};
    uint8_t buf[11];
    size_t len = 1 + (size_t)(i * 3) % 11;

    if (i < 2) {
        len = i == 0 ? 5 : 11;
        memcpy(buf, real_start, len);
    } else {
        itest_fill(buf, sizeof(buf), 0xbad00000u + (uint32_t)i);
    }
    if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
        ITEST_FAIL("sending %zu bytes of garbage: %s", len, strerror(errno));
}

/* 1 when the listener closed (or reset) the raw connection. */
static int raw_closed(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    if (n == 0) return 1;
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) return 1;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n > 0)
        ITEST_FAIL("the listener sent data on a raw connection that never "
                   "sent a valid record");
    ITEST_FAIL("recv() on a raw connection: %s", strerror(errno));
}

static int count_closed(const int *fds, int n)
{
    int closed = 0;
    for (int i = 0; i < n; i++) closed += raw_closed(fds[i]);
    return closed;
}

/* ---------------------------------------------------------------------- */

static int run(int timeout_mode)
{
    itest_child_t lis, cli;
    itest_child_t *list[2] = {&lis, &cli};
    struct sockaddr_in sa;
    char host[256];
    int port, base_fds, *fds;
    rlim_t lim;
    char *ep;
    double t0;

    lim = conn_raise_nofile();
    if (lim < N_RAW + 64) {
        itest_note("SKIP: the open files limit is %llu, the flood needs %d",
                   (unsigned long long)lim, N_RAW + 64);
        return 77;
    }

    /* Children first, so they do not inherit the raw connections. */
    itest_spawn(&lis, "listener", listener, NULL);
    itest_spawn(&cli, "client", client, NULL);
    ep = itest_link_recv_str(&lis.link);
    base_fds = (int)itest_link_recv_u64(&lis.link);
    itest_link_send_str(&cli.link, ep);
    conn_parse_ep(ep, host, sizeof(host), &port);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    ITEST_ASSERT(inet_pton(AF_INET, host, &sa.sin_addr) == 1,
                 "endpoint host \"%s\" is not an IPv4 address", host);

    itest_step("opening %d silent and %d garbage raw connections to %s",
               N_SILENT, N_GARBAGE, ep);
    fds = calloc(N_RAW, sizeof(*fds));
    ITEST_ASSERT(fds != NULL, "out of memory");
    for (int i = 0; i < N_RAW; i++) {
        fds[i] = raw_connect(&sa);
        if (i >= N_SILENT) send_garbage(fds[i], i - N_SILENT);
    }

    itest_step("waiting until the listener has accepted all %d", N_RAW);
    t0 = itest_now();
    for (;;) {
        int n = conn_count_fds(lis.pid);
        ITEST_ASSERT(n >= 0, "cannot read /proc/%d/fd", (int)lis.pid);
        /* Those it closed already (garbage, timeouts) were accepted too. */
        n = n - base_fds + count_closed(fds, N_RAW);
        if (n >= N_RAW) break;
        ITEST_ASSERT(itest_now() - t0 < ACCEPT_DEADLINE_S,
                     "the listener accepted only %d of the %d raw "
                     "connections within %.0f s: is it blocked on one of "
                     "them?", n, N_RAW, ACCEPT_DEADLINE_S);
        itest_sleep_ms(10);
    }
    itest_note("listener holds %d descriptors (%d before the flood), %d of "
               "the raw connections were closed by it so far",
               conn_count_fds(lis.pid), base_fds, count_closed(fds, N_RAW));

    if (timeout_mode) {
        int closed = 0;
        itest_step("waiting up to %.0f s for the listener to drop the %d "
                   "stalled handshakes",
                   STALL_DEADLINE_S, N_RAW);
        t0 = itest_now();
        while (itest_now() - t0 < STALL_DEADLINE_S) {
            closed = count_closed(fds, N_RAW);
            if (closed == N_RAW) break;
            itest_sleep_ms(100);
        }
        closed = count_closed(fds, N_RAW);
        itest_note("%d of %d stalled handshakes dropped after %.2f s", closed,
                   N_RAW, itest_now() - t0);
        ITEST_ASSERT_EQ(closed, N_RAW,
                        "raw connections the listener closed within %.0f s "
                        "(PSP_CONNECT_TIMEOUT=%s)",
                        STALL_DEADLINE_S, getenv("PSP_CONNECT_TIMEOUT")
                                              ? getenv("PSP_CONNECT_TIMEOUT")
                                              : "unset");
    }

    itest_step("the real client connects and exchanges");
    itest_link_send_u64(&cli.link, 1); /* go */
    itest_link_recv_u64(&cli.link);    /* done */
    if (!timeout_mode)
        itest_note("%d raw connections were still open while the client ran",
                   N_RAW - count_closed(fds, N_RAW));

    itest_step("telling the listener to quit, the flood still connected");
    itest_link_send_u64(&lis.link, CMD_QUIT);
    itest_link_send_u64(&cli.link, 1); /* bye */
    int rc = itest_children_check(list, 2);
    for (int i = 0; i < N_RAW; i++) close(fds[i]);
    free(fds);
    free(ep);
    if (rc == 0) itest_note("PASS");
    return rc;
}

int main(int argc, char **argv)
{
    itest_set_role("orchestrator");
    itest_watchdog(120);
    if (argc == 2 && !strcmp(argv[1], "flood")) return run(0);
    if (argc == 2 && !strcmp(argv[1], "timeout")) return run(1);
    fprintf(stderr, "usage: %s flood|timeout\n", argv[0]);
    return 2;
}
