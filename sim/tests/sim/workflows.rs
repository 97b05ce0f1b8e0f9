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
        let run = workflows::run(env, KubeTarget::new("apiserver:6443"), host_jobs.clone());
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
