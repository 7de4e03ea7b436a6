/*
 * The shm plugin's one-sided fast path (process_vm_writev/readv), end to
 * end between a target and an origin process. Linked with the static core
 * and -Wl,--wrap=process_vm_writev,--wrap=process_vm_readv, so the test
 * counts and fails the plugin's copies. RMA_FAST_MODE:
 *
 *  allow    rounds of puts, gets and accumulates of mixed sizes (at least
 *           PSP_SHM_RMA, set to 1k by meson, and below it), all in flight
 *           together: every put's and get's bytes above the threshold were
 *           copied by exactly one call, none below it; the target's callback
 *           ran once per operation, in posting order (core-path gets: once
 *           their answer is written), and a put's bytes were
 *           in place when its callback ran; gets read the right bytes. A key
 *           stripped of its plugin entries (as packed before a plugin was
 *           initialised) takes the core's path, correctly; packing a region
 *           again gives one shm entry.
 *  partial  the wrapper copies at most 1000 bytes per call: the plugin
 *           goes on after partial copies (calls = sum of ceil(len/1000)).
 *  deny     every call fails with EPERM: the same checks pass on the core's
 *           path, the plugin tried once, and said so once at debug level.
 *  esrch    every call fails with ESRCH: the same, remembered per
 *           connection.
 *  kill     the target is killed (SIGKILL) while the origin keeps posting
 *           fast-path puts and gets: every request completes, the first
 *           failing ones with ERROR, no crash and no hang, and the origin
 *           exits cleanly.
 */
#include "rma_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rkey_codec.h"

ssize_t __real_process_vm_writev(pid_t, const struct iovec *, unsigned long,
                                 const struct iovec *, unsigned long,
                                 unsigned long);
ssize_t __real_process_vm_readv(pid_t, const struct iovec *, unsigned long,
                                const struct iovec *, unsigned long,
                                unsigned long);
ssize_t __wrap_process_vm_writev(pid_t, const struct iovec *, unsigned long,
                                 const struct iovec *, unsigned long,
                                 unsigned long);
ssize_t __wrap_process_vm_readv(pid_t, const struct iovec *, unsigned long,
                                const struct iovec *, unsigned long,
                                unsigned long);

enum mode { ALLOW, PARTIAL, DENY, ESRCH_MODE, KILL };
static enum mode mode;
static unsigned long writev_calls, readv_calls;

#define PARTIAL_CAP 1000

static ssize_t wrapped(bool write, pid_t pid, const struct iovec *l,
                       unsigned long ln, const struct iovec *r,
                       unsigned long rn, unsigned long flags)
{
    if (write)
        writev_calls++;
    else
        readv_calls++;
    if (mode == DENY || mode == ESRCH_MODE) {
        errno = mode == DENY ? EPERM : ESRCH;
        return -1;
    }
    struct iovec lc, rc;
    if (mode == PARTIAL && ln == 1 && rn == 1 && l->iov_len > PARTIAL_CAP) {
        lc = (struct iovec){l->iov_base, PARTIAL_CAP};
        rc = (struct iovec){r->iov_base, PARTIAL_CAP};
        l = &lc;
        r = &rc;
    }
    return write ? __real_process_vm_writev(pid, l, ln, r, rn, flags)
                 : __real_process_vm_readv(pid, l, ln, r, rn, flags);
}

ssize_t __wrap_process_vm_writev(pid_t pid, const struct iovec *l,
                                 unsigned long ln, const struct iovec *r,
                                 unsigned long rn, unsigned long flags)
{
    return wrapped(true, pid, l, ln, r, rn, flags);
}

ssize_t __wrap_process_vm_readv(pid_t pid, const struct iovec *l,
                                unsigned long ln, const struct iovec *r,
                                unsigned long rn, unsigned long flags)
{
    return wrapped(false, pid, l, ln, r, rn, flags);
}

/* ---------------------------------------------------------------------- */
/* The sequence both sides know                                           */
/* ---------------------------------------------------------------------- */

#define ROUNDS    12
#define WINDOW    32
#define N_OPS     (ROUNDS * WINDOW)
#define N_STRIP   16 /* operations with the stripped key, after N_OPS */
#define SLOT      (200u * 1024)
#define OFF_PUT   0
#define OFF_GET   (WINDOW * SLOT)
#define OFF_ACC   (2 * WINDOW * SLOT)
#define REGION    (OFF_ACC + 4096)
#define THRESHOLD 1024 /* PSP_SHM_RMA of the meson test */

