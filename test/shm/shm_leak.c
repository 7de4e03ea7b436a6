/*
 * Kill at any point, leave nothing behind: pairs of processes connect over
 * shm and one or both are SIGKILLed at various moments
 *   - during the handshake (a delay after the connector calls pscom_connect),
 *   - while 4 MiB messages stream in both directions,
 *   - while they close their sockets and exit.
 * After both are gone the test looks for what they may have left: SysV
 * segments created by or last used by any of their pids (/proc/sysvipc/shm,
 * what ipcs -m -p shows), and files in /dev/shm that the two had mapped or
 * open just before the kill (read from /proc/PID/maps and /proc/PID/fd, so
 * that files of unrelated programs running at the same time do not count).
 * It also checks that a survivor notices the death of its peer (its pending
 * requests end, it closes and exits 0) instead of hanging.
 *
 * SHM_LEAK_PAIRS (default 36) sets the number of pairs; the delays are
 * spread over each phase deterministically. SHM_LEAK_PHASES (default
 * "handshake,transfer,exit") limits the phases: with PSP_SHM_SEGMENT=sysv a
 * kill between shmget() and shmctl(IPC_RMID) leaks a segment by design
 * (doc/shm.md), which handshake kills hit now and then.
 */
#include "itest.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG (4u << 20)

enum phase { HANDSHAKE, TRANSFER, EXIT, N_PHASES };
static const char *const phase_names[] = {"handshake", "transfer", "exit"};

enum { VICTIM_ACCEPTOR = 1, VICTIM_CONNECTOR = 2, VICTIM_BOTH = 3 };
static const char *const victim_names[] = {"", "acceptor", "connector", "both"};

struct plan {
    enum phase phase;
    unsigned delay_us;
};

/* ---------------------------------------------------------------------- */
/* The pair                                                               */
/* ---------------------------------------------------------------------- */

static void wait_quit(itest_link_t *link)
{
    while (!itest_link_ready(link, 0)) itest_progress_once();
    itest_link_recv_u64(link);
}

/* Exchange 4 MiB messages until `rounds` are done or the connection fails.
 * Returns the rounds completed. */
static int exchange(pscom_connection_t *con, int first_sender, int rounds,
                    itest_link_t *link, int report_after)
{
    void *sbuf = malloc(MSG), *rbuf = malloc(MSG);
    ITEST_ASSERT(sbuf && rbuf, "out of memory");
    itest_fill(sbuf, MSG, 7);
    pscom_request_t *s = itest_request(0), *r = itest_request(0);
    int done = 0;
    for (; done < rounds; done++) {
        pscom_req_prepare(r, con, rbuf, MSG, NULL, 0);
        pscom_req_prepare(s, con, sbuf, MSG, NULL, 0);
        pscom_post_recv(r);
        if (first_sender) {
            pscom_post_send(s);
            pscom_wait(s);
            pscom_wait(r);
        } else {
            pscom_wait(r);
            pscom_post_send(s);
            pscom_wait(s);
        }
        if (!pscom_req_successful(s) || !pscom_req_successful(r)) break;
        if (done + 1 == report_after) itest_link_send_str(link, "transferring");
    }
    pscom_request_free(s);
    pscom_request_free(r);
    free(sbuf);
    free(rbuf);
    return done;
}

static int acceptor(itest_link_t *link, void *arg)
{
    const struct plan *p = arg;
    itest_pscom_init();
    pscom_socket_t *sock = itest_open_socket("acc", 1);
    char *ep = itest_ep_str(sock);
    itest_link_send_str(link, ep);
    free(ep);
    if (p->phase != HANDSHAKE) {
        itest_step("waiting for the connection");
        pscom_connection_t *con = itest_wait_accept(1);
        int rounds = p->phase == EXIT ? 2 : 1000;
        exchange(con, 0, rounds, link, 0);
        if (p->phase == EXIT) {
            itest_link_send_str(link, "closing");
            pscom_close_socket(sock);
            return 0;
        }
    }
    itest_step("waiting to be told to quit");
    wait_quit(link);
    pscom_close_socket(sock);
    return 0;
}

