/*
 * Atomicity at the target under contention: three origins hammer one
 * target at the same time, each with many requests in flight.
 *  - fetch-and-op (+1 on one uint64): every fetched value 0..3N-1 is seen
 *    exactly once over all origins, and the counter ends at 3N;
 *  - compare-and-swap increments (read with fetch-and-op NO_OP, then swap
 *    old for old+1, again until it swaps): the counter ends at 3K, and no
 *    two successful swaps saw the same old value;
 *  - get-accumulate (+1 on 64 uint64 at once): every answer has all 64
 *    equal (no other operation came between its elements), and they end
 *    at 3M;
 *  - accumulate (+1 on 128 int32): all end at 3M2;
 *  - mixed: puts and gets of 16 KiB (taken by a plugin's fast path where
 *    there is one: shm with PSP_SHM_RMA at most 16k) into each origin's own
 *    slices, interleaved with fetch-and-op +1 on a shared counter and
 *    accumulate +1 on a shared array, all in flight together: the atomics
 *    stay exact (every fetched value once, counter and array at 3 MIX),
 *    every get reads back its origin's last put, and every put and get
 *    called back once.
 * The arithmetic is the test's own target callback, as in MPI. Over tcp
 * and shm the four parties are processes; with loop they are sockets of
 * one process whose origins take turns posting.
 */
#include "rma_util.h"

#include <stdlib.h>
#include <string.h>

#define N_ORIGINS 3
#define N_FOP     2000
#define K_CAS     200
#define M_GACC    400
#define M_ACC     1000
#define WINDOW    32
#define M_MIX     300
#define MIX_LEN   16384
#define MIX_W     4 /* operations of each kind in flight per origin */
#define N_PHASES  5
#define GACC_LEN  64
#define ACC_LEN   128

#define OFF_COUNTER 0
#define OFF_CAS     64
#define OFF_GACC    1024
#define OFF_ACC     4096
#define OFF_MIXCTR  8192
#define OFF_MIXACC  8256
#define OFF_MIX     16384 /* N_ORIGINS * MIX_W slices of MIX_LEN */
#define REGION      (OFF_MIX + N_ORIGINS * MIX_W * MIX_LEN)

enum { CMD_DONE = 1 };

struct target {
    char *buf;
    pscom_memh_t memh;
    rt_counts_t counts;
};

struct origin {
    int rank;
    pscom_connection_t *con;
    pscom_rkey_t key;
    char *base;
    uint64_t fetched[N_FOP];
    uint64_t cas_old[K_CAS];
    unsigned cas_done;
    uint64_t mix_fetched[M_MIX];
};

static void done_flag(pscom_request_t *req)
{
    (void)req;
}

static rt_op_args_t args(struct origin *o, pscom_rma_op_t kind, size_t off,
                         void *origin, size_t len)
{
    return (rt_op_args_t){.kind = kind, .con = o->con, .rkey = o->key,
                          .target = o->base + off, .origin = origin,
                          .len = len, .op = RT_SUM, .dtype = RT_U64,
                          .origin_rank = (unsigned)o->rank};
}

static void wait_ok(pscom_request_t *r, const char *what)
{
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "%s", what);
    pscom_request_free(r);
}

/* ---------------------------------------------------------------------- */
/* Phases; o[0..n-1] are the origins of this process, taking turns        */
/* ---------------------------------------------------------------------- */

static void phase_fetch_op(struct origin *o, int n)
{
    static const uint64_t one = 1;
    pscom_request_t *win[N_ORIGINS][WINDOW];
    itest_step("fetch-and-op");
    for (unsigned i = 0; i < N_FOP; i += WINDOW) {
        for (int k = 0; k < n; k++)
            for (unsigned j = 0; j < WINDOW && i + j < N_FOP; j++) {
                rt_op_args_t a = args(&o[k], PSCOM_RMA_FETCH_AND_OP,
                                      OFF_COUNTER, (void *)&one, 8);
                a.result = &o[k].fetched[i + j];
                win[k][j] = rt_post(&a, done_flag);
            }
        for (int k = 0; k < n; k++)
            for (unsigned j = 0; j < WINDOW && i + j < N_FOP; j++)
                wait_ok(win[k][j], "fetch-and-op");
    }
}

