/*
 * pscom_run on a host with more CPUs than a cpu_set_t holds (1024): the
 * kernel refuses a sched_getaffinity mask shorter than its CPU count with
 * EINVAL. Linked into pscom_run's objects as pscom_run_bigmask, with
 * -Wl,--wrap=sched_getaffinity, so that only pscom_run's own calls see
 * this (its children are other programs): a mask for fewer than
 * BIG_MASK_CPUS CPUs is refused as such a kernel refuses it; a longer one
 * gets the real answer. run_case.py (bind_to_core) checks that --bind-to
 * still binds every process where it belongs.
 */
#include <errno.h>
#include <sched.h>
#include <sys/types.h>

#define BIG_MASK_CPUS 4096

int __wrap_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set);
int __real_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set);

int __wrap_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set)
{
    if (size < CPU_ALLOC_SIZE(BIG_MASK_CPUS)) {
        errno = EINVAL;
        return -1;
    }
    return __real_sched_getaffinity(pid, size, set);
}
