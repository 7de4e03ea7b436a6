/*
 * pscom_run: the PMIx host side.
 *
 * The OpenPMIx server library calls the functions of `host_module` from
 * its progress thread.  Each one takes job->lock only to read or change
 * the job, the datastore or the event cache, and calls back into the
 * library (cbfunc, PMIx_Notify_event) only after releasing it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pmix.h>
#include <pmix_server.h>

#include "cli.h"
#include "launcher.h"
#include "server.h"

/* The job the host callbacks serve: the library gives them no context pointer. */
static psr_job_t *g_job;

static void replay_events(psr_job_t *job, const pmix_proc_t *proc);
static void report_uninit_exits(psr_job_t *job, psr_app_t *app);
static int register_tick(psr_job_t *job);

/* ---------------------------------------------------------------------- */
/* Waiting for the library's completion callbacks                          */

typedef struct op_wait {
    pthread_mutex_t m;
    pthread_cond_t c;
    bool done;
    pmix_status_t status;
} op_wait_t;

static void op_wait_init(op_wait_t *w)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* op_wait_bounded */
    pthread_mutex_init(&w->m, NULL);
    pthread_cond_init(&w->c, &ca);
    pthread_condattr_destroy(&ca);
    w->done = false;
    w->status = PMIX_SUCCESS;
}

static void op_wait_done(pmix_status_t status, void *cbdata)
{
    op_wait_t *w = cbdata;
    pthread_mutex_lock(&w->m);
    w->status = status;
    w->done = true;
    pthread_cond_signal(&w->c);
    pthread_mutex_unlock(&w->m);
}

static pmix_status_t op_wait_for(op_wait_t *w)
{
    pthread_mutex_lock(&w->m);
    while (!w->done) pthread_cond_wait(&w->c, &w->m);
    pmix_status_t st = w->status;
    pthread_mutex_unlock(&w->m);
    pthread_mutex_destroy(&w->m);
    pthread_cond_destroy(&w->c);
    return st;
}

/* The next signal of `ending` that the signalfd sfd holds, or 0; the
 * others it holds are dropped, and so are copies of the request already
 * forwarded to the job (as the main loop does). */
static int ending_signal(psr_job_t *job, int sfd, const sigset_t *ending)
{
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
        if (!sigismember(ending, (int)si.ssi_signo)) continue;
        pthread_mutex_lock(&job->lock);
        bool copy = psr_signal_is_copy_locked(job);
        pthread_mutex_unlock(&job->lock);
        if (!copy) return (int)si.ssi_signo;
    }
    return 0;
}

/* As op_wait_for, for at most seconds, and only until a signal of `ending`
 * arrives on the signalfd sfd: 0 when the callback came (its status in
 * *st), -1 when the time ran out, else the signal. Unless 0, w stays the
 * library's (the caller leaves it allocated). */
static int op_wait_bounded(psr_job_t *job, op_wait_t *w, int seconds, int sfd,
                           const sigset_t *ending, pmix_status_t *st)
{
    /* Slices of 100 ms: the signalfd is looked at between them. */
    for (int slice = 0; slice < seconds * 10; slice++) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += 100000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&w->m);
        if (!w->done) pthread_cond_timedwait(&w->c, &w->m, &t);
        bool done = w->done;
        pthread_mutex_unlock(&w->m);
        if (done) {
            *st = op_wait_for(w); /* returns at once, and releases w */
            return 0;
        }
        int sig = ending_signal(job, sfd, ending);
        if (sig) return sig;
    }
    return -1;
}

static void op_ignore(pmix_status_t status, void *cbdata)
{
    (void)status;
    (void)cbdata;
}

/* ---------------------------------------------------------------------- */
/* Values kept by the datastore and the event cache                        */

/* A deep copy of v into *copy_p: PMIX_SUCCESS, or why not (the library's
 * error: a type it cannot copy, out of memory). */
static pmix_status_t value_dup(const pmix_value_t *v, pmix_value_t **copy_p)
{
    pmix_value_t *copy = calloc(1, sizeof(*copy));
    if (!copy) return PMIX_ERR_NOMEM;
    pmix_status_t st = PMIx_Value_xfer(copy, v);
    if (st != PMIX_SUCCESS) {
        /* It may have failed half way, with parts allocated. */
        PMIx_Value_destruct(copy);
        free(copy);
        return st;
    }
    *copy_p = copy;
    return PMIX_SUCCESS;
}

/* The datastore's copy: of a value it accepted, so only memory can fail. */
static void *value_copy(const void *v)
{
    pmix_value_t *copy;
    return value_dup(v, &copy) == PMIX_SUCCESS ? copy : NULL;
}

static void value_release(void *v)
{
    PMIx_Value_destruct(v);
    free(v);
}

/* An event's info array as kept in the event cache. */
typedef struct ev_payload {
    pmix_info_t *info;
    size_t ninfo;
} ev_payload_t;

static void payload_release(void *p)
{
    ev_payload_t *pl = p;
    if (pl->info) PMIX_INFO_FREE(pl->info, pl->ninfo);
    free(pl);
}

/* ---------------------------------------------------------------------- */
/* Reading directives out of info arrays                                   */

static bool info_is(const pmix_info_t *info, const char *key)
{
    return PMIX_CHECK_KEY(info, key);
}

/* An integer of any PMIx integer type, or -1 when it is not one. */
static long long info_int(const pmix_value_t *v)
{
    switch (v->type) {
    case PMIX_BOOL: return v->data.flag ? 1 : 0;
    case PMIX_INT: return v->data.integer;
    case PMIX_INT8: return v->data.int8;
    case PMIX_INT16: return v->data.int16;
    case PMIX_INT32: return v->data.int32;
    case PMIX_INT64: return v->data.int64;
    case PMIX_UINT: return v->data.uint;
    case PMIX_UINT8: return v->data.uint8;
    case PMIX_UINT16: return v->data.uint16;
    case PMIX_UINT32: return v->data.uint32;
    case PMIX_UINT64: return (long long)v->data.uint64;
    case PMIX_SIZE: return (long long)v->data.size;
    case PMIX_PID: return v->data.pid;
    default: return -1;
    }
}

/* Members of a custom range: one pmix_proc_t or an array of them. */
static int custom_procs(const pmix_value_t *v, const pmix_proc_t **procs, size_t *n)
{
    if (v->type == PMIX_PROC && v->data.proc) {
        *procs = v->data.proc;
        *n = 1;
        return 0;
    }
    if (v->type == PMIX_DATA_ARRAY && v->data.darray && v->data.darray->type == PMIX_PROC) {
        *procs = v->data.darray->array;
        *n = v->data.darray->size;
        return 0;
    }
    return -1;
}

/* A list of uids or gids: one integer or an array of integers.  Caller frees *ids. */
static int id_list(const pmix_value_t *v, uint32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    if (v->type != PMIX_DATA_ARRAY) {
        long long x = info_int(v);
        if (x < 0) return -1;
        *ids = malloc(sizeof(uint32_t));
        if (!*ids) return -1;
        (*ids)[0] = (uint32_t)x;
        *n = 1;
        return 0;
    }
    const pmix_data_array_t *d = v->data.darray;
    if (!d) return -1;
    *ids = calloc(d->size ? d->size : 1, sizeof(uint32_t));
    if (!*ids) return -1;
    for (size_t i = 0; i < d->size; i++) {
        pmix_value_t one = { .type = d->type };
        switch (d->type) {
        case PMIX_UINT32: one.data.uint32 = ((uint32_t *)d->array)[i]; break;
        case PMIX_INT32: one.data.int32 = ((int32_t *)d->array)[i]; break;
        case PMIX_INT: one.data.integer = ((int *)d->array)[i]; break;
        case PMIX_UINT: one.data.uint = ((unsigned *)d->array)[i]; break;
        case PMIX_UINT64: one.data.uint64 = ((uint64_t *)d->array)[i]; break;
        case PMIX_INT64: one.data.int64 = ((int64_t *)d->array)[i]; break;
        default:
            free(*ids);
            *ids = NULL;
            return -1;
        }
        long long x = info_int(&one);
        if (x < 0) {
            free(*ids);
            *ids = NULL;
            return -1;
        }
        (*ids)[i] = (uint32_t)x;
    }
    *n = d->size;
    return 0;
}

