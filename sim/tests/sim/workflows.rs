//! The simulated Argo Workflows controller through the simulated API server: a workflow
//! whose step fails, one terminated by `spec.shutdown` (what the app-proxy writes), and
//! one deleted by its TTL — read back as a client sees them.

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use orrery_sim::env::SimEnv;
use orrery_sim::world::apiserver::Knobs;
use orrery_sim::world::workflows::{self, operate, workflow_resource, Job, Jobs};
use orrery_system::env::kube::KubeTarget;
use serde_json::{json, Value};

use crate::support::*;

fn workflow(name: &str, namespace: &str, extra: Value) -> DynamicObject {
    let job = json!({"container": {"image": "alpine", "command": ["true"]}});
    workflows::sequential(name, namespace, &["build", "test"], job, extra)
}

#[test]
fn workflows_succeed_fail_stop_and_are_collected() {
    let mut w = world(Knobs::default());
    let jobs = Jobs::default();
    jobs.set(
        "ci/broken",
        "broken[1].test",
        vec![Job {
            phase: "Failed",
            seconds: 2,
        }],
    );
    jobs.set(
        "ci/long",
        "long[0].build",
        vec![Job {
            phase: "Succeeded",
            seconds: 600,
        }],
    );
    let (trace, host_jobs) = (w.trace.clone(), jobs.clone());
    w.sim.host("workflows", move || {
        let env = SimEnv::shared("workflows", SEED, trace.clone());
        let run = workflows::run(
            env,
            KubeTarget::new("apiserver:6443"),
            host_jobs.clone(),
            Vec::new(),
        );
        async move {
            run.await;
            Ok(())
        }
    });
    let trace = w.trace.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(30));
        let api: Api<DynamicObject> = Api::namespaced_with(client, "ci", &workflow_resource());
        let pp = PostParams::default();
        api.create(
            &pp,
            &workflow(
                "ok",
                "ci",
                json!({"ttlStrategy": {"secondsAfterSuccess": 30}}),
            ),
        )
        .await?;
        api.create(&pp, &workflow("broken", "ci", json!({})))
            .await?;
        api.create(&pp, &workflow("long", "ci", json!({}))).await?;
        env.sleep(Duration::from_secs(5)).await;
        let long = api.get("long").await?;
        assert_eq!(long.data["status"]["phase"], "Running");
        assert_eq!(
            long.metadata
                .labels
                .unwrap_or_default()
                .get(operate::PHASE_LABEL)
                .map(String::as_str),
            Some("Running")
        );
        // The app-proxy's terminate.
        api.patch(
            "long",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shutdown": "Terminate"}})),
        )
        .await?;
        env.sleep(Duration::from_secs(15)).await;
        let ok = api.get("ok").await?;
        assert_eq!(ok.data["status"]["phase"], "Succeeded");
        assert_eq!(ok.data["status"]["progress"], "2/2");
        assert_eq!(
            ok.metadata
                .labels
                .unwrap_or_default()
                .get(operate::COMPLETED_LABEL)
                .map(String::as_str),
            Some("true")
        );
        let broken = api.get("broken").await?;
        assert_eq!(broken.data["status"]["phase"], "Failed");
        let test = operate::node_id("broken", "broken[1].test");
        assert_eq!(
            broken.data["status"]["message"],
            format!("child '{test}' failed")
        );
        let long = api.get("long").await?;
        assert_eq!(long.data["status"]["phase"], "Failed");
        assert_eq!(
            long.data["status"]["message"],
            "Stopped with strategy 'Terminate'"
        );
        // The Events the controller recorded, as argo-workflows v3.6 words them.
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(api.clone().into_client(), "ci");
        let said = |workflow: &str, list: &[k8s_openapi::api::core::v1::Event]| {
            let mut said: Vec<(String, String, String)> = list
                .iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(workflow))
                .map(|e| {
                    let text = |s: &Option<String>| s.clone().unwrap_or_default();
                    (text(&e.reason), text(&e.type_), text(&e.message))
                })
                .collect();
            said.sort();
            said
        };
        let list = events.list(&Default::default()).await?.items;
        assert!(list.iter().all(|e| {
            e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("workflow-controller")
                && e.involved_object.kind.as_deref() == Some("Workflow")
        }));
        let broken = said("broken", &list);
        let failed = format!("child '{test}' failed");
        for want in [
            ("WorkflowRunning", "Normal", "Workflow Running"),
            ("WorkflowFailed", "Warning", failed.as_str()),
            (
                "WorkflowNodeRunning",
                "Normal",
                "Running node broken[1].test",
            ),
            (
                "WorkflowNodeFailed",
                "Warning",
                "Failed node broken[1].test: Error (exit code 1)",
            ),
        ] {
            let want = (want.0.to_string(), want.1.to_string(), want.2.to_string());
            assert!(broken.contains(&want), "{want:?} in {broken:#?}");
        }
        let ok = said("ok", &list);
        let done = ("WorkflowSucceeded", "Normal", "Workflow completed");
        let done = (done.0.to_string(), done.1.to_string(), done.2.to_string());
        assert!(ok.contains(&done), "{ok:#?}");
        assert!(ok.iter().all(|(_, kind, _)| kind == "Normal"), "{ok:#?}");
        let stopped = (
            "WorkflowFailed".to_string(),
            "Warning".to_string(),
            "Stopped with strategy 'Terminate'".to_string(),
        );
        assert!(said("long", &list).contains(&stopped));
        env.sleep(Duration::from_secs(40)).await;
        assert!(
            api.get_opt("ok").await?.is_none(),
            "deleted 30 s after it succeeded"
        );
        assert!(api.get_opt("broken").await?.is_some(), "no TTL: kept");
        Ok(())
    });
    w.sim.run().unwrap();
}

