/*
 * Helpers of the one-sided and group tests.
 *
 * The tests play the part ParaStation MPI plays: they put their own type
 * behind every RMA xheader (struct rt_user: operation, datatype, origin),
 * and the target callbacks they register do the arithmetic of the
 * accumulate family, as MPI's do. The library only moves bytes and calls
 * them.
 *
 * Transports: PSCOM_TEST_TRANSPORT=tcp (default), shm, or loop. With loop
 * every "process" of a test is a socket in one process, connected to the
 * others in-process.
 */
#ifndef RMA_UTIL_H
#define RMA_UTIL_H

#include <stdbool.h>
#include <stdint.h>

struct rt_user {
    uint32_t op;     /* enum rt_op */
    uint32_t dtype;  /* enum rt_dtype */
    uint32_t origin; /* the origin's rank */
    uint32_t tag;
};

#define PSCOM_XHEADER_RMA_PUT_USER_TYPE            struct rt_user
#define PSCOM_XHEADER_RMA_ACCUMULATE_USER_TYPE     struct rt_user
#define PSCOM_XHEADER_RMA_GET_USER_TYPE            struct rt_user
#define PSCOM_XHEADER_RMA_GET_ACCUMULATE_USER_TYPE struct rt_user
#define PSCOM_XHEADER_RMA_FETCH_OP_USER_TYPE       struct rt_user
#define PSCOM_XHEADER_RMA_COMPARE_SWAP_USER_TYPE   struct rt_user

#include "itest.h"

#define RT_MAX_PROCS 8

/* ---------------------------------------------------------------------- */
/* Processes connected to each other                                      */
/* ---------------------------------------------------------------------- */

typedef struct rt_mesh {
    int n;
    int me;
    pscom_socket_t *sock;
    pscom_connection_t *con[RT_MAX_PROCS]; /* NULL at `me` */
} rt_mesh_t;

/* PSCOM_TEST_TRANSPORT=loop: all members live in one process. */
bool rt_loop_mode(void);

/* pscom_init (once), for the transport under test. */
void rt_init(void);

/* A member process: open socket "r<me>" with rank me, send its endpoint to
 * the orchestrator, get everybody's, connect (higher ranks connect to lower
 * ones) and wait until every connection is up. Checks that every
 * connection uses the transport under test. */
void rt_mesh_join(rt_mesh_t *m, itest_link_t *link, int n, int me);

/* The orchestrator's part of rt_mesh_join for children kids[0..n-1]. */
void rt_mesh_wire(itest_child_t *kids, int n);

/* Loop mode: n meshes in this process, connected in-process. */
void rt_mesh_local(rt_mesh_t *m, int n);

/* ---------------------------------------------------------------------- */
/* The "application's" accumulate arithmetic                              */
/* ---------------------------------------------------------------------- */

enum rt_dtype {
    RT_I8, RT_I16, RT_I32, RT_I64, RT_U8, RT_U16, RT_U32, RT_U64,
    RT_F32, RT_F64, RT_DTYPE_COUNT
};

enum rt_op {
    RT_SUM, RT_PROD, RT_MIN, RT_MAX, RT_BAND, RT_BOR, RT_BXOR, RT_LAND,
    RT_LOR, RT_LXOR, RT_REPLACE, RT_NO_OP, RT_OP_COUNT
};

size_t rt_dtype_size(unsigned dtype);
const char *rt_dtype_name(unsigned dtype);
const char *rt_op_name(unsigned op);
/* Is the operation defined for the type (MPI: no bit operations on
 * floating point)? */
bool rt_op_valid(unsigned op, unsigned dtype);
/* dst[i] = dst[i] op src[i] for count elements. */
void rt_apply(unsigned op, unsigned dtype, void *dst, const void *src,
              size_t count);
/* Fill count elements with small values that stay exact in every type. */
void rt_values(unsigned dtype, void *buf, size_t count, unsigned seed);

/* ---------------------------------------------------------------------- */
/* Target side                                                            */
/* ---------------------------------------------------------------------- */

/* How often the target callbacks of one region ran. */
typedef struct rt_counts {
    unsigned long n[PSCOM_RMA_OP_COUNT];
    unsigned long bad; /* callbacks that saw something wrong */
} rt_counts_t;

/* Register the six callbacks of the tests for memh; they count into
 * *counts, which this zeroes (and which must live as long as the
 * region). */
void rt_register_callbacks(pscom_memh_t memh, rt_counts_t *counts);

/* ---------------------------------------------------------------------- */
/* Origin side                                                            */
/* ---------------------------------------------------------------------- */

typedef struct rt_op_args {
    pscom_rma_op_t kind;
    pscom_connection_t *con;
    pscom_rkey_t rkey;
    void *target;  /* address at the target */
    void *origin;  /* operand / put source / get destination */
    void *result;  /* get-accumulate, fetch-and-op, compare-and-swap */
    void *compare; /* compare-and-swap */
    size_t len;
    unsigned op, dtype, origin_rank;
} rt_op_args_t;

/* A request for the operation, posted; io_done unset unless `done` is
 * given. */
pscom_request_t *rt_post(const rt_op_args_t *a,
                         void (*done)(pscom_request_t *req));

/* Post, wait, and return the final state (the request is freed). */
pscom_req_state_t rt_do(const rt_op_args_t *a);

/* Send a small control message of two words / receive one. */
void rt_ctl_send(pscom_connection_t *con, uint32_t cmd, uint64_t arg);
void rt_ctl_recv(pscom_connection_t *con, uint32_t *cmd, uint64_t *arg);

/* Exchange a packed key over pscom, with the region's address: the target
 * sends, the origin receives and generates the remote key. */
void rt_key_send(pscom_connection_t *con, pscom_memh_t memh, void *base);
pscom_rkey_t rt_key_recv(pscom_connection_t *con, void **target_base);

#endif
