//! The simulated Argo CD against a real one (issue 17 item 2): Argo CD v3 built from its Go
//! module (`conformance/argocd/run.sh`: server, application controller and repo server on
//! loopback, against the real kube-apiserver) and orrery's stand-in
//! (`orrery_sim::world::argocd`, on the same API server in a namespace of its own) go
//! through one script — an auto-synced app is created, a commit changes its image, a commit
//! elsewhere in the repository moves the revision only, its workload turns Degraded and
//! recovers, it is deleted, and apps outside their AppProject are refused (another
//! repository, another destination, a project that does not exist) — each side with its
//! own Git repository holding the same commits
//! (a bare repository on disk for the real one, `file://`; the simulated provider for the
//! stand-in). At each checkpoint, once both sides show what Argo CD is expected to show, the
//! suite compares the Application's status and the answer to every REST call the reporters
//! make, normalised: commit SHAs become `commit-N`, times and uids are dropped, lists whose
//! order carries no meaning are sorted. A difference must be listed in [`DEVIATIONS`] with
//! its reason, and a listed deviation that no longer occurs fails the suite too.
//!
//! On the real side the test plays kube-controller-manager for the app's Deployment (a bare
//! kube-apiserver runs no controllers): it writes a rolled-out status for every new
//! generation, or a `ProgressDeadlineExceeded` one while the workload is Degraded. On the
//! simulated side the same health comes from `HealthOverrides`, the simulated workload's
//! handle.
//!
//! Without `ORRERY_ARGOCD_ADDR` (optional mode, Argo CD not built) the suite says ARGOCD
//! CONFORMANCE SKIPPED.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use orrery_sim::world::argocd::{self, application_resource, HealthOverrides};
use orrery_sim::world::git::SharedGit;
use orrery_system::env::RealEnv;
use serde_json::{json, Value};

use crate::support::{free_port, real_target};

/// The simulated side's repository URL (the real side's is a `file://` path).
const SIM_REPO: &str = "https://git.example.com/orrery/argocd-conformance";
/// The commit author both sides record.
const AUTHOR_NAME: &str = "Dev";
const AUTHOR_EMAIL: &str = "dev@example.com";
/// Commit times: 2026-01-01T00:00:00Z plus one minute per commit.
const EPOCH_S: u64 = 1_767_225_600;
/// The simulated Argo CD's API token.
const SIM_TOKEN: &str = "orrery-argocd-conformance";
/// The in-cluster destination.
const IN_CLUSTER: &str = "https://kubernetes.default.svc";
/// A repository no project of the suite permits.
const FOREIGN_REPO: &str = "https://git.example.com/elsewhere/apps.git";
/// How long a side may take to show what is expected at a checkpoint.
const SETTLE: Duration = Duration::from_secs(60);

/// Differences the suite knows of: (check, path prefix, reason). A check is named
/// `<call>` (`status`, `application`, `resource-tree`, `manifests`, …); the path is in the
/// normalised answer.
const DEVIATIONS: &[(&str, &str, &str)] = &[
    (
        "manifests",
        "/format",
        "the stand-in answers in the Codefresh fork's format ({compiledManifest, rawManifest, path, line} per manifest, research §1.6), which the faithful reporter reads; upstream Argo CD answers a list of JSON strings",
    ),
    (
        "manifests",
        "/revision",
        "the stand-in names the rendered revision; upstream's manifests answer leaves `revision` out",
    ),
    (
        "manifests",
        "/manifests/*/metadata/annotations",
        "tracking: upstream v3 tracks resources with the `argocd.argoproj.io/tracking-id` annotation (its default tracking method since 3.0); the stand-in tracks with the `app.kubernetes.io/instance` label, v2's and the fork's default, which the reporters' parent/child detection reads",
    ),
    (
        "manifests",
        "/manifests/*/metadata/labels",
        "tracking: the `app.kubernetes.io/instance` label (v2's and the fork's default) instead of v3's tracking annotation; see above",
    ),
    (
        "manifests",
        "/manifests/*/metadata/namespace",
        "upstream renders a manifest without a namespace and the controller sets the destination namespace when it applies it; the stand-in renders it with the destination namespace",
    ),
    (
        "status",
        "/resources/*/health",
        "per-resource health: Argo CD v3 keeps it in the resource tree (`resourceHealthSource: appTree`) and the server adds it to the Application it answers, but not to the stored `status.resources`; the stand-in stores it there as v2 and the fork do, and the faithful reporter reads it there from its watch",
    ),
];

/// Whether `path` lies under `pattern`: segment by segment, `*` matching any one segment.
fn under(path: &str, pattern: &str) -> bool {
    let path: Vec<&str> = path.split('/').collect();
    let pattern: Vec<&str> = pattern.split('/').collect();
    pattern.len() <= path.len()
        && pattern
            .iter()
            .zip(&path)
            .all(|(want, got)| *want == "*" || want == got)
}

/// One side of the comparison.
struct Side {
    name: &'static str,
    addr: String,
    token: String,
    apps: Api<DynamicObject>,
    /// The app's commits, oldest first: their SHAs on this side.
    shas: Vec<String>,
    repo_url: String,
}

/// What the suite found at one checkpoint for one call.
#[derive(Debug)]
struct Difference {
    check: String,
    path: String,
    real: Value,
    simulated: Value,
}

