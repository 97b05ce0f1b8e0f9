//! HTTP over the environment: one server loop and one client builder shared by every
//! component, so hyper is wired to real and simulated sockets in exactly one place.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::{BoxStream, DeadlineStream, Listener, SharedEnv};

/// Percent-encodes a query value (RFC 3986 unreserved characters pass), so names, SHAs,
/// URLs and paths survive a query string.
pub fn query_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A request's query string as a map (`application/x-www-form-urlencoded`: `%XX` and `+`
/// decoded; a repeated key keeps its last value).
pub fn query(uri: &http::Uri) -> std::collections::BTreeMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// A URL path segment with its `%XX` escapes decoded (`feature%2Fx` → `feature/x`); an
/// invalid escape is kept as written.
pub fn path_segment(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The response body type every orrery HTTP handler returns (streaming allowed).
pub type Body = BoxBody<Bytes, std::io::Error>;

/// A streaming body fed by a channel: each item is a data frame, an `Err` aborts the
/// response mid-body (the peer sees a broken connection, not a clean end).
pub fn channel(
    buffer: usize,
) -> (
    tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    Body,
) {
    use http_body_util::BodyExt;
    let (tx, rx) = tokio::sync::mpsc::channel(buffer.max(1));
    (tx, ChannelBody(rx).boxed())
}

struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|result| result.map(hyper::body::Frame::data)))
    }
}

/// Why a request's body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Longer than the server takes: 413.
    #[error("the body is over {0} bytes")]
    TooLarge(usize),
    /// The client broke it off or framed it wrongly: 400.
    #[error("cannot read the body: {0}")]
    Broken(String),
}

impl BodyError {
    /// The status to answer with.
    pub fn status(&self) -> http::StatusCode {
        match self {
            BodyError::TooLarge(_) => http::StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Broken(_) => http::StatusCode::BAD_REQUEST,
        }
    }
}

/// Reads a request's body of at most `limit` bytes; past it, [`BodyError::TooLarge`] (and
/// no more is read).
pub async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use http_body_util::BodyExt;
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge(limit)),
        Err(e) => Err(BodyError::Broken(e.to_string())),
    }
}

/// A JSON response with `status` (every orrery API answers JSON this way).
pub fn json(status: http::StatusCode, value: &impl serde::Serialize) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(
            serde_json::to_vec(value).expect("JSON values serialise"),
        ))
        .expect("static response parts are valid")
}

/// A full (non-streaming) body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    use http_body_util::BodyExt;
    http_body_util::Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// The connection tasks of one server: aborted when the server stops (its future is
/// dropped), so a stopped service answers no one — not even a client whose keep-alive
/// connection outlived the listener.
#[derive(Default)]
struct Connections(Vec<tokio::task::AbortHandle>);

impl Connections {
    fn add(&mut self, task: tokio::task::AbortHandle) {
        self.0.retain(|t| !t.is_finished());
        self.0.push(task);
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Longest a client may take to send a request's headers (a client that never finishes would
/// hold its connection for ever); then the connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = super::limits::Limits::DEFAULT.header_read_timeout;

/// Longest a connection refused for `http.connections-per-peer` is kept to answer its 429.
const REFUSED_CONNECTION_TIME: Duration = Duration::from_secs(5);

/// Serves HTTP/1.1 on `listener`, one task per connection, until the listener fails; the
/// connections end with the server. Headers must arrive within [`HEADER_READ_TIMEOUT`]; no
/// bound on connections per peer (the simulated world's servers, as the real ones they stand
/// for: kube-apiserver has none).
///
/// `handler` is called once per request; a handler error never takes the server down.
pub async fn serve<H, F>(listener: Box<dyn Listener>, handler: H) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>, String) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let limits = super::limits::Limits {
        connections_per_peer: usize::MAX,
        ..super::limits::Limits::DEFAULT
    };
    serve_limited(listener, &limits, handler).await
}

/// [`serve`] for orrery's own servers, holding clients to `limits`: headers within
/// `http.header-read-timeout`, and at most `http.connections-per-peer` open connections from
/// one IP — one more is answered 429, naming the limit, and closed.
pub async fn serve_limited<H, F>(
    mut listener: Box<dyn Listener>,
    limits: &super::limits::Limits,
    handler: H,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>, String) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let header_read_timeout = limits.header_read_timeout;
    let peers = super::limits::Slots::new(limits.connections_per_peer);
    let mut connections = Connections::default();
    loop {
        let (stream, peer) = listener.accept().await?;
        let builder = move || {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            builder
        };
        let task = match peers.take(peer_ip(&peer)) {
            Some(slot) => {
                let handler = handler.clone();
                let slot = ConnectionSlot(std::sync::Arc::new(slot));
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                        req.extensions_mut().insert(slot.clone());
                        let response = handler(req, peer.clone());
                        async move { Ok::<_, Infallible>(response.await) }
                    });
                    // A broken connection only ends that connection. A handler may answer
                    // 101 and take the connection over (the build logs' WebSocket).
                    let _ = builder()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                })
            }
            None => {
                let refusal = serde_json::json!({"error": format!(
                    "too many connections from {}: at most {} at once (http.connections-per-peer)",
                    peer_ip(&peer),
                    peers.max
                )});
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_req| {
                        let answer = json(StatusCode::TOO_MANY_REQUESTS, &refusal);
                        async move { Ok::<_, Infallible>(answer) }
                    });
                    let served = builder()
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(stream), service);
                    let _ = tokio::time::timeout(REFUSED_CONNECTION_TIME, served).await;
                })
            }
        };
        connections.add(task.abort_handle());
    }
}

