/*
 * raw_pingpong — the baseline for pscom_bench: the same measurement over a
 * plain TCP socket on the loopback, with no library in between.
 *
 * It forks its peer like pscom_bench does; the parent is the server, the
 * child the client, which times and prints. Both sides busy-poll a
 * non-blocking socket (send/recv with MSG_DONTWAIT in a loop) with
 * TCP_NODELAY and the kernel's buffer autotuning. The size list, the
 * iteration rules, the window scheme of --bw/--bidir and the output columns
 * and JSON keys are those of pscom_bench, so the two can be compared line by
 * line. Messages carry no header; a 0-byte message travels as one byte so
 * that a round trip still happens.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WINDOW       16
#define MAX_SIZES    64
#define MAX_MSG_SIZE ((size_t)1 << 30)
#define DEFAULT_MAX  ((size_t)4 << 20)
#define ITER_BYTES   200e6
#define ITERS_MIN    20
#define ITERS_MAX    1000

enum mode { MODE_PINGPONG = 0, MODE_BW = 1, MODE_BIDIR = 2 };
enum dir { DIR_C2S = 0, DIR_S2C = 1 };

static const char *const mode_names[] = {"pingpong", "bw", "bidir"};

struct opts {
    size_t sizes[MAX_SIZES];
    unsigned nsizes;
    size_t minsize, maxsize;
    long iters, warmup;
    enum mode mode;
    int verify, json;
    unsigned timeout;
    int cpu_server, cpu_client;
};

struct side {
    int fd;
    int is_client;
    const struct opts *o;
    unsigned char *sbuf;
    unsigned char *rbuf[WINDOW];
    unsigned nrbuf;
    double *times;
};

/* ---------------------------------------------------------------------- */
/* Signals and errors                                                     */
/* ---------------------------------------------------------------------- */

static const char *g_role = "raw_pingpong";
static const char *volatile g_phase = "startup";
static volatile size_t g_size = SIZE_MAX;
static volatile unsigned g_iter;
static volatile pid_t g_child = -1;
static volatile sig_atomic_t g_child_reaped;
static volatile int g_child_status;
static unsigned g_timeout = 300;

struct sbuf {
    char buf[320];
    size_t len;
};

static void sb_str(struct sbuf *b, const char *s)
{
    while (*s && b->len < sizeof(b->buf) - 1)
        b->buf[b->len++] = *s++;
}

static void sb_uint(struct sbuf *b, uint64_t v)
{
    char tmp[24];
    int n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n && b->len < sizeof(b->buf) - 1)
        b->buf[b->len++] = tmp[--n];
}

static void sb_where(struct sbuf *b)
{
    sb_str(b, g_phase);
    if (g_size != SIZE_MAX) {
        sb_str(b, " at size ");
        sb_uint(b, g_size);
        sb_str(b, " B, iteration ");
        sb_uint(b, g_iter);
    }
}

static void sb_flush(struct sbuf *b)
{
    ssize_t rc;

    sb_str(b, "\n");
    rc = write(STDERR_FILENO, b->buf, b->len);
    (void)rc;
}

static void on_alarm(int sig)
{
    struct sbuf b = {.len = 0};

    (void)sig;
    sb_str(&b, "raw_pingpong (");
    sb_str(&b, g_role);
    sb_str(&b, "): timeout after ");
    sb_uint(&b, g_timeout);
    sb_str(&b, " s while ");
    sb_where(&b);
    sb_flush(&b);
    if (g_child > 0)
        kill(g_child, SIGTERM);
    _exit(1);
}

static void on_sigchld(int sig)
{
    int saved_errno = errno, st;
    struct sbuf b = {.len = 0};

    (void)sig;
    if (g_child <= 0 || waitpid(g_child, &st, WNOHANG) != g_child) {
        errno = saved_errno;
        return;
    }
    g_child_status = st;
    g_child_reaped = 1;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        errno = saved_errno;
        return;
    }
    sb_str(&b, "raw_pingpong (server): the client process failed (");
    if (WIFEXITED(st)) {
        sb_str(&b, "exit status ");
        sb_uint(&b, (unsigned)WEXITSTATUS(st));
    } else {
        sb_str(&b, "killed by signal ");
        sb_uint(&b, (unsigned)WTERMSIG(st));
    }
    sb_str(&b, ") while the server was ");
    sb_where(&b);
    sb_flush(&b);
    _exit(1);
}

