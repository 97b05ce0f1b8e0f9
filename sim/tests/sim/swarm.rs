//! Swarm families: each seed draws its own fault schedule and knobs (and switches whole
//! fault kinds off), deterministically; the plain scenario a seed ran can be printed and
//! reproduces the run's trace hash; bad `swarm:` sections are refused where they are wrong.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use orrery_sim::reach::Condition;
use orrery_system::env::Point;

use orrery_sim::faults::Fault;
use orrery_sim::harness::runner;
use orrery_sim::report;
use orrery_sim::scenario::{self, swarm, Variant};

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
        let concrete = swarm::concretize(&family, seed);
        assert_eq!(
            concrete,
            swarm::concretize(&family, seed),
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
        let concrete = swarm::concretize(&family, seed);
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
    assert_eq!(swarm::concretize(&scripted, 7), scripted);
}

/// What one seed of a family did: its result, its reach conditions, the points that fired.
struct SeedRun {
    seed: u64,
    variant: Variant,
    result: scenario::Outcome,
    detail: String,
    reached: Vec<Condition>,
    fired: BTreeSet<Point>,
}

/// A family's runs, computed once.
type Runs = Arc<OnceLock<Arc<Vec<SeedRun>>>>;

/// Every listed seed of a swarm family, both variants, run once per test binary (the
/// family's own test and the coverage test share them).
fn family_runs(file: &str) -> Arc<Vec<SeedRun>> {
    static RUNS: OnceLock<Mutex<BTreeMap<String, Runs>>> = OnceLock::new();
    let cell = RUNS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(file.to_string())
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let family = scenario::load(Path::new(&scenario_path(file))).unwrap();
        let mut runs = Vec::new();
        for seed in &family.seeds {
            for variant in [Variant::Faithful, Variant::Hardened] {
                let outcome = runner::run(&family, *seed, variant);
                runs.push(SeedRun {
                    seed: *seed,
                    variant,
                    result: outcome.result,
                    detail: format!("{:?} {:?}", outcome.violations, outcome.harness_error),
                    reached: outcome.reached.clone(),
                    fired: outcome.fault_points.keys().copied().collect(),
                });
            }
        }
        Arc::new(runs)
    })
    .clone()
}

/// A family meets its expectation at every listed seed (1..=20), and its hardened runs
/// reach every condition it declares for hardened.
fn family_meets_its_expectations_and_reaches_its_conditions(file: &str) {
    let family = scenario::load(Path::new(&scenario_path(file))).unwrap();
    assert_eq!(
        family.seeds,
        (1..=20).collect::<Vec<u64>>(),
        "{file}: make test runs seeds 1..=20"
    );
    let runs = family_runs(file);
    for run in runs.iter() {
        assert!(
            run.result.meets(report::expected(&family, run.variant)),
            "{file} seed {} {:?}: {:?} {}",
            run.seed,
            run.variant,
            run.result,
            run.detail
        );
    }
    for reach in family
        .reach
        .iter()
        .filter(|r| r.applies_to(Variant::Hardened))
    {
        assert!(
            runs.iter()
                .any(|r| r.variant == Variant::Hardened && r.reached.contains(&reach.condition)),
            "{file}: no hardened seed reached {}",
            reach.condition
        );
    }
}

#[test]
fn swarm_watch_meets_its_expectations_and_reaches_its_conditions() {
    family_meets_its_expectations_and_reaches_its_conditions("swarm-watch.yaml");
}

#[test]
fn swarm_reporter_meets_its_expectations_and_reaches_its_conditions() {
    family_meets_its_expectations_and_reaches_its_conditions("swarm-reporter.yaml");
}

#[test]
fn swarm_tunnel_meets_its_expectations_and_reaches_its_conditions() {
    family_meets_its_expectations_and_reaches_its_conditions("swarm-tunnel.yaml");
}

#[test]
fn every_fault_point_fires_in_a_seed_that_make_test_runs() {
    let mut fired: BTreeSet<Point> = BTreeSet::new();
    for file in [
        "swarm-watch.yaml",
        "swarm-reporter.yaml",
        "swarm-tunnel.yaml",
    ] {
        fired.extend(
            family_runs(file)
                .iter()
                .flat_map(|r| r.fired.iter().copied()),
        );
    }
    let never: Vec<&str> = Point::ALL
        .iter()
        .filter(|p| !fired.contains(p))
        .map(|p| p.name())
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
        for step in swarm::concretize(&family, seed).faults {
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
