/*
 * rma_bench — one-sided put and get between two processes: latency (one
 * operation posted and waited for at a time) and bandwidth (windows of 16
 * operations, then one fetch-and-op round trip, as a flush would).
 *
 * The parent is the target: it registers a region, sends its packed key,
 * registers put and get callbacks that count (as ParaStation MPI's do) and
 * waits for the end, driving progress. The child is the origin and prints.
 * Which path an operation takes is the library's decision: over shm,
 * PSP_SHM_RMA=inf sends everything through the ring (the core's path),
 * PSP_SHM_RMA=0 copies every put and get with process_vm_writev/readv.
 *
 *   rma_bench [--sizes 8,64k,4m] [--reps 7] [--cpu 0,1] [--ops put,get]
 *
 * For each operation and size it prints the median over --reps repetitions
 * of the time per operation (latency, us) and of the bandwidth (MB/s,
 * 10^6 bytes per second), and the target's callback count as a check.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pscom.h"

#define WINDOW    16
#define MAX_SIZES 32
#define MAX_REPS  101
#define ITER_BYTES 100e6

struct opts {
    size_t sizes[MAX_SIZES];
    unsigned nsizes;
    unsigned reps;
    int cpu_target, cpu_origin;
    int put, get;
};

static void die(const char *what)
{
    fprintf(stderr, "rma_bench: %s\n", what);
    exit(1);
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    size_t m = 1;
    if (*end == 'k' || *end == 'K') m = 1024, end++;
    else if (*end == 'm' || *end == 'M') m = 1024 * 1024, end++;
    if (end == s || *end || v < 1) die("sizes are positive numbers with an "
                                       "optional k or m suffix");
    return (size_t)v * m;
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"sizes", required_argument, NULL, 's'},
        {"reps", required_argument, NULL, 'r'},
        {"cpu", required_argument, NULL, 'c'},
        {"ops", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct opts){.reps = 7, .cpu_target = -1, .cpu_origin = -1,
                       .put = 1, .get = 1};
    const char *sizes = "8,64k,4m";
    int c;
    while ((c = getopt_long(argc, argv, "s:r:c:o:h", lo, NULL)) != -1) {
        switch (c) {
        case 's': sizes = optarg; break;
        case 'r':
            o->reps = (unsigned)atoi(optarg);
            if (o->reps < 1 || o->reps > MAX_REPS) die("--reps is 1..101");
            break;
        case 'c':
            if (sscanf(optarg, "%d,%d", &o->cpu_target, &o->cpu_origin) != 2)
                die("--cpu needs two core numbers A,B");
            break;
        case 'o':
            o->put = strstr(optarg, "put") != NULL;
            o->get = strstr(optarg, "get") != NULL;
            break;
        default:
            printf("usage: rma_bench [--sizes 8,64k,4m] [--reps N] "
                   "[--cpu TARGET,ORIGIN] [--ops put,get]\n");
            exit(c == 'h' ? 0 : 2);
        }
    }
    char *list = strdup(sizes), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nsizes == MAX_SIZES) die("too many sizes");
        o->sizes[o->nsizes++] = parse_size(t);
    }
    free(list);
}

static void pin(int cpu)
{
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set)) die("cannot pin to the core");
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---------------------------------------------------------------------- */
/* Target                                                                 */
/* ---------------------------------------------------------------------- */

static unsigned long callbacks;

static void count_cb(pscom_request_t *req)
{
    (void)req;
    callbacks++;
}

