/*
 * For the cmocka tests of test/ofi: a process id that names no process.
 * Include after <cmocka.h>.
 */
#ifndef TEST_OFI_DEAD_PID_H_
#define TEST_OFI_DEAD_PID_H_

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* The id of a child that ended and was waited for (retried while another
 * process took the id in between). */
static inline pid_t dead_pid(void)
{
    for (int tries = 0; tries < 100; tries++) {
        pid_t c = fork();
        if (c == 0) _exit(0);
        assert_true(c > 0);
        assert_int_equal(waitpid(c, NULL, 0), c);
        if (kill(c, 0) < 0 && errno == ESRCH) return c;
    }
    fail_msg("no dead process id found");
    return 0;
}

#endif /* TEST_OFI_DEAD_PID_H_ */
