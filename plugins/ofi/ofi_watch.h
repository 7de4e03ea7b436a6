/*
 * owd: a watchdog over the plugin's calls into libfabric.
 *
 * libfabric's shm provider takes spin locks that live in shared memory
 * (the regions in /dev/shm). A process killed while it holds one leaves it
 * taken, and the next process that asks for it spins for ever inside a
 * libfabric call: its progress stops, and nothing it could do frees the
 * lock (doc/plugins/ofi.md, "Known limitations"). No provider call the
 * plugin makes waits for anything (completions are polled), so a call
 * that has not returned for seconds is such a hang.
 *
 * The watchdog turns the hang into an error. The wrapper (ofi_wrap.c)
 * marks the start and the end of each provider call that can meet a lock;
 * a thread looks at the mark every quarter of the timeout. A call seen in
 * five looks in a row has run for at least the timeout: the thread hands
 * a report (which call, for how long, the CPU time the process used
 * meanwhile, which registered peers have ended) to the owner's callback,
 * which in the plugin logs it and ends the process.
 *
 * Cost on the message path: owd_enter is three plain stores, owd_leave one
 * (no lock, no system call, no read-modify-write). The plugin calls the
 * wrapper with the library lock held, one thread at a time. Were two
 * calls ever to overlap, the watchdog could miss one, but never report a
 * call that returned: every thread's last store is owd_leave's.
 *
 * Fork: a child has no watchdog thread and is in no call. owd_stop does
 * nothing there, and owd_start starts a thread of its own.
 */
#ifndef OFI_WATCH_H_
#define OFI_WATCH_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The call in progress, for the watchdog thread: busy while one runs, seq
 * counts the calls started, call names the latest. */
typedef struct owd_mark {
    _Atomic int busy;
    _Atomic unsigned long seq;
    _Atomic(const char *) call;
} owd_mark_t;

extern owd_mark_t owd_mark;

/* Before a provider call: `call` names it (a string literal, never freed). */
static inline void owd_enter(const char *call)
{
    unsigned long s = atomic_load_explicit(&owd_mark.seq, memory_order_relaxed);
    atomic_store_explicit(&owd_mark.seq, s + 1, memory_order_relaxed);
    atomic_store_explicit(&owd_mark.call, call, memory_order_release);
    atomic_store_explicit(&owd_mark.busy, 1, memory_order_release);
}

/* After it returned. */
static inline void owd_leave(void)
{
    atomic_store_explicit(&owd_mark.busy, 0, memory_order_release);
}

/* What the watchdog saw. The strings belong to the watchdog and are valid
 * during the callback only. */
typedef struct owd_report {
    const char *call;  /* the call that has not returned */
    double seconds;    /* it has run for at least this long */
    double cpu;        /* CPU seconds the process (all its threads) used
                          meanwhile; -1: unknown */
    unsigned peers;    /* registered peers */
    unsigned gone;     /* of them, those whose process has ended */
    const char *gone_list; /* "name (pid N); ..." of those, or "" */
} owd_report_t;

typedef void (*owd_stalled_cb_t)(const owd_report_t *r, void *arg);

/* Start the watchdog thread: a call that has not returned after
 * timeout_ms milliseconds is reported to cb, once (cb may end the
 * process). The thread inherits the caller's signal mask: block every
 * signal around this call, so that it never runs an application's
 * handler. 0 on success (also when it runs already, and for timeout_ms 0,
 * which starts nothing), or a negative errno. */
int owd_start(unsigned timeout_ms, owd_stalled_cb_t cb, void *arg);

/* Stop the thread and wait for it (returns within a few milliseconds,
 * except while cb runs). Registered peers stay registered. */
void owd_stop(void);

/* Whether a provider call is marked as running (in any thread), for tests. */
bool owd_busy(void);

/* Register a peer on this node for reports: key identifies the entry (the
 * caller's connection), name is copied (shortened to 127 bytes). Peers
 * with pid <= 0 are not registered. 0, or -ENOMEM (then the peer is
 * missing from reports, nothing else). */
int owd_peer_add(const void *key, pid_t pid, const char *name);
/* Forget the entry of key, if there is one. The report names only peers
 * registered at that time: one whose connection closed before is not. */
void owd_peer_del(const void *key);
/* Registered peers, for tests. */
unsigned owd_peer_count(void);

#endif /* OFI_WATCH_H_ */
