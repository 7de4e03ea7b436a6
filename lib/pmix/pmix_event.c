/*
 * Events: PMIx-side handlers that only queue, a self-pipe watched by the
 * pscom progress engine, and the dispatcher that runs the library's own
 * reaction and then the application's handlers in PMIx precedence order.
 *
 * Why a queue: PMIx calls handlers on its progress thread, while pscom after
 * pscom_init() may only be called from one thread. Queuing keeps every pscom
 * call and every application handler on application threads, inside pscom
 * progress, without asking the application for pscom_init_thread(). The PMIx
 * chain waits (its completion callback is called after our handlers ran), so
 * PMIx sees the status the application's chain ended with.
 *
 * Why our own chain: PMIx would serve several application handlers in its
 * precedence order too, but records the event code instead of each
 * handler's returned status in the results it passes on (OpenPMIx 4.2), and
 * each handler would cost a round trip between the threads. So PMIx sees
 * one handler of ours per registration (named PMX_HANDLER_NAME; an event
 * that several of them match is handled by the first, recognised by that
 * name in the chain's results), and the application's handlers are chained
 * here by the same rules: specific codes, then groups, then defaults, first
 * in first out within each, until one returns ACTION_COMPLETE.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "pmix_priv.h"

/* The job whose PMIx handlers are registered (one per process). */
static pscom_pmix_job_t *ev_job;

/* Codes that tell a peer is gone or going. */
static const pmix_status_t peer_failure_codes[] = {
    PMIX_EVENT_PROC_TERMINATED,
    PMIX_PROC_TERMINATED,
    PMIX_ERR_PROC_REQUESTED_ABORT,
    PMIX_ERR_PROC_TERM_WO_SYNC,
    PMIX_ERR_PROC_KILLED_BY_CMD,
    PMIX_ERR_PROC_FAILED_TO_START,
    PMIX_ERR_PROC_ABORTED_BY_SIG,
    PMIX_ERR_PROC_SENSOR_BOUND_EXCEEDED,
    PMIX_ERR_EXIT_NONZERO_TERM,
    PMIX_EVENT_NODE_DOWN,
#ifdef PMIX_ERR_PROC_ABORTED
    PMIX_ERR_PROC_ABORTED,
#endif
#ifdef PMIX_ERR_PROC_ABORTING
    PMIX_ERR_PROC_ABORTING,
#endif
};
#define N_PEER_FAILURE (sizeof(peer_failure_codes) / sizeof(peer_failure_codes[0]))

static bool is_peer_failure(int code)
{
    for (size_t i = 0; i < N_PEER_FAILURE; i++)
        if (peer_failure_codes[i] == code) return true;
    return false;
}

static bool is_server_lost(int code)
{
    return code == PMIX_ERR_LOST_CONNECTION || code == PMIX_ERR_UNREACH;
}

/* ---------------------------------------------------------------------- */
/* The queue (any thread)                                                 */
/* ---------------------------------------------------------------------- */

static void event_free(struct pmx_event *ev)
{
    free(ev->ranks);
    free(ev->text);
    free(ev);
}

void pmx_wake(pscom_pmix_job_t *job)
{
    char b = 1;
    ssize_t n = write(job->pipe_wr, &b, 1);
    (void)n; /* EAGAIN: a wake-up is pending already */
}

/* This thread dispatches events from inside pscom progress (on_pipe). */
static __thread int in_handler;

void pmx_op_finish(struct pmx_op *op, pmix_status_t status)
{
    op->status = status;
    pmx_wake(op->job);
    __atomic_store_n(&op->done, 1, __ATOMIC_RELEASE);
}

static int op_done(void *arg)
{
    struct pmx_op *op = arg;
    return __atomic_load_n(&op->done, __ATOMIC_ACQUIRE);
}

/* A wake-up that another thread's wait consumes before done is set costs
 * one sleep, at most 10 ms (pscom_plugin_wait_until asks op_done after
 * every round and every sleep). */
pmix_status_t pmx_op_wait(struct pmx_op *op)
{
    if (!in_handler) {
        pscom_plugin_wait_until(op_done, op);
        return op->status;
    }
    /* A handler dispatched from pscom progress (the event pipe's
     * callback), where a pscom wait must not nest: wait without progress,
     * as the blocking PMIx calls do. Handlers that pscom_pmix_progress()
     * runs are outside pscom progress and progress as usual. */
    while (!op_done(op)) {
        struct timespec t = {0, 100000};
        nanosleep(&t, NULL);
    }
    return op->status;
}

