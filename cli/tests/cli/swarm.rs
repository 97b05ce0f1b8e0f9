//! Swarm families: each seed draws its own fault schedule and knobs (and switches whole
//! fault kinds off), deterministically; the plain scenario a seed ran can be printed and
//! reproduces the run's trace hash; bad `swarm:` sections are refused where they are wrong.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use orrery_system::env::Point;

use orrery_sim::faults::Fault;
use orrery_sim::harness::runner;
use orrery_sim::scenario::{self, draw, Variant};

fn scenario_path(name: &str) -> String {
    format!("{}/../scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn trace_hash(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(args)
        .output()
        .unwrap();
    let line: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(line["expected"], true, "{line}");
    line["trace_hash"].as_str().unwrap().to_string()
}

#[test]
fn the_printed_scenario_reproduces_the_swarm_runs_trace_hash() {
    let dir = std::env::temp_dir().join(format!("orrery-swarm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let family = scenario_path("swarm-watch.yaml");
    for (seed, variant) in [("4", "hardened"), ("9", "faithful")] {
        let printed = dir.join(format!("seed-{seed}-{variant}.yaml"));
        let printed = printed.to_str().unwrap();
        let drawn = trace_hash(&[
            "run",
            &family,
            "--seed",
            seed,
            "--variant",
            variant,
            "--print-scenario",
            printed,
        ]);
        let text = std::fs::read_to_string(printed).unwrap();
        assert!(
            !text.contains("swarm:") && text.contains("faults:"),
            "{text}"
        );
        let plain = scenario::load(Path::new(printed)).unwrap();
        assert_eq!(plain.seeds, vec![seed.parse::<u64>().unwrap()]);
        assert!(!plain.faults.is_empty(), "the drawn faults are written out");
        let replayed = trace_hash(&["run", printed, "--variant", variant]);
        assert_eq!(drawn, replayed, "seed {seed} {variant}");
    }
}

#[test]
fn seeds_draw_different_schedules_deterministically_and_switch_kinds_off() {
    let family = scenario::load(Path::new(&scenario_path("swarm-watch.yaml"))).unwrap();
    let swarm = family.swarm.clone().unwrap();
    let mut schedules = BTreeSet::new();
    let mut kinds_per_seed = Vec::new();
    for seed in 1..=40 {
        let concrete = draw::concretize(&family, seed);
        assert_eq!(
            concrete,
            draw::concretize(&family, seed),
            "seed {seed} redraws the same"
        );
        assert!(concrete.swarm.is_none());
        let faults: Vec<Fault> = concrete
            .faults
            .iter()
            .filter_map(Fault::from_step)
            .collect();
        assert_eq!(
            faults.len(),
            concrete.faults.len(),
            "every drawn step is one fault"
        );
        assert!(concrete.faults.iter().all(|f| f.at <= family.duration));
        // Each drawn fault comes with its healing: at most `count` faults, two steps each.
        assert!(faults.len() <= 2 * swarm.count[1] as usize);
        let kinds: BTreeSet<&str> = faults.iter().map(|f| f.name()).collect();
        kinds_per_seed.push(kinds.into_iter().map(String::from).collect::<BTreeSet<_>>());
        schedules.insert(format!("{:?}", concrete.faults));
        let window = concrete.apiserver.compaction_window;
        assert!((2..=60).contains(&window.as_secs()), "{window:?}");
        let buggify = concrete
            .buggify
            .as_ref()
            .expect("swarm-watch draws fault points");
        assert!((0.01..=0.1).contains(&buggify.probability), "{buggify:?}");
        assert_eq!(buggify.points, [Point::HttpConnectRefused]);
    }
    assert!(
        schedules.len() >= 35,
        "seeds draw different schedules ({})",
        schedules.len()
    );
    let all: BTreeSet<String> = kinds_per_seed.iter().flatten().cloned().collect();
    assert!(
        all.is_superset(
            &["partition", "crash", "latency", "apiserver"]
                .map(String::from)
                .into()
        ),
        "every kind is drawn by some seed: {all:?}"
    );
    assert!(
        kinds_per_seed
            .iter()
            .any(|k| !k.contains("partition") && !k.is_empty()),
        "some seeds run with the most likely kind switched off"
    );
}

#[test]
fn the_reporter_family_draws_knobs_scale_and_platform_faults_and_fault_points() {
    let family = scenario::load(Path::new(&scenario_path("swarm-reporter.yaml"))).unwrap();
    let (mut kinds, mut capacities, mut point_sets) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for seed in 1..=40 {
        let concrete = draw::concretize(&family, seed);
        let replicas = concrete.reporter.replicas.unwrap();
        assert!((1..=4).contains(&replicas), "seed {seed}: {replicas}");
        assert!((20..=300).contains(&concrete.reporter.queue_capacity));
        assert!((1..=8).contains(&concrete.reporter.workers));
        let commit = concrete.workload.commit_every.as_millis();
        assert!((100..=1000).contains(&commit), "{commit}");
        capacities.insert(concrete.reporter.queue_capacity);
        kinds.extend(
            concrete
                .faults
                .iter()
                .filter_map(Fault::from_step)
                .map(|f| f.name()),
        );
        let buggify = concrete.buggify.unwrap();
        assert!(!buggify.points.is_empty());
        point_sets.insert(format!("{:?}", buggify.points));
        // A drawn scale goes back to the seed's starting replica count when it ends.
        let scales: Vec<u32> = concrete
            .faults
            .iter()
            .filter_map(|f| f.scale.as_ref().map(|s| s.replicas))
            .collect();
        for pair in scales.chunks(2).filter(|p| p.len() == 2) {
            assert_eq!(pair[1], replicas, "seed {seed}: {scales:?}");
        }
    }
    for kind in [
        "crash",
        "partition",
        "scale",
        "platform",
        "latency",
        "apiserver",
    ] {
        assert!(kinds.contains(kind), "{kind} drawn by some seed: {kinds:?}");
    }
    assert!(
        capacities.len() > 20 && point_sets.len() > 20,
        "seeds differ"
    );
}

#[test]
fn a_scripted_scenario_is_its_own_concrete_scenario() {
    let scripted = scenario::load(Path::new(&scenario_path("watch-convergence.yaml"))).unwrap();
    assert_eq!(draw::concretize(&scripted, 7), scripted);
}

// Every listed seed of a family (1..=N: 10 for swarm-watch and swarm-store, 20 for swarm-tunnel, 5
// for the costlier families; depth is `make nightly`'s) runs in `make reports`, which exits non-zero when a seed misses its
// expectation or a declared reach condition is never reached, and writes
// `reports/<family>/seeds.json`; `make test` regenerates those files and fails when they differ
// from the committed ones, so the tests below that read them see what this commit's code does.
// (A family's runs in this process are in `in_process.rs`.)

/// A family's committed `seeds.json` (regenerated by `make test`), one entry per variant.
fn family_summary(file: &str) -> Vec<serde_json::Value> {
    let name = file.trim_end_matches(".yaml");
    let path = format!(
        "{}/../reports/{name}/seeds.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every listed seed of a family met its expectation in both variants, and its hardened runs
/// reached every condition it declares (as `make reports` wrote them).
fn family_reports_meet_their_expectations_and_reach_their_conditions(file: &str) {
    let family = scenario::load(Path::new(&scenario_path(file))).unwrap();
    let listed = family.seeds.len() as u64;
    assert!(
        listed >= 5 && family.seeds == (1..=listed).collect::<Vec<u64>>(),
        "{file}: make test runs seeds 1..=N, N ≥ 5 (listed: {:?})",
        family.seeds
    );
    let summaries = family_summary(file);
    assert_eq!(summaries.len(), 2, "{file}: one summary per variant");
    for summary in &summaries {
        let variant = summary["variant"].as_str().unwrap();
        assert_eq!(
            summary["runs"].as_u64(),
            Some(family.seeds.len() as u64),
            "{file} {variant}: every listed seed ran"
        );
        assert!(
            summary["first_unexpected"].is_null()
                && summary["unexpected"]
                    .as_object()
                    .is_some_and(|m| m.is_empty()),
            "{file} {variant}: unexpected runs: {summary}"
        );
        if variant == "hardened" {
            for reach in family
                .reach
                .iter()
                .filter(|r| r.applies_to(Variant::Hardened))
            {
                let seeds = summary["declared"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|d| d[0] == reach.condition.name())
                    .and_then(|d| d[1].as_u64())
                    .unwrap_or(0);
                assert!(
                    seeds > 0,
                    "{file}: no hardened seed reached {}",
                    reach.condition
                );
            }
        }
    }
}

#[test]
fn swarm_watch_meets_its_expectations_and_reaches_its_conditions() {
    family_reports_meet_their_expectations_and_reach_their_conditions("swarm-watch.yaml");
}

#[test]
fn swarm_reporter_meets_its_expectations_and_reaches_its_conditions() {
    family_reports_meet_their_expectations_and_reach_their_conditions("swarm-reporter.yaml");
}

#[test]
fn swarm_tunnel_meets_its_expectations_and_reaches_its_conditions() {
    family_reports_meet_their_expectations_and_reach_their_conditions("swarm-tunnel.yaml");
}

#[test]
fn swarm_store_meets_its_expectations_and_reaches_its_conditions() {
    family_reports_meet_their_expectations_and_reach_their_conditions("swarm-store.yaml");
}

#[test]
fn swarm_runner_meets_its_expectations_and_reaches_its_conditions() {
    family_reports_meet_their_expectations_and_reach_their_conditions("swarm-runner.yaml");
}

#[test]
fn swarm_cron_meets_its_expectations_and_reaches_its_conditions() {
    family_reports_meet_their_expectations_and_reach_their_conditions("swarm-cron.yaml");
}

#[test]
fn swarm_anti_entropy_meets_its_expectations_and_reaches_its_conditions() {
    family_reports_meet_their_expectations_and_reach_their_conditions("swarm-anti-entropy.yaml");
}

#[test]
fn every_fault_point_fires_in_a_seed_that_make_test_runs() {
    let mut fired: BTreeSet<String> = BTreeSet::new();
    for file in [
        "swarm-watch.yaml",
        "swarm-reporter.yaml",
        "swarm-tunnel.yaml",
    ] {
        for summary in family_summary(file) {
            for point in summary["fault_points"].as_array().unwrap() {
                if point[1].as_u64().unwrap_or(0) > 0 {
                    fired.insert(point[0].as_str().unwrap().to_string());
                }
            }
        }
    }
    let never: Vec<&str> = Point::ALL
        .iter()
        .map(|p| p.name())
        .filter(|p| !fired.contains(*p))
        .collect();
    assert!(never.is_empty(), "fault points that never fired: {never:?}");
}

#[test]
fn scripted_scenarios_switch_no_fault_point_on() {
    for file in ["watch-convergence.yaml", "tunnel-drop.yaml"] {
        let scripted = scenario::load(Path::new(&scenario_path(file))).unwrap();
        assert!(scripted.buggify.is_none());
        let outcome = runner::run(&scripted, 1, Variant::Hardened);
        assert!(
            outcome.fault_points.is_empty(),
            "{file}: {:?}",
            outcome.fault_points
        );
    }
}

const BASE: &str = "name: t
description: d
topology:
  hosts:
    - {name: apiserver, role: apiserver}
    - {name: argocd, role: argocd}
    - {name: workload, role: workload}
    - {name: probe, role: probe}
swarm:
  count: [1, 3]
  window: [1s, 5s]
  faults:
    - {partition: [[probe, apiserver]], lasts: [1s, 2s]}
duration: 10s
calm: 10s
invariants:
  - name: probe_matches_apiserver
expect: {hardened: any}
";

#[test]
fn bad_swarm_sections_are_refused_where_they_are_wrong() {
    assert!(scenario::parse::parse("t.yaml", BASE).is_ok());
    let err = |text: &str| {
        scenario::parse::parse("t.yaml", text)
            .unwrap_err()
            .to_string()
    };
    let unknown = err(&BASE.replace("[[probe, apiserver]]", "[[probe, apisrv]]"));
    assert!(
        unknown.starts_with("t.yaml:13:28: swarm.faults[0].partition[0][1]: unknown host"),
        "{unknown}"
    );
    let knob = err(&BASE.replace(
        "{partition: [[probe, apiserver]], lasts: [1s, 2s]}",
        "{apiserver: {latency: [0.0, 1.0]}, lasts: [1s, 2s]}",
    ));
    assert!(
        knob.contains("swarm.faults[0].apiserver.latency") && knob.contains("rate knobs"),
        "{knob}"
    );
    let two = err(&BASE.replace("{partition:", "{crash: [probe], partition:"));
    assert!(
        two.contains("swarm.faults[0]") && two.contains("exactly one of"),
        "{two}"
    );
    let window = err(&BASE.replace("window: [1s, 5s]", "window: [1s, 50s]"));
    assert!(window.contains("swarm.window"), "{window}");
    let scripted_any = err(&BASE
        .replace("swarm:\n  count: [1, 3]\n  window: [1s, 5s]\n  faults:\n    - {partition: [[probe, apiserver]], lasts: [1s, 2s]}\n", ""));
    assert!(
        scripted_any.contains("expect.hardened") && scripted_any.contains("swarm families only"),
        "{scripted_any}"
    );
}

#[test]
fn swarm_targets_may_name_a_role_for_every_host_that_has_it() {
    let text = "name: t
description: d
topology:
  hosts:
    - {name: gateway, role: gateway}
    - {name: prod, role: runtime}
    - {name: prod-2, role: runtime}
    - {name: client-0, role: client}
swarm:
  count: [1, 3]
  window: [1s, 5s]
  faults:
    - {crash: [\"role:runtime\"], lasts: [1s, 2s]}
    - {partition: [[\"role:runtime\", gateway]], lasts: [1s, 2s]}
duration: 10s
calm: 10s
invariants:
  - name: requests_answered
expect: {hardened: any}
"
    .to_string();
    let family = scenario::parse::parse("t.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    let mut hit = BTreeSet::new();
    for seed in 1..=40 {
        for step in draw::concretize(&family, seed).faults {
            hit.extend(step.crash.clone());
            hit.extend(step.partition.map(|[a, _]| a));
        }
    }
    assert_eq!(
        hit,
        BTreeSet::from(["prod".to_string(), "prod-2".to_string()]),
        "both runtimes drawn, nothing else"
    );
    let bad = scenario::parse::parse("t.yaml", &text.replacen("role:runtime", "role:reporter", 1))
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("swarm.faults[0].crash[0]") && bad.contains("role:<role>"),
        "{bad}"
    );
}

#[test]
fn swarm_hosted_meets_its_expectations_and_reaches_its_conditions() {
    family_reports_meet_their_expectations_and_reach_their_conditions("swarm-hosted.yaml");
}
