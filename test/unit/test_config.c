/*
 * The configuration table: value parsing, registration from the
 * environment, parent fallback, unknown-variable warnings, the
 * pscom_env_get_* readers and the printed forms.
 */
#include <limits.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "log.h"
#include "pscom.h"
#include "pscom_plugin.h"

static int v_int;
static unsigned v_uint;
static size_t v_size;
static int v_bool;
static char *v_str;
static char *v_dir;
static unsigned v_child;

static const pscom_config_row_t test_rows[] = {
    {"PSP_TEST_INT", PSCOM_CONFIG_INT, "5", "an int | with a bar", "test",
     NULL, &v_int},
    {"PSP_TEST_UINT", PSCOM_CONFIG_UINT, "10", "an unsigned", "test", NULL,
     &v_uint},
    {"PSP_TEST_SIZE", PSCOM_CONFIG_SIZE, "64k", "a size", "test", NULL,
     &v_size},
    {"PSP_TEST_BOOL", PSCOM_CONFIG_BOOL, "1", "a boolean", "test", NULL,
     &v_bool},
    {"PSP_TEST_STR", PSCOM_CONFIG_STR, NULL, "a <string>", "test", NULL,
     &v_str},
    {"PSP_TEST_DIR", PSCOM_CONFIG_DIR, "/opt/x", "a directory", "test", NULL,
     &v_dir},
    {"PSP_TEST_CHILD", PSCOM_CONFIG_UINT, "3", "falls back to the parent",
     "test", "PSP_TEST_PARENT", &v_child},
};
#define N_TEST_ROWS (sizeof(test_rows) / sizeof(test_rows[0]))

/* ---------------------------------------------------------------------- */
/* Helpers                                                                */
/* ---------------------------------------------------------------------- */

static char log_path[64];

/* Send diagnostics to a fresh temporary file. */
static void log_capture_start(void)
{
    int fd;

    strcpy(log_path, "/tmp/test_config_log.XXXXXX");
    fd = mkstemp(log_path);
    assert_true(fd >= 0);
    close(fd);
    psc_log_open(log_path);
    assert_true(psc_log_stream() != stderr);
}

/* Back to stderr; returns what was logged (free it). */
static char *log_capture_end(void)
{
    FILE *f;
    long n;
    char *buf;

    psc_log_open(NULL);
    f = fopen(log_path, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    unlink(log_path);
    return buf;
}

/* Remove every PSP_* variable, so that the tests see only their own. */
static void clear_psp_environment(void)
{
    for (;;) {
        char **ep;
        char name[256];

        for (ep = environ; *ep; ep++)
            if (strncmp(*ep, "PSP_", 4) == 0) break;
        if (!*ep) return;
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(*ep, "="), *ep);
        unsetenv(name);
    }
}

static int setup(void **state)
{
    clear_psp_environment();
    psc_log_level_set(1);
    return 0;
}

static int teardown(void **state)
{
    clear_psp_environment();
    psc_config_cleanup();
    psc_log_open(NULL);
    psc_log_timing_set(NULL);
    psc_settings.debug_param = 0;
    return 0;
}

/* Parse text for a row of `type` with default `def`. */
static int parse(pscom_config_type_t type, const char *def, const char *text,
                 void *out)
{
    pscom_config_row_t row = {"PSP_X", type, def, "", "test", NULL, out};

    return psc_config_parse(&row, text, out);
}

/* ---------------------------------------------------------------------- */
/* Parsing                                                                */
/* ---------------------------------------------------------------------- */

static void test_parse_int(void **state)
{
    int v;

    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "42", &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "-7", &v), 0);
    assert_int_equal(v, -7);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "+7", &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "0x1f", &v), 0);
    assert_int_equal(v, 31);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "-0X10", &v), 0);
    assert_int_equal(v, -16);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", " 12 ", &v), 0);
    assert_int_equal(v, 12);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "010", &v), 0);
    assert_int_equal(v, 10); /* not octal */
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "2147483647", &v), 0);
    assert_int_equal(v, INT_MAX);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "-2147483648", &v), 0);
    assert_int_equal(v, INT_MIN);

    v = 99;
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "2147483648", &v), -2);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "-2147483649", &v), -2);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "99999999999999999999", &v),
                     -2);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "abc", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "12abc", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "1.5", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "0x", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "--1", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "- 1", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "inf", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_INT, "0", "4k", &v), -1);
    assert_int_equal(v, 99); /* nothing written on failure */
}

static void test_parse_uint(void **state)
{
    unsigned v;

    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "17", &v), 0);
    assert_int_equal(v, 17);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "0x10", &v), 0);
    assert_int_equal(v, 16);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "inf", &v), 0);
    assert_int_equal(v, UINT_MAX);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "INF", &v), 0);
    assert_int_equal(v, UINT_MAX);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "auto", &v), 0);
    assert_int_equal(v, 10);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "4294967295", &v), 0);
    assert_int_equal(v, UINT_MAX);

    v = 99;
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "4294967296", &v), -2);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "-1", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "+1", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "1k", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "ten", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_UINT, "10", "infinite", &v), -1);
    assert_int_equal(v, 99);
}

static void test_parse_size(void **state)
{
    size_t v;

    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "4k", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "4K", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "2m", &v), 0);
    assert_int_equal(v, 2u << 20);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "3G", &v), 0);
    assert_int_equal(v, (size_t)3 << 30);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "0x10k", &v), 0);
    assert_int_equal(v, 16384);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "1000", &v), 0);
    assert_int_equal(v, 1000);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "inf", &v), 0);
    assert_true(v == SIZE_MAX);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "auto", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(
        parse(PSCOM_CONFIG_SIZE, "64k", "18446744073709551615", &v), 0);
    assert_true(v == SIZE_MAX);

    v = 99;
    assert_int_equal(
        parse(PSCOM_CONFIG_SIZE, "64k", "18446744073709551616", &v), -2);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "17179869184G", &v), -2);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "-1", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "4kb", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "4T", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "k", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_SIZE, "64k", "", &v), -1);
    assert_int_equal(v, 99);
}

