//! Every regression scenario the seed farm (or a person running `orrery shrink`) filed in
//! `scenarios/regressions/` still does what it declares, at every listed seed: a failure
//! fixed shows up as an unexpected pass, a known limit stays visible.

use std::path::Path;

use orrery_sim::harness::runner;
use orrery_sim::scenario;

#[test]
fn every_regression_scenario_replays_as_it_declares() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/regressions");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the regression swarm-resources-4 is filed"
    );
    let mut wrong = Vec::new();
    for file in &files {
        let scenario = scenario::load(file).unwrap();
        for (variant, expected) in &scenario.expect {
            for seed in &scenario.seeds {
                let run = runner::run(&scenario, *seed, *variant);
                if !run.result.meets(*expected) {
                    wrong.push(format!(
                        "{} seed {seed} {}: {} (declared {})",
                        file.display(),
                        variant.as_str(),
                        run.result.as_str(),
                        expected.as_str()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
