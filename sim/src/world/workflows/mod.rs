//! Simulated Argo Workflows: a controller that runs `Workflow`s
//! (`workflows.argoproj.io/v1alpha1`, no status subresource) through Running to Succeeded,
//! Failed or Error, with nodes, retries, shutdown, deadlines and TTL garbage collection,
//! following argo-workflows v3.6. Pods are not objects: what each step's pod does (its
//! phase and how long it runs) is the world's [`Jobs`], set by the workload or a test.
//!
//! - [`operate`]: one operation on one Workflow, as a pure function;
//! - [`events`]: the Kubernetes Events the controller records about it;
//! - [`run`]: a reflector of Workflows in every namespace and, every second, each one
//!   operated on and its status and labels merge-patched, or deleted when its TTL ran out.
//!
//! `workflowDefaults` (the controller ConfigMap's defaults for every Workflow, Argo Workflows
//! docs `default-workflow-specs.md`: "any values under `Workflow.metadata` and
//! `Workflow.spec`") are modelled for `metadata.finalizers` only: the controller writes them
//! with its first status, so a Workflow carries them before it can finish. That the
//! controller persists metadata defaults on the Workflow object itself is **inferred** from
//! those docs; the runtime's chart installs Argo Workflows as a subchart (research §2, `argo-workflows`), so
//! the finalizer the hardened resource reporter relies on is the runtime's own setting.

pub mod events;
pub mod operate;
pub mod workload;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use serde_json::{json, Value};

use orrery_system::env::kube::KubeTarget;
use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;

/// `argoproj.io/v1alpha1 Workflow`.
pub fn workflow_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "Workflow",
    ))
}

