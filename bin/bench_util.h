/*
 * What pscom_bench and its raw TCP baseline (bench/raw_pingpong.c) share, so
 * that the two measure by the same rules: size list limits, adaptive
 * iteration counts, the verify pattern, statistics, pinning, and the
 * failure reports (timeout, a dead forked peer, fail()).
 *
 * The program sets bench_prog (its name) and g_role ("server", "client")
 * before the first message; g_phase, g_size and g_iter say where it is, for
 * the reports, which run from signal handlers and so only use write(2).
 */
#ifndef PSCOM_BENCH_UTIL_H_
#define PSCOM_BENCH_UTIL_H_

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#define WINDOW       16               /* messages per window (--bw, --bidir) */
#define MAX_SIZES    64               /* entries of a size list */
#define MAX_MSG_SIZE ((size_t)1 << 30)
#define DEFAULT_MAX  ((size_t)4 << 20) /* largest size of the default list */
#define ITER_BYTES   200e6            /* adaptive iterations: about this many bytes */
#define ITERS_MIN    20
#define ITERS_MAX    1000
#define NO_SLOT      UINT_MAX          /* a ping-pong message, not in a window */

enum mode { MODE_PINGPONG = 0, MODE_BW = 1, MODE_BIDIR = 2 };
enum dir { DIR_C2S = 0, DIR_S2C = 1, DIR_ACK = 2 };

extern const char *const mode_names[];

/* Where the program is, for the failure reports. */
extern const char *bench_prog;          /* "pscom_bench" */
extern const char *g_role;              /* "server", "client", ... */
extern const char *volatile g_phase;    /* what it is doing */
extern volatile size_t g_size;          /* SIZE_MAX: not inside a size */
extern volatile unsigned g_iter;
extern volatile pid_t g_child;          /* the forked client, or -1 */
extern volatile sig_atomic_t g_child_reaped;
extern volatile int g_child_status;
extern unsigned g_timeout;              /* seconds; 0: none */
extern const char *bench_timeout_hint;  /* appended to the timeout report */

/* SIGALRM: report the timeout and where, stop the child, exit 1. */
void bench_on_alarm(int sig);
/* SIGCHLD in the server: reap the client; if it failed, report and exit 1. */
void bench_on_sigchld(int sig);
/* Enter a phase and restart the timeout. */
void arm_timeout(const char *phase);
/* Leave at once (stopping the child): cleanup could wait on a broken peer. */
void die(void) __attribute__((noreturn));

#define fail(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "%s (%s): ", bench_prog, g_role);                      \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        die();                                                                 \
    } while (0)

static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The clock of the timed iterations. A round trip over shared memory lasts
 * a fraction of a microsecond, and reading CLOCK_MONOTONIC costs ~18 ns in
 * a virtual machine, a share the message never spent: on x86-64 iterations
 * are timed by the time-stamp counter (a few ns, as ucx_perftest does) and
 * its ticks converted to nanoseconds by the rate measured against
 * CLOCK_MONOTONIC over the whole loop (tick_span). Elsewhere a tick is a
 * nanosecond. */
static inline uint64_t ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return now_ns();
#endif
}

struct tick_span {
    uint64_t tick0, ns0;
};

static inline void tick_span_start(struct tick_span *s)
{
    s->ns0 = now_ns();
    s->tick0 = ticks();
}

/* Nanoseconds per tick since tick_span_start. */
static inline double tick_span_rate(const struct tick_span *s)
{
    uint64_t t = ticks(), ns = now_ns();
    return t > s->tick0 && ns > s->ns0 ? (double)(ns - s->ns0) / (double)(t - s->tick0)
                                       : 1.0;
}

/* Scale n times measured in ticks by factor (ns per tick / divisor). */
static inline void times_scale(double *times, unsigned n, double factor)
{
    for (unsigned i = 0; i < n; i++) times[i] *= factor;
}

/* The verify pattern: a Weyl sequence of 64-bit words from a seed that
 * depends on size, iteration and direction. */
