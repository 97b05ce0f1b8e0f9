//! The tunnel world's own pieces: an app-proxy stand-in behind each runtime that executes
//! writes, and clients sending a steady mix of reads and state-changing requests through the
//! platform's gateway. (The gateway, tunnel server, tunnel clients and router are the
//! product's, started from its assemblies: see [`super::placement`].) Clients and the stand-in
//! record what they saw and did, so checkers can tell answered from hung and once from twice.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::json;

use orrery_system::env::http::{full, json as json_response};
use orrery_system::env::SharedEnv;
use orrery_system::observe::{RequestOutcome, WorldEvent};
use orrery_system::platform::permissions::Permissions;
use orrery_system::platform::registry::Registry;

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
/// A client gives up on reaching the gateway after this long (its machine is down) and
/// records the request as unreachable, as `curl --connect-timeout 5` would.
pub const CLIENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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

/// The bearer token of the clients' user, a member of [`ACCOUNT`]: the gateway forwards only
/// for users of the runtime's account.
pub const CLIENT_TOKEN: &str = "user-token-acme-client";

/// Registers every runtime with the platform's registry, and the clients' user with its
/// permissions (platform state that survives a gateway restart, as a database would).
pub fn register(
    registry: &Registry,
    permissions: &Permissions,
    runtime_hosts: &[String],
    per_host: u32,
) {
    for host in runtime_hosts {
        for (runtime, _, token) in runtimes_of(host, per_host) {
            registry.insert(&token, ACCOUNT, &runtime);
        }
    }
    permissions.grant_in(CLIENT_TOKEN, ACCOUNT, "client", &[]);
}

/// Runs the app-proxy stand-in of a runtime host: it answers reads and executes each
/// state-changing request it receives (recording the execution), so checkers can tell once
/// from twice. The runtime's own components (tunnel clients, router) come from its assembly.
/// In a multi-tenant world (`account`: the runtime host's account) it also records whose
/// token reached it.
pub async fn run_app_proxy_stand_in(
    env: SharedEnv,
    settings: Settings,
    account: Option<String>,
) -> std::io::Result<()> {
    let listener = env.listen(&format!("0.0.0.0:{APP_PROXY_PORT}")).await?;
    let stand_in = env.clone();
    orrery_system::env::http::serve(listener, move |request, _| {
        let env = stand_in.clone();
        let delay = settings.execute_delay;
        if let Some(account) = &account {
            let token = orrery_system::platform::tunnel::bearer_token(
                request
                    .headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok()),
            )
            .unwrap_or_default();
            env.observe(
                WorldEvent::TenantReached {
                    account: account.clone(),
                    caller: super::addresses::account_of_token(token)
                        .unwrap_or_default()
                        .to_string(),
                }
                .into(),
            );
        }
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
                env.observe(WorldEvent::Execute { key: key.clone() }.into());
                key
            });
            let key = execution.await.unwrap_or_default();
            json_response(http::StatusCode::CREATED, &json!({"executed": key}))
        }
    })
    .await
}

async fn attempt(
    env: &SharedEnv,
    client: &orrery_system::env::http::Client<Full<Bytes>>,
    url: &str,
    write: bool,
    key: &str,
) -> RequestOutcome {
    let mut request = http::Request::builder()
        .method(if write { "POST" } else { "GET" })
        .uri(url)
        .header("authorization", format!("Bearer {CLIENT_TOKEN}"));
    if write {
        request = request.header("idempotency-key", key);
    }
    let Ok(request) = request.body(Full::new(Bytes::new())) else {
        return RequestOutcome::Unreachable; // an unusable URL reaches nothing
    };
    let exchange = async {
        match client.request(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                let _ = response.into_body().collect().await;
                RequestOutcome::Status(status)
            }
            Err(_) => RequestOutcome::Unreachable, // the gateway itself
        }
    };
    tokio::select! {
        biased;
        outcome = exchange => outcome,
        _ = env.sleep(CLIENT_TIMEOUT) => RequestOutcome::Hung,
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
    let client = orrery_system::env::http::client_with_connect_timeout::<Full<Bytes>>(
        env.clone(),
        CLIENT_TIMEOUT,
        CLIENT_CONNECT_TIMEOUT,
    );
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
                    let outcome = attempt(&env, &client, &url, write, &key).await;
                    let latency_ms = (env.elapsed() - started).as_millis() as u64;
                    env.observe(
                        WorldEvent::Request {
                            key: key.clone(),
                            write,
                            attempt: attempt_no,
                            outcome,
                            latency_ms,
                        }
                        .into(),
                    );
                    if !outcome.unknown() {
                        break;
                    }
                    env.sleep(settings.retry_after).await;
                }
            });
        }
    }
}
