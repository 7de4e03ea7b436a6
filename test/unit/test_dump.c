/*
 * The state dump (pscom_dump_info) and PSP_SIGQUIT.
 *
 * The dump names, per connection, what it waits for: posted receives,
 * queued sends with their bytes, unexpected messages with their bytes;
 * per socket the any-source receives, its groups with a collective under
 * way and what they wait for, and the handshakes under way. The program
 * runs with PSP_SIGQUIT=1, its log in a file, and an application SIGQUIT
 * handler installed before pscom_init: a raised SIGQUIT calls that
 * handler, and the next rounds of progress write to the log the same dump
 * that pscom_dump_info prints.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>

#include "frames.h"

#define SEND_LEN  1000
#define UNEXP_LEN 50
#define GROUP_ID  7

static char log_path[] = "/tmp/pscom_test_dump_XXXXXX";
static volatile sig_atomic_t app_handler_calls;
#ifdef DUMP_SIGINFO
/* Built with DUMP_SIGINFO: the application's handler is an SA_SIGINFO
 * one, and must get the signal's information. */
static volatile sig_atomic_t app_siginfo_ok;

static void app_siginfo_handler(int sig, siginfo_t *info, void *uctx)
{
    app_handler_calls++;
    app_siginfo_ok = sig == SIGQUIT && info && info->si_signo == SIGQUIT &&
                     uctx != NULL;
}
#else
static void app_handler(int sig)
{
    (void)sig;
    app_handler_calls++;
}
#endif

static pscom_socket_t *sock;
static pscom_connection_t *con;
static pscom_group_t *group;
static pscom_request_t *recv_r, *any_r, *send_r, *bcast_r;
static char recv_buf[64], send_buf[SEND_LEN], bcast_buf[16];

static int reject_all(pscom_request_t *req, pscom_connection_t *c,
                      pscom_header_net_t *h)
{
    (void)req;
    (void)c;
    (void)h;
    return 0;
}

static pscom_request_t *unmatched_recv(pscom_connection_t *c)
{
    pscom_request_t *r = pscom_request_create(4, 0);
    r->socket = sock;
    r->connection = c;
    r->data = recv_buf;
    r->data_len = sizeof(recv_buf);
    r->xheader_len = 4;
    r->ops.recv_accept = reject_all;
    pscom_post_recv(r);
    return r;
}

/* A connection without transport to "peer"(r3), holding a posted
 * receive, a queued send, an unexpected message; an any-source receive on
 * its socket; a group whose broadcast waits for the peer. */
static int busy_setup(void **state)
{
    (void)state;
    sock = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(sock);
    pscom_socket_set_name(sock, "dumper");
    con = pscom_open_connection(sock);
    assert_non_null(con);
    strcpy(con->remote_con_info.name, "peer");
    con->remote_con_info.rank = 3;

    recv_r = unmatched_recv(con);
    any_r = unmatched_recv(NULL);

    uint32_t tag = 1;
    send_r = pscom_request_create(sizeof(tag), 0);
    pscom_req_prepare(send_r, con, send_buf, sizeof(send_buf), &tag,
                      sizeof(tag));
    pscom_post_send(send_r);

    struct frame f;
    char unexp[UNEXP_LEN] = {0};
    frame_user(&f, 2, unexp, sizeof(unexp));
    assert_int_equal(feed(con, &f), 0);

    pscom_connection_t *members[2] = {con, NULL};
    group = pscom_group_open(sock, GROUP_ID, 1, 2, members);
    assert_non_null(group);
    bcast_r = pscom_request_create(sizeof(pscom_xheader_bcast_t), 0);
    bcast_r->socket = sock;
    bcast_r->data = bcast_buf;
    bcast_r->data_len = sizeof(bcast_buf);
    bcast_r->xheader_len = sizeof(pscom_xheader_bcast_t);
    bcast_r->xheader.bcast.group_id = GROUP_ID;
    bcast_r->xheader.bcast.bcast_root = 0;
    pscom_post_bcast(bcast_r);
    return 0;
}

static int busy_teardown(void **state)
{
    (void)state;
    pscom_close_socket(sock);
    pscom_group_close(group);
    pscom_request_free(recv_r);
    pscom_request_free(any_r);
    pscom_request_free(send_r);
    pscom_request_free(bcast_r);
    return 0;
}

/* What pscom_dump_info prints (malloc'ed). */
static char *dump_info(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    assert_non_null(m);
    pscom_dump_info(m);
    assert_int_equal(fclose(m), 0);
    return text;
}

/* Fails unless one line of text holds every one of the NULL-terminated
 * words. */
static void expect_line(const char *text, const char *const *words)
{
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char *line = strndup(p, len);
        assert_non_null(line);
        bool all = true;
        for (int i = 0; words[i] && all; i++) all = strstr(line, words[i]);
        free(line);
        if (all) return;
        p += len + (eol ? 1 : 0);
    }
    print_error("no line holds '%s' (and the rest) in:\n%s\n", words[0], text);
    fail();
}

#define EXPECT_LINE(text, ...)                                                 \
    expect_line((text), (const char *const[]){__VA_ARGS__, NULL})

