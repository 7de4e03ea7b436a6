#!/bin/sh
# bench/ucx_paired and bench/ofi_paired run pscom over a plugin and that
# library's own ping-pong in the same two processes: each must finish,
# measure both in every pair and account for every pair in exactly one
# placement group; a bad option is refused. ucx_paired also in peer
# error-handling mode (PAIRED_PEER_ERRORS=1).
#
# Usage: check-paired.sh PAIRED VAR=VALUE [BYTES]
#   VAR=VALUE: the transport, e.g. UCX_TLS=posix; BYTES: message size (8)
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 PAIRED VAR=VALUE [BYTES]" >&2
    exit 2
fi
size=${3:-8}
tmp=$(mktemp) || exit 1
trap 'rm -f "$tmp"' EXIT
fail() {
    echo "check-paired: $*" >&2
    cat "$tmp" >&2
    exit 1
}

env "$2" "$1" --size "$size" --pairs 6 --iters 50 --warmup 5 --cpu -1,-1 \
    >"$tmp" 2>&1 || fail "$1 failed"
grep -q "^[a-z]*_paired: $size B, 6 pairs of blocks of 50 iterations (+5 warm-up), $2\$" "$tmp" ||
    fail "no header line for 6 pairs of 50 iterations over $2"
# The library's, pscom's and the ratio's line: median, quartiles and range,
# positive numbers.
stats='median +[0-9]+\.[0-9]+ +quartiles +[0-9.]+ +[0-9.]+ +range +[0-9.]+-[0-9.]+$'
n=$(grep -Ec " $stats" "$tmp")
[ "$n" -eq 3 ] || fail "$n lines of statistics, not 3"
grep -Eq "^  pscom over [a-z]+ +$stats" "$tmp" || fail "no line for pscom"
grep -Eq "^ratio pscom/raw, paired +$stats" "$tmp" || fail "no line for the ratio"
grep -Eq " median +0\.000 " "$tmp" && fail "a median of zero"
pairs=$(sed -n 's/^  placement .*: *\([0-9][0-9]*\) pairs,.*/\1/p' "$tmp" |
        awk '{ n += $1 } END { print n + 0 }')
[ "$pairs" -eq 6 ] || fail "the placement groups hold $pairs pairs, not 6"

# ucx_paired: UCX's endpoint in peer error-handling mode, as pscom's, on
# request (said in the report); a value other than 0 or 1 is refused.
case $1 in
*ucx_paired)
    env "$2" PAIRED_PEER_ERRORS=1 "$1" --size "$size" --pairs 2 --iters 20 \
        --warmup 2 --cpu -1,-1 >"$tmp" 2>&1 || fail "PAIRED_PEER_ERRORS=1 failed"
    grep -q "^UCX tag ping-pong: endpoint in peer error-handling mode" "$tmp" ||
        fail "PAIRED_PEER_ERRORS=1: the report does not say so"
    [ "$(grep -Ec " $stats" "$tmp")" -eq 3 ] ||
        fail "PAIRED_PEER_ERRORS=1: not 3 lines of statistics"
    env "$2" PAIRED_PEER_ERRORS=yes "$1" --pairs 1 >"$tmp" 2>&1 &&
        fail "PAIRED_PEER_ERRORS=yes was accepted"
    grep -q "PAIRED_PEER_ERRORS is 0 or 1" "$tmp" ||
        fail "PAIRED_PEER_ERRORS=yes: no message naming it"
    ;;
esac

"$1" --pairs 0 >"$tmp" 2>&1 && fail "--pairs 0 was accepted"
grep -q 'pairs' "$tmp" || fail "--pairs 0: no message naming it"
exit 0
