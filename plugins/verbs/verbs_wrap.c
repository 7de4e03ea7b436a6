/*
 * The thin wrapper around libibverbs (see verbs_wrap.h): one line per call,
 * no logic, so that the unit tests can replace this file with a fake HCA.
 */
#include "verbs_wrap.h"

struct ibv_device **vb_get_device_list(int *num_devices)
{
    return ibv_get_device_list(num_devices);
}

void vb_free_device_list(struct ibv_device **list)
{
    ibv_free_device_list(list);
}

const char *vb_get_device_name(struct ibv_device *device)
{
    return ibv_get_device_name(device);
}

struct ibv_context *vb_open_device(struct ibv_device *device)
{
    return ibv_open_device(device);
}

int vb_close_device(struct ibv_context *context)
{
    return ibv_close_device(context);
}

int vb_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
    return ibv_query_device(context, attr);
}

int vb_query_port(struct ibv_context *context, uint8_t port,
                  struct ibv_port_attr *attr)
{
    return ibv_query_port(context, port, attr);
}

int vb_query_gid(struct ibv_context *context, uint8_t port, int index,
                 union ibv_gid *gid)
{
    return ibv_query_gid(context, port, index, gid);
}

int vb_query_gid_ex(struct ibv_context *context, uint32_t port,
                    uint32_t index, struct ibv_gid_entry *entry)
{
    return ibv_query_gid_ex(context, port, index, entry, 0);
}

struct ibv_pd *vb_alloc_pd(struct ibv_context *context)
{
    return ibv_alloc_pd(context);
}

int vb_dealloc_pd(struct ibv_pd *pd)
{
    return ibv_dealloc_pd(pd);
}

struct ibv_mr *vb_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                         int access)
{
    return ibv_reg_mr(pd, addr, length, access);
}

int vb_dereg_mr(struct ibv_mr *mr)
{
    return ibv_dereg_mr(mr);
}

struct ibv_cq *vb_create_cq(struct ibv_context *context, int cqe)
{
    return ibv_create_cq(context, cqe, NULL, NULL, 0);
}

int vb_destroy_cq(struct ibv_cq *cq)
{
    return ibv_destroy_cq(cq);
}

int vb_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
    return ibv_poll_cq(cq, num_entries, wc);
}

struct ibv_qp *vb_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    return ibv_create_qp(pd, attr);
}

int vb_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
    return ibv_modify_qp(qp, attr, attr_mask);
}

int vb_destroy_qp(struct ibv_qp *qp)
{
    return ibv_destroy_qp(qp);
}

int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                 struct ibv_send_wr **bad_wr)
{
    return ibv_post_send(qp, wr, bad_wr);
}

int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                 struct ibv_recv_wr **bad_wr)
{
    return ibv_post_recv(qp, wr, bad_wr);
}

int vb_fork_init(void)
{
    return ibv_fork_init();
}

enum ibv_fork_status vb_is_fork_initialized(void)
{
    return ibv_is_fork_initialized();
}

const char *vb_wc_status_str(enum ibv_wc_status status)
{
    return ibv_wc_status_str(status);
}