static const size_t sizes[] = {64, 1024, 2048 + 5, 65536, 200000, 900};

static pscom_rma_op_t kind_of(unsigned i)
{
    return i % 7 == 3 ? PSCOM_RMA_ACCUMULATE
                      : (i % 2 ? PSCOM_RMA_PUT : PSCOM_RMA_GET);
}

static size_t size_of(unsigned i)
{
    return kind_of(i) == PSCOM_RMA_ACCUMULATE ? 64
                                              : sizes[(i / 2) % 6];
}

static uint32_t get_seed(unsigned slot)
{
    return 5000 + slot;
}

static bool fast(unsigned i)
{
    return i < N_OPS && kind_of(i) != PSCOM_RMA_ACCUMULATE &&
           size_of(i) >= THRESHOLD;
}

/* ---------------------------------------------------------------------- */
/* Target                                                                 */
/* ---------------------------------------------------------------------- */

static char *tbuf;
static unsigned char seen[N_OPS + N_STRIP];
static unsigned calls;
static int last_ordered = -1; /* the last tag of an ordered callback */
static unsigned long order_errors, data_errors;

/* A get the core carries: its callback runs once the answer is written,
 * which may be after callbacks of later operations (a large answer streams
 * through the ring while later messages arrive). Every other callback runs
 * in posting order: puts and accumulates when their message is in, the
 * plugin's puts and gets at their notice. */
static bool core_get(unsigned i)
{
    return kind_of(i) == PSCOM_RMA_GET &&
           (mode == DENY || mode == ESRCH_MODE || !fast(i));
}

static void expect(pscom_rma_op_t kind, const struct rt_user *u, size_t len)
{
    unsigned t = u->tag;
    calls++;
    if (t >= N_OPS + N_STRIP || kind_of(t) != kind || len != size_of(t) ||
        seen[t]++) {
        if (order_errors++ < 5)
            itest_note("callback %d, tag %u, %zu bytes: unknown or again",
                       (int)kind, t, len);
        return;
    }
    if (core_get(t)) return;
    if ((int)t < last_ordered && order_errors++ < 5)
        itest_note("callback for tag %u after tag %d", t, last_ordered);
    last_ordered = (int)t;
}

static void cb_put(pscom_request_t *r)
{
    const struct rt_user *u = &r->xheader.rma_put.user;
    expect(PSCOM_RMA_PUT, u, r->data_len);
    /* The bytes are in place when the callback runs, on either path. */
    if (r->data != tbuf + OFF_PUT + (u->tag % WINDOW) * SLOT ||
        itest_pattern_mismatch(r->data, r->data_len, u->tag) >= 0)
        data_errors++;
}

static void cb_get(pscom_request_t *r)
{
    expect(PSCOM_RMA_GET, &r->xheader.rma_get.user, r->data_len);
}

static void cb_acc(pscom_request_t *r)
{
    expect(PSCOM_RMA_ACCUMULATE, &r->xheader.rma_accumulate.user,
           r->data_len);
    rt_apply(RT_SUM, RT_U8, r->xheader.rma_accumulate.common.dest, r->data,
             r->data_len);
}

/* The packed key of memh without plugin entries, as a target packs it
 * before any plugin could register the region. */
static void send_stripped_key(pscom_connection_t *con, pscom_memh_t memh)
{
    void *buf;
    size_t len;
    ITEST_ASSERT_EQ(pscom_rkey_buffer_pack(&buf, &len, memh), PSCOM_SUCCESS,
                    "pack");
    struct psc_rkey_head h;
    const char *why = "";
    ITEST_ASSERT_EQ(psc_rkey_decode(buf, len, &h, &why), 0, "decode: %s", why);
    struct psc_rkey_entry e;
    ITEST_ASSERT(psc_rkey_find((char *)buf + sizeof(h), h.plugin_len, "shm",
                               &e) != NULL, "the key has an entry of shm");
    pscom_rkey_buffer_release(buf);
    /* Packed again: still one entry of shm (decode refuses two). */
    ITEST_ASSERT_EQ(pscom_rkey_buffer_pack(&buf, &len, memh), PSCOM_SUCCESS,
                    "pack again");
    ITEST_ASSERT_EQ(psc_rkey_decode(buf, len, &h, &why), 0, "decode: %s", why);
    pscom_rkey_buffer_release(buf);

    uint8_t bare[sizeof(h)];
    ITEST_ASSERT_EQ(psc_rkey_encode(bare, &h, NULL, 0), 0, "encode");
    struct {
        uint64_t base, len;
    } k = {(uint64_t)(uintptr_t)tbuf, sizeof(bare)};
    pscom_send(con, &k, sizeof(k), bare, sizeof(bare));
}

