#!/bin/sh
# pscom_bench's --one-buffer: a window received into one buffer runs and is
# reported as such (JSON "one_buffer": true), for --bw and --bidir; with
# ping-pong or --verify it is refused with a message.
#
# Usage: check-bench-options.sh PSCOM_BENCH
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 PSCOM_BENCH" >&2
    exit 2
fi
bench=$1
tmp=$(mktemp) || exit 1
trap 'rm -f "$tmp"' EXIT
fail() {
    echo "check-bench-options: $*" >&2
    cat "$tmp" >&2
    exit 1
}

for mode in bw bidir; do
    PSP_SHM=0 "$bench" --transport tcp --"$mode" --one-buffer --sizes 4k,70k \
        --iters 3 --warmup 1 --json --timeout 60 >"$tmp" 2>&1 ||
        fail "--$mode --one-buffer failed"
    n=$(grep -c "\"mode\": \"$mode\".*\"one_buffer\": true" "$tmp")
    [ "$n" -eq 2 ] || fail "--$mode --one-buffer: $n of 2 results say one_buffer"
done
PSP_SHM=0 "$bench" --transport tcp --bw --sizes 4k --iters 3 --warmup 1 \
    --json --timeout 60 >"$tmp" 2>&1 || fail "--bw failed"
grep -q '"one_buffer": false' "$tmp" || fail "--bw: one_buffer is not false"

for args in "--one-buffer" "--bw --one-buffer --verify"; do
    # shellcheck disable=SC2086 # the options are words
    if "$bench" $args --sizes 4k >"$tmp" 2>&1; then
        fail "'$args' was accepted"
    fi
    grep -q -- "--one-buffer goes with" "$tmp" || fail "'$args': no reason given"
done
echo "check-bench-options: ok"
