#!/bin/sh
# Negotiation falls back to the next common transport, and finally tcp,
# saying why on both sides. Two pscom_bench processes whose UCX cannot
# reach each other (the acceptor's UCX_TLS=tcp, the connector's posix):
# ucx fails at the acceptor, which rejects it with its reason; the
# connector's debug line gives that reason, and the connection runs on the
# next common transport: ofi when both have it, else tcp (PSP_OFI=0).
# (verbs is off: on a host with an RDMA device it would come first.)
# SKIP (77) when UCX cannot run here.
#
# Usage: check-fallback.sh PSCOM_BENCH PSCOM_INFO
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 PSCOM_BENCH PSCOM_INFO" >&2
    exit 2
fi
bench=$1 info=$2
. "$(dirname "$0")/bench-server.sh"
dir=$(mktemp -d) || exit 1
srv_pid=
trap '[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null; rm -rf "$dir"' EXIT
fail() {
    echo "check-fallback: $*" >&2
    for f in "$dir"/*; do echo "--- $f" >&2; cat "$f" >&2; done
    exit 1
}
# Both UCX configurations must start here.
for tls in tcp posix; do
    UCX_TLS=$tls "$info" >"$dir/info" 2>&1
    if ! grep -Eq '^  ucx +loaded ' "$dir/info"; then
        echo "SKIP: the ucx plugin does not start here with UCX_TLS=$tls"
        exit 77
    fi
done

# run EXPECTED [VAR=VALUE...]: one pair of processes; the rest of the
# environment of both sides.
run() {
    expected=$1
    shift
    start_bench_server "$dir/srv" "$@" PSP_SHM=0 PSP_VERBS=0 UCX_TLS=tcp \
        PSP_DEBUG=4 -- "$bench" --timeout 60
    env "$@" PSP_SHM=0 PSP_VERBS=0 UCX_TLS=posix PSP_DEBUG=4 "$bench" -c "127.0.0.1:$port" \
        --sizes 8,100k --iters 20 --verify --timeout 60 >"$dir/cli" 2>&1 ||
        fail "the client failed ($*)"
    wait "$srv_pid" || fail "the server failed ($*)"
    srv_pid=
    grep -q "^# connection .*\[$expected\]\$" "$dir/cli" ||
        fail "the connection does not run on $expected ($*)"
    grep -q "ucx failed here (cannot reach the peer's UCX worker: .*); rejecting it" "$dir/srv" ||
        fail "the acceptor does not say why it rejected ucx ($*)"
    grep -q "the peer cannot use ucx (cannot reach the peer's UCX worker: .*); trying the next transport" "$dir/cli" ||
        fail "the connector does not say why ucx was rejected ($*)"
}

if grep -Eq '^  ofi +loaded ' "$dir/info"; then
    run ofi PSP_OFI_PROVIDER=tcp\;ofi_rxm
fi
run tcp PSP_OFI=0
echo "check-fallback: ok"
