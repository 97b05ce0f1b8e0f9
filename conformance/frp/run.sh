#!/usr/bin/env bash
# Runs a command with the real frp (frpc and frps, the reverse proxy the Codefresh runtime's
# tunnel is built on) available, built from the Go module pinned in conformance/frp/go.mod.
#
#   conformance/frp/run.sh COMMAND [ARGS...]
#
# Builds frpc and frps once per pinned version into $ORRERY_CACHE (default ~/.cache/orrery)
# and exports ORRERY_FRPC and ORRERY_FRPS for COMMAND; the frp suite starts them itself.
#
# With ORRERY_CONFORMANCE_OPTIONAL=1, a machine that cannot build them prints
# "FRP CONFORMANCE SKIPPED: <reason>" and runs COMMAND without them (the frp tests then
# report themselves as skipped, never as passed); otherwise that is an error.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
command_args=("$@")
skip() {
    if [ "${ORRERY_CONFORMANCE_OPTIONAL:-0}" = "1" ]; then
        echo "FRP CONFORMANCE SKIPPED: $1"
        unset ORRERY_FRPC ORRERY_FRPS
        exec "${command_args[@]}"
    fi
    echo "conformance/frp: $1" >&2
    exit 1
}
command -v go >/dev/null || skip "no Go toolchain on PATH (needed to build frp from its module)"
version="$(sed -n 's/^require github.com\/fatedier\/frp \(v[0-9.]*\)$/\1/p' "$here/go.mod" | head -1)"
[ -n "$version" ] || skip "conformance/frp/go.mod names no github.com/fatedier/frp version"
command -v sha256sum >/dev/null || skip "sha256sum is missing"
stamp="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)"
cache="${ORRERY_CACHE:-$HOME/.cache/orrery}/frp-$version-$stamp"
if [ ! -x "$cache/frpc" ] || [ ! -x "$cache/frps" ]; then
    echo "conformance/frp: building frpc and frps $version from source into $cache (first run only; ~1 min)"
    mkdir -p "$cache.tmp"
    if ! (cd "$here" && go build -trimpath -o "$cache.tmp/" github.com/fatedier/frp/cmd/frpc github.com/fatedier/frp/cmd/frps) >"$cache.tmp/build.log" 2>&1; then
        tail -20 "$cache.tmp/build.log" >&2
        skip "building frp $version failed (log: $cache.tmp/build.log)"
    fi
    rm -rf "$cache" && mv "$cache.tmp" "$cache"
fi
export ORRERY_FRPC="$cache/frpc" ORRERY_FRPS="$cache/frps"
exec "${command_args[@]}"
