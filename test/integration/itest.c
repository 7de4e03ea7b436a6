/*
 * Helpers shared by the integration tests (see itest.h).
 */
#include "itest.h"
#include "pscom_plugin.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* Reporting, watchdog                                                    */
/* ---------------------------------------------------------------------- */

static char role[32] = "orchestrator";
/* The current step: set by any thread under step_lock; the alarm handler
 * reads it without (a torn name is still readable). */
static char step[256] = "start";
static pthread_mutex_t step_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned watchdog_seconds;

/* Children of this process, killed when its watchdog fires. */
#define MAX_CHILDREN 64
static pid_t children[MAX_CHILDREN];
static itest_child_t *child_objs[MAX_CHILDREN];
static int n_children;

/* Control sockets this process holds for its children; a new child closes
 * them. */
#define MAX_LINK_FDS (4 * MAX_CHILDREN)
static int link_fds[MAX_LINK_FDS];
static int n_link_fds;

static void require_transport(void);

static int transport_checked;

void itest_set_role(const char *r)
{
    snprintf(role, sizeof(role), "%s", r);
}

const char *itest_role(void)
{
    return role;
}

static void put_str(const char *s)
{
    size_t len = strlen(s);
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, s, len);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            return;
        }
        s += n;
        len -= (size_t)n;
    }
}

static void put_uint(unsigned long v)
{
    char buf[24];
    int i = (int)sizeof(buf) - 1;
    buf[i] = '\0';
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i > 0);
    put_str(buf + i);
}

/* Only async-signal-safe calls here. */
static void on_alarm(int sig)
{
    (void)sig;
    put_str("\n[");
    put_str(role);
    put_str(" ");
    put_uint((unsigned long)getpid());
    put_str("] TIMEOUT: no progress within ");
    put_uint(watchdog_seconds);
    put_str(" s; hung in step: ");
    put_str(step);
    put_str("\n");
    for (int i = 0; i < n_children; i++) {
        if (children[i] > 0) kill(children[i], SIGKILL);
    }
    _exit(ITEST_EXIT_TIMEOUT);
}

static const char *crash_signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    default: return "?";
    }
}

static const int crash_signals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
static volatile sig_atomic_t crash_reported;

/* Only async-signal-safe calls here. Reports the crash once, then lets the
 * signal kill the process as it would have without a handler, so that the
 * parent's wait status names it at once. */
static void on_crash(int sig)
{
    struct sigaction dfl;
    sigset_t set;

    if (!crash_reported) {
        crash_reported = 1;
        put_str("\n[");
        put_str(role);
        put_str(" ");
        put_uint((unsigned long)getpid());
        put_str("] CRASH: signal ");
        put_uint((unsigned long)sig);
        put_str(" (");
        put_str(crash_signal_name(sig));
        put_str(") in step: ");
        put_str(step);
        put_str("\n");
    }
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
}

/* Installed in every itest process, and again after pscom_init(): a library
 * that installed its own handler for these signals might turn a crash into
 * a wait (or a backtrace followed by one) that only the watchdog ends. */
static void catch_crashes(void)
{
    static char alt[64 * 1024]; /* room to report a stack overflow */
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof(alt)};
    struct sigaction sa;

    sigaltstack(&ss, NULL);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]);
         i++)
        sigaction(crash_signals[i], &sa, NULL);
}

void itest_watchdog(unsigned seconds)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    catch_crashes();
    watchdog_seconds = seconds;
    alarm(seconds);
}

static double t_start = -1.0;

static void vnote(const char *prefix, const char *fmt, va_list ap)
{
    char buf[1024];
    int n;
    if (t_start < 0) t_start = itest_now();
    n = snprintf(buf, sizeof(buf), "[%s %d +%.3fs] %s", role, (int)getpid(),
                 itest_now() - t_start, prefix);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof(buf)) vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    buf[sizeof(buf) - 2] = '\0';
    strcat(buf, "\n");
    put_str(buf);
}

void itest_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vnote("", fmt, ap);
    va_end(ap);
}

