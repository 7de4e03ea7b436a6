/*
 * pscom_pmix — job bootstrap, events and publish/lookup through PMIx.
 *
 * An extension of pscom in its own library (libpscom_pmix.so, pkg-config
 * pscom_pmix), built when the OpenPMIx client library is found. It uses only
 * the public pscom interface, so it works the same under any PMIx host:
 * pscom_run, Open MPI's mpirun, Slurm's srun --mpi=pmix, PRRTE.
 *
 * A typical program:
 *
 *     pscom_pmix_job_t *job;
 *     pscom_init(PSCOM_VERSION);
 *     pscom_pmix_init(&job);                  // PMIx_Init, or a singleton
 *     pscom_socket_t *sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, 0);
 *     pscom_pmix_bootstrap(job, sock, 0);     // every rank reachable
 *     pscom_connection_t *to1 = pscom_pmix_connection(job, 1);
 *     ...                                     // pscom_post_send(), _recv()
 *     pscom_pmix_barrier(job);
 *     pscom_pmix_finalize(job);
 *     pscom_close_socket(sock);
 *
 * Events. PMIx calls event handlers on its own progress thread. This library
 * never runs application code there: its PMIx handlers only queue the event
 * and wake a pipe that the pscom progress engine watches. The event is then
 * handled inside the next pscom_wait*() / pscom_test_any() (or
 * pscom_pmix_progress()) of the application: first the library's own part
 * (a peer's failure fails that peer's connection), then the application's
 * handlers, one at a time, never two at once. So handlers may call any pscom
 * function also after a plain pscom_init(). A program that makes no pscom
 * call for a while sees its events when it makes the next one. The PMIx
 * event chain waits for the application's handlers, so the status they
 * return goes back to PMIx (and PSCOM_PMIX_EVENT_ACTION_COMPLETE stops PMIx
 * from calling handlers registered with PMIx directly by other code).
 *
 * Threads: every function may be called from any thread (pscom itself must
 * then have been initialised with pscom_init_thread()), except that
 * pscom_pmix_init() and pscom_pmix_finalize() must not run while another
 * thread uses the job. Handlers must not wait for pscom requests (the event
 * that would complete them could be the next one in the queue).
 *
 * Errors: functions return PSCOM_SUCCESS or a negative pscom_err_t. With
 * PSCOM_ERR_STDERROR, errno says more: ENOTCONN (no PMIx server: a singleton,
 * or the server was lost), ENOENT (not found), ETIMEDOUT, EEXIST (published
 * already), EACCES, ENOTSUP (the PMIx host does not support it), EIO (other
 * PMIx errors). Every failure is also logged once (PSP_DEBUG >= 1) with the
 * PMIx call, its status and the rank concerned.
 *
 * Settings: PSP_ONDEMAND (see pscom_pmix_bootstrap()) and PSP_DEBUG. This
 * library adds no PSP_* variable of its own.
 */
#ifndef PSCOM_PMIX_H_
#define PSCOM_PMIX_H_

#include <stddef.h>

#include "pscom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One process's view of its PMIx job (namespace). At most one per process. */
typedef struct pscom_pmix_job pscom_pmix_job_t;

/* ---------------------------------------------------------------------- */
/* Setup                                                                  */
/* ---------------------------------------------------------------------- */

/* Connect to the PMIx server of the launcher (PMIx_Init), learn this
 * process's rank and the job size, and register the library's event
 * handlers: a catch-all (default) handler, and handlers for the termination
 * or abort of a peer and for the loss of the PMIx server (LOST_CONNECTION or
 * UNREACH from this process's server or this process itself; from others
 * they are events like any other). Calls
 * pscom_init(PSCOM_VERSION) first (a no-op when pscom is initialised
 * already; call pscom_init_thread() before this to use threads).
 *
 * Singleton: when PMIx_Init fails and the environment holds no PMIx
 * variables (PMIX_NAMESPACE, PMIX_RANK, PMIX_SERVER_URI*), the program was
 * started without a launcher. The job is then rank 0 of 1, this is logged
 * (PSP_DEBUG >= 1, "running as a singleton"), bootstrap and local events work,
 * and calls that need a server fail with PSCOM_ERR_STDERROR/ENOTCONN.
 *
 * *job_p: set on success; the job is owned by the library until
 * pscom_pmix_finalize(). Errors: PSCOM_ERR_ALREADY (a job exists),
 * PSCOM_ERR_STDERROR with ENOTCONN (a launcher's environment is present but
 * its server cannot be reached), ENOMEM. */
