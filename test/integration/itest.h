/*
 * Helpers shared by the multi-process integration tests.
 *
 * Every test is one program. Its first process, the orchestrator, never
 * calls pscom itself: it forks the processes that do (itest_spawn), passes
 * them endpoint strings and small notes over socket pairs (itest_link_*), and
 * collects their exit statuses. Each process arms a watchdog: when a step
 * hangs, the process prints the step it was in and exits with
 * ITEST_EXIT_TIMEOUT, and an orchestrator that times out kills its children
 * first. A failed assertion prints the process role, file:line and a message
 * and exits with ITEST_EXIT_FAIL. A process that crashes (SIGSEGV, SIGABRT,
 * SIGBUS, SIGFPE, SIGILL) prints its role, step and the signal once and dies
 * of that signal, so that its parent reports it at once.
 *
 * The transport is taken from PSCOM_TEST_TRANSPORT (tcp when unset): every
 * socket opened with itest_open_socket() is restricted to it.
 */
#ifndef ITEST_H
#define ITEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pscom.h"

#define ITEST_EXIT_FAIL    1
#define ITEST_EXIT_TIMEOUT 3

/* Seconds a process may run before its watchdog fires (meson allows 120). */
#define ITEST_DEFAULT_TIMEOUT 90

/* ---------------------------------------------------------------------- */
/* Reporting, watchdog                                                    */
/* ---------------------------------------------------------------------- */

/* Name this process in every message ("receiver", "sender 2"). The string is
 * copied. */
void itest_set_role(const char *role);
const char *itest_role(void);

/* Arm (or re-arm) the watchdog: after `seconds` the process reports the
 * current step and exits with ITEST_EXIT_TIMEOUT. 0 disarms it. Also
 * installs the crash report (itest_pscom_init() installs it again, over any
 * handler the library brought). */
void itest_watchdog(unsigned seconds);