static void step_set(const char buf[sizeof(step)])
{
    pthread_mutex_lock(&step_lock);
    memcpy(step, buf, sizeof(step));
    pthread_mutex_unlock(&step_lock);
}

void itest_substep(const char *fmt, ...)
{
    char buf[sizeof(step)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    step_set(buf);
}

void itest_step(const char *fmt, ...)
{
    char buf[sizeof(step)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    step_set(buf);
    itest_note("step: %s", buf);
}

static void step_copy(char out[sizeof(step)])
{
    pthread_mutex_lock(&step_lock);
    memcpy(out, step, sizeof(step));
    pthread_mutex_unlock(&step_lock);
}

const char *itest_fmt(const char *fmt, ...)
{
    static _Thread_local char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return buf;
}

static void __attribute__((noreturn)) die(void)
{
    for (int i = 0; i < n_children; i++) {
        if (children[i] > 0) kill(children[i], SIGKILL);
    }
    exit(ITEST_EXIT_FAIL);
}

void itest_fail_at(const char *file, int line, const char *fmt, ...)
{
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    char at[sizeof(step)];
    step_copy(at);
    itest_note("FAIL %s:%d (step: %s): %s", file, line, at, buf);
    die();
}

void itest_assert_failed(const char *file, int line, const char *cond,
                         const char *fmt, ...)
{
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    char at[sizeof(step)];
    step_copy(at);
    itest_note("FAIL %s:%d (step: %s): `%s` is false: %s", file, line, at,
               cond, buf);
    die();
}

void itest_assert_eq_failed(const char *file, int line, const char *a_str,
                            const char *b_str, long long a, long long b,
                            const char *fmt, ...)
{
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    char at[sizeof(step)];
    step_copy(at);
    itest_note("FAIL %s:%d (step: %s): %s == %s expected, got %lld != %lld: "
               "%s",
               file, line, at, a_str, b_str, a, b, buf);
    die();
}

double itest_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void itest_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* ---------------------------------------------------------------------- */
/* Pattern and guard                                                      */
/* ---------------------------------------------------------------------- */

static uint32_t pattern_word(uint32_t seed, size_t word)
{
    uint32_t x = (uint32_t)word * 0x9e3779b1u ^ (seed * 0x85ebca77u + 0x165667b1u);
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static uint8_t pattern_byte(uint32_t seed, size_t off)
{
    return (uint8_t)(pattern_word(seed, off / 4) >> (8 * (off % 4)));
}

void itest_fill(void *buf, size_t len, uint32_t seed)
{
    uint8_t *p = buf;
    size_t i = 0;
    for (; i + 4 <= len; i += 4) {
        uint32_t w = pattern_word(seed, i / 4);
        p[i]     = (uint8_t)w;
        p[i + 1] = (uint8_t)(w >> 8);
        p[i + 2] = (uint8_t)(w >> 16);
        p[i + 3] = (uint8_t)(w >> 24);
    }
    for (; i < len; i++) p[i] = pattern_byte(seed, i);
}

ssize_t itest_pattern_mismatch(const void *buf, size_t len, uint32_t seed)
{
    const uint8_t *p = buf;
    size_t i = 0;
    for (; i + 4 <= len; i += 4) {
        uint32_t w = pattern_word(seed, i / 4);
        if (p[i] != (uint8_t)w || p[i + 1] != (uint8_t)(w >> 8) ||
            p[i + 2] != (uint8_t)(w >> 16) || p[i + 3] != (uint8_t)(w >> 24))
            break;
    }
    for (; i < len; i++) {
        if (p[i] != pattern_byte(seed, i)) return (ssize_t)i;
    }
    return -1;
}

void itest_check_pattern_at(const char *file, int line, const void *buf,
                            size_t len, uint32_t seed, const char *what)
{
    const uint8_t *p = buf;
    ssize_t bad = itest_pattern_mismatch(buf, len, seed);
    size_t nbad = 0;
    if (bad < 0) return;
    for (size_t i = (size_t)bad; i < len; i++) {
        if (p[i] != pattern_byte(seed, i)) nbad++;
    }
    itest_fail_at(file, line,
                  "data differs from the pattern (seed %u, %zu bytes): first "
                  "at offset %zd (expected 0x%02x, found 0x%02x), %zu bytes "
                  "differ: %s",
                  seed, len, bad, pattern_byte(seed, (size_t)bad), p[bad], nbad,
                  what);
}

void *itest_alloc_guarded(size_t len)
{
    uint8_t *p = malloc(len + ITEST_GUARD_LEN);
    if (!p) ITEST_FAIL("out of memory allocating %zu bytes", len);
    memset(p, 0x5a, len);
    memset(p + len, ITEST_GUARD_BYTE, ITEST_GUARD_LEN);
    return p;
}

void itest_check_guard_at(const char *file, int line, const void *buf,
                          size_t len, const char *what)
{
    const uint8_t *g = (const uint8_t *)buf + len;
    for (size_t i = 0; i < ITEST_GUARD_LEN; i++) {
        if (g[i] != ITEST_GUARD_BYTE)
            itest_fail_at(file, line,
                          "the library wrote behind the %zu-byte buffer "
                          "(guard byte %zu is 0x%02x): %s",
                          len, i, g[i], what);
    }
}

/* ---------------------------------------------------------------------- */
/* Processes and control sockets                                          */
/* ---------------------------------------------------------------------- */

static void remember_fd(int fd)
{
    if (n_link_fds < MAX_LINK_FDS) link_fds[n_link_fds++] = fd;
}

void itest_spawn(itest_child_t *child, const char *r, itest_child_fn_t fn,
                 void *arg)
{
    int sv[2]; /* [0] the orchestrator's end, [1] the child's */
    pid_t pid;

    /* The first spawn of the main process checks the transport first. */
    if (!transport_checked) {
        transport_checked = 1;
        require_transport();
    }
    if (n_children >= MAX_CHILDREN) ITEST_FAIL("too many children");
    /* A socket pair rather than pipes: send(MSG_NOSIGNAL) lets a process
     * that keeps the default SIGPIPE disposition write to a dead peer. */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        ITEST_FAIL("socketpair(): %s", strerror(errno));
    fflush(NULL);
    pid = fork();
    if (pid < 0) ITEST_FAIL("fork(): %s", strerror(errno));
    if (pid == 0) {
        itest_link_t link = {.rd = sv[1], .wr = sv[1]};
        int rc;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (int i = 0; i < n_link_fds; i++) close(link_fds[i]);
        n_link_fds = 0;
        n_children = 0;
        transport_checked = 1;
        memset(child_objs, 0, sizeof(child_objs));
        close(sv[0]);
        itest_set_role(r);
        snprintf(step, sizeof(step), "start");
        t_start = -1.0;
        itest_watchdog(ITEST_DEFAULT_TIMEOUT);
        rc = fn(&link, arg);
        fflush(NULL);
        exit(rc);
    }
    close(sv[1]);
    memset(child, 0, sizeof(*child));
    child->pid = pid;
    snprintf(child->role, sizeof(child->role), "%s", r);
    child->link.rd = sv[0];
    child->link.wr = sv[0];
    remember_fd(sv[0]);
    child_objs[n_children] = child;
    children[n_children++] = pid;
}

static void forget_child(pid_t pid)
{
    for (int i = 0; i < n_children; i++) {
        if (children[i] == pid) {
            children[i] = -1;
            /* The child object may live on a stack frame that is gone. */
            child_objs[i] = NULL;
        }
    }
}

int itest_child_wait(itest_child_t *child)
{
    if (!child->reaped) {
        int status;
        pid_t r;
        do {
            r = waitpid(child->pid, &status, 0);
        } while (r < 0 && errno == EINTR);
        if (r < 0) ITEST_FAIL("waitpid(%s): %s", child->role, strerror(errno));
        child->status = status;
        child->reaped = 1;
        forget_child(child->pid);
    }
    return child->status;
}

int itest_child_check(itest_child_t *child)
{
    int status = itest_child_wait(child);
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        if (code == 0) return 0;
        itest_note("process '%s' (pid %d) failed: exit code %d%s", child->role,
                   (int)child->pid, code,
                   code == ITEST_EXIT_TIMEOUT ? " (watchdog timeout)" : "");
        return 1;
    }
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        itest_note("process '%s' (pid %d) was killed by signal %d (%s)%s",
                   child->role, (int)child->pid, sig, strsignal(sig),
                   sig == SIGPIPE ? ": the library let SIGPIPE through" : "");
        return 1;
    }
    itest_note("process '%s' (pid %d) ended with wait status 0x%x",
               child->role, (int)child->pid, status);
    return 1;
}

int itest_children_check(itest_child_t **list, int n)
{
    int failed = 0, left = 0;
    const char *first_failed = NULL;

    for (int i = 0; i < n; i++) {
        if (!list[i]->reaped) left++;
    }
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            ITEST_FAIL("waitpid(): %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            itest_child_t *c = list[i];
            if (c->reaped || c->pid != pid) continue;
            c->status = status;
            c->reaped = 1;
            forget_child(pid);
            left--;
            if (WIFSIGNALED(status) && c->killed == WTERMSIG(status)) {
                itest_note("process '%s' ended by signal %d as intended",
                           c->role, c->killed);
            } else if (first_failed && WIFSIGNALED(status) &&
                       WTERMSIG(status) == SIGKILL) {
                itest_note("process '%s' killed because '%s' failed", c->role,
                           first_failed);
            } else if (itest_child_check(c)) {
                failed = 1;
                if (!first_failed) {
                    first_failed = c->role;
                    for (int j = 0; j < n; j++) {
                        if (!list[j]->reaped) kill(list[j]->pid, SIGKILL);
                    }
                }
            }
        }
    }
    return failed;
}

