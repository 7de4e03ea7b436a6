/*
 * A peer's segment that cannot be mapped makes the connection fall back to
 * the next transport (tcp), with nothing of the failed attempt left behind.
 *
 * Linked with the static core and -Wl,--wrap=shm_seg_attach: in the process
 * named by SHM_TEST_FAIL (acceptor or connector) mapping the peer's segment
 * fails with EACCES, as when /proc/PID/fd is not reachable or a SysV segment
 * belongs to another user. Both sockets allow every transport. Then:
 *   - the connection runs on tcp and carries messages intact;
 *   - neither process maps or holds an shm segment any more (its own, made
 *     for the failed attempt, included): no "pscom-shm" memfd in
 *     /proc/self/maps or /proc/self/fd, no SysV segment of its pid;
 *   - the failing process said why at debug level.
 */
#include "itest.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm_seg.h"

int __real_shm_seg_attach(struct shm_seg *seg, enum shm_seg_kind kind,
                          pid_t pid, int id, size_t size);
int __wrap_shm_seg_attach(struct shm_seg *seg, enum shm_seg_kind kind,
                          pid_t pid, int id, size_t size);

static int fail_here;
static int attach_calls;

int __wrap_shm_seg_attach(struct shm_seg *seg, enum shm_seg_kind kind,
                          pid_t pid, int id, size_t size)
{
    attach_calls++;
    if (fail_here) return -EACCES;
    return __real_shm_seg_attach(seg, kind, pid, id, size);
}

static char logdir[] = "/tmp/shm_fallback_XXXXXX";

static void setup_process(const char *role)
{
    char path[128];
    const char *who = getenv("SHM_TEST_FAIL");
    fail_here = who && !strcmp(who, role);
    snprintf(path, sizeof(path), "%s/%s.log", logdir, role);
    setenv("PSP_DEBUG_OUT", path, 1);
    setenv("PSP_DEBUG", "4", 1);
    itest_pscom_init();
}

/* Mappings and descriptors of shm segments this process still has. */
static int segments_held(void)
{
    char line[512];
    int n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (f) {
        while (fgets(line, sizeof(line), f))
            if (strstr(line, "pscom-shm") || strstr(line, "SYSV")) n++;
        fclose(f);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            char p[300], target[256];
            snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
            ssize_t len = readlink(p, target, sizeof(target) - 1);
            if (len <= 0) continue;
            target[len] = 0;
            if (strstr(target, "pscom-shm")) n++;
        }
        closedir(d);
    }
    f = fopen("/proc/sysvipc/shm", "r");
    if (f) {
        long me = (long)getpid();
        if (fgets(line, sizeof(line), f)) {
            while (fgets(line, sizeof(line), f)) {
                long key, id, perms, cpid;
                unsigned long size;
                if (sscanf(line, "%ld %ld %lo %lu %ld", &key, &id, &perms,
                           &size, &cpid) == 5 && cpid == me)
                    n++;
            }
        }
        fclose(f);
    }
    return n;
}

static void exchange(pscom_connection_t *con, int first)
{
    size_t len = 100000;
    char *buf = malloc(len);
    ITEST_ASSERT(buf != NULL, "out of memory");
    for (int i = 0; i < 2; i++) {
        int sending = (i == 0) == first;
        pscom_request_t *r = itest_request(0);
        if (sending) itest_fill(buf, len, 42 + i);
        pscom_req_prepare(r, con, buf, len, NULL, 0);
        if (sending) {
            pscom_post_send(r);
        } else {
            r->socket = con->socket;
            pscom_post_recv(r);
        }
        pscom_wait(r);
        ITEST_ASSERT_REQ_OK(r, "%s %d", sending ? "send" : "receive", i);
        if (!sending) ITEST_ASSERT_PATTERN(buf, len, 42 + i, "message %d", i);
        pscom_request_free(r);
    }
    free(buf);
}

static void check_after(pscom_connection_t *con, itest_link_t *link)
{
    ITEST_ASSERT(con->type == PSCOM_CON_TYPE_TCP,
                 "the connection runs on %s, expected the fallback to tcp",
                 pscom_con_type_str(con->type));
    int held = segments_held();
    ITEST_ASSERT_EQ(held, 0, "shm mappings, descriptors or SysV segments "
                             "still held after the fallback");
    itest_link_send_u64(link, (uint64_t)attach_calls);
    itest_link_recv_u64(link);
}

static int acceptor(itest_link_t *link, void *arg)
{
    setup_process("acceptor");
    pscom_socket_t *sock = itest_open_socket("acc", 1);
    char *ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    pscom_connection_t *con = itest_wait_accept(1);
    exchange(con, 0);
    check_after(con, link);
    pscom_close_socket(sock);
    return 0;
}

static int connector(itest_link_t *link, void *arg)
{
    setup_process("connector");
    char *ep = itest_link_recv_str(link);
    pscom_socket_t *sock = itest_open_socket("con", 0);
    pscom_connection_t *con = itest_connect(sock, ep);
    free(ep);
    exchange(con, 1);
    check_after(con, link);
    pscom_close_socket(sock);
    return 0;
}

static int log_mentions(const char *role, const char *what)
{
    char path[128], line[2048];
    int n = 0;
    snprintf(path, sizeof(path), "%s/%s.log", logdir, role);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, what)) n++;
    fclose(f);
    return n;
}

int main(void)
{
    const char *who = getenv("SHM_TEST_FAIL");
    if (!who || (strcmp(who, "acceptor") && strcmp(who, "connector"))) {
        fprintf(stderr, "shm_fallback: set SHM_TEST_FAIL=acceptor or "
                        "connector\n");
        return 2;
    }
    setenv("PSCOM_TEST_TRANSPORT", "any", 1);
    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    ITEST_ASSERT(mkdtemp(logdir) != NULL, "mkdtemp: %s", strerror(errno));
    itest_note("mapping the peer's segment fails in the %s, segments: %s", who,
               getenv("PSP_SHM_SEGMENT") ? getenv("PSP_SHM_SEGMENT") : "default");

    itest_child_t acc, con;
    itest_spawn(&acc, "acceptor", acceptor, NULL);
    char *ep = itest_link_recv_str(&acc.link);
    itest_spawn(&con, "connector", connector, NULL);
    itest_link_send_str(&con.link, ep);
    free(ep);
    uint64_t acc_calls = itest_link_recv_u64(&acc.link);
    uint64_t con_calls = itest_link_recv_u64(&con.link);
    itest_link_send_u64(&acc.link, 0);
    itest_link_send_u64(&con.link, 0);
    if (itest_children_check((itest_child_t *[]){&acc, &con}, 2)) {
        itest_note("FAILED (logs in %s)", logdir);
        return 1;
    }
    /* The acceptor maps first (it answers TRY); when it fails, the
     * connector never gets to map. */
    itest_note("attach calls: acceptor %llu, connector %llu",
               (unsigned long long)acc_calls, (unsigned long long)con_calls);
    ITEST_ASSERT_EQ(acc_calls, 1, "acceptor's attempts to map");
    ITEST_ASSERT_EQ(con_calls, strcmp(who, "acceptor") ? 1 : 0,
                    "connector's attempts to map");
    ITEST_ASSERT(log_mentions(who, "cannot map the peer's segment") == 1,
                 "the %s did not say once why shm was not used (%s/%s.log)",
                 who, logdir, who);
    char path[160];
    snprintf(path, sizeof(path), "%s/acceptor.log", logdir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/connector.log", logdir);
    unlink(path);
    rmdir(logdir);
    itest_note("passed");
    return 0;
}
