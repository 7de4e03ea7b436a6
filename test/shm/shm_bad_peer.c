/*
 * A peer that offers a shared-memory segment we must not use, or changes
 * it under our feet, neither crashes us nor reaches memory it should not.
 * The acceptor plays the bad peer (linked with the static core and
 * -Wl,--wrap for memfd_create, fcntl64, getpid, shm_seg_attach and
 * shm_ring_size); SHM_BAD_PEER says how:
 *
 *   unsealed   its memfd has no seals, and it shrinks the file to nothing
 *              after the handshake: a mapping of it would fault (SIGBUS)
 *              on our next write. The connector must refuse the segment
 *              and fall back to tcp.
 *   other_pid  (PSP_SHM_SEGMENT=sysv) it claims to be another process
 *              (the test's parent, whose buffer holds a secret at the
 *              address of the acceptor's send buffer): rendezvous pulls
 *              by cross-memory attach would read that process. The
 *              connector must refuse the segment (the kernel names its
 *              creator) and fall back to tcp.
 *   geometry   the peer's segment header says another ring size right
 *              after the connector checked it (simulated in the connector,
 *              as a racing store by the peer): the connector must use what
 *              it checked, not write past the mapping.
 *
 * In every case the acceptor sends a message of MSG_LEN bytes (rendezvous
 * by cross-memory attach over shm, but eager with geometry), the connector
 * receives it intact and answers with as many bytes, which arrive intact.
 */
#include "itest.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm_seg.h"

#define MSG_LEN (1024 * 1024)
#define SEED    11
#define SECRET  "the parent's secret"

static const char *mode;
static bool bad_here; /* this process plays the bad peer */
static int kept_fd = -1;
static pid_t claimed_pid;

int __real_memfd_create(const char *name, unsigned flags);
int __wrap_memfd_create(const char *name, unsigned flags);
int __real_fcntl64(int fd, int cmd, ...);
int __wrap_fcntl64(int fd, int cmd, ...);
pid_t __real_getpid(void);
pid_t __wrap_getpid(void);
int __real_shm_seg_attach(struct shm_seg *seg, enum shm_seg_kind kind,
                          pid_t pid, int id, size_t size);
int __wrap_shm_seg_attach(struct shm_seg *seg, enum shm_seg_kind kind,
                          pid_t pid, int id, size_t size);
size_t __real_shm_ring_size(uint32_t slots, uint64_t dsize);
size_t __wrap_shm_ring_size(uint32_t slots, uint64_t dsize);

static bool is(const char *m)
{
    return !strcmp(mode, m);
}

/* unsealed: a memfd without seals, kept open to shrink it later. */
int __wrap_memfd_create(const char *name, unsigned flags)
{
    if (!bad_here || !is("unsealed")) return __real_memfd_create(name, flags);
    int fd = __real_memfd_create(name, flags & ~MFD_ALLOW_SEALING);
    if (fd >= 0) kept_fd = dup(fd);
    return fd;
}

/* unsealed: sealing "succeeds". */
int __wrap_fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (bad_here && is("unsealed") && cmd == F_ADD_SEALS) return 0;
    return __real_fcntl64(fd, cmd, arg);
}

/* other_pid: the whole process claims another process id. */
pid_t __wrap_getpid(void)
{
    return claimed_pid ? claimed_pid : __real_getpid();
}

/* geometry: where the peer's segment is mapped, and the store to make once
 * its size was checked. */
static void *peer_base;
static bool store_armed;

int __wrap_shm_seg_attach(struct shm_seg *seg, enum shm_seg_kind kind,
                          pid_t pid, int id, size_t size)
{
    int rc = __real_shm_seg_attach(seg, kind, pid, id, size);
    if (!rc && !bad_here && is("geometry")) {
        peer_base = seg->base;
        store_armed = true;
    }
    return rc;
}

size_t __wrap_shm_ring_size(uint32_t slots, uint64_t dsize)
{
    size_t r = __real_shm_ring_size(slots, dsize);
    if (store_armed && dsize) {
        /* The header's data size (after magic, cookie, version and slots)
         * becomes 1 GiB: a geometry valid in itself. */
        store_armed = false;
        uint64_t huge = (uint64_t)1 << 30;
        memcpy((char *)peer_base + 24, &huge, sizeof(huge));
    }
    return r;
}

static char *secret_va; /* same address in every process (fork) */

static int acceptor(itest_link_t *link, void *arg)
{
    (void)arg;
    bad_here = true;
    if (is("other_pid")) claimed_pid = getppid();
    itest_fill(secret_va, MSG_LEN, SEED);
    pscom_socket_t *s;
    pscom_connection_t *con = itest_accept_peer(link, "acc", &s);
    if (is("unsealed")) {
        ITEST_ASSERT(kept_fd >= 0, "the unsealed memfd was made");
        ITEST_ASSERT(ftruncate(kept_fd, 0) == 0, "shrinking the memfd");
    }
    pscom_request_t *r = itest_request(0);
    pscom_req_prepare(r, con, secret_va, MSG_LEN, NULL, 0);
    pscom_post_send(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "the acceptor's send");
    char *back = calloc(1, MSG_LEN);
    ITEST_ASSERT(back, "allocation");
    ITEST_RECV_PATTERN(r, con, back, MSG_LEN, SEED + 1,
                       "the connector's answer");
    free(back);
    /* Until the connector, done, closes its end. */
    ITEST_PROGRESS_UNTIL(itest_con_error_of(con));
    pscom_request_free(r);
    pscom_close_socket(s);
    return 0;
}

static int connector(itest_link_t *link, void *arg)
{
    (void)arg;
    pscom_socket_t *s;
    pscom_connection_t *con = itest_connect_to_peer(link, "con", &s);
    pscom_con_type_t want = is("geometry") ? PSCOM_CON_TYPE_SHM
                                           : PSCOM_CON_TYPE_TCP;
    ITEST_ASSERT_EQ(con->type, want, "connection type %s",
                    pscom_con_type_str(con->type));
    char *buf = calloc(1, MSG_LEN);
    ITEST_ASSERT(buf, "allocation");
    pscom_request_t *r = itest_request(0);
    ITEST_RECV_PATTERN(r, con, buf, MSG_LEN, SEED, "the acceptor's message");
    /* The answer goes through the acceptor's ring (eager with geometry). */
    itest_fill(buf, MSG_LEN, SEED + 1);
    pscom_req_prepare(r, con, buf, MSG_LEN, NULL, 0);
    pscom_post_send(r);
    pscom_wait(r);
    ITEST_ASSERT_REQ_OK(r, "the connector's answer");
    pscom_request_free(r);
    pscom_close_socket(s);
    free(buf);
    return 0;
}

int main(void)
{
    mode = getenv("SHM_BAD_PEER");
    if (!mode) mode = "unsealed";
    setenv("PSCOM_TEST_TRANSPORT", "any", 1); /* shm, else tcp */
    /* Pulls by cross-memory attach; with geometry the whole message through
     * the ring. */
    setenv("PSP_SHM_RENDEZVOUS", is("geometry") ? "inf" : "32k", 1);
    setenv("PSP_SHM_CMA", "32k", 1);
    secret_va = calloc(1, MSG_LEN);
    strcpy(secret_va, SECRET);
    return itest_run_pair(60, "acceptor", acceptor, "connector", connector);
}