static int target(const struct opts *o, int fd_out, int fd_in)
{
    size_t max = 8;
    for (unsigned i = 0; i < o->nsizes; i++)
        if (o->sizes[i] > max) max = o->sizes[i];
    pin(o->cpu_target);
    pscom_init(PSCOM_VERSION);
    pscom_socket_t *sock = pscom_open_socket(0, 0, 0, 0);
    if (pscom_listen(sock, PSCOM_ANYPORT)) die("target: cannot listen");
    char *ep;
    if (pscom_socket_get_ep_str(sock, &ep)) die("target: no endpoint");
    size_t eplen = strlen(ep) + 1;
    if (write(fd_out, ep, eplen) != (ssize_t)eplen) die("target: pipe");
    pscom_socket_free_ep_str(ep);
    while (!pscom_get_next_connection(sock, NULL)) pscom_test_any();
    pscom_connection_t *con = pscom_get_next_connection(sock, NULL);

    char *mem = aligned_alloc(4096, (max + 8 + 4095) / 4096 * 4096);
    memset(mem, 0, max + 8);
    pscom_memh_t memh;
    if (pscom_mem_register(sock, mem, max + 8, &memh)) die("target: register");
    pscom_register_rma_callbacks(count_cb, memh, PSCOM_RMA_PUT);
    pscom_register_rma_callbacks(count_cb, memh, PSCOM_RMA_GET);
    void *key;
    size_t keylen;
    if (pscom_rkey_buffer_pack(&key, &keylen, memh)) die("target: pack");
    uint64_t base = (uint64_t)(uintptr_t)mem;
    pscom_send(con, &base, sizeof(base), key, keylen);
    pscom_rkey_buffer_release(key);

    /* Serve until the origin asks for the count, then say it. */
    uint64_t ask;
    for (;;) {
        if (pscom_recv_from(con, NULL, 0, &ask, sizeof(ask))) break;
        uint64_t n = callbacks;
        pscom_send(con, NULL, 0, &n, sizeof(n));
        if (!ask) break;
    }
    char eof;
    if (read(fd_in, &eof, 1) < 0) eof = 0;
    pscom_mem_deregister(memh);
    pscom_close_socket(sock);
    free(mem);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Origin                                                                 */
/* ---------------------------------------------------------------------- */

struct origin {
    pscom_connection_t *con;
    pscom_rkey_t key;
    char *target;
    char *buf;
    pscom_request_t *req[WINDOW];
    pscom_request_t *sync;
    uint64_t operand, result;
};

static void keep(pscom_request_t *r)
{
    (void)r; /* io_done set: the request stays ours */
}

static pscom_request_t *make_req(struct origin *g)
{
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_rma_put_t), 0);
    r->connection = g->con;
    r->rma.rkey = g->key;
    r->ops.io_done = keep;
    return r;
}

static void post(struct origin *g, pscom_request_t *r, int put, size_t len)
{
    r->data_len = len;
    r->rma.origin_addr = g->buf;
    r->rma.target_addr = g->target;
    if (put)
        pscom_post_rma_put(r);
    else
        pscom_post_rma_get(r);
}

/* A fetch-and-op round trip: every operation before it has reached the
 * target (the core's path answers in order; plugin-moved bytes are in). */
static void flush(struct origin *g)
{
    pscom_request_t *r = g->sync;
    r->data_len = 8;
    r->rma.origin_addr = &g->operand;
    r->rma.result_addr = &g->result;
    r->rma.target_addr = g->target;
    pscom_post_rma_fetch_op(r);
    pscom_wait(r);
    if (!pscom_req_successful(r)) die("origin: flush failed");
}

static double run_lat(struct origin *g, int put, size_t len, long iters)
{
    pscom_request_t *r = g->req[0];
    double t0 = now_us();
    for (long i = 0; i < iters; i++) {
        post(g, r, put, len);
        pscom_wait(r);
        if (!pscom_req_successful(r)) die("origin: operation failed");
    }
    flush(g);
    return (now_us() - t0) / iters;
}

static double run_bw(struct origin *g, int put, size_t len, long iters)
{
    long batches = (iters + WINDOW - 1) / WINDOW;
    double t0 = now_us();
    for (long b = 0; b < batches; b++) {
        for (int j = 0; j < WINDOW; j++) post(g, g->req[j], put, len);
        for (int j = 0; j < WINDOW; j++) {
            pscom_wait(g->req[j]);
            if (!pscom_req_successful(g->req[j])) die("origin: operation failed");
        }
        flush(g);
    }
    double s = (now_us() - t0) / 1e6;
    return (double)batches * WINDOW * len / s / 1e6;
}

static uint64_t target_count(struct origin *g, uint64_t more)
{
    uint64_t n;
    pscom_send(g->con, NULL, 0, &more, sizeof(more));
    if (pscom_recv_from(g->con, NULL, 0, &n, sizeof(n))) die("origin: count");
    return n;
}

