#!/bin/sh
# A handshake record larger than the accepting side's PSP_PRECON_MAX_RECORD
# (the two sides set it differently): the acceptor drops the connection
# saying how large the record was and what it accepts, and tells the
# connector so, which fails at once with that text instead of trying again
# PSP_RETRY times. The acceptor closes gracefully after the ERROR record
# (no reset), so the record is not lost over a lossy network. Then
# PSP_CONNECT_TIMEOUT=0 (no limit) connects.
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

# The acceptor closes gracefully after its ERROR record: a FIN, not a reset
# (a reset would end the connection with the record maybe still lost in
# the network), also when bytes it did not read are waiting. A raw client
# sends a HELLO header announcing 100 bytes and the 100 bytes, waits until
# the acceptor has answered and closed, and reads: the records, then EOF.
python3 - "$port" >"$dir/raw" 2>&1 <<'EOF' || fail "the raw client: see raw"
import socket, struct, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(struct.pack("<IBBHI", 0x50435350, 1, 1, 0, 100) + bytes(100))
time.sleep(0.5)
data = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except ConnectionResetError:
    sys.exit("the acceptor reset the connection after %d bytes" % len(data))
types = []
while len(data) >= 12:
    magic, ver, typ, flags, n = struct.unpack("<IBBHI", data[:12])
    if magic != 0x50435350:
        sys.exit("not a handshake record: %r" % data[:12])
    types.append(typ)
    data = data[12 + n:]
if 7 not in types:
    sys.exit("no ERROR record (7) among the records %r" % types)
print("records %r, then EOF" % types)
EOF
kill "$srv_pid" 2>/dev/null
wait "$srv_pid" 2>/dev/null
srv_pid=

# PSP_CONNECT_TIMEOUT=0 on both sides means no limit, as for the other
# timeouts; it made every handshake fail at its first step ("stalled for
# 0 ms").
start_bench_server "$dir/srv0" PSP_CONNECT_TIMEOUT=0 -- "$bench" --timeout 60
PSP_CONNECT_TIMEOUT=0 "$bench" -c "127.0.0.1:$port" --sizes 8 --iters 10 \
    --timeout 30 >"$dir/cli0" 2>&1 ||
    fail "no connection with PSP_CONNECT_TIMEOUT=0 (no limit)"
echo "check-precon-limit: ok"
