/*
 * The progress engine: one round polls every plugin that has open
 * connections and, through one epoll set, the file descriptors of listeners,
 * handshakes and stream transports.
 *
 * Latency: a round makes no system call when only plugins that poll memory
 * (or read their sockets directly) are busy. The epoll set is asked on every
 * round while a "hot" descriptor (a handshake, a transport waiting to write)
 * is registered with events, and only every COLD_ROUNDS-th round otherwise,
 * so an idle listener costs next to nothing per round (a system call takes
 * about as long as ten idle rounds over shared memory).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

/* Rounds between two looks at descriptors without a hot one (a power of
 * two): listeners, and sockets watched only for their peer's end. */
#define COLD_ROUNDS 512

struct ufd {
    pscom_plugin_fd_cb_t cb; /* NULL: slot unused */
    void *arg;
    uint32_t events;
    bool hot;
    uint32_t gen; /* counts the registrations of this descriptor number */
};

/* An event names its registration, not only the descriptor: a callback
 * (or the progress one runs inside it) may remove a descriptor and
 * register a new one of the same number while events of the old one wait
 * later in the batch; they must not reach the new one's callback (a hang-up
 * of the old would fail a healthy connection). */
static uint64_t ev_key(int fd, uint32_t gen)
{
    return (uint64_t)gen << 32 | (uint32_t)fd;
}

static int epfd = -1;
static struct ufd *ufds;
static int ufd_cap;
static unsigned hot_count;

static int ensure_epoll(void)
{
    if (epfd >= 0) return 0;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
        psc_err("epoll_create1: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int ensure_slot(int fd)
{
    if (fd < ufd_cap) return 0;
    int cap = ufd_cap ? ufd_cap : 64;
    while (cap <= fd) cap *= 2;
    struct ufd *n = realloc(ufds, cap * sizeof(*n));
    if (!n) return -1;
    memset(n + ufd_cap, 0, (cap - ufd_cap) * sizeof(*n));
    ufds = n;
    ufd_cap = cap;
    return 0;
}

static void hot_update(struct ufd *u, bool was)
{
    bool now = u->cb && u->hot && u->events;
    if (was && !now) hot_count--;
    if (!was && now) hot_count++;
}

static bool is_hot(const struct ufd *u)
{
    return u->cb && u->hot && u->events;
}

/* The table is the lock holder's: libpscom_pmix adds and removes its
 * descriptor from the application's thread, outside any API call, while
 * another thread's wait may be dispatching. */
static int fd_add(int fd, uint32_t events, int hot, pscom_plugin_fd_cb_t cb,
                  void *arg)
{
    if (fd < 0 || !cb || ensure_epoll() || ensure_slot(fd)) return -1;
    struct ufd *u = &ufds[fd];
    if (u->cb) {
        psc_err("internal: file descriptor %d registered twice", fd);
        return -1;
    }
    uint32_t gen = u->gen + 1;
    struct epoll_event ev = {.events = events, .data.u64 = ev_key(fd, gen)};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        psc_err("epoll_ctl(ADD, fd %d): %s", fd, strerror(errno));
        return -1;
    }
    *u = (struct ufd){
        .cb = cb, .arg = arg, .events = events, .hot = hot, .gen = gen};
    hot_update(u, false);
    return 0;
}

int pscom_plugin_fd_add(int fd, uint32_t events, int hot,
                        pscom_plugin_fd_cb_t cb, void *arg)
{
    psc_lock();
    int ret = fd_add(fd, events, hot, cb, arg);
    psc_unlock();
    return ret;
}

static int fd_mod(int fd, uint32_t events)
{
    if (fd < 0 || fd >= ufd_cap || !ufds[fd].cb) return -1;
    struct ufd *u = &ufds[fd];
    if (u->events == events) return 0;
    struct epoll_event ev = {.events = events, .data.u64 = ev_key(fd, u->gen)};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0) {
        psc_err("epoll_ctl(MOD, fd %d): %s", fd, strerror(errno));
        return -1;
    }
    bool was = is_hot(u);
    u->events = events;
    hot_update(u, was);
    return 0;
}

int pscom_plugin_fd_mod(int fd, uint32_t events)
{
    psc_lock();
    int ret = fd_mod(fd, events);
    psc_unlock();
    return ret;
}

void pscom_plugin_fd_del(int fd)
{
    psc_lock();
    if (fd >= 0 && fd < ufd_cap && ufds[fd].cb) {
        struct ufd *u = &ufds[fd];
        bool was = is_hot(u);
        epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
        u->cb = NULL;
        hot_update(u, was);
        u->events = 0;
    }
    psc_unlock();
}

/* Wait at most timeout_ms for ready descriptors and run their callbacks;
 * 1 when there were some. */
