//! The simulated Argo Workflows controller, unchanged, in real mode against a real
//! kube-apiserver with the fixture CRD (no status subresource: status and labels are
//! merge-patched on the object; TTL garbage collection deletes it).

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use orrery_conformance::cluster::Cluster;
use orrery_sim::world::workflows::{self, operate, workflow_resource, Job, Jobs};
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::{RealEnv, SharedEnv};
use serde_json::{json, Value};

const WITHIN: Duration = Duration::from_secs(90);

fn workflow(name: &str, namespace: &str, extra: Value) -> DynamicObject {
    let job = json!({"container": {"image": "alpine", "command": ["true"]}});
    workflows::sequential(name, namespace, &["build", "test"], job, extra)
}

/// Waits until workflow `name` is in `phase`, returning it.
async fn until(api: &Api<DynamicObject>, name: &str, phase: &str) -> DynamicObject {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let object = api.get(name).await.expect("get the workflow");
        if object.data["status"]["phase"] == phase {
            return object;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: not {phase} within {WITHIN:?}: {}",
            object.data["status"]
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_workflows_stand_in_runs_fails_stops_and_collects_workflows_on_a_real_api_server() {
    let cluster = Cluster::real().await.unwrap_or_else(|e| panic!("{e}"));
    let namespace = format!("orrery-workflows-{}", std::process::id());
    cluster
        .prepare(&namespace)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let config = kube::Config::infer().await.expect("kubeconfig");
    let jobs = Jobs::default();
    let quick = Job {
        phase: "Succeeded",
        seconds: 1,
    };
    for name in ["ok", "broken"] {
        jobs.set(
            &format!("{namespace}/{name}"),
            &format!("{name}[0].build"),
            vec![quick],
        );
    }
    jobs.set(&format!("{namespace}/ok"), "ok[1].test", vec![quick]);
    jobs.set(
        &format!("{namespace}/broken"),
        "broken[1].test",
        vec![Job {
            phase: "Failed",
            seconds: 1,
        }],
    );
    jobs.set(
        &format!("{namespace}/long"),
        "long[0].build",
        vec![Job {
            phase: "Succeeded",
            seconds: 600,
        }],
    );
    let env: SharedEnv = Arc::new(RealEnv::new("workflows"));
    let controller = tokio::spawn(workflows::run(
        env,
        KubeTarget::real(config, &namespace),
        jobs,
        Vec::new(),
    ));
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &workflow_resource());
    let pp = PostParams::default();
    for (name, extra) in [
        ("ok", json!({"ttlStrategy": {"secondsAfterSuccess": 3}})),
        ("broken", json!({})),
        ("long", json!({})),
    ] {
        api.create(&pp, &workflow(name, &namespace, extra))
            .await
            .expect("create a Workflow (fixture CRD)");
    }
    let long = until(&api, "long", "Running").await;
    assert_eq!(
        long.metadata
            .labels
            .unwrap_or_default()
            .get(operate::PHASE_LABEL)
            .map(String::as_str),
        Some("Running")
    );
    api.patch(
        "long",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"shutdown": "Terminate"}})),
    )
    .await
    .expect("terminate");
    let broken = until(&api, "broken", "Failed").await;
    let test = operate::node_id("broken", "broken[1].test");
    assert_eq!(
        broken.data["status"]["message"],
        format!("child '{test}' failed")
    );
    assert!(
        broken.metadata.generation.unwrap_or(0) > 1,
        "no status subresource: status writes bump the generation on a real server too"
    );
    let long = until(&api, "long", "Failed").await;
    assert_eq!(
        long.data["status"]["message"],
        "Stopped with strategy 'Terminate'"
    );
    // `ok` succeeds, then its TTL deletes it.
    let deadline = tokio::time::Instant::now() + WITHIN;
    while api.get_opt("ok").await.expect("get ok").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "ok was not collected"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    controller.abort();
    if let Err(e) = cluster.cleanup(&namespace).await {
        eprintln!("warning: cleanup of {namespace}: {e}");
    }
}
