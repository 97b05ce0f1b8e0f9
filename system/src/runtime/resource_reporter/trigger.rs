//! One POST of one object to the platform's events API, as both variants send it.
//!
//! The faithful body is the Argo Events Sensor's HTTP trigger payload: `payload: [{src:
//! {dependencyName, dataKey: body}, dest: data.object}]` sets `data.object` to the object as
//! JSON *text* (no `useRawData`), and nothing else — no watch event type — with the runtime
//! token raw in `Authorization` (chart `_components/event-reporters/*/sensor.yaml`, research
//! §1.12). The hardened body adds the watch event `type` beside it, so a deletion ends the
//! object on the platform, and an `Idempotency-Key` naming the object's version.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use super::source::{EventType, ObjectKey};
use crate::env::SharedEnv;

/// What one POST got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP status.
    Status(u16),
    /// No answer: refused, reset, or no response within the timeout.
    NoAnswer,
}

impl Answer {
    /// The status, 0 when there was none (as traces record it).
    pub fn code(self) -> u16 {
        match self {
            Answer::Status(code) => code,
            Answer::NoAnswer => 0,
        }
    }
}

/// Posts objects to the platform.
#[derive(Clone)]
pub struct Poster {
    url: String,
    token: String,
    timeout: Duration,
    http: crate::env::http::Client<Full<Bytes>>,
}

impl Poster {
    /// A poster to the events API at `platform_addr`, each POST given `timeout`.
    pub fn new(env: SharedEnv, platform_addr: &str, token: &str, timeout: Duration) -> Self {
        Poster {
            url: format!("http://{platform_addr}/2.0/api/events"),
            token: token.to_string(),
            timeout,
            http: crate::env::http::client_with_connect_timeout(env, timeout, timeout),
        }
    }

    /// The Sensor's body: `{"data": {"object": "<the object as JSON text>"}}`.
    pub fn sensor_body(object: &Value) -> Bytes {
        let text = object.to_string();
        Bytes::from(json!({"data": {"object": text}}).to_string())
    }

    /// The hardened body: the Sensor's, plus the watch event type.
    pub fn typed_body(object: &Value, event_type: EventType) -> Bytes {
        let text = object.to_string();
        Bytes::from(json!({"data": {"object": text, "type": event_type.as_str()}}).to_string())
    }

    /// The idempotency key of an object version: `<kind>/<namespace>/<name>/<rv>/<type>`.
    pub fn idempotency_key(key: &ObjectKey, rv: u64, event_type: EventType) -> String {
        format!(
            "{}/{}/{}/{rv}/{}",
            key.kind.dependency(),
            key.namespace,
            key.name,
            event_type.as_str()
        )
    }

    /// POSTs `body` once.
    pub async fn post(&self, body: Bytes, idempotency_key: Option<&str>) -> Answer {
        let mut request = Request::post(&self.url)
            .header("authorization", self.token.clone())
            .header("content-type", "application/json");
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let Ok(request) = request.body(Full::new(body)) else {
            return Answer::NoAnswer;
        };
        match tokio::time::timeout(self.timeout, self.http.request(request)).await {
            Ok(Ok(response)) => {
                let status = response.status().as_u16();
                let _ = response.into_body().collect().await;
                Answer::Status(status)
            }
            _ => Answer::NoAnswer,
        }
    }
}
