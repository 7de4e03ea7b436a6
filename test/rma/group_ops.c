/*
 * Groups of 2, 3, 4 and 5 members, everyone connected to everyone:
 *  - open, find, get_id, a second open of the same id refused, close;
 *  - rank 0 opens the group late, so that the others' broadcast and barrier
 *    messages reach it before the group exists;
 *  - barrier: nobody leaves barrier k before everybody has entered it
 *    (members enter after different delays; times on one clock);
 *  - pscom_bcast from every root, of 0, 1, 1000 and 300000 bytes, with a
 *    user xheader, into guarded buffers;
 *  - pscom_post_bcast from every root at once, waited for together, and
 *    one into buffers too small (TRUNCATED, with the root's length, where
 *    the cut happens and below it, also where a buffer has room for all;
 *    what fits is right, nothing written behind);
 *  - a second group over the same connections with the ranks reversed.
 * Over tcp and shm the members are processes; with loop they are threads
 * of one process (pscom_init_thread), each with its own socket.
 */
#include "rma_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_ID   42
#define GROUP2_ID  7
#define N_BARRIERS 5
#define MAX_N      5

struct report {
    double enter[N_BARRIERS];
    double leave[N_BARRIERS];
};

static const size_t sizes[] = {0, 1, 1000, 300000};

static uint32_t seed_of(unsigned root, size_t len, unsigned gid)
{
    return (uint32_t)(root * 1000003u + len * 7u + gid);
}

struct uxh {
    uint32_t root;
    uint32_t len;
    uint32_t magic;
};

static void bcast_all_roots(pscom_group_t *g, int n, int me, unsigned gid)
{
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (int root = 0; root < n; root++) {
            size_t len = sizes[s];
            char *buf = itest_alloc_guarded(len);
            struct uxh x = {0};
            itest_substep("pscom_bcast root %d, %zu bytes", root, len);
            if (root == me) {
                itest_fill(buf, len, seed_of(root, len, gid));
                x = (struct uxh){root, (uint32_t)len, 0xfeedf00d};
            }
            pscom_bcast(g, (unsigned)root, &x, sizeof(x), buf, len);
            ITEST_ASSERT_PATTERN(buf, len, seed_of(root, len, gid),
                                 "bcast from %d of %zu bytes", root, len);
            ITEST_ASSERT_GUARD(buf, len, "bcast buffer");
            ITEST_ASSERT(x.root == (uint32_t)root && x.len == len &&
                             x.magic == 0xfeedf00d,
                         "bcast xheader from %d", root);
            free(buf);
        }
}

static void post_bcast_all_roots(pscom_socket_t *sock, int n, int me)
{
    enum { LEN = 5000 };
    pscom_request_t *r[MAX_N];
    char *buf[MAX_N];
    size_t xlen = sizeof(pscom_xheader_bcast_t) + 8;
    itest_step("pscom_post_bcast from every root at once");
    for (int root = 0; root < n; root++) {
        buf[root] = itest_alloc_guarded(LEN);
        r[root] = itest_request(xlen);
        r[root]->socket = sock;
        r[root]->xheader_len = xlen;
        r[root]->xheader.bcast.group_id = GROUP_ID;
        r[root]->xheader.bcast.bcast_root = (uint32_t)root;
        r[root]->data = buf[root];
        /* Root 1 sends 5000 bytes; everybody else has room for 100 but
         * member 3, which has room for all: with 5 members it is below
         * member 2 in the tree, and gets only the 100 bytes member 2
         * kept. */
        r[root]->data_len = root == 1 && me != 1 && me != 3 ? 100 : LEN;
        if (root == me) {
            itest_fill(buf[root], LEN, seed_of(root, LEN, 99));
            memcpy(r[root]->xheader.bcast.user, "userxhdr", 8);
        }
        pscom_post_bcast(r[root]);
    }
    for (int root = 0; root < n; root++) {
        pscom_wait(r[root]);
        size_t len = r[root]->data_len;
        if (root == 1 && me != 1 &&
            (len < LEN || (r[root]->state & PSCOM_REQ_STATE_TRUNCATED))) {
            /* A member whose buffer is too small passes on what it holds,
             * flagged as cut: it and every member below it end TRUNCATED
             * with the root's length, and hold the first 100 bytes. */
            ITEST_ASSERT_REQ_STATE(r[root], PSCOM_REQ_STATE_TRUNCATED,
                                   "post_bcast from 1, cut");
            ITEST_ASSERT_EQ(r[root]->header.data_len, LEN,
                            "the root's length is reported");
            len = 100;
        } else {
            ITEST_ASSERT_REQ_OK(r[root], "post_bcast from %d", root);
            ITEST_ASSERT_EQ(r[root]->header.data_len, LEN,
                            "post_bcast from %d", root);
        }
        if (root == 1 && me == 3 && n == 5)
            ITEST_ASSERT(r[root]->state & PSCOM_REQ_STATE_TRUNCATED,
                         "member 3 of 5, below member 2, sees the cut");
        ITEST_ASSERT_PATTERN(buf[root], len, seed_of(root, LEN, 99),
                             "post_bcast from %d", root);
        ITEST_ASSERT_GUARD(buf[root], LEN, "post_bcast buffer");
        for (size_t i = len; i < LEN; i++)
            ITEST_ASSERT((unsigned char)buf[root][i] == 0x5a,
                         "post_bcast from %d wrote byte %zu of a %zu-byte "
                         "buffer", root, i, len);
        ITEST_ASSERT(!memcmp(r[root]->xheader.bcast.user, "userxhdr", 8),
                     "post_bcast xheader from %d", root);
        pscom_request_free(r[root]);
        free(buf[root]);
    }
}

