#!/usr/bin/env bash
# The fastest orrery binary: the release profile (fat LTO, one codegen unit), optimised with
# a profile of its own runs (profile-guided optimisation).
#
#   scripts/pgo-build.sh            → target/pgo/orrery (20-25 min on 2 cores)
#
# 1. builds an instrumented release binary (target/pgo/instrumented),
# 2. runs it over every scenario's gated runs (`orrery reports` into a scratch directory,
#    so every component and both variants are in the profile, not only the reference scenario),
# 3. merges the profiles with llvm-profdata (rustup's llvm-tools component, installed here if
#    missing) and builds the release binary again with them (target/pgo/optimized).
#
# The code is the same, so a seed's trace hash is the same as with `cargo build --release`
# (the script checks one). `make nightly PGO=1` sweeps with this binary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="$root/target/pgo"
# RUSTFLAGS replaces .cargo/config.toml's flags: tokio_unstable (turmoil seeds tokio's RNG)
# is repeated here, as `make profile` does.
base_flags="--cfg tokio_unstable"

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  echo "installing rustup's llvm-tools component (for llvm-profdata)..." >&2
  rustup component add llvm-tools >&2 || {
    echo "pgo-build: llvm-profdata is missing and 'rustup component add llvm-tools' failed" >&2
    exit 2
  }
fi

rm -rf "$out/profiles" "$out/training"
mkdir -p "$out/profiles" "$out/training"

echo "pgo-build: 1/3 instrumented build..." >&2
RUSTFLAGS="$base_flags -Cprofile-generate=$out/profiles" \
  cargo build -q --release --target-dir "$out/instrumented" --bin orrery

echo "pgo-build: 2/3 training: every scenario's gated runs (orrery reports)..." >&2
# The allocator settings of every run cargo starts (.cargo/config.toml): freed memory kept,
# small pages.
MIMALLOC_PURGE_DELAY=-1 MIMALLOC_ALLOW_THP=0 LLVM_PROFILE_FILE="$out/profiles/orrery-%p-%m.profraw" \
  "$out/instrumented/release/orrery" reports --scenarios scenarios --out "$out/training" > "$out/training.log" 2>&1
"$profdata" merge -o "$out/merged.profdata" "$out/profiles"

echo "pgo-build: 3/3 optimised build..." >&2
RUSTFLAGS="$base_flags -Cprofile-use=$out/merged.profdata -Cllvm-args=-pgo-warn-missing-function=false" \
  cargo build -q --release --target-dir "$out/optimized" --bin orrery
cp "$out/optimized/release/orrery" "$out/orrery"

# Same code, same traces: the reference scenario's first seed against its committed report.
want=$(jq -r .trace_hash reports/queue-overflow/hardened.json)
got=$(MIMALLOC_PURGE_DELAY=-1 MIMALLOC_ALLOW_THP=0 "$out/orrery" run scenarios/queue-overflow.yaml --seed 1 --variant hardened | tail -1 | jq -r .trace_hash)
if [ "$want" != "$got" ]; then
  echo "pgo-build: queue-overflow hardened seed 1 traced $got, the committed report says $want" >&2
  exit 1
fi
echo "pgo-build: $out/orrery (queue-overflow hardened seed 1: trace $got, as committed)" >&2
