/*
 * A preloaded stand-in for a spin lock in shared memory that a killed
 * process held, for test/check-ofi-stall.sh (LD_PRELOAD).
 *
 * In the process whose id is STALL_SPIN_PID, once STALL_SPIN_AFTER_MS
 * milliseconds have passed since libfabric first took a spin lock there,
 * the next pthread_spin_lock that libfabric calls never returns: it spins,
 * as glibc's does on a lock nobody will release. Before it spins it
 * creates the file STALL_SPIN_MARK, so that the script knows. Every other
 * call (other processes, other callers, before the time) is glibc's.
 *
 * pscom_bench's server learns of its client's death from SIGCHLD, in a
 * handler that runs even while the main thread spins. An MPI rank has no
 * such handler: in that process, handlers for SIGCHLD are not installed.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int from_libfabric(const void *ret)
{
    Dl_info info;
    return dladdr(ret, &info) && info.dli_fname &&
           strstr(info.dli_fname, "libfabric");
}

static int armed_here(void)
{
    const char *pid = getenv("STALL_SPIN_PID");
    return pid && atoi(pid) == (int)getpid();
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    static int (*real)(int, const struct sigaction *, struct sigaction *);
    if (!real)
        real = (int (*)(int, const struct sigaction *,
                        struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
    if (sig == SIGCHLD && act && armed_here()) return real(sig, NULL, old);
    return real(sig, act, old);
}

int pthread_spin_lock(pthread_spinlock_t *lock)
{
    static int (*real)(pthread_spinlock_t *);
    static double first;
    if (!real) real = (int (*)(pthread_spinlock_t *))dlsym(RTLD_NEXT,
                                                           "pthread_spin_lock");
    if (armed_here() && from_libfabric(__builtin_return_address(0))) {
        const char *after = getenv("STALL_SPIN_AFTER_MS");
        double t = now_ms();
        if (!first) first = t;
        if (t - first >= (after ? atof(after) : 0)) {
            const char *mark = getenv("STALL_SPIN_MARK");
            if (mark) close(open(mark, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
            for (;;) __asm__ volatile("" ::: "memory");
        }
    }
    return real(lock);
}
