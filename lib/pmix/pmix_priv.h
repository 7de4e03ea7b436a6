/*
 * Internals of libpscom_pmix. Functions shared between its files carry the
 * prefix pmx_.
 *
 * The library sees pscom only through pscom.h, plus these services of
 * pscom_plugin.h: the progress engine's file descriptor watch (the event
 * pipe), pscom_plugin_wait_until() (barrier and lookup wait with pscom
 * progressing), pscom_plugin_log() (PSP_DEBUG levels and the common line
 * prefix) and pscom_plugin_log_level().
 */
#ifndef PMX_PRIV_H_
#define PMX_PRIV_H_

#include <pmix.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "pscom.h"
#include "pscom_plugin.h"
#include "pscom_pmix.h"

/* PSP_DEBUG levels. */
#define PMX_LOG_ERROR 1
#define PMX_LOG_WARN  2
#define PMX_LOG_INFO  3
#define PMX_LOG_DEBUG 4

/* The PMIx keys of the bootstrap. */
#define PMX_KEY_EP     "pscom.ep"
#define PMX_KEY_NODEID "pscom.nodeid"

/* The name of every PMIx event handler of this library: it marks the chain
 * results so that one event is handled once also when several of our
 * registrations match it. */
#define PMX_HANDLER_NAME "pscom_pmix"

/* A queued event (job->evq). */
struct pmx_event {
    struct pmx_event *next; /* link in job->evq */
    int code;
    pmix_proc_t source;
    int *ranks; /* ranks of our namespace the event names; owned */
    size_t nranks;
    /* It names its processes (PMIX_EVENT_AFFECTED_PROC[S], also with no
     * valid rank of ours): a peer failure does not fall back to its
     * source. */
    bool names_procs;
    char *text; /* owned copy, or NULL */
    int exit_code;
    bool has_exit_code;
    bool nondefault;
    /* PMIx's chain: info stays valid until cbfunc is called. NULL for
     * events made locally (singleton). */
    pmix_info_t *info;
    size_t ninfo;
    pmix_event_notification_cbfunc_fn_t cbfunc;
    void *cbdata;
    /* The PMIx registration of ours it came through (has_ref): PMIx reads
     * that registration's handler object until cbfunc is called, so it is
     * not deregistered before. */
    size_t ref;
    bool has_ref;
    /* What the chain came to so far: the status cbfunc gets. */
    int status;
};

/* A PMIx registration of ours being given up (job->closing). */
struct pmx_closing {
    size_t ref;
    /* Waits for the cbfunc of the events that came through it (they are
     * still queued); else its PMIx_Deregister_event_handler is under way,
     * and events that come through it meanwhile are passed on at once. */
    bool deferred;
};

/* An application handler. Never freed before finalize, so a dispatcher may
 * keep a pointer across the handler calls. has_pmix_ref and pmix_ref under
 * hdlr_lock. */
struct pmx_handler {
    size_t id;
    int category; /* PMX_CAT_* */
    int *codes;
    size_t ncodes;
    pscom_pmix_event_cb_t cb;
    void *ctx;
    bool removed;
    bool has_pmix_ref;
    size_t pmix_ref; /* our PMIx-level registration for its codes */
};

enum { PMX_CAT_SPECIFIC = 0, PMX_CAT_GROUP = 1, PMX_CAT_DEFAULT = 2 };

struct pscom_pmix_job {
    pmix_proc_t me;
    int rank, size;
    bool singleton;
    /* A lost-connection event came: set by a dispatcher, read by any
     * thread (atomic loads and stores). */
    bool server_lost;
    /* The PMIx server this process is connected to, from the
     * PMIX_SERVER_URI* variable PMIx connected with (server_known). */
    pmix_proc_t server;
    bool server_known;

    /* Bootstrap. */
    pscom_socket_t *sock;
    pscom_connection_t **cons; /* [size] */
    /* [size]: 1, 0, -1 unknown; NULL until the bootstrap filled it whole.
     * Published once (atomic release store, acquire loads): any thread
     * reads it without a lock. */
    signed char *local;
    /* [size]: 0, or what an event said: 1 failed, 2 terminated normally.
     * Allocated at init: events may come before the bootstrap. */
    signed char *failed;
    /* pscom_close_socket() of the bootstrap socket was seen (its watch,
     * pmix_boot.c, ran; finalize withdraws the watch): sock and every
     * cons[] entry are NULL from then on. */
    bool sock_closed;
    /* sock, cons[] (and the array itself), failed[] and sock_closed:
     * written by the bootstrap, by event dispatchers and by the socket's
     * close, which may run on other threads (pscom progress). Never held
     * while calling pscom. */
    pthread_mutex_t peers_lock;

