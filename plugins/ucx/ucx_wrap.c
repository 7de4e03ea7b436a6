/*
 * The UCX calls of the ucx plugin (see ucx_wrap.h). Nothing here knows about
 * pscom: this file only translates to UCP and back.
 *
 * Requests: the plugin's uxw_op_t goes to UCX as the operation's user data;
 * UCX calls back into this file, which calls the plugin and then frees the
 * request. Nothing is stored in a request after the call that starts it:
 * UCX may end the operation (and call back) inside that call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#include "ucx_tls.h"
#include "ucx_wrap.h"

struct uxw_context {
    ucp_context_h ctx;
};

struct uxw_worker {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    size_t max_am_header;
    uxw_am_cb_t am_cb;
    void *am_arg;
    uxw_ep_err_cb_t err_cb; /* the same for every endpoint of the worker */
    void *err_arg;
};

/* A UCX variable is set by the user: then the plugin leaves it alone. */
static int ucx_var_set(const char *name)
{
    char var[64];
    snprintf(var, sizeof(var), "UCX_%s", name);
    return getenv(var) != NULL;
}

/* Whether UCX_TLS lets UCX open its shared-memory (mm) transports. A setting
 * for a transport UCX does not open earns a warning from UCX, so it is only
 * given when they are wanted (ucx_tls.h). */
static int shm_tls_wanted(void)
{
    return ucx_tls_wants_shm(getenv("UCX_TLS"));
}

static void modify(ucp_config_t *config, const char *name, const char *value)
{
    if (ucx_var_set(name)) return;
    /* An unknown name is no error worth failing for (older UCX). */
    (void)ucp_config_modify(config, name, value);
}

int uxw_context_create(const uxw_config_t *cfg, uxw_context_t **ctx_p,
                       char *why, size_t why_len)
{
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        snprintf(why, why_len, "ucp_config_read: %s", ucs_status_string(st));
        return st;
    }
    if (cfg->shm_error_handling && shm_tls_wanted() &&
        !ucx_var_set("POSIX_ERROR_HANDLING") &&
        !ucx_var_set("SYSV_ERROR_HANDLING"))
        modify(config, "MM_ERROR_HANDLING", "y");

    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME,
        .features = UCP_FEATURE_AM | (cfg->rma ? UCP_FEATURE_RMA : 0),
        .mt_workers_shared = 0,
        .name = "pscom",
    };
    ucp_context_h ctx;
    st = ucp_init(&params, config, &ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        snprintf(why, why_len, "ucp_init: %s", ucs_status_string(st));
        return st;
    }
    uxw_context_t *c = malloc(sizeof(*c));
    if (!c) {
        ucp_cleanup(ctx);
        snprintf(why, why_len, "out of memory");
        return UCS_ERR_NO_MEMORY;
    }
    c->ctx = ctx;
    *ctx_p = c;
    return UCS_OK;
}

void uxw_context_destroy(uxw_context_t *c)
{
    if (!c) return;
    ucp_cleanup(c->ctx);
    free(c);
}

static ucs_status_t am_handler(void *arg, const void *header,
                               size_t header_length, void *data, size_t length,
                               const ucp_am_recv_param_t *param, unsigned id)
{
    uxw_worker_t *w = arg;
    unsigned flags = 0;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) flags |= UXW_AM_RNDV;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) flags |= UXW_AM_KEEPABLE;
    int rc = w->am_cb(w->am_arg, id, header, header_length, data, length, flags);
    return rc == UXW_AM_KEEP ? UCS_INPROGRESS : UCS_OK;
}

static ucs_status_t am_frame(void *arg, const void *header, size_t header_length,
                             void *data, size_t length,
                             const ucp_am_recv_param_t *param)
{
    return am_handler(arg, header, header_length, data, length, param,
                      UXW_AM_FRAME);
}

static ucs_status_t am_frame_packed(void *arg, const void *header,
                                    size_t header_length, void *data,
                                    size_t length,
                                    const ucp_am_recv_param_t *param)
{
    return am_handler(arg, header, header_length, data, length, param,
                      UXW_AM_FRAME_PACKED);
}

