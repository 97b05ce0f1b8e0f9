//! The reporter and the platform's events path end to end over turmoil: two hardened
//! reporter replicas report Argo CD apps to the platform; the events API refuses bad
//! tokens, bad bodies and oversize bodies with a reason; the reporters serve health,
//! metrics and their app distribution.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kube::api::{Api, DynamicObject, PostParams};
use orrery_sim::env::SimEnv;
use orrery_sim::world::apiserver::Knobs;
use orrery_sim::world::argocd::{self, application_resource, HealthOverrides, NAMESPACE};
use orrery_sim::world::git::SharedGit;
use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::SharedEnv;
use orrery_system::platform::events::{self, Platform};
use orrery_system::runtime::app_reporter;
use orrery_system::runtime::assembly::{self as runtime_assembly, RuntimeConfig};
use serde_json::{json, Value};

use crate::support::*;

const TOKEN: &str = "runtime-token";
const REPO: &str = "https://git.example/r.git";

async fn call(
    env: &SharedEnv,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, Value, String) {
    let client =
        orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(30));
    let mut request = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = client
        .request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .expect("server answers");
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).to_string();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

fn app(name: &str) -> DynamicObject {
    let mut app = DynamicObject::new(name, &application_resource()).within(NAMESPACE);
    app.data = json!({"spec": {"source": {"repoURL": REPO, "path": format!("apps/{name}")}, "syncPolicy": {"automated": {}}}});
    app
}