impl Side {
    /// `value` with this side's commit SHAs named `commit-N` (N from 1) and its repository
    /// URL named `repo`.
    fn normalise(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => {
                if let Some(i) = self.shas.iter().position(|sha| sha == s) {
                    return json!(format!("commit-{}", i + 1));
                }
                if *s == self.repo_url {
                    return json!("repo");
                }
                value.clone()
            }
            Value::Array(items) => Value::Array(items.iter().map(|v| self.normalise(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.normalise(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// `GET path` with this side's token: (status, JSON body or `null`).
    async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        use http_body_util::{BodyExt, Full};
        let env: orrery_system::env::SharedEnv = Arc::new(RealEnv::new("argocd-probe"));
        let client =
            orrery_system::env::http::client::<Full<bytes::Bytes>>(env, Duration::from_secs(30));
        let mut request = http::Request::get(format!("http://{}{path}", self.addr));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(bytes::Bytes::new()))
            .expect("a request");
        let response = client
            .request(request)
            .await
            .unwrap_or_else(|e| panic!("{}: GET {path}: {e}", self.name));
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}

/// The Kubernetes Events recorded about `app` on `side`, oldest first (their names end in
/// the time they were made), as what they say: reason, type, message (commit SHAs named
/// `commit-N`), source, annotations, the involved object's kind, API version and name, the
/// count, and whether the name is `<app>.<hex>`. Left out, as what the stand-in models
/// otherwise (docs/components/argocd.md): sync-status changes (the stand-in here folds a sync
/// into one write, no `OutOfSync` before `Synced`, where the real one writes the operation,
/// its end, then the new status), and health changes from or to no status, `Missing` or
/// `Progressing` (the stand-in's health is the workload's from the start; a real rollout
/// passes through them). Operations, and health between `Healthy` and `Degraded`, are compared.
async fn events_view(client: &kube::Client, side: &Side, app: &str) -> Value {
    use k8s_openapi::api::core::v1::Event;
    let events: Api<Event> = Api::namespaced(client.clone(), &side_namespace(side));
    let params = kube::api::ListParams::default().fields(&format!("involvedObject.name={app}"));
    let mut listed = events
        .list(&params)
        .await
        .unwrap_or_else(|e| panic!("{}: list events: {e}", side.name))
        .items;
    listed.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let named = |text: &str| {
        side.shas
            .iter()
            .enumerate()
            .fold(text.to_string(), |text, (i, sha)| {
                text.replace(sha.as_str(), &format!("commit-{}", i + 1))
            })
    };
    let view: Vec<Value> = listed
        .iter()
        .filter(|e| {
            let message = e.message.as_deref().unwrap_or("");
            let transient = |status: &str| matches!(status.trim(), "" | "Missing" | "Progressing");
            let health = message
                .strip_prefix("Updated health status:")
                .and_then(|change| change.split_once("->"))
                .is_some_and(|(from, to)| transient(from) || transient(to));
            !message.starts_with("Updated sync status:") && !health
        })
        .map(|e| {
            let name = e.metadata.name.clone().unwrap_or_default();
            let suffix = name.strip_prefix(&format!("{app}.")).unwrap_or("");
            json!({
                "reason": e.reason,
                "type": e.type_,
                "message": named(e.message.as_deref().unwrap_or("")),
                "source": e.source.as_ref().and_then(|s| s.component.clone()),
                "annotations": e.metadata.annotations,
                "involvedObject": {
                    "kind": e.involved_object.kind,
                    "apiVersion": e.involved_object.api_version,
                    "name": e.involved_object.name,
                },
                "count": e.count,
                "named <app>.<hex>": !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_hexdigit()),
            })
        })
        .collect();
    Value::Array(view)
}

/// The real side's Git repository: a bare repository and a work tree that pushes to it.
struct RealRepo {
    bare: std::path::PathBuf,
    work: std::path::PathBuf,
}

impl RealRepo {
    fn new(dir: &std::path::Path) -> RealRepo {
        let bare = dir.join("repo.git");
        let work = dir.join("work");
        git(dir, &["init", "-q", "--bare", "-b", "main", "repo.git"], 0);
        git(dir, &["init", "-q", "-b", "main", "work"], 0);
        git(
            &work,
            &["remote", "add", "origin", &bare.display().to_string()],
            0,
        );
        RealRepo { bare, work }
    }

    /// Writes `files`, commits them as commit number `n` and pushes; the commit's SHA.
    fn commit(&self, n: u64, message: &str, files: &BTreeMap<String, String>) -> String {
        for (path, content) in files {
            let file = self.work.join(path);
            std::fs::create_dir_all(file.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&file, content).expect("write a file");
        }
        git(&self.work, &["add", "-A"], n);
        git(&self.work, &["commit", "-q", "-m", message], n);
        git(&self.work, &["push", "-q", "origin", "HEAD:main"], n);
        git(&self.work, &["rev-parse", "HEAD"], n)
            .trim()
            .to_string()
    }
}

/// Runs `git args` in `dir` as the suite's author at commit `n`'s time; its stdout.
fn git(dir: &std::path::Path, args: &[&str], n: u64) -> String {
    let date = format!("{} +0000", EPOCH_S + 60 * n);
    let output = std::process::Command::new("git")
        .args(["-c", &format!("user.name={AUTHOR_NAME}")])
        .args(["-c", &format!("user.email={AUTHOR_EMAIL}")])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_DATE", &date)
        .output()
        .expect("run git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The app's files at version `image`.
fn deployment(app: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {app}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {app}}}\n  template:\n    metadata:\n      labels: {{app: {app}}}\n    spec:\n      containers:\n      - name: {app}\n        image: {image}\n"
    )
}

fn service(app: &str) -> String {
    format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: {app}\nspec:\n  selector: {{app: {app}}}\n  ports:\n  - port: 80\n")
}

/// The health the real side's stand-in for kube-controller-manager writes.
#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Healthy,
    Degraded,
}

/// Plays kube-controller-manager for the Deployments in `namespace` until aborted: each new
/// generation gets a rolled-out status, or a `ProgressDeadlineExceeded` one while `mode`
/// is Degraded.
async fn deployment_controller(
    client: kube::Client,
    namespace: String,
    mode: Arc<Mutex<Workload>>,
) {
    let api: Api<Deployment> = Api::namespaced(client, &namespace);
    let mut written: BTreeMap<String, (i64, bool)> = BTreeMap::new();
    loop {
        let degraded = *mode.lock().expect("mode lock") == Workload::Degraded;
        if let Ok(list) = api.list(&ListParams::default()).await {
            for deployment in list.items {
                let name = deployment.metadata.name.clone().unwrap_or_default();
                let generation = deployment.metadata.generation.unwrap_or(0);
                if written.get(&name) == Some(&(generation, degraded)) {
                    continue;
                }
                let status = if degraded {
                    json!({"status": {"observedGeneration": generation, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 0, "unavailableReplicas": 1,
                        "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet has timed out progressing."}]}})
                } else {
                    json!({"status": {"observedGeneration": generation, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": null,
                        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."},
                                       {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "message": "ReplicaSet has successfully progressed."}]}})
                };
                if api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .is_ok()
                {
                    written.insert(name, (generation, degraded));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The part of an Application's status the reporters read, normalised.
fn status_view(side: &Side, app: &Value) -> Value {
    let status = side.normalise(&app["status"]);
    let text = |pointer: &str| status.pointer(pointer).cloned().unwrap_or(Value::Null);
    let mut resources: Vec<Value> = status["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            json!({
                "group": r.get("group").cloned().unwrap_or(json!("")),
                "version": r["version"], "kind": r["kind"], "namespace": r["namespace"], "name": r["name"],
                "status": r["status"], "health": r.pointer("/health/status").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    resources.sort_by_key(|r| r.to_string());
    let mut conditions: Vec<Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["type"].clone())
        .collect();
    conditions.sort_by_key(|c| c.to_string());
    json!({
        "sync": {"status": text("/sync/status"), "revision": text("/sync/revision")},
        "health": text("/health/status"),
        "operationState": {
            "phase": text("/operationState/phase"),
            "automated": text("/operationState/operation/initiatedBy/automated"),
            "syncResult.revision": text("/operationState/syncResult/revision"),
        },
        "history": status["history"].as_array().into_iter().flatten().map(|h| h["revision"].clone()).collect::<Vec<_>>(),
        "resources": resources,
        "conditions": conditions,
    })
}

/// The resource tree's nodes: identity and health, sorted.
fn tree_view(side: &Side, answer: &Value) -> Value {
    let answer = side.normalise(answer);
    let mut nodes: Vec<Value> = answer["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            json!({
                "group": n.get("group").cloned().unwrap_or(json!("")),
                "version": n["version"], "kind": n["kind"], "namespace": n["namespace"], "name": n["name"],
                "health": n.pointer("/health/status").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    nodes.sort_by_key(|n| n.to_string());
    json!({"nodes": nodes})
}

/// The manifests answer: each manifest parsed (a JSON string upstream, the fork's
/// `compiledManifest` object in the stand-in), sorted by kind and name.
fn manifests_view(side: &Side, answer: &Value) -> Value {
    let answer = side.normalise(answer);
    let entries = answer["manifests"].as_array().cloned().unwrap_or_default();
    let format = match entries.first() {
        Some(Value::String(_)) => "JSON strings",
        Some(Value::Object(_)) => "objects",
        _ => "none",
    };
    let mut manifests: Vec<Value> = entries
        .iter()
        .filter_map(|m| match m {
            Value::String(s) => serde_json::from_str(s).ok(),
            Value::Object(_) => m["compiledManifest"]
                .as_str()
                .and_then(|s| serde_json::from_str(s).ok()),
            _ => None,
        })
        .collect();
    manifests.sort_by_key(|m| format!("{} {}", m["kind"], m["metadata"]["name"]));
    json!({
        "format": format,
        "manifests": manifests,
        "revision": answer.get("revision").cloned().unwrap_or(Value::Null),
        "applicationVersions": answer.get("applicationVersions").cloned().unwrap_or(Value::Null),
    })
}

/// A live resource's identity and what the reporters forward of it.
fn resource_view(side: &Side, answer: &Value) -> Value {
    let manifest: Value = answer["manifest"]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null);
    let manifest = side.normalise(&manifest);
    let images: Vec<Value> = manifest
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| c["image"].clone())
        .collect();
    json!({
        "apiVersion": manifest["apiVersion"], "kind": manifest["kind"],
        "name": manifest["metadata"]["name"], "namespace": manifest["metadata"]["namespace"],
        "images": images,
    })
}

/// `view` with the answer's HTTP status, so two failed answers never compare as identical
/// views of nothing.
fn with_http(status: u16, mut view: Value) -> Value {
    view["http"] = json!(status);
    view
}

/// The checkpoint-6 row comparing two refusals: `view` of each side's normalised answer.
fn refusal_row(
    check: &str,
    label: &str,
    (real, (a_status, a)): (&Side, (u16, Value)),
    (sim, (b_status, b)): (&Side, (u16, Value)),
    view: fn(u16, &Value) -> Value,
) -> Row {
    let mut found = Vec::new();
    diff(
        check,
        "",
        &view(a_status, &real.normalise(&a)),
        &view(b_status, &sim.normalise(&b)),
        &mut found,
    );
    ("6. deleted".into(), label.into(), found)
}

/// An error answer: HTTP status, gRPC code and message.
fn error_view(status: u16, answer: &Value) -> Value {
    json!({"http": status, "code": answer["code"], "message": answer["message"]})
}

/// Every difference between `real` and `simulated` below `path`.
fn diff(check: &str, path: &str, real: &Value, simulated: &Value, out: &mut Vec<Difference>) {
    match (real, simulated) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let null = Value::Null;
                diff(
                    check,
                    &format!("{path}/{key}"),
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(check, &format!("{path}/{i}"), x, y, out);
            }
        }
        _ if real != simulated => out.push(Difference {
            check: check.to_string(),
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
            real: real.clone(),
            simulated: simulated.clone(),
        }),
        _ => {}
    }
}

