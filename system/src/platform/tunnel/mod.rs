//! The tunnel server: accepts each runtime's WebSocket, checks its token and name against
//! the [`Registry`](super::registry::Registry), and forwards client requests into it over
//! HTTP/2 with a deadline: no tunnel → 503, tunnel broken mid-request → 502, no answer in
//! time → 504. Never hangs a caller; a bad frame or handshake only ends that connection.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde_json::json;
use tokio_tungstenite::tungstenite::handshake::server::{
    ErrorResponse, Request as WsRequest, Response as WsResponse,
};

use crate::core::Variant;
use crate::env::http::{json, Body};
use crate::env::{Listener, SharedEnv};
use crate::observe::TunnelEvent;
use crate::platform::registry::Registry;
use crate::tunnel::{self, ws::WsIo, Rejection};

/// Tunnel server settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design.
    pub variant: Variant,
    /// HTTP/2 PING interval on each tunnel (drop detection).
    pub keepalive: Duration,
    /// How long a PING may go unanswered before the tunnel counts as dropped.
    pub keepalive_timeout: Duration,
    /// Longest a forwarded request may take before the caller gets 504.
    pub request_deadline: Duration,
    /// Server work per registration (checking the token with the platform), done one at a
    /// time: with 20 ms the server registers at most 50 runtimes per second.
    pub registration_cost: Duration,
    /// Registrations allowed to wait for that work; more are refused at once with 503
    /// ("server busy"), as an overloaded tunnel server does.
    pub max_pending_registrations: usize,
    /// TLS (WSS) in real mode; plain TCP when absent (the simulator).
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

impl Config {
    /// Faithful: frps's multiplexer keepalive, a ping every 60 s (`tcp_mux_keepalive_interval`)
    /// unanswered for 10 s (yamux's ConnectionWriteTimeout), so a silent drop goes unnoticed
    /// up to 70 s; hardened: PING every 2 s, dropped after 3 s without an answer.
    pub fn new(variant: Variant) -> Self {
        let (keepalive, keepalive_timeout) = match variant {
            Variant::Faithful => (Duration::from_secs(60), Duration::from_secs(10)),
            Variant::Hardened => (Duration::from_secs(2), Duration::from_secs(3)),
        };
        Config {
            variant,
            keepalive,
            keepalive_timeout,
            request_deadline: Duration::from_secs(10),
            registration_cost: Duration::ZERO,
            max_pending_registrations: 1024,
            tls: None,
        }
    }
}

struct Tunnel {
    generation: u64,
    /// The client process's run id (faithful), `None` when it sent none.
    run_id: Option<String>,
    send: hyper::client::conn::http2::SendRequest<Body>,
    /// Ends the connection (the runtime's token was rotated).
    close: Arc<tokio::sync::Notify>,
}

/// The server's state: live tunnels by runtime name.
pub struct TunnelServer {
    config: Config,
    registry: Arc<Registry>,
    tunnels: Mutex<BTreeMap<String, Tunnel>>,
    generation: Mutex<u64>,
    requests: Mutex<u64>,
    /// Registrations admitted and not yet through the handshake.
    pending: Mutex<usize>,
    /// Serialises the per-registration work.
    registering: tokio::sync::Mutex<()>,
    /// Requests being forwarded, by runtime (`tunnel.requests-per-runtime`).
    forwarding: std::sync::OnceLock<crate::env::limits::Slots>,
    /// Virtual queue of refused registrations: the next free slot handed out in `Retry-After`.
    next_slot: Mutex<Duration>,
}

/// Faithful: whether a registration of `name` by the process `run_id` is refused because a
/// session of another process still holds the name. frps replaces the session of a
/// reconnecting frpc (same `run_id`) but refuses a new process's proxy ("router config
/// conflict") until it notices the old session is dead; hardened: a registration with the
/// runtime's token always replaces the old session.
/// A client that sends no run id (a hardened or older runtime) cannot be told apart, so it
/// replaces as before.
fn held_by_another(tunnels: &BTreeMap<String, Tunnel>, name: &str, run_id: Option<&str>) -> bool {
    tunnels.get(name).is_some_and(
        |held| matches!((held.run_id.as_deref(), run_id), (Some(held), Some(new)) if held != new),
    )
}

