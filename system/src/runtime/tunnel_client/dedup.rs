//! At-most-once execution of state-changing requests: the platform stamps every forwarded
//! request with an id (or passes the client's); a repeat of a finished request gets the
//! recorded answer, a repeat of a running one gets 409, and a request whose caller went
//! away (tunnel dropped) still runs to completion so its retry can be answered.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;

use crate::env::http::{full, json, Body};
use crate::env::BoxFuture;
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
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl Dedup {
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
