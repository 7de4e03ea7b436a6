/*
 * pscom_run: a single-node launcher hosting a PMIx server.
 *
 * The main thread forks the processes, forwards signals, tags output and
 * runs the timers; the PMIx library's progress thread runs the host
 * callbacks in server.c.  One poll() loop waits on a signalfd (SIGCHLD,
 * SIGINT, SIGTERM, ...), a wake pipe written by the callbacks, and the
 * children's output pipes when --tag-output is on.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pmix.h>
#include <pmix_server.h>

#include "cli.h"
#include "launcher.h"
#include "server.h"

extern char **environ;

/* Signals pscom_run handles through its signalfd; the children get default dispositions. */
static const int handled_signals[] = {
    SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
};
/* Of those, the ones that end pscom_run itself once its children are gone
 * (SIGQUIT stays with the signalfd: its default action dumps core). */
static const int ending_signals[] = {SIGINT, SIGTERM, SIGHUP};

static void sigset_of(sigset_t *set, const int *sigs, size_t n)
{
    sigemptyset(set);
    for (size_t i = 0; i < n; i++) sigaddset(set, sigs[i]);
}

#define EXIT_LAUNCH_FAILED 255
#define EXIT_TIMEOUT 124

double psr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;     /* stdout gone (EPIPE): drop the output, keep running */
        }
        buf += n;
        len -= n;
    }
}

void psr_log(const psr_job_t *job, int level, const char *fmt, ...)
{
    if (level > 0 && (!job || job->opts->verbose < level)) return;
    char line[2048] = "pscom_run: ";
    size_t off = strlen(line);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + off, sizeof(line) - off - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    off += (size_t)n < sizeof(line) - off - 1 ? (size_t)n : sizeof(line) - off - 2;
    line[off++] = '\n';
    /* One write per message so that messages of both threads stay whole. */
    write_all(STDERR_FILENO, line, off);
}

void psr_job_wake(psr_job_t *job)
{
    char c = 1;
    ssize_t rc;
    do {
        rc = write(job->wake_fd[1], &c, 1);
    } while (rc < 0 && errno == EINTR);
    /* EAGAIN: the pipe is full, the loop is awake anyway. */
}

psr_proc_t *psr_job_find(psr_job_t *job, const pmix_proc_t *id)
{
    psr_app_t *app = psr_job_find_app(job, id->nspace);
    if (!app || id->rank >= (pmix_rank_t)app->np) return NULL;
    return &job->procs[app->first + id->rank];
}

psr_app_t *psr_job_find_app(psr_job_t *job, const char *nspace)
{
    for (int a = 0; a < job->napps; a++)
        if (strncmp(job->apps[a].nspace, nspace, PMIX_MAX_NSLEN) == 0) return &job->apps[a];
    return NULL;
}

void psr_job_end_locked(psr_job_t *job, int status, double delay)
{
    if (job->exit_status == 0 && status != 0) job->exit_status = status;
    if (job->ending) return;
    job->ending = true;
    job->kill_stage = 0;
    job->kill_at = psr_now() + delay;
    psr_job_wake(job);
}

static void signal_live_locked(psr_job_t *job, int sig)
{
    for (int i = 0; i < job->nprocs; i++) {
        psr_proc_t *p = &job->procs[i];
        if (p->pid > 0 && !p->exited) kill(p->pid, sig);
    }
}

static void write_stdout(void *arg, const char *text, size_t len)
{
    (void)arg;
    write_all(STDOUT_FILENO, text, len);
}

static void write_stderr(void *arg, const char *text, size_t len)
{
    (void)arg;
    write_all(STDERR_FILENO, text, len);
}

/* Into core (a set as large as mine; cleared here): the hardware threads
 * of the core of CPU c (sysfs) that are in mine, or just c. */
