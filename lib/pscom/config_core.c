/*
 * The core's rows of the configuration table, and the PSP_* variables that
 * ParaStation MPI reads for itself (so that setting them is not reported as
 * unknown).
 */
#include <stdlib.h>

#include "config.h"
#include "log.h"

struct psc_settings psc_settings;

#define CORE_ROW(name, type, def, field, help)                                 \
    {name, type, def, help, "core", NULL, &psc_settings.field}

static const pscom_config_row_t core_rows[] = {
    CORE_ROW("PSP_DEBUG", PSCOM_CONFIG_INT, "1", debug,
             "Diagnostics level: 0 fatal, 1 error, 2 warning, 3 info, "
             "4 debug, 5 verbose, 6 trace (6 needs a build with -Dtrace=true)."),
    CORE_ROW("PSP_DEBUG_OUT", PSCOM_CONFIG_STR, NULL, debug_out,
             "File that diagnostics are appended to instead of stderr; the "
             "name is expanded like a shell word ($VAR, ~), without command "
             "substitution."),
    CORE_ROW("PSP_DEBUG_PARAM", PSCOM_CONFIG_INT, "0", debug_param,
             "Print settings at initialisation: 1 those taken from the "
             "environment, 2 all of them."),
    CORE_ROW("PSP_DEBUG_CONTYPE", PSCOM_CONFIG_BOOL, "0", debug_contype,
             "Print the transport chosen for each connection."),
    CORE_ROW("PSP_DEBUG_PRECON", PSCOM_CONFIG_BOOL, "0", debug_precon,
             "Trace the pre-connection handshake."),
    CORE_ROW("PSP_DEBUG_VERSION", PSCOM_CONFIG_BOOL, "0", debug_version,
             "Print the library version at initialisation."),
    CORE_ROW("PSP_DEBUG_TIMING", PSCOM_CONFIG_STR, "0", debug_timing,
             "Timestamp in the prefix of every diagnostic line, "
             "<pscom:PID:HOST:TIME>: 0 none; us (or 1) seconds since "
             "initialisation; delta seconds since the previous line; wall "
             "seconds since the epoch (all as seconds.microseconds); date "
             "local date and time, YYYY-MM-DD_hh:mm:ss.uuuuuu."),
    CORE_ROW("PSP_DEBUG_STATS", PSCOM_CONFIG_BOOL, "0", debug_stats,
             "Print a line of statistics for each connection when it is "
             "closed (at exit for those still open), whatever PSP_DEBUG: "
             "messages and bytes sent and received, how many of them by "
             "rendezvous, how many arrived before their receive was posted "
             "(unexpected), and one-sided operations posted."),
    CORE_ROW("PSP_RENDEZVOUS", PSCOM_CONFIG_SIZE, "inf", rendezvous,
             "Messages of at least this many bytes use the rendezvous "
             "protocol; a plugin's PSP_<NAME>_RENDEZVOUS overrides it."),
    CORE_ROW("PSP_SCHED_YIELD", PSCOM_CONFIG_BOOL, "0", sched_yield,
             "Call sched_yield() between progress polls."),
    CORE_ROW("PSP_WAIT_SPIN", PSCOM_CONFIG_UINT, "50", wait_spin_us,
             "Microseconds a wait polls without progress before it rests: "
             "sleeps (PSP_WAIT_SLEEP) or yields the CPU on every poll, until "
             "something happens. Short enough that processes sharing cores "
             "get them, long enough to cover a round trip on the node."),
    CORE_ROW("PSP_WAIT_SLEEP", PSCOM_CONFIG_BOOL, "1", wait_sleep,
             "A resting wait sleeps until a file descriptor is ready (at "
             "most 10 ms at a time) when every transport in use signals "
             "through descriptors (tcp; not shm, ucx, ofi, verbs) and only "
             "one thread uses pscom; 0: it yields the CPU instead."),
    CORE_ROW("PSP_TCP_BACKLOG", PSCOM_CONFIG_UINT, "262144", tcp_backlog,
             "Backlog of listening sockets; the kernel caps it at "
             "net.core.somaxconn."),
    CORE_ROW("PSP_RETRY", PSCOM_CONFIG_UINT, "10", retry,
             "Connection attempts before a connection fails."),
    CORE_ROW("PSP_CONNECT_TIMEOUT", PSCOM_CONFIG_UINT, "10000",
             connect_timeout_ms,
             "Milliseconds a step of a connection's setup may stall before "
             "the attempt fails (PSP_RETRY attempts); 0: no limit."),
    CORE_ROW("PSP_SHUTDOWN_TIMEOUT", PSCOM_CONFIG_UINT, "0",
             shutdown_timeout_ms,
             "Milliseconds to wait for pending sends when closing; 0 waits "
             "without limit (at exit, where the library closes what is still "
             "open: 10 s)."),
    CORE_ROW("PSP_NETWORK", PSCOM_CONFIG_STR, NULL, network,
             "Network address (like 192.168.1.0) choosing the interface "
             "whose address goes into the endpoint string and the node id."),
    CORE_ROW("PSP_PLUGINDIR", PSCOM_CONFIG_DIR, NULL, plugindir,
             "Directory where loadable plugins libpscom4<name>.so are looked "
             "up; unset: the directory of libpscom itself."),
    CORE_ROW("PSP_ONDEMAND", PSCOM_CONFIG_BOOL, "0", ondemand,
             "Where the library itself chooses how to connect: 1 connects "
             "lazily on the first message (pscom_bench connects at once "
             "otherwise); 0 makes the PMIx bootstrap connect all ranks at "
             "once (it connects on demand while this is unset)."),
    CORE_ROW("PSP_PRECON_MAX_RECORD", PSCOM_CONFIG_UINT, "65536",
             precon_max_payload,
             "Largest pre-connection record accepted, in bytes."),
    CORE_ROW("PSP_SIGQUIT", PSCOM_CONFIG_BOOL, "0", sigquit,
             "1: a SIGQUIT (Ctrl-backslash) makes the process print the "
             "library's state (connections, pending requests, handshakes) "
             "to the log, whatever PSP_DEBUG says, once it is inside pscom, "
             "and go on running; an application's own SIGQUIT handler "
             "still runs."),
};

