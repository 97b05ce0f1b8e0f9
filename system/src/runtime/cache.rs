//! The dedup store shared by all reporter replicas (Redis with a TTL in the real runtime),
//! as a tiny HTTP key-value service: `GET /kv/<key>` (404 when absent or expired),
//! `PUT /kv/<key>?ttl_ms=N` with the value as body, `DELETE /kv/<key>`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use crate::env::http::{full, Body};
use crate::env::SharedEnv;

/// Largest value stored (values are digests; anything big is a client bug).
pub const VALUE_LIMIT_BYTES: usize = 64 * 1024;

type Entries = Arc<Mutex<BTreeMap<String, (Bytes, Duration)>>>;

fn status(code: StatusCode, text: &str) -> Response<Body> {
    Response::builder()
        .status(code)
        .body(full(text.to_string()))
        .expect("static response parts are valid")
}

async fn handle(env: SharedEnv, entries: Entries, req: Request<Incoming>) -> Response<Body> {
    let Some(key) = req
        .uri()
        .path()
        .strip_prefix("/kv/")
        .filter(|k| !k.is_empty())
        .map(str::to_string)
    else {
        return status(StatusCode::NOT_FOUND, "use /kv/<key>");
    };
    let now = env.elapsed();
    match *req.method() {
        Method::GET => {
            let mut map = entries.lock().expect("cache lock poisoned");
            match map.get(&key) {
                Some((value, expires)) if *expires > now => Response::new(full(value.clone())),
                Some(_) => {
                    map.remove(&key);
                    status(StatusCode::NOT_FOUND, "expired")
                }
                None => status(StatusCode::NOT_FOUND, "absent"),
            }
        }
        Method::PUT => {
            let ttl_ms: u64 = crate::env::http::query(req.uri())
                .get("ttl_ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(20 * 60 * 1000);
            let body = match http_body_util::Limited::new(req.into_body(), VALUE_LIMIT_BYTES)
                .collect()
                .await
            {
                Ok(body) => body.to_bytes(),
                Err(e) => {
                    return status(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        &format!("value rejected: {e}"),
                    )
                }
            };
            // Fault point: acknowledged, then lost (as an eviction under memory pressure).
            if !env.buggify(crate::env::Point::CacheWriteDropped) {
                entries
                    .lock()
                    .expect("cache lock poisoned")
                    .insert(key, (body, now + Duration::from_millis(ttl_ms)));
            }
            status(StatusCode::NO_CONTENT, "")
        }
        Method::DELETE => {
            entries.lock().expect("cache lock poisoned").remove(&key);
            status(StatusCode::NO_CONTENT, "")
        }
        _ => status(StatusCode::METHOD_NOT_ALLOWED, "GET, PUT or DELETE"),
    }
}

/// Serves the cache on `addr` until the listener fails.
pub async fn run(env: SharedEnv, addr: &str) -> std::io::Result<()> {
    let entries: Entries = Arc::default();
    let listener = env.listen(addr).await?;
    crate::env::http::serve(listener, move |req, _peer| {
        handle(env.clone(), entries.clone(), req)
    })
    .await
}

/// A client of the cache.
#[derive(Clone)]
pub struct Client {
    http: crate::env::http::Client<Full<Bytes>>,
    base: String,
    timeout: Duration,
}

impl Client {
    /// A client of the cache at `addr` (`host:port`).
    pub fn new(env: SharedEnv, addr: &str, timeout: Duration) -> Self {
        Client {
            http: crate::env::http::client(env, timeout * 2),
            base: format!("http://{addr}/kv/"),
            timeout,
        }
    }

    /// The value under `key`, `None` if absent; errors are reported as `Err`.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, String> {
        let request = Request::get(format!("{}{key}", self.base))
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(self.timeout, self.http.request(request))
            .await
            .map_err(|_| "cache timed out".to_string())?
            .map_err(|e| e.to_string())?;
        match response.status() {
            StatusCode::OK => Ok(Some(
                response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?
                    .to_bytes(),
            )),
            StatusCode::NOT_FOUND => Ok(None),
            other => Err(format!("cache answered {other}")),
        }
    }

    /// Stores `value` under `key` for `ttl`.
    pub async fn put(&self, key: &str, value: Bytes, ttl: Duration) -> Result<(), String> {
        let request = Request::put(format!("{}{key}?ttl_ms={}", self.base, ttl.as_millis()))
            .body(Full::new(value))
            .map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(self.timeout, self.http.request(request))
            .await
            .map_err(|_| "cache timed out".to_string())?
            .map_err(|e| e.to_string())?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("cache answered {}", response.status()))
        }
    }
}