void itest_child_kill(itest_child_t *child, int sig)
{
    child->killed = sig;
    if (!child->reaped && kill(child->pid, sig) < 0)
        ITEST_FAIL("kill(%s, %d): %s", child->role, sig, strerror(errno));
}

int itest_kill_peer(itest_child_t *victim, itest_link_t *tell)
{
    double t_kill = itest_now();
    int status;

    itest_child_kill(victim, SIGKILL);
    status = itest_child_wait(victim);
    if (tell) itest_link_send_double(tell, t_kill);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return 0;
    itest_note("'%s' was to be killed, but it ended by itself:", victim->role);
    itest_child_check(victim);
    return 1;
}

double itest_kill_time(itest_link_t *link, double t_kill, int wait)
{
    if (t_kill >= 0) return t_kill;
    if (!wait && !itest_link_ready(link, 0)) return -1.0;
    return itest_link_recv_double(link);
}

int itest_run_parts(const itest_part_fn_t *parts, int n)
{
    int failed = 0;

    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 10);
    itest_note("transport %s", itest_transport_name());
    for (int i = 0; i < n; i++) failed |= parts[i]();
    itest_note("%s", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}

static void check_children_alive(void);

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (n_children) {
                /* Name the child that went away, if it failed. */
                itest_sleep_ms(100);
                check_children_alive();
            }
            ITEST_FAIL("writing to the control socket: %s (the other process "
                       "probably died)",
                       strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
}

