#!/bin/sh
# A process stuck in a libfabric call ends with an error that names the
# call and the peer that is gone, instead of hanging (PSP_OFI_STALL_TIMEOUT,
# plugins/ofi/ofi_watch.h):
#   - pscom_bench's server runs a ping-pong over the shm provider with a
#     preloaded pthread_spin_lock (test/ofi/stall_spin.c) that, after a
#     while, never returns in it: a lock that a killed process held;
#   - once it spins, its client is killed;
#   - with PSP_OFI_STALL_TIMEOUT=0 the server is still there 5 s later
#     (the stand-in really hangs it);
#   - with PSP_OFI_STALL_TIMEOUT=2 it ends within 30 s, with exit status 1
#     and a line naming the call, the provider and the killed client.
# SKIP (77) when the ofi plugin or its shm provider does not run here.
#
# Usage: check-ofi-stall.sh PSCOM_BENCH PSCOM_INFO STALL_SPIN_SO
set -u

if [ $# -ne 3 ]; then
    echo "usage: $0 PSCOM_BENCH PSCOM_INFO STALL_SPIN_SO" >&2
    exit 2
fi
bench=$1 info=$2 shim=$3 me=check-ofi-stall
dir=$(mktemp -d) || exit 1
pid= child=

# The shm provider's regions of the given processes (16 MiB each in
# /dev/shm): neither process of a run closes its endpoint.
drop_regions() {
    for p in "$@"; do
        rm -f /dev/shm/pscom-"$p"-*
    done
}

cleanup() {
    for p in $pid $child; do kill -9 "$p" 2>/dev/null; done
    [ -n "$pid" ] && wait "$pid" 2>/dev/null
    drop_regions $pid $child
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
. "${0%/*}/ofi-shm-setup.sh"

# run NAME TIMEOUT: start the ping-pong with the stand-in armed in the
# server, wait until it spins, kill the client. Sets pid and child.
run() {
    rm -f "$dir/spins"
    # $$ of the inner shell is the server's process id after exec.
    PSP_OFI_STALL_TIMEOUT=$2 STALL_SPIN_AFTER_MS=300 \
    STALL_SPIN_MARK="$dir/spins" BENCH="$bench" SHIM="$shim" \
        sh -c 'export STALL_SPIN_PID=$$; LD_PRELOAD="$SHIM" exec "$BENCH" \
            --transport ofi --sizes 8 --iters 100000000 --timeout 300' \
        >"$dir/$1" 2>&1 &
    pid=$!
    child=
    i=0
    # The client's id is taken while it is surely the server's child.
    until [ -n "$child" ] && [ -e "$dir/spins" ]; do
        [ -n "$child" ] || child=$(pgrep -P "$pid" | head -n 1)
        i=$((i + 1))
        [ $i -lt 300 ] || fail "$1: the server did not start spinning in 30 s"
        kill -0 "$pid" 2>/dev/null || fail "$1: pscom_bench ended early"
        sleep 0.1
    done
    kill -9 "$child"
}

run hang 0
sleep 5
kill -0 "$pid" 2>/dev/null ||
    fail "with PSP_OFI_STALL_TIMEOUT=0 the spinning server ended by itself"
kill -9 "$pid"
wait "$pid" 2>/dev/null
drop_regions "$pid" "$child"
echo "PSP_OFI_STALL_TIMEOUT=0: process $pid still spinning after 5 s"
pid= child=

run stall 2
i=0
while kill -0 "$pid" 2>/dev/null; do
    # An ended server is a zombie until this script waits for it.
    state=$(ps -o stat= -p "$pid" 2>/dev/null)
    case $state in Z*) break ;; esac
    i=$((i + 1))
    [ $i -lt 300 ] || fail "stall: the server $pid still runs 30 s after its client was killed"
    sleep 0.1
done
wait "$pid"
rc=$?
drop_regions "$pid" "$child"
server=$pid killed=$child
pid= child=
[ $rc -eq 1 ] || fail "stall: exit status $rc, not 1"
line=$(grep -E "ofi: fi_[a-z_]+ of provider shm has not returned for [0-9.]+ s \(the process used [0-9.]+ s of CPU meanwhile\); of the 1 connected peer on this node, 1 has ended: .* \(pid $killed\)\..*ending this process \(PSP_OFI_STALL_TIMEOUT=2 s" \
    "$dir/stall") ||
    fail "stall: no line names the call, the provider and the killed client $killed"
echo "$line"
secs=$(echo "$line" | sed -E 's/.* has not returned for ([0-9.]+) s .*/\1/')
awk -v s="$secs" 'BEGIN { exit !(s >= 2.0) }' ||
    fail "stall: reported after $secs s, before the timeout of 2 s"
echo "PSP_OFI_STALL_TIMEOUT=2: process $server ended with status 1"
exit 0
