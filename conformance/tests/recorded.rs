//! The simulated API server against the real kube-apiserver's transcripts recorded by the last
//! live run (`conformance/snapshots/`): no cluster needed, so `make test` runs it, and a change
//! that breaks fidelity fails there. (The live suites are the `conformance` test target, run by
//! `make conformance`.)

use orrery_conformance::cluster::Cluster;
use orrery_conformance::compare::{compare, load_deviations};
use orrery_conformance::fidelity::{failures, names, normalised, recorded};
use orrery_conformance::library::scripts;
use orrery_conformance::report::Row;

/// Every script on the simulated server matches its recorded real transcript (or a listed
/// deviation).
#[tokio::test(flavor = "current_thread")]
async fn the_simulated_api_server_matches_the_recorded_real_transcripts() {
    let scripts = scripts();
    let deviations = load_deviations(&names(&scripts)).unwrap_or_else(|e| panic!("{e}"));
    let simulated = Cluster::simulated().await.expect("simulated API server");
    let mut rows = Vec::new();
    for (index, script) in scripts.iter().enumerate() {
        let recorded = recorded(script).unwrap_or_else(|| {
            panic!("no recorded real transcript for {}: run `INSTA_UPDATE=always make conformance-apiserver`", script.name)
        });
        let steps = normalised(&simulated, script, &format!("orrery-fidelity-{index}")).await;
        rows.push(Row {
            script,
            verdict: compare(script.name, &recorded, &steps, &deviations),
        });
    }
    let failing = failures(&rows);
    assert!(
        failing.is_empty(),
        "the simulated API server differs from the recorded kube-apiserver:{failing}"
    );
}