static void test_parse_bool(void **state)
{
    static const char *const yes[] = {"1", "yes", "YES", "true", "True", "on",
                                      "ON"};
    static const char *const no[] = {"0", "no", "No", "false", "FALSE", "off",
                                     "Off"};
    int v;

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        v = 0;
        assert_int_equal(parse(PSCOM_CONFIG_BOOL, "0", yes[i], &v), 0);
        assert_int_equal(v, 1);
        v = 1;
        assert_int_equal(parse(PSCOM_CONFIG_BOOL, "0", no[i], &v), 0);
        assert_int_equal(v, 0);
    }
    v = 7;
    assert_int_equal(parse(PSCOM_CONFIG_BOOL, "0", "2", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_BOOL, "0", "maybe", &v), -1);
    assert_int_equal(parse(PSCOM_CONFIG_BOOL, "0", "", &v), -1);
    assert_int_equal(v, 7);
}

static void test_parse_strings(void **state)
{
    char text[] = "hello";
    char *s = NULL;

    assert_int_equal(parse(PSCOM_CONFIG_STR, NULL, text, &s), 0);
    assert_string_equal(s, "hello");
    assert_ptr_not_equal(s, text); /* a copy */
    free(s);

    assert_int_equal(parse(PSCOM_CONFIG_STR, NULL, "", &s), 0);
    assert_string_equal(s, "");
    free(s);

    assert_int_equal(parse(PSCOM_CONFIG_DIR, NULL, "/tmp", &s), 0);
    assert_string_equal(s, "/tmp/");
    free(s);
    assert_int_equal(parse(PSCOM_CONFIG_DIR, NULL, "/tmp/", &s), 0);
    assert_string_equal(s, "/tmp/");
    free(s);
    assert_int_equal(parse(PSCOM_CONFIG_DIR, NULL, "", &s), 0);
    assert_string_equal(s, "");
    free(s);
}

/* ---------------------------------------------------------------------- */
/* Registration                                                           */
/* ---------------------------------------------------------------------- */

static void test_register_defaults(void **state)
{
    psc_config_register(test_rows, N_TEST_ROWS);

    assert_int_equal(v_int, 5);
    assert_int_equal(v_uint, 10);
    assert_int_equal(v_size, 65536);
    assert_int_equal(v_bool, 1);
    assert_null(v_str);
    assert_string_equal(v_dir, "/opt/x/");
    assert_int_equal(v_child, 3);
    assert_ptr_equal(psc_config_find("PSP_TEST_INT"), &test_rows[0]);
    assert_null(psc_config_find("PSP_TEST_NOPE"));
    assert_string_equal(psc_config_source(&test_rows[0]), "default");
}

static void test_register_environment(void **state)
{
    char buf[64];

    setenv("PSP_TEST_INT", "-3", 1);
    setenv("PSP_TEST_UINT", "inf", 1);
    setenv("PSP_TEST_SIZE", "2M", 1);
    setenv("PSP_TEST_BOOL", "off", 1);
    setenv("PSP_TEST_STR", "", 1);
    setenv("PSP_TEST_DIR", "/var/lib", 1);
    psc_config_register(test_rows, N_TEST_ROWS);

    assert_int_equal(v_int, -3);
    assert_int_equal(v_uint, UINT_MAX);
    assert_int_equal(v_size, 2 << 20);
    assert_int_equal(v_bool, 0);
    assert_non_null(v_str);
    assert_string_equal(v_str, "");
    assert_string_equal(v_dir, "/var/lib/");
    assert_string_equal(psc_config_source(&test_rows[0]), "environment");
    assert_string_equal(psc_config_source(&test_rows[6]), "default");

    psc_config_value_str(&test_rows[1], buf, sizeof(buf));
    assert_string_equal(buf, "inf");
    psc_config_value_str(&test_rows[2], buf, sizeof(buf));
    assert_string_equal(buf, "2097152");

    /* Reload: back to the default when the variable goes away. */
    unsetenv("PSP_TEST_INT");
    setenv("PSP_TEST_UINT", "auto", 1);
    psc_config_reload();
    assert_int_equal(v_int, 5);
    assert_int_equal(v_uint, 10);
    assert_string_equal(psc_config_source(&test_rows[0]), "default");
}

/* Register the test rows with these values of PSP_TEST_INT, _UINT, _SIZE
 * and _BOOL, none of which may be taken: what was logged (free it). */
static char *register_refused(const char *i, const char *u, const char *z,
                              const char *b)
{
    setenv("PSP_TEST_INT", i, 1);
    setenv("PSP_TEST_UINT", u, 1);
    setenv("PSP_TEST_SIZE", z, 1);
    setenv("PSP_TEST_BOOL", b, 1);
    log_capture_start();
    psc_config_register(test_rows, N_TEST_ROWS);
    char *log = log_capture_end();

    assert_int_equal(v_int, 5);
    assert_int_equal(v_uint, 10);
    assert_int_equal(v_size, 65536);
    assert_int_equal(v_bool, 1);
    assert_string_equal(psc_config_source(&test_rows[0]), "default");
    return log;
}

static void test_register_bad_value_keeps_default(void **state)
{
    char *log = register_refused("12abc", "-1", "4T", "perhaps");

    /* Visible at the default PSP_DEBUG=1, naming variable, text, type and
     * the default kept. */
    assert_non_null(strstr(log, "<pscom:"));
    assert_non_null(strstr(log, "PSP_TEST_INT=\"12abc\" is not an integer"));
    assert_non_null(strstr(log, "keeping the default 5"));
    assert_non_null(strstr(log, "PSP_TEST_UINT=\"-1\" is not an unsigned"));
    assert_non_null(strstr(log, "keeping the default 10"));
    assert_non_null(strstr(log, "PSP_TEST_SIZE=\"4T\" is not a size"));
    assert_non_null(strstr(log, "keeping the default 65536"));
    assert_non_null(strstr(log, "PSP_TEST_BOOL=\"perhaps\" is not a boolean"));
    free(log);
}

