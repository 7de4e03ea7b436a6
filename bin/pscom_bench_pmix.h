/*
 * pscom_bench under a PMIx launcher (bin/pscom_bench_pmix.c): the ranks
 * bootstrap through libpscom_pmix and run the benchmark pair by pair over
 * the connections it made. pscom_bench.c hands in its two sides as
 * callbacks, so the measuring code stays in one place.
 */
#ifndef PSCOM_BENCH_PMIX_H_
#define PSCOM_BENCH_PMIX_H_

#include "pscom.h"

struct pscom_bench_pmix_ops {
    const void *opts; /* pscom_bench's options, passed back unchanged */
    /* pscom_init and a socket set up as for the other modes. */
    pscom_socket_t *(*open_socket)(const void *opts);
    /* The measuring side (prints the results) and the serving side of one
     * pair, over `con`. Both leave the socket and the connection open. 0 on
     * success; they end the process on failure. */
    int (*client)(const void *opts, pscom_socket_t *sock,
                  pscom_connection_t *con, int rank, int peer);
    int (*server)(const void *opts, pscom_socket_t *sock,
                  pscom_connection_t *con, int rank, int peer);
};

/* 1 when the environment of a PMIx launcher is present (PMIX_RANK or
 * PMIX_NAMESPACE), else 0. */
int pscom_bench_pmix_present(void);

/* Bootstrap the job, then run rank 0 against rank 1 (all_pairs 0) or every
 * pair i < j in turn (all_pairs 1), with a barrier after each pair. Every
 * rank must call it. The socket stays open (the caller closes it). Returns
 * the exit status for main(). */
int pscom_bench_pmix_run(const struct pscom_bench_pmix_ops *ops, int all_pairs);

#endif /* PSCOM_BENCH_PMIX_H_ */