static void phase_compare_swap(struct origin *o, int n)
{
    itest_step("compare-and-swap increments");
    uint64_t old[N_ORIGINS], next[N_ORIGINS], res[N_ORIGINS], zero = 0;
    pscom_request_t *r[N_ORIGINS];
    unsigned long misses = 0;
    for (;;) {
        int busy = 0;
        /* Everybody reads, then everybody tries: stale reads collide. */
        for (int k = 0; k < n; k++) {
            if (o[k].cas_done == K_CAS) continue;
            rt_op_args_t a = args(&o[k], PSCOM_RMA_FETCH_AND_OP, OFF_CAS,
                                  &zero, 8);
            a.op = RT_NO_OP;
            a.result = &old[k];
            r[k] = rt_post(&a, done_flag);
            busy++;
        }
        if (!busy) break;
        for (int k = 0; k < n; k++)
            if (o[k].cas_done < K_CAS) wait_ok(r[k], "read");
        for (int k = 0; k < n; k++) {
            if (o[k].cas_done == K_CAS) continue;
            next[k] = old[k] + 1;
            rt_op_args_t a = args(&o[k], PSCOM_RMA_COMPARE_AND_SWAP, OFF_CAS,
                                  &next[k], 8);
            a.compare = &old[k];
            a.result = &res[k];
            r[k] = rt_post(&a, done_flag);
        }
        for (int k = 0; k < n; k++) {
            if (o[k].cas_done == K_CAS) continue;
            wait_ok(r[k], "compare-and-swap");
            if (res[k] == old[k])
                o[k].cas_old[o[k].cas_done++] = old[k];
            else
                misses++;
        }
    }
    itest_note("compare-and-swap: %lu tries lost to another origin",
               misses);
}

static void phase_get_accumulate(struct origin *o, int n)
{
    static uint64_t ones[GACC_LEN];
    enum { W = 8 };
    static uint64_t snap[N_ORIGINS][W][GACC_LEN];
    pscom_request_t *win[N_ORIGINS][W];
    itest_step("get-accumulate of %d elements", GACC_LEN);
    for (int i = 0; i < GACC_LEN; i++) ones[i] = 1;
    for (unsigned i = 0; i < M_GACC; i += W) {
        for (int k = 0; k < n; k++)
            for (unsigned j = 0; j < W && i + j < M_GACC; j++) {
                rt_op_args_t a = args(&o[k], PSCOM_RMA_GET_ACCUMULATE,
                                      OFF_GACC, ones, sizeof(ones));
                a.result = snap[k][j];
                win[k][j] = rt_post(&a, done_flag);
            }
        for (int k = 0; k < n; k++)
            for (unsigned j = 0; j < W && i + j < M_GACC; j++) {
                wait_ok(win[k][j], "get-accumulate");
                for (int e = 1; e < GACC_LEN; e++)
                    ITEST_ASSERT(snap[k][j][e] == snap[k][j][0],
                                 "get-accumulate answer: element %d is %llu, "
                                 "element 0 is %llu (torn)", e,
                                 (unsigned long long)snap[k][j][e],
                                 (unsigned long long)snap[k][j][0]);
            }
    }
}

static void phase_accumulate(struct origin *o, int n)
{
    static int32_t ones[ACC_LEN];
    itest_step("accumulate of %d elements", ACC_LEN);
    for (int i = 0; i < ACC_LEN; i++) ones[i] = 1;
    for (unsigned i = 0; i < M_ACC; i += WINDOW) {
        for (int k = 0; k < n; k++)
            for (unsigned j = 0; j < WINDOW && i + j < M_ACC; j++) {
                rt_op_args_t a = args(&o[k], PSCOM_RMA_ACCUMULATE, OFF_ACC,
                                      ones, sizeof(ones));
                a.dtype = RT_I32;
                rt_post(&a, NULL); /* frees itself */
            }
        /* Keep the flood bounded: a get behind them waits for all of them
         * (unless a plugin carries it; then it waits for less). */
        for (int k = 0; k < n; k++) {
            char c;
            rt_op_args_t a = args(&o[k], PSCOM_RMA_GET, OFF_ACC, &c, 1);
            ITEST_ASSERT(pscom_req_state_successful(rt_do(&a)), "get");
        }
    }
}

