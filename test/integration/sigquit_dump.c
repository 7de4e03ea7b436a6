/*
 * PSP_SIGQUIT=1: a process hung in pscom_wait prints its state on SIGQUIT
 * and goes on running.
 *
 * The receiver (PSP_SIGQUIT=1, its stderr a pipe to the orchestrator)
 * holds an unexpected message of UNEXP_LEN bytes (tag 1), posts a receive
 * for tag 2, which nothing sends yet, and waits in pscom_wait. The
 * orchestrator sends it SIGQUIT and reads its stderr up to the end of the
 * dump, which must name the socket and the connection to the sender with
 * its posted receive and its unexpected message. Then the sender sends tag
 * 2: the receiver's wait ends, it takes tag 1 as well, and a child it forks
 * must still be ended by SIGQUIT; it exits 0. Without the feature the
 * default action of SIGQUIT ends the receiver and its stderr ends without
 * a dump.
 */
#include "itest.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define UNEXP_LEN 100
#define LATE_LEN  8
#define DUMP_END  "end of pscom state"

static int err_fd = -1; /* the receiver's stderr: the write end */

static uint32_t wanted_tag;

static int accept_tag(pscom_request_t *req, pscom_connection_t *con,
                      pscom_header_net_t *header_net)
{
    uint32_t tag;
    (void)req;
    (void)con;
    if (header_net->xheader_len < sizeof(tag)) return 0;
    memcpy(&tag, header_net->xheader, sizeof(tag));
    return tag == wanted_tag;
}

static pscom_request_t *tag_recv(pscom_connection_t *con, uint32_t tag,
                                 void *buf, size_t len)
{
    pscom_request_t *r = itest_request(sizeof(uint32_t));
    r->connection = con;
    r->socket = con->socket;
    r->xheader_len = sizeof(uint32_t);
    r->data = buf;
    r->data_len = len;
    r->ops.recv_accept = accept_tag;
    return r;
}

static int receiver(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    char unexp[UNEXP_LEN], late[LATE_LEN];
    (void)arg;

    if (dup2(err_fd, STDERR_FILENO) < 0)
        ITEST_FAIL("dup2(stderr): %s", strerror(errno));
    close(err_fd);
    setenv("PSP_SIGQUIT", "1", 1);
    pscom_connection_t *con = itest_accept_peer(link, "sqrecv", &sock);

    itest_step("waiting for the unexpected message of tag 1");
    pscom_request_t *probe = tag_recv(con, 1, NULL, 0);
    wanted_tag = 1;
    pscom_probe(probe);
    pscom_request_free(probe);

    itest_step("posting the receive of tag 2 and waiting in pscom_wait");
    pscom_request_t *r = tag_recv(con, 2, late, sizeof(late));
    wanted_tag = 2;
    pscom_post_recv(r);
    itest_link_send_str(link, "waiting");
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "the receive of tag 2, after the dump");
    ITEST_ASSERT_PATTERN(late, sizeof(late), 2, "tag 2");
    pscom_request_free(r);

    itest_step("taking the message of tag 1");
    r = tag_recv(con, 1, unexp, sizeof(unexp));
    wanted_tag = 1;
    pscom_post_recv(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "the receive of tag 1");
    ITEST_ASSERT_PATTERN(unexp, sizeof(unexp), 1, "tag 1");
    pscom_request_free(r);

    /* A forked child is not the one the dump is for: SIGQUIT does to it
     * what it did before pscom (here the default: the end, with a core). */
    itest_step("a forked child raising SIGQUIT");
    pid_t child = fork();
    if (child < 0) ITEST_FAIL("fork: %s", strerror(errno));
    if (child == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        raise(SIGQUIT);
        _exit(0);
    }
    int status;
    if (waitpid(child, &status, 0) != child)
        ITEST_FAIL("waitpid: %s", strerror(errno));
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGQUIT)
        ITEST_FAIL("the forked child was not ended by SIGQUIT (status 0x%x)",
                   (unsigned)status);
    pscom_close_socket(sock);
    return 0;
}