static int target_main(itest_link_t *link, void *arg)
{
    rt_mesh_t m;
    rt_mesh_join(&m, link, 2, 0);
    pscom_connection_t *con = m.con[1];
    tbuf = aligned_alloc(4096, REGION);
    ITEST_ASSERT(tbuf, "out of memory");
    memset(tbuf, 0, REGION);
    for (unsigned s = 0; s < WINDOW; s++)
        itest_fill(tbuf + OFF_GET + s * SLOT, SLOT, get_seed(s));
    pscom_memh_t memh;
    ITEST_ASSERT_EQ(pscom_mem_register(m.sock, tbuf, REGION, &memh),
                    PSCOM_SUCCESS, "register");
    pscom_register_rma_callbacks(cb_put, memh, PSCOM_RMA_PUT);
    pscom_register_rma_callbacks(cb_get, memh, PSCOM_RMA_GET);
    pscom_register_rma_callbacks(cb_acc, memh, PSCOM_RMA_ACCUMULATE);
    rt_key_send(con, memh, tbuf);
    if (mode != KILL) send_stripped_key(con, memh);

    /* Serve until the origin says it is through (or, when killed, for
     * ever: the orchestrator ends this process). */
    uint32_t cmd;
    uint64_t n;
    rt_ctl_recv(con, &cmd, &n);
    itest_note("callbacks: %u, wrong or out of order %lu, put bytes not in "
               "place %lu", calls, order_errors, data_errors);
    ITEST_ASSERT_EQ(calls, n, "callbacks (one per operation)");
    for (unsigned i = 0; i < n; i++)
        ITEST_ASSERT_EQ(seen[i], 1, "callbacks of operation %u", i);
    ITEST_ASSERT_EQ(order_errors, 0, "callbacks out of posting order");
    ITEST_ASSERT_EQ(data_errors, 0, "put callbacks before their bytes");
    rt_ctl_send(con, 0, 0);
    pscom_mem_deregister(memh);
    pscom_close_socket(NULL);
    free(tbuf);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Origin                                                                 */
/* ---------------------------------------------------------------------- */

struct op {
    pscom_request_t *req;
    char *buf;
};

static void keep(pscom_request_t *r)
{
    (void)r;
}

/* Post operation `kind` of len bytes with tag i (slot i % WINDOW). */
static pscom_request_t *post_op(pscom_connection_t *con, pscom_rkey_t key,
                                char *base, pscom_rma_op_t kind, size_t len,
                                unsigned i, char *buf)
{
    unsigned slot = i % WINDOW;
    struct rt_user u = {.op = RT_SUM, .dtype = RT_U8, .tag = i};
    pscom_request_t *r = itest_request(sizeof(pscom_xheader_rma_get_t));
    r->connection = con;
    r->data_len = len;
    r->rma.rkey = key;
    r->rma.origin_addr = buf;
    r->ops.io_done = keep;
    switch (kind) {
    case PSCOM_RMA_PUT:
        itest_fill(buf, len, i);
        r->rma.target_addr = base + OFF_PUT + slot * SLOT;
        r->xheader.rma_put.user = u;
        pscom_post_rma_put(r);
        break;
    case PSCOM_RMA_GET:
        memset(buf, 0, len);
        r->rma.target_addr = base + OFF_GET + slot * SLOT;
        r->xheader.rma_get.user = u;
        pscom_post_rma_get(r);
        break;
    default:
        memset(buf, 1, len);
        r->rma.target_addr = base + OFF_ACC;
        r->xheader.rma_accumulate.user = u;
        pscom_post_rma_accumulate(r);
        break;
    }
    return r;
}

/* Post operation i of the sequence. */
static pscom_request_t *post(pscom_connection_t *con, pscom_rkey_t key,
                             char *base, unsigned i, char *buf)
{
    return post_op(con, key, base, kind_of(i), size_of(i), i, buf);
}

/* Wait until the target has handled everything posted before (a
 * fetch-and-op is answered in order; no callback is registered for it).
 * A completed put only says its notice is on its way: without this, the
 * next round's put into the same slot could overwrite the bytes before the
 * target's callback looked at them. */
static void sync_target(pscom_connection_t *con, pscom_rkey_t key, char *base)
{
    uint64_t zero = 0, res;
    pscom_request_t *r = itest_request(sizeof(pscom_xheader_rma_fetch_op_t));
    r->connection = con;
    r->data_len = sizeof(zero);
    r->rma.rkey = key;
    r->rma.origin_addr = &zero;
    r->rma.result_addr = &res;
    r->rma.target_addr = base + OFF_ACC + 1024;
    r->ops.io_done = keep;
    pscom_post_rma_fetch_op(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "fetch-and-op");
    pscom_request_free(r);
}

static void check_done(pscom_request_t *r, unsigned i, char *buf)
{
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "operation %u (%d, %zu bytes)", i, (int)kind_of(i),
                        size_of(i));
    if (kind_of(i) == PSCOM_RMA_GET)
        ITEST_ASSERT_PATTERN(buf, size_of(i), get_seed(i % WINDOW),
                             "get %u of %zu bytes", i, size_of(i));
    pscom_request_free(r);
}

