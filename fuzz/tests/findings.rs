//! The findings of fuzzing, each as the abusive request followed by a normal one that still
//! succeeds (the inputs themselves are kept in fuzz/regressions/).

use orrery_fuzz::{request, world};

fn send(addr: &str, text: &str) -> request::Answer {
    world::with(|w| request::send(w, addr, text.as_bytes()))
}

/// Every HTTP server of the world.
const HTTP_SERVERS: [&str; 6] = [
    world::GATEWAY,
    world::EVENTS,
    world::RUNNER,
    world::APP_PROXY,
    world::ROUTER,
    world::APISERVER,
];

fn user(line: &str) -> String {
    format!("{line}\nauthorization: Bearer {}\n\n", world::USER_TOKEN)
}

#[test]
fn a_webhook_path_cannot_send_the_router_to_a_service_of_its_choosing() {
    // The upstream's host was the path's text: `x@app-proxy-host` made it userinfo + host.
    let abuse = send(world::ROUTER, "POST /app-proxy/webhooks/x@kube/y\n\n{}");
    assert_eq!(abuse.status, 404, "{:?}", abuse.body);
    assert_eq!(send(world::ROUTER, "GET /healthz").status, 200);
}

#[test]
fn the_app_proxy_refuses_a_path_whose_names_are_not_kubernetes_names() {
    for path in [
        "/app-proxy/api/workflows/../x/terminate",
        "/app-proxy/api/workflows/argo/a%2F..%2Fb/terminate",
        "/app-proxy/api/applications/argocd/..%2F/sync",
    ] {
        let abuse = send(world::APP_PROXY, &user(&format!("POST {path}")));
        assert_eq!(abuse.status, 400, "{path}: {:?}", abuse.body);
    }
    let normal = send(
        world::APP_PROXY,
        &user("POST /app-proxy/api/workflows/argo/ci-1/terminate"),
    );
    assert_eq!(normal.status, 404, "{:?}", normal.body);
}

#[test]
fn a_cronus_lease_cannot_outlast_the_longest_the_platform_grants() {
    let lease = |ttl: u64| {
        send(
            world::RUNNER,
            &format!(
                "POST /api/cronus/lease\nauthorization: Bearer {}\ncontent-type: application/json\n\n{{\"holder\":\"cronus-0\",\"ttlMs\":{ttl}}}",
                world::ADMIN_TOKEN
            ),
        )
    };
    let abuse = lease(u64::MAX);
    assert_eq!(abuse.status, 400, "{:?}", abuse.body);
    assert!(String::from_utf8_lossy(&abuse.body).contains("600000"));
    assert_eq!(lease(15_000).status, 200);
}

#[test]
fn a_client_that_never_finishes_its_upgrade_is_closed_and_does_not_hold_a_slot() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    world::with(|w| {
        w.block_on(async {
            let mut slow = w.network().connect(world::TUNNEL, "slow").unwrap();
            slow.write_all(b"GET /tunnel HTTP/1.1\r\nhost: edge\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 64];
            let closed =
                tokio::time::timeout(std::time::Duration::from_secs(60), slow.read(&mut buf)).await;
            assert!(
                matches!(closed, Ok(Ok(0))),
                "the server kept a half-sent upgrade: {closed:?}"
            );
        })
    });
    let head = format!(
        "GET /tunnel\nauthorization: Bearer {}\nx-orrery-runtime: acme-prod\n\n",
        world::RUNTIME_TOKEN
    );
    assert_eq!(orrery_fuzz::targets::tunnel_upgrade(head.as_bytes()), 101);
}

/// `size` bytes of JSON string: `{"x":"aaaa…"}`.
fn big_json(size: usize) -> String {
    format!("{{\"x\":\"{}\"}}", "a".repeat(size))
}

