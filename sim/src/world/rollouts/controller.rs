//! The controller loop: reflectors of Rollouts, ReplicaSets and AnalysisRuns in every
//! namespace, and every `tick` (1 s) three passes in name order —
//!
//! 1. each Rollout whose latest write the reflector has seen is reconciled
//!    ([`super::reconcile`]) and the plan written: ReplicaSets created (owned by the
//!    Rollout) or scaled, AnalysisRuns created or terminated, the status merge-patched to
//!    `/status` (only what changed, as upstream's two-way merge patch);
//! 2. the ReplicaSet controller's part, which the world plays: pods of a ReplicaSet are
//!    counted and become ready `pods_ready_after` after it was scaled, except for a version
//!    whose verdict is `CrashLoop` (written to the ReplicaSet's `/status`);
//! 3. each running AnalysisRun is measured when due ([`super::analysis`]) and its status
//!    merge-patched on the object (the CRD has no status subresource).
//!
//! A failed write is observed (`rollouts.error`) and tried again at the next tick.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::{json, Value};

use orrery_system::core::json::Pointer as _;
use orrery_system::env::kube::{Shared, Wire};
use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;

use super::analysis::{self, Verdict, Verdicts};
use super::model::*;
use super::reconcile::{self, RunKind};

/// Controller settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// How often the controller looks at every object.
    pub tick: Duration,
    /// How long new pods take to become ready (image pull, probes).
    pub pods_ready_after: Duration,
}

impl Default for Config {
    /// A 1 s tick; pods ready 5 s after a scale-up.
    fn default() -> Self {
        Config {
            tick: Duration::from_secs(1),
            pods_ready_after: Duration::from_secs(5),
        }
    }
}

/// The three reflectors' stores.
#[derive(Clone)]
pub struct Stores {
    /// Rollouts.
    pub rollouts: Store<Shared<DynamicObject>>,
    /// ReplicaSets.
    pub replica_sets: Store<Shared<DynamicObject>>,
    /// AnalysisRuns.
    pub runs: Store<Shared<DynamicObject>>,
}

/// What the controller remembers between ticks.
#[derive(Default)]
struct Memory {
    /// Per Rollout (`namespace/name`): the resourceVersion of our last status write, and
    /// the (phase, step) it wrote.
    written: BTreeMap<String, (u64, String, i64)>,
    /// Per ReplicaSet (`namespace/name`): the `spec.replicas` last seen and since when.
    scaled: BTreeMap<String, (i32, Duration)>,
    /// Typed views by uid, with the resourceVersion they were read at: a view is a pure
    /// function of the object, and most objects are unchanged from one tick to the next.
    views: Views,
    /// Events recorded so far: each one's name gets a distinct nanosecond.
    events_recorded: u64,
}

/// The typed views the controller read last tick (see [`Memory::views`]).
/// What a reconcile reads of one version of a Rollout, worked out once for it: every
/// Rollout is reconciled every tick.
struct RolloutView {
    rollout: Rollout,
    hashes: reconcile::Hashes,
    /// `status` as the typed view writes it: what a new status is diffed against.
    status: Value,
}

#[derive(Default)]
struct Views {
    rollouts: BTreeMap<String, (u64, std::sync::Arc<RolloutView>)>,
    replica_sets: BTreeMap<String, (u64, ReplicaSet)>,
}

impl Views {
    /// `object`'s Rollout view, read again only if the object changed.
    fn rollout(&mut self, object: &DynamicObject) -> std::sync::Arc<RolloutView> {
        let (uid, at) = (object.metadata.uid.clone().unwrap_or_default(), rv(object));
        match self.rollouts.get(&uid) {
            Some((seen, view)) if *seen == at && at != 0 => view.clone(),
            _ => {
                let rollout = rollout_of(object);
                let view = std::sync::Arc::new(RolloutView {
                    hashes: reconcile::Hashes::of(&rollout),
                    status: serde_json::to_value(&rollout.status).unwrap_or(Value::Null),
                    rollout,
                });
                self.rollouts.insert(uid, (at, view.clone()));
                view
            }
        }
    }

