/*
 * Threads: two processes after pscom_init_thread, each with NTHREADS
 * threads, ping-pong verified messages of varying sizes (0 .. 64 KiB).
 *
 *   threads own [ITERS]       each thread on its own connection
 *                             (NTHREADS direct connections), 2000 round
 *                             trips per thread by default
 *   threads shared [ITERS]    all threads on one connection at the same
 *                             time; each thread has its own tag in the
 *                             xheader and receives with a recv_accept that
 *                             selects its tag (1000 round trips)
 *   threads ondemand [ITERS]  NTHREADS on-demand connections, one per
 *                             thread; the threads send their first messages
 *                             at the same moment, so they post and wait
 *                             while the connections are being set up
 *   threads ondemand-shared [ITERS]
 *                             one on-demand connection shared by all
 *                             threads (tags as in shared); the connecting
 *                             side listens with the lower name, so the peer
 *                             is asked to call back (on-demand name rule)
 *   threads rma-read [ITERS]  each thread on its own connection reads
 *                             0 .. 64 KiB at varying offsets of the peer's
 *                             memory with pscom_post_rma_read (every
 *                             eighth into a shorter buffer: truncated)
 *                             while the other threads' waits may be the
 *                             ones that take the answer (1000 reads per
 *                             thread); the peer's threads only wait for
 *                             the last message, their progress answers
 *                             the reads
 *
 * The pinging process ("ping") starts every round trip; the answering one
 * ("pong") receives by connection in own/shared and from any connection of
 * its socket (selected by tag) in the on-demand modes, where it learns the
 * connections only when they arrive. Every message carries (tag, round) in
 * its xheader and a pattern that depends on both and on the direction.
 */
#include "conn_util.h"
#include "itest.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 4
#define MAX_MSG  (64 * 1024)
#define HELLO    UINT32_MAX /* round number of the hello in mode own */

/* Eight busy threads on two shared cores can be slow (about a minute for
 * mode own when everything runs on one core); meson allows 300 s. */
#define THREAD_WATCHDOG_S 250

enum mode {
    MODE_OWN,
    MODE_SHARED,
    MODE_ONDEMAND,
    MODE_ONDEMAND_SHARED,
    MODE_RMA_READ,
    MODE_COUNT
};

static const char *const mode_names[] = {"own", "shared", "ondemand",
                                         "ondemand-shared", "rma-read"};
static const unsigned default_iters[] = {2000, 1000, 500, 500, 1000};

struct tag_xh {
    uint32_t tag;
    uint32_t round;
};

struct job {
    enum mode mode;
    unsigned iters;
};

struct worker {
    const struct job *job;
    unsigned t;
    pscom_socket_t *sock;
    pscom_connection_t *con; /* NULL: pong takes any connection of sock */
    pscom_connection_t *seen; /* pong: the connection its messages came on */
    uint8_t *memory; /* rma-read, pong: what the peer's thread t reads */
    pthread_t thread;
};

static pthread_barrier_t start_barrier;

static int shared_con(enum mode m)
{
    return m == MODE_SHARED || m == MODE_ONDEMAND_SHARED;
}

static int ondemand(enum mode m)
{
    return m == MODE_ONDEMAND || m == MODE_ONDEMAND_SHARED;
}

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Size of round i of thread t in direction dir (0 ping, 1 pong):
 * 0 .. MAX_MSG, mostly small, every power of two range equally often. */
static size_t msg_size(unsigned t, unsigned i, unsigned dir)
{
    uint32_t x = mix(t * 0x01000193u + i * 2u + dir + 1u);
    unsigned bits = x % 18;
    if (bits == 17) return MAX_MSG;
    return (x >> 8) & ((1u << bits) - 1);
}

static uint32_t msg_seed(unsigned t, unsigned i, unsigned dir)
{
    return 0x7e000000u ^ (t << 24) ^ (i << 1) ^ dir;
}

static int accept_tag(pscom_request_t *req, pscom_connection_t *con,
                      pscom_header_net_t *h)
{
    struct tag_xh x;
    uint32_t want;
    (void)con;
    if (h->xheader_len < sizeof(x)) return 0;
    memcpy(&x, h->xheader, sizeof(x));
    memcpy(&want, req->user, sizeof(want));
    return x.tag == want;
}

static pscom_request_t *tag_request(unsigned t)
{
    uint32_t tag = t;
    pscom_request_t *req = pscom_request_create(sizeof(struct tag_xh),
                                                sizeof(tag));
    if (!req) ITEST_FAIL("pscom_request_create returned NULL");
    memcpy(req->user, &tag, sizeof(tag));
    return req;
}

