//! The tunnel client: dials the platform's tunnel server, registers as
//! `<account>-<runtime>` with the runtime token over a WebSocket, and serves the platform's
//! requests (HTTP/2 inside the WebSocket) with the request routing service — hardened: at most
//! once per state-changing request; faithful: as the real runtime, a retried write runs again. Reconnects on a drop with the variant's schedule
//! ([`backoff::Reconnect`]); detects silent drops with HTTP/2 PINGs (faithful: every 60 s,
//! as the real multiplexer keepalive; hardened: every 2 s). Faithful sends frp's run id, so
//! after a restart its name is refused until the server notices the old session is dead,
//! and asked for again every 30 s ([`backoff::FRP_PROXY_RETRY`]).

pub mod backoff;
pub mod dedup;

use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio_tungstenite::tungstenite::Error as WsError;

use crate::core::Variant;
use crate::env::SharedEnv;
use crate::observe::TunnelEvent;
use crate::tunnel::{self, ws::WsIo};

pub use dedup::Handler;

/// Tunnel client settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design.
    pub variant: Variant,
    /// The tunnel server, `host:port`.
    pub server_addr: String,
    /// `<account>-<runtime>`.
    pub name: String,
    /// The runtime token issued at registration.
    pub token: String,
    /// HTTP/2 PING interval (drop detection on the runtime side).
    pub keepalive: Duration,
    /// How long a PING may go unanswered.
    pub keepalive_timeout: Duration,
    /// Longest wait for the TCP connection and the WebSocket handshake.
    pub connect_timeout: Duration,
    /// TLS (WSS) in real mode, trusting these roots; plain TCP when absent (the simulator).
    pub tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    /// hardened: the cache (`host:port`) that keeps request records across restarts;
    /// in memory only when absent.
    pub dedup_store: Option<String>,
    /// Wait this long before the first login: a simulated fleet's runtimes are installed
    /// over time. Zero in real mode.
    pub start_after: Duration,
}

impl Config {
    /// Defaults per variant (see the module doc).
    pub fn new(variant: Variant, server_addr: &str, name: &str, token: &str) -> Self {
        let (keepalive, keepalive_timeout) = match variant {
            // frp's yamux: a ping every 60 s (`tcp_mux_keepalive_interval`), the session
            // dropped when one is unanswered for 10 s (yamux's ConnectionWriteTimeout; measured
            // against the real frpc by the conformance suite).
            Variant::Faithful => (Duration::from_secs(60), Duration::from_secs(10)),
            Variant::Hardened => (Duration::from_secs(2), Duration::from_secs(3)),
        };
        Config {
            variant,
            server_addr: server_addr.into(),
            name: name.into(),
            token: token.into(),
            keepalive,
            keepalive_timeout,
            connect_timeout: Duration::from_secs(10),
            tls: None,
            dedup_store: None,
            start_after: Duration::ZERO,
        }
    }
}

/// Why the client stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    /// Faithful only: the first login was refused, and the real client exits.
    #[error("the tunnel server refused the first login: {0}")]
    FirstLoginRefused(String),
    /// Faithful only: the first login found no server (or failed its handshake), and the
    /// real client exits too (frp's `login_fail_exit`, default true).
    #[error("the first login to the tunnel server failed: {0}")]
    FirstLoginFailed(String),
}

/// One session's end.
enum Ended {
    /// The server refused the registration, with its reason.
    Refused(String),
    /// Logged in, but the server refused the name because another session holds it (409).
    NameInUse(String),
    /// Could not connect or handshake; a busy server may say when to come back.
    Failed(String, Option<Duration>),
    /// Was up for `up`, then dropped.
    Dropped { up: Duration, why: String },
}

pub(crate) fn websocket_key(env: &SharedEnv) -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&env.random_u64().to_le_bytes());
    bytes[8..].copy_from_slice(&env.random_u64().to_le_bytes());
    base64::prelude::Engine::encode(&base64::prelude::BASE64_STANDARD, bytes)
}

