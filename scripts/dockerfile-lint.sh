#!/usr/bin/env bash
# Lints the Dockerfile with BuildKit's own checks (what `docker build --check` runs), without
# a Docker engine: scripts/dockerfile-lint/ is a small Go program over BuildKit's Dockerfile
# frontend at the version its go.mod pins, built once into $ORRERY_CACHE (default
# ~/.cache/orrery). The image itself is built in CI (.github/workflows/ci.yml).
#
# A machine without Go fails, naming what to install (make conformance: nothing is skipped).
# With ORRERY_CONFORMANCE_OPTIONAL=1 it prints "DOCKERFILE LINT SKIPPED: <reason>" and exits 0
# instead (the Dockerfile then counts as not linted, never as passed).
set -euo pipefail
cd "$(dirname "$0")/.."
skip() {
    if [ "${ORRERY_CONFORMANCE_OPTIONAL:-0}" = "1" ]; then echo "DOCKERFILE LINT SKIPPED: $1"; exit 0; fi
    echo "dockerfile-lint: $1" >&2
    exit 1
}
src=scripts/dockerfile-lint
stamp="$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)"
bin="${ORRERY_CACHE:-$HOME/.cache/orrery}/dockerfile-lint-$stamp"
if [ ! -x "$bin/dockerfile-lint" ]; then
    command -v go >/dev/null || skip "no Go toolchain on PATH: install Go (Debian: apt-get install golang) — the linter is built from BuildKit's Go module"
    echo "dockerfile-lint: building BuildKit's Dockerfile checks into $bin (first run only)"
    mkdir -p "$bin.tmp"
    if ! (cd "$src" && go build -trimpath -o "$bin.tmp/dockerfile-lint" .) > "$bin.tmp/build.log" 2>&1; then
        tail -5 "$bin.tmp/build.log"
        skip "building $src failed (above)"
    fi
    rm -rf "$bin" && mv "$bin.tmp" "$bin"
fi
# The linter must see problems where there are some, or a clean result means nothing.
if "$bin/dockerfile-lint" "$src/testdata/bad.Dockerfile" > "$bin/bad.out" 2>&1 || ! grep -q FromAsCasing "$bin/bad.out"; then
    cat "$bin/bad.out"
    echo "dockerfile-lint: the linter did not report the known problems of $src/testdata/bad.Dockerfile"
    exit 1
fi
"$bin/dockerfile-lint" Dockerfile
