/*
 * ofi_wrap.c against the real libfabric: what the plugin asks of a
 * provider (fi_getinfo is wrapped, -Wl,--wrap=fi_getinfo, to see the
 * hints), that the providers of this machine grant it, and that a receive
 * directed at one peer takes nothing of another endpoint over tcp;ofi_rxm.
 * A provider that is not here is skipped, with a line that says so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <rdma/fabric.h>

#include "ofi_wrap.h"

/* ---------------------------------------------------------------------- */
/* fi_getinfo, watched                                                    */

int __real_fi_getinfo(uint32_t version, const char *node, const char *service,
                      uint64_t flags, const struct fi_info *hints,
                      struct fi_info **info);
int __wrap_fi_getinfo(uint32_t version, const char *node, const char *service,
                      uint64_t flags, const struct fi_info *hints,
                      struct fi_info **info);

static struct fi_info *hints_seen; /* a copy of the last call's hints */

int __wrap_fi_getinfo(uint32_t version, const char *node, const char *service,
                      uint64_t flags, const struct fi_info *hints,
                      struct fi_info **info)
{
    if (hints) {
        if (hints_seen) fi_freeinfo(hints_seen);
        hints_seen = fi_dupinfo(hints);
    }
    return __real_fi_getinfo(version, node, service, flags, hints, info);
}

/* Does libfabric have provider prov here at all (RDM endpoints, nothing
 * else asked)? */
static int provider_here(const char *prov)
{
    struct fi_info *hints = fi_allocinfo(), *list = NULL;
    assert_non_null(hints);
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup(prov);
    int rc = __real_fi_getinfo(FI_VERSION(1, 10), NULL, NULL, 0, hints,
                               &list);
    fi_freeinfo(hints);
    if (list) fi_freeinfo(list);
    return rc == 0 && list;
}

/* ---------------------------------------------------------------------- */
/* What is asked                                                          */

/* Every provider is asked for receives directed at one peer (no other
 * endpoint's message may become a connection's frame) and for sends to one
 * peer matched in order (chunks k and k + 255 of a frame's rest share a
 * tag). */
static void test_hints(void **state)
{
    ofw_info_t info;
    char why[512];
    (void)state;
    (void)ofw_select(NULL, NULL, &info, why, sizeof(why));
    assert_non_null(hints_seen);
    assert_int_equal(hints_seen->ep_attr->type, FI_EP_RDM);
    assert_true(hints_seen->caps & FI_TAGGED);
    assert_true(hints_seen->caps & FI_DIRECTED_RECV);
    assert_true(hints_seen->tx_attr->msg_order & FI_ORDER_SAS);
    assert_true(hints_seen->rx_attr->msg_order & FI_ORDER_SAS);
    ofw_unselect();
}

/* shm and tcp;ofi_rxm, where libfabric has them, grant what is asked. */
static void test_providers_grant_it(void **state)
{
    static const char *provs[] = {"shm", "tcp;ofi_rxm"};
    unsigned here = 0;
    (void)state;
    for (size_t i = 0; i < sizeof(provs) / sizeof(provs[0]); i++) {
        if (!provider_here(provs[i])) {
            print_message("provider %s is not here\n", provs[i]);
            continue;
        }
        here++;
        ofw_info_t info;
        char why[512] = "";
        int rc = ofw_select(provs[i], NULL, &info, why, sizeof(why));
        if (rc) print_message("%s: %s\n", provs[i], why);
        assert_int_equal(rc, 0);
        assert_string_equal(info.prov, provs[i]);
        ofw_unselect();
    }
    if (!here) skip();
}

/* ---------------------------------------------------------------------- */
/* A directed receive, tcp;ofi_rxm                                        */

