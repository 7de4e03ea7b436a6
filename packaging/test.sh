#!/usr/bin/env bash
# Build pscom three times and run the whole test suite on each build, then
# the libFuzzer harnesses:
#   build/       release build (what users get)
#   build-asan/  debug build with AddressSanitizer and UndefinedBehaviorSanitizer
#   build-tsan/  clang, ThreadSanitizer: every suite again, for data races
#                between the application's threads (pscom_init_thread) and
#                the threads of PMIx, UCX and the tests themselves
#   build-fuzz/  clang, -Dfuzz=true: only the harnesses are built and run
#                (a fixed number of inputs from a fixed seed each)
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

# Suites whose processes load vendor libraries (UCX, libfabric, OpenPMIx):
# those libraries keep memory until exit and run threads LeakSanitizer's
# tracer cannot walk, so these run with address and undefined-behaviour
# checks but without leak detection; everything else with it.
vendor_suites=(conformance-ucx_tcp conformance-ucx_posix conformance-ofi_tcp_rxm
               conformance-ofi_shm pmix_server pmix_client plugin_start_vendor doc)
no_vendor=()
only_vendor=()
for s in "${vendor_suites[@]}"; do
    no_vendor+=(--no-suite "$s")
    only_vendor+=(--suite "$s")
done
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    run_suite build-asan "${no_vendor[@]}" "$@"
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    run_suite build-asan "${only_vendor[@]}" "$@"
if [ ! -d build-tsan ]; then
    CC=clang meson setup build-tsan -Dbuildtype=debugoptimized \
        -Db_sanitize=thread -Db_lundef=false
fi
ninja -C build-tsan
# A race report ends the process (and so fails its test). The vendor
# libraries are not instrumented; test/tsan.supp names the races found
# inside them, and nothing of ours.
TSAN_OPTIONS="suppressions=$PWD/test/tsan.supp:halt_on_error=1" \
    run_suite build-tsan --timeout-multiplier 3 "$@"
if [ ! -d build-fuzz ]; then
    CC=clang meson setup build-fuzz -Dfuzz=true
fi
# Every harness of test/fuzz, and nothing else of the tree; the arguments
# given to this script select among the other suites, not these.
targets=$(ninja -C build-fuzz -t targets all)
mapfile -t fuzzers < <(grep -E '^test/fuzz/fuzz_[a-z0-9_]+: ' <<<"$targets" |
                       cut -d: -f1)
if [ "${#fuzzers[@]}" -eq 0 ]; then
    echo "test.sh: build-fuzz has no test/fuzz harnesses" >&2
    exit 1
fi
ninja -C build-fuzz "${fuzzers[@]}"
run_suite build-fuzz --no-rebuild --suite fuzz
echo "=== all tests passed (release, address, thread sanitizer and fuzzer builds)"