/* Record the step the process is in and print it. */
void itest_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Record the step without printing it (for steps inside loops). */
void itest_substep(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print a line prefixed with the role. */
void itest_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void itest_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
void itest_assert_failed(const char *file, int line, const char *cond,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
void itest_assert_eq_failed(const char *file, int line, const char *a_str,
                            const char *b_str, long long a, long long b,
                            const char *fmt, ...)
    __attribute__((format(printf, 7, 8), noreturn));

#define ITEST_FAIL(...) itest_fail_at(__FILE__, __LINE__, __VA_ARGS__)

/* ITEST_ASSERT(cond, "printf format", args...) */
#define ITEST_ASSERT(cond, ...)                                                \
    do {                                                                       \
        if (!(cond))                                                           \
            itest_assert_failed(__FILE__, __LINE__, #cond, __VA_ARGS__);       \
    } while (0)

/* Integer equality; prints both values. */
#define ITEST_ASSERT_EQ(a, b, ...)                                             \
    do {                                                                       \
        long long itest_a_ = (long long)(a);                                   \
        long long itest_b_ = (long long)(b);                                   \
        if (itest_a_ != itest_b_)                                              \
            itest_assert_eq_failed(__FILE__, __LINE__, #a, #b, itest_a_,       \
                                   itest_b_, __VA_ARGS__);                     \
    } while (0)

/* The request is done and successful (DONE without ERROR, CANCELED or
 * TRUNCATED). */
#define ITEST_ASSERT_REQ_OK(req, ...)                                          \
    do {                                                                       \
        if (!pscom_req_successful(req))                                        \
            itest_fail_at(__FILE__, __LINE__,                                  \
                          "request not successful (state %s): %s",             \
                          pscom_req_state_str((req)->state),                   \
                          itest_fmt(__VA_ARGS__));                             \
    } while (0)

/* The request is done and has every bit of `bits` set. */
#define ITEST_ASSERT_REQ_STATE(req, bits, ...)                                 \
    do {                                                                       \
        if (((req)->state & (bits)) != (bits) ||                               \
            !((req)->state & PSCOM_REQ_STATE_DONE))                            \
            itest_fail_at(__FILE__, __LINE__,                                  \
                          "request state %s, expected DONE and %s: %s",        \
                          pscom_req_state_str((req)->state), #bits,            \
                          itest_fmt(__VA_ARGS__));                             \
    } while (0)

/* printf into a per-thread static buffer (for use inside the macros). */
const char *itest_fmt(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* Seconds on the monotonic clock (comparable between processes of a host). */
double itest_now(void);

/* Sleep without driving pscom progress. */
void itest_sleep_ms(unsigned ms);

/* ---------------------------------------------------------------------- */
/* Buffers with a pattern and a guard                                     */
/* ---------------------------------------------------------------------- */

/* Fill buf with a pattern that depends on seed and on each byte's offset. */
void itest_fill(void *buf, size_t len, uint32_t seed);

/* Offset of the first byte that differs from the pattern, or -1. */
ssize_t itest_pattern_mismatch(const void *buf, size_t len, uint32_t seed);

/* Fails with the offset, expected and found bytes when buf does not hold
 * the pattern. */
#define ITEST_ASSERT_PATTERN(buf, len, seed, ...)                              \
    itest_check_pattern_at(__FILE__, __LINE__, (buf), (len), (seed),           \
                           itest_fmt(__VA_ARGS__))
void itest_check_pattern_at(const char *file, int line, const void *buf,
                            size_t len, uint32_t seed, const char *what);

#define ITEST_GUARD_LEN  64
#define ITEST_GUARD_BYTE 0xa5

/* A buffer of len bytes followed by ITEST_GUARD_LEN guard bytes; the data
 * part is filled with 0x5a. Never NULL (fails instead). Free with free(). */
void *itest_alloc_guarded(size_t len);

/* Fails when the guard behind buf[len] was overwritten. */
#define ITEST_ASSERT_GUARD(buf, len, ...)                                      \
    itest_check_guard_at(__FILE__, __LINE__, (buf), (len),                     \
                         itest_fmt(__VA_ARGS__))
void itest_check_guard_at(const char *file, int line, const void *buf,
                          size_t len, const char *what);

/* ---------------------------------------------------------------------- */
/* Processes and control sockets                                          */
/* ---------------------------------------------------------------------- */

/* A control channel to the other process (both ends of a socket pair are
 * bidirectional; rd and wr are the same descriptor). */
typedef struct itest_link {
    int rd;
    int wr;
} itest_link_t;

typedef struct itest_child {
    pid_t pid;
    char role[32];
    itest_link_t link; /* the orchestrator's ends */
    int reaped;
    int status; /* wait status once reaped */
    int killed; /* the signal itest_child_kill() sent, or 0 */
} itest_child_t;

typedef int (*itest_child_fn_t)(itest_link_t *link, void *arg);

/* Fork a process that runs fn(link, arg) and exits with its return value.
 * The child gets role `role`, a fresh watchdog of ITEST_DEFAULT_TIMEOUT, and
 * dies when the orchestrator dies. It must not have called pscom before. */
void itest_spawn(itest_child_t *child, const char *role, itest_child_fn_t fn,
                 void *arg);

/* Wait for the child to exit; its wait status. */
int itest_child_wait(itest_child_t *child);

/* Wait for the child; 0 when it exited with status 0, else 1 after printing
 * what happened (exit code or signal). */
int itest_child_check(itest_child_t *child);

/* Wait for all `n` children as they exit. When one fails, the others are
 * killed at once (their watchdogs would take long) and reported as such.
 * 0 when every child exited with status 0. */
int itest_children_check(itest_child_t **list, int n);

/* The usual two-process test: a watchdog of `seconds`, `a` (which accepts
 * and sends its endpoint) and `b` (which connects to it) spawned, the
 * endpoint relayed from a to b; the result of itest_children_check. */
int itest_run_pair(unsigned seconds, const char *role_a, itest_child_fn_t a,
                   const char *role_b, itest_child_fn_t b);

/* Send a signal (the child stays to be reaped). */
void itest_child_kill(itest_child_t *child, int sig);

/* Kill `victim` with SIGKILL and reap it; then, unless `tell` is NULL, send
 * the time of the kill (itest_now() just before it) over `tell`, so that the
 * survivor there knows the victim is gone and measures its deadlines from
 * then (see itest_kill_time()). 0 when the victim died of the kill; 1, after
 * saying how it ended, when it had ended by itself. */
int itest_kill_peer(itest_child_t *victim, itest_link_t *tell);

/* A survivor's side of itest_kill_peer(): the time of the kill. t_kill when
 * it is already known (>= 0); else it is read from `link`, where with
 * `wait` 0 only when it has arrived (-1 until then, for progress loops). */
double itest_kill_time(itest_link_t *link, double t_kill, int wait);

/* The main() of a test made of parts: arms the watchdog, names the
 * transport, runs each part (nonzero: it failed) and reports the result.
 * main's exit code. */
typedef int (*itest_part_fn_t)(void);
int itest_run_parts(const itest_part_fn_t *parts, int n);

/* Framed messages over a link. Reading fails the test when the other side
 * closed its end (it probably died). */
void itest_link_write(itest_link_t *link, const void *buf, size_t len);
size_t itest_link_read(itest_link_t *link, void *buf, size_t cap);
void itest_link_send_str(itest_link_t *link, const char *s);
char *itest_link_recv_str(itest_link_t *link); /* free() it */
void itest_link_send_u64(itest_link_t *link, uint64_t v);
uint64_t itest_link_recv_u64(itest_link_t *link);
void itest_link_send_double(itest_link_t *link, double v);
double itest_link_recv_double(itest_link_t *link);
/* 1 when a message (or EOF) is waiting, after at most timeout_ms. */
int itest_link_ready(itest_link_t *link, int timeout_ms);
/* Wait for the next message and drop it (a note that the other side got
 * to a point). */
void itest_link_wait_note(itest_link_t *link);
/* Pass the next message from one link on to another (a server's endpoint
 * to its client, a note from one child to the other). */
void itest_link_relay(itest_link_t *from, itest_link_t *to);

/* ---------------------------------------------------------------------- */
/* pscom                                                                  */
/* ---------------------------------------------------------------------- */

/* pscom_init() with PSCOM_VERSION; fails the test on error. */
void itest_pscom_init(void);

/* The transport the tests run on (PSCOM_TEST_TRANSPORT, default "tcp"). */
const char *itest_transport_name(void);

/* Skip the test (exit 77, with the plugin's reason) unless plugin `name`
 * can run here. Asked in a child, so that this process stays free of
 * pscom. */
void itest_require_plugin(const char *name);

/* Restrict `sock` to the test transport. */
void itest_apply_transport(pscom_socket_t *sock);

/* A socket named `name` with the test transport and the itest con_accept and
 * con_error recorders installed; listening on PSCOM_ANYPORT when `listen`. */
pscom_socket_t *itest_open_socket(const char *name, int listen);

/* The endpoint string of a listening socket, as a malloc'ed copy. */
char *itest_ep_str(pscom_socket_t *sock);

/* Connect a new connection of sock directly to ep; fails the test unless
 * pscom_connect() returns PSCOM_SUCCESS. */
pscom_connection_t *itest_connect(pscom_socket_t *sock, const char *ep);

/* In a child: init pscom, open a socket `name` and connect it to the
 * endpoint that comes over link. The socket in *sock_p. */
pscom_connection_t *itest_connect_to_peer(itest_link_t *link, const char *name,
                                          pscom_socket_t **sock_p);

/* In a child: init pscom, open a listening socket `name`, send its endpoint
 * over link and wait for the peer's connection. The socket in *sock_p. */
pscom_connection_t *itest_accept_peer(itest_link_t *link, const char *name,
                                      pscom_socket_t **sock_p);

/* What the itest con_accept / con_error recorders saw. */
typedef struct itest_con_event {
    pscom_connection_t *con;
    pscom_op_t op;
    pscom_err_t err;
    double t; /* itest_now() when it was reported */
} itest_con_event_t;

void itest_on_con_accept(pscom_connection_t *con);
void itest_on_con_error(pscom_connection_t *con, pscom_op_t op,
                        pscom_err_t err);

int itest_accept_count(void);
pscom_connection_t *itest_accepted(int i);
int itest_con_error_count(void);
const itest_con_event_t *itest_con_error_get(int i);
/* The first con_error event of `con`, or NULL. */
const itest_con_event_t *itest_con_error_of(pscom_connection_t *con);

/* Drive progress until `n` connections were accepted; the n-th. */
pscom_connection_t *itest_wait_accept(int n);

/* One round of progress (yields the CPU when nothing happened). */
void itest_progress_once(void);

/* Drive progress for `ms` milliseconds. */
void itest_progress_ms(unsigned ms);

/* Drive progress until cond holds (the watchdog ends a hang). */
#define ITEST_PROGRESS_UNTIL(cond)                                             \
    do {                                                                       \
        while (!(cond)) itest_progress_once();                                 \
    } while (0)

/* A request with room for max_xheader_len bytes of xheader; never NULL. */
pscom_request_t *itest_request(size_t max_xheader_len);

/* Receive the next message of con into buf with r (no xheader) and fail
 * unless it succeeded, has len bytes and holds the pattern of seed. */
#define ITEST_RECV_PATTERN(r, con, buf, len, seed, ...)                        \
    itest_recv_pattern_at(__FILE__, __LINE__, (r), (con), (buf), (len),        \
                          (seed), itest_fmt(__VA_ARGS__))
void itest_recv_pattern_at(const char *file, int line, pscom_request_t *r,
                           pscom_connection_t *con, void *buf, size_t len,
                           uint32_t seed, const char *what);

#endif
