/*
 * API functions whose implementation belongs to later work (one-sided
 * communication, groups). They fail cleanly: calls returning pscom_err_t
 * return PSCOM_NOT_IMPLEMENTED, posted requests end with
 * PSCOM_REQ_STATE_ERROR. pscom_info lists them (psc_not_implemented[]).
 */
#include "core.h"

static void not_implemented(const char *fn)
{
    psc_err("%s is not implemented in this build of pscom", fn);
}

static void fail_request(pscom_request_t *request, const char *fn)
{
    not_implemented(fn);
    if (!request) return;
    request->state = PSCOM_REQ_STATE_ERROR;
    psc_lock();
    psc_req_done(req_of(request), PSCOM_REQ_STATE_ERROR);
    psc_unlock();
}

#define REQUEST_STUB(fn)                                                       \
    void fn(pscom_request_t *request)                                          \
    {                                                                          \
        fail_request(request, #fn);                                            \
    }

REQUEST_STUB(pscom_post_rma_write)
REQUEST_STUB(pscom_post_rma_read)
REQUEST_STUB(pscom_post_rma_put)
REQUEST_STUB(pscom_post_rma_get)
REQUEST_STUB(pscom_post_rma_accumulate)
REQUEST_STUB(pscom_post_rma_get_accumulate)
REQUEST_STUB(pscom_post_rma_fetch_op)
REQUEST_STUB(pscom_post_rma_compare_swap)
REQUEST_STUB(pscom_post_bcast)

pscom_err_t pscom_mem_register(pscom_socket_t *socket, void *addr,
                               size_t length, pscom_memh_t *memh)
{
    not_implemented(__func__);
    return PSCOM_NOT_IMPLEMENTED;
}

pscom_err_t pscom_mem_deregister(pscom_memh_t memh)
{
    not_implemented(__func__);
    return PSCOM_NOT_IMPLEMENTED;
}

pscom_err_t pscom_rkey_generate(pscom_connection_t *connection, void *rkeybuf,
                                size_t bufsize, pscom_rkey_t *rkey)
{
    not_implemented(__func__);
    return PSCOM_NOT_IMPLEMENTED;
}

pscom_err_t pscom_rkey_destroy(pscom_rkey_t rkey)
{
    not_implemented(__func__);
    return PSCOM_NOT_IMPLEMENTED;
}

pscom_err_t pscom_rkey_buffer_pack(void **rkeybuf, size_t *bufsize,
                                   pscom_memh_t memh)
{
    not_implemented(__func__);
    return PSCOM_NOT_IMPLEMENTED;
}

void pscom_rkey_buffer_release(void *rkey_buffer)
{
    (void)rkey_buffer;
}

void pscom_register_rma_callbacks(void (*target_callback)(pscom_request_t *req),
                                  pscom_memh_t memh, pscom_rma_op_t rma_op)
{
    not_implemented(__func__);
}

pscom_group_t *pscom_group_open(pscom_socket_t *socket, uint32_t group_id,
                                uint32_t my_grank, uint32_t group_size,
                                pscom_connection_t **connections)
{
    not_implemented(__func__);
    return NULL;
}

void pscom_group_close(pscom_group_t *group)
{
    (void)group;
}

void pscom_bcast(pscom_group_t *group, unsigned bcast_root, void *xheader,
                 size_t xheader_len, void *data, size_t data_len)
{
    not_implemented(__func__);
}

void pscom_barrier(pscom_group_t *group)
{
    not_implemented(__func__);
}

pscom_group_t *pscom_group_find(pscom_socket_t *socket, uint32_t group_id)
{
    return NULL;
}

uint32_t pscom_group_get_id(pscom_group_t *group)
{
    not_implemented(__func__);
    return 0;
}