/// A Workflow whose entrypoint `main` runs `steps` one after another, each with the
/// template `job` (a container template, with its `retryStrategy` if any; `name` is set to
/// `job`), and `extra` merged into the spec (`ttlStrategy`, `shutdown`, …).
pub fn sequential(
    name: &str,
    namespace: &str,
    steps: &[&str],
    mut job: serde_json::Value,
    extra: serde_json::Value,
) -> DynamicObject {
    job["name"] = json!("job");
    let groups: Vec<serde_json::Value> = steps
        .iter()
        .map(|step| json!([{"name": step, "template": "job"}]))
        .collect();
    let mut spec = json!({
        "entrypoint": "main",
        "templates": [{"name": "main", "steps": groups}, job],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    let mut object = DynamicObject::new(name, &workflow_resource()).within(namespace);
    object.data = json!({"spec": spec});
    object
}

/// What one attempt of a step's pod does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// `Succeeded`, `Failed` (main container exits 1) or `Error` (the pod is lost).
    pub phase: &'static str,
    /// Seconds it runs once started.
    pub seconds: u64,
}

impl Default for Job {
    /// Succeeds after 5 s.
    fn default() -> Job {
        Job {
            phase: "Succeeded",
            seconds: 5,
        }
    }
}

/// The pods' behaviour in the simulated world, per (`namespace/workflow`, step node name
/// without its attempt suffix): one [`Job`] per attempt, the last one repeating. Absent:
/// [`Job::default`].
#[derive(Clone, Debug, Default)]
pub struct Jobs(Arc<Mutex<JobTable>>);

/// Attempts by (`namespace/workflow`, node name), and per container template the runs of
/// successive workflows.
#[derive(Debug, Default)]
struct JobTable {
    exact: BTreeMap<(String, String), Vec<Job>>,
    /// Template → (what the n-th workflow running it does, workflow → its n).
    runs: BTreeMap<String, (Vec<Job>, BTreeMap<String, usize>)>,
}

impl Jobs {
    /// The pod of node `node` of `workflow` does `attempts` (one entry per attempt).
    pub fn set(&self, workflow: &str, node: &str, attempts: Vec<Job>) {
        self.0
            .lock()
            .expect("jobs lock poisoned")
            .exact
            .insert((workflow.to_string(), node.to_string()), attempts);
    }

    /// Every pod that runs container template `template`, in any workflow, does
    /// `attempts` unless its own (workflow, node) entry says otherwise — for workflows
    /// whose names are generated (`generateName`).
    pub fn set_template(&self, template: &str, attempts: Vec<Job>) {
        self.set(ANY_WORKFLOW, template, attempts);
    }

    /// The n-th workflow (in the order their pods start) that runs container template
    /// `template` does `runs[n]` (every attempt); later ones do [`Job::default`].
    pub fn set_template_runs(&self, template: &str, runs: Vec<Job>) {
        self.0
            .lock()
            .expect("jobs lock poisoned")
            .runs
            .insert(template.to_string(), (runs, BTreeMap::new()));
    }

    /// What attempt `attempt` of node `node` (running `template`) of `workflow` does.
    pub fn get(&self, workflow: &str, node: &str, template: &str, attempt: usize) -> Job {
        let mut table = self.0.lock().expect("jobs lock poisoned");
        let listed = table
            .exact
            .get(&(workflow.to_string(), node.to_string()))
            .or_else(|| {
                table
                    .exact
                    .get(&(ANY_WORKFLOW.to_string(), template.to_string()))
            })
            .and_then(|jobs| jobs.get(attempt).or(jobs.last()).copied());
        if let Some(job) = listed {
            return job;
        }
        if let Some((runs, seen)) = table.runs.get_mut(template) {
            let next = seen.len();
            let n = *seen.entry(workflow.to_string()).or_insert(next);
            return runs.get(n).copied().unwrap_or_default();
        }
        Job::default()
    }
}

/// The workflow key of template-wide entries ([`Jobs::set_template`]).
const ANY_WORKFLOW: &str = "*";

/// How often the controller operates on every Workflow.
const TICK: Duration = Duration::from_secs(1);

/// Runs the Workflows controller against `target` until the host stops; `finalizers` are
/// its `workflowDefaults.metadata.finalizers`, written with each Workflow's first status.
pub async fn run(env: SharedEnv, target: KubeTarget, jobs: Jobs, finalizers: Vec<String>) {
    use futures::StreamExt;
    use kube::runtime::{reflector, watcher, WatchStreamExt};

    let client = orrery_system::env::kube::client(env.clone(), &target);
    let resource = workflow_resource();
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let events = watcher(
        kube::Api::<orrery_system::env::kube::Shared<kube::api::DynamicObject>>::all_with(
            client.clone(),
            &resource,
        ),
        watcher::Config::default(),
    )
    .backoff(orrery_system::env::kube::SeededBackoff::new(env.clone()));
    tokio::spawn(reflector::reflector(writer, events).for_each(|_| async {}));
    // Per workflow: the resourceVersion of our last write (a reflector view older than it
    // is skipped) and the phase it wrote.
    let mut written: BTreeMap<String, (u64, String)> = BTreeMap::new();
    // Events recorded so far: each one's name gets a distinct nanosecond.
    let mut recorded: u64 = 0;
    let no_spec = json!({});
    loop {
        env.sleep(TICK).await;
        let mut workflows = store.state();
        let key = |o: &DynamicObject| {
            format!(
                "{}/{}",
                o.metadata.namespace.as_deref().unwrap_or(""),
                o.metadata.name.as_deref().unwrap_or("")
            )
        };
        workflows.sort_by_cached_key(|o| key(o));
        let now_ms = env.unix_millis();
        for object in workflows {
            let id = key(&object);
            let rv: u64 = object
                .metadata
                .resource_version
                .as_deref()
                .and_then(|rv| rv.parse().ok())
                .unwrap_or(0);
            if written.get(&id).is_some_and(|(at, _)| *at > rv) {
                continue;
            }
            let name = object.metadata.name.clone().unwrap_or_default();
            let ns = object.metadata.namespace.clone().unwrap_or_default();
            let labels = object.metadata.labels.clone().unwrap_or_default();
            // Read in place: the controller visits every Workflow every second.
            let spec = object.data.get("spec").unwrap_or(&no_spec);
            let status = object.data.get("status").unwrap_or(&Value::Null);
            let labels: BTreeMap<String, String> = labels.into_iter().collect();
            // Answers decoded by `Wire` (no flattened buffering of each whole Workflow).
            let api: Api<orrery_system::env::kube::Wire> =
                Api::namespaced_with(client.clone(), &ns, &resource);
            let deleting = object.metadata.deletion_timestamp.is_some();
            match operate::operate(&id, &name, spec, status, &labels, &jobs, now_ms) {
                operate::Step::Unchanged => {}
                // Deleted already and held by a finalizer: nothing more to ask.
                operate::Step::Delete if deleting => {}
                operate::Step::Delete => {
                    if let Err(error) = api.delete(&name, &DeleteParams::default()).await {
                        observe_error(&env, id.clone(), error);
                    }
                    written.remove(&id);
                }
                operate::Step::Write {
                    labels,
                    status: next,
                } => {
                    let phase = next["phase"].as_str().unwrap_or("").to_string();
                    let message = next["message"].as_str().unwrap_or("").to_string();
                    // The phase's event while operating, before the write; the nodes' after
                    // it succeeded, about the object it wrote.
                    let was = status["phase"].as_str().unwrap_or("");
                    let on_phase = events::workflow_phase(was, &phase, &message);
                    let on_nodes = events::node_phases(status, &next);
                    let uid = object.metadata.uid.clone().unwrap_or_default();
                    let mut record = |what: &events::Recorded, rv: &str| {
                        recorded += 1;
                        let nanos = now_ms * 1_000_000 + recorded % 1_000_000;
                        let stamp = orrery_system::core::time::rfc3339(now_ms);
                        events::event((&ns, &name), (&uid, rv), what, nanos, &stamp)
                    };
                    let before = object.metadata.resource_version.clone().unwrap_or_default();
                    let first: Vec<Value> = on_phase.iter().map(|w| record(w, &before)).collect();
                    create_events(&client, &ns, first).await;
                    let status = next;
                    let mut body = json!({"metadata": {"labels": labels}, "status": status});
                    // workflowDefaults' finalizers, with the first status (a merge patch
                    // replaces the list: the ones it has are kept).
                    let held = object.metadata.finalizers.as_deref().unwrap_or_default();
                    let missing: Vec<&String> =
                        finalizers.iter().filter(|f| !held.contains(f)).collect();
                    if !missing.is_empty() && !deleting {
                        let mut all = held.to_vec();
                        all.extend(missing.into_iter().cloned());
                        body["metadata"]["finalizers"] = json!(all);
                    }
                    match api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(body))
                        .await
                    {
                        Ok(object) => {
                            let rv = object
                                .0
                                .metadata
                                .resource_version
                                .as_deref()
                                .and_then(|rv| rv.parse().ok())
                                .unwrap_or(0);
                            let after = rv.to_string();
                            let made = on_nodes.iter().map(|w| record(w, &after)).collect();
                            create_events(&client, &ns, made).await;
                            if written.get(&id).is_none_or(|(_, p)| *p != phase) {
                                env.observe(
                                    WorldEvent::WorkflowPhase {
                                        workflow: id.clone(),
                                        phase: phase.clone(),
                                        message,
                                    }
                                    .into(),
                                );
                            }
                            written.insert(id, (rv, phase));
                        }
                        Err(error) => observe_error(&env, id, error),
                    }
                }
            }
        }
    }
}

/// Creates `events` in `namespace`; a failure is only logged by client-go's broadcaster, so
/// it changes nothing here.
async fn create_events(client: &kube::Client, namespace: &str, events: Vec<Value>) {
    if events.is_empty() {
        return;
    }
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &crate::world::argocd::events::event_resource(),
    );
    for event in events {
        if let Ok(object) = serde_json::from_value::<DynamicObject>(event) {
            let _ = api.create(&kube::api::PostParams::default(), &object).await;
        }
    }
}

fn observe_error(env: &SharedEnv, object: String, error: kube::Error) {
    env.observe(
        WorldEvent::WorkflowsError {
            object,
            error: error.to_string(),
        }
        .into(),
    );
}
