#!/bin/sh
# Run the pscom_run test clients under Open MPI's mpirun, for comparison.
# Not part of the test suite: mpirun's PMIx server differs (see
# doc/pscom_run.md, "Compared with mpirun").  Usage:
#   test/pmix_server/compare_mpirun.sh BUILD_DIR/test/pmix_server [CASE...]
# Clients report launcher differences as "DIFF" notes (T_COMPARE=1) and
# skip the unknown-namespace queries mpirun never answers (T_SKIP_UNKNOWN=1).
dir=${1:?usage: $0 CLIENT_DIR [CASE...]}
shift
cases=${*:-"jobinfo jobinfo_mpmd wait events kill abort fence_death output locality"}
E="-x T_COMPARE=1 -x T_SKIP_UNKNOWN=1"
M="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && M="$M --allow-run-as-root"
run() {
    echo "=== $1"
    shift
    (cd "$dir" && timeout -k 5 60 "$@" 2>&1)
    echo "--- exit status $?"
}
for c in $cases; do
    case $c in
    jobinfo) run $c $M $E -n 3 ./t_jobinfo 1 3 ;;
    jobinfo_mpmd) run $c $M $E -n 2 ./t_jobinfo 2 2 3 : $E -n 3 ./t_jobinfo 2 2 3 ;;
    wait) run $c $M $E -n 1 ./t_wait 2 : $E -n 1 ./t_wait 2 ;;
    events) run $c $M $E -n 2 ./t_events 2 : $E -n 2 ./t_events 2 ;;
    kill) run $c $M $E -n 2 ./t_term 2 kill : $E -n 2 ./t_term 2 kill ;;
    kill_recovery) run $c $M --enable-recovery $E -n 2 ./t_term 2 kill keep : $E -n 2 ./t_term 2 kill keep ;;
    abort) run $c $M $E -n 3 ./t_abort 1 ;;
    fence_death) run $c $M $E -n 3 ./t_fence_death 1 after ;;
    output) run $c $M $E --tag-output -n 2 ./t_output 2 : $E -n 1 ./t_output 2 ;;
    locality) run $c $M $E --bind-to core:overload-allowed -n 3 ./t_locality 1 bound ;;
    *) echo "unknown case $c" ;;
    esac
done