/// The reason a difference is known, if it is.
fn known(difference: &Difference) -> Option<&'static str> {
    DEVIATIONS
        .iter()
        .find(|(check, prefix, _)| *check == difference.check && under(&difference.path, prefix))
        .map(|(_, _, reason)| *reason)
}

/// One checkpoint's verdicts: (checkpoint, check, differences).
type Row = (String, String, Vec<Difference>);

/// Waits until `expected` holds on `side`'s status view; the view it settled on, or the
/// last one with the reason it did not settle.
async fn settle(side: &Side, app: &str, expected: &Value) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let view = match side.apps.get_opt(app).await {
            Ok(Some(object)) => {
                status_view(side, &serde_json::to_value(&object).unwrap_or_default())
            }
            Ok(None) => json!("absent"),
            Err(e) => json!(format!("error: {e}")),
        };
        let mut misses = Vec::new();
        if expected.is_string() {
            diff("", "", expected, &view, &mut misses);
        } else if let Some(map) = expected.as_object() {
            for (key, want) in map {
                diff("", &format!("/{key}"), want, &view[key], &mut misses);
            }
        }
        if misses.is_empty() {
            return Ok(view);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "{}: not within {SETTLE:?}: {}",
                side.name,
                misses
                    .iter()
                    .map(|m| format!("{} wanted {} got {}", m.path, m.real, m.simulated))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Compares every call the reporters make at one checkpoint.
async fn compare_calls(real: &Side, sim: &Side, app: &str, rows: &mut Vec<Row>, at: &str) {
    let mut push = |check: &str, label: &str, a: Value, b: Value| {
        let mut found = Vec::new();
        diff(check, "", &a, &b, &mut found);
        rows.push((at.to_string(), label.to_string(), found));
    };
    let query = |side: &Side| format!("appNamespace={}&project=default", side_namespace(side));
    // The Application itself.
    let (a, b) = (
        real.get(
            &format!(
                "/api/v1/applications/{app}?appNamespace={}",
                side_namespace(real)
            ),
            Some(&real.token),
        )
        .await,
        sim.get(
            &format!(
                "/api/v1/applications/{app}?appNamespace={}",
                side_namespace(sim)
            ),
            Some(&sim.token),
        )
        .await,
    );
    if a.0 != 200 || b.0 != 200 {
        push(
            "application",
            "application",
            error_view(a.0, &a.1),
            error_view(b.0, &b.1),
        );
        return;
    }
    push(
        "application",
        "application",
        status_view(real, &a.1),
        status_view(sim, &b.1),
    );
    let status = a.1["status"].clone();
    let sim_status = b.1["status"].clone();
    // The resource tree.
    let (ta, tb) = (
        real.get(
            &format!("/api/v1/applications/{app}/resource-tree?{}", query(real)),
            Some(&real.token),
        )
        .await,
        sim.get(
            &format!("/api/v1/applications/{app}/resource-tree?{}", query(sim)),
            Some(&sim.token),
        )
        .await,
    );
    push(
        "resource-tree",
        "resource-tree",
        json!({"http": ta.0, "tree": tree_view(real, &ta.1)}),
        json!({"http": tb.0, "tree": tree_view(sim, &tb.1)}),
    );
    // Manifests at the target and at the synced revision.
    let (ma, mb) = (
        real.get(
            &format!("/api/v1/applications/{app}/manifests?{}", query(real)),
            Some(&real.token),
        )
        .await,
        sim.get(
            &format!("/api/v1/applications/{app}/manifests?{}", query(sim)),
            Some(&sim.token),
        )
        .await,
    );
    push(
        "manifests",
        "manifests",
        with_http(ma.0, manifests_view(real, &ma.1)),
        with_http(mb.0, manifests_view(sim, &mb.1)),
    );
    let synced = |s: &Value| {
        s.pointer("/operationState/syncResult/revision")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (ra, rb) = (synced(&status), synced(&sim_status));
    if !ra.is_empty() && !rb.is_empty() {
        let (ma, mb) = (
            real.get(
                &format!(
                    "/api/v1/applications/{app}/manifests?{}&revision={ra}",
                    query(real)
                ),
                Some(&real.token),
            )
            .await,
            sim.get(
                &format!(
                    "/api/v1/applications/{app}/manifests?{}&revision={rb}",
                    query(sim)
                ),
                Some(&sim.token),
            )
            .await,
        );
        push(
            "manifests",
            "manifests at the synced revision",
            with_http(ma.0, manifests_view(real, &ma.1)),
            with_http(mb.0, manifests_view(sim, &mb.1)),
        );
        let (ga, gb) = (
            real.get(
                &format!(
                    "/api/v1/applications/{app}/revisions/{ra}/metadata?{}&sourceIndex=0",
                    query(real)
                ),
                Some(&real.token),
            )
            .await,
            sim.get(
                &format!(
                    "/api/v1/applications/{app}/revisions/{rb}/metadata?{}&sourceIndex=0",
                    query(sim)
                ),
                Some(&sim.token),
            )
            .await,
        );
        let meta = |status: u16, v: &Value| json!({"http": status, "author": v["author"], "date": v["date"], "message": v["message"]});
        push(
            "revision-metadata",
            "revision metadata of the synced revision",
            meta(ga.0, &ga.1),
            meta(gb.0, &gb.1),
        );
    }
    // Each live resource.
    for kind in [("apps", "Deployment"), ("", "Service")] {
        let path = |side: &Side| {
            format!(
                "/api/v1/applications/{app}/resource?appNamespace={}&namespace={app}&resourceName={app}&version=v1&group={}&kind={}&project=default",
                side_namespace(side), kind.0, kind.1
            )
        };
        let (la, lb) = (
            real.get(&path(real), Some(&real.token)).await,
            sim.get(&path(sim), Some(&sim.token)).await,
        );
        push(
            "resource",
            &format!("resource ({})", kind.1),
            json!({"http": la.0, "live": resource_view(real, &la.1)}),
            json!({"http": lb.0, "live": resource_view(sim, &lb.1)}),
        );
    }
}

fn side_namespace(side: &Side) -> String {
    side.apps.namespace().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Argo CD: make conformance-argocd"]
async fn the_simulated_argo_cd_answers_as_a_real_one_through_commits_health_changes_and_deletion() {
    let Ok(real_addr) = std::env::var("ORRERY_ARGOCD_ADDR") else {
        if std::env::var("ORRERY_CONFORMANCE_OPTIONAL").is_ok_and(|v| v == "1") {
            eprintln!(
                "ARGOCD CONFORMANCE SKIPPED: no ORRERY_ARGOCD_ADDR (see conformance/argocd/run.sh)"
            );
            return;
        }
        panic!("ORRERY_ARGOCD_ADDR is not set: run through conformance/argocd/run.sh (make conformance-argocd)");
    };
    let real_token = std::env::var("ORRERY_ARGOCD_TOKEN").expect("ORRERY_ARGOCD_TOKEN");
    let real_namespace =
        std::env::var("ORRERY_ARGOCD_NAMESPACE").unwrap_or_else(|_| "argocd".into());
    let version = std::env::var("ORRERY_ARGOCD_VERSION").unwrap_or_else(|_| "unknown".into());
    let app = format!("guestbook-{}", std::process::id());
    let sim_namespace = format!("orrery-argocd-{}", std::process::id());
    let target = real_target(&sim_namespace).await;
    let client = orrery_system::env::kube::client(Arc::new(RealEnv::new("suite")), &target);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [&sim_namespace, &app] {
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("a Namespace");
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
    }

    // The real side: a bare repository on disk and the kube-controller-manager stand-in.
    let dir = std::env::temp_dir().join(format!("orrery-argocd-git-{}", std::process::id()));
    drop(std::fs::remove_dir_all(&dir));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let repo = RealRepo::new(&dir);
    let mode = Arc::new(Mutex::new(Workload::Healthy));
    let controller = tokio::spawn(deployment_controller(
        client.clone(),
        app.clone(),
        mode.clone(),
    ));

    // The simulated side: the stand-in with its own Git and workload health.
    let git = SharedGit::default();
    let health = HealthOverrides::default();
    let sim_port = free_port();
    let config = argocd::controller::Config {
        reconcile_every: Duration::from_secs(10),
        namespace: sim_namespace.clone(),
        listen: format!("127.0.0.1:{sim_port}"),
        projects: argocd::projects::Projects::enforced(),
        ..Default::default()
    };
    let stand_in = tokio::spawn({
        let run = argocd::run(
            Arc::new(RealEnv::new("argocd")),
            target.clone(),
            git.clone(),
            health.clone(),
            config,
            SIM_TOKEN,
        );
        async move { drop(run.await) }
    });

    let mut real = Side {
        name: "real Argo CD",
        addr: real_addr,
        token: real_token,
        apps: Api::namespaced_with(client.clone(), &real_namespace, &application_resource()),
        shas: Vec::new(),
        repo_url: format!("file://{}", repo.bare.display()),
    };
    let mut sim = Side {
        name: "simulated Argo CD",
        addr: format!("127.0.0.1:{sim_port}"),
        token: SIM_TOKEN.into(),
        apps: Api::namespaced_with(client.clone(), &sim_namespace, &application_resource()),
        shas: Vec::new(),
        repo_url: SIM_REPO.into(),
    };
    let commit =
        |real: &mut Side, sim: &mut Side, message: &str, files: BTreeMap<String, String>| {
            let n = real.shas.len() as u64 + 1;
            real.shas.push(repo.commit(n, message, &files));
            let sha = git.lock().commit(
                SIM_REPO,
                &format!("{AUTHOR_NAME} <{AUTHOR_EMAIL}>"),
                message,
                (EPOCH_S + 60 * n) * 1000,
                files,
            );
            sim.shas.push(sha);
        };
    let path = format!("apps/{app}");
    let file = |name: &str, content: String| (format!("{path}/{name}"), content);

    let mut rows: Vec<Row> = Vec::new();
    let mut unsettled: Vec<String> = Vec::new();
    let checkpoint = |at: &str, expected: Value| (at.to_string(), expected);

    // 1. An auto-synced app at commit 1.
    commit(
        &mut real,
        &mut sim,
        "guestbook v1",
        BTreeMap::from([
            file("deployment.yaml", deployment(&app, "guestbook:v1")),
            file("service.yaml", service(&app)),
        ]),
    );
    for side in [&real, &sim] {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": app, "namespace": side_namespace(side)},
            "spec": {
                "project": "default",
                "source": {"repoURL": side.repo_url, "path": path, "targetRevision": "main"},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": app},
                "syncPolicy": {"automated": {}},
            }
        }))
        .expect("an Application");
        side.apps
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{}: create the app: {e}", side.name));
    }
    let synced = |revision: &str, history: &[&str], health: &str| {
        json!({
            "sync": {"status": "Synced", "revision": revision},
            "health": health,
            "history": history,
        })
    };
    let mut steps: Vec<(String, Value)> = vec![checkpoint(
        "1. created, auto-synced at commit 1, rolled out",
        synced("commit-1", &["commit-1"], "Healthy"),
    )];
    run_checkpoint(&real, &sim, &app, &steps[0], &mut rows, &mut unsettled).await;

    // 2. Commit 2 changes the image; a refresh is asked for.
    commit(
        &mut real,
        &mut sim,
        "guestbook v2",
        BTreeMap::from([file("deployment.yaml", deployment(&app, "guestbook:v2"))]),
    );
    refresh(&real, &sim, &app).await;
    steps.push(checkpoint(
        "2. commit 2 changes the image: synced again",
        synced("commit-2", &["commit-1", "commit-2"], "Healthy"),
    ));
    run_checkpoint(&real, &sim, &app, &steps[1], &mut rows, &mut unsettled).await;

    // 3. Commit 3 touches another path only: the compared revision moves, nothing is synced.
    commit(
        &mut real,
        &mut sim,
        "another app",
        BTreeMap::from([(
            "apps/another/deployment.yaml".to_string(),
            deployment("another", "another:v1"),
        )]),
    );
    refresh(&real, &sim, &app).await;
    steps.push(checkpoint(
        "3. commit 3 elsewhere in the repository: revision moves, no sync",
        synced("commit-3", &["commit-1", "commit-2"], "Healthy"),
    ));
    run_checkpoint(&real, &sim, &app, &steps[2], &mut rows, &mut unsettled).await;

    // 4. The workload turns Degraded, 5. and recovers.
    *mode.lock().expect("mode lock") = Workload::Degraded;
    health.set(&app, "Degraded");
    steps.push(checkpoint(
        "4. the workload turns Degraded",
        synced("commit-3", &["commit-1", "commit-2"], "Degraded"),
    ));
    run_checkpoint(&real, &sim, &app, &steps[3], &mut rows, &mut unsettled).await;
    *mode.lock().expect("mode lock") = Workload::Healthy;
    health.set(&app, "Healthy");
    steps.push(checkpoint(
        "5. the workload recovers",
        synced("commit-3", &["commit-1", "commit-2"], "Healthy"),
    ));
    run_checkpoint(&real, &sim, &app, &steps[4], &mut rows, &mut unsettled).await;

    // 5b. The Kubernetes Events each controller recorded about the app through 1–5.
    let (a, b) = (
        events_view(&client, &real, &app).await,
        events_view(&client, &sim, &app).await,
    );
    let mut found = Vec::new();
    diff("events", "", &a, &b, &mut found);
    rows.push((
        "5b. the Events recorded through 1–5".into(),
        "events".into(),
        found,
    ));

    // 6. The app is deleted: both answer 404.
    for side in [&real, &sim] {
        side.apps
            .delete(&app, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{}: delete the app: {e}", side.name));
    }
    for side in [&real, &sim] {
        if let Err(e) = settle(side, &app, &json!("absent")).await {
            unsettled.push(format!("6. deleted: {e}"));
        }
    }
    let (a, b) = (until_gone(&real, &app).await, until_gone(&sim, &app).await);
    rows.push(refusal_row(
        "application",
        "application without its project (403)",
        (&real, a),
        (&sim, b),
        error_view,
    ));
    // With its project named, the RBAC check runs first and a missing app is a 404.
    let path = |side: &Side| {
        format!(
            "/api/v1/applications/{app}/resource-tree?appNamespace={}&project=default",
            side_namespace(side)
        )
    };
    let (a, b) = (
        real.get(&path(&real), Some(&real.token)).await,
        sim.get(&path(&sim), Some(&sim.token)).await,
    );
    rows.push(refusal_row(
        "resource-tree",
        "resource-tree with its project (404)",
        (&real, a),
        (&sim, b),
        error_view,
    ));
    // And no token: both refuse.
    let path = |side: &Side| {
        format!(
            "/api/v1/applications/{app}?appNamespace={}",
            side_namespace(side)
        )
    };
    let (a, b) = (
        real.get(&path(&real), None).await,
        sim.get(&path(&sim), None).await,
    );
    rows.push(refusal_row(
        "application",
        "application without a token (401)",
        (&real, a),
        (&sim, b),
        |status, answer| json!({"http": status, "code": answer["code"]}),
    ));

    // 7. Projects: an AppProject permitting the side's repository and the app's namespace
    // only; an app from another repository, one deploying elsewhere and one naming a
    // project that does not exist are refused with Argo CD's condition.
    let project = format!("orrery-{}", std::process::id());
    for side in [&real, &sim] {
        create_project(
            &client,
            side,
            &project,
            json!({
                "sourceRepos": [side.repo_url],
                "destinations": [{"server": IN_CLUSTER, "namespace": app}],
            }),
        )
        .await;
    }
    let absent = format!("absent-{}", std::process::id());
    let cases = [
        ("repository", &project, Some(FOREIGN_REPO), app.as_str()),
        ("destination", &project, None, "kube-system"),
        ("missing project", &absent, None, app.as_str()),
    ];
    for (i, (what, project, repo, namespace)) in cases.into_iter().enumerate() {
        let name = format!("{app}-refused-{i}");
        for side in [&real, &sim] {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": side_namespace(side)},
                "spec": {
                    "project": project,
                    "source": {"repoURL": repo.unwrap_or(&side.repo_url), "path": format!("apps/{app}"), "targetRevision": "main"},
                    "destination": {"server": IN_CLUSTER, "namespace": namespace},
                    "syncPolicy": {"automated": {}},
                }
            }))
            .expect("an Application");
            side.apps
                .create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("{}: create {name}: {e}", side.name));
        }
        let mut views = Vec::new();
        for side in [&real, &sim] {
            match refused(side, &name).await {
                Ok(view) => views.push(view),
                Err(e) => {
                    unsettled.push(format!("7. {what}: {e}"));
                    views.push(Value::Null);
                }
            }
            drop(side.apps.delete(&name, &DeleteParams::default()).await);
        }
        let mut found = Vec::new();
        diff("project", "", &views[0], &views[1], &mut found);
        rows.push((
            "7. projects".into(),
            format!("an app outside its project ({what})"),
            found,
        ));
    }

    // 8. Resource kinds: a project that refuses Services (namespaceResourceBlacklist) and an
    // auto-synced app whose path holds a Deployment and a Service. Each attempt fails
    // validation before applying anything (the Service's result SyncFailed), the Service is
    // Unknown, nothing is deployed, and the automated sync is retried with backoff —
    // 8b. so once the project permits Services, a retry deploys the app.
    let kinds = format!("{app}-kinds");
    let kinds_controller = tokio::spawn(deployment_controller(
        client.clone(),
        kinds.clone(),
        mode.clone(),
    ));
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": kinds}})).expect("a Namespace");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("create namespace {kinds}: {e}"));
    commit(
        &mut real,
        &mut sim,
        "an app with a Service",
        BTreeMap::from([
            (
                format!("apps/{kinds}/deployment.yaml"),
                deployment(&kinds, "kinds:v1"),
            ),
            (format!("apps/{kinds}/service.yaml"), service(&kinds)),
        ]),
    );
    let kinds_project = format!("orrery-kinds-{}", std::process::id());
    for side in [&real, &sim] {
        create_project(
            &client,
            side,
            &kinds_project,
            json!({
                "sourceRepos": [side.repo_url],
                "destinations": [{"server": IN_CLUSTER, "namespace": kinds}],
                "namespaceResourceBlacklist": [{"group": "", "kind": "Service"}],
            }),
        )
        .await;
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": kinds, "namespace": side_namespace(side)},
            "spec": {
                "project": kinds_project,
                "source": {"repoURL": side.repo_url, "path": format!("apps/{kinds}"), "targetRevision": "main"},
                "destination": {"server": IN_CLUSTER, "namespace": kinds},
                "syncPolicy": {"automated": {}},
            }
        }))
        .expect("an Application");
        side.apps
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{}: create {kinds}: {e}", side.name));
    }
    let service_status = |want: &'static str| {
        move |view: &Value| {
            view["status"]["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["kind"] == "Service" && r["status"] == want)
        }
    };
    let mut views = Vec::new();
    for side in [&real, &sim] {
        views.push(sync_failed(side, &kinds, service_status("Unknown")).await);
    }
    kinds_row(
        &mut rows,
        &mut unsettled,
        "8. a kind the project refuses: every attempt fails, nothing deployed",
        views,
    );
    // 8b. The project permits Services again; a refresh compares anew.
    patch_project(
        &client,
        [&real, &sim],
        &kinds_project,
        json!({"namespaceResourceBlacklist": null}),
    )
    .await;
    let expected = synced("commit-4", &["commit-4"], "Healthy");
    let mut views = Vec::new();
    for side in [&real, &sim] {
        views.push(settle(side, &kinds, &expected).await);
    }
    kinds_row(
        &mut rows,
        &mut unsettled,
        "8b. the project permits the kind: a retry deploys the app",
        views,
    );
    // 8c. Deny entries as Argo CD 3.2's code reads them (argo-cd#21264): the project's only
    // repository entry names another repository, and the deployed app is refused; then
    // that entry becomes a deny entry, and the app is permitted again — a deny entry
    // permits every repository it does not name, although the documentation asks an allow
    // entry to permit it too (the GitOps operator's flaw builds on this). A project change
    // requeues no app (v3.2's project informer only drops its cache): each change is
    // followed by a refresh, as a user would ask for one.
    patch_project(
        &client,
        [&real, &sim],
        &kinds_project,
        json!({"sourceRepos": [FOREIGN_REPO]}),
    )
    .await;
    refresh(&real, &sim, &kinds).await;
    let mut views = Vec::new();
    for side in [&real, &sim] {
        match refused(side, &kinds).await {
            // The message names the side's own repository (each side has its own URL).
            Ok(view) => views.push(
                serde_json::from_str(
                    &view
                        .to_string()
                        .replace(&side.repo_url, "<the side's repository>"),
                )
                .expect("a view"),
            ),
            Err(e) => {
                unsettled.push(format!("8c. only another repository: {e}"));
                views.push(Value::Null);
            }
        }
    }
    let mut found = Vec::new();
    diff("project", "", &views[0], &views[1], &mut found);
    rows.push((
        "8c. projects".into(),
        "the app's repository no longer permitted".into(),
        found,
    ));
    patch_project(
        &client,
        [&real, &sim],
        &kinds_project,
        json!({"sourceRepos": [format!("!{FOREIGN_REPO}")]}),
    )
    .await;
    refresh(&real, &sim, &kinds).await;
    let mut views = Vec::new();
    for side in [&real, &sim] {
        views.push(
            settle(
                side,
                &kinds,
                &json!({
                    "sync": {"status": "Synced", "revision": "commit-4"},
                    "health": "Healthy",
                    "conditions": [],
                }),
            )
            .await,
        );
    }
    kinds_row(
        &mut rows,
        &mut unsettled,
        "8d. a deny entry alone permits every repository it does not name",
        views,
    );
    for side in [&real, &sim] {
        drop(side.apps.delete(&kinds, &DeleteParams::default()).await);
    }
    kinds_controller.abort();

    controller.abort();
    stand_in.abort();
    drop(std::fs::remove_dir_all(&dir));

    // The verdicts.
    let mut unknown = Vec::new();
    let mut seen: std::collections::BTreeSet<usize> = Default::default();
    let mut lines = Vec::new();
    for (at, check, differences) in &rows {
        let mut known_count = 0;
        for d in differences {
            match DEVIATIONS
                .iter()
                .position(|(c, p, _)| *c == d.check && under(&d.path, p))
            {
                Some(i) => {
                    known_count += 1;
                    seen.insert(i);
                }
                None => unknown.push(format!(
                    "{at} · {check} · {}: real {} simulated {}",
                    d.path, d.real, d.simulated
                )),
            }
        }
        let unknown_here = differences.len() - known_count;
        let verdict = match (unknown_here, known_count) {
            (0, 0) => "identical".to_string(),
            (0, n) => format!(
                "matches, {n} known deviation{}",
                if n == 1 { "" } else { "s" }
            ),
            (n, _) => format!("DIFFERS in {n} place{}", if n == 1 { "" } else { "s" }),
        };
        lines.push(format!("| {at} | `{check}` | {verdict} |"));
        for d in differences.iter().filter(|d| known(d).is_none()) {
            println!(
                "argocd: UNKNOWN {at} · {check} · {}: real {} simulated {}",
                d.path, d.real, d.simulated
            );
        }
    }
    let stale: Vec<String> = DEVIATIONS
        .iter()
        .enumerate()
        .filter(|(i, _)| !seen.contains(i))
        .map(|(_, (c, p, _))| format!("{c} {p}"))
        .collect();

    let mut body = format!(
        "## Argo CD: the simulated Argo CD against Argo CD {version}\n\nGenerated by `make conformance-argocd` (`conformance/tests/conformance/argocd.rs`): a real Argo CD (server, application controller, repo server built from the pinned Go module) and orrery's stand-in go through the same script on one kube-apiserver, each with a Git repository holding the same commits; at each checkpoint every call the reporters make is compared, normalised (commit SHAs as `commit-N`, times and uids dropped, unordered lists sorted).\n\n| checkpoint | call | verdict |\n|---|---|---|\n"
    );
    for line in &lines {
        body.push_str(line);
        body.push('\n');
    }
    body.push_str("\n### Known deviations\n\n| call | path | reason |\n|---|---|---|\n");
    for (check, prefix, reason) in DEVIATIONS {
        body.push_str(&format!("| `{check}` | `{prefix}` | {reason} |\n"));
    }
    if unsettled.is_empty() && unknown.is_empty() && stale.is_empty() {
        orrery_conformance::report::write_section("argocd", &body)
            .expect("write reports/conformance.md");
    }
    assert!(
        unsettled.is_empty(),
        "a side did not show what Argo CD is expected to show:\n{}",
        unsettled.join("\n")
    );
    assert!(
        unknown.is_empty(),
        "differences not listed in DEVIATIONS:\n{}",
        unknown.join("\n")
    );
    assert!(
        stale.is_empty(),
        "listed deviations that no longer occur (remove them): {stale:?}"
    );
    println!(
        "argocd: {} checks at {} checkpoints against Argo CD {version}",
        rows.len(),
        steps.len() + 1
    );
}

