/*
 * Requests: creation, posting, waiting, cancelling and probing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* Room at pub.xheader for `xlen` bytes plus the protocol trailer. */
static size_t xheader_room(size_t xlen)
{
    size_t need = xlen + PSC_XHEADER_SPARE;
    return need > sizeof(pscom_xheader_t) ? need : sizeof(pscom_xheader_t);
}

/* Freed requests kept for reuse: an MPI library creates and frees a
 * request per message, and malloc and free of it cost several percent of
 * a small message's round trip over shared memory. Only while one thread
 * uses the library (the cache has no lock of its own), and not under
 * AddressSanitizer, which should see every use after free. A cached
 * request serves an allocation of the same size. */
#if defined(__SANITIZE_ADDRESS__)
#define REQ_CACHE_SLOTS 0
#else
#define REQ_CACHE_SLOTS 64
#endif
#define REQ_CACHE_SEARCH 8     /* entries looked at, newest first */
#define REQ_CACHE_MAX_SIZE 4096 /* larger ones (pscom_send's copies) are freed */
static struct psc_req *req_cache[REQ_CACHE_SLOTS + 1];
static unsigned req_cached;

static struct psc_req *req_cache_take(size_t size)
{
    unsigned low = req_cached > REQ_CACHE_SEARCH ? req_cached - REQ_CACHE_SEARCH : 0;
    for (unsigned i = req_cached; i-- > low;) {
        struct psc_req *req = req_cache[i];
        if (req->alloc_size != size) continue;
        req_cache[i] = req_cache[--req_cached];
        memset(req, 0, size);
        return req;
    }
    return NULL;
}

static bool req_cache_put(struct psc_req *req)
{
    if (psc_ctx.threaded || req_cached + 1 > REQ_CACHE_SLOTS ||
        req->alloc_size > REQ_CACHE_MAX_SIZE)
        return false;
    req_cache[req_cached++] = req;
    return true;
}

unsigned psc_req_cache_count(void)
{
    return req_cached;
}

void psc_req_cache_drain(void)
{
    while (req_cached) free(req_cache[--req_cached]);
}

/* Where a request of xlen bytes of xheader puts its user storage. */
static size_t req_user_off(size_t xlen)
{
    return (offsetof(struct psc_req, pub.xheader) + xheader_room(xlen) + 15) &
           ~(size_t)15;
}

/* Set up req, `size` bytes zeroed, as psc_req_alloc returns it. */
static void req_init(struct psc_req *req, size_t size, size_t user_off,
                     size_t xlen, size_t user_size)
{
    req->magic = PSC_REQ_MAGIC;
    /* Only the cache reads it, which takes none larger than 4 KiB. */
    req->alloc_size = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
    psc_list_init(&req->next);
    psc_list_init(&req->next_any);
    psc_list_init(&req->next_held);
    req->pub.max_xheader_len = xlen;
    req->pub.user_size = user_size;
    req->pub.user = user_size ? (struct PSCOM_req_user *)((char *)req + user_off)
                              : NULL;
}

struct psc_req *psc_req_alloc(size_t xlen, size_t user_size)
{
    size_t user_off = req_user_off(xlen);
    if (user_size > SIZE_MAX - user_off) return NULL;
    size_t size = user_off + user_size;
    struct psc_req *req = NULL;
    if (req_cached) req = req_cache_take(size); /* never with threads */
    if (!req) req = calloc(1, size);
    if (!req) return NULL;
    req_init(req, size, user_off, xlen, user_size);
    return req;
}

void psc_req_renew(struct psc_req *req)
{
    size_t xlen = req->pub.max_xheader_len, user_size = req->pub.user_size;
    size_t user_off = req_user_off(xlen);
    free(req->gbuf);
    memset(req, 0, user_off + user_size);
    req_init(req, user_off + user_size, user_off, xlen, user_size);
}

void psc_req_release(struct psc_req *req)
{
    req->magic = PSC_REQ_FREED;
    free(req->gbuf);
    if (!req_cache_put(req)) free(req);
}

pscom_request_t *pscom_request_create(size_t max_xheader_len, size_t user_size)
{
    if (max_xheader_len > PSC_XHEADER_MAX) {
        psc_err("pscom_request_create: max_xheader_len %zu is larger than "
                "the %zu bytes an extended header can have",
                max_xheader_len, PSC_XHEADER_MAX);
        return NULL;
    }
    struct psc_req *req = psc_req_alloc(max_xheader_len, user_size);
    if (!req) {
        psc_err("pscom_request_create: out of memory (%zu bytes of user "
                "storage requested)", user_size);
        return NULL;
    }
    req->pub.state = PSCOM_REQ_STATE_DONE;
    req->pub.xheader_len = max_xheader_len; /* as ParaStation pscom does */
    return &req->pub;
}