/*
 * ParaStation MPI's own settings (psp device, version 5.14), read with
 * pscom_env_get_*(). Their values here are never used; the rows exist for
 * the unknown-variable check, pscom_info -c and the documentation.
 */
static struct {
    int i[20];
    unsigned u[16];
    int b[4];
    char *s[4];
} mpi_dummy;

#define MPI_INT(n, name, def, help)                                            \
    {name, PSCOM_CONFIG_INT, def, help, "mpi", NULL, &mpi_dummy.i[n]}
#define MPI_UINT(n, name, def, help)                                           \
    {name, PSCOM_CONFIG_UINT, def, help, "mpi", NULL, &mpi_dummy.u[n]}
#define MPI_BOOL(n, name, def, help)                                           \
    {name, PSCOM_CONFIG_BOOL, def, help, "mpi", NULL, &mpi_dummy.b[n]}
#define MPI_STR(n, name, def, help)                                            \
    {name, PSCOM_CONFIG_STR, def, help, "mpi", NULL, &mpi_dummy.s[n]}

static const pscom_config_row_t mpi_rows[] = {
    MPI_UINT(0, "PSP_COLLECTIVES", "0",
             "Read by ParaStation MPI: 1 enables the psp device's own "
             "collectives."),
    MPI_UINT(1, "PSP_DIRECT_CONNECT", "0",
             "Read by ParaStation MPI: 1 connects all ranks in MPI_Init "
             "instead of on demand at the first message."),
    {"PSP_DIRECT_CONNECT_SPAWN", PSCOM_CONFIG_UINT, "0",
     "Read by ParaStation MPI: as PSP_DIRECT_CONNECT, for the connections "
     "of spawned processes.",
     "mpi", "PSP_DIRECT_CONNECT", &mpi_dummy.u[2]},
    MPI_INT(0, "PSP_SMP_NODE_ID", NULL,
            "Read by ParaStation MPI: the node id grouping ranks of one "
            "node (unset: pscom's node id; -1: every rank on a node of its "
            "own, for debugging)."),
    MPI_UINT(3, "PSP_MSA_AWARENESS", "0",
             "Read by ParaStation MPI: 1 takes the modular supercomputing "
             "topology (PSP_MSA_MODULE_ID, PSP_MSA_NODE_ID) into account "
             "(built with --enable-msa-awareness)."),
    MPI_INT(1, "PSP_MSA_MODULE_ID", "-1",
            "Read by ParaStation MPI with PSP_MSA_AWARENESS=1: the module "
            "id of this rank."),
    MPI_INT(2, "PSP_MSA_NODE_ID", NULL,
            "Read by ParaStation MPI with PSP_MSA_AWARENESS=1: the node id "
            "of this rank, replacing PSP_SMP_NODE_ID."),
    MPI_UINT(4, "PSP_MSA_AWARE_COLLOPS", "1",
             "Read by ParaStation MPI: 1 uses MSA-aware hierarchical "
             "collectives (builds without HCOLL and UCC)."),
    MPI_INT(3, "PSP_UCC", "0",
            "Read by ParaStation MPI: 1 uses UCC for collectives (built "
            "with --with-ucc)."),
    MPI_STR(0, "PSP_UCC_VERBOSE", NULL,
            "Read by ParaStation MPI: verbosity of its UCC bindings, 0 "
            "(none) to 8 (all)."),
    MPI_INT(4, "PSP_UCC_DEBUG", "0",
            "Read by ParaStation MPI: 1 adds debug output of its UCC "
            "bindings."),
    MPI_INT(5, "PSP_UCC_RELAXED_STDCOMPLIANCE", "0",
            "Read by ParaStation MPI: 1 allows more aggressive UCC "
            "optimisations (no datatype packing)."),
    MPI_UINT(5, "PSP_HISTOGRAM", "0",
             "Read by ParaStation MPI: 1 collects a histogram of message "
             "sizes and prints it at the end (built with "
             "--enable-statistics)."),
    MPI_INT(6, "PSP_HISTOGRAM_MAX", "67108864",
            "Read by ParaStation MPI: upper message size limit of the "
            "histogram."),
    MPI_INT(7, "PSP_HISTOGRAM_MIN", "64",
            "Read by ParaStation MPI: lower message size limit of the "
            "histogram."),
    MPI_INT(8, "PSP_HISTOGRAM_SHIFT", "1",
            "Read by ParaStation MPI: bit shift between histogram bins."),
    MPI_STR(1, "PSP_HISTOGRAM_CONTYPE", NULL,
            "Read by ParaStation MPI: limit the histogram to one connection "
            "type (like shm or tcp)."),
    MPI_UINT(6, "PSP_COLLOPS_STATS", "0",
             "Read by ParaStation MPI: 1 collects usage statistics of "
             "collectives."),
    MPI_UINT(7, "PSP_HCOLL_STATS", "0",
             "Read by ParaStation MPI: 1 collects usage statistics of "
             "HCOLL."),
    MPI_UINT(8, "PSP_UCC_STATS", "0",
             "Read by ParaStation MPI: 1 collects usage statistics of UCC."),
    MPI_UINT(9, "PSP_LAZY_DISCONNECT", "1",
             "Read by ParaStation MPI: 0 closes the connection to a "
             "disconnected process at once; 1 leaves it open."),
    MPI_UINT(10, "PSP_COMPRESSOR_PLUGINS", "0",
             "Read by ParaStation MPI: 1 lets partitioned communication load "
             "compressor plugins."),
    MPI_INT(9, "PSP_ACCUMULATE_ORDERING", "-1",
            "Read by ParaStation MPI: ordering of RMA accumulate operations "
            "(-1: as the window's info key says)."),
    MPI_INT(10, "PSP_RMA_EXPLICIT_WAIT", "-1",
            "Read by ParaStation MPI: explicit wait on the passive side of "
            "RMA (-1: as the window's info key says)."),
    MPI_INT(11, "PSP_HARD_ABORT", "0",
            "Read by ParaStation MPI: how MPI_Abort ends the process: 0 "
            "exit(), 1 PMI_Abort(), 2 _exit(), 3 abort()."),
    MPI_INT(12, "PSP_FINALIZE_BARRIER", "1",
            "Read by ParaStation MPI: barrier in MPI_Finalize: 0 none, 1 "
            "MPI barriers (the second with PSP_FINALIZE_TIMEOUT), 2 the "
            "PMI/PMIx barrier."),
    MPI_INT(13, "PSP_FINALIZE_TIMEOUT", "30",
            "Read by ParaStation MPI: seconds the second finalize barrier "
            "may take (0: no second barrier)."),
    MPI_INT(14, "PSP_FINALIZE_SHUTDOWN", "0",
            "Read by ParaStation MPI: 1 shuts all pscom sockets down in "
            "MPI_Finalize."),
    MPI_INT(15, "PSP_FINALIZE_EXIT", "0",
            "Read by ParaStation MPI: at the end of MPI_Finalize call 1 "
            "exit(), 2 _exit()."),
    MPI_UINT(11, "PSP_DEBUG_SETTINGS", "0",
             "Read by ParaStation MPI: 1 compares version, process manager "
             "and connect settings of all processes in MPI_Init."),
    MPI_UINT(12, "PSP_KEEP_CONNECTIONS", "0",
             "Read by ParaStation MPI: 1 keeps connections open past "
             "MPI_Finalize and session finalize, for a later re-init."),
    MPI_UINT(13, "PSP_LIGHTWEIGHT_INIT_BARRIER", "1",
             "Read by ParaStation MPI: 0 skips the lightweight PMI barrier "
             "in MPI_Init."),
    /* MPICH settings with a PSP_ alias, read by MPICH itself. */
    MPI_STR(2, "PSP_PMI_VERSION", "auto",
            "Read by ParaStation MPI (MPIR_CVAR_PMI_VERSION): process "
            "management interface: auto, 1 (PMI-1) or x (PMIx)."),
    MPI_INT(16, "PSP_CUDA", "0",
            "Read by ParaStation MPI (MPIR_CVAR_ENABLE_GPU): 1 enables CUDA "
            "awareness (built with --with-cuda)."),
    MPI_BOOL(0, "PSP_HCOLL", "0",
             "Read by ParaStation MPI (MPIR_CVAR_ENABLE_HCOLL): 1 enables HCOLL "
             "collectives (built with --with-hcoll)."),
};