#[test]
fn hardened_reporters_deliver_every_app_and_the_events_api_refuses_bad_requests_with_a_reason() {
    let mut w = world(Knobs::default());
    let git = SharedGit::default();
    let names: Vec<String> = (0..12).map(|i| format!("app-{i:02}")).collect();
    let files: BTreeMap<String, String> = names
        .iter()
        .flat_map(|n| {
            [
                (
                    format!("apps/{n}/deployment.yaml"),
                    format!("image: {n}:v1"),
                ),
                (format!("apps/{n}/service.yaml"), "port: 80".to_string()),
            ]
        })
        .collect();
    git.lock().commit(REPO, "Dev <d@x>", "init", 0, files);
    let platform = Platform::new(events::Config {
        tokens: [(TOKEN.to_string(), "acme".to_string())]
            .into_iter()
            .collect(),
        bus_capacity: 100,
        // The hardened platform: every 2xx waits for the bus's confirm.
        durability: events::bus::Durability::of(orrery_system::core::Variant::Hardened),
        idempotency_keys: false,
    });

    let config = argocd::controller::Config {
        reconcile_every: Duration::from_secs(3),
        history_limit: 5,
        ..Default::default()
    };
    w.argocd(&git, &HealthOverrides::default(), config, "argo");
    boot_platform(&mut w, &platform);
    // The reporter replicas, the first with the dedup cache beside it (one pod, two
    // containers), all from the runtime assembly.
    for replica in ["reporter-0", "reporter-1"] {
        let trace = w.trace.clone();
        w.sim.host(replica, move || {
            let env = SimEnv::shared(replica, SEED, trace.clone());
            let mut reporter = app_reporter::Config::new(
                Variant::Hardened,
                KubeTarget::new("apiserver:6443"),
                NAMESPACE,
            );
            reporter.argocd_token = "argo".into();
            reporter.runtime_token = TOKEN.into();
            reporter.platform_addr = "platform:8080".into();
            reporter.cache_addr = "reporter-0:6379".into();
            let config = RuntimeConfig {
                app_reporter: Some(reporter),
                cache: (replica == "reporter-0").then(|| "0.0.0.0:6379".to_string()),
                ..Default::default()
            };
            async move {
                runtime_assembly::run(env, config, std::future::pending())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
        });
    }
    let (trace, check_platform) = (w.trace.clone(), platform.clone());
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(60));
        let apps: Api<DynamicObject> = Api::namespaced_with(client, NAMESPACE, &application_resource());
        for name in &names {
            apps.create(&PostParams::default(), &app(name)).await?;
        }
        env.sleep(Duration::from_secs(40)).await;

        let (code, body, _) = call(&env, "GET", "http://platform:8080/2.0/api/apps", &[], vec![]).await;
        assert_eq!(code, 401, "no runtime token, no apps: {body}");
        let (code, body, _) = call(&env, "GET", "http://platform:8080/2.0/api/apps", &[("authorization", "stolen")], vec![]).await;
        assert_eq!(code, 401, "an unknown token sees nothing: {body}");
        let (code, body, _) = call(&env, "GET", "http://platform:8080/2.0/api/apps", &[("authorization", TOKEN)], vec![]).await;
        assert_eq!(code, 200);
        assert_eq!(body.as_object().unwrap().len(), names.len(), "every app reported: {body}");
        assert!(body.as_object().unwrap().values().all(|a| a["sync_status"] == "Synced"), "{body}");
        let (updated, _, _) = check_platform.projection_counts();
        assert!(updated >= names.len() as u64);
        // A replica's share (hardened's resync): the two members' shares are the whole,
        // each app in one, as rendezvous hashing owns it.
        let mut shares = Vec::new();
        for member in ["reporter-0", "reporter-1"] {
            let url = format!("http://platform:8080/2.0/api/apps?member={member}&members=reporter-0,reporter-1");
            let (code, share, _) = call(&env, "GET", &url, &[("authorization", TOKEN)], vec![]).await;
            assert_eq!(code, 200);
            for key in share.as_object().unwrap().keys() {
                let name = key.split_once('/').unwrap().1;
                let members = ["reporter-0".to_string(), "reporter-1".to_string()];
                assert_eq!(app_reporter::shard::rendezvous_owner(name, &members), Some(member), "{key}");
            }
            shares.push(share.as_object().unwrap().len());
        }
        assert_eq!(shares.iter().sum::<usize>(), names.len(), "{shares:?}");
        assert!(shares.iter().all(|n| *n > 0), "both members own some of {} apps: {shares:?}", names.len());

        let (code, body, _) = call(&env, "POST", "http://platform:8080/2.0/api/events", &[("authorization", "stolen")], b"{}".to_vec()).await;
        assert_eq!(code, 401, "unknown token");
        assert!(body["error"].as_str().unwrap().contains("runtime token"));
        let (code, body, _) = call(&env, "POST", "http://platform:8080/2.0/api/events", &[("authorization", TOKEN), ("content-encoding", "gzip")], b"not gzip".to_vec()).await;
        assert_eq!(code, 400);
        assert!(body["error"].as_str().unwrap().contains("gzip"), "{body}");
        // Over the 5 MB cap: 413 — or, when the server's answer and close overtake the rest of
        // the upload, a reset while sending (as with any HTTP server that refuses a body early);
        // never an accepted event.
        let client = orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(30));
        let oversized = http::Request::post("http://platform:8080/2.0/api/events")
            .header("authorization", TOKEN)
            .body(Full::new(Bytes::from(vec![b' '; 6 * 1024 * 1024])))
            .unwrap();
        match client.request(oversized).await {
            Ok(response) => assert_eq!(response.status().as_u16(), 413, "5 MB cap"),
            Err(error) => assert!(format!("{error:?}").contains("ConnectionReset"), "{error:?}"),
        }

        let mut owners: BTreeMap<String, usize> = BTreeMap::new();
        let (mut sent_app, mut sent_resource) = (0, 0);
        for replica in ["reporter-0", "reporter-1"] {
            let (code, _, text) = call(&env, "GET", &format!("http://{replica}:8087/healthz"), &[], vec![]).await;
            assert_eq!((code, text.as_str()), (200, "ok"));
            let (_, _, metrics) = call(&env, "GET", &format!("http://{replica}:8087/metrics"), &[], vec![]).await;
            assert!(metrics.contains(&format!("codefresh_event_reporter_queue_size{{reporter_shard=\"{replica}\"}} 0")), "{metrics}");
            assert!(metrics.contains("codefresh_event_reporter_event_processing_duration_bucket"), "{metrics}");
            assert!(metrics.contains("codefresh_event_reporter_enqueued_events_total{application=\""), "{metrics}");
            let sent = |kind: &str| -> u64 {
                let prefix = format!("codefresh_event_reporter_sent_events_total{{metric_event_type=\"{kind}\",reporter_shard=\"{replica}\"}} ");
                metrics.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|v| v.parse().ok()).unwrap_or(0)
            };
            sent_app += sent("app");
            sent_resource += sent("resource");
            let (_, distribution, _) = call(&env, "GET", &format!("http://{replica}:8087/app-distribution"), &[], vec![]).await;
            for app in distribution.as_object().unwrap().keys() {
                *owners.entry(app.clone()).or_default() += 1;
            }
        }
        assert!(sent_app >= names.len() as u64, "one application event per app at least");
        assert!(
            sent_resource >= 2 * names.len() as u64,
            "and one event per resource (a Deployment and a Service each): {sent_resource}"
        );
        assert_eq!(
            check_platform.resources_of("acme").len(),
            2 * names.len(),
            "the platform knows every app's resources"
        );
        let (_, legacy, _) = call(&env, "GET", "http://reporter-0:8087/app-distribution?shardings=rendezvous,nope", &[], vec![]).await;
        assert_eq!(legacy["rendezvous"]["apps"].as_object().unwrap().len(), names.len(), "{legacy}");
        assert!(legacy["nope"]["error"].as_str().unwrap().contains("unknown sharding"), "{legacy}");
        assert_eq!(owners.len(), names.len(), "every app has an owner");
        assert!(owners.values().all(|n| *n == 1), "no app has two owners: {owners:?}");
        Ok(())
    });
    w.sim.run().unwrap();
}

