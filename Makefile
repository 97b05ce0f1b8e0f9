# orrery — three tiers, one command each (docs/testing.md):
#   make test          Rust only: formatting, clippy, unit and simulation tests (every
#                      scenario's declared verdict at every seed of its `seeds:` list,
#                      determinism across processes and within one), the committed reports up
#                      to date. What every change runs first.
#   make conformance   the simulated world against real software, run as local processes:
#                      kube-apiserver + etcd, kubectl, Argo CD, frp, Redis, PostgreSQL,
#                      graphql-js, the reports' HTML in Chromium, actionlint, BuildKit's
#                      Dockerfile checks and the deploy manifests' dry run. A missing
#                      prerequisite fails, naming what to install; nothing is skipped.
#   make reports       regenerate reports/ (open reports/index.html in a browser)
#   make farm          the seed farm: BUDGET=90m of new seeds of every scenario file, release
#                      build; results database .farm/results.jsonl, report reports/farm/,
#                      failures shrunk into scenarios/regressions/
#   make docs          the book (docs/) with mdBook, into target/book/ (mdbook built once)
#   make fuzz          every network entry point and user file under AFL++ (docs/fuzzing.md):
#                      figures into reports/fuzz/, fails on a crash or a hang
# .ci/run runs make test, then make conformance.
# Also: make conformance-kind (kind or $KUBECONFIG), make conformance-apiserver,
#       make conformance-argocd, make conformance-postgres, make conformance-graphql,
#       make browser-check, make lint-workflows, make lint-dockerfile, make sweep, make bench,
#       make nightly (2,000 seeds of each swarm family, release build, ~75 min on 2 cores),
#       make profile (where one seed's time goes), make pgo (the fastest binary)

CARGO  ?= cargo
ORRERY := $(CARGO) run -q --bin orrery --
## Freed memory stays with the process (docs/performance.md): .cargo/config.toml sets this for
## what cargo starts; exported here too for the binaries the targets below run directly.
MIMALLOC_PURGE_DELAY ?= -1
export MIMALLOC_PURGE_DELAY
## Small pages for mimalloc's memory (docs/performance.md): the same, set alongside.
MIMALLOC_ALLOW_THP ?= 0
export MIMALLOC_ALLOW_THP

.PHONY: fuzz fuzz-replay docs farm pgo all test test-linted cargo-test reports-fresh lint lint-workflows lint-dockerfile reports reports-check reports-committed browser-check determinism build sweep bench help conformance conformance-apiserver conformance-suites conformance-argocd conformance-postgres conformance-graphql conformance-kind conformance-k3s containers-check nightly profile

all: test

help:
	@sed -n '1,21p' Makefile

build:
	$(CARGO) build --bin orrery

## The book: docs/ built with mdBook into target/book/ (open target/book/index.html). mdBook
## and mdbook-mermaid are built once from crates.io by scripts/mdbook.sh (~/.cache/orrery);
## mdbook-mermaid writes the Mermaid scripts next to the book (git ignores them). The pages
## read as they are on GitHub too; make test checks their links and command lines.
docs:
	scripts/mdbook.sh sh -c 'mdbook-mermaid install docs >/dev/null 2>&1 && mdbook build docs'
	@echo "the book: target/book/index.html"

## The main job: regenerate every scenario's reports (perf figures go to reports/perf/, ignored by git).
reports: build
	$(ORRERY) reports --scenarios scenarios --out reports

## Tests: everything CI gates on. The lints ride on the build: clippy-driver compiles the
## workspace's own crates (what `cargo clippy` runs, with the same `-D warnings`), while the
## dependencies are compiled once by plain rustc, instead of a second time in check mode for
## a separate `cargo clippy` (that saved about 4 of make test's minutes on 2 cores).
## The wrapper (scripts/rustc-wrapper.sh) also compiles the test builds unoptimised: the
## simulations run in the libraries, which stay optimised, and optimising the tests' own code
## was about a quarter of the workspace's compile. scripts/linted.sh sets both up: run one
## suite through it to share this build (docs/testing.md, the inner loop).
LINTED := scripts/linted.sh