/* A number beyond its type is named as such, not as a wrong kind of
 * text. */
static void test_register_too_large_named(void **state)
{
    char *log = register_refused("2147483648", "4294967296", "99999999999G",
                                 "2");

    assert_non_null(strstr(log, "PSP_TEST_INT=\"2147483648\" is out of the "
                                "range of an int"));
    assert_non_null(strstr(log, "PSP_TEST_UINT=\"4294967296\" is out of the "
                                "range of an unsigned int"));
    assert_non_null(strstr(log, "PSP_TEST_SIZE=\"99999999999G\" is out of "
                                "the range of a size"));
    free(log);
}

/* A row's own value that does not parse (empty, as scripts "unset") gives
 * way to its parent, as an unset one does. */
static void test_bad_own_value_reads_parent(void **state)
{
    static const char *const bad[] = {"bad", ""};
    char *log;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("PSP_TEST_CHILD", bad[i], 1);
        setenv("PSP_TEST_PARENT", "9", 1);
        log_capture_start();
        psc_config_register(test_rows, N_TEST_ROWS);
        log = log_capture_end();
        assert_int_equal(v_child, 9);
        assert_string_equal(psc_config_source(&test_rows[6]),
                            "PSP_TEST_PARENT");
        assert_non_null(strstr(log, "reading PSP_TEST_PARENT instead"));
        free(log);
        psc_config_cleanup();
    }
}

static unsigned p_parent, p_child1, p_child2;

static const pscom_config_row_t parent_rows[] = {
    {"PSP_PTEST", PSCOM_CONFIG_UINT, "1", "a parent", "ptest", NULL,
     &p_parent},
    {"PSP_PTEST_A", PSCOM_CONFIG_UINT, "2", "a child", "ptest", "PSP_PTEST",
     &p_child1},
    {"PSP_PTEST_B", PSCOM_CONFIG_UINT, "3", "a child", "ptest", "PSP_PTEST",
     &p_child2},
};

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* A bad value of a parent that is a row of its own is said once (by that
 * row), not again for every child reading it; a parent that is no row is
 * said by its child. */
static void test_bad_parent_said_once(void **state)
{
    char *log;

    setenv("PSP_PTEST", "4kB", 1);
    setenv("PSP_TEST_PARENT", "x", 1);
    log_capture_start();
    psc_config_register(parent_rows,
                        sizeof(parent_rows) / sizeof(parent_rows[0]));
    psc_config_register(test_rows, N_TEST_ROWS);
    log = log_capture_end();
    assert_int_equal(p_parent, 1);
    assert_int_equal(p_child1, 2);
    assert_int_equal(p_child2, 3);
    assert_int_equal(v_child, 3);
    assert_int_equal(count_of(log, "PSP_PTEST=\"4kB\""), 1);
    assert_int_equal(count_of(log, "PSP_TEST_PARENT=\"x\" (read for "
                                   "PSP_TEST_CHILD)"), 1);
    free(log);
}

static char *print_to_string(int markdown);

static int r_int;
static unsigned r_uint;
static size_t r_size;
static unsigned r_child;

static const pscom_config_row_t ranged_rows[] = {
    {"PSP_RTEST_INT", PSCOM_CONFIG_INT, "0", "an int", "rtest", NULL, &r_int},
    {"PSP_RTEST_UINT", PSCOM_CONFIG_UINT, "8", "an unsigned", "rtest", NULL,
     &r_uint},
    {"PSP_RTEST_SIZE", PSCOM_CONFIG_SIZE, "16k", "a size", "rtest", NULL,
     &r_size},
    {"PSP_RTEST_CHILD", PSCOM_CONFIG_UINT, "2", "a child", "rtest",
     "PSP_RTEST_PARENT", &r_child},
};

static const pscom_config_range_t test_ranges[] = {
    {"PSP_RTEST_INT", -1, 1},
    {"PSP_RTEST_UINT", 1, 1024},
    {"PSP_RTEST_SIZE", 64, 1LL << 30},
    {"PSP_RTEST_CHILD", 1, 4},
};

static void register_ranged(void)
{
    pscom_plugin_config_ranges(test_ranges,
                               sizeof(test_ranges) / sizeof(test_ranges[0]));
    psc_config_register(ranged_rows,
                        sizeof(ranged_rows) / sizeof(ranged_rows[0]));
}

static void test_range_clamps_and_reports(void **state)
{
    char *log;

    setenv("PSP_RTEST_INT", "-7", 1);
    setenv("PSP_RTEST_UINT", "0", 1);
    setenv("PSP_RTEST_SIZE", "inf", 1);
    setenv("PSP_RTEST_PARENT", "9", 1);
    log_capture_start();
    register_ranged();
    log = log_capture_end();

    /* The nearer end of the range, the source still the environment. */
    assert_int_equal(r_int, -1);
    assert_int_equal(r_uint, 1);
    assert_int_equal(r_size, 1 << 30);
    assert_int_equal(r_child, 4);
    assert_string_equal(psc_config_source(&ranged_rows[1]), "environment");

    /* Reported at the default PSP_DEBUG=1: what was set, the range and the
     * value used; a parent's value names the row it was read for. */
    assert_non_null(strstr(log, "PSP_RTEST_INT=\"-7\" is below its range "
                                "-1..1; using -1"));
    assert_non_null(strstr(log, "PSP_RTEST_UINT=\"0\" is below its range "
                                "1..1024; using 1"));
    assert_non_null(strstr(log, "PSP_RTEST_SIZE=\"inf\" is above its range "
                                "64..1G; using 1073741824"));
    assert_non_null(strstr(log, "PSP_RTEST_PARENT=\"9\" (read for "
                                "PSP_RTEST_CHILD) is above the range 1..4"));
    free(log);

    /* Values inside, the bounds included, pass untouched and silently. */
    setenv("PSP_RTEST_INT", "1", 1);
    setenv("PSP_RTEST_UINT", "1024", 1);
    setenv("PSP_RTEST_SIZE", "64", 1);
    setenv("PSP_RTEST_PARENT", "3", 1);
    log_capture_start();
    psc_config_reload();
    log = log_capture_end();
    assert_int_equal(r_int, 1);
    assert_int_equal(r_uint, 1024);
    assert_int_equal(r_size, 64);
    assert_int_equal(r_child, 3);
    assert_null(strstr(log, "range"));
    free(log);
}

