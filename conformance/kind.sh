#!/usr/bin/env bash
# Runs a command against a real cluster for `make conformance`:
#   - KUBECONFIG set: that cluster, as is (the suites use their own namespaces and clean up);
#   - otherwise: a kind cluster from fixtures/kind.yaml, deleted afterwards, whatever the result.
# Stops with a clear message when Docker or kind is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

if [ -n "${KUBECONFIG:-}" ]; then
    echo "conformance: using the cluster from KUBECONFIG=$KUBECONFIG"
    exec "$@"
fi

missing=()
if ! command -v docker >/dev/null 2>&1; then
    missing+=("Docker (https://docs.docker.com/engine/install/)")
elif ! docker info >/dev/null 2>&1; then
    missing+=("a running Docker engine (the docker CLI is installed but 'docker info' cannot reach a daemon)")
fi
if ! command -v kind >/dev/null 2>&1; then
    missing+=("kind (go install sigs.k8s.io/kind@latest, or https://kind.sigs.k8s.io/docs/user/quick-start/#installation)")
fi
if [ "${#missing[@]}" -gt 0 ]; then
    echo "make conformance needs a Kubernetes cluster. Either set KUBECONFIG to one, or install:" >&2
    for m in "${missing[@]}"; do echo "  - $m" >&2; done
    echo "Without Docker, 'make conformance-apiserver' runs the same suites against a real kube-apiserver built from source." >&2
    exit 2
fi

name="orrery-conformance-$$"
kubeconfig="$(mktemp "${TMPDIR:-/tmp}/orrery-kind.XXXXXX")"
cleanup() { kind delete cluster --name "$name" >/dev/null 2>&1 || true; rm -f "$kubeconfig"; }
trap cleanup EXIT
kind create cluster --name "$name" --config "$root/fixtures/kind.yaml" --kubeconfig "$kubeconfig" --wait 180s
export KUBECONFIG="$kubeconfig"
"$@"
