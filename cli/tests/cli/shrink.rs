//! `orrery shrink`: a failing run becomes a smaller scenario that still breaks the same
//! invariant, written next to the file it came from; a run that breaks nothing is refused.

use std::path::Path;
use std::process::Command;

use orrery_sim::harness::runner;
use orrery_sim::scenario::{self, Outcome, Variant};

fn scenario_path(name: &str) -> String {
    format!("{}/../scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_shrunk_tunnel_drop_still_runs_a_write_twice_with_fewer_faults() {
    let original = scenario::load(Path::new(&scenario_path("tunnel-drop.yaml"))).unwrap();
    let mut heard = 0;
    let shrunk = orrery_sim::explore::shrink::shrink(
        &original,
        1,
        Variant::Faithful,
        Some("executed_at_most_once"),
        &mut |_| heard += 1,
    )
    .unwrap();
    assert_eq!(shrunk.invariant, "executed_at_most_once");
    assert!(heard > 0, "progress was reported");
    let min = &shrunk.scenario;
    assert!(
        min.faults.len() < original.faults.len(),
        "{} faults left of {}",
        min.faults.len(),
        original.faults.len()
    );
    assert!(
        shrunk
            .changes
            .iter()
            .any(|c| c.starts_with("fault steps 12 → ")),
        "{:?}",
        shrunk.changes
    );
    assert_eq!(min.seeds, vec![1]);
    assert_eq!(min.name, "tunnel-drop-min");
    // Every invariant stays checked, and the file declares what each variant gives.
    assert_eq!(min.invariants.len(), original.invariants.len());
    assert_eq!(
        min.expect.get(&Variant::Faithful),
        Some(&Outcome::SafetyViolation)
    );
    assert_eq!(min.expect.get(&Variant::Hardened), Some(&Outcome::Pass));
    let again = runner::run(min, 1, Variant::Faithful);
    assert_eq!(again.result, Outcome::SafetyViolation);
    assert_eq!(again.failure().as_deref(), Some("executed_at_most_once"));
    assert_eq!(runner::run(min, 1, Variant::Hardened).result, Outcome::Pass);
}

/// As a new user runs it: no `--invariant`. The run breaks `tunnel_recovers` (liveness) before
/// `executed_at_most_once` (safety); its result, and the scenario's declared verdict, is the
/// safety violation, so that is the failure kept — and the file replays it as it declares.
#[test]
fn orrery_shrink_writes_a_min_file_next_to_the_scenario_that_replays_the_failure() {
    let dir = std::env::temp_dir().join(format!("orrery-shrink-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("drop.yaml");
    std::fs::copy(scenario_path("tunnel-drop.yaml"), &file).unwrap();
    let orrery = env!("CARGO_BIN_EXE_orrery");
    let output = Command::new(orrery)
        .args([
            "shrink",
            file.to_str().unwrap(),
            "--seed",
            "1",
            "--variant",
            "faithful",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("still breaks executed_at_most_once"),
        "{stdout}"
    );
    assert!(stdout.contains("fault steps 12 → "), "{stdout}");
    let min = dir.join("drop.min.yaml");
    let text = std::fs::read_to_string(&min).unwrap();
    assert!(text.starts_with("# Shrunk by: orrery shrink"), "{text}");
    let replay = Command::new(orrery)
        .args(["run", min.to_str().unwrap(), "--variant", "faithful"])
        .output()
        .unwrap();
    let line: serde_json::Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(line["violations"][0], "executed_at_most_once", "{line}");
    assert_eq!(
        line["expected"], true,
        "the declared faithful verdict still holds: {line}"
    );
    // A seed that breaks nothing cannot be shrunk: a clear error, exit 2.
    let refused = Command::new(orrery)
        .args([
            "shrink",
            file.to_str().unwrap(),
            "--seed",
            "1",
            "--variant",
            "hardened",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("breaks no invariant"), "{stderr}");
}

/// A hardened failure of a swarm family shrinks too. swarm-resources over an Argo Workflows
/// the runtime does not configure (`runtime_defaults: false`: no Workflow carries hardened's
/// finalizer) breaks `workflow_phases_reported` in hardened at seed 4: a Workflow finished
/// and was deleted while the resource reporter was down, and nothing held it for the
/// reporter (the limit of that install, on the reporter's page). The shrink keeps that failure — safety violation, that invariant first — in a
/// world with one fault, leaves the calm phase alone (faithful is `any`, so no variant
/// witnesses that a shorter one still lets a run converge), and the file replays as it
/// declares. Candidates run as two child processes at a time.
#[test]
fn a_hardened_swarm_failure_shrinks_to_one_fault_and_replays_as_declared() {
    let dir = std::env::temp_dir().join(format!("orrery-shrink-swarm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let family = std::fs::read_to_string(scenario_path("swarm-resources.yaml")).unwrap();
    // The family over an existing Argo Workflows the runtime does not configure (so no
    // Workflow carries hardened's finalizer: its limit in that install), with a smaller
    // workload (4 Rollouts, 1 Application) so the 20-odd candidate runs stay cheap: seed 4
    // breaks workflow_phases_reported in hardened either way.
    let mut short_ttl = family.clone();
    for (from, to) in [
        (
            "ttl_seconds: 30}",
            "ttl_seconds: 30, runtime_defaults: false}",
        ),
        ("    count: 40\n", "    count: 4\n"),
        (
            "workload:\n",
            "workload:\n  applications: 1\n  repositories: 1\n",
        ),
    ] {
        assert_eq!(short_ttl.matches(from).count(), 1, "{from:?} in the family");
        short_ttl = short_ttl.replace(from, to);
    }
    let file = dir.join("resources-ttl30.yaml");
    std::fs::write(&file, short_ttl).unwrap();
    let orrery = env!("CARGO_BIN_EXE_orrery");
    let output = Command::new(orrery)
        .args([
            "shrink",
            file.to_str().unwrap(),
            "--seed",
            "4",
            "--jobs",
            "2",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("still breaks workflow_phases_reported"),
        "{stdout}"
    );
    let min_path = dir.join("resources-ttl30.min.yaml");
    let min = scenario::load(&min_path).unwrap();
    assert_eq!(min.faults.len(), 1, "{:?}", min.faults);
    assert_eq!(
        min.calm,
        std::time::Duration::from_secs(240),
        "calm left alone"
    );
    let rollouts = min.workload.rollouts.as_ref().map(|r| r.count);
    assert!(
        rollouts.is_some_and(|n| n < 4),
        "the Rollouts count shrinks: {rollouts:?}\n{stdout}"
    );
    assert_eq!(
        min.expect.get(&Variant::Hardened),
        Some(&Outcome::SafetyViolation)
    );
    let replay = Command::new(orrery)
        .args(["run", min_path.to_str().unwrap(), "--variant", "hardened"])
        .output()
        .unwrap();
    let line: serde_json::Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(line["failure"], "workflow_phases_reported", "{line}");
    assert_eq!(line["expected"], true, "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
