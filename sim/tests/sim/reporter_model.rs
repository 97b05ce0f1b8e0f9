//! The reporter's real event model end to end over turmoil (research §1.4–1.7): one app
//! event plus one event per changed resource, reconcile stamps ignored by the app-level
//! rules, a new revision re-sending every resource, and the per-app rate limiter — which
//! drops in faithful, only counts in learning mode, and defers in hardened.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kube::api::{Api, DynamicObject, PostParams};
use orrery_sim::env::SimEnv;
use orrery_sim::world::apiserver::Knobs;
use orrery_sim::world::argocd::{self, application_resource, HealthOverrides, NAMESPACE};
use orrery_sim::world::cost::Cost;
use orrery_sim::world::git::SharedGit;
use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::SharedEnv;
use orrery_system::platform::events::{self, Platform};
use orrery_system::runtime::app_reporter::{self, rate_limit::RateLimit};
use orrery_system::runtime::cache::Store;
use serde_json::json;

use crate::support::*;

const TOKEN: &str = "runtime-token";
const REPO: &str = "https://git.example/r.git";

fn files(version: u32) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "apps/a/deployment.yaml".into(),
            format!("image: a:v{version}"),
        ),
        ("apps/a/service.yaml".into(), "port: 80".into()),
    ])
}

/// `codefresh_event_reporter_<name>{…}` summed over the series whose labels contain `labels`.
async fn metric(env: &SharedEnv, name: &str, labels: &str) -> u64 {
    let client =
        orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(30));
    let response = client
        .request(
            http::Request::get("http://reporter-0:8087/metrics")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .expect("metrics answer");
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    let prefix = format!("codefresh_event_reporter_{name}{{");
    text.lines()
        .filter(|l| l.starts_with(&prefix) && l.contains(labels))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// Argo CD, the platform, a cache and one reporter replica; returns the sim, the shared
/// Git, the health overrides, the platform and the cache's memory.
fn world_with(variant: Variant, limit: Option<RateLimit>) -> Parts {
    world_counted(variant, limit, None)
}

/// The sim, the shared Git, the health overrides, the platform and the cache's memory.
type Parts = (
    World,
    SharedGit,
    HealthOverrides,
    std::sync::Arc<Platform>,
    Store,
);

/// [`world_with`], Argo CD counting the requests it answers into `cost`.
fn world_counted(
    variant: Variant,
    limit: Option<RateLimit>,
    cost: Option<std::sync::Arc<Cost>>,
) -> Parts {
    let mut w = world(Knobs::default());
    let git = SharedGit::default();
    git.lock().commit(REPO, "Dev <d@x>", "v1", 0, files(1));
    let health = HealthOverrides::default();
    let platform = Platform::new(events::Config {
        tokens: [(TOKEN.to_string(), "acme".to_string())]
            .into_iter()
            .collect(),
        bus_capacity: 100,
        durability: Default::default(),
        idempotency_keys: false,
    });
    let config = argocd::controller::Config {
        reconcile_every: Duration::from_secs(5),
        cost,
        ..Default::default()
    };
    w.argocd(&git, &health, config, "argo");
    let (trace, host_platform) = (w.trace.clone(), platform.clone());
    w.sim.host("platform", move || {
        let env = SimEnv::shared("platform", SEED, trace.clone());
        let platform = host_platform.clone();
        async move {
            events::run(env, platform, "0.0.0.0:8080").await?;
            Ok(())
        }
    });
    let (trace, store) = (w.trace.clone(), Store::default());
    let host_store = store.clone();
    w.sim.host("cache", move || {
        let env = SimEnv::shared("cache", SEED, trace.clone());
        let store = host_store.clone();
        async move {
            orrery_system::runtime::cache::run_with(env, "0.0.0.0:6379", store).await?;
            Ok(())
        }
    });
    let trace = w.trace.clone();
    w.sim.host("reporter-0", move || {
        let env = SimEnv::shared("reporter-0", SEED, trace.clone());
        let mut config =
            app_reporter::Config::new(variant, KubeTarget::new("apiserver:6443"), NAMESPACE);
        config.argocd_token = "argo".into();
        config.runtime_token = TOKEN.into();
        config.platform_addr = "platform:8080".into();
        config.cache_addr = "cache:6379".into();
        config.rate_limit = limit.clone();
        async move {
            app_reporter::run(env, config).await;
            Ok(())
        }
    });
    (w, git, health, platform, store)
}

/// Events of `kind` (`app`, `resource`) the reporter delivered.
async fn sent(env: SharedEnv, kind: &'static str) -> u64 {
    metric(
        &env,
        "sent_events_total",
        &format!("metric_event_type=\"{kind}\""),
    )
    .await
}

async fn create_app(
    env: &SharedEnv,
    client: kube::Client,
) -> Result<(), Box<dyn std::error::Error>> {
    let apps: Api<DynamicObject> = Api::namespaced_with(client, NAMESPACE, &application_resource());
    let mut app = DynamicObject::new("a", &application_resource()).within(NAMESPACE);
    app.data = json!({"spec": {"project": "default", "source": {"repoURL": REPO, "path": "apps/a"}, "syncPolicy": {"automated": {}}}});
    apps.create(&PostParams::default(), &app).await?;
    env.sleep(Duration::from_secs(10)).await;
    Ok(())
}

#[test]
fn one_app_event_and_one_event_per_changed_resource_and_reconcile_stamps_send_nothing() {
    let (mut w, git, health, platform, _) = world_with(Variant::Faithful, None);
    let trace = w.trace.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(60));
        create_app(&env, client).await?;
        let sent = |kind: &'static str| sent(env.clone(), kind);
        // Created, then synced by Argo CD: app events, and one event per resource.
        let apps_sent = sent("app").await;
        assert!(apps_sent >= 1);
        assert_eq!(
            sent("resource").await,
            2,
            "the app's Deployment and Service"
        );
        let resources = platform.resources_of("acme");
        assert_eq!(resources.len(), 2, "{resources:?}");
        assert!(
            resources
                .keys()
                .any(|k| k.ends_with("/apps/Deployment/a/a")),
            "{resources:?}"
        );

        // Several refreshes later (each writes reconciledAt): the app-level rules skip them all.
        env.sleep(Duration::from_secs(20)).await;
        assert_eq!(
            (sent("app").await, sent("resource").await),
            (apps_sent, 2),
            "reconcile stamps are not changes"
        );
        assert!(metric(&env, "cached_ignored_events", "metric_event_type=\"app\"").await >= 3);

        // Health changes: the app and its Deployment changed (its health is in its status);
        // the Service stays Healthy, as in a real Argo CD.
        health.set("a", "Degraded");
        env.sleep(Duration::from_secs(5)).await;
        assert_eq!(
            (sent("app").await, sent("resource").await),
            (apps_sent + 1, 3)
        );
        assert_eq!(
            platform.apps_of("acme")["argocd/a"].health_status,
            "Degraded"
        );

        // A commit to another app's path moves sync.revision (app event) but not the app's
        // latest history revision, so its resources stay cached.
        git.lock().commit(
            REPO,
            "Dev <d@x>",
            "other",
            0,
            BTreeMap::from([("apps/b/x.yaml".to_string(), "x".to_string())]),
        );
        env.sleep(Duration::from_secs(8)).await;
        assert_eq!(
            (sent("app").await, sent("resource").await),
            (apps_sent + 2, 3),
            "same latest revision: resources cached"
        );

        // A commit to the app's path: auto-sync, a new history revision, every resource re-sent.
        git.lock().commit(REPO, "Dev <d@x>", "v2", 0, files(2));
        env.sleep(Duration::from_secs(8)).await;
        assert_eq!(
            sent("resource").await,
            5,
            "a new revision re-sends every resource"
        );
        Ok(())
    });
    w.sim.run().unwrap();
}

