/*
 * The ucx plugin's one-sided fast path end to end, between a target and an
 * origin process over UCX (UCX_TLS from the environment: meson runs it over
 * tcp and over posix shared memory).
 *
 * The program defines ucp_put_nbx, ucp_get_nbx and ucp_ep_flush_nbx itself
 * and exports them (it does not link libucp): the plugin module's calls
 * resolve to these first, which count them and call UCX's own, looked up in
 * the libucp the module loaded. So the test sees which operations took the
 * fast path.
 *
 * RMA_UCX_MODE=sizes (default): puts and gets of 1 byte to 4 MiB, below and
 * above PSP_UCX_RMA (meson sets 4k): every one at or above the threshold
 * made exactly one ucp_put_nbx (and one flush) or ucp_get_nbx, none below
 * it; after each put the target finds the bytes in its memory when the
 * next message of the connection arrives; gets read the target's bytes
 * without touching the guard behind the buffer; 32 puts and then 32 gets
 * in flight at once; the target's callbacks ran exactly once per put and
 * per get.
 *
 * RMA_UCX_MODE=kill: the target is killed (SIGKILL) while the origin keeps
 * 8 fast-path puts and gets of 1 MiB in flight: every request completes
 * (those after the death with ERROR), the origin sees con_error, does not
 * crash or hang (the watchdog would say where), and exits cleanly.
 */
#include "rma_util.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#define REGION   (8u << 20)
#define OFF_GET  (4u << 20) /* 4 MiB the target fills with GET_SEED */
#define GET_SEED 77u
#define WINDOW   32
#define WIN_LEN  65536u
#define KILL_LEN (1u << 20)
#define KILL_OPS 8   /* in flight while the target dies */
#define KILL_OK  20  /* operations done before the orchestrator kills */

enum { CMD_CHECK = 1, CMD_COUNTS, CMD_DONE };

/* ---------------------------------------------------------------------- */
/* UCX's RMA calls, counted                                               */
/* ---------------------------------------------------------------------- */

static unsigned long n_put, n_get, n_flush;

/* UCX's own function: libucp was loaded with the plugin module. */
static void *real(const char *name)
{
    static void *ucp;
    if (!ucp) ucp = dlopen("libucp.so.0", RTLD_NOW | RTLD_NOLOAD);
    if (!ucp) ITEST_FAIL("libucp.so.0 is not loaded: %s", dlerror());
    void *f = dlsym(ucp, name);
    if (!f) ITEST_FAIL("UCX's %s not found: %s", name, dlerror());
    return f;
}

ucs_status_ptr_t ucp_put_nbx(ucp_ep_h ep, const void *buffer, size_t count,
                             uint64_t remote_addr, ucp_rkey_h rkey,
                             const ucp_request_param_t *param)
{
    static ucs_status_ptr_t (*f)(ucp_ep_h, const void *, size_t, uint64_t,
                                 ucp_rkey_h, const ucp_request_param_t *);
    if (!f) *(void **)&f = real("ucp_put_nbx");
    n_put++;
    return f(ep, buffer, count, remote_addr, rkey, param);
}

ucs_status_ptr_t ucp_get_nbx(ucp_ep_h ep, void *buffer, size_t count,
                             uint64_t remote_addr, ucp_rkey_h rkey,
                             const ucp_request_param_t *param)
{
    static ucs_status_ptr_t (*f)(ucp_ep_h, void *, size_t, uint64_t,
                                 ucp_rkey_h, const ucp_request_param_t *);
    if (!f) *(void **)&f = real("ucp_get_nbx");
    n_get++;
    return f(ep, buffer, count, remote_addr, rkey, param);
}

ucs_status_ptr_t ucp_ep_flush_nbx(ucp_ep_h ep, const ucp_request_param_t *param)
{
    static ucs_status_ptr_t (*f)(ucp_ep_h, const ucp_request_param_t *);
    if (!f) *(void **)&f = real("ucp_ep_flush_nbx");
    n_flush++;
    return f(ep, param);
}

