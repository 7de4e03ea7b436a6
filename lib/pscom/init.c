/*
 * Library initialisation and the library context.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core.h"
#include "psc_build.h"

struct psc_ctx psc_ctx = {
    .sockets = PSC_LIST_HEAD_INIT(psc_ctx.sockets),
    .recvq_any = PSC_LIST_HEAD_INIT(psc_ctx.recvq_any),
    .zombies = PSC_LIST_HEAD_INIT(psc_ctx.zombies),
    .closed_socks = PSC_LIST_HEAD_INIT(psc_ctx.closed_socks),
    .sock_watches = PSC_LIST_HEAD_INIT(psc_ctx.sock_watches),
    .dead = PSC_LIST_HEAD_INIT(psc_ctx.dead),
    .precons = PSC_LIST_HEAD_INIT(psc_ctx.precons),
    .held = PSC_LIST_HEAD_INIT(psc_ctx.held),
    .spare_fd = -1,
};

/* A program built for major M and minor m runs on a library of major M and
 * minor >= m; a program that wants CUDA needs a CUDA-aware library. */
static pscom_err_t version_check(int version)
{
    int cuda, major, minor;
    PSCOM_VERSION_SPLIT(version, cuda, major, minor);
    if (major != PSCOM_ABI_VERSION_MAJOR || minor > PSCOM_ABI_VERSION_MINOR ||
        (cuda && !PSCOM_ABI_CUDA_SUPPORT)) {
        psc_err("pscom_init: the program was built for pscom ABI %d.%d%s, "
                "this library (%s) provides ABI %d.%d%s; rebuild the program "
                "against this library's pscom.h",
                major, minor, cuda ? " with CUDA" : "", PSC_VERSION_STRING,
                PSCOM_ABI_VERSION_MAJOR, PSCOM_ABI_VERSION_MINOR,
                PSCOM_ABI_CUDA_SUPPORT ? " with CUDA" : "");
        return PSCOM_ERR_UNSUPPORTED_VERSION;
    }
    return PSCOM_SUCCESS;
}

static void enable_threads(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&psc_ctx.lock, &attr);
    pthread_mutexattr_destroy(&attr);
    psc_req_cache_drain();
    psc_ctx.threaded = true;
}

/* Every connection costs file descriptors: allow as many as we may. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return;
    if (rl.rlim_cur >= rl.rlim_max) return;
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl))
        psc_debug("cannot raise the open files limit from %llu to %llu: %s",
                  (unsigned long long)old, (unsigned long long)rl.rlim_max,
                  strerror(errno));
    else
        psc_debug("open files limit raised from %llu to %llu",
                  (unsigned long long)old, (unsigned long long)rl.rlim_max);
}

static pid_t init_pid;

/* How long exit() waits for queued sends when PSP_SHUTDOWN_TIMEOUT is 0
 * (unlimited for explicit closes): a program must not hang at exit. */
#define EXIT_FLUSH_MS 10000

/* At exit, as ParaStation pscom does: close every socket (flushing what is
 * queued and waiting for the TCP sockets to end gracefully, together within
 * PSP_SHUTDOWN_TIMEOUT or EXIT_FLUSH_MS) and let the plugins
 * release their resources. Not in a forked child (the connections are its
 * parent's), not from inside the library (exit() in a callback), and not
 * while another thread holds the library. */
static void at_exit(void)
{
    if (getpid() != init_pid) return;
    if (psc_ctx.threaded && pthread_mutex_trylock(&psc_ctx.lock)) return;
    if (psc_ctx.depth == 0) {
        if (!psc_settings.shutdown_timeout_ms)
            psc_settings.shutdown_timeout_ms = EXIT_FLUSH_MS;
        /* One budget for the flush and the sockets' graceful ends. */
        psc_ctx.exit_until = psc_now_ms() + psc_settings.shutdown_timeout_ms;
        pscom_close_socket(NULL);
        psc_linger_finish(psc_ctx.exit_until);
        psc_plugins_unload();
        psc_req_cache_drain();
    }
    psc_unlock();
}

static void init_once(bool threaded)
{
    if (psc_ctx.initialised) {
        if (threaded && !psc_ctx.threaded) enable_threads();
        return;
    }
    psc_ctx.initialised = true;
    if (threaded) enable_threads();
    init_pid = getpid();
    atexit(at_exit);

    psc_config_core_register();
    raise_fd_limit();
    psc_ctx.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    psc_node_identity_init();
    psc_plugins_load();
    psc_config_check_unknown_filtered(psc_plugins_pending_prefixes(), NULL,
                                      NULL);
    psc_sigquit_init();
    if (psc_settings.debug_param) psc_config_print_params(psc_settings.debug_param);
    if (psc_settings.debug_version)
        psc_log_write(PSC_LOG_ERROR, "pscom %s (ABI %d.%d, API 0x%08x)",
                      PSC_VERSION_STRING, PSCOM_ABI_VERSION_MAJOR,
                      PSCOM_ABI_VERSION_MINOR, PSCOM_API_VERSION);
    __atomic_store_n(&psc_ctx.init_done, true, __ATOMIC_RELEASE);
}

/* Two threads may get here at once: pscom_get_nodeid, pscom_open_socket
 * and libpscom_pmix initialise on first use. Recursive: what init_once
 * calls may find the library not yet initialised and call in again (which
 * then returns at once). */
static pthread_mutex_t init_lock;
static pthread_once_t init_lock_once = PTHREAD_ONCE_INIT;

static void init_lock_create(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&init_lock, &attr);
    pthread_mutexattr_destroy(&attr);
}

static pscom_err_t init(int version, bool threaded)
{
    pscom_err_t ret = version_check(version);
    if (ret) return ret;
    pthread_once(&init_lock_once, init_lock_create);
    pthread_mutex_lock(&init_lock);
    init_once(threaded);
    pthread_mutex_unlock(&init_lock);
    return PSCOM_SUCCESS;
}

void psc_init_on_first_use(void)
{
    if (!__atomic_load_n(&psc_ctx.init_done, __ATOMIC_ACQUIRE))
        pscom_init(PSCOM_VERSION);
}

pscom_err_t pscom_init(int pscom_version)
{
    return init(pscom_version, false);
}

pscom_err_t pscom_init_thread(int pscom_version)
{
    return init(pscom_version, true);
}