static void prepare_recv(pscom_request_t *r, struct worker *w, void *buf,
                         int by_tag)
{
    r->connection = w->con;
    r->socket = w->sock;
    r->data = buf;
    r->data_len = MAX_MSG;
    r->xheader_len = sizeof(struct tag_xh);
    r->ops.recv_accept = by_tag ? accept_tag : NULL;
}

/* The guard bytes behind a receive buffer of MAX_MSG bytes. */
static void check_guard(const uint8_t *buf, unsigned t, unsigned i)
{
    for (size_t k = 0; k < ITEST_GUARD_LEN; k++) {
        if (buf[MAX_MSG + k] != ITEST_GUARD_BYTE)
            ITEST_ASSERT_GUARD(buf, MAX_MSG, "thread %u, round %u", t, i);
    }
}

static void check_msg(pscom_request_t *r, const uint8_t *buf, unsigned t,
                      unsigned i, unsigned dir)
{
    struct tag_xh x;
    ITEST_ASSERT_REQ_OK(r, "thread %u, round %u", t, i);
    memcpy(&x, &r->xheader, sizeof(x));
    ITEST_ASSERT(x.tag == t && x.round == i,
                 "thread %u, round %u got the message of thread %u, round %u",
                 t, i, x.tag, x.round);
    ITEST_ASSERT_EQ(r->header.data_len, msg_size(t, i, dir),
                    "length, thread %u, round %u", t, i);
    /* The ITEST_ASSERT_PATTERN/GUARD macros format their message into a
     * static buffer even when the check passes: check first, so that
     * threads share nothing unless they fail. */
    if (itest_pattern_mismatch(buf, msg_size(t, i, dir),
                               msg_seed(t, i, dir)) >= 0)
        ITEST_ASSERT_PATTERN(buf, msg_size(t, i, dir), msg_seed(t, i, dir),
                             "thread %u, round %u", t, i);
    check_guard(buf, t, i);
}

static void *ping_thread(void *arg)
{
    struct worker *w = arg;
    unsigned t = w->t;
    int by_tag = shared_con(w->job->mode);
    uint8_t *sbuf = malloc(MAX_MSG), *rbuf = itest_alloc_guarded(MAX_MSG);
    pscom_request_t *s = tag_request(t), *r = tag_request(t);

    ITEST_ASSERT(sbuf != NULL, "out of memory");
    pthread_barrier_wait(&start_barrier);
    for (unsigned i = 0; i < w->job->iters; i++) {
        struct tag_xh x = {.tag = t, .round = i};
        size_t len = msg_size(t, i, 0);
        itest_fill(sbuf, len, msg_seed(t, i, 0));
        prepare_recv(r, w, rbuf, by_tag);
        pscom_post_recv(r);
        pscom_req_prepare(s, w->con, sbuf, len, &x, sizeof(x));
        pscom_post_send(s);
        pscom_wait(r);
        pscom_wait(s);
        ITEST_ASSERT_REQ_OK(s, "send of thread %u, round %u", t, i);
        check_msg(r, rbuf, t, i, 1);
    }
    pscom_request_free(s);
    pscom_request_free(r);
    free(sbuf);
    free(rbuf);
    return NULL;
}

/* The peer's memory for thread t (rma-read): READ_MEM bytes of this
 * pattern, read from varying offsets. */
#define READ_MEM (2 * MAX_MSG)
#define UNTOUCHED 0xee /* what the reads' buffer holds before each read */

static uint32_t memory_seed(unsigned t)
{
    return msg_seed(t, 0, 1) ^ 0x00a5a500u;
}

/* The address of its memory, which the peer sends first (rma-read). */
static uint8_t *recv_address(struct worker *w)
{
    pscom_request_t *r = tag_request(w->t);
    uint64_t addr = 0;
    prepare_recv(r, w, &addr, 0);
    r->data_len = sizeof(addr);
    pscom_post_recv(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "address for thread %u", w->t);
    ITEST_ASSERT_EQ(r->header.data_len, sizeof(addr), "address length");
    pscom_request_free(r);
    return (uint8_t *)(uintptr_t)addr;
}