/* While the orchestrator waits for a child's note, a child that failed
 * makes it fail at once instead of waiting for its own watchdog. */
static void check_children_alive(void)
{
    for (int i = 0; i < n_children; i++) {
        itest_child_t *c = child_objs[i];
        int status;
        if (!c || c->reaped || children[i] <= 0) continue;
        if (waitpid(c->pid, &status, WNOHANG) != c->pid) continue;
        c->status = status;
        c->reaped = 1;
        children[i] = -1;
        if (WIFSIGNALED(status) && c->killed == WTERMSIG(status)) continue;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        itest_child_check(c);
        ITEST_FAIL("process '%s' failed while the orchestrator waited",
                   c->role);
    }
}

static void wait_readable(int fd)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, n_children ? 200 : -1);
        if (r > 0) return;
        if (r < 0 && errno != EINTR)
            ITEST_FAIL("poll(): %s", strerror(errno));
        check_children_alive();
    }
}

static void read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n;
        wait_readable(fd);
        n = read(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            ITEST_FAIL("reading the control socket: %s", strerror(errno));
        }
        if (n == 0 && n_children) {
            /* Name the child that went away, if it failed. */
            itest_sleep_ms(100);
            check_children_alive();
        }
        if (n == 0)
            ITEST_FAIL("the control socket was closed: the other process ended "
                       "(or died) before sending what this one waits for");
        p += n;
        len -= (size_t)n;
    }
}