    /// `object`'s ReplicaSet view, read again only if the object changed.
    fn replica_set(&mut self, object: &DynamicObject) -> ReplicaSet {
        let (uid, at) = (object.metadata.uid.clone().unwrap_or_default(), rv(object));
        match self.replica_sets.get(&uid) {
            Some((seen, view)) if *seen == at && at != 0 => view.clone(),
            _ => {
                let view = replica_set_of(object);
                self.replica_sets.insert(uid, (at, view.clone()));
                view
            }
        }
    }

    /// Forgets the views of objects no longer in the stores.
    fn keep(&mut self, rollouts: &BTreeSet<String>, replica_sets: &BTreeSet<String>) {
        self.rollouts.retain(|uid, _| rollouts.contains(uid));
        self.replica_sets
            .retain(|uid, _| replica_sets.contains(uid));
    }
}

fn key(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.metadata.namespace.as_deref().unwrap_or(""),
        object.metadata.name.as_deref().unwrap_or("")
    )
}

fn rv(object: &DynamicObject) -> u64 {
    object
        .metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

/// The controller owner's uid, if any.
fn owner(object: &DynamicObject) -> Option<String> {
    object
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// Objects of a store sorted by `namespace/name` (a reflector's order is a hash map's).
fn sorted(store: &Store<Shared<DynamicObject>>) -> Vec<std::sync::Arc<Shared<DynamicObject>>> {
    let mut objects = store.state();
    objects.sort_by_cached_key(|o| key(o));
    objects
}

/// The typed view of a Rollout; unreadable spec or status fields read as defaults.
pub fn rollout_of(object: &DynamicObject) -> Rollout {
    use serde::Deserialize;
    // Read in place (`&Value` is a deserializer): no copy of the pod template per tick.
    let field = |name: &str| object.data.get(name).unwrap_or(&Value::Null);
    Rollout {
        name: object.metadata.name.clone().unwrap_or_default(),
        namespace: object.metadata.namespace.clone().unwrap_or_default(),
        uid: object.metadata.uid.clone().unwrap_or_default(),
        generation: object.metadata.generation.unwrap_or(0),
        spec: Deserialize::deserialize(field("spec")).unwrap_or_default(),
        status: Deserialize::deserialize(field("status")).unwrap_or_default(),
    }
}

/// The typed view of a ReplicaSet.
pub fn replica_set_of(object: &DynamicObject) -> ReplicaSet {
    let annotation = |k: &str| {
        object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .cloned()
    };
    // Field by field, not `Value::pointer` (which allocates per path segment): every
    // ReplicaSet is read every tick.
    let number = |section: &str, field: &str| {
        object
            .data
            .get(section)
            .and_then(|s| s.get(field))
            .and_then(Value::as_i64)
            .unwrap_or(0) as i32
    };
    ReplicaSet {
        name: object.metadata.name.clone().unwrap_or_default(),
        hash: object
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HASH_LABEL))
            .cloned()
            .unwrap_or_default(),
        revision: annotation(REVISION_ANNOTATION)
            .and_then(|r| r.parse().ok())
            .unwrap_or(0),
        replicas: number("spec", "replicas"),
        status_replicas: number("status", "replicas"),
        ready: number("status", "readyReplicas"),
        available: number("status", "availableReplicas"),
        scale_down_deadline: annotation(SCALE_DOWN_ANNOTATION),
    }
}

/// The typed view of an AnalysisRun.
pub fn run_of(object: &DynamicObject) -> AnalysisRun {
    AnalysisRun {
        name: object.metadata.name.clone().unwrap_or_default(),
        phase: object
            .data
            .at("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending")
            .to_string(),
        message: object
            .data
            .at("/status/message")
            .and_then(Value::as_str)
            .map(str::to_string),
        terminate: object
            .data
            .at("/spec/terminate")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    }
}

