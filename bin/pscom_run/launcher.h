/*
 * pscom_run: the job and the state the main loop shares with the PMIx
 * server glue.
 *
 * Two threads touch it: the main thread (fork, signals, output, timers)
 * and the PMIx progress thread (the host callbacks in server.c).  Fields
 * marked (L) are guarded by job->lock; the rest are set before the PMIx
 * server starts and only read afterwards.  Nobody calls into the PMIx
 * library while holding job->lock: the library may be inside a host
 * callback waiting for that lock.
 */
#ifndef PSR_LAUNCHER_H
#define PSR_LAUNCHER_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include <sched.h>
#include <pmix_common.h>

#include "cli.h"
#include "datastore.h"
#include "evcache.h"
#include "output.h"

typedef struct psr_proc {
    pmix_proc_t id;             /* namespace of its app, rank within the app */
    int app;                    /* index into job->apps */
    char tag[32];               /* "[3] " or "[1:0] " for --tag-output */
    pid_t pid;                  /* (L) 0 before the fork */
    int out_fd;                 /* pipe from its stdout with --tag-output, else -1 */
    int err_fd;                 /* pipe from its stderr with --tag-output, else -1 */
    psr_linebuf_t out_lb;
    psr_linebuf_t err_lb;
    bool connected;             /* (L) PMIx_Init reached the server */
    bool finalized;             /* (L) PMIx_Finalize reached the server */
    bool aborted;               /* (L) called PMIx_Abort */
    bool exited;                /* (L) reaped */
    bool uninit_exit;           /* (L) exited with 0 without PMIx_Init before any
                                 * other process of its namespace connected */
    int wstatus;                /* (L) from waitpid */
    int bind;                   /* --bind-to: index into job->binds, else -1 */
} psr_proc_t;

typedef struct psr_app {
    char nspace[PMIX_MAX_NSLEN + 1];
    char **argv;                /* NULL-terminated copy of the app's argv */
    int np;
    int first;                  /* index of its rank 0 in job->procs */
    int nexited;                /* (L) */
    int nconnected;             /* (L) processes that reached PMIx_Init (no stand-ins) */
} psr_app_t;

typedef struct psr_job {
    pthread_mutex_t lock;
    const psr_opts_t *opts;
    psr_app_t *apps;
    int napps;
    psr_proc_t *procs;
    int nprocs;
    char hostname[256];
    uid_t uid;
    gid_t gid;
    pmix_proc_t server_id;      /* the launcher's own PMIx identity */
    psr_cpuset_t *binds;        /* --bind-to: the CPU sets, nbinds of them */
    int nbinds;
    char tmpdir[4096];          /* removed at exit */

    psr_ds_t *ds;               /* (L) publish/lookup datastore */
    psr_evc_t *evc;             /* (L) cache of the events the launcher sent */
    psr_ds_result_t *answers;   /* (L) lookup answers to hand over on the PMIx thread */
    bool tick_sent;             /* (L) a tick is on its way to the PMIx thread */
    int exit_status;            /* (L) first non-zero status, 0 while none */
    bool ending;                /* (L) the job is being ended */
    bool signalled;             /* (L) ended by a signal to pscom_run */
    double signalled_at;        /* (L) when that signal came */
    double kill_at;             /* (L) time of the next kill stage, 0: none */
    int kill_stage;             /* (L) 0: none sent, 1: SIGTERM sent, 2: SIGKILL sent */
    int wake_fd[2];             /* a byte on [1] wakes the main loop */
} psr_job_t;

/* Seconds on a monotonic clock. */
double psr_now(void);

/* Is an ending signal that arrives now a copy of the request already
 * forwarded to the job (coreutils' timeout signals the process group and
 * pscom_run; a terminal's ^C reaches both)? Within 0.5 s of it. Holding
 * job->lock. */
static inline bool psr_signal_is_copy_locked(const psr_job_t *job)
{
    return job->signalled && psr_now() - job->signalled_at < 0.5;
}

/* Wake the main loop (any thread, any lock state). */
void psr_job_wake(psr_job_t *job);

/* The process with PMIx identity id, or NULL. */
psr_proc_t *psr_job_find(psr_job_t *job, const pmix_proc_t *id);

/* Is nspace one of ours? */
psr_app_t *psr_job_find_app(psr_job_t *job, const char *nspace);

/*
 * Begin ending the job: remember status as the job's status when none was
 * recorded yet, and schedule SIGTERM then SIGKILL for every live process
 * (after `delay` seconds).  Caller holds job->lock.
 */
void psr_job_end_locked(psr_job_t *job, int status, double delay);

/*
 * Main thread: p died before PMIx_Init; start a stand-in that connects as p
 * and exits, so that the PMIx library fails the collectives p was part of
 * instead of waiting for it forever.
 */
void psr_stand_in_spawn(psr_job_t *job, psr_proc_t *p);

/* Diagnostics on stderr, "pscom_run: ..." (level 0 always, >0 with -v). */
void psr_log(const psr_job_t *job, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* PSR_LAUNCHER_H */
