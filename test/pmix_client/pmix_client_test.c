/*
 * Tests of libpscom_pmix, run as the ranks of a job under a PMIx launcher
 * (run-test.sh starts them) or alone as a singleton.
 *
 *   alltoall            bootstrap, then messages between every pair (and to
 *                       oneself), exactly one connection per pair
 *   kill [--unconnected]  the last rank SIGKILLs itself; the others'
 *                       pending receives from it fail and their handlers run
 *                       within 2 s; the survivors still talk to each other.
 *                       --unconnected: nobody connected to the victim yet,
 *                       so only the PMIx event can fail the receive
 *   events [--peers]    handler precedence, chaining and removal with events
 *                       notified to this process; a lookup from a handler
 *                       waits without pscom progress when pscom progress
 *                       runs the handler, with it when pscom_pmix_progress
 *                       does; --peers: rank 0 notifies the job, every
 *                       rank's handler sees it
 *   pubsub-server SVC RANGE   publish, serve one client, unpublish
 *   pubsub-client SVC RANGE   look up (waiting), connect, exchange
 *   singleton           no launcher: a 1-process job that still works
 *   badep MODE          rank 1 publishes a bad endpoint (MODE: missing,
 *                       malformed, wrongname); rank 0's bootstrap must fail
 *   barrier-progress    rank 0 posts a send of 64 MiB to rank 1 and enters
 *                       pscom_pmix_barrier at once; rank 1 receives it all
 *                       before it enters. More than the transport takes
 *                       without the sender's progress (over tcp: its socket
 *                       buffers), so the barrier must progress pscom. With
 *                       PSCOM_TEST_THREADED, a second thread of every rank
 *                       waits in pscom_wait meanwhile (its progress may take
 *                       the fence's wake-up) for a message the rank sends
 *                       itself after the barrier
 *   lookup-progress     as barrier-progress, but rank 0 then waits in
 *                       pscom_pmix_lookup for a service rank 1 publishes
 *                       only once it has received the 64 MiB: the lookup
 *                       must progress pscom. The default range: Open MPI
 *                       4's mpirun does not find a publish of range
 *                       namespace by another rank of the job
 *
 *   lost-messages       (2 ranks) rank 1 sends 50 messages and exits with
 *                       status 7 while rank 0 makes no pscom call; after the
 *                       event failed the connection, rank 0 receives them all
 *   closed-socket       (2 ranks) rank 0 closes its bootstrap socket and opens
 *                       connections of another one; rank 1's end fails none
 *   closed-self         (2 ranks) each rank closes its connection to itself
 *                       only: the job keeps its socket and connections
 *   dead-before-boot [--dispatched]  (2 ranks) rank 1 ends before the
 *                       bootstrap; rank 0's fails with ECONNABORTED
 *   fake-lost           (2 ranks) rank 1 notifies UNREACH; rank 0 keeps
 *                       using its server
 *   notify-failure-code (2 ranks) rank 1 notifies a peer-failure code about
 *                       no rank of the job; rank 0 keeps its connection
 *   lost-server         (1 rank) kills its launcher: LOST_CONNECTION is
 *                       noticed, the barrier fails with ENOTCONN
 *   teardown MODE       (1 rank) a PMIx registration goes while an event of
 *                       it is queued: queued (finalize), dereg, oneshot
 *   finalize-in-handler [--by-pscom]  a handler finalizes the job
 *   register-order      an event dispatched while its handler is being
 *                       registered reaches it
 *
 * PSCOM_TEST_THREADED=1 initialises pscom with pscom_init_thread().
 *
 * Every rank prints "RESULT rank R: OK ..." when its checks passed, or a
 * line with "FAIL" and exits 1. A watchdog ends a hanging rank with exit
 * status 3 and the step it hung in.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pmix.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "pscom.h"
#include "pscom_plugin.h"
#include "pscom_pmix.h"

static int g_rank = -1;
static const char *g_mode = "?";
static char g_step[160] = "startup";
static bool g_closing; /* after the result: con_error at close is expected */

static void on_alarm(int sig)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf),
                     "FAIL rank %d (%s): timeout in step: %s\n", g_rank, g_mode,
                     g_step);
    (void)sig;
    if (write(2, buf, (size_t)n) < 0) _exit(3);
    _exit(3);
}

static void step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void step(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_step, sizeof(g_step), fmt, ap);
    va_end(ap);
}

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "FAIL rank %d (%s) %s:%d: %s: ", g_rank, g_mode,   \
                    __FILE__, __LINE__, #cond);                                \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            fflush(stdout);                                                    \
            _exit(1);                                                          \
        }                                                                      \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void result_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void result_ok(const char *fmt, ...)
{
    va_list ap;
    g_closing = true;
    printf("RESULT rank %d: OK (%s) ", g_rank, g_mode);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* ---------------------------------------------------------------------- */
/* Messages with a checkable pattern                                      */
/* ---------------------------------------------------------------------- */

static size_t msg_len(int from, int to, int round)
{
    static const size_t base[] = {0, 1000, 70000, 300000};
    return base[round % 4] + (size_t)from * 7 + (size_t)to;
}

static void fill(unsigned char *p, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++) p[i] = (unsigned char)(seed * 31u + i * 7u);
}

static bool pattern_ok(const unsigned char *p, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != (unsigned char)(seed * 31u + i * 7u)) return false;
    return true;
}

static uint32_t seed_of(int from, int to, int round)
{
    return (uint32_t)(from * 1000 + to * 10 + round);
}

struct xh {
    int32_t from;
    int32_t round;
};

static pscom_request_t *new_req(void)
{
    pscom_request_t *r = pscom_request_create(sizeof(struct xh), 0);
    CHECK(r, "out of memory");
    return r;
}

/* Receive from oneself: any connection, the xheader says who sent it. */
static int accept_self(pscom_request_t *req, pscom_connection_t *con,
                       pscom_header_net_t *h)
{
    struct xh x;
    (void)req;
    (void)con;
    if (h->xheader_len != sizeof(x)) return 0;
    memcpy(&x, h->xheader, sizeof(x));
    return x.from == g_rank;
}

static int con_errors;
static double con_error_time;
static void on_con_error(pscom_connection_t *con, pscom_op_t op,
                         pscom_err_t err)
{
    if (g_closing) return;
    con_errors++;
    if (!con_error_time) con_error_time = now_s();
    printf("rank %d: con_error %s: %s during %s\n", g_rank, pscom_con_str(con),
           pscom_err_str(err), pscom_op_str(op));
    fflush(stdout);
}

/* pscom_pmix_init, before(job) when given, and the bootstrap. */
static pscom_socket_t *boot_after(pscom_pmix_job_t **job_p, unsigned flags,
                                  void (*before)(pscom_pmix_job_t *job))
{
    pscom_pmix_job_t *job;
    pscom_err_t rc;

    /* PSCOM_TEST_THREADED=1: the library with its lock (pscom_init_thread). */
    if (getenv("PSCOM_TEST_THREADED"))
        CHECK(pscom_init_thread(PSCOM_VERSION) == PSCOM_SUCCESS, "pscom_init_thread");
    step("pscom_pmix_init");
    rc = pscom_pmix_init(&job);
    CHECK(rc == PSCOM_SUCCESS, "pscom_pmix_init: %s", pscom_err_str(rc));
    g_rank = pscom_pmix_rank(job);
    if (before) before(job);
    pscom_socket_t *sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, 0);
    CHECK(sock, "pscom_open_socket");
    sock->ops.con_error = on_con_error;
    step("pscom_pmix_bootstrap");
    rc = pscom_pmix_bootstrap(job, sock, flags);
    CHECK(rc == PSCOM_SUCCESS, "pscom_pmix_bootstrap: %s", pscom_err_str(rc));
    *job_p = job;
    return sock;
}

static pscom_socket_t *boot(pscom_pmix_job_t **job_p, unsigned flags)
{
    return boot_after(job_p, flags, NULL);
}

/* One round: every rank sends to every rank (itself included) and receives
 * from every rank; every byte is checked. */
static void exchange(pscom_pmix_job_t *job, int round, const bool *skip)
{
    int n = pscom_pmix_size(job), me = pscom_pmix_rank(job);
    pscom_request_t **rr = calloc((size_t)n, sizeof(*rr));
    pscom_request_t **sr = calloc((size_t)n, sizeof(*sr));
    unsigned char **rb = calloc((size_t)n, sizeof(*rb));
    unsigned char **sb = calloc((size_t)n, sizeof(*sb));
    CHECK(rr && sr && rb && sb, "out of memory");

    step("exchange round %d: posting", round);
    for (int r = 0; r < n; r++) {
        if (skip && skip[r]) continue;
        size_t len = msg_len(r, me, round);
        rb[r] = malloc(len + 1);
        rr[r] = new_req();
        rr[r]->data = rb[r];
        rr[r]->data_len = len;
        rr[r]->xheader_len = sizeof(struct xh);
        if (r == me) {
            rr[r]->connection = NULL;
            rr[r]->socket = pscom_pmix_socket(job);
            rr[r]->ops.recv_accept = accept_self;
        } else {
            rr[r]->connection = pscom_pmix_connection(job, r);
            rr[r]->socket = pscom_pmix_socket(job);
        }
        pscom_post_recv(rr[r]);
    }
    for (int k = 1; k <= n; k++) {
        int r = (me + k) % n; /* stagger the first targets */
        if (skip && skip[r]) continue;
        size_t len = msg_len(me, r, round);
        struct xh x = {me, round};
        sb[r] = malloc(len + 1);
        fill(sb[r], len, seed_of(me, r, round));
        sr[r] = new_req();
        pscom_req_prepare(sr[r], pscom_pmix_connection(job, r), sb[r], len, &x,
                          sizeof(x));
        pscom_post_send(sr[r]);
    }
    for (int r = 0; r < n; r++) {
        if (skip && skip[r]) continue;
        step("exchange round %d: receive from rank %d", round, r);
        pscom_wait(rr[r]);
        CHECK(pscom_req_successful(rr[r]), "receive from rank %d: %s", r,
              pscom_req_state_str(rr[r]->state));
        struct xh x;
        memcpy(&x, &rr[r]->xheader, sizeof(x));
        CHECK(x.from == r && x.round == round,
              "message from rank %d round %d came as from %d round %d", r,
              round, x.from, x.round);
        CHECK(rr[r]->header.data_len == msg_len(r, me, round),
              "length from rank %d", r);
        CHECK(pattern_ok(rb[r], msg_len(r, me, round), seed_of(r, me, round)),
              "data from rank %d round %d", r, round);
        step("exchange round %d: send to rank %d", round, r);
        pscom_wait(sr[r]);
        CHECK(pscom_req_successful(sr[r]), "send to rank %d: %s", r,
              pscom_req_state_str(sr[r]->state));
    }
    for (int r = 0; r < n; r++) {
        if (rr[r]) pscom_request_free(rr[r]);
        if (sr[r]) pscom_request_free(sr[r]);
        free(rb[r]);
        free(sb[r]);
    }
    free(rr);
    free(sr);
    free(rb);
    free(sb);
}

