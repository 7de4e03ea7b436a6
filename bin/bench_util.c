/*
 * Shared rules and reports of pscom_bench and bench/raw_pingpong
 * (bench_util.h).
 */
#include "bench_util.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

const char *const mode_names[] = {"pingpong", "bw", "bidir"};

const char *bench_prog = "bench";
const char *g_role = "bench";
const char *volatile g_phase = "startup";
volatile size_t g_size = SIZE_MAX;
volatile unsigned g_iter;
volatile pid_t g_child = -1;
volatile sig_atomic_t g_child_reaped;
volatile int g_child_status;
unsigned g_timeout = 300;
const char *bench_timeout_hint = "";

/* ---------------------------------------------------------------------- */
/* Reports from signal handlers: write(2) only                            */
/* ---------------------------------------------------------------------- */

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

void bench_on_alarm(int sig)
{
    struct sbuf b = {.len = 0};

    (void)sig;
    sb_str(&b, bench_prog);
    sb_str(&b, " (");
    sb_str(&b, g_role);
    sb_str(&b, "): timeout after ");
    sb_uint(&b, g_timeout);
    sb_str(&b, " s while ");
    sb_where(&b);
    sb_str(&b, bench_timeout_hint);
    sb_flush(&b);
    if (g_child > 0)
        kill(g_child, SIGTERM);
    _exit(1);
}

void bench_on_sigchld(int sig)
{
    int saved_errno = errno;
    int st;
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
    sb_str(&b, bench_prog);
    sb_str(&b, " (server): the client process failed (");
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

void arm_timeout(const char *phase)
{
    g_phase = phase;
    if (g_timeout)
        alarm(g_timeout);
}

void die(void)
{
    pid_t child = g_child;

    fflush(stdout);
    fflush(stderr);
    g_child = -1; /* stopped on purpose: not reported as failed (SIGCHLD) */
    if (child > 0 && !g_child_reaped) /* (a reaped pid may be reused) */
        kill(child, SIGTERM);
    _exit(1);
}

/* ---------------------------------------------------------------------- */
/* The verify pattern                                                     */
/* ---------------------------------------------------------------------- */

#define PAT_STEP 0x9e3779b97f4a7c15ull

uint64_t pat_seed(uint64_t size, uint64_t iter, unsigned dir)
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

void pat_fill(unsigned char *p, size_t len, uint64_t seed)
{
    size_t i, n = len / 8;
    uint64_t w = seed;

    for (i = 0; i < n; i++, w += PAT_STEP)
        memcpy(p + 8 * i, &w, 8);
    if (len % 8)
        memcpy(p + 8 * n, &w, len % 8);
}

int pat_check(const unsigned char *p, size_t len, uint64_t seed, size_t *off,
              unsigned *expected, unsigned *got)
{
    size_t i, n = (len + 7) / 8;
    uint64_t w = seed;

    for (i = 0; i < n; i++, w += PAT_STEP) {
        size_t k, chunk = len - 8 * i < 8 ? len - 8 * i : 8;
        unsigned char e[8];

        memcpy(e, &w, 8);
        if (memcmp(p + 8 * i, e, chunk) == 0)
            continue;
        for (k = 0; k < chunk; k++) {
            if (p[8 * i + k] != e[k]) {
                *off = 8 * i + k;
                *expected = e[k];
                *got = p[8 * i + k];
                return 1;
            }
        }
    }
    return 0;
}

const char *dir_name(unsigned dir)
{
    return dir == DIR_C2S ? "client->server" :
           dir == DIR_S2C ? "server->client" : "ack";
}

void verify_or_die(const unsigned char *p, size_t len, size_t size,
                   unsigned iter, unsigned dir, unsigned slot,
                   const char *what)
{
    size_t off;
    unsigned e, g;
    char where[48] = "";

    if (!pat_check(p, len, pat_seed(size, iter, dir), &off, &e, &g))
        return;
    if (slot != NO_SLOT)
        snprintf(where, sizeof(where), "message %u of the window, ", slot);
    fail("verify failed: size %zu, iteration %u, offset %zu%s (%s%s): "
         "expected 0x%02x, got 0x%02x",
         size, iter, off, what, where, dir_name(dir), e, g);
}

/* ---------------------------------------------------------------------- */
/* Options, iterations, statistics, pinning                               */
/* ---------------------------------------------------------------------- */

void *alloc_buf(size_t len, int huge)
{
    void *p = NULL;
    size_t n = len < 4096 ? 4096 : len;
    size_t align = huge && n >= HUGE_PAGE ? HUGE_PAGE : 4096;

    if (posix_memalign(&p, align, n))
        fail("out of memory allocating a %zu byte buffer", n);
    /* Only a hint: a kernel without transparent huge pages keeps 4 KiB. */
    if (align == HUGE_PAGE)
        (void)madvise(p, n, MADV_HUGEPAGE);
    memset(p, 0xa5, n); /* touch every page before timing */
    return p;
}

int parse_size(const char *s, size_t *out)
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

long parse_long(const char *s, const char *opt, long min, long max)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "%s: %s needs a number from %ld to %ld, not '%s'\n",
                bench_prog, opt, min, max, s);
        exit(1);
    }
    return v;
}

unsigned default_iters(size_t size, enum mode mode)
{
    double bytes = (double)size * (mode == MODE_PINGPONG ? 1 : WINDOW);
    double it = bytes > 0 ? ITER_BYTES / bytes : ITERS_MAX;

    if (it > ITERS_MAX)
        it = ITERS_MAX;
    if (it < ITERS_MIN)
        it = ITERS_MIN;
    return (unsigned)it;
}

int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

