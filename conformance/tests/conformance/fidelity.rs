//! The differential API fidelity suite.

use orrery_conformance::cluster::Cluster;
use orrery_conformance::compare::{compare, load_deviations, Verdict};
use orrery_conformance::fidelity::{failures, names, normalised, snapshot_dir};
use orrery_conformance::library::scripts;
use orrery_conformance::normalise::render;
use orrery_conformance::repo_root;
use orrery_conformance::report::{self, Row};

/// The Kubernetes version pinned in `conformance/kube/go.mod` (what the snapshots record).
fn pinned_version() -> String {
    let gomod =
        std::fs::read_to_string(repo_root().join("conformance/kube/go.mod")).unwrap_or_default();
    gomod
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("k8s.io/kubernetes ")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Live: every script against the cluster `KUBECONFIG` points to and a fresh simulated
/// server; compares them, writes `reports/conformance.md`, and checks the real transcripts
/// against the recorded snapshots (insta).
#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn live_real_and_simulated_api_servers_answer_alike() {
    let scripts = scripts();
    let deviations = load_deviations(&names(&scripts)).unwrap_or_else(|e| panic!("{e}"));
    let real = Cluster::real().await.unwrap_or_else(|e| panic!("{e}"));
    let simulated = Cluster::simulated().await.expect("simulated API server");
    let version = real.version().await.unwrap_or_else(|e| panic!("{e}"));
    let run_id = std::process::id();
    let mut rows = Vec::new();
    let mut real_texts = Vec::new();
    for (index, script) in scripts.iter().enumerate() {
        let namespace = format!("orrery-fidelity-{run_id}-{index}");
        let real_steps = normalised(&real, script, &namespace).await;
        let simulated_steps = normalised(&simulated, script, &namespace).await;
        let verdict = compare(script.name, &real_steps, &simulated_steps, &deviations);
        println!("fidelity: {:<40} {}", script.name, verdict.label());
        rows.push(Row { script, verdict });
        real_texts.push(render(&real_steps));
    }
    let identical = rows
        .iter()
        .filter(|r| r.verdict == Verdict::Identical)
        .count();
    let known = rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::KnownDeviation { .. }))
        .count();
    println!("fidelity: Kubernetes {version}: {} scripts compared, {identical} identical, {known} with known deviations, {} failing", rows.len(), rows.len() - identical - known);
    for deviation in &deviations {
        println!(
            "fidelity: known deviation {} {:?}: {}",
            deviation.script,
            deviation.steps,
            deviation.reason.trim()
        );
    }
    let report = report::render(&version, &rows, &deviations);
    report::write_section("api-fidelity", &report).expect("write reports/conformance.md");
    let failing = failures(&rows);
    if !failing.is_empty() {
        eprintln!("the simulated API server differs from kube-apiserver {version}:{failing}");
    }
    // The real transcripts first: a changed real server (a version bump) shows as a snapshot
    // diff to review (`cargo insta review`), and re-recording keeps the offline test current.
    // Snapshots are recorded against the pinned version; another cluster version (kind's
    // node image, a user's cluster) is still compared live above, but not to the snapshots.
    let pinned = pinned_version();
    if version != pinned {
        println!("fidelity: snapshots were recorded against {pinned}; this cluster runs {version}: snapshot check skipped, live comparison applied");
        assert!(
            failing.is_empty(),
            "the simulated API server differs from kube-apiserver {version} (see above)"
        );
        return;
    }
    for (script, text) in scripts.iter().zip(real_texts) {
        insta::with_settings!({snapshot_path => snapshot_dir(), prepend_module_to_snapshot => false, omit_expression => true}, {
            insta::assert_snapshot!(script.name, text);
        });
    }
    assert!(
        failing.is_empty(),
        "the simulated API server differs from kube-apiserver {version} (see above)"
    );
}
