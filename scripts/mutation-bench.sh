#!/usr/bin/env bash
# Does coverage-guided mutation pay? (issue 49's target: rare reach conditions found ≥ 3× more
# often per CPU-hour by mutants than by uniform seeds; docs/exploration.md.)
#
# Two farm runs side by side, one core each, for the same wall budget, over the same files,
# each with its own fresh database: `--mutation 0` (uniform seeds only) and `--mutation 0.5`
# (mutants of rare runs may take up to half the CPU). Failures are recorded, not shrunk (a
# shrink would take the budget from the comparison; `make farm` shrinks). Then a summary:
#
# - rare features per CPU-hour: the uniform run's seeds against the mutation run's mutants
#   (a feature — a reach condition, a fault point fired, or its hit-count bucket as AFL
#   counts them: 1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+ firings — is rare in an arm when under 1 %
#   of the arm's seeds in that database reach it, once the arm has 100; a run reaching two
#   counts two), and the mutation run's own seeds beside them;
# - the distinct rare (arm, feature) pairs each side reached, and the whole runs' totals.
#
# Written to reports/farm/mutation/ (README.md and both runs' farm.json; committed), and the
# databases to target/mutation-bench/ (not committed). REUSE=1 writes the summary again from
# the runs already there (same BUDGET and files as they ran with).
#
#   scripts/mutation-bench.sh [BUDGET] [scenario files...]
#   default: 40m over swarm-tunnel and swarm-reporter (cheap seeds, declared `pass` in
#   hardened, where mutants run, and fault points whose hit counts vary)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
budget=${1:-40m}
shift || true
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(scenarios/swarm-tunnel.yaml scenarios/swarm-reporter.yaml)
command -v jq >/dev/null || { echo "needs jq: apt-get install jq" >&2; exit 2; }
bin=${ORRERY:-target/release/orrery}
[ -x "$bin" ] || { echo "no $bin: cargo build --release --bin orrery (or ORRERY=path)" >&2; exit 2; }

work=target/mutation-bench
out=reports/farm/mutation
mkdir -p "$out"
export MIMALLOC_PURGE_DELAY=${MIMALLOC_PURGE_DELAY:--1} MIMALLOC_ALLOW_THP=${MIMALLOC_ALLOW_THP:-0}
side() { # name share
    "$bin" farm "${files[@]}" --budget "$budget" --jobs 1 --mutation "$2" --no-shrink \
        --db "$work/$1.jsonl" --report "$work/$1" --regressions "$work/$1-regressions" \
        --run-id "mutation-bench-$1" > "$work/$1.log" 2>&1 || true
}
if [ "${REUSE:-0}" = 1 ]; then
    echo "mutation-bench: the summary of the runs in $work (REUSE=1)"
else
    rm -rf "$work" && mkdir -p "$work"
    echo "mutation-bench: two farm runs of $budget, one core each: ${files[*]}"
    side uniform 0 &
    side mutation 0.5 &
    wait
fi
for s in uniform mutation; do
    [ -f "$work/$s/farm.json" ] || { echo "mutation-bench: the $s run wrote no report; see $work/$s.log" >&2; exit 1; }
    cp "$work/$s/farm.json" "$out/$s.json"
done