static void *ping_read_thread(void *arg)
{
    struct worker *w = arg;
    unsigned t = w->t;
    uint8_t *rbuf = itest_alloc_guarded(MAX_MSG);
    uint8_t *expect = malloc(READ_MEM); /* a copy of the peer's memory */
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_rma_read_t),
                                              0);
    ITEST_ASSERT(r != NULL && expect != NULL, "out of memory");
    itest_fill(expect, READ_MEM, memory_seed(t));
    uint8_t *remote = recv_address(w);

    pthread_barrier_wait(&start_barrier);
    for (unsigned i = 0; i < w->job->iters; i++) {
        size_t len = msg_size(t, i, 1);
        size_t off = mix(t * 977u + i) % MAX_MSG;
        size_t room = i % 8 == 7 ? len / 2 : MAX_MSG;
        memset(rbuf, UNTOUCHED, MAX_MSG);
        r->connection = w->con;
        r->xheader.rma_read.src = remote + off;
        r->xheader.rma_read.src_len = len;
        r->data = rbuf;
        r->data_len = room;
        pscom_post_rma_read(r);
        pscom_wait(r);
        ITEST_ASSERT(!(r->state & PSCOM_REQ_STATE_ERROR),
                     "read of thread %u, round %u failed (state 0x%x)", t, i,
                     r->state);
        ITEST_ASSERT_EQ(r->header.data_len, len, "read length, thread %u, "
                        "round %u", t, i);
        size_t got = len < room ? len : room;
        ITEST_ASSERT(!(r->state & PSCOM_REQ_STATE_TRUNCATED) == (got == len),
                     "thread %u, round %u: %zu of %zu bytes, state 0x%x", t,
                     i, got, len, r->state);
        ITEST_ASSERT(!memcmp(rbuf, expect + off, got),
                     "thread %u, round %u: the %zu bytes read at offset %zu "
                     "differ from the peer's memory", t, i, got, off);
        for (size_t k = got; k < MAX_MSG; k++)
            ITEST_ASSERT(rbuf[k] == UNTOUCHED, "thread %u, round %u: byte %zu "
                         "written, beyond the %zu bytes read", t, i, k, got);
        check_guard(rbuf, t, i);
    }
    /* The peer's thread waits for this. */
    struct tag_xh x = {.tag = t, .round = w->job->iters};
    pscom_send(w->con, &x, sizeof(x), NULL, 0);
    pscom_request_free(r);
    free(expect);
    free(rbuf);
    return NULL;
}

/* Sends its thread's address, then only waits: the reads are answered by
 * the progress of the waits (rma-read). */
static void *pong_read_thread(void *arg)
{
    struct worker *w = arg;
    uint64_t addr = (uint64_t)(uintptr_t)w->memory;
    struct tag_xh x = {.tag = w->t, .round = HELLO};
    pscom_send(w->con, &x, sizeof(x), &addr, sizeof(addr));
    pthread_barrier_wait(&start_barrier);
    pscom_request_t *r = tag_request(w->t);
    prepare_recv(r, w, NULL, 0);
    r->data_len = 0;
    pscom_post_recv(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "last message of thread %u", w->t);
    memcpy(&x, &r->xheader, sizeof(x));
    ITEST_ASSERT(x.tag == w->t && x.round == w->job->iters,
                 "thread %u: last message (%u, %u)", w->t, x.tag, x.round);
    pscom_request_free(r);
    return NULL;
}

static void *pong_thread(void *arg)
{
    struct worker *w = arg;
    unsigned t = w->t;
    int by_tag = shared_con(w->job->mode) || !w->con;
    uint8_t *sbuf = malloc(MAX_MSG), *rbuf = itest_alloc_guarded(MAX_MSG);
    pscom_request_t *s = tag_request(t), *r = tag_request(t);

    ITEST_ASSERT(sbuf != NULL, "out of memory");
    pthread_barrier_wait(&start_barrier);
    for (unsigned i = 0; i < w->job->iters; i++) {
        struct tag_xh x = {.tag = t, .round = i};
        size_t len = msg_size(t, i, 1);
        prepare_recv(r, w, rbuf, by_tag);
        pscom_post_recv(r);
        pscom_wait(r);
        check_msg(r, rbuf, t, i, 0);
        if (!w->seen) w->seen = r->connection;
        ITEST_ASSERT(r->connection == w->seen,
                     "thread %u, round %u: the message came on another "
                     "connection than before", t, i);
        itest_fill(sbuf, len, msg_seed(t, i, 1));
        pscom_req_prepare(s, w->seen, sbuf, len, &x, sizeof(x));
        pscom_post_send(s);
        pscom_wait(s);
        ITEST_ASSERT_REQ_OK(s, "answer of thread %u, round %u", t, i);
    }
    pscom_request_free(s);
    pscom_request_free(r);
    free(sbuf);
    free(rbuf);
    return NULL;
}

