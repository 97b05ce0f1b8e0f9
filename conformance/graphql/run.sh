#!/usr/bin/env bash
# Runs a command with graphql-js, the reference GraphQL implementation, installed for
# conformance/graphql/client.mjs: `npm ci` of this folder's package-lock.json (graphql 16,
# pinned) into $ORRERY_CACHE (default ~/.cache/orrery)/graphql-js-<lock digest>, once.
# COMMAND finds the folder with node_modules in ORRERY_GRAPHQL_JS.
#
#   conformance/graphql/run.sh COMMAND [ARGS...]
#
# A machine without Node.js and npm, or without the npm registry, fails naming what to
# install (make conformance: nothing is skipped).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
fail() { echo "conformance/graphql: $1" >&2; exit 1; }
command -v node >/dev/null || fail "node is missing (install Node.js >= 18: Debian's nodejs package or nodejs.org)"
command -v npm >/dev/null || fail "npm is missing (install npm beside Node.js)"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' \
    || fail "node $(node --version) is too old: the client needs fetch (Node.js >= 18)"
digest="$(sha256sum "$here/package-lock.json" | cut -c1-12)"
cache="${ORRERY_CACHE:-$HOME/.cache/orrery}/graphql-js-$digest"
mkdir -p "$(dirname "$cache")"
exec 7>"$cache.lock"
flock 7
if [ ! -f "$cache/node_modules/graphql/package.json" ]; then
    echo "conformance/graphql: installing graphql-js from the npm registry into $cache (first run only)"
    rm -rf "$cache.tmp" && mkdir -p "$cache.tmp"
    cp "$here/package.json" "$here/package-lock.json" "$cache.tmp/"
    (cd "$cache.tmp" && npm ci --ignore-scripts --no-audit --no-fund > npm.log 2>&1) \
        || { tail -5 "$cache.tmp/npm.log" >&2; fail "npm ci of graphql-js failed (above)"; }
    rm -rf "$cache" && mv "$cache.tmp" "$cache"
fi
cp "$here/client.mjs" "$cache/client.mjs"
flock -u 7
export ORRERY_GRAPHQL_JS="$cache"
exec "$@"
