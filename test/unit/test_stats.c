/*
 * PSP_DEBUG_STATS: a connection that was established prints one line of
 * statistics when it is closed, also at exit for those still open, also
 * with PSP_DEBUG=0. The line counts every user message once, eager or by
 * rendezvous, expected or unexpected, over each transport (loop, shm, tcp),
 * and the one-sided operations posted; one-sided messages are no user
 * messages. Without PSP_DEBUG_STATS nothing is printed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core.h"
#include "pscom.h"

#include "con_pair.h"

struct stats {
    unsigned long long tx_msgs, tx_bytes, tx_rndv;
    unsigned long long rx_msgs, rx_bytes, rx_rndv, rx_unexpected;
    unsigned long long rma_ops, rma_bytes;
};

static char log_path[64];

static void log_capture_start(void)
{
    strcpy(log_path, "/tmp/test_stats_log.XXXXXX");
    int fd = mkstemp(log_path);
    assert_true(fd >= 0);
    close(fd);
    psc_log_open(log_path);
}

/* The whole file (free it). */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static char *log_capture_end(void)
{
    psc_log_open(NULL);
    char *log = read_file(log_path);
    unlink(log_path);
    return log;
}

/* The statistics of the one line of log that contains `who` (like
 * "connection sa(r0) <-> sb(r1)@") and "[type]"; fails unless there is
 * exactly one. */
static struct stats stats_of(const char *log, const char *who,
                             const char *type)
{
    char tag[32];
    struct stats s;
    int lines = 0;

    snprintf(tag, sizeof(tag), "[%s]: statistics: ", type);
    for (const char *p = log; *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char line[1024];

        snprintf(line, sizeof(line), "%.*s", (int)len, p);
        p += len + (end ? 1 : 0);
        char *at = strstr(line, tag);
        if (!at || !strstr(line, who)) continue;
        lines++;
        assert_int_equal(
            sscanf(at + strlen(tag),
                   "sent %llu messages, %llu bytes (%llu by rendezvous); "
                   "received %llu messages, %llu bytes (%llu by rendezvous, "
                   "%llu unexpected); one-sided %llu operations, %llu bytes",
                   &s.tx_msgs, &s.tx_bytes, &s.tx_rndv, &s.rx_msgs,
                   &s.rx_bytes, &s.rx_rndv, &s.rx_unexpected, &s.rma_ops,
                   &s.rma_bytes),
            9);
    }
    if (lines != 1) print_error("%d statistics lines for %s [%s] in:\n%s\n",
                                lines, who, type, log);
    assert_int_equal(lines, 1);
    return s;
}

static int stats_lines(const char *log)
{
    int n = 0;
    for (const char *p = log; (p = strstr(p, ": statistics: ")); p++) n++;
    return n;
}

static pscom_socket_t *named_socket(const char *name, int rank)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, rank, 0);
    assert_non_null(s);
    pscom_socket_set_name(s, name);
    s->ops.con_accept = on_accept;
    return s;
}

/* One message of len bytes from `from` to `to`, its receive posted first
 * (expected) or after it arrived (unexpected). */
static void transfer(pscom_connection_t *from, pscom_connection_t *to,
                     size_t len, bool unexpected)
{
    char *out = malloc(len + 1), *in = malloc(len + 1);
    for (size_t i = 0; i < len; i++) out[i] = (char)(i * 7 + len);

    pscom_request_t *s = pscom_request_create(0, 0);
    pscom_request_t *r = pscom_request_create(0, 0);
    s->connection = from;
    s->data = out;
    s->data_len = len;
    r->connection = to;
    r->data = in;
    r->data_len = len;
    if (unexpected) {
        pscom_post_send(s);
        pscom_request_t *p = pscom_request_create(0, 0);
        p->connection = to;
        pscom_probe(p);
        pscom_request_free(p);
        pscom_post_recv(r);
    } else {
        pscom_post_recv(r);
        pscom_post_send(s);
    }
    pscom_wait(r);
    pscom_wait(s);
    assert_true(pscom_req_successful(s));
    assert_true(pscom_req_successful(r));
    assert_memory_equal(in, out, len);
    pscom_request_free(s);
    pscom_request_free(r);
    free(out);
    free(in);
}

