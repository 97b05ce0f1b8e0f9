//! Build logs (`runner-research.md` §2.7): the engine sends its steps' lines to the platform,
//! which keeps them per build, and the **broadcaster** streams them to clients (the UI, the
//! CLI's `logs -f`) over WebSocket.
//!
//! The real engine writes through task-logger to Firebase (`${baseFirebaseUrl}/${jobId}`),
//! or, with offline logging, through cf-broadcaster backed by Redis (§2.7). Which of the two
//! and their wire format are not modelled: one route takes the lines and one WebSocket gives
//! them out ([INFERENCE] on both shapes). What is modelled is what a client sees: every line
//! once, in order, from any line on (`?from=N`, so a client that reconnects goes on where it
//! stopped, as a Firebase listener resyncs), and an end once the build ended and every line
//! it has was sent.
//!
//! Lines are numbered from 0 by the engine; a request whose first line the log has already
//! is a retry, and the lines the log has are skipped, so a lost answer never doubles a line.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use http::{Request, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{self, protocol::Role, Message};

use super::{error, Builds, Refused};
use crate::env::http::{json, Body};
use crate::env::SharedEnv;

/// How long a follower waits for a new line before it looks at its build's status again
/// (a build's end wakes no one: its followers see it within this).
pub const FOLLOW_WAKE: Duration = Duration::from_secs(1);

/// `POST /api/builds/{id}/logs` `{from, lines}`: appends the engine's lines.
pub(super) async fn append(
    env: &SharedEnv,
    builds: &Arc<Builds>,
    id: &str,
    req: Request<Incoming>,
) -> http::Response<Body> {
    let body = match super::body(req, env.limits().runner_body).await {
        Ok(body) => body,
        Err(Refused(status, e)) => return error(status, e),
    };
    let Some(from) = body.get("from").and_then(Value::as_u64) else {
        return error(
            StatusCode::BAD_REQUEST,
            "log lines need `from`: the number of the first line (from 0)",
        );
    };
    let lines: Option<Vec<String>> =
        body.get("lines")
            .and_then(Value::as_array)
            .and_then(|lines| {
                lines
                    .iter()
                    .map(|l| l.as_str().map(str::to_string))
                    .collect()
            });
    let Some(lines) = lines else {
        return error(
            StatusCode::BAD_REQUEST,
            "log lines need `lines`: an array of strings",
        );
    };
    let max = env.limits().runner_log_bytes;
    let appended = builds.lock().append_log(id, from, lines, max);
    match appended {
        Ok(next) => {
            builds.logs_changed.notify_waiters();
            json(StatusCode::OK, &json!({"next": next}))
        }
        Err(e @ super::LogError::NotFound(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ super::LogError::Ended(_)) => error(StatusCode::GONE, e.to_string()),
        Err(e @ super::LogError::TooLarge { .. }) => {
            error(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
        }
        Err(ref e @ super::LogError::Gap { next, .. }) => json(
            StatusCode::CONFLICT,
            &json!({"message": e.to_string(), "next": next}),
        ),
    }
}

/// `GET /api/builds/{id}/logs?from=N`: the lines from `N` on as JSON, or, asked with
/// `Upgrade: websocket`, the broadcaster's stream of them.
pub(super) fn read(
    env: &SharedEnv,
    builds: &Arc<Builds>,
    id: &str,
    mut req: Request<Incoming>,
) -> http::Response<Body> {
    let from = match crate::env::http::query(req.uri()).get("from") {
        None => 0,
        Some(from) => match from.parse::<u64>() {
            Ok(from) => from,
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("`from` is a line number (from 0), not {from:?}"),
                )
            }
        },
    };
    if !wants_websocket(&req) {
        let queue = builds.lock();
        let Some(build) = queue.build(id) else {
            return error(StatusCode::NOT_FOUND, format!("no build {id}"));
        };
        let lines = queue.log(id, from).unwrap_or(&[]);
        let next = from + lines.len() as u64;
        return json(
            StatusCode::OK,
            &json!({"lines": lines, "next": next, "ended": build.status.is_final()}),
        );
    }
    // The broadcaster reads the log itself, as it streams.
    if builds.lock().build(id).is_none() {
        return error(StatusCode::NOT_FOUND, format!("no build {id}"));
    }
    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
        return error(
            StatusCode::BAD_REQUEST,
            "a WebSocket upgrade needs its `Sec-WebSocket-Key` header",
        );
    };
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    let (env, builds, id) = (env.clone(), builds.clone(), id.to_string());
    // The follower still counts against its peer's connections while it streams.
    let slot = req
        .extensions_mut()
        .remove::<crate::env::http::ConnectionSlot>();
    tokio::spawn(async move {
        let _slot = slot;
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let io = hyper_util::rt::TokioIo::new(upgraded);
        let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(io, Role::Server, None).await;
        follow(env, builds, id, from, ws).await;
    });
    http::Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::CONNECTION, "Upgrade")
        .header("sec-websocket-accept", accept)
        .body(crate::env::http::full(bytes::Bytes::new()))
        .expect("static response parts are valid")
}