static void enqueue_locked(pscom_pmix_job_t *job, struct pmx_event *ev)
{
    ev->next = NULL;
    if (job->evq_tail)
        job->evq_tail->next = ev;
    else
        job->evq_head = ev;
    job->evq_tail = ev;
}

static void enqueue(pscom_pmix_job_t *job, struct pmx_event *ev)
{
    pthread_mutex_lock(&job->evq_lock);
    enqueue_locked(job, ev);
    pthread_mutex_unlock(&job->evq_lock);
    pmx_wake(job);
}

static struct pmx_event *dequeue_locked(pscom_pmix_job_t *job)
{
    struct pmx_event *ev = job->evq_head;
    if (ev) {
        job->evq_head = ev->next;
        if (!job->evq_head) job->evq_tail = NULL;
    }
    return ev;
}

/* The next event to handle, which becomes job->running. */
static struct pmx_event *take_next(pscom_pmix_job_t *job)
{
    pthread_mutex_lock(&job->evq_lock);
    struct pmx_event *ev = dequeue_locked(job);
    job->running = ev;
    pthread_mutex_unlock(&job->evq_lock);
    return ev;
}

static bool queue_empty(pscom_pmix_job_t *job)
{
    pthread_mutex_lock(&job->evq_lock);
    bool empty = !job->evq_head;
    pthread_mutex_unlock(&job->evq_lock);
    return empty;
}

static int add_rank(struct pmx_event *ev, const pscom_pmix_job_t *job,
                    const pmix_proc_t *p)
{
    if (!pmx_nspace_is(p->nspace, job->me.nspace)) return 0;
    if (p->rank >= (pmix_rank_t)job->size) return 0; /* wildcard, undef */
    for (size_t i = 0; i < ev->nranks; i++)
        if (ev->ranks[i] == (int)p->rank) return 0;
    int *n = realloc(ev->ranks, (ev->nranks + 1) * sizeof(*n));
    if (!n) return -1;
    ev->ranks = n;
    ev->ranks[ev->nranks++] = (int)p->rank;
    return 0;
}

/* What the event's info says, copied (PMIx's thread). */
static int parse_info(struct pmx_event *ev, const pscom_pmix_job_t *job,
                      const pmix_info_t *info, size_t ninfo)
{
    for (size_t i = 0; i < ninfo; i++) {
        const pmix_info_t *in = &info[i];
        if (PMIX_CHECK_KEY(in, PMIX_EVENT_AFFECTED_PROC) &&
            in->value.type == PMIX_PROC && in->value.data.proc) {
            ev->names_procs = true;
            if (add_rank(ev, job, in->value.data.proc)) return -1;
        } else if (PMIX_CHECK_KEY(in, PMIX_EVENT_AFFECTED_PROCS) &&
                   in->value.type == PMIX_DATA_ARRAY &&
                   in->value.data.darray &&
                   in->value.data.darray->type == PMIX_PROC) {
            const pmix_proc_t *procs = in->value.data.darray->array;
            ev->names_procs = true;
            for (size_t k = 0; k < in->value.data.darray->size; k++)
                if (add_rank(ev, job, &procs[k])) return -1;
        } else if (PMIX_CHECK_KEY(in, PMIX_EVENT_TEXT_MESSAGE) &&
                   in->value.type == PMIX_STRING && in->value.data.string &&
                   !ev->text) {
            ev->text = strdup(in->value.data.string);
            if (!ev->text) return -1;
        } else if (PMIX_CHECK_KEY(in, PMIX_EXIT_CODE) &&
                   in->value.type == PMIX_INT) {
            ev->exit_code = in->value.data.integer;
            ev->has_exit_code = true;
        } else if (PMIX_CHECK_KEY(in, PMIX_PROC_TERM_STATUS) &&
                   in->value.type == PMIX_STATUS &&
                   in->value.data.status != PMIX_SUCCESS && !ev->has_exit_code) {
            /* An error status without an exit code still means abnormal. */
            ev->exit_code = -1;
            ev->has_exit_code = true;
        } else if (PMIX_CHECK_KEY(in, PMIX_EVENT_NON_DEFAULT)) {
            ev->nondefault = PMIX_INFO_TRUE(in);
        }
    }
    return 0;
}

/* A peer-failure event that names no affected process is about its
 * source (hosts report a death with the dead process as the source). One
 * that names them, also only with ranks that are none of ours (what
 * pscom_pmix_notify sends for rank -1), is not: its sender is alive. */
static int source_as_rank(struct pmx_event *ev, const pscom_pmix_job_t *job)
{
    if (ev->names_procs || !is_peer_failure(ev->code)) return 0;
    return add_rank(ev, job, &ev->source);
}

