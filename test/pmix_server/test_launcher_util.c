/*
 * Unit tests of pscom_run's command line (cli.c) and of the line assembly
 * behind --tag-output (output.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli.h"
#include "output.h"

/* ---- command line ---- */

static int parse(psr_opts_t *o, char *err, ...)
{
    /* Static: the parsed options point into it after the call. */
    static char *argv[32];
    argv[0] = "pscom_run";
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (char *a; (a = va_arg(ap, char *)) != NULL;) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    return psr_cli_parse(argc, argv, o, err, 256);
}

static void test_cli_single_app(void **state)
{
    (void)state;
    psr_opts_t o;
    char err[256];
    assert_int_equal(parse(&o, err, "-n", "4", "prog", "-n", "x", NULL), 0);
    assert_int_equal(o.napps, 1);
    assert_int_equal(o.apps[0].np, 4);
    assert_int_equal(o.apps[0].argc, 3);
    assert_string_equal(o.apps[0].argv[0], "prog");
    assert_string_equal(o.apps[0].argv[1], "-n");       /* the program's own */
    assert_false(o.tag_output);
    assert_false(o.keep_going);
    assert_int_equal(o.event_cache, PSR_DEFAULT_EVENT_CACHE);
    assert_true(o.grace == PSR_DEFAULT_GRACE);
    psr_opts_free(&o);

    assert_int_equal(parse(&o, err, "prog", NULL), 0);
    assert_int_equal(o.apps[0].np, 1);
    psr_opts_free(&o);
}

/* -vv and -vvv count as -v -v and -v -v -v, as the documentation uses them. */
static void test_cli_verbose_levels(void **state)
{
    (void)state;
    psr_opts_t o;
    char err[256];
    assert_int_equal(parse(&o, err, "-vv", "prog", NULL), 0);
    assert_int_equal(o.verbose, 2);
    psr_opts_free(&o);
    assert_int_equal(parse(&o, err, "-vvv", "prog", NULL), 0);
    assert_int_equal(o.verbose, 3);
    psr_opts_free(&o);
    assert_int_equal(parse(&o, err, "-v", "--verbose", "-vv", "prog", NULL), 0);
    assert_int_equal(o.verbose, 4);
    psr_opts_free(&o);
    assert_int_equal(parse(&o, err, "-vx", "prog", NULL), -1);
    assert_non_null(strstr(err, "unknown option '-vx'"));
}

static void test_cli_mpmd_and_options(void **state)
{
    (void)state;
    psr_opts_t o;
    char err[256];
    assert_int_equal(parse(&o, err, "--tag-output", "--keep-going", "-v", "-v",
                           "--bind-to", "core", "--event-cache=8", "--grace", "0.5", "--timeout=30",
                           "-n", "2", "a", "x", ":", "--np", "3", "b", ":", "c", NULL), 0);
    assert_true(o.tag_output);
    assert_true(o.keep_going);
    assert_int_equal(o.bind, PSR_BIND_CORE);
    assert_int_equal(o.verbose, 2);
    assert_int_equal(o.event_cache, 8);
    assert_true(o.grace == 0.5);
    assert_true(o.timeout == 30);
    assert_int_equal(o.napps, 3);
    assert_int_equal(o.apps[0].np, 2);
    assert_int_equal(o.apps[0].argc, 2);
    assert_int_equal(o.apps[1].np, 3);
    assert_string_equal(o.apps[1].argv[0], "b");
    assert_int_equal(o.apps[1].argc, 1);
    assert_int_equal(o.apps[2].np, 1);
    assert_string_equal(o.apps[2].argv[0], "c");
    psr_opts_free(&o);
}

