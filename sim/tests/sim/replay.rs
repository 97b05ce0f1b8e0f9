//! A recorded workload trace replayed into the simulated world: its apps are created, and
//! each change happens at its recorded time divided by the speed.

use std::path::Path;

use orrery_sim::harness::runner;
use orrery_sim::report;
use orrery_sim::scenario::{self, Variant};
use orrery_system::observe::WorldEvent;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/replay")
        .join(name)
}

#[test]
fn a_recorded_trace_replays_its_changes_at_their_times_divided_by_the_speed() {
    let s = scenario::load(&fixture("replay.yaml")).unwrap();
    assert_eq!(s.workload.applications, 5, "the trace's initial apps");
    let outcome = runner::run(&s, 1, Variant::Hardened);
    assert_eq!(
        outcome.result,
        report::expected(&s, Variant::Hardened),
        "violations {:?}, harness error {:?}",
        outcome.violations,
        outcome.harness_error
    );
    let events = outcome.trace.events();
    let created = events
        .iter()
        .find(|e| matches!(e.world(), Some(WorldEvent::Created { .. })))
        .expect("the initial apps were created")
        .at_ms;
    let commits: Vec<u64> = events
        .iter()
        .filter(|e| matches!(e.world(), Some(WorldEvent::Commit { .. })))
        .map(|e| e.at_ms - created)
        .collect();
    // Revisions at 4 s, 22 s and 40 s of the recording, replayed at speed 2.
    assert_eq!(commits.len(), 3, "{commits:?}");
    for (at, recorded) in commits.iter().zip([4000, 22000, 40000]) {
        assert!(
            (recorded / 2..recorded / 2 + 100).contains(at),
            "a commit recorded at {recorded} ms replayed at {at} ms"
        );
    }
    let healths: Vec<String> = events
        .iter()
        .filter_map(|e| match e.world() {
            Some(WorldEvent::Health { health, .. }) => Some(health.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(healths, ["Progressing", "Healthy", "Degraded", "Healthy"]);
    let stopped = events
        .iter()
        .find_map(|e| match e.world() {
            Some(WorldEvent::Stopped { apps }) => Some(*apps),
            _ => None,
        })
        .expect("the workload stopped");
    assert_eq!(stopped, 5, "one app added and one deleted");
}

#[test]
fn a_missing_or_broken_trace_is_refused_naming_the_file_and_line() {
    let dir = std::env::temp_dir().join(format!("orrery-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = std::fs::read_to_string(fixture("replay.yaml")).unwrap();
    std::fs::write(dir.join("replay.yaml"), &scenario).unwrap();
    let missing = scenario::load(&dir.join("replay.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("workload.replay") && missing.contains("example.jsonl"),
        "{missing}"
    );
    let trace = std::fs::read_to_string(fixture("example.jsonl")).unwrap();
    std::fs::write(
        dir.join("example.jsonl"),
        trace.replace("\"at_ms\":9000", "\"at_ms\":100"),
    )
    .unwrap();
    let broken = scenario::load(&dir.join("replay.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        broken.contains("line 9") && broken.contains("before the previous"),
        "{broken}"
    );
    std::fs::write(dir.join("example.jsonl"), &trace).unwrap();
    std::fs::write(
        dir.join("replay.yaml"),
        scenario.replace("speed: 2", "speed: 0"),
    )
    .unwrap();
    let slow = scenario::load(&dir.join("replay.yaml"))
        .unwrap_err()
        .to_string();
    assert!(slow.contains("speed must be above 0"), "{slow}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn recorded_rollouts_and_workflows_replay_as_new_versions_and_submissions() {
    let s = scenario::load(&fixture("rollouts-workflows.yaml")).unwrap();
    let outcome = runner::run(&s, 1, Variant::Hardened);
    assert!(
        outcome.harness_error.is_none(),
        "harness error {:?}",
        outcome.harness_error
    );
    let events = outcome.trace.events();
    // The recorded new version at 5 s, whose recorded next phase was Degraded: the world's
    // analysis fails it.
    let rollout: Vec<(u64, u64, String)> = events
        .iter()
        .filter_map(|e| match e.world() {
            Some(WorldEvent::RolloutPhase {
                revision, phase, ..
            }) => Some((e.at_ms, *revision, phase.clone())),
            _ => None,
        })
        .collect();
    let second = rollout
        .iter()
        .find(|(_, revision, _)| *revision == 2)
        .unwrap_or_else(|| panic!("no second version: {rollout:?}"));
    assert!((5000..6500).contains(&second.0), "{rollout:?}");
    assert!(
        rollout
            .iter()
            .any(|(_, revision, phase)| *revision == 2 && phase == "Degraded"),
        "the second version's analysis did not fail: {rollout:?}"
    );
    // Workflows: the one running at the start succeeds about 8 s in, the one submitted at
    // 10 s fails about 16 s in.
    let ended = |name: &str| {
        events.iter().find_map(|e| match e.world() {
            Some(WorldEvent::WorkflowPhase {
                workflow, phase, ..
            }) if workflow.ends_with(name)
                && matches!(phase.as_str(), "Succeeded" | "Failed" | "Error") =>
            {
                Some((e.at_ms, phase.clone()))
            }
            _ => None,
        })
    };
    let (first_at, first) = ended("/wf-00000").expect("the first workflow ended");
    assert_eq!(first, "Succeeded");
    assert!((8000..11000).contains(&first_at), "ended at {first_at} ms");
    let (second_at, second) = ended("/wf-00001").expect("the second workflow ended");
    assert_eq!(second, "Failed");
    assert!(
        (16000..19000).contains(&second_at),
        "ended at {second_at} ms"
    );
}

#[test]
fn a_trace_with_rollouts_needs_the_rollouts_workload() {
    let dir = std::env::temp_dir().join(format!("orrery-replay-kinds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = std::fs::read_to_string(fixture("rollouts-workflows.yaml")).unwrap();
    std::fs::write(
        dir.join("rollouts-workflows.jsonl"),
        std::fs::read_to_string(fixture("rollouts-workflows.jsonl")).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("s.yaml"),
        scenario.replace("  rollouts: {retry_after: 0s, promote_after: 0s}\n", ""),
    )
    .unwrap();
    let error = scenario::load(&dir.join("s.yaml")).unwrap_err().to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        error.contains("replays Rollouts") && error.contains("workload.rollouts"),
        "{error}"
    );
}