#[test]
fn every_server_answers_a_body_over_its_limit_with_413_and_keeps_serving() {
    let admin = format!("authorization: Bearer {}", world::ADMIN_TOKEN);
    let user = format!("authorization: Bearer {}", world::USER_TOKEN);
    let runtime = format!("authorization: {}", world::RUNTIME_TOKEN);
    let cases = [
        (world::RUNNER, format!("POST /api/cronus/lease\n{admin}"), 1 << 20, "POST /api/cronus/lease\n".to_string() + &admin + "\n\n{\"holder\":\"c\",\"ttlMs\":1000}", 200),
        (world::APP_PROXY, format!("POST /app-proxy/api/applications/commit\n{user}"), 1 << 20, format!("GET /app-proxy/healthz\n{user}\n\n"), 200),
        (world::GATEWAY, format!("POST /api/runtimes\n{admin}"), 64 * 1024, format!("GET /api/runtimes\n{admin}\n\n"), 200),
        (world::GATEWAY, format!("POST /2.0/api/graphql\n{user}"), 64 * 1024, format!("POST /2.0/api/graphql\n{user}\ncontent-type: application/json\n\n{{\"query\":\"{{ __typename }}\"}}"), 200),
        (world::EVENTS, format!("POST /2.0/api/events\n{runtime}"), 5 << 20, format!("GET /healthz\n{runtime}\n\n"), 200),
        (world::APISERVER, "POST /api/v1/namespaces/fuzz/configmaps".to_string(), 3 << 20, "GET /api/v1/namespaces/fuzz/configmaps\n\n".to_string(), 200),
    ];
    for (addr, head, limit, normal, ok) in cases {
        let abuse = send(
            addr,
            &format!(
                "{head}\ncontent-type: application/json\n\n{}",
                big_json(limit)
            ),
        );
        assert_eq!(
            abuse.status,
            413,
            "{addr} {head}: {:?}",
            String::from_utf8_lossy(&abuse.body[..abuse.body.len().min(300)])
        );
        let answer = send(addr, &normal);
        assert_eq!(
            answer.status, ok,
            "{addr} after the abuse: {normal}: {:?}",
            answer.body
        );
    }
}

#[test]
fn a_client_that_never_finishes_its_headers_is_closed_and_the_server_keeps_serving() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for addr in HTTP_SERVERS {
        world::with(|w| {
            w.block_on(async {
                let mut slow = w.network().connect(addr, "slow").unwrap();
                slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
                    .await
                    .unwrap();
                let mut buf = [0u8; 512];
                let closed = tokio::time::timeout(std::time::Duration::from_secs(120), async {
                    loop {
                        match slow.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                    }
                })
                .await;
                assert!(
                    closed.is_ok(),
                    "{addr} kept a connection whose headers never ended"
                );
            })
        });
        assert!(
            send(addr, "GET /healthz").status < 500,
            "{addr} after a slow client"
        );
    }
}

#[test]
fn a_header_block_of_2_mb_is_431_and_the_server_keeps_serving() {
    for addr in HTTP_SERVERS {
        let abuse = send(
            addr,
            &format!("GET /healthz\nx-big: {}\n\n", "a".repeat(2_000_000)),
        );
        assert_eq!(abuse.status, 431, "{addr}");
        assert!(
            send(addr, "GET /healthz").status < 500,
            "{addr} after a huge header"
        );
    }
}

#[test]
fn an_apply_body_that_is_not_an_object_is_400_and_the_api_server_keeps_serving() {
    // Found by fuzzing: a YAML string reached the apply code, which panicked indexing it,
    // and the panic poisoned the store's lock, so every later request panicked too.
    for body in ["sion\":\"argo{\"apiVersion\":\"v1\"}", "[1, 2]", "42", ""] {
        let abuse = send(
            world::APISERVER,
            &format!("PATCH /api/v1/namespaces/fuzz/configmaps/applied?fieldManager=alice\ncontent-type: application/apply-patch+yaml\n\n{body}"),
        );
        assert_eq!(abuse.status, 400, "{body:?}: {:?}", abuse.body);
    }
    let normal = send(
        world::APISERVER,
        "PATCH /api/v1/namespaces/fuzz/configmaps/applied?fieldManager=alice\ncontent-type: application/apply-patch+yaml\n\n{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"applied\"}}",
    );
    assert_eq!(normal.status, 201, "{:?}", normal.body);
}

#[test]
fn an_upgrade_request_tungstenite_would_refuse_is_answered_400_naming_why() {
    // Found by fuzzing: the tunnel server closed such a connection without a word.
    for (head, why) in [
        ("POST /tunnel\n\n", "GET"),
        ("GET /tunnel\nupgrade: h2c\n\n", "pgrade"),
        ("GET /tunnel\nsec-websocket-version: 8\n\n", "ersion"),
    ] {
        assert_eq!(
            orrery_fuzz::targets::tunnel_upgrade(head.as_bytes()),
            400,
            "{head:?} ({why})"
        );
    }
    let head = format!(
        "GET /tunnel\nauthorization: Bearer {}\nx-orrery-runtime: acme-prod\n\n",
        world::RUNTIME_TOKEN
    );
    assert_eq!(orrery_fuzz::targets::tunnel_upgrade(head.as_bytes()), 101);
}
