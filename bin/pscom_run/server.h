/*
 * pscom_run: the PMIx host side.  Maps the pmix_server_module_t callbacks
 * of the OpenPMIx server library onto the job, the datastore and the event
 * cache.  Everything else (fork, signals, output) is main.c's.
 */
#ifndef PSR_SERVER_H
#define PSR_SERVER_H

#include "launcher.h"

/*
 * Start the PMIx server in job->tmpdir and register every namespace and
 * client of the job.  Returns 0, or -1 after saying what failed.
 */
int psr_server_start(psr_job_t *job);

/*
 * Add the PMIx environment of proc to *env (a malloc'ed NULL-terminated
 * array, as PMIx_server_setup_fork expects).  0 or -1.
 */
int psr_server_setup_fork(psr_job_t *job, psr_proc_t *proc, char ***env);

/*
 * Main thread, after proc was reaped: purge its data from the datastore,
 * notify the other processes when it died abnormally, and decide whether
 * the job ends.
 */
void psr_server_proc_exited(psr_job_t *job, psr_proc_t *proc);

/* Main thread: complete lookups whose PMIX_TIMEOUT has passed. */
void psr_server_tick(psr_job_t *job);

/* The next time psr_server_tick has work, 0 when none. */
double psr_server_next_deadline(psr_job_t *job);

/* Finalize the PMIx server (after every child was reaped); sfd is the
 * signalfd of the blocked signals, `ending` those of them that end
 * pscom_run now. Each step (every deregistration, then the finalize) is
 * waited for at most 10 s. 0; -1 when the library did not finish in time;
 * or a signal of `ending` that came meanwhile, also one that came while
 * the library finished in time. Unless 0 the caller must leave at once
 * (_exit, or end by the signal), since the library's threads may still be
 * running. */
int psr_server_stop(psr_job_t *job, int sfd, const sigset_t *ending);

#endif /* PSR_SERVER_H */