static int count_connections(pscom_socket_t *sock)
{
    int n = 0;
    for (pscom_connection_t *c = pscom_get_next_connection(sock, NULL); c;
         c = pscom_get_next_connection(sock, c))
        n++;
    return n;
}

/* ---------------------------------------------------------------------- */
/* alltoall                                                               */
/* ---------------------------------------------------------------------- */

/* alltoall: a thread asks for the locality of every rank while the
 * bootstrap learns it. It may see -1 (not known yet), and then only the
 * final answer: never a value the bootstrap is still writing. */
static struct {
    pscom_pmix_job_t *job;
    pthread_t thread;
    int done;            /* atomic: the bootstrap returned */
    signed char seen[64]; /* the first answer other than -1, per rank */
    char bad[128];
} g_local;

static void *read_locality(void *arg)
{
    int n = pscom_pmix_size(g_local.job);
    (void)arg;
    if (n > 64) n = 64;
    memset(g_local.seen, -1, sizeof(g_local.seen));
    while (!__atomic_load_n(&g_local.done, __ATOMIC_ACQUIRE)) {
        for (int r = 0; r < n && !g_local.bad[0]; r++) {
            int v = pscom_pmix_is_local(g_local.job, r);
            if (v == -1 && g_local.seen[r] == -1) continue;
            if ((v != 0 && v != 1) || (g_local.seen[r] != -1 && v != g_local.seen[r]))
                snprintf(g_local.bad, sizeof(g_local.bad), "rank %d: %d after %d",
                         r, v, g_local.seen[r]);
            g_local.seen[r] = (signed char)v;
        }
    }
    return NULL;
}

static void start_locality_reader(pscom_pmix_job_t *job)
{
    g_local.job = job;
    CHECK(pthread_create(&g_local.thread, NULL, read_locality, NULL) == 0,
          "pthread_create");
}

static int test_alltoall(void)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot_after(&job, 0, start_locality_reader);
    int n = pscom_pmix_size(job), me = pscom_pmix_rank(job);
    char types[256] = "";
    size_t off = 0;

    __atomic_store_n(&g_local.done, 1, __ATOMIC_RELEASE);
    pthread_join(g_local.thread, NULL);
    CHECK(!g_local.bad[0], "pscom_pmix_is_local during the bootstrap: %s",
          g_local.bad);
    CHECK(n >= 2, "needs at least 2 ranks, the job has %d", n);
    for (int r = 0; r < n; r++) {
        CHECK(pscom_pmix_connection(job, r), "no connection to rank %d", r);
        CHECK(pscom_pmix_is_local(job, r) == 1,
              "rank %d is not local (%d), all run on this node", r,
              pscom_pmix_is_local(job, r));
        CHECK(r >= 64 || g_local.seen[r] == -1 || g_local.seen[r] == 1,
              "rank %d was seen as %d during the bootstrap", r, g_local.seen[r]);
    }
    CHECK(pscom_pmix_connection(job, n) == NULL, "a connection beyond size");
    CHECK(pscom_pmix_is_local(job, -1) == -1, "locality of rank -1");

    for (int round = 0; round < 4; round++) exchange(job, round, NULL);

    for (int r = 0; r < n; r++) {
        pscom_connection_t *c = pscom_pmix_connection(job, r);
        CHECK(c->type != PSCOM_CON_TYPE_ONDEMAND && c->type != PSCOM_CON_TYPE_NONE,
              "connection to rank %d is not connected after traffic", r);
        CHECK(c->remote_con_info.rank == r, "connection to rank %d says rank %d",
              r, c->remote_con_info.rank);
        if (off < sizeof(types) - 16)
            off += (size_t)snprintf(types + off, sizeof(types) - off, "%s%d:%s",
                                    r ? " " : "", r, pscom_con_type_str(c->type));
    }
    /* One per pair, and the one connection to ourselves. */
    step("counting connections");
    CHECK(count_connections(sock) == n,
          "the socket has %d connections, expected %d (one per peer, one "
          "to ourselves)", count_connections(sock), n);
    CHECK(con_errors == 0, "%d con_error calls", con_errors);

    step("barrier");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    result_ok("rank %d of %d, connections %s", me, n, types);
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* barrier-progress                                                       */
/* ---------------------------------------------------------------------- */

#define BIG_MSG (64u << 20)

/* barrier-progress, threaded: waits in pscom for the message the rank
 * sends itself after the barrier. */
static void *wait_for_self(void *arg)
{
    pscom_request_t *r = arg;
    pscom_wait(r);
    return NULL;
}

/* lookup-progress: the service rank 1 publishes once it has the data. */
static void progress_service(pscom_pmix_job_t *job, char *svc, size_t len)
{
    snprintf(svc, len, "pscom-test-progress-%s", pscom_pmix_nspace(job));
}

static int test_barrier_progress(int lookup)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    int n = pscom_pmix_size(job), me = pscom_pmix_rank(job);
    unsigned char *buf = malloc(BIG_MSG);
    uint32_t seed = seed_of(0, 1, 64);

    CHECK(n >= 2, "needs at least 2 ranks, the job has %d", n);
    CHECK(buf, "out of memory");
    pthread_t waiter;
    pscom_request_t *self_r = NULL;
    if (getenv("PSCOM_TEST_THREADED")) {
        self_r = new_req();
        self_r->connection = NULL; /* from ourselves: the loop's twin */
        self_r->socket = pscom_pmix_socket(job);
        self_r->ops.recv_accept = accept_self;
        pscom_post_recv(self_r);
        CHECK(pthread_create(&waiter, NULL, wait_for_self, self_r) == 0,
              "pthread_create");
    }
    if (me == 0) {
        pscom_request_t *s = new_req();
        fill(buf, BIG_MSG, seed);
        pscom_req_prepare(s, pscom_pmix_connection(job, 1), buf, BIG_MSG, NULL,
                          0);
        pscom_post_send(s);
        if (lookup) {
            char svc[128], *ep = NULL;
            progress_service(job, svc, sizeof(svc));
            step("waiting lookup of %s with a send of %u bytes to rank 1 "
                 "under way", svc, BIG_MSG);
            pscom_err_t rc = pscom_pmix_lookup(job, svc,
                                               PSCOM_PMIX_RANGE_DEFAULT, 1, 50,
                                               &ep);
            CHECK(rc == PSCOM_SUCCESS && ep, "lookup of %s: %s (%s)", svc,
                  pscom_err_str(rc), strerror(errno));
            free(ep);
        }
        step("barrier with a send of %u bytes to rank 1 under way", BIG_MSG);
        CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
        step("the send after the barrier");
        pscom_wait(s);
        CHECK(pscom_req_successful(s), "send to rank 1: %s",
              pscom_req_state_str(s->state));
        pscom_request_free(s);
    } else {
        if (me == 1) {
            pscom_request_t *r = new_req();
            r->connection = pscom_pmix_connection(job, 0);
            r->data = buf;
            r->data_len = BIG_MSG;
            pscom_post_recv(r);
            step("receiving %u bytes from rank 0 before the barrier", BIG_MSG);
            pscom_wait(r);
            CHECK(pscom_req_successful(r), "receive from rank 0: %s",
                  pscom_req_state_str(r->state));
            CHECK(r->header.data_len == BIG_MSG, "length %u",
                  (unsigned)r->header.data_len);
            CHECK(pattern_ok(buf, BIG_MSG, seed), "data from rank 0");
            pscom_request_free(r);
            if (lookup) {
                char svc[128];
                progress_service(job, svc, sizeof(svc));
                step("publish %s", svc);
                pscom_err_t rc = pscom_pmix_publish(job, NULL, svc,
                                                    PSCOM_PMIX_RANGE_DEFAULT,
                                                    PSCOM_PMIX_PERSIST_DEFAULT);
                CHECK(rc == PSCOM_SUCCESS, "publish of %s: %s (%s)", svc,
                      pscom_err_str(rc), strerror(errno));
            }
        }
        step("barrier");
        CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    }
    if (self_r) {
        step("the message to ourselves after the barrier");
        struct xh x = {me, 0};
        pscom_send(pscom_pmix_connection(job, me), &x, sizeof(x), NULL, 0);
        pthread_join(waiter, NULL);
        CHECK(pscom_req_successful(self_r), "the message to ourselves: %s",
              pscom_req_state_str(self_r->state));
        pscom_request_free(self_r);
    }
    CHECK(con_errors == 0, "%d con_error calls", con_errors);
    const char *type =
        pscom_con_type_str(pscom_pmix_connection(job, me ? 0 : 1)->type);
    const char *want = getenv("PSCOM_TEST_EXPECT_TYPE");
    if (me <= 1 && want)
        CHECK(!strcmp(type, want), "the connection of ranks 0 and 1 is %s, "
              "expected %s", type, want);
    if (lookup && me == 1) {
        char svc[128];
        progress_service(job, svc, sizeof(svc));
        step("unpublish %s", svc);
        CHECK(pscom_pmix_unpublish(job, svc, PSCOM_PMIX_RANGE_DEFAULT) ==
                  PSCOM_SUCCESS, "unpublish of %s", svc);
    }
    /* A peer that ends closes its connections, which is a con_error (EOF)
     * here: none ends before every rank has counted its own. */
    step("barrier before the end");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier before the end");
    result_ok("rank %d of %d: %u bytes across the %s over %s", me, n, BIG_MSG,
              lookup ? "lookup" : "barrier", type);
    free(buf);
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* kill                                                                   */
/* ---------------------------------------------------------------------- */

