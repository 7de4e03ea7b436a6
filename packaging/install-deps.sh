#!/usr/bin/env bash
# Install the Debian packages pscom needs to build, test and benchmark.
# Usage: packaging/install-deps.sh   (as root, or with sudo available)
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

packages=(
    # build
    build-essential meson ninja-build pkg-config
    # tests
    libcmocka-dev valgrind iproute2 procps
    # transports and process management (optional features, auto-detected)
    libibverbs-dev librdmacm-dev libucx-dev libfabric-dev libpmix-dev
    # peers for tests and benchmarks
    ucx-utils libfabric-bin openmpi-bin libopenmpi-dev
    # fuzzing (meson -Dfuzz=true) and the ThreadSanitizer build (test.sh)
    clang libclang-rt-14-dev
)

export DEBIAN_FRONTEND=noninteractive
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages are installed"
    exit 0
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
