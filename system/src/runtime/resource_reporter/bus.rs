//! The EventBus between the faithful EventSource and Sensor: a durable stream per subject
//! with publish acknowledgements, manual acks and redelivery — the parts of Argo Events'
//! NATS Streaming bus the reporter's losses depend on (research §1.12, and argo-events
//! `pkg/eventbus/stan`):
//!
//! - a publish is acknowledged once stored (`STANConn.Publish` waits for the ack);
//! - a subscriber takes the next unacknowledged message and acks it when its trigger
//!   returns (`SetManualAckMode`, ack after the trigger);
//! - a new subscriber session (the Sensor restarted) is redelivered what the old one took
//!   but never acked (a durable subscription);
//! - a message taken and not acked within [`ACK_WAIT`] is delivered again (`AckWait(1s)` of
//!   the Sensor's STAN subscription): a fetch answer lost on the way, or an ack that did not
//!   arrive. The Sensor recognises a message it already handled and only acks it.
//!
//! The store survives the bus process's restart (NATS Streaming's file store on an
//! `emptyDir`, which outlives a container restart); what the bus loses is what could not be
//! published while it was down. Not modelled: the three-replica Raft group (one host plays
//! the whole bus) and STAN's `MaxInflight`.
//!
//! Wire protocol (HTTP/1.1, JSON bodies are the messages themselves):
//! `POST /publish/<subject>` → 200 `{"seq": n}`; `POST /fetch/<subject>?session=S` → 200 with
//! the message and its sequence in `x-seq`, or 204 when none came within a second;
//! `POST /ack/<subject>?session=S&seq=n` → 204.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::json;
use tokio::sync::Notify;

use crate::env::http::{full, json as json_response, query, Body};
use crate::env::SharedEnv;

/// How long a fetch waits for a message (JetStream's `Fetch(1, MaxWait(1s))`).
pub const FETCH_WAIT: Duration = Duration::from_secs(1);

/// A taken message not acked within this is delivered again (the Sensor's STAN
/// subscription: `stan.AckWait(1*time.Second)`, `pkg/eventbus/stan/sensor/trigger_conn.go`).
pub const ACK_WAIT: Duration = Duration::from_secs(1);

/// One subject's stream.
#[derive(Debug, Default)]
struct Subject {
    next_seq: u64,
    /// Stored, not yet acknowledged, in order.
    unacked: VecDeque<(u64, Bytes)>,
    /// Taken by the current session and not acknowledged yet, with when.
    in_flight: BTreeMap<u64, Duration>,
    /// The subscriber session that took them.
    session: String,
}

/// The bus's memory. Clone to share it across restarts of the bus process.
#[derive(Clone, Debug, Default)]
pub struct Store {
    subjects: Arc<Mutex<BTreeMap<String, Subject>>>,
    arrived: Arc<Notify>,
}

/// What a fetch found.
#[derive(Debug, PartialEq, Eq)]
pub enum Fetched {
    /// A message and its sequence number.
    Message(u64, Bytes),
    /// Nothing waiting.
    Empty,
}

impl Store {
    /// Stores `message` on `subject`; returns its sequence number.
    pub fn publish(&self, subject: &str, message: Bytes) -> u64 {
        let seq = {
            let mut subjects = self.subjects.lock().expect("bus lock poisoned");
            let stream = subjects.entry(subject.to_string()).or_default();
            stream.next_seq += 1;
            stream.unacked.push_back((stream.next_seq, message));
            stream.next_seq
        };
        self.arrived.notify_waiters();
        seq
    }

    /// The next message `session` may take from `subject` at `now` (the bus's clock): the
    /// oldest one not acknowledged and not taken less than [`ACK_WAIT`] ago. A session other
    /// than the one that took the in-flight messages replaces it, and those messages are
    /// delivered again.
    pub fn take(&self, subject: &str, session: &str, now: Duration) -> Fetched {
        let mut subjects = self.subjects.lock().expect("bus lock poisoned");
        let stream = subjects.entry(subject.to_string()).or_default();
        if stream.session != session {
            stream.session = session.to_string();
            stream.in_flight.clear();
        }
        let in_flight = &stream.in_flight;
        let next = stream
            .unacked
            .iter()
            .find(|(seq, _)| {
                in_flight
                    .get(seq)
                    .is_none_or(|taken| now.saturating_sub(*taken) >= ACK_WAIT)
            })
            .cloned();
        match next {
            Some((seq, message)) => {
                stream.in_flight.insert(seq, now);
                Fetched::Message(seq, message)
            }
            None => Fetched::Empty,
        }
    }

