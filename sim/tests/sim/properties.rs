//! Property tests for the hardened reporter: over random fault schedules and workloads,
//! the platform converges and every app ends with exactly one owner. A failing case is
//! shrunk by proptest and printed as a complete scenario file to save and replay with
//! `orrery run`.

use std::path::Path;
use std::time::Duration;

use orrery_sim::harness::runner;
use orrery_sim::scenario::model::{FaultStep, PlatformChange, Scale};
use orrery_sim::scenario::{self, Outcome, Scenario, Variant};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// A small world (5 reporter hosts, 150 apps) built from the committed shard-rebalance scenario.
fn base() -> Scenario {
    let path = format!(
        "{}/../scenarios/shard-rebalance.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut s = scenario::load(Path::new(&path)).expect("shard-rebalance.yaml parses");
    s.name = "property-case".into();
    s.workload.applications = 150;
    s.workload.repositories = 5;
    s.faults.clear();
    s.duration = Duration::from_secs(120);
    s.calm = Duration::from_secs(150);
    s
}

fn reporter() -> impl Strategy<Value = String> {
    (0u32..5).prop_map(|i| format!("reporter-{i}"))
}

fn step() -> impl Strategy<Value = FaultStep> {
    let at = (5u64..110).prop_map(Duration::from_secs);
    let action = prop_oneof![
        reporter().prop_map(|h| FaultStep {
            crash: Some(h),
            ..FaultStep::default()
        }),
        reporter().prop_map(|h| FaultStep {
            restart: Some(h),
            ..FaultStep::default()
        }),
        reporter().prop_map(|h| FaultStep {
            partition: Some([h, "apiserver".into()]),
            ..FaultStep::default()
        }),
        reporter().prop_map(|h| FaultStep {
            repair: Some([h, "apiserver".into()]),
            ..FaultStep::default()
        }),
        (1u32..=5).prop_map(|r| FaultStep {
            scale: Some(Scale {
                replicas: r,
                every: Duration::from_secs(5)
            }),
            ..FaultStep::default()
        }),
        (0u64..400).prop_map(|ms| FaultStep {
            platform: Some(PlatformChange {
                api_latency: Some(Duration::from_millis(ms)),
                handler_delay: None,
                reject: None,
                runner_silent: None,
            }),
            ..FaultStep::default()
        }),
    ];
    (at, action).prop_map(|(at, mut step)| {
        step.at = at;
        step
    })
}

fn case() -> impl Strategy<Value = Scenario> {
    (
        proptest::collection::vec(step(), 0..6),
        100u64..2000,
        prop_oneof![Just(0u64), 3u64..20],
        1u32..=5,
    )
        .prop_map(|(mut faults, commit_ms, churn_s, replicas)| {
            let mut s = base();
            faults.sort_by_key(|f| f.at);
            s.faults = faults;
            s.workload.commit_every = Duration::from_millis(commit_ms);
            s.workload.churn_every = Duration::from_secs(churn_s);
            s.reporter.replicas = Some(replicas);
            s
        })
}

proptest! {
    // Each case is a whole simulation; a fixed seed keeps CI's cases the same every run.
    #![proptest_config(Config { cases: 6, rng_seed: RngSeed::Fixed(20261122), failure_persistence: None, ..Config::default() })]

    #[test]
    fn hardened_reporters_converge_with_single_owners_under_random_faults(s in case()) {
        let outcome = runner::run(&s, 1, Variant::Hardened);
        prop_assert_eq!(
            outcome.result,
            Outcome::Pass,
            "violations {:?}, harness error {:?}\n--- minimal failing scenario (save as a .yaml file and run with `orrery run`) ---\n{}",
            outcome.violations.iter().map(|v| (&v.invariant, &v.details)).collect::<Vec<_>>(),
            outcome.harness_error,
            serde_saphyr::to_string(&s).unwrap_or_default()
        );
    }
}

#[test]
fn a_printed_case_is_a_valid_scenario_file_that_parses_back_to_the_same_case() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for _ in 0..20 {
        let s = case().new_tree(&mut runner).unwrap().current();
        let text = serde_saphyr::to_string(&s).unwrap();
        let back =
            scenario::parse::parse("case.yaml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, s);
    }
}