static void core_of(int c, const psr_cpuset_t *mine, psr_cpuset_t *core)
{
    char path[96];
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
    FILE *f = fopen(path, "re");
    char *line = NULL;
    size_t cap = 0;
    bool ok = f && getline(&line, &cap, f) > 0 && psr_cpulist_parse(line, core) == 0 &&
              psr_cpuset_isset(core, c);
    free(line);
    if (f) fclose(f);
    if (ok) {
        CPU_AND_S(core->size, core->set, core->set, mine->set);
        return;
    }
    CPU_ZERO_S(core->size, core->set);
    CPU_SET_S(c, core->size, core->set);
}

/* --bind-to: process i gets the i-th core (all its hardware threads that
 * pscom_run may use) or the i-th CPU of pscom_run's own set, round robin.
 * -1 with the reason logged. */
static int assign_cpus(psr_job_t *job)
{
    const char *what = job->opts->bind == PSR_BIND_CORE ? "core" : "hwthread";
    psr_cpuset_t mine, set = { 0 };
    if (psr_cpuset_affinity(&mine) != 0) {
        psr_log(job, 0, "--bind-to %s: cannot read the CPUs pscom_run may use: %s", what,
                strerror(errno));
        return -1;
    }
    int rc = -1;
    int count = CPU_COUNT_S(mine.size, mine.set);
    job->binds = calloc((size_t)count, sizeof(*job->binds));
    if (!job->binds || psr_cpuset_init(&set, mine.ncpus) != 0) goto free_sets;
    for (int c = 0; c < mine.ncpus; c++) {
        if (!psr_cpuset_isset(&mine, c)) continue;
        if (job->opts->bind == PSR_BIND_CORE) {
            core_of(c, &mine, &set);
            /* A core is taken at its lowest thread in mine. */
            int lowest = 0;
            while (!psr_cpuset_isset(&set, lowest)) lowest++;
            if (lowest < c) continue;
        } else {
            CPU_ZERO_S(set.size, set.set);
            CPU_SET_S(c, set.size, set.set);
        }
        if (psr_cpuset_copy(&job->binds[job->nbinds], &set) != 0) goto free_sets;
        job->nbinds++;
    }
    if (job->nbinds < job->nprocs)
        psr_log(job, 0, "--bind-to %s: %d processes on %d %s%s: some share one", what,
                job->nprocs, job->nbinds, what, job->nbinds == 1 ? "" : "s");
    for (int i = 0; i < job->nprocs; i++) job->procs[i].bind = i % job->nbinds;
    rc = 0;
free_sets:
    if (rc) psr_log(job, 0, "--bind-to %s: out of memory", what);
    psr_cpuset_free(&set);
    psr_cpuset_free(&mine);
    return rc;
}

/* Build the job from the parsed options: namespaces, processes, tags. */
static int job_init(psr_job_t *job, const psr_opts_t *opts)
{
    memset(job, 0, sizeof(*job));
    pthread_mutex_init(&job->lock, NULL);
    job->opts = opts;
    job->wake_fd[0] = job->wake_fd[1] = -1;
    job->uid = getuid();
    job->gid = getgid();
    if (gethostname(job->hostname, sizeof(job->hostname) - 1) != 0)
        strcpy(job->hostname, "localhost");

    job->napps = opts->napps;
    job->apps = calloc(opts->napps, sizeof(*job->apps));
    if (!job->apps) return -1;
    for (int a = 0; a < opts->napps; a++) {
        psr_app_t *app = &job->apps[a];
        snprintf(app->nspace, sizeof(app->nspace), "pscom_run.%ld.%d", (long)getpid(), a);
        app->np = opts->apps[a].np;
        app->first = job->nprocs;
        app->argv = calloc(opts->apps[a].argc + 1, sizeof(char *));
        if (!app->argv) return -1;
        memcpy(app->argv, opts->apps[a].argv, opts->apps[a].argc * sizeof(char *));
        job->nprocs += app->np;
    }
    job->procs = calloc(job->nprocs, sizeof(*job->procs));
    if (!job->procs) return -1;
    for (int a = 0; a < job->napps; a++) {
        psr_app_t *app = &job->apps[a];
        for (int r = 0; r < app->np; r++) {
            psr_proc_t *p = &job->procs[app->first + r];
            PMIX_LOAD_PROCID(&p->id, app->nspace, r);
            p->app = a;
            p->out_fd = p->err_fd = -1;
            p->bind = -1;
            if (job->napps == 1) snprintf(p->tag, sizeof(p->tag), "[%d] ", r);
            else snprintf(p->tag, sizeof(p->tag), "[%d:%d] ", a, r);
        }
    }
    snprintf(job->server_id.nspace, sizeof(job->server_id.nspace), "pscom_run.%ld.srv",
             (long)getpid());
    job->server_id.rank = 0;
    return opts->bind != PSR_BIND_NONE && assign_cpus(job) != 0 ? -2 : 0;
}