/// The token of an `Authorization: Bearer <token>` header value (none when it is missing,
/// another scheme, or empty).
pub fn bearer_token(authorization: Option<&str>) -> Option<&str> {
    authorization
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Checks a registration: the token's runtime must be the one named.
pub fn authorise(
    registry: &Registry,
    authorization: Option<&str>,
    name: Option<&str>,
) -> Result<String, Rejection> {
    let token = bearer_token(authorization).ok_or(Rejection::MissingToken)?;
    let runtime = registry.lookup(token).ok_or(Rejection::UnknownToken)?;
    let name = name
        .filter(|n| n.contains('-') && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .ok_or(Rejection::BadName)?;
    let owner = runtime.tunnel_name();
    if name != owner {
        return Err(Rejection::ForeignName {
            claimed: name.to_string(),
            owner,
        });
    }
    Ok(owner)
}

impl TunnelServer {
    /// A server with no tunnels yet.
    pub fn new(config: Config, registry: Arc<Registry>) -> Arc<Self> {
        Arc::new(TunnelServer {
            config,
            registry,
            tunnels: Mutex::default(),
            generation: Mutex::new(0),
            requests: Mutex::new(0),
            pending: Mutex::new(0),
            registering: tokio::sync::Mutex::new(()),
            forwarding: std::sync::OnceLock::new(),
            next_slot: Mutex::new(Duration::ZERO),
        })
    }

    /// Names of runtimes with a live tunnel, sorted.
    pub fn connected(&self) -> Vec<String> {
        self.tunnels
            .lock()
            .expect("tunnels lock")
            .keys()
            .cloned()
            .collect()
    }

    fn next_request_id(&self) -> u64 {
        let mut n = self.requests.lock().expect("requests lock");
        *n += 1;
        *n
    }

    /// Forwards `request` to runtime `name` through its tunnel and returns its answer, or a
    /// clear 502/503/504 within the configured deadline.
    pub async fn forward(
        &self,
        env: &SharedEnv,
        name: &str,
        mut request: Request<Body>,
    ) -> Response<Body> {
        let tunnel = self
            .tunnels
            .lock()
            .expect("tunnels lock")
            .get(name)
            .map(|t| (t.generation, t.send.clone()));
        let Some((generation, mut send)) = tunnel else {
            return unavailable(name);
        };
        let most = env.limits().tunnel_requests_per_runtime;
        let forwarding = self
            .forwarding
            .get_or_init(|| crate::env::limits::Slots::new(most));
        let Some(_slot) = forwarding.take(name) else {
            return json(
                StatusCode::TOO_MANY_REQUESTS,
                &json!({"error": format!(
                    "runtime {name} already has {} requests forwarded into its tunnel (tunnel.requests-per-runtime)",
                    forwarding.max
                )}),
            );
        };
        if !request.headers().contains_key(tunnel::REQUEST_ID_HEADER) {
            let id = format!("{name}-{}", self.next_request_id());
            if let Ok(value) = id.parse() {
                request
                    .headers_mut()
                    .insert(tunnel::REQUEST_ID_HEADER, value);
            }
        }
        let deadline = self.config.request_deadline;
        let connection = send.clone();
        let exchange = async {
            send.ready().await?;
            send.send_request(request).await
        };
        tokio::select! {
            biased;
            answer = exchange => match answer {
                Ok(response) => response.map(|body| {
                    use http_body_util::BodyExt;
                    body.map_err(std::io::Error::other).boxed()
                }),
                Err(error) => {
                    // A failed stream alone (a reset) leaves the tunnel up; a closed connection does not.
                    if connection.is_closed() {
                        self.drop_tunnel(env, name, generation, "connection closed during a request");
                    }
                    json(StatusCode::BAD_GATEWAY, &json!({"error": format!("tunnel to runtime {name} broke during the request: {error}")}))
                }
            },
            _ = env.sleep(deadline) => json(
                StatusCode::GATEWAY_TIMEOUT,
                &json!({"error": format!("runtime {name} did not answer within {} ms", deadline.as_millis())}),
            ),
        }
    }

    /// Closes runtime `name`'s tunnel, if it has one (its token was rotated: the runtime
    /// must connect again with the new one). Returns whether there was one.
    pub fn close(&self, name: &str) -> bool {
        let tunnels = self.tunnels.lock().expect("tunnels lock");
        match tunnels.get(name) {
            Some(tunnel) => {
                tunnel.close.notify_one();
                true
            }
            None => false,
        }
    }

    fn drop_tunnel(&self, env: &SharedEnv, name: &str, generation: u64, why: &str) {
        let mut tunnels = self.tunnels.lock().expect("tunnels lock");
        if tunnels
            .get(name)
            .is_some_and(|t| t.generation == generation)
        {
            tunnels.remove(name);
            env.observe(
                TunnelEvent::ServerDown {
                    runtime: name.to_string(),
                    generation,
                    why: why.to_string(),
                }
                .into(),
            );
        }
    }
}

fn unavailable(name: &str) -> Response<Body> {
    json(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({"error": format!("runtime unreachable: runtime {name} has no tunnel")}),
    )
}

/// Accepts tunnels on `listener` until it fails; each connection runs in its own task.
pub async fn serve(
    env: SharedEnv,
    server: Arc<TunnelServer>,
    mut listener: Box<dyn Listener>,
) -> std::io::Result<()> {
    let peers = crate::env::limits::Slots::new(env.limits().tunnel_connections_per_peer);
    loop {
        let (stream, peer) = listener.accept().await?;
        // Held as long as the connection (and the tunnel over it) lives.
        let slot = peers.take(crate::env::http::peer_ip(&peer));
        let (env, server, most) = (env.clone(), server.clone(), peers.max);
        tokio::spawn(async move {
            match slot {
                Some(_slot) => connection(env, server, stream, peer, None).await,
                None => connection(env, server, stream, peer, Some(most)).await,
            }
        });
    }
}

/// Binds `addr` and serves.
pub async fn run(env: SharedEnv, server: Arc<TunnelServer>, addr: &str) -> std::io::Result<()> {
    let listener = env.listen(addr).await?;
    serve(env, server, listener).await
}

/// Largest upgrade request head read before it is handed to tungstenite.
const MAX_UPGRADE_HEAD: usize = 16 * 1024;

/// Reads the upgrade request's head from `stream` and checks it as tungstenite will: a
/// request it would refuse is answered here, 400 with the reason (tungstenite closes the
/// connection without an answer), and `Err` is returned. Otherwise the stream, with the head
/// read ahead of it, for tungstenite to read again.
async fn upgrade_head(
    mut stream: crate::env::BoxStream,
) -> Result<Prefixed<crate::env::BoxStream>, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::handshake::{machine::TryParse, server};
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let refusal = loop {
        match server::Request::try_parse(&head) {
            Ok(Some((_, request))) => match server::create_response(&request) {
                Ok(_) => {
                    return Ok(Prefixed {
                        head,
                        at: 0,
                        inner: stream,
                    })
                }
                Err(e) => break format!("not a WebSocket upgrade: {e}"),
            },
            Ok(None) if head.len() > MAX_UPGRADE_HEAD => {
                break format!("the upgrade request's head is over {MAX_UPGRADE_HEAD} bytes")
            }
            Ok(None) => match stream.read(&mut chunk).await {
                Ok(0) => return Err("the client left before its upgrade request ended".into()),
                Ok(n) => head.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("reading the upgrade request: {e}")),
            },
            Err(e) => break format!("not an HTTP request: {e}"),
        }
    };
    let body = json!({"error": refusal}).to_string();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
    Err(refusal)
}