static struct pmx_closing *closing_find_locked(pscom_pmix_job_t *job,
                                               size_t ref)
{
    for (size_t i = 0; i < job->nclosing; i++)
        if (job->closing[i].ref == ref) return &job->closing[i];
    return NULL;
}

/* Every PMIx registration of ours lands here, on PMIx's thread. */
static void on_pmix_event(size_t evhdlr_id, pmix_status_t status,
                          const pmix_proc_t *source, pmix_info_t info[],
                          size_t ninfo, pmix_info_t *results, size_t nresults,
                          pmix_event_notification_cbfunc_fn_t cbfunc,
                          void *cbdata)
{
    pscom_pmix_job_t *job = ev_job;
    struct pmx_event *ev = NULL;

    for (size_t i = 0; i < nresults; i++)
        if (PMIX_CHECK_KEY(&results[i], PMX_HANDLER_NAME)) goto pass_on;
    if (!job) goto pass_on;

    ev = calloc(1, sizeof(*ev));
    if (!ev) goto pass_on;
    ev->code = status;
    if (source)
        PMIX_LOAD_PROCID(&ev->source, source->nspace, source->rank);
    else
        PMIX_LOAD_PROCID(&ev->source, "", PMIX_RANK_UNDEF);
    if (parse_info(ev, job, info, ninfo) || source_as_rank(ev, job)) goto pass_on;
    ev->info = info;
    ev->ninfo = ninfo;
    ev->cbfunc = cbfunc;
    ev->cbdata = cbdata;
    ev->ref = evhdlr_id;
    ev->has_ref = true;
    ev->status = PMIX_EVENT_NO_ACTION_TAKEN;
    /* Finalize, and the deregistration of the registration it came through
     * while it is under way, pass events on at once: no
     * PMIx_Deregister_event_handler may overtake a cbfunc. A
     * deregistration that waits for the cbfunc of a queued event keeps
     * taking events (and waits for them too), so that the application's
     * other handlers still see them. */
    pthread_mutex_lock(&job->evq_lock);
    const struct pmx_closing *c = closing_find_locked(job, evhdlr_id);
    bool take = !job->stopping && !(c && !c->deferred);
    if (take) enqueue_locked(job, ev);
    pthread_mutex_unlock(&job->evq_lock);
    if (take) {
        /* The pipe stays open: finalize closes it only after its
         * deregistrations, which wait for this call to return. */
        pmx_wake(job);
        return;
    }

pass_on:
    if (ev) event_free(ev);
    if (cbfunc)
        cbfunc(PMIX_EVENT_NO_ACTION_TAKEN, NULL, 0, NULL, NULL, cbdata);
}

int pmx_event_local(pscom_pmix_job_t *job, int code, int rank,
                    const char *text)
{
    struct pmx_event *ev = calloc(1, sizeof(*ev));
    if (!ev) goto nomem;
    ev->code = code;
    PMIX_LOAD_PROCID(&ev->source, job->me.nspace, (pmix_rank_t)job->rank);
    if (text && !(ev->text = strdup(text))) goto nomem;
    ev->names_procs = true; /* rank, or -1 for none */
    if (rank >= 0) {
        pmix_proc_t p;
        pmx_proc(job, rank, &p);
        if (add_rank(ev, job, &p)) goto nomem;
    }
    ev->status = PMIX_EVENT_NO_ACTION_TAKEN;
    enqueue(job, ev);
    return 0;

nomem:
    if (ev) event_free(ev);
    errno = ENOMEM;
    return -1;
}

bool pmx_rank_reported_dead(pscom_pmix_job_t *job, int rank)
{
    signed char failed;
    pmx_peer_get(job, rank, &failed);
    if (failed) return true;
    bool dead = false;
    pthread_mutex_lock(&job->evq_lock);
    for (const struct pmx_event *ev = job->evq_head; ev && !dead; ev = ev->next) {
        if (!is_peer_failure(ev->code)) continue;
        for (size_t i = 0; i < ev->nranks; i++)
            if (ev->ranks[i] == rank) dead = true;
    }
    pthread_mutex_unlock(&job->evq_lock);
    return dead;
}

/* ---------------------------------------------------------------------- */
/* Dispatch (application threads, one at a time)                          */
/* ---------------------------------------------------------------------- */

static bool handler_matches(const struct pmx_handler *h, int category,
                            int code, bool nondefault)
{
    if (h->removed || h->category != category) return false;
    if (category == PMX_CAT_DEFAULT) return !nondefault;
    for (size_t i = 0; i < h->ncodes; i++)
        if (h->codes[i] == code) return true;
    return false;
}

