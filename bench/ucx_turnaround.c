/*
 * ucx_turnaround — how long a process takes from an arriving UCX active
 * message to its next send, whatever program it is: pscom_bench over the
 * ucx plugin, or ucx_perftest -t ucp_am_lat. Loaded with LD_PRELOAD, it
 * wraps every handler given to ucp_worker_set_am_recv_handler() and
 * ucp_am_send_nbx(), and takes the time at the handler's entry and at the
 * next send's entry. In a ping-pong that span is the responder's own share
 * of the round trip: UCX handing over the message, the program's matching,
 * copying and completion, and its way back to the send. The transfer
 * between the cores is outside it, so it depends much less than a latency
 * on where the host runs the two vCPUs.
 *
 *   LD_PRELOAD=<builddir>/bench/libucx_turnaround.so UCX_TLS=posix \
 *       PSP_SHM=0 pscom_bench --transport ucx --sizes 8 --cpu 0,1
 *
 * At exit each process prints to stderr: "ucx_turnaround: pid P: N spans,
 * median T ticks (S ns), 10th percentile T". On x86-64 the clock is the
 * time-stamp counter read behind an lfence (so the reading waits for what
 * came before it), converted to ns against CLOCK_MONOTONIC; elsewhere
 * CLOCK_MONOTONIC itself. A benchmark aid, not installed.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t now_ticks(void)
{
    _mm_lfence();
    return __rdtsc();
}
#else
static inline uint64_t now_ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

#define MAX_SPANS (1u << 22)

static uint64_t arrived; /* 0: no message since the last send */
static uint64_t *spans;
static size_t nspans;

/* A handler as the program registered it; passed to on_am as its argument
 * (one per registration, kept for the process's life). */
struct handler {
    ucp_am_recv_callback_t cb;
    void *arg;
};

/* A symbol of libucp: the next definition after ours, or libucp's own
 * when it was loaded with dlopen (as pscom's plugin does), where RTLD_NEXT
 * does not look. */
static void *ucp_symbol(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        void *lib = dlopen("libucp.so.0", RTLD_LAZY | RTLD_NOLOAD);
        if (lib) f = dlsym(lib, name);
    }
    if (!f) {
        fprintf(stderr, "ucx_turnaround: %s not found\n", name);
        abort();
    }
    return f;
}

static ucs_status_t on_am(void *arg, const void *header, size_t header_len,
                          void *data, size_t len,
                          const ucp_am_recv_param_t *param)
{
    const struct handler *h = arg;
    arrived = now_ticks();
    return h->cb(h->arg, header, header_len, data, len, param);
}

ucs_status_t ucp_worker_set_am_recv_handler(ucp_worker_h worker,
                                            const ucp_am_handler_param_t *param)
{
    static ucs_status_t (*next)(ucp_worker_h, const ucp_am_handler_param_t *);
    if (!next) next = ucp_symbol("ucp_worker_set_am_recv_handler");
    ucp_am_handler_param_t p = *param;
    struct handler *h;
    if ((p.field_mask & UCP_AM_HANDLER_PARAM_FIELD_CB) && p.cb &&
        (h = malloc(sizeof(*h)))) {
        h->cb = p.cb;
        h->arg = (p.field_mask & UCP_AM_HANDLER_PARAM_FIELD_ARG) ? p.arg : NULL;
        p.cb = on_am;
        p.arg = h;
        p.field_mask |= UCP_AM_HANDLER_PARAM_FIELD_ARG;
    }
    return next(worker, &p);
}

ucs_status_ptr_t ucp_am_send_nbx(ucp_ep_h ep, unsigned id, const void *header,
                                 size_t header_len, const void *buffer,
                                 size_t count, const ucp_request_param_t *param)
{
    static ucs_status_ptr_t (*next)(ucp_ep_h, unsigned, const void *, size_t,
                                    const void *, size_t,
                                    const ucp_request_param_t *);
    if (!next) next = ucp_symbol("ucp_am_send_nbx");
    if (arrived) {
        uint64_t t = now_ticks();
        if (!spans) spans = malloc(MAX_SPANS * sizeof(*spans));
        if (spans && nspans < MAX_SPANS) spans[nspans++] = t - arrived;
        arrived = 0;
    }
    return next(ep, id, header, header_len, buffer, count, param);
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Ticks per ns, against CLOCK_MONOTONIC over 20 ms. */
static double ticks_per_ns(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t t0 = now_ticks();
    double ns;
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
        ns = (double)(b.tv_sec - a.tv_sec) * 1e9 +
             (double)(b.tv_nsec - a.tv_nsec);
    } while (ns < 2e7);
    return (double)(now_ticks() - t0) / ns;
}

__attribute__((destructor)) static void report(void)
{
    if (!nspans) return;
    qsort(spans, nspans, sizeof(*spans), by_value);
    uint64_t med = spans[nspans / 2];
    fprintf(stderr,
            "ucx_turnaround: pid %d: %zu spans, median %llu ticks (%.1f ns), "
            "10th percentile %llu\n",
            (int)getpid(), nspans, (unsigned long long)med,
            (double)med / ticks_per_ns(),
            (unsigned long long)spans[nspans / 10]);
    free(spans);
}