struct seen {
    int calls;
    int code;
    int rank;
    double when;
    pscom_connection_t *con_state_closed;
};

static int on_failure(pscom_pmix_job_t *job, const pscom_pmix_event_t *ev,
                      int prev, void *ctx)
{
    struct seen *s = ctx;
    (void)prev;
    s->calls++;
    s->code = ev->code;
    s->rank = ev->nranks ? ev->ranks[0] : -1;
    if (!s->when) s->when = now_s();
    printf("rank %d: handler: %s ranks %zu first %d text %s\n", g_rank,
           ev->code_str, ev->nranks, s->rank, ev->text ? ev->text : "-");
    fflush(stdout);
    if (s->rank >= 0) {
        pscom_connection_t *c = pscom_pmix_connection(job, s->rank);
        if (!c || c->state == PSCOM_CON_STATE_CLOSED) s->con_state_closed = c;
    }
    return PSCOM_PMIX_EVENT_CONTINUE;
}

static int test_kill(bool unconnected)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    int n = pscom_pmix_size(job), me = pscom_pmix_rank(job);
    int victim = n - 1;
    struct seen seen = {0};
    size_t id;

    CHECK(n >= 3, "needs at least 3 ranks, the job has %d", n);
    int codes[] = {PSCOM_PMIX_PROC_TERMINATED, PSCOM_PMIX_PROC_ABORTED_BY_SIG};
    CHECK(pscom_pmix_event_register(job, codes, 2, 0, on_failure, &seen, &id) ==
              PSCOM_SUCCESS, "register the failure handler");

    /* Either every connection is up (the transport may notice the death by
     * itself), or the survivors have not connected to the victim yet: then
     * only the PMIx event can fail its connection. */
    bool *skip = calloc((size_t)n, sizeof(*skip));
    if (unconnected) {
        for (int r = 0; r < n; r++) skip[r] = me == victim || r == victim;
        skip[me] = false;
    }
    exchange(job, 1, skip);
    if (unconnected && me != victim)
        CHECK(pscom_pmix_connection(job, victim)->type == PSCOM_CON_TYPE_ONDEMAND,
              "the connection to the victim is connected already");
    step("barrier before the kill");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");

    if (me == victim) {
        step("dying");
        printf("rank %d: SIGKILL myself\n", me);
        fflush(stdout);
        raise(SIGKILL);
        _exit(9);
    }

    /* A receive that only the victim could complete, and a large send. */
    pscom_connection_t *vc = pscom_pmix_connection(job, victim);
    static unsigned char rbuf[64], sbuf[1 << 22];
    pscom_request_t *rr = new_req(), *sr = new_req();
    rr->connection = vc;
    rr->socket = sock;
    rr->data = rbuf;
    rr->data_len = sizeof(rbuf);
    rr->xheader_len = sizeof(struct xh);
    pscom_post_recv(rr);
    double t0 = now_s();
    struct xh x = {me, 99};
    pscom_req_prepare(sr, vc, sbuf, sizeof(sbuf), &x, sizeof(x));
    if (!unconnected) pscom_post_send(sr);

    step("waiting for the receive from the killed rank %d to fail", victim);
    pscom_wait(rr);
    double t_recv = now_s();
    CHECK(rr->state & PSCOM_REQ_STATE_ERROR,
          "the receive from the killed rank ended %s",
          pscom_req_state_str(rr->state));
    step("waiting for the send to the killed rank to end");
    if (!unconnected) pscom_wait(sr);
    step("waiting for the handler");
    while (!seen.calls && now_s() - t0 < 10) {
        if (!pscom_test_any()) usleep(100);
    }
    CHECK(seen.calls >= 1, "the failure handler did not run");
    CHECK(seen.rank == victim, "the handler was told rank %d, not %d",
          seen.rank, victim);
    CHECK(seen.when - t0 <= 2.0, "the handler ran %.3f s after the kill",
          seen.when - t0);
    CHECK(t_recv - t0 <= 2.0, "the receive failed %.3f s after the kill",
          t_recv - t0);
    CHECK(con_errors >= 1, "con_error was not called for the killed rank");

    /* The survivors still talk to each other. */
    memset(skip, 0, (size_t)n * sizeof(*skip));
    skip[victim] = true;
    exchange(job, 2, skip);
    free(skip);

    result_ok("rank %d: receive failed after %.3f s, handler %s after %.3f s, "
              "con_error after %.3f s, send %s", me, t_recv - t0,
              pscom_pmix_event_str(seen.code), seen.when - t0,
              con_error_time - t0,
              unconnected ? "not posted" : pscom_req_state_str(sr->state));
    /* No PMIx fence: the job has a dead rank. Make sure everybody is done
     * before finalizing, through pscom. */
    step("final pscom handshake among the survivors");
    unsigned char token = 1;
    if (me == 0) {
        for (int r = 1; r < victim; r++)
            CHECK(pscom_recv_from(pscom_pmix_connection(job, r), NULL, 0, &token,
                                  1) == PSCOM_SUCCESS, "token from %d", r);
        for (int r = 1; r < victim; r++)
            pscom_send(pscom_pmix_connection(job, r), NULL, 0, &token, 1);
    } else {
        pscom_send(pscom_pmix_connection(job, 0), NULL, 0, &token, 1);
        CHECK(pscom_recv_from(pscom_pmix_connection(job, 0), NULL, 0, &token, 1) ==
              PSCOM_SUCCESS, "token from 0");
    }
    pscom_request_free(rr);
    pscom_request_free(sr);
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* lost-messages                                                          */
/* ---------------------------------------------------------------------- */

#define LOST_N    50
#define LOST_LEN  8192
#define LOST_EXIT 7

/* Rank 1's end was reported: set by a PMIx handler of the test's own that
 * runs before every other (PMIx's thread), so the library's handler has
 * the event queued, not yet handled. */
static int g_end_reported;

static void on_end_first(size_t id, pmix_status_t status,
                         const pmix_proc_t *source, pmix_info_t info[],
                         size_t ninfo, pmix_info_t *results, size_t nresults,
                         pmix_event_notification_cbfunc_fn_t cbfunc,
                         void *cbdata)
{
    (void)id;
    (void)status;
    (void)source;
    (void)info;
    (void)ninfo;
    (void)results;
    (void)nresults;
    /* The chain goes on to the library's handler before anything this
     * process asks PMIx after seeing the flag. */
    if (cbfunc) cbfunc(PMIX_SUCCESS, NULL, 0, NULL, NULL, cbdata);
    __atomic_store_n(&g_end_reported, 1, __ATOMIC_RELEASE);
}

/* Rank 0 learns of an end of rank 1 before the library handles it: a PMIx
 * handler of the test's own that runs first. Registered before the
 * bootstrap, which rank 1 cannot pass alone. */
static void watch_end_first(pscom_pmix_job_t *job)
{
    (void)job;
    if (g_rank != 0) return;
    pmix_status_t code = PMIX_EVENT_PROC_TERMINATED;
    bool yes = true;
    pmix_info_t first;
    PMIX_INFO_LOAD(&first, PMIX_EVENT_HDLR_FIRST, &yes, PMIX_BOOL);
    pmix_status_t rc = PMIx_Register_event_handler(&code, 1, &first, 1,
                                                   on_end_first, NULL, NULL);
    PMIX_INFO_DESTRUCT(&first);
    CHECK(rc >= 0, "PMIx_Register_event_handler: %s", PMIx_Error_string(rc));
}

/* Wait, without pscom, until on_end_first saw rank 1's end: the event
 * is queued in the library then, not handled. */
static void wait_end_reported(void)
{
    step("waiting, without pscom, for the event of rank 1's end");
    while (!__atomic_load_n(&g_end_reported, __ATOMIC_ACQUIRE)) usleep(1000);
}

/* Rank 1: a barrier with rank 0, then the end (status LOST_EXIT, without
 * finalize). */
static void end_after_barrier(pscom_pmix_job_t *job, const char *when)
{
    step("barrier, then the end %s", when);
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    result_ok("ending with status %d %s, without finalize", LOST_EXIT, when);
    _exit(LOST_EXIT);
}

/* Rank 0: a handler of PROC_TERMINATED that fills s. */
static void register_end_handler(pscom_pmix_job_t *job, struct seen *s)
{
    int codes[] = {PSCOM_PMIX_PROC_TERMINATED};
    CHECK(pscom_pmix_event_register(job, codes, 1, 0, on_failure, s, NULL) ==
              PSCOM_SUCCESS, "register the failure handler");
}

/* Handle events until the handler that fills s ran. */
static void handle_until_seen(pscom_pmix_job_t *job, const struct seen *s)
{
    step("handling the event");
    while (!s->calls) {
        pscom_pmix_progress(job);
        usleep(1000);
    }
}

/* Rank 1 sends messages to rank 0 and exits (status LOST_EXIT, no
 * finalize) while rank 0 makes no pscom call: they wait unread in rank 0's
 * socket buffer when the PMIx event of rank 1's end fails the connection.
 * They must be received all the same (the transport alone would deliver
 * them before its end of stream). */