pscom_err_t pscom_pmix_init(pscom_pmix_job_t **job_p);

/* Flags of pscom_pmix_bootstrap(). Without either, PSP_ONDEMAND decides:
 * unset or 1: on demand; 0: all at once. */
#define PSCOM_PMIX_BOOT_ONDEMAND 0x1u /* connect each peer on first use */
#define PSCOM_PMIX_BOOT_DIRECT   0x2u /* connect every pair now */

/* Make every rank of the job reachable through `socket`:
 *   1. name the socket "r%07d" after the rank (a rank-unique name, which the
 *      on-demand connection rule needs), set its local rank, and listen on
 *      any port unless it listens already;
 *   2. publish its endpoint string in PMIx (PMIx_Put "pscom.ep", and
 *      "pscom.nodeid" with pscom_get_nodeid(); PMIx_Commit) and fence with
 *      data collection (PMIx_Fence, PMIX_COLLECT_DATA) over the namespace;
 *   3. read every rank's endpoint, check it, and learn which ranks run on
 *      this node (PMIx_Resolve_peers, else PMIX_LOCAL_PEERS);
 *   4. prepare a connection to every rank: on demand (connected by the first
 *      message in either direction), or all at once: each rank connects to
 *      the ranks above it and accepts those below, so there is exactly one
 *      connection per pair. The connection to itself is a loop connection.
 * Shared memory is offered only to peers on the same node, by the pscom
 * handshake itself (boot id and hostname); PMIx's view of locality is exposed
 * by pscom_pmix_is_local(), and a disagreement between PMIx and the pscom
 * node ids is logged (PSP_DEBUG >= 2).
 *
 * Collective: every rank of the namespace must call it. `socket` stays the
 * application's; its connections are closed by pscom_close_socket(), never
 * by this library, which then forgets them (the core tells it of the
 * close before the connections go). Do not
 * close the table's connections yourself. Call once per job, with no pscom
 * traffic on the socket before. pscom_pmix_is_local() may be called from
 * another thread meanwhile.
 *
 * Errors (logged, naming the rank): PSCOM_ERR_INVALID for a missing or
 * malformed endpoint string of a peer (did it call pscom_pmix_bootstrap?
 * the same pscom version?), PSCOM_ERR_ALREADY on a second call, the error
 * of pscom_listen() or of a direct pscom_connect(), PSCOM_ERR_STDERROR with
 * ETIMEDOUT when peers did not connect within 3 * PSP_CONNECT_TIMEOUT,
 * ECONNABORTED when an event reported such a peer dead, or one that
 * published no endpoint (it ended before its bootstrap), or EIO/ENOTCONN
 * when a PMIx call failed. */
pscom_err_t pscom_pmix_bootstrap(pscom_pmix_job_t *job, pscom_socket_t *socket,
                                 unsigned flags);

/* Wait until every rank of the job called it (a PMIx fence without
 * data). pscom progresses meanwhile, as pscom_wait does (it spins, then
 * rests per PSP_WAIT_SPIN/PSP_WAIT_SLEEP: over UCX and with threads it
 * keeps a core busy): sends and rendezvous still under way complete, and
 * request callbacks and queued event handlers may run inside the call.
 * Any thread, but like pscom_wait not from a request callback. From an
 * event handler that pscom progress runs it waits without progress, so a
 * peer that waits for data of this process before it enters deadlocks it:
 * call it outside handlers (handlers run by pscom_pmix_progress() do
 * progress). A singleton returns at once. */
pscom_err_t pscom_pmix_barrier(pscom_pmix_job_t *job);

/* Drop queued events (their PMIx chains are told
 * PSCOM_PMIX_EVENT_NO_ACTION_TAKEN), deregister every handler,
 * PMIx_Finalize, and free the job. The socket and its connections stay
 * open: close them with pscom_close_socket() (before or after). NULL is
 * ignored. May be called from an event handler (or a con_error the
 * library's reaction to a peer's failure calls): the handlers after it are
 * not called, the event's PMIx chain gets the status so far, and the job
 * is freed when the handler returned; do not use it after the call. */
