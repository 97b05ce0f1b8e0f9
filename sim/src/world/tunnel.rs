//! The tunnel world: the platform's gateway (tunnel server + client API), a runtime behind
//! its tunnel with an app-proxy stand-in that executes writes, and clients sending a steady
//! mix of reads and state-changing requests. Clients and the stand-in record what they saw
//! and did, so checkers can tell answered from hung and once from twice.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::json;

use orrery_system::core::Variant;
use orrery_system::env::http::{full, json as json_response};
use orrery_system::env::{Observation, SharedEnv};
use orrery_system::platform::gateway::{self, Gateway};
use orrery_system::platform::registry::Registry;
use orrery_system::platform::tunnel::{self, TunnelServer};
use orrery_system::runtime::router::{Router, Routes};
use orrery_system::runtime::tunnel_client;

use crate::scenario::model::Tunnel as Settings;

/// Account of the simulated runtimes.
pub const ACCOUNT: &str = "acme";
/// Port of the tunnel server.
pub const TUNNEL_PORT: u16 = 8443;
/// Port of the client gateway.
pub const GATEWAY_PORT: u16 = 8081;
/// Port of the app-proxy stand-in.
pub const APP_PROXY_PORT: u16 = 3017;
/// A client gives up on an answer after this long and records the request as hung.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The runtimes a host runs: `(runtime, tunnel name, token)`; one per host is named after
/// the host (`acme-prod`), fleets get an index (`acme-fleet-0-17`).
pub fn runtimes_of(host: &str, per_host: u32) -> Vec<(String, String, String)> {
    (0..per_host.max(1))
        .map(|i| {
            let runtime = if per_host <= 1 {
                host.to_string()
            } else {
                format!("{host}-{i}")
            };
            (
                runtime.clone(),
                format!("{ACCOUNT}-{runtime}"),
                format!("rt-token-{ACCOUNT}-{runtime}"),
            )
        })
        .collect()
}

/// Registers every runtime with the platform's registry (platform state that survives a
/// gateway restart, as a database would).
pub fn register(registry: &Registry, runtime_hosts: &[String], per_host: u32) {
    for host in runtime_hosts {
        for (runtime, _, token) in runtimes_of(host, per_host) {
            registry.insert(&token, ACCOUNT, &runtime);
        }
    }
}

/// Runs the gateway host: a fresh tunnel server (a restart loses every tunnel) and the client API.
pub async fn run_gateway(
    env: SharedEnv,
    registry: Arc<Registry>,
    variant: Variant,
    settings: Settings,
) -> std::io::Result<()> {
    let mut config = tunnel::Config::new(variant);
    config.registration_cost = settings.registration_cost;
    config.max_pending_registrations = settings.max_pending_registrations;
    let tunnels = TunnelServer::new(config, registry.clone());
    let gateway = Arc::new(Gateway {
        admin_token: "sim-admin".into(),
        registry,
        tunnels: tunnels.clone(),
        permissions: Default::default(),
    });
    let tunnel_env = env.clone();
    tokio::spawn(async move {
        tunnel::run(tunnel_env, tunnels, &format!("0.0.0.0:{TUNNEL_PORT}")).await
    });
    gateway::run(env, gateway, &format!("0.0.0.0:{GATEWAY_PORT}")).await
}