static void arm_timeout(const char *phase)
{
    g_phase = phase;
    if (g_timeout)
        alarm(g_timeout);
}

static void die(void)
{
    fflush(stdout);
    fflush(stderr);
    if (g_child > 0)
        kill(g_child, SIGTERM);
    _exit(1);
}

#define fail(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "raw_pingpong (%s): ", g_role);                        \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        die();                                                                 \
    } while (0)

/* ---------------------------------------------------------------------- */
/* Helpers (the same rules as pscom_bench)                                */
/* ---------------------------------------------------------------------- */

static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define PAT_STEP 0x9e3779b97f4a7c15ull

static uint64_t pat_seed(uint64_t size, uint64_t iter, unsigned dir)
{
    uint64_t x = size * 0xc2b2ae3d27d4eb4full ^ (iter + 1) * PAT_STEP ^
                 ((uint64_t)dir + 1) * 0x165667b19e3779f9ull;

    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static void pat_fill(unsigned char *p, size_t len, uint64_t seed)
{
    size_t i, n = len / 8;
    uint64_t w = seed;

    for (i = 0; i < n; i++, w += PAT_STEP)
        memcpy(p + 8 * i, &w, 8);
    if (len % 8)
        memcpy(p + 8 * n, &w, len % 8);
}

#define NO_SLOT UINT_MAX /* a ping-pong message, not part of a window */

static void pat_verify(const unsigned char *p, size_t size, unsigned iter,
                       unsigned dir, unsigned slot)
{
    size_t i, k, n = (size + 7) / 8;
    uint64_t w = pat_seed(size, iter, dir);

    for (i = 0; i < n; i++, w += PAT_STEP) {
        size_t chunk = size - 8 * i < 8 ? size - 8 * i : 8;
        unsigned char e[8];

        memcpy(e, &w, 8);
        if (memcmp(p + 8 * i, e, chunk) == 0)
            continue;
        for (k = 0; p[8 * i + k] == e[k]; k++)
            ;
        char where[48] = "";

        if (slot != NO_SLOT)
            snprintf(where, sizeof(where), "message %u of the window, ", slot);
        fail("verify failed: size %zu, iteration %u, offset %zu (%s%s): "
             "expected 0x%02x, got 0x%02x",
             size, iter, 8 * i + k, where,
             dir == DIR_C2S ? "client->server" : "server->client", e[k],
             p[8 * i + k]);
    }
}

static void *alloc_buf(size_t len)
{
    void *p = NULL;
    size_t n = len < 4096 ? 4096 : len;

    if (posix_memalign(&p, 4096, n))
        fail("out of memory allocating a %zu byte buffer", n);
    memset(p, 0xa5, n);
    return p;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v, mul = 1;

    errno = 0;
    if (*s < '0' || *s > '9')
        return -1;
    v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    switch (*end) {
    case 'k': case 'K': mul = 1ull << 10; end++; break;
    case 'm': case 'M': mul = 1ull << 20; end++; break;
    case 'g': case 'G': mul = 1ull << 30; end++; break;
    default: break;
    }
    if (mul > 1 && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > MAX_MSG_SIZE / mul)
        return -1;
    *out = (size_t)(v * mul);
    return 0;
}

static long parse_long(const char *s, const char *opt, long min, long max)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "raw_pingpong: %s needs a number from %ld to %ld, "
                        "not '%s'\n", opt, min, max, s);
        exit(1);
    }
    return v;
}

static unsigned default_iters(size_t size, enum mode mode)
{
    double bytes = (double)size * (mode == MODE_PINGPONG ? 1 : WINDOW);
    double it = bytes > 0 ? ITER_BYTES / bytes : ITERS_MAX;

    if (it > ITERS_MAX)
        it = ITERS_MAX;
    if (it < ITERS_MIN)
        it = ITERS_MIN;
    return (unsigned)it;
}

