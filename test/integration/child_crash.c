/*
 * A process that crashes is reported at once, as a crash.
 *
 * For each of SIGSEGV (a NULL pointer written to), SIGABRT (abort()),
 * SIGBUS and SIGFPE (raised), a child that has initialised pscom and opened
 * a listening socket crashes. Its wait status must say that it died of that
 * signal (not that it exited, in particular not with ITEST_EXIT_TIMEOUT
 * after its watchdog fired), and what it wrote to stderr must name its
 * role, the step it was in and the signal, once.
 */
#include "itest.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CRASH_STEP "crashing on purpose"

struct crash_case {
    int sig;
    const char *name;
};

static const struct crash_case cases[] = {
    {SIGSEGV, "SIGSEGV"},
    {SIGABRT, "SIGABRT"},
    {SIGBUS, "SIGBUS"},
    {SIGFPE, "SIGFPE"},
};

struct crasher_arg {
    const struct crash_case *c;
    int err_fd; /* the write end of the pipe that takes this child's stderr */
};

static int crasher(itest_link_t *link, void *varg)
{
    struct crasher_arg *arg = varg;
    pscom_socket_t *sock;

    (void)link;
    if (dup2(arg->err_fd, STDERR_FILENO) < 0)
        ITEST_FAIL("dup2(stderr): %s", strerror(errno));
    close(arg->err_fd);
    /* With the library and its plugins loaded, as in a real test. */
    itest_pscom_init();
    sock = itest_open_socket("crasher", 1);
    (void)sock;
    itest_step(CRASH_STEP);
    if (arg->c->sig == SIGSEGV) {
        volatile int *null = NULL;
        *null = 1;
    } else if (arg->c->sig == SIGABRT) {
        abort();
    } else {
        raise(arg->c->sig);
    }
    ITEST_FAIL("still alive after %s", arg->c->name);
}

/* Everything the child wrote to stderr (it has ended: the pipe is at EOF
 * once the orchestrator's own write end is closed). */
static char *read_all_fd(int fd)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    ITEST_ASSERT(buf != NULL, "out of memory");
    for (;;) {
        ssize_t n;
        if (len + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            ITEST_ASSERT(buf != NULL, "out of memory");
        }
        n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) ITEST_FAIL("reading the child's stderr: %s", strerror(errno));
        if (n == 0) break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return buf;
}

/* Lines of text that contain a, b and c. */
static int count_lines_with(const char *text, const char *a, const char *b,
                            const char *c)
{
    int n = 0;
    while (*text) {
        const char *eol = strchr(text, '\n');
        size_t len = eol ? (size_t)(eol - text) : strlen(text);
        char *line = strndup(text, len);
        ITEST_ASSERT(line != NULL, "out of memory");
        if (strstr(line, a) && strstr(line, b) && strstr(line, c)) n++;
        free(line);
        text += len + (eol ? 1 : 0);
    }
    return n;
}

static void check_case(const struct crash_case *c)
{
    itest_child_t child;
    struct crasher_arg arg = {.c = c};
    int fds[2], status;
    char *err, *role;

    itest_step("a child crashing with %s", c->name);
    /* The child's watchdog fires first if the crash turns into a hang. */
    itest_watchdog(ITEST_DEFAULT_TIMEOUT + 15);
    if (pipe(fds) < 0) ITEST_FAIL("pipe(): %s", strerror(errno));
    arg.err_fd = fds[1];
    role = strdup(itest_fmt("crasher %d", (int)(c - cases)));
    ITEST_ASSERT(role != NULL, "out of memory");
    itest_spawn(&child, role, crasher, &arg);
    close(fds[1]);
    err = read_all_fd(fds[0]);
    close(fds[0]);
    status = itest_child_wait(&child);
    itest_note("the child wrote:\n%s", err);

    ITEST_ASSERT(!(WIFEXITED(status) &&
                   WEXITSTATUS(status) == ITEST_EXIT_TIMEOUT),
                 "%s: the crash ended in the watchdog timeout", c->name);
    ITEST_ASSERT(WIFSIGNALED(status),
                 "%s: the child did not die of a signal (wait status 0x%x)",
                 c->name, status);
    ITEST_ASSERT_EQ(WTERMSIG(status), c->sig, "%s: the signal it died of",
                    c->name);
    ITEST_ASSERT_EQ(count_lines_with(err, role, CRASH_STEP, c->name), 1,
                    "%s: lines naming the role, the step and the signal",
                    c->name);
    free(err);
    free(role);
}

int main(void)
{
#if defined(__SANITIZE_ADDRESS__)
    /* Its own handlers catch the crash, print a report and exit(1). */
    puts("child_crash: skipped under AddressSanitizer");
    return 77;
#endif
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_case(&cases[i]);
    itest_note("PASS");
    return 0;
}
