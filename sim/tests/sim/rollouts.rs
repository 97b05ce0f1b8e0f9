//! The simulated Argo Rollouts controller through the simulated API server: a canary with
//! a pause and an analysis step promoted with the plugin's patches, a canary whose analysis
//! fails, and a blue-green update — checked on the objects a client reads (Rollout status
//! through the status subresource, owned ReplicaSets and AnalysisRuns with upstream's
//! names, labels and owner references).

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use orrery_sim::env::SimEnv;
use orrery_sim::world::apiserver::Knobs;
use orrery_sim::world::rollouts::{
    self, analysis_run_resource, controller, plugin, replica_set_resource, rollout_resource,
    Verdict, Verdicts,
};
use orrery_system::env::kube::KubeTarget;
use serde_json::{json, Value};

use crate::support::*;

const NS: &str = "shop";

fn rollout(name: &str, strategy: Value) -> DynamicObject {
    let mut object = DynamicObject::new(name, &rollout_resource()).within(NS);
    object.data = json!({"spec": {
        "replicas": 4,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": format!("{name}:v1")}]}},
        "strategy": strategy,
    }});
    object
}

async fn set_image(api: &Api<DynamicObject>, name: &str, image: &str) -> kube::Result<()> {
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
}

/// (phase, message, currentStepIndex) of a Rollout.
async fn state(api: &Api<DynamicObject>, name: &str) -> kube::Result<(String, String, i64)> {
    let object = api.get(name).await?;
    let status = &object.data["status"];
    Ok((
        status["phase"].as_str().unwrap_or("").to_string(),
        status["message"].as_str().unwrap_or("").to_string(),
        status["currentStepIndex"].as_i64().unwrap_or(-1),
    ))
}

/// The Events recorded about Rollout `name`, in the order they were made: (reason, type,
/// message).
async fn recorded(events: &Api<Event>, name: &str) -> kube::Result<Vec<(String, String, String)>> {
    let mut list = events.list(&Default::default()).await?.items;
    list.retain(|e| e.involved_object.name.as_deref() == Some(name));
    // Named `<rollout>.<hex nanoseconds>`: one length of hex, so the name orders them.
    list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let text = |s: &Option<String>| s.clone().unwrap_or_default();
    Ok(list
        .iter()
        .map(|e| (text(&e.reason), text(&e.type_), text(&e.message)))
        .collect())
}

fn boot(w: &mut World, verdicts: &Verdicts) {
    let (trace, verdicts) = (w.trace.clone(), verdicts.clone());
    w.sim.host("rollouts", move || {
        let env = SimEnv::shared("rollouts", SEED, trace.clone());
        let run = rollouts::run(
            env,
            KubeTarget::new("apiserver:6443"),
            verdicts.clone(),
            controller::Config::default(),
        );
        async move {
            run.await;
            Ok(())
        }
    });
}