static int origin(const struct opts *o, int fd_in)
{
    char ep[256];
    size_t have = 0;
    ssize_t n;
    while (have < sizeof(ep) && (n = read(fd_in, ep + have, 1)) == 1 &&
           ep[have++])
        ;
    if (!have || ep[have - 1]) die("origin: no endpoint from the target");
    pin(o->cpu_origin);
    pscom_init(PSCOM_VERSION);
    pscom_socket_t *sock = pscom_open_socket(0, 0, 0, 0);
    pscom_connection_t *con = pscom_open_connection(sock);
    if (pscom_connect(con, ep, 0, 0)) die("origin: cannot connect");

    struct origin g = {.con = con};
    uint64_t base;
    char key[4096];
    pscom_request_t *kr = pscom_request_create(sizeof(base), 0);
    kr->connection = con;
    kr->xheader_len = sizeof(base);
    kr->data = key;
    kr->data_len = sizeof(key);
    pscom_post_recv(kr);
    pscom_wait(kr);
    memcpy(&base, &kr->xheader, sizeof(base));
    if (pscom_rkey_generate(con, key, kr->header.data_len, &g.key))
        die("origin: bad key");
    pscom_request_free(kr);
    g.target = (char *)(uintptr_t)base;

    size_t max = 8;
    for (unsigned i = 0; i < o->nsizes; i++)
        if (o->sizes[i] > max) max = o->sizes[i];
    g.buf = aligned_alloc(4096, (max + 4095) / 4096 * 4096);
    memset(g.buf, 1, max);
    for (int j = 0; j < WINDOW; j++) g.req[j] = make_req(&g);
    g.sync = make_req(&g);

    const char *path = getenv("PSP_SHM_RMA");
    printf("# rma_bench over %s, PSP_SHM_RMA=%s, medians of %u repetitions\n",
           pscom_con_type_str(con->type), path ? path : "(default)", o->reps);
    printf("# %-4s %10s %8s %12s %12s\n", "op", "bytes", "iters", "lat_us",
           "bw_MBps");
    uint64_t expect = 0;
    for (int op = 0; op < 2; op++) {
        int put = op == 0;
        if (put ? !o->put : !o->get) continue;
        for (unsigned i = 0; i < o->nsizes; i++) {
            size_t len = o->sizes[i];
            long iters = (long)(ITER_BYTES / (double)(len + 256));
            if (iters < 64) iters = 64;
            if (iters > 20000) iters = 20000;
            double lat[MAX_REPS], bw[MAX_REPS];
            run_lat(&g, put, len, iters / 8 + 1); /* warm up */
            expect += iters / 8 + 1;
            for (unsigned r = 0; r < o->reps; r++) {
                lat[r] = run_lat(&g, put, len, iters);
                bw[r] = run_bw(&g, put, len, iters);
                expect += iters + (iters + WINDOW - 1) / WINDOW * WINDOW;
            }
            printf("  %-4s %10zu %8ld %12.3f %12.1f\n", put ? "put" : "get",
                   len, iters, median(lat, o->reps), median(bw, o->reps));
            fflush(stdout);
        }
    }
    uint64_t got = target_count(&g, 0);
    printf("# target callbacks: %llu of %llu operations\n",
           (unsigned long long)got, (unsigned long long)expect);
    for (int j = 0; j < WINDOW; j++) pscom_request_free(g.req[j]);
    pscom_request_free(g.sync);
    pscom_rkey_destroy(g.key);
    pscom_close_socket(sock);
    free(g.buf);
    return got == expect ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct opts o;
    int to_origin[2], to_target[2];
    parse_opts(argc, argv, &o);
    if (pipe(to_origin) || pipe(to_target)) die("pipe");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        close(to_origin[1]);
        close(to_target[0]);
        int rc = origin(&o, to_origin[0]);
        close(to_target[1]); /* the target may go */
        return rc;
    }
    close(to_origin[0]);
    close(to_target[1]);
    target(&o, to_origin[1], to_target[0]);
    int st;
    if (waitpid(pid, &st, 0) < 0) die("waitpid");
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