static int make_tmpdir(psr_job_t *job)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(job->tmpdir, sizeof(job->tmpdir), "%s/pscom_run.XXXXXX", base);
    if (!mkdtemp(job->tmpdir)) {
        psr_log(job, 0, "cannot create a directory for the PMIx server under %s: %s "
                "(set TMPDIR to a writable directory)", base, strerror(errno));
        job->tmpdir[0] = '\0';
        return -1;
    }
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tmpdir(psr_job_t *job)
{
    if (job->tmpdir[0]) nftw(job->tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * Write a message from the child between fork and exec (async-signal-safe).
 * The parts are joined first and written at once: ranks that fail together
 * share stderr, and a single write of less than PIPE_BUF keeps their lines
 * whole.
 */
static void child_say(const char *const parts[], size_t n)
{
    char line[512];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        for (const char *s = parts[i]; *s && len < sizeof(line) - 1; s++) line[len++] = *s;
    }
    if (len == sizeof(line) - 1) line[len - 1] = '\n';
    write_all(STDERR_FILENO, line, len);
}

static void free_env(char **env)
{
    if (!env) return;
    for (char **e = env; *e; e++) free(*e);
    free(env);
}

/* Our environment plus p's PMIx variables, malloc'ed; NULL on failure. */
static char **child_env(psr_job_t *job, psr_proc_t *p)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 1, sizeof(char *));
    if (!env) return NULL;
    for (size_t i = 0; i < n; i++) {
        env[i] = strdup(environ[i]);
        if (!env[i]) {
            free_env(env);
            return NULL;
        }
    }
    if (psr_server_setup_fork(job, p, &env) != 0) {
        free_env(env);
        return NULL;
    }
    return env;
}

static sigset_t child_sigmask;   /* the signal mask children start with */
/* Handled signals that were ignored when pscom_run started (nohup ignores
 * SIGHUP): pscom_run neither reads nor forwards them, and its children
 * inherit them ignored. */
static sigset_t ignored_at_start;

/* Between fork and exec: default signal handling (except for what was
 * ignored at the start), the original mask. */
static void child_signals(void)
{
    for (size_t s = 0; s < sizeof(handled_signals) / sizeof(handled_signals[0]); s++)
        if (!sigismember(&ignored_at_start, handled_signals[s]))
            signal(handled_signals[s], SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &child_sigmask, NULL);
}