static int dispatch_fds(int timeout_ms)
{
    struct epoll_event ev[64];
    int n = epoll_wait(epfd, ev, 64, timeout_ms);
    psc_hold();
    for (int i = 0; i < n; i++) {
        int fd = (int)(uint32_t)ev[i].data.u64;
        uint32_t gen = (uint32_t)(ev[i].data.u64 >> 32);
        /* An earlier callback of this batch may have removed it, and
         * maybe registered another descriptor of that number. */
        if (fd >= ufd_cap || !ufds[fd].cb || ufds[fd].gen != gen) continue;
        /* Nor what it asks no longer (an earlier callback's fd_mod). */
        uint32_t events =
            ev[i].events & (ufds[fd].events | EPOLLERR | EPOLLHUP);
        if (events) ufds[fd].cb(fd, events, ufds[fd].arg);
    }
    psc_unhold();
    return n > 0;
}

/* Call the progress op of every plugin with open connections (in line:
 * this runs on every round and poll of every wait); 1 when one made
 * progress. */
static inline int poll_plugins(void)
{
    int did = 0;
    psc_hold();
    for (unsigned i = 0; i < psc_active.n; i++) did |= psc_active.progress[i]();
    psc_unhold();
    return did;
}

/* Rounds in a row that only ran what posts completed (psc_progress). */
#define DEFERRED_ONLY_MAX 8
static unsigned deferred_only;

int psc_progress_work(void)
{
    int did;

    psc_enter();
    psc_ctx.held_sent = false; /* the caller had control: nothing is cut
                                * for what it already saw */
    /* What a post completed (psc_unhold_later) makes a round of its own:
     * the caller sees those completions before anything new arrives, as
     * when they had run at the end of the post. ParaStation MPI needs
     * that: its MPI_Test and MPI_Wait look at a request before they call
     * pscom, and a partitioned send's next clear-to-send message, handled
     * in the same round as the sends that end the current round, would
     * find no MPI_Start for it yet. Not more than DEFERRED_ONLY_MAX such
     * rounds in a row: a program that posts a send before every test
     * must still get its messages read. */
    if (deferred_only < DEFERRED_ONLY_MAX && psc_run_deferred()) {
        deferred_only++;
        psc_leave();
        return 1;
    }
    deferred_only = 0;
    psc_ctx.round++;
    did = psc_run_deferred();
    did |= poll_plugins();
    if (epfd >= 0 && (hot_count || (psc_ctx.round & (COLD_ROUNDS - 1)) == 0))
        did |= dispatch_fds(0);
    if ((psc_ctx.round & 1023) == 0) psc_precon_check_timeouts();
    psc_leave();
    return did;
}