    /* Events: filled by PMIx's thread, emptied by the dispatcher. */
    pthread_mutex_t evq_lock;
    struct pmx_event *evq_head, *evq_tail;
    /* Under evq_lock: the event a dispatcher handles now; finalize has
     * begun (our PMIx handlers pass every event on at once); the PMIx
     * registrations being given up. */
    struct pmx_event *running;
    bool stopping;
    struct pmx_closing *closing;
    size_t nclosing, cap_closing;
    int pipe_rd, pipe_wr;
    bool fd_watched;
    /* One dispatcher at a time (trylock; never held while waiting). */
    pthread_mutex_t dispatch_lock;
    /* pscom_pmix_finalize ran inside one of the job's handlers: the
     * dispatcher frees the job when the handler returned. */
    bool finalized;

    /* Application handlers, in registration order. */
    pthread_mutex_t hdlr_lock;
    struct pmx_handler **hdlrs;
    size_t nhdlrs, cap_hdlrs;
    size_t next_id;

    /* Our own PMIx registrations (catch-all, peer failure). */
    size_t own_refs[4];
    size_t nown_refs;
};

/* A lost-connection event came (job->server_lost, read by any thread). */
static inline bool pmx_server_lost(const pscom_pmix_job_t *job)
{
    return __atomic_load_n(&job->server_lost, __ATOMIC_RELAXED);
}

/* The connection to rank, and (if failed) what job->failed says of it;
 * under peers_lock (pmix_boot.c). */
pscom_connection_t *pmx_peer_get(pscom_pmix_job_t *job, int rank,
                                 signed char *failed);

/* pmix_job.c */
/* Free what the job holds and the job itself (finalize, or the
 * dispatcher after a finalize from a handler). */
void pmx_job_free(pscom_pmix_job_t *job);
/* Are a and b the same namespace? Never for an empty name (PMIx's
 * PMIX_CHECK_NSPACE takes one for a wildcard). */
bool pmx_nspace_is(const char *a, const char *b);
/* The bootstrap socket, NULL before the bootstrap and after its close. */
pscom_socket_t *pmx_job_sock(pscom_pmix_job_t *job);
void pmx_log(const pscom_pmix_job_t *job, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Map a PMIx status to a pscom error (setting errno for STDERROR). */
pscom_err_t pmx_err(pmix_status_t rc);
/* Fill a pmix_proc_t for a rank of our namespace. */
void pmx_proc(const pscom_pmix_job_t *job, int rank, pmix_proc_t *p);
bool pmx_server_usable(const pscom_pmix_job_t *job, const char *what);
pmix_data_range_t pmx_range(pscom_pmix_range_t range);

/* pmix_event.c */
int pmx_events_start(pscom_pmix_job_t *job);
void pmx_events_stop(pscom_pmix_job_t *job);
/* Make the event pipe readable: a pscom wait (also one sleeping on
 * descriptors) comes back and dispatches. Any thread. */
void pmx_wake(pscom_pmix_job_t *job);
/* A non-blocking PMIx call under way that a pscom wait waits for, with
 * pscom progressing (barrier, lookup). Its callback, on PMIx's thread,
 * stores what it returns and then calls pmx_op_finish, its last touch. */
struct pmx_op {
    pscom_pmix_job_t *job;
    pmix_status_t status;
    int done;
};
/* Set the status, wake a sleeping wait (the event pipe), then mark the
 * operation done. In this order: once done is seen, the waiter may return
 * and finalize the job (closing the pipe) at once. */
void pmx_op_finish(struct pmx_op *op, pmix_status_t status);
/* Wait, progressing pscom, until pmx_op_finish; return the status. From
 * an event handler run inside pscom progress it waits without progress. */
pmix_status_t pmx_op_wait(struct pmx_op *op);
/* Queue an event made in this process (singleton, local notify). */
int pmx_event_local(pscom_pmix_job_t *job, int code, int rank,
                    const char *text);
/* Did an event report rank dead: marked by a dispatcher (job->failed), or
 * a peer-failure event naming it waits in the queue? */
bool pmx_rank_reported_dead(pscom_pmix_job_t *job, int rank);
/* Is this thread running a handler (or the library's reaction) of job's
 * events? Then finalize leaves the job's free to the dispatcher. */
bool pmx_dispatching(const pscom_pmix_job_t *job);

/* pmix_boot.c */
/* Parse "host:port@name": 0, or -1 with *why set to what is wrong. */
int pmx_ep_check(const char *ep, int *port, char name[9], const char **why);
void pmx_fail_peer(pscom_pmix_job_t *job, int rank, int code,
                   const char *text, bool normal_exit);
/* Withdraw the receive that watches for the bootstrap socket's close
 * (finalize). */
void pmx_sock_watch_stop(pscom_pmix_job_t *job);

#endif /* PMX_PRIV_H_ */
