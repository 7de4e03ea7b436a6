#!/usr/bin/env bash
# Build pscom twice and run the whole test suite on each build:
#   build/       release build (what users get)
#   build-asan/  debug build with AddressSanitizer and UndefinedBehaviorSanitizer
# Usage: packaging/test.sh [extra meson test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

run_suite() {
    local dir=$1; shift
    echo "=== meson test in $dir"
    meson test -C "$dir" --print-errorlogs "$@"
}

if [ ! -d build ]; then
    meson setup build
fi
ninja -C build
run_suite build "$@"

if [ ! -d build-asan ]; then
    meson setup build-asan -Dbuildtype=debug -Db_sanitize=address,undefined \
        -Db_lundef=false
fi
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_suite build-asan "$@"
echo "=== all tests passed (release and sanitizer builds)"
