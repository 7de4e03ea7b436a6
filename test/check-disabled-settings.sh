#!/bin/sh
# Settings of a plugin that PSP_<NAME>=0 disables are not reported as
# unknown (the plugin never declared them), while a misspelt setting of an
# enabled plugin still is.
#
# Usage: check-disabled-settings.sh PSCOM_INFO
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 PSCOM_INFO" >&2
    exit 2
fi
info=$1
fail() {
    echo "check-disabled-settings: $*" >&2
    exit 1
}

err=$(PSP_SHM=0 PSP_SHM_CMA=64k "$info" 2>&1 >/dev/null) ||
    fail "pscom_info exited with $?"
echo "$err" | grep -q "PSP_SHM_CMA" &&
    fail "PSP_SHM_CMA of the disabled shm plugin reported: $err"
err=$(PSP_SHM_CMAA=1 "$info" 2>&1 >/dev/null) ||
    fail "pscom_info exited with $?"
echo "$err" | grep -q "PSP_SHM_CMAA is set but no setting of this name" ||
    fail "the misspelt PSP_SHM_CMAA was not reported: $err"
echo "ok"
