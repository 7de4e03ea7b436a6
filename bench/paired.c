/*
 * The driver of the paired benchmarks (paired.h): fork, pscom's side, the
 * alternating blocks and the report.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "paired.h"

/* All of len bytes to or from the peer, or fail. */
static void xfer(int fd, void *buf, size_t len, bool out)
{
    ssize_t n = out ? pscom_writeall(fd, buf, len) : pscom_readall(fd, buf, len);
    if (n != (ssize_t)len)
        fail("set-up with the peer: %s", n < 0 ? strerror(errno) : "it is gone");
}

void *swap_blob(int fd, const void *mine, size_t len, size_t *peer_len)
{
    uint64_t l = len;
    xfer(fd, &l, sizeof(l), true);
    xfer(fd, (void *)mine, len, true);
    xfer(fd, &l, sizeof(l), false);
    if (l > 1 << 20) fail("set-up with the peer: a blob of %llu bytes",
                          (unsigned long long)l);
    void *p = malloc(l + 1);
    if (!p) fail("out of memory");
    xfer(fd, p, l, false);
    ((char *)p)[l] = '\0';
    *peer_len = l;
    return p;
}

static void pscom_setup(struct side *s)
{
    pscom_err_t rc = pscom_init(PSCOM_VERSION);
    if (rc != PSCOM_SUCCESS) fail("pscom_init: %s", pscom_err_str(rc));
    s->sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED,
                                PSCOM_SOCK_FLAG_INTER_JOB);
    if (!s->sock) fail("pscom_open_socket failed");
    pscom_con_type_mask_only(s->sock, backend.con_type);
    s->sreq = pscom_request_create(0, 0);
    s->rreq = pscom_request_create(0, 0);
    if (!s->sreq || !s->rreq) fail("out of memory");
    size_t len;
    if (!s->client) {
        char *ep;
        rc = pscom_listen(s->sock, PSCOM_ANYPORT);
        if (rc == PSCOM_SUCCESS) rc = pscom_socket_get_ep_str(s->sock, &ep);
        if (rc != PSCOM_SUCCESS) fail("pscom_listen: %s", pscom_err_str(rc));
        free(swap_blob(s->fd, ep, strlen(ep), &len));
        pscom_socket_free_ep_str(ep);
        /* The client's first message names its connection. */
        s->rreq->socket = s->sock;
        s->rreq->connection = NULL;
    } else {
        char *ep = swap_blob(s->fd, "", 0, &len);
        s->con = pscom_open_connection(s->sock);
        if (!s->con) fail("pscom_open_connection failed");
        rc = pscom_connect(s->con, ep, PSCOM_RANK_UNDEFINED,
                           PSCOM_CON_FLAG_DIRECT);
        if (rc != PSCOM_SUCCESS)
            fail("connecting to %s: %s", ep, pscom_err_str(rc));
        free(ep);
        s->rreq->connection = s->con;
        s->rreq->socket = s->sock;
    }
}

static void pscom_post(pscom_request_t *r, pscom_connection_t *con, void *buf,
                       size_t len, bool send)
{
    r->connection = con;
    r->socket = con ? con->socket : r->socket;
    r->data = buf;
    r->data_len = len;
    r->xheader_len = 0;
    if (send) pscom_post_send(r);
    else pscom_post_recv(r);
}

static void pscom_wait_ok(pscom_request_t *r, const char *what)
{
    pscom_wait(r);
    if (!pscom_req_successful(r)) fail("pscom %s failed", what);
}

/* One round trip over pscom: the client sends first. The server answers
 * on the connection the message came on (its first one names it). */
static void pscom_round(struct side *s)
{
    if (s->client) {
        pscom_post(s->sreq, s->con, s->sbuf, s->size, true);
        pscom_post(s->rreq, s->con, s->rbuf, s->size, false);
        pscom_wait_ok(s->rreq, "receive");
        pscom_wait_ok(s->sreq, "send");
    } else {
        pscom_post(s->rreq, s->con, s->rbuf, s->size, false);
        pscom_wait_ok(s->rreq, "receive");
        s->con = s->rreq->connection;
        pscom_post(s->sreq, s->con, s->sbuf, s->size, true);
        pscom_wait_ok(s->sreq, "send");
    }
}