static void send_tag(pscom_connection_t *con, uint32_t tag, size_t len)
{
    char *buf = malloc(len);
    ITEST_ASSERT(buf != NULL, "out of memory");
    itest_fill(buf, len, tag);
    pscom_request_t *r = itest_request(sizeof(tag));
    pscom_req_prepare(r, con, buf, len, &tag, sizeof(tag));
    pscom_post_send(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "send of tag %u", tag);
    pscom_request_free(r);
    free(buf);
}

static int sender(itest_link_t *link, void *arg)
{
    pscom_socket_t *sock;
    (void)arg;
    pscom_connection_t *con = itest_connect_to_peer(link, "sqsend", &sock);
    itest_step("sending tag 1 (%d bytes)", UNEXP_LEN);
    send_tag(con, 1, UNEXP_LEN);
    itest_step("waiting until the receiver has printed its state");
    itest_link_wait_note(link);
    itest_step("sending tag 2");
    send_tag(con, 2, LATE_LEN);
    pscom_close_socket(sock);
    return 0;
}

/* The receiver's stderr up to and with the line that ends the dump; fails
 * when it ends before (the receiver died). */
static char *read_dump(int fd)
{
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    ITEST_ASSERT(buf != NULL, "out of memory");
    for (;;) {
        buf[len] = '\0';
        char *end = strstr(buf, DUMP_END);
        if (end && strchr(end, '\n')) return buf;
        if (len + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            ITEST_ASSERT(buf != NULL, "out of memory");
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) ITEST_FAIL("reading the receiver's stderr: %s",
                              strerror(errno));
        if (n == 0)
            ITEST_FAIL("the receiver's stderr ended without a dump of its "
                       "state; it wrote:\n%s", buf);
        len += (size_t)n;
    }
}

/* The line of text that contains every one of the NULL-terminated words,
 * or fails. */
static void expect_line(const char *text, const char *const *words)
{
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char *line = strndup(p, len);
        ITEST_ASSERT(line != NULL, "out of memory");
        bool all = true;
        for (int i = 0; words[i] && all; i++) all = strstr(line, words[i]);
        free(line);
        if (all) return;
        p += len + (eol ? 1 : 0);
    }
    char want[512] = "";
    for (int i = 0; words[i]; i++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), " '%s'",
                 words[i]);
    ITEST_FAIL("no line of the dump holds all of%s", want);
}

int main(void)
{
    itest_child_t rc, sc;
    int fds[2];

    itest_set_role("orchestrator");
    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 15);
    if (pipe(fds) < 0) ITEST_FAIL("pipe(): %s", strerror(errno));
    err_fd = fds[1];
    itest_spawn(&rc, "receiver", receiver, NULL);
    close(fds[1]); /* the sender must not hold it: EOF when the receiver dies */
    itest_spawn(&sc, "sender", sender, NULL);
    itest_link_relay(&rc.link, &sc.link);

    itest_step("waiting until the receiver waits");
    free(itest_link_recv_str(&rc.link));
    itest_step("sending SIGQUIT to the receiver");
    itest_child_kill(&rc, SIGQUIT);
    char *dump = read_dump(fds[0]);
    itest_note("the receiver wrote:\n%s", dump);

    expect_line(dump, (const char *const[]){"SIGQUIT (PSP_SIGQUIT=1)",
                                            "state of pscom follows", NULL});
    expect_line(dump, (const char *const[]){"socket sqrecv", "connections=1",
                                            NULL});
    char unexp[32];
    snprintf(unexp, sizeof(unexp), "unexpected=1 (%d B)", UNEXP_LEN);
    expect_line(dump, (const char *const[]){"connection sqrecv", "<-> sqsend",
                                            "state=open", "recvs=1 ", unexp,
                                            NULL});
    expect_line(dump, (const char *const[]){"handshakes under way: 0", NULL});
    free(dump);

    itest_step("letting the sender send tag 2");
    itest_link_send_str(&sc.link, "go");
    /* The receiver must not have died of the signal: its exit status. */
    rc.killed = 0;
    int failed = itest_children_check((itest_child_t *[]){&rc, &sc}, 2);
    close(fds[0]);
    if (failed) return ITEST_EXIT_FAIL;
    itest_note("passed");
    return 0;
}
