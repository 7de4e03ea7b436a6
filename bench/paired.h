/*
 * The driver of bench/ucx_paired and bench/ofi_paired: pscom over one of
 * its plugins against that library's own ping-pong (the loop its tool runs:
 * ucx_perftest -t tag_lat, fi_pingpong -e rdm -m tagged), in the same two
 * processes, in alternating blocks of iterations.
 *
 * Why: on a VM the host moves the two vCPUs between physical cores every
 * second or so, and a message between them takes 0.09, 0.2 or 0.6 us
 * depending on where they are (sibling threads, one L3 cache, two). One
 * run of a tool lasts a few milliseconds and lands on one of these, so
 * two tools run one after the other compare placements as much as
 * libraries. Here a block of pscom and a block of the library follow each
 * other within a millisecond, mostly on the same placement, and the ratio
 * is taken per pair of blocks (their order alternates from pair to pair).
 *
 * The driver (paired.c) forks, sets up pscom, runs the blocks and reports;
 * a backend (paired_ucx.c, paired_ofi.c) supplies the library's side.
 */
#ifndef PSCOM_BENCH_PAIRED_H_
#define PSCOM_BENCH_PAIRED_H_

#include <stdbool.h>
#include <stddef.h>

#include "pscom.h"

struct side {
    bool client;
    int fd; /* to the peer, for the set-up */
    size_t size;
    unsigned iters, warm;
    void *sbuf, *rbuf;
    void *raw; /* the backend's state */
    /* pscom */
    pscom_socket_t *sock;
    pscom_connection_t *con;
    pscom_request_t *sreq, *rreq;
    double *times;
};

/* A length-prefixed blob to the peer, and the peer's back (malloc'd, with
 * a NUL after it). */
void *swap_blob(int fd, const void *mine, size_t len, size_t *peer_len);

/* The backend. */
struct backend {
    const char *prog;   /* "ucx_paired" */
    const char *raw;    /* "UCX tag ping-pong" */
    const char *plugin; /* "ucx" */
    pscom_con_type_t con_type;
    const char *env;    /* the variable that picks the transport */
};
extern const struct backend backend;
/* What raw_setup may set: how the library's side runs, when not as its tool
 * does by default (a line of the report), else NULL. */
extern const char *raw_mode;
void raw_setup(struct side *s);
void raw_send(struct side *s);
void raw_recv(struct side *s);
void raw_teardown(struct side *s);

#endif /* PSCOM_BENCH_PAIRED_H_ */