void pscom_pmix_finalize(pscom_pmix_job_t *job);

/* ---------------------------------------------------------------------- */
/* The job                                                                */
/* ---------------------------------------------------------------------- */

/* This process's rank and the number of ranks of its namespace. */
int pscom_pmix_rank(const pscom_pmix_job_t *job);
int pscom_pmix_size(const pscom_pmix_job_t *job);

/* The PMIx namespace ("singleton" for a singleton); owned by the job. */
const char *pscom_pmix_nspace(const pscom_pmix_job_t *job);

/* 1 when running without a PMIx server, else 0. */
int pscom_pmix_is_singleton(const pscom_pmix_job_t *job);

/* The socket given to pscom_pmix_bootstrap(), or NULL before, and after
 * pscom_close_socket() closed it. */
pscom_socket_t *pscom_pmix_socket(const pscom_pmix_job_t *job);

/* The connection to `rank` (0 <= rank < size) after pscom_pmix_bootstrap(),
 * else NULL. Owned by the socket. After the peer failed it stays valid and
 * in state PSCOM_CON_STATE_CLOSED (sends and receives on it fail at once).
 * The connection to oneself is a loop connection whose messages arrive on
 * its accepted twin: receive them with connection NULL (any source). NULL
 * after pscom_close_socket() closed the socket. */
pscom_connection_t *pscom_pmix_connection(const pscom_pmix_job_t *job,
                                          int rank);

/* 1 when PMIx places `rank` on this node, 0 when not, -1 when unknown (no
 * bootstrap yet, rank out of range, or the host tells nothing). Any thread,
 * also while the bootstrap runs. */
int pscom_pmix_is_local(const pscom_pmix_job_t *job, int rank);

/* ---------------------------------------------------------------------- */
/* Events                                                                 */
/* ---------------------------------------------------------------------- */

/* Event codes are PMIx status codes (pmix_status_t, <pmix_common.h>). The
 * values below are PMIx's own (checked when this library is built), so that
 * programs need no PMIx header for the common cases. */
#define PSCOM_PMIX_PROC_TERMINATED      (-201) /* PMIX_EVENT_PROC_TERMINATED */
#define PSCOM_PMIX_PROC_ABORTED_BY_SIG  (-402) /* PMIX_ERR_PROC_ABORTED_BY_SIG */
#define PSCOM_PMIX_PROC_REQUESTED_ABORT (-8)   /* PMIX_ERR_PROC_REQUESTED_ABORT */
#define PSCOM_PMIX_LOST_CONNECTION      (-61)  /* PMIX_ERR_LOST_CONNECTION */
#define PSCOM_PMIX_NODE_DOWN            (-231) /* PMIX_EVENT_NODE_DOWN */
/* Application codes: PSCOM_PMIX_EXTERNAL_BASE - 1, - 2, ... */
#define PSCOM_PMIX_EXTERNAL_BASE        (-3000) /* PMIX_EXTERNAL_ERR_BASE */

/* What a handler returns (the PMIx chaining rules): any value lets the next
 * handler run and is passed to it as prev_status; ACTION_COMPLETE ends the
 * chain. */
#define PSCOM_PMIX_EVENT_CONTINUE             0      /* PMIX_SUCCESS */
#define PSCOM_PMIX_EVENT_NO_ACTION_TAKEN      (-331) /* PMIX_EVENT_NO_ACTION_TAKEN */
#define PSCOM_PMIX_EVENT_PARTIAL_ACTION_TAKEN (-332) /* PMIX_EVENT_PARTIAL_ACTION_TAKEN */
#define PSCOM_PMIX_EVENT_ACTION_DEFERRED      (-333) /* PMIX_EVENT_ACTION_DEFERRED */
#define PSCOM_PMIX_EVENT_ACTION_COMPLETE      (-334) /* PMIX_EVENT_ACTION_COMPLETE */

/* What one earlier handler of the chain returned. */
typedef struct pscom_pmix_result {
    size_t id;  /* the handler's registration id */
    int status; /* its return value */
} pscom_pmix_result_t;

/* An event as a handler sees it. Everything it points to is owned by the
 * library and valid only during the handler call. */