void itest_link_write(itest_link_t *link, const void *buf, size_t len)
{
    uint32_t hdr = (uint32_t)len;
    write_all(link->wr, &hdr, sizeof(hdr));
    if (len) write_all(link->wr, buf, len);
}

size_t itest_link_read(itest_link_t *link, void *buf, size_t cap)
{
    uint32_t hdr;
    read_all(link->rd, &hdr, sizeof(hdr));
    if (hdr > cap)
        ITEST_FAIL("control message of %u bytes, room for %zu", hdr, cap);
    if (hdr) read_all(link->rd, buf, hdr);
    return hdr;
}

void itest_link_send_str(itest_link_t *link, const char *s)
{
    itest_link_write(link, s, strlen(s));
}

char *itest_link_recv_str(itest_link_t *link)
{
    uint32_t hdr;
    char *s;
    read_all(link->rd, &hdr, sizeof(hdr));
    s = malloc((size_t)hdr + 1);
    if (!s) ITEST_FAIL("out of memory");
    if (hdr) read_all(link->rd, s, hdr);
    s[hdr] = '\0';
    return s;
}

void itest_link_send_u64(itest_link_t *link, uint64_t v)
{
    itest_link_write(link, &v, sizeof(v));
}

uint64_t itest_link_recv_u64(itest_link_t *link)
{
    uint64_t v;
    size_t n = itest_link_read(link, &v, sizeof(v));
    if (n != sizeof(v)) ITEST_FAIL("control message of %zu bytes, expected 8", n);
    return v;
}

void itest_link_send_double(itest_link_t *link, double v)
{
    itest_link_write(link, &v, sizeof(v));
}

double itest_link_recv_double(itest_link_t *link)
{
    double v;
    size_t n = itest_link_read(link, &v, sizeof(v));
    if (n != sizeof(v)) ITEST_FAIL("control message of %zu bytes, expected 8", n);
    return v;
}

int itest_link_ready(itest_link_t *link, int timeout_ms)
{
    struct pollfd pfd = {.fd = link->rd, .events = POLLIN};
    int r;
    do {
        r = poll(&pfd, 1, timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r < 0) ITEST_FAIL("poll(): %s", strerror(errno));
    return r > 0;
}

void itest_link_wait_note(itest_link_t *link)
{
    free(itest_link_recv_str(link));
}

void itest_link_relay(itest_link_t *from, itest_link_t *to)
{
    char *msg = itest_link_recv_str(from);
    itest_link_send_str(to, msg);
    free(msg);
}

/* ---------------------------------------------------------------------- */
/* pscom                                                                  */
/* ---------------------------------------------------------------------- */

static const struct {
    const char *name;
    pscom_con_type_t type;
} transports[] = {
    {"tcp", PSCOM_CON_TYPE_TCP},     {"shm", PSCOM_CON_TYPE_SHM},
    {"openib", PSCOM_CON_TYPE_OPENIB}, {"verbs", PSCOM_CON_TYPE_OPENIB},
    {"ucp", PSCOM_CON_TYPE_UCP},     {"ucx", PSCOM_CON_TYPE_UCP},
    {"ofi", PSCOM_CON_TYPE_OFI},     {"ofed", PSCOM_CON_TYPE_OFI},
};

const char *itest_transport_name(void)
{
    const char *t = getenv("PSCOM_TEST_TRANSPORT");
    return (t && *t) ? t : "tcp";
}

/* A transport whose plugin cannot run here skips the test (exit 77, which
 * meson reports as SKIP) with the plugin's reason. */
static void require_transport(void)
{
    const char *t = itest_transport_name();
    if (!strcmp(t, "tcp") || !strcmp(t, "any") || !strcmp(t, "all")) return;
    itest_require_plugin(t);
}

void itest_require_plugin(const char *t)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return;
    if (pid == 0) {
        const char *why = "";
        if (!strcmp(t, "shm")) unsetenv("PSP_SHM");
        if (pscom_plugin_available(t, &why)) _exit(0);
        printf("SKIP: transport %s is not available here: %s\n", t, why);
        fflush(stdout);
        _exit(77);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) exit(77);
}