static void test_range_printed(void **state)
{
    char *txt, *md, *line, *end;

    register_ranged();
    txt = print_to_string(0);
    line = strstr(txt, "PSP_RTEST_SIZE ");
    assert_non_null(line);
    end = strchr(line, '\n');
    assert_non_null(end);
    *end = '\0';
    assert_non_null(strstr(line, "a size (range 64..1G)"));
    free(txt);

    md = print_to_string(1);
    assert_non_null(strstr(md, "| `PSP_RTEST_UINT` | uint | `8` | an "
                               "unsigned. Range: 1..1024. |"));
    assert_non_null(strstr(md, "a child. Range: 1..4. When unset, "
                               "`PSP_RTEST_PARENT` is used. |"));
    free(md);

    /* Rows without a range say nothing of one. */
    psc_config_register(test_rows, N_TEST_ROWS);
    md = print_to_string(1);
    assert_non_null(strstr(md, "| `PSP_TEST_SIZE` | size | `64k` | a size |"));
    free(md);
}

static void test_parent_fallback(void **state)
{
    setenv("PSP_TEST_PARENT", "77", 1);
    psc_config_register(test_rows, N_TEST_ROWS);
    assert_int_equal(v_child, 77);
    assert_string_equal(psc_config_source(&test_rows[6]), "PSP_TEST_PARENT");

    setenv("PSP_TEST_CHILD", "8", 1);
    psc_config_reload();
    assert_int_equal(v_child, 8);
    assert_string_equal(psc_config_source(&test_rows[6]), "environment");

    unsetenv("PSP_TEST_CHILD");
    unsetenv("PSP_TEST_PARENT");
    psc_config_reload();
    assert_int_equal(v_child, 3);
    assert_string_equal(psc_config_source(&test_rows[6]), "default");
}

static void test_duplicate_ignored(void **state)
{
    static int other;
    static const pscom_config_row_t dup[] = {
        {"PSP_TEST_INT", PSCOM_CONFIG_INT, "123", "again", "other", NULL,
         &other},
    };
    char *log;

    other = -1;
    psc_config_register(test_rows, N_TEST_ROWS);
    log_capture_start();
    psc_config_register(dup, 1);
    /* The same table again is not a duplicate. */
    psc_config_register(test_rows, N_TEST_ROWS);
    log = log_capture_end();

    assert_int_equal(other, -1);
    assert_ptr_equal(psc_config_find("PSP_TEST_INT"), &test_rows[0]);
    assert_non_null(strstr(log, "PSP_TEST_INT of other is ignored"));
    assert_non_null(strstr(log, "test already registered"));
    assert_null(strstr(log, "of test is ignored"));
    free(log);
}

/* ---------------------------------------------------------------------- */
/* Unknown variables                                                      */
/* ---------------------------------------------------------------------- */

static void test_unknown_variables(void **state)
{
    char *log;
    int n;

    psc_config_register(test_rows, N_TEST_ROWS);
    setenv("PSP_TEST_INT", "1", 1);  /* known */
    setenv("PSP_TEST_INTT", "1", 1); /* one letter too many */
    setenv("PSP_TSET_UINT", "1", 1); /* two letters swapped */
    setenv("PSP_QQQQQQQQQQQQQQQQQQQQ", "1", 1);
    setenv("NOT_PSP_TEST_INTT", "1", 1); /* not ours */

    log_capture_start();
    n = psc_config_check_unknown();
    log = log_capture_end();

    assert_int_equal(n, 3);
    assert_non_null(strstr(log, "PSP_TEST_INTT is set but no setting of this "
                                "name exists; did you mean PSP_TEST_INT?"));
    assert_non_null(strstr(log, "PSP_TSET_UINT is set but no setting of this "
                                "name exists; did you mean PSP_TEST_UINT?"));
    assert_non_null(strstr(log, "PSP_QQQQQQQQQQQQQQQQQQQQ is set but no "
                                "setting of this name exists"));
    assert_null(strstr(log, "PSP_QQQQQQQQQQQQQQQQQQQQ is set but no setting "
                            "of this name exists; did you mean"));
    assert_null(strstr(log, "NOT_PSP"));
    assert_null(strstr(log, "PSP_TEST_INT is set"));
    free(log);
    unsetenv("NOT_PSP_TEST_INTT");

    clear_psp_environment();
    assert_int_equal(psc_config_check_unknown(), 0);
}

static void test_unknown_mpi_variables_known(void **state)
{
    psc_config_core_register();
    setenv("PSP_DIRECT_CONNECT", "1", 1);
    setenv("PSP_KEEP_CONNECTIONS", "1", 1);
    setenv("PSP_HARD_ABORT", "2", 1);
    setenv("PSP_ONDEMAND", "1", 1);
    assert_int_equal(psc_config_check_unknown(), 0);
}

/* ParaStation pscom's settings that this library lacks are known (not
 * reported as unknown), and one that is set is named, with its help, at
 * PSP_DEBUG 2; at 1 nothing is said. */
