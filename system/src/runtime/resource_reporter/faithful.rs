//! The faithful resource reporter: Argo Events' EventSource → EventBus → Sensor, as the
//! runtime chart wires it (`_components/event-reporters/{rollout,workflow}-reporter`,
//! research §1.12; argo-events v1.9 read at source).
//!
//! - **EventSource**: one informer per resource; its events go one at a time (unbuffered
//!   channel, one goroutine per resource: `pkg/eventsources/sources/resource/start.go`) to
//!   a synchronous publish retried with `DefaultBackoff` — 5 attempts, 1–2 s apart
//!   (`pkg/shared/util/retry.go`) — and then dropped (`eventing.go`: "Failed to publish an
//!   event").
//! - **Sensor**: one trigger per dependency, each with its own subscription, messages
//!   handled one at a time; the HTTP trigger POSTs the object (`trigger::Poster::sensor_body`)
//!   with a 60 s timeout; `retryStrategy {steps: 3, duration: 0}` makes three back-to-back
//!   attempts, and a status in `policy.status.allow` `[200, 201, 204, 400, 401, 404]` ends
//!   them as a success; `atLeastOnce: true` holds the ack until the trigger returns, but the
//!   message is acked whether it succeeded or not (`pkg/sensors/listener.go`: a failed
//!   trigger is only logged) — so the object's state is lost unless it changes again.
//! - A Sensor restarted mid-trigger gets the message again from its durable subscription:
//!   the platform receives that POST twice.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::bus::{self, Fetched};
use super::source::{self, Change, Kind, ObjectKey};
use super::trigger::{Answer, Poster};
use super::Config;
use crate::core::json::Pointer as _;
use crate::env::SharedEnv;
use crate::observe::{LossReason, ResourceReporterEvent};

/// Runs the EventSource and the Sensor until the process stops.
pub async fn run(env: SharedEnv, config: Config) {
    let client = crate::env::kube::client(env.clone(), &config.apiserver);
    let bus = bus::Client::new(env.clone(), &config.bus_addr, config.bus_timeout);
    let mut tasks = tokio::task::JoinSet::new();

    // EventSource: one serial publisher per resource.
    let mut publishers = BTreeMap::new();
    for kind in config.kinds.iter().copied() {
        let (tx, rx) = mpsc::unbounded_channel::<Change>();
        publishers.insert(kind, tx);
        tasks.spawn(publish(env.clone(), bus.clone(), config.clone(), rx));
    }
    let (changes, mut incoming) = mpsc::unbounded_channel();
    tasks.spawn(source::run(env.clone(), client, config.scope(), changes));
    tasks.spawn(async move {
        while let Some(batch) = incoming.recv().await {
            for change in batch {
                if let Some(tx) = publishers.get(&change.key.kind) {
                    let _ = tx.send(change);
                }
            }
        }
    });

    // Sensor: one trigger per dependency, one session per boot.
    let session = format!("{:016x}", env.random_u64());
    let poster = Poster::new(
        env.clone(),
        &config.platform_addr,
        &config.runtime_token,
        config.trigger_timeout,
    );
    for kind in config.kinds.iter().copied() {
        tasks.spawn(trigger(
            env.clone(),
            bus.clone(),
            poster.clone(),
            config.clone(),
            kind,
            session.clone(),
        ));
    }
    while tasks.join_next().await.is_some() {}
}

/// Handled messages remembered per trigger.
const HANDLED_CACHE: usize = 1000;

/// The bus message: the EventSource's event data (`body` is the object, `type` the
/// informer event).
fn message(change: &Change) -> Bytes {
    Bytes::from(json!({"type": change.event_type.as_str(), "body": &*change.object}).to_string())
}

/// One resource's publisher: each event in turn, 5 attempts 1–2 s apart, then dropped.
async fn publish(
    env: SharedEnv,
    bus: bus::Client,
    config: Config,
    mut changes: mpsc::UnboundedReceiver<Change>,
) {
    while let Some(change) = changes.recv().await {
        let subject = change.key.kind.dependency();
        let body = message(&change);
        let published = bus
            .publish_with_retry(
                &env,
                subject,
                body,
                config.publish_attempts,
                config.publish_backoff,
            )
            .await;
        if !published {
            env.observe(
                ResourceReporterEvent::Lost {
                    kind: change.key.kind,
                    object: change.key.object(),
                    rv: change.rv,
                    status: 0,
                    why: LossReason::PublishFailed,
                }
                .into(),
            );
        }
    }
}

/// One Sensor trigger: fetch, POST with its retry strategy, ack — whatever the outcome.
async fn trigger(
    env: SharedEnv,
    bus: bus::Client,
    poster: Poster,
    config: Config,
    kind: Kind,
    session: String,
) {
    let subject = kind.dependency();
    // Messages this process already handled (the Sensor's cache of event IDs): one delivered
    // again after the ack wait is acked, not triggered twice. Lost with the process.
    let mut handled: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
    loop {
        let (seq, message) = match bus.fetch(subject, &session).await {
            Ok(Fetched::Message(seq, _)) if handled.contains(&seq) => {
                let _ = bus.ack(subject, &session, seq).await;
                continue;
            }
            Ok(Fetched::Message(seq, message)) => (seq, message),
            Ok(Fetched::Empty) => continue,
            Err(_) => {
                // The subscription broke (NATS without reconnect): the Sensor restarts it.
                let pause = env.random_between(
                    config.publish_backoff,
                    config.publish_backoff.saturating_mul(2),
                );
                env.sleep(pause).await;
                continue;
            }
        };
        let Ok(event) = serde_json::from_slice::<Value>(&message) else {
            // An unreadable message is acked and skipped, as the Sensor does.
            let _ = bus.ack(subject, &session, seq).await;
            continue;
        };
        let object = &event["body"];
        let key = ObjectKey {
            kind,
            namespace: text(object, "/metadata/namespace"),
            name: text(object, "/metadata/name"),
        };
        let rv = text(object, "/metadata/resourceVersion")
            .parse()
            .unwrap_or(0);
        let body = Poster::sensor_body(object);
        let mut last = Answer::NoAnswer;
        let mut attempts = 0;
        let mut accepted = false;
        for _ in 0..config.trigger_attempts.max(1) {
            attempts += 1;
            last = poster.post(body.clone(), None).await;
            if matches!(last, Answer::Status(code) if config.allowed_statuses.contains(&code)) {
                accepted = true;
                break;
            }
            // `duration: 0`: the next attempt follows at once.
        }
        let event = match last {
            Answer::Status(code) if accepted && (200..300).contains(&code) => {
                ResourceReporterEvent::Delivered {
                    kind,
                    object: key.object(),
                    rv,
                    attempts,
                }
            }
            Answer::Status(code) if accepted => ResourceReporterEvent::Lost {
                kind,
                object: key.object(),
                rv,
                status: code,
                why: LossReason::AcceptedAsFinal,
            },
            answer => ResourceReporterEvent::Lost {
                kind,
                object: key.object(),
                rv,
                status: answer.code(),
                why: LossReason::RetriesSpent,
            },
        };
        env.observe(event.into());
        // Acked after the trigger returned, success or not.
        handled.push_back(seq);
        if handled.len() > HANDLED_CACHE {
            handled.pop_front();
        }
        let _ = bus.ack(subject, &session, seq).await;
    }
}

fn text(object: &Value, pointer: &str) -> String {
    object
        .at(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}
