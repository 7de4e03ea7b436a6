/*
 * pmix_bootstrap — how long a PMIx job takes until every rank can talk to
 * every other, with on-demand and with all-at-once connections.
 *
 * Run it as the ranks of a job (bench/bootstrap-times does, for several
 * sizes, modes and launchers):
 *
 *   mpirun -np 8 pmix_bootstrap [--mode ondemand|direct|env] [--json]
 *                               [--label TEXT]
 *
 * Phases, timed on every rank:
 *   init       pscom_pmix_init (PMIx_Init, handler registration)
 *   bootstrap  pscom_pmix_bootstrap, started together after a barrier:
 *              put, fence with data collection, endpoint reads, and either
 *              on-demand preparation or all connections
 *   first      a first all-to-all of 8-byte messages: on demand, this is
 *              where the connections are made
 *   second     the same again, with every connection up
 *   ready      bootstrap + first: from the barrier until this rank has
 *              exchanged a message with every other rank
 * Rank 0 collects the figures (over pscom) and prints the maximum and mean
 * over the ranks of each, one line (or one JSON object with --json).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pscom.h"
#include "pscom_pmix.h"

enum { PH_INIT, PH_BOOT, PH_FIRST, PH_SECOND, PH_READY, PH_N };
static const char *const ph_names[PH_N] = {"init", "bootstrap", "first",
                                           "second", "ready"};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void die(int rank, const char *what, pscom_err_t rc)
{
    fprintf(stderr, "pmix_bootstrap rank %d: %s failed: %s\n", rank, what,
            pscom_err_str(rc));
    exit(1);
}

static void alltoall(pscom_pmix_job_t *job)
{
    int n = pscom_pmix_size(job), me = pscom_pmix_rank(job);
    pscom_request_t **rr = calloc((size_t)n, sizeof(*rr));
    pscom_request_t **sr = calloc((size_t)n, sizeof(*sr));
    uint64_t *in = calloc((size_t)n, sizeof(*in)), out = (uint64_t)me;

    if (!rr || !sr || !in) die(me, "allocation", PSCOM_ERR_STDERROR);
    for (int r = 0; r < n; r++) {
        if (r == me) continue;
        rr[r] = pscom_request_create(0, 0);
        rr[r]->connection = pscom_pmix_connection(job, r);
        rr[r]->socket = pscom_pmix_socket(job);
        rr[r]->data = &in[r];
        rr[r]->data_len = sizeof(in[r]);
        pscom_post_recv(rr[r]);
    }
    for (int k = 1; k < n; k++) {
        int r = (me + k) % n;
        sr[r] = pscom_request_create(0, 0);
        pscom_req_prepare(sr[r], pscom_pmix_connection(job, r), &out,
                          sizeof(out), NULL, 0);
        pscom_post_send(sr[r]);
    }
    for (int r = 0; r < n; r++) {
        if (r == me) continue;
        pscom_wait(rr[r]);
        pscom_wait(sr[r]);
        if (!pscom_req_successful(rr[r]) || !pscom_req_successful(sr[r]) ||
            in[r] != (uint64_t)r) {
            fprintf(stderr, "pmix_bootstrap rank %d: exchange with rank %d "
                    "failed (%s / %s)\n", me, r,
                    pscom_req_state_str(rr[r]->state),
                    pscom_req_state_str(sr[r]->state));
            exit(1);
        }
        pscom_request_free(rr[r]);
        pscom_request_free(sr[r]);
    }
    free(rr);
    free(sr);
    free(in);
}

int main(int argc, char **argv)
{
    const char *mode = "env", *label = NULL;
    int json = 0;
    unsigned flags = 0;
    double t[PH_N], t0;
    pscom_pmix_job_t *job;
    pscom_err_t rc;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            mode = argv[++i];
        } else if (!strcmp(argv[i], "--label") && i + 1 < argc) {
            label = argv[++i];
        } else {
            fprintf(stderr, "usage: pmix_bootstrap [--mode ondemand|direct|env] "
                    "[--json] [--label TEXT]\n");
            return 2;
        }
    }
    if (!strcmp(mode, "ondemand")) {
        flags = PSCOM_PMIX_BOOT_ONDEMAND;
    } else if (!strcmp(mode, "direct")) {
        flags = PSCOM_PMIX_BOOT_DIRECT;
    } else if (strcmp(mode, "env")) {
        fprintf(stderr, "pmix_bootstrap: --mode is ondemand, direct or env\n");
        return 2;
    } else {
        int od = 1;
        pscom_env_get_int(&od, "PSP_ONDEMAND");
        mode = od ? "ondemand" : "direct";
    }

    pscom_init(PSCOM_VERSION);
    t0 = now_ms();
    rc = pscom_pmix_init(&job);
    if (rc) die(-1, "pscom_pmix_init", rc);
    t[PH_INIT] = now_ms() - t0;
    int me = pscom_pmix_rank(job), n = pscom_pmix_size(job);
    pscom_socket_t *sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, 0);

    rc = pscom_pmix_barrier(job); /* start the clocks together */
    if (rc) die(me, "pscom_pmix_barrier", rc);
    t0 = now_ms();
    rc = pscom_pmix_bootstrap(job, sock, flags);
    if (rc) die(me, "pscom_pmix_bootstrap", rc);
    t[PH_BOOT] = now_ms() - t0;
    double t1 = now_ms();
    alltoall(job);
    t[PH_FIRST] = now_ms() - t1;
    t[PH_READY] = now_ms() - t0;
    t1 = now_ms();
    alltoall(job);
    t[PH_SECOND] = now_ms() - t1;

    if (me != 0) {
        pscom_send(pscom_pmix_connection(job, 0), NULL, 0, t, sizeof(t));
    } else {
        double max[PH_N], sum[PH_N];
        for (int p = 0; p < PH_N; p++) max[p] = sum[p] = t[p];
        for (int r = 1; r < n; r++) {
            double u[PH_N];
            rc = pscom_recv_from(pscom_pmix_connection(job, r), NULL, 0, u,
                                 sizeof(u));
            if (rc) die(me, "collecting the figures", rc);
            for (int p = 0; p < PH_N; p++) {
                if (u[p] > max[p]) max[p] = u[p];
                sum[p] += u[p];
            }
        }
        if (json) {
            printf("{\"ranks\": %d, \"mode\": \"%s\"", n, mode);
            if (label) printf(", \"label\": \"%s\"", label);
            for (int p = 0; p < PH_N; p++)
                printf(", \"%s_ms_max\": %.3f, \"%s_ms_mean\": %.3f",
                       ph_names[p], max[p], ph_names[p], sum[p] / n);
            printf("}\n");
        } else {
            printf("%s %d %s", label ? label : "-", n, mode);
            for (int p = 0; p < PH_N; p++)
                printf(" %.3f/%.3f", max[p], sum[p] / n);
            printf("\n");
        }
        fflush(stdout);
    }
    rc = pscom_pmix_barrier(job);
    if (rc) die(me, "the final barrier", rc);
    pscom_pmix_finalize(job);
    pscom_close_socket(sock);
    return 0;
}
