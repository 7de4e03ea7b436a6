/*
 * Unit tests of plugins/ofi/ofi_sweep.c: which files of a directory the
 * sweep of regions left by dead processes removes, and which it must not
 * (a live process's, a locked one, a young one, names and files that are
 * not ours). Runs against a temporary directory, not /dev/shm.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dead_pid.h"
#include "ofi_sweep.h"

static char dir[64];

static void make_file(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    close(fd);
}

static int exists(const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/ofi_sweep.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_region_pid(void **state)
{
    (void)state;
    assert_int_equal(ofs_region_pid("pscom-1234-0123abcd:0:0"), 1234);
    assert_int_equal(ofs_region_pid("pscom-7-ffffffff:"), 7);
    assert_int_equal(ofs_region_pid("pscom-1234-0123abcd"), 0);    /* no ':' */
    assert_int_equal(ofs_region_pid("pscom-1234-0123ABCD:0:0"), 0); /* case */
    assert_int_equal(ofs_region_pid("pscom-1234-0123abc:0:0"), 0);  /* 7 hex */
    assert_int_equal(ofs_region_pid("pscom-1234-0123abcde:0"), 0);  /* 9 hex */
    assert_int_equal(ofs_region_pid("pscom-0-0123abcd:0:0"), 0);
    assert_int_equal(ofs_region_pid("pscom--0123abcd:0:0"), 0);
    assert_int_equal(ofs_region_pid("pscom-99999999999-0123abcd:0"), 0);
    assert_int_equal(ofs_region_pid("fi_shm-1234-0123abcd:0:0"), 0);
    assert_int_equal(ofs_region_pid(""), 0);
}

struct seen {
    int n;
    char names[8][64];
};

static void note(const char *name, void *arg)
{
    struct seen *s = arg;
    if (s->n < 8) snprintf(s->names[s->n], sizeof(s->names[0]), "%s", name);
    s->n++;
}

static void test_sweep(void **state)
{
    (void)state;
    pid_t dead = dead_pid();
    char gone[64], live[64], locked[64], badhex[64], subdir[64], link[64];
    snprintf(gone, sizeof(gone), "pscom-%d-0123abcd:0:0", (int)dead);
    snprintf(live, sizeof(live), "pscom-%d-0123abcd:0:0", (int)getpid());
    snprintf(locked, sizeof(locked), "pscom-%d-89abcdef:0:1", (int)dead);
    snprintf(badhex, sizeof(badhex), "pscom-%d-0123xbcd:0:0", (int)dead);
    snprintf(subdir, sizeof(subdir), "pscom-%d-0123abce:0:0", (int)dead);
    snprintf(link, sizeof(link), "pscom-%d-0123abcf:0:0", (int)dead);
    make_file(gone);
    make_file(live);
    make_file(locked);
    make_file(badhex);
    make_file("unrelated");
    char path[256], target[256];
    snprintf(path, sizeof(path), "%s/%s", dir, subdir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/%s", dir, link);
    snprintf(target, sizeof(target), "%s/unrelated", dir);
    assert_int_equal(symlink(target, path), 0);

    /* A live owner elsewhere (another pid namespace) holds its lock. */
    char region[32];
    snprintf(region, sizeof(region), "pscom-%d-89abcdef", (int)dead);
    int held = ofs_hold(dir, region);
    assert_true(held >= 0);

    /* Too young: nothing goes. */
    struct seen s = {0};
    assert_int_equal(ofs_sweep(dir, getuid(), 3600, note, &s), 0);
    assert_int_equal(s.n, 0);
    assert_true(exists(gone));

    /* Another user's: nothing goes. */
    assert_int_equal(ofs_sweep(dir, getuid() + 1, 0, note, &s), 0);
    assert_true(exists(gone));

    /* Only the dead process's unlocked region. */
    assert_int_equal(ofs_sweep(dir, getuid(), 0, note, &s), 1);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.names[0], gone);
    assert_false(exists(gone));
    assert_true(exists(live));
    assert_true(exists(locked));
    assert_true(exists(badhex));
    assert_true(exists("unrelated"));
    assert_true(exists(subdir));
    assert_true(exists(link));

    /* Once its owner let go of the lock, the region goes too. */
    close(held);
    assert_int_equal(ofs_sweep(dir, getuid(), 0, note, &s), 1);
    assert_string_equal(s.names[1], locked);
    assert_false(exists(locked));
    assert_true(exists(live));
}

static void test_hold(void **state)
{
    (void)state;
    errno = 0;
    assert_int_equal(ofs_hold(dir, "pscom-1-00000000"), -1);
    assert_int_equal(errno, ENOENT);
    /* The prefix must end at the ':': "…abc" is not "…abcd". */
    make_file("pscom-1-0000abcd:0:0");
    assert_int_equal(ofs_hold(dir, "pscom-1-0000abc"), -1);
    int fd = ofs_hold(dir, "pscom-1-0000abcd");
    assert_true(fd >= 0);
    close(fd);
    assert_true(ofs_sweep("/nonexistent/dir", getuid(), 0, NULL, NULL) < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_region_pid),
        cmocka_unit_test_setup_teardown(test_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hold, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
