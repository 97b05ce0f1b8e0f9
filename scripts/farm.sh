#!/usr/bin/env bash
# make farm: the seed farm, then fuzzing, in one budget (docs/exploration.md#the-seed-farm).
#
# BUDGET (90m, 2h, 45s) is shared: FARM_FUZZ_PERCENT of it (default 30) goes to `make fuzz`
# (the least fuzzed targets so far, as many as get FARM_FUZZ_EACH seconds each — default 600,
# issue 53's 10 CPU-minutes — on every core, each until 1,000,000 executions or its share of
# that time), the rest to new seeds of every scenario file (`orrery farm --budget`).
# FARM_FUZZ_PERCENT=0: seeds only.
# Exits non-zero when a run was not as declared or a fuzz target crashed or hung.
set -uo pipefail
cd "$(dirname "$0")/.."

BUDGET=${BUDGET:-90m}
PERCENT=${FARM_FUZZ_PERCENT:-30}
case "$BUDGET" in
    *h) total=$(( ${BUDGET%h} * 3600 )) ;;
    *m) total=$(( ${BUDGET%m} * 60 )) ;;
    *s) total=${BUDGET%s} ;;
    *) echo "farm: BUDGET=$BUDGET: want a whole number of hours, minutes or seconds (90m, 2h, 45s)" >&2; exit 2 ;;
esac
[[ "$PERCENT" =~ ^[0-9]+$ && "$PERCENT" -le 100 ]] \
    || { echo "farm: FARM_FUZZ_PERCENT=$PERCENT: want 0 to 100" >&2; exit 2; }
fuzz=$(( total * PERCENT / 100 ))
seeds=$(( total - fuzz ))

status=0
if [ "$seeds" -gt 0 ]; then
    echo "farm: ${seeds}s of seeds, then ${fuzz}s of fuzzing"
    # shellcheck disable=SC2086
    ./target/release/orrery farm --budget "${seeds}s" ${FARM_FLAGS:-} || status=$?
fi
if [ "$fuzz" -gt 0 ]; then
    FUZZ_BUDGET=$fuzz FUZZ_ROTATE=${FARM_FUZZ_EACH:-600} scripts/fuzz.sh || { [ "$status" -ne 0 ] || status=1; }
fi
exit "$status"
