//! The reporter's edges in real mode (tokio, loopback sockets): one app processed end to end
//! by the real `Processor`, with Argo CD and the platform played by wiremock (answers in the
//! shapes of `fixtures/argocd/`) and the dedup cache by orrery's RESP server. What each edge
//! does to the outcome follows research §1.6–1.7: a failed resource tree is tolerated unless
//! it timed out, a deadline aborts the app, a live resource Argo CD does not find is reported
//! without live state, a platform that keeps failing aborts the app and leaves its cache entry
//! unwritten (so the next change re-sends it), and faithful retries any non-2xx.

use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::{RealEnv, SharedEnv};
use orrery_system::runtime::app_reporter::dedup::{self, WatchType};
use orrery_system::runtime::app_reporter::process::{Outcome, Processor};
use orrery_system::runtime::app_reporter::{application_resource, Config};
use orrery_system::runtime::cache;
use serde_json::{json, Value};
use wiremock::matchers::{header, method, path, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

const REVISION: &str = "53e28ff20cc530b9ada2173fbbd64d48338583ba";
const APP_PATH: &str = "/api/v1/applications/guestbook";

fn fixture(name: &str) -> Value {
    let file = format!(
        "{}/../fixtures/argocd/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.to_string())
        .expect("a free loopback port")
}

/// The guestbook Application as the reporter's informer hands it over.
fn guestbook() -> DynamicObject {
    let mut app = DynamicObject::new("guestbook", &application_resource()).within("argocd");
    app.metadata.resource_version = Some("1001".into());
    app.data = json!({
        "spec": {"project": "default", "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps.git", "path": "guestbook", "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"}},
        "status": {
            "sync": {"status": "Synced", "revision": REVISION},
            "health": {"status": "Healthy"},
            "resources": [{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "default", "name": "guestbook-ui", "status": "Synced", "health": {"status": "Healthy"}}],
            "operationState": {"phase": "Succeeded", "syncResult": {"revision": REVISION}},
            "history": [{"id": 1, "revision": REVISION}],
            "reconciledAt": "2026-11-20T09:58:30Z"
        }
    });
    app
}

/// Argo CD answering every call the reporter makes with the recorded shapes.
async fn argocd() -> MockServer {
    let server = MockServer::start().await;
    for (route, body) in [
        ("/resource-tree", fixture("resource-tree")),
        ("/manifests", fixture("manifests")),
        ("/resource", fixture("resource")),
        (
            &format!("/revisions/{REVISION}/metadata") as &str,
            fixture("revision-metadata"),
        ),
    ] {
        Mock::given(method("GET"))
            .and(path(format!("{APP_PATH}{route}")))
            .and(header("authorization", "Bearer argo-token"))
            .respond_with(ResponseTemplate::new(200).set_body_json(body))
            .with_priority(5)
            .mount(&server)
            .await;
    }
    server
}

/// A platform that accepts every event.
async fn platform() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/2.0/api/events"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"status": "ok"})))
        .with_priority(5)
        .mount(&server)
        .await;
    server
}

struct Edges {
    processor: Processor,
    cache: cache::Client,
    variant: Variant,
}

impl Edges {
    /// The guestbook app, as the informer's `kind` event, processed once.
    async fn process(&self, kind: WatchType) -> Outcome {
        self.processor
            .process(&guestbook(), kind, false, self.variant)
            .await
    }
}

/// Makes `server` answer `route` (a path, or a regex with `^`) with `response` ahead of the
/// recorded answers, for at most `times` requests when given.
async fn answer(
    server: &MockServer,
    verb: &str,
    route: &str,
    response: ResponseTemplate,
    times: Option<u64>,
) {
    let mock = if route.starts_with('^') {
        Mock::given(method(verb)).and(path_regex(route))
    } else {
        Mock::given(method(verb)).and(path(route))
    };
    let mock = mock.respond_with(response).with_priority(1);
    let mock = match times {
        Some(n) => mock.up_to_n_times(n),
        None => mock,
    };
    mock.mount(server).await;
}