/* Directives of a publish, lookup or unpublish. */
typedef struct ds_directives {
    bool range_given;
    psr_ds_scope_t scope;
    pmix_persistence_t persist;
    psr_ds_access_t access;
    uint32_t *uids;             /* owned */
    uint32_t *gids;             /* owned */
    long long uid;              /* PMIX_USERID from the library, -1: absent */
    long long gid;              /* PMIX_GRPID, -1: absent */
    size_t nwait;               /* 0: no wait */
    double timeout;             /* 0: none */
} ds_directives_t;

static void directives_free(ds_directives_t *d)
{
    free(d->uids);
    free(d->gids);
}

static pmix_status_t parse_access(const pmix_info_t *info, ds_directives_t *d)
{
    if (info_is(info, PMIX_ACCESS_USERIDS)) {
        free(d->uids);
        if (id_list(&info->value, &d->uids, &d->access.nuids)) return PMIX_ERR_BAD_PARAM;
        d->access.uids = d->uids;
        d->access.uids_given = true;
    } else if (info_is(info, PMIX_ACCESS_GRPIDS)) {
        free(d->gids);
        if (id_list(&info->value, &d->gids, &d->access.ngids)) return PMIX_ERR_BAD_PARAM;
        d->access.gids = d->gids;
        d->access.gids_given = true;
    }
    return PMIX_SUCCESS;
}

/*
 * Read the directives from info; *is_data[i] says which entries are data
 * to publish (keys outside the reserved "pmix." prefix).
 */
static pmix_status_t parse_directives(const pmix_info_t info[], size_t ninfo,
                                      ds_directives_t *d, bool *is_data)
{
    memset(d, 0, sizeof(*d));
    d->scope.range = PMIX_RANGE_UNDEF;
    d->persist = PMIX_PERSIST_SESSION;
    d->uid = d->gid = -1;
    for (size_t i = 0; i < ninfo; i++) {
        const pmix_info_t *in = &info[i];
        if (is_data) is_data[i] = false;
        if (info_is(in, PMIX_RANGE)) {
            if (in->value.type != PMIX_DATA_RANGE) return PMIX_ERR_BAD_PARAM;
            d->scope.range = in->value.data.range;
            d->range_given = true;
        } else if (info_is(in, PMIX_PERSISTENCE)) {
            if (in->value.type != PMIX_PERSIST) return PMIX_ERR_BAD_PARAM;
            d->persist = in->value.data.persist;
        } else if (info_is(in, PMIX_EVENT_CUSTOM_RANGE)) {
            if (custom_procs(&in->value, &d->scope.custom, &d->scope.ncustom))
                return PMIX_ERR_BAD_PARAM;
        } else if (info_is(in, PMIX_ACCESS_PERMISSIONS)) {
            const pmix_data_array_t *arr = in->value.data.darray;
            if (in->value.type != PMIX_DATA_ARRAY || !arr || arr->type != PMIX_INFO)
                return PMIX_ERR_BAD_PARAM;
            for (size_t k = 0; k < arr->size; k++) {
                pmix_status_t st = parse_access(&((pmix_info_t *)arr->array)[k], d);
                if (st != PMIX_SUCCESS) return st;
            }
        } else if (info_is(in, PMIX_ACCESS_USERIDS) || info_is(in, PMIX_ACCESS_GRPIDS)) {
            pmix_status_t st = parse_access(in, d);
            if (st != PMIX_SUCCESS) return st;
        } else if (info_is(in, PMIX_USERID)) {
            d->uid = info_int(&in->value);
        } else if (info_is(in, PMIX_GRPID)) {
            d->gid = info_int(&in->value);
        } else if (info_is(in, PMIX_WAIT)) {
            long long n = info_int(&in->value);
            if (in->value.type == PMIX_BOOL) d->nwait = n ? PSR_DS_WAIT_ALL : 0;
            else d->nwait = n == 0 ? PSR_DS_WAIT_ALL : n < 0 ? 0 : (size_t)n;
        } else if (info_is(in, PMIX_TIMEOUT)) {
            long long n = info_int(&in->value);
            d->timeout = n > 0 ? (double)n : 0;
        } else if (strncmp(in->key, "pmix.", 5) == 0) {
            /* Another directive (PMIX_OPTIONAL, ...): nothing to do. */
        } else if (is_data) {
            is_data[i] = true;
        }
    }
    return PMIX_SUCCESS;
}

/* The requester's identity for the datastore: uid/gid from the library, else ours. */
static void ds_client(psr_job_t *job, const pmix_proc_t *proc, const ds_directives_t *d,
                      psr_ds_client_t *who)
{
    who->proc = *proc;
    who->uid = d->uid >= 0 ? (uint32_t)d->uid : (uint32_t)job->uid;
    who->gid = d->gid >= 0 ? (uint32_t)d->gid : (uint32_t)job->gid;
}

static const char *range_name(pmix_data_range_t r)
{
    return PMIx_Data_range_string(r);
}

/* ---------------------------------------------------------------------- */
/* Lookup answers                                                          */

typedef struct lookup_req {
    pmix_lookup_cbfunc_t cbfunc;
    void *cbdata;
    pmix_proc_t requester;
} lookup_req_t;

/* Deliver completed lookups to the library; call without job->lock. */
static void deliver_results(psr_job_t *job, psr_ds_result_t *list)
{
    for (psr_ds_result_t *res = list; res; res = res->next) {
        lookup_req_t *req = res->cookie;
        pmix_pdata_t *pdata = NULL;
        if (res->nhits) PMIX_PDATA_CREATE(pdata, res->nhits);
        for (size_t i = 0; pdata && i < res->nhits; i++) {
            PMIX_LOAD_KEY(pdata[i].key, res->hits[i].key);
            pdata[i].proc = res->hits[i].publisher;
            PMIx_Value_xfer(&pdata[i].value, res->hits[i].value);
        }
        psr_log(job, 2, "lookup by %s:%u answered: %s, %zu key(s)", req->requester.nspace,
                req->requester.rank, PMIx_Error_string(res->status), res->nhits);
        req->cbfunc(res->status, pdata, pdata ? res->nhits : 0, req->cbdata);
        if (pdata) PMIX_PDATA_FREE(pdata, res->nhits);
        free(req);
    }
    /* Without the store, which the end of the job may have destroyed meanwhile. */
    psr_ds_result_free(list);
}

/* Free answers that will not be delivered, with their requests. */
static void drop_results(psr_ds_result_t *list)
{
    for (psr_ds_result_t *res = list; res; res = res->next) free(res->cookie);
    psr_ds_result_free(list);
}

/*
 * The datastore goes when the last process of the job has ended
 * (psr_server_stop), but the library may still hand us requests: a child
 * of a process can keep its connection open, and requests read before the
 * end may still be queued.  They get this answer; the upcalls check under
 * job->lock, in the same section that uses the store.
 */
#define DS_GONE PMIX_ERR_NOT_AVAILABLE

/* ---------------------------------------------------------------------- */
/* Host callbacks                                                          */

