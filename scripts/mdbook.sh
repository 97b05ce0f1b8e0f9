#!/usr/bin/env bash
# mdBook and its Mermaid preprocessor, built once from crates.io into ~/.cache/orrery/mdbook
# (pinned versions), then the command given, with them on PATH:
#   scripts/mdbook.sh mdbook build docs
set -euo pipefail
MDBOOK_VERSION=0.5.4
MERMAID_VERSION=0.17.1
root="${ORRERY_CACHE:-$HOME/.cache/orrery}/mdbook-$MDBOOK_VERSION-$MERMAID_VERSION"
if [ ! -x "$root/bin/mdbook" ] || [ ! -x "$root/bin/mdbook-mermaid" ]; then
  command -v cargo >/dev/null || { echo "scripts/mdbook.sh: cargo not found (install Rust: https://rustup.rs)"; exit 2; }
  echo "scripts/mdbook.sh: building mdbook $MDBOOK_VERSION and mdbook-mermaid $MERMAID_VERSION into $root (once, a few minutes)"
  # Their own target directory, so the workspace's build is not disturbed.
  CARGO_TARGET_DIR="$root/target" cargo install --locked --quiet --root "$root" mdbook --version "$MDBOOK_VERSION"
  CARGO_TARGET_DIR="$root/target" cargo install --locked --quiet --root "$root" mdbook-mermaid --version "$MERMAID_VERSION"
  rm -rf "$root/target"
fi
PATH="$root/bin:$PATH" exec "$@"