static void test_parastation_settings_noted(void **state)
{
    char *log;

    /* psc_config_core_register opens PSP_DEBUG_OUT itself. */
    log_capture_start();
    setenv("PSP_DEBUG_OUT", log_path, 1);
    setenv("PSP_GUARD", "0", 1);
    setenv("PSP_PRECON_TCP_SO_SNDBUF", "65536", 1);
    psc_config_core_register();
    log = log_capture_end();
    assert_string_equal(log, "");
    free(log);
    assert_int_equal(psc_config_check_unknown(), 0);

    psc_config_cleanup();
    log_capture_start();
    setenv("PSP_DEBUG_OUT", log_path, 1);
    setenv("PSP_DEBUG", "2", 1);
    psc_config_core_register();
    log = log_capture_end();
    assert_non_null(strstr(log, "PSP_GUARD=0: ParaStation pscom: "));
    assert_non_null(strstr(log, "PSP_PRECON_TCP_SO_SNDBUF=65536: ParaStation "
                                "pscom: "));
    assert_non_null(strstr(log, "PSP_TCP_SNDBUF"));
    assert_null(strstr(log, "PSP_SIGSEGV")); /* not set */
    free(log);
    psc_log_level_set(1);
}

/* A plugin setting under ParaStation's prefix of that plugin names the
 * setting of the same suffix here; one without such a setting gets the
 * usual report. */
static void test_parastation_plugin_prefix_names_ours(void **state)
{
    static unsigned hca;
    static const pscom_config_row_t rows[] = {
        {"PSP_VERBS_HCA", PSCOM_CONFIG_UINT, "0", "the device", "verbs",
         NULL, &hca},
    };
    char *log;

    psc_config_register(rows, 1);
    setenv("PSP_OPENIB_HCA", "1", 1);
    setenv("PSP_OPENIB_PATH_MTU", "3", 1);
    log_capture_start();
    int n = psc_config_check_unknown_filtered(NULL, "PSP_OPENIB_",
                                              "PSP_VERBS_");
    log = log_capture_end();
    assert_int_equal(n, 2);
    assert_non_null(strstr(log, "PSP_OPENIB_HCA is set, but this library "
                                "does not read ParaStation pscom's name for "
                                "it; its setting is PSP_VERBS_HCA"));
    assert_non_null(strstr(log, "PSP_OPENIB_PATH_MTU is set but no setting "
                                "of this name exists"));
    free(log);
}

/* ---------------------------------------------------------------------- */
/* pscom_env_get_*                                                        */
/* ---------------------------------------------------------------------- */

static void test_env_get(void **state)
{
    int i = 4;
    unsigned u = 5;
    size_t z = 6;
    char *s = (char *)"keep";
    char *d = (char *)"keepdir/";
    char *log;

    /* Unset: untouched. */
    pscom_env_get_int(&i, "PSP_TEST_E");
    pscom_env_get_uint(&u, "PSP_TEST_E");
    pscom_env_get_size_t(&z, "PSP_TEST_E");
    pscom_env_get_str(&s, "PSP_TEST_E");
    pscom_env_get_dir(&d, "PSP_TEST_E");
    assert_int_equal(i, 4);
    assert_int_equal(u, 5);
    assert_int_equal(z, 6);
    assert_string_equal(s, "keep");
    assert_string_equal(d, "keepdir/");

    /* Bad: untouched, and said so. */
    setenv("PSP_TEST_E", "x1", 1);
    log_capture_start();
    pscom_env_get_int(&i, "PSP_TEST_E");
    pscom_env_get_uint(&u, "PSP_TEST_E");
    pscom_env_get_size_t(&z, "PSP_TEST_E");
    log = log_capture_end();
    assert_int_equal(i, 4);
    assert_int_equal(u, 5);
    assert_int_equal(z, 6);
    assert_non_null(strstr(log, "PSP_TEST_E=\"x1\" is not an integer"));
    assert_non_null(strstr(log, "keeping the value 4"));
    assert_non_null(strstr(log, "keeping the value 5"));
    assert_non_null(strstr(log, "keeping the value 6"));
    free(log);

    setenv("PSP_TEST_E", "-2", 1);
    log_capture_start();
    pscom_env_get_uint(&u, "PSP_TEST_E");
    pscom_env_get_size_t(&z, "PSP_TEST_E");
    log = log_capture_end();
    assert_int_equal(u, 5);
    assert_int_equal(z, 6);
    assert_non_null(strstr(log, "PSP_TEST_E=\"-2\" is not an unsigned"));
    assert_non_null(strstr(log, "PSP_TEST_E=\"-2\" is not a size"));
    free(log);
    pscom_env_get_int(&i, "PSP_TEST_E");
    assert_int_equal(i, -2);

    /* auto: the caller's value is the default. */
    setenv("PSP_TEST_E", "auto", 1);
    pscom_env_get_uint(&u, "PSP_TEST_E");
    pscom_env_get_size_t(&z, "PSP_TEST_E");
    assert_int_equal(u, 5);
    assert_int_equal(z, 6);

    setenv("PSP_TEST_E", "inf", 1);
    pscom_env_get_uint(&u, "PSP_TEST_E");
    pscom_env_get_size_t(&z, "PSP_TEST_E");
    assert_int_equal(u, UINT_MAX);
    assert_true(z == SIZE_MAX);

    setenv("PSP_TEST_E", "8k", 1);
    pscom_env_get_size_t(&z, "PSP_TEST_E");
    assert_int_equal(z, 8192);

    setenv("PSP_TEST_E", "/some/dir", 1);
    pscom_env_get_str(&s, "PSP_TEST_E");
    pscom_env_get_dir(&d, "PSP_TEST_E");
    assert_string_equal(s, "/some/dir");
    assert_string_equal(d, "/some/dir/");
}

static void test_env_get_param_print(void **state)
{
    int i = 1;
    char *log;

    psc_settings.debug_param = 1;
    setenv("PSP_TEST_E", "9", 1);
    log_capture_start();
    pscom_env_get_int(&i, "PSP_TEST_E");
    pscom_env_get_int(&i, "PSP_TEST_UNSET");
    log = log_capture_end();
    assert_int_equal(i, 9);
    assert_non_null(strstr(log, "PSP_TEST_E = 9 (environment)"));
    assert_null(strstr(log, "PSP_TEST_UNSET"));
    free(log);

    psc_settings.debug_param = 2;
    log_capture_start();
    pscom_env_get_int(&i, "PSP_TEST_UNSET");
    log = log_capture_end();
    assert_non_null(strstr(log, "PSP_TEST_UNSET = 9 (default)"));
    free(log);
}