fn owner_reference(rollout: &Rollout) -> Value {
    json!([{
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "name": rollout.name,
        "uid": rollout.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

/// The ReplicaSet object upstream's `createDesiredReplicaSet` builds.
fn replica_set_object(rollout: &Rollout, new: &reconcile::NewReplicaSet) -> Value {
    let mut labels = rollout.spec.selector.match_labels.clone();
    labels.insert(HASH_LABEL.into(), new.hash.clone());
    let mut template = rollout.spec.template.clone();
    if !template.is_object() {
        template = json!({});
    }
    let mut pod_labels = template
        .at("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    if !pod_labels.is_object() {
        pod_labels = json!({});
    }
    pod_labels[HASH_LABEL] = json!(new.hash);
    if !template["metadata"].is_object() {
        template["metadata"] = json!({});
    }
    template["metadata"]["labels"] = pod_labels;
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": new.name,
            "namespace": rollout.namespace,
            "labels": labels,
            "annotations": {
                REVISION_ANNOTATION: new.revision.to_string(),
                DESIRED_ANNOTATION: rollout.spec.replicas().to_string(),
            },
            "ownerReferences": owner_reference(rollout),
        },
        "spec": {"replicas": new.replicas, "selector": {"matchLabels": labels}, "template": template},
    })
}

/// The AnalysisRun object upstream's `newAnalysisRunFromRollout` builds.
fn run_object(rollout: &Rollout, run: &reconcile::NewRun, revision: u64) -> Value {
    let mut labels: BTreeMap<String, String> = rollout.spec.selector.match_labels.clone();
    labels.insert(HASH_LABEL.into(), run.hash.clone());
    let kind = match run.kind {
        RunKind::Step(index) => {
            labels.insert("step-index".into(), index.to_string());
            "Step"
        }
        RunKind::PrePromotion => "PrePromotion",
        RunKind::PostPromotion => "PostPromotion",
    };
    labels.insert("rollout-type".into(), kind.into());
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AnalysisRun",
        "metadata": {
            "name": run.name,
            "namespace": rollout.namespace,
            "labels": labels,
            "annotations": {REVISION_ANNOTATION: revision.to_string()},
            "ownerReferences": owner_reference(rollout),
        },
        "spec": analysis::run_spec(&run.analysis),
    })
}

fn observe_error(env: &SharedEnv, object: String, error: kube::Error) {
    env.observe(
        WorldEvent::RolloutsError {
            object,
            error: error.to_string(),
        }
        .into(),
    );
}

/// Creates `object`; one that exists already (a lagging reflector) is fine.
async fn create(env: &SharedEnv, api: &Api<Wire>, object: Value, what: String) {
    let object: Wire = match serde_json::from_value(object) {
        Ok(object) => object,
        Err(_) => return,
    };
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => observe_error(env, what, error),
    }
}

async fn patch(
    env: &SharedEnv,
    api: &Api<Wire>,
    name: &str,
    body: Value,
    status: bool,
    what: String,
) -> Option<DynamicObject> {
    let params = PatchParams::default();
    let patch = Patch::Merge(body);
    let result = if status {
        api.patch_status(name, &params, &patch).await
    } else {
        api.patch(name, &params, &patch).await
    };
    result
        .map(Wire::into_inner)
        .map_err(|error| observe_error(env, what, error))
        .ok()
}

