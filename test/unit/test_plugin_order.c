/*
 * Plugin ordering: user priority (PSP_<NAME>) first, built-in priority on
 * ties, disabled and failed plugins last; and the registry as loaded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "core.h"

static const pscom_plugin_t d_shm = {.name = "shm", .priority = 90};
static const pscom_plugin_t d_ucx = {.name = "ucx", .priority = 30};
static const pscom_plugin_t d_tcp = {.name = "tcp", .priority = 2};

static struct psc_plugin mk(const pscom_plugin_t *d, int user,
                            enum psc_plugin_state st)
{
    struct psc_plugin p = {.desc = d, .user_priority = user, .state = st};
    snprintf(p.name, sizeof(p.name), "%s", d->name);
    return p;
}

static void builtin_priority_on_ties(void **state)
{
    struct psc_plugin t = mk(&d_tcp, 1, PSC_PLUGIN_LOADED);
    struct psc_plugin u = mk(&d_ucx, 1, PSC_PLUGIN_LOADED);
    struct psc_plugin s = mk(&d_shm, 1, PSC_PLUGIN_LOADED);
    struct psc_plugin *list[] = {&t, &u, &s};
    psc_plugin_sort(list, 3);
    assert_ptr_equal(list[0], &s);
    assert_ptr_equal(list[1], &u);
    assert_ptr_equal(list[2], &t);
}

static void user_priority_wins(void **state)
{
    struct psc_plugin t = mk(&d_tcp, 5, PSC_PLUGIN_LOADED);
    struct psc_plugin u = mk(&d_ucx, 1, PSC_PLUGIN_LOADED);
    struct psc_plugin s = mk(&d_shm, 1, PSC_PLUGIN_LOADED);
    struct psc_plugin *list[] = {&s, &u, &t};
    psc_plugin_sort(list, 3);
    assert_ptr_equal(list[0], &t);
    assert_ptr_equal(list[1], &s);
    assert_ptr_equal(list[2], &u);
}

static void disabled_and_failed_last(void **state)
{
    struct psc_plugin t = mk(&d_tcp, 1, PSC_PLUGIN_LOADED);
    struct psc_plugin u = mk(&d_ucx, 9, PSC_PLUGIN_FAILED);
    struct psc_plugin s = mk(&d_shm, 0, PSC_PLUGIN_DISABLED);
    struct psc_plugin *list[] = {&s, &u, &t};
    psc_plugin_sort(list, 3);
    assert_ptr_equal(list[0], &t);
    assert_int_not_equal(list[1]->state, PSC_PLUGIN_LOADED);
    assert_int_not_equal(list[2]->state, PSC_PLUGIN_LOADED);
}

/* A module not opened yet (no descriptor) ranks by the priority of its
 * entry in the registry's table (ucx 30: between shm and tcp), unless
 * PSP_<NAME>=0 disabled it. */
static void pending_module_ranks_by_table(void **state)
{
    struct psc_plugin t = mk(&d_tcp, 1, PSC_PLUGIN_LOADED);
    struct psc_plugin s = mk(&d_shm, 1, PSC_PLUGIN_LOADED);
    struct psc_plugin u = {.user_priority = 1, .state = PSC_PLUGIN_PENDING};
    struct psc_plugin o = {.user_priority = 0, .state = PSC_PLUGIN_PENDING};
    snprintf(u.name, sizeof(u.name), "ucx");
    snprintf(o.name, sizeof(o.name), "ofi");
    struct psc_plugin *list[] = {&t, &o, &u, &s};
    psc_plugin_sort(list, 4);
    assert_ptr_equal(list[0], &s);
    assert_ptr_equal(list[1], &u);
    assert_ptr_equal(list[2], &t);
    assert_ptr_equal(list[3], &o);
    assert_true(psc_plugin_offerable(&u, ~(uint64_t)0));
    assert_false(psc_plugin_offerable(&o, ~(uint64_t)0));
    assert_false(psc_plugin_offerable(
        &u, ~((uint64_t)1 << PSCOM_CON_TYPE_UCP)));
}

/* The loaded registry honours PSP_TCP=0 and lists modules that are absent. */
static void registry_from_environment(void **state)
{
    setenv("PSP_TCP", "0", 1);
    setenv("PSP_PLUGINDIR", "/nonexistent-pscom-plugins", 1);
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);

    struct psc_plugin *tcp = psc_plugin_find("tcp");
    assert_non_null(tcp);
    assert_int_equal(tcp->state, PSC_PLUGIN_DISABLED);
    assert_non_null(strstr(tcp->why, "PSP_TCP=0"));

    /* Loadable modules are opened at the first connection only. */
    struct psc_plugin *ucx = psc_plugin_find("ucx");
    assert_non_null(ucx);
    assert_int_equal(ucx->state, PSC_PLUGIN_PENDING);
    psc_plugins_load_modules();
    assert_int_equal(ucx->state, PSC_PLUGIN_FAILED);
    assert_non_null(strstr(ucx->why, "/nonexistent-pscom-plugins/"));
    assert_non_null(psc_config_find("PSP_TCP"));
    assert_non_null(psc_config_find("PSP_UCP")); /* ParaStation's alias */
}

/* pscom_plugin_hold_progress puts a plugin with no open connection into
 * the set progressed every round, and the last release takes it out;
 * an unknown name or a release without a hold changes nothing. */
static void hold_keeps_progressing(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    struct psc_plugin *shm = psc_plugin_find("shm");
    assert_non_null(shm);
    assert_non_null(shm->desc->ops->progress);
    assert_int_equal(shm->open_cons, 0);
    assert_int_equal(psc_active.n, 0);

    pscom_plugin_hold_progress("shm", 1);
    pscom_plugin_hold_progress("shm", 1);
    assert_int_equal(psc_active.n, 1);
    assert_ptr_equal(psc_active.progress[0], shm->desc->ops->progress);
    pscom_plugin_hold_progress("shm", 0);
    assert_int_equal(psc_active.n, 1);
    pscom_plugin_hold_progress("shm", 0);
    assert_int_equal(psc_active.n, 0);

    pscom_plugin_hold_progress("shm", 0); /* not held: ignored */
    assert_int_equal(shm->holds, 0);
    pscom_plugin_hold_progress("no-such-plugin", 1);
    assert_int_equal(psc_active.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(builtin_priority_on_ties),
        cmocka_unit_test(user_priority_wins),
        cmocka_unit_test(disabled_and_failed_last),
        cmocka_unit_test(pending_module_ranks_by_table),
        cmocka_unit_test(registry_from_environment),
        cmocka_unit_test(hold_keeps_progressing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