/* ---------------------------------------------------------------------- */
/* Printing                                                               */
/* ---------------------------------------------------------------------- */

/* What psc_config_print() writes (free it). */
static char *print_to_string(int markdown)
{
    FILE *f = tmpfile();
    char *buf;
    long n;

    assert_non_null(f);
    psc_config_print(f, markdown);
    n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static const char *const core_names[] = {
    "PSP_DEBUG",         "PSP_DEBUG_OUT",         "PSP_DEBUG_PARAM",
    "PSP_DEBUG_CONTYPE", "PSP_DEBUG_PRECON",      "PSP_DEBUG_VERSION",
    "PSP_RENDEZVOUS",    "PSP_SCHED_YIELD",       "PSP_TCP_BACKLOG",
    "PSP_RETRY",         "PSP_CONNECT_TIMEOUT",   "PSP_SHUTDOWN_TIMEOUT",
    "PSP_NETWORK",       "PSP_PLUGINDIR",         "PSP_ONDEMAND",
    "PSP_PRECON_MAX_RECORD",
};

static void test_print_markdown(void **state)
{
    char *md, *p_core, *p_mpi, *p_test;
    char cell[96];

    psc_config_register(test_rows, N_TEST_ROWS);
    psc_config_core_register(); /* after the plugin: still printed first */
    md = print_to_string(1);

    assert_true(strncmp(md, "# Configuration reference\n", 26) == 0);
    assert_non_null(strstr(md, "`pscom_info -c --markdown`"));
    assert_non_null(strstr(md, "| Variable | Type | Default | Description |"));
    for (size_t i = 0; i < sizeof(core_names) / sizeof(core_names[0]); i++) {
        snprintf(cell, sizeof(cell), "| `%s` |", core_names[i]);
        assert_non_null(strstr(md, cell));
    }
    for (size_t i = 0; i < N_TEST_ROWS; i++) {
        snprintf(cell, sizeof(cell), "| `%s` |", test_rows[i].name);
        assert_non_null(strstr(md, cell));
    }
    assert_non_null(strstr(md, "| `PSP_DIRECT_CONNECT` |"));
    assert_non_null(strstr(md, "| `PSP_TEST_SIZE` | size | `64k` | a size |"));
    assert_non_null(strstr(md, "| `PSP_TEST_STR` | string | unset |"));
    assert_non_null(strstr(md, "an int \\| with a bar"));
    assert_non_null(strstr(md, "a &lt;string&gt;"));
    assert_non_null(strstr(md, "When unset, `PSP_TEST_PARENT` is used."));

    /* Core first, then owners alphabetically. */
    p_core = strstr(md, "| `PSP_DEBUG` |");
    p_mpi = strstr(md, "| `PSP_DIRECT_CONNECT` |");
    p_test = strstr(md, "| `PSP_TEST_INT` |");
    assert_true(p_core && p_mpi && p_test);
    assert_true(p_core < p_mpi && p_mpi < p_test);
    /* Registration order within an owner. */
    assert_true(strstr(md, "| `PSP_TEST_INT` |") <
                strstr(md, "| `PSP_TEST_CHILD` |"));
    free(md);
}

static void test_print_text(void **state)
{
    char *txt, *line, *end;

    setenv("PSP_TEST_SIZE", "1k", 1);
    setenv("PSP_TEST_PARENT", "42", 1);
    psc_config_register(test_rows, N_TEST_ROWS);
    txt = print_to_string(0);

    assert_non_null(strstr(txt, "Variable"));
    assert_non_null(strstr(txt, "Description"));
    line = strstr(txt, "PSP_TEST_SIZE ");
    assert_non_null(line);
    end = strchr(line, '\n');
    assert_non_null(end);
    *end = '\0';
    assert_non_null(strstr(line, " size "));
    assert_non_null(strstr(line, " 64k "));
    assert_non_null(strstr(line, " 1024 "));
    assert_non_null(strstr(line, " environment "));
    assert_non_null(strstr(line, " test "));
    assert_non_null(strstr(line, "a size"));
    *end = '\n';
    line = strstr(txt, "PSP_TEST_CHILD ");
    assert_non_null(line);
    assert_non_null(strstr(line, " 42 "));
    assert_non_null(strstr(line, " PSP_TEST_PARENT "));
    free(txt);
}

static void test_print_params(void **state)
{
    static int late;
    static const pscom_config_row_t late_rows[] = {
        {"PSP_TEST_LATE", PSCOM_CONFIG_INT, "0", "late", "late", NULL, &late},
    };
    char *log;

    setenv("PSP_TEST_INT", "7", 1);
    setenv("PSP_TEST_LATE", "3", 1);
    psc_config_register(test_rows, N_TEST_ROWS);

    log_capture_start();
    psc_config_print_params(1);
    psc_config_print_params(1); /* nothing twice */
    psc_config_register(late_rows, 1); /* shown as it comes */
    log = log_capture_end();
    assert_non_null(strstr(log, "PSP_TEST_INT = 7 (environment)"));
    assert_null(strstr(strstr(log, "PSP_TEST_INT = 7") + 1,
                       "PSP_TEST_INT = 7"));
    assert_non_null(strstr(log, "PSP_TEST_LATE = 3 (environment)"));
    assert_null(strstr(log, "PSP_TEST_UINT"));
    free(log);

    log_capture_start();
    psc_config_print_params(2);
    log = log_capture_end();
    assert_non_null(strstr(log, "PSP_TEST_UINT = 10 (default)"));
    assert_null(strstr(log, "PSP_TEST_INT = 7"));
    free(log);
}

/* ---------------------------------------------------------------------- */
/* Logging                                                                */
/* ---------------------------------------------------------------------- */

static void test_log_prefix_and_levels(void **state)
{
    char *log, prefix[32];

    psc_log_level_set(2);
    log_capture_start();
    psc_err("first %d", 1);
    psc_info("hidden");
    pscom_plugin_log(2, "plugin %s", "warns");
    pscom_plugin_log(3, "plugin hidden");
    psc_log_write(PSC_LOG_ERROR, "two\nlines\n");
    assert_int_equal(pscom_plugin_log_level(), 2);
    log = log_capture_end();

    snprintf(prefix, sizeof(prefix), "<pscom:%d:", (int)getpid());
    assert_true(strncmp(log, prefix, strlen(prefix)) == 0);
    assert_non_null(strstr(log, "> first 1\n"));
    assert_non_null(strstr(log, "> plugin warns\n"));
    assert_non_null(strstr(log, "> two\n<pscom:"));
    assert_non_null(strstr(log, "> lines\n"));
    assert_null(strstr(log, "lines\n\n"));
    assert_null(strstr(log, "hidden"));
    free(log);
}

static void test_log_open_expands_and_falls_back(void **state)
{
    char dir[] = "/tmp/test_config_dir.XXXXXX";
    char path[128];
    char *log;
    FILE *f;

    assert_non_null(mkdtemp(dir));
    setenv("TEST_CONFIG_LOGDIR", dir, 1);
    psc_log_open("$TEST_CONFIG_LOGDIR/out.log");
    psc_err("expanded");
    psc_log_open(NULL);
    snprintf(path, sizeof(path), "%s/out.log", dir);
    f = fopen(path, "r");
    assert_non_null(f);
    fclose(f);
    unlink(path);
    rmdir(dir);
    unsetenv("TEST_CONFIG_LOGDIR");

    /* A file that cannot be opened: back to stderr, saying why there. */
    log_capture_start();
    {
        char errpath[] = "/tmp/test_config_err.XXXXXX";
        int fd = mkstemp(errpath);
        int saved = dup(2);
        char line[512];

        assert_true(fd >= 0 && saved >= 0);
        fflush(stderr);
        dup2(fd, 2);
        psc_log_open("/nonexistent-dir/x/out.log");
        assert_ptr_equal(psc_log_stream(), stderr);
        psc_log_open("/nonexistent-dir/x/out.log"); /* said once only */
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        close(fd);

        f = fopen(errpath, "r");
        assert_non_null(f);
        assert_non_null(fgets(line, sizeof(line), f));
        assert_null(fgets(path, sizeof(path), f));
        fclose(f);
        unlink(errpath);
        assert_non_null(strstr(line, "cannot open the log file "
                                     "\"/nonexistent-dir/x/out.log\""));
        assert_non_null(strstr(line, "No such file or directory"));
    }
    log = log_capture_end();
    assert_string_equal(log, ""); /* nothing went to the old file */
    free(log);
}

/* Run psc_log_open(name) with stderr caught; what it said there. */
static char *log_open_said(const char *name)
{
    char errpath[] = "/tmp/test_config_err.XXXXXX";
    int fd = mkstemp(errpath);
    int saved = dup(2);
    static char line[512];

    assert_true(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    psc_log_open(name);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    FILE *f = fopen(errpath, "r");
    assert_non_null(f);
    line[0] = '\0';
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    unlink(errpath);
    return line;
}

/* A FIFO nobody reads is refused at once (a blocking open hung the
 * initialisation); a name that does not expand to one word is refused,
 * not taken literally. */
static void test_log_open_refuses_fifo_and_bad_names(void **state)
{
    char dir[] = "/tmp/test_config_dir.XXXXXX";
    char path[160];

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    char *said = log_open_said(path);
    assert_ptr_equal(psc_log_stream(), stderr);
    assert_non_null(strstr(said, "a FIFO that nobody reads"));
    unlink(path);

    snprintf(path, sizeof(path), "%s/x$(id)", dir);
    said = log_open_said(path);
    assert_ptr_equal(psc_log_stream(), stderr);
    assert_non_null(strstr(said, "command substitution is not allowed"));
    assert_int_equal(access(path, F_OK), -1); /* no file of that name */

    unsetenv("TEST_CONFIG_UNSET");
    snprintf(path, sizeof(path), "%s/$TEST_CONFIG_UNSET", dir);
    said = log_open_said(path);
    assert_ptr_equal(psc_log_stream(), stderr);
    assert_non_null(strstr(said, "a variable that is not set"));

    snprintf(path, sizeof(path), "%s/a b", dir);
    said = log_open_said(path);
    assert_ptr_equal(psc_log_stream(), stderr);
    assert_non_null(strstr(said, "several"));
    rmdir(dir);
}

/* ---------------------------------------------------------------------- */
/* Timestamps (PSP_DEBUG_TIMING)                                          */
/* ---------------------------------------------------------------------- */

#define TIMED_LINES 20

/* Register the core rows with PSP_DEBUG_TIMING=value (NULL: unset), then
 * log TIMED_LINES lines "line I": what was logged, registration included
 * (free it). */
static char *timed_log(const char *value)
{
    log_capture_start();
    setenv("PSP_DEBUG_OUT", log_path, 1); /* registration keeps it open */
    if (value)
        setenv("PSP_DEBUG_TIMING", value, 1);
    else
        unsetenv("PSP_DEBUG_TIMING");
    psc_config_cleanup();
    psc_config_core_register();
    for (int i = 0; i < TIMED_LINES; i++) psc_err("line %d", i);
    return log_capture_end();
}

/* Every "line I" of log must read "<pscom:PID:HOST:TIME> line I" with TIME
 * matching the extended regular expression time_re (NULL: no time,
 * "<pscom:PID:HOST> line I"). The times go to times[TIMED_LINES]. */
static void check_lines(const char *log, const char *time_re,
                        char times[][48])
{
    char re_text[256], line[512];
    regex_t re;
    regmatch_t m[2];
    int n = 0;

    snprintf(re_text, sizeof(re_text), "^<pscom:%d:[^:>]+%s%s%s> line %s$",
             (int)getpid(), time_re ? ":(" : "", time_re ? time_re : "",
             time_re ? ")" : "", "([0-9]+)");
    assert_int_equal(regcomp(&re, re_text, REG_EXTENDED), 0);
    for (const char *p = log; *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);

        snprintf(line, sizeof(line), "%.*s", (int)len, p);
        p += len + (end ? 1 : 0);
        if (!strstr(line, "> line ")) continue;
        if (regexec(&re, line, 2, m, 0) != 0)
            fail_msg("\"%s\" does not match %s", line, re_text);
        if (time_re)
            snprintf(times[n], 48, "%.*s", (int)(m[1].rm_eo - m[1].rm_so),
                     line + m[1].rm_so);
        n++;
    }
    regfree(&re);
    assert_int_equal(n, TIMED_LINES);
}

/* SSSS.UUUUUU in microseconds. */
static long long micros(const char *t)
{
    long long s, us;

    assert_int_equal(sscanf(t, "%lld.%lld", &s, &us), 2);
    return s * 1000000 + us;
}

static const char *timing_value(void)
{
    static char buf[64];
    const pscom_config_row_t *row = psc_config_find("PSP_DEBUG_TIMING");

    assert_non_null(row);
    psc_config_value_str(row, buf, sizeof(buf));
    return buf;
}

/* us (also written 1, or in capitals with blanks): seconds.microseconds
 * since initialisation, zero-padded, never decreasing. */
static void test_timing_us(void **state)
{
    static const char *const values[][2] = {
        {"us", "us"}, {"1", "1"}, {" US ", "us"}};
    char times[TIMED_LINES][48];

    for (size_t v = 0; v < 3; v++) {
        char *log = timed_log(values[v][0]);

        assert_null(strstr(log, "PSP_DEBUG_TIMING=")); /* taken */
        assert_string_equal(timing_value(), values[v][1]);
        check_lines(log, "[0-9]{4,}\\.[0-9]{6}", times);
        for (int i = 1; i < TIMED_LINES; i++)
            assert_true(micros(times[i]) >= micros(times[i - 1]));
        free(log);
    }
}

/* delta: the same format, for the time since the previous line. */
static void test_timing_delta(void **state)
{
    char times[TIMED_LINES][48];
    char *log = timed_log("delta");

    assert_string_equal(timing_value(), "delta");
    check_lines(log, "[0-9]{4,}\\.[0-9]{6}", times);
    free(log);
}

/* The seconds of the clock the log reads (time() may lag it by a tick). */
static time_t realtime_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec;
}

