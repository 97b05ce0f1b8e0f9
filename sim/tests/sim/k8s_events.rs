//! core/v1 Events on the simulated API server as kube-apiserver keeps them: an Event with
//! `eventTime` (client-go's new recorder's shape) is validated as `legacyValidateEvent` does
//! for a core/v1 request, and every Event expires an hour after its last change
//! (`--event-ttl`), its watchers seeing it DELETED. (The answers are compared with
//! kube-apiserver's by the fidelity script `events-with-event-time`; the hour is not.)

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use orrery_sim::trace::Trace;
use orrery_sim::world::apiserver::{ApiServer, Knobs};
use serde_json::{json, Value};

use crate::support::{apiserver_host, crash_when_ready, kube, sim_ticking, with_apiserver};

/// A sim with a 100 ms tick: these tests wait simulated hours.
fn slow_sim(duration: Duration) -> turmoil::Sim<'static> {
    sim_ticking(duration, Duration::from_millis(100))
}

/// Runs `test` on a client host against a fresh API server (implicit namespaces).
fn with_server<F, Fut>(test: F)
where
    F: FnOnce(kube::Client, orrery_system::env::SharedEnv) -> Fut + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let sim = slow_sim(Duration::from_secs(4 * 3600));
    with_apiserver(
        sim,
        ApiServer::new(Knobs::default()),
        Duration::from_secs(600),
        test,
    );
}

fn event(name: &str, extra: Value) -> Event {
    let mut body = json!({
        "metadata": {"name": name},
        "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "team"},
    });
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    serde_json::from_value(body).unwrap()
}

fn causes(error: kube::Error) -> Vec<(String, String)> {
    let kube::Error::Api(status) = error else {
        panic!("not an API error: {error}");
    };
    assert_eq!(status.code, 422, "{}", status.message);
    status
        .details
        .map(|d| d.causes)
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.field, c.message))
        .collect()
}

#[test]
fn an_event_with_event_time_needs_its_reporting_fields_within_their_limits() {
    with_server(|client, _env| async move {
        let events: Api<Event> = Api::namespaced(client, "team");
        let time = json!({"eventTime": "2026-01-01T00:00:00.000000Z"});
        let empty = events
            .create(&PostParams::default(), &event("a.1", time.clone()))
            .await
            .unwrap_err();
        let required = |field: &str| (field.to_string(), "Required value".to_string());
        let found = causes(empty);
        assert_eq!(found[0], required("reportingComponent"));
        assert!(found[1]
            .1
            .starts_with("Invalid value: \"\": name part must be non-empty"));
        assert_eq!(
            found[found.len() - 3..],
            [
                required("reportingInstance"),
                required("action"),
                required("reason")
            ]
        );

        let mut long = json!({
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingComponent": "example.com/tester",
            "reportingInstance": "tester-1",
            "action": "Testing",
            "reason": "x".repeat(129),
            "message": "m".repeat(1025),
        });
        let too_long = events
            .create(&PostParams::default(), &event("a.2", long.clone()))
            .await
            .unwrap_err();
        assert_eq!(
            causes(too_long),
            [
                (
                    "reason".into(),
                    "Invalid value: \"\": can have at most 128 characters".into()
                ),
                (
                    "message".into(),
                    "Invalid value: \"\": can have at most 1024 characters".into()
                ),
            ]
        );

        long["reason"] = json!("Tested");
        long["message"] = json!("hello");
        let made = events
            .create(&PostParams::default(), &event("a.3", long.clone()))
            .await
            .unwrap();
        assert_eq!(
            made.reporting_component.as_deref(),
            Some("example.com/tester")
        );

        // With eventTime, an involved object without a namespace belongs in default or
        // kube-system only.
        let mut cluster_scoped = event("a.4", long);
        cluster_scoped.involved_object.namespace = None;
        let mismatch = events
            .create(&PostParams::default(), &cluster_scoped)
            .await
            .unwrap_err();
        assert_eq!(
            causes(mismatch),
            [(
                "involvedObject.namespace".into(),
                "Invalid value: \"\": does not match event.namespace".into()
            )]
        );
    });
}

#[test]
fn an_event_expires_an_hour_after_its_last_change_and_its_watchers_see_it_go() {
    with_server(|client, env| async move {
        let events: Api<Event> = Api::namespaced(client, "team");
        let old_shape = json!({"reason": "Tested", "message": "hello", "type": "Normal"});
        for name in ["a.1", "b.1"] {
            events
                .create(&PostParams::default(), &event(name, old_shape.clone()))
                .await
                .unwrap();
        }
        // etcd drops an expired key whatever its finalizers.
        let mut held = event("c.1", old_shape.clone());
        held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        events.create(&PostParams::default(), &held).await.unwrap();
        env.sleep(Duration::from_secs(30 * 60)).await;
        // A change sets b.1's hour again; a no-op write would not.
        events
            .patch(
                "b.1",
                &PatchParams::default(),
                &Patch::Merge(json!({"count": 2})),
            )
            .await
            .unwrap();
        env.sleep(Duration::from_secs(29 * 60)).await;
        assert!(events.get("a.1").await.is_ok(), "59 minutes: still there");

        let listed = events.list(&Default::default()).await.unwrap();
        let from = listed.metadata.resource_version.unwrap();
        let mut stream = events
            .watch(&WatchParams::default().timeout(240), &from)
            .await
            .unwrap()
            .boxed();
        let seen = stream.next().await.expect("an event").unwrap();
        let WatchEvent::Deleted(gone) = seen else {
            panic!("not DELETED: {seen:?}");
        };
        assert_eq!(gone.metadata.name.as_deref(), Some("a.1"));
        assert!(env.elapsed() >= Duration::from_secs(3600));
        assert!(env.elapsed() < Duration::from_secs(3600 + 5));
        let missing = events.get("a.1").await.unwrap_err().to_string();
        assert!(missing.contains("not found"), "{missing}");
        assert!(events.get("b.1").await.is_ok(), "b.1 changed at 30 minutes");
        assert!(
            events.get("c.1").await.is_err(),
            "its finalizer does not keep c.1"
        );

        env.sleep(Duration::from_secs(31 * 60)).await;
        assert!(events.get("b.1").await.is_err(), "b.1's hour is up too");
    });
}

#[test]
fn an_event_still_expires_after_the_api_servers_host_crashed() {
    let mut sim = slow_sim(Duration::from_secs(3 * 3600));
    let trace = Trace::default();
    apiserver_host(&mut sim, ApiServer::new(Knobs::default()), &trace);
    let (made_tx, made_rx) = std::sync::mpsc::channel();
    sim.client("test", async move {
        let (env, client) = kube("test", &trace, Duration::from_secs(600));
        let events: Api<Event> = Api::namespaced(client, "team");
        events
            .create(
                &PostParams::default(),
                &event("a.1", json!({"reason": "Tested"})),
            )
            .await
            .unwrap();
        made_tx.send(()).unwrap();
        // The harness crashes the API server's host here and starts it again.
        env.sleep(Duration::from_secs(61 * 60)).await;
        let missing = events.get("a.1").await.unwrap_err().to_string();
        assert!(missing.contains("not found"), "{missing}");
        Ok(())
    });
    crash_when_ready(sim, made_rx, "apiserver");
}