/// A stream whose first bytes were already read: they are read again first.
struct Prefixed<S> {
    head: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.at < self.head.len() {
            let n = buf.remaining().min(self.head.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.head[at..at + n]);
            self.at += n;
            if self.at == self.head.len() {
                self.head = Vec::new();
                self.at = 0;
            }
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// `future`'s output, or `None` if `timeout` of the environment's time passes first.
async fn within<T>(
    env: &SharedEnv,
    timeout: Duration,
    future: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        done = future => Some(done),
        () = env.sleep(timeout) => None,
    }
}

/// One connection: TLS, admission, then the registration. `over_limit` is the per-peer limit
/// this connection is one past (`tunnel.connections-per-peer`): answered 429 and closed.
async fn connection(
    env: SharedEnv,
    server: Arc<TunnelServer>,
    stream: crate::env::BoxStream,
    peer: String,
    over_limit: Option<usize>,
) {
    let timeout = env.limits().tunnel_handshake_timeout;
    let mut stream: crate::env::BoxStream = match &server.config.tls {
        Some(tls) => match within(
            &env,
            timeout,
            tokio_rustls::TlsAcceptor::from(tls.clone()).accept(stream),
        )
        .await
        {
            Some(Ok(tls_stream)) => Box::new(tls_stream),
            None => {
                env.observe(
                    TunnelEvent::TlsFailed {
                        peer: peer.clone(),
                        error: format!("no TLS handshake within {timeout:?}"),
                    }
                    .into(),
                );
                return;
            }
            Some(Err(error)) => {
                env.observe(
                    TunnelEvent::TlsFailed {
                        peer: peer.clone(),
                        error: error.to_string(),
                    }
                    .into(),
                );
                return;
            }
        },
        None => stream,
    };
    if let Some(most) = over_limit {
        let reason = format!(
            "too many connections from {}: at most {most} at once (tunnel.connections-per-peer)",
            crate::env::http::peer_ip(&peer)
        );
        tracing::warn!(%peer, %reason, "tunnel: refused a connection");
        env.observe(
            TunnelEvent::Rejected {
                peer: peer.clone(),
                reason: reason.clone(),
            }
            .into(),
        );
        let body = json!({ "error": reason }).to_string();
        let refusal = format!(
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        use tokio::io::AsyncWriteExt;
        let _ = within(&env, timeout, async {
            let _ = stream.write_all(refusal.as_bytes()).await;
            let _ = stream.shutdown().await;
        })
        .await;
        return;
    }
    // Admission: a full registration backlog is refused at once, never queued without bound.
    let admitted = {
        let mut pending = server.pending.lock().expect("pending lock");
        let ok = *pending < server.config.max_pending_registrations;
        if ok {
            *pending += 1;
        }
        ok
    };
    if !admitted {
        // Each refused registration gets its own future slot after the backlog, so clients
        // that honour it come back spread out at the rate the server can take them.
        let retry_after = {
            let now = env.elapsed();
            let cost = server
                .config
                .registration_cost
                .max(Duration::from_millis(1));
            let backlog = cost.saturating_mul(server.config.max_pending_registrations as u32);
            let mut slot = server.next_slot.lock().expect("slot lock");
            *slot = (*slot).max(now + backlog) + cost;
            *slot - now
        };
        env.observe(
            TunnelEvent::ServerBusy {
                peer: peer.clone(),
                retry_after_ms: retry_after.as_millis() as u64,
            }
            .into(),
        );
        let body =
            json!({"error": "tunnel server busy: too many registrations in progress, retry later"})
                .to_string();
        let refusal = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {}\r\n{}: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            retry_after.as_secs().max(1),
            tunnel::RETRY_AFTER_MS_HEADER,
            retry_after.as_millis(),
            body.len()
        );
        use tokio::io::AsyncWriteExt;
        let _ = stream.write_all(refusal.as_bytes()).await;
        let _ = stream.shutdown().await;
        return;
    }
    if !server.config.registration_cost.is_zero() {
        let _turn = server.registering.lock().await;
        env.sleep(server.config.registration_cost).await;
    }
    registration(env, server.clone(), stream, peer).await;
}

/// A registration's verdict: the runtime's name, the client's run id and the token it
/// presented, or why not.
type Verdict = Result<(String, Option<String>, String), Rejection>;

async fn registration(
    env: SharedEnv,
    server: Arc<TunnelServer>,
    stream: crate::env::BoxStream,
    peer: String,
) {
    let release = |server: &TunnelServer| *server.pending.lock().expect("pending lock") -= 1;
    let timeout = env.limits().tunnel_handshake_timeout;
    let accepted: Arc<Mutex<Option<Verdict>>> = Arc::default();
    let verdict = accepted.clone();
    let registry = server.registry.clone();
    let holder = server.clone();
    // The callback's signature is tungstenite's (`Callback`): its error type is not ours to shrink.
    #[allow(clippy::result_large_err)]
    let callback = move |request: &WsRequest,
                         response: WsResponse|
          -> Result<WsResponse, ErrorResponse> {
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
        let result = if request.uri().path() != tunnel::PATH {
            Err(Rejection::WrongPath(request.uri().path().to_string()))
        } else {
            let run_id = header(tunnel::RUN_ID_HEADER).map(str::to_string);
            authorise(
                &registry,
                header("authorization"),
                header(tunnel::RUNTIME_HEADER),
            )
            .and_then(|name| {
                let tunnels = holder.tunnels.lock().expect("tunnels lock");
                if holder.config.variant == Variant::Faithful
                    && held_by_another(&tunnels, &name, run_id.as_deref())
                {
                    return Err(Rejection::NameInUse(name));
                }
                let token = bearer_token(header("authorization"))
                    .unwrap_or_default()
                    .to_string();
                Ok((name, run_id, token))
            })
        };
        *verdict.lock().expect("verdict lock") = Some(result.clone());
        match result {
            Ok(_) => Ok(response),
            Err(rejection) => {
                let mut refusal =
                    ErrorResponse::new(Some(json!({"error": rejection.to_string()}).to_string()));
                *refusal.status_mut() =
                    StatusCode::from_u16(rejection.status()).unwrap_or(StatusCode::UNAUTHORIZED);
                Err(refusal)
            }
        }
    };
    let handshake = within(&env, timeout, async {
        // A request tungstenite would refuse is answered 400 naming why (tungstenite itself
        // closes without a word: found by fuzzing); a good one is handed on, head included.
        let stream = match upgrade_head(stream).await {
            Ok(stream) => stream,
            Err(refused) => return Err(refused),
        };
        let ws = tunnel::ws_config_with(env.limits().tunnel_message);
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(ws))
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    release(&server);
    let Some(handshake) = handshake else {
        env.observe(
            TunnelEvent::HandshakeFailed {
                peer: peer.clone(),
                error: format!("no upgrade request within {timeout:?}"),
            }
            .into(),
        );
        return;
    };
    let verdict = accepted.lock().expect("verdict lock").take();
    let (ws, name, run_id, token) = match (handshake, verdict) {
        (Ok(ws), Some(Ok((name, run_id, token)))) => (ws, name, run_id, token),
        (_, Some(Err(rejection))) => {
            // Logged with its reason: a refused runtime is an operator's problem to see.
            tracing::warn!(%peer, %rejection, "tunnel: refused a runtime");
            env.observe(
                TunnelEvent::Rejected {
                    peer: peer.clone(),
                    reason: rejection.to_string(),
                }
                .into(),
            );
            return;
        }
        (Err(error), _) => {
            env.observe(
                TunnelEvent::HandshakeFailed {
                    peer: peer.clone(),
                    error,
                }
                .into(),
            );
            return;
        }
        (Ok(_), None) => return,
    };
    let handshake = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(server.config.keepalive)
        .keep_alive_timeout(server.config.keepalive_timeout)
        .keep_alive_while_idle(true)
        // h2 forgets a stream it reset after this long of *real* time (`std::time::Instant`;
        // default 1 s): a slow run would then answer a late frame on it differently. Kept an
        // hour, the reset streams are bounded by their count (h2's
        // `max_concurrent_reset_streams`), which the run decides, not the clock.
        .reset_stream_duration(Duration::from_secs(3600))
        .handshake::<_, Body>(TokioIo::new(WsIo::with_env(ws, env.clone())))
        .await;
    let (send, h2) = match handshake {
        Ok(parts) => parts,
        Err(error) => {
            env.observe(
                TunnelEvent::HandshakeFailed {
                    peer: peer.clone(),
                    error: error.to_string(),
                }
                .into(),
            );
            return;
        }
    };
    let generation = {
        let mut g = server.generation.lock().expect("generation lock");
        *g += 1;
        *g
    };
    // A newer tunnel for the same runtime replaces the old one (the old one drains):
    // hardened always, faithful for the same process (checked at the WebSocket handshake;
    // two processes whose handshakes overlap both pass it, and the later one wins).
    let close = Arc::new(tokio::sync::Notify::new());
    server.tunnels.lock().expect("tunnels lock").insert(
        name.clone(),
        Tunnel {
            generation,
            run_id,
            send,
            close: close.clone(),
        },
    );
    // A rotation between the token check and here found no tunnel to close: a tunnel whose
    // token no longer names this runtime does not stay.
    if server
        .registry
        .lookup(&token)
        .is_none_or(|runtime| runtime.tunnel_name() != name)
    {
        let mut tunnels = server.tunnels.lock().expect("tunnels lock");
        if tunnels
            .get(&name)
            .is_some_and(|t| t.generation == generation)
        {
            tunnels.remove(&name);
        }
        drop(tunnels);
        drop(h2);
        return;
    }
    env.observe(
        TunnelEvent::ServerUp {
            runtime: name.clone(),
            generation,
        }
        .into(),
    );
    if env.buggify(crate::env::Point::PlatformTunnelDropAfterRegister) {
        // Fault point: registered, then the connection is lost at once.
        drop(h2);
        server.drop_tunnel(
            &env,
            &name,
            generation,
            "dropped after registration (fault point)",
        );
        return;
    }
    let why = tokio::select! {
        biased;
        outcome = h2 => match outcome {
            Ok(()) => "closed".to_string(),
            Err(error) => error.to_string(),
        },
        // Dropping the connection closes the WebSocket under it.
        () = close.notified() => "closed: the runtime's token was rotated".to_string(),
    };
    server.drop_tunnel(&env, &name, generation, &why);
}
