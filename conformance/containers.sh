#!/usr/bin/env bash
# Runs a command with make conformance's real services in Docker containers, through
# testcontainers (the orrery-containers tool, conformance/containers/), on a machine with a
# Docker engine:
#
#   conformance/containers.sh [--redis] [--postgres] [--k3s] -- COMMAND [ARGS...]
#   conformance/containers.sh --which      # prints `containers` or `local`: the path to run
#
# Which path runs is chosen by ORRERY_CONTAINERS: `on` (containers; no engine is an error),
# `off` (the local processes of conformance/*/run.sh), unset or `auto` (containers when
# `docker info` reaches an engine). conformance/redis/run.sh and conformance/postgres/run.sh
# ask --which first and hand over to this script, so make conformance chooses by itself;
# make conformance-k3s (the runtime suite against a real k3s cluster) runs only here.
#
# 1. Builds the tool once, into target/containers (a workspace of its own, so testcontainers'
#    features never reach orrery's build), from its committed Cargo.lock.
# 2. Makes the scratch directories: the k3s kubeconfig's (mounted into the container) and
#    PostgreSQL's TLS material (conformance/postgres/tls.sh, when openssl is here).
# 3. Runs the tool, which starts the containers, exports the variables the local scripts
#    export (ORRERY_REDIS_ADDR, ORRERY_POSTGRES_URL and _CA, KUBECONFIG), runs COMMAND and
#    removes the containers when it ends; then removes the scratch directories.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

if [ "${1:-}" = "--which" ]; then
    case "${ORRERY_CONTAINERS:-auto}" in
    on) echo containers ;;
    off) echo local ;;
    # A daemon that does not answer within 5 s counts as none.
    auto) if command -v docker >/dev/null 2>&1 && timeout 5 docker info >/dev/null 2>&1; then echo containers; else echo local; fi ;;
    *) echo "conformance/containers: ORRERY_CONTAINERS is on, off or auto, not '$ORRERY_CONTAINERS'" >&2; exit 2 ;;
    esac
    exit 0
fi

tool="$root/target/containers/debug/orrery-containers"
# Built under make conformance's compiler settings when it runs us (scripts/linted.sh), so
# make containers-check's lint and this build are one.
(cd "$root/conformance/containers" && ${CARGO:-cargo} build -q --locked --target-dir "$root/target/containers")

scratch="$(mktemp -d "${TMPDIR:-/tmp}/orrery-containers.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in
    --redis) args+=(--redis) ;;
    --postgres)
        args+=(--postgres)
        if "$root/conformance/postgres/tls.sh" "$scratch/tls" >"$scratch/tls.log" 2>&1; then
            args+=(--postgres-tls "$scratch/tls")
        else
            echo "conformance/containers: PostgreSQL without TLS ($(tail -1 "$scratch/tls.log"))"
        fi
        ;;
    --k3s) mkdir -p "$scratch/k3s" && args+=(--k3s "$scratch/k3s") ;;
    *) echo "conformance/containers: unknown argument '$1' (--redis, --postgres, --k3s, then -- COMMAND)" >&2; exit 2 ;;
    esac
    shift
done
# Not exec: the trap removes the scratch directories when the tool ends.
"$tool" "${args[@]}" "$@"
