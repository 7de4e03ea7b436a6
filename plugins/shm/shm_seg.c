/*
 * Shared-memory segments (see shm_seg.h).
 */
#include "shm_seg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static int create_memfd(struct shm_seg *seg, size_t size)
{
    int fd = memfd_create("pscom-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -errno;
    int e = 0;
    if (ftruncate(fd, (off_t)size) < 0) {
        e = errno;
        goto close_fd;
    }
    /* The peer maps it too: neither side may change its size under the
     * other's feet (a shrunk file would fault on access). */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
        e = errno; /* the peer would refuse it */
        goto close_fd;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        e = errno;
        goto close_fd;
    }
    *seg = (struct shm_seg){SHM_SEG_MEMFD, p, size, fd};
    return 0;

close_fd:
    close(fd);
    return -e;
}

static int create_sysv(struct shm_seg *seg, size_t size)
{
    int id = shmget(IPC_PRIVATE, size, IPC_CREAT | IPC_EXCL | 0600);
    if (id < 0) return -errno;
    void *p = shmat(id, NULL, 0);
    int e = p == (void *)-1 ? errno : 0;
    /* Marked for removal before anyone else learns the id: from here on the
     * kernel frees it with its last user. */
    shmctl(id, IPC_RMID, NULL);
    if (e) return -e;
    *seg = (struct shm_seg){SHM_SEG_SYSV, p, size, id};
    return 0;
}

int shm_seg_create(struct shm_seg *seg, enum shm_seg_kind kind, size_t size)
{
    switch (kind) {
    case SHM_SEG_MEMFD:
        return create_memfd(seg, size);
    case SHM_SEG_SYSV:
        return create_sysv(seg, size);
    default:
        return -EINVAL;
    }
}

static int attach_memfd(struct shm_seg *seg, pid_t pid, int id, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, id);
    /* O_NONBLOCK, O_NOCTTY: whatever the peer named, opening it must not
     * block or take a terminal; it is checked before use. */
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return -errno;
    struct stat st;
    int e = 0;
    if (fstat(fd, &st) < 0) {
        e = errno;
        goto close_fd;
    }
    /* A file the peer could still shrink would fault (SIGBUS) on our
     * next access: only a sealed one is mapped. */
    int seals = fcntl(fd, F_GET_SEALS);
    if (!S_ISREG(st.st_mode) || (size_t)st.st_size < size || seals < 0 ||
        !(seals & F_SEAL_SHRINK)) {
        e = EPROTO;
        goto close_fd;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        e = errno;
        goto close_fd;
    }
    close(fd);
    *seg = (struct shm_seg){SHM_SEG_MEMFD, p, size, -1};
    return 0;

close_fd:
    close(fd);
    return -e;
}

static int attach_sysv(struct shm_seg *seg, pid_t pid, int id, size_t size)
{
    struct shmid_ds ds;
    if (shmctl(id, IPC_STAT, &ds) < 0) return -errno;
    /* The kernel says who created it: the peer, or its process id is not
     * one we may read and write with cross-memory attach. 0: the creator
     * is outside our process namespace (containers that share only IPC),
     * so the id cannot be checked. */
    if (ds.shm_segsz < size || (ds.shm_cpid && ds.shm_cpid != pid))
        return -EPROTO;
    void *p = shmat(id, NULL, 0);
    if (p == (void *)-1) return -errno;
    *seg = (struct shm_seg){SHM_SEG_SYSV, p, size, id};
    return ds.shm_cpid ? 0 : 1;
}

int shm_seg_attach(struct shm_seg *seg, enum shm_seg_kind kind, pid_t pid,
                   int id, size_t size)
{
    if (id < 0 || !size) return -EINVAL;
    switch (kind) {
    case SHM_SEG_MEMFD:
        return attach_memfd(seg, pid, id, size);
    case SHM_SEG_SYSV:
        return attach_sysv(seg, pid, id, size);
    default:
        return -EPROTONOSUPPORT;
    }
}

void shm_seg_handed_over(struct shm_seg *seg)
{
    if (seg->kind == SHM_SEG_MEMFD && seg->id >= 0) {
        close(seg->id);
        seg->id = -1;
    }
}

void shm_seg_release(struct shm_seg *seg)
{
    switch (seg->kind) {
    case SHM_SEG_MEMFD:
        shm_seg_handed_over(seg);
        munmap(seg->base, seg->size);
        break;
    case SHM_SEG_SYSV:
        shmdt(seg->base);
        break;
    default:
        break;
    }
    *seg = (struct shm_seg){SHM_SEG_NONE, NULL, 0, -1};
}

void shm_seg_prefault(struct shm_seg *seg, size_t off, size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !seg->base || off >= seg->size) return;
    size_t start = off & ~((size_t)page - 1);
    size_t end = off + len < seg->size ? off + len : seg->size;
    madvise((char *)seg->base + start, end - start, MADV_POPULATE_WRITE);
}

enum shm_seg_kind shm_seg_kind_parse(const char *name)
{
    if (!name || !strcmp(name, "memfd")) return SHM_SEG_MEMFD;
    if (!strcmp(name, "sysv")) return SHM_SEG_SYSV;
    return SHM_SEG_NONE;
}

const char *shm_seg_kind_str(enum shm_seg_kind kind)
{
    switch (kind) {
    case SHM_SEG_MEMFD:
        return "memfd";
    case SHM_SEG_SYSV:
        return "sysv";
    default:
        return "none";
    }
}