async fn edges(variant: Variant, argocd: &MockServer, platform: &MockServer) -> Edges {
    let env: SharedEnv = Arc::new(RealEnv::new("reporter-0"));
    let cache_addr = free_addr();
    let listen = cache_addr.clone();
    let cache_env = env.clone();
    tokio::spawn(async move { cache::run(cache_env, &listen).await });
    let mut config = Config::new(variant, KubeTarget::new("127.0.0.1:1"), "argocd");
    config.argocd_addr = argocd.address().to_string();
    config.argocd_token = "argo-token".into();
    config.platform_addr = platform.address().to_string();
    config.runtime_token = "runtime-token".into();
    config.cache_addr = cache_addr.clone();
    config.request_timeout = Duration::from_millis(500);
    config.delivery_attempts = 3;
    let cache = cache::Client::new(env.clone(), &cache_addr, Duration::from_secs(2));
    // The cache server comes up asynchronously.
    for _ in 0..100 {
        if cache.get("probe").await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Edges {
        processor: Processor::new(env, &config),
        cache,
        variant,
    }
}

/// The decoded events the platform received (the payload inside the `data` envelope).
async fn received(platform: &MockServer) -> Vec<Value> {
    let mut events = Vec::new();
    for request in platform.received_requests().await.unwrap_or_default() {
        let mut decoder = flate2::read::GzDecoder::new(&request.body[..]);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut decoder, &mut text).expect("gzip JSON");
        let envelope: Value = serde_json::from_str(&text).expect("JSON event");
        events.push(envelope["data"].clone());
    }
    events
}

fn app_entry() -> String {
    dedup::app_key("argocd", "guestbook")
}

#[tokio::test]
async fn recorded_answers_give_one_app_event_and_one_resource_event_with_their_fields() {
    let (argocd, platform) = (argocd().await, platform().await);
    let edges = edges(Variant::Faithful, &argocd, &platform).await;
    let outcome = edges.process(WatchType::Added).await;
    let Outcome::Done(tally) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!((tally.app_sent, tally.resources_sent), (1, 1), "{tally:?}");
    let events = received(&platform).await;
    assert_eq!(events.len(), 2);
    let app = &events[0]["source"];
    assert_eq!(app["commitMessage"], "guestbook: image 0.2", "{app}");
    assert_eq!(app["commitAuthor"], "Dev <dev@example.com>");
    assert_eq!(events[0]["appVersions"]["appVersion"], "0.2");
    let resource = &events[1]["source"];
    assert!(
        resource["desiredManifest"]
            .as_str()
            .is_some_and(|m| m.contains("ks-guestbook-demo:0.2")),
        "{resource}"
    );
    assert!(
        resource["actualManifest"]
            .as_str()
            .is_some_and(|m| m.contains("\"readyReplicas\":1")),
        "{resource}"
    );
    assert!(
        edges.cache.get(&app_entry()).await.unwrap().is_some(),
        "the app entry is written after the app's events"
    );
    // Every call carried the token and hit the real paths with the real query parameters.
    let calls: Vec<String> = argocd
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| format!("{}?{}", r.url.path(), r.url.query().unwrap_or("")))
        .collect();
    assert!(
        calls.iter().any(|c| c.ends_with(
            "/resource?appNamespace=argocd&namespace=default&resourceName=guestbook-ui&version=v1&group=apps&kind=Deployment&project=default"
        )),
        "{calls:#?}"
    );
    assert!(calls.iter().any(|c| c.contains(&format!(
        "/manifests?appNamespace=argocd&project=default&revision={REVISION}"
    ))));
    assert!(calls.iter().any(|c| c.ends_with(&format!(
        "/revisions/{REVISION}/metadata?appNamespace=argocd&project=default&sourceIndex=0"
    ))));

    // The same app again, nothing changed: the app-level rules skip it.
    let again = edges.process(WatchType::Modified).await;
    assert_eq!(again, Outcome::CachedIgnored);
}

#[tokio::test]
async fn malformed_json_from_the_resource_tree_is_tolerated_and_reported_as_a_payload_error() {
    let (argocd, platform) = (argocd().await, platform().await);
    answer(
        &argocd,
        "GET",
        &format!("{APP_PATH}/resource-tree"),
        ResponseTemplate::new(200).set_body_string("{\"nodes\": [tru"),
        None,
    )
    .await;
    let edges = edges(Variant::Faithful, &argocd, &platform).await;
    let outcome = edges.process(WatchType::Added).await;
    let Outcome::Done(tally) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(tally.app_sent, 1);
    let events = received(&platform).await;
    let errors = events[0]["errors"].as_array().cloned().unwrap_or_default();
    assert!(
        errors.iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.contains("resource-tree") && m.contains("invalid JSON"))),
        "{errors:?}"
    );
}