/// Pass 1: every Rollout.
async fn rollouts(env: &SharedEnv, client: &kube::Client, stores: &Stores, memory: &mut Memory) {
    let mut replica_sets: BTreeMap<String, Vec<ReplicaSet>> = BTreeMap::new();
    let mut seen_replica_sets = BTreeSet::new();
    for rs in sorted(&stores.replica_sets) {
        seen_replica_sets.insert(rs.metadata.uid.clone().unwrap_or_default());
        if let Some(uid) = owner(&rs) {
            let view = memory.views.replica_set(&rs);
            replica_sets.entry(uid).or_default().push(view);
        }
    }
    let mut runs: BTreeMap<String, Vec<AnalysisRun>> = BTreeMap::new();
    for run in sorted(&stores.runs) {
        if let Some(uid) = owner(&run) {
            runs.entry(uid).or_default().push(run_of(&run));
        }
    }
    let now_ms = env.unix_millis();
    let rollouts = sorted(&stores.rollouts);
    let seen_rollouts = rollouts
        .iter()
        .map(|r| r.metadata.uid.clone().unwrap_or_default())
        .collect();
    memory.views.keep(&seen_rollouts, &seen_replica_sets);
    for object in rollouts {
        let id = key(&object);
        if memory
            .written
            .get(&id)
            .is_some_and(|(written, ..)| *written > rv(&object))
        {
            continue; // the reflector has not seen our last write yet
        }
        let view = memory.views.rollout(&object);
        let RolloutView {
            rollout,
            hashes,
            status: before,
        } = &*view;
        let owned = replica_sets
            .get(&rollout.uid)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let plan = reconcile::reconcile_hashed(
            rollout,
            hashes,
            owned,
            runs.get(&rollout.uid).map(Vec::as_slice).unwrap_or(&[]),
            now_ms,
        );
        let ns = rollout.namespace.as_str();
        let rs_api: Api<Wire> =
            Api::namespaced_with(client.clone(), ns, &super::replica_set_resource());
        let run_api: Api<Wire> =
            Api::namespaced_with(client.clone(), ns, &super::analysis_run_resource());
        let revision = plan.create.as_ref().map(|c| c.revision).unwrap_or_else(|| {
            let hash = plan.status.current_pod_hash.clone().unwrap_or_default();
            owned
                .iter()
                .find(|rs| rs.hash == hash)
                .map_or(0, |rs| rs.revision)
        });
        if let Some(new) = &plan.create {
            let object = replica_set_object(rollout, new);
            create(env, &rs_api, object, format!("{ns}/{}", new.name)).await;
        }
        for (name, replicas) in &plan.scale {
            let body = json!({
                "metadata": {"annotations": {DESIRED_ANNOTATION: rollout.spec.replicas().to_string()}},
                "spec": {"replicas": replicas},
            });
            patch(env, &rs_api, name, body, false, format!("{ns}/{name}")).await;
        }
        for (name, deadline) in &plan.deadlines {
            let body = json!({"metadata": {"annotations": {SCALE_DOWN_ANNOTATION: deadline}}});
            patch(env, &rs_api, name, body, false, format!("{ns}/{name}")).await;
        }
        for run in &plan.runs {
            let object = run_object(rollout, run, revision);
            create(env, &run_api, object, format!("{ns}/{}", run.name)).await;
        }
        for name in &plan.terminate {
            let body = json!({"spec": {"terminate": true}});
            patch(env, &run_api, name, body, false, format!("{ns}/{name}")).await;
        }
        // What the writes above record, before the status write; a pause's start or end
        // after it, about the Rollout it wrote.
        let (first, then) = super::events::recorded(rollout, owned, &plan, revision);
        record(
            env,
            client,
            rollout,
            &rv(&object).to_string(),
            first,
            memory,
        )
        .await;
        let after = serde_json::to_value(&plan.status).unwrap_or(Value::Null);
        let Some(diff) = merge_diff(before, &after) else {
            continue;
        };
        let api: Api<Wire> = Api::namespaced_with(client.clone(), ns, &super::rollout_resource());
        let body = json!({"status": diff});
        if let Some(written) = patch(env, &api, &rollout.name, body, true, id.clone()).await {
            record(
                env,
                client,
                rollout,
                &rv(&written).to_string(),
                then,
                memory,
            )
            .await;
            let phase = plan.status.phase.clone().unwrap_or_default();
            let step = if rollout.spec.strategy.blue_green.is_some() {
                -1
            } else {
                i64::from(plan.status.current_step_index.unwrap_or(0))
            };
            let moved = memory
                .written
                .get(&id)
                .is_none_or(|(_, p, s)| *p != phase || *s != step);
            if moved {
                env.observe(
                    WorldEvent::RolloutPhase {
                        rollout: id.clone(),
                        revision,
                        step,
                        phase: phase.clone(),
                        message: plan.status.message.clone().unwrap_or_default(),
                    }
                    .into(),
                );
            }
            memory.written.insert(id, (rv(&written), phase, step));
        }
    }
}

/// Creates the Events `what` about `rollout` (at `resource_version`); a failure is only
/// logged by client-go's broadcaster, so it changes nothing here.
async fn record(
    env: &SharedEnv,
    client: &kube::Client,
    rollout: &Rollout,
    resource_version: &str,
    what: Vec<super::events::Recorded>,
    memory: &mut Memory,
) {
    if what.is_empty() {
        return;
    }
    let now_ms = env.unix_millis();
    let stamp = orrery_system::core::time::rfc3339(now_ms);
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &rollout.namespace,
        &crate::world::argocd::events::event_resource(),
    );
    for recorded in &what {
        memory.events_recorded += 1;
        let nanos = now_ms * 1_000_000 + memory.events_recorded % 1_000_000;
        let event = super::events::event(rollout, resource_version, recorded, nanos, &stamp);
        if let Ok(object) = serde_json::from_value::<DynamicObject>(event) {
            let _ = api.create(&PostParams::default(), &object).await;
        }
    }
}

