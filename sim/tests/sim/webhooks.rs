//! Git webhooks through the request routing service (ingress mode) over turmoil: a push
//! to `/webhooks/<ns>/<name>` reaches the Service `<name>-eventsource-svc.<ns>.svc.cluster.local`
//! with its URI unchanged, any event source without configuration, and a name nothing
//! answers to is a 502, as the chart's nginx.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use orrery_sim::env::SimEnv;
use orrery_system::env::http::{json, serve};
use orrery_system::env::SharedEnv;
use orrery_system::runtime::router::{self, Routes};
use serde_json::json;

use crate::support::*;

#[test]
fn webhooks_reach_the_event_source_named_in_the_path() {
    let mut w = sim(Duration::from_secs(60));
    let trace = orrery_sim::trace::Trace::default();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (host_trace, host_seen) = (trace.clone(), seen.clone());
    w.host("push-eventsource-svc.ci.svc.cluster.local", move || {
        let env = SimEnv::shared("eventsource", SEED, host_trace.clone());
        let seen = host_seen.clone();
        async move {
            let listener = env.listen("0.0.0.0:80").await?;
            serve(listener, move |request, _peer| {
                let seen = seen.clone();
                async move {
                    let uri = request.uri().to_string();
                    seen.lock().unwrap().push(uri);
                    json(http::StatusCode::OK, &json!({"accepted": true}))
                }
            })
            .await?;
            Ok(())
        }
    });
    let host_trace = trace.clone();
    w.host("router", move || {
        let env = SimEnv::shared("router", SEED, host_trace.clone());
        async move {
            router::run(
                env,
                Routes::new("app-proxy:3017", "workflows:2746"),
                "0.0.0.0:8080",
            )
            .await?;
            Ok(())
        }
    });
    w.client("github", async move {
        let env: SharedEnv = SimEnv::shared("github", SEED, trace.clone());
        let client =
            orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(20));
        let post = |path: &str| {
            http::Request::post(format!("http://router:8080{path}"))
                .header("x-github-event", "push")
                .body(Full::new(Bytes::from_static(
                    b"{\"ref\":\"refs/heads/main\"}",
                )))
                .unwrap()
        };
        let response = client.request(post("/webhooks/ci/push?secret=1")).await?;
        assert_eq!(response.status(), 200);
        let missing = client.request(post("/webhooks/ci/nothing-here")).await?;
        assert_eq!(missing.status(), 502, "a name that does not resolve");
        let body = missing.into_body().collect().await?.to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("nothing-here-eventsource-svc.ci"));
        assert_eq!(*seen.lock().unwrap(), ["/webhooks/ci/push?secret=1"]);
        Ok(())
    });
    w.run().unwrap();
}
