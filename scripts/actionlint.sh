#!/usr/bin/env bash
# Lints the GitHub Actions workflows in .github/workflows with actionlint, built once from
# its Go module (pinned below) into $ORRERY_CACHE (default ~/.cache/orrery).
#
# A machine without Go fails, naming what to install (make conformance: nothing is skipped).
# With ORRERY_CONFORMANCE_OPTIONAL=1 it prints "ACTIONLINT SKIPPED: <reason>" and exits 0
# instead (the workflows then count as not linted, never as passed).
set -euo pipefail
cd "$(dirname "$0")/.."
skip() {
    if [ "${ORRERY_CONFORMANCE_OPTIONAL:-0}" = "1" ]; then echo "ACTIONLINT SKIPPED: $1"; exit 0; fi
    echo "actionlint: $1" >&2
    exit 1
}
version=v1.7.12
bin="${ORRERY_CACHE:-$HOME/.cache/orrery}/actionlint-$version"
if [ ! -x "$bin/actionlint" ]; then
    command -v go >/dev/null || skip "no Go toolchain on PATH: install Go (Debian: apt-get install golang) — actionlint is built from its Go module"
    echo "actionlint: building $version from its Go module into $bin (first run only)"
    mkdir -p "$bin.tmp"
    if ! GOBIN="$bin.tmp" GOFLAGS=-mod=mod go install "github.com/rhysd/actionlint/cmd/actionlint@$version" > "$bin.tmp/build.log" 2>&1; then
        tail -5 "$bin.tmp/build.log"
        skip "go install github.com/rhysd/actionlint/cmd/actionlint@$version failed (above)"
    fi
    rm -rf "$bin" && mv "$bin.tmp" "$bin"
fi
# shellcheck and pyflakes checks of run: scripts are used when installed; none are required.
"$bin/actionlint" -no-color .github/workflows/*.yml
echo "actionlint: $(ls .github/workflows/*.yml | wc -l) workflows clean"
