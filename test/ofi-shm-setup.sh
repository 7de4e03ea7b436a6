# Sourced by the scripts that check the ofi plugin over libfabric's shm
# provider (check-ofi-sweep.sh, check-ofi-stall.sh), after they set $info
# (pscom_info), $dir (a temporary directory for their logs) and $me (their
# name for messages). Selects the shm provider, defines fail (message, the
# logs in $dir, exit 1) and exits 77 (SKIP) when the plugin does not start
# here with that provider.
export PSP_OFI_PROVIDER=shm PSP_SHM=0
fail() {
    echo "$me: $*" >&2
    for f in "$dir"/*; do echo "--- $f" >&2; cat "$f" >&2; done
    exit 1
}
"$info" >"$dir/info" 2>&1
if ! grep -Eq '^  ofi +loaded ' "$dir/info"; then
    echo "SKIP: the ofi plugin does not start here with PSP_OFI_PROVIDER=shm"
    exit 77
fi