static void dump_names_what_waits(void **state)
{
    (void)state;
    char *text = dump_info();
    char sends[48], unexp[48];
    snprintf(sends, sizeof(sends), "sends=1 (%zu B)",
             PSC_HDR_LEN + sizeof(uint32_t) + SEND_LEN);
    snprintf(unexp, sizeof(unexp), "unexpected=1 (%d B)", UNEXP_LEN);

    EXPECT_LINE(text, "pscom ", " state: pid ");
    EXPECT_LINE(text, "socket dumper(r0) not listening", "connections=1",
                "anysrc_recvs=1");
    EXPECT_LINE(text, "connection dumper(r0) <-> peer(r3)", "recvs=1 ", sends,
                "rndv_sends=0 (0 B)", "rndv_recvs=0", unexp);
    EXPECT_LINE(text, "group 7 rank 1 of 2: 1 broadcast/barrier under way");
    EXPECT_LINE(text, "waiting for the broadcast of root 0 from group rank 0: "
                      "peer(r3)");
    EXPECT_LINE(text, "receives from any socket: 0");
    EXPECT_LINE(text, "handshakes under way: 0");
    EXPECT_LINE(text, "end of pscom state");

    /* pscom_dump_connection prints the connection's line of the dump. */
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    assert_non_null(m);
    pscom_dump_connection(m, con);
    fclose(m);
    assert_non_null(strstr(text, line));
    free(line);
    free(text);
}

/* The log file's text (malloc'ed). */
static char *read_log(void)
{
    FILE *f = fopen(log_path, "r");
    assert_non_null(f);
    char *text = calloc(1, 1 << 20);
    assert_non_null(text);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* The log's lines from the one holding `from` up to "end of pscom state",
 * without their "<pscom:PID:HOST> " prefix (malloc'ed), or NULL. */
static char *log_dump(const char *log, const char *from)
{
    const char *p = strstr(log, from);
    if (!p) return NULL;
    while (p > log && p[-1] != '\n') p--;
    const char *end = strstr(p, "end of pscom state\n");
    if (!end) return NULL;
    end += strlen("end of pscom state\n");
    char *out = calloc(1, (size_t)(end - p) + 1);
    assert_non_null(out);
    size_t o = 0;
    while (p < end) {
        const char *gt = strstr(p, "> ");
        assert_non_null(gt);
        const char *eol = strchr(p, '\n');
        memcpy(out + o, gt + 2, (size_t)(eol - gt - 1));
        o += (size_t)(eol - gt - 1);
        p = eol + 1;
    }
    return out;
}

static void sigquit_dumps_in_progress(void **state)
{
    (void)state;
    watchdog_start(30);
    raise(SIGQUIT);
    /* The application's handler ran, at once, and we are alive. */
    assert_int_equal(app_handler_calls, 1);
#ifdef DUMP_SIGINFO
    assert_true(app_siginfo_ok);
#endif

    char *logged = NULL;
    while (!logged) {
        for (int i = 0; i < 1024; i++) psc_progress();
        char *log = read_log();
        logged = log_dump(log, " state: pid ");
        if (logged)
            assert_non_null(
                strstr(log, "SIGQUIT (PSP_SIGQUIT=1): the state of pscom "
                            "follows"));
        free(log);
    }
    watchdog_stop();

    char *text = dump_info();
    assert_string_equal(logged, text);
    free(text);
    free(logged);
}

/* A listener with a TCP connection that sent nothing: its handshake. */
static void handshake_listed(void **state)
{
    (void)state;
    pscom_socket_t *ls = pscom_open_socket(0, 0, 0, 0);
    assert_non_null(ls);
    pscom_socket_set_name(ls, "lsn");
    assert_int_equal(pscom_listen(ls, PSCOM_ANYPORT), PSCOM_SUCCESS);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)ls->listen_portno),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);

    watchdog_start(30);
    while (psc_list_empty(&psc_ctx.precons)) psc_progress();
    watchdog_stop();

    char *text = dump_info();
    char port[32];
    snprintf(port, sizeof(port), "port %d", ls->listen_portno);
    EXPECT_LINE(text, "socket lsn(r0) ", port, "connections=0");
    EXPECT_LINE(text, "handshakes under way: 1");
    EXPECT_LINE(text, "handshake lsn(r0) <- 127.0.0.1:", ": hello");
    free(text);
    close(fd);
    pscom_close_socket(ls);
}

int main(void)
{
    int fd = mkstemp(log_path);
    if (fd < 0) return 1;
    close(fd);
    setenv("PSP_SIGQUIT", "1", 1);
    setenv("PSP_DEBUG_OUT", log_path, 1);
#ifdef DUMP_SIGINFO
    struct sigaction sa = {.sa_sigaction = app_siginfo_handler,
                           .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGQUIT, &sa, NULL);
#else
    signal(SIGQUIT, app_handler);
#endif
    if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) return 1;

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(dump_names_what_waits, busy_setup,
                                        busy_teardown),
        cmocka_unit_test_setup_teardown(sigquit_dumps_in_progress, busy_setup,
                                        busy_teardown),
        cmocka_unit_test(handshake_listed),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(log_path);
    return failed;
}
