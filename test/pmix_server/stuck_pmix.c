/*
 * A PMIx server library that gets stuck at the end of a job: linked into
 * pscom_run's objects as pscom_run_stuck, with -Wl,--wrap for
 * PMIx_server_deregister_nspace and PMIx_server_finalize (run_case.py,
 * stuck_teardown, stuck_finalize, slow_teardown_signal). PSCOM_TEST_STUCK
 * says which step gets stuck:
 *   deregister       the deregistration of a namespace never calls back,
 *                    as OpenPMIx 4.2's progress thread was seen stuck after
 *                    clients died during a fence
 *   finalize         PMIx_server_finalize never returns
 *   slow-deregister  the deregistration waits 1 s, then runs
 * Each says on stderr that it was called; the test waits for that line
 * before it signals pscom_run. Unset or anything else: the real calls.
 */
#include <pmix_server.h>
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