uint64_t pat_seed(uint64_t size, uint64_t iter, unsigned dir);
void pat_fill(unsigned char *p, size_t len, uint64_t seed);
/* 0 when p holds the pattern, else 1 with the first wrong byte. */
int pat_check(const unsigned char *p, size_t len, uint64_t seed, size_t *off,
              unsigned *expected, unsigned *got);
const char *dir_name(unsigned dir);
/* fail() naming the first wrong byte unless p holds the pattern of
 * (size, iter, dir); what and slot (or NO_SLOT) say which message. */
void verify_or_die(const unsigned char *p, size_t len, size_t size,
                   unsigned iter, unsigned dir, unsigned slot,
                   const char *what);

/* The options both programs take (parsed by bench_opt). */
struct bench_opts {
    size_t sizes[MAX_SIZES];
    unsigned nsizes;
    size_t minsize, maxsize;
    long iters;  /* -1: adaptive */
    long warmup; /* -1: iters / 10, at least 2 */
    enum mode mode;
    int verify;
    int json;
    unsigned timeout;
    int cpu_server, cpu_client; /* -1: no pinning */
    const char *size_list;      /* --sizes, until bench_opts_done */
    int size_range;             /* --minsize or --maxsize given */
};

enum {
    BOPT_SIZES = 256, BOPT_MIN, BOPT_MAX, BOPT_ITERS, BOPT_WARMUP, BOPT_BW,
    BOPT_BIDIR, BOPT_VERIFY, BOPT_JSON, BOPT_TIMEOUT, BOPT_CPU,
    BOPT_NEXT /* the first value free for a program's own options */
};

/* getopt_long entries of the common options. */
#define BENCH_LONGOPTS                                                             {"sizes", required_argument, NULL, BOPT_SIZES},                                {"minsize", required_argument, NULL, BOPT_MIN},                                {"maxsize", required_argument, NULL, BOPT_MAX},                                {"iters", required_argument, NULL, BOPT_ITERS},                                {"warmup", required_argument, NULL, BOPT_WARMUP},                              {"bw", no_argument, NULL, BOPT_BW},                                            {"bidir", no_argument, NULL, BOPT_BIDIR},                                      {"verify", no_argument, NULL, BOPT_VERIFY},                                    {"json", no_argument, NULL, BOPT_JSON},                                        {"timeout", required_argument, NULL, BOPT_TIMEOUT},                            {"cpu", required_argument, NULL, BOPT_CPU}

void bench_opts_init(struct bench_opts *o);
/* 1 when c was a common option (stored in o; bad values exit(1)), else 0. */
int bench_opt(struct bench_opts *o, int c, const char *arg);
/* After the last option: build the size list, set g_timeout. */
void bench_opts_done(struct bench_opts *o);
/* Iterations and warm-up rounds for a size. */
void bench_iters(const struct bench_opts *o, size_t size, unsigned *iters,
                 unsigned *warmup);

/* Page-aligned, touched (so that no page fault is timed); fails if out of
 * memory. With huge set, a buffer of HUGE_PAGE bytes or more is aligned to
 * HUGE_PAGE and advised to the kernel as transparent huge pages
 * (MADV_HUGEPAGE), as ucx_perftest allocates its buffers: copies of large
 * messages then take fewer TLB misses. */
#define HUGE_PAGE ((size_t)2 << 20)
void *alloc_buf(size_t len, int huge);
/* "64k", "4MiB", "1GB" (powers of 1024) up to MAX_MSG_SIZE; 0 or -1. */
int parse_size(const char *s, size_t *out);
/* A number of option opt within [min, max], or a message and exit(1). */
long parse_long(const char *s, const char *opt, long min, long max);
/* About ITER_BYTES per size, within [ITERS_MIN, ITERS_MAX]. */
unsigned default_iters(size_t size, enum mode mode);
/* qsort comparator of doubles, ascending. */
int cmp_double(const void *a, const void *b);
/* Sorts t; median and 99th percentile. */
void stats(double *t, unsigned n, double *median, double *p99);
/* Pin the calling process to cpu (nothing for a negative cpu). */
void pin_cpu(int cpu);

#endif /* PSCOM_BENCH_UTIL_H_ */