static void test_cpulist(void **state)
{
    (void)state;
    psr_cpuset_t set, back;
    assert_int_equal(psr_cpuset_init(&set, 128), 0);
    assert_int_equal(psr_cpulist_parse("0-3,8,10-11\n", &set), 0);
    for (int c = 0; c < 128; c++)
        assert_int_equal(psr_cpuset_isset(&set, c), c <= 3 || c == 8 || c == 10 || c == 11);
    assert_false(psr_cpuset_isset(&set, -1));
    assert_false(psr_cpuset_isset(&set, 128));
    assert_int_equal(psr_cpulist_parse("5", &set), 0);
    assert_true(psr_cpuset_isset(&set, 5) && !psr_cpuset_isset(&set, 4) &&
                !psr_cpuset_isset(&set, 0));
    assert_int_equal(psr_cpulist_parse("", &set), 0); /* no CPU */
    assert_int_equal(CPU_COUNT_S(set.size, set.set), 0);
    const char *bad[] = {"x", "1-", "3-1", "1,", "1,,2", "-1", "1 2", "128", "0-128", "1;2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(psr_cpulist_parse(bad[i], &set), -1);
    psr_cpuset_free(&set);

    /* Formatting: ranges joined, and back through the parser; also CPUs
     * beyond the 1024 of a cpu_set_t. */
    char buf[64];
    const char *lists[] = {"0-3,8,10-11", "5", "", "0,2,4", "1-2,1023", "1024",
                           "0,1023-1025,8191", "4000-8191"};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        assert_int_equal(psr_cpuset_init(&set, 8192), 0);
        assert_int_equal(psr_cpulist_parse(lists[i], &set), 0);
        assert_int_equal(psr_cpulist_format(&set, buf, sizeof(buf)), 0);
        assert_string_equal(buf, lists[i]);
        assert_int_equal(psr_cpuset_copy(&back, &set), 0);
        assert_int_equal(psr_cpulist_parse(buf, &back), 0);
        assert_true(CPU_EQUAL_S(set.size, set.set, back.set));
        psr_cpuset_free(&back);
        psr_cpuset_free(&set);
    }
    assert_int_equal(psr_cpuset_init(&set, 1024), 0);
    assert_int_equal(psr_cpulist_parse("1024", &set), -1); /* does not fit */
    assert_int_equal(psr_cpulist_parse("0,2,4,6,8,10", &set), 0);
    assert_int_equal(psr_cpulist_format(&set, buf, 7), -1); /* "0,2,4,6" */
    assert_string_equal(buf, "0,2,4");
    /* The head for a log line: the whole list, or what fits and ",...". */
    psr_cpulist_head(&set, buf, sizeof(buf));
    assert_string_equal(buf, "0,2,4,6,8,10");
    psr_cpulist_head(&set, buf, 13); /* exactly the list and its NUL */
    assert_string_equal(buf, "0,2,4,6,8,10");
    memset(buf, 'x', sizeof(buf));
    psr_cpulist_head(&set, buf, 12);
    assert_string_equal(buf, "0,2,4,6,...");
    psr_cpulist_head(&set, buf, 5);
    assert_string_equal(buf, ",...");
    psr_cpuset_free(&set);

    /* The longest lists fit in PSR_CPULIST_MAX: every other CPU, and
     * pairs, of the largest set (7-digit CPU numbers). */
    int n = PSR_CPUSET_MAX;
    size_t max = PSR_CPULIST_MAX(n);
    char *big = malloc(max);
    assert_non_null(big);
    assert_int_equal(psr_cpuset_init(&set, n), 0);
    for (int step = 2; step <= 3; step++) {
        CPU_ZERO_S(set.size, set.set);
        for (int c = 0; c < n; c += step) {
            CPU_SET_S(c, set.size, set.set);
            if (step == 3 && c + 1 < n) CPU_SET_S(c + 1, set.size, set.set);
        }
        assert_int_equal(psr_cpulist_format(&set, big, max), 0);
        assert_int_equal(psr_cpuset_copy(&back, &set), 0);
        assert_int_equal(psr_cpulist_parse(big, &back), 0);
        assert_true(CPU_EQUAL_S(set.size, set.set, back.set));
        psr_cpuset_free(&back);
    }
    psr_cpuset_free(&set);
    free(big);

    /* This process's CPUs, against one read into the largest mask (the
     * allowed CPUs that are online: /proc/self/status lists offline ones
     * too). */
    assert_int_equal(psr_cpuset_affinity(&set), 0);
    assert_true(set.ncpus >= CPU_SETSIZE);
    assert_int_equal(psr_cpuset_init(&back, PSR_CPUSET_MAX), 0);
    assert_int_equal(sched_getaffinity(0, back.size, back.set), 0);
    assert_true(CPU_COUNT_S(set.size, set.set) > 0);
    for (int c = 0; c < back.ncpus; c++)
        assert_int_equal(psr_cpuset_isset(&set, c), psr_cpuset_isset(&back, c));
    psr_cpuset_free(&back);
    psr_cpuset_free(&set);
}