static ucs_status_t am_body(void *arg, const void *header,
                            size_t header_length, void *data, size_t length,
                            const ucp_am_recv_param_t *param)
{
    return am_handler(arg, header, header_length, data, length, param,
                      UXW_AM_BODY);
}

static ucs_status_t am_frame_long(void *arg, const void *header,
                                  size_t header_length, void *data,
                                  size_t length,
                                  const ucp_am_recv_param_t *param)
{
    return am_handler(arg, header, header_length, data, length, param,
                      UXW_AM_FRAME_LONG);
}

int uxw_worker_create(uxw_context_t *c, uxw_am_cb_t am_cb, void *am_arg,
                      uxw_worker_t **worker_p, char *why, size_t why_len)
{
    ucs_status_t st;
    uxw_worker_t *w = calloc(1, sizeof(*w));
    if (!w) {
        uxw_context_destroy(c);
        snprintf(why, why_len, "out of memory");
        return UCS_ERR_NO_MEMORY;
    }
    w->ctx = c->ctx;
    free(c);
    w->am_cb = am_cb;
    w->am_arg = am_arg;

    /* Serialized: pscom's library lock orders every call. */
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
    };
    st = ucp_worker_create(w->ctx, &wp, &w->worker);
    if (st != UCS_OK) {
        snprintf(why, why_len, "ucp_worker_create: %s", ucs_status_string(st));
        goto free_context;
    }

    ucp_worker_attr_t attr = {
        .field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER,
    };
    st = ucp_worker_query(w->worker, &attr);
    if (st != UCS_OK) {
        snprintf(why, why_len, "ucp_worker_query: %s", ucs_status_string(st));
        goto destroy_worker;
    }
    w->max_am_header = attr.max_am_header;

    st = ucp_worker_get_address(w->worker, &w->addr, &w->addr_len);
    if (st != UCS_OK) {
        snprintf(why, why_len, "ucp_worker_get_address: %s",
                 ucs_status_string(st));
        goto destroy_worker;
    }

    ucp_am_recv_callback_t cbs[UXW_AM_IDS] = {
        [UXW_AM_FRAME] = am_frame,
        [UXW_AM_FRAME_LONG] = am_frame_long,
        [UXW_AM_FRAME_PACKED] = am_frame_packed,
        [UXW_AM_BODY] = am_body,
    };
    for (unsigned id = 0; id < UXW_AM_IDS; id++) {
        ucp_am_handler_param_t hp = {
            .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                          UCP_AM_HANDLER_PARAM_FIELD_CB |
                          UCP_AM_HANDLER_PARAM_FIELD_ARG,
            .id = id,
            .cb = cbs[id],
            .arg = w,
        };
        st = ucp_worker_set_am_recv_handler(w->worker, &hp);
        if (st != UCS_OK) {
            snprintf(why, why_len, "ucp_worker_set_am_recv_handler: %s",
                     ucs_status_string(st));
            goto release_address;
        }
    }
    *worker_p = w;
    return UCS_OK;

release_address:
    ucp_worker_release_address(w->worker, w->addr);
destroy_worker:
    ucp_worker_destroy(w->worker);
free_context:
    ucp_cleanup(w->ctx);
    free(w);
    return st;
}

void uxw_worker_destroy(uxw_worker_t *w)
{
    if (!w) return;
    ucp_worker_release_address(w->worker, w->addr);
    ucp_worker_destroy(w->worker);
    ucp_cleanup(w->ctx);
    free(w);
}

void uxw_worker_address(uxw_worker_t *w, const void **addr, size_t *len)
{
    *addr = w->addr;
    *len = w->addr_len;
}

size_t uxw_worker_max_am_header(uxw_worker_t *w)
{
    return w->max_am_header;
}

unsigned uxw_worker_progress(uxw_worker_t *w)
{
    return ucp_worker_progress(w->worker);
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    uxw_worker_t *w = arg;
    w->err_cb(w->err_arg, (uxw_ep_t *)ep, status);
}

