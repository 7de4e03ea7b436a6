/*
 * Running out of file descriptors.
 *
 *   fd_limit client   the client lowers its hard RLIMIT_NOFILE to 64 before
 *                     pscom_init, then opens N_CONNECT direct connections
 *                     to the server (each costs it one descriptor). The ones
 *                     that do not fit must fail cleanly: pscom_connect
 *                     returns an error, promptly, without a crash. Every
 *                     connection that succeeded then carries a verified
 *                     message each way, more than MIN_CLIENT_OK of them
 *                     succeeded, and the client's log (PSP_DEBUG_OUT) names
 *                     the open files limit.
 *   fd_limit server   the server lowers its hard limit to 48; the client
 *                     (normal limit) opens N_CONNECT connections. The server
 *                     keeps working for the connections it accepted, the
 *                     others fail on the client's side at once (the server
 *                     refuses them with its spare descriptor instead of
 *                     leaving them to the handshake timeout: all attempts
 *                     together stay under ALL_DEADLINE_S), and the server's log
 *                     names the limit, rate-limited: at least one line and
 *                     fewer than MAX_SERVER_LOG_LINES.
 *
 * Run with PSP_RETRY=2 and PSP_CONNECT_TIMEOUT=2000 to keep failures fast.
 */
#include "conn_util.h"
#include "itest.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_CONNECT            100
#define CLIENT_NOFILE        64
#define SERVER_NOFILE        48
#define MIN_CLIENT_OK        30
#define MIN_SERVER_OK        20
#define MAX_SERVER_LOG_LINES 20
#define FAIL_DEADLINE_S      30.0 /* one failing pscom_connect, at most */
#define ALL_DEADLINE_S       45.0 /* all N_CONNECT attempts (about 2 s) */
#define MAX_LEN              4096
#define LIMIT_TEXT           "open files limit"

enum side { SIDE_CLIENT, SIDE_SERVER };

struct job {
    enum side limited; /* which process runs with the low limit */
    const char *log;   /* its PSP_DEBUG_OUT */
};

static size_t c2s_len(uint32_t k)
{
    return 100 + 37 * (size_t)k;
}

static size_t s2c_len(uint32_t k)
{
    return 200 + 11 * (size_t)k;
}

static int n_con_errors;

/* Quiet: a hundred connections would make a hundred lines. */
static void count_con_error(pscom_connection_t *con, pscom_op_t op,
                            pscom_err_t err)
{
    (void)con;
    (void)op;
    (void)err;
    n_con_errors++;
}

static void limit_this_process(const struct job *job, rlim_t limit)
{
    if (setenv("PSP_DEBUG_OUT", job->log, 1) < 0)
        ITEST_FAIL("setenv: %s", strerror(errno));
    conn_set_nofile(limit);
    itest_note("RLIMIT_NOFILE is %llu (soft and hard), %d descriptors open, "
               "logging to %s",
               (unsigned long long)limit, conn_count_fds(0), job->log);
}

/* ---------------------------------------------------------------------- */

static int server(itest_link_t *link, void *arg)
{
    const struct job *job = arg;
    pscom_socket_t *sock;
    pscom_request_t *req;
    uint8_t *buf, reply[MAX_LEN];
    uint64_t served = 0, expected;
    char *ep;

    if (job->limited == SIDE_SERVER) limit_this_process(job, SERVER_NOFILE);
    itest_pscom_init();
    sock = itest_open_socket("server", 1);
    sock->ops.con_error = count_con_error;
    ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);

    itest_step("serving: echoing verified messages until told to stop");
    buf = itest_alloc_guarded(MAX_LEN);
    req = itest_request(4);
    for (;;) {
        uint32_t k;
        req->socket = sock;
        req->connection = NULL;
        req->data = buf;
        req->data_len = MAX_LEN;
        req->xheader_len = 4;
        pscom_post_recv(req);
        while (!pscom_req_is_done(req) && !itest_link_ready(link, 0))
            itest_progress_once();
        if (!pscom_req_is_done(req)) break;
        ITEST_ASSERT_REQ_OK(req, "message %llu", (unsigned long long)served);
        memcpy(&k, &req->xheader.user, 4);
        ITEST_ASSERT(k < N_CONNECT, "message index %u", k);
        ITEST_ASSERT_EQ(req->header.data_len, c2s_len(k), "length of %u", k);
        ITEST_ASSERT_PATTERN(buf, c2s_len(k), 0x1000u + k, "message %u", k);
        ITEST_ASSERT_GUARD(buf, MAX_LEN, "receive buffer");
        itest_fill(reply, s2c_len(k), 0x2000u + k);
        pscom_send(req->connection, &k, 4, reply, s2c_len(k));
        served++;
    }
    ITEST_ASSERT(pscom_cancel_recv(req), "cancelling the last receive");
    expected = itest_link_recv_u64(link);
    itest_note("accepted %d connections, served %llu messages, %d "
               "connection errors",
               itest_accept_count(), (unsigned long long)served,
               n_con_errors);
    ITEST_ASSERT_EQ(served, expected,
                    "messages served: one per connection the client got");
    ITEST_ASSERT_EQ(itest_accept_count(), expected,
                    "accepted connections: exactly those the client got");

    pscom_request_free(req);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