static bool req_is_queued(struct psc_req *req)
{
    return (req->pub.state & PSCOM_REQ_STATE_POSTED) &&
           !(req->pub.state & PSCOM_REQ_STATE_DONE);
}

void pscom_request_free(pscom_request_t *request)
{
    if (!request) return;
    struct psc_req *req = req_of(request);
    if (req->magic != PSC_REQ_MAGIC) {
        psc_err("pscom_request_free(%p): not a request, or freed twice",
                (void *)request);
        return;
    }
    if (req_is_queued(req)) {
        psc_err("pscom_request_free(%p): the request is still posted "
                "(state %s); wait for it or cancel it first; not freed",
                (void *)request, pscom_req_state_str(request->state));
        return;
    }
    psc_req_release(req);
}

void psc_req_finish(struct psc_req *req, pscom_req_state_t extra)
{
    if (psc_holding() && (req->pub.ops.io_done || req->inplace_done) &&
        req->kind != PSC_REQ_CONTROL) {
        /* Inside a plugin or a send's post: the request stays unfinished
         * (not DONE, so its owner keeps off it) until psc_req_run_held. */
        req->held_extra = extra;
        /* What it did shows (a written send: IO_STARTED), not yet DONE. */
        if (extra & PSCOM_REQ_STATE_IO_STARTED)
            psc_req_state_add(req, PSCOM_REQ_STATE_IO_STARTED);
        psc_list_add_tail(&req->next_held, &psc_ctx.held);
        return;
    }
    pscom_req_state_t state = req->pub.state | extra |
                              PSCOM_REQ_STATE_IO_DONE | PSCOM_REQ_STATE_DONE;
    psc_ctx.events++;
    if (req->kind == PSC_REQ_CONTROL) {
        psc_req_release(req);
        return;
    }
    /* Once DONE is visible, the owner may free or repost the request from
     * another thread: take what we still need first. Requests with io_done
     * belong to the callback until it returns (as in ParaStation pscom). */
    void (*io_done)(pscom_request_t *) = req->pub.ops.io_done;
    void (*inplace_done)(pscom_req_state_t, void *) = req->inplace_done;
    void *priv = req->inplace_priv;
    bool self_free = req->self_free;

    __atomic_store_n(&req->pub.state, state, __ATOMIC_RELEASE);
    if (inplace_done) inplace_done(state, priv);
    if (io_done) io_done(&req->pub);
    if (self_free) psc_req_release(req);
}

/* A transport may report a send's completion and the peer's answer to it
 * in one call of its progress op (ofi: both in one batch of its completion
 * queue; any transport whose sends complete on the peer's acknowledgement).
 * The caller must see the send done before the answer's callback runs, as
 * when the send had completed in an earlier round: ParaStation MPI's
 * partitioned receiver answers the last partition of a round with the next
 * round's clear-to-send message, and its callback at the sender expects
 * the MPI_Start that follows the round's completion (pscom_cancel(NULL)
 * otherwise). So a receive held behind a send's completion is cut off:
 * it and what follows run in the next round of progress (psc_progress
 * returns in between), or when a connection or socket is closed. "Behind"
 * means since the caller last had control (psc_ctx.held_sent: across the
 * calls into plugins of one round, and into nested runs); what completes
 * while a cut waits queues behind it (psc_holding). */
void psc_req_run_held(bool all)
{
    psc_ctx.held_cut = false;
    while (!psc_list_empty(&psc_ctx.held)) {
        struct psc_req *req =
            psc_list_first(&psc_ctx.held, struct psc_req, next_held);
        pscom_req_state_t kind = req->pub.state;
        if (!all && psc_ctx.held_sent &&
            (kind & PSCOM_REQ_STATE_RECV_REQUEST)) {
            psc_ctx.held_cut = true;
            return;
        }
        if (kind & PSCOM_REQ_STATE_SEND_REQUEST) psc_ctx.held_sent = true;
        psc_list_del(&req->next_held);
        psc_req_done(req, req->held_extra);
        if (psc_ctx.held_cut) { /* a nested run cut */
            if (!all) return;
            psc_ctx.held_cut = false; /* else what follows would queue */
        }
    }
    psc_ctx.held_cut = false;
}

static bool con_usable(pscom_connection_t *connection, const char *what)
{
    if (!connection) {
        psc_err("%s: the request has no connection", what);
        return false;
    }
    struct psc_con *con = con_of(connection);
    if (con->magic != PSC_CON_MAGIC) {
        psc_err("%s: connection %p is not an open connection (closed "
                "already?)", what, (void *)connection);
        return false;
    }
    return true;
}

