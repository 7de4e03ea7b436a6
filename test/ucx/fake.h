/*
 * Stand-ins for the two things the ucx plugin talks to, so its logic runs
 * in one process without UCX and without the pscom core:
 *
 *   fake_wrap.c  implements ucx_wrap.h: it records every send, receive and
 *                close the plugin starts, and lets the test complete them
 *                (in any order, with any status) and deliver active
 *                messages to the plugin's callback.
 *   fake_core.c  implements the connection services of pscom_plugin.h over
 *                one send queue of frames and a small receive state
 *                machine that records the messages the plugin delivers;
 *                test/fake_core the rest (configuration, logging).
 */
#ifndef UCX_TEST_FAKE_H
#define UCX_TEST_FAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fake_core_common.h"
#include "pscom_plugin.h"
#include "ucx_wrap.h"

/* ---------------------------------------------------------------------- */
/* fake_wrap.c                                                            */
/* ---------------------------------------------------------------------- */

#define FAKE_MAX_OPS 64

struct fake_send {
    uxw_ep_t *ep;
    unsigned id;
    uint8_t hdr[1024];
    size_t hdr_len;
    uint8_t data[1 << 16]; /* the data iovecs, gathered */
    size_t data_len;
    const struct iovec *iov; /* as given: UCX reads it until done */
    int iovcnt;
    int proto; /* UXW_SEND_* */
    const uxw_op_t *op;
    bool pending; /* the plugin waits for op */
};

struct fake_recv {
    void *desc;
    void *buf;
    size_t len;
    const uxw_op_t *op;
    bool pending;
};

/* A one-sided step the plugin started: put, get or flush. */
struct fake_rma {
    char kind; /* 'p', 'g', 'f' */
    uxw_ep_t *ep;
    void *buf;
    size_t len;
    uint64_t raddr;
    uxw_rkey_t *rkey;
    const uxw_op_t *op;
    bool pending;
};

struct fake_wrap {
    /* Behaviour, set by the test. */
    int put_result, get_result, flush_result; /* UXW_OK, UXW_PENDING, error */
    int map_result;       /* 0 or an error of uxw_mem_map */
    size_t key_len;       /* bytes of the packed UCX key */
    bool rma_in_progress; /* uxw_worker_progress completes pending steps */
    int send_result;      /* UXW_OK, UXW_PENDING or an error */
    int recv_result;      /* UXW_OK (fills the buffer now) or UXW_PENDING */
    int ep_create_result; /* 0 or an error */
    int close_result;     /* UXW_OK or UXW_PENDING */
    /* An operation that is to be under way (UXW_PENDING) ends with
     * end_status inside the call that starts it, as UCX ends those of a
     * failing endpoint; the call still returns UXW_PENDING. */
    bool end_inside;
    int end_status;
    size_t max_am_header;

    /* What happened. */
    struct fake_send sends[FAKE_MAX_OPS];
    int nsends;
    struct fake_recv recvs[FAKE_MAX_OPS];
    int nrecvs;
    int releases;   /* uxw_am_release calls */
    void *released; /* the last data given back */
    int ep_creates;
    int ep_peer_errors; /* the mode of the last endpoint */
    int ep_closes;
    int ep_close_force;
    /* A forced close ends the receives under way with a status (UCX
     * purges an endpoint's operations); 0: they stay pending. */
    int force_close_status;
    int workers;    /* alive */
    int contexts;   /* alive, not taken by a worker */
    int ctx_rma;    /* the last context was created with RMA */
    struct fake_rma rmas[FAKE_MAX_OPS];
    int nrmas;
    int maps;       /* mapped regions alive */
    int rkeys;      /* unpacked keys alive */

    /* Run inside the next uxw_worker_progress (then cleared): arrivals
     * during UCX's progress, as UCX calls the AM callback. */
    void (*in_progress)(void);

    /* The worker's callbacks. */
    uxw_am_cb_t am_cb;
    void *am_arg;
    uxw_ep_err_cb_t err_cb;
    void *err_arg;
    const uxw_op_t *close_op;
};

extern struct fake_wrap fw;

void fake_wrap_reset(void);
/* Complete send i (UCX no longer needs its buffers). */
void fake_send_complete(int i, int status);
/* Complete receive i: fill its buffer from src (len bytes). */
void fake_recv_complete(int i, const void *src, int status);
/* An active message arrives: the plugin's AM callback result. */
int fake_am(unsigned id, const void *hdr, size_t hdr_len, void *data,
            size_t len, unsigned flags);
