/*
 * PMIX_WAIT: a lookup that waits for a later publish, a wait for some of
 * the keys, and a wait bounded by PMIX_TIMEOUT.
 *   pscom_run -n 1 t_wait 2 : -n 1 t_wait 2
 * A0 waits, B0 publishes after a pause.  Prints "wait ok".
 */
#include "tclient.h"

static pmix_status_t wait_lookup(pmix_pdata_t *pd, size_t n, int nwait, int timeout)
{
    pmix_info_t dir[2];
    size_t ndir = 0;
    if (nwait == 0) {
        bool yes = true;
        PMIX_INFO_LOAD(&dir[ndir], PMIX_WAIT, &yes, PMIX_BOOL);
    } else {
        PMIX_INFO_LOAD(&dir[ndir], PMIX_WAIT, &nwait, PMIX_INT);
    }
    ndir++;
    if (timeout > 0) {
        PMIX_INFO_LOAD(&dir[ndir], PMIX_TIMEOUT, &timeout, PMIX_INT);
        ndir++;
    }
    pmix_status_t rc = PMIx_Lookup(pd, n, dir, ndir);
    for (size_t i = 0; i < ndir; i++) PMIX_INFO_DESTRUCT(&dir[i]);
    return rc;
}

static void publish(const char *key, int value)
{
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, key, &value, PMIX_INT);
    T_STATUS(PMIx_Publish(&info, 1), PMIX_SUCCESS, "publish");
    PMIX_INFO_DESTRUCT(&info);
}

int main(int argc, char **argv)
{
    t_init(argc, argv, 40);
    T_CHECK(t_napps == 2, "run as: -n 1 t_wait 2 : -n 1 t_wait 2");
    t_exchange();
    pmix_proc_t B0 = t_proc(1, 0);
    t_fence_all();

    if (t_is(0, 0)) {
        /* 1: all keys, satisfied by B0's publish about 1 s later. */
        pmix_pdata_t pd[2];
        PMIX_PDATA_CONSTRUCT(&pd[0]);
        PMIX_PDATA_CONSTRUCT(&pd[1]);
        PMIX_LOAD_KEY(pd[0].key, "w.late");
        PMIX_LOAD_KEY(pd[1].key, "w.later");
        double t0 = t_now();
        T_STATUS(wait_lookup(pd, 2, 0, 20), PMIX_SUCCESS, "PMIX_WAIT lookup of two later keys");
        double dt = t_now() - t0;
        T_CHECK(dt > 0.5, "the wait returned after %.2f s, before the publish", dt);
        T_DIFF(pd[0].value.type == PMIX_INT && pd[0].value.data.integer == 1 &&
               pd[1].value.type == PMIX_INT && pd[1].value.data.integer == 2,
               "wrong values after the wait: %s %d, %s %d",
               PMIx_Data_type_string(pd[0].value.type), pd[0].value.data.integer,
               PMIx_Data_type_string(pd[1].value.type), pd[1].value.data.integer);
        T_DIFF(PMIX_CHECK_PROCID(&pd[0].proc, &B0) && pd[0].proc.rank == B0.rank,
                "w.late from %s:%u", pd[0].proc.nspace, pd[0].proc.rank);
        t_note("wait for a later publish returned after %.2f s", dt);
        PMIX_PDATA_DESTRUCT(&pd[0]);
        PMIX_PDATA_DESTRUCT(&pd[1]);

        /* 2: PMIX_WAIT = 1 of two keys: answered by the first publish. */
        PMIX_PDATA_CONSTRUCT(&pd[0]);
        PMIX_PDATA_CONSTRUCT(&pd[1]);
        PMIX_LOAD_KEY(pd[0].key, "w.one");
        PMIX_LOAD_KEY(pd[1].key, "w.never");
        pmix_status_t rc = wait_lookup(pd, 2, 1, 20);
        T_DIFF(rc == PMIX_ERR_PARTIAL_SUCCESS, "PMIX_WAIT=1 lookup of two keys, one published "
               "later: %s", PMIx_Error_string(rc));
        PMIX_PDATA_DESTRUCT(&pd[0]);
        PMIX_PDATA_DESTRUCT(&pd[1]);

        /* 3: a key nobody publishes: PMIX_TIMEOUT ends the wait. */
        PMIX_PDATA_CONSTRUCT(&pd[0]);
        PMIX_LOAD_KEY(pd[0].key, "w.never");
        t0 = t_now();
        rc = wait_lookup(pd, 1, 0, 1);
        dt = t_now() - t0;
        T_DIFF(rc == PMIX_ERR_TIMEOUT, "PMIX_WAIT with PMIX_TIMEOUT=1: %s after %.2f s",
               PMIx_Error_string(rc), dt);
        T_DIFF(dt >= 0.9 && dt < 5, "the 1 s timeout took %.2f s", dt);
        PMIX_PDATA_DESTRUCT(&pd[0]);
        publish("w.done", 1);
    }
    if (t_is(1, 0)) {
        usleep(1000000);
        publish("w.late", 1);
        publish("w.later", 2);
        usleep(300000);
        publish("w.one", 3);
        /* Stay until A0 is through. */
        pmix_pdata_t pd;
        PMIX_PDATA_CONSTRUCT(&pd);
        PMIX_LOAD_KEY(pd.key, "w.done");
        T_STATUS(wait_lookup(&pd, 1, 0, 30), PMIX_SUCCESS, "waiting for A0");
        PMIX_PDATA_DESTRUCT(&pd);
    }
    t_fence_all();
    printf("wait ok %u:%u\n", t_appnum, t_arank);
    t_finalize();
    return 0;
}