typedef struct pscom_pmix_event {
    int code;                  /* PMIx status code of the event */
    const char *code_str;      /* its name (PMIx_Error_string) */
    const char *source_nspace; /* namespace of the source; "" for the host */
    int source_rank;           /* rank of the source, or -1 (host, unknown) */
    /* Ranks of this job that the event names (PMIX_EVENT_AFFECTED_PROC[S],
     * or the source of a peer-failure event that names no process). For a
     * peer failure their connections have been failed before any handler
     * runs. */
    const int *ranks;
    size_t nranks;
    const char *text;    /* PMIX_EVENT_TEXT_MESSAGE, or NULL */
    int exit_code;       /* PMIX_EXIT_CODE when has_exit_code */
    int has_exit_code;
    /* The raw pmix_info_t array of the event (include <pmix.h> to read it);
     * NULL for a singleton's local events. */
    const void *pmix_info;
    size_t pmix_ninfo;
    /* Earlier handlers of this chain, in calling order. */
    const pscom_pmix_result_t *results;
    size_t nresults;
} pscom_pmix_event_t;

/* An application's event handler. prev_status: the value the previous
 * handler of the chain returned (PSCOM_PMIX_EVENT_CONTINUE for the first).
 * Return PSCOM_PMIX_EVENT_ACTION_COMPLETE to end the chain, anything else
 * (usually PSCOM_PMIX_EVENT_CONTINUE) to pass it on. It runs inside pscom
 * progress on an application thread (see the top of this file); it may
 * register, deregister and notify, and call pscom, but not wait for
 * requests. */
typedef int (*pscom_pmix_event_cb_t)(pscom_pmix_job_t *job,
                                     const pscom_pmix_event_t *event,
                                     int prev_status, void *ctx);

/* Flags of pscom_pmix_event_register(). */
#define PSCOM_PMIX_EVENT_GROUP   0x1u /* the codes form a group, also just one */
#define PSCOM_PMIX_EVENT_DEFAULT 0x2u /* every event: codes must be NULL/0 */

/* Register an event handler. Its category follows PMIx:
 *   specific  one code (ncodes == 1, no flag)
 *   group     several codes (ncodes > 1, or PSCOM_PMIX_EVENT_GROUP)
 *   default   PSCOM_PMIX_EVENT_DEFAULT: all events, except those flagged
 *             PMIX_EVENT_NON_DEFAULT by their sender.
 * An event runs the matching specific handlers, then the matching group
 * handlers, then the default handlers, each category in registration order
 * (first in, first out), until one returns PSCOM_PMIX_EVENT_ACTION_COMPLETE.
 * codes is copied. ctx is passed to cb unchanged. *id_p gets the id for
 * pscom_pmix_event_deregister() (ids are never 0 and never reused).
 * Events that happened before registering may still be delivered (PMIx
 * hosts cache events), also before this call returns: another thread's
 * dispatch may run the handler at once. Errors: PSCOM_ERR_INVALID (bad
 * arguments), PSCOM_ERR_STDERROR (PMIx refused: ENOTSUP, EIO; ENOMEM). */
pscom_err_t pscom_pmix_event_register(pscom_pmix_job_t *job, const int *codes,
                                      size_t ncodes, unsigned flags,
                                      pscom_pmix_event_cb_t cb, void *ctx,
                                      size_t *id_p);

/* Remove a handler: it is not called for events dispatched afterwards, also
 * not later in the chain running now. Also from inside a handler (a
 * one-shot handler removes itself). PSCOM_ERR_INVALID for an unknown id. */
pscom_err_t pscom_pmix_event_deregister(pscom_pmix_job_t *job, size_t id);

/* Where an event (or published data) is visible. */
typedef enum pscom_pmix_range {
    PSCOM_PMIX_RANGE_DEFAULT = 0, /* the host's default (publish: session) */
    PSCOM_PMIX_RANGE_PROC_LOCAL,  /* this process only */
    PSCOM_PMIX_RANGE_LOCAL,       /* processes on this node */
    PSCOM_PMIX_RANGE_NAMESPACE,   /* this job */
    PSCOM_PMIX_RANGE_SESSION,     /* jobs of this session/allocation */
    PSCOM_PMIX_RANGE_GLOBAL,      /* everybody the host can reach */
} pscom_pmix_range_t;