/* wall: seconds.microseconds since the epoch, now. */
static void test_timing_wall(void **state)
{
    char times[TIMED_LINES][48];
    time_t before = realtime_s();
    char *log = timed_log("wall");
    time_t after = realtime_s();

    assert_string_equal(timing_value(), "wall");
    check_lines(log, "[0-9]+\\.[0-9]{6}", times);
    for (int i = 0; i < TIMED_LINES; i++) {
        long long s = micros(times[i]) / 1000000;

        assert_true(s >= (long long)before && s <= (long long)after);
    }
    free(log);
}

/* date: the local date and time, YYYY-MM-DD_hh:mm:ss.uuuuuu, of today. */
static void test_timing_date(void **state)
{
    char times[TIMED_LINES][48], day0[16], day1[16];
    time_t before = realtime_s();
    char *log = timed_log("DATE");
    time_t after = realtime_s();
    struct tm tm;

    strftime(day0, sizeof(day0), "%Y-%m-%d", localtime_r(&before, &tm));
    strftime(day1, sizeof(day1), "%Y-%m-%d", localtime_r(&after, &tm));
    assert_string_equal(timing_value(), "date");
    check_lines(log,
                "[0-9]{4}-[0-9]{2}-[0-9]{2}_[0-9]{2}:[0-9]{2}:[0-9]{2}\\."
                "[0-9]{6}",
                times);
    for (int i = 0; i < TIMED_LINES; i++)
        assert_true(strncmp(times[i], day0, 10) == 0 ||
                    strncmp(times[i], day1, 10) == 0);
    free(log);
}

