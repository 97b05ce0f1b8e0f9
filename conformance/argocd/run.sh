#!/usr/bin/env bash
# Runs a command with a real Argo CD on loopback: argocd-server, argocd-application-controller
# and argocd-repo-server as plain processes (Argo CD's own local-development setup, its
# Procfile), against the cluster in $KUBECONFIG and the Redis in $ORRERY_REDIS_ADDR.
#
#   conformance/redis/run.sh conformance/kube/run.sh conformance/argocd/run.sh COMMAND [ARGS...]
#
# 1. Builds Argo CD once (build.sh: the pin in go.mod, cached in ~/.cache/orrery).
# 2. Installs Argo CD's own CRDs (Application, AppProject, ApplicationSet) from the pinned
#    module's manifests/crds, the `argocd` namespace, argocd-cm (an `orrery` account with an
#    API key, a 10 s reconciliation period), argocd-rbac-cm (read-only by default) and
#    argocd-secret.
# 3. Starts the three components with ARGOCD_FAKE_IN_CLUSTER=true, so the in-cluster
#    destination (https://kubernetes.default.svc) is the $KUBECONFIG cluster.
# 4. Logs in as admin (the initial password the server writes to argocd-initial-admin-secret)
#    and issues an API token for the `orrery` account, as `argocd account generate-token`.
# 5. Exports ORRERY_ARGOCD_ADDR (host:port of the server, plain HTTP), ORRERY_ARGOCD_TOKEN,
#    ORRERY_ARGOCD_NAMESPACE (argocd) and ORRERY_ARGOCD_VERSION for COMMAND, and stops every
#    component when COMMAND ends, whatever its result.
#
# Git repositories are local: an Application's repoURL may be file:///path/to/repo.git.
# With ORRERY_CONFORMANCE_OPTIONAL=1, a machine that cannot build or start Argo CD prints
# "ARGOCD CONFORMANCE SKIPPED: <reason>" and runs COMMAND without ORRERY_ARGOCD_ADDR (the
# Argo CD suite then reports itself as skipped, never as passed); otherwise that is an error.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
command_args=("$@")
skip() {
    if [ "${ORRERY_CONFORMANCE_OPTIONAL:-0}" = "1" ]; then
        echo "ARGOCD CONFORMANCE SKIPPED: $1"
        unset ORRERY_ARGOCD_ADDR ORRERY_ARGOCD_TOKEN
        exec "${command_args[@]}"
    fi
    echo "conformance/argocd: $1" >&2
    exit 1
}

[ -n "${KUBECONFIG:-}" ] || skip "no KUBECONFIG (run under conformance/kube/run.sh or kind.sh)"
[ -n "${ORRERY_REDIS_ADDR:-}" ] || skip "no ORRERY_REDIS_ADDR (run under conformance/redis/run.sh)"
kubectl="${ORRERY_KUBECTL:-$(command -v kubectl || true)}"
[ -n "$kubectl" ] || skip "no kubectl (ORRERY_KUBECTL or kubectl on PATH)"
command -v git >/dev/null || skip "git is missing (the repo server runs it)"
command -v curl >/dev/null || skip "curl is missing"
command -v python3 >/dev/null || skip "python3 is missing"
binary="$("$here/build.sh")" || skip "Argo CD could not be built (see above)"
bindir="$(dirname "$binary")"
version="$(sed -n 's/^require github.com\/argoproj\/argo-cd\/v3 v\([0-9.]*\)$/\1/p' "$here/go.mod" | head -1)"
# `go mod download` fetches the module if the module cache lost it (the binary is cached apart).
module="$(cd "$here" && go mod download -json github.com/argoproj/argo-cd/v3 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Dir",""))' 2>/dev/null || true)"
[ -n "$module" ] && [ -d "$module/manifests/crds" ] || skip "the Argo CD module's manifests/crds cannot be found (go mod download failed?)"