/* Notify an event (PMIx_Notify_event, source: this process). code: a PMIx
 * code, for own events PSCOM_PMIX_EXTERNAL_BASE - n. range: who gets it
 * (DEFAULT: the job; PROC_LOCAL: only this process's handlers, also in a
 * singleton). rank: a rank of this job the event is about
 * (PMIX_EVENT_AFFECTED_PROC), or -1 for none (an affected process of no
 * valid rank: receivers do not take the sender for the process a
 * peer-failure code is about). text (may be NULL) is copied into
 * PMIX_EVENT_TEXT_MESSAGE. Whether the sender's own handlers also see an
 * event of a wider range depends on the host. Hosts may act on error codes
 * (Open MPI 4's mpirun aborts the job on a notified error event).
 * Errors: PSCOM_ERR_INVALID, PSCOM_ERR_STDERROR (ENOTCONN, EIO). */
pscom_err_t pscom_pmix_notify(pscom_pmix_job_t *job, int code,
                              pscom_pmix_range_t range, int rank,
                              const char *text);

/* Handle the queued events now, on this thread. Returns how many were
 * handled. pscom progress does this by itself; call it when making no pscom
 * call for a long time. Not from inside a handler (returns 0 there). */
int pscom_pmix_progress(pscom_pmix_job_t *job);

/* A printable name of a PMIx status code (static string). */
const char *pscom_pmix_event_str(int code);

/* ---------------------------------------------------------------------- */
/* Publish and lookup: two separately launched jobs meet by name          */
/* ---------------------------------------------------------------------- */

/* How long published data lives. */
typedef enum pscom_pmix_persist {
    PSCOM_PMIX_PERSIST_DEFAULT = 0, /* the host's default */
    PSCOM_PMIX_PERSIST_INDEF,       /* until unpublished */
    PSCOM_PMIX_PERSIST_FIRST_READ,  /* until looked up once */
    PSCOM_PMIX_PERSIST_PROC,        /* until this process ends */
    PSCOM_PMIX_PERSIST_APP,         /* until this application ends */
    PSCOM_PMIX_PERSIST_SESSION,     /* until the session ends */
} pscom_pmix_persist_t;

/* Publish the endpoint string of `socket` (NULL: the bootstrap socket; it
 * must listen) under the key `service` (at most 511 bytes) with PMIx_Publish.
 * Peers connect to it with pscom_connect(..., PSCOM_CON_FLAG_DIRECT): the
 * socket names of two jobs are not unique, so do not use on-demand
 * connections between jobs. Errors: PSCOM_ERR_INVALID, PSCOM_ERR_STDERROR
 * with EEXIST (the key is published in this range already), EACCES,
 * ENOTCONN (singleton), ENOTSUP, EIO. */
pscom_err_t pscom_pmix_publish(pscom_pmix_job_t *job, pscom_socket_t *socket,
                               const char *service, pscom_pmix_range_t range,
                               pscom_pmix_persist_t persist);

/* Look up the endpoint string published under `service` (PMIx_Lookup_nb;
 * pscom progresses meanwhile, with the CPU use and the rules of
 * pscom_pmix_barrier: not from a request callback; from an event handler
 * run by pscom progress it waits without progress).
 * wait: 0 returns at once (ENOENT when nothing is published), 1 waits until
 * it is published; timeout_s > 0 bounds that wait (ETIMEDOUT; hosts differ
 * in the status they report, also ENOENT). On success *ep_p gets a string
 * for pscom_connect(), owned by the caller: free() it. Errors:
 * PSCOM_ERR_INVALID (also for a value that is no endpoint string),
 * PSCOM_ERR_STDERROR with ENOENT, ETIMEDOUT, ENOTCONN, ENOTSUP, EIO. */
pscom_err_t pscom_pmix_lookup(pscom_pmix_job_t *job, const char *service,
                              pscom_pmix_range_t range, int wait,
                              unsigned timeout_s, char **ep_p);

/* Remove what this process published under `service` in `range`
 * (PMIx_Unpublish). Errors as for pscom_pmix_publish(), ENOENT when nothing
 * was published. */
pscom_err_t pscom_pmix_unpublish(pscom_pmix_job_t *job, const char *service,
                                 pscom_pmix_range_t range);

#ifdef __cplusplus
}
#endif

#endif /* PSCOM_PMIX_H_ */
