/*
 * Oversubscription: 6 processes pinned to 2 cores exchange all-to-all over
 * shm, with every byte checked, in the default busy-polling mode. Progress
 * must not spin inside the plugin: a process waiting for a peer that is not
 * running has to give the core up (the core yields after a number of idle
 * rounds), or the job crawls. The test fails when a process's watchdog
 * fires (OVERSUB_TIMEOUT seconds; a healthy run takes a few).
 */
#include "itest.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPROC           6
#define ROUNDS          30
#define OVERSUB_TIMEOUT 100

static const size_t sizes[] = {8, 4096, 200 * 1024, (1u << 20) + 7, 64 * 1024,
                               0, 1000};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static int cores[2];

static uint32_t seed(int src, int dst, int round)
{
    return (uint32_t)(src * 7919 + dst * 131 + round * 1009 + 1);
}

/* CPU sets of this many CPUs (CPU_ALLOC): more than Linux numbers (8192),
 * not just the 1024 of a cpu_set_t. */
#define NCPUS 32768
#define SETSIZE CPU_ALLOC_SIZE(NCPUS)

static void pin_two_cores(void)
{
    cpu_set_t *set = CPU_ALLOC(NCPUS);
    ITEST_ASSERT(set, "out of memory");
    CPU_ZERO_S(SETSIZE, set);
    CPU_SET_S(cores[0], SETSIZE, set);
    CPU_SET_S(cores[1], SETSIZE, set);
    ITEST_ASSERT(sched_setaffinity(0, SETSIZE, set) == 0,
                 "sched_setaffinity(cores %d,%d)", cores[0], cores[1]);
    CPU_FREE(set);
}

static int rank_of(pscom_connection_t *con)
{
    const char *name = con->remote_con_info.name;
    if (name[0] != 'r' || name[1] < '0' || name[1] >= '0' + NPROC) return -1;
    return name[1] - '0';
}