work="$(mktemp -d "${TMPDIR:-/tmp}/orrery-argocd.XXXXXX")"
pids=()
cleanup() {
    for pid in ${pids[@]+"${pids[@]}"}; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
failed() {
    for log in "$work"/*.log; do
        [ -f "$log" ] || continue
        echo "--- $(basename "$log") (last lines)" >&2
        tail -n 15 "$log" >&2 || true
    done
    cleanup
    trap - EXIT
    skip "$1"
}

k() { "$kubectl" --request-timeout=30s "$@"; }
# Never on a cluster that has an Argo CD of its own: this script replaces Argo CD's CRDs,
# ConfigMaps and Secret and starts a second controller.
if k -n argocd get configmap argocd-cm >/dev/null 2>&1 \
    && [ "$(k -n argocd get configmap argocd-cm -o jsonpath='{.metadata.labels.orrery\.dev/conformance}' 2>/dev/null)" != "true" ]; then
    echo "conformance/argocd: the cluster in KUBECONFIG already runs an Argo CD (argocd/argocd-cm): refusing to replace it; use a throwaway cluster (make conformance-argocd starts one)" >&2
    exit 1
fi
for crd in application-crd.yaml appproject-crd.yaml applicationset-crd.yaml; do
    k apply --server-side --force-conflicts -f "$module/manifests/crds/$crd" >/dev/null
done
k create namespace argocd --dry-run=client -o yaml | k apply -f - >/dev/null
k apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-cm, namespace: argocd, labels: {app.kubernetes.io/part-of: argocd, orrery.dev/conformance: "true"}}
data:
  accounts.orrery: apiKey
  timeout.reconciliation: 10s
---
apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-rbac-cm, namespace: argocd, labels: {app.kubernetes.io/part-of: argocd}}
data:
  policy.default: role:readonly
---
apiVersion: v1
kind: Secret
metadata: {name: argocd-secret, namespace: argocd, labels: {app.kubernetes.io/part-of: argocd}}
stringData:
  server.secretkey: orrery-conformance-only
EOF

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
repo_port="$(free_port)"; server_port="$(free_port)"
mkdir -p "$work/tls" "$work/ssh" "$work/gpg" "$work/static"
export ARGOCD_FAKE_IN_CLUSTER=true ARGOCD_GPG_ENABLED=false \
    ARGOCD_TLS_DATA_PATH="$work/tls" ARGOCD_SSH_DATA_PATH="$work/ssh" ARGOCD_GNUPGHOME="$work/gpg"
"$bindir/argocd-repo-server" --port "$repo_port" --metrics-port "$(free_port)" \
    --redis "$ORRERY_REDIS_ADDR" --loglevel info >"$work/repo-server.log" 2>&1 &
pids+=($!)
"$bindir/argocd-application-controller" --namespace argocd --redis "$ORRERY_REDIS_ADDR" \
    --repo-server "127.0.0.1:$repo_port" --metrics-port "$(free_port)" \
    --loglevel info >"$work/application-controller.log" 2>&1 &
pids+=($!)
"$bindir/argocd-server" --namespace argocd --redis "$ORRERY_REDIS_ADDR" \
    --repo-server "127.0.0.1:$repo_port" --insecure --port "$server_port" \
    --metrics-port "$(free_port)" --staticassets "$work/static" \
    --loglevel info >"$work/server.log" 2>&1 &
pids+=($!)

addr="127.0.0.1:$server_port"
ready=0
for _ in $(seq 1 240); do
    if curl -sf --max-time 5 "http://$addr/healthz" >/dev/null 2>&1 \
        && k -n argocd get secret argocd-initial-admin-secret >/dev/null 2>&1; then ready=1; break; fi
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || failed "an Argo CD component exited at start"; done
    sleep 0.25
done
[ "$ready" = 1 ] || failed "argocd-server did not become ready within 60 s"

password="$(k -n argocd get secret argocd-initial-admin-secret -o jsonpath='{.data.password}' | base64 -d)" \
    || failed "the initial admin password could not be read"
json_field() { python3 -c "import json,sys; print(json.load(sys.stdin).get('$1',''))"; }
session="$(curl -sf --max-time 30 -H 'content-type: application/json' "http://$addr/api/v1/session" \
    -d "{\"username\":\"admin\",\"password\":\"$password\"}" | json_field token)" \
    || failed "admin login refused"
token="$(curl -sf --max-time 30 -X POST -H 'content-type: application/json' -H "Authorization: Bearer $session" \
    "http://$addr/api/v1/account/orrery/token" -d '{"name":"orrery-conformance"}' | json_field token)" \
    || failed "issuing the orrery account's API token failed"
[ -n "$token" ] || failed "the API token answer had no token"

export ORRERY_ARGOCD_ADDR="$addr" ORRERY_ARGOCD_TOKEN="$token" ORRERY_ARGOCD_NAMESPACE=argocd \
    ORRERY_ARGOCD_VERSION="v$version" ORRERY_ARGOCD_LOGS="$work"
echo "conformance/argocd: Argo CD v$version ready on http://$addr (logs in $work)"
# Not exec: the trap must stop the components when COMMAND ends. When COMMAND fails, the
# components' logs are shown before they go.
status=0
"$@" || status=$?
if [ "$status" != 0 ]; then
    for log in "$work"/*.log; do
        echo "--- Argo CD $(basename "$log") (last lines)" >&2
        tail -n 30 "$log" >&2 || true
    done
fi
exit "$status"