test:
	$(CARGO) fmt --all --check
	$(CARGO) fmt --check --manifest-path conformance/containers/Cargo.toml
	$(LINTED) $(MAKE) --no-print-directory test-linted

# make test's steps, run with the lints on (see above): the orrery binary first, then side by
# side cargo test (which compiles the test targets, sharing the libraries just built, and
# runs them), the cross-process determinism check and the reports (each step's output printed
# whole when it ends: --output-sync), and only then reports/ compared with the commit. The
# reports start while the tests still compile, so the two cores stay busy through the tail of
# the build; they run the binary directly ($(BUILT)), since a `cargo run` would wait for
# cargo's lock on the build directory. The reports are regenerated into a copy of reports/
# and moved in once the tests are done: several tests read the committed reports, and a page
# half rewritten beside them failed them.
FRESH_REPORTS := target/reports-fresh
BUILT := $(or $(CARGO_TARGET_DIR),target)/debug/orrery
test-linted:
	$(CARGO) build --bin orrery
	$(MAKE) --no-print-directory -j3 --output-sync=target ORRERY=$(BUILT) BUILT_ALREADY=1 cargo-test determinism reports-fresh
	rm -rf reports && mv $(FRESH_REPORTS) reports
	$(MAKE) --no-print-directory reports-committed

# make reports into a copy of reports/ (what it keeps and what it replaces are as in place).
reports-fresh: $(if $(BUILT_ALREADY),,build)
	rm -rf $(FRESH_REPORTS) && mkdir -p $(dir $(FRESH_REPORTS)) && cp -r reports $(FRESH_REPORTS)
	$(ORRERY) reports --scenarios scenarios --out $(FRESH_REPORTS)

# The unit and simulation tests, compiled (beside the libraries test-linted's first step
# built) and run. MAKEFLAGS is cleared: cargo would otherwise look for make's jobserver,
# which this recipe does not pass.
cargo-test:
	MAKEFLAGS= $(CARGO) test --workspace

## The reports' HTML view in headless Chromium (Debian's package, installed by
## scripts/chromium.sh): every page the index links, every chart and every link on them loads.
## Reads the committed reports/ (make test proves them up to date). Its log goes to
## target/browser-check.log (made if missing: with CARGO_TARGET_DIR set, make test makes no target/).
BROWSER_TEST := browser::every_chart_and_link_of_the_html_reports_loads_in_headless_chromium
browser-check:
	@scripts/chromium.sh env MAKEFLAGS= sh -c 'mkdir -p target && $(CARGO) test -q -p orrery-sim --test sim -- --ignored --exact --nocapture $(BROWSER_TEST) > target/browser-check.log 2>&1; status=$$?; cat target/browser-check.log; [ $$status -eq 0 ] && grep -q "test result: ok. 1 passed" target/browser-check.log || { echo "browser-check: $(BROWSER_TEST) did not run and pass"; exit 1; }'

## The GitHub Actions workflows, linted by actionlint (built once from its Go module).
lint-workflows:
	scripts/actionlint.sh

## The Dockerfile, linted by BuildKit's own checks (what `docker build --check` runs; built
## once from BuildKit's Go module, no Docker engine needed).
lint-dockerfile:
	scripts/dockerfile-lint.sh

## Formatting and lints on their own (rustfmt defaults; clippy's default set, warnings are
## errors); make test applies the same lints to every target it compiles.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Two runs of one seed in separate processes must print the same trace hash (the
## Kubernetes world, the Argo CD world with Git and the reporter, and the tunnel world with
## its WebSocket and HTTP/2 stack). Every scenario's first seed is proven across processes
## (and builds) by the reports check too: its trace hash must equal the committed one.
determinism: $(if $(BUILT_ALREADY),,build)
	$(ORRERY) check-determinism scenarios/watch-convergence.yaml --seed 7
	$(ORRERY) check-determinism scenarios/tunnel-drop.yaml --seed 3 --variant faithful
	$(ORRERY) check-determinism scenarios/tunnel-drop.yaml --seed 3 --variant hardened
	$(ORRERY) check-determinism scenarios/app-of-apps.yaml --seed 2 --variant faithful

