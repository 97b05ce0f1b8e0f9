//! The resource event reporter, unchanged, in real mode against a real kube-apiserver with
//! the fixture CRDs: Rollouts (status through the status subresource), a ReplicaSet they
//! own and Workflows are reported to the platform's events path on loopback — faithful
//! through the event bus (its own loopback port), hardened directly — and a deleted Rollout
//! ends on the platform only with hardened (the Sensor sends no event type).

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use orrery_conformance::cluster::Cluster;
use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::RealEnv;
use orrery_system::platform::assembly::{
    self as control_plane, ControlPlaneConfig, ControlPlaneState,
};
use orrery_system::platform::events::{self, Platform};
use orrery_system::runtime::assembly::{self as runtime_assembly, RuntimeConfig};
use orrery_system::runtime::resource_reporter::{self, Kind};
use serde_json::json;

const TOKEN: &str = "conformance-resources-token";
const WITHIN: Duration = Duration::from_secs(90);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Polls `check` every 250 ms until it holds, or fails with its last reason.
async fn eventually(what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        match check() {
            Ok(()) => return,
            Err(reason) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {WITHIN:?}: {reason}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn suite(variant: Variant) {
    let cluster = Cluster::real().await.unwrap_or_else(|e| panic!("{e}"));
    let ns = format!(
        "orrery-resources-{}-{}",
        std::process::id(),
        variant.as_str()
    );
    cluster.prepare(&ns).await.unwrap_or_else(|e| panic!("{e}"));
    let config = kube::Config::infer().await.expect("kubeconfig");

    // The platform's events path and, for faithful, the event bus, on loopback.
    let (platform_port, bus_port) = (free_port(), free_port());
    let platform = Platform::new(events::Config {
        tokens: [(TOKEN.to_string(), "acme".to_string())]
            .into_iter()
            .collect(),
        bus_capacity: 1000,
        durability: Default::default(),
        idempotency_keys: false,
    });
    let state = ControlPlaneState {
        events: Some(platform.clone()),
        ..Default::default()
    };
    let events_only = ControlPlaneConfig {
        events: Some(format!("127.0.0.1:{platform_port}")),
        ..Default::default()
    };
    let mut tasks = vec![tokio::spawn(async move {
        let env = Arc::new(RealEnv::new("platform"));
        drop(control_plane::run(env, events_only, state, std::future::pending()).await)
    })];
    let mut reporter = resource_reporter::Config::new(
        variant,
        KubeTarget::real(config, &ns),
        &format!("127.0.0.1:{platform_port}"),
        TOKEN,
    );
    reporter.bus_addr = format!("127.0.0.1:{bus_port}");
    reporter.workflow_namespace = Some(ns.clone());
    let runtime = RuntimeConfig {
        resource_reporter: Some(reporter),
        event_bus: Some(format!("127.0.0.1:{bus_port}")),
        ..Default::default()
    };
    tasks.push(tokio::spawn(async move {
        let env = Arc::new(RealEnv::new("resources"));
        drop(runtime_assembly::run(env, runtime, std::future::pending()).await)
    }));

    // Objects on the real server, from the fixture CRDs and the built-in ReplicaSet.
    let client = cluster.client();
    let rollouts: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &Kind::Rollout.resource());
    let sets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &Kind::ReplicaSet.resource());
    let workflows: Api<DynamicObject> =
        Api::namespaced_with(client, &ns, &Kind::Workflow.resource());
    let pp = PostParams::default();
    let mut web = DynamicObject::new("web", &Kind::Rollout.resource()).within(&ns);
    web.data = json!({"spec": {
        "replicas": 4,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "web:v2"}]}},
        "strategy": {"canary": {"steps": [{"setWeight": 25}, {"pause": {}}]}},
    }});
    let web = rollouts.create(&pp, &web).await.expect("create a Rollout");
    rollouts
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Paused", "currentStepIndex": 1, "currentPodHash": "7d9f"}})),
        )
        .await
        .expect("the Rollout's status subresource");
    let mut rs = DynamicObject::new("web-7d9f", &Kind::ReplicaSet.resource()).within(&ns);
    rs.metadata.labels = Some(
        [
            ("app".to_string(), "web".to_string()),
            ("rollouts-pod-template-hash".to_string(), "7d9f".to_string()),
        ]
        .into_iter()
        .collect(),
    );
    rs.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "argoproj.io/v1alpha1".into(),
            kind: "Rollout".into(),
            name: "web".into(),
            uid: web.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            ..Default::default()
        },
    ]);
    rs.data = json!({"spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "web", "rollouts-pod-template-hash": "7d9f"}},
        "template": {"metadata": {"labels": {"app": "web", "rollouts-pod-template-hash": "7d9f"}}, "spec": {"containers": [{"name": "app", "image": "web:v2"}]}},
    }});
    sets.create(&pp, &rs).await.expect("create a ReplicaSet");
    let mut build = DynamicObject::new("build", &Kind::Workflow.resource()).within(&ns);
    build.data = json!({"spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "alpine"}}]}, "status": {"phase": "Succeeded", "progress": "1/1"}});
    workflows
        .create(&pp, &build)
        .await
        .expect("create a Workflow");

    let key = |name: &str| format!("acme/{ns}/{name}");
    eventually(
        "the platform shows the Rollout, its ReplicaSet and the Workflow",
        || {
            let shown = platform.rollouts();
            let web = shown.get(&key("web")).ok_or("no Rollout yet")?;
            if (web.fields.phase.as_str(), web.fields.step) != ("Paused", Some(1)) {
                return Err(format!(
                    "Rollout shows {:?}/{:?}",
                    web.fields.phase, web.fields.step
                ));
            }
            if web.replica_sets.get("7d9f").map(|rs| rs.replicas) != Some(1) {
                return Err(format!("ReplicaSets {:?}", web.replica_sets));
            }
            let flows = platform.workflows();
            match flows.get(&key("build")).map(|w| w.fields.phase.as_str()) {
                Some("Succeeded") => Ok(()),
                other => Err(format!("Workflow shows {other:?}")),
            }
        },
    )
    .await;

    rollouts
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the Rollout");
    match variant {
        Variant::Hardened => {
            eventually(
                "hardened ends the deleted Rollout on the platform",
                || match platform.rollouts().get(&key("web")).map(|w| w.deleted) {
                    Some(true) => Ok(()),
                    other => Err(format!("deleted: {other:?}")),
                },
            )
            .await;
            // A finished Workflow carrying the reporter's finalizer (as the runtime's Argo
            // Workflows writes it) and then deleted: the real server only marks it; the
            // reporter delivers that state and lets go, and the server deletes it.
            let mut held = DynamicObject::new("held", &Kind::Workflow.resource()).within(&ns);
            held.metadata.finalizers = Some(vec![resource_reporter::WORKFLOW_FINALIZER.into()]);
            held.data = json!({"spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "alpine"}}]}, "status": {"phase": "Failed", "progress": "0/1"}});
            workflows
                .create(&pp, &held)
                .await
                .expect("create a held Workflow");
            workflows
                .delete("held", &DeleteParams::default())
                .await
                .expect("delete the held Workflow");
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while workflows.get_opt("held").await.expect("get held").is_some() {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the reporter never removed its finalizer from the deleted Workflow"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let shown = platform.workflows();
            let shown = shown
                .get(&key("held"))
                .expect("the platform got the held Workflow");
            assert_eq!(
                shown.fields.phase, "Failed",
                "its final phase, delivered first"
            );
        }
        Variant::Faithful => {
            // The informer's DELETE reaches the Sensor, which sends the last state without
            // a type: the platform keeps showing the Rollout (the known gap).
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert_eq!(
                platform.rollouts().get(&key("web")).map(|w| w.deleted),
                Some(false)
            );
        }
    }
    for task in tasks {
        task.abort();
    }
    if let Err(e) = cluster.cleanup(&ns).await {
        eprintln!("warning: cleanup of {ns}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_faithful_resource_reporter_reports_rollouts_and_workflows_from_a_real_api_server() {
    suite(Variant::Faithful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_hardened_resource_reporter_reports_rollouts_and_workflows_from_a_real_api_server() {
    suite(Variant::Hardened).await;
}