/* Complete one-sided step i (a get copies from raddr now). */
void fake_rma_complete(int i, int status);
/* UCX reports the endpoint failed. */
void fake_ep_error(uxw_ep_t *ep, int status);
/* The endpoint of the last uxw_ep_create. */
uxw_ep_t *fake_last_ep(void);

/* ---------------------------------------------------------------------- */
/* fake_core.c                                                            */
/* ---------------------------------------------------------------------- */

#define FAKE_MAX_FRAMES 32
#define FAKE_MAX_MSGS   32
/* Room for any frame head (header and the longest xheader) while it is
 * collected, so that what a peer sends cannot overflow the fake
 * (test/fuzz/fuzz_ucx_am.c); a message keeps the first 512 bytes. */
#define FAKE_HEAD_MAX   (8 + 65535)

struct psc_con {
    /* Send queue: frames of head + body, `left` bytes not yet done. Each
     * frame stays where it is while queued, as a request does. */
    struct fake_frame {
        uint8_t head[512];
        size_t head_len;
        void *body;
        size_t body_len;
        size_t left;
    } *q[FAKE_MAX_FRAMES];
    int qn;
    size_t done_calls[FAKE_MAX_FRAMES * 2]; /* the n of each tx_done */
    int ndone;
    bool closing; /* upcalls return -1 */
    int lent, returned; /* pscom_plugin_tx_lend, _tx_returned */

    /* Receive side: messages as the core saw them. */
    struct fake_msg {
        uint8_t head[512];
        size_t head_len;
        uint8_t body[1 << 16];
        size_t body_len; /* bytes that arrived (pushed or direct) */
        size_t direct;   /* of which straight into the direct buffer */
        /* Taken out of line (pscom_plugin_rx_defer) into defer_buf. */
        bool deferred;
        bool defer_done; /* ... and finished (rx_defer_done) */
        int defer_err;
        void *defer_buf;
        size_t defer_len;
        bool now; /* taken by pscom_plugin_rx_now */
    } msgs[FAKE_MAX_MSGS];
    int nmsgs;
    /* Receive state: header bytes collected, body bytes left. */
    uint8_t hbuf[FAKE_HEAD_MAX];
    size_t have, need;
    size_t body_left;
    bool in_body;
    /* pscom_plugin_rx_now takes whole messages (a receive is posted). */
    bool take_now;
    /* A buffer for rx_direct (the posted receive), or NULL. */
    void *direct_buf;
    size_t direct_len;
    /* Bodies that fit direct_buf may be deferred; each takes the next part
     * of it. The order in which deferred messages were finished. */
    bool defer;
    int defer_order[FAKE_MAX_MSGS];
    int ndefer_done;

    /* Errors reported. */
    int errors;
    pscom_op_t err_op;
    pscom_err_t err;
    char err_what[256];

    /* File descriptors the plugin watches. */
    int fd_added;
    int fd; /* the watched descriptor */
    pscom_plugin_fd_cb_t fd_cb;
    void *fd_arg;
};

/* pscom_plugin_rma_done calls, in order, and a hook run inside each. */
struct fake_rma_done {
    void *token;
    int err;
    int con_errors; /* errors reported on the connection before it */
};
#define FAKE_MAX_DONE 64
extern struct fake_rma_done fake_done[FAKE_MAX_DONE];
extern int fake_ndone;
extern struct psc_con *fake_done_con; /* whose errors fake_done records */
extern void (*fake_done_hook)(void *token, int err);

void fake_con_init(struct psc_con *c);
/* Queue a frame: an 8-byte header with xlen bytes of xheader and a body. */
struct fake_frame *fake_queue(struct psc_con *c, size_t xlen, void *body,
                              size_t body_len);
/* Drop frame i from the queue (a cancelled send). */
void fake_unqueue(struct psc_con *c, int i);
/* Build a frame head (header + xlen bytes of xheader) into out. */
size_t fake_head(uint8_t *out, size_t xlen, uint64_t data_len, uint8_t fill);
/* The socket every fake connection belongs to. */
extern pscom_socket_t *fake_socket;

#endif /* UCX_TEST_FAKE_H */
