//! The Codefresh Runner's agent, unchanged, in real mode against a real kube-apiserver: the
//! platform's builds and agent API on loopback hands it a build's tasks; it makes the
//! build's dind claim and its engine and dind pods in a fresh namespace, the engine stand-in
//! runs the build, and the agent deletes them once it ended. No kubelet or controller
//! manager runs here, so the suite plays the one controller the cleanup waits for — the
//! pvc-protection controller, which removes `kubernetes.io/pvc-protection` from a claim
//! being deleted (envtest users do the same). Then a claim of the next build's name already
//! there: the real server's `AlreadyExists` fails the faithful build (venona's
//! `NewK8sError`, runner-research.md §1.6) and is taken as done by hardened.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch};
use kube::api::{PatchParams, PostParams};
use orrery_system::core::Variant;
use orrery_system::env::RealEnv;
use orrery_system::platform::assembly::{
    self as control_plane, ControlPlaneConfig, ControlPlaneState,
};
use orrery_system::platform::runner::{Builds, Settings, Status, Step};
use orrery_system::runtime::assembly::RuntimeConfig;
use orrery_system::runtime::runner::{self as agent, engine, volumes};
use serde_json::json;

use crate::support::{free_port, prepared, real_target, start_runtime};

const AGENT: &str = "conformance-agent";
const TOKEN: &str = "conformance-agent-token";
const WITHIN: Duration = Duration::from_secs(90);

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", kind), plural)
}

/// The names of the pods and claims in the namespace not being deleted, and the claims
/// being deleted (`deletionTimestamp` set).
async fn objects(
    pods: &Api<DynamicObject>,
    claims: &Api<DynamicObject>,
) -> (Vec<String>, Vec<String>) {
    let (mut live, mut going) = (Vec::new(), Vec::new());
    for api in [pods, claims] {
        for object in api.list(&ListParams::default()).await.expect("list").items {
            let name = object.metadata.name.clone().unwrap_or_default();
            match object.metadata.deletion_timestamp {
                None => live.push(name),
                Some(_) => going.push(name),
            }
        }
    }
    live.sort();
    going.sort();
    (live, going)
}

/// Polls `check` every 250 ms until it gives `Some`, or fails naming `what`.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What a suite runs: the platform's builds API on loopback, and the agent with the engine
/// stand-in (and, given `volumes`, the dind volume provisioner and cleaner: the node's
/// settings on the real cluster's target) in a fresh namespace `orrery-<prefix>-…`.
struct World {
    cluster: orrery_conformance::cluster::Cluster,
    ns: String,
    builds: Arc<Builds>,
    platform: tokio::task::JoinHandle<()>,
    runtime: tokio::task::JoinHandle<()>,
}

impl World {
    async fn start(
        variant: Variant,
        prefix: &str,
        volumes: Option<fn(Variant, orrery_system::env::kube::KubeTarget) -> volumes::Config>,
    ) -> World {
        let (cluster, ns) = prepared(format!(
            "orrery-{prefix}-{}-{}",
            std::process::id(),
            variant.as_str()
        ))
        .await;
        let port = free_port();
        let builds = Builds::new(
            Settings {
                namespace: ns.clone(),
                variant,
                ..Settings::default()
            },
            [(TOKEN.to_string(), AGENT.to_string())]
                .into_iter()
                .collect(),
            "trigger",
        );
        let state = ControlPlaneState {
            runner: Some(builds.clone()),
            ..Default::default()
        };
        let config = ControlPlaneConfig {
            runner: Some(format!("127.0.0.1:{port}")),
            ..Default::default()
        };
        let platform = tokio::spawn(async move {
            let env = Arc::new(RealEnv::new("platform"));
            drop(control_plane::run(env, config, state, std::future::pending()).await)
        });
        let target = real_target(&ns).await;
        let api = format!("127.0.0.1:{port}");
        let runtime = start_runtime(
            AGENT,
            RuntimeConfig {
                runner: Some(agent::Config::new(
                    variant,
                    AGENT,
                    TOKEN,
                    &api,
                    target.clone(),
                )),
                engine: Some(engine::Config {
                    volumes: volumes.is_some(),
                    ..engine::Config::new(variant, target.clone(), &api, TOKEN)
                }),
                volumes: volumes.map(|node| node(variant, target)),
                ..Default::default()
            },
        );
        World {
            cluster,
            ns,
            builds,
            platform,
            runtime,
        }
    }

