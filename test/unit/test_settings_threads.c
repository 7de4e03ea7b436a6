/*
 * Public calls that read or change settings, from two threads at once:
 * pscom_set_debug while another thread logs (every diagnostic reads the
 * level without the library lock), and pscom_env_get_dir, which keeps the
 * strings it allocates in one growing table. The assertions check the
 * outcome in every build; the races themselves fail only under
 * ThreadSanitizer (the build of packaging/test.sh).
 */
#include "pscom.h"
#include "pscom_plugin.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define ROUNDS 20000
#define DIR_CALLS 500

static int started, stop;

static void *logging_thread(void *arg)
{
    unsigned long *seen = arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        /* Above any level the other thread sets: checked, never printed. */
        pscom_plugin_log(6, "settings_threads: must not be printed");
        if (pscom_plugin_log_level() > 1) (*seen)++;
        __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void debug_level_while_another_thread_logs(void **state)
{
    (void)state;
    assert_int_equal(pscom_init_thread(PSCOM_VERSION), PSCOM_SUCCESS);
    unsigned long above = 0;
    pthread_t th;
    pscom_set_debug(1); /* whatever PSP_DEBUG says */
    assert_int_equal(pthread_create(&th, NULL, logging_thread, &above), 0);
    /* Both at work at the same time. */
    while (!__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        ;
    for (int i = 0; i < ROUNDS; i++) pscom_set_debug(i & 1);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    /* The levels set were 0 and 1 only; the last one stays. */
    assert_int_equal(above, 0);
    assert_int_equal(pscom_plugin_log_level(), (ROUNDS - 1) & 1);
    pscom_set_debug(3);
    assert_int_equal(pscom_plugin_log_level(), 3);
    pscom_set_debug(1);
}

struct dir_reader {
    const char *name;
    const char *want;
    int wrong;
};

static void *dir_thread(void *arg)
{
    struct dir_reader *r = arg;
    for (int i = 0; i < DIR_CALLS; i++) {
        char *val = NULL;
        pscom_env_get_dir(&val, r->name);
        if (!val || strcmp(val, r->want)) r->wrong++;
    }
    return NULL;
}

static void env_get_dir_from_two_threads(void **state)
{
    (void)state;
    /* Without a trailing '/': every call allocates "...dir/" and keeps it. */
    assert_int_equal(setenv("PSP_TEST_DIR_A", "/tmp/settings_a", 1), 0);
    assert_int_equal(setenv("PSP_TEST_DIR_B", "/var/settings_b", 1), 0);
    struct dir_reader a = {"PSP_TEST_DIR_A", "/tmp/settings_a/", 0};
    struct dir_reader b = {"PSP_TEST_DIR_B", "/var/settings_b/", 0};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, dir_thread, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, dir_thread, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.wrong, 0);
    assert_int_equal(b.wrong, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(debug_level_while_another_thread_logs),
        cmocka_unit_test(env_get_dir_from_two_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
