/*
 * A PMIx server library that gets stuck at the end of a job: linked into
 * pscom_run's objects as pscom_run_stuck, with -Wl,--wrap for
 * PMIx_server_deregister_nspace, PMIx_server_finalize, PMIx_Value_xfer
 * and PMIx_Value_destruct (run_case.py, stuck_teardown, stuck_finalize,
 * slow_teardown_signal, late_requests, publish_copy_fails).
 * PSCOM_TEST_STUCK says which step gets stuck:
 *   deregister       the deregistration of a namespace never calls back,
 *                    as OpenPMIx 4.2's progress thread was seen stuck after
 *                    clients died during a fence
 *   finalize         PMIx_server_finalize never returns
 *   slow-deregister  the deregistration waits 1 s, then runs
 *   late-publish     pscom_run's first copy of a value (of a published
 *                    one, on the PMIx thread) waits until a deregistration
 *                    has begun: the job has ended, its datastore is gone;
 *                    the deregistration itself starts 1 s later
 *   late-answer      the same for the third copy: the one a lookup's
 *                    answer hands to the library, after the published
 *                    value's and the datastore's (t_late late)
 *   xfer-fails       the first copy fails with PMIX_ERR_NOT_SUPPORTED
 *                    after it has filled in the value, as a copy failing
 *                    half way; PMIx_Value_destruct of it says so
 * Each says on stderr that it was called; the test waits for that line
 * before it signals pscom_run. Unset or anything else: the real calls.
 */
#include <pmix_server.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void __wrap_PMIx_server_deregister_nspace(const pmix_nspace_t nspace,
                                          pmix_op_cbfunc_t cbfunc,
                                          void *cbdata);
void __real_PMIx_server_deregister_nspace(const pmix_nspace_t nspace,
                                          pmix_op_cbfunc_t cbfunc,
                                          void *cbdata);
pmix_status_t __wrap_PMIx_server_finalize(void);
pmix_status_t __real_PMIx_server_finalize(void);
pmix_status_t __wrap_PMIx_Value_xfer(pmix_value_t *dest, const pmix_value_t *src);
pmix_status_t __real_PMIx_Value_xfer(pmix_value_t *dest, const pmix_value_t *src);
void __wrap_PMIx_Value_destruct(pmix_value_t *val);
void __real_PMIx_Value_destruct(pmix_value_t *val);

/* Set by the main thread at the first deregistration. */
static atomic_bool deregistering;

static int stuck(const char *step)
{
    const char *s = getenv("PSCOM_TEST_STUCK");
    return s && !strcmp(s, step);
}

static void say(const char *line, size_t len)
{
    if (write(2, line, len) < 0) return;
}

void __wrap_PMIx_server_deregister_nspace(const pmix_nspace_t nspace,
                                          pmix_op_cbfunc_t cbfunc,
                                          void *cbdata)
{
    static const char said[] = "stuck_deregister: called\n";
    int slow = stuck("slow-deregister");
    deregistering = true;
    /* Time for the requests queued behind the held copy: once the
     * namespace is gone, the library reads no more of its requests. */
    if (stuck("late-publish") || stuck("late-answer")) sleep(1);
    if (!slow && !stuck("deregister")) {
        __real_PMIx_server_deregister_nspace(nspace, cbfunc, cbdata);
        return;
    }
    say(said, sizeof(said) - 1);
    if (slow) {
        sleep(1);
        __real_PMIx_server_deregister_nspace(nspace, cbfunc, cbdata);
    }
}

pmix_status_t __wrap_PMIx_server_finalize(void)
{
    static const char said[] = "stuck_finalize: called\n";
    if (!stuck("finalize")) return __real_PMIx_server_finalize();
    say(said, sizeof(said) - 1);
    for (;;) pause();
}

/* Its copies of values: pscom_run's own calls, all on the PMIx thread. */
static atomic_int copies;
static _Atomic(pmix_value_t *) failed_copy; /* set and read on different threads */

pmix_status_t __wrap_PMIx_Value_xfer(pmix_value_t *dest, const pmix_value_t *src)
{
    static const char waits[] = "late_upcall: a copy waits for the end of the job\n";
    static const char ended[] = "late_upcall: resumed after the end of the job\n";
    static const char never[] = "late_upcall: the job did not end within 20 s\n";
    static const char fails[] = "xfer_fails: a filled-in copy fails\n";
    int n = ++copies;
    failed_copy = NULL;
    if ((stuck("late-publish") && n == 1) || (stuck("late-answer") && n == 3)) {
        say(waits, sizeof(waits) - 1);
        for (int i = 0; i < 2000 && !deregistering; i++) usleep(10000);
        if (deregistering) say(ended, sizeof(ended) - 1);
        else say(never, sizeof(never) - 1);
    }
    pmix_status_t st = __real_PMIx_Value_xfer(dest, src);
    if (stuck("xfer-fails") && n == 1 && st == PMIX_SUCCESS) {
        say(fails, sizeof(fails) - 1);
        failed_copy = dest;
        return PMIX_ERR_NOT_SUPPORTED;
    }
    return st;
}

void __wrap_PMIx_Value_destruct(pmix_value_t *val)
{
    static const char said[] = "xfer_fails: the failed copy was destructed\n";
    if (val && val == failed_copy) {
        failed_copy = NULL;
        say(said, sizeof(said) - 1);
    }
    __real_PMIx_Value_destruct(val);
}