static void test_cli_errors(void **state)
{
    (void)state;
    psr_opts_t o;
    char err[256];
    assert_int_equal(parse(&o, err, NULL), -1);
    assert_non_null(strstr(err, "no program"));
    assert_int_equal(parse(&o, err, "-n", "0", "prog", NULL), -1);
    assert_non_null(strstr(err, "-n needs"));
    assert_int_equal(parse(&o, err, "-n", "two", "prog", NULL), -1);
    assert_int_equal(parse(&o, err, "-n", "2", NULL), -1);
    assert_int_equal(parse(&o, err, "a", ":", NULL), -1);
    assert_int_equal(parse(&o, err, "a", ":", ":", "b", NULL), -1);
    assert_int_equal(parse(&o, err, "--bogus", "a", NULL), -1);
    assert_non_null(strstr(err, "--bogus"));
    assert_int_equal(parse(&o, err, "--event-cache", "0", "a", NULL), -1);
    assert_int_equal(parse(&o, err, "--grace", "-1", "a", NULL), -1);
    assert_int_equal(parse(&o, err, "--timeout", NULL), -1);
    assert_int_equal(parse(&o, err, "--bind-to", "socket", "a", NULL), -1);
    assert_non_null(strstr(err, "--bind-to needs core, hwthread or none, not 'socket'"));
    assert_int_equal(parse(&o, err, "--bind-to", NULL), -1);
    assert_int_equal(parse(&o, err, "--bind-to", "core", "--bind-to=none", "a", NULL), 0);
    assert_int_equal(o.bind, PSR_BIND_NONE);
    psr_opts_free(&o);
    assert_int_equal(parse(&o, err, "--bind-to=hwthread", "a", NULL), 0);
    assert_int_equal(o.bind, PSR_BIND_HWTHREAD);
    psr_opts_free(&o);
    assert_int_equal(parse(&o, err, "--help", NULL), 0);
    assert_true(o.help);
}

/* ---- tagged lines ---- */

static char out[1 << 18];
static size_t outlen;
static int writes;

static void writer(void *arg, const char *text, size_t len)
{
    (void)arg;
    memcpy(out + outlen, text, len);
    outlen += len;
    out[outlen] = '\0';
    writes++;
}

static void reset(void)
{
    outlen = 0;
    out[0] = '\0';
    writes = 0;
}

static void test_lines(void **state)
{
    (void)state;
    psr_linebuf_t lb = { 0 };
    reset();
    psr_lb_feed(&lb, "[1] ", "one\ntwo\n\nthr", 12, writer, NULL);
    assert_string_equal(out, "[1] one\n[1] two\n[1] \n");
    assert_int_equal(writes, 3);            /* one write per line */
    psr_lb_feed(&lb, "[1] ", "ee", 2, writer, NULL);
    psr_lb_feed(&lb, "[1] ", "\nfour", 5, writer, NULL);
    assert_string_equal(out, "[1] one\n[1] two\n[1] \n[1] three\n");
    psr_lb_flush(&lb, "[1] ", writer, NULL);
    assert_string_equal(out, "[1] one\n[1] two\n[1] \n[1] three\n[1] four\n");
    psr_lb_flush(&lb, "[1] ", writer, NULL);   /* nothing pending */
    assert_int_equal(writes, 5);
    psr_lb_free(&lb);
}

static void test_long_line_is_cut(void **state)
{
    (void)state;
    psr_linebuf_t lb = { 0 };
    size_t n = PSR_LINE_MAX + 10;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\n';
    reset();
    psr_lb_feed(&lb, "[0:1] ", big, 100, writer, NULL);
    psr_lb_feed(&lb, "[0:1] ", big + 100, n + 1 - 100, writer, NULL);
    assert_int_equal(writes, 2);
    assert_int_equal(outlen, 2 * strlen("[0:1] ") + n + 2);
    assert_memory_equal(out, "[0:1] xxx", 9);
    assert_int_equal(out[strlen("[0:1] ") + PSR_LINE_MAX], '\n');
    assert_memory_equal(out + strlen("[0:1] ") + PSR_LINE_MAX + 1, "[0:1] xxxxxxxxxx\n", 17);
    free(big);
    psr_lb_free(&lb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_single_app),
        cmocka_unit_test(test_cli_mpmd_and_options),
        cmocka_unit_test(test_cli_verbose_levels),
        cmocka_unit_test(test_cli_errors),
        cmocka_unit_test(test_cpulist),
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_long_line_is_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
