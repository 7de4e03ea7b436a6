#!/bin/sh
# bench/ucx_paired runs pscom over the ucx plugin and UCX's tag ping-pong in
# the same two processes: it must finish, measure both in every pair and
# account for every pair in exactly one placement group.
#
# Usage: check-ucx-paired.sh UCX_PAIRED
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 UCX_PAIRED" >&2
    exit 2
fi
tmp=$(mktemp) || exit 1
trap 'rm -f "$tmp"' EXIT
fail() {
    echo "check-ucx-paired: $*" >&2
    cat "$tmp" >&2
    exit 1
}

UCX_TLS=posix "$1" --pairs 6 --iters 50 --warmup 5 --cpu -1,-1 >"$tmp" 2>&1 ||
    fail "ucx_paired failed"
grep -q '^ucx_paired: 8 B, 6 pairs of blocks of 50 iterations' "$tmp" ||
    fail "no header line for 6 pairs of 50 iterations"
for what in '  UCX tag ping-pong' '  pscom over ucx' 'ratio pscom/UCX, paired'; do
    line=$(grep "^$what " "$tmp") || fail "no line '$what'"
    # median, quartiles and range: positive numbers
    echo "$line" | grep -Eq 'median +[0-9]+\.[0-9]+ +quartiles +[0-9.]+ +[0-9.]+ +range +[0-9.]+-[0-9.]+$' ||
        fail "malformed line: $line"
    echo "$line" | grep -q 'median  *0\.000 ' && fail "zero median: $line"
done
pairs=$(sed -n 's/^  placement UCX .*: *\([0-9][0-9]*\) pairs,.*/\1/p' "$tmp" |
        awk '{ n += $1 } END { print n + 0 }')
[ "$pairs" -eq 6 ] || fail "the placement groups hold $pairs pairs, not 6"

# A bad option is refused with a message, not run.
"$1" --pairs 0 >"$tmp" 2>&1 && fail "--pairs 0 was accepted"
grep -q 'pairs' "$tmp" || fail "--pairs 0: no message naming it"
exit 0