## Regenerate the reports and fail if that changed anything committed.
reports-check: reports
	@$(MAKE) --no-print-directory reports-committed

# Fails when reports/ differs from the commit (after everything that writes there has run).
reports-committed:
	@if [ -n "$$(git status --porcelain -- reports)" ]; then \
		echo "reports/ is out of date: run 'make reports' and commit the result:"; \
		git status --porcelain -- reports; git --no-pager diff --stat -- reports; exit 1; \
	fi
	@echo "reports/ is up to date"

## A wider seed sweep (not part of make test): SEEDS=1..201 make sweep
SEEDS ?= 1..51
sweep: build
	@for f in scenarios/*.yaml; do $(ORRERY) sweep $$f --seeds $(SEEDS) || exit 1; done

## The seed farm (not part of make test): new seeds of every scenario file, both declared
## variants, for BUDGET of wall time on every core, with a release build (docs/exploration.md,
## "The seed farm"). It remembers across runs (.farm/results.jsonl), shrinks every unexpected failure
## into scenarios/regressions/ and writes reports/farm/. FARM_FLAGS adds flags, e.g.
## FARM_FLAGS="--cpu-budget 3h" or "--mutation 0". Exits non-zero when a run was not as
## declared (the report says which, with the replay command).
## FARM_FUZZ_PERCENT of the budget (default 30) goes to fuzzing every target (make fuzz,
## figures in reports/fuzz/); 0 for seeds only.
BUDGET ?= 90m
FARM_FLAGS ?=
FARM_FUZZ_PERCENT ?= 30
farm:
	$(CARGO) build --release --bin orrery
	BUDGET=$(BUDGET) FARM_FLAGS="$(FARM_FLAGS)" FARM_FUZZ_PERCENT=$(FARM_FUZZ_PERCENT) scripts/farm.sh

## Every fuzz target under AFL++ (cargo-afl, installed into ~/.cache/orrery on first use), each
## until FUZZ_EXECS executions or FUZZ_SECONDS, FUZZ_JOBS at a time; FUZZ_TARGETS="a b" for some.
## Figures into reports/fuzz/; exits 1 on a crash or a hang (docs/fuzzing.md).
fuzz:
	scripts/fuzz.sh

## One input (a crash AFL++ saved, a corpus file) through its target, with the panic's message:
## make fuzz-replay INPUT=FILE [TARGET=NAME] (the target is the folder the file is in).
fuzz-replay:
	@[ -n "$(INPUT)" ] || { echo "make fuzz-replay INPUT=FILE [TARGET=NAME]"; exit 2; }
	ORRERY_FUZZ_INPUT=$(abspath $(INPUT)) $(if $(TARGET),ORRERY_FUZZ_TARGET=$(TARGET)) \
		$(CARGO) test -q -p orrery-fuzz --test corpora -- --ignored --exact replay_one_input_named_in_the_environment --nocapture

## The nightly exploration run (not part of make test): NIGHTLY_SEEDS of every swarm family,
## both variants, with a release build; fails if hardened fails a seed or a declared reach
## condition is never reached. Cost per family goes to reports/perf/nightly-<family>.json.
## PGO=1: with the profile-guided binary (make pgo first; 10–20 % less time per seed than
## the release build on queue-overflow).
NIGHTLY_SEEDS ?= 1..2001
PGO ?= 0
NIGHTLY_BIN := $(if $(filter 1,$(PGO)),./target/pgo/orrery,./target/release/orrery)
nightly:
	@if [ "$(PGO)" = 1 ]; then [ -x $(NIGHTLY_BIN) ] || { echo "no $(NIGHTLY_BIN): run make pgo first"; exit 2; }; \
	else $(CARGO) build --release --bin orrery; fi
	@mkdir -p reports/perf; fail=0; for f in scenarios/swarm-*.yaml; do \
		name=$$(basename $$f .yaml); \
		$(NIGHTLY_BIN) sweep $$f --seeds $(NIGHTLY_SEEDS) --perf reports/perf/nightly-$$name.json > reports/perf/nightly-$$name.log; \
		status=$$?; grep -v '^{' reports/perf/nightly-$$name.log; \
		[ $$status -eq 0 ] || fail=$$status; \
	done; exit $$fail

## The fastest binary, target/pgo/orrery (not part of make test; 20-25 min on 2 cores): the
## release build optimised with a profile of its own runs over every scenario (PGO; needs
## rustup's llvm-tools component, which it installs). Same code, same traces (it checks one).
pgo:
	scripts/pgo-build.sh

## Benchmarks in real mode, release build (ungated perf, ~6 min): the reporter under the real
## event model (both variants, platform answering at once and after 20 ms), its serialisation
## hot path, the tunnel against a direct connection and against the real frp 0.44 (same load,
## same upstream; frp built by conformance/frp/run.sh, skipped without Go), and orrery
## apiserver against the real kube-apiserver (started by conformance/kube/run.sh: built once,
## ~8 min, needs Go), and what the simulator's own plumbing costs (orrery bench-sim).
bench:
	$(CARGO) build --release --bin orrery
	./target/release/orrery bench-sim --out reports/perf/sim.json
	ORRERY_CONFORMANCE_OPTIONAL=1 conformance/frp/run.sh ./target/release/orrery bench --events 20000 --out reports/perf/bench.json
	conformance/kube/run.sh ./target/release/orrery bench-apiserver --out reports/perf/apiserver.json

## Where one seed's time goes (not part of make test): a perf profile of a release build with
## frame pointers; the report goes to reports/perf/profile-<scenario>-<variant>.txt, and
## `orrery profile-split` splits it into the wire between hosts and the components' logic
## (…split.txt).
##   make profile SCENARIO=queue-overflow VARIANT=hardened SEED=1
## Before/after cost of every scenario against another revision: scripts/perf-table.sh BASE
SCENARIO ?= queue-overflow
VARIANT ?= hardened
SEED ?= 1
PROFILE_OUT := reports/perf/profile-$(SCENARIO)-$(VARIANT)
## RUSTFLAGS replaces .cargo/config.toml's flags, so tokio_unstable (turmoil seeds tokio's RNG) is repeated.
profile:
	@command -v perf >/dev/null || { echo "perf not found: apt-get install linux-perf"; exit 2; }
	RUSTFLAGS="--cfg tokio_unstable -C force-frame-pointers=yes" $(CARGO) build --profile profiling --bin orrery
	@mkdir -p reports/perf
	MIMALLOC_PURGE_DELAY=-1 perf record -F 499 --call-graph fp -o $(PROFILE_OUT).data ./target/profiling/orrery run scenarios/$(SCENARIO).yaml --seed $(SEED) --variant $(VARIANT) > $(PROFILE_OUT).json
	perf report -i $(PROFILE_OUT).data --no-children --percent-limit 0.3 --stdio -g none > $(PROFILE_OUT).txt 2>/dev/null
	perf report -i $(PROFILE_OUT).data --children --percent-limit 2 --stdio -g none > $(PROFILE_OUT).inclusive.txt 2>/dev/null
	perf script -i $(PROFILE_OUT).data -F ip,sym 2>/dev/null | ./target/profiling/orrery profile-split --wall-seconds $$(sed -n 's/.*"wall_seconds":\([0-9.]*\).*/\1/p' $(PROFILE_OUT).json) > $(PROFILE_OUT).split.txt
	@head -40 $(PROFILE_OUT).txt; cat $(PROFILE_OUT).split.txt
	@echo "full: $(PROFILE_OUT).txt (self), $(PROFILE_OUT).inclusive.txt (with callees), $(PROFILE_OUT).split.txt (the wire against the components' logic)"