/// What one app's life cost and left on the platform: Argo CD's requests by route, the
/// events delivered, and the platform's app and resource states.
struct Asked {
    requests: BTreeMap<String, u64>,
    sent: (u64, u64),
    shown: String,
}

/// One app created and synced, four health flaps, a commit to another app's path (a new
/// `sync.revision`) and one to its own (a new deployment), under `variant`.
fn asked_of_argocd(variant: Variant) -> Asked {
    let cost = std::sync::Arc::new(Cost::default());
    let (mut w, git, health, platform, _) = world_counted(variant, None, Some(cost.clone()));
    let trace = w.trace.clone();
    let outcome = std::sync::Arc::new(std::sync::Mutex::new((0, 0)));
    let sent_at_end = outcome.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(60));
        create_app(&env, client).await?;
        env.sleep(Duration::from_secs(10)).await;
        for state in ["Degraded", "Healthy", "Degraded", "Healthy"] {
            health.set("a", state);
            env.sleep(Duration::from_secs(6)).await;
        }
        let other = BTreeMap::from([("apps/b/x.yaml".to_string(), "x".to_string())]);
        git.lock().commit(REPO, "Dev <d@x>", "other", 0, other);
        env.sleep(Duration::from_secs(8)).await;
        git.lock().commit(REPO, "Dev <d@x>", "v2", 0, files(2));
        env.sleep(Duration::from_secs(12)).await;
        *sent_at_end.lock().unwrap() =
            (sent(env.clone(), "app").await, sent(env, "resource").await);
        Ok(())
    });
    w.sim.run().unwrap();
    let sent = *outcome.lock().unwrap();
    Asked {
        requests: cost.counters(),
        sent,
        shown: {
            // The hardened replica's lease writes move resourceVersions: the rest must match.
            let mut apps = platform.apps_of("acme");
            apps.values_mut().for_each(|a| a.resource_version = 0);
            format!("{apps:?} {:?}", platform.resources_of("acme"))
        },
    }
}