/* Lines of the origin's debug log that report the denial. */
static int denial_lines(const char *path)
{
    char line[2048];
    int n = 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "process_vm_") &&
            (strstr(line, "cannot copy straight") ||
             strstr(line, "go through the ring from now on")))
            n++;
    fclose(f);
    return n;
}

static unsigned long expected_calls(bool write)
{
    unsigned long n = 0;
    pscom_rma_op_t want = write ? PSCOM_RMA_PUT : PSCOM_RMA_GET;
    for (unsigned i = 0; i < N_OPS; i++) {
        if (!fast(i) || kind_of(i) != want) continue;
        n += mode == PARTIAL ? (size_of(i) + PARTIAL_CAP - 1) / PARTIAL_CAP : 1;
    }
    return n;
}

static int origin_main(itest_link_t *link, void *arg)
{
    char log[128];
    snprintf(log, sizeof(log), "/tmp/rma_fast_shm_%d.log", (int)getpid());
    if (mode == DENY || mode == ESRCH_MODE) {
        setenv("PSP_DEBUG_OUT", log, 1);
        setenv("PSP_DEBUG", "4", 1);
    }
    rt_mesh_t m;
    rt_mesh_join(&m, link, 2, 1);
    pscom_connection_t *con = m.con[0];
    void *tb;
    pscom_rkey_t key = rt_key_recv(con, &tb);
    char *base = tb;
    static struct op ops[WINDOW];
    for (unsigned s = 0; s < WINDOW; s++) {
        ops[s].buf = malloc(SLOT);
        ITEST_ASSERT(ops[s].buf, "out of memory");
    }

    if (mode == KILL) {
        /* Post until the connection fails; the target dies after a few
         * rounds. Every request must complete. */
        unsigned long ok = 0, failed = 0;
        for (unsigned i = 0;; i += 2) {
            pscom_request_t *r = post_op(con, key, base, PSCOM_RMA_PUT, 65536,
                                         i, ops[0].buf);
            pscom_request_t *g = post_op(con, key, base, PSCOM_RMA_GET, 65536,
                                         i + 1, ops[1].buf);
            pscom_wait(r);
            pscom_wait(g);
            bool bad = (r->state | g->state) & PSCOM_REQ_STATE_ERROR;
            pscom_request_free(r);
            pscom_request_free(g);
            if (bad) {
                failed++;
                break;
            }
            if (++ok == 50) itest_link_send_u64(link, 1); /* kill it now */
        }
        itest_note("%lu pairs done before the failure; plugin copies: "
                   "%lu writes, %lu reads", ok, writev_calls, readv_calls);
        ITEST_ASSERT(ok >= 50 && failed == 1, "the failure ended the loop");
        ITEST_ASSERT(writev_calls >= 50 && readv_calls >= 50,
                     "the operations took the fast path before the kill");
        /* A new operation on the broken connection fails at once. */
        pscom_request_t *r = post_op(con, key, base, PSCOM_RMA_PUT, 65536, 0,
                                     ops[0].buf);
        pscom_wait(r);
        ITEST_ASSERT(r->state & PSCOM_REQ_STATE_ERROR, "put after the failure");
        pscom_request_free(r);
        pscom_rkey_destroy(key);
        for (unsigned s = 0; s < WINDOW; s++) free(ops[s].buf);
        pscom_close_socket(NULL);
        return 0;
    }

    pscom_rkey_t bare = rt_key_recv(con, NULL);
    itest_step("%d rounds of %d operations in flight", ROUNDS, WINDOW);
    for (unsigned round = 0; round < ROUNDS; round++) {
        for (unsigned s = 0; s < WINDOW; s++)
            ops[s].req = post(con, key, base, round * WINDOW + s, ops[s].buf);
        for (unsigned s = 0; s < WINDOW; s++)
            check_done(ops[s].req, round * WINDOW + s, ops[s].buf);
        sync_target(con, key, base);
    }
    unsigned long w = writev_calls, rd = readv_calls;
    itest_note("plugin copies: %lu writes, %lu reads", w, rd);
    if (mode == ALLOW || mode == PARTIAL) {
        ITEST_ASSERT_EQ(w, expected_calls(true), "process_vm_writev calls");
        ITEST_ASSERT_EQ(rd, expected_calls(false), "process_vm_readv calls");
    } else {
        ITEST_ASSERT_EQ(w + rd, 1, "copies tried after the first %s",
                        mode == DENY ? "EPERM" : "ESRCH");
    }

    itest_step("a key without plugin entries");
    for (unsigned i = N_OPS; i < N_OPS + N_STRIP; i++) {
        unsigned s = i % WINDOW;
        ops[s].req = post(con, bare, base, i, ops[s].buf);
        check_done(ops[s].req, i, ops[s].buf);
        sync_target(con, bare, base);
    }
    ITEST_ASSERT_EQ(writev_calls + readv_calls, w + rd,
                    "copies with a key that has no shm entry");

    rt_ctl_send(con, 1, N_OPS + N_STRIP);
    uint32_t cmd;
    uint64_t v;
    rt_ctl_recv(con, &cmd, &v); /* the target checked */
    pscom_rkey_destroy(bare);
    pscom_rkey_destroy(key);
    for (unsigned s = 0; s < WINDOW; s++) free(ops[s].buf);
    pscom_close_socket(NULL);

    if (mode == DENY || mode == ESRCH_MODE) {
        int lines = denial_lines(log);
        ITEST_ASSERT_EQ(lines, 1, "debug messages about the failed copy in %s",
                        log);
        unlink(log);
    }
    return 0;
}

