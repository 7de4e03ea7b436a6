#!/bin/sh
# The regions that killed processes leave in /dev/shm (libfabric's shm
# provider, 16 MiB each) are removed by the next process that opens an ofi
# endpoint over shm (PSP_OFI_SWEEP, plugins/ofi/ofi_sweep.h):
#   - a live process holds a lock on its region;
#   - after SIGKILL the regions stay;
#   - a process that opens its endpoint within 5 s leaves them (too young);
#   - so does one with PSP_OFI_SWEEP=0;
#   - the next one removes them, says so, and runs.
# SKIP (77) when the ofi plugin or its shm provider does not run here.
#
# Usage: check-ofi-sweep.sh PSCOM_BENCH PSCOM_INFO
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 PSCOM_BENCH PSCOM_INFO" >&2
    exit 2
fi
bench=$1 info=$2 me=check-ofi-sweep
dir=$(mktemp -d) || exit 1
pid= child=
trap '[ -n "$pid" ] && kill -9 $pid $child 2>/dev/null; rm -rf "$dir"' EXIT
. "${0%/*}/ofi-shm-setup.sh"

# regions PID: the names of the regions of process PID in /dev/shm.
regions() {
    ls /dev/shm | grep -E "^pscom-$1-[0-9a-f]{8}:" || true
}

# A ping-pong that runs until it is killed: the server (pid) and the
# client it forks (child) each open an endpoint.
"$bench" --transport ofi --sizes 8 --iters 100000000 --timeout 120 \
    >"$dir/victims" 2>&1 &
pid=$!
i=0
while :; do
    child=$(pgrep -P "$pid" | head -n 1)
    if [ -n "$child" ] && [ -n "$(regions "$pid")" ] &&
       [ -n "$(regions "$child")" ]; then
        break
    fi
    i=$((i + 1))
    [ $i -lt 200 ] || fail "no regions of $pid and its client after 20 s"
    kill -0 "$pid" 2>/dev/null || fail "pscom_bench ended early"
    sleep 0.1
done
victims="$(regions "$pid") $(regions "$child")"
echo "regions of the processes to kill: $victims"

# Each holds a lock on its region (flock, shown in /proc/locks by inode).
for p in $pid $child; do
    for r in $(regions "$p"); do
        ino=$(stat -c %i "/dev/shm/$r")
        grep -Eq "FLOCK +ADVISORY +READ +$p [0-9a-f]+:[0-9a-f]+:$ino " /proc/locks ||
            fail "process $p holds no lock on its region $r (inode $ino)"
    done
done

# Stopped first: neither may see the other die and exit on its own (which
# removes its region) in the moment between the two kills.
kill -STOP "$pid" "$child"
kill -9 "$pid" "$child"
wait "$pid" 2>/dev/null
# The client was pscom_bench's child: once orphaned, init reaps it. Until
# then it is a zombie, whose id still exists; where init does not reap,
# only the server's regions are checked.
i=0
while [ -e "/proc/$child" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
if [ -e "/proc/$child" ]; then
    echo "the killed client $child was not reaped: checking only $pid's regions"
    victims=$(regions "$pid")
fi
pid= child=
for r in $victims; do
    [ -e "/dev/shm/$r" ] || {
        echo "--- /dev/shm now:" >&2
        ls -l --time-style=+%T /dev/shm >&2
        fail "$r went away with its process"
    }
done

# The regions' status change times (when they were made), kept for the
# checks below: the sweep's age is the same whole-second difference.
times=$(for r in $victims; do stat -c %Z "/dev/shm/$r"; done | sort -n)
first=$(echo "$times" | head -n 1)
last=$(echo "$times" | tail -n 1)

# sweep_run NAME [VAR=VALUE...]: one short ping-pong over ofi.
sweep_run() {
    name=$1
    shift
    env "$@" PSP_DEBUG=4 "$bench" --transport ofi --sizes 8 --iters 20 \
        --timeout 60 >"$dir/$name" 2>&1 || fail "the run $name failed"
}

# Within 5 s of their making. Decided after the run: if even the oldest
# is at most 4 s old when the run has ended, each was younger than 5 s
# when the run swept, and must be there (on a slow host they may be older:
# then this step says so and checks nothing).
sweep_run young
if [ $(($(date +%s) - first)) -le 4 ]; then
    for r in $victims; do
        [ -e "/dev/shm/$r" ] || fail "$r was removed although younger than 5 s"
    done
else
    echo "the run ended more than 4 s after the regions were made: not checked"
fi

# Older than 5 s now (the youngest by a second more).
while [ $(($(date +%s) - last)) -le 6 ]; do sleep 0.5; done
sweep_run off PSP_OFI_SWEEP=0
for r in $victims; do
    [ -e "/dev/shm/$r" ] || fail "$r was removed with PSP_OFI_SWEEP=0"
done

sweep_run sweep
for r in $victims; do
    [ -e "/dev/shm/$r" ] && fail "$r is still there"
    grep -q "ofi: removed /dev/shm/$r, the region of a process that is gone" \
        "$dir/sweep" || fail "no line names the removal of $r"
done
grep -Eq 'ofi: removed [0-9]+ regions? of dead processes from /dev/shm' \
    "$dir/sweep" || fail "no summary line"
echo "removed: $victims"
exit 0
