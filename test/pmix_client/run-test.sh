#!/bin/sh
# Run one test of pmix_client_test under a PMIx launcher and judge its output.
#
#   run-test.sh LAUNCHER BUILD_ROOT TEST_EXE NP TEST [ARGS...]
#
# LAUNCHER: pscom_run (the one of this build tree), mpirun (Open MPI), or
# none (a singleton: no launcher, PMIx variables removed). A launcher that
# is missing, or a test the launcher cannot host, is skipped: exit 77 with
# the reason on stdout.
#
# Pass: the launcher succeeded (or, for `kill`, ended as the test expects),
# every rank that should printed "RESULT rank R: OK", nobody printed FAIL,
# and the log lines the test is about are there.
set -u

launcher=$1 build=$2 exe=$3 np=$4 test=$5
shift 5

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

out=$(mktemp "${TMPDIR:-/tmp}/pmix_client_test.XXXXXX")
trap 'rm -f "$out" "$out.uri"; [ -n "${srv_pid:-}" ] && kill "$srv_pid" 2>/dev/null' EXIT

# The whole run is bounded; meson's timeout is larger.
limit=90

case $launcher in
pscom_run)
    pr=""
    for c in "$build/bin/pscom_run/pscom_run" "$build/bin/pscom_run"; do
        [ -f "$c" ] && [ -x "$c" ] && { pr=$c; break; }
    done
    [ -n "$pr" ] || skip "pscom_run is not built in $build (bin/pscom_run)"
    run() { timeout -s KILL $limit "$pr" --timeout $((limit - 10)) "$@"; }
    ;;
mpirun)
    command -v mpirun >/dev/null 2>&1 || skip "mpirun (Open MPI) is not installed"
    run() { timeout -s KILL $limit mpirun --allow-run-as-root --oversubscribe "$@"; }
    ;;
none)
    for v in $(env | sed -n 's/^\(PMIX_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
    run() { shift 2; timeout -s KILL $limit "$@"; } # drop "-n N"
    ;;
*)
    fail "unknown launcher $launcher"
    ;;
esac

count_ok() { grep -c "^RESULT rank [0-9]*: OK" "$out"; }

case $test in
kill)
    case $launcher in
    mpirun)
        skip "Open MPI 4's mpirun ends the whole job when a rank dies; with" \
             "--enable-recovery its PMIx event is lost (PMIx BAD-PARAM in" \
             "its server), so survivors get no event to test" ;;
    none) skip "kill needs a launcher" ;;
    esac
    run --keep-going -n "$np" "$exe" kill "$@" >"$out" 2>&1
    rc=$?
    cat "$out"
    grep -q "FAIL" "$out" && fail "a rank failed"
    [ "$(count_ok)" -eq $((np - 1)) ] || fail "expected $((np - 1)) survivors to pass (rc $rc)"
    grep -q "rank $((np - 1)) failed (PMIx event" "$out" ||
        fail "no log line naming the killed rank $((np - 1)) and the event"
    echo "PASSED (launcher status $rc: one rank was killed on purpose)"
    exit 0
    ;;
lost-messages|closed-socket|dead-before-boot)
    # Rank 1 ends with status 7 on purpose, after its RESULT line.
    case $launcher in
    pscom_run) ;;
    *) skip "$test needs pscom_run --keep-going (a rank ends with status 7" \
            "on purpose, which ends the job under mpirun)" ;;
    esac
    run --keep-going -n 2 "$exe" "$test" "$@" >"$out" 2>&1
    rc=$?
    cat "$out"
    grep -q "FAIL" "$out" && fail "a rank failed"
    [ "$(count_ok)" -eq 2 ] || fail "expected both ranks to pass (rc $rc)"
    [ $rc -eq 7 ] || fail "launcher exit status $rc, expected 7 (rank 1's)"
    echo "PASSED (launcher status 7: rank 1 ended so on purpose)"
    exit 0
    ;;
lost-server)
    # The rank kills its launcher and goes on without it: wait for its
    # last line, and remove what the launcher left behind.
    [ "$launcher" = pscom_run ] || skip "lost-server kills pscom_run; not another launcher"
    run -n 1 "$exe" lost-server >"$out" 2>&1
    rc=$?
    i=0
    while ! grep -qE "^RESULT rank|FAIL" "$out" && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    cat "$out"
    tmp=$(sed -n 's/^tmpdir: //p' "$out")
    case $tmp in */pscom_run.*) rm -rf "$tmp" ;; esac
    grep -q "FAIL" "$out" && fail "the rank failed"
    [ "$(count_ok)" -eq 1 ] || fail "no result from the rank (launcher status $rc)"
    # PMIx calls fail without a server anyway; the library must have
    # taken the event for its server's loss.
    grep -q "lost the connection to the PMIx server" "$out" ||
        fail "the library did not take LOST_CONNECTION for its server's loss"
    echo "PASSED (the launcher was killed on purpose: status $rc)"
    exit 0
    ;;
