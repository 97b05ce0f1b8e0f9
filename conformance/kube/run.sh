#!/usr/bin/env bash
# Runs a command against a real kube-apiserver + etcd started as plain processes on loopback
# (the envtest approach: no controllers, no kubelet).
#
#   conformance/kube/run.sh COMMAND [ARGS...]
#
# 1. Builds etcd, kube-apiserver and kubectl from the Go modules pinned in
#    conformance/kube/go.mod, once per pinned version, into $ORRERY_CACHE (default
#    ~/.cache/orrery).
# 2. Starts etcd and kube-apiserver on free loopback ports with a throwaway token and
#    writes a kubeconfig; exports KUBECONFIG for COMMAND, and ORRERY_KUBECTL (the kubectl
#    of the same version, which the deploy suite applies the manifests with).
# 3. Stops both and removes the scratch directory when COMMAND ends, whatever its result.
#
# With ORRERY_CONFORMANCE_OPTIONAL=1, a machine that cannot build or start the servers
# prints "CONFORMANCE SKIPPED: <reason>" and exits 0 (the suites count as skipped, never as
# passed); otherwise that is an error.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

skip_or_fail() {
    if [ "${ORRERY_CONFORMANCE_OPTIONAL:-0}" = "1" ]; then
        echo "CONFORMANCE SKIPPED: $1"
        echo "CONFORMANCE SKIPPED: the fidelity and runtime suites did NOT run against a real kube-apiserver."
        exit 0
    fi
    echo "conformance: $1" >&2
    exit 1
}

command -v go >/dev/null || skip_or_fail "no Go toolchain on PATH (needed to build kube-apiserver and etcd from source)"
command -v openssl >/dev/null || skip_or_fail "openssl is missing (needed for the service-account key)"

version="$(grep -m1 -oP '^\s*k8s.io/kubernetes \Kv[0-9.]+' "$here/go.mod")"
minor="$(echo "$version" | cut -d. -f2)"
# kube-apiserver reports its version from link-time variables, as its own build scripts set them.
ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
stamp="$(echo "$ldflags" | cat -  "$here/go.mod" "$here/go.sum" "$here"/cmd/*/main.go | sha256sum | cut -c1-12)"
cache="${ORRERY_CACHE:-$HOME/.cache/orrery}/kube-$version-$stamp"
# make test runs two suites side by side, each with its own API server: one builds, the
# other waits for it (the lock is released when this script ends).
mkdir -p "$(dirname "$cache")"
exec 8>"$cache.lock"
flock 8
if [ ! -x "$cache/kube-apiserver" ] || [ ! -x "$cache/etcd" ] || [ ! -x "$cache/kubectl" ]; then
    echo "conformance: building kube-apiserver, kubectl $version and etcd from source into $cache (first run only; ~8 min on 2 cores)"
    mkdir -p "$cache.tmp"
    if ! (cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$cache.tmp/" ./cmd/etcd ./cmd/kube-apiserver ./cmd/kubectl) >"$cache.tmp/build.log" 2>&1; then
        tail -20 "$cache.tmp/build.log" >&2
        skip_or_fail "building kube-apiserver and kubectl $version from source failed (log: $cache.tmp/build.log)"
    fi
    rm -rf "$cache" && mv "$cache.tmp" "$cache"
fi
flock -u 8

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work="$(mktemp -d "${TMPDIR:-/tmp}/orrery-kube.XXXXXX")"
pids=()
cleanup() {
    # kube-apiserver drains for up to a minute on SIGTERM; nothing here needs draining.
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

etcd_port="$(free_port)"; peer_port="$(free_port)"; api_port="$(free_port)"
"$cache/etcd" --data-dir "$work/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "default=http://127.0.0.1:$peer_port" >"$work/etcd.log" 2>&1 &
pids+=($!)

token="$(openssl rand -hex 24)"
echo "$token,orrery-admin,orrery-admin,system:masters" >"$work/tokens.csv"
openssl genrsa -out "$work/sa.key" 2048 2>/dev/null
apiserver_started_ms=$(date +%s%3N)
"$cache/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --cert-dir "$work/certs" \
    --token-auth-file "$work/tokens.csv" --authorization-mode RBAC \
    --service-cluster-ip-range 10.0.0.0/24 \
    --service-account-issuer "https://127.0.0.1:$api_port" \
    --service-account-key-file "$work/sa.key" --service-account-signing-key-file "$work/sa.key" \
    --disable-admission-plugins ServiceAccount \
    >"$work/kube-apiserver.log" 2>&1 &
pids+=($!)

ready=0
for _ in $(seq 1 600); do
    if curl -ksf -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port/readyz" >/dev/null 2>&1; then ready=1; break; fi
    if ! kill -0 "${pids[1]}" 2>/dev/null; then break; fi
    sleep 0.1
done
# From kube-apiserver's launch to its first ready answer (etcd already up), in 0.1 s steps.
export ORRERY_KUBE_APISERVER_STARTUP_MS=$(( $(date +%s%3N) - apiserver_started_ms ))
if [ "$ready" != 1 ]; then
    echo "--- kube-apiserver log (tail) ---" >&2; tail -30 "$work/kube-apiserver.log" >&2
    echo "--- etcd log (tail) ---" >&2; tail -10 "$work/etcd.log" >&2
    skip_or_fail "kube-apiserver $version did not become ready within 60 s"
fi

cat >"$work/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: orrery-conformance
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $work/certs/apiserver.crt
users:
- name: orrery-admin
  user:
    token: $token
contexts:
- name: orrery-conformance
  context:
    cluster: orrery-conformance
    user: orrery-admin
current-context: orrery-conformance
KUBECONFIG
export KUBECONFIG="$work/kubeconfig"
export ORRERY_KUBECTL="$cache/kubectl"
echo "conformance: kube-apiserver $version ready on https://127.0.0.1:$api_port (etcd on $etcd_port)"
"$@"