# Distinct rare (arm, feature) pairs a side's runs reached, by origin (features as
# Run::features in sim/src/explore/farm/db.rs defines them).
rare_pairs() { # db origin
    jq -rs --arg origin "$2" '
      def bucket: if . <= 3 then tostring elif . < 8 then "4-7" elif . < 16 then "8-15"
        elif . < 32 then "16-31" elif . < 128 then "32-127" else "128+" end;
      def feats: .reached + ([.fault_points | to_entries[]
        | ("point:" + .key), ("point:" + .key + "#" + (.value | bucket))]);
      [.[] | select(.kind == "run")] as $runs
      | ($runs | map(select(.origin == "seed")) | group_by(.scenario + "/" + .variant)
         | map({key: (.[0].scenario + "/" + .[0].variant), n: length,
                counts: (map(feats) | flatten | group_by(.) | map({key: .[0], value: length})
                         | from_entries)})
         | map(select(.n >= 100)) | map({key, value: (.n as $n | .counts | to_entries
               | map(select(.value < 0.01 * $n)) | map(.key))}) | from_entries) as $rare
      | [$runs[] | select(.origin == $origin) | (.scenario + "/" + .variant) as $arm
         | feats[] | . as $f | select(any(($rare[$arm] // [])[]; . == $f)) | $arm + " " + $f]
      | unique | .[]' "$1"
}
u_rare=$(rare_pairs "$work/uniform.jsonl" seed | wc -l)
m_seed_rare=$(rare_pairs "$work/mutation.jsonl" seed | wc -l)
m_mut_rare=$(rare_pairs "$work/mutation.jsonl" mutant | wc -l)
m_new=$(comm -13 <(rare_pairs "$work/mutation.jsonl" seed | sort) <(rare_pairs "$work/mutation.jsonl" mutant | sort) | wc -l)

row() { # label json-file which
    jq -r --arg name "$1" --arg which "$3" '.mutation as $m
      | (if $which == "seed" then [$m.seed_runs, $m.seed_cpu_hours, $m.seed_rare_hits]
         else [$m.mutant_runs, $m.mutant_cpu_hours, $m.mutant_rare_hits] end) as [$runs, $h, $hits]
      | "| \($name) | \($runs) | \($h * 1000 | round / 1000) | \($hits) | \(if $h > 0 then ($hits / $h * 10 | round / 10) else 0 end) |"' "$2"
}
rate() { jq -r --arg which "$2" '.mutation as $m | if $which == "seed" then
    (if $m.seed_cpu_hours > 0 then $m.seed_rare_hits / $m.seed_cpu_hours else 0 end) else
    (if $m.mutant_cpu_hours > 0 then $m.mutant_rare_hits / $m.mutant_cpu_hours else 0 end) end' "$1"; }
u=$(rate "$out/uniform.json" seed)
m=$(rate "$out/mutation.json" mutant)
ratio=$(jq -n --argjson u "$u" --argjson m "$m" 'if $u > 0 then ($m / $u * 10 | round / 10 | tostring) + "×" else "— (no rare hit by uniform seeds)" end')
ratio=${ratio//\"/}
{
    echo "# Coverage-guided mutation against uniform seeds"
    echo
    echo "Generated by \`scripts/mutation-bench.sh $budget ${files[*]}\` ($(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), $(nproc) cores): two \`orrery farm\` runs side by side, one core each, $budget of wall time each, fresh databases — \`--mutation 0\` (uniform seeds only) and \`--mutation 0.5\` (mutants of runs that reached a feature rarer than 1 % of their arm's seeds may take up to half the CPU). A feature is a reach condition, a fault point fired, or how often it fired in AFL's hit-count buckets (1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+); it is rare in an arm (file, variant) when under 1 % of the arm's seeds in that run's database reach it, once the arm has 100 seeds. CPU is each run's own time (one core each, nothing else running)."
    echo
    echo "| runs | count | CPU-hours | rare features reached | per CPU-hour |"
    echo "|---|---|---|---|---|"
    row "uniform run: seeds" "$out/uniform.json" seed
    row "mutation run: seeds" "$out/mutation.json" seed
    row "mutation run: mutants" "$out/mutation.json" mutant
    echo
    echo "**Mutants against uniform seeds, rare features reached per CPU-hour: $ratio** (issue 49's target: ≥ 3×)."
    echo
    echo "Distinct rare (arm, feature) pairs reached: $u_rare by the uniform run's seeds; $m_seed_rare by the mutation run's seeds and $m_mut_rare by its mutants, $m_new of them reached by no seed of that run."
    echo
    echo "| run | seeds | mutants | CPU-s | as declared |"
    echo "|---|---|---|---|---|"
    for s in uniform mutation; do
        jq -r --arg s "$s" '"| \($s) | \(.seed_runs) | \(.runs - .seed_runs) | \(.cpu_seconds | round) | \(.runs - .unexpected) of \(.runs) |"' "$out/$s.json"
    done
    echo
    echo "Runs not as declared (the farm's mutants declare \`pass\` in the variants their file declares to pass):"
    echo
    for s in uniform mutation; do
        jq -r --arg s "$s" 'select(.kind == "run" and .expected == false)
          | "- \($s) run: \(.scenario) \(.variant) seed \(.seed)\(if .origin == "mutant" then " mutant \(.child) (\(.changes))" else "" end): `\(.result)`\(if .failure then ", breaking `\(.failure)`" else "" end)"' "$work/$s.jsonl"
    done | grep . || echo "- none"
    echo
    echo "Per arm: [uniform.json](uniform.json), [mutation.json](mutation.json) (each run's farm report as JSON)."
} > "$out/README.md"
cat "$out/README.md"