#[test]
fn hardened_asks_argo_cd_for_what_cannot_have_changed_once_and_shows_the_same() {
    let faithful = asked_of_argocd(Variant::Faithful);
    let hardened = asked_of_argocd(Variant::Hardened);
    let asked = |a: &Asked, route: &str| {
        a.requests
            .get(&format!("argocd.requests.{route}"))
            .copied()
            .unwrap_or(0)
    };
    // The same events and the same picture on the platform.
    assert_eq!(hardened.sent, faithful.sent);
    assert!(faithful.sent.0 >= 6, "{:?}", faithful.sent);
    assert_eq!(hardened.shown, faithful.shown);
    // faithful asks for the tree, the manifests and the metadata on every app event.
    assert_eq!(asked(&faithful, "resource-tree"), faithful.sent.0);
    assert!(asked(&faithful, "manifests") >= 2 * faithful.sent.0 - 1);
    assert!(asked(&faithful, "revision-metadata") >= faithful.sent.0 - 1);
    // hardened: the tree only while something is not Healthy (the new app, still
    // Progressing, and the two Degraded spells); manifests once per deployed revision (the
    // answer serves both the desired state and the app versions); metadata once per
    // commit deployed.
    assert!(
        asked(&hardened, "resource-tree") <= 3,
        "{:?}",
        hardened.requests
    );
    assert!(
        asked(&hardened, "manifests") <= 2,
        "{:?}",
        hardened.requests
    );
    assert!(
        asked(&hardened, "revision-metadata") <= 2,
        "{:?}",
        hardened.requests
    );
    // The live resources are read as often: each resource event needs its live state.
    assert_eq!(asked(&hardened, "resource"), asked(&faithful, "resource"));
}

