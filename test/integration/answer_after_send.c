/*
 * A send's completion is seen before the callback of the peer's answer to
 * it, as ParaStation MPI's partitioned communication needs.
 *
 * The origin sends a message of ANSWER_MSG_LEN bytes (default 512 KiB:
 * rendezvous for UCX and libfabric, pull mode for ofi over shm) with an
 * io_done callback, and receives the answer, 8 bytes, with one. Between
 * its calls of pscom_test_any, as MPI_Test does, it notes when it sees the
 * send done (then MPI would start the next round). The answerer answers
 * as soon as it has the message, and checks the message after.
 *
 * A transport whose sends complete on the peer's acknowledgement may
 * report the send done and the answer in the same call of its progress
 * op; the core must then run the answer's callback in a later round, after
 * the caller saw the send done. ParaStation MPI's partitioned sender, whose
 * clear-to-send callback found no MPI_Start, crashed in every run over UCX
 * tcp, libfabric's tcp;ofi_rxm and shm before (doc/architecture.md,
 * "Failure and closing").
 *
 * Checked, in each of ANSWER_ROUNDS rounds: the answer's callback ran after
 * the origin saw its send done, and after the send's own callback; both
 * requests succeeded; the message and the answer arrived intact.
 */
#include "itest.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ANSWER_LEN 8
#define NAP_US     20

/* From the environment, read before the processes are forked. */
static size_t len;  /* ANSWER_MSG_LEN */
static unsigned n;  /* ANSWER_ROUNDS */

static unsigned long env_or(const char *name, unsigned long dflt)
{
    const char *s = getenv(name);
    return s ? strtoul(s, NULL, 0) : dflt;
}

static char *msg_buffer(void)
{
    char *buf = malloc(len);
    ITEST_ASSERT(buf != NULL, "out of memory");
    return buf;
}

/* The origin's view of the current round. */
static unsigned round_no;
static bool send_cb_ran;  /* the send's io_done ran */
static bool seen_done;    /* the loop saw the send done between two tests */
static unsigned late;     /* answers whose callback came too early */
static unsigned first_late = ~0u;

static void send_done(pscom_request_t *r)
{
    send_cb_ran = true;
}

static void answer_done(pscom_request_t *r)
{
    if (!seen_done || !send_cb_ran) {
        if (!late) first_late = round_no;
        late++;
    }
}

static int origin(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_connect_to_peer(link, "origin", &sock);
    char *buf = msg_buffer();
    itest_step("%u rounds of %zu bytes and an answer, over %s", n, len,
               pscom_con_type_str(con->type));
    pscom_request_t *s = itest_request(0);
    pscom_request_t *a = itest_request(0);
    const struct timespec nap = {.tv_nsec = NAP_US * 1000};
    for (round_no = 0; round_no < n; round_no++) {
        char got[ANSWER_LEN];
        a->connection = con;
        a->data = got;
        a->data_len = sizeof(got);
        a->xheader_len = 0;
        a->ops.io_done = answer_done;
        pscom_post_recv(a);

        itest_fill(buf, len, round_no);
        pscom_req_prepare(s, con, buf, len, NULL, 0);
        s->ops.io_done = send_done;
        send_cb_ran = seen_done = false;
        pscom_post_send(s);
        while (!pscom_req_is_done(a)) {
            if (pscom_req_is_done(s)) seen_done = true;
            pscom_test_any();
            /* Busy elsewhere for a moment, as an application between two
             * tests (or a process that lost its core): the acknowledgement
             * and the answer then wait for the same call. */
            nanosleep(&nap, NULL);
        }
        ITEST_ASSERT_REQ_OK(s, "the message of round %u", round_no);
        ITEST_ASSERT_REQ_OK(a, "the answer of round %u", round_no);
        ITEST_ASSERT_PATTERN(got, sizeof(got), round_no, "the answer of round "
                             "%u", round_no);
    }
    ITEST_ASSERT(late == 0, "%u of %u answers ran their callback before the "
                 "send they answer was seen done (the first in round %u)",
                 late, n, first_late);
    pscom_request_free(s);
    pscom_request_free(a);
    free(buf);
    itest_link_send_str(link, "done");
    pscom_close_socket(sock);
    return 0;
}

static int answerer(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_accept_peer(link, "answerer", &sock);
    char *buf = msg_buffer();
    pscom_request_t *r = itest_request(0);
    for (unsigned i = 0; i < n; i++) {
        r->connection = con;
        r->data = buf;
        r->data_len = len;
        r->xheader_len = 0;
        pscom_post_recv(r);
        pscom_wait(r);
        /* At once, as the acknowledgement that ended the send goes: the
         * message is checked after. */
        char answer[ANSWER_LEN];
        itest_fill(answer, sizeof(answer), i);
        pscom_send(con, NULL, 0, answer, sizeof(answer));
        ITEST_ASSERT_REQ_OK(r, "the message of round %u", i);
        ITEST_ASSERT_EQ(r->header.data_len, len, "length of round %u", i);
        ITEST_ASSERT_PATTERN(buf, len, i, "the message of round %u", i);
    }
    pscom_request_free(r);
    free(buf);
    itest_link_wait_note(link); /* the origin checked everything */
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    itest_child_t o, a;

    len = env_or("ANSWER_MSG_LEN", 512 * 1024);
    n = (unsigned)env_or("ANSWER_ROUNDS", 300);
    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_note("transport %s", itest_transport_name());
    itest_spawn(&a, "answerer", answerer, NULL);
    itest_spawn(&o, "origin", origin, NULL);
    itest_link_relay(&a.link, &o.link); /* the endpoint */
    itest_link_relay(&o.link, &a.link); /* done */
    int failed = itest_children_check((itest_child_t *[]){&a, &o}, 2);
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