static void step_iters(const struct opts *o, size_t size, unsigned *iters,
                       unsigned *warm)
{
    *iters = o->iters > 0 ? (unsigned)o->iters : default_iters(size, o->mode);
    if (o->warmup >= 0)
        *warm = (unsigned)o->warmup;
    else
        *warm = *iters / 10 < 2 ? 2 : *iters / 10;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static void stats(double *t, unsigned n, double *median, double *p99)
{
    size_t idx;

    qsort(t, n, sizeof(*t), cmp_double);
    *median = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
    idx = (size_t)ceil(0.99 * n);
    *p99 = t[idx ? idx - 1 : 0];
}

static void pin_cpu(int cpu)
{
    cpu_set_t set;

    if (cpu < 0)
        return;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set))
        fail("cannot pin to cpu %d: %s", cpu, strerror(errno));
}

/* ---------------------------------------------------------------------- */
/* Busy-polling transfers                                                 */
/* ---------------------------------------------------------------------- */

/* Send scount messages of slen bytes, all from sbuf, and receive rcount
 * messages of rlen bytes into rbuf[0..rcount-1], both at the same time. */
static void xfer(int fd, const unsigned char *sbuf, size_t slen,
                 unsigned scount, unsigned char **rbuf, size_t rlen,
                 unsigned rcount)
{
    size_t stot = slen * scount, rtot = rlen * rcount, sp = 0, rp = 0;

    while (sp < stot || rp < rtot) {
        ssize_t n;

        if (sp < stot) {
            size_t off = sp % slen;

            n = send(fd, sbuf + off, slen - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0)
                sp += (size_t)n;
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                fail("send failed while %s at size %zu B, iteration %u: %s",
                     g_phase, (size_t)g_size, (unsigned)g_iter,
                     strerror(errno));
        }
        if (rp < rtot) {
            size_t off = rp % rlen;

            n = recv(fd, rbuf[rp / rlen] + off, rlen - off, MSG_DONTWAIT);
            if (n > 0)
                rp += (size_t)n;
            else if (n == 0)
                fail("the peer closed the connection while %s at size %zu B, "
                     "iteration %u",
                     g_phase, (size_t)g_size, (unsigned)g_iter);
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                fail("recv failed while %s at size %zu B, iteration %u: %s",
                     g_phase, (size_t)g_size, (unsigned)g_iter,
                     strerror(errno));
        }
    }
}

static void send_msgs(int fd, const void *buf, size_t len, unsigned count)
{
    xfer(fd, buf, len, count, NULL, 1, 0);
}

static void recv_msgs(int fd, unsigned char **bufs, size_t len, unsigned count)
{
    xfer(fd, NULL, 1, 0, bufs, len, count);
}

static void send_ack(int fd, uint32_t v)
{
    send_msgs(fd, &v, sizeof(v), 1);
}

static void recv_ack(int fd, uint32_t expected)
{
    uint32_t v;
    unsigned char *p = (unsigned char *)&v;

    recv_msgs(fd, &p, sizeof(v), 1);
    if (v != expected)
        fail("ack out of order: got %u, expected %u (size %zu B)",
             (unsigned)v, (unsigned)expected, (size_t)g_size);
}

static void tune_socket(int fd)
{
    int one = 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
        fail("setsockopt TCP_NODELAY: %s", strerror(errno));
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK))
        fail("fcntl O_NONBLOCK: %s", strerror(errno));
}

/* ---------------------------------------------------------------------- */
/* The measured loops                                                     */
/* ---------------------------------------------------------------------- */

