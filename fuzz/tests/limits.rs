//! Issue 53's limits on clients, at their defaults, in the fuzz world (every server booted
//! through its production entry point): each an abusive client, then a normal request that
//! succeeds. (`http.header-read-timeout` and `http.connections-per-peer` set to other values
//! are tested in `system/src/env/http.rs`; `tunnel.requests-per-runtime` in the simulator's
//! tunnel tests.)

use std::io::Write;
use std::time::Duration;

use orrery_fuzz::world::{self, World};
use orrery_fuzz::{request, targets};
use orrery_system::env::limits::Limits;
use orrery_system::env::BoxStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Everything `stream` says until it closes (at most 5 s of the servers' time).
async fn said(stream: &mut BoxStream) -> String {
    let mut seen = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut seen)).await;
    String::from_utf8_lossy(&seen).into_owned()
}

/// `GET path` from `peer` on a connection of its own: the answer's text.
async fn get(w: &World, addr: &str, peer: &str, path: &str, auth: &str) -> String {
    let mut stream = w.network().connect(addr, peer).unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {auth}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    said(&mut stream).await
}

/// Lets every server task run until none can go on (the clock is paused: no time passes).
async fn settle() {
    for _ in 0..500 {
        tokio::task::yield_now().await;
    }
}

#[test]
fn a_peer_past_its_connections_gets_429_while_its_neighbours_are_served() {
    let most = Limits::DEFAULT.connections_per_peer;
    for addr in [
        world::GATEWAY,
        world::EVENTS,
        world::RUNNER,
        world::APP_PROXY,
        world::ROUTER,
    ] {
        world::with(|w| {
            w.block_on(async {
                let held: Vec<BoxStream> = (0..most)
                    .map(|_| w.network().connect(addr, "abuser").unwrap())
                    .collect();
                settle().await;
                let refused = get(w, addr, "abuser", "/healthz", "x").await;
                assert!(refused.starts_with("HTTP/1.1 429"), "{addr}: {refused}");
                assert!(
                    refused.contains("at most 256 at once (http.connections-per-peer)"),
                    "{addr}: {refused}"
                );
                let neighbour = get(w, addr, "neighbour", "/healthz", "x").await;
                assert!(
                    !neighbour.starts_with("HTTP/1.1 429"),
                    "{addr}: {neighbour}"
                );
                assert!(neighbour.starts_with("HTTP/1.1 "), "{addr}: {neighbour}");
                drop(held);
                settle().await;
                let again = get(w, addr, "abuser", "/healthz", "x").await;
                assert!(
                    !again.starts_with("HTTP/1.1 429"),
                    "{addr} kept refusing a peer whose connections closed: {again}"
                );
            })
        });
    }
}

#[test]
fn a_peer_past_its_tunnel_connections_gets_429_while_a_runtime_registers() {
    let most = Limits::DEFAULT.tunnel_connections_per_peer;
    world::with(|w| {
        w.block_on(async {
            let held: Vec<BoxStream> = (0..most)
                .map(|_| w.network().connect(world::TUNNEL, "abuser").unwrap())
                .collect();
            settle().await;
            let mut one_more = w.network().connect(world::TUNNEL, "abuser").unwrap();
            let refused = said(&mut one_more).await;
            assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
            assert!(
                refused.contains("(tunnel.connections-per-peer)"),
                "{refused}"
            );
            drop(held);
        })
    });
    // The runtime (another peer) registers.
    let head = format!(
        "GET /tunnel\nauthorization: Bearer {}\nx-orrery-runtime: acme-prod\n\n",
        world::RUNTIME_TOKEN
    );
    assert_eq!(targets::tunnel_upgrade(head.as_bytes()), 101);
}