    /// Acknowledges `seq` on `subject` (an unknown one is ignored, as an ack of a message
    /// already acknowledged is).
    pub fn ack(&self, subject: &str, seq: u64) {
        let mut subjects = self.subjects.lock().expect("bus lock poisoned");
        if let Some(stream) = subjects.get_mut(subject) {
            stream.in_flight.remove(&seq);
            if let Some(at) = stream.unacked.iter().position(|(s, _)| *s == seq) {
                stream.unacked.remove(at);
            }
        }
    }

    /// Messages stored and not acknowledged, per subject.
    pub fn backlog(&self) -> BTreeMap<String, usize> {
        self.subjects
            .lock()
            .expect("bus lock poisoned")
            .iter()
            .map(|(subject, stream)| (subject.clone(), stream.unacked.len()))
            .collect()
    }
}

/// Runs the bus on `addr` with `store` until its listener fails.
pub async fn run(env: SharedEnv, addr: &str, store: Store) -> std::io::Result<()> {
    let listener = env.listen(addr).await?;
    crate::env::http::serve(listener, move |req, _peer| {
        handle(env.clone(), store.clone(), req)
    })
    .await
}

async fn handle(env: SharedEnv, store: Store, req: Request<Incoming>) -> Response<Body> {
    let params = query(req.uri());
    let path = req.uri().path().to_string();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (verb, subject) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if subject.is_empty() || req.method() != http::Method::POST {
        return json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("no route for {} {path}", req.method())}),
        );
    }
    let session = params.get("session").cloned().unwrap_or_default();
    match verb {
        "publish" => match req.into_body().collect().await {
            Ok(body) => {
                let seq = store.publish(subject, body.to_bytes());
                json_response(StatusCode::OK, &json!({ "seq": seq }))
            }
            Err(e) => json_response(
                StatusCode::BAD_REQUEST,
                &json!({"error": format!("reading the message failed: {e}")}),
            ),
        },
        "fetch" => {
            if session.is_empty() {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &json!({"error": "fetch needs ?session="}),
                );
            }
            let deadline = env.elapsed() + FETCH_WAIT;
            loop {
                let arrived = store.arrived.clone();
                let notified = arrived.notified();
                if let Fetched::Message(seq, message) = store.take(subject, &session, env.elapsed())
                {
                    return Response::builder()
                        .status(StatusCode::OK)
                        .header("content-type", "application/json")
                        .header("x-seq", seq.to_string())
                        .body(full(message))
                        .expect("static response parts are valid");
                }
                let left = deadline.saturating_sub(env.elapsed());
                if left.is_zero() {
                    return Response::builder()
                        .status(StatusCode::NO_CONTENT)
                        .body(full(Bytes::new()))
                        .expect("static response parts are valid");
                }
                tokio::select! {
                    () = notified => {}
                    () = env.sleep(left) => {}
                }
            }
        }
        "ack" => match params.get("seq").and_then(|s| s.parse().ok()) {
            Some(seq) => {
                store.ack(subject, seq);
                Response::builder()
                    .status(StatusCode::NO_CONTENT)
                    .body(full(Bytes::new()))
                    .expect("static response parts are valid")
            }
            None => json_response(
                StatusCode::BAD_REQUEST,
                &json!({"error": "ack needs ?seq=<number>"}),
            ),
        },
        _ => json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("no route for POST {path}")}),
        ),
    }
}

/// Why a bus call failed.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// No answer (the bus is down, or the link to it).
    #[error("bus unreachable: {0}")]
    Unreachable(String),
    /// The bus answered with an error.
    #[error("bus answered {0}")]
    Status(StatusCode),
}

/// A client of the bus.
#[derive(Clone)]
pub struct Client {
    addr: String,
    http: crate::env::http::Client<Full<Bytes>>,
}

impl Client {
    /// A client of the bus at `addr`; calls give up after `timeout` without an answer.
    pub fn new(env: SharedEnv, addr: &str, timeout: Duration) -> Self {
        Client {
            addr: addr.to_string(),
            http: crate::env::http::client_with_connect_timeout(env, timeout, timeout),
        }
    }

