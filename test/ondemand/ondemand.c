/*
 * On-demand connections between real processes.
 *
 *   ondemand alltoall N REPS   N processes, each with an on-demand connection
 *                              to every other, all sending at the same moment;
 *                              REPS times with fresh processes. Checks every
 *                              byte and exactly one connection per pair.
 *   ondemand pair MODE         two processes; MODE is
 *                              simultaneous  both send first at once
 *                              low-first     the lower name sends first
 *                              high-first    the higher name sends first
 *                              busy-low      the higher sends while the lower
 *                                            computes (no pscom call) for 1 s
 *                              busy-high     the other way round
 *   ondemand direct            both pscom_connect(DIRECT) to each other at
 *                              the same instant: two working connections
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define MSG_BASE 1000

struct job {
    int n;
    int me;
    const char *mode;
};

static void rank_name(char *buf, int rank)
{
    snprintf(buf, 9, "r%07d", rank);
}

/* Size and pattern seed of the message from rank a to rank b. */
static size_t msg_len(int a, int b)
{
    return MSG_BASE + (size_t)a * 37 + (size_t)b;
}

static uint32_t msg_seed(int a, int b)
{
    return 0x1000u * (uint32_t)a + (uint32_t)b + 1;
}

static int count_connections(pscom_socket_t *sock)
{
    int n = 0;
    for (pscom_connection_t *c = pscom_get_next_connection(sock, NULL); c;
         c = pscom_get_next_connection(sock, c))
        n++;
    return n;
}

/* One rank: connect on demand to all, exchange, check. */
static int rank_main(itest_link_t *link, void *arg)
{
    struct job *job = arg;
    int n = job->n, me = job->me;
    char name[9];

    itest_pscom_init();
    rank_name(name, me);
    pscom_socket_t *sock = itest_open_socket(name, 1);
    char *ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);

    pscom_connection_t **cons = calloc(n, sizeof(*cons));
    for (int j = 0; j < n; j++) {
        char *pep = itest_link_recv_str(link);
        if (j != me) {
            cons[j] = pscom_open_connection(sock);
            ITEST_ASSERT_EQ(pscom_connect(cons[j], pep, j, PSCOM_CON_FLAG_ONDEMAND),
                            PSCOM_SUCCESS, "on-demand connect to rank %d", j);
            ITEST_ASSERT_EQ(cons[j]->type, PSCOM_CON_TYPE_ONDEMAND,
                            "no traffic before the first message");
        }
        free(pep);
    }

    /* Who sends first, and who computes meanwhile. */
    const char *mode = job->mode;
    bool busy = (!strcmp(mode, "busy-low") && me == 0) ||
                (!strcmp(mode, "busy-high") && me == 1);
    bool wait_turn = (!strcmp(mode, "low-first") && me == 1) ||
                     (!strcmp(mode, "high-first") && me == 0);

    pscom_request_t **rr = calloc(n, sizeof(*rr));
    pscom_request_t **sr = calloc(n, sizeof(*sr));
    void **rbuf = calloc(n, sizeof(*rbuf));
    void **sbuf = calloc(n, sizeof(*sbuf));
    itest_link_recv_u64(link); /* go */

    if (busy) {
        itest_sleep_ms(1000); /* computing: no pscom call at all */
    }
    for (int j = 0; j < n; j++) {
        if (j == me) continue;
        rbuf[j] = malloc(msg_len(j, me));
        rr[j] = pscom_request_create(4, 0);
        rr[j]->connection = cons[j];
        rr[j]->data = rbuf[j];
        rr[j]->data_len = msg_len(j, me);
        rr[j]->xheader_len = 4;
        pscom_post_recv(rr[j]);
    }
    if (wait_turn) {
        /* Only answer after the peer's message is in. */
        for (int j = 0; j < n; j++)
            if (rr[j]) pscom_wait(rr[j]);
    }
    for (int j = 0; j < n; j++) {
        if (j == me) continue;
        sbuf[j] = malloc(msg_len(me, j));
        itest_fill(sbuf[j], msg_len(me, j), msg_seed(me, j));
        sr[j] = pscom_request_create(4, 0);
        uint32_t from = (uint32_t)me;
        memcpy(&sr[j]->xheader, &from, 4);
        pscom_req_prepare(sr[j], cons[j], sbuf[j], msg_len(me, j), NULL, 4);
        pscom_post_send(sr[j]);
    }
    for (int j = 0; j < n; j++) {
        if (j == me) continue;
        pscom_wait(rr[j]);
        pscom_wait(sr[j]);
        ITEST_ASSERT_REQ_OK(rr[j], "receive from rank %d", j);
        ITEST_ASSERT_REQ_OK(sr[j], "send to rank %d", j);
        uint32_t from;
        memcpy(&from, &rr[j]->xheader, 4);
        ITEST_ASSERT_EQ(from, (uint32_t)j, "message on the connection to %d", j);
        ITEST_ASSERT_PATTERN(rbuf[j], msg_len(j, me), msg_seed(j, me),
                             "data from rank %d", j);
        ITEST_ASSERT(cons[j]->type != PSCOM_CON_TYPE_ONDEMAND,
                     "connection to rank %d is connected", j);
    }
    /* Exactly one connection per pair: ours, none accepted on the side. */
    ITEST_ASSERT_EQ(count_connections(sock), n - 1,
                    "connections of rank %d's socket", me);
    ITEST_ASSERT_EQ(itest_accept_count(), 0,
                    "connections accepted besides the on-demand ones");

    itest_link_send_u64(link, 1); /* done */
    itest_link_recv_u64(link);    /* everybody is done: close */
    for (int j = 0; j < n; j++) {
        if (j == me) continue;
        pscom_request_free(rr[j]);
        pscom_request_free(sr[j]);
        free(rbuf[j]);
        free(sbuf[j]);
    }
    pscom_close_socket(sock);
    free(cons);
    free(rr);
    free(sr);
    free(rbuf);
    free(sbuf);
    return 0;
}

