//! The GitOps API driven by graphql-js, the reference GraphQL implementation (the conformance
//! tier: `make conformance-graphql`, which installs it through `conformance/graphql/run.sh`):
//! the standard introspection query, the schema built from it equal to the committed one,
//! typed queries with variables, a field error as GraphQL over HTTP answers it, both media
//! types, and abuse refused within a second while the API keeps serving.

use std::time::Duration;

use crate::real_mode::{app_event, control_plane, http_as, report_event, POLICY};
use crate::support::{eventually, free_port};

#[test]
#[ignore = "the conformance tier: make conformance-graphql (needs Node.js and npm)"]
fn graphql_js_reads_the_schema_by_introspection_and_runs_typed_queries_and_errors() {
    let Ok(graphql_js) = std::env::var("ORRERY_GRAPHQL_JS") else {
        panic!("no ORRERY_GRAPHQL_JS: run this test with make conformance-graphql (conformance/graphql/run.sh installs graphql-js)");
    };
    let (tunnel, gateway, events) = (free_port(), free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("orrery-graphql-js-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let [tunnel_addr, gateway_addr, events_addr] =
        [tunnel, gateway, events].map(|p| format!("127.0.0.1:{p}"));
    let _platform = control_plane(
        &tunnel_addr,
        &gateway_addr,
        "acme-prod=tok-1",
        &[
            "--users",
            "",
            "--policy",
            policy.to_str().unwrap(),
            "--events",
            &events_addr,
        ],
    );
    eventually("the GitOps API answers", Duration::from_secs(20), || {
        http_as(gateway, "POST", "/2.0/api/graphql", "{}", "alice-token").is_some()
    });
    // One application, so the typed query has something to list.
    eventually("the event is accepted", Duration::from_secs(10), || {
        report_event(events, "tok-1", &app_event("web", "team-a", "Synced", 1)) == Some(200)
    });
    let sdl = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../system/src/platform/graphql/schema.graphql"
    );
    let output = std::process::Command::new("node")
        .arg(format!("{graphql_js}/client.mjs"))
        .arg(format!("http://{gateway_addr}"))
        .arg("alice-token")
        .arg(sdl)
        .arg("tok-1")
        .output()
        .expect("run node (conformance/graphql/run.sh checked it is there)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "graphql-js found the API wanting:\n{stdout}{stderr}"
    );
    assert!(stdout.contains("every check passed"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