fn wants_websocket(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Streams `id`'s lines from `next` on as they come (`{"seq", "line"}`), then `{"end":
/// status, "lines": count}` once the build ended and every line was sent, and closes.
async fn follow<S>(
    env: SharedEnv,
    builds: Arc<Builds>,
    id: String,
    mut next: u64,
    mut ws: tokio_tungstenite::WebSocketStream<S>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        // Registered before the log is read, so a line appended after the read wakes it.
        let changed = builds.logs_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let (lines, status) = {
            let queue = builds.lock();
            let Some(build) = queue.build(&id) else {
                return;
            };
            (queue.log(&id, next).unwrap_or(&[]).to_vec(), build.status)
        };
        let sent_any = !lines.is_empty();
        for line in lines {
            let frame = json!({"seq": next, "line": line}).to_string();
            if ws.send(Message::text(frame)).await.is_err() {
                return;
            }
            next += 1;
        }
        if status.is_final() && !sent_any {
            let end = json!({"end": status.as_str(), "lines": next}).to_string();
            let _ = ws.send(Message::text(end)).await;
            let _ = ws.close(None).await;
            return;
        }
        tokio::select! {
            biased;
            () = &mut changed => {}
            () = env.sleep(FOLLOW_WAKE) => {}
            frame = ws.next() => match frame {
                // The client closed or went away.
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            },
        }
    }
}

/// What a client following a build's log saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Followed {
    /// Lines received.
    pub received: u64,
    /// Each line came with the next number, none twice.
    pub in_order: bool,
    /// The log's length at the end, as the broadcaster said.
    pub lines: u64,
    /// The build's final status.
    pub status: String,
}

/// Follows `build`'s log through the broadcaster at `api` (`host:port`) with `token`, as the
/// UI does, until the build's end: a connection that breaks is made again after
/// [`FOLLOW_WAKE`] from the next line not received. `lines` gets each line as it comes.
pub async fn follow_build(
    env: SharedEnv,
    api: &str,
    token: &str,
    build: &str,
    mut lines: impl FnMut(&str),
) -> Followed {
    let mut seen = Followed {
        received: 0,
        in_order: true,
        lines: 0,
        status: String::new(),
    };
    loop {
        if let Some(end) = follow_once(&env, api, token, build, &mut seen, &mut lines).await {
            return end;
        }
        env.sleep(FOLLOW_WAKE).await;
    }
}

/// One connection of [`follow_build`]: the end, or `None` when the connection broke first.
async fn follow_once(
    env: &SharedEnv,
    api: &str,
    token: &str,
    build: &str,
    seen: &mut Followed,
    lines: &mut impl FnMut(&str),
) -> Option<Followed> {
    let stream = env.connect(api).await.ok()?;
    let request = Request::builder()
        .uri(format!(
            "ws://{api}/api/builds/{build}/logs?from={}",
            seen.received
        ))
        .header("host", api)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header(
            "sec-websocket-key",
            crate::runtime::tunnel_client::websocket_key(env),
        )
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .ok()?;
    let (mut ws, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .ok()?;
    while let Some(Ok(frame)) = ws.next().await {
        let Message::Text(text) = frame else {
            continue;
        };
        let Ok(value) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if let Some(status) = value.get("end").and_then(Value::as_str) {
            seen.status = status.into();
            seen.lines = value.get("lines").and_then(Value::as_u64).unwrap_or(0);
            return Some(seen.clone());
        }
        if let (Some(seq), Some(line)) = (
            value.get("seq").and_then(Value::as_u64),
            value.get("line").and_then(Value::as_str),
        ) {
            if seq != seen.received {
                seen.in_order = false;
            }
            seen.received += 1;
            lines(line);
        }
    }
    None
}