/* Does a lost-connection code concern this process's own server? PMIx
 * reports the loss with the server as its source (OpenPMIx 4.2: the
 * server's namespace and rank), or this process; any other source is a
 * process that notified the code, or a host relaying one about somebody
 * else, and this process's server is fine. */
static bool own_server_lost(const pscom_pmix_job_t *job,
                            const struct pmx_event *ev)
{
    const pmix_proc_t *src = &ev->source;
    /* The server first: a host may name it in the job's namespace. */
    if (job->server_known && pmx_nspace_is(src->nspace, job->server.nspace) &&
        src->rank == job->server.rank)
        return true;
    if (pmx_nspace_is(src->nspace, job->me.nspace))
        return src->rank == job->me.rank;
    /* Another process's: unless the server is unknown, and this is not one
     * of our job's processes. */
    return !job->server_known;
}

/* The library's own part of an event. Returns true when it acted. */
static bool react(pscom_pmix_job_t *job, const struct pmx_event *ev)
{
    bool acted = false;

    if (is_peer_failure(ev->code)) {
        bool term = ev->code == PMIX_EVENT_PROC_TERMINATED ||
                    ev->code == PMIX_PROC_TERMINATED;
        bool normal = term && !(ev->has_exit_code && ev->exit_code != 0);
        /* A connection's con_error may finalize the job. */
        for (size_t i = 0; i < ev->nranks && !job->finalized; i++) {
            pmx_fail_peer(job, ev->ranks[i], ev->code, ev->text, normal);
            acted = true;
        }
    }
    if (is_server_lost(ev->code) && !job->finalized) {
        if (!own_server_lost(job, ev)) {
            pmx_log(job, PMX_LOG_INFO,
                    "PMIx event %s from %s:%d, not about this process's "
                    "server (%s:%d): the server stays in use",
                    PMIx_Error_string(ev->code), ev->source.nspace,
                    (int)ev->source.rank,
                    job->server_known ? job->server.nspace : "?",
                    job->server_known ? (int)job->server.rank : -1);
        } else if (!__atomic_exchange_n(&job->server_lost, true,
                                        __ATOMIC_RELAXED)) {
            pmx_log(job, PMX_LOG_ERROR,
                    "lost the connection to the PMIx server (PMIx event "
                    "%s): barrier, publish/lookup and notify fail from now "
                    "on; the pscom connections between the ranks stay",
                    PMIx_Error_string(ev->code));
            acted = true;
        }
    }
    return acted;
}

/* Is an event that came through our PMIx registration ref queued or being
 * handled? Under evq_lock. */
static bool ref_busy_locked(const pscom_pmix_job_t *job, size_t ref)
{
    const struct pmx_event *r = job->running;
    if (r && r->has_ref && r->ref == ref) return true;
    for (const struct pmx_event *ev = job->evq_head; ev; ev = ev->next)
        if (ev->has_ref && ev->ref == ref) return true;
    return false;
}

static void closing_remove(pscom_pmix_job_t *job, size_t ref)
{
    pthread_mutex_lock(&job->evq_lock);
    struct pmx_closing *c = closing_find_locked(job, ref);
    if (c) *c = job->closing[--job->nclosing];
    pthread_mutex_unlock(&job->evq_lock);
}

static void deregister_ref(pscom_pmix_job_t *job, size_t ref)
{
    pmix_status_t rc = PMIx_Deregister_event_handler(ref, NULL, NULL);
    if (rc != PMIX_SUCCESS && !pmx_server_lost(job))
        pmx_log(job, PMX_LOG_WARN, "PMIx_Deregister_event_handler: %s",
                PMIx_Error_string(rc));
}

/* Give up our PMIx registration ref. OpenPMIx reads a registration's
 * handler object after the handler's cbfunc (cycle_events, on its thread)
 * and PMIx_Deregister_event_handler frees it: so it is deregistered at
 * once only when no event that came through it waits for its cbfunc, else
 * after that cbfunc (release_ref). Both are shifted to PMIx's thread in
 * the order they are called. */
static void give_up_ref(pscom_pmix_job_t *job, size_t ref)
{
    pthread_mutex_lock(&job->evq_lock);
    bool deferred = ref_busy_locked(job, ref);
    if (job->nclosing == job->cap_closing) {
        size_t ncap = job->cap_closing ? 2 * job->cap_closing : 4;
        struct pmx_closing *n = realloc(job->closing, ncap * sizeof(*n));
        if (!n) {
            pthread_mutex_unlock(&job->evq_lock);
            /* Its events keep coming and reach no handler of it. */
            pmx_log(job, PMX_LOG_WARN, "out of memory: a PMIx event handler "
                    "stays registered until pscom_pmix_finalize");
            return;
        }
        job->closing = n;
        job->cap_closing = ncap;
    }
    job->closing[job->nclosing++] = (struct pmx_closing){ref, deferred};
    pthread_mutex_unlock(&job->evq_lock);
    if (deferred) return;
    deregister_ref(job, ref);
    closing_remove(job, ref);
}

