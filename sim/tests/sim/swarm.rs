//! Swarm families: each seed draws its own fault schedule and knobs (and switches whole
//! fault kinds off), deterministically; the plain scenario a seed ran can be printed and
//! reproduces the run's trace hash; bad `swarm:` sections are refused where they are wrong.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

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
        assert!((5..=300).contains(&window.as_secs()), "{window:?}");
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
fn a_scripted_scenario_is_its_own_concrete_scenario() {
    let scripted = scenario::load(Path::new(&scenario_path("watch-convergence.yaml"))).unwrap();
    assert_eq!(swarm::concretize(&scripted, 7), scripted);
}

#[test]
fn swarm_watch_meets_its_expectation_for_every_listed_seed_and_variant() {
    let family = scenario::load(Path::new(&scenario_path("swarm-watch.yaml"))).unwrap();
    assert!(family.seeds.len() >= 10);
    for seed in &family.seeds {
        for variant in [Variant::Faithful, Variant::Hardened] {
            let outcome = runner::run(&family, *seed, variant);
            assert!(
                outcome.result.meets(report::expected(&family, variant)),
                "seed {seed} {variant:?}: {:?} {:?}",
                outcome.violations,
                outcome.harness_error
            );
        }
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