int uxw_ep_create(uxw_worker_t *w, const void *addr, size_t len,
                  int peer_errors, uxw_ep_err_cb_t err_cb, void *err_arg,
                  uxw_ep_t **ep_p)
{
    (void)len; /* UCX reads the length from the address itself */
    w->err_cb = err_cb;
    w->err_arg = err_arg;
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER
                                : UCP_ERR_HANDLING_MODE_NONE,
        .err_handler = {.cb = ep_error, .arg = w},
    };
    ucp_ep_h ep;
    ucs_status_t st = ucp_ep_create(w->worker, &p, &ep);
    if (st != UCS_OK) return st;
    *ep_p = (uxw_ep_t *)ep;
    return UCS_OK;
}

static void send_done(void *request, ucs_status_t status, void *user_data)
{
    const uxw_op_t *op = user_data;
    op->cb.done(op->user, status); /* may end op's owner */
    ucp_request_free(request);
}

static void recv_done(void *request, ucs_status_t status, size_t length,
                      void *user_data)
{
    const uxw_op_t *op = user_data;
    op->cb.recv(op->user, status, length);
    ucp_request_free(request);
}

/* Parameters of an operation that ends with send_done (sends, closes,
 * one-sided operations) and op. */
static ucp_request_param_t done_param(const uxw_op_t *op)
{
    return (ucp_request_param_t){
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = send_done,
        .user_data = (void *)op,
    };
}

/* What an nbx call returned: done, under way (op follows), or an error. */
static int started(ucs_status_ptr_t sp)
{
    if (sp == NULL) return UXW_OK;
    if (UCS_PTR_IS_ERR(sp)) return UCS_PTR_STATUS(sp);
    return UXW_PENDING;
}

int uxw_ep_close(uxw_worker_t *w, uxw_ep_t *ep, int force, const uxw_op_t *op)
{
    (void)w;
    ucp_request_param_t p = done_param(op);
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    return started(ucp_ep_close_nbx((ucp_ep_h)ep, &p));
}

int uxw_am_send(uxw_ep_t *ep, unsigned id, const void *hdr, size_t hdr_len,
                const struct iovec *iov, int iovcnt, int proto,
                const uxw_op_t *op)
{
    ucp_request_param_t p = done_param(op);
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = proto == UXW_SEND_EAGER  ? UCP_AM_SEND_FLAG_EAGER
              : proto == UXW_SEND_RNDV ? UCP_AM_SEND_FLAG_RNDV
                                       : 0;
    const void *buf = NULL;
    size_t count = 0;
    if (iovcnt == 1) {
        buf = iov[0].iov_base;
        count = iov[0].iov_len;
    } else if (iovcnt > 1) {
        /* ucp_dt_iov_t has the layout of struct iovec. */
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        p.datatype = ucp_dt_make_iov();
        buf = iov;
        count = (size_t)iovcnt;
    }
    return started(ucp_am_send_nbx((ucp_ep_h)ep, id, hdr, hdr_len, buf, count,
                                   &p));
}

int uxw_am_send_now(uxw_worker_t *w, uxw_ep_t *ep, unsigned id,
                    const void *buf, size_t len)
{
    static const ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                        UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL,
        .flags = UCP_AM_SEND_FLAG_EAGER,
    };
    ucs_status_ptr_t sp = ucp_am_send_nbx((ucp_ep_h)ep, id, NULL, 0, buf, len, &p);
    if (!UCS_PTR_IS_PTR(sp)) return UCS_PTR_STATUS(sp);
    /* A UCX that ignores FORCE_IMM_CMPL (it is there since UCX 1.10)
     * reads buf until done: wait, buf is the caller's. Callbacks of
     * progress only record. */
    ucs_status_t st;
    while ((st = ucp_request_check_status(sp)) == UCS_INPROGRESS)
        ucp_worker_progress(w->worker);
    ucp_request_free(sp);
    return st;
}

int uxw_am_recv(uxw_worker_t *w, void *desc, void *buf, size_t len,
                const uxw_op_t *op)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am = recv_done,
        .user_data = (void *)op,
    };
    return started(ucp_am_recv_data_nbx(w->worker, desc, buf, len, &p));
}