/// Merges `spec` into the AppProject `name`'s spec on both sides.
async fn patch_project(client: &kube::Client, sides: [&Side; 2], name: &str, spec: Value) {
    for side in sides {
        let projects: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &side_namespace(side),
            &argocd::projects::app_project_resource(),
        );
        projects
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": spec })),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: patch the project {name}: {e}", side.name));
    }
}

/// Creates the AppProject `name` with `spec` in `side`'s Argo CD namespace.
async fn create_project(client: &kube::Client, side: &Side, name: &str, spec: Value) {
    let projects: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &side_namespace(side),
        &argocd::projects::app_project_resource(),
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": name, "namespace": side_namespace(side)},
        "spec": spec,
    }))
    .expect("an AppProject");
    projects
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("{}: create the project {name}: {e}", side.name));
}

/// Waits until `app`'s automated sync failed an attempt (an operation Failed, or Running
/// with a retry scheduled) and `ready` holds of its view; the view: the status as the
/// reporters read it, the operation's phase, message (the retry's number and time cut) and
/// results, the conditions' messages, all normalised (commit SHAs inside messages too).
async fn sync_failed(
    side: &Side,
    app: &str,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let object = side.apps.get_opt(app).await.ok().flatten();
        let raw = object
            .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
            .unwrap_or(Value::Null);
        let status = &raw["status"];
        let text = |s: &str| -> String {
            let mut s = s.to_string();
            for (i, sha) in side.shas.iter().enumerate() {
                s = s.replace(sha, &format!("commit-{}", i + 1));
            }
            s
        };
        let mut conditions: Vec<Value> = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!({"type": c["type"], "message": text(c["message"].as_str().unwrap_or(""))}))
            .collect();
        conditions.sort_by_key(|c| c.to_string());
        let mut results: Vec<Value> = status
            .pointer("/operationState/syncResult/resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| json!({"kind": r["kind"], "name": r["name"], "status": r["status"], "message": r["message"]}))
            .collect();
        results.sort_by_key(|r| r.to_string());
        let message = status
            .pointer("/operationState/message")
            .and_then(Value::as_str)
            .unwrap_or("");
        // "… Retrying attempt #3 at 7:02PM." — the number and time depend on the moment.
        let message = match message.split_once(". Retrying attempt #") {
            Some((head, _)) => format!("{head}. Retrying attempt"),
            None => message.to_string(),
        };
        let view = json!({
            "status": status_view(side, &raw),
            "operation": {
                "phase": status.pointer("/operationState/phase"),
                "message": message,
                "results": results,
            },
            "conditions": conditions,
        });
        let failed = view["operation"]["phase"] == "Failed"
            || (view["operation"]["phase"] == "Running" && message.ends_with("Retrying attempt"));
        if failed && ready(&view) {
            return Ok(view);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "{}: {app}'s failed sync not shown within {SETTLE:?}: {view}",
                side.name
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One resource-kinds checkpoint's row: the two sides' views compared (or why one is
/// missing).
fn kinds_row(
    rows: &mut Vec<Row>,
    unsettled: &mut Vec<String>,
    at: &str,
    views: Vec<Result<Value, String>>,
) {
    let mut found = Vec::new();
    match (&views[0], &views[1]) {
        (Ok(a), Ok(b)) => diff("status", "", a, b, &mut found),
        _ => {
            for e in views.iter().filter_map(|v| v.as_ref().err()) {
                unsettled.push(format!("{at}: {e}"));
            }
            return;
        }
    }
    rows.push((at.into(), "resource kinds".into(), found));
}

/// Waits until Argo CD refuses `app` for its project (a project condition on it, and sync
/// and health set by a refresh): its sync and health and the conditions (type and
/// message), normalised.
async fn refused(side: &Side, app: &str) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let status = match side.apps.get_opt(app).await {
            Ok(Some(object)) => object.data.get("status").cloned().unwrap_or(Value::Null),
            _ => Value::Null,
        };
        let mut conditions: Vec<Value> = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!({"type": c["type"], "message": c["message"]}))
            .collect();
        conditions.sort_by_key(|c| c.to_string());
        // The refresh's verdict, not only the condition: a real controller's informer
        // writes a missing project's condition alone before the refresh sets sync and health.
        let refreshed = status["sync"]["status"].is_string();
        if refreshed
            && conditions.iter().any(|c| {
                matches!(
                    c["type"].as_str(),
                    Some("InvalidSpecError" | "UnknownError")
                )
            })
        {
            return Ok(side.normalise(&json!({
                "sync": status["sync"]["status"],
                "health": status["health"]["status"],
                "conditions": conditions,
            })));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "{}: {app} not refused within {SETTLE:?}: {status}",
                side.name
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `GET` of the deleted app (no project named) until it is refused (a server's cache lags a
/// deletion a moment).
async fn until_gone(side: &Side, app: &str) -> (u16, Value) {
    let path = format!(
        "/api/v1/applications/{app}?appNamespace={}",
        side_namespace(side)
    );
    for _ in 0..40 {
        let answer = side.get(&path, Some(&side.token)).await;
        if answer.0 == 403 || answer.0 == 404 {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    side.get(&path, Some(&side.token)).await
}

/// Asks both sides for a refresh (the `argocd.argoproj.io/refresh` annotation).
async fn refresh(real: &Side, sim: &Side, app: &str) {
    let patch = json!({"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}});
    for side in [real, sim] {
        side.apps
            .patch(app, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("{}: refresh: {e}", side.name));
    }
}

/// Waits until both sides show `expected`, compares their status views, then every call.
async fn run_checkpoint(
    real: &Side,
    sim: &Side,
    app: &str,
    (at, expected): &(String, Value),
    rows: &mut Vec<Row>,
    unsettled: &mut Vec<String>,
) {
    let (a, b) = (
        settle(real, app, expected).await,
        settle(sim, app, expected).await,
    );
    let (a, b) = match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            for e in [a.err(), b.err()].into_iter().flatten() {
                unsettled.push(format!("{at}: {e}"));
            }
            return;
        }
    };
    let mut found = Vec::new();
    diff("status", "", &a, &b, &mut found);
    rows.push((at.clone(), "status".into(), found));
    compare_calls(real, sim, app, rows, at).await;
}
