/*
 * Regions that killed processes left in /dev/shm: see ofi_sweep.h.
 */
#include "ofi_sweep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX "pscom-"

pid_t ofs_region_pid(const char *name)
{
    size_t plen = strlen(PREFIX);
    if (strncmp(name, PREFIX, plen)) return 0;
    const char *p = name + plen;
    long pid = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        pid = pid * 10 + (*p - '0');
        if (pid > 0x7fffffffL) return 0;
    }
    if (!digits || pid <= 0 || *p++ != '-') return 0;
    for (int i = 0; i < 8; i++, p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
    return *p == ':' ? (pid_t)pid : 0;
}

static int open_at(int dfd, const char *name)
{
    return openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
}

int ofs_hold(const char *dir, const char *region)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    size_t rlen = strlen(region);
    int fd = -1, err = ENOENT;
    struct dirent *de;
    while (fd < 0 && (de = readdir(d))) {
        if (strncmp(de->d_name, region, rlen) || de->d_name[rlen] != ':')
            continue;
        fd = open_at(dirfd(d), de->d_name);
        if (fd >= 0 && flock(fd, LOCK_SH | LOCK_NB)) {
            err = errno;
            close(fd);
            fd = -1;
        } else if (fd < 0) {
            err = errno;
        }
    }
    closedir(d);
    if (fd < 0) errno = err;
    return fd;
}

/* Is the file (open as fd) one to remove? Its status is checked on the
 * descriptor, so that what was looked at is what is locked. */
static int stale(int fd, pid_t pid, uid_t uid, time_t min_age)
{
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != uid) return 0;
    if (time(NULL) - st.st_ctime < min_age) return 0;
    if (kill(pid, 0) == 0 || errno != ESRCH) return 0; /* alive, or not ours */
    /* A lock held: a live owner whose id means nothing here (another pid
     * namespace), or a sweeper at work. Ours stays taken until the file
     * is gone. */
    return flock(fd, LOCK_EX | LOCK_NB) == 0;
}

int ofs_sweep(const char *dir, uid_t uid, time_t min_age,
              void (*removed)(const char *name, void *arg), void *arg)
{
    DIR *d = opendir(dir);
    if (!d) return -errno;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        pid_t pid = ofs_region_pid(de->d_name);
        if (!pid) continue;
        int fd = open_at(dirfd(d), de->d_name);
        if (fd < 0) continue; /* gone meanwhile, or not readable */
        if (stale(fd, pid, uid, min_age) &&
            unlinkat(dirfd(d), de->d_name, 0) == 0) {
            n++;
            if (removed) removed(de->d_name, arg);
        }
        close(fd);
    }
    closedir(d);
    return n;
}