/* A one-sided write of len bytes from `from` into dest. */
static void rma_write(pscom_connection_t *from, char *dest, size_t len)
{
    char *out = malloc(len);
    memset(out, 'w', len);
    pscom_request_t *w = pscom_request_create(sizeof(pscom_xheader_rma_write_t), 0);
    w->connection = from;
    w->xheader.rma_write.dest = dest;
    w->data = out;
    w->data_len = len;
    pscom_post_rma_write(w);
    pscom_wait(w);
    assert_true(pscom_req_successful(w));
    pscom_request_free(w);
    while (memcmp(dest, out, len)) pscom_test_any();
    free(out);
}

/* Messages from sa to sb over `type`, eager and (where the transport's
 * threshold allows) by rendezvous, expected and unexpected, two answers,
 * a one-sided write: both ends count each message once. How many went by
 * rendezvous. */
static unsigned long long pair_over(pscom_con_type_t ctype, const char *type)
{
    static const size_t expected[] = {0, 1, 100, 5000, 20000};
    static const size_t unexpected[] = {10, 6000};
    char target[64];
    pscom_socket_t *a = named_socket("sa", 0);
    pscom_socket_t *b = named_socket("sb", 1);
    char *ep = listen_ep(b);
    pscom_con_type_mask_only(a, ctype);
    pscom_connection_t *c = connect_to(a, ep, 1, ctype);
    pscom_connection_t *d = accepted;

    size_t thr = con_of(c)->rndv_threshold;
    unsigned long long bytes = 0, rndv = 0;
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
        transfer(c, d, expected[i], false);
        bytes += expected[i];
        rndv += expected[i] >= thr;
    }
    for (size_t i = 0; i < sizeof(unexpected) / sizeof(unexpected[0]); i++) {
        transfer(c, d, unexpected[i], true);
        bytes += unexpected[i];
        rndv += unexpected[i] >= thr;
    }
    transfer(d, c, 7, false);
    transfer(d, c, 8, false);
    rma_write(c, target, sizeof(target));

    log_capture_start();
    pscom_close_connection(c);
    pscom_close_connection(d);
    char *log = log_capture_end();

    struct stats sc = stats_of(log, "connection sa(r0) <-> sb(r1)@", type);
    struct stats sd = stats_of(log, "connection sb(r1) <-> sa(r0)@", type);
    assert_int_equal(stats_lines(log), 2);
    assert_int_equal(sc.tx_msgs, 7);
    assert_int_equal(sc.tx_bytes, bytes);
    assert_int_equal(sc.tx_rndv, rndv);
    assert_int_equal(sc.rx_msgs, 2);
    assert_int_equal(sc.rx_bytes, 15);
    assert_int_equal(sc.rx_rndv, 0);
    assert_int_equal(sc.rx_unexpected, 0);
    assert_int_equal(sc.rma_ops, 1);
    assert_int_equal(sc.rma_bytes, sizeof(target));

    assert_int_equal(sd.tx_msgs, 2);
    assert_int_equal(sd.tx_bytes, 15);
    assert_int_equal(sd.tx_rndv, 0);
    assert_int_equal(sd.rx_msgs, 7);
    assert_int_equal(sd.rx_bytes, bytes);
    assert_int_equal(sd.rx_rndv, rndv);
    assert_int_equal(sd.rx_unexpected, 2);
    assert_int_equal(sd.rma_ops, 0);
    assert_int_equal(sd.rma_bytes, 0);
    free(log);

    pscom_socket_free_ep_str(ep);
    pscom_close_socket(a);
    pscom_close_socket(b);
    return rndv;
}

static void over_loop(void **state)
{
    pair_over(PSCOM_CON_TYPE_LOOP, "loop");
}

static void over_shm(void **state)
{
    pair_over(PSCOM_CON_TYPE_SHM, "shm");
}