static int test_lost_messages(void)
{
    pscom_pmix_job_t *job;
    static unsigned char buf[LOST_LEN];
    pscom_socket_t *sock = boot_after(&job, PSCOM_PMIX_BOOT_DIRECT, watch_end_first);
    CHECK(pscom_pmix_size(job) == 2, "needs 2 ranks");
    pscom_connection_t *con = pscom_pmix_connection(job, g_rank ? 0 : 1);

    if (g_rank == 1) {
        pscom_request_t *r = new_req();
        for (int i = 0; i < LOST_N; i++) {
            step("send %d", i);
            fill(buf, LOST_LEN, seed_of(1, 0, i));
            pscom_req_prepare(r, con, buf, LOST_LEN, NULL, 0);
            pscom_post_send(r);
            pscom_wait(r);
            CHECK(pscom_req_successful(r), "send %d: %s", i,
                  pscom_req_state_str(r->state));
        }
        result_ok("sent %d messages of %d bytes over %s; exiting with status "
                  "%d, without finalize", LOST_N, LOST_LEN,
                  pscom_con_type_str(con->type), LOST_EXIT);
        _exit(LOST_EXIT);
    }

    struct seen seen = {0};
    register_end_handler(job, &seen);
    wait_end_reported();
    handle_until_seen(job, &seen);
    CHECK(con->state == PSCOM_CON_STATE_CLOSED, "the connection to rank 1 is "
          "not failed after the event (state %d)", (int)con->state);
    pscom_request_t *r = new_req();
    int got = 0;
    for (int i = 0; i < LOST_N; i++) {
        step("receive %d", i);
        pscom_req_prepare(r, con, buf, LOST_LEN, NULL, 0);
        pscom_post_recv(r);
        pscom_wait(r);
        if (pscom_req_successful(r) && pattern_ok(buf, LOST_LEN, seed_of(1, 0, i)))
            got++;
    }
    CHECK(got == LOST_N, "%d of the %d messages rank 1 sent before it ended "
          "were received", got, LOST_N);
    result_ok("%d messages sent by rank 1 before it ended, received after its "
              "connection failed (%s)", got, pscom_con_type_str(con->type));
    pscom_request_free(r);
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* closed-socket                                                          */
/* ---------------------------------------------------------------------- */

#define NEW_CONS 8

static int g_new_errors;
static void on_new_con_error(pscom_connection_t *con, pscom_op_t op,
                             pscom_err_t err)
{
    g_new_errors++;
    printf("rank %d: con_error %s: %s during %s\n", g_rank, pscom_con_str(con),
           pscom_err_str(err), pscom_op_str(op));
}

/* Rank 0 closes its bootstrap socket (allowed before pscom_pmix_finalize)
 * and opens a socket with connections of the same size, which take the
 * freed connections' memory; then rank 1 ends. Its event must fail none
 * of them: the job forgot the connections of the closed socket. */
static int test_closed_socket(void)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot_after(&job, 0, watch_end_first);
    CHECK(pscom_pmix_size(job) == 2, "needs 2 ranks");
    step("barrier after the bootstrap");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    if (g_rank == 1) end_after_barrier(job, "after rank 0's close");

    struct seen seen = {0};
    register_end_handler(job, &seen);
    step("closing the bootstrap socket");
    pscom_close_socket(sock);
    CHECK(pscom_pmix_socket(job) == NULL, "the closed socket is still the job's");
    for (int r = 0; r < 2; r++)
        CHECK(pscom_pmix_connection(job, r) == NULL,
              "a connection of the closed socket is still the job's (rank %d)", r);
    pscom_socket_t *other = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, 0);
    CHECK(other, "pscom_open_socket");
    other->ops.con_error = on_new_con_error;
    pscom_connection_t *cons[NEW_CONS];
    for (int i = 0; i < NEW_CONS; i++) {
        cons[i] = pscom_open_connection(other);
        CHECK(cons[i], "pscom_open_connection");
    }
    step("barrier after the close");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    wait_end_reported();
    handle_until_seen(job, &seen);
    CHECK(g_new_errors == 0, "the event of rank 1 failed %d connection(s) of "
          "another socket", g_new_errors);
    for (int i = 0; i < NEW_CONS; i++)
        CHECK(cons[i]->state != PSCOM_CON_STATE_CLOSED, "connection %d of "
              "another socket failed", i);
    result_ok("rank 1's end after the close of the bootstrap socket failed "
              "none of %d connections of another socket", NEW_CONS);
    pscom_close_socket(other);
    pscom_pmix_finalize(job);
    return 0;
}

/* Each rank closes only its connection to itself: that is no close of the
 * socket, and the job must keep it and its connection to the other rank.
 * The socket's close that follows must still be seen. */
static int test_closed_self(void)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot_after(&job, 0, NULL);
    CHECK(pscom_pmix_size(job) == 2, "needs 2 ranks");
    step("barrier after the bootstrap");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    int other = 1 - g_rank;
    step("closing the connection to ourselves");
    pscom_close_connection(pscom_pmix_connection(job, g_rank));
    for (int i = 0; i < 100; i++) pscom_test_any();
    CHECK(pscom_pmix_socket(job) == sock, "the job forgot its socket");
    CHECK(pscom_pmix_connection(job, other) != NULL,
          "the job forgot its connection to rank %d", other);
    step("barrier after the close");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    step("closing the bootstrap socket");
    pscom_close_socket(sock);
    CHECK(pscom_pmix_socket(job) == NULL, "the closed socket is still the job's");
    CHECK(pscom_pmix_connection(job, other) == NULL,
          "the connection to rank %d of the closed socket is still the job's",
          other);
    result_ok("closing the connection to ourselves kept the socket and the "
              "connection to rank %d; the socket's close was seen after it",
              other);
    pscom_pmix_finalize(job);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* closed-in-boot                                                         */
/* ---------------------------------------------------------------------- */

static pscom_socket_t *g_boot_sock;

static void close_in_accept(pscom_connection_t *con)
{
    (void)con;
    pscom_close_socket(g_boot_sock);
}

/* The application's con_accept closes the bootstrap socket while the
 * bootstrap connects (to ourselves): the bootstrap must fail, and keep no
 * connection of the closed socket (it kept the freed one, and said
 * success). */
static int test_closed_in_boot(void)
{
    pscom_pmix_job_t *job;
    step("pscom_pmix_init");
    pscom_err_t rc = pscom_pmix_init(&job);
    CHECK(rc == PSCOM_SUCCESS, "pscom_pmix_init: %s", pscom_err_str(rc));
    g_rank = pscom_pmix_rank(job);
    g_boot_sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, 0);
    CHECK(g_boot_sock, "pscom_open_socket");
    g_boot_sock->ops.con_accept = close_in_accept;
    step("pscom_pmix_bootstrap");
    rc = pscom_pmix_bootstrap(job, g_boot_sock, PSCOM_PMIX_BOOT_ONDEMAND);
    int err = errno;
    CHECK(rc == PSCOM_ERR_STDERROR && err == ECONNABORTED,
          "the bootstrap said %s (errno %d) after its socket was closed",
          pscom_err_str(rc), err);
    CHECK(pscom_pmix_socket(job) == NULL, "the closed socket is still the job's");
    for (int r = 0; r < pscom_pmix_size(job); r++)
        CHECK(pscom_pmix_connection(job, r) == NULL,
              "a connection of the closed socket is the job's (rank %d)", r);
    result_ok("a socket closed during the bootstrap failed it (%s), and the "
              "job kept none of its connections", strerror(err));
    pscom_pmix_finalize(job);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* dead-before-boot                                                       */
/* ---------------------------------------------------------------------- */

/* Rank 1 ends before the bootstrap. Rank 0's bootstrap, the event queued
 * (or, with `dispatched`, handled), must fail with ECONNABORTED, not wait
 * for rank 1's endpoint and call it missing. */
static int test_dead_before_boot(bool dispatched)
{
    pscom_pmix_job_t *job;

    step("pscom_pmix_init");
    pscom_err_t rc = pscom_pmix_init(&job);
    CHECK(rc == PSCOM_SUCCESS, "pscom_pmix_init: %s", pscom_err_str(rc));
    g_rank = pscom_pmix_rank(job);
    CHECK(pscom_pmix_size(job) == 2, "needs 2 ranks");
    /* Rank 1 ends once rank 0 watches for it. */
    watch_end_first(job);
    if (g_rank == 1) end_after_barrier(job, "before the bootstrap");
    step("barrier before rank 1 ends");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    struct seen seen = {0};
    register_end_handler(job, &seen);
    wait_end_reported();
    if (dispatched) handle_until_seen(job, &seen);
    pscom_socket_t *sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, 0);
    CHECK(sock, "pscom_open_socket");
    step("bootstrap without rank 1");
    double t0 = now_s();
    rc = pscom_pmix_bootstrap(job, sock, 0);
    int e = errno;
    CHECK(rc == PSCOM_ERR_STDERROR && e == ECONNABORTED, "bootstrap with rank 1 "
          "dead: %s (%s), expected ECONNABORTED", pscom_err_str(rc), strerror(e));
    result_ok("bootstrap with rank 1 dead (event %s): ECONNABORTED after %.2f s",
              dispatched ? "handled" : "queued", now_s() - t0);
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* fake-lost, lost-server                                                 */
/* ---------------------------------------------------------------------- */

/* Two ranks: rank 1 notifies events to the job, rank 0 handles `events` of
 * them (code `code`), checks what they left, and then the two exchange a
 * token over their connection. */
struct notify_case {
    int code;
    int events;
    void (*send)(pscom_pmix_job_t *job);                    /* rank 1 */
    void (*check)(pscom_pmix_job_t *job, pscom_connection_t *peer); /* rank 0 */
    const char *what;
};

static int run_notify_case(const struct notify_case *c)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    struct seen seen = {0};
    unsigned char token = 1;
    CHECK(pscom_pmix_size(job) == 2, "needs 2 ranks");
    CHECK(pscom_pmix_event_register(job, &c->code, 1, 0, on_failure, &seen, NULL) ==
              PSCOM_SUCCESS, "register the handler");
    step("barrier");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    pscom_connection_t *peer = pscom_pmix_connection(job, 1 - g_rank);
    if (g_rank == 1) {
        c->send(job);
        step("waiting for rank 0's token");
        CHECK(pscom_recv_from(peer, NULL, 0, &token, 1) == PSCOM_SUCCESS, "token");
        pscom_send(peer, NULL, 0, &token, 1);
        pscom_flush(peer);
    } else {
        step("handling rank 1's events");
        while (seen.calls < c->events) {
            pscom_pmix_progress(job);
            usleep(1000);
        }
        c->check(job, peer);
        pscom_send(peer, NULL, 0, &token, 1);
        CHECK(pscom_recv_from(peer, NULL, 0, &token, 1) == PSCOM_SUCCESS,
              "token from rank 1");
    }
    result_ok("%s", c->what);
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* fake-lost: rank 1 notifies UNREACH to the job (OpenPMIx passes a
 * notified LOST_CONNECTION on to nobody, UNREACH it does). Rank 0's server
 * is fine: rank 0 must keep using it (a lookup answers ENOENT, not
 * ENOTCONN). */