static void run_threads(struct worker *w, void *(*fn)(void *))
{
    double t0 = itest_now();
    pthread_barrier_init(&start_barrier, NULL, NTHREADS);
    for (unsigned t = 0; t < NTHREADS; t++) {
        int e = pthread_create(&w[t].thread, NULL, fn, &w[t]);
        if (e) ITEST_FAIL("pthread_create: %s", strerror(e));
    }
    for (unsigned t = 0; t < NTHREADS; t++) pthread_join(w[t].thread, NULL);
    pthread_barrier_destroy(&start_barrier);
    itest_note("%u threads x %u round trips in %.2f s", NTHREADS,
               w[0].job->iters, itest_now() - t0);
}

static int count_connections(pscom_socket_t *sock)
{
    int n = 0;
    for (pscom_connection_t *c = pscom_get_next_connection(sock, NULL); c;
         c = pscom_get_next_connection(sock, c))
        n++;
    return n;
}

/* pscom_init_thread as the first call (itest_pscom_init would initialise
 * without threads first). */
static void init_thread(void)
{
    const char *shm = getenv("PSP_SHM");
    pscom_err_t rc;
    /* As in itest_pscom_init: meson's PSP_SHM=0 must not hide shm from a
     * run that asks for it by PSCOM_TEST_TRANSPORT. */
    if (!strcmp(itest_transport_name(), "shm") && shm && !strcmp(shm, "0"))
        unsetenv("PSP_SHM");
    rc = pscom_init_thread(PSCOM_VERSION);
    if (rc != PSCOM_SUCCESS)
        ITEST_FAIL("pscom_init_thread returned %s", pscom_err_str(rc));
}

/* ---------------------------------------------------------------------- */

static int ping(itest_link_t *link, void *arg)
{
    const struct job *job = arg;
    enum mode m = job->mode;
    struct worker w[NTHREADS];
    pscom_socket_t *sock;
    pscom_connection_t *cons[NTHREADS];
    int ncons = shared_con(m) ? 1 : NTHREADS;
    char *ep;

    itest_watchdog(THREAD_WATCHDOG_S);
    init_thread();
    /* Listening with the lower name makes the peer call back. */
    sock = itest_open_socket("a-ping", m == MODE_ONDEMAND_SHARED);
    ep = itest_link_recv_str(link);
    itest_step("%s: %d %s connection(s) to %s", mode_names[m], ncons,
               ondemand(m) ? "on-demand" : "direct", ep);
    for (int k = 0; k < ncons; k++) {
        if (ondemand(m)) {
            cons[k] = pscom_open_connection(sock);
            ITEST_ASSERT(cons[k] != NULL, "pscom_open_connection");
            ITEST_ASSERT_EQ(pscom_connect(cons[k], ep, PSCOM_RANK_UNDEFINED,
                                          PSCOM_CON_FLAG_ONDEMAND),
                            PSCOM_SUCCESS, "on-demand connect %d", k);
            ITEST_ASSERT_EQ(cons[k]->type, PSCOM_CON_TYPE_ONDEMAND,
                            "connection %d before its first message", k);
        } else {
            cons[k] = itest_connect(sock, ep);
        }
        if (m == MODE_OWN || m == MODE_RMA_READ) {
            /* Tell the peer which thread this connection belongs to. */
            struct tag_xh x = {.tag = (uint32_t)k, .round = HELLO};
            pscom_send(cons[k], &x, sizeof(x), NULL, 0);
        }
    }
    free(ep);
    itest_link_send_u64(link, 1); /* connected */
    itest_link_recv_u64(link);    /* go */

    itest_step("%u threads %s, %u rounds each", NTHREADS,
               m == MODE_RMA_READ ? "read the peer's memory" : "ping-pong",
               job->iters);
    for (unsigned t = 0; t < NTHREADS; t++)
        w[t] = (struct worker){.job = job, .t = t, .sock = sock,
                               .con = cons[shared_con(m) ? 0 : t]};
    run_threads(w, m == MODE_RMA_READ ? ping_read_thread : ping_thread);

    for (int k = 0; k < ncons; k++)
        ITEST_ASSERT(cons[k]->type != PSCOM_CON_TYPE_ONDEMAND &&
                         cons[k]->type != PSCOM_CON_TYPE_NONE,
                     "connection %d is connected (type %s)", k,
                     pscom_con_type_str(cons[k]->type));
    ITEST_ASSERT_EQ(count_connections(sock), ncons,
                    "connections of the pinging socket");
    ITEST_ASSERT_EQ(itest_accept_count(), 0,
                    "connections accepted besides our own");

    itest_link_send_u64(link, 1); /* done */
    itest_link_recv_u64(link);    /* bye */
    pscom_close_socket(sock);
    return 0;
}