struct end {
    ofw_ep_t *ep;
    uint8_t addr[OFW_ADDR_MAX];
    size_t addr_len;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Progress every end for `seconds`, or until ctx completed (not NULL):
 * 1 when it did. */
static int poll_ends(struct end *ends, size_t n, double seconds,
                     const ofw_ctx_t *ctx)
{
    double until = now_s() + seconds;
    while (now_s() < until) {
        for (size_t i = 0; i < n; i++) {
            ofw_comp_t c[4];
            ssize_t got = ofw_cq_read(ends[i].ep, c, 4);
            assert_true(got >= 0);
            for (ssize_t k = 0; k < got; k++)
                if (ctx && c[k].ctx == ctx) return 1;
        }
    }
    return 0;
}

static void send_and_wait(struct end *ends, size_t n, struct end *from,
                          uint64_t dest, const char *msg, uint64_t tag)
{
    ofw_ctx_t ctx;
    struct iovec iov = {(void *)msg, strlen(msg) + 1};
    ssize_t rc;
    while ((rc = ofw_tsendv(from->ep, &iov, 1, dest, tag, &ctx)) == -EAGAIN)
        poll_ends(ends, n, 0.001, NULL);
    assert_int_equal(rc, 0);
    assert_true(poll_ends(ends, n, 10, &ctx));
    /* Until it is in the receiver's queue of unexpected messages. */
    poll_ends(ends, n, 0.2, NULL);
}

static void recv_from(struct end *ends, size_t n, uint64_t src, uint64_t tag,
                      char *buf, size_t len)
{
    ofw_ctx_t ctx;
    memset(buf, 0, len);
    assert_int_equal(ofw_trecv(ends[0].ep, buf, len, src, tag, 0, &ctx), 0);
    assert_true(poll_ends(ends, n, 10, &ctx));
}

/* A receiver posts a receive directed at its peer only after a stranger's
 * message with the same tag arrived before the peer's: it gets the
 * peer's, and the stranger's waits for a receive directed at the
 * stranger. With receives from anyone it got the stranger's first. */
static void test_directed_receive(void **state)
{
    (void)state;
    if (!provider_here("tcp;ofi_rxm")) {
        print_message("provider tcp;ofi_rxm is not here\n");
        skip();
    }
    ofw_info_t info;
    char why[512];
    assert_int_equal(ofw_select("tcp;ofi_rxm", NULL, &info, why, sizeof(why)),
                     0);
    struct end ends[3]; /* receiver, peer, stranger */
    for (int i = 0; i < 3; i++) {
        ends[i].addr_len = sizeof(ends[i].addr);
        assert_int_equal(ofw_ep_open(&ends[i].ep, ends[i].addr,
                                     &ends[i].addr_len, why, sizeof(why)),
                         0);
    }
    uint64_t peer, stranger, to_receiver[3];
    assert_int_equal(ofw_av_insert(ends[0].ep, ends[1].addr, ends[1].addr_len,
                                   &peer), 0);
    assert_int_equal(ofw_av_insert(ends[0].ep, ends[2].addr, ends[2].addr_len,
                                   &stranger), 0);
    for (int i = 1; i < 3; i++)
        assert_int_equal(ofw_av_insert(ends[i].ep, ends[0].addr,
                                       ends[0].addr_len, &to_receiver[i]),
                         0);

    const uint64_t tag = 0x1234567800000100ull;
    send_and_wait(ends, 3, &ends[2], to_receiver[2], "stranger", tag);
    send_and_wait(ends, 3, &ends[1], to_receiver[1], "peer", tag);
    char buf[64];
    recv_from(ends, 3, peer, tag, buf, sizeof(buf));
    assert_string_equal(buf, "peer");
    recv_from(ends, 3, stranger, tag, buf, sizeof(buf));
    assert_string_equal(buf, "stranger");

    for (int i = 0; i < 3; i++) ofw_ep_close(ends[i].ep);
    ofw_unselect();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hints),
        cmocka_unit_test(test_providers_grant_it),
        cmocka_unit_test(test_directed_receive),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (hints_seen) fi_freeinfo(hints_seen);
    return rc;
}