static void run_size(struct side *s, size_t size, unsigned iters,
                     unsigned warm)
{
    const struct opts *o = s->o;
    size_t wlen = size ? size : 1; /* bytes on the wire */
    unsigned n = iters + warm, it;
    int client = s->is_client, verify = o->verify;
    unsigned sdir = client ? DIR_C2S : DIR_S2C, rdir = client ? DIR_S2C : DIR_C2S;

    for (it = 0; it < n; it++) {
        uint64_t t0 = 0, t1 = 0;
        unsigned k;

        g_iter = it;
        if (verify)
            pat_fill(s->sbuf, size, pat_seed(size, it, sdir));
        if (o->mode == MODE_PINGPONG) {
            if (client) {
                t0 = now_ns();
                send_msgs(s->fd, s->sbuf, wlen, 1);
                recv_msgs(s->fd, s->rbuf, wlen, 1);
                t1 = now_ns();
            } else {
                recv_msgs(s->fd, s->rbuf, wlen, 1);
                if (verify)
                    pat_verify(s->rbuf[0], size, it, rdir, NO_SLOT);
                send_msgs(s->fd, s->sbuf, wlen, 1);
                continue;
            }
            if (verify)
                pat_verify(s->rbuf[0], size, it, rdir, NO_SLOT);
        } else if (client) {
            t0 = now_ns();
            if (o->mode == MODE_BIDIR)
                xfer(s->fd, s->sbuf, wlen, WINDOW, s->rbuf, wlen, WINDOW);
            else
                send_msgs(s->fd, s->sbuf, wlen, WINDOW);
            recv_ack(s->fd, it);
            t1 = now_ns();
            if (verify && o->mode == MODE_BIDIR)
                for (k = 0; k < WINDOW; k++)
                    pat_verify(s->rbuf[k], size, it, rdir, k);
        } else {
            if (o->mode == MODE_BIDIR)
                xfer(s->fd, s->sbuf, wlen, WINDOW, s->rbuf, wlen, WINDOW);
            else
                recv_msgs(s->fd, s->rbuf, wlen, WINDOW);
            if (verify)
                for (k = 0; k < WINDOW; k++)
                    pat_verify(s->rbuf[k], size, it, rdir, k);
            send_ack(s->fd, it);
            continue;
        }
        if (it >= warm)
            s->times[it - warm] = o->mode == MODE_PINGPONG ?
                                      (double)(t1 - t0) / 2000.0 :
                                      (double)(t1 - t0) / 1000.0 / WINDOW;
    }
}

static void print_result(const struct opts *o, size_t size, unsigned iters,
                         double med, double p99)
{
    double bytes = (double)size * (o->mode == MODE_BIDIR ? 2 : 1);
    double bw = med > 0 ? bytes / med : 0;

    if (o->json)
        printf("{\"size\": %zu, \"iters\": %u, \"lat_us_median\": %.3f, "
               "\"lat_us_p99\": %.3f, \"bw_MBps\": %.2f, \"transport\": "
               "\"raw-tcp\", \"mode\": \"%s\"}\n",
               size, iters, med, p99, bw, mode_names[o->mode]);
    else
        printf("%12zu %9u %13.3f %13.3f %12.2f\n", size, iters, med, p99, bw);
    fflush(stdout);
}

