/*
 * Group collectives after a failure: every member ends, those the failure
 * reaches with an error, instead of waiting for ever.
 *  - broadcast, 5 members, root 0: member 1 closes its connection to the
 *    root first. Member 1 fails, and so does member 2, its child, which
 *    hears of it through a failure notice; members 3 and 4 get the data.
 *  - the same with member 1's connection only failed
 *    (pscom_fail_connection): it stays valid, the group keeps using it.
 *  - barrier, 4 members: member 3 closes (or fails) its connection to
 *    member 0 first; all four return from two barriers in a row.
 * The members are threads of one process, each with its own socket, over
 * the loop transport; a member that hangs trips the watchdog.
 */
#include "rma_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_ID 11
#define MAX_N    5
#define WATCHDOG 30

enum fail_how { CLOSE, FAIL };

struct member {
    rt_mesh_t *m;
    enum fail_how how;
    pthread_barrier_t *ready;
    pscom_req_state_t state; /* the broadcast's final state */
    char data[16];
};

/* Break the connection of m to member `peer`, as `how` says. */
static void break_connection(rt_mesh_t *m, int peer, enum fail_how how)
{
    if (how == CLOSE) {
        pscom_close_connection(m->con[peer]);
        return;
    }
    ITEST_ASSERT_EQ(pscom_fail_connection(m->con[peer], PSCOM_ERR_IOERROR),
                    PSCOM_SUCCESS, "pscom_fail_connection");
}

/* Open the group; member `breaker` breaks its connection to member 0
 * before the others go on. */
static pscom_group_t *start(struct member *a, int breaker)
{
    rt_mesh_t *m = a->m;
    pscom_group_t *g = pscom_group_open(m->sock, GROUP_ID, (uint32_t)m->me,
                                        (uint32_t)m->n, m->con);
    ITEST_ASSERT(g, "pscom_group_open");
    if (m->me == breaker) break_connection(m, 0, a->how);
    pthread_barrier_wait(a->ready);
    return g;
}

/* Close the group once every member is through (nobody closes while
 * others work). */
static void finish(struct member *a, pscom_group_t *g)
{
    pthread_barrier_wait(a->ready);
    pscom_group_close(g);
}

static void *bcast_member(void *p)
{
    struct member *a = p;
    rt_mesh_t *m = a->m;
    pscom_group_t *g = start(a, 1);

    pscom_request_t *r = itest_request(sizeof(pscom_xheader_bcast_t));
    r->socket = m->sock;
    r->xheader_len = sizeof(pscom_xheader_bcast_t);
    r->xheader.bcast.group_id = GROUP_ID;
    r->xheader.bcast.bcast_root = 0;
    r->data = a->data;
    r->data_len = sizeof(a->data);
    if (m->me == 0) strcpy(a->data, "hello");
    pscom_post_bcast(r);
    pscom_wait(r);
    a->state = r->state;
    pscom_request_free(r);
    finish(a, g);
    return NULL;
}

static void *barrier_member(void *p)
{
    struct member *a = p;
    pscom_group_t *g = start(a, 3);
    pscom_barrier(g);
    pscom_barrier(g);
    finish(a, g);
    return NULL;
}

/* n members in threads running fn; their reports in a[]. */
static void run(int n, void *(*fn)(void *), enum fail_how how,
                struct member *a)
{
    static rt_mesh_t m[MAX_N];
    pthread_t th[MAX_N];
    pthread_barrier_t ready;

    rt_mesh_local(m, n);
    pthread_barrier_init(&ready, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        a[i] = (struct member){.m = &m[i], .how = how, .ready = &ready};
        ITEST_ASSERT_EQ(pthread_create(&th[i], NULL, fn, &a[i]), 0,
                        "pthread_create");
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&ready);
    for (int i = 0; i < n; i++) pscom_close_socket(m[i].sock);
}

static void check_bcast(const struct member *a)
{
    ITEST_ASSERT(a[0].state & PSCOM_REQ_STATE_DONE, "the root's broadcast");
    for (int i = 1; i <= 2; i++)
        ITEST_ASSERT(a[i].state & PSCOM_REQ_STATE_ERROR,
                     "member %d, at or below the failure, fails (state %s)",
                     i, pscom_req_state_str(a[i].state));
    for (int i = 3; i <= 4; i++) {
        ITEST_ASSERT(pscom_req_state_successful(a[i].state),
                     "member %d, away from the failure (state %s)", i,
                     pscom_req_state_str(a[i].state));
        ITEST_ASSERT(!strcmp(a[i].data, "hello"), "member %d's data", i);
    }
}

static int loop_main(itest_link_t *link, void *arg)
{
    (void)link;
    (void)arg;
    struct member a[MAX_N];
    pscom_err_t rc = pscom_init_thread(PSCOM_VERSION);
    ITEST_ASSERT_EQ(rc, PSCOM_SUCCESS, "pscom_init_thread");
    itest_watchdog(WATCHDOG);

    itest_step("broadcast after a closed connection");
    run(5, bcast_member, CLOSE, a);
    check_bcast(a);
    itest_step("broadcast after a failed connection");
    run(5, bcast_member, FAIL, a);
    check_bcast(a);
    itest_step("barriers after a closed connection");
    run(4, barrier_member, CLOSE, a);
    itest_step("barriers after a failed connection");
    run(4, barrier_member, FAIL, a);
    return 0;
}

int main(void)
{
    itest_set_role("main");
    if (!rt_loop_mode()) {
        itest_note("the members are threads: loop transport only");
        return 77;
    }
    itest_child_t c;
    itest_spawn(&c, "loop", loop_main, NULL);
    return itest_child_check(&c);
}
