//! The tunnel end to end over turmoil: client → platform gateway → tunnel server →
//! WebSocket/HTTP2 → tunnel client → router → an upstream. Requests across a drop are
//! answered with a clear error within the deadline, state-changing requests run at most
//! once, refused registrations carry a reason, and the variants differ in drop detection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use orrery_sim::env::SimEnv;
use orrery_system::core::Variant;
use orrery_system::env::http::{full, json as json_response};
use orrery_system::env::limits::Limits;
use orrery_system::env::SharedEnv;
use orrery_system::platform::assembly::{
    self as control_plane, ControlPlaneConfig, ControlPlaneState, GatewayConfig, TunnelServerConfig,
};
use orrery_system::platform::registry::Registry;
use orrery_system::platform::tunnel;
use orrery_system::runtime::assembly::{self as runtime_assembly, RouterConfig, RuntimeConfig};
use orrery_system::runtime::router::Routes;
use orrery_system::runtime::tunnel_client;
use serde_json::{json, Value};

use crate::support::SEED;
use orrery_sim::trace::Trace;

const TOKEN: &str = "rt-token-acme-prod";
const NAME: &str = "acme-prod";
/// A user of account acme.
const USER_TOKEN: &str = "user-token-acme";

async fn call(env: &SharedEnv, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let client =
        orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(60));
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://platform:8080{path}"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    // A user of acme unless the caller authenticates otherwise: the gateway forwards only
    // for users of the runtime's account.
    if !headers.iter().any(|(k, _)| *k == "authorization") {
        request = request.header("authorization", format!("Bearer {USER_TOKEN}"));
    }
    match client
        .request(request.body(Full::new(Bytes::new())).unwrap())
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            (
                status,
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into())),
            )
        }
        Err(e) => (0, Value::String(e.to_string())),
    }
}