static pmix_status_t host_client_connected(const pmix_proc_t *proc, void *server_object,
                                           pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    (void)cbfunc;
    (void)cbdata;
    psr_job_t *job = g_job;
    psr_proc_t *p = server_object;
    pthread_mutex_lock(&job->lock);
    bool stand_in = p && p->exited;
    bool first = false;     /* the first of its namespace */
    if (p && !stand_in) {
        p->connected = true;
        first = job->apps[p->app].nconnected++ == 0;
    }
    pthread_mutex_unlock(&job->lock);
    psr_log(job, 2, "%s:%u connected%s", proc->nspace, proc->rank,
            stand_in ? " (a stand-in for the dead process)" : "");
    /* Before the replay: this process gets those events at once. */
    if (first) report_uninit_exits(job, &job->apps[p->app]);
    if (!stand_in) replay_events(job, proc);
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_status_t host_client_finalized(const pmix_proc_t *proc, void *server_object,
                                           pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    psr_job_t *job = g_job;
    psr_proc_t *p = server_object;
    pthread_mutex_lock(&job->lock);
    if (p) p->finalized = true;
    pthread_mutex_unlock(&job->lock);
    psr_log(job, 2, "%s:%u finalized", proc->nspace, proc->rank);
    (void)cbfunc;
    (void)cbdata;
    return PMIX_OPERATION_SUCCEEDED;
}

/*
 * pscom_run's exit status for PMIx_Abort(status): the low 8 bits, which is
 * what exit() would keep, but never 0 (256 would report success) and 1 for
 * a negative status (-1 would give 255, pscom_run's own failure).
 */
static int abort_exit_status(int status)
{
    if (status < 0 || (status & 0xff) == 0) return 1;
    return status & 0xff;
}

static pmix_status_t host_abort(const pmix_proc_t *proc, void *server_object, int status,
                                const char msg[], pmix_proc_t procs[], size_t nprocs,
                                pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    psr_job_t *job = g_job;
    psr_proc_t *p = server_object;
    (void)procs;
    (void)nprocs;
    /* Whatever the caller names, PMIx_Abort ends the whole job here: a
     * launch is one job, and partial aborts would leave peers waiting. */
    int exit_status = abort_exit_status(status);
    char mapped[40] = "";
    if (exit_status != status)
        snprintf(mapped, sizeof(mapped), " (exit status %d)", exit_status);
    psr_log(job, 0, "%s rank %u called PMIx_Abort with status %d%s: %s", proc->nspace,
            proc->rank, status, mapped, msg && *msg ? msg : "(no message)");
    pthread_mutex_lock(&job->lock);
    if (p) p->aborted = true;
    psr_job_end_locked(job, exit_status, 0);
    pthread_mutex_unlock(&job->lock);
    /* PMIx_Abort does not return while the host can end the caller, so
     * cbfunc is never called: the caller waits until the job's end kills
     * it.  The library's small request record is left behind; the
     * launcher exits right after. */
    (void)cbfunc;
    (void)cbdata;
    return PMIX_SUCCESS;
}

static void fence_release(void *cbdata)
{
    free(cbdata);
}

static pmix_status_t host_fence_nb(const pmix_proc_t procs[], size_t nprocs,
                                   const pmix_info_t info[], size_t ninfo,
                                   char *data, size_t ndata,
                                   pmix_modex_cbfunc_t cbfunc, void *cbdata)
{
    (void)procs;
    (void)info;
    (void)ninfo;
    /* Every participant is local: what the library collected here is
     * already the whole job's contribution. */
    char *copy = NULL;
    if (ndata) {
        copy = malloc(ndata);
        if (!copy) return PMIX_ERR_NOMEM;
        memcpy(copy, data, ndata);
    }
    psr_log(g_job, 2, "fence of %zu process entries, %zu bytes", nprocs, ndata);
    cbfunc(PMIX_SUCCESS, copy, ndata, cbdata, fence_release, copy);
    return PMIX_SUCCESS;
}

typedef struct dmodex_req {
    pmix_modex_cbfunc_t cbfunc;
    void *cbdata;
} dmodex_req_t;

static void dmodex_answer(pmix_status_t status, char *data, size_t sz, void *cbdata)
{
    dmodex_req_t *req = cbdata;
    char *copy = NULL;
    if (status == PMIX_SUCCESS && sz) {
        copy = malloc(sz);
        if (!copy) status = PMIX_ERR_NOMEM;
        else memcpy(copy, data, sz);
    }
    req->cbfunc(status, copy, copy ? sz : 0, req->cbdata, copy ? fence_release : NULL, copy);
    free(req);
}

static pmix_status_t host_direct_modex(const pmix_proc_t *proc, const pmix_info_t info[],
                                       size_t ninfo, pmix_modex_cbfunc_t cbfunc, void *cbdata)
{
    (void)info;
    (void)ninfo;
    psr_job_t *job = g_job;
    /* The library asks its host for data of processes it does not serve.
     * Every process of this launcher is local, so anything else is
     * unknown; a request about one of ours goes back to the library,
     * which answers once that process has committed its data. */
    if (!psr_job_find(job, proc)) {
        psr_log(job, 2, "direct modex for unknown %s:%u: not found", proc->nspace, proc->rank);
        return PMIX_ERR_NOT_FOUND;
    }
    dmodex_req_t *req = malloc(sizeof(*req));
    if (!req) return PMIX_ERR_NOMEM;
    req->cbfunc = cbfunc;
    req->cbdata = cbdata;
    pmix_status_t st = PMIx_server_dmodex_request(proc, dmodex_answer, req);
    if (st != PMIX_SUCCESS) free(req);
    return st;
}

static pmix_status_t host_publish(const pmix_proc_t *proc, const pmix_info_t info[],
                                  size_t ninfo, pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    psr_job_t *job = g_job;
    ds_directives_t d;
    bool *is_data = calloc(ninfo ? ninfo : 1, sizeof(bool));
    psr_ds_kv_t *kvs = calloc(ninfo ? ninfo : 1, sizeof(*kvs));
    pmix_status_t st = PMIX_ERR_NOMEM;
    size_t nkvs = 0;
    psr_ds_result_t *done = NULL;

    if (!is_data || !kvs) goto out;
    st = parse_directives(info, ninfo, &d, is_data);
    if (st != PMIX_SUCCESS) goto out_dir;
    for (size_t i = 0; i < ninfo; i++) {
        if (!is_data[i]) continue;
        pmix_value_t *copy;
        st = value_dup(&info[i].value, &copy);
        if (st != PMIX_SUCCESS) {
            psr_log(job, 1, "publish by %s:%u: cannot copy the value of %s (type %s): %s",
                    proc->nspace, proc->rank, info[i].key,
                    PMIx_Data_type_string(info[i].value.type), PMIx_Error_string(st));
            goto out_kvs;
        }
        kvs[nkvs].key = info[i].key;
        kvs[nkvs++].value = copy;
    }
    psr_ds_client_t who;
    ds_client(job, proc, &d, &who);
    double now = psr_now();
    pthread_mutex_lock(&job->lock);
    if (job->ds)
        st = psr_ds_publish(job->ds, &who, &d.scope, d.persist, &d.access, kvs, nkvs, now,
                            &done);
    else
        st = DS_GONE;
    pthread_mutex_unlock(&job->lock);
    psr_log(job, 2, "publish by %s:%u of %zu key(s)%s%s, range %s, persistence %s: %s%s",
            proc->nspace, proc->rank, nkvs, nkvs ? " starting with " : "",
            nkvs ? kvs[0].key : "", range_name(d.scope.range),
            PMIx_Persistence_string(d.persist), PMIx_Error_string(st),
            st == DS_GONE ? " (the job has ended)" : "");
    if (st == PMIX_SUCCESS) nkvs = 0;   /* the store owns the values now */
out_kvs:
    for (size_t i = 0; i < nkvs; i++) value_release(kvs[i].value);
out_dir:
    directives_free(&d);
out:
    free(is_data);
    free(kvs);
    if (done) {
        deliver_results(job, done);
        psr_job_wake(job);
    }
    cbfunc(st, cbdata);
    return PMIX_SUCCESS;
}

static pmix_status_t host_lookup(const pmix_proc_t *proc, char **keys,
                                 const pmix_info_t info[], size_t ninfo,
                                 pmix_lookup_cbfunc_t cbfunc, void *cbdata)
{
    psr_job_t *job = g_job;
    ds_directives_t d;
    pmix_status_t st = parse_directives(info, ninfo, &d, NULL);
    if (st != PMIX_SUCCESS) {
        directives_free(&d);
        return st;
    }
    size_t nkeys = 0;
    while (keys && keys[nkeys]) nkeys++;

    lookup_req_t *req = malloc(sizeof(*req));
    if (!req) {
        directives_free(&d);
        return PMIX_ERR_NOMEM;
    }
    req->cbfunc = cbfunc;
    req->cbdata = cbdata;
    req->requester = *proc;

    psr_ds_client_t who;
    ds_client(job, proc, &d, &who);
    psr_ds_result_t *res = NULL;
    double deadline = d.nwait && d.timeout > 0 ? psr_now() + d.timeout : 0;
    pthread_mutex_lock(&job->lock);
    if (job->ds)
        st = psr_ds_lookup(job->ds, &who, &d.scope, (const char *const *)keys, nkeys,
                           d.nwait, deadline, req, &res);
    else
        st = DS_GONE;
    pthread_mutex_unlock(&job->lock);
    psr_log(job, 2, "lookup by %s:%u of %zu key(s)%s%s, range %s%s%s%s%s", proc->nspace,
            proc->rank, nkeys, nkeys ? " starting with " : "", nkeys ? keys[0] : "",
            range_name(d.scope.range),
            st == PMIX_OPERATION_IN_PROGRESS ? ": waiting for a publish" : "",
            st == DS_GONE ? ": " : "", st == DS_GONE ? PMIx_Error_string(st) : "",
            st == DS_GONE ? " (the job has ended)" : "");
    directives_free(&d);

    if (st == PMIX_OPERATION_IN_PROGRESS) {
        psr_job_wake(job);  /* the main loop's timeout may have to shrink */
        return PMIX_SUCCESS;
    }
    if (st == DS_GONE) {
        free(req);
        cbfunc(st, NULL, 0, cbdata);
        return PMIX_SUCCESS;
    }
    if (st != PMIX_SUCCESS) {
        free(req);
        return st;
    }
    deliver_results(job, res);
    return PMIX_SUCCESS;
}

static pmix_status_t host_unpublish(const pmix_proc_t *proc, char **keys,
                                    const pmix_info_t info[], size_t ninfo,
                                    pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    psr_job_t *job = g_job;
    ds_directives_t d;
    pmix_status_t st = parse_directives(info, ninfo, &d, NULL);
    if (st == PMIX_SUCCESS) {
        size_t nkeys = 0;
        while (keys && keys[nkeys]) nkeys++;
        psr_ds_client_t who;
        ds_client(job, proc, &d, &who);
        pthread_mutex_lock(&job->lock);
        if (job->ds)
            st = psr_ds_unpublish(job->ds, &who,
                                  d.range_given ? d.scope.range : PMIX_RANGE_UNDEF,
                                  nkeys ? (const char *const *)keys : NULL, nkeys);
        else
            st = DS_GONE;
        pthread_mutex_unlock(&job->lock);
        psr_log(job, 2, "unpublish by %s:%u of %zu key(s): %s%s", proc->nspace, proc->rank,
                nkeys, PMIx_Error_string(st), st == DS_GONE ? " (the job has ended)" : "");
    }
    directives_free(&d);
    cbfunc(st, cbdata);
    return PMIX_SUCCESS;
}

static pmix_status_t host_register_events(pmix_status_t *codes, size_t ncodes,
                                          const pmix_info_t info[], size_t ninfo,
                                          pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    (void)info;
    (void)ninfo;
    (void)cbfunc;
    (void)cbdata;
    psr_log(g_job, 2, "a client registered for %zu environment event code(s)%s%s", ncodes,
            ncodes ? ", first " : "", ncodes ? PMIx_Error_string(codes[0]) : "");
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_status_t host_deregister_events(pmix_status_t *codes, size_t ncodes,
                                            pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    (void)codes;
    (void)ncodes;
    (void)cbfunc;
    (void)cbdata;
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_status_t host_notify_event(pmix_status_t code, const pmix_proc_t *source,
                                       pmix_data_range_t range, pmix_info_t info[],
                                       size_t ninfo, pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    (void)info;
    (void)ninfo;
    (void)cbfunc;
    (void)cbdata;
    /* A client's event for more than its own node.  The library has
     * already delivered it to the local clients that registered for it and
     * keeps a copy for those that register later; this node is the whole
     * job, so there is nobody else to forward it to. */
    psr_log(g_job, 1, "event %s from %s:%u (range %s) delivered by the PMIx library",
            PMIx_Error_string(code), source ? source->nspace : "?", source ? source->rank : 0,
            range_name(range));
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_server_module_t host_module = {
    .client_connected = host_client_connected,
    .client_finalized = host_client_finalized,
    .abort = host_abort,
    .fence_nb = host_fence_nb,
    .direct_modex = host_direct_modex,
    .publish = host_publish,
    .lookup = host_lookup,
    .unpublish = host_unpublish,
    .register_events = host_register_events,
    .deregister_events = host_deregister_events,
    .notify_event = host_notify_event,
};

/* ---------------------------------------------------------------------- */
/* Registration                                                            */

static int list_add(void *list, const char *key, const void *val, pmix_data_type_t type)
{
    return PMIx_Info_list_add(list, key, val, type) == PMIX_SUCCESS ? 0 : -1;
}

/* Add key = the info list sub converted to an array of pmix_info_t; releases sub. */
static int list_add_array(void *list, const char *key, void *sub)
{
    pmix_data_array_t arr = { .type = PMIX_INFO };
    int rc = PMIx_Info_list_convert(sub, &arr) == PMIX_SUCCESS ? 0 : -1;
    PMIx_Info_list_release(sub);
    if (rc == 0) rc = list_add(list, key, &arr, PMIX_DATA_ARRAY);
    PMIX_DATA_ARRAY_DESTRUCT(&arr);
    return rc;
}

/* "first,first+1,...,first+n-1" into buf. */
static void rank_list(char *buf, size_t len, int n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int r = 0; r < n && off < len; r++)
        off += snprintf(buf + off, len - off, r ? ",%d" : "%d", r);
}

/* Where a process bound by --bind-to runs, for PMIx_Get_relative_locality
 * and the like: PMIX_CPUSET, its CPU list in the form the library parses
 * ("hwloc:0-3", as PMIx_server_generate_cpuset_string writes it), and
 * PMIX_LOCALITY_STRING, made by the library from its topology of this
 * node ("SK0:L30:L20:L10:CR0:HT0:NM0"). An unbound process gets neither,
 * as under mpirun: it may run anywhere pscom_run may, and a locality
 * string of that whole set would make every pair of such processes share
 * a core. No locality string when the library cannot make one. */
static int add_locality(psr_job_t *job, const psr_proc_t *p, void *sub)
{
    if (p->bind < 0) return 0;
    const psr_cpuset_t *set = &job->binds[p->bind];
    size_t len = 6 + PSR_CPULIST_MAX(set->ncpus);
    char *list = malloc(len);
    if (!list) return -1;
    strcpy(list, "hwloc:");
    psr_cpulist_format(set, list + 6, len - 6); /* it fits */
    int rc = list_add(sub, PMIX_CPUSET, list, PMIX_STRING);
    /* A writable string: the 4.2 library writes into what it parses. */
    pmix_cpuset_t cs = { 0 };
    bool parsed = PMIx_Parse_cpuset_string(list, &cs) == PMIX_SUCCESS;
    free(list);
    if (!parsed) {
        char head[200];
        psr_cpulist_head(set, head, sizeof(head));
        psr_log(job, 1, "PMIx cannot read the CPU set hwloc:%s of %s rank %u", head,
                p->id.nspace, p->id.rank);
        return rc;
    }
    char *loc = NULL;
    if (PMIx_server_generate_locality_string(&cs, &loc) == PMIX_SUCCESS && loc)
        rc |= list_add(sub, PMIX_LOCALITY_STRING, loc, PMIX_STRING);
    free(loc);
    PMIx_Cpuset_destruct(&cs);
    return rc;
}

/* The job, node, app and process information of one namespace. */
static int build_nspace_info(psr_job_t *job, psr_app_t *app, pmix_info_t **info, size_t *ninfo)
{
    void *list = PMIx_Info_list_start();
    if (!list) return -1;
    int rc = 0;
    uint32_t u32;
    pmix_rank_t rank;
    char *regex = NULL, *ppn = NULL;
    size_t peers_len = (size_t)app->np * 8 + 16;
    char *peers = malloc(peers_len);
    char cwd[4096];

    if (!peers) goto fail;
    rank_list(peers, peers_len, app->np);
    /* The ranks listed one by one, not as "0-N": the 4.2 library derives
     * PMIX_LOCAL_PEERS and PMIX_LOCAL_SIZE from this field verbatim. */
    if (PMIx_generate_regex(job->hostname, &regex) != PMIX_SUCCESS ||
        PMIx_generate_ppn(peers, &ppn) != PMIX_SUCCESS) {
        psr_log(job, 0, "PMIx could not encode the node and process maps of %s", app->nspace);
        goto fail;
    }
    if (!getcwd(cwd, sizeof(cwd))) strcpy(cwd, "/");

    /* Job level. */
    u32 = 1;
    rc |= list_add(list, PMIX_SESSION_ID, &u32, PMIX_UINT32);
    rc |= list_add(list, PMIX_JOBID, app->nspace, PMIX_STRING);
    u32 = (uint32_t)job->nprocs;
    rc |= list_add(list, PMIX_UNIV_SIZE, &u32, PMIX_UINT32);
    rc |= list_add(list, PMIX_MAX_PROCS, &u32, PMIX_UINT32);
    u32 = (uint32_t)app->np;
    rc |= list_add(list, PMIX_JOB_SIZE, &u32, PMIX_UINT32);
    u32 = 1;
    rc |= list_add(list, PMIX_JOB_NUM_APPS, &u32, PMIX_UINT32);
    rc |= list_add(list, PMIX_NUM_NODES, &u32, PMIX_UINT32);
    rank = (pmix_rank_t)app->first;
    rc |= list_add(list, PMIX_NPROC_OFFSET, &rank, PMIX_PROC_RANK);
    rc |= list_add(list, PMIX_NODE_MAP, regex, PMIX_STRING);
    rc |= list_add(list, PMIX_PROC_MAP, ppn, PMIX_STRING);
    rc |= list_add(list, PMIX_NODE_LIST, job->hostname, PMIX_STRING);
    bool no = false;
    rc |= list_add(list, PMIX_SPAWNED, &no, PMIX_BOOL);
    rc |= list_add(list, PMIX_TMPDIR, job->tmpdir, PMIX_STRING);
    /* This node's view also at job level, where clients of every PMIx
     * version look for it (PMIx_Get with PMIX_RANK_WILDCARD). */
    rc |= list_add(list, PMIX_LOCAL_PEERS, peers, PMIX_STRING);
    u32 = (uint32_t)app->np;
    rc |= list_add(list, PMIX_LOCAL_SIZE, &u32, PMIX_UINT32);
    rank = 0;
    rc |= list_add(list, PMIX_LOCALLDR, &rank, PMIX_PROC_RANK);

    /* The one app of this namespace. */
    void *sub = PMIx_Info_list_start();
    if (!sub) goto fail;
    u32 = (uint32_t)(app - job->apps);
    rc |= list_add(sub, PMIX_APPNUM, &u32, PMIX_UINT32);
    u32 = (uint32_t)app->np;
    rc |= list_add(sub, PMIX_APP_SIZE, &u32, PMIX_UINT32);
    rank = 0;
    rc |= list_add(sub, PMIX_APPLDR, &rank, PMIX_PROC_RANK);
    rc |= list_add(sub, PMIX_WDIR, cwd, PMIX_STRING);
    rc |= list_add_array(list, PMIX_APP_INFO_ARRAY, sub);

    /* The one node. */
    sub = PMIx_Info_list_start();
    if (!sub) goto fail;
    rc |= list_add(sub, PMIX_HOSTNAME, job->hostname, PMIX_STRING);
    u32 = 0;
    rc |= list_add(sub, PMIX_NODEID, &u32, PMIX_UINT32);
    rc |= list_add(sub, PMIX_LOCAL_PEERS, peers, PMIX_STRING);
    u32 = (uint32_t)app->np;
    rc |= list_add(sub, PMIX_LOCAL_SIZE, &u32, PMIX_UINT32);
    u32 = (uint32_t)job->nprocs;
    rc |= list_add(sub, PMIX_NODE_SIZE, &u32, PMIX_UINT32);
    rank = 0;
    rc |= list_add(sub, PMIX_LOCALLDR, &rank, PMIX_PROC_RANK);
    rc |= list_add_array(list, PMIX_NODE_INFO_ARRAY, sub);

    /* Each process. */
    for (int r = 0; r < app->np && rc == 0; r++) {
        sub = PMIx_Info_list_start();
        if (!sub) goto fail;
        rank = (pmix_rank_t)r;
        rc |= list_add(sub, PMIX_RANK, &rank, PMIX_PROC_RANK);
        u32 = (uint32_t)(app - job->apps);
        rc |= list_add(sub, PMIX_APPNUM, &u32, PMIX_UINT32);
        uint16_t u16 = (uint16_t)r;
        rc |= list_add(sub, PMIX_LOCAL_RANK, &u16, PMIX_UINT16);
        u16 = (uint16_t)(app->first + r);
        rc |= list_add(sub, PMIX_NODE_RANK, &u16, PMIX_UINT16);
        rank = (pmix_rank_t)(app->first + r);
        rc |= list_add(sub, PMIX_GLOBAL_RANK, &rank, PMIX_PROC_RANK);
        rank = 0;
        rc |= list_add(sub, PMIX_APPLDR, &rank, PMIX_PROC_RANK);
        rc |= list_add(sub, PMIX_HOSTNAME, job->hostname, PMIX_STRING);
        u32 = 0;
        rc |= list_add(sub, PMIX_NODEID, &u32, PMIX_UINT32);
        rc |= add_locality(job, &job->procs[app->first + r], sub);
        rc |= list_add_array(list, PMIX_PROC_INFO_ARRAY, sub);
    }
    if (rc) goto fail;

    pmix_data_array_t arr = { .type = PMIX_INFO };
    if (PMIx_Info_list_convert(list, &arr) != PMIX_SUCCESS) goto fail;
    *info = arr.array;
    *ninfo = arr.size;
    PMIx_Info_list_release(list);
    free(regex);
    free(ppn);
    free(peers);
    return 0;

fail:
    PMIx_Info_list_release(list);
    free(regex);
    free(ppn);
    free(peers);
    return -1;
}

int psr_server_start(psr_job_t *job)
{
    g_job = job;
    job->ds = psr_ds_create(&(psr_ds_value_ops_t){ .copy = value_copy, .release = value_release });
    job->evc = psr_evc_create(job->opts->event_cache, payload_release);
    if (!job->ds || !job->evc) {
        psr_log(job, 0, "out of memory creating the datastore and event cache");
        return -1;
    }

    /*
     * The library's own event cache is the last hop of every late delivery:
     * it holds an injected event until its target registers a handler.  Size
     * it for one copy per cached event and process, and keep copies for the
     * job's lifetime instead of the default 120 s.  A user's setting wins.
     */
    bool set_max = !getenv("PMIX_MCA_pmix_max_events");
    bool set_evict = !getenv("PMIX_MCA_pmix_event_eviction_time");
    if (set_max) {
        char buf[32];
        size_t n = job->opts->event_cache * ((size_t)job->nprocs + 1);
        snprintf(buf, sizeof(buf), "%zu", n > (1u << 20) ? (size_t)(1u << 20) : n);
        setenv("PMIX_MCA_pmix_max_events", buf, 1);
    }
    if (set_evict) setenv("PMIX_MCA_pmix_event_eviction_time", "31536000", 1);

    pmix_info_t *info;
    PMIX_INFO_CREATE(info, 4);
    PMIX_INFO_LOAD(&info[0], PMIX_SERVER_TMPDIR, job->tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&info[1], PMIX_SYSTEM_TMPDIR, job->tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&info[2], PMIX_SERVER_NSPACE, job->server_id.nspace, PMIX_STRING);
    PMIX_INFO_LOAD(&info[3], PMIX_SERVER_RANK, &job->server_id.rank, PMIX_PROC_RANK);
    pmix_status_t st = PMIx_server_init(&host_module, info, 4);
    PMIX_INFO_FREE(info, 4);
    /* Read by the library during init; the children need not inherit them. */
    if (set_max) unsetenv("PMIX_MCA_pmix_max_events");
    if (set_evict) unsetenv("PMIX_MCA_pmix_event_eviction_time");
    if (register_tick(job) != 0) return -1;
    if (st != PMIX_SUCCESS) {
        psr_log(job, 0, "PMIx_server_init failed: %s (PMIx %s, directory %s)",
                PMIx_Error_string(st), PMIx_Get_version(), job->tmpdir);
        return -1;
    }

    for (int a = 0; a < job->napps; a++) {
        psr_app_t *app = &job->apps[a];
        size_t ninfo;
        if (build_nspace_info(job, app, &info, &ninfo) != 0) {
            psr_log(job, 0, "cannot describe namespace %s to PMIx", app->nspace);
            return -1;
        }
        op_wait_t w;
        op_wait_init(&w);
        st = PMIx_server_register_nspace(app->nspace, app->np, info, ninfo, op_wait_done, &w);
        if (st == PMIX_SUCCESS) st = op_wait_for(&w);
        PMIX_INFO_FREE(info, ninfo);
        if (st != PMIX_SUCCESS) {
            psr_log(job, 0, "PMIx_server_register_nspace(%s) failed: %s", app->nspace,
                    PMIx_Error_string(st));
            return -1;
        }
        for (int r = 0; r < app->np; r++) {
            psr_proc_t *p = &job->procs[app->first + r];
            op_wait_init(&w);
            st = PMIx_server_register_client(&p->id, job->uid, job->gid, p, op_wait_done, &w);
            if (st == PMIX_SUCCESS) st = op_wait_for(&w);
            if (st != PMIX_SUCCESS) {
                psr_log(job, 0, "PMIx_server_register_client(%s, rank %d) failed: %s",
                        app->nspace, r, PMIx_Error_string(st));
                return -1;
            }
        }
        psr_log(job, 2, "registered namespace %s with %d process(es)", app->nspace, app->np);
    }
    return 0;
}

int psr_server_setup_fork(psr_job_t *job, psr_proc_t *proc, char ***env)
{
    pmix_status_t st = PMIx_server_setup_fork(&proc->id, env);
    if (st != PMIX_SUCCESS) {
        psr_log(job, 0, "PMIx_server_setup_fork(%s, rank %u) failed: %s", proc->id.nspace,
                proc->id.rank, PMIx_Error_string(st));
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Process termination                                                     */

/*
 * Events the host originates go through the event cache: the cache keeps
 * them (oldest dropped first) and knows who has each one.  An event is
 * injected into the library once for the processes connected now, and
 * again, targeted at one process, for each process that connects later
 * (host_client_connected), so every process gets it exactly once.  The
 * library holds an injected copy until its target registers a handler.
 */

/* One injection, prepared under job->lock and sent without it. */
typedef struct injection {
    pmix_status_t code;
    pmix_proc_t source;
    pmix_info_t *info;          /* the event's info plus PMIX_EVENT_CUSTOM_RANGE */
    size_t ninfo;
} injection_t;

/* Copy an event's info array and append the custom range targets. */
static int injection_prepare(injection_t *inj, const psr_evc_entry_t *e,
                             const pmix_proc_t *targets, size_t ntargets)
{
    const ev_payload_t *pl = e->payload;
    inj->code = e->code;
    inj->source = e->source;
    inj->ninfo = pl->ninfo + 1;
    PMIX_INFO_CREATE(inj->info, inj->ninfo);
    if (!inj->info) return -1;
    for (size_t i = 0; i < pl->ninfo; i++) PMIx_Info_xfer(&inj->info[i], &pl->info[i]);
    pmix_data_array_t darr = { .type = PMIX_PROC, .size = ntargets, .array = (void *)targets };
    PMIX_INFO_LOAD(&inj->info[pl->ninfo], PMIX_EVENT_CUSTOM_RANGE, &darr, PMIX_DATA_ARRAY);
    return 0;
}

static void injection_send(psr_job_t *job, injection_t *inj)
{
    pmix_status_t st = PMIx_Notify_event(inj->code, &inj->source, PMIX_RANGE_CUSTOM, inj->info,
                                         inj->ninfo, op_ignore, NULL);
    if (st != PMIX_SUCCESS && st != PMIX_OPERATION_SUCCEEDED)
        psr_log(job, 0, "could not deliver event %s about %s:%u: %s", PMIx_Error_string(inj->code),
                inj->source.nspace, inj->source.rank, PMIx_Error_string(st));
    PMIX_INFO_FREE(inj->info, inj->ninfo);
    inj->info = NULL;
}

/*
 * Cache a host event concerning every namespace of the job and inject it
 * for the processes connected now.  Takes ownership of info.
 *
 * Each process gets its own injection, targeted at it alone.  With one
 * injection for several targets the 4.2 library can deliver twice to a
 * process that registers while the event is delivered (once at once, once
 * from its cache) and then, counting both, drop the cached copy before
 * another target has registered.  With a single target the first delivery
 * also removes the cached copy.
 */
static void host_event(psr_job_t *job, pmix_status_t code, const pmix_proc_t *source,
                       pmix_info_t *info, size_t ninfo)
{
    ev_payload_t *pl = calloc(1, sizeof(*pl));
    pmix_proc_t *scope = calloc(job->napps, sizeof(*scope));
    injection_t *inj = calloc(job->nprocs, sizeof(*inj));
    size_t ninj = 0;

    if (!pl || !scope || !inj) {
        psr_log(job, 0, "out of memory: event %s about %s:%u is lost", PMIx_Error_string(code),
                source->nspace, source->rank);
        free(pl);
        PMIX_INFO_FREE(info, ninfo);
        goto out;
    }
    pl->info = info;
    pl->ninfo = ninfo;
    for (int a = 0; a < job->napps; a++)
        PMIX_LOAD_PROCID(&scope[a], job->apps[a].nspace, PMIX_RANK_WILDCARD);

    psr_evc_event_t ev = { .code = code, .source = *source, .range = PMIX_RANGE_CUSTOM,
                           .targets = scope, .ntargets = job->napps, .payload = pl };
    pthread_mutex_lock(&job->lock);
    size_t evicted = 0;
    uint64_t seq = psr_evc_add(job->evc, &ev, &evicted);
    const psr_evc_entry_t *e = seq ? psr_evc_at(job->evc, psr_evc_count(job->evc) - 1) : NULL;
    for (int i = 0; e && i < job->nprocs; i++) {
        psr_proc_t *p = &job->procs[i];
        if (!p->connected || p->exited || !psr_evc_concerns(e, &p->id)) continue;
        if (injection_prepare(&inj[ninj], e, &p->id, 1) != 0) continue;
        psr_evc_mark(job->evc, seq, &p->id);
        ninj++;
    }
    pthread_mutex_unlock(&job->lock);
    if (evicted)
        psr_log(job, 1, "event cache full (%zu): dropped the oldest event",
                psr_evc_capacity(job->evc));
    for (size_t i = 0; i < ninj; i++) injection_send(job, &inj[i]);
out:
    free(scope);
    free(inj);
}

/* Main thread or progress thread: send proc the cached events it missed. */
static void replay_events(psr_job_t *job, const pmix_proc_t *proc)
{
    enum { BATCH = 16 };
    for (;;) {
        const psr_evc_entry_t *e[BATCH];
        injection_t inj[BATCH];
        pthread_mutex_lock(&job->lock);
        size_t n = psr_evc_take(job->evc, proc, NULL, 0, e, BATCH);
        size_t ok = 0;
        for (size_t i = 0; i < n; i++)
            if (injection_prepare(&inj[ok], e[i], proc, 1) == 0) ok++;
        pthread_mutex_unlock(&job->lock);
        for (size_t i = 0; i < ok; i++) {
            psr_log(job, 2, "replaying cached event %s from %s:%u to %s:%u",
                    PMIx_Error_string(inj[i].code), inj[i].source.nspace, inj[i].source.rank,
                    proc->nspace, proc->rank);
            injection_send(job, &inj[i]);
        }
        if (n < BATCH) return;
    }
}

static void notify_termination(psr_job_t *job, const psr_proc_t *p, pmix_status_t cause,
                               int code, const char *text)
{
    pmix_info_t *info;
    PMIX_INFO_CREATE(info, 4);
    PMIX_INFO_LOAD(&info[0], PMIX_EVENT_AFFECTED_PROC, &p->id, PMIX_PROC);
    PMIX_INFO_LOAD(&info[1], PMIX_EXIT_CODE, &code, PMIX_INT);
    PMIX_INFO_LOAD(&info[2], PMIX_PROC_TERM_STATUS, &cause, PMIX_STATUS);
    PMIX_INFO_LOAD(&info[3], PMIX_EVENT_TEXT_MESSAGE, text, PMIX_STRING);
    /* The dead process is the source, as in PRRTE: an event whose source
     * is the server itself would come back to its host as notify_event. */
    host_event(job, PMIX_EVENT_PROC_TERMINATED, &p->id, info, 4);
}

/* Room for the text of a termination event: a namespace and a sentence. */
#define TERM_TEXT_LEN (PMIX_MAX_NSLEN + 160)

/* Tell the user and the other processes that p ended abnormally. */
static void announce_abnormal(psr_job_t *job, const psr_proc_t *p, pmix_status_t cause,
                              int code, const char *text)
{
    psr_log(job, 0, "%s%s", text,
            job->opts->keep_going ? "; the others keep going" : "; ending the job");
    notify_termination(job, p, cause, code, text);
}

static void uninit_text(const psr_proc_t *p, char *text, size_t len)
{
    snprintf(text, len, "%s rank %u exited without calling PMIx_Init, which other "
             "processes of its namespace called", p->id.nspace, p->id.rank);
}

/*
 * The first process of app's namespace has connected: processes of it
 * that exited with status 0 before (without PMIx_Init, see
 * psr_server_proc_exited) left it short of a member, so they ended
 * abnormally after all.
 */
static void report_uninit_exits(psr_job_t *job, psr_app_t *app)
{
    for (int r = 0; r < app->np; r++) {
        psr_proc_t *q = &job->procs[app->first + r];
        pthread_mutex_lock(&job->lock);
        bool late = q->uninit_exit;
        q->uninit_exit = false;
        bool ending = job->ending;
        if (late && !ending && !job->opts->keep_going)
            psr_job_end_locked(job, 1, job->opts->grace);
        pthread_mutex_unlock(&job->lock);
        if (!late || ending) continue;
        char text[TERM_TEXT_LEN];
        uninit_text(q, text, sizeof(text));
        announce_abnormal(job, q, PMIX_ERR_PROC_TERM_WO_SYNC, 0, text);
    }
}

void psr_server_proc_exited(psr_job_t *job, psr_proc_t *p)
{
    pthread_mutex_lock(&job->lock);
    int wstatus = p->wstatus;
    bool connected = p->connected, finalized = p->finalized, aborted = p->aborted;
    bool ending = job->ending;
    psr_app_t *app = &job->apps[p->app];
    /* Lookups of the dead process are answered from the PMIx thread. */
    psr_ds_proc_ended(job->ds, &p->id, &job->answers);
    if (app->nexited == app->np) psr_ds_app_ended(job->ds, app->nspace);

    int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus)
               : WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : 1;
    pmix_status_t cause = PMIX_SUCCESS;
    char text[TERM_TEXT_LEN];
    if (aborted) {
        cause = PMIX_ERR_PROC_REQUESTED_ABORT;
        snprintf(text, sizeof(text), "%s rank %u called PMIx_Abort", p->id.nspace, p->id.rank);
    } else if (WIFSIGNALED(wstatus)) {
        cause = PMIX_ERR_PROC_ABORTED_BY_SIG;
        snprintf(text, sizeof(text), "%s rank %u was killed by signal %d (%s)", p->id.nspace,
                 p->id.rank, WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
    } else if (code != 0) {
        cause = PMIX_ERR_EXIT_NONZERO_TERM;
        snprintf(text, sizeof(text), "%s rank %u exited with status %d", p->id.nspace,
                 p->id.rank, code);
    } else if (connected && !finalized) {
        cause = PMIX_ERR_PROC_TERM_WO_SYNC;
        snprintf(text, sizeof(text), "%s rank %u exited without calling PMIx_Finalize",
                 p->id.nspace, p->id.rank);
    } else if (!connected && app->nconnected > 0) {
        /* The others of its namespace wait for it in their collectives. */
        cause = PMIX_ERR_PROC_TERM_WO_SYNC;
        uninit_text(p, text, sizeof(text));
    } else if (!connected) {
        /* Nobody of its namespace has used PMIx yet, and perhaps nobody
         * will (programs without PMIx): decided when one connects. */
        p->uninit_exit = true;
    }
    if (code != 0 && job->exit_status == 0) job->exit_status = code;
    bool abnormal = cause != PMIX_SUCCESS;
    if (abnormal && !ending && !job->opts->keep_going)
        psr_job_end_locked(job, code ? code : 1, job->opts->grace);
    pthread_mutex_unlock(&job->lock);

    if (!connected && job->opts->keep_going && !ending) psr_stand_in_spawn(job, p);
    if (!abnormal || ending) return;
    announce_abnormal(job, p, cause, code, text);
}

/*
 * Answers that the main thread produces (a PMIX_TIMEOUT expired, the
 * requester died) must reach the library on its own progress thread: its
 * lookup callback queues the reply without locking.  The main thread sends
 * a "tick", an event for the server process alone, and the handler runs on
 * the progress thread.
 */
#define PSR_TICK_EVENT (PMIX_EXTERNAL_ERR_BASE - 100)

static void tick_handler(size_t id, pmix_status_t status, const pmix_proc_t *source,
                         pmix_info_t info[], size_t ninfo, pmix_info_t results[],
                         size_t nresults, pmix_event_notification_cbfunc_fn_t cbfunc,
                         void *cbdata)
{
    (void)id;
    (void)status;
    (void)source;
    (void)info;
    (void)ninfo;
    (void)results;
    (void)nresults;
    psr_job_t *job = g_job;
    pthread_mutex_lock(&job->lock);
    job->tick_sent = false;
    if (job->ds) psr_ds_expire(job->ds, psr_now(), &job->answers);
    psr_ds_result_t *done = job->answers;
    job->answers = NULL;
    pthread_mutex_unlock(&job->lock);
    if (done) deliver_results(job, done);
    psr_job_wake(job);      /* the main loop recomputes its next deadline */
    if (cbfunc) cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static int register_tick(psr_job_t *job)
{
    pmix_status_t code = PSR_TICK_EVENT;
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, PMIX_EVENT_HDLR_NAME, "pscom_run-tick", PMIX_STRING);
    pmix_status_t st = PMIx_Register_event_handler(&code, 1, &info, 1, tick_handler, NULL, NULL);
    PMIX_INFO_DESTRUCT(&info);
    if (st < 0) {
        psr_log(job, 0, "cannot register the launcher's own event handler: %s",
                PMIx_Error_string(st));
        return -1;
    }
    return 0;
}

void psr_server_tick(psr_job_t *job)
{
    pthread_mutex_lock(&job->lock);
    double deadline = job->ds ? psr_ds_next_deadline(job->ds) : 0;
    bool send = !job->tick_sent && (job->answers || (deadline > 0 && deadline <= psr_now()));
    if (send) job->tick_sent = true;
    pthread_mutex_unlock(&job->lock);
    if (!send) return;

    pmix_info_t info;
    bool yes = true;
    PMIX_INFO_LOAD(&info, PMIX_EVENT_DO_NOT_CACHE, &yes, PMIX_BOOL);
    pmix_status_t st = PMIx_Notify_event(PSR_TICK_EVENT, &job->server_id, PMIX_RANGE_PROC_LOCAL,
                                         &info, 1, op_ignore, NULL);
    PMIX_INFO_DESTRUCT(&info);
    if (st != PMIX_SUCCESS && st != PMIX_OPERATION_SUCCEEDED) {
        psr_log(job, 0, "cannot reach the PMIx progress thread: %s", PMIx_Error_string(st));
        pthread_mutex_lock(&job->lock);
        job->tick_sent = false;
        pthread_mutex_unlock(&job->lock);
    }
}

double psr_server_next_deadline(psr_job_t *job)
{
    pthread_mutex_lock(&job->lock);
    double t = job->tick_sent || !job->ds ? 0 : psr_ds_next_deadline(job->ds);
    pthread_mutex_unlock(&job->lock);
    return t;
}

/* How long the end of the job waits for each of the library's
 * completions. */
#define STOP_WAIT_S 10

static void *finalize_thread(void *arg)
{
    op_wait_done(PMIx_server_finalize(), arg);
    return NULL;
}

int psr_server_stop(psr_job_t *job, int sfd, const sigset_t *ending)
{
    psr_ds_result_t *done = NULL;
    pthread_mutex_lock(&job->lock);
    psr_ds_t *ds = job->ds;
    job->ds = NULL;         /* requests from now on: DS_GONE */
    psr_ds_result_t *answers = job->answers;
    job->answers = NULL;
    pthread_mutex_unlock(&job->lock);
    /*
     * Every process has ended: lookups still waiting, and answers not yet
     * handed over, belong to processes that are gone.  They are dropped
     * (the library releases its records of dead peers itself).  No upcall
     * uses the store any more: each checks job->ds under the lock, and
     * results in flight need no store.
     */
    if (ds) psr_ds_destroy(ds, PMIX_ERR_LOST_CONNECTION, &done);
    drop_results(done);
    drop_results(answers);
    /* Bounded, and ended by a signal that asks pscom_run to end: a library
     * whose progress thread is stuck (OpenPMIx 4.2 was seen blocked on a
     * lock in freed memory after clients died during a fence) must not
     * keep the launcher from ending. The record of a deregistration that
     * did not end stays allocated: the library may still call back. */
    for (int a = 0; a < job->napps; a++) {
        op_wait_t *w = malloc(sizeof(*w));
        if (!w) {
            psr_log(job, 0, "out of memory ending the PMIx server");
            return -1;
        }
        op_wait_init(w);
        PMIx_server_deregister_nspace(job->apps[a].nspace, op_wait_done, w);
        pmix_status_t st;
        int rc = op_wait_bounded(job, w, STOP_WAIT_S, sfd, ending, &st);
        if (rc < 0)
            psr_log(job, 0, "the PMIx server did not finish deregistering %s "
                    "within %d s; ending without PMIx_server_finalize",
                    job->apps[a].nspace, STOP_WAIT_S);
        else if (rc > 0)
            psr_log(job, 0, "%s while the PMIx server deregistered %s; ending "
                    "without PMIx_server_finalize", strsignal(rc),
                    job->apps[a].nspace);
        if (rc) return rc;
        free(w);
    }
    /* The finalize is bounded the same way: it runs on a thread of its own
     * (which inherits the blocked signals, so they still reach sfd), and
     * is left behind if it does not end. */
    op_wait_t *w = malloc(sizeof(*w));
    pthread_t t;
    if (!w) {
        psr_log(job, 0, "out of memory ending the PMIx server");
        return -1;
    }
    op_wait_init(w);
    pmix_status_t st;
    int rc = 0, err = pthread_create(&t, NULL, finalize_thread, w);
    if (err) {
        psr_log(job, 0, "cannot start a thread for PMIx_server_finalize: %s; "
                "finalizing without a bound (SIGINT, SIGTERM, SIGHUP end it)",
                strerror(err));
        free(w);
        w = NULL;
        pthread_sigmask(SIG_UNBLOCK, ending, NULL);
        st = PMIx_server_finalize();
        pthread_sigmask(SIG_BLOCK, ending, NULL);
    } else {
        rc = op_wait_bounded(job, w, STOP_WAIT_S, sfd, ending, &st);
    }
    if (rc < 0)
        psr_log(job, 0, "PMIx_server_finalize did not end within %d s; "
                "ending without it", STOP_WAIT_S);
    else if (rc > 0)
        psr_log(job, 0, "%s during PMIx_server_finalize; ending without it",
                strsignal(rc));
    if (rc) return rc;
    if (w) {
        pthread_join(t, NULL);
        free(w);
    }
    if (st != PMIX_SUCCESS)
        psr_log(job, 1, "PMIx_server_finalize: %s", PMIx_Error_string(st));
    /* A signal that came while the library finished is still owed: the
     * caller ends by it. */
    rc = ending_signal(job, sfd, ending);
    if (rc) psr_log(job, 0, "%s at the end of the job", strsignal(rc));
    pthread_mutex_lock(&job->lock);
    psr_evc_destroy(job->evc);
    job->evc = NULL;
    pthread_mutex_unlock(&job->lock);
    return rc;
}
