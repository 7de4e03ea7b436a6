/*
 * The thin wrapper around libibverbs used by the verbs plugin.
 *
 * Every verbs call of the plugin goes through one of these functions, and
 * nothing else in the plugin calls ibv_* directly. Many ibv_* functions are
 * static inline in <infiniband/verbs.h> (ibv_post_send, ibv_poll_cq,
 * ibv_post_recv, ibv_get_device_list with static providers, ...), so they
 * cannot be replaced with -Wl,--wrap; these out-of-line functions can. The
 * unit tests link their own implementation of this header (a fake HCA)
 * instead of verbs_wrap.c.
 *
 * Each function has the semantics of the ibv_* call of the same name (see
 * its man page); ownership of the returned objects is libibverbs'. Functions
 * returning int return 0 or an errno value (positive, as libibverbs does),
 * except vb_poll_cq (number of completions, or negative on error).
 */
#ifndef VB_VERBS_WRAP_H
#define VB_VERBS_WRAP_H

#include <infiniband/verbs.h>

struct ibv_device **vb_get_device_list(int *num_devices);
void vb_free_device_list(struct ibv_device **list);
const char *vb_get_device_name(struct ibv_device *device);
struct ibv_context *vb_open_device(struct ibv_device *device);
int vb_close_device(struct ibv_context *context);
int vb_query_device(struct ibv_context *context, struct ibv_device_attr *attr);
int vb_query_port(struct ibv_context *context, uint8_t port,
                  struct ibv_port_attr *attr);
int vb_query_gid(struct ibv_context *context, uint8_t port, int index,
                 union ibv_gid *gid);
/* ibv_query_gid_ex with flags 0: the entry with its type (RoCE v1/v2). */
int vb_query_gid_ex(struct ibv_context *context, uint32_t port,
                    uint32_t index, struct ibv_gid_entry *entry);

struct ibv_pd *vb_alloc_pd(struct ibv_context *context);
int vb_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *vb_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                         int access);
int vb_dereg_mr(struct ibv_mr *mr);

struct ibv_cq *vb_create_cq(struct ibv_context *context, int cqe);
int vb_destroy_cq(struct ibv_cq *cq);
int vb_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);

struct ibv_qp *vb_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int vb_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
int vb_destroy_qp(struct ibv_qp *qp);
int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                 struct ibv_send_wr **bad_wr);
int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                 struct ibv_recv_wr **bad_wr);

int vb_fork_init(void);
enum ibv_fork_status vb_is_fork_initialized(void);
const char *vb_wc_status_str(enum ibv_wc_status status);

#endif
