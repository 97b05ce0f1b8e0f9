#!/usr/bin/env bash
# Runs a command with a real redis-server on loopback (Argo CD's Redis, which holds the
# reporter's dedup cache), started as a plain process like the conformance kube-apiserver.
#
#   conformance/redis/run.sh COMMAND [ARGS...]
#
# 1. Installs redis-server (and the two libraries it links that a slim Debian lacks) from the
#    Debian archive once, without root: `apt-get download` + `dpkg -x` into
#    $ORRERY_CACHE (default ~/.cache/orrery)/redis-<version>.
# 2. Starts it on a free loopback port with no persistence (Argo CD's Redis keeps nothing on
#    disk) and exports ORRERY_REDIS_ADDR=127.0.0.1:<port> for COMMAND.
# 3. Stops it and removes the scratch directory when COMMAND ends, whatever its result.
#
# With ORRERY_CONFORMANCE_OPTIONAL=1, a machine that cannot install or start it prints
# "REDIS CONFORMANCE SKIPPED: <reason>" and runs COMMAND without ORRERY_REDIS_ADDR (the Redis
# tests then report themselves as skipped, never as passed); otherwise that is an error.
set -euo pipefail
# With a Docker engine (or ORRERY_CONTAINERS=on) the server runs in a container instead,
# through testcontainers (conformance/containers.sh); ORRERY_CONTAINERS=off keeps this path.
path="$("$(dirname "$0")/../containers.sh" --which)"
if [ "$path" = containers ]; then
    exec "$(dirname "$0")/../containers.sh" --redis -- "$@"
fi

command_args=("$@")
skip() {
    if [ "${ORRERY_CONFORMANCE_OPTIONAL:-0}" = "1" ]; then
        echo "REDIS CONFORMANCE SKIPPED: $1"
        unset ORRERY_REDIS_ADDR
        flock -u 7 2>/dev/null || true
        exec "${command_args[@]}"
    fi
    echo "conformance/redis: $1" >&2
    exit 1
}

command -v apt-get >/dev/null || skip "apt-get is missing (redis-server comes from the Debian archive)"
command -v dpkg >/dev/null || skip "dpkg is missing"

version="$(apt-cache policy redis-server 2>/dev/null | awk '/Candidate:/ {print $2}' || true)"
[ -n "$version" ] && [ "$version" != "(none)" ] || skip "no redis-server package in the apt sources (run apt-get update?)"
cache="${ORRERY_CACHE:-$HOME/.cache/orrery}/redis-${version//[:~]/_}"
server="$cache/usr/bin/redis-server"
# make test runs two suites side by side: one installs, the other waits for it.
mkdir -p "$(dirname "$cache")"
exec 7>"$cache.lock"
flock 7
if [ ! -x "$server" ]; then
    echo "conformance/redis: installing redis-server $version from the Debian archive into $cache (first run only)"
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/orrery-redis-dl.XXXXXX")"
    if ! (cd "$tmp" && apt-get download redis-server redis-tools liblzf1 libjemalloc2 >"$tmp/download.log" 2>&1); then
        tail -5 "$tmp/download.log" >&2
        skip "apt-get download redis-server failed"
    fi
    mkdir -p "$cache.tmp"
    for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$cache.tmp"; done
    rm -rf "$tmp" "$cache" && mv "$cache.tmp" "$cache"
fi
flock -u 7
export LD_LIBRARY_PATH="$cache/usr/lib/x86_64-linux-gnu:$cache/usr/lib/aarch64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$server" --version >/dev/null 2>&1 || skip "redis-server $version does not start on this machine: $("$server" --version 2>&1 | head -1)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work="$(mktemp -d "${TMPDIR:-/tmp}/orrery-redis.XXXXXX")"
port="$(free_port)"
"$server" --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$work" \
    --logfile "$work/redis.log" &
pid=$!
cleanup() {
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

ready=0
for _ in $(seq 1 50); do
    if python3 -c "import socket; s=socket.create_connection(('127.0.0.1',$port),1); s.sendall(b'PING\r\n'); assert s.recv(16)==b'+PONG\r\n'" 2>/dev/null; then ready=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if [ "$ready" != 1 ]; then
    tail -20 "$work/redis.log" >&2 || true
    cleanup; trap - EXIT
    skip "redis-server $version did not answer PING within 5 s"
fi
export ORRERY_REDIS_ADDR="127.0.0.1:$port"
export ORRERY_REDIS_VERSION="$version"
echo "conformance/redis: redis-server $version ready on $ORRERY_REDIS_ADDR"
# Not exec: the trap must stop the server when COMMAND ends.
"$@"
