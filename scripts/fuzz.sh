#!/usr/bin/env bash
# make fuzz: every fuzz target under AFL++ (docs/fuzzing.md).
#
# Installs cargo-afl (which builds AFL++ from its crate) into ~/.cache/orrery once, builds the
# driver with AFL's instrumentation (profile `fuzz`, target/afl/), then runs each target until
# FUZZ_EXECS executions or FUZZ_SECONDS of fuzzing, whichever comes first, FUZZ_JOBS at a time.
# AFL++'s state stays in target/fuzz/<target>/ (a second run resumes from its queue); the
# figures go to reports/fuzz/. Exits 1 when a target has a crash or a hang: each is listed
# with the command that replays it.
#
#   FUZZ_TARGETS="apiserver graphql"  only these (default: every target)
#   FUZZ_SECONDS=600 FUZZ_EXECS=1000000 FUZZ_JOBS=<cores>
#   FUZZ_BUDGET=1800  instead of FUZZ_SECONDS: this many seconds in all, shared as the targets
#                     start (a target that reaches FUZZ_EXECS early leaves its time to the rest)
#   FUZZ_ROTATE=600   with FUZZ_BUDGET: only as many targets as the budget gives this many
#                     seconds each (on FUZZ_JOBS cores), the least fuzzed so far first (by the
#                     run time their AFL++ state holds), so each run gives the targets it fuzzes
#                     their full time and successive runs go round all of them (make farm)
set -euo pipefail
cd "$(dirname "$0")/.."

AFL_VERSION=0.18.2
TOOLS="$HOME/.cache/orrery/cargo-afl-$AFL_VERSION"
FUZZ_SECONDS=${FUZZ_SECONDS:-600}
FUZZ_EXECS=${FUZZ_EXECS:-1000000}
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)}
OUT=target/fuzz

if [ ! -x "$TOOLS/bin/cargo-afl" ]; then
    echo "fuzz: installing cargo-afl $AFL_VERSION (builds AFL++ from its crate, ~1 min)"
    rm -rf "$TOOLS.tmp"
    cargo install --quiet --locked --root "$TOOLS.tmp" --version "$AFL_VERSION" cargo-afl
    mv "$TOOLS.tmp" "$TOOLS"
fi
export PATH="$TOOLS/bin:$PATH"
# AFL++'s compiler runtime is built per rustc version (into ~/.local/share/afl.rs): once.
rustc_id=$(rustc -V | sed -E 's/^rustc ([^ ]+) \(([0-9a-f]{7}).*/\1-\2/')
if [ ! -x "$HOME/.local/share/afl.rs/rustc-$rustc_id/afl.rs-$AFL_VERSION/afl/bin/afl-fuzz" ]; then
    cargo afl config --build --force
fi

echo "fuzz: building the AFL++ driver (profile fuzz, target/afl)"
RUSTFLAGS="--cfg tokio_unstable" CARGO_TARGET_DIR=target/afl \
    cargo afl build --quiet --profile fuzz -p orrery-fuzz --features afl --bin orrery-fuzz
DRIVER=target/afl/fuzz/orrery-fuzz

all=$("$DRIVER" list)
targets=${FUZZ_TARGETS:-$all}
for t in $targets; do
    grep -qx "$t" <<<"$all" || { echo "fuzz: no target $t (targets: $(echo $all))" >&2; exit 2; }
done

if [ -n "${FUZZ_ROTATE:-}" ] && [ -n "${FUZZ_BUDGET:-}" ]; then
    room=$(( FUZZ_BUDGET * FUZZ_JOBS / FUZZ_ROTATE ))
    [ "$room" -ge 1 ] || room=1
    # shellcheck disable=SC2086
    targets=$(for t in $targets; do
        spent=$(awk -F' *: *' '$1 == "run_time" { print $2 }' "$OUT/$t/default/fuzzer_stats" 2>/dev/null)
        echo "${spent:-0} $t"
    done | sort -s -n -k1,1 | head -n "$room" | awk '{ print $2 }')
    echo "fuzz: this run's targets, the least fuzzed first: $(echo $targets)"
fi

export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_NO_AFFINITY=1
mkdir -p "$OUT"
fuzz_one() {
    local t=$1 seconds=$2 input="fuzz/corpus/$t"
    # A second run resumes from the queue of the first.
    [ -f "$OUT/$t/default/fuzzer_stats" ] && input=-
    echo "fuzz: $t (up to ${seconds}s or $FUZZ_EXECS executions)"
    cargo afl fuzz -i "$input" -o "$OUT/$t" -V "$seconds" -E "$FUZZ_EXECS" -t 2000 -m 4096 \
        -- "$DRIVER" "$t" >"$OUT/$t.log" 2>&1 || { echo "fuzz: afl-fuzz failed on $t:"; tail -20 "$OUT/$t.log"; return 1; }
}
running=0
status=0
left=$(wc -w <<<"$targets")
end=$(( $(date +%s) + ${FUZZ_BUDGET:-0} ))
for t in $targets; do
    seconds=$FUZZ_SECONDS
    if [ -n "${FUZZ_BUDGET:-}" ]; then
        # This target's share of what is left: the time left on every job, over the targets
        # not started yet (at least a minute each).
        seconds=$(( ($end - $(date +%s)) * FUZZ_JOBS / left ))
        [ "$seconds" -ge 60 ] || seconds=60
    fi
    left=$((left - 1))
    fuzz_one "$t" "$seconds" &
    running=$((running + 1))
    if [ "$running" -ge "$FUZZ_JOBS" ]; then
        wait -n || status=1
        running=$((running - 1))
    fi
done
while [ "$running" -gt 0 ]; do
    wait -n || status=1
    running=$((running - 1))
done

# The report covers every target fuzzed so far (this run's and the earlier runs' figures).
fuzzed=$(for t in $all; do [ -f "$OUT/$t/default/fuzzer_stats" ] && echo "$t"; done)
# shellcheck disable=SC2086
"$DRIVER" report "$OUT" reports/fuzz "$(date -u +%Y-%m-%d)" "$(nproc) cores, $(uname -m)" $fuzzed || status=1
exit $status