## Conformance suites (API fidelity: real vs simulated API server; runtime on real Kubernetes).
## (MAKEFLAGS cleared: cargo would look for make's jobserver, which these recipes do not pass.)
CONFORMANCE_TESTS := env MAKEFLAGS= $(CARGO) test -p orrery-conformance --test conformance -- --include-ignored --test-threads=1 --nocapture

## The conformance tier: every suite against real software, side by side (each suite with its
## own servers on free loopback ports; they mostly wait on them). Built from Go modules and
## Debian packages by the scripts under conformance/ and scripts/, cached in ~/.cache/orrery.
## A missing prerequisite fails with what to install.
## Built with make test's lints on (the same compiler wrapper), so after make test nothing of
## the workspace is compiled again.
## With a Docker engine (conformance/containers.sh --which), Redis and PostgreSQL run in
## containers through testcontainers and the runtime suite also runs against a real k3s
## cluster (conformance-k3s); ORRERY_CONTAINERS=off keeps the local processes.
CONFORMANCE_PATH = $(shell conformance/containers.sh --which)
conformance:
	$(LINTED) $(MAKE) --no-print-directory -j4 --output-sync=target conformance-suites conformance-argocd conformance-postgres conformance-graphql browser-check lint-workflows lint-dockerfile docs containers-check $(if $(filter containers,$(CONFORMANCE_PATH)),conformance-k3s)