static int pong(itest_link_t *link, void *arg)
{
    const struct job *job = arg;
    enum mode m = job->mode;
    struct worker w[NTHREADS];
    pscom_socket_t *sock;
    pscom_connection_t *by_thread[NTHREADS] = {NULL};
    int ncons = shared_con(m) ? 1 : NTHREADS;
    char *ep;

    itest_watchdog(THREAD_WATCHDOG_S);
    init_thread();
    sock = itest_open_socket("b-pong", 1);
    ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);

    if (!ondemand(m)) {
        itest_step("accepting %d connection(s)", ncons);
        for (int k = 0; k < ncons; k++) {
            pscom_connection_t *c = itest_wait_accept(k + 1);
            if (m == MODE_SHARED) {
                by_thread[0] = c;
                continue;
            }
            /* Which thread is this connection's? */
            pscom_request_t *h = itest_request(sizeof(struct tag_xh));
            struct tag_xh x;
            h->connection = c;
            h->xheader_len = sizeof(x);
            pscom_post_recv(h);
            pscom_wait(h);
            ITEST_ASSERT_REQ_OK(h, "hello on accepted connection %d", k);
            memcpy(&x, &h->xheader, sizeof(x));
            ITEST_ASSERT(x.round == HELLO && x.tag < NTHREADS &&
                             !by_thread[x.tag],
                         "hello (tag %u, round %u)", x.tag, x.round);
            by_thread[x.tag] = c;
            pscom_request_free(h);
        }
    }
    itest_link_recv_u64(link); /* go */

    itest_step("%u threads answering, %u rounds each", NTHREADS, job->iters);
    uint8_t *memory = NULL;
    if (m == MODE_RMA_READ) {
        memory = malloc((size_t)NTHREADS * READ_MEM);
        ITEST_ASSERT(memory != NULL, "out of memory");
        for (unsigned t = 0; t < NTHREADS; t++)
            itest_fill(memory + (size_t)t * READ_MEM, READ_MEM, memory_seed(t));
    }
    for (unsigned t = 0; t < NTHREADS; t++)
        w[t] = (struct worker){.job = job, .t = t, .sock = sock,
                               .con = by_thread[shared_con(m) ? 0 : t],
                               .memory = memory ? memory + (size_t)t * READ_MEM
                                                : NULL};
    run_threads(w, m == MODE_RMA_READ ? pong_read_thread : pong_thread);
    free(memory);

    if (ondemand(m)) {
        /* Distinct connections per thread, or one for all. */
        for (unsigned t = 1; t < NTHREADS; t++)
            for (unsigned u = 0; u < t; u++)
                ITEST_ASSERT((w[t].seen == w[u].seen) == shared_con(m),
                             "threads %u and %u were answered on %s "
                             "connections", u, t,
                             w[t].seen == w[u].seen ? "the same" : "different");
    }
    ITEST_ASSERT_EQ(itest_accept_count(), ncons, "accepted connections");
    ITEST_ASSERT_EQ(count_connections(sock), ncons,
                    "connections of the answering socket");

    itest_link_send_u64(link, 1); /* done */
    itest_link_recv_u64(link);    /* bye */
    pscom_close_socket(sock);
    return 0;
}

int main(int argc, char **argv)
{
    itest_child_t a, b;
    itest_child_t *list[2] = {&a, &b};
    struct job job;
    char *ep;
    int rc, found = 0;

    itest_set_role("orchestrator");
    itest_watchdog(280);
    for (int i = 0; argc >= 2 && i < MODE_COUNT; i++) {
        if (!strcmp(argv[1], mode_names[i])) {
            job.mode = (enum mode)i;
            found = 1;
        }
    }
    if (!found || argc > 3) {
        fprintf(stderr, "usage: %s own|shared|ondemand|ondemand-shared|"
                        "rma-read [ITERS]\n", argv[0]);
        return 2;
    }
    job.iters = argc == 3 ? (unsigned)atoi(argv[2])
                          : default_iters[job.mode];

    itest_spawn(&b, "pong", pong, &job);
    itest_spawn(&a, "ping", ping, &job);
    ep = itest_link_recv_str(&b.link);
    itest_link_send_str(&a.link, ep);
    free(ep);
    itest_link_recv_u64(&a.link); /* connected */
    itest_link_send_u64(&b.link, 1);
    itest_link_send_u64(&a.link, 1);
    itest_link_recv_u64(&a.link);
    itest_link_recv_u64(&b.link);
    itest_link_send_u64(&a.link, 1);
    itest_link_send_u64(&b.link, 1);
    rc = itest_children_check(list, 2);
    if (rc == 0) itest_note("PASS");
    return rc;
}
