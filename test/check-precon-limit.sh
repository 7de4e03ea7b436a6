#!/bin/sh
# A handshake record larger than the accepting side's PSP_PRECON_MAX_RECORD
# (the two sides set it differently): the acceptor drops the connection
# saying how large the record was and what it accepts, and tells the
# connector so, which fails at once with that text instead of trying again
# PSP_RETRY times.
#
# Usage: check-precon-limit.sh PSCOM_BENCH
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 PSCOM_BENCH" >&2
    exit 2
fi
bench=$1
. "$(dirname "$0")/bench-server.sh"
dir=$(mktemp -d) || exit 1
srv_pid=
trap '[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null; rm -rf "$dir"' EXIT
fail() {
    echo "check-precon-limit: $*" >&2
    for f in "$dir"/*; do echo "--- $f" >&2; cat "$f" >&2; done
    exit 1
}

start_bench_server "$dir/srv" PSP_PRECON_MAX_RECORD=16 -- "$bench" \
    --timeout 60

# PSP_RETRY=5 with 1 s of connect timeout: retries would show as "after 5
# attempts" and take seconds.
if PSP_RETRY=5 PSP_CONNECT_TIMEOUT=1000 "$bench" -c "127.0.0.1:$port" \
    --sizes 8 --iters 10 --timeout 30 >"$dir/cli" 2>&1; then
    fail "the client connected to a server that accepts 16-byte records"
fi
limit='larger than the 16 bytes this side accepts (PSP_PRECON_MAX_RECORD)'
grep -q "refused the connection: a handshake record of [0-9]* bytes is $limit" \
    "$dir/cli" || fail "the connector does not give the acceptor's reason"
grep -q "attempts" "$dir/cli" && fail "the connector tried again"
grep -q "handshake from .*: a handshake record of [0-9]* bytes is $limit; dropping the connection" \
    "$dir/srv" || fail "the acceptor does not say why it dropped the connection"
echo "check-precon-limit: ok"