static void phase_mixed(struct origin *o, int n)
{
    enum { W = MIX_W };
    static const uint64_t one = 1;
    static int32_t ones[ACC_LEN];
    static char out[N_ORIGINS][W][MIX_LEN], back[N_ORIGINS][W][MIX_LEN];
    pscom_request_t *r[N_ORIGINS][W][4];
    itest_step("puts and gets of %d bytes among fetch-and-op and accumulate",
               MIX_LEN);
    for (int i = 0; i < ACC_LEN; i++) ones[i] = 1;
    for (unsigned i = 0; i < M_MIX; i += W) {
        for (int k = 0; k < n; k++)
            for (unsigned j = 0; j < W && i + j < M_MIX; j++) {
                size_t slice = OFF_MIX +
                               ((size_t)(o[k].rank - 1) * W + j) * MIX_LEN;
                uint32_t seed = (uint32_t)(o[k].rank * 100000 + i + j);
                itest_fill(out[k][j], MIX_LEN, seed);
                rt_op_args_t p = args(&o[k], PSCOM_RMA_PUT, slice, out[k][j],
                                      MIX_LEN);
                r[k][j][0] = rt_post(&p, done_flag);
                rt_op_args_t f = args(&o[k], PSCOM_RMA_FETCH_AND_OP,
                                      OFF_MIXCTR, (void *)&one, 8);
                f.result = &o[k].mix_fetched[i + j];
                r[k][j][1] = rt_post(&f, done_flag);
                rt_op_args_t a = args(&o[k], PSCOM_RMA_ACCUMULATE, OFF_MIXACC,
                                      ones, sizeof(ones));
                a.dtype = RT_I32;
                r[k][j][2] = rt_post(&a, done_flag);
            }
        /* A get posted once the put before it is complete (a plugin's put:
         * its bytes are in place; the core's: in order before the get)
         * reads it back, while the atomics are still in flight. */
        for (int k = 0; k < n; k++)
            for (unsigned j = 0; j < W && i + j < M_MIX; j++) {
                size_t slice = OFF_MIX +
                               ((size_t)(o[k].rank - 1) * W + j) * MIX_LEN;
                wait_ok(r[k][j][0], "put");
                rt_op_args_t g = args(&o[k], PSCOM_RMA_GET, slice, back[k][j],
                                      MIX_LEN);
                r[k][j][3] = rt_post(&g, done_flag);
            }
        for (int k = 0; k < n; k++)
            for (unsigned j = 0; j < W && i + j < M_MIX; j++) {
                static const char *const what[] = {"", "fetch-and-op",
                                                   "accumulate", "get"};
                for (int q = 1; q < 4; q++) wait_ok(r[k][j][q], what[q]);
                ITEST_ASSERT_PATTERN(back[k][j], MIX_LEN,
                                     (uint32_t)(o[k].rank * 100000 + i + j),
                                     "get after put %u of origin %d", i + j,
                                     o[k].rank);
            }
    }
}

/* Process mode: start every phase together with the other origins. */
static itest_link_t *sync_link;

static void phase_sync(void)
{
    if (!sync_link) return;
    itest_link_send_u64(sync_link, 1);
    itest_link_recv_u64(sync_link);
}

static void origins_run(struct origin *o, int n)
{
    for (int k = 0; k < n; k++) {
        void *b;
        o[k].key = rt_key_recv(o[k].con, &b);
        o[k].base = b;
    }
    phase_sync();
    phase_fetch_op(o, n);
    phase_sync();
    phase_compare_swap(o, n);
    phase_sync();
    phase_get_accumulate(o, n);
    phase_sync();
    phase_accumulate(o, n);
    phase_sync();
    phase_mixed(o, n);
    for (int k = 0; k < n; k++) {
        /* What the target needs to check uniqueness. */
        pscom_send(o[k].con, NULL, 0, o[k].fetched, sizeof(o[k].fetched));
        pscom_send(o[k].con, NULL, 0, o[k].cas_old, sizeof(o[k].cas_old));
        pscom_send(o[k].con, NULL, 0, o[k].mix_fetched,
                   sizeof(o[k].mix_fetched));
        /* Out before this process stops driving progress (it then waits on
         * the test's link): a send a transport could not take at once
         * (UCX's shared-memory FIFO full while the target was slow) would
         * never leave. */
        pscom_flush(o[k].con);
        pscom_rkey_destroy(o[k].key);
    }
}