    async fn call(&self, path: String, body: Bytes) -> Result<Response<Incoming>, BusError> {
        let request = Request::post(format!("http://{}{path}", self.addr))
            .header("content-type", "application/json")
            .body(Full::new(body))
            .map_err(|e| BusError::Unreachable(e.to_string()))?;
        self.http
            .request(request)
            .await
            .map_err(|e| BusError::Unreachable(e.to_string()))
    }

    /// Reads a response through and keeps only whether it was a success.
    async fn succeeded(response: Response<Incoming>) -> Result<(), BusError> {
        let status = response.status();
        let _ = response.into_body().collect().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(BusError::Status(status))
        }
    }

    /// Publishes `message` on `subject`; `Ok` once the bus stored it.
    pub async fn publish(&self, subject: &str, message: Bytes) -> Result<(), BusError> {
        Self::succeeded(self.call(format!("/publish/{subject}"), message).await?).await
    }

    /// Publishes as an EventSource does (`DefaultBackoff`): up to `attempts` tries,
    /// `backoff` to twice that apart; whether the bus stored it in the end.
    pub async fn publish_with_retry(
        &self,
        env: &SharedEnv,
        subject: &str,
        message: Bytes,
        attempts: u32,
        backoff: Duration,
    ) -> bool {
        for attempt in 0..attempts.max(1) {
            if attempt > 0 {
                env.sleep(env.random_between(backoff, backoff.saturating_mul(2)))
                    .await;
            }
            if self.publish(subject, message.clone()).await.is_ok() {
                return true;
            }
        }
        false
    }

    /// Takes the next message of `subject` for `session` (waits up to [`FETCH_WAIT`]).
    pub async fn fetch(&self, subject: &str, session: &str) -> Result<Fetched, BusError> {
        let response = self
            .call(format!("/fetch/{subject}?session={session}"), Bytes::new())
            .await?;
        let status = response.status();
        let seq = response
            .headers()
            .get("x-seq")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| BusError::Unreachable(e.to_string()))?
            .to_bytes();
        match (status, seq) {
            (StatusCode::NO_CONTENT, _) => Ok(Fetched::Empty),
            (StatusCode::OK, Some(seq)) => Ok(Fetched::Message(seq, body)),
            (status, _) => Err(BusError::Status(status)),
        }
    }

    /// Acknowledges `seq` of `subject`.
    pub async fn ack(&self, subject: &str, session: &str, seq: u64) -> Result<(), BusError> {
        let path = format!("/ack/{subject}?session={session}&seq={seq}");
        Self::succeeded(self.call(path, Bytes::new()).await?).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Duration = Duration::from_secs(10);

    #[test]
    fn a_message_not_acked_within_the_ack_wait_is_delivered_again() {
        let store = Store::default();
        store.publish("rollouts", Bytes::from_static(b"1"));
        assert!(matches!(
            store.take("rollouts", "s1", T0),
            Fetched::Message(1, _)
        ));
        let soon = T0 + ACK_WAIT / 2;
        assert_eq!(store.take("rollouts", "s1", soon), Fetched::Empty);
        assert!(matches!(
            store.take("rollouts", "s1", T0 + ACK_WAIT),
            Fetched::Message(1, _)
        ));
        store.ack("rollouts", 1);
        assert_eq!(
            store.take("rollouts", "s1", T0 + ACK_WAIT * 3),
            Fetched::Empty
        );
    }

    #[test]
    fn messages_are_taken_in_order_acked_once_and_redelivered_to_a_new_session() {
        let store = Store::default();
        store.publish("rollouts", Bytes::from_static(b"1"));
        store.publish("rollouts", Bytes::from_static(b"2"));
        assert_eq!(
            store.take("rollouts", "s1", T0),
            Fetched::Message(1, Bytes::from_static(b"1"))
        );
        // In flight: the same session gets the next one.
        assert_eq!(
            store.take("rollouts", "s1", T0),
            Fetched::Message(2, Bytes::from_static(b"2"))
        );
        assert_eq!(store.take("rollouts", "s1", T0), Fetched::Empty);
        store.ack("rollouts", 1);
        // The subscriber restarted before acking 2: the new session gets it again.
        assert_eq!(
            store.take("rollouts", "s2", T0),
            Fetched::Message(2, Bytes::from_static(b"2"))
        );
        store.ack("rollouts", 2);
        store.ack("rollouts", 2);
        assert_eq!(store.take("rollouts", "s2", T0), Fetched::Empty);
        assert_eq!(store.backlog()["rollouts"], 0);
        assert_eq!(store.take("workflows", "s2", T0), Fetched::Empty);
    }
}
