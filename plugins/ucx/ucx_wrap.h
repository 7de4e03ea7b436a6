/*
 * A thin layer over the UCX calls the ucx plugin makes (UCP active messages,
 * one context and worker at a time), so that the glue (ucx_plugin.c) sees no
 * UCX type and the unit tests can replace this layer with a fake
 * (test/ucx/fake_wrap.c).
 *
 * Status values are UCX's ucs_status_t numbers: 0 is success, negative is an
 * error (uxw_status_str() names it). Calls that may finish later return
 * UXW_PENDING and a request handle; its callback runs from
 * uxw_worker_progress(), and the handle is released by the wrapper after the
 * callback returned. No callback runs from the call that started the
 * operation; uxw_ep_close() may run the callbacks of the endpoint's other
 * operations (UCX ends them).
 *
 * Thread-safety: none. The plugin calls everything with the library lock
 * held (serialized threads).
 */
#ifndef PSCOM_UCX_WRAP_H
#define PSCOM_UCX_WRAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef struct uxw_worker uxw_worker_t; /* a UCP context and its worker */
typedef struct uxw_ep uxw_ep_t;         /* a UCP endpoint */

#define UXW_OK      0
#define UXW_PENDING 1 /* under way: the callback comes from progress */

/* AM ids of the plugin's two message kinds. */
enum {
    UXW_AM_FRAME = 0,      /* AM header: key + frame head; data: the body */
    UXW_AM_FRAME_LONG = 1, /* AM header: key; data: frame head + body */
    UXW_AM_FRAME_PACKED = 2, /* no AM header; data: an 8-byte prefix (key
                              * and header), xheader, body: pack_frame */
    UXW_AM_BODY = 3,         /* AM header: key + body id; data: a rendezvous
                              * body the receiver pulls (UXW_SEND_RNDV) */
    UXW_AM_IDS
};

/* uxw_am_cb_t flags: what `data` is. */
#define UXW_AM_RNDV    0x1 /* a rendezvous descriptor: fetch with uxw_am_recv() */
#define UXW_AM_KEEPABLE 0x2 /* eager data that may be kept (UXW_AM_KEEP) */

/* uxw_am_cb_t results. */
#define UXW_AM_DONE 0 /* data is not used after the callback */
#define UXW_AM_KEEP 1 /* data (UXW_AM_RNDV or UXW_AM_KEEPABLE) is kept: later
                       * uxw_am_recv() or uxw_am_release() */

/* An arriving active message. `hdr` is valid only during the call; `data`
 * too, unless the callback keeps it. */
typedef int (*uxw_am_cb_t)(void *arg, unsigned id, const void *hdr,
                           size_t hdr_len, void *data, size_t len,
                           unsigned flags);
/* An endpoint failed (the peer died or the link broke). */
typedef void (*uxw_ep_err_cb_t)(void *arg, uxw_ep_t *ep, int status);
/* A send or a close finished. */
typedef void (*uxw_done_cb_t)(void *user, int status);
/* A uxw_am_recv() finished; `len` bytes arrived. */
typedef void (*uxw_recv_cb_t)(void *user, int status, size_t len);

/* What to call when an operation under way ends: cb.recv(user, ...) for
 * uxw_am_recv(), cb.done(user, ...) for the others. It goes to UCX with the
 * operation, so it must stay valid and unchanged until the callback ran.
 * UCX may end an operation, and call back, inside the call that starts it
 * (a failing endpoint purges its requests, a new one included): that call
 * then still returns UXW_PENDING, so a caller counts the operation as under
 * way before it starts it. */
typedef struct uxw_op {
    union {
        uxw_done_cb_t done;
        uxw_recv_cb_t recv;
    } cb;
    void *user;
} uxw_op_t;

/* UCX settings the plugin gives a context (each one only when the user did
 * not set the UCX_ variable). */
typedef struct uxw_config {
    /* Let the shared-memory transports (posix, sysv) serve endpoints in peer
     * error-handling mode (MM_ERROR_HANDLING=y; without it UCX refuses them
     * for such endpoints). */
    int shm_error_handling;
    /* Also offer one-sided operations (UCP_FEATURE_RMA): uxw_mem_map(),
     * uxw_put(), uxw_get(). */
    int rma;
} uxw_config_t;

/* Read the UCX configuration and create a context (active messages only).
 * 0, or a status with a reason in why. The context is owned by the caller:
 * pass it to uxw_worker_create() or free it with uxw_context_destroy(). */
typedef struct uxw_context uxw_context_t;
int uxw_context_create(const uxw_config_t *cfg, uxw_context_t **ctx_p,
                       char *why, size_t why_len);
void uxw_context_destroy(uxw_context_t *ctx);

/* Create a worker on ctx (which it takes over: uxw_worker_destroy() frees
 * both, also when this fails) with am_cb registered for both AM ids. */
int uxw_worker_create(uxw_context_t *ctx, uxw_am_cb_t am_cb, void *am_arg,
                      uxw_worker_t **worker_p, char *why, size_t why_len);
/* Free the worker and its context. Endpoints must be closed first. */
void uxw_worker_destroy(uxw_worker_t *w);
/* The worker's address (owned by the worker) and the largest AM header. */
void uxw_worker_address(uxw_worker_t *w, const void **addr, size_t *len);
size_t uxw_worker_max_am_header(uxw_worker_t *w);
/* One round of progress; the number of events handled. */
unsigned uxw_worker_progress(uxw_worker_t *w);