void pscom_post_send(pscom_request_t *request)
{
    struct psc_req *req = req_of(request);

    psc_lock();
    if (req_is_queued(req)) {
        psc_err("pscom_post_send: request %p is posted already",
                (void *)request);
        psc_unlock();
        return;
    }
    psc_hold();
    request->state = PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED;
    if (request->xheader_len > request->max_xheader_len ||
        request->data_len > PSCOM_DATA_LEN_MASK ||
        !con_usable(request->connection, "pscom_post_send")) {
        if (request->xheader_len > request->max_xheader_len)
            psc_err("pscom_post_send: xheader_len %zu exceeds the request's "
                    "max_xheader_len %zu",
                    request->xheader_len, request->max_xheader_len);
        if (request->data_len > PSCOM_DATA_LEN_MASK)
            psc_err("pscom_post_send: data_len %zu exceeds the largest "
                    "message (%llu bytes)",
                    request->data_len, (unsigned long long)PSCOM_DATA_LEN_MASK);
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        psc_unhold_later();
        psc_unlock();
        return;
    }
    psc_enter();
    psc_proto_send(con_of(request->connection), req);
    psc_leave();
    psc_unhold_later();
    psc_unlock();
}

void pscom_post_recv(pscom_request_t *request)
{
    struct psc_req *req = req_of(request);

    psc_lock();
    if (req_is_queued(req)) {
        psc_err("pscom_post_recv: request %p is posted already",
                (void *)request);
        psc_unlock();
        return;
    }
    request->state = PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED;
    if (request->xheader_len > request->max_xheader_len) {
        psc_err("pscom_post_recv: xheader_len %zu exceeds the request's "
                "max_xheader_len %zu",
                request->xheader_len, request->max_xheader_len);
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        psc_unlock();
        return;
    }
    if (request->connection) {
        if (!con_usable(request->connection, "pscom_post_recv")) {
            psc_req_done(req, PSCOM_REQ_STATE_ERROR);
            psc_unlock();
            return;
        }
        request->socket = request->connection->socket;
    } else if (request->socket && sock_of(request->socket)->closing) {
        /* From a callback that the socket's close runs. */
        psc_debug("pscom_post_recv: the socket is closing; the receive "
                  "fails");
        psc_req_done(req, PSCOM_REQ_STATE_ERROR);
        psc_unlock();
        return;
    }
    psc_enter();
    psc_proto_post_recv(req);
    psc_leave();
    psc_unlock();
}

/* A self-freeing send of copies or of the caller's buffers. */
static void send_simple(pscom_connection_t *connection, void *xheader,
                        size_t xheader_len, void *data, size_t data_len,
                        bool copy, void (*done)(pscom_req_state_t, void *),
                        void *priv)
{
    const char *who = copy ? "pscom_send" : "pscom_send_inplace";
    if (xheader_len > PSC_XHEADER_MAX) {
        /* Its length would not fit the header's field. */
        psc_err("%s: xheader_len %zu is larger than the %zu bytes an "
                "extended header can have; the message is not sent",
                who, xheader_len, PSC_XHEADER_MAX);
        if (done) done(PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_DONE, priv);
        return;
    }
    struct psc_req *req = psc_req_alloc(xheader_len, copy ? data_len : 0);
    if (!req) {
        psc_err("%s: out of memory for a %zu byte message", who, data_len);
        if (done) done(PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_DONE, priv);
        return;
    }
    req->self_free = true;
    req->inplace_done = done;
    req->inplace_priv = priv;
    req->pub.connection = connection;
    req->pub.xheader_len = xheader_len;
    if (xheader_len) memcpy(&req->pub.xheader, xheader, xheader_len);
    req->pub.data_len = data_len;
    if (copy) {
        if (data_len) memcpy(req->pub.user, data, data_len);
        req->pub.data = req->pub.user;
    } else {
        req->pub.data = data;
    }
    pscom_post_send(&req->pub);
}

void pscom_send(pscom_connection_t *connection, void *xheader,
                size_t xheader_len, void *data, size_t data_len)
{
    send_simple(connection, xheader, xheader_len, data, data_len, true, NULL,
                NULL);
}

void pscom_send_inplace(pscom_connection_t *connection, void *xheader,
                        size_t xheader_len, void *data, size_t data_len,
                        void (*io_done)(pscom_req_state_t state, void *priv),
                        void *priv)
{
    send_simple(connection, xheader, xheader_len, data, data_len, false,
                io_done, priv);
}