#[test]
fn a_canary_pauses_until_promoted_runs_its_analysis_and_becomes_stable() {
    let mut w = world(Knobs::default());
    let verdicts = Verdicts::default();
    boot(&mut w, &verdicts);
    let trace = w.trace.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(30));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &rollout_resource());
        let sets: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &replica_set_resource());
        let events: Api<Event> = Api::namespaced(client.clone(), NS);
        let runs: Api<DynamicObject> = Api::namespaced_with(client, NS, &analysis_run_resource());
        let steps = json!({"canary": {"steps": [{"setWeight": 25}, {"pause": {}}, {"analysis": {"templates": [{"templateName": "success-rate"}]}}]}});
        let created = api.create(&PostParams::default(), &rollout("web", steps)).await?;
        env.sleep(Duration::from_secs(10)).await;
        assert_eq!(state(&api, "web").await?, ("Healthy".into(), String::new(), 3));
        let first = api.get("web").await?;
        let v1 = first.data["status"]["stableRS"].as_str().unwrap().to_string();
        assert_eq!(
            first.metadata.generation, created.metadata.generation,
            "status is written through the status subresource: no new generation"
        );
        assert_eq!(first.data["status"]["observedGeneration"], "1", "a string, as upstream");
        assert_eq!(first.data["status"]["HPAReplicas"], 4);

        set_image(&api, "web", "web:v2").await?;
        env.sleep(Duration::from_secs(15)).await;
        assert_eq!(state(&api, "web").await?, ("Paused".into(), "CanaryPauseStep".into(), 1));
        let v2 = api.get("web").await?.data["status"]["currentPodHash"].as_str().unwrap().to_string();
        let canary = sets.get(&format!("web-{v2}")).await?;
        assert_eq!(canary.data["spec"]["replicas"], 1, "25 % of 4 pods");
        assert_eq!(canary.data["status"]["availableReplicas"], 1);
        let labels = canary.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("rollouts-pod-template-hash"), Some(&v2));
        let annotations = canary.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.get("rollout.argoproj.io/revision").map(String::as_str), Some("2"));
        let owner = &canary.metadata.owner_references.clone().unwrap_or_default()[0];
        assert_eq!((owner.kind.as_str(), owner.controller), ("Rollout", Some(true)));
        assert_eq!(owner.uid, created.metadata.uid.clone().unwrap());
        assert_eq!(sets.get(&format!("web-{v1}")).await?.data["spec"]["replicas"], 3);

        plugin::promote(&api, "web", false).await?;
        env.sleep(Duration::from_secs(45)).await;
        let run = runs.get(&format!("web-{v2}-2-2")).await?;
        assert_eq!(run.data["status"]["phase"], "Successful");
        let labels = run.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("rollout-type").map(String::as_str), Some("Step"));
        assert_eq!(labels.get("step-index").map(String::as_str), Some("2"));
        assert_eq!(state(&api, "web").await?, ("Healthy".into(), String::new(), 3));
        let done = api.get("web").await?;
        assert_eq!(done.data["status"]["stableRS"], v2.as_str());
        assert_eq!(sets.get(&format!("web-{v1}")).await?.data["spec"]["replicas"], 0);
        // The Events, in argo-rollouts v1.8's words and order (its e2e tests' sequence, less
        // RolloutNotCompleted; a promote by the plugin clears the pause itself, so the
        // controller records no RolloutResumed).
        let said: Vec<String> = recorded(&events, "web")
            .await?
            .into_iter()
            .map(|(reason, kind, message)| format!("{reason} {kind}: {message}"))
            .collect();
        let scaled = |way: &str, hash: &str, rev: u8, from: u8, to: u8| {
            format!("ScalingReplicaSet Normal: Scaled {way} ReplicaSet web-{hash} (revision {rev}) from {from} to {to}")
        };
        let want = vec![
            "RolloutUpdated Normal: Rollout updated to revision 1".to_string(),
            format!("NewReplicaSetCreated Normal: Created ReplicaSet web-{v1} (revision 1)"),
            scaled("up", &v1, 1, 0, 4),
            format!("RolloutCompleted Normal: Rollout completed update to revision 1 ({v1}): Initial deploy"),
            "RolloutUpdated Normal: Rollout updated to revision 2".to_string(),
            format!("NewReplicaSetCreated Normal: Created ReplicaSet web-{v2} (revision 2)"),
            scaled("up", &v2, 2, 0, 1),
            scaled("down", &v1, 1, 4, 3),
            "RolloutStepCompleted Normal: Rollout step 1/3 completed (setWeight: 25)".to_string(),
            "RolloutPaused Normal: Rollout is paused (CanaryPauseStep)".to_string(),
            "RolloutStepCompleted Normal: Rollout step 2/3 completed (pause)".to_string(),
            "RolloutStepCompleted Normal: Rollout step 3/3 completed (analysis)".to_string(),
            scaled("up", &v2, 2, 1, 2),
            scaled("down", &v1, 1, 3, 2),
            scaled("up", &v2, 2, 2, 3),
            scaled("down", &v1, 1, 2, 0),
            scaled("up", &v2, 2, 3, 4),
            format!("RolloutCompleted Normal: Rollout completed update to revision 2 ({v2}): Completed all 3 canary steps"),
        ];
        assert_eq!(said, want);
        Ok(())
    });
    w.sim.run().unwrap();
}

