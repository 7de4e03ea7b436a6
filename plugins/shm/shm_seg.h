/*
 * Shared-memory segments that cannot outlive their users.
 *
 * A segment is created by one process and mapped by its peer. Whatever
 * happens to either process, nothing is left behind in /dev/shm or in SysV
 * IPC:
 *
 *   memfd (default): memfd_create() gives an anonymous file with no name in
 *     any file system. The peer opens it through /proc/PID/fd/FD (allowed
 *     between processes of the same user; it needs no ptrace attach right)
 *     and maps it. The memory is freed when the last descriptor and mapping
 *     are gone, which the kernel does for a killed process too. There is no
 *     moment at which a kill leaves anything behind.
 *
 *   sysv: shmget(IPC_PRIVATE), shmat(), then shmctl(IPC_RMID) at once, before
 *     the id is given to the peer. Linux lets the peer still attach a segment
 *     marked for removal, and frees it when the last process detaches or
 *     dies. A kill between shmget() and shmctl() (two system calls) leaves
 *     the segment behind; use it where /proc/PID/fd is not reachable.
 *
 * This file is the thin layer over the system calls; unit tests may
 * replace it.
 */
#ifndef SHM_SEG_H
#define SHM_SEG_H

#include <stddef.h>
#include <sys/types.h>

enum shm_seg_kind {
    SHM_SEG_NONE = 0,
    SHM_SEG_MEMFD = 1,
    SHM_SEG_SYSV = 2,
};

struct shm_seg {
    enum shm_seg_kind kind; /* SHM_SEG_NONE: nothing mapped */
    void *base;
    size_t size;
    int id;     /* memfd: our descriptor (-1 once closed); sysv: the shmid */
};

/* Create and map a zeroed segment of `size` bytes (a multiple of the page
 * size). 0, or a negative errno with *seg untouched. The caller owns the
 * mapping and releases it with shm_seg_release(). */
int shm_seg_create(struct shm_seg *seg, enum shm_seg_kind kind, size_t size);

/* Map the segment that process `pid` created and described as (kind, id,
 * size). 0; 1 when it is mapped but whether `pid` created it cannot be
 * known (a SysV segment whose creator is outside our process namespace);
 * or a negative errno (the peer is gone, /proc is not reachable, the
 * segment is smaller than claimed or another process made it, ...). */
int shm_seg_attach(struct shm_seg *seg, enum shm_seg_kind kind, pid_t pid,
                   int id, size_t size);

/* The peer has mapped our segment: drop what only served to find it (the
 * memfd descriptor). */
void shm_seg_handed_over(struct shm_seg *seg);

/* Unmap and close; the segment is freed once the peer has done the same.
 * Safe on a zeroed or already released struct. */
void shm_seg_release(struct shm_seg *seg);

/* Fault in [off, off + len) of the mapping now rather than on the fast
 * path (best effort). */
void shm_seg_prefault(struct shm_seg *seg, size_t off, size_t len);

/* Parse "memfd" / "sysv"; SHM_SEG_NONE for anything else. */
enum shm_seg_kind shm_seg_kind_parse(const char *name);
const char *shm_seg_kind_str(enum shm_seg_kind kind);

#endif