/// The runtimes whose tunnel is up, as the platform's gateway lists them.
async fn connected(env: &SharedEnv) -> Vec<String> {
    let (status, body) = call(
        env,
        "GET",
        "/api/runtimes",
        &[("authorization", "Bearer admin")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["connected"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(String::from))
        .collect()
}

struct TunnelWorld {
    sim: turmoil::Sim<'static>,
    executed: Arc<AtomicU64>,
    refused: Arc<std::sync::Mutex<Option<String>>>,
}

/// The platform (control-plane assembly), an upstream app-proxy stand-in, and a runtime
/// (runtime assembly) whose tunnel presents `runtime_token`.
fn tunnel_world(variant: Variant, runtime_token: &str) -> TunnelWorld {
    tunnel_world_with(variant, runtime_token, Limits::DEFAULT)
}

/// [`tunnel_world`] with the platform held to `limits`. The app-proxy stand-in answers
/// `/slow` after a minute.
fn tunnel_world_with(variant: Variant, runtime_token: &str, limits: Limits) -> TunnelWorld {
    let mut sim = crate::support::sim(Duration::from_secs(600));
    let trace = Trace::default();
    let state = ControlPlaneState::default();
    state.registry.insert(TOKEN, "acme", "prod");
    // Registered, never connected: its requests get 503, not 404.
    state
        .registry
        .insert("rt-token-acme-other", "acme", "other");
    state
        .permissions
        .grant_in(USER_TOKEN, "acme", "client", &[]);
    state
        .permissions
        .grant_in("user-token-acme-other", "acme", "other", &[]);
    let platform = ControlPlaneConfig {
        tunnel: Some(TunnelServerConfig {
            listen: "0.0.0.0:8443".into(),
            config: tunnel::Config::new(variant),
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
    let host_trace = trace.clone();
    sim.host("platform", move || {
        let env = orrery_system::env::limits::with_limits(
            SimEnv::shared("platform", SEED, host_trace.clone()),
            limits.clone(),
        );
        let (config, state) = (platform.clone(), state.clone());
        async move {
            control_plane::run(env, config, state, std::future::pending())
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        }
    });
    // The edge: an upstream that counts the state-changing requests it executes.
    let executed = Arc::new(AtomicU64::new(0));
    let (host_trace, counter) = (trace.clone(), executed.clone());
    sim.host("app-proxy", move || {
        let (env, counter) = (
            SimEnv::shared("app-proxy", SEED, host_trace.clone()),
            counter.clone(),
        );
        async move {
            let listener = env.listen("0.0.0.0:3017").await?;
            let slow_env = env.clone();
            orrery_system::env::http::serve(listener, move |request, _| {
                let (counter, slow_env) = (counter.clone(), slow_env.clone());
                async move {
                    if request.uri().path().ends_with("/slow") {
                        slow_env.sleep(Duration::from_secs(60)).await;
                    }
                    if request.method() == http::Method::POST {
                        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                        json_response(http::StatusCode::CREATED, &json!({"executed": n}))
                    } else {
                        http::Response::new(full("proxy"))
                    }
                }
            })
            .await?;
            Ok(())
        }
    });
    let refused = Arc::new(std::sync::Mutex::new(None));
    let runtime = RuntimeConfig {
        tunnels: vec![tunnel_client::Config::new(
            variant,
            "platform:8443",
            NAME,
            runtime_token,
        )],
        router: Some(RouterConfig {
            routes: Routes {
                app_proxy: "app-proxy:3017".into(),
                ..Default::default()
            },
            ingress: None,
        }),
        ..Default::default()
    };
    let (host_trace, host_refused) = (trace.clone(), refused.clone());
    sim.host("runtime", move || {
        let env = SimEnv::shared("runtime", SEED, host_trace.clone());
        let (config, refused) = (runtime.clone(), host_refused.clone());
        async move {
            if let Err(gave_up) = runtime_assembly::run(env, config, std::future::pending()).await {
                *refused.lock().unwrap() = Some(gave_up.to_string());
            }
            Ok(())
        }
    });
    TunnelWorld {
        sim,
        executed,
        refused,
    }
}

#[test]
fn requests_cross_the_tunnel_and_state_changes_run_once_even_when_retried() {
    let mut w = tunnel_world(Variant::Hardened, TOKEN);
    let executed = w.executed.clone();
    w.sim.client("client", async move {
        let env = SimEnv::shared("client", SEED, Trace::default());
        env.sleep(Duration::from_secs(3)).await;
        assert_eq!(connected(&env).await, vec![NAME.to_string()]);
        assert_eq!(
            call(&env, "GET", "/api/runtimes/acme-prod/healthz", &[])
                .await
                .0,
            200
        );
        assert_eq!(
            call(&env, "GET", "/api/runtimes/acme-prod/app-proxy/api/x", &[]).await,
            (200, json!("proxy"))
        );
        assert_eq!(
            call(&env, "GET", "/api/runtimes/acme-prod/nowhere", &[])
                .await
                .0,
            404
        );
        let (code, body) = call(&env, "GET", "/api/runtimes/acme-other/healthz", &[]).await;
        assert_eq!(code, 503, "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("runtime unreachable"),
            "{body}"
        );

        let key = [("idempotency-key", "commit-1")];
        assert_eq!(
            call(
                &env,
                "POST",
                "/api/runtimes/acme-prod/app-proxy/commit",
                &key
            )
            .await,
            (201, json!({"executed": 1}))
        );
        assert_eq!(
            call(
                &env,
                "POST",
                "/api/runtimes/acme-prod/app-proxy/commit",
                &key
            )
            .await,
            (201, json!({"executed": 1})),
            "a retry replays the answer"
        );
        assert_eq!(executed.load(Ordering::SeqCst), 1, "executed once");
        assert_eq!(
            call(
                &env,
                "POST",
                "/api/runtimes/acme-prod/app-proxy/commit",
                &[("idempotency-key", "commit-2")]
            )
            .await
            .1,
            json!({"executed": 2})
        );
        // Keys are the user's own: another user's "commit-1" is another write, and a request
        // id sent directly (to replay someone's recorded answer) is dropped by the gateway.
        let other = [
            ("idempotency-key", "commit-1"),
            ("authorization", "Bearer user-token-acme-other"),
        ];
        assert_eq!(
            call(
                &env,
                "POST",
                "/api/runtimes/acme-prod/app-proxy/commit",
                &other
            )
            .await
            .1,
            json!({"executed": 3})
        );
        let forged = [
            ("x-orrery-request-id", "client/commit-1"),
            ("authorization", "Bearer user-token-acme-other"),
        ];
        assert_eq!(
            call(
                &env,
                "POST",
                "/api/runtimes/acme-prod/app-proxy/commit",
                &forged
            )
            .await
            .1,
            json!({"executed": 4})
        );
        Ok(())
    });
    w.sim.run().unwrap();
}

/// Partitions the runtime from the platform at 5 s and reports (seconds until the platform
/// dropped the tunnel, the answer a request got during the partition, seconds from repair
/// until the tunnel was back).
fn partition_and_repair(variant: Variant) -> (u64, u16, u64) {
    let mut w = tunnel_world(variant, TOKEN);
    let outcome = Arc::new(std::sync::Mutex::new((0, 0, 0)));
    let result = outcome.clone();
    w.sim.client("client", async move {
        let env = SimEnv::shared("client", SEED, Trace::default());
        env.sleep(Duration::from_secs(5)).await;
        assert_eq!(
            connected(&env).await,
            vec![NAME.to_string()],
            "tunnel up before the fault"
        );
        turmoil::partition("runtime", "platform");
        let cut = env.elapsed();
        let started = env.elapsed();
        let (code, body) = call(&env, "GET", "/api/runtimes/acme-prod/healthz", &[]).await;
        let answered = env.elapsed() - started;
        assert!(
            matches!(code, 502..=504),
            "a request across a drop gets a clear error, got {code} {body}"
        );
        assert!(
            answered <= Duration::from_secs(11),
            "answered within the deadline, took {answered:?}"
        );
        let mut detected = 0;
        for second in 1..=120 {
            if !connected(&env).await.contains(&NAME.to_string()) {
                detected = (env.elapsed() - cut).as_secs();
                break;
            }
            env.sleep(Duration::from_secs(1)).await;
            if second == 120 {
                detected = 999;
            }
        }
        turmoil::repair("runtime", "platform");
        let repaired = env.elapsed();
        let mut back = 999;
        for _ in 0..180 {
            if connected(&env).await.contains(&NAME.to_string()) {
                back = (env.elapsed() - repaired).as_secs();
                break;
            }
            env.sleep(Duration::from_secs(1)).await;
        }
        *result.lock().unwrap() = (detected, code, back);
        Ok(())
    });
    w.sim.run().unwrap();
    let outcome = *outcome.lock().unwrap();
    eprintln!(
        "{}: drop detected after {} s, request answered {}, back {} s after repair",
        variant.as_str(),
        outcome.0,
        outcome.1,
        outcome.2
    );
    outcome
}

#[test]
fn hardened_detects_a_silent_drop_in_seconds_and_reconnects_after_repair() {
    let (detected, code, back) = partition_and_repair(Variant::Hardened);
    assert!(
        detected <= 6,
        "hardened drops a silent tunnel within ~5 s (PING 2 s + 3 s timeout), took {detected} s"
    );
    assert!(matches!(code, 502..=504));
    assert!(
        back <= 35,
        "tunnel back within the backoff cap after repair, took {back} s"
    );
}

#[test]
fn faithful_leaves_a_silent_drop_unnoticed_for_about_a_minute() {
    let (detected, _, back) = partition_and_repair(Variant::Faithful);
    assert!((55..=90).contains(&detected), "the real keepalive (60 s + timeout) notices a silent drop after about a minute, took {detected} s");
    assert!(back <= 60, "tunnel back after repair, took {back} s");
}

#[test]
fn a_foreign_or_unknown_token_is_refused_with_a_reason_and_faithful_exits_on_the_first_refusal() {
    let mut w = tunnel_world(Variant::Faithful, "stolen-token");
    let refused = w.refused.clone();
    w.sim.client("client", async move {
        let env = SimEnv::shared("client", SEED, Trace::default());
        env.sleep(Duration::from_secs(10)).await;
        assert!(connected(&env).await.is_empty());
        let reason = refused
            .lock()
            .unwrap()
            .clone()
            .expect("the faithful client exits after the first refused login");
        assert!(
            reason.contains("401") && reason.contains("unknown runtime token"),
            "{reason}"
        );
        Ok(())
    });
    w.sim.run().unwrap();

    let registry = Registry::default();
    registry.insert("t1", "acme", "prod");
    let foreign = tunnel::authorise(&registry, Some("Bearer t1"), Some("globex-prod")).unwrap_err();
    assert_eq!(foreign.status(), 403);
    assert!(foreign.to_string().contains("does not belong"), "{foreign}");
    assert_eq!(
        tunnel::authorise(&registry, None, Some("acme-prod")).unwrap_err(),
        orrery_system::tunnel::Rejection::MissingToken
    );
    assert_eq!(
        tunnel::authorise(&registry, Some("Bearer t1"), Some("acme-prod")).unwrap(),
        "acme-prod"
    );
}

// Issue 53: `tunnel.requests-per-runtime` (set to 2 here) — a third request forwarded into a
// runtime's tunnel while two hang is refused at once with 429 naming the limit, instead of
// queueing behind them; once they end, the runtime is reached again.
#[test]
fn a_runtime_past_its_forwarded_requests_gets_429_and_is_reached_again_after() {
    let mut limits = Limits::DEFAULT;
    limits.set("tunnel.requests-per-runtime=2").unwrap();
    let mut w = tunnel_world_with(Variant::Hardened, TOKEN, limits);
    w.sim.client("client", async move {
        let env = SimEnv::shared("client", SEED, Trace::default());
        env.sleep(Duration::from_secs(3)).await;
        assert_eq!(connected(&env).await, vec![NAME.to_string()]);
        let slow = "/api/runtimes/acme-prod/app-proxy/slow";
        let hanging: Vec<_> = (0..2)
            .map(|_| {
                let env = env.clone();
                tokio::spawn(async move { call(&env, "GET", slow, &[]).await.0 })
            })
            .collect();
        env.sleep(Duration::from_secs(1)).await;
        let (code, body) = call(&env, "GET", "/api/runtimes/acme-prod/app-proxy/api/x", &[]).await;
        assert_eq!(code, 429, "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("tunnel.requests-per-runtime"),
            "{body}"
        );
        // The two hanging requests end at the platform's deadline (504), and free their slots.
        for request in hanging {
            assert_eq!(request.await.unwrap(), 504);
        }
        assert_eq!(
            call(&env, "GET", "/api/runtimes/acme-prod/app-proxy/api/x", &[]).await,
            (200, json!("proxy"))
        );
        Ok(())
    });
    w.sim.run().unwrap();
}

#[test]
fn garbage_and_oversize_frames_close_only_the_offending_connection() {
    use futures::SinkExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::Message;

    let mut w = tunnel_world(Variant::Hardened, TOKEN);
    w.sim.client("client", async move {
        let env = SimEnv::shared("client", SEED, Trace::default());
        env.sleep(Duration::from_secs(3)).await;
        assert_eq!(connected(&env).await, vec![NAME.to_string()]);

        // Not HTTP at all: the server closes that connection (and records why).
        let mut raw = env.connect("platform:8443").await?;
        raw.write_all(b"\x16\x03\x01 this is not a websocket upgrade\r\n\r\n")
            .await?;
        let mut answer = Vec::new();
        let _ = raw.read_to_end(&mut answer).await;
        assert!(
            !String::from_utf8_lossy(&answer).contains(" 101 "),
            "no upgrade for garbage: {}",
            String::from_utf8_lossy(&answer)
        );

        // A registered impostor sending a frame over the 1 MiB limit: its connection closes.
        let stream = env.connect("platform:8443").await?;
        let request = http::Request::builder()
            .uri("ws://platform:8443/tunnel")
            .header("host", "platform:8443")
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .header("authorization", format!("Bearer {TOKEN}"))
            .header(orrery_system::tunnel::RUNTIME_HEADER, NAME)
            .body(())
            .unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(request, stream)
            .await
            .expect("a valid registration is accepted");
        let _ = ws
            .send(Message::Binary(Bytes::from(vec![0u8; 2 << 20])))
            .await;
        env.sleep(Duration::from_secs(2)).await;
        // Whatever the server had already sent (its HTTP/2 preface), the stream then ends.
        let mut closed = false;
        for _ in 0..10 {
            match futures::StreamExt::next(&mut ws).await {
                Some(Ok(Message::Binary(_))) => continue,
                _ => {
                    closed = true;
                    break;
                }
            }
        }
        assert!(closed, "the oversize sender's connection is closed");

        // The server is still up: the real runtime reconnects (the impostor had replaced it) and serves.
        env.sleep(Duration::from_secs(10)).await;
        let (code, _) = call(&env, "GET", "/api/runtimes/acme-prod/healthz", &[]).await;
        assert_eq!(code, 200, "the tunnel server kept serving");
        Ok(())
    });
    w.sim.run().unwrap();
}
