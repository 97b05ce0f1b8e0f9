//! Git webhooks through the request routing service (ingress mode) over turmoil: a push
//! to `/webhooks/<ns>/<name>` reaches the Service `<name>-eventsource-svc.<ns>.svc.cluster.local`
//! with its URI unchanged, any event source without configuration, and a name nothing
//! answers to is a 502, as the chart's nginx.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use orrery_sim::env::SimEnv;
use orrery_system::env::http::{json, serve};
use orrery_system::env::SharedEnv;
use orrery_system::runtime::router::{self, Routes};
use serde_json::json;

use crate::support::*;

#[test]
fn webhooks_reach_the_event_source_named_in_the_path() {
    let mut w = sim(Duration::from_secs(60));
    let trace = orrery_sim::trace::Trace::default();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (host_trace, host_seen) = (trace.clone(), seen.clone());
    w.host("push-eventsource-svc.ci.svc.cluster.local", move || {
        let env = SimEnv::shared("eventsource", SEED, host_trace.clone());
        let seen = host_seen.clone();
        async move {
            let listener = env.listen("0.0.0.0:80").await?;
            serve(listener, move |request, _peer| {
                let seen = seen.clone();
                async move {
                    let uri = request.uri().to_string();
                    seen.lock().unwrap().push(uri);
                    json(http::StatusCode::OK, &json!({"accepted": true}))
                }
            })
            .await?;
            Ok(())
        }
    });
    let host_trace = trace.clone();
    w.host("router", move || {
        let env = SimEnv::shared("router", SEED, host_trace.clone());
        async move {
            router::run(
                env,
                Routes::new("app-proxy:3017", "workflows:2746"),
                "0.0.0.0:8080",
            )
            .await?;
            Ok(())
        }
    });
    w.client("github", async move {
        let env: SharedEnv = SimEnv::shared("github", SEED, trace.clone());
        let client =
            orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(20));
        let post = |path: &str| {
            http::Request::post(format!("http://router:8080{path}"))
                .header("x-github-event", "push")
                .body(Full::new(Bytes::from_static(
                    b"{\"ref\":\"refs/heads/main\"}",
                )))
                .unwrap()
        };
        let response = client.request(post("/webhooks/ci/push?secret=1")).await?;
        assert_eq!(response.status(), 200);
        let missing = client.request(post("/webhooks/ci/nothing-here")).await?;
        assert_eq!(missing.status(), 502, "a name that does not resolve");
        let body = missing.into_body().collect().await?.to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("nothing-here-eventsource-svc.ci"));
        assert_eq!(*seen.lock().unwrap(), ["/webhooks/ci/push?secret=1"]);
        Ok(())
    });
    w.run().unwrap();
}