/* Unset, 0, and a value that is none of the words: no time. A bad value
 * is reported, naming variable, value and what it takes. */
static void test_timing_off_and_bad(void **state)
{
    char *log = timed_log(NULL);
    check_lines(log, NULL, NULL);
    free(log);

    log = timed_log("us");
    free(log);
    log = timed_log("0"); /* after us: off again */
    check_lines(log, NULL, NULL);
    assert_string_equal(timing_value(), "0");
    free(log);

    log = timed_log("microseconds");
    assert_non_null(strstr(log, "PSP_DEBUG_TIMING=\"microseconds\" is none "
                                "of 0, 1, us, date, wall or delta; keeping "
                                "the default 0"));
    assert_string_equal(timing_value(), "0");
    check_lines(log, NULL, NULL);
    free(log);

    log = timed_log("");
    assert_non_null(strstr(log, "PSP_DEBUG_TIMING=\"\" is none of"));
    check_lines(log, NULL, NULL);
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_parse_int, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_uint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_bool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_strings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_defaults, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_register_environment, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_register_bad_value_keeps_default,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_parent_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_too_large_named, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_own_value_reads_parent, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_parent_said_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_range_clamps_and_reports, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_range_printed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_ignored, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_variables, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_mpi_variables_known,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_parastation_settings_noted,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_parastation_plugin_prefix_names_ours, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_get_param_print, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_print_markdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_prefix_and_levels, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_log_open_expands_and_falls_back,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_log_open_refuses_fifo_and_bad_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timing_us, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timing_delta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timing_wall, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timing_date, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timing_off_and_bad, setup,
                                        teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
