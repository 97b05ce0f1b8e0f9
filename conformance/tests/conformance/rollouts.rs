//! The simulated Argo Rollouts controller, unchanged, in real mode against a real
//! kube-apiserver with the fixture CRDs: the Rollout's `/status` and the ReplicaSets'
//! `/status` subresources, AnalysisRun status written on the object (its CRD has no
//! subresources), owner references — the same writes the simulation makes.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use orrery_conformance::cluster::Cluster;
use orrery_sim::world::rollouts::{
    self, analysis_run_resource, controller, plugin, replica_set_resource, rollout_resource,
    Verdict, Verdicts,
};
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::{RealEnv, SharedEnv};
use serde_json::{json, Value};

use crate::support::eventually;

fn status_of(object: &DynamicObject) -> (String, String, i64) {
    let status = &object.data["status"];
    (
        status["phase"].as_str().unwrap_or("").to_string(),
        status["message"].as_str().unwrap_or("").to_string(),
        status["currentStepIndex"].as_i64().unwrap_or(-1),
    )
}

/// Waits until the Rollout `name` shows `phase` (and `message`), returning it.
async fn until_phase(
    api: &Api<DynamicObject>,
    name: &str,
    phase: &str,
    message: &str,
) -> DynamicObject {
    eventually(&format!("{name} {phase} {message}"), || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let (p, m, _) = status_of(&object);
        if p == phase && m.starts_with(message) {
            Ok(object)
        } else {
            Err(format!("{p}: {m}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_rollouts_stand_in_drives_canaries_on_a_real_api_server() {
    let cluster = Cluster::real().await.unwrap_or_else(|e| panic!("{e}"));
    let namespace = format!("orrery-rollouts-{}", std::process::id());
    cluster
        .prepare(&namespace)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let config = kube::Config::infer().await.expect("kubeconfig");
    let target = KubeTarget::real(config, &namespace);
    let verdicts = Verdicts::default();
    let controller = tokio::spawn({
        let env: SharedEnv = Arc::new(RealEnv::new("rollouts"));
        let config = controller::Config {
            pods_ready_after: Duration::from_secs(1),
            ..Default::default()
        };
        rollouts::run(env, target, verdicts.clone(), config)
    });
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &rollout_resource());
    let sets: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &replica_set_resource());
    let runs: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &analysis_run_resource());
    let rollout = |name: &str, steps: Value| {
        let mut object = DynamicObject::new(name, &rollout_resource()).within(&namespace);
        object.data = json!({"spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": format!("{name}:v1")}]}},
            "strategy": {"canary": {"steps": steps}},
        }});
        object
    };
    let set_image = |name: &'static str, image: &'static str| {
        let api = api.clone();
        async move {
            let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .expect("patch the template");
        }
    };
    let analysis = json!({"analysis": {"templates": [{"templateName": "success-rate"}]}});
    let created = api
        .create(
            &PostParams::default(),
            &rollout("web", json!([{"setWeight": 25}, {"pause": {}}, analysis])),
        )
        .await
        .expect("create the Rollout (fixture CRD)");
    api.create(
        &PostParams::default(),
        &rollout("api", json!([{"setWeight": 50}, analysis])),
    )
    .await
    .expect("create the second Rollout");
    let first = until_phase(&api, "web", "Healthy", "").await;
    until_phase(&api, "api", "Healthy", "").await;
    assert_eq!(
        first.metadata.generation, created.metadata.generation,
        "a real API server keeps the generation on /status writes"
    );
    assert_eq!(first.data["status"]["observedGeneration"], "1");
    let v1 = first.data["status"]["stableRS"]
        .as_str()
        .unwrap()
        .to_string();
    let stable = sets
        .get(&format!("web-{v1}"))
        .await
        .expect("the stable ReplicaSet");
    assert_eq!(
        stable.data["status"]["availableReplicas"], 4,
        "ReplicaSet /status written"
    );
    let owner = &stable.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(owner.uid, created.metadata.uid.clone().unwrap());

    // web: paused at 25 %, promoted with the plugin's patch, analysed, stable.
    set_image("web", "web:v2").await;
    let paused = until_phase(&api, "web", "Paused", "CanaryPauseStep").await;
    let v2 = paused.data["status"]["currentPodHash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(status_of(&paused).2, 1);
    let canary = sets
        .get(&format!("web-{v2}"))
        .await
        .expect("the canary ReplicaSet");
    assert_eq!(canary.data["spec"]["replicas"], 1);
    plugin::promote(&api, "web", false).await.expect("promote");
    let done = until_phase(&api, "web", "Healthy", "").await;
    assert_eq!(done.data["status"]["stableRS"], v2.as_str());
    let run = runs
        .get(&format!("web-{v2}-2-2"))
        .await
        .expect("the step's AnalysisRun");
    assert_eq!(run.data["status"]["phase"], "Successful");
    assert_eq!(
        run.data["status"]["metricResults"][0]["successful"], 3,
        "AnalysisRun status is kept on the object (no status subresource)"
    );

    // api: its next version fails analysis and the rollout is aborted back to the stable.
    set_image("api", "api:v2").await;
    let progressing = until_phase(&api, "api", "Progressing", "").await;
    let bad = progressing.data["status"]["currentPodHash"]
        .as_str()
        .unwrap()
        .to_string();
    verdicts.set(&format!("{namespace}/api"), &bad, Verdict::Bad);
    until_phase(
        &api,
        "api",
        "Degraded",
        "RolloutAborted: Rollout aborted update to revision 2: Metric \"success-rate\" assessed Failed",
    )
    .await;
    eventually("the aborted canary scaled to 0", || async {
        let rs = sets
            .get(&format!("api-{bad}"))
            .await
            .map_err(|e| e.to_string())?;
        (rs.data["spec"]["replicas"] == 0)
            .then_some(())
            .ok_or_else(|| rs.data["spec"].to_string())
    })
    .await;

    controller.abort();
    if let Err(e) = cluster.cleanup(&namespace).await {
        eprintln!("warning: cleanup of {namespace}: {e}");
    }
}