static int spawn(psr_job_t *job, psr_proc_t *p)
{
    psr_app_t *app = &job->apps[p->app];
    char **env = NULL;
    int out[2] = { -1, -1 }, err[2] = { -1, -1 };

    /* The environment is built before fork: the child only calls exec. */
    env = child_env(job, p);
    if (!env) goto fail;

    if (job->opts->tag_output) {
        if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
            psr_log(job, 0, "cannot create output pipes for %s rank %u: %s",
                    p->id.nspace, p->id.rank, strerror(errno));
            goto fail;
        }
    }
    int devnull = -1;
    if (app->first + (int)p->id.rank != 0) devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

    pid_t pid = fork();
    if (pid < 0) {
        psr_log(job, 0, "cannot fork %s for rank %u: %s", app->argv[0], p->id.rank,
                strerror(errno));
        if (devnull >= 0) close(devnull);
        goto fail;
    }
    if (pid == 0) {
        child_signals();
        if (out[1] >= 0) {
            dup2(out[1], STDOUT_FILENO);
            dup2(err[1], STDERR_FILENO);
        }
        if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        if (p->bind >= 0 &&
            sched_setaffinity(0, job->binds[p->bind].size, job->binds[p->bind].set) != 0) {
            const char *why = strerrordesc_np(errno);
            const char *msg[] = { "pscom_run: cannot bind '", app->argv[0],
                                  "' to its CPU: ", why ? why : "unknown error", "\n" };
            child_say(msg, sizeof(msg) / sizeof(msg[0]));
            _exit(127);
        }
        execvpe(app->argv[0], app->argv, env);
        int e = errno;
        /* strerror may translate, and take locks another thread held at the fork. */
        const char *why = strerrordesc_np(e);
        const char *msg[] = { "pscom_run: cannot execute '", app->argv[0], "': ",
                              why ? why : "unknown error",
                              e == ENOENT ? " (is it in PATH?)" : "", "\n" };
        child_say(msg, sizeof(msg) / sizeof(msg[0]));
        _exit(127);
    }

    if (devnull >= 0) close(devnull);
    if (out[1] >= 0) {
        close(out[1]);
        close(err[1]);
        p->out_fd = out[0];
        p->err_fd = err[0];
    }
    pthread_mutex_lock(&job->lock);
    p->pid = pid;
    pthread_mutex_unlock(&job->lock);
    free_env(env);
    char cpus[256] = "";
    if (p->bind >= 0 && job->opts->verbose >= 2)
        psr_cpulist_head(&job->binds[p->bind], cpus, sizeof(cpus));
    psr_log(job, 2, "started %s rank %u as pid %ld%s%s", p->id.nspace, p->id.rank, (long)pid,
            p->bind >= 0 ? " on CPUs " : "", cpus);
    return 0;

fail:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0) close(out[i]);
        if (err[i] >= 0) close(err[i]);
    }
    free_env(env);
    return -1;
}

#define STAND_IN_FLAG "--pmix-stand-in"

/*
 * A process that died before PMIx_Init never connected, so the PMIx
 * library still counts it as a participant of every collective over its
 * namespace, and the others would wait forever.  A stand-in connects with
 * its identity and exits at once without PMIx_Finalize: the library then
 * accounts for the loss exactly as for a process that died after
 * PMIx_Init, failing the collectives it was part of.
 */
void psr_stand_in_spawn(psr_job_t *job, psr_proc_t *p)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) {
        psr_log(job, 0, "cannot find my own executable to stand in for %s rank %u: %s",
                p->id.nspace, p->id.rank, strerror(errno));
        return;
    }
    self[len] = '\0';
    char **env = child_env(job, p);
    if (!env) return;
    char *argv[] = { self, STAND_IN_FLAG, NULL };
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    pid_t pid = fork();
    if (pid == 0) {
        child_signals();
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDOUT_FILENO);
        }
        execve(self, argv, env);
        _exit(127);
    }
    if (devnull >= 0) close(devnull);
    free_env(env);
    if (pid < 0)
        psr_log(job, 0, "cannot fork a stand-in for %s rank %u: %s", p->id.nspace, p->id.rank,
                strerror(errno));
    else
        psr_log(job, 1, "%s rank %u never reached PMIx_Init; a stand-in (pid %ld) ends it "
                "for the PMIx server", p->id.nspace, p->id.rank, (long)pid);
}

/* The stand-in itself: connect as the dead process and vanish. */
static int stand_in_main(void)
{
    pmix_proc_t me;
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 1;
    _exit(0);
}