static int client(itest_link_t *link, void *arg)
{
    const struct job *job = arg;
    pscom_socket_t *sock;
    pscom_connection_t *cons[N_CONNECT];
    uint32_t idx[N_CONNECT];
    pscom_request_t *rr[N_CONNECT], *sr[N_CONNECT];
    uint8_t *rbuf[N_CONNECT], *sbuf[N_CONNECT];
    int ok = 0, failed = 0;
    pscom_err_t first_err = PSCOM_SUCCESS;
    double worst = 0, t_all;
    char *ep;

    if (job->limited == SIDE_CLIENT) limit_this_process(job, CLIENT_NOFILE);
    itest_pscom_init();
    sock = itest_open_socket("client", 0);
    sock->ops.con_error = count_con_error;
    ep = itest_link_recv_str(link);

    itest_step("opening %d direct connections to %s", N_CONNECT, ep);
    t_all = itest_now();
    for (uint32_t i = 0; i < N_CONNECT; i++) {
        pscom_connection_t *con = pscom_open_connection(sock);
        double t0 = itest_now(), dt;
        pscom_err_t rc;

        ITEST_ASSERT(con != NULL, "pscom_open_connection %u", i);
        itest_substep("connection %u", i);
        rc = pscom_connect(con, ep, PSCOM_RANK_UNDEFINED,
                           PSCOM_CON_FLAG_DIRECT);
        dt = itest_now() - t0;
        if (rc == PSCOM_SUCCESS) {
            ITEST_ASSERT(con->type != PSCOM_CON_TYPE_NONE &&
                             con->type != PSCOM_CON_TYPE_ONDEMAND,
                         "connection %u is connected after success", i);
            cons[ok] = con;
            idx[ok] = i;
            ok++;
            continue;
        }
        ITEST_ASSERT(rc < 0, "pscom_connect returned %d", (int)rc);
        ITEST_ASSERT(dt < FAIL_DEADLINE_S,
                     "connection %u took %.1f s to fail", i, dt);
        ITEST_ASSERT(itest_now() - t_all < ALL_DEADLINE_S,
                     "%u connection attempts (%d failed) took %.1f s: a "
                     "connection the peer cannot take must fail at once "
                     "(refused with the spare descriptor), not by the "
                     "handshake timeout",
                     i + 1, failed + 1, itest_now() - t_all);
        if (!failed) {
            first_err = rc;
            itest_note("first failure: connection %u after %d successes: "
                       "%s (after %.3f s)",
                       i, ok, pscom_err_str(rc), dt);
        }
        if (dt > worst) worst = dt;
        failed++;
        pscom_close_connection(con);
    }
    itest_note("%d connected, %d failed (first: %s), slowest failure "
               "%.3f s, all %d attempts %.2f s",
               ok, failed, failed ? pscom_err_str(first_err) : "-", worst,
               N_CONNECT, itest_now() - t_all);
    ITEST_ASSERT(failed > 0, "some connections must fail: %d descriptors "
                 "cannot hold %d connections", job->limited == SIDE_CLIENT
                     ? CLIENT_NOFILE : SERVER_NOFILE, N_CONNECT);
    if (job->limited == SIDE_CLIENT)
        ITEST_ASSERT(ok > MIN_CLIENT_OK, "%d connections succeeded, expected "
                     "more than %d", ok, MIN_CLIENT_OK);
    else
        ITEST_ASSERT(ok >= MIN_SERVER_OK && ok < SERVER_NOFILE,
                     "%d connections succeeded, expected %d..%d", ok,
                     MIN_SERVER_OK, SERVER_NOFILE - 1);

    itest_step("exchanging a verified message on each of the %d", ok);
    for (int j = 0; j < ok; j++) {
        uint32_t k = idx[j];
        rbuf[j] = itest_alloc_guarded(s2c_len(k));
        sbuf[j] = malloc(c2s_len(k));
        ITEST_ASSERT(sbuf[j] != NULL, "out of memory");
        itest_fill(sbuf[j], c2s_len(k), 0x1000u + k);
        rr[j] = itest_request(4);
        pscom_req_prepare(rr[j], cons[j], rbuf[j], s2c_len(k), NULL, 4);
        pscom_post_recv(rr[j]);
        sr[j] = itest_request(4);
        pscom_req_prepare(sr[j], cons[j], sbuf[j], c2s_len(k), &k, 4);
        pscom_post_send(sr[j]);
    }
    for (int j = 0; j < ok; j++) {
        uint32_t k = idx[j], got;
        pscom_wait(sr[j]);
        pscom_wait(rr[j]);
        ITEST_ASSERT_REQ_OK(sr[j], "send on connection %u", k);
        ITEST_ASSERT_REQ_OK(rr[j], "answer on connection %u", k);
        memcpy(&got, &rr[j]->xheader.user, 4);
        ITEST_ASSERT_EQ(got, k, "answer's index on connection %u", k);
        ITEST_ASSERT_EQ(rr[j]->header.data_len, s2c_len(k), "answer length");
        ITEST_ASSERT_PATTERN(rbuf[j], s2c_len(k), 0x2000u + k,
                             "answer on connection %u", k);
        ITEST_ASSERT_GUARD(rbuf[j], s2c_len(k), "answer buffer %u", k);
    }
    itest_link_send_u64(link, (uint64_t)ok);
    itest_link_recv_u64(link); /* bye */
    for (int j = 0; j < ok; j++) {
        pscom_request_free(rr[j]);
        pscom_request_free(sr[j]);
        free(rbuf[j]);
        free(sbuf[j]);
    }
    free(ep);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */

static int run(enum side limited)
{
    itest_child_t srv, cli;
    itest_child_t *list[2] = {&srv, &cli};
    struct job job;
    char first[512];
    uint64_t ok;
    char *ep;
    int rc, lines;

    job.limited = limited;
    job.log = conn_tmp_log(limited == SIDE_CLIENT ? "client" : "server");
    itest_spawn(&srv, "server", server, &job);
    itest_spawn(&cli, "client", client, &job);
    ep = itest_link_recv_str(&srv.link);
    itest_link_send_str(&cli.link, ep);
    free(ep);
    ok = itest_link_recv_u64(&cli.link);
    itest_link_send_u64(&srv.link, ok);
    itest_link_send_u64(&cli.link, 1);
    rc = itest_children_check(list, 2);
    if (rc) {
        itest_note("the %s's log is kept in %s",
                   limited == SIDE_CLIENT ? "client" : "server", job.log);
        return rc;
    }

    itest_step("checking the %s's log %s",
               limited == SIDE_CLIENT ? "client" : "server", job.log);
    lines = conn_grep_count(job.log, LIMIT_TEXT, first, sizeof(first));
    ITEST_ASSERT(lines >= 0, "cannot read %s", job.log);
    itest_note("%d lines name the limit; the first: %s", lines,
               lines ? first : "(none)");
    ITEST_ASSERT(lines >= 1, "the log %s must say \"%s\"", job.log,
                 LIMIT_TEXT);
    if (limited == SIDE_SERVER)
        ITEST_ASSERT(lines < MAX_SERVER_LOG_LINES,
                     "%d log lines about the limit: not rate-limited", lines);
    unlink(job.log);
    itest_note("PASS");
    return 0;
}

int main(int argc, char **argv)
{
    itest_set_role("orchestrator");
    itest_watchdog(150);
    if (argc == 2 && !strcmp(argv[1], "client")) return run(SIDE_CLIENT);
    if (argc == 2 && !strcmp(argv[1], "server")) return run(SIDE_SERVER);
    fprintf(stderr, "usage: %s client|server\n", argv[0]);
    return 2;
}