int main(void)
{
    static const char *const names[] = {"allow", "partial", "deny", "esrch",
                                        "kill"};
    const char *m = getenv("RMA_FAST_MODE");
    unsigned i = 0;
    while (i < 5 && (!m || strcmp(m, names[i]))) i++;
    if (i == 5) {
        fprintf(stderr, "rma_fast_shm: set RMA_FAST_MODE to allow, partial, "
                        "deny, esrch or kill\n");
        return 2;
    }
    mode = (enum mode)i;
    const char *t = getenv("PSP_SHM_RMA");
    if (!t || strcmp(t, "1k")) {
        fprintf(stderr, "rma_fast_shm: needs PSP_SHM_RMA=1k (as meson sets "
                        "it)\n");
        return 2;
    }
    setenv("PSCOM_TEST_TRANSPORT", "shm", 1);
    itest_set_role("main");
    itest_child_t kids[2];
    itest_spawn(&kids[0], "target", target_main, NULL);
    itest_spawn(&kids[1], "origin", origin_main, NULL);
    rt_mesh_wire(kids, 2);
    if (mode == KILL) {
        itest_link_recv_u64(&kids[1].link);
        int failed = itest_kill_peer(&kids[0], NULL);
        return itest_child_check(&kids[1]) | failed;
    }
    itest_child_t *list[2] = {&kids[0], &kids[1]};
    return itest_children_check(list, 2);
}
