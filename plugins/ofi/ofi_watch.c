/*
 * owd: the watchdog over provider calls (see ofi_watch.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ofi_watch.h"

/* Looks in a row that see one call: the first starts the clock, the
 * others come a quarter of the timeout apart. */
#define LOOKS 5
#define GONE_LIST_MAX 1024

owd_mark_t owd_mark;

struct peer {
    const void *key;
    pid_t pid;
    char name[128];
};

/* One watchdog thread's settings and its own stop flag: a thread that
 * owd_stop has let go keeps seeing its flag set, also when owd_start
 * starts the next one before it has ended. */
struct run {
    bool stop; /* guarded by w.mu */
    unsigned timeout_ms;
    owd_stalled_cb_t cb;
    void *arg;
};

static struct {
    pthread_mutex_t mu;  /* guards the fields below up to peers_mu */
    pthread_cond_t cond; /* owd_stop wakes the threads */
    pthread_t thread;
    struct run *cur; /* the running thread's, or NULL (fork_child) */

    pthread_mutex_t peers_mu; /* guards the peer table */
    struct peer *peers;
    unsigned n_peers, cap_peers;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .peers_mu = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_err;

/* Fork: the child must find both locks free, whichever thread held them. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&w.mu);
    pthread_mutex_lock(&w.peers_mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&w.peers_mu);
    pthread_mutex_unlock(&w.mu);
}

static void fork_child(void)
{
    pthread_mutex_unlock(&w.peers_mu);
    pthread_mutex_unlock(&w.mu);
    /* The parent's thread may have waited on it: start afresh. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cond, &ca);
    pthread_condattr_destroy(&ca);
    w.cur = NULL; /* the parent's, which no thread here runs */
    /* Another thread of the parent may have been inside a call: none is
     * here. */
    atomic_store_explicit(&owd_mark.busy, 0, memory_order_relaxed);
}

static void init_once(void)
{
    pthread_condattr_t ca;
    once_err = pthread_condattr_init(&ca);
    if (once_err) return;
    once_err = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!once_err) once_err = pthread_cond_init(&w.cond, &ca);
    pthread_condattr_destroy(&ca);
    if (!once_err) once_err = pthread_atfork(fork_prepare, fork_parent,
                                             fork_child);
}

static struct timespec mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
}

static double seconds_between(struct timespec a, struct timespec b)
{
    return (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
}

static double cpu_now(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t)) return -1;
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Whether process pid has ended: no such process, or a zombie not yet
 * waited for. Reads /proc without allocating. */