/* After the cbfunc of an event that came through ref: the deregistration
 * that waited for it, unless another such event still waits. */
static void release_ref(pscom_pmix_job_t *job, size_t ref)
{
    pthread_mutex_lock(&job->evq_lock);
    struct pmx_closing *c = closing_find_locked(job, ref);
    bool now = c && c->deferred && !ref_busy_locked(job, ref);
    if (now) c->deferred = false;
    pthread_mutex_unlock(&job->evq_lock);
    if (!now) return;
    deregister_ref(job, ref);
    closing_remove(job, ref);
}

/* Close the event's PMIx chain (if it still waits for us) and free it. */
static void finish_event(pscom_pmix_job_t *job, struct pmx_event *ev)
{
    if (ev->cbfunc) ev->cbfunc(ev->status, NULL, 0, NULL, NULL, ev->cbdata);
    pthread_mutex_lock(&job->evq_lock);
    if (job->running == ev) job->running = NULL;
    pthread_mutex_unlock(&job->evq_lock);
    /* After a finalize from a handler nothing is waiting, and PMIx is
     * finalized. */
    if (ev->has_ref && !job->finalized) release_ref(job, ev->ref);
    event_free(ev);
}

static void handle(pscom_pmix_job_t *job, struct pmx_event *ev)
{
    pscom_pmix_result_t *res = NULL;
    size_t nres = 0, cap = 0;
    int prev = PSCOM_PMIX_EVENT_CONTINUE;

    pscom_pmix_event_t pub = {
        .code = ev->code,
        .code_str = PMIx_Error_string(ev->code),
        .source_nspace = ev->source.nspace,
        .source_rank = ev->source.rank < PMIX_RANK_VALID ? (int)ev->source.rank : -1,
        .ranks = ev->ranks,
        .nranks = ev->nranks,
        .text = ev->text,
        .exit_code = ev->exit_code,
        .has_exit_code = ev->has_exit_code,
        .pmix_info = ev->info,
        .pmix_ninfo = ev->ninfo,
    };

    pmx_log(job, PMX_LOG_DEBUG, "event %s from %s:%d", pub.code_str,
            pub.source_nspace, pub.source_rank);
    if (react(job, ev)) ev->status = PMIX_EVENT_PARTIAL_ACTION_TAKEN;
    for (int cat = PMX_CAT_SPECIFIC; cat <= PMX_CAT_DEFAULT; cat++) {
        for (size_t i = 0;; i++) {
            pthread_mutex_lock(&job->hdlr_lock);
            if (i >= job->nhdlrs) {
                pthread_mutex_unlock(&job->hdlr_lock);
                break;
            }
            struct pmx_handler *h = job->hdlrs[i];
            bool match = handler_matches(h, cat, ev->code, ev->nondefault);
            pscom_pmix_event_cb_t cb = h->cb;
            void *ctx = h->ctx;
            size_t id = h->id;
            pthread_mutex_unlock(&job->hdlr_lock);
            if (!match) continue;

            pub.results = res;
            pub.nresults = nres;
            int st = cb(job, &pub, prev, ctx);
            if (nres == cap) {
                size_t ncap = cap ? 2 * cap : 8;
                pscom_pmix_result_t *n = realloc(res, ncap * sizeof(*n));
                if (n) {
                    res = n;
                    cap = ncap;
                }
            }
            if (nres < cap) res[nres++] = (pscom_pmix_result_t){id, st};
            prev = ev->status = st;
            if (st == PSCOM_PMIX_EVENT_ACTION_COMPLETE) goto done;
        }
    }
done:
    free(res);
    finish_event(job, ev);
}

/* The job whose event this thread is handling (dispatch). */
static __thread const pscom_pmix_job_t *dispatching;

bool pmx_dispatching(const pscom_pmix_job_t *job)
{
    return job && dispatching == job;
}

/* Handle what is queued. Returns how many events it handled; a job that
 * a handler finalized is freed here, and must not be used after. */