pubsub)
    svc="pscom-test-$$"
    case $launcher in
    pscom_run)
        # Two applications, two namespaces, one PMIx server.
        run -n 1 "$exe" pubsub-server "$svc" "${1:-session}" : \
            -n 1 "$exe" pubsub-client "$svc" "${1:-session}" >"$out" 2>&1
        rc=$?
        ;;
    mpirun)
        # Two separate mpirun invocations meet through an ompi-server.
        command -v ompi-server >/dev/null 2>&1 || skip "ompi-server is not installed"
        ompi-server --no-daemonize -r "$out.uri" >/dev/null 2>&1 &
        srv_pid=$!
        i=0
        while [ ! -s "$out.uri" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
        [ -s "$out.uri" ] || fail "ompi-server did not start"
        run --ompi-server "file:$out.uri" -np 1 "$exe" pubsub-server "$svc" \
            "${1:-session}" >"$out.1" 2>&1 &
        p1=$!
        run --ompi-server "file:$out.uri" -np 1 "$exe" pubsub-client "$svc" \
            "${1:-session}" >"$out.2" 2>&1
        rc2=$?
        wait $p1
        rc=$?
        [ $rc -eq 0 ] && rc=$rc2
        cat "$out.1" "$out.2" >"$out"
        rm -f "$out.1" "$out.2"
        ;;
    none) skip "publish/lookup needs a launcher" ;;
    esac
    cat "$out"
    grep -q "FAIL" "$out" && fail "a rank failed"
    [ "$(count_ok)" -eq 2 ] || fail "expected server and client to pass (rc $rc)"
    [ $rc -eq 0 ] || fail "launcher exit status $rc"
    echo "PASSED"
    exit 0
    ;;
badep)
    [ "$launcher" = none ] && skip "badep needs a launcher"
    mode=$1
    run -n 2 "$exe" badep "$mode" >"$out" 2>&1
    rc=$?
    cat "$out"
    grep -q "FAIL" "$out" && fail "a rank failed"
    [ "$(count_ok)" -eq 2 ] || fail "expected both ranks to pass (rc $rc)"
    case $mode in
    missing) pat="rank 1 published no endpoint string" ;;
    *) pat="rank 1 published a malformed endpoint string" ;;
    esac
    grep -q "$pat" "$out" || fail "no error message \"$pat\""
    echo "PASSED"
    exit 0
    ;;
bench)
    # TEST_EXE is pscom_bench: every pair once, one JSON line per size.
    [ "$launcher" = none ] && skip "the PMIx mode of pscom_bench needs a launcher"
    if env -u PMIX_RANK -u PMIX_NAMESPACE "$exe" --pairs all 2>&1 |
        grep -q "build with libpscom_pmix"; then
        skip "pscom_bench was built without libpscom_pmix"
    fi
    run -n "$np" "$exe" --sizes 0,1k --iters 20 --pairs all --json "$@" >"$out" 2>&1
    rc=$?
    cat "$out"
    pairs=$((np * (np - 1) / 2))
    got=$(grep -c '"ranks": \[' "$out")
    [ $rc -eq 0 ] || fail "launcher exit status $rc"
    [ "$got" -eq $((2 * pairs)) ] || fail "expected $((2 * pairs)) JSON lines (2 sizes x $pairs pairs), got $got"
    a=0
    while [ $a -lt $((np - 1)) ]; do
        b=$((a + 1))
        while [ $b -lt "$np" ]; do
            grep -q "\"ranks\": \[$a, $b\]" "$out" || fail "no result for the pair $a, $b"
            b=$((b + 1))
        done
        a=$((a + 1))
    done
    echo "PASSED"
    exit 0
    ;;
esac

# alltoall, events, singleton: every rank must pass.
run -n "$np" "$exe" "$test" "$@" >"$out" 2>&1
rc=$?
cat "$out"
grep -q "FAIL" "$out" && fail "a rank failed"
[ "$(count_ok)" -eq "$np" ] || fail "expected $np ranks to pass (rc $rc)"
[ $rc -eq 0 ] || fail "launcher exit status $rc"
if [ "$launcher" = none ]; then
    grep -q "running as a singleton" "$out" || fail "no singleton notice"
fi
echo "PASSED"
exit 0