static void send_unreach(pscom_pmix_job_t *job)
{
    pscom_err_t rc = pscom_pmix_notify(job, PMIX_ERR_UNREACH,
                                       PSCOM_PMIX_RANGE_NAMESPACE, -1,
                                       "not really");
    CHECK(rc == PSCOM_SUCCESS, "notify: %s", pscom_err_str(rc));
}

static void check_server_in_use(pscom_pmix_job_t *job, pscom_connection_t *peer)
{
    char *ep = NULL;
    (void)peer;
    pscom_err_t rc = pscom_pmix_lookup(job, "pscom-test-nobody-publishes-this",
                                       PSCOM_PMIX_RANGE_DEFAULT, 0, 0, &ep);
    int e = errno;
    CHECK(rc == PSCOM_ERR_STDERROR && (e == ENOENT || e == ETIMEDOUT),
          "lookup after rank 1's UNREACH: %s (%s); the server is fine",
          pscom_err_str(rc), strerror(e));
}

/* notify-failure-code: rank 1 notifies a peer-failure code twice, through
 * pscom_pmix_notify with rank -1 (no rank), and through PMIx naming a
 * process of an empty namespace. Neither is about rank 1 (it is alive) nor
 * any rank of the job: rank 0 must not fail its connection to rank 1. */
static void send_failure_about_nobody(pscom_pmix_job_t *job)
{
    pscom_err_t rc = pscom_pmix_notify(job, PSCOM_PMIX_PROC_ABORTED_BY_SIG,
                                       PSCOM_PMIX_RANGE_NAMESPACE, -1,
                                       "about nobody");
    CHECK(rc == PSCOM_SUCCESS, "notify: %s", pscom_err_str(rc));
    pmix_proc_t me, nobody;
    pmix_info_t info;
    PMIX_LOAD_PROCID(&me, pscom_pmix_nspace(job), 1);
    PMIX_LOAD_PROCID(&nobody, "", 1);
    PMIX_INFO_LOAD(&info, PMIX_EVENT_AFFECTED_PROC, &nobody, PMIX_PROC);
    pmix_status_t prc = PMIx_Notify_event(PMIX_ERR_PROC_ABORTED_BY_SIG, &me,
                                          PMIX_RANGE_NAMESPACE, &info, 1, NULL,
                                          NULL);
    PMIX_INFO_DESTRUCT(&info);
    CHECK(prc == PMIX_SUCCESS, "PMIx_Notify_event: %s", PMIx_Error_string(prc));
}

static void check_connection_kept(pscom_pmix_job_t *job, pscom_connection_t *peer)
{
    (void)job;
    CHECK(peer->state != PSCOM_CON_STATE_CLOSED && !con_errors,
          "an event about no rank of the job failed the connection to its "
          "sender, rank 1");
}

static const struct notify_case fake_lost = {
    PMIX_ERR_UNREACH, 1, send_unreach, check_server_in_use,
    "rank 1's UNREACH left the server in use"};
static const struct notify_case failure_about_nobody = {
    PSCOM_PMIX_PROC_ABORTED_BY_SIG, 2, send_failure_about_nobody,
    check_connection_kept,
    "rank 1's two failure events about nobody left its connection alone"};

/* The launcher dies: PMIx reports LOST_CONNECTION (its source the server)
 * and the job stops using the server. */
static int test_lost_server(void)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    struct seen seen = {0};
    int codes[] = {PSCOM_PMIX_LOST_CONNECTION};
    CHECK(pscom_pmix_event_register(job, codes, 1, 0, on_failure, &seen, NULL) ==
              PSCOM_SUCCESS, "register the handler");
    /* run-test.sh removes what the launcher leaves behind. */
    const char *tmp = getenv("PMIX_SERVER_TMPDIR");
    printf("tmpdir: %s\n", tmp ? tmp : "");
    fflush(stdout);
    step("killing the launcher (pid %d)", (int)getppid());
    CHECK(kill(getppid(), SIGKILL) == 0, "kill: %s", strerror(errno));
    handle_until_seen(job, &seen);
    pscom_err_t rc = pscom_pmix_barrier(job);
    int e = errno;
    CHECK(rc == PSCOM_ERR_STDERROR && e == ENOTCONN,
          "barrier without a server: %s (%s), expected ENOTCONN",
          pscom_err_str(rc), strerror(e));
    step("finalize without a server");
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    result_ok("the lost server was noticed: barrier ENOTCONN");
    return 0;
}

/* ---------------------------------------------------------------------- */
/* teardown, finalize-in-handler, register-order                          */
/* ---------------------------------------------------------------------- */

#define EV_T (PSCOM_PMIX_EXTERNAL_BASE - 20)

static int g_tear_calls, g_tear_seen;
static size_t g_tear_id;

/* ctx non-NULL: a one-shot handler, it deregisters itself. */
static int on_tear(pscom_pmix_job_t *job, const pscom_pmix_event_t *ev,
                   int prev, void *ctx)
{
    (void)ev;
    (void)prev;
    g_tear_calls++;
    if (ctx)
        CHECK(pscom_pmix_event_deregister(job, g_tear_id) == PSCOM_SUCCESS,
              "a handler deregisters itself");
    return PSCOM_PMIX_EVENT_CONTINUE;
}

static int on_tear_seen(pscom_pmix_job_t *job, const pscom_pmix_event_t *ev,
                        int prev, void *ctx)
{
    (void)job;
    (void)prev;
    (void)ctx;
    if (ev->code == EV_T) g_tear_seen++;
    return PSCOM_PMIX_EVENT_CONTINUE;
}

/* Notify EV_T to ourselves and leave PMIx's thread the time to queue it;
 * nothing here dispatches. */
static void notify_unhandled(pscom_pmix_job_t *job, const char *text)
{
    step("notify %s", text);
    CHECK(pscom_pmix_notify(job, EV_T, PSCOM_PMIX_RANGE_PROC_LOCAL, -1, text) ==
              PSCOM_SUCCESS, "notify");
    usleep(300000);
}

/* Dispatch until the default handler saw n events EV_T, then leave PMIx's
 * thread the time to go on with their chains. */
static void dispatch_until_seen(pscom_pmix_job_t *job, int n)
{
    step("dispatching");
    while (g_tear_seen < n) {
        pscom_pmix_progress(job);
        usleep(1000);
    }
    usleep(300000);
}

/* An event waits in the queue (PMIx keeps its chain open until the
 * library calls its cbfunc) while a PMIx registration it came through
 * goes. OpenPMIx reads the registration's handler object after that
 * cbfunc: deregistered before, it read freed memory (run with freed
 * memory filled, this crashes). Modes: queued (finalize with the event
 * queued), dereg (the handler deregistered with its event queued),
 * oneshot (a handler deregisters itself when called). */
static int test_teardown(const char *mode)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    int code = EV_T;
    bool queued = !strcmp(mode, "queued"), dereg = !strcmp(mode, "dereg"),
         oneshot = !strcmp(mode, "oneshot");
    CHECK(queued || dereg || oneshot, "unknown mode %s", mode);
    g_mode = mode;
    CHECK(!pscom_pmix_event_register(job, NULL, 0, PSCOM_PMIX_EVENT_DEFAULT,
                                     on_tear_seen, NULL, NULL), "default handler");
    if (dereg || oneshot)
        CHECK(!pscom_pmix_event_register(job, &code, 1, 0, on_tear,
                                         oneshot ? &code : NULL, &g_tear_id),
              "handler of EV_T");
    notify_unhandled(job, mode);
    if (dereg) {
        CHECK(pscom_pmix_event_deregister(job, g_tear_id) == PSCOM_SUCCESS,
              "deregister with its event queued");
        dispatch_until_seen(job, 1);
        CHECK(g_tear_calls == 0, "a removed handler was called");
    } else if (oneshot) {
        dispatch_until_seen(job, 1);
        CHECK(g_tear_calls == 1, "the one-shot handler ran %d times", g_tear_calls);
        notify_unhandled(job, "after the one-shot handler");
        dispatch_until_seen(job, 2);
        CHECK(g_tear_calls == 1, "the one-shot handler ran again");
    }
    step("finalize%s", queued ? " with the event queued" : "");
    pscom_pmix_finalize(job);
    usleep(300000);
    pscom_close_socket(sock);
    result_ok("%s: PMIx's chains closed before their registrations went", mode);
    return 0;
}

static int g_fin_calls, g_after_fin_calls;

static int on_finalize(pscom_pmix_job_t *job, const pscom_pmix_event_t *ev,
                       int prev, void *ctx)
{
    (void)ev;
    (void)prev;
    (void)ctx;
    g_fin_calls++;
    pscom_pmix_finalize(job);
    return PSCOM_PMIX_EVENT_CONTINUE;
}

static int on_after_finalize(pscom_pmix_job_t *job,
                             const pscom_pmix_event_t *ev, int prev, void *ctx)
{
    (void)job;
    (void)ev;
    (void)prev;
    (void)ctx;
    g_after_fin_calls++;
    return PSCOM_PMIX_EVENT_CONTINUE;
}

/* A handler finalizes the job: the dispatcher that called it must not use
 * the freed job, the handlers after it in the chain are not called, and
 * pscom goes on. `by_pscom`: pscom progress dispatches (the event pipe's
 * callback), else pscom_pmix_progress. */
