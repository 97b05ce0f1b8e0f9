//! The differential fidelity suite's shared steps: a script run on a cluster and normalised,
//! the recorded real transcripts, and how failures are told. Used by the live suite (`make
//! conformance`) and by the recorded check that `make test` runs without a cluster.

use crate::cluster::Cluster;
use crate::compare::Verdict;
use crate::normalise::{normalise, parse, NormalisedStep};
use crate::repo_root;
use crate::report::Row;
use crate::script::{run, Script};

/// Where the recorded real transcripts are (insta snapshots).
pub fn snapshot_dir() -> std::path::PathBuf {
    repo_root().join("conformance/snapshots")
}

/// The recorded real transcript of `script` (insta's `.snap` file without its header).
pub fn recorded(script: &Script) -> Option<Vec<NormalisedStep>> {
    let text =
        std::fs::read_to_string(snapshot_dir().join(format!("{}.snap", script.name))).ok()?;
    let body = text.splitn(3, "---\n").nth(2)?;
    Some(parse(body))
}

/// `script` run on `cluster` in `namespace` (prepared and cleaned up), normalised.
pub async fn normalised(
    cluster: &Cluster,
    script: &Script,
    namespace: &str,
) -> Vec<NormalisedStep> {
    cluster
        .prepare(namespace)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", script.name));
    let transcript = run(cluster, script, namespace)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    if let Err(e) = cluster.cleanup(namespace).await {
        eprintln!("warning: {}: cleanup: {e}", script.name);
    }
    normalise(&transcript, script)
}

/// The names of `scripts`.
pub fn names(scripts: &[Script]) -> Vec<&'static str> {
    scripts.iter().map(|s| s.name).collect()
}

/// What failed among `rows`, told step by step.
pub fn failures(rows: &[Row<'_>]) -> String {
    let mut out = String::new();
    for row in rows.iter().filter(|r| !r.verdict.ok()) {
        out.push_str(&format!(
            "\n{} — {}\n",
            row.script.name,
            row.verdict.label()
        ));
        match &row.verdict {
            Verdict::Different { diffs } => diffs
                .iter()
                .for_each(|(step, diff)| out.push_str(&format!(" step {step}:\n{diff}"))),
            Verdict::StaleDeviation { steps } => out.push_str(&format!(
                " listed steps {steps:?} now match: remove them from conformance/deviations.yaml\n"
            )),
            _ => {}
        }
    }
    out
}