static int run_job(int n, const char *mode)
{
    itest_child_t *kids = calloc(n, sizeof(*kids));
    itest_child_t **list = calloc(n, sizeof(*list));
    struct job *jobs = calloc(n, sizeof(*jobs));
    char **eps = calloc(n, sizeof(*eps));

    for (int i = 0; i < n; i++) {
        jobs[i] = (struct job){.n = n, .me = i, .mode = mode};
        char role[32];
        snprintf(role, sizeof(role), "rank%d", i);
        itest_spawn(&kids[i], role, rank_main, &jobs[i]);
        list[i] = &kids[i];
    }
    for (int i = 0; i < n; i++) eps[i] = itest_link_recv_str(&kids[i].link);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) itest_link_send_str(&kids[i].link, eps[j]);
    for (int i = 0; i < n; i++) itest_link_send_u64(&kids[i].link, 1); /* go */
    for (int i = 0; i < n; i++) itest_link_recv_u64(&kids[i].link);   /* done */
    for (int i = 0; i < n; i++) itest_link_send_u64(&kids[i].link, 1); /* close */
    int rc = itest_children_check(list, n);
    for (int i = 0; i < n; i++) free(eps[i]);
    free(eps);
    free(jobs);
    free(list);
    free(kids);
    return rc;
}

/* Both call pscom_connect(DIRECT) to the other at the same time. */
static int direct_main(itest_link_t *link, void *arg)
{
    int me = *(int *)arg;
    char name[9];
    itest_pscom_init();
    rank_name(name, me);
    pscom_socket_t *sock = itest_open_socket(name, 1);
    char *ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    char *pep = itest_link_recv_str(link);
    itest_link_recv_u64(link); /* go */
    pscom_connection_t *c = itest_connect(sock, pep);
    free(pep);
    /* The peer's own connection to us arrives as an accepted one. */
    pscom_connection_t *acc = itest_wait_accept(1);
    char out[64], in[64], want[64];
    snprintf(out, sizeof(out), "hello from %d", me);
    snprintf(want, sizeof(want), "hello from %d", 1 - me);
    pscom_send(c, NULL, 0, out, strlen(out) + 1);
    pscom_send(acc, NULL, 0, out, strlen(out) + 1);
    pscom_connection_t *both[2] = {c, acc};
    for (int i = 0; i < 2; i++) {
        memset(in, 0, sizeof(in));
        pscom_request_t *r = itest_request(0);
        r->connection = both[i];
        r->data = in;
        r->data_len = strlen(want) + 1;
        pscom_post_recv(r);
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "receive on connection %d", i);
        ITEST_ASSERT(!strcmp(in, want), "got \"%s\", expected \"%s\"", in,
                     want);
        pscom_request_free(r);
    }
    ITEST_ASSERT_EQ(count_connections(sock), 2, "two connections");
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_close_socket(sock);
    return 0;
}

static int run_direct(void)
{
    itest_child_t kids[2];
    itest_child_t *list[2] = {&kids[0], &kids[1]};
    int ids[2] = {0, 1};
    itest_spawn(&kids[0], "rank0", direct_main, &ids[0]);
    itest_spawn(&kids[1], "rank1", direct_main, &ids[1]);
    char *e0 = itest_link_recv_str(&kids[0].link);
    char *e1 = itest_link_recv_str(&kids[1].link);
    itest_link_send_str(&kids[0].link, e1);
    itest_link_send_str(&kids[1].link, e0);
    itest_link_send_u64(&kids[0].link, 1);
    itest_link_send_u64(&kids[1].link, 1);
    itest_link_recv_u64(&kids[0].link);
    itest_link_recv_u64(&kids[1].link);
    itest_link_send_u64(&kids[0].link, 1);
    itest_link_send_u64(&kids[1].link, 1);
    free(e0);
    free(e1);
    return itest_children_check(list, 2);
}

/* Each round in a process of its own: fresh processes, fresh bookkeeping. */
static int run_round(int n, const char *mode)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) ITEST_FAIL("fork(): %s", strerror(errno));
    if (pid == 0) exit(run_job(n, mode));
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(int argc, char **argv)
{
    itest_set_role("orchestrator");
    itest_watchdog(600);
    if (argc >= 2 && !strcmp(argv[1], "alltoall")) {
        int n = argc > 2 ? atoi(argv[2]) : 32;
        int reps = argc > 3 ? atoi(argv[3]) : 20;
        for (int r = 0; r < reps; r++) {
            itest_step("all-to-all of %d processes, round %d of %d", n, r + 1,
                       reps);
            if (run_round(n, "simultaneous")) return ITEST_EXIT_FAIL;
        }
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "pair")) {
        for (int r = 0; r < 10; r++) {
            itest_step("pair, %s, round %d", argv[2], r + 1);
            if (run_round(2, argv[2])) return ITEST_EXIT_FAIL;
            if (!strncmp(argv[2], "busy", 4)) break; /* takes a second */
        }
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "direct")) {
        itest_step("direct connects at the same instant");
        return run_direct();
    }
    fprintf(stderr, "usage: %s alltoall N REPS | pair MODE | direct\n",
            argv[0]);
    return 2;
}