/* An endpoint to the worker whose address is addr (from the network). A
 * failure is reported to err_cb(err_arg): always in UCX's peer
 * error-handling mode (peer_errors), else when UCX happens to notice it. */
int uxw_ep_create(uxw_worker_t *w, const void *addr, size_t len,
                  int peer_errors, uxw_ep_err_cb_t err_cb, void *err_arg,
                  uxw_ep_t **ep_p);
/* Close ep: flush what was sent first, or (force) drop it. UXW_OK when
 * closed now; UXW_PENDING when op follows; or an error (closed). */
int uxw_ep_close(uxw_worker_t *w, uxw_ep_t *ep, int force, const uxw_op_t *op);

/* uxw_am_send protocols. */
#define UXW_SEND_ANY   0 /* UCX chooses: eager or its rendezvous */
#define UXW_SEND_EAGER 1 /* UCX's eager protocol */
#define UXW_SEND_RNDV  2 /* UCX's rendezvous: the data moves once the
                          * receiver asks for it (uxw_am_recv), or never
                          * (uxw_am_release); the send ends then */
/* Send an active message: hdr (kept by UCX until done, so it must stay valid
 * until then) and the data of iov[0..iovcnt) (0 to 2 entries) with protocol
 * proto (UXW_SEND_*). UXW_OK: done now, op does not run. UXW_PENDING: op
 * follows. Negative: failed. */
int uxw_am_send(uxw_ep_t *ep, unsigned id, const void *hdr, size_t hdr_len,
                const struct iovec *iov, int iovcnt, int proto,
                const uxw_op_t *op);

/* Send buf[0..len) as the data of an AM only if UCX can take it at once
 * (it copies it; UCX's eager short path): UXW_OK, nothing left in UCX
 * then; otherwise a negative status (UCX had no room, or a failure) and
 * nothing was sent. */
int uxw_am_send_now(uxw_worker_t *w, uxw_ep_t *ep, unsigned id,
                    const void *buf, size_t len);

/* Receive the data of a kept AM (desc) into buf[0..len). The descriptor is
 * consumed, also on error. UXW_OK: done now. UXW_PENDING: op follows. */
int uxw_am_recv(uxw_worker_t *w, void *desc, void *buf, size_t len,
                const uxw_op_t *op);
/* Drop kept AM data or a kept rendezvous descriptor. */
void uxw_am_release(uxw_worker_t *w, void *data);

/* ---- One-sided operations (contexts created with uxw_config_t.rma) ---- */

typedef struct uxw_mem uxw_mem_t;   /* a region mapped for peers */
typedef struct uxw_rkey uxw_rkey_t; /* a peer's region, for one endpoint */

/* Map [addr, addr+len) of this process for remote access on the context of
 * w and pack its remote key into key[0..*key_len) (*key_len in: the room,
 * out: the length). UXW_OK and *mem_p; UXW_ERR_KEY_TOO_LONG when the packed
 * key does not fit (nothing stays mapped); or another status. The memory
 * stays the caller's; unmap it with uxw_mem_unmap() before the worker goes. */
#define UXW_ERR_KEY_TOO_LONG (-21) /* UCS_ERR_EXCEEDS_LIMIT */
int uxw_mem_map(uxw_worker_t *w, void *addr, size_t len, void *key,
                size_t *key_len, uxw_mem_t **mem_p);
void uxw_mem_unmap(uxw_worker_t *w, uxw_mem_t *mem);

/* Make a key that uxw_mem_map() packed (at the peer) usable on ep. The
 * buffer is only read during the call. UXW_OK and *rkey_p, or a status. */
int uxw_rkey_unpack(uxw_ep_t *ep, const void *key, uxw_rkey_t **rkey_p);
/* Release an unpacked key; no operation may still use it. */
void uxw_rkey_destroy(uxw_rkey_t *rkey);

/* Write len bytes at src to the peer's raddr (put), or read them from raddr
 * into dst (get). The buffer and rkey stay valid until done. UXW_OK: done
 * now (a put locally: src may be reused), op does not run; UXW_PENDING:
 * op follows; negative: failed. */
int uxw_put(uxw_ep_t *ep, const void *src, size_t len, uint64_t raddr,
            uxw_rkey_t *rkey, const uxw_op_t *op);
int uxw_get(uxw_ep_t *ep, void *dst, size_t len, uint64_t raddr,
            uxw_rkey_t *rkey, const uxw_op_t *op);
/* Every operation started on ep so far is complete at the peer (its puts
 * are in the target's memory) when this is done: UXW_OK now, UXW_PENDING
 * and op later, or negative. */
int uxw_ep_flush(uxw_ep_t *ep, const uxw_op_t *op);

/* A status as a negative errno: -ECONNRESET when the peer is gone,
 * -ECANCELED, -ENOMEM, else -EIO. */
int uxw_status_errno(int status);

/* "Connection reset by remote peer" etc. */
const char *uxw_status_str(int status);
/* 1 when the status means the peer is gone (reset, unreachable, timeout). */
int uxw_status_is_peer_gone(int status);
/* "1.13.1" */
const char *uxw_version(void);

#endif /* PSCOM_UCX_WRAP_H */
