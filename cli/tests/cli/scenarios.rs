//! Whole scenario runs: the committed scenarios pass for their seeds, runs are
//! deterministic, and bad scenario files are refused with file, line and field.

use std::path::Path;

use orrery_sim::harness::runner;
use orrery_sim::report;
use orrery_sim::scenario::{self, Outcome, Variant};

fn scenario_path(name: &str) -> String {
    format!("{}/../scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Every listed seed's verdict is checked by `make reports` (in `make test`); here, that the
/// world of a passing run did real work.
#[test]
fn watch_convergence_meets_its_expectation_and_does_real_work() {
    let s = scenario::load(Path::new(&scenario_path("watch-convergence.yaml"))).unwrap();
    assert!(s.seeds.len() >= 3, "several seeds are declared");
    let (seed, variant) = (s.seeds[0], Variant::Hardened);
    let outcome = runner::run(&s, seed, variant);
    assert_eq!(
        outcome.result,
        report::expected(&s, variant),
        "seed {seed} {variant:?}: violations {:?}, harness error {:?}",
        outcome.violations,
        outcome.harness_error
    );
    assert!(
        outcome.trace.len() > 1000,
        "the world did real work ({} events)",
        outcome.trace.len()
    );
}

/// The trace hash of one run in a fresh `orrery` process, as every user-facing run (`run`,
/// `sweep`, `reports`) is one.
fn hash_in_a_fresh_process(seed: u64) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["run", &scenario_path("watch-convergence.yaml"), "--seed"])
        .arg(seed.to_string())
        .args(["--variant", "hardened"])
        .output()
        .expect("orrery runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("a final JSON line");
    last["trace_hash"]
        .as_str()
        .expect("a trace hash")
        .to_string()
}

/// Same seed, same hash; another seed, another, each run in a fresh `orrery` process (within
/// one process: `in_process.rs`).
#[test]
fn the_same_seed_gives_the_same_trace_hash_and_another_seed_another() {
    let a = hash_in_a_fresh_process(7);
    let b = hash_in_a_fresh_process(7);
    let c = hash_in_a_fresh_process(8);
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn a_probe_that_cannot_converge_is_reported_as_a_liveness_timeout() {
    // A partition that is never healed inside a zero-length calm phase leaves the probe stale:
    // the checker must notice (this guards the checker itself against passing vacuously).
    let mut s = scenario::load(Path::new(&scenario_path("watch-convergence.yaml"))).unwrap();
    s.calm = std::time::Duration::ZERO;
    s.faults.retain(|f| f.repair.is_none());
    let outcome = runner::run(&s, 1, Variant::Hardened);
    assert_eq!(
        outcome.result,
        Outcome::LivenessTimeout,
        "violations: {:?}",
        outcome.violations
    );
    assert_eq!(outcome.violations[0].invariant, "probe_matches_apiserver");
}

#[test]
fn a_misspelt_field_in_a_scenario_file_is_refused_with_file_line_and_field() {
    let text = std::fs::read_to_string(scenario_path("watch-convergence.yaml")).unwrap();
    let bad = text.replace("  commit_every: 500ms", "  comit_every: 500ms");
    let dir = std::env::temp_dir().join(format!("orrery-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.yaml");
    std::fs::write(&path, bad).unwrap();
    let err = scenario::load(&path).unwrap_err().to_string();
    let line = text
        .lines()
        .position(|l| l.contains("commit_every"))
        .unwrap()
        + 1;
    assert!(err.contains(&format!("bad.yaml:{line}:")), "{err}");
    assert!(err.contains("unknown field `comit_every`"), "{err}");
}

#[test]
fn queue_overflow_scaled_down_shows_the_flaw_in_faithful_and_the_fix_in_hardened() {
    // The committed scenario (10,000 apps, 1,000-slot queues) runs in `make reports`; here the
    // fleet and the queues shrink by the same factor so the same overflow happens in seconds.
    let mut s = scenario::load(Path::new(&scenario_path("queue-overflow.yaml"))).unwrap();
    s.workload.applications = 1_500;
    s.reporter.queue_capacity = 150;
    s.calm = std::time::Duration::from_secs(240);
    let faithful = runner::run(&s, 1, Variant::Faithful);
    assert_eq!(
        faithful.result,
        Outcome::SafetyViolation,
        "{:?}",
        faithful.harness_error
    );
    assert!(faithful
        .violations
        .iter()
        .any(|v| v.invariant == "platform_converges"));
    let hardened = runner::run(&s, 1, Variant::Hardened);
    assert_eq!(
        hardened.result,
        Outcome::Pass,
        "{:?} {:?}",
        hardened.violations,
        hardened.harness_error
    );
}

/// Regression, found by `orrery sweep shard-rebalance.yaml --seeds 1..201`: with seed 16 a
/// slow replica wrote an older state's digest into the dedup cache after a newer state was
/// sent, so the newest state was "already sent" forever and even the anti-entropy pass
/// skipped it. Anti-entropy now bypasses the cache for the apps it finds lagging.
#[test]
fn shard_rebalance_seed_16_converges_although_the_dedup_cache_went_stale() {
    let s = scenario::load(Path::new(&scenario_path("shard-rebalance.yaml"))).unwrap();
    let outcome = runner::run(&s, 16, Variant::Hardened);
    assert_eq!(outcome.result, Outcome::Pass, "{:?}", outcome.violations);
}

#[test]
fn tunnel_drop_shows_the_flaws_in_faithful_and_the_fixes_in_hardened() {
    let s = scenario::load(Path::new(&scenario_path("tunnel-drop.yaml"))).unwrap();
    let faithful = runner::run(&s, 1, Variant::Faithful);
    let hardened = runner::run(&s, 1, Variant::Hardened);
    assert_eq!(
        hardened.result,
        Outcome::Pass,
        "hardened: {:?}",
        hardened.violations
    );
    assert_eq!(faithful.result, Outcome::SafetyViolation);
    let broken: Vec<&str> = faithful
        .violations
        .iter()
        .map(|v| v.invariant.as_str())
        .collect();
    assert!(
        broken.contains(&"executed_at_most_once"),
        "a retried write ran twice without request ids: {broken:?}"
    );
    assert!(
        broken.contains(&"tunnel_recovers"),
        "an unnoticed dead tunnel stays dead after the repair: {broken:?}"
    );
    assert!(
        !broken.contains(&"requests_answered"),
        "the platform's deadline answers every request in both variants"
    );
    let noticed = |o: &runner::RunOutcome| {
        let m = orrery_sim::harness::metrics::compute(&o.trace.events(), &o.state);
        m.histograms["tunnel_drop_noticed_by_platform"].max
    };
    assert!(
        noticed(&hardened) <= 6_000,
        "hardened notices a drop within seconds"
    );
    assert!(
        noticed(&faithful) >= 20_000,
        "faithful notices it only after its 60 s keepalive"
    );
}

#[test]
fn reconnect_storm_hardened_takes_the_servers_slots_and_beats_lockstep_backoff() {
    let s = scenario::load(Path::new(&scenario_path("reconnect-storm.yaml"))).unwrap();
    let figures = |variant| {
        let outcome = runner::run(&s, 1, variant);
        assert_eq!(
            outcome.result,
            Outcome::Pass,
            "{variant:?}: {:?}",
            outcome.violations
        );
        let m = orrery_sim::harness::metrics::compute(&outcome.trace.events(), &outcome.state);
        let reconnect = m.histograms["fleet_reconnect_after_restart"].clone();
        assert_eq!(
            reconnect.count, 1000,
            "every runtime of the fleet reconnected"
        );
        (
            reconnect.max,
            m.counters["tunnel.server_busy"],
            m.counters["tunnel.peak_registrations_per_s"],
        )
    };
    let (faithful_max, faithful_busy, _) = figures(Variant::Faithful);
    let (hardened_max, hardened_busy, peak) = figures(Variant::Hardened);
    assert!(
        peak <= 50,
        "the server never registers faster than its capacity ({peak}/s)"
    );
    assert!(
        hardened_max < faithful_max,
        "hardened fleet back sooner: {hardened_max} ms vs {faithful_max} ms"
    );
    assert!(
        hardened_busy * 2 < faithful_busy,
        "hardened wastes fewer attempts: {hardened_busy} vs {faithful_busy} refusals"
    );
}

#[test]
fn a_runtime_restarted_after_a_lost_answer_runs_no_write_twice_only_with_durable_records() {
    let s = scenario::load(Path::new(&scenario_path(
        "runtime-restart-after-lost-answer.yaml",
    )))
    .unwrap();
    for seed in &s.seeds {
        for variant in s.expect.keys().copied() {
            let outcome = runner::run(&s, *seed, variant);
            assert_eq!(
                outcome.result,
                report::expected(&s, variant),
                "seed {seed} {variant:?}: {:?}",
                outcome.violations
            );
        }
    }
    // The first hardened design kept request records in memory only (no cache host): the
    // retry that reaches the restarted runtime runs the write again.
    let mut in_memory = s.clone();
    in_memory.topology.hosts.retain(|h| h.name != "cache");
    let outcome = runner::run(&in_memory, 1, Variant::Hardened);
    assert_eq!(
        outcome
            .violations
            .iter()
            .map(|v| v.invariant.as_str())
            .collect::<Vec<_>>(),
        ["executed_at_most_once"]
    );
}

#[test]
fn a_hardened_replica_whose_lease_renewal_is_held_back_steps_down_at_its_lease_expiry() {
    // Fault point reporter.lease_renew_late holds renewals back 1-2 lease durations. The
    // replica must stop reporting (an empty membership view) once its lease has expired for
    // the others, without waiting for the late renewal — what the swarm found missing.
    let text = std::fs::read_to_string(scenario_path("shard-rebalance.yaml")).unwrap();
    let mut s = scenario::parse::parse("lease.yaml", &text).unwrap();
    s.workload.applications = 100;
    s.faults.clear();
    s.reporter.replicas = Some(3);
    s.duration = std::time::Duration::from_secs(120);
    s.calm = std::time::Duration::from_secs(120);
    s.buggify = Some(orrery_sim::scenario::model::Buggify {
        probability: 0.3,
        points: vec![orrery_system::env::Point::ReporterLeaseRenewLate],
    });
    let outcome = runner::run(&s, 1, Variant::Hardened);
    assert_eq!(outcome.result, Outcome::Pass, "{:?}", outcome.violations);
    assert!(outcome
        .fault_points
        .contains_key(&orrery_system::env::Point::ReporterLeaseRenewLate));
    let events = outcome.trace.events();
    let stepped_down = events.iter().any(|e| {
        matches!(
            e.reporter(),
            Some(orrery_system::observe::ReporterEvent::Membership { members, .. }) if members.is_empty()
        ) && e.at_ms < s.duration.as_millis() as u64
    });
    assert!(
        stepped_down,
        "some replica stepped down while its renewal was late"
    );
    assert!(outcome
        .reached
        .contains(&orrery_sim::explore::reach::Condition::LeaseExpiredWhileSending));
}

/// GitHub's primary rate limit spent from the start: the hardened ACR controller's first
/// syncs ask the provider for the newest touching commit, the first refusal (403 with
/// `x-ratelimit-reset` an hour away) names the wait, and the controller asks nothing more
/// of the provider until then — a refusal per worker already in flight at most, not one
/// per app and retry.
#[test]
fn the_hardened_acr_waits_out_a_spent_primary_rate_limit_instead_of_asking_again() {
    let text = std::fs::read_to_string(scenario_path("monorepo-storm.yaml")).unwrap();
    let start = text.find("\nfaults:\n").unwrap();
    let end = text.find("\nduration:").unwrap();
    let text = format!(
        "{}\nfaults:\n  - {{at: 0s, git: {{hourly_limit: 2}}}}{}",
        &text[..start],
        &text[end..]
    )
    .replace("applications: 1000", "applications: 100")
    .replace("paths: 100", "paths: 10")
    .replace("calm: 180s", "calm: 30s")
    .replace("duration: 270s", "duration: 120s");
    let dir = std::env::temp_dir().join(format!("orrery-acr-gate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gate.yaml");
    std::fs::write(&path, text).unwrap();
    let s = scenario::load(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let run = runner::run(&s, 1, Variant::Hardened);
    let errors: Vec<String> = run
        .trace
        .events()
        .iter()
        .filter_map(|e| match e.acr() {
            Some(orrery_system::observe::AcrEvent::Failed { error, .. }) => Some(error.clone()),
            _ => None,
        })
        .collect();
    let refused = errors.iter().filter(|e| e.contains("403")).count();
    let waited = errors
        .iter()
        .filter(|e| e.contains("asked to wait"))
        .count();
    assert!(refused >= 1, "the limit was met: {errors:?}");
    assert!(
        refused <= 8,
        "{refused} calls refused: the provider was asked again after it named its wait"
    );
    assert!(waited > refused, "apps held back by the wait: {waited}");
}
