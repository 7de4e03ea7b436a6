/*
 * Event notification between the namespaces of one MPMD launch:
 *   pscom_run -n 2 t_events 2 : -n 2 t_events 2
 * A0 notifies, before anyone has registered a handler,
 *   E_ENV  (PMIX_EVENT_NODE_OFFLINE, an environment event) on its namespace,
 *   E_JOB  (a user code) targeted at B1 with PMIX_RANGE_CUSTOM;
 * then, with early handlers registered at A1 and B1, E_NOW targeted at B1.
 * The others register late.  Expected: A1 gets E_ENV (cached, its
 * namespace) and nothing else; B0 gets nothing; B1 gets E_JOB (cached) and
 * E_NOW (at once), each exactly once.  Prints "events ok".
 */
#include "tclient.h"

#include <stdatomic.h>

#define E_ENV PMIX_EVENT_NODE_OFFLINE
#define E_JOB (PMIX_EXTERNAL_ERR_BASE - 1)
#define E_NOW (PMIX_EXTERNAL_ERR_BASE - 2)

/* Counted on PMIx's progress thread, read on the main thread. */
static atomic_int n_env, n_job, n_now, n_other;

static void handler(size_t id, pmix_status_t status, const pmix_proc_t *source,
                    pmix_info_t info[], size_t ninfo, pmix_info_t results[], size_t nresults,
                    pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id;
    (void)results;
    (void)nresults;
    const char *text = "";
    for (size_t i = 0; i < ninfo; i++)
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_TEXT_MESSAGE)) text = info[i].value.data.string;
    t_note("event %s (%d) from %s:%u: %s", PMIx_Error_string(status), status, source->nspace,
           source->rank, text);
    if (status == E_ENV) n_env++;
    else if (status == E_JOB) n_job++;
    else if (status == E_NOW) n_now++;
    else n_other++;
    if (cbfunc) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static void reg(pmix_status_t *codes, size_t n)
{
    pmix_status_t rc = PMIx_Register_event_handler(codes, n, NULL, 0, handler, NULL, NULL);
    T_CHECK(rc >= 0, "PMIx_Register_event_handler: %s", PMIx_Error_string(rc));
}

static void notify(pmix_status_t code, pmix_data_range_t range, const pmix_proc_t *target,
                   const char *text)
{
    pmix_info_t info[2];
    size_t n = 0;
    PMIX_INFO_LOAD(&info[n], PMIX_EVENT_TEXT_MESSAGE, text, PMIX_STRING);
    n++;
    if (target) {
        PMIX_INFO_LOAD(&info[n], PMIX_EVENT_CUSTOM_RANGE, target, PMIX_PROC);
        n++;
    }
    pmix_status_t rc = PMIx_Notify_event(code, &t_me, range, info, n, NULL, NULL);
    T_STATUS(rc, PMIX_SUCCESS, "PMIx_Notify_event");
    for (size_t i = 0; i < n; i++) PMIX_INFO_DESTRUCT(&info[i]);
}

int main(int argc, char **argv)
{
    t_init(argc, argv, 40);
    T_CHECK(t_napps == 2, "run as: -n 2 t_events 2 : -n 2 t_events 2");
    t_exchange();
    pmix_proc_t B1 = t_proc(1, 1);
    pmix_status_t now_code = E_NOW, late_codes[] = { E_ENV, E_JOB };
    bool early = t_is(0, 1) || t_is(1, 1);
    if (early) reg(&now_code, 1);
    t_fence_all();

    if (t_is(0, 0)) {
        notify(E_ENV, PMIX_RANGE_NAMESPACE, NULL, "environment, namespace A");
        notify(E_JOB, PMIX_RANGE_CUSTOM, &B1, "job event for B1");
        notify(E_NOW, PMIX_RANGE_CUSTOM, &B1, "immediate event for B1");
        /* The notifications travel asynchronously; let them arrive. */
        usleep(300000);
    }
    t_fence_all();

    /* Late registration: cached events are delivered now. */
    if (!t_is(0, 0)) reg(late_codes, 2);
    int want_env = t_is(0, 1), want_job = t_is(1, 1), want_now = t_is(1, 1);
    double t0 = t_now();
    while ((n_env < want_env || n_job < want_job || n_now < want_now) && t_now() - t0 < 2)
        usleep(10000);
    usleep(500000);     /* time for anything that should not come */
    T_CHECK(n_env == want_env && n_job == want_job && n_now == want_now && n_other == 0,
            "got env %d job %d now %d other %d, expected env %d job %d now %d", n_env, n_job,
            n_now, n_other, want_env, want_job, want_now);
    t_fence_all();
    printf("events ok %u:%u\n", t_appnum, t_arank);
    t_finalize();
    return 0;
}