void stats(double *t, unsigned n, double *median, double *p99)
{
    size_t idx;

    qsort(t, n, sizeof(*t), cmp_double);
    *median = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
    idx = (size_t)ceil(0.99 * n);
    *p99 = t[idx ? idx - 1 : 0];
}

/* A set as large as the CPU number needs: hosts may have more CPUs than
 * the 1024 of a cpu_set_t. */
void pin_cpu(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t *set = CPU_ALLOC(cpu + 1);
    size_t size = CPU_ALLOC_SIZE(cpu + 1);
    if (!set)
        fail("cannot pin to cpu %d: out of memory", cpu);
    CPU_ZERO_S(size, set);
    CPU_SET_S(cpu, size, set);
    int rc = sched_setaffinity(0, size, set);
    int e = errno;
    CPU_FREE(set);
    if (rc)
        fail("cannot pin to cpu %d: %s", cpu, strerror(e));
}

void bench_opts_init(struct bench_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->maxsize    = DEFAULT_MAX;
    o->iters      = -1;
    o->warmup     = -1;
    o->timeout    = 300;
    o->cpu_server = -1;
    o->cpu_client = -1;
}

/* The largest CPU number --cpu takes (Linux numbers CPUs below 8192): it
 * bounds the set pin_cpu allocates, 512 KiB. */
#define CPU_LIMIT (1 << 22)

static void parse_cpus(struct bench_opts *o, const char *arg)
{
    char *end;
    long a = strtol(arg, &end, 10), b = -1;

    if (end != arg && *end == ',') {
        const char *s = end + 1;

        b = strtol(s, &end, 10);
        if (end == s)
            b = -1;
    }
    if (*end || a < 0 || b < 0 || a >= CPU_LIMIT || b >= CPU_LIMIT) {
        fprintf(stderr, "%s: --cpu needs two core numbers A,B (below %d), not '%s'\n",
                bench_prog, CPU_LIMIT, arg);
        exit(1);
    }
    o->cpu_server = (int)a;
    o->cpu_client = (int)b;
}

int bench_opt(struct bench_opts *o, int c, const char *arg)
{
    switch (c) {
    case BOPT_SIZES:
        o->size_list = arg;
        return 1;
    case BOPT_MIN:
    case BOPT_MAX:
        if (parse_size(arg, c == BOPT_MIN ? &o->minsize : &o->maxsize)) {
            fprintf(stderr, "%s: bad size '%s' (a number up to 1G, optional "
                            "k/M/G suffix)\n", bench_prog, arg);
            exit(1);
        }
        o->size_range = 1;
        return 1;
    case BOPT_ITERS:
        o->iters = parse_long(arg, "--iters", 1, 100000000);
        return 1;
    case BOPT_WARMUP:
        o->warmup = parse_long(arg, "--warmup", 0, 100000000);
        return 1;
    case BOPT_BW:
        o->mode = MODE_BW;
        return 1;
    case BOPT_BIDIR:
        o->mode = MODE_BIDIR;
        return 1;
    case BOPT_VERIFY:
        o->verify = 1;
        return 1;
    case BOPT_JSON:
        o->json = 1;
        return 1;
    case BOPT_TIMEOUT:
        o->timeout = (unsigned)parse_long(arg, "--timeout", 0, 86400 * 7);
        return 1;
    case BOPT_CPU:
        parse_cpus(o, arg);
        return 1;
    default:
        return 0;
    }
}

static void add_size(struct bench_opts *o, size_t s)
{
    if (o->nsizes >= MAX_SIZES) {
        fprintf(stderr, "%s: at most %d sizes\n", bench_prog, MAX_SIZES);
        exit(1);
    }
    o->sizes[o->nsizes++] = s;
}

static void list_sizes(struct bench_opts *o)
{
    char *copy = strdup(o->size_list), *next = copy, *tok;

    if (!copy)
        exit(1);
    /* Not strtok: it would pass over an empty item ("4k,,8"). */
    while ((tok = strsep(&next, ","))) {
        size_t s;

        if (!*tok || parse_size(tok, &s)) {
            fprintf(stderr, "%s: bad size '%s' in --sizes (a number up to 1G, "
                            "optional k/M/G suffix)\n", bench_prog, tok);
            exit(1);
        }
        add_size(o, s);
    }
    free(copy);
    if (!o->nsizes) {
        fprintf(stderr, "%s: --sizes needs at least one size\n", bench_prog);
        exit(1);
    }
}

/* minsize, then the powers of two above it up to maxsize. */
static void range_sizes(struct bench_opts *o)
{
    size_t s;

    if (o->minsize > o->maxsize) {
        fprintf(stderr, "%s: --minsize is larger than --maxsize\n", bench_prog);
        exit(1);
    }
    add_size(o, o->minsize);
    for (s = 1; s <= o->minsize; s *= 2)
        ;
    for (; s <= o->maxsize; s *= 2)
        add_size(o, s);
}

void bench_opts_done(struct bench_opts *o)
{
    if (o->size_list && o->size_range) {
        fprintf(stderr, "%s: use either --sizes or --minsize/--maxsize\n",
                bench_prog);
        exit(1);
    }
    o->nsizes = 0;
    if (o->size_list)
        list_sizes(o);
    else
        range_sizes(o);
    o->size_list = NULL;
    g_timeout = o->timeout;
}

void bench_iters(const struct bench_opts *o, size_t size, unsigned *iters,
                 unsigned *warmup)
{
    *iters = o->iters > 0 ? (unsigned)o->iters : default_iters(size, o->mode);
    if (o->warmup >= 0)
        *warmup = (unsigned)o->warmup;
    else
        *warmup = *iters / 10 < 2 ? 2 : *iters / 10;
}
