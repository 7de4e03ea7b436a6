/*
 * pscom_bench under a PMIx launcher: bootstrap through libpscom_pmix, then
 * run pairs. The lower rank of a pair is the client (it measures and
 * prints), the higher the server; the output per pair is the same as that
 * of a two-process run, and the connection line of its header names both
 * ranks.
 */
#include <stdio.h>
#include <stdlib.h>

#include "pscom_bench_pmix.h"
#include "pscom_pmix.h"

int pscom_bench_pmix_present(void)
{
    return getenv("PMIX_RANK") != NULL || getenv("PMIX_NAMESPACE") != NULL;
}

static void die(int rank, const char *what, pscom_err_t rc)
{
    fprintf(stderr, "pscom_bench (rank %d): %s failed: %s\n", rank, what,
            pscom_err_str(rc));
    fflush(stdout);
    exit(1);
}

int pscom_bench_pmix_run(const struct pscom_bench_pmix_ops *ops, int all_pairs)
{
    pscom_pmix_job_t *job;
    pscom_socket_t *sock;
    pscom_err_t rc;
    int me, n, ret = 0;

    /* The socket first: it runs pscom_init as the other modes do. */
    sock = ops->open_socket(ops->opts);
    rc = pscom_pmix_init(&job);
    if (rc != PSCOM_SUCCESS) die(-1, "pscom_pmix_init", rc);
    me = pscom_pmix_rank(job);
    n = pscom_pmix_size(job);
    if (pscom_pmix_is_singleton(job) || n < 2) {
        fprintf(stderr, "pscom_bench (rank %d): the PMIx job has %d rank(s); "
                "start at least 2 (pscom_run -n 2, mpirun -np 2)\n", me, n);
        exit(1);
    }
    rc = pscom_pmix_bootstrap(job, sock, 0);
    if (rc != PSCOM_SUCCESS) die(me, "pscom_pmix_bootstrap", rc);

    for (int a = 0; a < n - 1; a++) {
        for (int b = a + 1; b < n; b++) {
            if (me == a)
                ret |= ops->client(ops->opts, sock,
                                   pscom_pmix_connection(job, b), me, b);
            else if (me == b)
                ret |= ops->server(ops->opts, sock,
                                   pscom_pmix_connection(job, a), me, a);
            /* One pair at a time, and its output before the next one's. */
            fflush(stdout);
            rc = pscom_pmix_barrier(job);
            if (rc != PSCOM_SUCCESS) die(me, "the barrier after a pair", rc);
            if (!all_pairs) goto done;
        }
    }
done:
    pscom_pmix_finalize(job);
    return ret ? 1 : 0;
}