/* ---------------------------------------------------------------------- */
/* Target                                                                 */
/* ---------------------------------------------------------------------- */

static void target_setup(struct target *t, pscom_socket_t *sock,
                         pscom_connection_t **cons)
{
    t->buf = aligned_alloc(64, REGION);
    memset(t->buf, 0, REGION);
    ITEST_ASSERT_EQ(pscom_mem_register(sock, t->buf, REGION, &t->memh),
                    PSCOM_SUCCESS, "register");
    rt_register_callbacks(t->memh, &t->counts);
    for (int k = 0; k < N_ORIGINS; k++) rt_key_send(cons[k], t->memh, t->buf);
}

static void seen_once(unsigned char *seen, uint64_t v, uint64_t limit,
                      const char *what)
{
    ITEST_ASSERT(v < limit, "%s: value %llu out of range", what,
                 (unsigned long long)v);
    ITEST_ASSERT(!seen[v], "%s: value %llu seen twice", what,
                 (unsigned long long)v);
    seen[v] = 1;
}

static void target_check(struct target *t, pscom_connection_t **cons)
{
    static uint64_t vals[N_FOP];
    static unsigned char seen_fop[N_ORIGINS * N_FOP];
    static unsigned char seen_cas[N_ORIGINS * K_CAS];
    static unsigned char seen_mix[N_ORIGINS * M_MIX];
    itest_step("checking");
    for (int k = 0; k < N_ORIGINS; k++) {
        ITEST_ASSERT_EQ(pscom_recv_from(cons[k], NULL, 0, vals, sizeof(vals)),
                        PSCOM_SUCCESS, "fetched values of origin %d", k);
        for (int i = 0; i < N_FOP; i++)
            seen_once(seen_fop, vals[i], N_ORIGINS * N_FOP, "fetch-and-op");
        ITEST_ASSERT_EQ(pscom_recv_from(cons[k], NULL, 0, vals,
                                        K_CAS * sizeof(uint64_t)),
                        PSCOM_SUCCESS, "swapped values of origin %d", k);
        for (int i = 0; i < K_CAS; i++)
            seen_once(seen_cas, vals[i], N_ORIGINS * K_CAS,
                      "compare-and-swap");
        ITEST_ASSERT_EQ(pscom_recv_from(cons[k], NULL, 0, vals,
                                        M_MIX * sizeof(uint64_t)),
                        PSCOM_SUCCESS, "mixed-phase values of origin %d", k);
        for (int i = 0; i < M_MIX; i++)
            seen_once(seen_mix, vals[i], N_ORIGINS * M_MIX,
                      "fetch-and-op among puts and gets");
    }
    uint64_t counter, cas;
    memcpy(&counter, t->buf + OFF_COUNTER, 8);
    memcpy(&cas, t->buf + OFF_CAS, 8);
    ITEST_ASSERT_EQ(counter, N_ORIGINS * N_FOP, "fetch-and-op counter");
    ITEST_ASSERT_EQ(cas, N_ORIGINS * K_CAS, "compare-and-swap counter");
    for (int e = 0; e < GACC_LEN; e++) {
        uint64_t v;
        memcpy(&v, t->buf + OFF_GACC + 8 * e, 8);
        ITEST_ASSERT_EQ(v, N_ORIGINS * M_GACC, "get-accumulate element %d", e);
    }
    for (int e = 0; e < ACC_LEN; e++) {
        int32_t v;
        memcpy(&v, t->buf + OFF_ACC + 4 * e, 4);
        ITEST_ASSERT_EQ(v, N_ORIGINS * M_ACC, "accumulate element %d", e);
        memcpy(&v, t->buf + OFF_MIXACC + 4 * e, 4);
        ITEST_ASSERT_EQ(v, N_ORIGINS * M_MIX,
                        "accumulate element %d among puts and gets", e);
    }
    uint64_t mixctr;
    memcpy(&mixctr, t->buf + OFF_MIXCTR, 8);
    ITEST_ASSERT_EQ(mixctr, N_ORIGINS * M_MIX,
                    "fetch-and-op counter among puts and gets");
    ITEST_ASSERT_EQ(t->counts.bad, 0, "malformed target requests");
    ITEST_ASSERT_EQ(t->counts.n[PSCOM_RMA_FETCH_AND_OP],
                    N_ORIGINS * (N_FOP + M_MIX) +
                        t->counts.n[PSCOM_RMA_COMPARE_AND_SWAP],
                    "fetch-and-op callbacks (counting the reads of the "
                    "compare-and-swap phase, one per try)");
    ITEST_ASSERT_EQ(t->counts.n[PSCOM_RMA_GET_ACCUMULATE], N_ORIGINS * M_GACC,
                    "get-accumulate callbacks");
    ITEST_ASSERT_EQ(t->counts.n[PSCOM_RMA_ACCUMULATE],
                    N_ORIGINS * (M_ACC + M_MIX), "accumulate callbacks");
    ITEST_ASSERT_EQ(t->counts.n[PSCOM_RMA_PUT], N_ORIGINS * M_MIX,
                    "put callbacks");
    ITEST_ASSERT_EQ(t->counts.n[PSCOM_RMA_GET],
                    N_ORIGINS * (M_MIX + (M_ACC + WINDOW - 1) / WINDOW),
                    "get callbacks");
    pscom_mem_deregister(t->memh);
    free(t->buf);
    t->buf = NULL;
}

