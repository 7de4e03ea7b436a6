/*
 * The death of a process: the others get a process-termination event.
 *   t_term NAPPS kill [keep]   app 0 rank 1 SIGKILLs itself after a fence;
 *                              the others expect the event within 2 s, then
 *                              run 1.5 s longer and print "survivor ... done"
 *                              ("keep", under --keep-going) or wait to be
 *                              ended by the launcher.
 *   t_term NAPPS late          (--keep-going) app 0 rank 1 dies right after
 *                              PMIx_Init; app 1 rank 0 starts 1.5 s late and
 *                              still gets the event, exactly once.
 * Each survivor prints "term event <code> affected <app>:<rank> after <s> s".
 */
#include "tclient.h"

#include <stdatomic.h>

/* The handler runs on PMIx's progress thread, the only writer: it fills
 * the first event's fields, then publishes them by storing n_events. */
static atomic_int n_events;
static pmix_status_t ev_code;
static pmix_status_t ev_cause;
static pmix_proc_t ev_affected;
static double t_start;
static double ev_time;

static void handler(size_t id, pmix_status_t status, const pmix_proc_t *source,
                    pmix_info_t info[], size_t ninfo, pmix_info_t results[], size_t nresults,
                    pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id;
    (void)results;
    (void)nresults;
    pmix_proc_t affected = *source;
    pmix_status_t cause = status;
    for (size_t i = 0; i < ninfo; i++) {
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC)) affected = *info[i].value.data.proc;
        if (PMIX_CHECK_KEY(&info[i], PMIX_PROC_TERM_STATUS)) cause = info[i].value.data.status;
    }
    int seen = atomic_load(&n_events);
    if (seen == 0) {
        ev_code = status;
        ev_cause = cause;
        ev_affected = affected;
        ev_time = t_now();
    }
    atomic_store(&n_events, seen + 1);
    t_note("event %s (cause %s) about %s:%u", PMIx_Error_string(status),
           PMIx_Error_string(cause), affected.nspace, affected.rank);
    if (cbfunc) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static void register_termination(void)
{
    /* The codes launchers use for a process that ended: the PMIx 4
     * standard's PMIX_EVENT_PROC_TERMINATED and the causes PRRTE sends. */
    pmix_status_t codes[] = { PMIX_EVENT_PROC_TERMINATED, PMIX_ERR_PROC_ABORTED_BY_SIG,
                              PMIX_ERR_EXIT_NONZERO_TERM, PMIX_ERR_PROC_TERM_WO_SYNC,
                              PMIX_ERR_PROC_ABORTED };
    pmix_status_t rc = PMIx_Register_event_handler(codes, sizeof(codes) / sizeof(codes[0]),
                                                   NULL, 0, handler, NULL, NULL);
    T_CHECK(rc >= 0, "PMIx_Register_event_handler: %s", PMIx_Error_string(rc));
}

static void expect_one_event(const pmix_proc_t *victim, double limit)
{
    while (n_events == 0 && t_now() - t_start < limit) usleep(5000);
    T_CHECK(n_events > 0, "no termination event within %.1f s", limit);
    double dt = ev_time - t_start;
    printf("term event %s affected %s:%u after %.2f s\n", PMIx_Error_string(ev_code),
           ev_affected.nspace, ev_affected.rank, dt);
    T_CHECK(PMIX_CHECK_NSPACE(ev_affected.nspace, victim->nspace) &&
            ev_affected.rank == victim->rank, "the event names %s:%u, not the victim %s:%u",
            ev_affected.nspace, ev_affected.rank, victim->nspace, victim->rank);
    usleep(500000);
    T_CHECK(n_events == 1, "%d termination events for one death", n_events);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 2 ? argv[2] : "kill";
    bool keep = argc > 3 && strcmp(argv[3], "keep") == 0;
    bool late = strcmp(mode, "late") == 0;

    if (late && getenv("PMIX_RANK") && strcmp(getenv("PMIX_RANK"), "0") == 0 &&
        getenv("PMIX_NAMESPACE") && strlen(getenv("PMIX_NAMESPACE")) > 1 &&
        getenv("PMIX_NAMESPACE")[strlen(getenv("PMIX_NAMESPACE")) - 1] == '1')
        usleep(1500000);    /* app 1 rank 0 under pscom_run: start late */

    t_init(argc, argv, 40);
    if (late) {
        /* No exchange with a process that is about to die: use our own
         * namespace names.  App 0's namespace is learned by the victim's
         * event itself. */
        if (t_is(0, 1)) raise(SIGKILL);
        register_termination();
        t_start = t_now();
        while (n_events == 0 && t_now() - t_start < 5) usleep(5000);
        T_CHECK(n_events > 0, "no termination event within 5 s of starting");
        pmix_proc_t victim = ev_affected;
        T_CHECK(victim.rank == 1, "the event names rank %u, not rank 1", victim.rank);
        t_start = ev_time;
        expect_one_event(&victim, 0.1);
        t_finalize();
        return 0;
    }

    t_exchange();
    pmix_proc_t victim = t_proc(0, 1);
    register_termination();
    t_fence_all();
    t_start = t_now();
    if (t_is(0, 1)) raise(SIGKILL);

    expect_one_event(&victim, 2.0);
    if (!keep) {
        /* The launcher ends the job now. */
        sleep(30);
        t_fail("still running 30 s after the death of a peer");
    }
    /* Outlive the launcher's --grace (1 s): only --keep-going lets us. */
    usleep(1500000);
    printf("survivor %u:%u done\n", t_appnum, t_arank);
    t_finalize();
    return 0;
}