    async fn stop(self) {
        self.runtime.abort();
        self.platform.abort();
        if let Err(e) = self.cluster.cleanup(&self.ns).await {
            eprintln!("warning: cleanup of {}: {e}", self.ns);
        }
    }
}

async fn suite(variant: Variant) {
    let world = World::start(variant, "runner", None).await;
    let (cluster, ns, builds) = (&world.cluster, world.ns.clone(), world.builds.clone());
    let client = cluster.client();
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &resource("Pod", "pods"));
    let claims: Api<DynamicObject> = Api::namespaced_with(
        client,
        &ns,
        &resource("PersistentVolumeClaim", "persistentvolumeclaims"),
    );
    // The first step logs: the engine, running the build it found on the real server,
    // sends every line before the build's end.
    let logging = Step {
        lines: 20,
        ..Step::new(1000, 0)
    };
    let steps = vec![logging, Step::new(1000, 0)];
    let status = |id: &str| {
        let queue = builds.lock();
        let build = queue.build(id).expect("the build exists");
        (build.status, build.reason.clone().unwrap_or_default())
    };
    let now = crate::support::unix_ms;

    // A build: its claim and pods appear, it succeeds, they are deleted.
    let first = builds
        .lock()
        .create_build("demo/build", AGENT, steps.clone(), now());
    until(
        "the build's claim and pods are made on the real server",
        || async {
            let (live, _) = objects(&pods, &claims).await;
            (live
                == [
                    format!("dind-{first}"),
                    format!("engine-{first}"),
                    format!("pvc-dind-{first}"),
                ])
            .then_some(())
        },
    )
    .await;
    let labels = pods
        .get(&format!("engine-{first}"))
        .await
        .expect("the engine pod")
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(
        labels.get(orrery_system::core::runner::BUILD_LABEL),
        Some(&first),
        "the engine pod carries its build's label"
    );
    until("the build succeeds", || async {
        (status(&first).0 == Status::Success).then_some(())
    })
    .await;
    let log = builds
        .lock()
        .log(&first, 0)
        .expect("the build has a log")
        .to_vec();
    assert_eq!(log.len(), 20, "every line the engine wrote, before its end");
    assert!(
        log[19].starts_with(&format!("{first} step 0 line 19 ")),
        "{log:?}"
    );
    // The pods go at once (never scheduled); the claim waits for pvc-protection's finalizer,
    // which the suite removes as the controller manager would.
    let claim = format!("pvc-dind-{first}");
    until(
        "the pods are deleted and the claim is being deleted",
        || async {
            let (live, going) = objects(&pods, &claims).await;
            (live.is_empty() && going == [claim.clone()]).then_some(())
        },
    )
    .await;
    claims
        .patch(
            &claim,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("remove the pvc-protection finalizer");
    until("the claim is gone", || async {
        let (live, going) = objects(&pods, &claims).await;
        (live.is_empty() && going.is_empty()).then_some(())
    })
    .await;

    // A claim of the next build's name already there.
    let next = "b00002";
    let mut stale = DynamicObject::new(
        &format!("pvc-dind-{next}"),
        &resource("PersistentVolumeClaim", "persistentvolumeclaims"),
    )
    .within(&ns);
    stale.data = json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    claims
        .create(&PostParams::default(), &stale)
        .await
        .expect("create the stale claim");
    let second = builds
        .lock()
        .create_build("demo/build", AGENT, steps, now());
    assert_eq!(second, next);
    let (expected, says) = match variant {
        Variant::Faithful => (Status::Error, "AlreadyExists"),
        Variant::Hardened => (Status::Success, ""),
    };
    let (ended, reason) = until("the second build ends", || async {
        let (status, reason) = status(&second);
        status.is_final().then_some((status, reason))
    })
    .await;
    assert_eq!(ended, expected, "{variant:?}: {reason}");
    assert!(reason.contains(says), "{variant:?}: {reason}");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_faithful_runner_agent_makes_and_deletes_build_pods_on_a_real_api_server() {
    suite(Variant::Faithful).await;
    record_row(
        "agent-faithful",
        "the agent (faithful) makes a build's claim and pods on the real API server as the platform's tasks say, the engine stand-in runs the build and sends its log lines before its end, and the agent deletes them when it ended; a claim already there (`AlreadyExists`) fails the next build",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_hardened_runner_agent_makes_and_deletes_build_pods_on_a_real_api_server() {
    suite(Variant::Hardened).await;
    record_row(
        "agent-hardened",
        "the agent (hardened) makes a build's claim and pods on the real API server as the platform's tasks say, the engine stand-in runs the build and sends its log lines before its end, and the agent deletes them when it ended; a claim already there is taken as the task's effect and the next build succeeds",
    );
}

/// The dind volume provisioner and the local volumes cleaner (`runtime::runner::volumes`)
/// against the real kube-apiserver, on a node of 16 GiB that one build's volume fills (the
/// cleaner's loop and its `rm -rf` delay shortened to seconds). The build's claim is bound
/// to a PersistentVolume the real server accepts (a local volume with its node affinity;
/// the claim's `spec.volumeName` set once, its status `Bound`). faithful's cleaner marks
/// the volume the running build holds and removes its directory under it, so the build
/// fails (runner-research.md §4 row 12, inferred); hardened's leaves it, the build
/// succeeds, and once the claim is gone the released volume is marked and deleted. The suite
/// plays the pvc-protection and pv-protection controllers (their finalizers).
async fn volumes_suite(variant: Variant) {
    let node = |variant, target| {
        let mut node = volumes::Config::new(variant, target, 16);
        node.sleep_interval = Duration::from_secs(2);
        node.delete_by_rm_after = Duration::from_secs(4);
        node
    };
    let world = World::start(variant, "volumes", Some(node)).await;
    let (cluster, ns, builds) = (&world.cluster, world.ns.clone(), world.builds.clone());
    let client = cluster.client();
    let claims: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("PersistentVolumeClaim", "persistentvolumeclaims"),
    );
    let pvs: Api<DynamicObject> = Api::all_with(client, &volumes::volume_resource());
    let steps = vec![Step::new(15_000, 0)];
    let build = builds
        .lock()
        .create_build("demo/build", AGENT, steps, crate::support::unix_ms());
    let claim = format!("pvc-dind-{build}");
    let volume = until("the build's claim is bound to a volume", || async {
        let object = claims.get_opt(&claim).await.ok()??;
        let name = object.data["spec"]["volumeName"].as_str()?.to_string();
        (object.data["status"]["phase"] == "Bound").then_some(name)
    })
    .await;
    let pv = pvs.get(&volume).await.expect("the bound volume");
    assert_eq!(pv.data["spec"]["claimRef"]["name"], claim.as_str());
    assert_eq!(pv.data["spec"]["claimRef"]["namespace"], ns);
    let status = |id: &str| builds.lock().build(id).map(|b| b.status);
    let ended = until("the build ends", || async {
        status(&build).filter(|s| s.is_final())
    })
    .await;
    let annotations = pvs
        .get_opt(&volume)
        .await
        .expect("read the volume")
        .and_then(|v| v.metadata.annotations)
        .unwrap_or_default();
    match variant {
        Variant::Faithful => {
            assert_eq!(ended, Status::Failure, "its volume was removed under it");
            assert!(
                annotations.contains_key(volumes::REMOVED),
                "the directory was removed while the claim held it: {annotations:?}"
            );
        }
        Variant::Hardened => {
            assert_eq!(ended, Status::Success);
            assert!(
                !annotations.contains_key(volumes::REMOVED),
                "{annotations:?}"
            );
        }
    }
    // The released volume, marked, is then deleted by the provisioner.
    release_claim(&claims, &claim).await;
    finish_volume_deletion(&pvs, &volume, "the released volume").await;
    world.stop().await;
}

/// The claim's deletion, as the controller manager finishes it: waits until the agent
/// deleted it, then removes pvc-protection's finalizer.
async fn release_claim(claims: &Api<DynamicObject>, claim: &str) {
    until("the claim is being deleted", || async {
        let object = claims.get_opt(claim).await.ok()??;
        object.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    remove_finalizers(claims, claim, "pvc-protection").await;
}

/// A volume's deletion, as the controller manager finishes it: waits until someone deleted
/// it (kube-apiserver keeps it for pv-protection's finalizer), removes the finalizer and
/// waits until it is gone.
async fn finish_volume_deletion(pvs: &Api<DynamicObject>, volume: &str, what: &str) {
    until(&format!("{what} is being deleted"), || async {
        let object = pvs.get_opt(volume).await.ok()??;
        object.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    remove_finalizers(pvs, volume, "pv-protection").await;
    until(&format!("{what} is deleted"), || async {
        pvs.get_opt(volume)
            .await
            .ok()
            .and_then(|v| v.is_none().then_some(()))
    })
    .await;
}

/// Removes `name`'s finalizers (`which` names them in a failure).
async fn remove_finalizers(api: &Api<DynamicObject>, name: &str, which: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap_or_else(|e| panic!("remove the {which} finalizer of {name}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_faithful_volume_cleaner_removes_a_running_builds_volume_on_a_real_api_server() {
    volumes_suite(Variant::Faithful).await;
    record_row(
        "volumes-faithful",
        "the dind volume provisioner binds a build's claim to a PersistentVolume on the real API server; the local volumes cleaner (faithful) removes the directory of the running build's volume, and the build fails",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_hardened_volume_cleaner_keeps_a_running_builds_volume_on_a_real_api_server() {
    volumes_suite(Variant::Hardened).await;
    record_row(
        "volumes-hardened",
        "the dind volume provisioner binds a build's claim to a PersistentVolume on the real API server; the local volumes cleaner (hardened) keeps the volume the build's claim holds, and the build succeeds",
    );
}

/// The external volumes cleaner (`dind-volume-cleanup`, `runtime::runner::volumes`) against
/// the real kube-apiserver: a build's volume, released once the build ended and its claim
/// went, is deleted when it has not been used for its retention (shortened to 3 s, the
/// CronJob's period to 2 s); the local cleaner has room and marks nothing. The suite plays
/// the pvc-protection and pv-protection controllers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_external_volume_cleaner_deletes_a_released_volume_past_its_retention_on_a_real_api_server(
) {
    let node = |variant, target| {
        let mut node = volumes::Config::new(variant, target, 160);
        node.retention = Duration::from_secs(3);
        node.cleanup_every = Duration::from_secs(2);
        node
    };
    let world = World::start(Variant::Hardened, "volumes-expiry", Some(node)).await;
    let (cluster, ns, builds) = (&world.cluster, world.ns.clone(), world.builds.clone());
    let client = cluster.client();
    let claims: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("PersistentVolumeClaim", "persistentvolumeclaims"),
    );
    let pvs: Api<DynamicObject> = Api::all_with(client, &volumes::volume_resource());
    let build = builds.lock().create_build(
        "demo/build",
        AGENT,
        vec![Step::new(2_000, 0)],
        crate::support::unix_ms(),
    );
    let claim = format!("pvc-dind-{build}");
    let volume = until("the build's claim is bound to a volume", || async {
        let object = claims.get_opt(&claim).await.ok()??;
        object.data["spec"]["volumeName"]
            .as_str()
            .map(str::to_string)
    })
    .await;
    let status = |id: &str| builds.lock().build(id).map(|b| b.status);
    let ended = until("the build ends", || async {
        status(&build).filter(|s| s.is_final())
    })
    .await;
    assert_eq!(ended, Status::Success);
    assert!(
        pvs.get_opt(&volume)
            .await
            .expect("read the volume")
            .is_some(),
        "a volume its claim holds is not the external cleaner's"
    );
    release_claim(&claims, &claim).await;
    let marked = pvs
        .get(&volume)
        .await
        .expect("the released volume")
        .metadata
        .annotations
        .unwrap_or_default()
        .contains_key(volumes::DELETED);
    assert!(!marked, "the local cleaner had room: it marks nothing");
    finish_volume_deletion(&pvs, &volume, "the released volume, past its retention,").await;
    world.stop().await;
    record_row(
        "volumes-expiry",
        "the external volumes cleaner deletes a released build volume on the real API server once it went unused for its retention, and leaves it while the build's claim holds it",
    );
}

/// `kubectl proxy` on loopback `port`, killed when dropped: a plain-HTTP front of the real
/// kube-apiserver (the kubeconfig's credentials added), for the agent's proxy tasks.
struct KubectlProxy(std::process::Child);

impl KubectlProxy {
    async fn start(port: u16) -> KubectlProxy {
        let program = std::env::var("ORRERY_KUBECTL").unwrap_or_else(|_| "kubectl".into());
        let child = std::process::Command::new(&program)
            .args(["proxy", "--address=127.0.0.1", &format!("--port={port}")])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{program} proxy: {e} (make conformance-apiserver builds kubectl)")
            });
        let proxy = KubectlProxy(child);
        until("kubectl proxy answers", || async {
            let url = format!("http://127.0.0.1:{port}/api");
            crate::support::get_status(&url)
                .await
                .ok()
                .filter(|(status, _)| *status == 200)
                .map(|_| ())
        })
        .await;
        proxy
    }
}

impl Drop for KubectlProxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `proxy` agent tasks against the real kube-apiserver (through `kubectl proxy`): the
/// platform asks the agent to POST a ConfigMap in the suite's namespace, one with a name
/// the real server refuses (422), and one in a namespace that does not exist (404). Every
/// task ends reported; the first is `Success` and its ConfigMap is on the real server;
/// faithful reports the refused two `Success` as well (venona takes any answer as success,
/// runner-research.md §4 row 16), hardened a non-retriable `Error` naming the status.
async fn proxy_suite(variant: Variant) {
    use orrery_system::core::runner::{proxy_spec, Outcome};
    use orrery_system::platform::runner::queue::TaskState;
    let world = World::start(variant, "proxy", None).await;
    let (cluster, ns, builds) = (&world.cluster, world.ns.clone(), world.builds.clone());
    let port = free_port();
    let _proxy = KubectlProxy::start(port).await;
    let configmap = |namespace: &str, name: &str| {
        let url = format!("http://127.0.0.1:{port}/api/v1/namespaces/{namespace}/configmaps");
        let params = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"from": "proxy"}});
        builds.lock().proxy(
            AGENT,
            proxy_spec(&url, "POST", "ui-token", params),
            crate::support::unix_ms(),
        )
    };
    let made = configmap(&ns, "proxied");
    let invalid = configmap(&ns, "Not_A_Name");
    let missing = configmap(&format!("{ns}-absent"), "proxied");
    let done = |id: String| {
        let builds = builds.clone();
        async move {
            until(&format!("proxy task {id} is reported"), || async {
                match builds.lock().task(&id).map(|q| q.state.clone()) {
                    Some(TaskState::Done { outcome, reason }) => {
                        Some((outcome, reason.unwrap_or_default()))
                    }
                    _ => None,
                }
            })
            .await
        }
    };
    let (outcome, reason) = done(made).await;
    assert_eq!(outcome, Outcome::Success, "{variant:?}: {reason}");
    let configmaps: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &ns, &resource("ConfigMap", "configmaps"));
    let object = configmaps
        .get("proxied")
        .await
        .expect("the proxied ConfigMap is on the real server");
    assert_eq!(object.data["data"]["from"], "proxy");
    for (id, status) in [(invalid, "422"), (missing, "404")] {
        let (outcome, reason) = done(id).await;
        match variant {
            Variant::Faithful => assert_eq!(outcome, Outcome::Success, "{reason}"),
            Variant::Hardened => {
                assert_eq!(outcome, Outcome::Error, "{status}");
                assert!(reason.contains(status), "{status}: {reason}");
            }
        }
    }
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_faithful_runner_agent_reports_a_refused_proxy_task_as_success() {
    proxy_suite(Variant::Faithful).await;
    record_row(
        "proxy-faithful",
        "the agent (faithful) sends the platform's `proxy` tasks to the real kube-apiserver (through `kubectl proxy`): a ConfigMap it creates is reported Success, and so are the two it refuses (422 for an invalid name, 404 for a namespace that does not exist)",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_hardened_runner_agent_reports_a_refused_proxy_task_as_an_error() {
    proxy_suite(Variant::Hardened).await;
    record_row(
        "proxy-hardened",
        "the agent (hardened) sends the platform's `proxy` tasks to the real kube-apiserver (through `kubectl proxy`): a ConfigMap it creates is reported Success; the real server's 422 (invalid name) and 404 (no such namespace) are reported as non-retriable errors naming the status",
    );
}

/// Rewrites the Runner's section of `reports/conformance.md` with the rows so far (a row is
/// written only when its test's checks passed).
fn record_row(key: &str, behaviour: &str) {
    static ROWS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    crate::runtime::record_section_row(
        &ROWS,
        "runner",
        "## runner: the Codefresh Runner's agent, engine stand-in and volumes against a real kube-apiserver\n\n- The agent, the engine stand-in and the dind volume provisioner and cleaner, unchanged, in real mode against the real kube-apiserver (`conformance/kube/run.sh`), with the platform's builds API in process; no kubelet runs: the engine stand-in plays the builds' pods, and the suite plays the pvc-protection controller. One row per test.\n\n",
        key,
        behaviour,
    );
}