void itest_pscom_init(void)
{
    const char *t = itest_transport_name();
    pscom_err_t rc;

    /* meson sets PSP_SHM=0 so that the default run stays on tcp; a run that
     * asks for shm by PSCOM_TEST_TRANSPORT needs it back. */
    if (strcmp(t, "shm") == 0) {
        const char *v = getenv("PSP_SHM");
        if (v && strcmp(v, "0") == 0) unsetenv("PSP_SHM");
    }
    rc = pscom_init(PSCOM_VERSION);
    if (rc != PSCOM_SUCCESS)
        ITEST_FAIL("pscom_init(PSCOM_VERSION) returned %s (%d)",
                   pscom_err_str(rc), (int)rc);
    catch_crashes();
}

void itest_apply_transport(pscom_socket_t *sock)
{
    const char *t = itest_transport_name();
    if (strcmp(t, "any") == 0 || strcmp(t, "all") == 0) {
        pscom_con_type_mask_all(sock);
        return;
    }
    for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++) {
        if (strcmp(t, transports[i].name) == 0) {
            pscom_con_type_mask_only(sock, transports[i].type);
            return;
        }
    }
    ITEST_FAIL("PSCOM_TEST_TRANSPORT=%s is not a transport this test knows "
               "(tcp, shm, openib, ucp, ofi, any)",
               t);
}

#define MAX_EVENTS 64
static pscom_connection_t *accepted[MAX_EVENTS];
static int n_accepted;
static itest_con_event_t con_errors[MAX_EVENTS];
static int n_con_errors;

void itest_on_con_accept(pscom_connection_t *con)
{
    if (n_accepted < MAX_EVENTS) accepted[n_accepted] = con;
    n_accepted++;
}

void itest_on_con_error(pscom_connection_t *con, pscom_op_t op,
                        pscom_err_t err)
{
    itest_note("con_error(%s, op %s, %s)", con ? pscom_con_str(con) : "NULL",
               pscom_op_str(op), pscom_err_str(err));
    if (n_con_errors < MAX_EVENTS) {
        itest_con_event_t *e = &con_errors[n_con_errors];
        e->con = con;
        e->op  = op;
        e->err = err;
        e->t   = itest_now();
    }
    n_con_errors++;
}

int itest_accept_count(void)
{
    return n_accepted;
}

pscom_connection_t *itest_accepted(int i)
{
    if (i < 0 || i >= n_accepted || i >= MAX_EVENTS) return NULL;
    return accepted[i];
}

int itest_con_error_count(void)
{
    return n_con_errors;
}

const itest_con_event_t *itest_con_error_get(int i)
{
    if (i < 0 || i >= n_con_errors || i >= MAX_EVENTS) return NULL;
    return &con_errors[i];
}

const itest_con_event_t *itest_con_error_of(pscom_connection_t *con)
{
    for (int i = 0; i < n_con_errors && i < MAX_EVENTS; i++) {
        if (con_errors[i].con == con) return &con_errors[i];
    }
    return NULL;
}

pscom_socket_t *itest_open_socket(const char *name, int listen)
{
    pscom_socket_t *sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, 0);
    if (!sock) ITEST_FAIL("pscom_open_socket() returned NULL");
    pscom_socket_set_name(sock, name);
    itest_apply_transport(sock);
    sock->ops.con_accept = itest_on_con_accept;
    sock->ops.con_error  = itest_on_con_error;
    if (listen) {
        pscom_err_t rc = pscom_listen(sock, PSCOM_ANYPORT);
        if (rc != PSCOM_SUCCESS)
            ITEST_FAIL("pscom_listen(PSCOM_ANYPORT) returned %s (%d), errno "
                       "%s",
                       pscom_err_str(rc), (int)rc, strerror(errno));
    }
    return sock;
}

