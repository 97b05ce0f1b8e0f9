# orrery — the two commands a newcomer needs:
#   make reports   regenerate the gated reports in reports/ (the main job)
#   make test      unit + simulation tests, a cross-process determinism check, and a
#                  check that the committed reports are up to date (what CI runs)

CARGO  ?= cargo
ORRERY := $(CARGO) run -q -p orrery-sim --bin orrery --

.PHONY: all test reports reports-check determinism build sweep bench help

all: test

help:
	@sed -n '1,5p' Makefile

build:
	$(CARGO) build -p orrery-sim --bin orrery

## The main job: regenerate every scenario's reports (perf figures go to reports/perf/, ignored by git).
reports: build
	$(ORRERY) reports --scenarios scenarios --out reports

## Tests: everything CI gates on.
test: build
	$(CARGO) test --workspace
	$(MAKE) --no-print-directory determinism
	$(MAKE) --no-print-directory reports-check

## Two runs of one seed in separate processes must print the same trace hash.
determinism: build
	$(ORRERY) check-determinism scenarios/watch-convergence.yaml --seed 7

## Regenerate the reports and fail if that changed anything committed.
reports-check: reports
	@if [ -n "$$(git status --porcelain -- reports)" ]; then \
		echo "reports/ is out of date: run 'make reports' and commit the result:"; \
		git status --porcelain -- reports; git --no-pager diff --stat -- reports; exit 1; \
	fi
	@echo "reports/ is up to date"

## A wider seed sweep (not part of make test): SEEDS=1..201 make sweep
SEEDS ?= 1..51
sweep: build
	@for f in scenarios/*.yaml; do $(ORRERY) sweep $$f --seeds $(SEEDS) || exit 1; done

## Benchmark of the reporter's hot path and end-to-end delivery in real mode (ungated perf).
bench: build
	$(ORRERY) bench --events 20000 --out reports/perf/bench.json
