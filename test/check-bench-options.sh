#!/bin/sh
# pscom_bench's --one-buffer: a window received into one buffer runs and is
# reported as such (JSON "one_buffer": true), for --bw and --bidir; with
# ping-pong or --verify it is refused with a message. --huge-pages: a run
# with every byte verified, sizes on both sides of 2 MiB, in both directions
# and streaming, is reported as such (JSON "huge_pages": true; false
# without it). Bad --sizes and --xheader values are refused.
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
grep -q '"huge_pages": false' "$tmp" || fail "--bw: huge_pages is not false"

for mode in pingpong bidir; do
    flag=
    [ "$mode" = bidir ] && flag=--bidir
    PSP_SHM=0 "$bench" --transport tcp ${flag:+"$flag"} --huge-pages --verify \
        --sizes 1m,3m --iters 3 --warmup 1 --json --timeout 60 >"$tmp" 2>&1 ||
        fail "$mode --huge-pages --verify failed"
    n=$(grep -c "\"mode\": \"$mode\".*\"huge_pages\": true" "$tmp")
    [ "$n" -eq 2 ] || fail "$mode --huge-pages: $n of 2 results say huge_pages"
done

for args in "--one-buffer" "--bw --one-buffer --verify"; do
    # shellcheck disable=SC2086 # the options are words
    if "$bench" $args --sizes 4k >"$tmp" 2>&1; then
        fail "'$args' was accepted"
    fi
    grep -q -- "--one-buffer goes with" "$tmp" || fail "'$args': no reason given"
done
# An empty item of --sizes is an error, not skipped; an xheader longer
# than a message carries (65535 less the library's 88 bytes) is refused
# before anything runs, the longest one runs.
for sizes in "4k,,8" ",8" "8,"; do
    if "$bench" --sizes "$sizes" >"$tmp" 2>&1; then
        fail "--sizes '$sizes' was accepted"
    fi
    grep -q "bad size '' in --sizes" "$tmp" || fail "--sizes '$sizes': no reason given"
done
if "$bench" --xheader 65448 --sizes 8 >"$tmp" 2>&1; then
    fail "--xheader 65448 was accepted"
fi
grep -q -- "--xheader" "$tmp" || fail "--xheader 65448: no reason given"
PSP_SHM=0 "$bench" --transport tcp --xheader 65447 --verify --sizes 8 \
    --iters 3 --warmup 1 --timeout 60 >"$tmp" 2>&1 ||
    fail "--xheader 65447 failed"
echo "check-bench-options: ok"
