#!/bin/sh
# On a machine without RDMA devices the verbs plugin is built and loads, but
# does not start: pscom_info lists it with the reason "no RDMA device
# found", and pscom_bench --transport verbs (and ParaStation's name openib)
# fails at once with that reason instead of measuring or hanging. SKIP
# (77) where an RDMA device is present.
#
# Usage: check-verbs-no-device.sh PSCOM_BENCH PSCOM_INFO
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 PSCOM_BENCH PSCOM_INFO" >&2
    exit 2
fi
bench=$1 info=$2
for d in /sys/class/infiniband/*; do
    if [ -e "$d" ]; then
        echo "SKIP: this machine has an RDMA device ($d)"
        exit 77
    fi
done
tmp=$(mktemp) || exit 1
trap 'rm -f "$tmp"' EXIT
fail() {
    echo "check-verbs-no-device: $*" >&2
    cat "$tmp" >&2
    exit 1
}

"$info" >"$tmp" 2>&1 || fail "pscom_info failed"
grep -Eq '^  verbs +failed ' "$tmp" || fail "pscom_info: verbs is not listed as failed"
grep -q 'reason: initialisation failed: no RDMA device found' "$tmp" ||
    fail "pscom_info: no reason 'no RDMA device found' for verbs"

for t in verbs openib; do
    if "$bench" --transport "$t" --sizes 8 --iters 10 --timeout 60 >"$tmp" 2>&1; then
        fail "pscom_bench --transport $t succeeded without an RDMA device"
    fi
    grep -q "transport $t is not available here: initialisation failed: no RDMA device found" "$tmp" ||
        fail "pscom_bench --transport $t: not the 'no RDMA device' message"
    # the client, stopped on purpose, is not reported as failed
    if grep -q "client process failed" "$tmp"; then
        fail "pscom_bench --transport $t: the stopped client is reported as failed"
    fi
done
echo "check-verbs-no-device: ok"