static int dispatch(pscom_pmix_job_t *job)
{
    int n = 0;

    for (;;) {
        if (pthread_mutex_trylock(&job->dispatch_lock)) return n;
        struct pmx_event *ev;
        while ((ev = take_next(job))) {
            dispatching = job;
            handle(job, ev);
            dispatching = NULL;
            n++;
            if (job->finalized) {
                pthread_mutex_unlock(&job->dispatch_lock);
                pmx_job_free(job);
                return n;
            }
        }
        pthread_mutex_unlock(&job->dispatch_lock);
        /* An event queued after our last look, while a dispatcher on
         * another thread gave up on the lock we held, is ours. */
        if (queue_empty(job)) return n;
    }
}

static void on_pipe(int fd, uint32_t events, void *arg)
{
    char buf[64];

    (void)events;
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    in_handler++;
    dispatch(arg);
    in_handler--;
}

int pscom_pmix_progress(pscom_pmix_job_t *job)
{
    char buf[64];

    if (!job || job->pipe_rd < 0) return 0;
    while (read(job->pipe_rd, buf, sizeof(buf)) > 0)
        ;
    return dispatch(job);
}

/* ---------------------------------------------------------------------- */
/* Registration                                                           */
/* ---------------------------------------------------------------------- */

/* Register on_pmix_event with PMIx for codes (NULL: default). ref >= 0. */
static pmix_status_t pmix_register(const int *codes, size_t ncodes,
                                   size_t *ref)
{
    pmix_status_t *pc = NULL, rc;
    pmix_info_t info;

    if (ncodes) {
        pc = malloc(ncodes * sizeof(*pc));
        if (!pc) return PMIX_ERR_NOMEM;
        for (size_t i = 0; i < ncodes; i++) pc[i] = codes[i];
    }
    PMIX_INFO_LOAD(&info, PMIX_EVENT_HDLR_NAME, PMX_HANDLER_NAME, PMIX_STRING);
    rc = PMIx_Register_event_handler(pc, ncodes, &info, 1, on_pmix_event, NULL,
                                     NULL);
    PMIX_INFO_DESTRUCT(&info);
    free(pc);
    if (rc < 0) return rc;
    *ref = (size_t)rc;
    return PMIX_SUCCESS;
}

pscom_err_t pscom_pmix_event_register(pscom_pmix_job_t *job, const int *codes,
                                      size_t ncodes, unsigned flags,
                                      pscom_pmix_event_cb_t cb, void *ctx,
                                      size_t *id_p)
{
    const unsigned known = PSCOM_PMIX_EVENT_GROUP | PSCOM_PMIX_EVENT_DEFAULT;
    struct pmx_handler *h;
    int category;

    if (!job || !cb || (flags & ~known) || flags == known) return PSCOM_ERR_INVALID;
    if (flags & PSCOM_PMIX_EVENT_DEFAULT) {
        if (codes || ncodes) return PSCOM_ERR_INVALID;
        category = PMX_CAT_DEFAULT;
    } else {
        if (!codes || !ncodes) return PSCOM_ERR_INVALID;
        category = (ncodes > 1 || (flags & PSCOM_PMIX_EVENT_GROUP))
                       ? PMX_CAT_GROUP : PMX_CAT_SPECIFIC;
    }

    h = calloc(1, sizeof(*h));
    if (!h || (ncodes && !(h->codes = malloc(ncodes * sizeof(int))))) {
        free(h);
        errno = ENOMEM;
        return PSCOM_ERR_STDERROR;
    }
    if (ncodes) memcpy(h->codes, codes, ncodes * sizeof(int));
    h->ncodes = ncodes;
    h->category = category;
    h->cb = cb;
    h->ctx = ctx;

    /* In the table first: PMIx may deliver an event to the registration
     * below before it returns (an event it kept for the codes), and a
     * dispatcher on another thread may handle it at once. */
    pthread_mutex_lock(&job->hdlr_lock);
    if (job->nhdlrs == job->cap_hdlrs) {
        size_t ncap = job->cap_hdlrs ? 2 * job->cap_hdlrs : 16;
        struct pmx_handler **n = realloc(job->hdlrs, ncap * sizeof(*n));
        if (!n) {
            pthread_mutex_unlock(&job->hdlr_lock);
            free(h->codes);
            free(h);
            errno = ENOMEM;
            return PSCOM_ERR_STDERROR;
        }
        job->hdlrs = n;
        job->cap_hdlrs = ncap;
    }
    h->id = job->next_id++;
    job->hdlrs[job->nhdlrs++] = h;
    size_t id = h->id;
    pthread_mutex_unlock(&job->hdlr_lock);

    /* Codes get a PMIx registration of their own, so that events their
     * sender keeps from default handlers reach us too. */
    if (!job->singleton && category != PMX_CAT_DEFAULT && !pmx_server_lost(job)) {
        size_t ref;
        pmix_status_t rc = pmix_register(codes, ncodes, &ref);
        if (rc != PMIX_SUCCESS) {
            pmx_log(job, PMX_LOG_ERROR,
                    "pscom_pmix_event_register: PMIx_Register_event_handler "
                    "for %zu code(s), %s first: %s", ncodes,
                    PMIx_Error_string(codes[0]), PMIx_Error_string(rc));
            /* It stays in the table (a dispatcher may be at its index),
             * never called again, until finalize frees it. */
            pthread_mutex_lock(&job->hdlr_lock);
            h->removed = true;
            pthread_mutex_unlock(&job->hdlr_lock);
            return pmx_err(rc);
        }
        pthread_mutex_lock(&job->hdlr_lock);
        bool removed = h->removed; /* by another thread meanwhile */
        if (!removed) {
            h->pmix_ref = ref;
            h->has_pmix_ref = true;
        }
        pthread_mutex_unlock(&job->hdlr_lock);
        if (removed) give_up_ref(job, ref);
    }
    if (id_p) *id_p = id;
    return PSCOM_SUCCESS;
}