void uxw_am_release(uxw_worker_t *w, void *data)
{
    ucp_am_data_release(w->worker, data);
}

/* ---------------------------------------------------------------------- */
/* One-sided operations                                                   */
/* ---------------------------------------------------------------------- */

_Static_assert(UXW_ERR_KEY_TOO_LONG == UCS_ERR_EXCEEDS_LIMIT,
               "UXW_ERR_KEY_TOO_LONG is UCX's status");

int uxw_mem_map(uxw_worker_t *w, void *addr, size_t len, void *key,
                size_t *key_len, uxw_mem_t **mem_p)
{
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                      UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = addr,
        .length = len,
    };
    ucp_mem_h memh;
    ucs_status_t st = ucp_mem_map(w->ctx, &mp, &memh);
    if (st != UCS_OK) return st;
    void *packed;
    size_t size;
    st = ucp_rkey_pack(w->ctx, memh, &packed, &size);
    if (st != UCS_OK) goto unmap;
    if (size > *key_len) {
        *key_len = size; /* for the log line */
        ucp_rkey_buffer_release(packed);
        st = UCS_ERR_EXCEEDS_LIMIT;
        goto unmap;
    }
    memcpy(key, packed, size);
    *key_len = size;
    ucp_rkey_buffer_release(packed);
    *mem_p = (uxw_mem_t *)memh;
    return UCS_OK;

unmap:
    ucp_mem_unmap(w->ctx, memh);
    return st;
}

void uxw_mem_unmap(uxw_worker_t *w, uxw_mem_t *mem)
{
    ucp_mem_unmap(w->ctx, (ucp_mem_h)mem);
}

int uxw_rkey_unpack(uxw_ep_t *ep, const void *key, uxw_rkey_t **rkey_p)
{
    ucp_rkey_h rkey;
    ucs_status_t st = ucp_ep_rkey_unpack((ucp_ep_h)ep, key, &rkey);
    if (st != UCS_OK) return st;
    *rkey_p = (uxw_rkey_t *)rkey;
    return UCS_OK;
}

void uxw_rkey_destroy(uxw_rkey_t *rkey)
{
    ucp_rkey_destroy((ucp_rkey_h)rkey);
}

int uxw_put(uxw_ep_t *ep, const void *src, size_t len, uint64_t raddr,
            uxw_rkey_t *rkey, const uxw_op_t *op)
{
    ucp_request_param_t p = done_param(op);
    return started(ucp_put_nbx((ucp_ep_h)ep, src, len, raddr, (ucp_rkey_h)rkey,
                               &p));
}

int uxw_get(uxw_ep_t *ep, void *dst, size_t len, uint64_t raddr,
            uxw_rkey_t *rkey, const uxw_op_t *op)
{
    ucp_request_param_t p = done_param(op);
    return started(ucp_get_nbx((ucp_ep_h)ep, dst, len, raddr, (ucp_rkey_h)rkey,
                               &p));
}

int uxw_ep_flush(uxw_ep_t *ep, const uxw_op_t *op)
{
    ucp_request_param_t p = done_param(op);
    return started(ucp_ep_flush_nbx((ucp_ep_h)ep, &p));
}

int uxw_status_errno(int status)
{
    if (uxw_status_is_peer_gone(status)) return -ECONNRESET;
    if (status == UCS_ERR_CANCELED) return -ECANCELED;
    if (status == UCS_ERR_NO_MEMORY) return -ENOMEM;
    return -EIO;
}

const char *uxw_status_str(int status)
{
    return ucs_status_string((ucs_status_t)status);
}

int uxw_status_is_peer_gone(int status)
{
    return status == UCS_ERR_CONNECTION_RESET ||
           status == UCS_ERR_ENDPOINT_TIMEOUT || status == UCS_ERR_UNREACHABLE ||
           status == UCS_ERR_REJECTED;
}

const char *uxw_version(void)
{
    return ucp_get_version_string();
}