async fn session(
    env: &SharedEnv,
    config: &Config,
    run_id: Option<&str>,
    handler: &Handler,
    dedup: &Arc<dedup::Dedup>,
) -> Ended {
    let connect = async {
        if env.buggify(crate::env::Point::TunnelClientDialFails) {
            let refused = format!("connect {}: refused (fault point)", config.server_addr);
            return Err((refused, None));
        }
        let stream = env
            .connect(&config.server_addr)
            .await
            .map_err(|e| (format!("connect {}: {e}", config.server_addr), None))?;
        let stream: crate::env::BoxStream = match &config.tls {
            Some(tls) => {
                let host = config
                    .server_addr
                    .rsplit_once(':')
                    .map(|(h, _)| h)
                    .unwrap_or(&config.server_addr)
                    .to_string();
                let name = rustls_pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| (format!("TLS server name {host:?}: {e}"), None))?;
                let tls_stream = tokio_rustls::TlsConnector::from(tls.clone())
                    .connect(name, stream)
                    .await
                    .map_err(|e| {
                        (
                            format!("TLS handshake with {}: {e}", config.server_addr),
                            None,
                        )
                    })?;
                Box::new(tls_stream)
            }
            None => stream,
        };
        let scheme = if config.tls.is_some() { "wss" } else { "ws" };
        // The key comes from the environment so the handshake is deterministic in simulation.
        let mut request = Request::builder()
            .uri(format!("{scheme}://{}{}", config.server_addr, tunnel::PATH))
            .header("host", &config.server_addr)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", websocket_key(env))
            .header("authorization", format!("Bearer {}", config.token))
            .header(tunnel::RUNTIME_HEADER, &config.name);
        if let Some(run_id) = run_id {
            request = request.header(tunnel::RUN_ID_HEADER, run_id);
        }
        let request = request
            .body(())
            .map_err(|e| (format!("bad tunnel request: {e}"), None))?;
        match tokio_tungstenite::client_async_with_config(
            request,
            stream,
            Some(tunnel::ws_config()),
        )
        .await
        {
            Ok((ws, _)) => Ok(Ok(ws)),
            Err(WsError::Http(response)) => {
                let body = response
                    .body()
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default()
                    .to_string();
                let reason = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_string))
                    .unwrap_or(body);
                let status = response.status().as_u16();
                if status >= 500 {
                    // Busy or broken server: a transient failure, not a refusal of this runtime.
                    let hint = response
                        .headers()
                        .get(tunnel::RETRY_AFTER_MS_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok())
                        .map(Duration::from_millis);
                    return Err((format!("HTTP {status}: {reason}"), hint));
                }
                if status == 409 {
                    return Ok(Err(Ended::NameInUse(format!("HTTP {status}: {reason}"))));
                }
                Ok(Err(Ended::Refused(format!("HTTP {status}: {reason}"))))
            }
            Err(e) => Err((format!("websocket handshake: {e}"), None)),
        }
    };
    let ws = tokio::select! {
        biased;
        outcome = connect => match outcome {
            Ok(Ok(ws)) => ws,
            Ok(Err(refusal)) => return refusal,
            Err((failure, hint)) => return Ended::Failed(failure, hint),
        },
        _ = env.sleep(config.connect_timeout) => return Ended::Failed(format!("no tunnel within {:?}", config.connect_timeout), None),
    };
    let started = env.elapsed();
    env.observe(
        TunnelEvent::ClientUp {
            runtime: config.name.clone(),
        }
        .into(),
    );
    if env.buggify(crate::env::Point::TunnelClientDropAfterRegister) {
        // Fault point: the registration races a disconnect.
        drop(ws);
        return Ended::Dropped {
            up: Duration::ZERO,
            why: "dropped right after registration (fault point)".into(),
        };
    }
    let (handler, dedup, variant) = (handler.clone(), dedup.clone(), config.variant);
    let service = hyper::service::service_fn(move |request| {
        let (handler, dedup) = (handler.clone(), dedup.clone());
        async move {
            // The real runtime has no request ids: a retried write runs again. Ours runs once.
            let response = match variant {
                Variant::Faithful => handler(request).await,
                Variant::Hardened => dedup.handle(handler, request).await,
            };
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let served = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(config.keepalive)
        .keep_alive_timeout(config.keepalive_timeout)
        .serve_connection(TokioIo::new(WsIo::with_env(ws, env.clone())), service)
        .await;
    let why = match served {
        Ok(()) => "closed by the server".to_string(),
        Err(e) => e.to_string(),
    };
    Ended::Dropped {
        up: env.elapsed().saturating_sub(started),
        why,
    }
}

/// Keeps the tunnel up until the host stops. Returns only when a faithful client's first
/// login fails (refused, or no server), as frpc exits then.
pub async fn run(env: SharedEnv, config: Config, handler: Handler) -> Result<(), Fatal> {
    let dedup = Arc::new(match &config.dedup_store {
        Some(addr) => dedup::Dedup::with_store(crate::runtime::cache::Client::new(
            env.clone(),
            addr,
            Duration::from_secs(5),
        )),
        None => dedup::Dedup::default(),
    });
    if !config.start_after.is_zero() {
        env.sleep(config.start_after).await;
    }
    // frp's run id: kept for the life of the process, so the server replaces a reconnecting
    // client's old session but not a restarted one's (frps assigns it at the first login;
    // one drawn here behaves the same). Hardened needs none: its token decides.
    let run_id = match config.variant {
        Variant::Faithful => Some(format!("{:016x}", env.random_u64())),
        Variant::Hardened => None,
    };
    let mut schedule = backoff::Reconnect::new(config.variant, env.elapsed());
    let mut logged_in = false;
    loop {
        let delay = match session(&env, &config, run_id.as_deref(), &handler, &dedup).await {
            Ended::Refused(reason) => {
                tracing::warn!(runtime = %config.name, %reason, "tunnel client refused");
                env.observe(
                    TunnelEvent::ClientRefused {
                        runtime: config.name.clone(),
                        reason: reason.clone(),
                    }
                    .into(),
                );
                // frp's `login_fail_exit` (default true): a failed first login ends frpc.
                if config.variant == Variant::Faithful && !logged_in {
                    return Err(Fatal::FirstLoginRefused(reason));
                }
                schedule.after_failed_attempt(&env)
            }
            Ended::NameInUse(reason) => {
                env.observe(
                    TunnelEvent::ClientRefused {
                        runtime: config.name.clone(),
                        reason,
                    }
                    .into(),
                );
                // The login itself succeeded (frp refuses the proxy, not the client): not a
                // failed first login; frpc asks for the proxy again on its own schedule.
                logged_in = true;
                schedule.logged_in();
                match config.variant {
                    Variant::Faithful => backoff::FRP_PROXY_RETRY,
                    Variant::Hardened => schedule.after_failed_attempt(&env),
                }
            }
            Ended::Failed(why, hint) => {
                env.observe(
                    TunnelEvent::ClientFailed {
                        runtime: config.name.clone(),
                        why: why.clone(),
                    }
                    .into(),
                );
                if config.variant == Variant::Faithful && !logged_in {
                    return Err(Fatal::FirstLoginFailed(why));
                }
                // Hardened honours a busy server's slot (plus a little jitter); the real client ignores it.
                if let (Variant::Hardened, Some(slot)) = (config.variant, hint) {
                    let delay =
                        slot + env.random_between(Duration::ZERO, Duration::from_millis(250));
                    env.observe(
                        TunnelEvent::ClientWait {
                            runtime: config.name.clone(),
                            ms: delay.as_millis() as u64,
                            server_slot: true,
                        }
                        .into(),
                    );
                    env.sleep(delay).await;
                    continue;
                }
                schedule.after_failed_attempt(&env)
            }
            Ended::Dropped { up, why } => {
                logged_in = true;
                schedule.logged_in();
                env.observe(
                    TunnelEvent::ClientDown {
                        runtime: config.name.clone(),
                        up_ms: up.as_millis() as u64,
                        why,
                    }
                    .into(),
                );
                schedule.after_drop(&env, up, env.elapsed())
            }
        };
        env.observe(
            TunnelEvent::ClientWait {
                runtime: config.name.clone(),
                ms: delay.as_millis() as u64,
                server_slot: false,
            }
            .into(),
        );
        env.sleep(delay).await;
    }
}