/* One round trip over the library alone. */
static void raw_round(struct side *s)
{
    if (s->client) {
        raw_send(s);
        raw_recv(s);
    } else {
        raw_recv(s);
        raw_send(s);
    }
}

/* Both libraries' first messages, untimed: connections wired up. */
static void hello(struct side *s)
{
    for (int i = 0; i < 3; i++) {
        /* pscom first: the server accepts the connection while it waits. */
        pscom_round(s);
        raw_round(s);
    }
    if (s->con->type != backend.con_type)
        fail("the pscom connection uses %s, not %s (is the plugin "
             "loadable? pscom_info)", pscom_con_type_str(s->con->type),
             backend.plugin);
}

/* One block: warm-up and timed iterations; the client's median of half
 * round trips, in ticks. */
static double block(struct side *s, bool raw)
{
    unsigned n = s->warm + s->iters;
    uint64_t t0 = ticks();
    for (unsigned it = 0; it < n; it++) {
        if (raw) raw_round(s);
        else pscom_round(s);
        if (!s->client) continue;
        uint64_t t1 = ticks();
        if (it >= s->warm) s->times[it - s->warm] = (double)(t1 - t0) / 2;
        t0 = t1;
    }
    if (!s->client) return 0;
    double med, p99;
    stats(s->times, s->iters, &med, &p99);
    return med;
}

/* The q-quantile of n sorted values. */
static double quant(const double *v, unsigned n, double q)
{
    double pos = q * (n - 1);
    unsigned i = (unsigned)pos;
    return i + 1 < n ? v[i] + (pos - i) * (v[i + 1] - v[i]) : v[n - 1];
}

static void summary(const char *name, double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    printf("%-28s median %7.3f  quartiles %7.3f %7.3f  range %7.3f-%.3f\n",
           name, quant(v, n, .5), quant(v, n, .25), quant(v, n, .75), v[0],
           v[n - 1]);
}

/* A pair of blocks: both latencies (us) and their ratio. */
enum { RAW, PS, RATIO };
struct pair {
    double v[3]; /* [RAW], [PS], [RATIO] = ps / raw */
};

static int cmp_pair_raw(const void *a, const void *b)
{
    return cmp_double(&((const struct pair *)a)->v[RAW],
                      &((const struct pair *)b)->v[RAW]);
}

/* A summary line of value k of the pairs pr[0..n), x the room to sort. */
static void summary_of(const char *name, const struct pair *pr, unsigned n,
                       int k, double *x)
{
    for (unsigned i = 0; i < n; i++) x[i] = pr[i].v[k];
    summary(name, x, n);
}

const char *raw_mode;

static void report(const struct side *s, const double *u, const double *p,
                   unsigned pairs, double scale)
{
    struct pair *pr = malloc(pairs * sizeof(*pr));
    double *x = malloc(pairs * sizeof(*x));
    if (!pr || !x) fail("out of memory");
    for (unsigned i = 0; i < pairs; i++)
        pr[i] = (struct pair){{u[i] * scale, p[i] * scale, p[i] / u[i]}};
    printf("%s: %zu B, %u pairs of blocks of %u iterations (+%u "
           "warm-up), %s=%s\n",
           backend.prog, s->size, pairs, s->iters, s->warm, backend.env,
           getenv(backend.env) ? getenv(backend.env) : "(unset)");
    if (raw_mode) printf("%s: %s\n", backend.raw, raw_mode);
    printf("latency, us (medians of the blocks)\n");
    char name[64];
    snprintf(name, sizeof(name), "  %s", backend.raw);
    summary_of(name, pr, pairs, RAW, x);
    snprintf(name, sizeof(name), "  pscom over %s", backend.plugin);
    summary_of(name, pr, pairs, PS, x);
    summary_of("ratio pscom/raw, paired", pr, pairs, RATIO, x);
    /* The pairs by placement: sorted by the raw latency, split where it
     * jumps by more than half (0.2 -> 0.6 us: two L3 caches, not one). */
    qsort(pr, pairs, sizeof(*pr), cmp_pair_raw);
    unsigned start = 0;
    for (unsigned i = 1; i <= pairs; i++) {
        if (i < pairs && pr[i].v[RAW] <= 1.5 * pr[i - 1].v[RAW]) continue;
        unsigned m = i - start;
        for (unsigned k = 0; k < m; k++) x[k] = pr[start + k].v[RATIO];
        qsort(x, m, sizeof(*x), cmp_double);
        printf("  placement %.3f-%.3f us: %3u pairs, ratio median %.3f "
               "(quartiles %.3f %.3f)\n",
               pr[start].v[RAW], pr[i - 1].v[RAW], m, quant(x, m, .5),
               quant(x, m, .25), quant(x, m, .75));
        start = i;
    }
    free(pr);
    free(x);
}