static bool process_ended(pid_t pid)
{
    char path[32], buf[128];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    /* Not in /proc: gone, unless /proc hides it (hidepid). */
    if (fd < 0) return kill(pid, 0) < 0 && errno == ESRCH;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    /* "pid (comm) S ...": the name may hold ')', the fields after not. */
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Fill r's peer fields, with the names of ended peers in list. */
static void peers_look(owd_report_t *r, char *list, size_t cap)
{
    size_t len = 0;
    unsigned listed = 0;
    list[0] = 0;
    pthread_mutex_lock(&w.peers_mu);
    r->peers = w.n_peers;
    r->gone = 0;
    for (unsigned i = 0; i < w.n_peers; i++) {
        const struct peer *p = &w.peers[i];
        if (!process_ended(p->pid)) continue;
        r->gone++;
        /* Room for this entry and for the ", and N more" after it. */
        char one[192];
        int n = snprintf(one, sizeof(one), "%s%s (pid %d)", listed ? "; " : "",
                         p->name, (int)p->pid);
        if (n < 0 || len + (size_t)n + 32 >= cap) continue;
        memcpy(list + len, one, (size_t)n + 1);
        len += (size_t)n;
        listed++;
    }
    pthread_mutex_unlock(&w.peers_mu);
    if (listed < r->gone)
        snprintf(list + len, cap - len, "%sand %u more", listed ? "; " : "",
                 r->gone - listed);
    r->gone_list = list;
}

static void *watch(void *arg)
{
    struct run *run = arg;
    unsigned long seen = 0, reported = 0;
    unsigned looks = 0;
    struct timespec t0 = {0, 0};
    double cpu0 = -1;

    pthread_mutex_lock(&w.mu);
    unsigned tick_ms = run->timeout_ms / (LOOKS - 1);
    if (!tick_ms) tick_ms = 1;
    while (!run->stop) {
        /* From now, not from the last deadline: a process stopped for an
         * hour (SIGSTOP, a debugger) wakes up to one look, not to many. */
        struct timespec next = mono_now();
        next.tv_sec += tick_ms / 1000;
        next.tv_nsec += (long)(tick_ms % 1000) * 1000000L;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        while (!run->stop &&
               pthread_cond_timedwait(&w.cond, &w.mu, &next) != ETIMEDOUT)
            ;
        if (run->stop) break;

        int busy = atomic_load_explicit(&owd_mark.busy, memory_order_acquire);
        unsigned long s =
            atomic_load_explicit(&owd_mark.seq, memory_order_relaxed);
        if (!busy || s == reported) {
            looks = 0;
            continue;
        }
        if (s != seen) {
            seen = s;
            looks = 1;
            t0 = mono_now();
            cpu0 = cpu_now();
            continue;
        }
        if (++looks < LOOKS) continue;

        /* The name is stored after the count (owd_enter): the count read
         * after it is at least the name's, so an unchanged count means
         * the name is no later call's. (That it is not an earlier one's
         * holds on x86; on weakly ordered CPUs a stale name would need
         * stores unseen for the whole timeout.) */
        const char *call =
            atomic_load_explicit(&owd_mark.call, memory_order_acquire);
        if (!atomic_load_explicit(&owd_mark.busy, memory_order_acquire) ||
            atomic_load_explicit(&owd_mark.seq, memory_order_relaxed) != s)
            continue; /* it returned just now */
        reported = s;
        pthread_mutex_unlock(&w.mu);

        char list[GONE_LIST_MAX];
        double cpu1 = cpu_now();
        owd_report_t r = {.call = call ? call : "?",
                          .seconds = seconds_between(t0, mono_now()),
                          .cpu = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1};
        peers_look(&r, list, sizeof(list));
        run->cb(&r, run->arg);

        pthread_mutex_lock(&w.mu);
    }
    pthread_mutex_unlock(&w.mu);
    return NULL;
}

int owd_start(unsigned timeout_ms, owd_stalled_cb_t cb, void *arg)
{
    if (!timeout_ms || !cb) return 0;
    pthread_once(&once, init_once);
    if (once_err) return -once_err;

    pthread_mutex_lock(&w.mu);
    int rc = 0;
    if (!w.cur) {
        struct run *run = calloc(1, sizeof(*run));
        if (!run) {
            rc = -ENOMEM;
        } else {
            *run = (struct run){.timeout_ms = timeout_ms, .cb = cb, .arg = arg};
            rc = -pthread_create(&w.thread, NULL, watch, run);
            if (rc) {
                free(run);
            } else {
                w.cur = run;
            }
        }
    }
    pthread_mutex_unlock(&w.mu);
    return rc;
}

void owd_stop(void)
{
    pthread_mutex_lock(&w.mu);
    struct run *run = w.cur;
    if (!run) {
        pthread_mutex_unlock(&w.mu);
        return;
    }
    run->stop = true;
    w.cur = NULL;
    pthread_t t = w.thread;
    pthread_cond_broadcast(&w.cond);
    pthread_mutex_unlock(&w.mu);
    pthread_join(t, NULL);
    free(run);
}

bool owd_busy(void)
{
    return atomic_load_explicit(&owd_mark.busy, memory_order_acquire);
}

unsigned owd_peer_count(void)
{
    pthread_mutex_lock(&w.peers_mu);
    unsigned n = w.n_peers;
    pthread_mutex_unlock(&w.peers_mu);
    return n;
}

int owd_peer_add(const void *key, pid_t pid, const char *name)
{
    if (pid <= 0) return 0;
    int rc = 0;
    pthread_mutex_lock(&w.peers_mu);
    if (w.n_peers == w.cap_peers) {
        unsigned cap = w.cap_peers ? 2 * w.cap_peers : 16;
        struct peer *p = realloc(w.peers, cap * sizeof(*p));
        if (!p) {
            rc = -ENOMEM;
            goto unlock;
        }
        w.peers = p;
        w.cap_peers = cap;
    }
    struct peer *p = &w.peers[w.n_peers++];
    p->key = key;
    p->pid = pid;
    snprintf(p->name, sizeof(p->name), "%s", name ? name : "?");
unlock:
    pthread_mutex_unlock(&w.peers_mu);
    return rc;
}

void owd_peer_del(const void *key)
{
    pthread_mutex_lock(&w.peers_mu);
    for (unsigned i = 0; i < w.n_peers; i++) {
        if (w.peers[i].key != key) continue;
        w.peers[i] = w.peers[--w.n_peers];
        break;
    }
    pthread_mutex_unlock(&w.peers_mu);
}