/*
 * ParaStation pscom's own settings that this library does not have (its
 * interface facts, /work/shared/PSCOM-FACTS.md): accepted, so that a job
 * script written for it is not told they do not exist, and named when set
 * (PSP_DEBUG >= 2) as having no effect, with what to use instead.
 */
static char *ps_dummy[16];

/* Strings: any value is taken as it is (there is nothing to parse it for),
 * and a set one is only named. Defaults are ParaStation's. */
#define PS_ROW(n, name, def, help)                                             \
    {name, PSCOM_CONFIG_STR, def, help, "parastation", NULL, &ps_dummy[n]}

static const pscom_config_row_t ps_rows[] = {
    PS_ROW(0, "PSP_UNEXPECTED_RECEIVES", "0",
           "ParaStation pscom: 1 reads from connections that have no "
           "receive posted. No effect here: every connection is read, and "
           "what no receive wants yet is kept as an unexpected message."),
    PS_ROW(1, "PSP_SIGSUSPEND", NULL,
           "ParaStation pscom: the signal that suspends the process's "
           "connections (job suspension by its process manager). No effect "
           "here: connections are not suspended."),
    PS_ROW(2, "PSP_SIGSEGV", "1",
           "ParaStation pscom: 1 prints the library's state on SIGSEGV. No "
           "effect here: the library installs no SIGSEGV handler (it would "
           "print from a broken process; use a debugger or a core file)."),
    PS_ROW(3, "PSP_DEADLOCK_WARNINGS", "0",
           "ParaStation pscom: 1 warns when a wait makes no progress for "
           "long. No effect here."),
    PS_ROW(4, "PSP_GUARD", "1",
           "ParaStation pscom: 1 watches every connection's peer through an "
           "extra TCP connection. No effect here: each transport reports "
           "its peer's end itself, and with libpscom_pmix PMIx's events "
           "fail the connections of a dead rank."),
    PS_ROW(5, "PSP_IPROBE_COUNT", "0",
           "ParaStation pscom: pscom_iprobe calls between two that make "
           "progress. No effect here: every pscom_iprobe makes progress."),
    PS_ROW(6, "PSP_DEBUG_REQ", "0",
           "ParaStation pscom: 1 keeps every request on a list for "
           "pscom_dump_reqstat. No effect here."),
    PS_ROW(7, "PSP_PRECON_TCP_SO_SNDBUF", "32768",
           "ParaStation pscom: send buffer of its pre-connection TCP "
           "socket. No effect here: PSP_TCP_SNDBUF sets the tcp "
           "transport's."),
    PS_ROW(8, "PSP_PRECON_TCP_SO_RCVBUF", "32768",
           "ParaStation pscom: receive buffer of its pre-connection TCP "
           "socket. No effect here: PSP_TCP_RCVBUF sets the tcp "
           "transport's."),
    PS_ROW(9, "PSP_PRECON_TCP_NODELAY", "1",
           "ParaStation pscom: TCP_NODELAY on its pre-connection socket. No "
           "effect here: PSP_TCP_NODELAY sets the tcp transport's."),
    PS_ROW(10, "PSP_PRECON_TCP_RECONNECT_TIMEOUT", "2000",
           "ParaStation pscom: milliseconds before a stalled connect is "
           "tried again. No effect here: PSP_CONNECT_TIMEOUT and "
           "PSP_RETRY bound the setup."),
    PS_ROW(11, "PSP_PRECON_TCP_CONNECT_STALLED_MAX", "6",
           "ParaStation pscom: stalled connects tolerated. No effect here: "
           "PSP_CONNECT_TIMEOUT and PSP_RETRY bound the setup."),
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *const timing_words[] = {"0",    "1",    "us",
                                           "date", "wall", "delta", NULL};

static const psc_config_words_t core_words[] = {
    {"PSP_DEBUG_TIMING", timing_words},
};

void psc_config_core_register(void)
{
    const char *text;
    int level;

    /* PSP_DEBUG and PSP_DEBUG_OUT first, so that what registration reports
     * goes where and at the level the user asked for. */
    text = pscom_env_get("PSP_DEBUG");
    if (text && psc_config_parse(&core_rows[0], text, &level) == 0)
        psc_log_level_set(level);
    text = pscom_env_get("PSP_DEBUG_OUT");
    if (text && *text) psc_log_open(text);

    psc_config_words(core_words, COUNT(core_words));
    psc_config_register(core_rows, COUNT(core_rows));
    psc_config_register(mpi_rows, COUNT(mpi_rows));
    psc_config_register(ps_rows, COUNT(ps_rows));

    psc_log_level_set(psc_settings.debug);
    psc_log_open(psc_settings.debug_out);
    psc_log_timing_set(psc_settings.debug_timing);
    psc_config_print_params(psc_settings.debug_param);
    psc_config_note_owner_set("parastation");
}