static int run_side(struct side *s)
{
    const struct opts *o = s->o;
    size_t maxsize = 0, maxiters = 1;
    unsigned i;

    for (i = 0; i < o->nsizes; i++) {
        unsigned iters, warm;

        step_iters(o, o->sizes[i], &iters, &warm);
        if (o->sizes[i] > maxsize)
            maxsize = o->sizes[i];
        if (iters > maxiters)
            maxiters = iters;
    }
    s->sbuf  = alloc_buf(maxsize);
    s->nrbuf = o->mode == MODE_PINGPONG ? 1 : WINDOW;
    for (i = 0; i < s->nrbuf; i++)
        s->rbuf[i] = alloc_buf(maxsize);
    s->times = malloc(maxiters * sizeof(*s->times));
    if (!s->times)
        fail("out of memory");

    if (s->is_client && !o->json) {
        printf("# raw_pingpong: %s, transport raw-tcp%s\n", mode_names[o->mode],
               o->mode != MODE_PINGPONG ? ", window 16" : "");
        if (o->mode == MODE_BIDIR)
            printf("# latency: window time / %d; bandwidth counts both "
                   "directions\n", WINDOW);
        else if (o->mode == MODE_BW)
            printf("# latency: window time / %d\n", WINDOW);
        else
            printf("# latency: round trip / 2\n");
        printf("%12s %9s %13s %13s %12s\n", "size", "iters", "lat_med_us",
               "lat_p99_us", "bw_MBps");
        fflush(stdout);
    }
    for (i = 0; i < o->nsizes; i++) {
        unsigned iters, warm;
        double med, p99;

        step_iters(o, o->sizes[i], &iters, &warm);
        g_size = o->sizes[i];
        arm_timeout(s->is_client ? "measuring" : "serving");
        run_size(s, o->sizes[i], iters, warm);
        if (s->is_client) {
            stats(s->times, iters, &med, &p99);
            print_result(o, o->sizes[i], iters, med, p99);
        }
    }
    g_size = SIZE_MAX;

    /* The client's last word: the server closes only after it. */
    arm_timeout("closing");
    if (s->is_client)
        send_ack(s->fd, UINT32_MAX);
    else
        recv_ack(s->fd, UINT32_MAX);
    close(s->fd);
    alarm(0);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Options and processes                                                  */
/* ---------------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
"Usage: raw_pingpong [options]   (forks its peer, TCP over the loopback)\n"
"  --sizes LIST        comma list of message sizes, k/M/G = 1024 multiples\n"
"  --minsize N         smallest size (default 0; 0 runs 0, then 1, 2, 4, ...)\n"
"  --maxsize N         largest size, powers of two up to it (default 4M)\n"
"  --iters N           iterations per size (default: max(%d, min(%d, 200MB /\n"
"                      bytes per iteration)))\n"
"  --warmup N          untimed iterations first (default iters/10, at least 2)\n"
"  --bw                streaming: windows of %d sends, then one small ack\n"
"  --bidir             as --bw, both sides send a window at the same time\n"
"  --verify            fill every message with a pattern and check each byte\n"
"  --json              one JSON object per line per size\n"
"  --cpu A,B           pin the server (parent) to core A, the client (child)\n"
"                      to core B\n"
"  --timeout SEC       give up when a size takes longer (default 300, 0 = never)\n"
"  -h, --help          this text\n",
            ITERS_MIN, ITERS_MAX, WINDOW);
}

static void add_size(struct opts *o, size_t s)
{
    if (o->nsizes >= MAX_SIZES) {
        fprintf(stderr, "raw_pingpong: at most %d sizes\n", MAX_SIZES);
        exit(1);
    }
    o->sizes[o->nsizes++] = s;
}

static void parse_options(struct opts *o, int argc, char **argv)
{
    enum {
        OPT_SIZES = 256, OPT_MIN, OPT_MAX, OPT_ITERS, OPT_WARMUP, OPT_BW,
        OPT_BIDIR, OPT_VERIFY, OPT_JSON, OPT_TIMEOUT, OPT_CPU,
    };
    static const struct option longopts[] = {
        {"sizes", required_argument, NULL, OPT_SIZES},
        {"minsize", required_argument, NULL, OPT_MIN},
        {"maxsize", required_argument, NULL, OPT_MAX},
        {"iters", required_argument, NULL, OPT_ITERS},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"bw", no_argument, NULL, OPT_BW},
        {"bidir", no_argument, NULL, OPT_BIDIR},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"json", no_argument, NULL, OPT_JSON},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"cpu", required_argument, NULL, OPT_CPU},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *sizes = NULL;
    int range = 0, c;

    memset(o, 0, sizeof(*o));
    o->maxsize    = DEFAULT_MAX;
    o->iters      = -1;
    o->warmup     = -1;
    o->timeout    = 300;
    o->cpu_server = -1;
    o->cpu_client = -1;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_SIZES:
            sizes = optarg;
            break;
        case OPT_MIN:
        case OPT_MAX:
            if (parse_size(optarg, c == OPT_MIN ? &o->minsize : &o->maxsize)) {
                fprintf(stderr, "raw_pingpong: bad size '%s'\n", optarg);
                exit(1);
            }
            range = 1;
            break;
        case OPT_ITERS:
            o->iters = parse_long(optarg, "--iters", 1, 100000000);
            break;
        case OPT_WARMUP:
            o->warmup = parse_long(optarg, "--warmup", 0, 100000000);
            break;
        case OPT_BW:
            o->mode = MODE_BW;
            break;
        case OPT_BIDIR:
            o->mode = MODE_BIDIR;
            break;
        case OPT_VERIFY:
            o->verify = 1;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case OPT_TIMEOUT:
            o->timeout = (unsigned)parse_long(optarg, "--timeout", 0, 86400 * 7);
            break;
        case OPT_CPU: {
            char *end;
            long a = strtol(optarg, &end, 10), b = -1;

            if (end != optarg && *end == ',') {
                char *p = end + 1;
                b = strtol(p, &end, 10);
                if (end == p)
                    b = -1;
            }
            if (*end || a < 0 || b < 0 || a >= CPU_SETSIZE || b >= CPU_SETSIZE) {
                fprintf(stderr, "raw_pingpong: --cpu needs two core numbers "
                                "A,B, not '%s'\n", optarg);
                exit(1);
            }
            o->cpu_server = (int)a;
            o->cpu_client = (int)b;
            break;
        }
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(1);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "raw_pingpong: unexpected argument '%s' (see -h)\n",
                argv[optind]);
        exit(1);
    }
    if (sizes && range) {
        fprintf(stderr, "raw_pingpong: use either --sizes or "
                        "--minsize/--maxsize\n");
        exit(1);
    }
    if (sizes) {
        char *copy = strdup(sizes), *save = NULL, *tok;

        if (!copy)
            exit(1);
        for (tok = strtok_r(copy, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            size_t s;

            if (parse_size(tok, &s)) {
                fprintf(stderr, "raw_pingpong: bad size '%s' in --sizes\n", tok);
                exit(1);
            }
            add_size(o, s);
        }
        free(copy);
        if (!o->nsizes) {
            fprintf(stderr, "raw_pingpong: --sizes needs at least one size\n");
            exit(1);
        }
    } else {
        size_t s;

        if (o->minsize > o->maxsize) {
            fprintf(stderr, "raw_pingpong: --minsize is larger than --maxsize\n");
            exit(1);
        }
        add_size(o, o->minsize);
        for (s = 1; s <= o->minsize; s *= 2)
            ;
        for (; s <= o->maxsize; s *= 2)
            add_size(o, s);
    }
    g_timeout = o->timeout;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct sockaddr_in addr;
    socklen_t alen = sizeof(addr);
    struct sigaction sa;
    struct side s;
    int lfd, st, ret;
    sigset_t set;

    parse_options(&o, argc, argv);
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    memset(&s, 0, sizeof(s));
    s.o = &o;

    /* Listen before the fork: the child can connect at once. */
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0)
        fail("socket: %s", strerror(errno));
    memset(&addr, 0, sizeof(addr));
    addr.sin_family      = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port        = 0;
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) ||
        listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen))
        fail("listening on the loopback: %s", strerror(errno));

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigchld;
    sa.sa_flags   = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    fflush(stdout);
    fflush(stderr);

    g_child = fork();
    if (g_child < 0)
        fail("fork: %s", strerror(errno));
    if (g_child == 0) {
        g_child = -1;
        g_role  = "client";
        signal(SIGCHLD, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        close(lfd);
        pin_cpu(o.cpu_client);
        arm_timeout("connecting");
        s.fd = socket(AF_INET, SOCK_STREAM, 0);
        if (s.fd < 0 || connect(s.fd, (struct sockaddr *)&addr, sizeof(addr)))
            fail("connecting to 127.0.0.1:%d: %s", ntohs(addr.sin_port),
                 strerror(errno));
        tune_socket(s.fd);
        s.is_client = 1;
        ret = run_side(&s);
        fflush(stdout);
        exit(ret);
    }

    g_role = "server";
    pin_cpu(o.cpu_server);
    arm_timeout("waiting for the client to connect");
    s.fd = accept(lfd, NULL, NULL);
    if (s.fd < 0)
        fail("accept: %s", strerror(errno));
    close(lfd);
    tune_socket(s.fd);
    ret = run_side(&s);

    arm_timeout("waiting for the client process to exit");
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if (g_child_reaped) {
        st = g_child_status;
    } else {
        while (waitpid(g_child, &st, 0) < 0)
            if (errno != EINTR)
                fail("waitpid: %s", strerror(errno));
    }
    g_child = -1;
    alarm(0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "raw_pingpong (server): the client process failed\n");
        return 1;
    }
    return ret;
}