/// `workflowDefaults.metadata.finalizers`: the controller writes them with a Workflow's first
/// status, so its TTL deletion only marks it (Terminating, final phase kept) until the holder
/// removes its finalizer — and the controller does not delete it again meanwhile.
#[test]
fn workflow_defaults_finalizers_hold_a_ttl_deletion_until_their_holder_lets_go() {
    const HOLD: &str = "codefresh.io/resource-reporter";
    let mut w = world(Knobs::default());
    let (trace, host_jobs) = (w.trace.clone(), Jobs::default());
    w.sim.host("workflows", move || {
        let env = SimEnv::shared("workflows", SEED, trace.clone());
        let run = workflows::run(
            env,
            KubeTarget::new("apiserver:6443"),
            host_jobs.clone(),
            vec![HOLD.to_string()],
        );
        async move {
            run.await;
            Ok(())
        }
    });
    let trace = w.trace.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(30));
        let api: Api<DynamicObject> = Api::namespaced_with(client, "ci", &workflow_resource());
        let ttl = json!({"ttlStrategy": {"secondsAfterCompletion": 10}});
        api.create(&PostParams::default(), &workflow("held", "ci", ttl))
            .await?;
        env.sleep(Duration::from_secs(3)).await;
        let running = api.get("held").await?;
        assert_eq!(running.data["status"]["phase"], "Running");
        assert_eq!(running.metadata.finalizers, Some(vec![HOLD.to_string()]));
        env.sleep(Duration::from_secs(30)).await;
        let held = api.get("held").await?;
        assert_eq!(held.data["status"]["phase"], "Succeeded");
        assert!(held.metadata.deletion_timestamp.is_some(), "TTL-deleted");
        let rv = held.metadata.resource_version.clone();
        env.sleep(Duration::from_secs(10)).await;
        assert_eq!(
            api.get("held").await?.metadata.resource_version,
            rv,
            "nothing writes a Workflow that is only waiting for its finalizer"
        );
        api.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": []}})),
        )
        .await?;
        assert!(api.get_opt("held").await?.is_none(), "gone once let go");
        Ok(())
    });
    w.sim.run().unwrap();
}
