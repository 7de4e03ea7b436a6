/*
 * exit() with sends that cannot drain ends within PSP_SHUTDOWN_TIMEOUT in
 * all: the exit handler's flush of every connection and the sockets'
 * graceful ends share that one budget.
 *
 * A accepts four connections from B and posts a send of 16 MiB on each;
 * B never reads. A then calls exit(0) with PSP_SHUTDOWN_TIMEOUT=1000, so
 * its exit should take about 1 s. The watchdog (6 s) fails the test when
 * A has not ended by then; B is then killed. It fires when each close
 * waits a timeout of its own (4 closes, each waiting for the sends and
 * then for the EOF behind them: 8 s).
 */
#include "itest.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define NCON 4
#define LEN  (16u << 20)

/* The sends fail in the exit handler: their requests go then. */
static void free_failed(pscom_request_t *r)
{
    pscom_request_free(r);
}

static int sender(itest_link_t *link, void *arg)
{
    (void)arg;
    setenv("PSP_SHUTDOWN_TIMEOUT", "1000", 1);
    itest_pscom_init();
    pscom_socket_t *s = itest_open_socket("A", 1);
    char *ep = itest_ep_str(s);
    itest_link_send_str(link, ep);
    free(ep);
    itest_wait_accept(NCON);
    static char *buf; /* reachable until exit: the sends use it */
    buf = malloc(LEN);
    ITEST_ASSERT(buf, "allocation");
    memset(buf, 1, LEN);
    for (int i = 0; i < NCON; i++) {
        pscom_request_t *r = itest_request(0);
        pscom_req_prepare(r, itest_accepted(i), buf, LEN, NULL, 0);
        r->ops.io_done = free_failed;
        pscom_post_send(r);
    }
    itest_progress_ms(300); /* the peer's socket buffers are full */
    exit(0);
}

static int receiver(itest_link_t *link, void *arg)
{
    (void)arg;
    itest_pscom_init();
    pscom_socket_t *s = itest_open_socket("B", 0);
    char *ep = itest_link_recv_str(link);
    for (int i = 0; i < NCON; i++) itest_connect(s, ep);
    free(ep);
    itest_sleep_ms(60000); /* never reads; killed when A is done */
    return 0;
}

int main(void)
{
    setenv("PSCOM_TEST_TRANSPORT", "tcp", 1);
    itest_watchdog(6);
    itest_child_t a, b;
    itest_spawn(&a, "A", sender, NULL);
    itest_spawn(&b, "B", receiver, NULL);
    itest_link_relay(&a.link, &b.link);
    int rc = itest_child_check(&a);
    itest_child_kill(&b, SIGKILL);
    itest_child_wait(&b);
    return rc;
}
