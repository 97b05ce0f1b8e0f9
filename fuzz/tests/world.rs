//! The fuzz world serves for real: a seed reaches past routing and authentication, so the
//! fuzzer starts where a client would.

use orrery_fuzz::{request, world};

fn send(addr: &str, text: &str) -> request::Answer {
    world::with(|w| request::send(w, addr, text.as_bytes()))
}

#[test]
fn the_api_server_creates_and_reads_back() {
    let created = send(
        world::APISERVER,
        "POST /api/v1/namespaces/fuzz/configmaps\ncontent-type: application/json\n\n{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"seen\"},\"data\":{\"k\":\"v\"}}",
    );
    assert_eq!(created.status, 201, "{:?}", created.body);
    let read = send(
        world::APISERVER,
        "GET /api/v1/namespaces/fuzz/configmaps/seen",
    );
    assert_eq!(read.status, 200);
    assert!(String::from_utf8_lossy(&read.body).contains("\"k\":\"v\""));
}

#[test]
fn the_platform_s_servers_know_the_world_s_credentials() {
    let runtimes = send(
        world::GATEWAY,
        &format!(
            "GET /api/runtimes\nauthorization: Bearer {}",
            world::ADMIN_TOKEN
        ),
    );
    assert_eq!(runtimes.status, 200, "{:?}", runtimes.body);
    let refused = send(
        world::GATEWAY,
        "GET /api/runtimes\nauthorization: Bearer nope",
    );
    assert_eq!(refused.status, 401);
    let permissions = send(
        world::GATEWAY,
        &format!(
            "GET /api/permissions\nauthorization: Bearer {}",
            world::USER_TOKEN
        ),
    );
    assert_eq!(permissions.status, 200, "{:?}", permissions.body);
    let graphql = send(
        world::GATEWAY,
        &format!(
            "POST /2.0/api/graphql\ncontent-type: application/json\nauthorization: Bearer {}\n\n{{\"query\":\"{{ __typename }}\"}}",
            world::USER_TOKEN
        ),
    );
    assert_eq!(graphql.status, 200, "{:?}", graphql.body);
}

#[test]
fn the_runtime_s_router_reaches_the_app_proxy() {
    let health = send(world::ROUTER, "GET /healthz");
    assert_eq!(health.status, 200);
    let apps = send(
        world::ROUTER,
        &format!(
            "GET /app-proxy/api/applications\nauthorization: Bearer {}",
            world::USER_TOKEN
        ),
    );
    assert_ne!(apps.status, 502, "{:?}", apps.body);
}

#[test]
fn a_runtime_registers_on_the_tunnel_and_reports_events() {
    let head = format!(
        "GET /tunnel\nauthorization: Bearer {}\nx-orrery-runtime: acme-prod\nx-orrery-run-id: fuzz\n\n",
        world::RUNTIME_TOKEN
    );
    assert_eq!(orrery_fuzz::targets::tunnel_upgrade(head.as_bytes()), 101);
    let refused = "GET /tunnel\nauthorization: Bearer nope\nx-orrery-runtime: acme-prod\n\n";
    assert_eq!(
        orrery_fuzz::targets::tunnel_upgrade(refused.as_bytes()),
        401
    );
    let heartbeat = send(
        world::EVENTS,
        &format!("POST /2.0/api/heartbeat\nauthorization: {}\ncontent-type: application/json\n\n{{\"runtime\":\"acme-prod\",\"version\":\"0.1.72\"}}", world::RUNTIME_TOKEN),
    );
    assert!(
        heartbeat.status < 300,
        "{} {:?}",
        heartbeat.status,
        heartbeat.body
    );
}
