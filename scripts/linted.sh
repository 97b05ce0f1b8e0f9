#!/bin/sh
# Runs a command with make test's compiler settings, so that it shares make test's build
# instead of recompiling the workspace (cargo rebuilds a crate whose compiler wrapper changed):
#
#   scripts/linted.sh cargo test --workspace --test sim tunnel::
#
# (--workspace, not -p: cargo resolves the dependencies' features per selection.)
#
# The settings: scripts/rustc-wrapper.sh as the workspace's compiler wrapper (clippy's lints
# ride on the build; the test builds are unoptimised) and clippy's warnings as errors
# (CLIPPY_ARGS is how cargo-clippy hands its arguments to clippy-driver).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
CLIPPY_DRIVER=${CLIPPY_DRIVER:-$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)}
[ -n "$CLIPPY_DRIVER" ] || { echo "clippy-driver not found: rustup component add clippy" >&2; exit 1; }
export CLIPPY_DRIVER
export RUSTC_WORKSPACE_WRAPPER="$root/scripts/rustc-wrapper.sh"
export CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
exec "$@"