/// Runs a runtime host: the app-proxy stand-in, the router, and one tunnel client per runtime.
pub async fn run_runtime(
    env: SharedEnv,
    variant: Variant,
    gateway_host: String,
    settings: Settings,
) -> std::io::Result<()> {
    let host = env.identity().host.clone();
    let listener = env.listen(&format!("0.0.0.0:{APP_PROXY_PORT}")).await?;
    let stand_in = env.clone();
    tokio::spawn(orrery_system::env::http::serve(
        listener,
        move |request, _| {
            let env = stand_in.clone();
            let delay = settings.execute_delay;
            async move {
                if request.method() != http::Method::POST {
                    return http::Response::new(full("ok"));
                }
                let key = request
                    .headers()
                    .get(orrery_system::tunnel::REQUEST_ID_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                // Once started, a write completes even if its caller goes away (a Git commit does).
                let execution = tokio::spawn(async move {
                    env.sleep(delay).await;
                    env.observe(Observation::new("runtime.execute", json!({"key": key})));
                    key
                });
                let key = execution.await.unwrap_or_default();
                json_response(http::StatusCode::CREATED, &json!({"executed": key}))
            }
        },
    ));
    let router = Router::new(
        env.clone(),
        Routes {
            app_proxy: format!("{host}:{APP_PROXY_PORT}"),
            ..Default::default()
        },
    );
    let handler: tunnel_client::Handler = Arc::new(move |request| {
        let router = router.clone();
        Box::pin(async move { router.handle(request).await })
    });
    for (_, name, token) in runtimes_of(&host, settings.runtimes_per_host) {
        let config = tunnel_client::Config::new(
            variant,
            &format!("{gateway_host}:{TUNNEL_PORT}"),
            &name,
            &token,
        );
        let (env, handler) = (env.clone(), handler.clone());
        tokio::spawn(async move {
            if let Err(fatal) = tunnel_client::run(env.clone(), config, handler).await {
                env.observe(Observation::new(
                    "tunnel.client_exit",
                    json!({"runtime": name, "why": fatal.to_string()}),
                ));
            }
        });
    }
    Ok(())
}

async fn attempt(
    env: &SharedEnv,
    client: &orrery_system::env::http::Client<Full<Bytes>>,
    url: &str,
    write: bool,
    key: &str,
) -> u16 {
    let mut request = http::Request::builder()
        .method(if write { "POST" } else { "GET" })
        .uri(url);
    if write {
        request = request.header("idempotency-key", key);
    }
    let Ok(request) = request.body(Full::new(Bytes::new())) else {
        return 0;
    };
    let exchange = async {
        match client.request(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                let _ = response.into_body().collect().await;
                status
            }
            Err(_) => 1, // the gateway itself was unreachable
        }
    };
    tokio::select! {
        biased;
        status = exchange => status,
        _ = env.sleep(CLIENT_TIMEOUT) => 0,
    }
}

/// Runs a client host: one request every `request_every` to every runtime, alternating
/// reads and writes; writes with an unknown outcome are retried with the same key.
pub async fn run_client(
    env: SharedEnv,
    gateway_host: String,
    runtime_hosts: Vec<String>,
    settings: Settings,
) {
    let client = orrery_system::env::http::client::<Full<Bytes>>(env.clone(), CLIENT_TIMEOUT);
    let me = env.identity().host.clone();
    let mut n: u64 = 0;
    loop {
        env.sleep(settings.request_every).await;
        for host in &runtime_hosts {
            n += 1;
            let (_, name, _) = runtimes_of(host, settings.runtimes_per_host).remove(0);
            let write = n.is_multiple_of(2);
            let path = if write {
                "app-proxy/api/commit"
            } else {
                "app-proxy/api/status"
            };
            let url = format!("http://{gateway_host}:{GATEWAY_PORT}/api/runtimes/{name}/{path}");
            let key = format!("{me}-{n}");
            let (env, client, settings) = (env.clone(), client.clone(), settings.clone());
            tokio::spawn(async move {
                for attempt_no in 1..=(if write {
                    settings.write_attempts.max(1)
                } else {
                    1
                }) {
                    let started = env.elapsed();
                    let status = attempt(&env, &client, &url, write, &key).await;
                    let latency_ms = (env.elapsed() - started).as_millis() as u64;
                    env.observe(Observation::new(
                        "client.request",
                        json!({"key": key, "write": write, "attempt": attempt_no, "status": status, "latency_ms": latency_ms}),
                    ));
                    let unknown_outcome = matches!(status, 0 | 1 | 502 | 503 | 504);
                    if !unknown_outcome {
                        break;
                    }
                    env.sleep(settings.retry_after).await;
                }
            });
        }
    }
}
