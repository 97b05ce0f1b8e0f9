//! Determinism within one process: a seed traces the same whether it runs alone, after other
//! simulations, or at the same time as others on threads of the same process (as `cargo test`
//! runs tests). Each run is compared with a sequential run of the same seed and with the
//! committed report's trace hash where there is one.
//!
//! The process's history is varied on purpose: before each run a thread spends a different
//! number of tokio task ids (they are process-global), so a trace that depended on them —
//! as a crashed host's socket closes once did, through tokio's runtime teardown — would differ
//! here every time, not only when the threads happen to interleave.

use std::path::Path;

use orrery_sim::harness::runner;
use orrery_sim::scenario::{self, Scenario, Variant};

/// Scenarios whose hosts crash, restart or scale, with tunnels, watches, stores, the
/// reporter and the Runner (its logs' broadcaster too): fifteen different scenarios (the
/// cheap seeds of each).
const RUNS: &[(&str, u64, Variant)] = &[
    ("tunnel-drop", 1, Variant::Faithful),
    ("swarm-tunnel", 1, Variant::Faithful),
    ("swarm-tunnel", 2, Variant::Faithful),
    ("platform-crash", 1, Variant::Hardened),
    ("swarm-watch", 1, Variant::Faithful),
    ("swarm-watch", 2, Variant::Hardened),
    ("watch-convergence", 1, Variant::Hardened),
    ("store-crash", 1, Variant::Faithful),
    ("runtime-restart-after-lost-answer", 1, Variant::Faithful),
    ("swarm-store", 3, Variant::Hardened),
    ("promotion-failover", 1, Variant::Hardened),
    ("hosted-tenants", 2, Variant::Faithful),
    ("runner-poll-loss", 1, Variant::Faithful),
    ("runner-poll-loss", 2, Variant::Hardened),
    ("swarm-runner", 2, Variant::Hardened),
    ("cron-failover", 1, Variant::Faithful),
    ("swarm-cron", 2, Variant::Hardened),
    ("runner-slow-logs", 1, Variant::Hardened),
];

fn repo(path: &str) -> String {
    format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))
}

fn load(name: &str) -> Scenario {
    scenario::load(Path::new(&repo(&format!("scenarios/{name}.yaml")))).expect("scenario loads")
}

/// The trace hash `make reports` committed for this run, if it reports one: a scenario's first
/// seed in `reports/<name>/<variant>.json`, a swarm family's other seeds in its sweep.
fn committed(scenario: &Scenario, seed: u64, variant: Variant) -> Option<String> {
    let read = |path: String| -> Option<serde_json::Value> {
        serde_json::from_str(&std::fs::read_to_string(repo(&path)).ok()?).ok()
    };
    let name = &scenario.name;
    if scenario.seeds.first() == Some(&seed) {
        let report = read(format!("reports/{name}/{}.json", variant.as_str()))?;
        return report["trace_hash"].as_str().map(String::from);
    }
    let sweep = read(format!("reports/sweeps/{name}/sweep.json"))?;
    let runs = sweep["variants"]
        .as_array()?
        .iter()
        .find(|v| v["variant"] == variant.as_str())?;
    runs["per_seed"]
        .as_array()?
        .iter()
        .find(|r| r["seed"] == seed)?["trace_hash"]
        .as_str()
        .map(String::from)
}

/// Spends `n` of the process's tokio task ids.
fn spend_task_ids(n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        for _ in 0..n {
            tokio::spawn(async {}).await.expect("an empty task");
        }
    });
}

fn trace_hash(scenario: &Scenario, seed: u64, variant: Variant, spent: usize) -> String {
    spend_task_ids(spent);
    let outcome = runner::run(scenario, seed, variant);
    assert!(
        outcome.harness_error.is_none(),
        "{} seed {seed} {variant:?}: {:?}",
        scenario.name,
        outcome.harness_error
    );
    outcome.trace.hash()
}

#[test]
fn runs_on_threads_of_one_process_trace_as_sequential_runs_and_the_committed_reports() {
    let scenarios: Vec<(Scenario, u64, Variant)> = RUNS
        .iter()
        .map(|(name, seed, variant)| (load(name), *seed, *variant))
        .collect();
    let distinct: std::collections::BTreeSet<&str> = RUNS.iter().map(|r| r.0).collect();
    assert!(distinct.len() >= 8, "at least eight different scenarios");

    // One after another on this thread, each after a different number of spent task ids.
    let sequential: Vec<String> = scenarios
        .iter()
        .enumerate()
        .map(|(i, (s, seed, v))| trace_hash(s, *seed, *v, i % 4 + 1))
        .collect();

    // All at once, each on its own thread, with another number of spent task ids.
    let concurrent: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = scenarios
            .iter()
            .enumerate()
            .map(|(i, (s, seed, v))| {
                std::thread::Builder::new()
                    .stack_size(32 << 20)
                    .spawn_scoped(scope, move || trace_hash(s, *seed, *v, i % 3 + 2))
                    .expect("a thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a run finishes"))
            .collect()
    });

    let mut differing = Vec::new();
    for (i, (s, seed, v)) in scenarios.iter().enumerate() {
        let name = format!("{} seed {seed} {}", s.name, v.as_str());
        if sequential[i] != concurrent[i] {
            differing.push(format!(
                "{name}: sequential {} concurrent {}",
                sequential[i], concurrent[i]
            ));
        }
        if let Some(hash) = committed(s, *seed, *v) {
            if hash != sequential[i] {
                differing.push(format!(
                    "{name}: committed {hash} sequential {}",
                    sequential[i]
                ));
            }
        }
    }
    assert!(
        differing.is_empty(),
        "{} of {} runs differ:\n{}",
        differing.len(),
        RUNS.len(),
        differing.join("\n")
    );
    // The comparison with the committed reports is not vacuous.
    let with_reports = scenarios
        .iter()
        .filter(|(s, seed, v)| committed(s, *seed, *v).is_some())
        .count();
    assert!(
        with_reports >= 8,
        "{with_reports} runs have a committed hash"
    );
}

/// A run on a slow, loaded machine traces as on a fast one. Found by this file's concurrent
/// test under load (swarm-tunnel, faithful, seeds 1 and 2 differed): h2 forgets a stream it
/// reset after one second of *real* time (`reset_stream_duration`, read with
/// `std::time::Instant`), so when a run was slow the platform's HTTP/2 client met the
/// runtime's late answer on a forgotten stream and answered it differently. The platform now
/// keeps reset streams for an hour (bounded by their count, which the seed decides). Each run
/// here sleeps 200 µs of real time before every step (about ten seconds asleep each, little
/// CPU).
#[test]
fn a_run_slowed_in_real_time_traces_as_a_fast_one() {
    let slow = runner::Drive {
        real_delay_per_step: std::time::Duration::from_micros(200),
    };
    for (name, seed, variant) in [
        ("swarm-tunnel", 1, Variant::Faithful),
        ("swarm-tunnel", 2, Variant::Faithful),
    ] {
        let scenario = load(name);
        let fast = runner::run(&scenario, seed, variant).trace.hash();
        let slowed = runner::run_driven(&scenario, seed, variant, slow)
            .trace
            .hash();
        assert_eq!(
            slowed, fast,
            "{name} seed {seed} {variant:?}: slowed {slowed}, fast {fast}"
        );
    }
}
