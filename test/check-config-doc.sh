#!/bin/sh
# Fails when doc/configuration.md differs from what `pscom_info -c --markdown`
# prints, i.e. when a PSP_* row was added or changed without regenerating it.
#
# Usage: check-config-doc.sh PSCOM_INFO DOC_FILE
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 PSCOM_INFO DOC_FILE" >&2
    exit 2
fi
info=$1
doc=$2
# Absolute, so that the hint below works from any directory.
case $info in
/*) ;;
*) info="$(pwd)/$info" ;;
esac

# The document shows defaults only, but PSP_PLUGINDIR and friends decide which
# plugins (and so which rows) are found: run without any PSP_* variable.
for var in $(env | sed -n 's/^\(PSP_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$var"
done

tmp=$(mktemp) || exit 1
trap 'rm -f "$tmp"' EXIT

if ! "$info" -c --markdown >"$tmp"; then
    echo "check-config-doc: '$info -c --markdown' failed" >&2
    exit 1
fi
if [ ! -f "$doc" ]; then
    echo "$doc does not exist: generate it with '$info -c --markdown > $doc'" >&2
    exit 1
fi
if ! diff -u "$doc" "$tmp"; then
    echo "doc/configuration.md is stale: regenerate with '$info -c --markdown > $doc'" >&2
    exit 1
fi
echo "doc/configuration.md is up to date"