#[test]
fn the_platform_keeps_the_newest_state_of_each_cluster_object_per_runtime() {
    let mut w = world(Knobs::default());
    let platform = Platform::new(events::Config {
        tokens: [
            ("token-a".to_string(), "acme-a".to_string()),
            ("token-b".to_string(), "acme-b".to_string()),
        ]
        .into_iter()
        .collect(),
        bus_capacity: 100,
        durability: Default::default(),
        idempotency_keys: false,
    });
    boot_platform(&mut w, &platform);
    let trace = w.trace.clone();
    w.sim.client("sensor", async move {
        let env: SharedEnv = SimEnv::shared("sensor", SEED, trace.clone());
        let url = "http://platform:8080/2.0/api/events";
        // The Sensor's HTTP trigger: the object as JSON text at data.object, the raw token.
        let post = |token: &'static str, object: Value, _kind: &'static str| {
            let env = env.clone();
            async move {
                let body = serde_json::to_vec(&json!({"data": {"object": object.to_string()}})).unwrap();
                call(&env, "POST", url, &[("authorization", token), ("content-type", "application/json")], body).await
            }
        };
        let rollout = |rv: u64, phase: &str| json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "web", "namespace": "shop", "resourceVersion": rv.to_string()}, "status": {"phase": phase, "currentStepIndex": 1, "currentPodHash": "bbb", "stableRS": "aaa"}});
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-bbb", "namespace": "shop", "resourceVersion": "8", "labels": {"rollouts-pod-template-hash": "bbb"}, "ownerReferences": [{"kind": "Rollout", "name": "web", "uid": "u"}]}, "spec": {"replicas": 1}, "status": {"availableReplicas": 1}});
        assert_eq!(post("token-a", rollout(9, "Paused"), "UPDATE").await.0, 200);
        assert_eq!(post("token-a", rollout(7, "Progressing"), "UPDATE").await.0, 200, "accepted, then ignored as older");
        assert_eq!(post("token-a", rs, "ADD").await.0, 200);
        assert_eq!(post("token-b", rollout(3, "Healthy"), "ADD").await.0, 200);
        let (status, _, reason) = post("token-a", json!({"kind": "Pod", "metadata": {"name": "p"}}), "ADD").await;
        assert_eq!(status, 400);
        assert!(reason.contains("is not Rollout, ReplicaSet, AnalysisRun or Workflow"), "{reason}");
        assert_eq!(post("nope", rollout(10, "Healthy"), "UPDATE").await.0, 401);
        env.sleep(Duration::from_secs(1)).await;
        let (status, _, _) = call(&env, "GET", "http://platform:8080/2.0/api/rollouts", &[], Vec::new()).await;
        assert_eq!(status, 401, "no runtime token, no rollouts");
        let (status, rollouts, _) = call(&env, "GET", "http://platform:8080/2.0/api/rollouts", &[("authorization", "token-a")], Vec::new()).await;
        assert_eq!(status, 200);
        let web = &rollouts["acme-a/shop/web"];
        assert_eq!((web["phase"].as_str(), web["resourceVersion"].as_u64(), web["step"].as_i64()), (Some("Paused"), Some(9), Some(1)));
        assert_eq!(web["replicaSets"]["bbb"], json!({"replicas": 1, "available": 1}));
        assert!(rollouts.as_object().unwrap().keys().all(|k| k.starts_with("acme-a/")), "only its own: {rollouts}");
        let (_, theirs, _) = call(&env, "GET", "http://platform:8080/2.0/api/rollouts", &[("authorization", "token-b")], Vec::new()).await;
        assert_eq!(theirs["acme-b/shop/web"]["phase"], "Healthy", "runtimes are kept apart");
        assert!(theirs.get("acme-a/shop/web").is_none(), "{theirs}");
        Ok(())
    });
    w.sim.run().unwrap();
}