/// What the platform shows after five health flaps under a 2-events-per-10-minutes limit.
struct Limited {
    /// Health on the platform 20 s after the flaps.
    soon: String,
    /// Health on the platform after the app's window refilled.
    later: String,
    dropped: u64,
    enqueued: u64,
}

fn flaps_under_a_rate_limit(variant: Variant, learning_mode: bool) -> Limited {
    let limit = RateLimit {
        bucket_size: 2,
        period: Duration::from_secs(600),
        learning_mode,
    };
    let (mut w, _git, health, platform, _) = world_with(variant, Some(limit));
    let trace = w.trace.clone();
    let out = std::sync::Arc::new(std::sync::Mutex::new(None));
    let result = out.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(60));
        create_app(&env, client).await?;
        for health_now in ["Degraded", "Healthy", "Degraded", "Progressing", "Degraded"] {
            health.set("a", health_now);
            env.sleep(Duration::from_secs(1)).await;
        }
        env.sleep(Duration::from_secs(20)).await;
        let soon = platform.apps_of("acme")["argocd/a"].health_status.clone();
        let dropped = metric(&env, "dropped_events_total", "").await;
        let enqueued = metric(&env, "enqueued_events_total", "").await;
        env.sleep(Duration::from_secs(600)).await;
        let later = platform.apps_of("acme")["argocd/a"].health_status.clone();
        *result.lock().unwrap() = Some(Limited {
            soon,
            later,
            dropped,
            enqueued,
        });
        Ok(())
    });
    w.sim.run().unwrap();
    let out = out.lock().unwrap().take().expect("the client finished");
    out
}

#[test]
fn the_rate_limiter_drops_in_faithful_counts_in_learning_mode_and_defers_in_hardened() {
    let faithful = flaps_under_a_rate_limit(Variant::Faithful, false);
    assert!(
        faithful.dropped > 0,
        "events beyond two per window are dropped"
    );
    assert_eq!(faithful.soon, "Healthy", "every flap was dropped");
    assert_eq!(
        faithful.later, "Degraded",
        "the next window's first reconcile stamp carries the current state (reconcile churn heals it)"
    );

    let learning = flaps_under_a_rate_limit(Variant::Faithful, true);
    assert_eq!(learning.dropped, 0, "learning mode drops nothing");
    assert!(learning.enqueued > 2);
    assert_eq!(learning.soon, "Degraded");

    let hardened = flaps_under_a_rate_limit(Variant::Hardened, false);
    assert_eq!(hardened.soon, "Healthy", "limited, as faithful");
    assert_eq!(
        hardened.later, "Degraded",
        "deferred to the app's next window, not lost"
    );
}

#[test]
fn a_flushed_cache_makes_the_reporter_resend_the_app_and_every_resource() {
    // Research §1.8: "after a long outage, or a Redis flush, all apps are re-sent".
    let (mut w, _git, _health, _platform, store) = world_with(Variant::Faithful, None);
    let trace = w.trace.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(60));
        create_app(&env, client).await?;
        let sent = |kind: &'static str| sent(env.clone(), kind);
        env.sleep(Duration::from_secs(10)).await;
        let before = (sent("app").await, sent("resource").await);
        assert_eq!(before.1, 2);
        let keys = store.len(env.elapsed());
        assert_eq!(
            keys, 3,
            "the app entry and one entry per resource, over RESP"
        );
        env.sleep(Duration::from_secs(10)).await;
        assert_eq!(
            (sent("app").await, sent("resource").await),
            before,
            "stamps only, all cached"
        );
        store.flush();
        env.sleep(Duration::from_secs(10)).await;
        assert_eq!(
            (sent("app").await, sent("resource").await),
            (before.0 + 1, before.1 + 2),
            "the next reconcile stamp finds no entry: the app and both resources are sent again"
        );
        assert_eq!(store.len(env.elapsed()), 3, "and cached again");
        Ok(())
    });
    w.sim.run().unwrap();
}