static int run(struct side *s, unsigned pairs)
{
    s->sbuf = alloc_buf(s->size ? s->size : 1, 0);
    s->rbuf = alloc_buf(s->size ? s->size : 1, 0);
    s->times = malloc(s->iters * sizeof(*s->times));
    double *u = malloc(pairs * sizeof(*u)), *p = malloc(pairs * sizeof(*p));
    if (!s->times || !u || !p) fail("out of memory");
    raw_setup(s);
    pscom_setup(s);
    hello(s);
    struct tick_span span;
    tick_span_start(&span);
    for (unsigned i = 0; i < pairs; i++) {
        if (i % 2 == 0) {
            u[i] = block(s, true);
            p[i] = block(s, false);
        } else {
            p[i] = block(s, false);
            u[i] = block(s, true);
        }
    }
    if (s->client) report(s, u, p, pairs, tick_span_rate(&span) / 1000.0);
    /* Each waits for the other before it closes: no error from a peer
     * that left first. */
    char c = 0;
    xfer(s->fd, &c, 1, true);
    xfer(s->fd, &c, 1, false);
    pscom_close_connection(s->con);
    pscom_close_socket(s->sock);
    pscom_request_free(s->sreq);
    pscom_request_free(s->rreq);
    raw_teardown(s);
    free(s->sbuf);
    free(s->rbuf);
    free(s->times);
    free(u);
    free(p);
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: %s [--size BYTES] [--pairs N] [--iters N] "
            "[--warmup N] [--cpu A,B]\n"
            "  pscom over %s against the %s in alternating blocks\n"
            "  (defaults: 8 B, 200 pairs, 2000 iterations and 200 warm-up "
            "a block, cores 0,1)\n",
            backend.prog, backend.plugin, backend.raw);
}

int main(int argc, char **argv)
{
    struct side s = {.size = 8, .iters = 2000, .warm = 200};
    unsigned pairs = 200;
    int cpu[2] = {0, 1};
    bench_prog = backend.prog;
    g_role = "server";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "--size")) {
            if (parse_size(v, &s.size) || s.size > (64u << 20))
                fail("--size: '%s' is no size up to 64 MiB", v);
        } else if (!strcmp(a, "--pairs")) {
            pairs = (unsigned)parse_long(v, a, 1, 100000);
        } else if (!strcmp(a, "--iters")) {
            s.iters = (unsigned)parse_long(v, a, 1, 10000000);
        } else if (!strcmp(a, "--warmup")) {
            s.warm = (unsigned)parse_long(v, a, 0, 10000000);
        } else if (!strcmp(a, "--cpu")) {
            if (sscanf(v, "%d,%d", &cpu[0], &cpu[1]) != 2)
                fail("--cpu: '%s' is not A,B", v);
        } else {
            usage(stderr);
            return 2;
        }
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        fail("socketpair: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) fail("fork: %s", strerror(errno));
    s.client = pid == 0;
    s.fd = sv[s.client];
    close(sv[!s.client]);
    if (s.client) {
        g_role = "client";
        prctl(PR_SET_PDEATHSIG, SIGTERM);
    } else {
        g_child = pid; /* fail() stops it */
    }
    pin_cpu(cpu[s.client]);
    alarm(600);
    int ret = run(&s, pairs);
    if (s.client) {
        fflush(stdout);
        _exit(ret);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) fail("waitpid: %s", strerror(errno));
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "%s: the client failed\n", backend.prog);
        return 1;
    }
    return ret;
}