/* Reap every child that has exited. */
static void reap(psr_job_t *job)
{
    for (;;) {
        int wstatus;
        pid_t pid = waitpid(-1, &wstatus, WNOHANG);
        if (pid <= 0) return;
        psr_proc_t *p = NULL;
        pthread_mutex_lock(&job->lock);
        for (int i = 0; i < job->nprocs; i++) {
            if (job->procs[i].pid == pid) {
                p = &job->procs[i];
                p->exited = true;
                p->wstatus = wstatus;
                job->apps[p->app].nexited++;
                break;
            }
        }
        pthread_mutex_unlock(&job->lock);
        if (!p) continue;
        if (WIFSIGNALED(wstatus))
            psr_log(job, 1, "%s rank %u (pid %ld) was killed by signal %d (%s)",
                    p->id.nspace, p->id.rank, (long)pid, WTERMSIG(wstatus),
                    strsignal(WTERMSIG(wstatus)));
        else
            psr_log(job, 1, "%s rank %u (pid %ld) exited with status %d",
                    p->id.nspace, p->id.rank, (long)pid, WEXITSTATUS(wstatus));
        psr_server_proc_exited(job, p);
    }
}

static void on_signal(psr_job_t *job, int sig)
{
    if (sig == SIGCHLD) {
        reap(job);
        return;
    }
    pthread_mutex_lock(&job->lock);
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        signal_live_locked(job, sig);
    } else if (psr_signal_is_copy_locked(job)) {
        /* The same request twice: already forwarded. */
    } else if (job->signalled && job->kill_stage >= 1) {
        /* A second interrupt: the user does not want to wait. */
        psr_log(job, 0, "%s again: killing the job", strsignal(sig));
        signal_live_locked(job, SIGKILL);
        job->kill_stage = 2;
        job->kill_at = 0;
    } else {
        psr_log(job, 1, "forwarding %s to the job", strsignal(sig));
        job->signalled = true;
        job->signalled_at = psr_now();
        job->ending = true;
        signal_live_locked(job, sig);
        job->kill_stage = 1;
        job->kill_at = psr_now() + job->opts->grace + 2;
    }
    pthread_mutex_unlock(&job->lock);
}

/* Advance the SIGTERM/SIGKILL stages of ending a job. */
static void run_kill_stages(psr_job_t *job, double now)
{
    pthread_mutex_lock(&job->lock);
    if (job->ending && job->kill_at > 0 && now >= job->kill_at) {
        if (job->kill_stage == 0) {
            signal_live_locked(job, SIGTERM);
            job->kill_stage = 1;
            job->kill_at = now + job->opts->grace;
        } else if (job->kill_stage == 1) {
            signal_live_locked(job, SIGKILL);
            job->kill_stage = 2;
            job->kill_at = 0;
        }
    }
    pthread_mutex_unlock(&job->lock);
}