pscom_err_t pscom_recv(pscom_connection_t *connection, pscom_socket_t *socket,
                       void *xheader, size_t xheader_len, void *data,
                       size_t data_len)
{
    pscom_request_t *req = pscom_request_create(xheader_len, 0);
    if (!req) return PSCOM_ERR_STDERROR;

    req->connection = connection;
    req->socket = socket;
    req->xheader_len = xheader_len;
    req->data = data;
    req->data_len = data_len;
    pscom_post_recv(req);
    pscom_wait(req);

    pscom_err_t ret = PSCOM_ERR_IOERROR;
    if (pscom_req_successful(req)) {
        if (xheader_len) memcpy(xheader, &req->xheader, xheader_len);
        ret = PSCOM_SUCCESS;
    }
    pscom_request_free(req);
    return ret;
}

static bool req_is_done(pscom_request_t *r)
{
    return __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) & PSCOM_REQ_STATE_DONE;
}

static bool req_done_cond(void *arg)
{
    return req_is_done(arg);
}

void pscom_wait(pscom_request_t *request)
{
    if (req_is_done(request)) return;
    psc_lock();
    psc_progress_until(req_done_cond, request, 0);
    psc_unlock();
}

struct wait_until {
    int (*cond)(void *arg);
    void *arg;
};

static bool wait_until_cond(void *arg)
{
    struct wait_until *u = arg;
    return u->cond(u->arg) != 0;
}

void pscom_plugin_wait_until(int (*cond)(void *arg), void *arg)
{
    struct wait_until u = {cond, arg};
    psc_lock();
    psc_progress_until(wait_until_cond, &u, 0);
    psc_unlock();
}

void pscom_wait_all(pscom_request_t **requests)
{
    for (; *requests; requests++) pscom_wait(*requests);
}

int pscom_test_any(void)
{
    psc_lock();
    int ret = psc_progress();
    psc_unlock();
    /* A thread polling here must not starve the others of the lock. */
    psc_lock_handoff();
    return ret;
}

void pscom_wait_any(void)
{
    psc_lock();
    psc_progress_wait_event();
    psc_unlock();
}

/* Unlink a send whose first byte has not been written yet, or a receive
 * that no message has matched yet (kind: PSCOM_REQ_STATE_SEND_REQUEST or
 * _RECV_REQUEST). Such a request waits in a queue; one that is in none is
 * carried out by requests of the library's own (a broadcast, whose
 * receive is the group's) and is not cancelled. */
static int cancel_locked(struct psc_req *req, pscom_req_state_t kind)
{
    pscom_req_state_t st = req->pub.state;
    if (!(st & kind) || !(st & PSCOM_REQ_STATE_POSTED) ||
        (st & (PSCOM_REQ_STATE_IO_STARTED | PSCOM_REQ_STATE_DONE)) ||
        !psc_list_unlinked(&req->next_held) || psc_list_unlinked(&req->next) ||
        req->rndv_described)
        return 0;
    psc_list_del(&req->next);
    psc_req_done(req, PSCOM_REQ_STATE_CANCELED);
    return 1;
}

int pscom_cancel_send(pscom_request_t *request)
{
    psc_lock();
    int ret = cancel_locked(req_of(request), PSCOM_REQ_STATE_SEND_REQUEST);
    psc_unlock();
    return ret;
}

int pscom_cancel_recv(pscom_request_t *request)
{
    psc_lock();
    int ret = cancel_locked(req_of(request), PSCOM_REQ_STATE_RECV_REQUEST);
    psc_unlock();
    return ret;
}

int pscom_cancel(pscom_request_t *request)
{
    /* Whether it sends or receives is set when it is posted; the lock's
     * holder may be adding other bits meanwhile. */
    pscom_req_state_t state =
        __atomic_load_n(&request->state, __ATOMIC_RELAXED);
    if (state & PSCOM_REQ_STATE_SEND_REQUEST)
        return pscom_cancel_send(request);
    if (state & PSCOM_REQ_STATE_RECV_REQUEST)
        return pscom_cancel_recv(request);
    return 0;
}

static int iprobe_locked(pscom_request_t *request)
{
    struct psc_req *req = req_of(request);
    struct psc_req *g = psc_peek_generated(req);
    if (!g) return 0;

    size_t xlen = g->pub.header.xheader_len;
    request->header = g->pub.header;
    memcpy(&request->xheader, &g->pub.xheader,
           xlen < request->max_xheader_len ? xlen : request->max_xheader_len);
    request->connection = &g->gcon->pub;
    return 1;
}

int pscom_iprobe(pscom_request_t *request)
{
    psc_lock();
    if (request->connection) request->socket = request->connection->socket;
    int found = iprobe_locked(request);
    if (!found) {
        psc_progress();
        found = iprobe_locked(request);
    }
    psc_unlock();
    return found;
}

static bool probe_cond(void *arg)
{
    return iprobe_locked(arg);
}

void pscom_probe(pscom_request_t *request)
{
    psc_lock();
    if (request->connection) request->socket = request->connection->socket;
    psc_progress_until(probe_cond, request, 0);
    psc_unlock();
}
