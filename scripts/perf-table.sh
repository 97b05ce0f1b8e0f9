#!/usr/bin/env bash
# Cost per scenario, before and after a change, measured in one run on one machine.
#
# Builds the release binary of BASE (any git revision, in a throwaway worktree) and of the
# working tree, runs seed 1 of each scenario in both variants with each binary (one run at a
# time, so they do not compete for cores), and prints a Markdown table: wall seconds per seed,
# simulated seconds per wall second, peak RSS, the after binary's per-change cost figures
# (requests to Argo CD and bytes posted to the platform per application change, where the
# run has them), and whether the two trace hashes agree.
# NEW=path/to/orrery measures that binary as the "after" one instead of building the working
# tree (e.g. NEW=target/pgo/orrery after scripts/pgo-build.sh); OLD=path/to/orrery, one
# already built from BASE, as the "before" one.
# The table also goes to reports/perf/compare.md (ignored by git), and the after-side's
# columns, one row per scenario with faithful / hardened side by side as the README's
# Performance table has them, to reports/perf/readme-table.md (paste it into the README
# with the date, the revision and the machine).
#
#   scripts/perf-table.sh BASE [scenario-name...]     e.g. scripts/perf-table.sh HEAD~3 queue-overflow
set -euo pipefail
base=${1:?usage: scripts/perf-table.sh BASE-REVISION [scenario-name...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (/usr/bin/time): apt-get install time" >&2; exit 2; }
command -v jq >/dev/null || { echo "needs jq: apt-get install jq" >&2; exit 2; }

work=$(mktemp -d)
cleanup() { git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
git worktree add -q --detach "$work/base" "$base"
if [ -n "${OLD:-}" ]; then
  cp "$OLD" "$work/old"
else
  echo "building $base ($(git rev-parse --short "$base")) and the working tree, release..." >&2
  # One target directory for both builds: the dependencies are compiled once (the same
  # crates at the same versions), only the workspace's crates twice.
  CARGO_TARGET_DIR="$root/target" cargo build -q --release --manifest-path "$work/base/Cargo.toml" --bin orrery
  cp "$root/target/release/orrery" "$work/old"
fi
if [ -n "${NEW:-}" ]; then
  cp "$NEW" "$work/new"
else
  cargo build -q --release --bin orrery
  cp "$root/target/release/orrery" "$work/new"
  if cmp -s "$work/old" "$work/new" && [ "$(git rev-parse "$base")" != "$(git rev-parse HEAD)" ]; then
    echo "the working tree's binary is the base's: cargo did not relink it" >&2; exit 2
  fi
fi

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in scenarios/*.yaml; do names+=("$(basename "$f" .yaml)"); done
fi

# Each binary runs with the allocator settings its own revision gives every process cargo
# starts (.cargo/config.toml's [env]; the Makefile exports them too): freed memory kept
# (MIMALLOC_PURGE_DELAY), small pages (MIMALLOC_ALLOW_THP).
setting_of() { sed -n "s/^$2 *= *\"\(.*\)\"/\1/p" "$1/.cargo/config.toml" 2>/dev/null | head -1; }
old_purge=$(setting_of "$work/base" MIMALLOC_PURGE_DELAY)
new_purge=$(setting_of "$root" MIMALLOC_PURGE_DELAY)
old_thp=$(setting_of "$work/base" MIMALLOC_ALLOW_THP)
new_thp=$(setting_of "$root" MIMALLOC_ALLOW_THP)

# measure BINARY SCENARIO-FILE VARIANT PURGE-DELAY ALLOW-THP -> "wall sim rss_mb hash asked bytes"
measure() {
  local out="$work/out" tim="$work/time"
  if [ -n "$4" ]; then export MIMALLOC_PURGE_DELAY="$4"; else unset MIMALLOC_PURGE_DELAY; fi
  if [ -n "$5" ]; then export MIMALLOC_ALLOW_THP="$5"; else unset MIMALLOC_ALLOW_THP; fi
  /usr/bin/time -f '%e %M' -o "$tim" "$1" run "$2" --seed 1 --variant "$3" > "$out" || true
  local line sim hash asked bytes
  line=$(tail -1 "$out")
  sim=$(jq -r .sim_seconds <<<"$line")
  hash=$(jq -r .trace_hash <<<"$line")
  asked=$(jq -r '.figures.argocd_requests_per_change // "—"' <<<"$line")
  bytes=$(jq -r '.figures.platform_bytes_per_change // "—"' <<<"$line")
  read -r wall rss < <(tail -1 "$tim")
  echo "$wall $sim $((rss / 1024)) $hash $asked $bytes"
}

table="$work/table.md"
{
  echo "| scenario | variant | wall s/seed before | after | speed-up | sim/wall before | after | peak RSS MB before | after | Argo CD requests per app change | bytes posted per app change | trace hash (before → after; after vs the committed report) |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$table"
for name in "${names[@]}"; do
  new_file="scenarios/$name.yaml"
  old_file="$work/base/scenarios/$name.yaml"
  [ -f "$new_file" ] || { echo "no scenario $new_file" >&2; exit 2; }
  [ -f "$old_file" ] || old_file="$new_file"
  for variant in faithful hardened; do
    read -r ow os orss oh _ _ < <(measure "$work/old" "$old_file" "$variant" "$old_purge" "$old_thp")
    read -r nw ns nrss nh nasked nbytes < <(measure "$work/new" "$new_file" "$variant" "$new_purge" "$new_thp")
    same=$([ "$oh" = "$nh" ] && echo "identical" || echo "differs ($oh → $nh)")
    # The after binary's trace against the committed report of the same seed (same code,
    # other build: must be identical; the before binary's may differ when scenarios moved).
    committed=$(jq -r .trace_hash "reports/$name/$variant.json" 2>/dev/null || echo none)
    if [ "$nh" = "$committed" ]; then same="$same; as committed"; else same="$same; committed $committed"; fi
    awk -v n="$name" -v v="$variant" -v ow="$ow" -v nw="$nw" -v os="$os" -v ns="$ns" \
        -v orss="$orss" -v nrss="$nrss" -v same="$same" -v asked="$nasked" -v bytes="$nbytes" 'BEGIN {
      if (orss + 0 == 0)  # the before binary could not run it (a scenario or role newer than BASE)
        printf "| %s | %s | — | %.2f | — | — | %.1f | — | %d | %s | %s | %s |\n",
          n, v, nw, (nw > 0 ? ns / nw : 0), nrss, asked, bytes, same
      else
        printf "| %s | %s | %.2f | %.2f | %.1f× | %.1f | %.1f | %d | %d | %s | %s | %s |\n",
          n, v, ow, nw, (nw > 0 ? ow / nw : 0), (ow > 0 ? os / ow : 0), (nw > 0 ? ns / nw : 0), orss, nrss, asked, bytes, same }' | tee -a "$table" >&2
  done
done
mkdir -p reports/perf
{ echo "Before: \`$base\` ($(git rev-parse --short "$base")); after: ${NEW:-the working tree}. Release builds, seed 1, one run at a time, $(nproc) cores."; echo; cat "$table"; } > reports/perf/compare.md
# The README's table: one row per scenario, faithful / hardened side by side, the after
# binary's figures with the before binary's wall time in the last column.
awk -F' [|] ' '
  function num(x, d) { return (x == "—" || x == "") ? "—" : sprintf("%." d "f", x) }
  function pair(a, b) { return a " / " b }
  NR > 2 {
    sub(/^[|] /, "", $1)
    n = $1; v = $2
    if (!(n in seen)) { order[++count] = n; seen[n] = 1 }
    wall[n, v] = $4; rate[n, v] = num($7, 0); rss[n, v] = $9
    asked[n, v] = num($10, 2); bytes[n, v] = num($11, 0); before[n, v] = $3
  }
  END {
    for (i = 1; i <= count; i++) {
      n = order[i]
      printf "| %s | %s | %s | %s | %s | %s | %s |\n", n,
        pair(wall[n, "faithful"], wall[n, "hardened"]), pair(rate[n, "faithful"], rate[n, "hardened"]),
        pair(rss[n, "faithful"], rss[n, "hardened"]), pair(asked[n, "faithful"], asked[n, "hardened"]),
        pair(bytes[n, "faithful"], bytes[n, "hardened"]), pair(before[n, "faithful"], before[n, "hardened"])
    }
  }' "$table" > "$work/readme-rows"
{
  echo "| scenario | wall s/seed | sim s per wall s | peak RSS MB | Argo CD requests per app change | bytes posted per app change | wall s/seed at \`$base\` |"
  echo "|---|---|---|---|---|---|---|"
  cat "$work/readme-rows"
} > reports/perf/readme-table.md
cat reports/perf/compare.md