static int connector(itest_link_t *link, void *arg)
{
    const struct plan *p = arg;
    itest_pscom_init();
    char *ep = itest_link_recv_str(link);
    pscom_socket_t *sock = itest_open_socket("con", 0);
    pscom_connection_t *con = pscom_open_connection(sock);
    ITEST_ASSERT(con != NULL, "pscom_open_connection");
    itest_link_send_str(link, "connecting");
    pscom_err_t rc = pscom_connect(con, ep, PSCOM_RANK_UNDEFINED, 0);
    free(ep);
    if (rc == PSCOM_SUCCESS && p->phase != HANDSHAKE) {
        ITEST_ASSERT(con->type == PSCOM_CON_TYPE_SHM, "connection on %s",
                     pscom_con_type_str(con->type));
        int rounds = p->phase == EXIT ? 2 : 1000;
        exchange(con, 1, rounds, link, p->phase == TRANSFER ? 1 : 0);
        if (p->phase == EXIT) {
            itest_link_send_str(link, "closing");
            pscom_close_socket(sock);
            return 0;
        }
    }
    itest_step("waiting to be told to quit");
    wait_quit(link);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* What is left                                                           */
/* ---------------------------------------------------------------------- */

static int our_pid(long pid, const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (pids[i] == pid) return 1;
    return 0;
}

/* SysV segments whose creator or last user is one of pids. */
static int sysv_left(const pid_t *pids, int npids, char *report, size_t len)
{
    FILE *f = fopen("/proc/sysvipc/shm", "r");
    if (!f) return 0; /* no SysV IPC here: nothing can be left in it */
    char line[512];
    int n = 0;
    size_t off = 0;
    report[0] = 0;
    if (!fgets(line, sizeof(line), f)) {
        fclose(f);
        return 0;
    }
    while (fgets(line, sizeof(line), f)) {
        long key, shmid, perms, cpid, lpid, nattch;
        unsigned long size;
        if (sscanf(line, "%ld %ld %lo %lu %ld %ld %ld", &key, &shmid, &perms,
                   &size, &cpid, &lpid, &nattch) != 7)
            continue;
        if (!our_pid(cpid, pids, npids) && !our_pid(lpid, pids, npids)) continue;
        n++;
        if (off < len)
            off += snprintf(report + off, len - off,
                            " [shmid %ld, %lu bytes, cpid %ld, lpid %ld, "
                            "nattch %ld]", shmid, size, cpid, lpid, nattch);
    }
    fclose(f);
    return n;
}

static int add_path(char paths[][256], int n, int max, const char *p)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(paths[i], p)) return n;
    if (n < max) snprintf(paths[n++], 256, "%s", p);
    return n;
}

/* Files under /dev/shm that process pid has mapped or open. */
static int shm_files_of(pid_t pid, char paths[][256], int n, int max)
{
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (f) {
        while (fgets(line, sizeof(line), f) && n < max) {
            char *p = strstr(line, "/dev/shm/");
            if (!p) continue;
            p[strcspn(p, " \n")] = 0;
            n = add_path(paths, n, max, p);
        }
        fclose(f);
    }
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) && n < max) {
            char link[320], target[256];
            snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
            ssize_t len = readlink(link, target, sizeof(target) - 1);
            if (len <= 0) continue;
            target[len] = 0;
            if (!strncmp(target, "/dev/shm/", 9)) n = add_path(paths, n, max, target);
        }
        closedir(d);
    }
    return n;
}

/* ---------------------------------------------------------------------- */
/* Orchestration                                                          */
/* ---------------------------------------------------------------------- */