pscom_err_t pscom_pmix_event_deregister(pscom_pmix_job_t *job, size_t id)
{
    bool found = false, had_ref = false;
    size_t ref = 0;

    if (!job) return PSCOM_ERR_INVALID;
    pthread_mutex_lock(&job->hdlr_lock);
    for (size_t i = 0; i < job->nhdlrs; i++) {
        struct pmx_handler *h = job->hdlrs[i];
        if (h->id != id || h->removed) continue;
        h->removed = true;
        found = true;
        had_ref = h->has_pmix_ref;
        ref = h->pmix_ref;
        h->has_pmix_ref = false;
        break;
    }
    pthread_mutex_unlock(&job->hdlr_lock);
    if (!found) return PSCOM_ERR_INVALID;
    if (had_ref) give_up_ref(job, ref);
    return PSCOM_SUCCESS;
}

/* ---------------------------------------------------------------------- */
/* Notify                                                                 */
/* ---------------------------------------------------------------------- */

pscom_err_t pscom_pmix_notify(pscom_pmix_job_t *job, int code,
                              pscom_pmix_range_t range, int rank,
                              const char *text)
{
    pmix_info_t info[2];
    size_t ninfo = 0;
    pmix_proc_t affected;
    pmix_status_t rc;

    if (!job || rank < -1 || rank >= job->size ||
        range < PSCOM_PMIX_RANGE_DEFAULT || range > PSCOM_PMIX_RANGE_GLOBAL)
        return PSCOM_ERR_INVALID;
    /* A singleton is its whole job: every range ends at this process. */
    if (job->singleton ||
        (pmx_server_lost(job) && range == PSCOM_PMIX_RANGE_PROC_LOCAL))
        return pmx_event_local(job, code, rank, text) ? PSCOM_ERR_STDERROR
                                                      : PSCOM_SUCCESS;
    if (!pmx_server_usable(job, "pscom_pmix_notify")) return PSCOM_ERR_STDERROR;

    if (text)
        PMIX_INFO_LOAD(&info[ninfo++], PMIX_EVENT_TEXT_MESSAGE, text, PMIX_STRING);
    /* Also for rank -1, as a process of no valid rank: an event that names
     * no process is taken to be about its source, when its code tells of a
     * peer's failure (source_as_rank). */
    if (rank >= 0)
        pmx_proc(job, rank, &affected);
    else
        PMIX_LOAD_PROCID(&affected, job->me.nspace, PMIX_RANK_UNDEF);
    PMIX_INFO_LOAD(&info[ninfo++], PMIX_EVENT_AFFECTED_PROC, &affected, PMIX_PROC);
    rc = PMIx_Notify_event(code, &job->me,
                           range == PSCOM_PMIX_RANGE_DEFAULT ? PMIX_RANGE_NAMESPACE
                                                             : pmx_range(range),
                           ninfo ? info : NULL, ninfo, NULL, NULL);
    for (size_t i = 0; i < ninfo; i++) PMIX_INFO_DESTRUCT(&info[i]);
    if (rc != PMIX_SUCCESS) {
        pmx_log(job, PMX_LOG_ERROR, "pscom_pmix_notify %s: PMIx_Notify_event: %s",
                PMIx_Error_string(code), PMIx_Error_string(rc));
        return pmx_err(rc);
    }
    return PSCOM_SUCCESS;
}

/* ---------------------------------------------------------------------- */
/* Start and stop                                                         */
/* ---------------------------------------------------------------------- */