#[test]
fn a_token_past_its_requests_in_flight_gets_429_and_is_served_once_they_end() {
    let most = Limits::DEFAULT.requests_per_token;
    world::with(|w| {
        w.block_on(async {
            // `most` GraphQL requests whose bodies never finish: each holds its slot.
            let mut held = Vec::new();
            for _ in 0..most {
                let mut stream = w.network().connect(world::GATEWAY, "abuser").unwrap();
                let head = format!(
                    "POST /2.0/api/graphql HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"query\":",
                    world::USER_TOKEN
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                held.push(stream);
            }
            settle().await;
            let refused = get(w, world::GATEWAY, "elsewhere", "/api/audit", world::USER_TOKEN).await;
            assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
            assert!(
                refused.contains("256 requests in flight (gateway.requests-per-token)"),
                "{refused}"
            );
            // Another token is served meanwhile.
            let admin = get(w, world::GATEWAY, "elsewhere", "/api/runtimes", world::ADMIN_TOKEN).await;
            assert!(admin.starts_with("HTTP/1.1 200"), "{admin}");
            drop(held);
            settle().await;
        })
    });
    let normal = format!(
        "POST /2.0/api/graphql\nauthorization: Bearer {}\ncontent-type: application/json\n\n{{\"query\":\"{{ __typename }}\"}}",
        world::USER_TOKEN
    );
    let answer = world::with(|w| request::send(w, world::GATEWAY, normal.as_bytes()));
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// An events API post of `body`, gzip-encoded as sent.
fn post_gzip(body: &[u8]) -> request::Answer {
    let mut input = format!(
        "POST /2.0/api/events\nauthorization: {}\ncontent-type: application/json\ncontent-encoding: gzip\n\n",
        world::RUNTIME_TOKEN
    )
    .into_bytes();
    input.extend_from_slice(body);
    world::with(|w| request::send(w, world::EVENTS, &input))
}

#[test]
fn a_gzip_bomb_is_refused_by_its_ratio_and_the_events_api_keeps_serving() {
    // 8 MiB of spaces in ~8 KiB: far under the 50 MiB cap, 1,000 times its size.
    let bomb = gzip(&vec![b' '; 8 << 20]);
    assert!(bomb.len() < 64 * 1024);
    let refused = post_gzip(&bomb);
    assert_eq!(refused.status, 413, "{:?}", refused.body);
    let why = String::from_utf8_lossy(&refused.body);
    assert!(why.contains("(events.gzip-ratio)"), "{why}");
    // Small bodies compress well and are never refused for it: 900 KiB from a few KiB is
    // judged on its content (not an event: 400), not its ratio.
    let small = post_gzip(&gzip(&vec![b' '; 900 << 10]));
    assert_eq!(small.status, 400, "{:?}", small.body);
    // A normal request after both.
    let health = world::with(|w| {
        request::send(
            w,
            world::EVENTS,
            format!("GET /healthz\nauthorization: {}\n\n", world::RUNTIME_TOKEN).as_bytes(),
        )
    });
    assert_eq!(health.status, 200);
}

/// The Runner's API alone on an in-memory network, with the limit `limit` set (`name=value`)
/// and one build made: (the network, a client on it, the build's id). Runs `test` on a
/// paused current-thread runtime.
fn with_runner_api<F, Fut>(limit: &str, test: F)
where
    F: FnOnce(
        std::sync::Arc<orrery_fuzz::memory::Network>,
        orrery_system::runtime::upstream::Client,
        String,
    ) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use orrery_system::env::limits::with_limits;
    use orrery_system::platform::runner::{self, Builds, Settings};
    use orrery_system::runtime::upstream::Client;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let network = Arc::new(orrery_fuzz::memory::Network::default());
        let mut limits = Limits::DEFAULT;
        limits.set(limit).unwrap();
        let platform = with_limits(
            Arc::new(orrery_fuzz::memory::MemoryEnv::new(
                "platform",
                network.clone(),
            )),
            limits,
        );
        let builds = Builds::new(
            Settings::default(),
            BTreeMap::from([("agent-token".to_string(), "agent-1".to_string())]),
            "trigger",
        );
        let listener = platform.listen("platform:8086").await.unwrap();
        tokio::spawn(runner::serve(platform.clone(), builds.clone(), listener));
        let client_env: orrery_system::env::SharedEnv = Arc::new(
            orrery_fuzz::memory::MemoryEnv::new("client", network.clone()),
        );
        let client = Client::new(client_env, "platform:8086", Duration::from_secs(5));
        let made = client
            .send(
                http::Method::POST,
                "/api/builds".into(),
                Some("trigger"),
                Some(&RUNNER_BUILD),
            )
            .await
            .expect("a build");
        let id = made["id"].as_str().unwrap().to_string();
        test(network, client, id).await;
    });
}

