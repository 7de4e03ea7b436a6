/*
 * Helpers for the PMIx client programs that test pscom_run.  They link
 * only libpmix, so the same binaries also run under other PMIx launchers
 * (Open MPI's mpirun) for comparison.
 *
 * Conventions:
 * - argv[1] is the number of applications of the launch (1 for a plain
 *   "-n N prog", 2 for "-n 2 prog : -n 2 prog").
 * - Each application's first process publishes its namespace and rank
 *   under "t.ns.<appnum>" and "t.ldr.<appnum>", so every process learns the
 *   processes of the launch (t_exchange, t_proc) whatever the launcher calls
 *   them.  pscom_run gives each app a namespace; mpirun's apps share one.
 * - Roles are named by (appnum, rank within the app): t_is(1, 0).
 * - A failed check prints "FAIL [nspace:rank] ..." on stderr and exits 1;
 *   alarm() ends a hung client with SIGALRM.
 */
#ifndef TCLIENT_H
#define TCLIENT_H

#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pmix.h>

#define T_MAX_APPS 4

static pmix_proc_t t_me;
static uint32_t t_appnum;
static pmix_rank_t t_arank;                         /* rank within our app */
static int t_napps = 1;
static char t_ns[T_MAX_APPS][PMIX_MAX_NSLEN + 1];   /* namespace of each app */
static pmix_rank_t t_ldr[T_MAX_APPS];               /* rank of each app's first process */

static void t_say(const char *level, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    fprintf(stderr, "%s [%s:%u] %s\n", level, t_me.nspace, t_me.rank, msg);
    fflush(stderr);
}

__attribute__((format(printf, 1, 2), noreturn))
static void t_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    t_say("FAIL", fmt, ap);
    va_end(ap);
    exit(1);
}

__attribute__((format(printf, 1, 2)))
static void t_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    t_say("note", fmt, ap);
    va_end(ap);
}

#define T_CHECK(cond, ...)                                                     \
    do {                                                                       \
        if (!(cond)) t_fail(__VA_ARGS__);                                      \
    } while (0)

/*
 * An expectation that holds under pscom_run but is known to differ under
 * other launchers: with T_COMPARE=1 in the environment (comparison runs
 * under mpirun) a miss is reported as "DIFF" instead of failing.
 */
#define T_DIFF(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            if (getenv("T_COMPARE")) t_note("DIFF " __VA_ARGS__);              \
            else t_fail(__VA_ARGS__);                                          \
        }                                                                      \
    } while (0)

/* Expect a PMIx status. */
#define T_STATUS(got, want, what)                                              \
    do {                                                                       \
        pmix_status_t g_ = (got), w_ = (want);                                 \
        if (g_ != w_)                                                          \
            t_fail("%s: got %s (%d), expected %s (%d)", (what),                \
                   PMIx_Error_string(g_), g_, PMIx_Error_string(w_), w_);      \
    } while (0)

static double t_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint32_t t_get_u32(const pmix_proc_t *proc, const char *key)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(proc, key, NULL, 0, &v);
    T_CHECK(rc == PMIX_SUCCESS && v, "PMIx_Get(%s): %s", key, PMIx_Error_string(rc));
    uint32_t out = 0;
    switch (v->type) {
    case PMIX_UINT32: out = v->data.uint32; break;
    case PMIX_UINT16: out = v->data.uint16; break;
    case PMIX_PROC_RANK: out = v->data.rank; break;
    case PMIX_INT: out = (uint32_t)v->data.integer; break;
    default: t_fail("PMIx_Get(%s): unexpected type %s", key, PMIx_Data_type_string(v->type));
    }
    PMIX_VALUE_RELEASE(v);
    return out;
}

/* PMIx_Init, the watchdog, argv[1] = number of apps, our appnum. */
static void t_init(int argc, char **argv, unsigned watchdog_s)
{
    alarm(watchdog_s);
    setvbuf(stdout, NULL, _IOLBF, 0);
    pmix_status_t rc = PMIx_Init(&t_me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "FAIL PMIx_Init: %s\n", PMIx_Error_string(rc));
        exit(1);
    }
    if (argc > 1) t_napps = atoi(argv[1]);
    T_CHECK(t_napps >= 1 && t_napps <= T_MAX_APPS, "bad number of apps %d", t_napps);
    t_appnum = t_get_u32(&t_me, PMIX_APPNUM);
    T_CHECK(t_appnum < (uint32_t)t_napps, "appnum %u outside 0..%d", t_appnum, t_napps - 1);
    /* Our app's first rank: 0 with one namespace per app, else the lowest
     * rank of our namespace with our appnum (mpirun's MPMD shares one). */
    pmix_proc_t wc = t_me;
    wc.rank = PMIX_RANK_WILDCARD;
    uint32_t size = t_get_u32(&wc, PMIX_JOB_SIZE);
    t_arank = 0;
    for (pmix_rank_t r = 0; r < size && r <= t_me.rank; r++) {
        pmix_proc_t p = t_me;
        p.rank = r;
        if (t_get_u32(&p, PMIX_APPNUM) == t_appnum) {
            t_arank = t_me.rank - r;
            break;
        }
    }
}

