/*
 * The sender's close gives up on a rendezvous send while the receiver is
 * inside its cross-memory pull of it: the receiver must not complete with
 * bytes written after the send failed.
 *
 * Linked with the static core and -Wl,--wrap=process_vm_readv. B (the
 * receiver) posts its receive; its pull has passed the check before the
 * copy when the wrapper asks A (the sender) to close. A's close fails the
 * send (PSP_SHUTDOWN_TIMEOUT=200), A fills the buffer with other bytes and
 * says so; only then does the wrapper copy. The copy reads the new bytes,
 * and the check after it (pulls_revoked) must drop them: the receive fails
 * or delivers what was sent. Meson sets PSP_SHM_CMA and PSP_SHM_RENDEZVOUS
 * low so that the message is pulled.
 */
#include "itest.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#define LEN (1u << 20)

ssize_t __real_process_vm_readv(pid_t pid, const struct iovec *local,
                                unsigned long liovcnt,
                                const struct iovec *remote,
                                unsigned long riovcnt, unsigned long flags);
ssize_t __wrap_process_vm_readv(pid_t pid, const struct iovec *local,
                                unsigned long liovcnt,
                                const struct iovec *remote,
                                unsigned long riovcnt, unsigned long flags);

static itest_link_t *b_link; /* set in B: the first pull waits for A */

ssize_t __wrap_process_vm_readv(pid_t pid, const struct iovec *local,
                                unsigned long liovcnt,
                                const struct iovec *remote,
                                unsigned long riovcnt, unsigned long flags)
{
    if (b_link) {
        itest_link_t *link = b_link;
        b_link = NULL;
        itest_link_send_u64(link, 1); /* A: close now */
        itest_link_recv_u64(link);    /* A closed and wrote its buffer */
    }
    return __real_process_vm_readv(pid, local, liovcnt, remote, riovcnt,
                                   flags);
}

static int sender(itest_link_t *link, void *arg)
{
    (void)arg;
    setenv("PSP_SHUTDOWN_TIMEOUT", "200", 1);
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_accept_peer(link, "A", &sock);
    char *buf = malloc(LEN);
    ITEST_ASSERT(buf, "allocation");
    itest_fill(buf, LEN, 7);
    pscom_request_t *r = itest_request(0);
    pscom_req_prepare(r, con, buf, LEN, NULL, 0);
    pscom_post_send(r);
    itest_step("waiting until B pulls");
    while (!itest_link_ready(link, 0)) itest_progress_once();
    itest_link_recv_u64(link);
    pscom_close_connection(con);
    ITEST_ASSERT(pscom_req_is_done(r) && !pscom_req_successful(r),
                 "the send did not fail in the close (state %s)",
                 pscom_req_state_str(r->state));
    memset(buf, 'X', LEN); /* the application's again */
    itest_link_send_u64(link, 0);
    itest_step("waiting for B's verdict");
    itest_link_recv_u64(link);
    pscom_request_free(r);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

static int receiver(itest_link_t *link, void *arg)
{
    (void)arg;
    pscom_socket_t *sock;
    pscom_connection_t *con = itest_connect_to_peer(link, "B", &sock);
    ITEST_ASSERT(con->type == PSCOM_CON_TYPE_SHM, "the connection runs on "
                 "%s, not shm", pscom_con_type_str(con->type));
    char *buf = itest_alloc_guarded(LEN);
    pscom_request_t *r = itest_request(0);
    pscom_req_prepare(r, con, buf, LEN, NULL, 0);
    b_link = link;
    itest_step("receiving (A closes during the pull)");
    pscom_post_recv(r);
    pscom_wait(r);
    ITEST_ASSERT(!b_link, "the message was not pulled");
    itest_note("receive: %s", pscom_req_state_str(r->state));
    if (pscom_req_successful(r))
        ITEST_ASSERT_PATTERN(buf, LEN, 7, "the message received");
    ITEST_ASSERT_GUARD(buf, LEN, "the receive");
    itest_link_send_u64(link, 0);
    pscom_request_free(r);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    setenv("PSCOM_TEST_TRANSPORT", "shm", 1);
    itest_watchdog(ITEST_DEFAULT_TIMEOUT);
    itest_child_t a, b;
    itest_spawn(&a, "A", sender, NULL);
    itest_spawn(&b, "B", receiver, NULL);
    itest_link_relay(&a.link, &b.link);                         /* endpoint */
    itest_link_send_u64(&a.link, itest_link_recv_u64(&b.link)); /* close */
    itest_link_send_u64(&b.link, itest_link_recv_u64(&a.link)); /* written */
    itest_link_send_u64(&a.link, itest_link_recv_u64(&b.link)); /* verdict */
    return itest_children_check((itest_child_t *[]){&a, &b}, 2);
}
