#!/bin/sh
# pscom_info -v: our version line, then the same version as a line in the
# form of ParaStation pscom's diagnostics, "<PSP:HOST:PID:...(X.Y.Z-SUFFIX)>",
# from which ParaStation MPI's configure takes "X.Y.Z-SUFFIX"; -v with -c
# or -p is refused.
#
# Usage: check-info-version.sh PSCOM_INFO
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 PSCOM_INFO" >&2
    exit 2
fi
info=$1
fail() {
    echo "check-info-version: $*" >&2
    exit 1
}

out=$("$info" -v) || fail "pscom_info -v exited with $?"
echo "$out"
ver=$(echo "$out" | sed -n '1s/^pscom \([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\)$/\1/p')
[ -n "$ver" ] || fail "the first line is not \"pscom X.Y.Z\""
psp=$(echo "$out" | grep -E '\)>$') || fail "no line ending in \")>\""
[ "$(echo "$psp" | wc -l)" -eq 1 ] || fail "more than one line ends in \")>\""
echo "$psp" | grep -qE '^<PSP:[^:]*:[0-9]+:' ||
    fail "the line ending in \")>\" does not start with <PSP:HOST:PID:"
got=$(echo "$psp" | sed -En 's/.*\(([0-9]+\.[0-9]+\.[0-9]+-[^)]*)\)>$/\1/p')
case $got in
"$ver"-?*) ;;
*) fail "the <PSP:...> line carries \"$got\", expected $ver-SUFFIX" ;;
esac
# The same with --version (the process id aside).
norm() { sed 's/^\(<PSP:[^:]*:\)[0-9]*:/\1PID:/'; }
[ "$("$info" --version | norm)" = "$(echo "$out" | norm)" ] ||
    fail "--version prints something else than -v"
"$info" -v -c >/dev/null 2>&1 && fail "-v -c was accepted"
"$info" -p -v >/dev/null 2>&1 && fail "-p -v was accepted"
echo "check-info-version: OK ($got)"