static int test_finalize_in_handler(bool by_pscom)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    int code = EV_T;
    CHECK(!pscom_pmix_event_register(job, &code, 1, 0, on_finalize, NULL, NULL),
          "the finalizing handler");
    CHECK(!pscom_pmix_event_register(job, NULL, 0, PSCOM_PMIX_EVENT_DEFAULT,
                                     on_after_finalize, NULL, NULL),
          "a handler after it");
    step("notify");
    CHECK(pscom_pmix_notify(job, EV_T, PSCOM_PMIX_RANGE_PROC_LOCAL, -1,
                            "finalize") == PSCOM_SUCCESS, "notify");
    step("dispatching by %s", by_pscom ? "pscom progress" : "pscom_pmix_progress");
    while (!g_fin_calls) {
        /* The job is gone once the handler ran. */
        if (by_pscom)
            pscom_test_any();
        else
            pscom_pmix_progress(job);
        usleep(100);
    }
    for (int i = 0; i < 1000; i++) pscom_test_any();
    CHECK(g_after_fin_calls == 0, "a handler ran after the job was finalized");
    pscom_close_socket(sock);
    result_ok("finalized from a handler run by %s",
              by_pscom ? "pscom progress" : "pscom_pmix_progress");
    return 0;
}

/* register-order: PMIx may hand an event to an application handler's
 * PMIx registration before pscom_pmix_event_register returns, and another
 * thread's dispatcher may handle it at once. The handler must be in the
 * table by then. This test's PMIx_Register_event_handler (it takes the
 * place of PMIx's for libpscom_pmix) plays that thread: after the real
 * registration it notifies the code and dispatches. */
static pmix_status_t (*g_after_register)(void);

pmix_status_t PMIx_Register_event_handler(pmix_status_t codes[], size_t ncodes,
                                          pmix_info_t info[], size_t ninfo,
                                          pmix_notification_fn_t event_hdlr,
                                          pmix_hdlr_reg_cbfunc_t cbfunc,
                                          void *cbdata)
{
    static pmix_status_t (*real)(pmix_status_t[], size_t, pmix_info_t[], size_t,
                                 pmix_notification_fn_t, pmix_hdlr_reg_cbfunc_t,
                                 void *);
    if (!real) {
        *(void **)&real = dlsym(RTLD_NEXT, "PMIx_Register_event_handler");
        CHECK(real, "dlsym PMIx_Register_event_handler: %s", dlerror());
    }
    pmix_status_t rc = real(codes, ncodes, info, ninfo, event_hdlr, cbfunc, cbdata);
    if (g_after_register && ncodes == 1 && codes[0] == EV_T) g_after_register();
    return rc;
}

static pscom_pmix_job_t *g_order_job;

static pmix_status_t dispatch_in_the_gap(void)
{
    int before = g_tear_seen;
    CHECK(pscom_pmix_notify(g_order_job, EV_T, PSCOM_PMIX_RANGE_PROC_LOCAL, -1,
                            "in the gap") == PSCOM_SUCCESS, "notify");
    step("dispatching between the PMIx registration and its return");
    while (g_tear_seen == before) {
        pscom_pmix_progress(g_order_job);
        usleep(1000);
    }
    return PMIX_SUCCESS;
}

static int test_register_order(void)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    int code = EV_T;
    CHECK(!pscom_pmix_is_singleton(job), "needs a PMIx server");
    g_order_job = job;
    CHECK(!pscom_pmix_event_register(job, NULL, 0, PSCOM_PMIX_EVENT_DEFAULT,
                                     on_tear_seen, NULL, NULL), "default handler");
    g_after_register = dispatch_in_the_gap;
    step("registering the handler of EV_T");
    CHECK(!pscom_pmix_event_register(job, &code, 1, 0, on_tear, NULL, &g_tear_id),
          "handler of EV_T");
    g_after_register = NULL;
    CHECK(g_tear_calls == 1, "the handler missed the event dispatched while it "
          "was registered (called %d times)", g_tear_calls);
    result_ok("an event dispatched while its handler was registered reached it");
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* events                                                                 */
/* ---------------------------------------------------------------------- */

#define EV_X (PSCOM_PMIX_EXTERNAL_BASE - 1)
#define EV_Y (PSCOM_PMIX_EXTERNAL_BASE - 2)
#define EV_Z (PSCOM_PMIX_EXTERNAL_BASE - 3)
#define EV_PEERS (PSCOM_PMIX_EXTERNAL_BASE - 10)

struct hctx {
    const char *name;
    int ret;             /* what to return */
    size_t *remove_id;   /* deregister this id when called */
    size_t id;
    int lookup;          /* look up an unknown service when called */
};

static char g_log[512];
static size_t g_nlog;
static int g_prev[32], g_nres[32];
static size_t g_lastres_id[32];
static int g_handled;
static char g_text_seen[64];
static int g_ranks_seen[4];
static size_t g_nranks_seen;
/* Who runs the handlers in fire(): both pscom_test_any() and
 * pscom_pmix_progress() in turn; pscom progress only (the event pipe's
 * callback); pscom_pmix_progress() only. */
enum dispatch { BY_BOTH, BY_PSCOM, BY_PMIX_PROGRESS };
static enum dispatch g_dispatch;
static bool g_in_pscom_progress;   /* fire() is inside pscom_test_any() */
/* A pipe in pscom's descriptor set (hot: looked at in every round of
 * progress), made readable by a lookup handler just before its lookup; the
 * callback drains it. Run by pscom progress, the handler's lookup must
 * wait without progress, so the callback must not run inside it. Run by
 * pscom_pmix_progress(), the lookup progresses pscom: it waits for a
 * service that the callback publishes (g_probe_service), so it returns
 * only when the callback ran inside it. */
static int g_probe[2] = {-1, -1};
static bool g_in_lookup, g_probe_in_lookup, g_probe_ran;
static char g_probe_service[PMIX_MAX_KEYLEN + 1]; /* unique in the session */
static char *g_probe_ep;        /* what it publishes: this rank's endpoint */

static void on_probe_published(pmix_status_t status, void *cbdata)
{
    (void)cbdata;
    /* On PMIx's thread: nothing here that the main thread writes. */
    CHECK(status == PMIX_SUCCESS, "publish from the probe: %s", PMIx_Error_string(status));
}

static void on_probe(int fd, uint32_t events, void *arg)
{
    char buf[16];
    (void)events;
    (void)arg;
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    g_probe_ran = true;
    if (!g_in_lookup) return;
    g_probe_in_lookup = true;
    if (g_probe_service[0]) {
        /* Without a wait: this runs inside pscom progress. PMIx packs the
         * info before it returns. */
        pmix_info_t info;
        PMIX_INFO_LOAD(&info, g_probe_service, g_probe_ep, PMIX_STRING);
        pmix_status_t rc = PMIx_Publish_nb(&info, 1, on_probe_published, NULL);
        PMIX_INFO_DESTRUCT(&info);
        CHECK(rc == PMIX_SUCCESS || rc == PMIX_OPERATION_SUCCEEDED, "PMIx_Publish_nb %s: %s",
              g_probe_service, PMIx_Error_string(rc));
    }
}

static int on_ev(pscom_pmix_job_t *job, const pscom_pmix_event_t *ev,
                 int prev, void *ctx)
{
    struct hctx *h = ctx;
    if (g_nlog < 32) {
        g_prev[g_nlog] = prev;
        g_nres[g_nlog] = (int)ev->nresults;
        g_lastres_id[g_nlog] = ev->nresults ? ev->results[ev->nresults - 1].id : 0;
        if (ev->nresults)
            CHECK(ev->results[ev->nresults - 1].status == prev,
                  "%s: prev_status %d but the last result says %d", h->name,
                  prev, ev->results[ev->nresults - 1].status);
    }
    g_nlog++;
    strncat(g_log, h->name, sizeof(g_log) - strlen(g_log) - 2);
    strncat(g_log, " ", sizeof(g_log) - strlen(g_log) - 1);
    snprintf(g_text_seen, sizeof(g_text_seen), "%s", ev->text ? ev->text : "");
    g_nranks_seen = ev->nranks < 4 ? ev->nranks : 4;
    for (size_t i = 0; i < g_nranks_seen; i++) g_ranks_seen[i] = ev->ranks[i];
    if (h->remove_id)
        CHECK(pscom_pmix_event_deregister(job, *h->remove_id) == PSCOM_SUCCESS,
              "deregister from a handler");
    if (h->lookup) {
        /* From a handler that pscom progress runs, the lookup waits without
         * progress (pscom_pmix.h): no pscom wait nests inside the round that
         * runs the handler, so no descriptor callback runs meanwhile. From
         * one that pscom_pmix_progress() runs, it progresses pscom: it
         * waits for the service that the probe's callback publishes. */
        bool singleton = pscom_pmix_is_singleton(job);
        bool probe_publishes = g_dispatch == BY_PMIX_PROGRESS && !singleton;
        if (g_dispatch != BY_BOTH) {
            CHECK(g_in_pscom_progress == (g_dispatch == BY_PSCOM),
                  "%s ran %s pscom progress", h->name,
                  g_in_pscom_progress ? "inside" : "outside");
            CHECK(write(g_probe[1], "p", 1) == 1, "write to the probe pipe");
        }
        const char *service = "pscom-test-from-a-handler";
        if (probe_publishes) {
            /* Every process of a session has its own: one pscom_run may
             * run several namespaces. */
            int len = snprintf(g_probe_service, sizeof(g_probe_service), "pscom-test-probe-%s-%d",
                               pscom_pmix_nspace(job), g_rank);
            CHECK(len > 0 && (size_t)len < sizeof(g_probe_service), "probe service name");
            service = g_probe_service;
            step("%s: a lookup that only the probe's callback can answer", h->name);
        }
        char *ep = NULL;
        g_in_lookup = true;
        g_probe_in_lookup = false;
        /* The waiting one bounded: a host that keeps to PMIX_TIMEOUT
         * (pscom_run) fails it in 10 s, before the watchdog. */
        pscom_err_t rc = pscom_pmix_lookup(job, service, PSCOM_PMIX_RANGE_DEFAULT,
                                           probe_publishes, probe_publishes ? 10 : 0, &ep);
        int e = errno;
        g_in_lookup = false;
        if (g_dispatch == BY_PSCOM)
            CHECK(!g_probe_in_lookup, "%s: the lookup's wait ran pscom progress "
                  "(a descriptor callback) from inside pscom progress", h->name);
        if (probe_publishes) {
            CHECK(rc == PSCOM_SUCCESS && g_probe_in_lookup && !strcmp(ep, g_probe_ep),
                  "%s: lookup of %s, which only a callback of pscom progress "
                  "publishes: %s (%s)", h->name, service, pscom_err_str(rc), strerror(e));
            free(ep);
            g_probe_service[0] = '\0';
        } else {
            CHECK(rc == PSCOM_ERR_STDERROR &&
                      (singleton ? e == ENOTCONN : e == ENOENT || e == ETIMEDOUT),
                  "%s: lookup from a handler: %s (%s)", h->name, pscom_err_str(rc),
                  strerror(e));
        }
        h->lookup++;
    }
    return h->ret;
}