/// Each Rollout's `namespace/name` by uid (owner references name the uid).
fn owners(stores: &Stores) -> BTreeMap<String, String> {
    stores
        .rollouts
        .state()
        .iter()
        .map(|r| (r.metadata.uid.clone().unwrap_or_default(), key(r)))
        .collect()
}

/// Pass 2: the pods of every ReplicaSet.
async fn pods(
    env: &SharedEnv,
    client: &kube::Client,
    stores: &Stores,
    verdicts: &Verdicts,
    config: &Config,
    memory: &mut Memory,
) {
    let now = env.elapsed();
    let owners = owners(stores);
    let replica_sets = sorted(&stores.replica_sets);
    for object in &replica_sets {
        let id = key(object);
        let rs = memory.views.replica_set(object);
        let since = match memory.scaled.get(&id) {
            Some((replicas, since)) if *replicas == rs.replicas => *since,
            _ => {
                memory.scaled.insert(id.clone(), (rs.replicas, now));
                now
            }
        };
        let rollout = owner(object).and_then(|uid| owners.get(&uid).cloned());
        let crashing = rollout
            .as_deref()
            .is_some_and(|r| verdicts.get(r, &rs.hash) == Verdict::CrashLoop);
        let ready = if crashing {
            0
        } else if now.saturating_sub(since) >= config.pods_ready_after {
            rs.replicas
        } else {
            rs.ready.min(rs.replicas)
        };
        if (rs.status_replicas, rs.ready, rs.available) == (rs.replicas, ready, ready) {
            continue;
        }
        let ns = object.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Wire> =
            Api::namespaced_with(client.clone(), &ns, &super::replica_set_resource());
        let body = json!({"status": {"replicas": rs.replicas, "readyReplicas": ready, "availableReplicas": ready, "observedGeneration": object.metadata.generation.unwrap_or(0)}});
        patch(env, &api, &rs.name, body, true, id).await;
    }
    let live: std::collections::BTreeSet<String> = replica_sets.iter().map(|o| key(o)).collect();
    memory.scaled.retain(|id, _| live.contains(id));
}

/// Pass 3: every running AnalysisRun.
async fn measurements(
    env: &SharedEnv,
    client: &kube::Client,
    stores: &Stores,
    verdicts: &Verdicts,
) {
    let now_ms = env.unix_millis();
    let owners = owners(stores);
    for object in sorted(&stores.runs) {
        let run = run_of(&object);
        if run.completed() {
            continue;
        }
        let hash = object
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HASH_LABEL))
            .cloned()
            .unwrap_or_default();
        let verdict = owner(&object)
            .and_then(|uid| owners.get(&uid))
            .map_or(Verdict::Good, |rollout| verdicts.get(rollout, &hash));
        let status = object.data.get("status").cloned().unwrap_or(Value::Null);
        let Some(next) = analysis::measure(&status, run.terminate, verdict, now_ms) else {
            continue;
        };
        let ns = object.metadata.namespace.clone().unwrap_or_default();
        let id = key(&object);
        let api: Api<Wire> =
            Api::namespaced_with(client.clone(), &ns, &super::analysis_run_resource());
        let phase = next["phase"].as_str().unwrap_or("").to_string();
        let body = json!({"status": next});
        if patch(env, &api, &run.name, body, false, id.clone())
            .await
            .is_some()
            && matches!(
                phase.as_str(),
                "Successful" | "Failed" | "Error" | "Inconclusive"
            )
        {
            env.observe(WorldEvent::AnalysisDone { run: id, phase }.into());
        }
    }
}

/// Runs the controller loop over `stores` until the host stops.
pub async fn run(
    env: SharedEnv,
    client: kube::Client,
    stores: Stores,
    verdicts: Verdicts,
    config: Config,
) {
    let mut memory = Memory::default();
    // Nothing is reconciled before all three reflectors have listed: a Rollout seen before
    // its ReplicaSets would look as if its stable ReplicaSet were gone.
    for store in [&stores.rollouts, &stores.replica_sets, &stores.runs] {
        if store.wait_until_ready().await.is_err() {
            return; // the reflector task ended: the host is stopping
        }
    }
    loop {
        env.sleep(config.tick).await;
        rollouts(&env, &client, &stores, &mut memory).await;
        pods(&env, &client, &stores, &verdicts, &config, &mut memory).await;
        measurements(&env, &client, &stores, &verdicts).await;
    }
}
