/*
 * Rendezvous over shm with CMA (process_vm_readv) allowed and denied.
 *
 * The program is linked with the static core and -Wl,--wrap=process_vm_readv.
 * SHM_TEST_CMA=deny makes every call fail with EPERM, as under a strict
 * ptrace policy or in a container; SHM_TEST_CMA=allow passes the calls
 * through (the control: it proves the messages take the CMA path at all).
 *
 * A client sends messages of 64 KiB .. 4 MiB+3 (above PSP_SHM_RENDEZVOUS and
 * PSP_SHM_CMA, both set low by meson), the server checks every byte and
 * sends each back, the client checks again. Then:
 *   allow: every rendezvous message was pulled with process_vm_readv;
 *   deny:  all messages still arrived intact; the first receiver tried CMA
 *          exactly once and said so once at debug level (PSP_DEBUG=4, into
 *          a PSP_DEBUG_OUT file per process), and nobody tried again.
 *   pidns: each process runs in a user and pid namespace of its own, as in
 *          two containers that share the network and SysV IPC only (meson
 *          sets PSP_SHM_SEGMENT=sysv). Both are pid 1 there, and each
 *          sees 0 as the creator of the other's segment: the connection
 *          still runs on shm, but nobody calls process_vm_readv (a pid
 *          from another namespace names another process here), and all
 *          messages arrive intact through the ring. Skipped (77) where
 *          namespaces cannot be made.
 */
#include "itest.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

ssize_t __real_process_vm_readv(pid_t pid, const struct iovec *local,
                                unsigned long liovcnt,
                                const struct iovec *remote,
                                unsigned long riovcnt, unsigned long flags);
ssize_t __wrap_process_vm_readv(pid_t pid, const struct iovec *local,
                                unsigned long liovcnt,
                                const struct iovec *remote,
                                unsigned long riovcnt, unsigned long flags);

static int deny;
static int pidns;
static int cma_calls;

ssize_t __wrap_process_vm_readv(pid_t pid, const struct iovec *local,
                                unsigned long liovcnt,
                                const struct iovec *remote,
                                unsigned long riovcnt, unsigned long flags)
{
    cma_calls++;
    if (deny) {
        errno = EPERM;
        return -1;
    }
    return __real_process_vm_readv(pid, local, liovcnt, remote, riovcnt, flags);
}

static const size_t sizes[] = {
    64 * 1024, 100 * 1000 + 1, 1u << 20, (4u << 20) + 3, 64 * 1024, 300 * 1024,
};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static char logdir[] = "/tmp/shm_cma_XXXXXX";

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A user namespace (so that no privilege is needed) with our ids mapped to
 * root, and a pid namespace for the next child. 0, or -errno. */
static int unshare_pid(void)
{
    char map[64];
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWPID) < 0) return -errno;
    snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
    if (write_file("/proc/self/uid_map", map) < 0) return -errno;
    if (write_file("/proc/self/setgroups", "deny") < 0 && errno != ENOENT)
        return -errno;
    snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
    if (write_file("/proc/self/gid_map", map) < 0) return -errno;
    return 0;
}

/* Returns in the first process of a new pid namespace; the calling process
 * waits for it and ends with its status (its watchdog still runs). */
static void enter_pid_namespace(void)
{
    int e = unshare_pid();
    if (e) ITEST_FAIL("new user and pid namespace: %s", strerror(-e));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) ITEST_FAIL("fork(): %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        ITEST_ASSERT(getpid() == 1, "pid %d in the new namespace",
                     (int)getpid());
        return;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* Can we make them here? 0, or the errno of a throw-away child's attempt:
 * user namespaces may be disabled, and a process with threads (the
 * ThreadSanitizer's own) cannot enter one (EINVAL). */
static int pid_namespaces_fail(void)
{
    pid_t pid = fork();
    if (pid < 0) return errno;
    if (pid == 0) _exit(-unshare_pid());
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return ECHILD;
    return WEXITSTATUS(st);
}

static void debug_to_file(const char *role)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s.log", logdir, role);
    setenv("PSP_DEBUG_OUT", path, 1);
    setenv("PSP_DEBUG", "4", 1);
}

static void send_one(pscom_connection_t *con, size_t size, uint32_t seed)
{
    pscom_request_t *req = itest_request(0);
    void *buf = malloc(size);
    ITEST_ASSERT(buf != NULL, "out of memory");
    itest_fill(buf, size, seed);
    pscom_req_prepare(req, con, buf, size, NULL, 0);
    pscom_post_send(req);
    pscom_wait(req);
    ITEST_ASSERT_REQ_OK(req, "send of %zu bytes", size);
    pscom_request_free(req);
    free(buf);
}

static void recv_one(pscom_connection_t *con, size_t size, uint32_t seed)
{
    pscom_request_t *req = itest_request(0);
    void *buf = itest_alloc_guarded(size);
    pscom_req_prepare(req, con, buf, size, NULL, 0);
    pscom_post_recv(req);
    pscom_wait(req);
    ITEST_ASSERT_REQ_OK(req, "receive of %zu bytes", size);
    ITEST_ASSERT_EQ(req->header.data_len, size, "received length");
    ITEST_ASSERT_PATTERN(buf, size, seed, "%zu-byte message", size);
    ITEST_ASSERT_GUARD(buf, size, "receive of %zu bytes", size);
    pscom_request_free(req);
    free(buf);
}

static void check_con(pscom_connection_t *con)
{
    ITEST_ASSERT(con->type == PSCOM_CON_TYPE_SHM,
                 "the connection runs on %s, not shm",
                 pscom_con_type_str(con->type));
}