int psc_progress(void)
{
    int did = psc_progress_work();
    /* Callbacks cut off wait for the next round: no rest before it. */
    return did | psc_ctx.held_cut;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

uint64_t psc_now_ms(void)
{
    return now_us() / 1000;
}

/* Longest sleep of a waiting process in one go: timers (connection
 * retries and timeouts, a closing wait's deadline) are checked after it. */
#define SLEEP_MAX_MS 10

/* Idle rounds after which a wait on an oversubscribed node rests. */
#define OVERSUB_IDLE_ROUNDS 16
/* Idle rounds after which a wait starts to time its spinning, and between
 * two looks at the clock then: a round of an idle shared-memory poll costs
 * tens of nanoseconds, and reading the clock in every short wait (a
 * message's round trip) would cost a few percent of it. */
#define SPIN_CLOCK_ROUNDS 256

/* Sleep until a descriptor is ready, at most SLEEP_MAX_MS, and run the
 * callbacks of the ready ones, when every plugin with open connections
 * can be woken that way. -1 when it could not sleep, else 1 when
 * descriptors were ready, 0 when the time ran out. */
static int sleep_on_fds(void)
{
    if (epfd < 0 || psc_ctx.threaded || !psc_settings.wait_sleep ||
        !psc_plugins_wait_arm())
        return -1;
    psc_enter();
    int woken = dispatch_fds(SLEEP_MAX_MS);
    /* On an oversubscribed node the next sleep follows soon: the plugins
     * stay armed (for tcp: every socket in the epoll set) rather than
     * paying a few system calls per sleep to disarm and arm again. */
    if (!psc_oversubscribed()) psc_plugins_wait_disarm();
    psc_precon_check_timeouts();
    psc_leave();
    return woken;
}

/* Idle polls or rounds in a row after which a busy wait calls
 * psc_cpu_relax after each further idle one, while every plugin with
 * connections asks for it (PSCOM_PLUGIN_SPIN_RELAX). Not at once:
 * streaming over UCX shared memory lost 5% with a pause after every idle
 * poll, and nothing with this (doc/architecture.md). */
#define RELAX_AFTER 3

static inline void relax_when_idle(unsigned idle)
{
    if (idle >= RELAX_AFTER && psc_active.relax) psc_cpu_relax();
}

/* A waiting loop: busy polling costs nothing while a core is ours, but
 * with more processes than cores the peer we wait for may need this core.
 * So a wait that has made no progress for PSP_WAIT_SPIN microseconds
 * rests: it sleeps on the descriptors where every transport in use allows
 * that, else it yields the CPU on every round, until a round makes
 * progress. When this node runs more of our processes than it has CPUs
 * (psc_oversubscribed), a wait rests after OVERSUB_IDLE_ROUNDS idle rounds:
 * every microsecond spent polling is one the peer cannot run. */
struct wait {
    unsigned idle;     /* rounds without progress */
    bool resting;
    uint64_t spin_end; /* µs: rest from then on */
};

/* Between two rounds of progress, given whether the last one did
 * something; also lets other threads have the lock. 1 when it slept and
 * ran the callbacks of ready descriptors: they may have done anything a
 * round of progress does (read a message, accepted a connection). */
static int wait_step(struct wait *w, int did)
{
    int woken = 0;
    if (did) {
        w->idle = 0;
        w->resting = false;
    } else if (!w->resting) {
        ++w->idle;
        if (w->idle == OVERSUB_IDLE_ROUNDS && psc_oversubscribed())
            w->resting = true;
        else if (w->idle == SPIN_CLOCK_ROUNDS)
            w->spin_end = now_us() + psc_settings.wait_spin_us;
        else if (w->idle % SPIN_CLOCK_ROUNDS == 0 && now_us() >= w->spin_end)
            w->resting = true;
    }
    if (w->resting) {
        int slept = sleep_on_fds();
        if (slept > 0) {
            /* Poll again for a while: the answer to what woke us often
             * follows soon. */
            w->idle = 0;
            w->resting = false;
            woken = 1;
        } else if (slept < 0) {
            sched_yield();
        }
    } else if (psc_settings.sched_yield) {
        sched_yield();
    } else {
        relax_when_idle(w->idle);
    }
    if (psc_ctx.threaded) {
        psc_unlock();
        psc_lock_handoff();
        psc_lock();
    }
    return woken;
}

/* Polls of a busy wait between two full rounds, when only one plugin has
 * connections: that plugin's progress op alone. A full round also looks
 * at descriptors and timers and decides on resting; its steps made an
 * idle round over UCX shared memory 40% dearer than UCX's own poll. */
#define POLLS_PER_ROUND 8

/* May a wait poll the one plugin by itself for a while: no descriptor
 * hot, a wait that neither rests nor yields, no other thread, a node not
 * oversubscribed? */
static bool polls_only(const struct wait *w)
{
    return psc_active.n == 1 && !hot_count && !w->resting &&
           !psc_ctx.threaded && !psc_settings.sched_yield &&
           !psc_oversubscribed();
}

/* Up to POLLS_PER_ROUND polls of the plugin with connections; true as
 * soon as cond_fn(arg) holds. *did: a poll did something. */
static bool polls_until(bool (*cond_fn)(void *arg), void *arg, int *did)
{
    bool met = false;
    unsigned idle = 0;
    psc_enter();
    /* A cut in the held callbacks waits for a full round: leave for it. */
    for (int i = 0; i < POLLS_PER_ROUND && !met && !psc_ctx.held_cut; i++) {
        int d = poll_plugins();
        *did |= d;
        met = cond_fn(arg);
        idle = d ? 0 : idle + 1;
        if (!met) relax_when_idle(idle);
    }
    psc_leave();
    return met;
}

int psc_progress_until(bool (*cond_fn)(void *arg), void *arg,
                       unsigned timeout_ms)
{
    uint64_t deadline = timeout_ms ? psc_now_ms() + timeout_ms : 0;
    unsigned n = 0;
    struct wait w = {0};

    while (!cond_fn(arg)) {
        int did = 0;
        if (polls_only(&w) && polls_until(cond_fn, arg, &did)) break;
        int woken = wait_step(&w, did | psc_progress());
        /* Every 256 busy rounds, or after every rest (which may sleep). */
        if (deadline && ((++n & 255) == 0 || w.resting || woken) &&
            psc_now_ms() >= deadline)
            return cond_fn(arg) ? 0 : -1;
    }
    return 0;
}

void psc_progress_wait_event(void)
{
    /* Until a round did something (moved data, accepted a connection),
     * completed a request (also one completed just before its connection
     * ended) or failed a connection, or a sleep ran descriptor callbacks
     * (which may have done any of these). */
    unsigned long events = psc_ctx.events;
    if (!psc_ctx.threaded) {
        struct wait w = {0};
        while (!psc_progress() && psc_ctx.events == events &&
               !wait_step(&w, 0))
            ;
        return;
    }
    /* With threads, what the caller waits for may end outside this wait:
     * another thread's round completed its request before the wait began,
     * or it is no request of ours (ParaStation MPI's generalized requests,
     * which another thread completes). So one round, as with ParaStation
     * pscom, and the caller looks again. Its idle rounds count across its
     * calls, per thread, until anything happens (also in another thread's
     * round), so that a caller that keeps finding nothing still comes to
     * rest and yield the CPU (wait_step). */
    static __thread struct wait idle;
    static __thread unsigned long idle_since;
    if (idle_since != events) {
        idle = (struct wait){0};
        idle_since = events;
    }
    if (psc_progress() || psc_ctx.events != events || wait_step(&idle, 0))
        idle = (struct wait){0};
}

void psc_progress_cleanup(void)
{
    if (epfd >= 0) close(epfd);
    epfd = -1;
    free(ufds);
    ufds = NULL;
    ufd_cap = 0;
    hot_count = 0;
}