/* Learn every app's namespace and first rank (see the conventions above). */
static void t_exchange(void)
{
    char key[PMIX_MAX_KEYLEN + 1];
    if (t_arank == 0) {
        pmix_info_t info[2];
        uint32_t ldr = t_me.rank;   /* not PMIX_PROC_RANK: ORTE's data server refuses it */
        snprintf(key, sizeof(key), "t.ns.%u", t_appnum);
        PMIX_INFO_LOAD(&info[0], key, t_me.nspace, PMIX_STRING);
        snprintf(key, sizeof(key), "t.ldr.%u", t_appnum);
        PMIX_INFO_LOAD(&info[1], key, &ldr, PMIX_UINT32);
        pmix_status_t rc = PMIx_Publish(info, 2);
        T_CHECK(rc == PMIX_SUCCESS, "publishing %s: %s", key, PMIx_Error_string(rc));
        PMIX_INFO_DESTRUCT(&info[0]);
        PMIX_INFO_DESTRUCT(&info[1]);
    }
    /* One key per lookup: Open MPI 4.1's mpirun fills in only one key of
     * a multi-key lookup. */
    for (int a = 0; a < t_napps; a++) {
        for (int k = 0; k < 2; k++) {
            pmix_pdata_t pd;
            PMIX_PDATA_CONSTRUCT(&pd);
            snprintf(pd.key, sizeof(pd.key), k ? "t.ldr.%d" : "t.ns.%d", a);
            pmix_info_t dir[2];
            bool yes = true;
            int timeout = 20;
            PMIX_INFO_LOAD(&dir[0], PMIX_WAIT, &yes, PMIX_BOOL);
            PMIX_INFO_LOAD(&dir[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
            pmix_status_t rc = PMIx_Lookup(&pd, 1, dir, 2);
            PMIX_INFO_DESTRUCT(&dir[0]);
            PMIX_INFO_DESTRUCT(&dir[1]);
            T_CHECK(rc == PMIX_SUCCESS, "looking up %s: %s", pd.key, PMIx_Error_string(rc));
            if (k == 0) {
                T_CHECK(pd.value.type == PMIX_STRING, "%s has type %s", pd.key,
                        PMIx_Data_type_string(pd.value.type));
                snprintf(t_ns[a], sizeof(t_ns[a]), "%s", pd.value.data.string);
            } else {
                T_CHECK(pd.value.type == PMIX_UINT32, "%s has type %s", pd.key,
                        PMIx_Data_type_string(pd.value.type));
                t_ldr[a] = pd.value.data.uint32;
            }
            PMIX_PDATA_DESTRUCT(&pd);
        }
    }
}

/* The process that is rank `arank` of app `app` (after t_exchange). */
static pmix_proc_t t_proc(int app, pmix_rank_t arank)
{
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, t_ns[app], t_ldr[app] + arank);
    return p;
}

/* A fence over every process of the launch (after t_exchange). */
static void t_fence_all(void)
{
    pmix_proc_t procs[T_MAX_APPS];
    size_t n = 0;
    for (int a = 0; a < t_napps; a++) {
        bool dup = false;
        for (size_t i = 0; i < n; i++) dup |= PMIX_CHECK_NSPACE(procs[i].nspace, t_ns[a]);
        if (dup) continue;
        /* PMIX_LOAD_PROCID evaluates its arguments more than once. */
        PMIX_LOAD_PROCID(&procs[n], t_ns[a], PMIX_RANK_WILDCARD);
        n++;
    }
    pmix_status_t rc = PMIx_Fence(procs, n, NULL, 0);
    T_CHECK(rc == PMIX_SUCCESS, "fence over all apps: %s", PMIx_Error_string(rc));
}

/* True when this process is rank `arank` of app `app`. */
static bool t_is(uint32_t app, pmix_rank_t arank)
{
    return t_appnum == app && t_arank == arank;
}

static void t_finalize(void)
{
    pmix_status_t rc = PMIx_Finalize(NULL, 0);
    T_CHECK(rc == PMIX_SUCCESS, "PMIx_Finalize: %s", PMIx_Error_string(rc));
}

#endif /* TCLIENT_H */