static int server(itest_link_t *link, void *arg)
{
    if (pidns) enter_pid_namespace();
    debug_to_file("server");
    itest_pscom_init();
    pscom_socket_t *sock = itest_open_socket("server", 1);
    char *ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    pscom_connection_t *con = itest_wait_accept(1);
    check_con(con);
    itest_step("echoing %zu messages", N_SIZES);
    for (size_t i = 0; i < N_SIZES; i++) {
        recv_one(con, sizes[i], (uint32_t)i + 1);
        send_one(con, sizes[i], (uint32_t)i + 1001);
    }
    itest_link_send_u64(link, (uint64_t)cma_calls);
    itest_link_recv_u64(link); /* the client is done too */
    pscom_close_socket(sock);
    return 0;
}

static int client(itest_link_t *link, void *arg)
{
    if (pidns) enter_pid_namespace();
    debug_to_file("client");
    itest_pscom_init();
    char *ep = itest_link_recv_str(link);
    pscom_socket_t *sock = itest_open_socket("client", 0);
    pscom_connection_t *con = itest_connect(sock, ep);
    free(ep);
    check_con(con);
    itest_step("sending %zu messages", N_SIZES);
    for (size_t i = 0; i < N_SIZES; i++) {
        send_one(con, sizes[i], (uint32_t)i + 1);
        recv_one(con, sizes[i], (uint32_t)i + 1001);
    }
    itest_link_send_u64(link, (uint64_t)cma_calls);
    itest_link_recv_u64(link);
    pscom_close_socket(sock);
    return 0;
}

/* Lines of the process's debug log that report CMA as denied. */
static int denial_lines(const char *role)
{
    char path[128], line[2048];
    int n = 0;
    snprintf(path, sizeof(path), "%s/%s.log", logdir, role);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "process_vm_readv") && strstr(line, "not permitted"))
            n++;
    fclose(f);
    return n;
}

static void cleanup_logs(void)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/server.log", logdir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/client.log", logdir);
    unlink(path);
    rmdir(logdir);
}

int main(void)
{
    const char *mode = getenv("SHM_TEST_CMA");
    itest_child_t srv, cli;

    if (!mode || (strcmp(mode, "deny") && strcmp(mode, "allow") &&
                  strcmp(mode, "pidns"))) {
        fprintf(stderr, "shm_cma: set SHM_TEST_CMA=deny, allow or pidns\n");
        return 2;
    }
    deny = !strcmp(mode, "deny");
    pidns = !strcmp(mode, "pidns");
    int e = pidns ? pid_namespaces_fail() : 0;
    if (e) {
        itest_note("SKIP: no user and pid namespace for a child here: %s",
                   strerror(e));
        return 77;
    }
    setenv("PSCOM_TEST_TRANSPORT", "shm", 1);
    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    ITEST_ASSERT(mkdtemp(logdir) != NULL, "mkdtemp: %s", strerror(errno));
    itest_note("CMA %s, PSP_SHM_RENDEZVOUS=%s, PSP_SHM_CMA=%s", mode,
               getenv("PSP_SHM_RENDEZVOUS") ? getenv("PSP_SHM_RENDEZVOUS") : "-",
               getenv("PSP_SHM_CMA") ? getenv("PSP_SHM_CMA") : "-");

    itest_spawn(&srv, "server", server, NULL);
    char *ep = itest_link_recv_str(&srv.link);
    itest_spawn(&cli, "client", client, NULL);
    itest_link_send_str(&cli.link, ep);
    free(ep);
    uint64_t srv_calls = itest_link_recv_u64(&srv.link);
    uint64_t cli_calls = itest_link_recv_u64(&cli.link);
    itest_link_send_u64(&srv.link, 0);
    itest_link_send_u64(&cli.link, 0);
    int failed = itest_children_check((itest_child_t *[]){&srv, &cli}, 2);
    if (failed) {
        itest_note("FAILED (logs kept in %s)", logdir);
        return 1;
    }

    int srv_lines = denial_lines("server"), cli_lines = denial_lines("client");
    itest_note("process_vm_readv calls: server %llu, client %llu; denial "
               "messages: server %d, client %d",
               (unsigned long long)srv_calls, (unsigned long long)cli_calls,
               srv_lines, cli_lines);
    if (pidns) {
        ITEST_ASSERT_EQ(srv_calls + cli_calls, 0,
                        "CMA attempts with a peer in another pid namespace");
    } else if (deny) {
        /* The server receives first: it tries once, remembers, and tells
         * the client not to describe its buffers any more. */
        ITEST_ASSERT_EQ(srv_calls, 1, "CMA attempts by the first receiver");
        ITEST_ASSERT_EQ(cli_calls, 0, "CMA attempts after the denial was "
                                      "known");
        ITEST_ASSERT_EQ(srv_lines, 1, "debug messages about the denial in "
                                      "%s/server.log", logdir);
        ITEST_ASSERT_EQ(cli_lines, 0, "debug messages about a denial in "
                                      "%s/client.log", logdir);
    } else {
        ITEST_ASSERT(srv_calls >= N_SIZES, "the server pulled only %llu of "
                     "%zu messages with CMA", (unsigned long long)srv_calls,
                     N_SIZES);
        ITEST_ASSERT(cli_calls >= N_SIZES, "the client pulled only %llu of "
                     "%zu messages with CMA", (unsigned long long)cli_calls,
                     N_SIZES);
        ITEST_ASSERT_EQ(srv_lines + cli_lines, 0, "denial messages");
    }
    cleanup_logs();
    itest_note("passed");
    return 0;
}