#[tokio::test]
async fn a_resource_tree_slower_than_the_deadline_aborts_the_app_and_sends_nothing() {
    let (argocd, platform) = (argocd().await, platform().await);
    answer(
        &argocd,
        "GET",
        &format!("{APP_PATH}/resource-tree"),
        ResponseTemplate::new(200)
            .set_body_json(fixture("resource-tree"))
            .set_delay(Duration::from_secs(2)),
        None,
    )
    .await;
    let edges = edges(Variant::Faithful, &argocd, &platform).await;
    let outcome = edges.process(WatchType::Added).await;
    assert!(matches!(outcome, Outcome::Aborted(_)), "{outcome:?}");
    assert!(received(&platform).await.is_empty());
    assert_eq!(edges.cache.get(&app_entry()).await.unwrap(), None);
}

#[tokio::test]
async fn a_live_resource_argo_cd_does_not_find_is_sent_without_live_state() {
    let (argocd, platform) = (argocd().await, platform().await);
    answer(&argocd, "GET", &format!("^{APP_PATH}/resource$"), ResponseTemplate::new(404).set_body_json(
            json!({"error": "Deployment.apps \"guestbook-ui\" not found", "code": 5, "message": "Deployment.apps \"guestbook-ui\" not found"}),
        ), None).await;
    let edges = edges(Variant::Faithful, &argocd, &platform).await;
    let outcome = edges.process(WatchType::Added).await;
    assert!(matches!(outcome, Outcome::Done(_)), "{outcome:?}");
    let events = received(&platform).await;
    let resource = &events[1];
    assert_eq!(resource["source"]["actualManifest"], "", "{resource}");
    assert!(
        resource["errors"].as_array().is_none_or(|e| e.is_empty()),
        "not found is not an error: {resource}"
    );
}

#[tokio::test]
async fn a_platform_that_fails_twice_then_accepts_gets_the_event_on_the_third_attempt() {
    let (argocd, platform) = (argocd().await, platform().await);
    answer(
        &platform,
        "POST",
        "/2.0/api/events",
        ResponseTemplate::new(503),
        Some(2),
    )
    .await;
    let edges = edges(Variant::Faithful, &argocd, &platform).await;
    let outcome = edges.process(WatchType::Added).await;
    let Outcome::Done(tally) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(tally.app_sent, 1);
    // Two 503s and the accepted app event, then the resource event.
    assert_eq!(platform.received_requests().await.unwrap().len(), 4);
}

#[tokio::test]
async fn a_platform_refusing_with_401_is_retried_every_attempt_then_the_app_is_aborted() {
    let (argocd, platform) = (argocd().await, platform().await);
    answer(
        &platform,
        "POST",
        "/2.0/api/events",
        ResponseTemplate::new(401).set_body_string("invalid token"),
        None,
    )
    .await;
    let edges = edges(Variant::Faithful, &argocd, &platform).await;
    let outcome = edges.process(WatchType::Added).await;
    assert!(matches!(outcome, Outcome::Aborted(_)), "{outcome:?}");
    assert_eq!(
        platform.received_requests().await.unwrap().len(),
        3,
        "the real reporter retries any non-2xx, 4xx included (delivery_attempts here: 3)"
    );
    assert_eq!(
        edges.cache.get(&app_entry()).await.unwrap(),
        None,
        "no entry: the next change re-sends the app"
    );
}

#[tokio::test]
async fn malformed_platform_answers_with_a_2xx_status_count_as_delivered() {
    let (argocd, platform) = (argocd().await, platform().await);
    answer(
        &platform,
        "POST",
        "/2.0/api/events",
        ResponseTemplate::new(200).set_body_string("<html>not json"),
        None,
    )
    .await;
    let edges = edges(Variant::Hardened, &argocd, &platform).await;
    let outcome = edges.process(WatchType::Added).await;
    assert!(matches!(outcome, Outcome::Done(_)), "{outcome:?}");
    let events = received(&platform).await;
    assert!(
        events.iter().all(|e| e["idempotencyKey"]
            .as_str()
            .is_some_and(|k| k.contains("guestbook"))),
        "hardened sends idempotency keys: {events:?}"
    );
}
