/*
 * pscom_info: what this build of pscom is and has — version, features,
 * transport plugins, settings (-c), and API functions not implemented yet.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "plugin.h"
#include "psc_build.h"
#include "pscom.h"
#include "pscom_plugin.h"

static void usage(FILE *out, const char *prog)
{
    fprintf(out,
            "Usage: %s [-c [--markdown] | -p | -v | -h]\n"
            "Show what this pscom library is and has.\n"
            "\n"
            "  (no option)   version, features, plugins and the API functions\n"
            "                not implemented yet\n"
            "  -c, --config  every PSP_* setting: type, default, current value\n"
            "                and where it came from, owner, description\n"
            "  --markdown    with -c: the settings as the markdown document\n"
            "                doc/configuration.md\n"
            "  -p, --plugins the transport plugins only\n"
            "  -v, --version the version only, then once more as a line in\n"
            "                the form of ParaStation pscom's pscom_info -v,\n"
            "                which ParaStation MPI's configure reads\n"
            "  -h, --help    this text\n",
            prog);
}

static void print_version(void)
{
    printf("pscom %s\n", PSC_VERSION_STRING);
    printf("  API version       0x%06x (PSCOM_API_VERSION)\n",
           (unsigned)PSCOM_API_VERSION);
    printf("  ABI version       0x%04x (PSCOM_VERSION; soname libpscom.so.%d)\n",
           (unsigned)PSCOM_VERSION, PSCOM_ABI_VERSION_MAJOR);
    printf("  plugin interface  0x%04x (PSCOM_PLUGIN_API_VERSION)\n",
           (unsigned)PSCOM_PLUGIN_API_VERSION);
}

/* The version as a line of ParaStation pscom's diagnostics:
 * "<PSP:HOST:PID:TEXT>", the version in parentheses at its end with a
 * '-' and a build suffix after x.y.z. ParaStation MPI's configure takes
 * "x.y.z-suffix" from such a line of `pscom_info -v` for its own version
 * report. Our suffix names this implementation. */
static void print_version_line_psp(void)
{
    char host[64] = "";
    if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
    printf("<PSP:%s:%d:# Version(PSCOM): open pscom (%s-open)>\n", host,
           (int)getpid(), PSC_VERSION_STRING);
}

static void print_features(void)
{
    printf("\nBuild features\n");
#ifdef PSC_ENABLE_TRACE
    printf("  trace output (PSP_DEBUG=6)  compiled in\n");
#else
    printf("  trace output (PSP_DEBUG=6)  not compiled in (-Dtrace=true)\n");
#endif
#if PSCOM_ABI_CUDA_SUPPORT
    printf("  CUDA awareness              yes\n");
#else
    printf("  CUDA awareness              no\n");
#endif
    printf("  threads                     yes (pscom_init_thread)\n");
    printf("  loadable plugins            %s<name>.so in %s\n",
           PSC_PLUGIN_PREFIX,
           psc_settings.plugindir && *psc_settings.plugindir
               ? psc_settings.plugindir
               : "the directory of libpscom (PSP_PLUGINDIR unset)");
    printf("  install libdir              %s\n", PSC_INSTALL_LIBDIR);
}

static const char *state_str(enum psc_plugin_state state)
{
    switch (state) {
    case PSC_PLUGIN_LOADED: return "loaded";
    case PSC_PLUGIN_DISABLED: return "disabled";
    case PSC_PLUGIN_FAILED: return "failed";
    case PSC_PLUGIN_PENDING: return "pending";
    }
    return "?";
}

static void print_plugins(void)
{
    unsigned n;

    psc_plugins_load();
    psc_plugins_init_all();
    n = psc_plugin_count();

    printf("\nPlugins (in the order they are tried; PSP_<NAME>=0 disables "
           "one, a larger value tries it earlier)\n");
    if (n == 0) {
        printf("  none\n");
        return;
    }
    printf("  (fds: file descriptors an open connection keeps)\n");
    printf("  %-10s %-9s %8s %10s %4s  %s\n", "name", "state", "built-in",
           "PSP_<NAME>", "fds", "from");
    for (unsigned i = 0; i < n; i++) {
        const struct psc_plugin *p = psc_plugin_get(i);
        char prio[16];

        if (!p) continue;
        if (p->desc)
            snprintf(prio, sizeof(prio), "%d", p->desc->priority);
        else
            snprintf(prio, sizeof(prio), "-");
        char fds[16] = "-";
        if (p->desc) snprintf(fds, sizeof(fds), "%u", p->desc->fds_per_con);
        const char *from = p->path[0] ? p->path
                           : p->desc  ? "built-in"
                                      : "-";
        printf("  %-10s %-9s %8s %10d %4s  %s\n", p->name, state_str(p->state),
               prio, p->user_priority, fds, from);
        if (p->why[0]) printf("  %-10s %-9s reason: %s\n", "", "", p->why);
    }
}

static void print_not_implemented(void)
{
    unsigned n = 0;

    printf("\nAPI functions not implemented yet\n");
    for (const char *const *f = psc_not_implemented; f && *f; f++) {
        printf("  %s\n", *f);
        n++;
    }
    if (n == 0)
        printf("  none\n");
    else
        printf("  (%u functions)\n", n);
}

int main(int argc, char **argv)
{
    enum { OPT_MARKDOWN = 256 };
    static const struct option longopts[] = {
        {"config", no_argument, NULL, 'c'},
        {"markdown", no_argument, NULL, OPT_MARKDOWN},
        {"plugins", no_argument, NULL, 'p'},
        {"version", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int config = 0, markdown = 0, plugins_only = 0, version_only = 0;
    pscom_err_t rc;
    int c;

    while ((c = getopt_long(argc, argv, "cpvh", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': config = 1; break;
        case OPT_MARKDOWN: markdown = 1; break;
        case 'p': plugins_only = 1; break;
        case 'v': version_only = 1; break;
        case 'h': usage(stdout, argv[0]); return 0;
        default: usage(stderr, argv[0]); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument \"%s\"\n", argv[0],
                argv[optind]);
        usage(stderr, argv[0]);
        return 2;
    }
    if (markdown && !config) {
        fprintf(stderr, "%s: --markdown goes with -c\n", argv[0]);
        usage(stderr, argv[0]);
        return 2;
    }
    if (config + plugins_only + version_only > 1) {
        fprintf(stderr, "%s: -c, -p and -v exclude each other\n", argv[0]);
        usage(stderr, argv[0]);
        return 2;
    }

    if (version_only) {
        print_version();
        print_version_line_psp();
        return 0;
    }

    rc = pscom_init(PSCOM_VERSION);
    if (rc != PSCOM_SUCCESS) {
        fprintf(stderr, "%s: pscom_init failed: %s\n", argv[0],
                pscom_err_str(rc));
        return 1;
    }

    if (config) {
        /* Plugins add their rows when they are loaded. */
        psc_plugins_load();
        psc_plugins_init_all();
        psc_config_print(stdout, markdown);
        return 0;
    }
    if (plugins_only) {
        print_plugins();
        return 0;
    }

    print_version();
    print_features();
    print_plugins();
    print_not_implemented();
    printf("\n`%s -c` lists every PSP_* setting.\n", argv[0]);
    return 0;
}
