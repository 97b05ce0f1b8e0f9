#!/usr/bin/env bash
# Builds a real Argo CD from the Go module pinned in conformance/argocd/go.mod (a wrapper
# module that copies Argo CD's `replace` block, as conformance/kube/ does for Kubernetes)
# into $ORRERY_CACHE (default ~/.cache/orrery)/argocd-<version>-<hash>/ and prints the
# binary's path. Argo CD is one multi-call binary: linked as argocd-server,
# argocd-application-controller or argocd-repo-server, it runs that component.
#
#   conformance/argocd/build.sh        # ~5 min on 2 cores the first time, ~270 MB
#
# run.sh calls it; make test's conformance step runs the Argo CD suite with it (a first build
# of about 5 minutes, cached; SKIPPED in optional mode where it cannot build).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
command -v go >/dev/null || { echo "conformance/argocd: no Go toolchain on PATH" >&2; exit 1; }
version="$(sed -n 's/^require github.com\/argoproj\/argo-cd\/v3 v\([0-9.]*\)$/\1/p' "$here/go.mod" | head -1)"
[ -n "$version" ] || { echo "conformance/argocd: go.mod names no argo-cd/v3 version" >&2; exit 1; }
stamp="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)"
cache="${ORRERY_CACHE:-$HOME/.cache/orrery}/argocd-$version-$stamp"
if [ ! -x "$cache/argocd" ]; then
    echo "conformance/argocd: building Argo CD v$version from source into $cache (first run only; ~5 min)" >&2
    mkdir -p "$cache.tmp"
    ldflags="-X github.com/argoproj/argo-cd/v3/common.version=$version"
    if ! (cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$cache.tmp/argocd" github.com/argoproj/argo-cd/v3/cmd) >"$cache.tmp/build.log" 2>&1; then
        tail -20 "$cache.tmp/build.log" >&2
        echo "conformance/argocd: building Argo CD v$version failed (log: $cache.tmp/build.log)" >&2
        exit 1
    fi
    for component in argocd-server argocd-application-controller argocd-repo-server; do
        ln -sf argocd "$cache.tmp/$component"
    done
    rm -rf "$cache" && mv "$cache.tmp" "$cache"
fi
echo "$cache/argocd"
