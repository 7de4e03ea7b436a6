/*
 * PSP_SIGQUIT=1: a SIGQUIT makes the process print the library's state, so
 * that a user can see what a hung job waits for without ending it.
 *
 * The handler only writes a byte to a pipe (both ends
 * non-blocking and close-on-exec). The pipe's read end is a cold
 * descriptor of the progress engine, so the dump runs in a round of
 * progress, in a normal context and with the library's lock held: at once
 * in a process that waits inside pscom (the usual deadlock), not before
 * the next call into pscom in one that never calls it.
 *
 * Previous handlers: an application's own handler (neither SIG_DFL nor
 * SIG_IGN) is called after ours, with the arguments the signal came with,
 * so that it keeps working as before; it may end the process before the
 * dump has run. Without one, the process goes on running (SIG_DFL would
 * have ended it with a core file, SIG_IGN ignored the signal). The
 * handler stays until the process ends; an application that installs its
 * own SIGQUIT handler after pscom_init replaces it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core.h"

static int wake[2] = {-1, -1};       /* the pipe: read end, write end */
static pid_t owner;                  /* the process that installed it */
static struct sigaction previous;    /* set before ours is installed */

/* Async-signal-safe: getpid, write, sigaction, raise, and the previous
 * handler. */
static void on_sigquit(int sig, siginfo_t *info, void *uctx)
{
    int saved = errno;
    /* A forked child shares the pipe with its parent: its signal is not
     * the parent's to answer. It gets what it had before pscom (the
     * default ends it with a core file, as without PSP_SIGQUIT). */
    if (getpid() != owner) {
        sigaction(SIGQUIT, &previous, NULL);
        raise(SIGQUIT); /* delivered when this handler returns */
        errno = saved;
        return;
    }
    (void)!write(wake[1], "q", 1); /* a full pipe asks already */
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) previous.sa_sigaction(sig, info, uctx);
    } else if (previous.sa_handler != SIG_DFL &&
               previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
    }
    errno = saved;
}

/* The read end is ready: in a round of progress, lock held. */
static void on_wake(int fd, uint32_t events, void *arg)
{
    char buf[64];
    bool asked = false;
    (void)events;
    (void)arg;
    /* Drained before the dump: a signal during it asks for another. */
    while (read(fd, buf, sizeof(buf)) > 0) asked = true;
    if (!asked) return;
    psc_dump_state_to_log_locked("SIGQUIT (PSP_SIGQUIT=1)");
}

void psc_sigquit_init(void)
{
    if (!psc_settings.sigquit) return;
    if (pipe2(wake, O_NONBLOCK | O_CLOEXEC)) {
        int e = errno;
        psc_err("PSP_SIGQUIT=1: cannot create the pipe that wakes the "
                "progress engine: %s; SIGQUIT will not print the state%s%s",
                strerror(e), e == EMFILE ? "; " : "",
                e == EMFILE ? psc_fd_limit_hint() : "");
        return;
    }
    if (pscom_plugin_fd_add(wake[0], EPOLLIN, 0, on_wake, NULL)) {
        psc_err("PSP_SIGQUIT=1: cannot add the pipe to the progress "
                "engine's descriptors; SIGQUIT will not print the state");
        goto close_pipe;
    }
    owner = getpid();
    sigaction(SIGQUIT, NULL, &previous);
    struct sigaction sa = {.sa_sigaction = on_sigquit,
                           .sa_flags = SA_SIGINFO | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGQUIT, &sa, NULL)) {
        psc_err("PSP_SIGQUIT=1: cannot install the SIGQUIT handler: %s",
                strerror(errno));
        goto remove_fd;
    }
    psc_debug("PSP_SIGQUIT=1: SIGQUIT prints the state%s",
              previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN
                  ? ""
                  : ", then calls the application's handler");
    return;

remove_fd:
    pscom_plugin_fd_del(wake[0]);
close_pipe:
    close(wake[0]);
    close(wake[1]);
    wake[0] = wake[1] = -1;
}

void psc_dump_state_to_log_locked(const char *why)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);

    if (!m) {
        psc_log_write(PSC_LOG_FATAL, "%s: cannot print the state: %s", why,
                      strerror(errno));
        return;
    }
    psc_dump_state_locked(m);
    if (fclose(m) || !text) {
        psc_log_write(PSC_LOG_FATAL, "%s: cannot print the state: out of "
                      "memory", why);
        free(text);
        return;
    }
    /* One write: the lines of a dump stay together in a shared log. */
    psc_log_write(PSC_LOG_FATAL, "%s: the state of pscom follows\n%s", why,
                  text);
    free(text);
}