static int member(itest_link_t *link, void *arg)
{
    int me = (int)(intptr_t)arg;
    char name[8];
    pscom_connection_t *cons[NPROC] = {0};

    pin_two_cores();
    itest_pscom_init();
    snprintf(name, sizeof(name), "r%d", me);
    pscom_socket_t *sock = itest_open_socket(name, 1);
    char *ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);

    /* Connect to the higher ranks, accept the lower ones. */
    char *eps[NPROC];
    for (int j = 0; j < NPROC; j++) eps[j] = itest_link_recv_str(link);
    for (int j = me + 1; j < NPROC; j++) {
        itest_step("connecting to r%d", j);
        cons[j] = itest_connect(sock, eps[j]);
    }
    if (me > 0) {
        itest_step("waiting for %d connections", me);
        itest_wait_accept(me);
        for (int i = 0; i < itest_accept_count(); i++) {
            pscom_connection_t *c = itest_accepted(i);
            int r = rank_of(c);
            ITEST_ASSERT(r >= 0 && r < me && !cons[r],
                         "accepted a connection from \"%.8s\"",
                         c->remote_con_info.name);
            cons[r] = c;
        }
    }
    for (int j = 0; j < NPROC; j++) {
        free(eps[j]);
        if (j == me) continue;
        ITEST_ASSERT(cons[j] && cons[j]->type == PSCOM_CON_TYPE_SHM,
                     "connection to r%d is %s, not shm", j,
                     cons[j] ? pscom_con_type_str(cons[j]->type) : "missing");
    }

    itest_step("all-to-all, %d rounds", ROUNDS);
    size_t max = 0;
    for (size_t s = 0; s < N_SIZES; s++)
        if (sizes[s] > max) max = sizes[s];
    void *sbuf[NPROC], *rbuf[NPROC];
    pscom_request_t *sreq[NPROC], *rreq[NPROC];
    for (int j = 0; j < NPROC; j++) {
        sbuf[j] = malloc(max ? max : 1);
        rbuf[j] = itest_alloc_guarded(max);
        sreq[j] = itest_request(0);
        rreq[j] = itest_request(0);
    }
    double t0 = itest_now();
    for (int round = 0; round < ROUNDS; round++) {
        size_t size = sizes[round % N_SIZES];
        pscom_request_t *all[2 * NPROC + 1];
        int n = 0;
        itest_substep("round %d, %zu bytes", round, size);
        for (int j = 0; j < NPROC; j++) {
            if (j == me) continue;
            pscom_req_prepare(rreq[j], cons[j], rbuf[j], size, NULL, 0);
            rreq[j]->socket = sock;
            pscom_post_recv(rreq[j]);
            all[n++] = rreq[j];
        }
        for (int k = 1; k < NPROC; k++) {
            int j = (me + k) % NPROC; /* spread the senders over the peers */
            itest_fill(sbuf[j], size, seed(me, j, round));
            pscom_req_prepare(sreq[j], cons[j], sbuf[j], size, NULL, 0);
            pscom_post_send(sreq[j]);
            all[n++] = sreq[j];
        }
        all[n] = NULL;
        pscom_wait_all(all);
        for (int j = 0; j < NPROC; j++) {
            if (j == me) continue;
            ITEST_ASSERT_REQ_OK(sreq[j], "round %d: send to r%d", round, j);
            ITEST_ASSERT_REQ_OK(rreq[j], "round %d: receive from r%d", round, j);
            ITEST_ASSERT_EQ(rreq[j]->header.data_len, size,
                            "round %d: length from r%d", round, j);
            ITEST_ASSERT_PATTERN(rbuf[j], size, seed(j, me, round),
                                 "round %d: %zu bytes from r%d", round, size, j);
            ITEST_ASSERT_GUARD(rbuf[j], max, "round %d from r%d", round, j);
        }
    }
    double t = itest_now() - t0;
    itest_link_send_double(link, t);

    /* Stay until everybody is done: a closing peer is not a failure. */
    itest_link_recv_u64(link);
    for (int j = 0; j < NPROC; j++) {
        free(sbuf[j]);
        free(rbuf[j]);
        pscom_request_free(sreq[j]);
        pscom_request_free(rreq[j]);
    }
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_child_t kids[NPROC];
    itest_child_t *list[NPROC];
    char *eps[NPROC];

    setenv("PSCOM_TEST_TRANSPORT", "shm", 1);
    itest_watchdog(OVERSUB_TIMEOUT + 10);
    /* The first two cores this process may run on. */
    cpu_set_t *set = CPU_ALLOC(NCPUS);
    ITEST_ASSERT(set, "out of memory");
    ITEST_ASSERT(sched_getaffinity(0, SETSIZE, set) == 0, "sched_getaffinity");
    int n = 0;
    for (int c = 0; c < NCPUS && n < 2; c++)
        if (CPU_ISSET_S(c, SETSIZE, set)) cores[n++] = c;
    CPU_FREE(set);
    if (n == 1) cores[1] = cores[0];
    itest_note("%d processes on cores %d,%d, %d rounds of all-to-all, "
               "PSP_SCHED_YIELD=%s", NPROC, cores[0], cores[1], ROUNDS,
               getenv("PSP_SCHED_YIELD") ? getenv("PSP_SCHED_YIELD") : "(unset)");

    for (int i = 0; i < NPROC; i++) {
        char role[16];
        snprintf(role, sizeof(role), "r%d", i);
        itest_spawn(&kids[i], role, member, (void *)(intptr_t)i);
        itest_watchdog(OVERSUB_TIMEOUT + 10);
        list[i] = &kids[i];
    }
    for (int i = 0; i < NPROC; i++) eps[i] = itest_link_recv_str(&kids[i].link);
    for (int i = 0; i < NPROC; i++)
        for (int j = 0; j < NPROC; j++) itest_link_send_str(&kids[i].link, eps[j]);
    double worst = 0;
    for (int i = 0; i < NPROC; i++) {
        double t = itest_link_recv_double(&kids[i].link);
        if (t > worst) worst = t;
    }
    for (int i = 0; i < NPROC; i++) itest_link_send_u64(&kids[i].link, 0);
    int failed = itest_children_check(list, NPROC);
    for (int i = 0; i < NPROC; i++) free(eps[i]);
    itest_note("all-to-all took %.2f s in the slowest process; %s", worst,
               failed ? "FAILED" : "passed");
    return failed;
}
