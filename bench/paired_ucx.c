/*
 * bench/ucx_paired: pscom over its ucx plugin against UCX's tag ping-pong
 * (ucp_tag_send_nbx and ucp_tag_recv_nbx, the loop ucx_perftest -t tag_lat
 * runs) in the same two processes; the driver is paired.c (paired.h says
 * why).
 *
 *   UCX_TLS=posix chrt -f 10 <builddir>/bench/ucx_paired --size 8 \
 *       --pairs 200 --cpu 0,1
 *
 * Prints the medians of the blocks of each, the median, quartiles and
 * range of the pairs' ratios (pscom/UCX, latency), and the same for the
 * pairs grouped by UCX's latency (placements). Latency is half the round
 * trip, one clock read per round trip, the median of a block. A benchmark
 * aid, not installed; bench/compare-ucx runs it with -P.
 *
 * PAIRED_PEER_ERRORS=1 puts UCX's endpoint in peer error-handling mode, the
 * mode of pscom's (ucx_perftest -e; on shared memory with
 * UCX_MM_ERROR_HANDLING=y, as pscom sets it): like for like, where UCX
 * picks other lanes in that mode (over tcp it leaves out the put-zcopy
 * rendezvous lanes, as the tcp memory domain cannot invalidate memory).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include "bench_util.h"
#include "paired.h"
#include "ucx_tls.h"

#define TAG 0x5053434fu

const struct backend backend = {
    .prog = "ucx_paired",
    .raw = "UCX tag ping-pong",
    .plugin = "ucx",
    .con_type = PSCOM_CON_TYPE_UCP,
    .env = "UCX_TLS",
};

struct ucx_side {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h ep;
};

static void ucx_check(ucs_status_t st, const char *what)
{
    if (st != UCS_OK) fail("%s: %s", what, ucs_status_string(st));
}

void raw_setup(struct side *s)
{
    struct ucx_side *u = calloc(1, sizeof(*u));
    if (!u) fail("out of memory");
    s->raw = u;
    ucp_config_t *cfg;
    ucx_check(ucp_config_read(NULL, NULL, &cfg), "ucp_config_read");
    const char *pe = getenv("PAIRED_PEER_ERRORS");
    int peer_errors = pe && !strcmp(pe, "1");
    if (pe && !peer_errors && strcmp(pe, "0"))
        fail("PAIRED_PEER_ERRORS is 0 or 1, not '%s'", pe);
    if (peer_errors) {
        raw_mode = "endpoint in peer error-handling mode (PAIRED_PEER_ERRORS=1)";
        /* As the plugin does (ucx_wrap.c). */
        if (!getenv("UCX_MM_ERROR_HANDLING") &&
            !getenv("UCX_POSIX_ERROR_HANDLING") &&
            !getenv("UCX_SYSV_ERROR_HANDLING") &&
            ucx_tls_wants_shm(getenv("UCX_TLS")))
            (void)ucp_config_modify(cfg, "MM_ERROR_HANDLING", "y");
    }
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                      .features = UCP_FEATURE_TAG};
    ucx_check(ucp_init(&p, cfg, &u->ctx), "ucp_init");
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucx_check(ucp_worker_create(u->ctx, &wp, &u->worker), "ucp_worker_create");
    ucp_address_t *addr;
    size_t len, peer_len;
    ucx_check(ucp_worker_get_address(u->worker, &addr, &len),
              "ucp_worker_get_address");
    void *peer = swap_blob(s->fd, addr, len, &peer_len);
    ucp_worker_release_address(u->worker, addr);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .address = peer,
                          .err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER
                                                  : UCP_ERR_HANDLING_MODE_NONE};
    ucx_check(ucp_ep_create(u->worker, &ep, &u->ep), "ucp_ep_create");
    free(peer);
}

static void ucx_wait(struct ucx_side *u, ucs_status_ptr_t sp, const char *what)
{
    if (UCS_PTR_IS_PTR(sp)) {
        ucs_status_t st;
        while ((st = ucp_request_check_status(sp)) == UCS_INPROGRESS)
            ucp_worker_progress(u->worker);
        ucp_request_free(sp);
        ucx_check(st, what);
    } else {
        ucx_check(UCS_PTR_STATUS(sp), what);
    }
}

void raw_send(struct side *s)
{
    struct ucx_side *u = s->raw;
    static const ucp_request_param_t p = {0};
    ucx_wait(u, ucp_tag_send_nbx(u->ep, s->sbuf, s->size, TAG, &p), "send");
}

void raw_recv(struct side *s)
{
    struct ucx_side *u = s->raw;
    static const ucp_request_param_t p = {0};
    ucx_wait(u, ucp_tag_recv_nbx(u->worker, s->rbuf, s->size, TAG, ~0ull, &p),
             "receive");
}

void raw_teardown(struct side *s)
{
    struct ucx_side *u = s->raw;
    ucp_ep_destroy(u->ep);
    ucp_worker_destroy(u->worker);
    ucp_cleanup(u->ctx);
    free(u);
}