int pmx_events_start(pscom_pmix_job_t *job)
{
    int fds[2];

    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC)) {
        pmx_log(job, PMX_LOG_ERROR, "cannot make the event pipe: %s",
                strerror(errno));
        return -1;
    }
    job->pipe_rd = fds[0];
    job->pipe_wr = fds[1];
    if (pscom_plugin_fd_add(job->pipe_rd, EPOLLIN, 0, on_pipe, job)) {
        pmx_log(job, PMX_LOG_ERROR,
                "cannot watch the event pipe in pscom progress");
        close(fds[0]);
        close(fds[1]);
        job->pipe_rd = job->pipe_wr = -1;
        errno = EIO;
        return -1;
    }
    job->fd_watched = true;
    ev_job = job;
    if (job->singleton) return 0;

    int peer_codes[N_PEER_FAILURE + 2];
    size_t n = 0;
    for (size_t i = 0; i < N_PEER_FAILURE; i++) peer_codes[n++] = peer_failure_codes[i];
    peer_codes[n++] = PMIX_ERR_LOST_CONNECTION;
    peer_codes[n++] = PMIX_ERR_UNREACH;
    pmix_status_t rc = pmix_register(peer_codes, n, &job->own_refs[job->nown_refs]);
    if (rc == PMIX_SUCCESS)
        job->nown_refs++;
    else
        pmx_log(job, PMX_LOG_WARN, "PMIx refuses the peer-failure event "
                "handler: %s; failed peers are noticed by the transports only",
                PMIx_Error_string(rc));
    rc = pmix_register(NULL, 0, &job->own_refs[job->nown_refs]);
    if (rc == PMIX_SUCCESS)
        job->nown_refs++;
    else
        pmx_log(job, PMX_LOG_WARN, "PMIx refuses the default event handler: %s",
                PMIx_Error_string(rc));
    return 0;
}

void pmx_events_stop(pscom_pmix_job_t *job)
{
    /* From now on our PMIx handlers pass every event on at once. */
    pthread_mutex_lock(&job->evq_lock);
    job->stopping = true;
    pthread_mutex_unlock(&job->evq_lock);
    /* Once the descriptor is out of pscom's table (under pscom's lock) no
     * other thread's pscom progress is dispatching; pscom_pmix_progress
     * must not overlap finalize. A handler of this thread may be running
     * (finalize from a handler: pmx_dispatching). */
    if (job->fd_watched) pscom_plugin_fd_del(job->pipe_rd);
    job->fd_watched = false;
    pthread_mutex_lock(&job->hdlr_lock);
    for (size_t i = 0; i < job->nhdlrs; i++) job->hdlrs[i]->removed = true;
    pthread_mutex_unlock(&job->hdlr_lock);

    /* Every PMIx chain we hold is closed before any registration of ours
     * is given up: OpenPMIx reads the registration's handler object after
     * the cbfunc, and its deregistration frees it. */
    pthread_mutex_lock(&job->evq_lock);
    struct pmx_event *running = job->running, *ev;
    struct pmx_event *queued = job->evq_head;
    job->evq_head = job->evq_tail = NULL;
    pthread_mutex_unlock(&job->evq_lock);
    while ((ev = queued)) {
        queued = ev->next;
        if (ev->cbfunc)
            ev->cbfunc(PMIX_EVENT_NO_ACTION_TAKEN, NULL, 0, NULL, NULL,
                       ev->cbdata);
        event_free(ev);
    }
    if (running && running->cbfunc) {
        /* Its handler finalizes: what the chain came to so far. */
        running->cbfunc(running->status, NULL, 0, NULL, NULL,
                        running->cbdata);
        running->cbfunc = NULL;
    }

    if (!job->singleton) {
        for (size_t i = 0; i < job->nown_refs; i++)
            deregister_ref(job, job->own_refs[i]);
        job->nown_refs = 0;
        /* No other thread changes the table now (finalize owns the job). */
        for (size_t i = 0; i < job->nhdlrs; i++) {
            struct pmx_handler *h = job->hdlrs[i];
            if (!h->has_pmix_ref) continue;
            h->has_pmix_ref = false;
            deregister_ref(job, h->pmix_ref);
        }
        for (size_t i = 0; i < job->nclosing; i++)
            if (job->closing[i].deferred) deregister_ref(job, job->closing[i].ref);
    }
    job->nclosing = 0;
    /* Every deregistration is done: no PMIx handler of ours runs or will
     * run, so the pipe can go. */
    ev_job = NULL;
    if (job->pipe_rd >= 0) close(job->pipe_rd);
    if (job->pipe_wr >= 0) close(job->pipe_wr);
    job->pipe_rd = job->pipe_wr = -1;
}