/// A resource event carries no resourceVersion to order by, so a retried copy of an older
/// one that arrives after a newer one would overwrite it. A platform that reads idempotency
/// keys (hardened) ignores the copy; one that does not (faithful, inferred) shows the older
/// state again.
#[test]
fn a_retried_resource_event_is_ignored_by_its_idempotency_key_only_where_the_platform_reads_keys() {
    for (reads_keys, shown) in [(true, "Degraded"), (false, "Healthy")] {
        let mut w = world(Knobs::default());
        let platform = Platform::new(events::Config {
            tokens: [(TOKEN.to_string(), "acme".to_string())]
                .into_iter()
                .collect(),
            bus_capacity: 100,
            durability: Default::default(),
            idempotency_keys: reads_keys,
        });
        boot_platform(&mut w, &platform);
        let trace = w.trace.clone();
        w.sim.client("reporter", async move {
            let env: SharedEnv = SimEnv::shared("reporter", SEED, trace.clone());
            let post = |key: &'static str, health: &'static str| {
                let env = env.clone();
                async move {
                    use base64::Engine as _;
                    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "web", "namespace": "shop"}});
                    let payload = orrery_system::core::event::EventPayload {
                        timestamp: "t".into(),
                        object: base64::engine::general_purpose::STANDARD
                            .encode(object.to_string()),
                        source: orrery_system::core::event::Source {
                            desired_manifest: "{}".into(),
                            actual_manifest: "{}".into(),
                            app_name: "web".into(),
                            app_namespace: NAMESPACE.into(),
                            sync_status: "Synced".into(),
                            health_status: health.into(),
                            ..Default::default()
                        },
                        errors: vec![],
                        app_versions: Value::Null,
                        idempotency_key: Some(key.into()),
                    };
                    let body = serde_json::to_vec(&json!({"data": payload})).unwrap();
                    let url = "http://platform:8080/2.0/api/events";
                    call(&env, "POST", url, &[("authorization", TOKEN)], body)
                        .await
                        .0
                }
            };
            assert_eq!(
                post("argocd/web@7:false:res:apps/Deployment/shop/web", "Healthy").await,
                200
            );
            env.sleep(Duration::from_millis(500)).await;
            assert_eq!(
                post(
                    "argocd/web@8:false:res:apps/Deployment/shop/web",
                    "Degraded"
                )
                .await,
                200
            );
            env.sleep(Duration::from_millis(500)).await;
            // The first event's retry (its first answer was lost on the way back).
            assert_eq!(
                post("argocd/web@7:false:res:apps/Deployment/shop/web", "Healthy").await,
                200
            );
            env.sleep(Duration::from_secs(1)).await;
            Ok(())
        });
        w.sim.run().unwrap();
        let resources = platform.resources_of("acme");
        let web = &resources[&format!("{NAMESPACE}/web/apps/Deployment/shop/web")];
        assert_eq!(web.health_status, shown, "reads keys: {reads_keys}");
    }
}