/* The default handler that counts handled events (registered last). */
static int on_count(pscom_pmix_job_t *job, const pscom_pmix_event_t *ev,
                    int prev, void *ctx)
{
    (void)job;
    (void)ev;
    (void)prev;
    (void)ctx;
    g_handled++;
    return PSCOM_PMIX_EVENT_CONTINUE;
}

/* Notify code to ourselves and run progress until its chain is over: the
 * counting default handler ran, or (for a chain that a handler completed)
 * the log did not grow for 0.5 s. */
static void fire(pscom_pmix_job_t *job, int code, int rank, const char *text)
{
    g_log[0] = 0;
    g_nlog = 0;
    int before = g_handled;
    step("notify %s to ourselves", pscom_pmix_event_str(code));
    pscom_err_t rc = pscom_pmix_notify(job, code, PSCOM_PMIX_RANGE_PROC_LOCAL,
                                       rank, text);
    CHECK(rc == PSCOM_SUCCESS, "notify: %s", pscom_err_str(rc));
    double t0 = now_s();
    /* The chains below end with the counting default handler unless a
     * handler completes them: wait for the log to settle. */
    size_t last = (size_t)-1;
    double settled = 0;
    while (now_s() - t0 < 10) {
        if (g_dispatch != BY_PMIX_PROGRESS) {
            g_in_pscom_progress = true;
            pscom_test_any();
            g_in_pscom_progress = false;
        }
        if (g_dispatch != BY_PSCOM) pscom_pmix_progress(job);
        if (g_handled > before) break;
        if (g_nlog != last) {
            last = g_nlog;
            settled = now_s();
        } else if (g_nlog && now_s() - settled > 0.5) {
            break;
        }
        usleep(200);
    }
}

static void expect_log(const char *what, const char *expected)
{
    CHECK(!strcmp(g_log, expected), "%s: handlers ran as \"%s\", expected \"%s\"",
          what, g_log, expected);
}

static int test_events(int peers)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    int me = pscom_pmix_rank(job), n = pscom_pmix_size(job);
    int x[] = {EV_X}, xy[] = {EV_X, EV_Y}, xz[] = {EV_X, EV_Z}, y[] = {EV_Y};
    struct hctx d1 = {"D1", 0, NULL, 0}, g1 = {"G1", PSCOM_PMIX_EVENT_NO_ACTION_TAKEN, NULL, 0},
                s1 = {"S1", 0, NULL, 0}, d2 = {"D2", 0, NULL, 0},
                s2 = {"S2", PSCOM_PMIX_EVENT_PARTIAL_ACTION_TAKEN, NULL, 0},
                g2 = {"G2", PSCOM_PMIX_EVENT_ACTION_DEFERRED, NULL, 0},
                s3 = {"S3", 0, NULL, 0}, g3 = {"G3", 0, NULL, 0};
    size_t count_id;

    step("registering");
    /* Registration order mixes the categories on purpose. */
    CHECK(!pscom_pmix_event_register(job, NULL, 0, PSCOM_PMIX_EVENT_DEFAULT, on_ev, &d1, &d1.id), "D1");
    CHECK(!pscom_pmix_event_register(job, xy, 2, 0, on_ev, &g1, &g1.id), "G1");
    CHECK(!pscom_pmix_event_register(job, x, 1, 0, on_ev, &s1, &s1.id), "S1");
    CHECK(!pscom_pmix_event_register(job, NULL, 0, PSCOM_PMIX_EVENT_DEFAULT, on_ev, &d2, &d2.id), "D2");
    CHECK(!pscom_pmix_event_register(job, x, 1, 0, on_ev, &s2, &s2.id), "S2");
    CHECK(!pscom_pmix_event_register(job, xz, 2, 0, on_ev, &g2, &g2.id), "G2");
    CHECK(!pscom_pmix_event_register(job, y, 1, 0, on_ev, &s3, &s3.id), "S3");
    CHECK(!pscom_pmix_event_register(job, x, 1, PSCOM_PMIX_EVENT_GROUP, on_ev, &g3, &g3.id), "G3");
    CHECK(!pscom_pmix_event_register(job, NULL, 0, PSCOM_PMIX_EVENT_DEFAULT, on_count, NULL, &count_id), "count");
    CHECK(pscom_pmix_event_register(job, x, 0, 0, on_ev, &s1, NULL) == PSCOM_ERR_INVALID,
          "no codes without DEFAULT is invalid");
    CHECK(pscom_pmix_event_register(job, x, 1, PSCOM_PMIX_EVENT_DEFAULT, on_ev, &s1, NULL) ==
          PSCOM_ERR_INVALID, "codes with DEFAULT are invalid");

    /* Specific first, then groups, then defaults; FIFO in each. */
    fire(job, EV_X, me, "x-text");
    expect_log("event X", "S1 S2 G1 G2 G3 D1 D2 ");
    int want_prev[] = {0, 0, PSCOM_PMIX_EVENT_PARTIAL_ACTION_TAKEN,
                       PSCOM_PMIX_EVENT_NO_ACTION_TAKEN,
                       PSCOM_PMIX_EVENT_ACTION_DEFERRED, 0, 0};
    size_t want_last[] = {0, s1.id, s2.id, g1.id, g2.id, g3.id, d1.id};
    for (int i = 0; i < 7; i++) {
        CHECK(g_prev[i] == want_prev[i], "handler %d got prev_status %d, expected %d",
              i, g_prev[i], want_prev[i]);
        CHECK(g_nres[i] == i, "handler %d saw %d results", i, g_nres[i]);
        CHECK(g_lastres_id[i] == want_last[i], "handler %d: last result from id %zu, "
              "expected %zu", i, g_lastres_id[i], want_last[i]);
    }
    CHECK(!strcmp(g_text_seen, "x-text"), "text \"%s\"", g_text_seen);
    CHECK(g_nranks_seen == 1 && g_ranks_seen[0] == me, "ranks of the event");

    CHECK(pscom_socket_get_ep_str(sock, &g_probe_ep) == PSCOM_SUCCESS, "endpoint string");
    CHECK(pipe2(g_probe, O_NONBLOCK | O_CLOEXEC) == 0 &&
              pscom_plugin_fd_add(g_probe[0], EPOLLIN, 1, on_probe, NULL) == 0,
          "probe pipe: %s", strerror(errno));
    for (g_dispatch = BY_PSCOM; g_dispatch <= BY_PMIX_PROGRESS; g_dispatch++) {
        s3.lookup = 1;
        g_probe_ran = false;
        fire(job, EV_Y, -1, NULL);
        expect_log("event Y", "S3 G1 D1 D2 ");
        CHECK(s3.lookup == 2, "S3 did not look up");
        /* The probe works: pscom progress after the handler runs its
         * callback (if the lookup did not). */
        for (double t0 = now_s(); !g_probe_ran && now_s() - t0 < 10;) pscom_test_any();
        CHECK(g_probe_ran, "the probe's callback never ran");
    }
    g_dispatch = BY_BOTH;
    pscom_plugin_fd_del(g_probe[0]);
    close(g_probe[0]);
    close(g_probe[1]);
    pscom_socket_free_ep_str(g_probe_ep);
    CHECK(g_nranks_seen == 0, "event Y names no rank");

    fire(job, EV_Z, -1, NULL);
    expect_log("event Z", "G2 D1 D2 ");

    /* ACTION_COMPLETE ends the chain. */
    g1.ret = PSCOM_PMIX_EVENT_ACTION_COMPLETE;
    fire(job, EV_X, -1, NULL);
    expect_log("event X, G1 completes", "S1 S2 G1 ");
    g1.ret = 0;

    /* Removed handlers are not called; a handler may remove a later one. */
    CHECK(!pscom_pmix_event_deregister(job, s1.id), "deregister S1");
    CHECK(!pscom_pmix_event_deregister(job, g1.id), "deregister G1");
    CHECK(pscom_pmix_event_deregister(job, g1.id) == PSCOM_ERR_INVALID,
          "deregistering twice is invalid");
    s2.remove_id = &d1.id;
    fire(job, EV_X, -1, NULL);
    expect_log("event X, S1 G1 removed, S2 removes D1", "S2 G2 G3 D2 ");

    if (peers && n > 1) {
        struct hctx p = {"P", 0, NULL, 0};
        int pc[] = {EV_PEERS};
        CHECK(!pscom_pmix_event_register(job, pc, 1, 0, on_ev, &p, &p.id), "P");
        step("barrier before the peer event");
        CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
        g_log[0] = 0;
        if (me == 0) {
            CHECK(pscom_pmix_notify(job, EV_PEERS, PSCOM_PMIX_RANGE_NAMESPACE, -1,
                                    "to all") == PSCOM_SUCCESS, "notify the job");
        }
        step("waiting for the peer event");
        double t0 = now_s();
        while (!strstr(g_log, "P ") && now_s() - t0 < 10) {
            if (!pscom_test_any()) usleep(200);
        }
        /* Whether the sender sees its own event depends on the host. */
        bool got = strstr(g_log, "P ") != NULL;
        if (me != 0)
            CHECK(got, "rank 0's event did not come (log \"%s\")", g_log);
        printf("rank %d: peer event %s\n", me, got ? "received" : "not received");
        step("barrier after the peer event");
        CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    } else {
        CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    }
    result_ok("precedence, chaining, completion and removal%s",
              peers ? ", peer notification" : "");
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* publish / lookup                                                       */
/* ---------------------------------------------------------------------- */