/// A connection's place in `http.connections-per-peer`, in each of its requests'
/// extensions: a handler that takes the connection over (a WebSocket upgrade) keeps it for
/// as long as it serves the upgraded connection, which then still counts against its peer.
#[derive(Clone)]
pub struct ConnectionSlot(#[allow(dead_code)] std::sync::Arc<super::limits::Slot>);

/// The address part of a peer (`10.0.0.7:49152` → `10.0.0.7`, `[::1]:80` → `[::1]`): what
/// a per-peer limit counts, since every connection has its own port.
pub fn peer_ip(peer: &str) -> &str {
    match peer.rsplit_once(':') {
        Some((ip, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !ip.is_empty() => ip,
        _ => peer,
    }
}

/// A client connection: the environment's stream with a read deadline.
pub struct ClientStream(DeadlineStream<BoxStream>);

impl Connection for ClientStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl tokio::io::AsyncRead for ClientStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for ClientStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The hyper client type built by [`client`], generic over the request body.
pub type Client<B> = hyper_util::client::legacy::Client<Connector, B>;

/// Dials through the environment; every connection gets a read deadline.
#[derive(Clone)]
pub struct Connector {
    env: SharedEnv,
    read_idle: Duration,
    /// Longest wait for a connection (none: as long as the network takes).
    connect_timeout: Option<Duration>,
}

impl tower::Service<http::Uri> for Connector {
    type Response = TokioIo<ClientStream>;
    type Error = std::io::Error;
    type Future = super::BoxFuture<'static, std::io::Result<Self::Response>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let env = self.env.clone();
        let (read_idle, connect_timeout) = (self.read_idle, self.connect_timeout);
        Box::pin(async move {
            let authority = uri.authority().map(|a| a.to_string()).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("uri {uri} has no host:port"),
                )
            })?;
            if env.buggify(super::Point::HttpConnectRefused) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    format!("connect {authority}: refused (fault point)"),
                ));
            }
            let stream = match connect_timeout {
                None => env.connect(&authority).await?,
                Some(limit) => tokio::select! {
                    biased;
                    stream = env.connect(&authority) => stream?,
                    () = env.sleep(limit) => return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("connect {authority}: no connection within {limit:?}"),
                    )),
                },
            };
            Ok(TokioIo::new(ClientStream(DeadlineStream::new(
                stream, read_idle,
            ))))
        })
    }
}

/// Builds an HTTP/1.1 client that dials through `env`; reads idle longer than `read_idle` fail.
pub fn client<B>(env: SharedEnv, read_idle: Duration) -> Client<B>
where
    B: hyper::body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    build(env, read_idle, None)
}

/// As [`client`], giving up on a connection that is not established within `connect_timeout`
/// (what a browser or `curl --connect-timeout` does when the server's machine is down).
pub fn client_with_connect_timeout<B>(
    env: SharedEnv,
    read_idle: Duration,
    connect_timeout: Duration,
) -> Client<B>
where
    B: hyper::body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    build(env, read_idle, Some(connect_timeout))
}