/* tcp with PSP_RENDEZVOUS=4096 (main): some messages go by rendezvous. */
static void over_tcp(void **state)
{
    assert_int_equal(pair_over(PSCOM_CON_TYPE_TCP, "tcp"), 3);
}

/* A socket connected to itself: one connection that counts both ways. */
static void self_connection(void **state)
{
    pscom_socket_t *s = named_socket("self", 3);
    char *ep = listen_ep(s);
    pscom_connection_t *c = connect_to(s, ep, 3, PSCOM_CON_TYPE_LOOP);
    assert_ptr_equal(c, accepted);
    transfer(c, c, 1, false);
    transfer(c, c, 2, true);
    transfer(c, c, 3, false);

    log_capture_start();
    pscom_close_socket(s); /* closes its connection */
    char *log = log_capture_end();
    struct stats st = stats_of(log, "connection self(r3) <-> self(r3)@", "loop");
    assert_int_equal(stats_lines(log), 1);
    assert_int_equal(st.tx_msgs, 3);
    assert_int_equal(st.tx_bytes, 6);
    assert_int_equal(st.rx_msgs, 3);
    assert_int_equal(st.rx_bytes, 6);
    assert_int_equal(st.rx_unexpected, 1);
    assert_int_equal(st.tx_rndv + st.rx_rndv + st.rma_ops, 0);
    free(log);
    pscom_socket_free_ep_str(ep);
}

/* The child of at_exit_printed: connections left open at exit. */
static int exit_child(void)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    pscom_socket_t *a = named_socket("ea", 0);
    pscom_socket_t *b = named_socket("eb", 1);
    char *ep = listen_ep(b);
    pscom_con_type_mask_only(a, PSCOM_CON_TYPE_TCP);
    pscom_connection_t *c = connect_to(a, ep, 1, PSCOM_CON_TYPE_TCP);
    pscom_connection_t *d = accepted;
    transfer(c, d, 11, false);
    transfer(c, d, 22, false);
    transfer(d, c, 33, false);
    pscom_socket_free_ep_str(ep);
    return 0; /* the library closes them at exit */
}

/* Run exit_child in a fresh process (the library closes at exit only in
 * the process that initialised it) with PSP_DEBUG_STATS=stats; its log. */
static char *run_exit_child(const char *stats)
{
    char path[] = "/tmp/test_stats_exit.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("PSP_DEBUG_OUT", path, 1);
        setenv("PSP_DEBUG_STATS", stats, 1);
        execl("/proc/self/exe", "test_stats", "exit-child", (char *)NULL);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *log = read_file(path);
    unlink(path);
    return log;
}

static void at_exit_printed(void **state)
{
    char *log = run_exit_child("1");
    struct stats c = stats_of(log, "connection ea(r0) <-> eb(r1)@", "tcp");
    struct stats d = stats_of(log, "connection eb(r1) <-> ea(r0)@", "tcp");
    assert_int_equal(stats_lines(log), 2);
    assert_int_equal(c.tx_msgs, 2);
    assert_int_equal(c.tx_bytes, 33);
    assert_int_equal(c.rx_msgs, 1);
    assert_int_equal(c.rx_bytes, 33);
    assert_int_equal(d.tx_msgs, 1);
    assert_int_equal(d.rx_msgs, 2);
    assert_int_equal(d.rx_bytes, 33);
    free(log);

    /* Only when asked for. */
    log = run_exit_child("0");
    assert_int_equal(stats_lines(log), 0);
    free(log);
}

int main(int argc, char **argv)
{
    /* Whatever PSP_DEBUG says; rendezvous from 4 KiB where the transport
     * takes PSP_RENDEZVOUS. */
    setenv("PSP_DEBUG", "0", 1);
    setenv("PSP_RENDEZVOUS", "4096", 1);
    if (argc > 1 && strcmp(argv[1], "exit-child") == 0) return exit_child();

    setenv("PSP_DEBUG_STATS", "1", 1);
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(over_loop),
        cmocka_unit_test(over_shm),
        cmocka_unit_test(over_tcp),
        cmocka_unit_test(self_connection),
        cmocka_unit_test(at_exit_printed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