static pscom_pmix_range_t parse_range(const char *s)
{
    if (!strcmp(s, "default")) return PSCOM_PMIX_RANGE_DEFAULT;
    if (!strcmp(s, "session")) return PSCOM_PMIX_RANGE_SESSION;
    if (!strcmp(s, "global")) return PSCOM_PMIX_RANGE_GLOBAL;
    if (!strcmp(s, "namespace")) return PSCOM_PMIX_RANGE_NAMESPACE;
    if (!strcmp(s, "local")) return PSCOM_PMIX_RANGE_LOCAL;
    fprintf(stderr, "FAIL: unknown range %s\n", s);
    exit(1);
}

static int test_pubsub_server(const char *svc, pscom_pmix_range_t range)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    char buf[32];

    g_mode = "pubsub-server";
    step("publish %s", svc);
    pscom_err_t rc = pscom_pmix_publish(job, NULL, svc, range,
                                        PSCOM_PMIX_PERSIST_DEFAULT);
    CHECK(rc == PSCOM_SUCCESS, "publish: %s (%s)", pscom_err_str(rc),
          strerror(errno));
    step("waiting for the client's message");
    pscom_request_t *req = new_req();
    req->socket = sock;
    req->connection = NULL;
    req->data = buf;
    req->data_len = sizeof(buf);
    req->xheader_len = 0;
    pscom_post_recv(req);
    pscom_wait(req);
    CHECK(pscom_req_successful(req), "receive from the client: %s",
          pscom_req_state_str(req->state));
    CHECK(!strcmp(buf, "hello server"), "got \"%.32s\"", buf);
    pscom_connection_t *con = req->connection;
    step("answering");
    pscom_send(con, NULL, 0, "hello client", 13);
    step("waiting for the client's bye");
    CHECK(pscom_recv_from(con, NULL, 0, buf, 4) == PSCOM_SUCCESS, "bye");
    step("unpublish");
    rc = pscom_pmix_unpublish(job, svc, range);
    CHECK(rc == PSCOM_SUCCESS, "unpublish: %s (%s)", pscom_err_str(rc),
          strerror(errno));
    result_ok("published %s, served %s", svc, pscom_con_str(con));
    pscom_request_free(req);
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

static int test_pubsub_client(const char *svc, pscom_pmix_range_t range)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    char *ep = NULL, buf[32];

    g_mode = "pubsub-client";
    step("lookup of a service nobody publishes");
    pscom_err_t rc = pscom_pmix_lookup(job, "pscom-test-nobody-publishes-this",
                                       range, 0, 0, &ep);
    CHECK(rc == PSCOM_ERR_STDERROR && (errno == ENOENT || errno == ETIMEDOUT),
          "lookup of an unknown service: %s (%s)", pscom_err_str(rc),
          strerror(errno));
    step("lookup %s (waiting)", svc);
    rc = pscom_pmix_lookup(job, svc, range, 1, 30, &ep);
    CHECK(rc == PSCOM_SUCCESS && ep, "lookup: %s (%s)", pscom_err_str(rc),
          strerror(errno));
    step("connect to %s", ep);
    pscom_connection_t *con = pscom_open_connection(sock);
    rc = pscom_connect(con, ep, PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT);
    CHECK(rc == PSCOM_SUCCESS, "connect to %s: %s", ep, pscom_err_str(rc));
    pscom_send(con, NULL, 0, "hello server", 13);
    step("waiting for the answer");
    CHECK(pscom_recv_from(con, NULL, 0, buf, 13) == PSCOM_SUCCESS, "answer");
    CHECK(!strcmp(buf, "hello client"), "got \"%.32s\"", buf);
    pscom_send(con, NULL, 0, "bye", 4);
    pscom_flush(con);
    result_ok("looked up %s = %s, exchanged over %s", svc, ep,
              pscom_con_type_str(con->type));
    free(ep);
    pscom_close_connection(con);
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* singleton                                                              */
/* ---------------------------------------------------------------------- */

static int test_singleton(void)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock = boot(&job, 0);
    char *ep = NULL;

    CHECK(pscom_pmix_is_singleton(job), "not a singleton");
    CHECK(pscom_pmix_rank(job) == 0 && pscom_pmix_size(job) == 1,
          "rank %d of %d", pscom_pmix_rank(job), pscom_pmix_size(job));
    CHECK(pscom_pmix_is_local(job, 0) == 1, "rank 0 is local");
    exchange(job, 1, NULL); /* to ourselves */
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    pscom_err_t rc = pscom_pmix_publish(job, NULL, "pscom-singleton",
                                        PSCOM_PMIX_RANGE_DEFAULT,
                                        PSCOM_PMIX_PERSIST_DEFAULT);
    CHECK(rc == PSCOM_ERR_STDERROR && errno == ENOTCONN,
          "publish in a singleton: %s (%s)", pscom_err_str(rc), strerror(errno));
    rc = pscom_pmix_lookup(job, "pscom-singleton", PSCOM_PMIX_RANGE_DEFAULT, 0,
                           0, &ep);
    CHECK(rc == PSCOM_ERR_STDERROR && errno == ENOTCONN, "lookup in a singleton");
    result_ok("singleton: rank 0 of 1, loop traffic, barrier");
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* badep                                                                  */
/* ---------------------------------------------------------------------- */

static int test_badep(const char *mode)
{
    pscom_pmix_job_t *job;
    pscom_err_t rc;

    step("pscom_pmix_init");
    rc = pscom_pmix_init(&job);
    CHECK(rc == PSCOM_SUCCESS, "pscom_pmix_init: %s", pscom_err_str(rc));
    g_rank = pscom_pmix_rank(job);
    CHECK(pscom_pmix_size(job) == 2, "needs 2 ranks");

    if (g_rank == 1) {
        /* Play a broken peer: publish something else, then fence. */
        pmix_value_t v;
        pmix_proc_t wild;
        pmix_info_t info;
        bool yes = true;
        const char *bad = !strcmp(mode, "malformed") ? "this is not an endpoint"
                          : "127.0.0.1:4711@notrank1";
        if (strcmp(mode, "missing")) {
            PMIX_VALUE_LOAD(&v, bad, PMIX_STRING);
            CHECK(PMIx_Put(PMIX_GLOBAL, "pscom.ep", &v) == PMIX_SUCCESS, "put");
            PMIX_VALUE_DESTRUCT(&v);
        }
        CHECK(PMIx_Commit() == PMIX_SUCCESS, "commit");
        PMIX_LOAD_PROCID(&wild, pscom_pmix_nspace(job), PMIX_RANK_WILDCARD);
        PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
        step("fence as a broken peer");
        CHECK(PMIx_Fence(&wild, 1, &info, 1) == PMIX_SUCCESS, "fence");
        result_ok("played a peer with a %s endpoint", mode);
    } else {
        pscom_socket_t *sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, 0);
        step("bootstrap with a broken peer");
        rc = pscom_pmix_bootstrap(job, sock, 0);
        CHECK(rc == PSCOM_ERR_INVALID, "bootstrap with a %s endpoint of rank 1 "
              "returned %s", mode, pscom_err_str(rc));
        result_ok("bootstrap refused the %s endpoint of rank 1", mode);
        pscom_close_socket(sock);
    }
    step("barrier");
    CHECK(pscom_pmix_barrier(job) == PSCOM_SUCCESS, "barrier");
    pscom_pmix_finalize(job);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGALRM, on_alarm);
    alarm(60);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s alltoall|barrier-progress|lookup-progress|kill|events [--peers]|"
                "pubsub-server SVC RANGE|pubsub-client SVC RANGE|singleton|"
                "badep MODE|lost-messages|closed-socket|closed-self|dead-before-boot "
                "[--dispatched]|fake-lost|notify-failure-code|lost-server|"
                "teardown MODE|"
                "finalize-in-handler [--by-pscom]|register-order\n", argv[0]);
        return 2;
    }
    g_mode = argv[1];
    if (!strcmp(argv[1], "alltoall")) return test_alltoall();
    if (!strcmp(argv[1], "barrier-progress")) return test_barrier_progress(0);
    if (!strcmp(argv[1], "lookup-progress")) return test_barrier_progress(1);
    if (!strcmp(argv[1], "lost-messages")) return test_lost_messages();
    if (!strcmp(argv[1], "closed-socket")) return test_closed_socket();
    if (!strcmp(argv[1], "closed-self")) return test_closed_self();
    if (!strcmp(argv[1], "closed-in-boot")) return test_closed_in_boot();
    if (!strcmp(argv[1], "dead-before-boot"))
        return test_dead_before_boot(argc > 2 && !strcmp(argv[2], "--dispatched"));
    if (!strcmp(argv[1], "fake-lost")) return run_notify_case(&fake_lost);
    if (!strcmp(argv[1], "notify-failure-code"))
        return run_notify_case(&failure_about_nobody);
    if (!strcmp(argv[1], "lost-server")) return test_lost_server();
    if (!strcmp(argv[1], "teardown") && argc == 3) return test_teardown(argv[2]);
    if (!strcmp(argv[1], "finalize-in-handler"))
        return test_finalize_in_handler(argc > 2 && !strcmp(argv[2], "--by-pscom"));
    if (!strcmp(argv[1], "register-order")) return test_register_order();
    if (!strcmp(argv[1], "kill"))
        return test_kill(argc > 2 && !strcmp(argv[2], "--unconnected"));
    if (!strcmp(argv[1], "events"))
        return test_events(argc > 2 && !strcmp(argv[2], "--peers"));
    if (!strcmp(argv[1], "pubsub-server") && argc == 4)
        return test_pubsub_server(argv[2], parse_range(argv[3]));
    if (!strcmp(argv[1], "pubsub-client") && argc == 4)
        return test_pubsub_client(argv[2], parse_range(argv[3]));
    if (!strcmp(argv[1], "singleton")) return test_singleton();
    if (!strcmp(argv[1], "badep") && argc == 3) return test_badep(argv[2]);
    fprintf(stderr, "FAIL: unknown test %s\n", argv[1]);
    return 2;
}
