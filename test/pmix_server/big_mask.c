/*
 * pscom_run on a host with more CPUs than a cpu_set_t holds (1024): the
 * kernel refuses a sched_getaffinity mask shorter than its CPU count with
 * EINVAL. Linked into pscom_run's objects as pscom_run_bigmask, with
 * -Wl,--wrap=sched_getaffinity,--wrap=sched_setaffinity, so that only
 * pscom_run's own calls see this (its children bind themselves between
 * fork and exec, then run other programs): a mask for fewer than
 * BIG_MASK_CPUS CPUs is refused as such a kernel refuses it (here also in
 * sched_setaffinity, which the kernel would take, so that a bind with a
 * cpu_set_t fails); a longer one gets the real call. run_case.py
 * (bind_to_core) checks that --bind-to still binds every process where it
 * belongs.
 */
#include <errno.h>
#include <sched.h>
#include <sys/types.h>

#define BIG_MASK_CPUS 4096

int __wrap_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set);
int __real_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set);
int __wrap_sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *set);
int __real_sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *set);

static int too_short(size_t size)
{
    if (size >= CPU_ALLOC_SIZE(BIG_MASK_CPUS)) return 0;
    errno = EINVAL;
    return 1;
}

int __wrap_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set)
{
    return too_short(size) ? -1 : __real_sched_getaffinity(pid, size, set);
}

int __wrap_sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *set)
{
    return too_short(size) ? -1 : __real_sched_setaffinity(pid, size, set);
}