/// The build [`with_runner_api`] makes.
static RUNNER_BUILD: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(
    || serde_json::json!({"pipeline": "p", "agent": "agent-1", "steps": []}),
);

/// `runner.log-bytes`: an engine that sends more than a build's log may hold is answered 413
/// naming the limit and nothing of that request is kept; the log keeps what it had, and the
/// API goes on serving (the log is read, another build is made).
#[test]
fn a_build_log_past_its_bytes_is_refused_and_the_runner_api_keeps_serving() {
    use orrery_system::runtime::upstream::CallError;
    use serde_json::json;

    with_runner_api("runner.log-bytes=64KiB", |_, client, id| async move {
        let agent = [("authorization", "agent-token")];
        let lines =
            |from: u64, n: usize| json!({"from": from, "lines": vec!["x".repeat(16 * 1024); n]});
        let logs = format!("/api/builds/{id}/logs");
        let sent = client
            .send_with(
                http::Method::POST,
                logs.clone(),
                None,
                &agent,
                Some(&lines(0, 3)),
            )
            .await
            .expect("48 KiB fit");
        assert_eq!(sent["next"], 3);
        match client
            .send_with(
                http::Method::POST,
                logs.clone(),
                None,
                &agent,
                Some(&lines(3, 2)),
            )
            .await
        {
            Err(CallError::Status { status, body, .. }) => {
                assert_eq!(status, 413, "{body}");
                assert!(body.contains("runner.log-bytes"), "{body}");
            }
            other => panic!("80 KiB of log answered {other:?}"),
        }
        let page = client
            .send(
                http::Method::GET,
                format!("{logs}?from=0"),
                Some("trigger"),
                None,
            )
            .await
            .expect("the log is still served");
        assert_eq!(page["next"], 3, "nothing of the refused request was kept");
        client
            .send(
                http::Method::POST,
                "/api/builds".into(),
                Some("trigger"),
                Some(&RUNNER_BUILD),
            )
            .await
            .expect("the API goes on");
    });
}

/// `http.connections-per-peer` counts a build log's WebSocket followers: a connection taken
/// over by the broadcaster still holds its peer's place, so one peer cannot open followers
/// without a bound. Past the limit it is answered 429 while a neighbour is served; once a
/// follower closes, the peer is served again.
#[test]
fn websocket_followers_count_against_their_peers_connections() {
    with_runner_api("http.connections-per-peer=2", |network, _, id| async move {
        let follow = || async {
            let mut stream = network.connect("platform:8086", "abuser").unwrap();
            let head = format!(
                "GET /api/builds/{id}/logs?from=0 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer trigger\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            let mut seen = [0u8; 12];
            stream.read_exact(&mut seen).await.unwrap();
            assert_eq!(&seen, b"HTTP/1.1 101", "a follower is taken over");
            stream
        };
        let first = follow().await;
        let _second = follow().await;
        settle().await;
        let ask = |peer: &'static str| {
            let network = network.clone();
            async move {
                let mut stream = network.connect("platform:8086", peer).unwrap();
                stream
                    .write_all(b"GET /api/builds/none HTTP/1.1\r\nhost: x\r\nauthorization: Bearer trigger\r\nconnection: close\r\n\r\n")
                    .await
                    .unwrap();
                said(&mut stream).await
            }
        };
        let refused = ask("abuser").await;
        assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
        assert!(refused.contains("http.connections-per-peer"), "{refused}");
        let neighbour = ask("neighbour").await;
        assert!(neighbour.starts_with("HTTP/1.1 404"), "{neighbour}");
        drop(first);
        settle().await;
        let again = ask("abuser").await;
        assert!(again.starts_with("HTTP/1.1 404"), "{again}");
    });
}