#[test]
fn a_failing_analysis_degrades_a_canary_and_a_blue_green_switches_after_promotion() {
    let mut w = world(Knobs::default());
    let verdicts = Verdicts::default();
    boot(&mut w, &verdicts);
    let trace = w.trace.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(30));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &rollout_resource());
        let sets: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &replica_set_resource());
        let events: Api<Event> = Api::namespaced(client, NS);
        let canary = json!({"canary": {"steps": [{"setWeight": 50}, {"analysis": {"templates": [{"templateName": "success-rate"}]}}]}});
        api.create(&PostParams::default(), &rollout("api", canary)).await?;
        let blue_green = json!({"blueGreen": {"activeService": "pay-active", "previewService": "pay-preview", "autoPromotionEnabled": false}});
        api.create(&PostParams::default(), &rollout("pay", blue_green)).await?;
        env.sleep(Duration::from_secs(10)).await;
        assert_eq!(state(&api, "api").await?.0, "Healthy");
        assert_eq!(state(&api, "pay").await?.0, "Healthy");
        let old_pay = api.get("pay").await?.data["status"]["stableRS"].as_str().unwrap().to_string();

        // The next version of `api` fails its analysis.
        set_image(&api, "api", "api:v2").await?;
        env.sleep(Duration::from_millis(1500)).await;
        let v2 = api.get("api").await?.data["status"]["currentPodHash"].as_str().unwrap().to_string();
        verdicts.set(&format!("{NS}/api"), &v2, Verdict::Bad);
        set_image(&api, "pay", "pay:v2").await?;
        env.sleep(Duration::from_secs(20)).await;
        let (phase, message, _) = state(&api, "api").await?;
        assert_eq!(phase, "Degraded");
        assert!(message.starts_with("RolloutAborted: Rollout aborted update to revision 2: Metric \"success-rate\" assessed Failed"), "{message}");
        assert_eq!(sets.get(&format!("api-{v2}")).await?.data["spec"]["replicas"], 0);
        let aborted: Vec<_> = recorded(&events, "api")
            .await?
            .into_iter()
            .filter(|(reason, ..)| reason == "RolloutAborted")
            .collect();
        assert_eq!(aborted.len(), 1, "{aborted:?}");
        assert_eq!(aborted[0].1, "Warning");
        assert_eq!(format!("RolloutAborted: {}", aborted[0].2), message);

        assert_eq!(state(&api, "pay").await?.1, "BlueGreenPause");
        let pay = api.get("pay").await?;
        assert_eq!(pay.data["status"]["blueGreen"]["activeSelector"], old_pay.as_str());
        plugin::promote(&api, "pay", false).await?;
        env.sleep(Duration::from_secs(5)).await;
        let pay = api.get("pay").await?;
        let new_pay = pay.data["status"]["currentPodHash"].as_str().unwrap().to_string();
        assert_eq!(pay.data["status"]["blueGreen"]["activeSelector"], new_pay);
        assert_eq!(pay.data["status"]["phase"], "Healthy");
        let pay_said = recorded(&events, "pay").await?;
        let paused = ("RolloutPaused".to_string(), "Normal".to_string(), "Rollout is paused (BlueGreenPause)".to_string());
        assert!(pay_said.contains(&paused), "{pay_said:#?}");
        assert_eq!(sets.get(&format!("pay-{old_pay}")).await?.data["spec"]["replicas"], 4, "kept for the scale-down delay");
        env.sleep(Duration::from_secs(35)).await;
        assert_eq!(sets.get(&format!("pay-{old_pay}")).await?.data["spec"]["replicas"], 0);
        // `promote --full` of a fully promoted rollout changes nothing, as upstream.
        let before = api.get("pay").await?.metadata.resource_version;
        plugin::promote(&api, "pay", true).await?;
        assert_eq!(api.get("pay").await?.metadata.resource_version, before);
        let completed: Vec<String> = recorded(&events, "pay")
            .await?
            .into_iter()
            .filter(|(reason, ..)| reason == "RolloutCompleted")
            .map(|(.., message)| message)
            .collect();
        assert_eq!(completed, vec![
            format!("Rollout completed update to revision 1 ({old_pay}): Initial deploy"),
            format!("Rollout completed update to revision 2 ({new_pay}): Completed blue-green update"),
        ]);
        Ok(())
    });
    w.sim.run().unwrap();
}