/// A push to the simulated Git provider is delivered, signed, to the runtime's webhook
/// EventSource twice — through the platform's gateway and the tunnel, and through the
/// router's ingress — and each delivery lands on the event bus; a hook with the wrong
/// secret is refused.
#[test]
fn a_git_push_reaches_the_event_bus_through_the_tunnel_and_through_the_ingress() {
    use orrery_sim::world::git::{self, Hook, SharedGit};
    use orrery_system::core::Variant;
    use orrery_system::observe::{WebhookEvent, WorldEvent};
    use orrery_system::platform::assembly::{
        self as control_plane, ControlPlaneConfig, ControlPlaneState, GatewayConfig,
        TunnelServerConfig,
    };
    use orrery_system::platform::tunnel;
    use orrery_system::runtime::assembly::{self as runtime_assembly, RouterConfig, RuntimeConfig};
    use orrery_system::runtime::resource_reporter::bus;
    use orrery_system::runtime::{tunnel_client, webhook_source};

    const REPO: &str = "https://git.example/shop.git";
    let mut w = sim(Duration::from_secs(120));
    let trace = orrery_sim::trace::Trace::default();
    let state = ControlPlaneState::default();
    state.registry.insert("rt-token", "acme", "prod");
    let platform = ControlPlaneConfig {
        tunnel: Some(TunnelServerConfig {
            listen: "0.0.0.0:8443".into(),
            config: tunnel::Config::new(Variant::Hardened),
        }),
        gateway: Some(GatewayConfig {
            listen: "0.0.0.0:8080".into(),
            admin_token: "admin".into(),
        }),
        events: None,
        promotions: None,
        runner: None,
        monitor: None,
        cron: None,
        anti_entropy: None,
        vclusters: Vec::new(),
        database: None,
    };
    // Each host runs the runtime assembly with what its pod would run.
    let mut boot = |host: &'static str, config: RuntimeConfig| {
        let host_trace = trace.clone();
        w.host(host, move || {
            let env = SimEnv::shared(host, SEED, host_trace.clone());
            let config = config.clone();
            async move {
                runtime_assembly::run(env, config, std::future::pending())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
        });
    };
    boot(
        "runtime",
        RuntimeConfig {
            tunnels: vec![tunnel_client::Config::new(
                Variant::Hardened,
                "platform:8443",
                "acme-prod",
                "rt-token",
            )],
            router: Some(RouterConfig {
                routes: Routes::new("app-proxy:3017", "workflows:2746"),
                ingress: Some("0.0.0.0:8088".into()),
            }),
            ..Default::default()
        },
    );
    let mut source = webhook_source::Config::new("ci", "push", "0.0.0.0:80", "eventbus:4222");
    source.secret = Some("s3cret".into());
    boot(
        "push-eventsource-svc.ci.svc.cluster.local",
        RuntimeConfig {
            webhook_sources: vec![source],
            ..Default::default()
        },
    );
    let store = bus::Store::default();
    boot(
        "eventbus",
        RuntimeConfig {
            event_bus: Some("0.0.0.0:4222".into()),
            bus_store: Some(store.clone()),
            ..Default::default()
        },
    );
    let host_trace = trace.clone();
    w.host("platform", move || {
        let env = SimEnv::shared("platform", SEED, host_trace.clone());
        let (config, state) = (platform.clone(), state.clone());
        async move {
            control_plane::run(env, config, state, std::future::pending())
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        }
    });
    let git = SharedGit::default();
    for (url, secret) in [
        (
            "http://platform:8080/api/runtimes/acme-prod/webhooks/ci/push",
            "s3cret",
        ),
        ("http://runtime:8088/webhooks/ci/push", "s3cret"),
        ("http://runtime:8088/webhooks/ci/push", "wrong"),
    ] {
        git.lock().add_hook(
            REPO,
            Hook {
                url: url.into(),
                secret: Some(secret.into()),
            },
        );
    }
    let (host_trace, host_git, host_store) = (trace.clone(), git.clone(), store.clone());
    w.client("github", async move {
        let env: SharedEnv = SimEnv::shared("github", SEED, host_trace.clone());
        tokio::spawn(git::deliver_webhooks(env.clone(), host_git.clone()));
        env.sleep(Duration::from_secs(5)).await; // the tunnel is up
        let files = [("apps/web/values.yaml".to_string(), "tag: v2".to_string())];
        let sha =
            host_git
                .lock()
                .commit(REPO, "Dev <dev@example.com>", "bump web", 0, files.into());
        env.sleep(Duration::from_secs(10)).await;
        assert_eq!(
            host_store.backlog().get("push"),
            Some(&2),
            "one per good hook"
        );
        let bus = bus::Client::new(env.clone(), "eventbus:4222", Duration::from_secs(5));
        let bus::Fetched::Message(_, message) = bus.fetch("push", "sensor").await? else {
            panic!("a message on the bus");
        };
        let message: serde_json::Value = serde_json::from_slice(&message)?;
        assert_eq!(message["body"]["after"], sha);
        assert_eq!(message["body"]["ref"], "refs/heads/main");
        assert_eq!(message["header"]["X-GitHub-Event"][0], "push");
        Ok(())
    });
    w.run().unwrap();
    let events = trace.events();
    let statuses: Vec<(String, u16)> = events
        .iter()
        .filter_map(|e| match e.world() {
            Some(WorldEvent::GitWebhook { url, status, .. }) => Some((url.clone(), *status)),
            _ => None,
        })
        .collect();
    assert_eq!(statuses.len(), 3, "{statuses:?}");
    assert_eq!(
        statuses.iter().filter(|(_, s)| *s == 200).count(),
        2,
        "{statuses:?}"
    );
    assert!(statuses.iter().any(|(_, s)| *s == 400), "{statuses:?}");
    assert!(events.iter().any(|e| matches!(
        &e.entry,
        orrery_sim::trace::Entry::Observed(orrery_system::observe::Observation::Webhooks(
            WebhookEvent::Refused { why, .. }
        )) if why.contains("X-Hub-Signature-256")
    )));
}
