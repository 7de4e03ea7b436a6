/*
 * Regions that killed processes left in /dev/shm.
 *
 * libfabric's shm provider keeps each endpoint's queues in a file of
 * /dev/shm (16 MiB) and removes it when the endpoint is closed. A process
 * killed with SIGKILL never closes it, and nothing else removes it: RAM
 * lost until the node reboots. The plugin names its endpoints
 * "pscom-<pid>-<8 hex digits>"; the provider adds ":<…>" to make the file
 * name. Each process holds a shared lock (flock) on the file of its own
 * endpoint for as long as it lives, and the next endpoint of the same user
 * removes every file of that name pattern whose owner is gone: its process
 * id does not exist, nobody holds a lock on it, and it is older than a few
 * seconds. The lock covers owners in another pid namespace sharing
 * /dev/shm (their id means nothing here); the age covers an owner between
 * creating the file and taking its lock.
 *
 * Pure POSIX, no libfabric: unit-tested in test/ofi against a temporary
 * directory.
 */
#ifndef PSCOM_OFI_SWEEP_H
#define PSCOM_OFI_SWEEP_H

#include <sys/types.h>
#include <time.h>

/* The directory of the provider's regions (shm_open's). */
#define OFS_DIR "/dev/shm"
/* Files younger than this are left alone (seconds). */
#define OFS_MIN_AGE 5

/* Take a shared lock on the file of dir whose name is `region` followed by
 * ':' (the file of this process's endpoint; the first such file, there is
 * one per endpoint) and keep it: the returned descriptor is to be closed
 * once the endpoint is closed. -1 with errno when there is none (ENOENT)
 * or it cannot be locked. */
int ofs_hold(const char *dir, const char *region);

/* Remove the files of dir named "pscom-<pid>-<8 hex>:…" that belong to
 * uid, are regular files at least min_age seconds old (status change
 * time), whose process does not exist (kill(pid, 0): ESRCH) and that
 * nobody holds a lock on. removed (may be NULL) is told each name removed.
 * Returns how many were removed, or -errno when dir cannot be read. */
int ofs_sweep(const char *dir, uid_t uid, time_t min_age,
              void (*removed)(const char *name, void *arg), void *arg);

/* Parse "pscom-<pid>-<8 hex>:" at the start of name: the pid, or 0 when
 * the name is not one of ours. */
pid_t ofs_region_pid(const char *name);

#endif