/* ---------------------------------------------------------------------- */
/* Target                                                                 */
/* ---------------------------------------------------------------------- */

static int target(itest_link_t *link, void *arg)
{
    bool kill_mode = arg != NULL;
    rt_mesh_t m;
    rt_counts_t counts = {0};
    rt_mesh_join(&m, link, 2, 0);
    pscom_connection_t *con = m.con[1];
    char *buf = aligned_alloc(4096, REGION);
    ITEST_ASSERT(buf, "out of memory");
    memset(buf, 0, OFF_GET);
    itest_fill(buf + OFF_GET, REGION - OFF_GET, GET_SEED);
    pscom_memh_t memh;
    ITEST_ASSERT_EQ(pscom_mem_register(m.sock, buf, REGION, &memh),
                    PSCOM_SUCCESS, "register the region");
    rt_register_callbacks(memh, &counts);
    rt_key_send(con, memh, buf);

    if (kill_mode) {
        itest_step("serving until killed");
        for (;;) itest_progress_once();
    }
    for (;;) {
        uint32_t cmd;
        uint64_t off, len, seed;
        itest_substep("waiting for a command");
        rt_ctl_recv(con, &cmd, &off);
        switch (cmd) {
        case CMD_CHECK:
            /* The put before this message is in place already. */
            rt_ctl_recv(con, &cmd, &len);
            rt_ctl_recv(con, &cmd, &seed);
            ITEST_ASSERT_PATTERN(buf + off, len, (uint32_t)seed,
                                 "%llu bytes put at %llu",
                                 (unsigned long long)len,
                                 (unsigned long long)off);
            rt_ctl_send(con, CMD_CHECK, counts.n[PSCOM_RMA_PUT]);
            break;
        case CMD_COUNTS:
            rt_ctl_send(con, CMD_COUNTS, counts.n[PSCOM_RMA_PUT]);
            rt_ctl_send(con, CMD_COUNTS, counts.n[PSCOM_RMA_GET]);
            rt_ctl_send(con, CMD_COUNTS, counts.bad);
            break;
        case CMD_DONE:
            itest_step("done");
            pscom_mem_deregister(memh);
            pscom_close_socket(m.sock);
            free(buf);
            return 0;
        default:
            ITEST_FAIL("unknown command %u", cmd);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Origin                                                                 */
/* ---------------------------------------------------------------------- */

struct origin {
    pscom_connection_t *con;
    pscom_rkey_t key;
    char *base;
    size_t threshold;
    unsigned long puts, gets;
};

static rt_op_args_t op(struct origin *o, pscom_rma_op_t kind, size_t off,
                       void *buf, size_t len)
{
    return (rt_op_args_t){.kind = kind, .con = o->con, .rkey = o->key,
                          .target = o->base + off, .origin = buf, .len = len};
}

static void do_ok(struct origin *o, rt_op_args_t a, const char *what)
{
    pscom_req_state_t st = rt_do(&a);
    if (!pscom_req_state_successful(st))
        ITEST_FAIL("%s of %zu bytes: state %s", what, a.len,
                   pscom_req_state_str(st));
    if (a.kind == PSCOM_RMA_PUT)
        o->puts++;
    else
        o->gets++;
}

static unsigned long target_check(struct origin *o, size_t off, size_t len,
                                  uint32_t seed)
{
    uint32_t cmd;
    uint64_t puts;
    rt_ctl_send(o->con, CMD_CHECK, off);
    rt_ctl_send(o->con, CMD_CHECK, len);
    rt_ctl_send(o->con, CMD_CHECK, seed);
    rt_ctl_recv(o->con, &cmd, &puts);
    return puts;
}

static void one_size(struct origin *o, size_t len, uint32_t seed)
{
    char *src = malloc(len), *dst = itest_alloc_guarded(len);
    ITEST_ASSERT(src, "out of memory");
    bool fast = len >= o->threshold;
    itest_substep("put and get of %zu bytes", len);

    itest_fill(src, len, seed);
    unsigned long p0 = n_put, f0 = n_flush, g0 = n_get;
    do_ok(o, op(o, PSCOM_RMA_PUT, 0, src, len), "put");
    ITEST_ASSERT_EQ(n_put - p0, fast, "ucp_put_nbx calls for %zu bytes", len);
    ITEST_ASSERT_EQ(n_flush - f0, fast, "flushes for a put of %zu bytes", len);
    ITEST_ASSERT_EQ(target_check(o, 0, len, seed), o->puts,
                    "put callbacks at the target after %zu bytes", len);

    do_ok(o, op(o, PSCOM_RMA_GET, OFF_GET, dst, len), "get");
    ITEST_ASSERT_EQ(n_get - g0, fast, "ucp_get_nbx calls for %zu bytes", len);
    ITEST_ASSERT_PATTERN(dst, len, GET_SEED, "get of %zu bytes", len);
    ITEST_ASSERT_GUARD(dst, len, "get of %zu bytes", len);
    free(src);
    free(dst);
}

static unsigned window_done;

static void done_count(pscom_request_t *req)
{
    (void)req;
    window_done++;
}

/* WINDOW operations of one kind in flight at once, at distinct offsets. */
static void window(struct origin *o, pscom_rma_op_t kind, char *bufs)
{
    pscom_request_t *r[WINDOW];
    window_done = 0;
    unsigned long calls0 = kind == PSCOM_RMA_PUT ? n_put : n_get;
    for (unsigned i = 0; i < WINDOW; i++) {
        size_t off = (kind == PSCOM_RMA_PUT ? 0 : OFF_GET) + i * WIN_LEN;
        rt_op_args_t a = op(o, kind, off, bufs + i * WIN_LEN, WIN_LEN);
        r[i] = rt_post(&a, done_count);
    }
    ITEST_PROGRESS_UNTIL(window_done == WINDOW);
    unsigned long calls = (kind == PSCOM_RMA_PUT ? n_put : n_get) - calls0;
    ITEST_ASSERT_EQ(calls, WINDOW, "UCX calls for %d operations in flight",
                    WINDOW);
    for (unsigned i = 0; i < WINDOW; i++) {
        ITEST_ASSERT_REQ_OK(r[i], "operation %u of the window", i);
        pscom_request_free(r[i]);
    }
    if (kind == PSCOM_RMA_PUT)
        o->puts += WINDOW;
    else
        o->gets += WINDOW;
}

static void run_sizes(struct origin *o)
{
    static const size_t sizes[] = {1, 8, 1000, 4095, 4096, 4097, 65536,
                                   (1u << 20) + 3, 4u << 20};
    itest_step("puts and gets of 1 B to 4 MiB (fast path from %zu bytes)",
               o->threshold);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        one_size(o, sizes[i], (uint32_t)(i + 1));

    itest_step("%d puts, then %d gets of %u bytes in flight", WINDOW, WINDOW,
               WIN_LEN);
    char *out = malloc((size_t)WINDOW * WIN_LEN);
    char *in = malloc((size_t)WINDOW * WIN_LEN);
    ITEST_ASSERT(out && in, "out of memory");
    itest_fill(out, (size_t)WINDOW * WIN_LEN, 99);
    window(o, PSCOM_RMA_PUT, out);
    ITEST_ASSERT_EQ(target_check(o, 0, (size_t)WINDOW * WIN_LEN, 99), o->puts,
                    "put callbacks after the window");
    window(o, PSCOM_RMA_GET, in);
    ITEST_ASSERT_PATTERN(in, (size_t)WINDOW * WIN_LEN, GET_SEED,
                         "the window of gets");
    free(out);
    free(in);

    itest_step("callbacks at the target");
    uint32_t cmd;
    uint64_t puts, gets, bad;
    rt_ctl_send(o->con, CMD_COUNTS, 0);
    rt_ctl_recv(o->con, &cmd, &puts);
    rt_ctl_recv(o->con, &cmd, &gets);
    rt_ctl_recv(o->con, &cmd, &bad);
    ITEST_ASSERT_EQ(bad, 0, "callbacks that saw a malformed request");
    ITEST_ASSERT_EQ(puts, o->puts, "put callbacks, once per put");
    ITEST_ASSERT_EQ(gets, o->gets, "get callbacks, once per get");
    rt_ctl_send(o->con, CMD_DONE, 0);
}

static struct {
    unsigned ok, failed, done;
} k;

static void kill_done(pscom_request_t *req)
{
    k.done++;
    if (pscom_req_successful(req))
        k.ok++;
    else if (req->state & PSCOM_REQ_STATE_ERROR)
        k.failed++;
}

static void run_kill(struct origin *o, itest_link_t *link)
{
    static char bufs[KILL_OPS][KILL_LEN];
    pscom_request_t *r[KILL_OPS] = {0};
    unsigned posted = 0;
    bool told = false;
    itest_step("fast-path puts and gets until the target dies");
    for (;;) {
        for (unsigned i = 0; i < KILL_OPS; i++) {
            if (r[i] && !pscom_req_is_done(r[i])) continue;
            if (r[i]) pscom_request_free(r[i]);
            r[i] = NULL;
            if (k.failed || itest_con_error_of(o->con)) continue;
            rt_op_args_t a = op(o, posted % 2 ? PSCOM_RMA_GET : PSCOM_RMA_PUT,
                                (posted % 2 ? OFF_GET : 0), bufs[i], KILL_LEN);
            r[i] = rt_post(&a, kill_done);
            posted++;
        }
        if (!told && k.ok >= KILL_OK) {
            itest_link_send_u64(link, 1); /* kill it now */
            told = true;
        }
        bool busy = false;
        for (unsigned i = 0; i < KILL_OPS; i++) busy |= r[i] != NULL;
        if (!busy) break;
        itest_progress_once();
    }
    itest_note("%u operations: %u succeeded, %u failed", posted, k.ok,
               k.failed);
    ITEST_ASSERT_EQ(k.done, posted, "every operation completed");
    ITEST_ASSERT(k.failed > 0 || itest_con_error_of(o->con),
                 "the target's death was noticed");
    ITEST_PROGRESS_UNTIL(itest_con_error_of(o->con));
    /* A put on the dead connection fails at once. */
    rt_op_args_t a = op(o, PSCOM_RMA_PUT, 0, bufs[0], KILL_LEN);
    pscom_req_state_t st = rt_do(&a);
    ITEST_ASSERT(st & PSCOM_REQ_STATE_ERROR, "put after the death: %s",
                 pscom_req_state_str(st));
}

static size_t threshold_setting(void)
{
    const char *v = getenv("PSP_UCX_RMA");
    ITEST_ASSERT(v && *v, "PSP_UCX_RMA must be set (meson sets 4096)");
    return strtoull(v, NULL, 0);
}

static int origin(itest_link_t *link, void *arg)
{
    bool kill_mode = arg != NULL;
    rt_mesh_t m;
    struct origin o = {.threshold = threshold_setting()};
    rt_mesh_join(&m, link, 2, 1);
    o.con = m.con[0];
    o.key = rt_key_recv(o.con, (void **)&o.base);
    if (kill_mode)
        run_kill(&o, link);
    else
        run_sizes(&o);
    pscom_rkey_destroy(o.key);
    pscom_close_socket(m.sock);
    return 0;
}

int main(void)
{
    const char *mode = getenv("RMA_UCX_MODE");
    bool kill_mode = mode && !strcmp(mode, "kill");
    void *arg = kill_mode ? (void *)1 : NULL;
    itest_set_role("orchestrator");
    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_child_t kids[2];
    itest_spawn(&kids[0], "target", target, arg);
    itest_spawn(&kids[1], "origin", origin, arg);
    rt_mesh_wire(kids, 2);
    if (kill_mode) {
        itest_link_recv_u64(&kids[1].link);
        int failed = itest_kill_peer(&kids[0], NULL);
        return itest_child_check(&kids[1]) | failed;
    }
    itest_child_t *list[] = {&kids[0], &kids[1]};
    return itest_children_check(list, 2);
}