static void drain_pipe(psr_job_t *job, psr_proc_t *p, int *fd, psr_linebuf_t *lb, bool is_err)
{
    char buf[65536];
    ssize_t n = read(*fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    psr_line_writer_cb_t w = is_err ? write_stderr : write_stdout;
    if (n > 0) {
        psr_lb_feed(lb, p->tag, buf, n, w, job);
        return;
    }
    psr_lb_flush(lb, p->tag, w, job);
    psr_lb_free(lb);
    close(*fd);
    *fd = -1;
}

static bool all_exited(psr_job_t *job)
{
    bool all = true;
    pthread_mutex_lock(&job->lock);
    for (int i = 0; i < job->nprocs && all; i++)
        all = job->procs[i].pid <= 0 || job->procs[i].exited;
    pthread_mutex_unlock(&job->lock);
    return all;
}

static void main_loop(psr_job_t *job, int sfd, double deadline)
{
    struct pollfd *pfd = calloc(2 + 2 * job->nprocs, sizeof(*pfd));
    psr_proc_t **owner = calloc(2 + 2 * job->nprocs, sizeof(*owner));
    double exited_at = 0;
    if (!pfd || !owner) {
        psr_log(job, 0, "out of memory in the main loop; ending the job");
        pthread_mutex_lock(&job->lock);
        signal_live_locked(job, SIGKILL);
        pthread_mutex_unlock(&job->lock);
        while (!all_exited(job)) {
            sleep(1);
            reap(job);
        }
        free(pfd);
        free(owner);
        return;
    }

    for (;;) {
        double now = psr_now();
        if (deadline > 0 && now >= deadline) {
            pthread_mutex_lock(&job->lock);
            if (!job->ending)
                psr_log(job, 0, "the job ran longer than --timeout %.0f s; ending it",
                        job->opts->timeout);
            psr_job_end_locked(job, EXIT_TIMEOUT, 0);
            pthread_mutex_unlock(&job->lock);
            deadline = 0;
        }
        run_kill_stages(job, now);
        psr_server_tick(job);

        bool done = all_exited(job);
        if (done && exited_at == 0) exited_at = now;

        int n = 0;
        pfd[n].fd = sfd;
        pfd[n++].events = POLLIN;
        pfd[n].fd = job->wake_fd[0];
        pfd[n++].events = POLLIN;
        int npipes = 0;
        for (int i = 0; i < job->nprocs; i++) {
            psr_proc_t *p = &job->procs[i];
            if (p->out_fd >= 0) {
                owner[n] = p;
                pfd[n].fd = p->out_fd;
                pfd[n++].events = POLLIN;
                npipes++;
            }
            if (p->err_fd >= 0) {
                owner[n] = p;
                pfd[n].fd = p->err_fd;
                pfd[n++].events = POLLIN;
                npipes++;
            }
        }
        /* Children gone: wait a little for output still in the pipes, which
         * a grandchild may hold open forever. */
        if (done && (npipes == 0 || now - exited_at > 1.0)) break;

        double next = deadline;
        double t = psr_server_next_deadline(job);
        if (t > 0 && (next == 0 || t < next)) next = t;
        pthread_mutex_lock(&job->lock);
        if (job->kill_at > 0 && (next == 0 || job->kill_at < next)) next = job->kill_at;
        pthread_mutex_unlock(&job->lock);
        if (done && (next == 0 || exited_at + 1.0 < next)) next = exited_at + 1.01;
        int timeout_ms = -1;
        if (next > 0) {
            double ms = (next - now) * 1000.0 + 1;
            timeout_ms = ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
        }

        int rc = poll(pfd, n, timeout_ms);
        if (rc < 0) {
            if (errno == EINTR) continue;
            psr_log(job, 0, "poll failed: %s", strerror(errno));
            break;
        }
        if (pfd[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == sizeof(si)) on_signal(job, si.ssi_signo);
        }
        if (pfd[1].revents & POLLIN) {
            char buf[256];
            while (read(job->wake_fd[0], buf, sizeof(buf)) > 0) {
            }
        }
        for (int i = 2; i < n; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            psr_proc_t *p = owner[i];
            if (pfd[i].fd == p->out_fd) drain_pipe(job, p, &p->out_fd, &p->out_lb, false);
            else if (pfd[i].fd == p->err_fd) drain_pipe(job, p, &p->err_fd, &p->err_lb, true);
        }
    }
    /* Give up on pipes a grandchild still holds. */
    for (int i = 0; i < job->nprocs; i++) {
        psr_proc_t *p = &job->procs[i];
        if (p->out_fd >= 0) {
            psr_lb_flush(&p->out_lb, p->tag, write_stdout, job);
            psr_lb_free(&p->out_lb);
            close(p->out_fd);
            p->out_fd = -1;
        }
        if (p->err_fd >= 0) {
            psr_lb_flush(&p->err_lb, p->tag, write_stderr, job);
            psr_lb_free(&p->err_lb);
            close(p->err_fd);
            p->err_fd = -1;
        }
    }
    free(pfd);
    free(owner);
}

static void job_free(psr_job_t *job)
{
    for (int a = 0; job->apps && a < job->napps; a++) free(job->apps[a].argv);
    free(job->apps);
    free(job->procs);
    for (int b = 0; b < job->nbinds; b++) psr_cpuset_free(&job->binds[b]);
    free(job->binds);
    if (job->wake_fd[0] >= 0) close(job->wake_fd[0]);
    if (job->wake_fd[1] >= 0) close(job->wake_fd[1]);
    pthread_mutex_destroy(&job->lock);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], STAND_IN_FLAG) == 0) return stand_in_main();

    psr_opts_t opts;
    char err[512];
    if (psr_cli_parse(argc, argv, &opts, err, sizeof(err)) != 0) {
        fprintf(stderr, "pscom_run: %s\n", err);
        return EXIT_LAUNCH_FAILED;
    }
    if (opts.help) {
        fputs(psr_usage, stdout);
        return 0;
    }
    if (opts.version) {
        printf("pscom_run (pscom) %s\nPMIx: %s\n", PSR_VERSION, PMIx_Get_version());
        return 0;
    }

    psr_job_t job;
    int status = EXIT_LAUNCH_FAILED;
    int rc = job_init(&job, &opts);
    if (rc != 0) {
        if (rc == -1)
            fprintf(stderr, "pscom_run: out of memory setting up %d processes\n", job.nprocs);
        job_free(&job);
        return EXIT_LAUNCH_FAILED;
    }

    /* Block the handled signals in every thread, including the PMIx progress
     * thread started below; they arrive through the signalfd. */
    sigset_t mask;
    sigset_of(&mask, handled_signals, sizeof(handled_signals) / sizeof(handled_signals[0]));
    sigemptyset(&ignored_at_start);
    for (size_t s = 0; s < sizeof(handled_signals) / sizeof(handled_signals[0]); s++) {
        struct sigaction sa;
        if (handled_signals[s] != SIGCHLD && sigaction(handled_signals[s], NULL, &sa) == 0 &&
            sa.sa_handler == SIG_IGN) {
            sigaddset(&ignored_at_start, handled_signals[s]);
            sigdelset(&mask, handled_signals[s]);
        }
    }
    pthread_sigmask(SIG_BLOCK, &mask, &child_sigmask);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        psr_log(&job, 0, "signalfd failed: %s", strerror(errno));
        goto out_job;
    }
    if (pipe2(job.wake_fd, O_NONBLOCK | O_CLOEXEC) != 0) {
        psr_log(&job, 0, "cannot create the wake-up pipe: %s", strerror(errno));
        goto out_sfd;
    }
    if (make_tmpdir(&job) != 0) goto out_sfd;
    if (psr_server_start(&job) != 0) goto out_tmpdir;

    double start = psr_now();
    for (int i = 0; i < job.nprocs; i++) {
        if (spawn(&job, &job.procs[i]) != 0) {
            pthread_mutex_lock(&job.lock);
            psr_job_end_locked(&job, EXIT_LAUNCH_FAILED, 0);
            pthread_mutex_unlock(&job.lock);
            break;
        }
    }
    main_loop(&job, sfd, opts.timeout > 0 ? start + opts.timeout : 0);

    pthread_mutex_lock(&job.lock);
    status = job.exit_status;
    pthread_mutex_unlock(&job.lock);
    /* Every child is gone: from here on a signal that asks pscom_run to
     * end ends it, whatever the PMIx server's teardown does. */
    sigset_t ending;
    sigset_of(&ending, ending_signals, sizeof(ending_signals) / sizeof(ending_signals[0]));
    for (size_t s = 0; s < sizeof(ending_signals) / sizeof(ending_signals[0]); s++)
        if (sigismember(&ignored_at_start, ending_signals[s])) sigdelset(&ending, ending_signals[s]);
    int stopped = psr_server_stop(&job, sfd, &ending);
    if (stopped != 0) {
        remove_tmpdir(&job);
        fflush(NULL);
        if (stopped > 0) {
            /* Ended by the signal (default action), as its sender expects. */
            pthread_sigmask(SIG_UNBLOCK, &ending, NULL);
            raise(stopped);
        }
        _exit(status);
    }
out_tmpdir:
    remove_tmpdir(&job);
out_sfd:
    close(sfd);
out_job:
    job_free(&job);
    psr_opts_free(&opts);
    return status;
}