static void sleep_us(unsigned us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Fork a process running fn (itest_spawn keeps a small table of children
 * for the life of the orchestrator; this test starts many). */
static void spawn(itest_child_t *child, const char *role,
                  itest_child_fn_t fn, void *arg)
{
    int sv[2];
    ITEST_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s",
                 strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    ITEST_ASSERT(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        itest_link_t link = {sv[1], sv[1]};
        close(sv[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        itest_set_role(role);
        itest_watchdog(ITEST_DEFAULT_TIMEOUT);
        int rc = fn(&link, arg);
        fflush(NULL);
        _exit(rc);
    }
    close(sv[1]);
    memset(child, 0, sizeof(*child));
    child->pid = pid;
    snprintf(child->role, sizeof(child->role), "%s", role);
    child->link.rd = child->link.wr = sv[0];
}

static int run_pair(int idx, enum phase phase, int victims, unsigned delay_us,
                    pid_t *pids, int *npids, int *leaks)
{
    struct plan plan = {phase, delay_us};
    itest_child_t acc, con;
    spawn(&acc, "acceptor", acceptor, &plan);
    char *ep = itest_link_recv_str(&acc.link);
    spawn(&con, "connector", connector, &plan);
    pids[(*npids)++] = acc.pid;
    pids[(*npids)++] = con.pid;
    itest_link_send_str(&con.link, ep);
    free(ep);

    /* Wait for the moment, then kill. */
    itest_child_t *waker = &con;
    const char *expect = phase == HANDSHAKE ? "connecting"
                         : phase == TRANSFER ? "transferring"
                                             : "closing";
    for (;;) {
        char *note = itest_link_recv_str(&waker->link);
        int found = !strcmp(note, expect);
        free(note);
        if (found) break;
    }
    sleep_us(delay_us);
    char files[16][256];
    int nfiles = shm_files_of(acc.pid, files, 0, 16);
    nfiles = shm_files_of(con.pid, files, nfiles, 16);
    if (victims & VICTIM_ACCEPTOR) kill(acc.pid, SIGKILL);
    if (victims & VICTIM_CONNECTOR) kill(con.pid, SIGKILL);

    /* Survivors: let them notice, then quit. Each must exit 0. */
    int failed = 0;
    itest_child_t *both[2] = {&acc, &con};
    for (int i = 0; i < 2; i++) {
        itest_child_t *c = both[i];
        int victim = victims & (i == 0 ? VICTIM_ACCEPTOR : VICTIM_CONNECTOR);
        if (victim) {
            int st = itest_child_wait(c);
            if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) &&
                !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
                itest_note("pair %d: %s ended with status 0x%x", idx, c->role,
                           st);
                failed = 1;
            }
            continue;
        }
        if (phase == EXIT) {
            /* It closes and exits by itself. */
        } else {
            itest_link_send_u64(&c->link, 0);
        }
        if (itest_child_check(c)) {
            itest_note("pair %d: the surviving %s failed", idx, c->role);
            failed = 1;
        }
    }
    close(acc.link.rd);
    close(con.link.rd);
    for (int i = 0; i < nfiles; i++) {
        if (access(files[i], F_OK) == 0) {
            itest_note("pair %d: %s, which the pair had mapped or open, is "
                       "still there", idx, files[i]);
            (*leaks)++;
        }
    }
    return failed;
}

int main(void)
{
    const char *env = getenv("SHM_LEAK_PAIRS");
    int pairs = env ? atoi(env) : 36;
    if (pairs < 1) pairs = 1;
    const char *which = getenv("SHM_LEAK_PHASES");
    enum phase phases[N_PHASES];
    int nphases = 0;
    for (int p = 0; p < N_PHASES; p++)
        if (!which || strstr(which, phase_names[p])) phases[nphases++] = (enum phase)p;
    ITEST_ASSERT(nphases > 0, "SHM_LEAK_PHASES=%s names no phase (handshake, "
                 "transfer, exit)", which);

    setenv("PSCOM_TEST_TRANSPORT", "shm", 1);
    /* A connector whose acceptor died should give up at once. */
    setenv("PSP_RETRY", "1", 1);
    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 100);

    pid_t *pids = calloc(2 * (size_t)pairs, sizeof(pid_t));
    ITEST_ASSERT(pids != NULL, "out of memory");
    int npids = 0, failed = 0, leaks = 0;
    char report[2048];

    itest_note("%d pairs, segments: %s, phases: %s", pairs,
               getenv("PSP_SHM_SEGMENT") ? getenv("PSP_SHM_SEGMENT")
                                         : "default",
               which ? which : "all");
    for (int i = 0; i < pairs; i++) {
        enum phase phase = phases[i % nphases];
        int victims = 1 + (i / nphases) % 3;
        int step = i / (nphases * 3); /* spreads the delays */
        unsigned span = phase == HANDSHAKE ? 3000 : phase == TRANSFER ? 20000
                                                                      : 600;
        unsigned delay = (unsigned)((step * 7919u) % span);
        itest_substep("pair %d: %s, kill %s after %u us", i, phase_names[phase],
                      victim_names[victims], delay);
        int first = npids;
        if (run_pair(i, phase, victims, delay, pids, &npids, &leaks)) failed = 1;
        int n = sysv_left(pids + first, 2, report, sizeof(report));
        if (n) {
            itest_note("pair %d (%s, kill %s after %u us): %d SysV segment(s) "
                       "left:%s", i, phase_names[phase], victim_names[victims],
                       delay, n, report);
            leaks += n;
        }
    }

    int n = sysv_left(pids, npids, report, sizeof(report));
    if (n) itest_note("at the end, %d SysV segment(s) of our processes:%s", n,
                      report);
    leaks += n;

    itest_note("%d pairs, %d leftovers, %s", pairs, leaks,
               failed || leaks ? "FAILED" : "passed");
    free(pids);
    return failed || leaks ? 1 : 0;
}
