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
use orrery_system::runtime::runner::{self as agent, engine};
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

async fn suite(variant: Variant) {
    let (cluster, ns) = prepared(format!(
        "orrery-runner-{}-{}",
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
                apiserver: target,
                platform_api: api,
                token: TOKEN.into(),
            }),
            ..Default::default()
        },
    );
    let client = cluster.client();
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &resource("Pod", "pods"));
    let claims: Api<DynamicObject> = Api::namespaced_with(
        client,
        &ns,
        &resource("PersistentVolumeClaim", "persistentvolumeclaims"),
    );
    let steps = vec![
        Step {
            millis: 1000,
            exit_code: 0,
        };
        2
    ];
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

    runtime.abort();
    platform.abort();
    if let Err(e) = cluster.cleanup(&ns).await {
        eprintln!("warning: cleanup of {ns}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_faithful_runner_agent_makes_and_deletes_build_pods_on_a_real_api_server() {
    suite(Variant::Faithful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_hardened_runner_agent_makes_and_deletes_build_pods_on_a_real_api_server() {
    suite(Variant::Hardened).await;
}