char *itest_ep_str(pscom_socket_t *sock)
{
    char *ep = NULL, *copy;
    pscom_err_t rc = pscom_socket_get_ep_str(sock, &ep);
    if (rc != PSCOM_SUCCESS || !ep)
        ITEST_FAIL("pscom_socket_get_ep_str() returned %s (%d)",
                   pscom_err_str(rc), (int)rc);
    copy = strdup(ep);
    pscom_socket_free_ep_str(ep);
    if (!copy) ITEST_FAIL("out of memory");
    return copy;
}

pscom_connection_t *itest_connect(pscom_socket_t *sock, const char *ep)
{
    pscom_connection_t *con = pscom_open_connection(sock);
    pscom_err_t rc;
    if (!con) ITEST_FAIL("pscom_open_connection() returned NULL");
    rc = pscom_connect(con, ep, PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT);
    if (rc != PSCOM_SUCCESS)
        ITEST_FAIL("pscom_connect(\"%s\", DIRECT) returned %s (%d)", ep,
                   pscom_err_str(rc), (int)rc);
    return con;
}

pscom_connection_t *itest_connect_to_peer(itest_link_t *link, const char *name,
                                          pscom_socket_t **sock_p)
{
    pscom_connection_t *con;
    char *ep;

    itest_pscom_init();
    *sock_p = itest_open_socket(name, 0);
    ep = itest_link_recv_str(link);
    itest_step("connecting to %s", ep);
    con = itest_connect(*sock_p, ep);
    free(ep);
    return con;
}

pscom_connection_t *itest_accept_peer(itest_link_t *link, const char *name,
                                      pscom_socket_t **sock_p)
{
    char *ep;

    itest_pscom_init();
    *sock_p = itest_open_socket(name, 1);
    ep = itest_ep_str(*sock_p);
    itest_link_send_str(link, ep);
    free(ep);
    itest_step("waiting for the peer to connect");
    return itest_wait_accept(1);
}

pscom_connection_t *itest_wait_accept(int n)
{
    ITEST_PROGRESS_UNTIL(n_accepted >= n);
    if (n > MAX_EVENTS) ITEST_FAIL("too many accepted connections");
    ITEST_ASSERT(accepted[n - 1] != NULL, "con_accept got a NULL connection");
    return accepted[n - 1];
}

void itest_progress_once(void)
{
    if (!pscom_test_any()) sched_yield();
}

void itest_progress_ms(unsigned ms)
{
    double end = itest_now() + ms / 1000.0;
    while (itest_now() < end) itest_progress_once();
}

pscom_request_t *itest_request(size_t max_xheader_len)
{
    pscom_request_t *req = pscom_request_create(max_xheader_len, 0);
    if (!req) ITEST_FAIL("pscom_request_create(%zu, 0) returned NULL",
                         max_xheader_len);
    return req;
}

void itest_recv_pattern_at(const char *file, int line, pscom_request_t *r,
                           pscom_connection_t *con, void *buf, size_t len,
                           uint32_t seed, const char *what)
{
    pscom_req_prepare(r, con, buf, len, NULL, 0);
    pscom_post_recv(r);
    pscom_wait(r);
    if (!pscom_req_successful(r))
        itest_fail_at(file, line, "receive not successful (state %s): %s",
                      pscom_req_state_str(r->state), what);
    if (r->header.data_len != len)
        itest_fail_at(file, line, "received %zu bytes, expected %zu: %s",
                      (size_t)r->header.data_len, len, what);
    itest_check_pattern_at(file, line, buf, len, seed, what);
}

int itest_run_pair(unsigned seconds, const char *role_a, itest_child_fn_t a,
                   const char *role_b, itest_child_fn_t b)
{
    itest_watchdog(seconds);
    itest_child_t ca, cb;
    itest_spawn(&ca, role_a, a, NULL);
    itest_spawn(&cb, role_b, b, NULL);
    itest_link_relay(&ca.link, &cb.link);
    return itest_children_check((itest_child_t *[]){&ca, &cb}, 2);
}