/* ---------------------------------------------------------------------- */

static int target_main(itest_link_t *link, void *arg)
{
    rt_mesh_t m;
    struct target t;
    rt_mesh_join(&m, link, N_ORIGINS + 1, 0);
    target_setup(&t, m.sock, &m.con[1]);
    target_check(&t, &m.con[1]);
    itest_link_send_u64(link, 1);
    pscom_close_socket(NULL);
    return 0;
}

static int origin_main(itest_link_t *link, void *arg)
{
    int rank = (int)(intptr_t)arg;
    rt_mesh_t m;
    static struct origin o;
    rt_mesh_join(&m, link, N_ORIGINS + 1, rank);
    o.rank = rank;
    o.con = m.con[0];
    sync_link = link;
    origins_run(&o, 1);
    /* Stay until the target has everything. */
    itest_link_send_u64(link, 1);
    itest_link_recv_u64(link);
    pscom_close_socket(NULL);
    return 0;
}

static int loop_main(itest_link_t *link, void *arg)
{
    static rt_mesh_t m[N_ORIGINS + 1];
    static struct origin o[N_ORIGINS];
    struct target t;
    rt_mesh_local(m, N_ORIGINS + 1);
    target_setup(&t, m[0].sock, &m[0].con[1]);
    for (int k = 0; k < N_ORIGINS; k++) {
        o[k].rank = k + 1;
        o[k].con = m[k + 1].con[0];
    }
    origins_run(o, N_ORIGINS);
    target_check(&t, &m[0].con[1]);
    pscom_close_socket(NULL);
    return 0;
}

int main(void)
{
    itest_set_role("main");
    if (rt_loop_mode()) {
        itest_child_t c;
        itest_spawn(&c, "loop", loop_main, NULL);
        return itest_child_check(&c);
    }
    itest_child_t kids[N_ORIGINS + 1];
    itest_child_t *list[N_ORIGINS + 1];
    itest_spawn(&kids[0], "target", target_main, NULL);
    for (int k = 1; k <= N_ORIGINS; k++) {
        char role[16];
        snprintf(role, sizeof(role), "origin %d", k);
        itest_spawn(&kids[k], role, origin_main, (void *)(intptr_t)k);
    }
    for (int k = 0; k <= N_ORIGINS; k++) list[k] = &kids[k];
    rt_mesh_wire(kids, N_ORIGINS + 1);
    for (int phase = 0; phase < N_PHASES; phase++) {
        for (int k = 1; k <= N_ORIGINS; k++) itest_link_recv_u64(&kids[k].link);
        for (int k = 1; k <= N_ORIGINS; k++)
            itest_link_send_u64(&kids[k].link, 1);
    }
    /* Origins report when they are through; then they may go. */
    for (int k = 1; k <= N_ORIGINS; k++) itest_link_recv_u64(&kids[k].link);
    itest_link_recv_u64(&kids[0].link);
    for (int k = 1; k <= N_ORIGINS; k++) itest_link_send_u64(&kids[k].link, 1);
    return itest_children_check(list, N_ORIGINS + 1);
}