## The suites (all but Argo CD's) against a real kube-apiserver + etcd run as local processes,
## built from source via Go modules (conformance/kube/go.mod pins the version), with a real
## Redis and frp; then the Argo CD suite.
conformance-apiserver:
	$(MAKE) --no-print-directory conformance-suites
	$(MAKE) --no-print-directory conformance-argocd

conformance-suites:
	conformance/redis/run.sh conformance/frp/run.sh conformance/kube/run.sh $(CONFORMANCE_TESTS) --skip argocd::

## The simulated Argo CD against a real one (Argo CD v3 built once from its Go module, ~5 min
## on 2 cores, cached in ~/.cache/orrery; server, application controller and repo server run
## as local processes by conformance/argocd/run.sh, against a real kube-apiserver and Redis).
conformance-argocd:
	conformance/redis/run.sh conformance/kube/run.sh conformance/argocd/run.sh $(CONFORMANCE_TESTS) argocd::

## The control plane's store against a real PostgreSQL (Debian's package, started by
## conformance/postgres/run.sh on a free loopback port).
conformance-postgres:
	conformance/postgres/run.sh env MAKEFLAGS= $(CARGO) test -p orrery-cli --test cli -- --ignored --test-threads=1 postgres::

## The GitOps API driven by graphql-js, the reference GraphQL implementation (installed from
## the npm registry by conformance/graphql/run.sh, pinned by its package-lock.json): the
## standard introspection query, the schema built from it equal to the committed one, typed
## queries with variables, field and request errors as GraphQL over HTTP answers them, abuse.
conformance-graphql:
	conformance/graphql/run.sh env MAKEFLAGS= $(CARGO) test -p orrery-cli --test cli -- --ignored --exact graphql_client::graphql_js_reads_the_schema_by_introspection_and_runs_typed_queries_and_errors

## The testcontainers tool (conformance/containers/, its own workspace): compiled and linted
## with clippy's warnings as errors (scripts/linted.sh), its tests run (its command line, the kubeconfig it
## writes, and no Docker engine: a clear error, the command not run) — on every machine,
## Docker or not, so the Docker path cannot rot where it is not run.
containers-check:
	cd conformance/containers && env MAKEFLAGS= ../../$(LINTED) $(CARGO) test -q --locked --target-dir ../../target/containers

## The runtime suite against a real k3s cluster in Docker (testcontainers' k3s module:
## controllers, kubelet, namespaces), with Redis in a container too. Needs a Docker engine
## that may run a privileged container; make conformance adds it when one answers.
conformance-k3s:
	ORRERY_CONTAINERS=on conformance/containers.sh --redis --k3s -- $(CONFORMANCE_TESTS) runtime::

## The suites against KUBECONFIG if set, else a throwaway kind cluster (needs Docker and kind).
## The Argo CD suite always runs against its own throwaway kube-apiserver (see
## conformance-argocd): it plays kube-controller-manager itself, and it must never touch an
## Argo CD already there.
conformance-kind:
	conformance/redis/run.sh conformance/frp/run.sh conformance/kind.sh $(CONFORMANCE_TESTS) --skip argocd::
	$(MAKE) --no-print-directory conformance-argocd
