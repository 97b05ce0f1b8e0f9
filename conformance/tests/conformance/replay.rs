//! `orrery record` against a real kube-apiserver, and the trace replayed in the simulator:
//! the changes made to real Applications while recording come back as the same changes,
//! at the same relative times, in a simulated world. Rollouts and Workflows changed while
//! recording are recorded as their kinds' changes (their replay is `sim/tests/sim/replay.rs`'s,
//! from a trace of the same shape).

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use orrery_sim::harness::runner;
use orrery_sim::scenario::trace::{Change, Kind, Trace};
use orrery_sim::scenario::{self, Variant};
use orrery_sim::world::argocd::application_resource;
use orrery_system::observe::WorldEvent;

use crate::support::prepared;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn changes_recorded_on_a_real_cluster_replay_in_the_simulator() {
    let (cluster, namespace) = prepared(format!("orrery-record-{}", std::process::id())).await;
    let apps: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &application_resource());
    let app = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name},
            "spec": {"project": "default"},
            "status": {"sync": {"status": "Synced", "revision": "r1"}, "health": {"status": "Healthy"}},
        }))
        .unwrap()
    };
    for name in ["a", "b"] {
        apps.create(&PostParams::default(), &app(name))
            .await
            .unwrap();
    }
    // A Rollout (status through its subresource) and a Workflow (none) that exist at the start.
    let rollouts: Api<DynamicObject> = Api::namespaced_with(
        cluster.client(),
        &namespace,
        &orrery_sim::world::rollouts::rollout_resource(),
    );
    let workflows: Api<DynamicObject> = Api::namespaced_with(
        cluster.client(),
        &namespace,
        &orrery_sim::world::workflows::workflow_resource(),
    );
    let rollout_status = |hash: &str, phase: &str| {
        Patch::Merge(json!({"status": {"currentPodHash": hash, "phase": phase}}))
    };
    rollouts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                "metadata": {"name": "web"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "web:1"}]}}},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    rollouts
        .patch_status(
            "web",
            &PatchParams::default(),
            &rollout_status("h1", "Healthy"),
        )
        .await
        .unwrap();
    workflows
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": {"name": "build"},
                "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "ci:1"}}]},
                "status": {"phase": "Running"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let (listed, ready) = tokio::sync::oneshot::channel();
    let recording = tokio::spawn(orrery_cli::commands::record::recorder::record(
        cluster.client(),
        Duration::from_secs(8),
        false,
        Some(listed),
    ));
    ready
        .await
        .expect("the recorder listed the apps that exist at the start");
    let status = |revision: &str, health: &str| {
        Patch::Merge(
            json!({"status": {"sync": {"revision": revision}, "health": {"status": health}}}),
        )
    };
    let pause = || tokio::time::sleep(Duration::from_millis(1500));
    pause().await;
    apps.patch("a", &PatchParams::default(), &status("r2", "Healthy"))
        .await
        .unwrap();
    pause().await;
    apps.patch("b", &PatchParams::default(), &status("r1", "Degraded"))
        .await
        .unwrap();
    apps.create(&PostParams::default(), &app("c"))
        .await
        .unwrap();
    rollouts
        .patch_status(
            "web",
            &PatchParams::default(),
            &rollout_status("h2", "Progressing"),
        )
        .await
        .unwrap();
    workflows
        .patch(
            "build",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    pause().await;
    apps.delete("b", &DeleteParams::default()).await.unwrap();
    workflows
        .delete("build", &DeleteParams::default())
        .await
        .unwrap();
    let recorded = recording.await.unwrap().expect("the recording ran");
    let _ = cluster.cleanup(&namespace).await;

    // Only this test's namespace (others' apps may be on the cluster too).
    let ours =
        |r: &&orrery_sim::scenario::trace::Record| r.app.starts_with(&format!("{namespace}/"));
    let trace = Trace {
        header: recorded.header.clone(),
        records: recorded.records.iter().filter(ours).cloned().collect(),
    };
    let text = trace.to_text();
    let all = Trace::parse(&text).expect("a recorded trace reads back");
    let of = |kind: Kind| -> Vec<(String, Change)> {
        all.of(kind)
            .map(|r| {
                (
                    r.app.rsplit('/').next().unwrap().to_string(),
                    r.change.clone(),
                )
            })
            .collect()
    };
    let phase = |p: &str| Change::Phase { phase: p.into() };
    assert_eq!(
        of(Kind::Rollout),
        [
            ("web".into(), Change::Added),
            ("web".into(), phase("Healthy")),
            (
                "web".into(),
                Change::Revision {
                    revision: "h2".into()
                }
            ),
            ("web".into(), phase("Progressing")),
        ],
        "{text}"
    );
    assert_eq!(
        of(Kind::Workflow),
        [
            ("build".into(), Change::Added),
            ("build".into(), phase("Running")),
            ("build".into(), phase("Succeeded")),
            ("build".into(), Change::Deleted),
        ],
        "{text}"
    );
    // The apps alone drive the Argo CD world below.
    let trace = Trace {
        header: all.header.clone(),
        records: all.of(Kind::Application).cloned().collect(),
    };
    let text = trace.to_text();
    let changes: Vec<(String, Change)> = trace
        .records
        .iter()
        .map(|r| {
            (
                r.app.rsplit('/').next().unwrap().to_string(),
                r.change.clone(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("a".into(), Change::Added),
            ("b".into(), Change::Added),
            (
                "a".into(),
                Change::Revision {
                    revision: "r2".into()
                }
            ),
            (
                "b".into(),
                Change::Health {
                    health: "Degraded".into()
                }
            ),
            ("c".into(), Change::Added),
            ("b".into(), Change::Deleted),
        ],
        "{text}"
    );
    let revision_at = trace.records[2].at_ms;
    assert!(
        (1000..4000).contains(&revision_at),
        "recorded at {revision_at} ms"
    );

    // The same trace drives the simulated world, twice as fast.
    let dir = std::env::temp_dir().join(format!("orrery-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("example.jsonl"), &text).unwrap();
    let yaml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/replay/replay.yaml"),
    )
    .unwrap();
    std::fs::write(dir.join("replay.yaml"), yaml).unwrap();
    let s =
        scenario::load(&dir.join("replay.yaml")).expect("the scenario loads the recorded trace");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(s.workload.applications, 2);
    let outcome = tokio::task::spawn_blocking(move || runner::run(&s, 1, Variant::Hardened))
        .await
        .unwrap();
    assert!(
        outcome.violations.is_empty(),
        "{:?} {:?}",
        outcome.violations,
        outcome.harness_error
    );
    let events = outcome.trace.events();
    let created = events
        .iter()
        .find(|e| matches!(e.world(), Some(WorldEvent::Created { .. })))
        .expect("the recorded apps were created")
        .at_ms;
    let commits: Vec<u64> = events
        .iter()
        .filter(|e| matches!(e.world(), Some(WorldEvent::Commit { .. })))
        .map(|e| e.at_ms - created)
        .collect();
    assert_eq!(commits.len(), 1, "one recorded revision: {commits:?}");
    assert!(
        (revision_at / 2..revision_at / 2 + 100).contains(&commits[0]),
        "recorded at {revision_at} ms, replayed at {} ms",
        commits[0]
    );
    assert!(events.iter().any(
        |e| matches!(e.world(), Some(WorldEvent::Health { health, .. }) if health == "Degraded")
    ));
    let stopped = events
        .iter()
        .find_map(|e| match e.world() {
            Some(WorldEvent::Stopped { apps }) => Some(*apps),
            _ => None,
        })
        .expect("the workload stopped");
    assert_eq!(stopped, 2, "c added, b deleted");

    // The Rollout and the Workflow drive a world with Argo Rollouts and Argo Workflows.
    let kinds = Trace {
        header: all.header.clone(),
        records: all
            .records
            .iter()
            .filter(|r| r.kind != Kind::Application)
            .cloned()
            .collect(),
    };
    let dir = std::env::temp_dir().join(format!("orrery-record-kinds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rollouts-workflows.jsonl"), kinds.to_text()).unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/replay/rollouts-workflows.yaml");
    std::fs::write(
        dir.join("replay.yaml"),
        std::fs::read_to_string(fixture).unwrap(),
    )
    .unwrap();
    let s = scenario::load(&dir.join("replay.yaml"))
        .expect("the scenario loads the Rollout and Workflow trace");
    let _ = std::fs::remove_dir_all(&dir);
    let outcome = tokio::task::spawn_blocking(move || runner::run(&s, 1, Variant::Hardened))
        .await
        .unwrap();
    assert!(
        outcome.harness_error.is_none(),
        "{:?}",
        outcome.harness_error
    );
    let events = outcome.trace.events();
    assert!(
        events.iter().any(|e| matches!(
            e.world(),
            Some(WorldEvent::RolloutPhase { revision: 2, .. })
        )),
        "the recorded new pod template was not replayed as a second version"
    );
    // Submitted and run (it was deleted about 1.5 s after it succeeded, which the world's
    // controller, a tick a second, may not reach first: the fixture test times that).
    let phases: Vec<String> = events
        .iter()
        .filter_map(|e| match e.world() {
            Some(WorldEvent::WorkflowPhase {
                workflow, phase, ..
            }) if workflow.ends_with("/wf-00000") => Some(phase.clone()),
            _ => None,
        })
        .collect();
    assert!(
        phases.iter().any(|p| p == "Running"),
        "the recorded Workflow was not replayed: {phases:?}"
    );
    eprintln!(
        "record → replay: {} app changes and {} Rollout and Workflow changes recorded on the real server replayed in the simulator",
        trace.records.len(),
        kinds.records.len()
    );
}