fn build<B>(env: SharedEnv, read_idle: Duration, connect_timeout: Option<Duration>) -> Client<B>
where
    B: hyper::body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(Connector {
            env,
            read_idle,
            connect_timeout,
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::env::{Env, RealEnv};

    /// Reads one answer to `GET /` off `stream` (its body is `"ok"`): its text, or empty
    /// when the server closed the connection.
    async fn answer(stream: &mut crate::env::BoxStream) -> String {
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        while !seen.ends_with(b"\"ok\"") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    }

    // Found by the store-crash scenario: a control plane that stopped (its store writer lost
    // the database) kept answering 503 on its clients' keep-alive connections for as long
    // as they lasted, beside the restarted one.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stopped_server_answers_no_one_not_even_on_an_open_keep_alive_connection() {
        let env = Arc::new(RealEnv::new("http-test"));
        let listener = env.listen("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(super::serve(listener, |_request, _peer| async {
            super::json(http::StatusCode::OK, &"ok")
        }));
        let mut stream = env.connect(&addr).await.unwrap();
        let get = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";
        stream.write_all(get).await.unwrap();
        let first = answer(&mut stream).await;
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        server.abort();
        let _ = server.await;
        // The connection task went with the server: the next request gets no answer.
        let _ = stream.write_all(get).await;
        let second = answer(&mut stream).await;
        assert_eq!(second, "", "a stopped server answered");
    }

    /// Reads until the server closes `stream`: what it said.
    async fn all(stream: &mut crate::env::BoxStream) -> String {
        let mut seen = Vec::new();
        let _ = stream.read_to_end(&mut seen).await;
        String::from_utf8_lossy(&seen).into_owned()
    }

    /// A server on a free port of `env`, answering `"ok"`, held to `env`'s limits.
    async fn limited_server(env: &Arc<RealEnv>) -> String {
        let listener = env.listen("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = env.limits().clone();
        tokio::spawn(async move {
            super::serve_limited(listener, &limits, |_request, _peer| async {
                super::json(http::StatusCode::OK, &"ok")
            })
            .await
        });
        addr
    }

    // Issue 53: `http.connections-per-peer` set through the environment: the abusive client
    // is refused, and served again once one of its connections closed.
    #[tokio::test(flavor = "current_thread")]
    async fn a_peer_past_its_connections_gets_429_and_is_served_once_one_closes() {
        let mut limits = crate::env::limits::Limits::DEFAULT;
        limits.set("http.connections-per-peer=2").unwrap();
        let env = Arc::new(RealEnv::new("http-test").with_limits(limits));
        let addr = limited_server(&env).await;
        let get = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";
        // Two keep-alive connections, each served.
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut stream = env.connect(&addr).await.unwrap();
            stream.write_all(get).await.unwrap();
            let answer = answer(&mut stream).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            held.push(stream);
        }
        // A third from the same IP: 429 naming the limit, then closed.
        let mut third = env.connect(&addr).await.unwrap();
        third.write_all(get).await.unwrap();
        let refused = all(&mut third).await;
        assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
        assert!(refused.contains("http.connections-per-peer"), "{refused}");
        // One held connection closes: the next one is served.
        drop(held.pop());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut next = env.connect(&addr).await.unwrap();
        next.write_all(get).await.unwrap();
        let answer_next = answer(&mut next).await;
        assert!(answer_next.starts_with("HTTP/1.1 200"), "{answer_next}");
    }

    // Issue 53: `http.header-read-timeout` set through the environment: a client that never
    // finishes its headers is closed after it, and a normal one is served.
    #[tokio::test(flavor = "current_thread")]
    async fn a_client_slower_than_the_header_timeout_it_was_given_is_closed() {
        let mut limits = crate::env::limits::Limits::DEFAULT;
        limits.set("http.header-read-timeout=300ms").unwrap();
        let env = Arc::new(RealEnv::new("http-test").with_limits(limits));
        let addr = limited_server(&env).await;
        let mut slow = env.connect(&addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: te").await.unwrap();
        let started = std::time::Instant::now(); // determinism: real-env (a real-socket test)
        let said = tokio::time::timeout(std::time::Duration::from_secs(5), all(&mut slow))
            .await
            .expect("the slow client was closed");
        assert!(!said.contains("200"), "{said}");
        assert!(started.elapsed() < std::time::Duration::from_secs(3));
        let mut after = env.connect(&addr).await.unwrap();
        after
            .write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let answer_after = answer(&mut after).await;
        assert!(answer_after.starts_with("HTTP/1.1 200"), "{answer_after}");
    }

    #[test]
    fn peers_are_counted_by_ip() {
        assert_eq!(super::peer_ip("10.0.0.7:49152"), "10.0.0.7");
        assert_eq!(super::peer_ip("[::1]:80"), "[::1]");
        assert_eq!(super::peer_ip("fuzzer"), "fuzzer");
        assert_eq!(super::peer_ip("host:name"), "host:name");
    }

    #[test]
    fn query_strings_are_form_decoded() {
        let uri: http::Uri = "/x?labelSelector=app%3Dweb%2Ctier+in+(a)&watch=1&empty"
            .parse()
            .unwrap();
        let q = super::query(&uri);
        assert_eq!(q["labelSelector"], "app=web,tier in (a)");
        assert_eq!(q["watch"], "1");
        assert_eq!(q["empty"], "");
        assert!(super::query(&"/x".parse().unwrap()).is_empty());
        // Bad escapes are kept as written.
        let q = super::query(&"/x?a=100%&b=%zz".parse().unwrap());
        assert_eq!((q["a"].as_str(), q["b"].as_str()), ("100%", "%zz"));
    }
}
