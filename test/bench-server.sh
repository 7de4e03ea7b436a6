# Sourced by the check-*.sh scripts that run pscom_bench -l in the
# background (sh, not a program of its own).
#
# start_bench_server OUT ENV_VAR=VALUE... -- PSCOM_BENCH ARGS...
#   Starts `env ENV... PSCOM_BENCH -l PORT ARGS...` with its output in OUT,
#   on a port below Linux's ephemeral range (another if it is taken), and
#   waits until it listens. Sets port and srv_pid; calls fail (which the
#   caller defines) when no server comes up.
start_bench_server() {
    sbs_out=$1
    shift
    sbs_try=0
    while [ "$sbs_try" -lt 5 ]; do
        sbs_try=$((sbs_try + 1))
        port=$((20000 + ($$ * 7 + sbs_try * 1009) % 10000))
        : >"$sbs_out"
        sbs_listening=
        sbs_start "$sbs_out" "$port" "$@" &
        srv_pid=$!
        for _ in $(seq 100); do
            grep -q '^pscom_bench: listening on port' "$sbs_out" &&
                sbs_listening=1
            [ -n "$sbs_listening" ] && return 0
            kill -0 "$srv_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$srv_pid" 2>/dev/null
        wait "$srv_pid"
        srv_pid=
    done
    fail "the server did not listen"
}

# sbs_start OUT PORT ENV... -- BENCH ARGS...: the server itself, in the
# background subshell (the exports stay there).
sbs_start() {
    sbs_o=$1 sbs_p=$2
    shift 2
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        export "${1?}"
        shift
    done
    shift
    sbs_bench=$1
    shift
    exec "$sbs_bench" -l "$sbs_p" "$@" >"$sbs_o" 2>&1
}
