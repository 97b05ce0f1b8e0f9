//! At-most-once execution of state-changing requests: the platform stamps every forwarded
//! request with an id (or passes the client's); a repeat of a finished request gets the
//! recorded answer, a repeat of a running one gets 409, and a request whose caller went
//! away (tunnel dropped) still runs to completion so its retry can be answered.
//!
//! With a durable store (the runtime's Redis, [`Dedup::with_store`]) the record outlives the
//! process: before a write runs, `running` is stored; after, its answer. A retry that reaches
//! a restarted runtime gets the stored answer, or — when the process died while the write
//! ran — 409 saying its outcome is unknown, never a second execution. A store that cannot be
//! read or written fails the request with 503 (the caller retries) rather than risk a repeat.
//! Found by the swarm-tunnel family: with the records in memory only, a runtime that crashed
//! after executing a write, before its answer got out, ran the write again on the retry.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;

use crate::env::http::{full, json, Body};
use crate::env::BoxFuture;
use crate::runtime::cache;
use crate::tunnel::REQUEST_ID_HEADER;

/// Remembered answers, oldest evicted first.
pub const CAPACITY: usize = 10_000;

#[derive(Clone)]
enum Entry {
    Running,
    Done {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    },
}

/// The request handler behind the tunnel.
pub type Handler =
    Arc<dyn Fn(Request<Incoming>) -> BoxFuture<'static, Response<Body>> + Send + Sync>;

/// The dedup table.
#[derive(Default)]
pub struct Dedup {
    entries: Mutex<(BTreeMap<String, Entry>, VecDeque<String>)>,
    /// The durable copy of the records, if any.
    store: Option<cache::Client>,
}

/// How long a durable record is kept: far longer than any client retries.
pub const RECORD_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

fn record_key(id: &str) -> String {
    format!("tunnel-request:{id}")
}

/// A stored answer: `done <status>\n<body>`.
fn done_record(status: StatusCode, body: &Bytes) -> Bytes {
    let mut record = format!("done {}\n", status.as_u16()).into_bytes();
    record.extend_from_slice(body);
    Bytes::from(record)
}

/// What a durable record says.
enum Stored {
    Running,
    Done(StatusCode, Bytes),
}

fn parse_record(record: &Bytes) -> Option<Stored> {
    if record.as_ref() == b"running" {
        return Some(Stored::Running);
    }
    let newline = record.iter().position(|b| *b == b'\n')?;
    let head = std::str::from_utf8(&record[..newline]).ok()?;
    let status = head.strip_prefix("done ")?.parse::<u16>().ok()?;
    Some(Stored::Done(
        StatusCode::from_u16(status).ok()?,
        record.slice(newline + 1..),
    ))
}

fn unavailable(id: &str, why: &str) -> Response<Body> {
    json(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({"error": format!("request {id}: cannot consult the request record ({why}); retry later")}),
    )
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl Dedup {
    /// Records kept in memory and in `store` (the runtime's cache), so they survive a restart.
    pub fn with_store(store: cache::Client) -> Self {
        Dedup {
            store: Some(store),
            ..Dedup::default()
        }
    }

    /// Consults and claims the durable record of `id`: `Ok(None)` when the request may run
    /// (its `running` record is stored), `Ok(Some(answer))` when it must not.
    async fn claim(&self, id: &str) -> Result<Option<Response<Body>>, Response<Body>> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let key = record_key(id);
        match store.get(&key).await {
            Err(why) => Err(unavailable(id, &why.to_string())),
            Ok(Some(record)) => Ok(Some(match parse_record(&record) {
                Some(Stored::Done(status, body)) => {
                    let mut response = Response::new(full(body));
                    *response.status_mut() = status;
                    response
                        .headers_mut()
                        .insert("x-orrery-replayed", http::HeaderValue::from_static("true"));
                    response
                }
                _ => json(
                    StatusCode::CONFLICT,
                    &json!({"error": format!("request {id} was interrupted by a runtime restart; its outcome is unknown, so it is not run again")}),
                ),
            })),
            Ok(None) => match store
                .put(&key, Bytes::from_static(b"running"), RECORD_TTL)
                .await
            {
                Ok(()) => Ok(None),
                Err(why) => Err(unavailable(id, &why.to_string())),
            },
        }
    }

    /// Runs `request` through `handler` at most once per request id.
    pub async fn handle(
        self: Arc<Self>,
        handler: Handler,
        request: Request<Incoming>,
    ) -> Response<Body> {
        let id = request
            .headers()
            .get(REQUEST_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let Some(id) = id.filter(|_| changes_state(request.method())) else {
            return handler(request).await;
        };
        {
            let mut guard = self.entries.lock().expect("dedup lock");
            match guard.0.get(&id) {
                Some(Entry::Running) => {
                    return json(
                        StatusCode::CONFLICT,
                        &json!({"error": format!("request {id} is already executing; retry later for its answer")}),
                    );
                }
                Some(Entry::Done {
                    status,
                    headers,
                    body,
                }) => {
                    let mut response = Response::new(full(body.clone()));
                    *response.status_mut() = *status;
                    *response.headers_mut() = headers.clone();
                    response
                        .headers_mut()
                        .insert("x-orrery-replayed", http::HeaderValue::from_static("true"));
                    return response;
                }
                None => {
                    guard.0.insert(id.clone(), Entry::Running);
                    guard.1.push_back(id.clone());
                    while guard.1.len() > CAPACITY {
                        if let Some(old) = guard.1.pop_front() {
                            guard.0.remove(&old);
                        }
                    }
                }
            }
        }
        match self.claim(&id).await {
            Ok(None) => {}
            Ok(Some(answer)) | Err(answer) => {
                // Not run here: forget the local claim so a later retry asks the store again.
                self.entries.lock().expect("dedup lock").0.remove(&id);
                return answer;
            }
        }
        // Run detached: the request completes (and is recorded) even if its caller is gone.
        let this = self.clone();
        let task = tokio::spawn(async move {
            let response = handler(request).await;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            if let Some(store) = &this.store {
                // Best effort: if this write fails, the stored `running` makes a retry that
                // reaches a restarted runtime answer 409 instead of running it again.
                let record = done_record(parts.status, &body);
                let _ = store.put(&record_key(&id), record, RECORD_TTL).await;
            }
            this.entries.lock().expect("dedup lock").0.insert(
                id,
                Entry::Done {
                    status: parts.status,
                    headers: parts.headers.clone(),
                    body: body.clone(),
                },
            );
            (parts, body)
        });
        match task.await {
            Ok((parts, body)) => Response::from_parts(parts, full(body)),
            Err(_) => json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &json!({"error": "request handler failed"}),
            ),
        }
    }
}
