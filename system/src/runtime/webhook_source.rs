//! A Git webhook EventSource (Argo Events' `github` EventSource, issue 13 item 5): the
//! Service `<name>-eventsource-svc.<ns>` the request routing service sends
//! `/webhooks/<ns>/<name>` to (research §2.3). It takes a provider's push deliveries,
//! checks their signature, and publishes each to the event bus for a Sensor.
//!
//! Behaviour, after argo-events v1.9's webhook plumbing (`pkg/eventsources/common/webhook`):
//! the handler hands the delivery over an unbuffered channel to the one dispatcher and
//! answers 200 `success` once it was taken; the dispatcher publishes it to the bus with the
//! EventSource's retry (5 attempts, 1–2 s apart) and drops it after that. So while one
//! delivery's publish is being retried (the bus is down), the next delivery waits in its
//! handler and meets the provider's 10 s timeout (argo-events issue #3448; later versions
//! answer 500 instead) — and the provider, like GitHub, never redelivers on its own. Only `POST` on the configured endpoint; a missing or wrong
//! `X-Hub-Signature-256` with a secret configured is 400 (GitHub's own header; the status
//! code is inferred); event types other than those configured are acknowledged and ignored.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::resource_reporter::bus;
use crate::env::http::{json as json_response, Body};
use crate::env::SharedEnv;
use crate::observe::WebhookEvent;

/// Webhook EventSource settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to listen on (the Service's port 80 in the world; 12000 in the chart's pod).
    pub listen: String,
    /// `/webhooks/<ns>/<name>`: the endpoint the router forwards, URI unchanged.
    pub endpoint: String,
    /// The EventSource's name: the bus subject its events go to.
    pub name: String,
    /// The webhook secret shared with the Git provider; `None`: signatures are not checked.
    pub secret: Option<String>,
    /// Event types published (`X-GitHub-Event`). Default `["push"]`.
    pub events: Vec<String>,
    /// The event bus `host:port`.
    pub bus_addr: String,
    /// Publish attempts per delivery (`DefaultBackoff.Steps`). Default 5.
    pub publish_attempts: u32,
    /// Pause before a publish retry, up to double with jitter. Default 1 s.
    pub publish_backoff: Duration,
}

impl Config {
    /// Defaults for the EventSource `name` in namespace `ns`, listening on `listen`.
    pub fn new(ns: &str, name: &str, listen: &str, bus_addr: &str) -> Self {
        Config {
            listen: listen.to_string(),
            endpoint: format!("/webhooks/{ns}/{name}"),
            name: name.to_string(),
            secret: None,
            events: vec!["push".into()],
            bus_addr: bus_addr.to_string(),
            publish_attempts: 5,
            publish_backoff: Duration::from_secs(1),
        }
    }
}

/// A delivery handed to the dispatcher: its id, the bus message, and the signal that it
/// was taken.
type Handoff = (String, Bytes, tokio::sync::oneshot::Sender<()>);

/// The largest delivery read (GitHub caps payloads at 25 MB).
const MAX_DELIVERY_BYTES: usize = 25 * 1024 * 1024;

/// Whether `header` is `sha256=<hex>` of the HMAC-SHA256 of `body` under `secret`
/// (compared in constant time).
fn verified(secret: &str, header: &str, body: &[u8]) -> bool {
    let Some(hex) = header.strip_prefix("sha256=") else {
        return false;
    };
    if hex.len() % 2 != 0 || !hex.is_ascii() {
        return false;
    }
    let tag: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect();
    let Some(tag) = tag else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    ring::hmac::verify(&key, body, &tag).is_ok()
}

/// `sha256=<hex HMAC-SHA256 of body under secret>`: GitHub's `X-Hub-Signature-256`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Runs the EventSource until its listener fails.
pub async fn run(env: SharedEnv, config: Config) -> std::io::Result<()> {
    let listener = env.listen(&config.listen).await?;
    // The unbuffered route channel: each delivery is handed over with a signal the handler
    // waits for, sent when the dispatcher takes it.
    let (queue, mut deliveries) = mpsc::channel::<Handoff>(1);
    let publisher_env = env.clone();
    let publisher_config = config.clone();
    let publisher = tokio::spawn(async move {
        let client = bus::Client::new(
            publisher_env.clone(),
            &publisher_config.bus_addr,
            Duration::from_secs(5),
        );
        while let Some((delivery, message, taken)) = deliveries.recv().await {
            let _ = taken.send(());
            let published = client
                .publish_with_retry(
                    &publisher_env,
                    &publisher_config.name,
                    message,
                    publisher_config.publish_attempts,
                    publisher_config.publish_backoff,
                )
                .await;
            publisher_env.observe(
                WebhookEvent::Published {
                    source: publisher_config.name.clone(),
                    delivery,
                    published,
                }
                .into(),
            );
        }
    });
    let served = crate::env::http::serve(listener, move |req, _peer| {
        handle(env.clone(), config.clone(), queue.clone(), req)
    })
    .await;
    publisher.abort();
    served
}

async fn handle(
    env: SharedEnv,
    config: Config,
    queue: mpsc::Sender<Handoff>,
    req: Request<Incoming>,
) -> Response<Body> {
    if req.uri().path() != config.endpoint {
        return json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("no route for {}", req.uri().path())}),
        );
    }
    if req.method() != http::Method::POST {
        return json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({"error": "webhooks are POSTed"}),
        );
    }
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (event, delivery, signed) = (
        header("x-github-event"),
        header("x-github-delivery"),
        header("x-hub-signature-256"),
    );
    let body = match http_body_util::Limited::new(req.into_body(), MAX_DELIVERY_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &json!({"error": format!("reading the delivery failed: {e}")}),
            )
        }
    };
    let refuse = |why: String| {
        env.observe(
            WebhookEvent::Refused {
                source: config.name.clone(),
                why: why.clone(),
            }
            .into(),
        );
        json_response(StatusCode::BAD_REQUEST, &json!({ "error": why }))
    };
    if let Some(secret) = &config.secret {
        if !verified(secret, &signed, &body) {
            return refuse("X-Hub-Signature-256 is missing or does not match the secret".into());
        }
    }
    let payload: Value = match serde_json::from_slice(&body) {
        Ok(payload) => payload,
        Err(e) => return refuse(format!("the delivery is not JSON: {e}")),
    };
    if !config.events.contains(&event) {
        return json_response(StatusCode::OK, &json!({"ignored": event}));
    }
    env.observe(
        WebhookEvent::Received {
            source: config.name.clone(),
            event: event.clone(),
            delivery: delivery.clone(),
            after: payload["after"].as_str().unwrap_or("").to_string(),
        }
        .into(),
    );
    let message = json!({"header": {"X-GitHub-Event": [event], "X-GitHub-Delivery": [delivery.clone()]}, "body": payload});
    let (taken, was_taken) = tokio::sync::oneshot::channel();
    if queue
        .send((delivery, Bytes::from(message.to_string()), taken))
        .await
        .is_err()
        || was_taken.await.is_err()
    {
        return json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": "the event source is stopping"}),
        );
    }
    json_response(StatusCode::OK, &json!({"status": "success"}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_body_and_secret() {
        let good = signature("s3cret", b"{}");
        assert!(verified("s3cret", &good, b"{}"));
        assert!(!verified("other", &good, b"{}"));
        assert!(!verified("s3cret", &good, b"{ }"));
        for bad in ["", "sha256=", "sha256=zz", "sha1=00", "sha256=abc"] {
            assert!(!verified("s3cret", bad, b"{}"), "{bad:?}");
        }
    }

    #[test]
    fn the_signature_is_githubs_hmac_sha256_in_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