/* One member's whole test. */
static void member_run(rt_mesh_t *m, struct report *rep)
{
    int n = m->n, me = m->me;
    pscom_connection_t *cons[MAX_N], *rev[MAX_N];

    for (int i = 0; i < n; i++) cons[i] = m->con[i];
    if (me == 0) {
        itest_step("opening the group late");
        itest_sleep_ms(300);
    }
    pscom_group_t *g = pscom_group_open(m->sock, GROUP_ID, (uint32_t)me,
                                        (uint32_t)n, cons);
    ITEST_ASSERT(g, "pscom_group_open");
    ITEST_ASSERT(pscom_group_find(m->sock, GROUP_ID) == g, "group_find");
    ITEST_ASSERT(pscom_group_find(m->sock, GROUP_ID + 1) == NULL,
                 "group_find of another id");
    ITEST_ASSERT_EQ(pscom_group_get_id(g), GROUP_ID, "group_get_id");
    ITEST_ASSERT(pscom_group_open(m->sock, GROUP_ID, (uint32_t)me,
                                  (uint32_t)n, cons) == NULL,
                 "a second group with the same id");

    itest_step("barriers");
    for (int k = 0; k < N_BARRIERS; k++) {
        itest_sleep_ms((unsigned)((me * 37 + k * 11) % 60));
        rep->enter[k] = itest_now();
        pscom_barrier(g);
        rep->leave[k] = itest_now();
    }

    itest_step("pscom_bcast from every root");
    bcast_all_roots(g, n, me, GROUP_ID);
    post_bcast_all_roots(m->sock, n, me);

    itest_step("a group with the ranks reversed");
    for (int i = 0; i < n; i++) rev[i] = m->con[n - 1 - i];
    pscom_group_t *g2 = pscom_group_open(m->sock, GROUP2_ID,
                                         (uint32_t)(n - 1 - me), (uint32_t)n,
                                         rev);
    ITEST_ASSERT(g2, "second group");
    pscom_barrier(g2);
    bcast_all_roots(g2, n, n - 1 - me, GROUP2_ID);
    pscom_barrier(g);
    pscom_group_close(g2);
    pscom_group_close(g);
}

static void check_barriers(struct report *rep, int n)
{
    for (int k = 0; k < N_BARRIERS; k++) {
        double last_in = 0, first_out = 1e300;
        for (int i = 0; i < n; i++) {
            if (rep[i].enter[k] > last_in) last_in = rep[i].enter[k];
            if (rep[i].leave[k] < first_out) first_out = rep[i].leave[k];
        }
        ITEST_ASSERT(first_out >= last_in,
                     "barrier %d of %d members: a member left %.6f s before "
                     "the last one entered", k, n, last_in - first_out);
    }
}

/* ---------------------------------------------------------------------- */

static int member_main(itest_link_t *link, void *arg)
{
    int n = (int)((intptr_t)arg >> 8), me = (int)((intptr_t)arg & 0xff);
    rt_mesh_t m;
    struct report rep;
    rt_mesh_join(&m, link, n, me);
    member_run(&m, &rep);
    itest_link_write(link, &rep, sizeof(rep));
    /* Leave only when everybody is through (nobody loses a connection
     * while others still send). */
    itest_link_recv_u64(link);
    pscom_close_socket(NULL);
    return 0;
}

struct thread_arg {
    rt_mesh_t *m;
    struct report *rep;
};

static void *member_thread(void *p)
{
    struct thread_arg *a = p;
    member_run(a->m, a->rep);
    return NULL;
}

static int loop_main(itest_link_t *link, void *arg)
{
    static rt_mesh_t m[MAX_N];
    pscom_err_t rc = pscom_init_thread(PSCOM_VERSION);
    ITEST_ASSERT_EQ(rc, PSCOM_SUCCESS, "pscom_init_thread");
    for (int n = 2; n <= MAX_N; n++) {
        struct report rep[MAX_N];
        struct thread_arg ta[MAX_N];
        pthread_t th[MAX_N];
        itest_step("%d members in threads", n);
        rt_mesh_local(m, n);
        for (int i = 0; i < n; i++) {
            ta[i] = (struct thread_arg){&m[i], &rep[i]};
            ITEST_ASSERT_EQ(pthread_create(&th[i], NULL, member_thread, &ta[i]),
                            0, "pthread_create");
        }
        for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
        check_barriers(rep, n);
        for (int i = 0; i < n; i++) pscom_close_socket(m[i].sock);
    }
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
    for (int n = 2; n <= MAX_N; n++) {
        itest_child_t kids[MAX_N];
        itest_child_t *list[MAX_N];
        struct report rep[MAX_N];
        itest_note("%d members", n);
        for (int i = 0; i < n; i++) {
            char role[16];
            snprintf(role, sizeof(role), "member %d/%d", i, n);
            itest_spawn(&kids[i], role, member_main,
                        (void *)(intptr_t)((n << 8) | i));
            list[i] = &kids[i];
        }
        rt_mesh_wire(kids, n);
        for (int i = 0; i < n; i++)
            ITEST_ASSERT_EQ(itest_link_read(&kids[i].link, &rep[i],
                                            sizeof(rep[i])),
                            sizeof(rep[i]), "report of member %d", i);
        for (int i = 0; i < n; i++) itest_link_send_u64(&kids[i].link, 1);
        if (itest_children_check(list, n)) return 1;
        check_barriers(rep, n);
    }
    return 0;
}
