//! The same API server code on real OS sockets, driven by real kube-rs through `RealEnv`:
//! the environment seam works in both worlds without a `cfg` fork.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use orrery_sim::world::apiserver::{self, ApiServer, Knobs};
use orrery_system::env::kube::{client, KubeTarget, SeededBackoff};
use orrery_system::env::{RealEnv, SharedEnv};

use crate::support::{configmap, eventually, free_port};

#[tokio::test(flavor = "current_thread")]
async fn the_api_server_serves_real_kube_rs_over_loopback_tcp() {
    let env: SharedEnv = Arc::new(RealEnv::new("test"));
    let listener = env.listen("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(apiserver::serve(
        env.clone(),
        ApiServer::new(Knobs::default()),
        listener,
    ));

    let kube = client(env.clone(), &KubeTarget::new(addr));
    let api: Api<ConfigMap> = Api::namespaced(kube, "default");
    let mut events = watcher(api.clone(), watcher::Config::default())
        .backoff(SeededBackoff::new(env.clone()))
        .applied_objects()
        .boxed();
    api.create(&PostParams::default(), &configmap("real", &[]))
        .await
        .expect("create over real TCP");
    let seen = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("watch event within 10 s");
    assert_eq!(
        seen.unwrap().unwrap().metadata.name.as_deref(),
        Some("real")
    );
}

/// A child process killed when dropped (tests must not leak servers).
pub(crate) struct Process(pub(crate) std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `orrery apiserver` on `addr` with the namespaces the tests' components write in (a real
/// cluster requires them).
pub(crate) fn apiserver(addr: &str) -> Process {
    orrery(&[
        "apiserver",
        "--listen",
        addr,
        "--namespace",
        "argocd",
        "--namespace",
        "codefresh",
    ])
}

pub(crate) fn orrery(args: &[&str]) -> Process {
    Process(
        std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start orrery"),
    )
}

/// `orrery serve control-plane` with the admin token `adm`, its tunnel and client API on
/// the given addresses, these preregistered runtimes, the [`USERS`] unless `extra` names
/// others, and any further flags.
pub(crate) fn control_plane(
    tunnel_addr: &str,
    gateway_addr: &str,
    runtimes: &str,
    extra: &[&str],
) -> Process {
    let mut args = vec![
        "serve",
        "control-plane",
        "--admin-token",
        "adm",
        "--tunnel",
        tunnel_addr,
        "--api",
        gateway_addr,
        "--runtimes",
        runtimes,
    ];
    if !extra.contains(&"--users") {
        args.extend_from_slice(&["--users", USERS]);
    }
    args.extend_from_slice(extra);
    orrery(&args)
}

/// The control plane's users (`--users`): a viewer of account acme, whose token the tests'
/// requests through the gateway carry, and an operator allowed to terminate workflows.
const USERS: &str = "viewer-token=viewer@acme,ops-token=ops@acme:workflows:terminate";

/// The viewer's token.
const VIEWER: &str = "viewer-token";

/// A plain HTTP/1.1 exchange over loopback: (status, body), or `None` when the connection fails.
fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    http_as(port, method, path, body, "")
}

/// As [`http`], with `Authorization: Bearer <token>` when `token` is not empty.
pub(crate) fn http_as(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    token: &str,
) -> Option<(u16, String)> {
    let auth = if token.is_empty() {
        String::new()
    } else {
        format!("authorization: Bearer {token}\r\n")
    };
    exchange(port, method, path, body, &auth)
}

/// One HTTP/1.1 exchange with extra header lines (each ending in `\r\n`).
pub(crate) fn exchange(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    headers: &str,
) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .ok()?;
    let request = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\n{headers}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Creates ConfigMap `name` on the API server, then waits until the client API lists it
/// through runtime acme-prod (gateway → tunnel → router, `/workflows/` prefix stripped →
/// API server); returns that path.
fn configmap_crosses_the_tunnel(api: u16, gateway: u16, name: &str) -> &'static str {
    let created = http(
        api,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &format!(r#"{{"metadata":{{"name":"{name}"}}}}"#),
    );
    assert_eq!(created.map(|c| c.0), Some(201));
    let through = "/api/runtimes/acme-prod/workflows/api/v1/namespaces/default/configmaps";
    eventually(
        "a request crosses the tunnel",
        Duration::from_secs(30),
        || {
            http_as(gateway, "GET", through, "", VIEWER)
                .is_some_and(|(code, body)| code == 200 && body.contains(name))
        },
    );
    through
}

/// Creates Workflow `name`, terminates it through runtime acme-prod's app-proxy as the user
/// `ops-token` (gateway → tunnel → router → app-proxy → API server) and checks the patch.
fn workflow_terminated_through_the_app_proxy(api: u16, gateway: u16, name: &str) {
    let workflow = format!(
        r#"{{"apiVersion":"argoproj.io/v1alpha1","kind":"Workflow","metadata":{{"name":"{name}"}},"spec":{{"entrypoint":"main"}}}}"#
    );
    let workflows = "/apis/argoproj.io/v1alpha1/namespaces/default/workflows";
    assert_eq!(
        http(api, "POST", workflows, &workflow).map(|c| c.0),
        Some(201)
    );
    let terminate =
        format!("/api/runtimes/acme-prod/app-proxy/api/workflows/default/{name}/terminate");
    assert_eq!(
        http_as(gateway, "POST", &terminate, "", "stolen").map(|r| r.0),
        Some(401),
        "unknown user token"
    );
    let (code, body) = http_as(gateway, "POST", &terminate, "", "ops-token").expect("an answer");
    assert_eq!(code, 200, "{body}");
    let (_, stored) = http(api, "GET", &format!("{workflows}/{name}"), "").expect("the workflow");
    assert!(
        stored.contains(r#""shutdown":"Terminate""#),
        "the app-proxy patched the workflow: {stored}"
    );
}

#[test]
fn a_client_reaches_the_api_server_through_platform_tunnel_and_router_on_loopback_across_a_tunnel_server_restart(
) {
    let (api, tunnel, gateway, proxy) = (free_port(), free_port(), free_port(), free_port());
    let (api_addr, tunnel_addr, gateway_addr, proxy_addr) = (
        format!("127.0.0.1:{api}"),
        format!("127.0.0.1:{tunnel}"),
        format!("127.0.0.1:{gateway}"),
        format!("127.0.0.1:{proxy}"),
    );
    let _apiserver = apiserver(&api_addr);
    let control_plane = |variant: &str| {
        control_plane(
            &tunnel_addr,
            &gateway_addr,
            "acme-prod=tok-1,acme-other=tok-0",
            &["--variant", variant],
        )
    };
    let mut platform = control_plane("hardened");
    let _runtime = orrery(&[
        "serve",
        "runtime",
        "--platform",
        &tunnel_addr,
        "--name",
        "acme-prod",
        "--token",
        "tok-1",
        "--workflows",
        &api_addr,
        "--app-proxy",
        &proxy_addr,
        "--git",
        "127.0.0.1:9",
        "--platform-api",
        &gateway_addr,
        "--apiserver",
        &api_addr,
    ]);
    eventually("the API server answers", Duration::from_secs(20), || {
        http(api, "GET", "/healthz", "").is_some()
    });
    let through = configmap_crosses_the_tunnel(api, gateway, "through-the-tunnel");
    assert_eq!(
        http_as(
            gateway,
            "GET",
            "/api/runtimes/acme-other/healthz",
            "",
            VIEWER
        )
        .map(|r| r.0),
        Some(503),
        "no tunnel → 503"
    );

    // client → platform → tunnel → router → app-proxy → API server: terminate a Workflow.
    workflow_terminated_through_the_app_proxy(api, gateway, "build-42");

    // Kill the tunnel server mid-traffic, then restart it: the runtime reconnects by itself.
    drop(platform);
    assert!(
        http_as(gateway, "GET", through, "", VIEWER).is_none_or(|(code, _)| code >= 500),
        "no success while the platform is down"
    );
    platform = control_plane("hardened");
    eventually(
        "the runtime reconnects after the tunnel server restarts",
        Duration::from_secs(40),
        || http_as(gateway, "GET", through, "", VIEWER).is_some_and(|(code, _)| code == 200),
    );
    drop(platform);
}

/// A test CA and a server certificate for `localhost`/`127.0.0.1`, written as PEM files.
fn test_certificates(dir: &std::path::Path) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    (
        write("ca.pem", ca.pem()),
        write("server.pem", server.pem()),
        write("server-key.pem", server_key.serialize_pem()),
    )
}

#[test]
fn the_tunnel_runs_over_tls_with_test_certificates_and_an_untrusting_runtime_cannot_connect() {
    let dir = std::env::temp_dir().join(format!("orrery-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, cert, key) = test_certificates(&dir);
    let (tunnel, gateway) = (free_port(), free_port());
    let (tunnel_addr, gateway_addr) = (
        format!("127.0.0.1:{tunnel}"),
        format!("127.0.0.1:{gateway}"),
    );
    let _platform = control_plane(
        &tunnel_addr,
        &gateway_addr,
        "acme-prod=tok-1,acme-dev=tok-2",
        &["--tls-cert", &cert, "--tls-key", &key],
    );
    let _trusting = orrery(&[
        "serve",
        "runtime",
        "--platform",
        &tunnel_addr,
        "--name",
        "acme-prod",
        "--token",
        "tok-1",
        "--tls-ca",
        &ca,
    ]);
    let _plain = orrery(&[
        "serve",
        "runtime",
        "--platform",
        &tunnel_addr,
        "--name",
        "acme-dev",
        "--token",
        "tok-2",
    ]);
    eventually(
        "a request crosses the TLS tunnel",
        Duration::from_secs(20),
        || {
            http_as(
                gateway,
                "GET",
                "/api/runtimes/acme-prod/healthz",
                "",
                VIEWER,
            )
            .is_some_and(|(code, body)| code == 200 && body == "ok")
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        http_as(gateway, "GET", "/api/runtimes/acme-dev/healthz", "", VIEWER).map(|r| r.0),
        Some(503),
        "plain WebSocket against a TLS server gets no tunnel"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Tenant isolation at the gateway (issue 16): only a user of the runtime's account is
/// forwarded; paths are normalised before they are routed; a re-registration closes the
/// runtime's tunnel; every denial is in the audit log, which each account reads only its
/// own part of.
#[test]
fn the_gateway_forwards_only_for_users_of_the_runtimes_account_and_audits_every_denial() {
    let (tunnel, gateway) = (free_port(), free_port());
    let (tunnel_addr, gateway_addr) = (
        format!("127.0.0.1:{tunnel}"),
        format!("127.0.0.1:{gateway}"),
    );
    let _platform = control_plane(
        &tunnel_addr,
        &gateway_addr,
        "acme-prod=tok-1,globex-prod=tok-2",
        &[
            "--users",
            "viewer-token=viewer@acme:audit:read,mallory-token=mallory@globex:audit:read,loner-token=loner,ops-token=ops@acme",
            "--monitor",
        ],
    );
    let _runtime = orrery(&[
        "serve",
        "runtime",
        "--platform",
        &tunnel_addr,
        "--name",
        "acme-prod",
        "--token",
        "tok-1",
    ]);
    let healthz = "/api/runtimes/acme-prod/healthz";
    eventually(
        "the viewer reaches acme-prod",
        Duration::from_secs(20),
        || {
            http_as(gateway, "GET", healthz, "", VIEWER)
                .is_some_and(|(code, body)| code == 200 && body == "ok")
        },
    );
    // The runtime monitor (hardened: probes every 5 s) shows what it can reach.
    let shown = |runtime: &str| -> String {
        let (_, body) = http_as(gateway, "GET", "/api/runtimes", "", "adm").unwrap_or_default();
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        answer["health"][runtime]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    eventually(
        "acme-prod is shown healthy",
        Duration::from_secs(15),
        || shown("acme-prod") == "Healthy",
    );
    assert_eq!(
        shown("globex-prod"),
        "Unable to communicate",
        "never connected"
    );
    let refused = |path: &str, token: &str, status: u16, words: &str| {
        let (code, body) = http_as(gateway, "GET", path, "", token).expect("an answer");
        assert_eq!(code, status, "{path} as {token:?}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON error");
        let error = error["error"].as_str().unwrap_or_default();
        assert!(error.contains(words), "{path} as {token:?}: {error}");
    };
    refused(healthz, "", 401, "needs a user's token");
    refused(healthz, "forged", 401, "unknown user token");
    refused(healthz, "adm", 401, "the admin token registers runtimes");
    refused(healthz, "loner-token", 403, "belongs to no account");
    // Another tenant's runtime is answered as a missing one, whichever way it is named.
    refused(
        healthz,
        "mallory-token",
        404,
        "no runtime acme-prod in account globex",
    );
    refused(
        "/api/runtimes/globex-prod/../acme-prod/healthz",
        "mallory-token",
        404,
        "no runtime acme-prod in account globex",
    );
    refused(
        "/api/runtimes/globex-prod/%2e%2e/acme-prod/healthz",
        "mallory-token",
        404,
        "no runtime acme-prod in account globex",
    );
    refused(
        "/api/runtimes/acme-prod/../globex-prod/healthz",
        VIEWER,
        404,
        "no runtime globex-prod in account acme",
    );
    refused(
        "/api/runtimes/globex-prod%2F..%2Facme-prod/healthz",
        "mallory-token",
        400,
        "encodes a path separator",
    );
    refused("/api/../../etc/passwd", VIEWER, 400, "above the root");
    // A name that would collide with another runtime's tunnel name is refused.
    let register = |account: &str, runtime: &str| {
        http_as(
            gateway,
            "POST",
            "/api/runtimes",
            &format!(r#"{{"account": "{account}", "runtime": "{runtime}"}}"#),
            "adm",
        )
        .unwrap()
    };
    assert_eq!(register("acme", "x-y").0, 201);
    let (code, body) = register("acme-x", "y");
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("acme-x-y is taken"), "{body}");
    // Registering acme-prod again rotates its token and closes its tunnel at once: the
    // runtime's reconnection with the old token is refused.
    let (code, body) = register("acme", "prod");
    assert_eq!(code, 201, "{body}");
    assert!(body.contains(r#""rotated":true"#), "{body}");
    eventually(
        "the rotated runtime's tunnel is closed",
        Duration::from_secs(10),
        || http_as(gateway, "GET", healthz, "", VIEWER).is_some_and(|(code, _)| code == 503),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        http_as(gateway, "GET", healthz, "", VIEWER).map(|r| r.0),
        Some(503),
        "the old token opens no new tunnel"
    );
    eventually(
        "acme-prod is shown unreachable",
        Duration::from_secs(10),
        || shown("acme-prod") == "Unable to communicate",
    );
    // The audit log: every denial above, with who, what and why; the rotation.
    let audit = |token: &str| -> Vec<serde_json::Value> {
        let (code, body) =
            http_as(gateway, "GET", "/api/audit?limit=1000", "", token).expect("an answer");
        assert_eq!(code, 200, "{body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        answer["entries"].as_array().cloned().unwrap_or_default()
    };
    let all = audit("adm");
    let denied: Vec<&serde_json::Value> = all.iter().filter(|e| e["outcome"] == "denied").collect();
    assert_eq!(denied.len(), 11, "every denial is audited: {all:#?}");
    assert!(denied
        .iter()
        .all(|e| e["reason"].as_str().is_some_and(|r| !r.is_empty())
            && e["status"].as_u64().is_some_and(|s| s >= 400)
            && e["at"].as_str().is_some_and(|t| t.ends_with('Z'))));
    assert!(
        denied.iter().any(|e| e["actor"]["name"] == "mallory"
            && e["action"] == "GET /api/runtimes/acme-prod/healthz"
            && e["status"] == 404),
        "the normalised path is what is audited: {denied:#?}"
    );
    assert!(
        all.iter().any(|e| e["outcome"] == "allowed"
            && e["action"] == "POST /api/runtimes"
            && e["runtime"] == "acme-prod"
            && e["reason"] == "token rotated; its open tunnel closed"),
        "{all:#?}"
    );
    let seqs: Vec<u64> = all.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(
        seqs,
        (1..=all.len() as u64).collect::<Vec<_>>(),
        "append-only, numbered"
    );
    // A user reads only their account's entries.
    let acme = audit(VIEWER);
    assert!(
        !acme.is_empty() && acme.iter().all(|e| e["account"] == "acme"),
        "{acme:#?}"
    );
    let globex = audit("mallory-token");
    assert!(
        !globex.is_empty() && globex.iter().all(|e| e["account"] == "globex"),
        "{globex:#?}"
    );
    // Reading an account's log needs its admin or an audit:read rule.
    refused(
        "/api/audit",
        "ops-token",
        403,
        "may not read the audit log of account acme",
    );
    // Paging.
    let (_, page) = http_as(gateway, "GET", "/api/audit?after=2&limit=3", "", "adm").unwrap();
    let page: serde_json::Value = serde_json::from_str(&page).unwrap();
    let page: Vec<u64> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(page, [3, 4, 5]);
    let (code, body) = http_as(gateway, "GET", "/api/audit?limit=many", "", "adm").unwrap();
    assert_eq!(code, 400, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        error["error"]
            .as_str()
            .unwrap_or_default()
            .contains("limit=\"many\""),
        "{body}"
    );
    refused(
        "/api/audit",
        "",
        401,
        "needs the admin token or a user's token",
    );
}

#[test]
fn serve_runtime_runs_the_reporter_and_a_sigterm_releases_its_lease() {
    let (api, tunnel, gateway, cache, metrics) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let (api_addr, tunnel_addr, gateway_addr) = (
        format!("127.0.0.1:{api}"),
        format!("127.0.0.1:{tunnel}"),
        format!("127.0.0.1:{gateway}"),
    );
    let _apiserver = apiserver(&api_addr);
    let _platform = control_plane(&tunnel_addr, &gateway_addr, "acme-edge=tok-9", &[]);
    eventually("the API server answers", Duration::from_secs(20), || {
        http(api, "GET", "/healthz", "").is_some()
    });
    // Argo CD and the events API are unreachable here: the reporter still runs, holds its
    // lease and serves its metrics; deliveries fail and are retried.
    let mut runtime = orrery(&[
        "serve",
        "runtime",
        "--platform",
        &tunnel_addr,
        "--name",
        "acme-edge",
        "--token",
        "tok-9",
        "--apiserver",
        &api_addr,
        "--argocd",
        "127.0.0.1:9",
        "--events-api",
        "127.0.0.1:9",
        "--serve-cache",
        "--cache",
        &format!("127.0.0.1:{cache}"),
        "--reporter-listen",
        &format!("127.0.0.1:{metrics}"),
        "--namespace",
        "argocd",
    ]);
    let lease = "/apis/coordination.k8s.io/v1/namespaces/argocd/leases/app-reporter-acme-edge";
    eventually(
        "the reporter serves its health endpoint",
        Duration::from_secs(30),
        || http(metrics, "GET", "/healthz", "").is_some_and(|(status, _)| status == 200),
    );
    eventually(
        "the hardened reporter holds its lease",
        Duration::from_secs(30),
        || http(api, "GET", lease, "").is_some_and(|(status, _)| status == 200),
    );
    eventually(
        "the runtime's tunnel is up",
        Duration::from_secs(30),
        || {
            http_as(gateway, "GET", "/api/runtimes", "", "adm")
                .is_some_and(|(_, body)| body.contains("acme-edge"))
        },
    );
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &runtime.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = runtime.0.wait().unwrap();
    assert_eq!(status.code(), Some(0), "a SIGTERM is a clean stop");
    let (status, body) = http(api, "GET", lease, "").unwrap();
    assert_eq!(status, 404, "the lease was released on shutdown: {body}");
}

/// A POST through the gateway with an idempotency key: (status, body).
fn post_once(port: u16, path: &str, key: &str, body: &str) -> Option<(u16, String)> {
    exchange(
        port,
        "POST",
        path,
        body,
        &format!("idempotency-key: {key}\r\nauthorization: Bearer {VIEWER}\r\n"),
    )
}

#[test]
fn a_hardened_runtime_with_durable_request_records_answers_a_retry_after_its_restart_without_running_it_again(
) {
    // Without --durable-requests the retry reaches the API server again and gets 409
    // AlreadyExists (checked by hand when this test was written).
    let (api, tunnel, gateway, cache) = (free_port(), free_port(), free_port(), free_port());
    let (api_addr, tunnel_addr, gateway_addr, cache_addr) = (
        format!("127.0.0.1:{api}"),
        format!("127.0.0.1:{tunnel}"),
        format!("127.0.0.1:{gateway}"),
        format!("127.0.0.1:{cache}"),
    );
    let _apiserver = apiserver(&api_addr);
    let _store = orrery(&["serve", "cache", "--listen", &cache_addr]);
    let _platform = control_plane(&tunnel_addr, &gateway_addr, "acme-prod=tok-1", &[]);
    let runtime = || {
        orrery(&[
            "serve",
            "runtime",
            "--platform",
            &tunnel_addr,
            "--name",
            "acme-prod",
            "--token",
            "tok-1",
            "--workflows",
            &api_addr,
            "--cache",
            &cache_addr,
            "--durable-requests",
        ])
    };
    let mut process = runtime();
    let list = "/api/runtimes/acme-prod/workflows/api/v1/namespaces/default/configmaps";
    eventually("the tunnel is up", Duration::from_secs(30), || {
        http_as(gateway, "GET", list, "", VIEWER).is_some_and(|(code, _)| code == 200)
    });
    let create = r#"{"metadata":{"name":"created-once"}}"#;
    let (code, first) = post_once(gateway, list, "write-1", create).expect("an answer");
    assert_eq!(code, 201, "{first}");
    // The runtime restarts (its memory is gone); the client retries the same write.
    drop(process);
    process = runtime();
    eventually(
        "the restarted runtime is back",
        Duration::from_secs(30),
        || http_as(gateway, "GET", list, "", VIEWER).is_some_and(|(code, _)| code == 200),
    );
    let (code, again) = post_once(gateway, list, "write-1", create).expect("an answer");
    // Run again, the API server would answer 409 AlreadyExists: the record answers instead.
    assert_eq!(
        (code, &again),
        (201, &first),
        "the recorded answer, replayed"
    );
    let (code, other) = post_once(gateway, list, "write-2", create).expect("an answer");
    assert_eq!(
        code, 409,
        "a new key does run (and the object exists): {other}"
    );
    drop(process);
}

/// `orrery serve runtime ARGS`, run to its end: (exit code, stderr).
fn serve_runtime_fails(args: &[&str]) -> (Option<i32>, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["serve", "runtime"])
        .args(args)
        .env_remove("POD_NAME")
        .env_remove("ORRERY_RUNTIME_TOKEN")
        .output()
        .expect("run orrery");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The chart's topology, one process per pod as `deploy/runtime/` runs them: the tunnel
/// client hands every request to the router in another process (`--tunnel-local`, frpc's
/// `local_ip = internal-router`), the router forwards to the app-proxy and the workflows
/// server in theirs, and two reporter replicas take their identity from their pod names.
#[test]
fn the_runtime_runs_one_component_per_process_as_the_deploy_manifests_do() {
    let [api, tunnel, gateway, events, router, proxy, cache, metrics_0, metrics_1] =
        [(); 9].map(|()| free_port());
    let addr = |port: u16| format!("127.0.0.1:{port}");
    let _apiserver = apiserver(&addr(api));
    let _platform = control_plane(
        &addr(tunnel),
        &addr(gateway),
        "acme-prod=tok-1",
        &["--events", &addr(events)],
    );
    let _router = orrery(&[
        "serve",
        "runtime",
        "--components",
        "router",
        "--ingress",
        &addr(router),
        "--app-proxy",
        &addr(proxy),
        "--workflows",
        &addr(api),
    ]);
    let _app_proxy = orrery(&[
        "serve",
        "runtime",
        "--components",
        "app-proxy",
        "--app-proxy",
        &addr(proxy),
        "--git",
        "127.0.0.1:9",
        "--platform-api",
        &addr(gateway),
        "--apiserver",
        &addr(api),
    ]);
    let _tunnel_client = orrery(&[
        "serve",
        "runtime",
        "--components",
        "tunnel-client",
        "--platform",
        &addr(tunnel),
        "--name",
        "acme-prod",
        "--token",
        "tok-1",
        "--tunnel-local",
        &addr(router),
    ]);
    let _cache = orrery(&["serve", "cache", "--listen", &addr(cache)]);
    let reporter = |pod: &str, metrics: u16| {
        orrery(&[
            "serve",
            "runtime",
            "--components",
            "app-reporter",
            "--pod-name",
            pod,
            "--token",
            "tok-1",
            "--apiserver",
            &addr(api),
            "--argocd",
            "127.0.0.1:9",
            "--events-api",
            &addr(events),
            "--cache",
            &addr(cache),
            "--replicas",
            "2",
            "--reporter-listen",
            &addr(metrics),
            "--namespace",
            "argocd",
        ])
    };
    let _reporters = [
        reporter("event-reporter-0", metrics_0),
        reporter("event-reporter-1", metrics_1),
    ];
    eventually("the API server answers", Duration::from_secs(20), || {
        http(api, "GET", "/healthz", "").is_some()
    });
    // Each process's health endpoint, as the manifests' probes read them.
    for (port, path) in [
        (gateway, "/healthz"),
        (events, "/healthz"),
        (router, "/readyz"),
        (proxy, "/app-proxy/healthz"),
        (metrics_0, "/healthz"),
        (metrics_1, "/healthz"),
    ] {
        eventually(
            &format!("{path} on {port} answers 200"),
            Duration::from_secs(30),
            || http(port, "GET", path, "").is_some_and(|(status, _)| status == 200),
        );
    }
    // gateway → tunnel server → tunnel client → (path unchanged) router → API server.
    configmap_crosses_the_tunnel(api, gateway, "across-four-processes");
    // The router's own 404 for a path it does not route: the tunnel client forwarded the
    // path as it came, without routing it itself.
    let (code, body) = http_as(
        gateway,
        "GET",
        "/api/runtimes/acme-prod/nowhere",
        "",
        VIEWER,
    )
    .unwrap();
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("no route for /nowhere"), "{body}");
    // … → router → app-proxy (another process) → API server.
    workflow_terminated_through_the_app_proxy(api, gateway, "build-7");
    // Two replicas, one lease each, named by pod: the StatefulSet's identities.
    for pod in ["event-reporter-0", "event-reporter-1"] {
        let lease =
            format!("/apis/coordination.k8s.io/v1/namespaces/argocd/leases/app-reporter-{pod}");
        eventually(
            &format!("{pod} holds its lease"),
            Duration::from_secs(30),
            || http(api, "GET", &lease, "").is_some_and(|(status, _)| status == 200),
        );
    }
    // The events API takes the runtime's token and nobody else's.
    let (code, _) = http_as(events, "POST", "/2.0/api/events", "{}", "stolen").unwrap();
    assert_eq!(code, 401);
    // A runtime registered through the gateway reports with the token it was issued: the
    // events API authenticates against the same registry (its body is refused, not its
    // token).
    let register = |runtime: &str| {
        http_as(
            gateway,
            "POST",
            "/api/runtimes",
            &format!(r#"{{"account": "acme", "runtime": "{runtime}"}}"#),
            "adm",
        )
        .unwrap()
    };
    let (code, registered) = register("edge");
    assert_eq!(code, 201, "{registered}");
    let registered: serde_json::Value = serde_json::from_str(&registered).unwrap();
    let token = registered["token"].as_str().unwrap();
    // The reporter's header: the token itself, as the real reporter sends it.
    let report = |token: &str| {
        exchange(
            events,
            "POST",
            "/2.0/api/events",
            "{}",
            &format!("authorization: {token}\r\n"),
        )
        .unwrap()
    };
    let (code, body) = report(token);
    assert_eq!(code, 400, "{body}");
    // Registering again rotates the token: the old one stops working at once.
    assert_eq!(register("edge").0, 201);
    let (code, _) = report(token);
    assert_eq!(code, 401, "the rotated token is refused");
    // So is a preregistered runtime's token once the runtime registers again.
    assert_eq!(report("tok-1").0, 400, "tok-1 is acme-prod's until then");
    assert_eq!(register("prod").0, 201);
    assert_eq!(
        report("tok-1").0,
        401,
        "the preregistered token is rotated too"
    );
}

/// As `deploy/runtime` runs them: the event bus in a process of its own, and the resource
/// reporter (faithful: publishing to that bus) in another, answering its pod's probes on
/// `--resources-listen`.
#[test]
fn the_resource_reporter_and_the_event_bus_run_as_their_own_processes_with_a_health_endpoint() {
    let [api, events, bus, health] = [(); 4].map(|()| free_port());
    let addr = |port: u16| format!("127.0.0.1:{port}");
    let _apiserver = apiserver(&addr(api));
    let _bus = orrery(&[
        "serve",
        "runtime",
        "--components",
        "event-bus",
        "--event-bus",
        &addr(bus),
    ]);
    eventually("the event bus listens", Duration::from_secs(20), || {
        std::net::TcpStream::connect(addr(bus)).is_ok()
    });
    let _reporter = orrery(&[
        "serve",
        "runtime",
        "--components",
        "resource-reporter",
        "--apiserver",
        &addr(api),
        "--events-api",
        &addr(events),
        "--event-bus",
        &addr(bus),
        "--resources-listen",
        &addr(health),
        "--variant",
        "faithful",
        "--token",
        "tok-1",
    ]);
    eventually(
        "the resource reporter answers /healthz",
        Duration::from_secs(20),
        || {
            http(health, "GET", "/healthz", "")
                .is_some_and(|(status, body)| status == 200 && body == "ok")
        },
    );
    assert_eq!(http(health, "GET", "/metrics", "").map(|r| r.0), Some(404));
}

#[test]
fn serve_runtime_names_the_flag_a_listed_component_is_missing() {
    for (args, wanted) in [
        (
            "--components tunnel-client --name a-b --token t --tunnel-local x:1",
            "the tunnel-client component needs --platform",
        ),
        (
            "--components tunnel-client --platform p:1 --name a-b --token t",
            "needs the router component or --tunnel-local",
        ),
        (
            "--components tunnel-client --platform p:1 --name a-b --tunnel-local x:1",
            "the tunnel-client component needs --token",
        ),
        (
            "--components router",
            "the router component without the tunnel client needs --ingress",
        ),
        (
            "--platform p:1 --name a-b --token t --tunnel-local x:1",
            "--tunnel-local is for a tunnel client whose router runs in another process",
        ),
        (
            "--components app-reporter --token t",
            "the app-reporter component needs --argocd",
        ),
        (
            "--components app-proxy",
            "the app-proxy component needs --git",
        ),
        (
            "--platform p:1 --name a-b --token t --argocd a:1",
            "the app-reporter component needs --events-api",
        ),
        (
            "--components source-server --argocd a:1",
            "the source-server component needs --serve-sources",
        ),
        (
            "--platform p:1 --name a-b",
            "the tunnel-client component needs --token",
        ),
        (
            "--components gitops-operator --argocd a:1",
            "the gitops-operator component needs --git",
        ),
        (
            "--components gitops-operator --git g:1 --platform-api p:1",
            "the gitops-operator component needs --argocd",
        ),
        (
            "--components gitops-operator --git g:1 --platform-api p:1 --argocd a:1 --operator-replicas 2",
            "--operator-replicas above 1 needs --pod-name",
        ),
        ("--components dashboard", "invalid value 'dashboard'"),
    ] {
        let args: Vec<&str> = args.split(' ').collect();
        let (code, stderr) = serve_runtime_fails(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(wanted), "{args:?}: {stderr}");
    }
}

/// The permissions file of the GitOps API test: acme's admin alice, its member bob (team
/// dev, who may read and sync apps deploying to team-a), and globex's admin mallory.
pub(crate) const POLICY: &str = "\
accounts:
  - name: acme
    users:
      - {name: alice, token: alice-token, role: admin}
      - {name: bob, token: bob-token, teams: [dev]}
    rules:
      - teams: [dev]
        actions: [applications:read, applications:sync]
        namespaces: [team-a]
  - name: globex
    users:
      - {name: mallory, token: mallory-token, role: admin}
";

/// `orrery serve runtime` as acme-prod (token `tok-1`): its tunnel to `tunnel`, its app-proxy on
/// `proxy` (permissions from the gateway at `gateway`, the Kubernetes API at `api`, no Git).
fn runtime_acme_prod(tunnel: &str, proxy: &str, gateway: &str, api: &str) -> Process {
    orrery(&[
        "serve",
        "runtime",
        "--platform",
        tunnel,
        "--name",
        "acme-prod",
        "--token",
        "tok-1",
        "--app-proxy",
        proxy,
        "--git",
        "127.0.0.1:9",
        "--platform-api",
        gateway,
        "--apiserver",
        api,
    ])
}

/// POSTs `body` to the events API on `port` with a runtime's `token`: the status.
pub(crate) fn report_event(port: u16, token: &str, body: &str) -> Option<u16> {
    exchange(
        port,
        "POST",
        "/2.0/api/events",
        body,
        &format!("authorization: {token}\r\n"),
    )
    .map(|r| r.0)
}

/// Asks the GitOps API on `port` as `token`: the status and the answer. GraphQL over HTTP
/// answers every executed request 200 (checked here), so the status returned for one is
/// the one its errors carry (`extensions.status`: NOT_FOUND's 404, …); a refusal before
/// execution (the gateway's 401, a request error's 400) has no `data` and is returned as is.
pub(crate) fn ask_graphql(port: u16, token: &str, query: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"query": query}).to_string();
    let (code, answer) =
        http_as(port, "POST", "/2.0/api/graphql", &body, token).expect("an answer");
    let answer: serde_json::Value =
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"));
    if answer.get("data").is_none() {
        assert_ne!(code, 200, "an answer without data is a refusal: {answer}");
        return (code, answer);
    }
    assert_eq!(code, 200, "an executed request is answered 200: {answer}");
    (
        orrery_system::platform::graphql::error_status(&answer).as_u16(),
        answer,
    )
}

/// An application event as a reporter sends it (uncompressed): Application
/// `argocd/<name>` deploying to `destination`, at resourceVersion `rv`.
pub(crate) fn app_event(name: &str, destination: &str, sync: &str, rv: u64) -> String {
    use base64::Engine as _;
    let object = serde_json::json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "argocd", "resourceVersion": rv.to_string(),
                     "labels": {"team": destination}},
        "spec": {"destination": {"server": "https://kubernetes.default.svc", "namespace": destination}},
        "status": {"sync": {"status": sync, "revision": "abc"}, "health": {"status": "Healthy"}}
    });
    serde_json::json!({"data": {
        "timestamp": "2026-11-26T10:00:00Z",
        "object": base64::engine::general_purpose::STANDARD.encode(object.to_string()),
        "source": {"desiredManifest": "{}", "actualManifest": "{}", "revision": "abc",
                   "syncStatus": sync, "healthStatus": "Healthy", "appName": name},
        "errors": [], "appVersions": {}
    }})
    .to_string()
}

#[test]
fn the_gitops_api_answers_each_user_their_own_account_as_the_rules_allow_and_audits_every_denial() {
    let (api, tunnel, gateway, events, proxy) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let [api_addr, tunnel_addr, gateway_addr, events_addr, proxy_addr] =
        [api, tunnel, gateway, events, proxy].map(|p| format!("127.0.0.1:{p}"));
    let dir = std::env::temp_dir().join(format!("orrery-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let _apiserver = apiserver(&api_addr);
    let _platform = control_plane(
        &tunnel_addr,
        &gateway_addr,
        "acme-prod=tok-1,globex-prod=tok-2",
        &[
            "--users",
            "",
            "--policy",
            policy.to_str().unwrap(),
            "--events",
            &events_addr,
        ],
    );
    let _runtime = runtime_acme_prod(&tunnel_addr, &proxy_addr, &gateway_addr, &api_addr);
    eventually("the API server answers", Duration::from_secs(20), || {
        http(api, "GET", "/healthz", "").is_some()
    });
    let applications = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications";
    for (name, destination) in [("web", "team-a"), ("db", "team-b")] {
        let app = format!(
            r#"{{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{{"name":"{name}"}},"spec":{{"destination":{{"namespace":"{destination}"}}}}}}"#
        );
        assert_eq!(
            http(api, "POST", applications, &app).map(|r| r.0),
            Some(201)
        );
    }
    // Both runtimes report an app argocd/web; acme also argocd/db.
    let report = |token: &str, body: String| report_event(events, token, &body);
    eventually("the events API accepts", Duration::from_secs(20), || {
        report("tok-1", app_event("web", "team-a", "Synced", 5)) == Some(200)
    });
    assert_eq!(
        report("tok-1", app_event("db", "team-b", "OutOfSync", 6)),
        Some(200)
    );
    assert_eq!(
        report("tok-2", app_event("web", "secret", "OutOfSync", 2)),
        Some(200)
    );
    let ask = |token: &str, query: &str| ask_graphql(gateway, token, query);
    let list = "{ applications { items { runtime name destinationNamespace syncStatus } } }";
    eventually("the events are projected", Duration::from_secs(10), || {
        ask("alice-token", list).1["data"]["applications"]["items"]
            .as_array()
            .is_some_and(|items| items.len() == 2)
    });
    assert_eq!(
        ask("bob-token", list).1["data"]["applications"]["items"],
        serde_json::json!([{"runtime": "prod", "name": "web", "destinationNamespace": "team-a", "syncStatus": "Synced"}]),
        "bob's rule covers team-a only"
    );
    assert_eq!(
        ask("mallory-token", list).1["data"]["applications"]["items"],
        serde_json::json!([{"runtime": "prod", "name": "web", "destinationNamespace": "secret", "syncStatus": "OutOfSync"}]),
        "globex's own web, never acme's"
    );
    // Adversarial requests: each refused with a clear body, each audited.
    let refused = |token: &str, query: &str, status: u16, words: &str| {
        let (code, answer) = ask(token, query);
        assert_eq!(code, status, "{query} as {token:?}: {answer}");
        let message = answer["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{query} as {token:?}: {answer}");
    };
    refused("", list, 401, "needs a user's token");
    refused("forged", list, 401, "unknown user token");
    refused(
        "adm",
        list,
        401,
        "the GitOps API answers an account's users",
    );
    refused(
        "bob-token",
        r#"{ application(runtime: "prod", namespace: "argocd", name: "db") { name } }"#,
        404,
        "no application argocd/db in runtime prod",
    );
    refused(
        "bob-token",
        "{ auditLog { seq } }",
        403,
        "may not read the audit log",
    );
    refused(
        "bob-token",
        r#"mutation { createRuntime(name: "edge") { newAccessToken } }"#,
        403,
        "not an admin",
    );
    refused(
        "bob-token",
        r#"mutation { syncApplication(runtime: "prod", namespace: "argocd", name: "db") { status } }"#,
        404,
        "no application argocd/db",
    );
    refused(
        "mallory-token",
        r#"{ runtime(name: "acme-prod") { name } }"#,
        404,
        "no runtime acme-prod in account globex",
    );
    refused(
        "mallory-token",
        r#"mutation { syncApplication(runtime: "prod", namespace: "argocd", name: "web") { status } }"#,
        503,
        "runtime prod answered 503",
    );
    refused(
        "bob-token",
        "{ applications { items { nope } } }",
        400,
        "nope",
    );
    // A body over the limit is 413, and the API goes on answering.
    let big = serde_json::json!({"query": "{ me { name } }", "pad": "x".repeat(70_000)});
    let (code, answer) = http_as(
        gateway,
        "POST",
        "/2.0/api/graphql",
        &big.to_string(),
        "bob-token",
    )
    .unwrap();
    assert_eq!(code, 413, "{answer}");
    assert!(answer.contains("PAYLOAD_TOO_LARGE"), "{answer}");
    assert_eq!(ask("bob-token", "{ me { name } }").0, 200);
    // What bob may do goes through: GitOps API → tunnel → router → app-proxy → API server.
    let sync = r#"mutation { syncApplication(runtime: "prod", namespace: "argocd", name: "web", revision: "abc") { status } }"#;
    eventually(
        "the runtime's tunnel is up",
        Duration::from_secs(20),
        || ask("bob-token", sync).0 == 200,
    );
    let (_, stored) = http(api, "GET", &format!("{applications}/web"), "").expect("the app");
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        stored["operation"],
        serde_json::json!({"sync": {"revision": "abc"}, "initiatedBy": {"username": "bob"}}),
        "the app-proxy set the sync operation as bob"
    );
    // Ingress mode: alice creates runtime edge, reached at its router's address without a
    // tunnel; it reports with the token it was issued, and alice syncs its app through it.
    let (edge, edge_proxy) = (free_port(), free_port());
    let [edge_addr, edge_proxy_addr] = [edge, edge_proxy].map(|p| format!("127.0.0.1:{p}"));
    let create = format!(
        r#"mutation {{ createRuntime(name: "edge", kind: HOSTED, accessMode: INGRESS, ingressHost: "{edge_addr}", runtimeVersion: "0.1.72") {{ name newAccessToken rotated }} }}"#
    );
    let (code, created) = ask("alice-token", &create);
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["data"]["createRuntime"]["rotated"], false);
    let edge_token = created["data"]["createRuntime"]["newAccessToken"]
        .as_str()
        .unwrap()
        .to_string();
    let _edge = orrery(&[
        "serve",
        "runtime",
        "--components",
        "router,app-proxy",
        "--name",
        "acme-edge",
        "--ingress",
        &edge_addr,
        "--app-proxy",
        &edge_proxy_addr,
        "--git",
        "127.0.0.1:9",
        "--platform-api",
        &gateway_addr,
        "--apiserver",
        &api_addr,
    ]);
    assert_eq!(
        report(&edge_token, app_event("web", "team-a", "Synced", 7)),
        Some(200)
    );
    eventually(
        "edge answers through its ingress",
        Duration::from_secs(20),
        || {
            http_as(
                gateway,
                "GET",
                "/api/runtimes/acme-edge/app-proxy/healthz",
                "",
                "alice-token",
            )
            .is_some_and(|(code, _)| code == 200)
        },
    );
    // An ingress is reachable without the gateway: the app-proxy itself refuses another
    // account's user, however powerful in their own account.
    let direct = "/app-proxy/api/applications/argocd/web/sync";
    let (code, body) = http_as(edge, "POST", direct, "{}", "mallory-token").expect("an answer");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("not of this runtime's account acme"),
        "{body}"
    );
    let (code, shown) = ask(
        "alice-token",
        r#"{ runtime(name: "edge") { kind accessMode ingressHost runtimeVersion } }"#,
    );
    assert_eq!(code, 200, "{shown}");
    assert_eq!(
        shown["data"]["runtime"],
        serde_json::json!({"kind": "HOSTED", "accessMode": "INGRESS", "ingressHost": edge_addr, "runtimeVersion": "0.1.72"})
    );
    let (code, answer) = ask(
        "alice-token",
        r#"mutation { syncApplication(runtime: "edge", namespace: "argocd", name: "web", revision: "def") { status } }"#,
    );
    assert_eq!(code, 200, "{answer}");
    let (_, stored) = http(api, "GET", &format!("{applications}/web"), "").expect("the app");
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        stored["operation"],
        serde_json::json!({"sync": {"revision": "def"}, "initiatedBy": {"username": "alice"}}),
        "the edge runtime's app-proxy, reached through its ingress, set it"
    );
    // The account's audit log: alice sees acme's denials and mutations, none of globex's.
    let (code, log) = ask(
        "alice-token",
        "{ auditLog(first: 1000) { actor action status outcome reason } }",
    );
    assert_eq!(code, 200, "{log}");
    let log = log["data"]["auditLog"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let denials = log.iter().filter(|e| e["outcome"] == "denied").count();
    // bob's five refusals and his oversized body (413); the three 401s are nobody's account.
    assert_eq!(denials, 6, "{log:#?}");
    assert!(log.iter().all(|e| e["actor"] != "user:mallory"), "{log:#?}");
    assert!(
        log.iter().any(|e| e["action"] == "graphql syncApplication"
            && e["status"] == 200
            && e["actor"] == "user:bob"),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|e| e["action"] == "graphql createRuntime" && e["status"] == 201),
        "{log:#?}"
    );
    // The platform's admin sees the rest: the 401s and globex's refusals.
    let (_, all) = http_as(gateway, "GET", "/api/audit?limit=1000", "", "adm").unwrap();
    let all: serde_json::Value = serde_json::from_str(&all).unwrap();
    let entries = all["entries"].as_array().unwrap();
    let denied = entries.iter().filter(|e| e["outcome"] == "denied").count();
    assert_eq!(
        denied,
        3 + 6 + 1,
        "every refusal above but mallory's 503: {entries:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_runtime_whose_heartbeats_stop_is_shown_unable_to_communicate_while_its_tunnel_answers() {
    let (api, tunnel, gateway, events, proxy, cache) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let [api_addr, tunnel_addr, gateway_addr, events_addr, proxy_addr, cache_addr] =
        [api, tunnel, gateway, events, proxy, cache].map(|p| format!("127.0.0.1:{p}"));
    let _apiserver = apiserver(&api_addr);
    let _platform = control_plane(
        &tunnel_addr,
        &gateway_addr,
        "acme-prod=tok-1",
        &[
            "--events",
            &events_addr,
            "--monitor",
            "--heartbeat-timeout",
            "2",
        ],
    );
    // The runtime's tunnel (no --events-api: this process sends no heartbeats)...
    let _runtime = runtime_acme_prod(&tunnel_addr, &proxy_addr, &gateway_addr, &api_addr);
    // ...and another of its processes, which does: the one whose path to the events API
    // this test cuts by stopping it.
    let heartbeats = || {
        orrery(&[
            "serve",
            "runtime",
            "--components",
            "cache",
            "--cache",
            &cache_addr,
            "--events-api",
            &events_addr,
            "--token",
            "tok-1",
            "--heartbeat-every",
            "1",
        ])
    };
    let shown = || -> (String, String) {
        let (_, body) = http_as(gateway, "GET", "/api/runtimes", "", "adm").unwrap_or_default();
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let health = &answer["health"]["acme-prod"];
        (
            health["status"].as_str().unwrap_or_default().to_string(),
            health["reason"].as_str().unwrap_or_default().to_string(),
        )
    };
    let beating = heartbeats();
    eventually(
        "acme-prod is shown healthy",
        Duration::from_secs(20),
        || shown().0 == "Healthy",
    );
    // The platform has a heartbeat of acme-prod's for sure (the process's first may still be
    // on its way on a loaded machine, and a runtime that never sent one is judged by its
    // probes alone): one with its token.
    assert_eq!(
        exchange(
            events,
            "POST",
            "/2.0/api/heartbeat",
            "",
            "authorization: tok-1\r\n"
        )
        .map(|r| r.0),
        Some(200)
    );
    drop(beating);
    eventually(
        "silent acme-prod is shown unreachable",
        Duration::from_secs(10),
        || shown().0 == "Unable to communicate",
    );
    assert!(shown().1.starts_with("no heartbeat for"), "{:?}", shown());
    assert_eq!(
        http_as(
            gateway,
            "GET",
            "/api/runtimes/acme-prod/healthz",
            "",
            VIEWER
        )
        .map(|r| r.0),
        Some(200),
        "its tunnel still answers"
    );
    let _beating = heartbeats();
    eventually(
        "acme-prod is shown healthy again",
        Duration::from_secs(10),
        || shown().0 == "Healthy",
    );
    // A heartbeat needs the runtime's token.
    assert_eq!(
        http_as(events, "POST", "/2.0/api/heartbeat", "", "").map(|r| r.0),
        Some(401)
    );
}

/// Runs `git args` in `dir` (a repository of the test's own; no user configuration read).
fn git_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Dev")
        .env("GIT_AUTHOR_EMAIL", "dev@example.com")
        .env("GIT_COMMITTER_NAME", "Dev")
        .env("GIT_COMMITTER_EMAIL", "dev@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Commits version `tag` of the dev environment: its SHA.
fn commit_dev_version(dir: &std::path::Path, tag: &str) -> String {
    std::fs::create_dir_all(dir.join("envs/dev")).unwrap();
    std::fs::write(
        dir.join("envs/dev/values.json"),
        format!("{{\"image\": {{\"tag\": \"{tag}\"}}}}\n"),
    )
    .unwrap();
    git_in(dir, &["add", "-A"]);
    git_in(dir, &["commit", "-q", "-m", &format!("dev: {tag}")]);
    git_in(dir, &["rev-parse", "HEAD"])
}

/// The orchestrator's file for the test: Product shop, dev → prod, both on acme-prod.
fn promotions_file(git: &str) -> String {
    format!(
        "\
git: {git}
repo: https://git.example/acme/shop-gitops.git
token: orchestrator-token
poll_seconds: 1
targets:
  dev: {{runtime: acme-prod, app: shop-dev, path: envs/dev}}
  prod: {{runtime: acme-prod, app: shop-prod, path: envs/prod}}
objects:
  - apiVersion: codefresh.io/v1beta1
    kind: Product
    metadata: {{name: shop}}
    spec:
      promotionFlows: [{{name: main}}]
      promotionTemplate:
        versionSource: {{file: values.json, jsonPath: $.image.tag}}
        promotion: {{values.json: {{jsonPaths: [$.image.tag]}}}}
  - apiVersion: codefresh.io/v1beta1
    kind: PromotionFlow
    metadata: {{name: main}}
    spec: {{triggerEnvironment: dev, steps: [{{environment: prod}}]}}
"
    )
}

#[test]
fn serve_control_plane_runs_the_promotion_orchestrator_and_the_gitops_api_shows_its_releases() {
    let (api, tunnel, gateway, proxy, git) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let [api_addr, tunnel_addr, gateway_addr, proxy_addr, git_addr] =
        [api, tunnel, gateway, proxy, git].map(|p| format!("127.0.0.1:{p}"));
    let dir = std::env::temp_dir().join(format!("orrery-promotions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("envs/prod")).unwrap();
    git_in(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(
        repo.join("envs/prod/values.json"),
        "{\"image\": {\"tag\": \"0.9\"}}\n",
    )
    .unwrap();
    let mut commits = vec![commit_dev_version(&repo, "1.0")];
    let policy = dir.join("policy.yaml");
    // acme's users of POLICY, and the orchestrator's user with a rule to read and write
    // promotions on runtime prod.
    std::fs::write(
        &policy,
        "\
accounts:
  - name: acme
    users:
      - {name: alice, token: alice-token, role: admin}
      - {name: bob, token: bob-token, teams: [dev]}
      - {name: orchestrator, token: orchestrator-token}
    rules:
      - teams: [dev]
        actions: [applications:read, applications:sync]
        namespaces: [team-a]
      - users: [orchestrator]
        actions: [promotions:read, promotions:write]
        runtimes: [prod]
  - name: globex
    users:
      - {name: mallory, token: mallory-token, role: admin}
",
    )
    .unwrap();
    let promotions = dir.join("promotions.yaml");
    std::fs::write(&promotions, promotions_file(&git_addr)).unwrap();

    // A file with a mistake is refused before anything runs, naming where.
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        promotions_file(&git_addr).replace(
            "runtime: acme-prod, app: shop-prod",
            "runtime: prod, app: shop-prod",
        ),
    )
    .unwrap();
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args([
            "serve",
            "control-plane",
            "--admin-token",
            "adm",
            "--tunnel",
            "127.0.0.1:0",
            "--api",
            "127.0.0.1:0",
        ])
        .args([
            "--policy",
            policy.to_str().unwrap(),
            "--promotions",
            bad.to_str().unwrap(),
        ])
        .output()
        .expect("orrery runs");
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("targets.prod.runtime: \"prod\" is not a runtime's gateway name"),
        "{stderr}"
    );

    let _git = orrery(&[
        "serve",
        "git",
        "--listen",
        &git_addr,
        "--repo",
        &format!(
            "https://git.example/acme/shop-gitops.git={}",
            repo.display()
        ),
    ]);
    let _apiserver = apiserver(&api_addr);
    let _platform = control_plane(
        &tunnel_addr,
        &gateway_addr,
        "acme-prod=tok-1,globex-prod=tok-2",
        &[
            "--users",
            "",
            "--policy",
            policy.to_str().unwrap(),
            "--promotions",
            promotions.to_str().unwrap(),
        ],
    );
    let _runtime = runtime_acme_prod(&tunnel_addr, &proxy_addr, &gateway_addr, &api_addr);
    let ask = |token: &str, query: &str| ask_graphql(gateway, token, query);
    eventually(
        "the runtime's tunnel is up",
        Duration::from_secs(30),
        || {
            http(gateway, "GET", "/healthz", "").is_some()
                && ask(
                    "alice-token",
                    r#"{ runtime(name: "prod") { isRemoteClusterConnected } }"#,
                )
                .1["data"]["runtime"]["isRemoteClusterConnected"]
                    == true
        },
    );
    // A commit to dev after the orchestrator took its baseline starts a release. (Its first
    // look at Git may come after a commit, which then is the baseline: commit again.)
    let releases = r#"{ releases { totalCount items { id product commit phase promotions { environment runtime application phase task } } } }"#;
    let mut seen = serde_json::Value::Null;
    for version in ["1.1", "1.2", "1.3"] {
        commits.push(commit_dev_version(&repo, version));
        // Up to 10 s (50 looks, 200 ms apart) for this commit's release.
        for _ in 0..50 {
            seen = ask("alice-token", releases).1;
            if seen["data"]["releases"]["totalCount"] != 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if seen["data"]["releases"]["totalCount"] != 0 {
            break;
        }
    }
    let release = &seen["data"]["releases"]["items"][0];
    assert_eq!(release["id"], "shop-1", "{seen}");
    assert_eq!(release["product"], "shop");
    assert!(
        commits.iter().any(|c| release["commit"] == c.as_str()),
        "{seen}"
    );
    // The values are read in dev first: its PromotionTask is created through the gateway,
    // the runtime's tunnel, router and app-proxy, in the runtime's namespace of its API
    // server (no operator runs here to execute it: dev stays Promoting).
    eventually(
        "dev's PromotionTask exists",
        Duration::from_secs(20),
        || {
            let seen = ask("alice-token", releases).1;
            let dev = &seen["data"]["releases"]["items"][0]["promotions"][0];
            dev["environment"] == "dev"
                && dev["runtime"] == "prod"
                && dev["application"] == "shop-dev"
                && dev["phase"] == "Promoting"
                && dev["task"] == "shop-1-dev"
                && http(
                    api,
                    "GET",
                    "/apis/codefresh.io/v1beta1/namespaces/default/promotiontasks/shop-1-dev",
                    "",
                )
                .is_some_and(|(status, _)| status == 200)
        },
    );
    // Another account sees none of it; asking for it by id is answered as a missing one.
    let (status, answer) = ask("mallory-token", releases);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["releases"]["totalCount"], 0, "{answer}");
    let (status, answer) = ask("mallory-token", r#"{ release(id: "shop-1") { id } }"#);
    assert_eq!(status, 404, "{answer}");
    // bob has no promotions:read rule: nothing either.
    let (_, answer) = ask("bob-token", releases);
    assert_eq!(answer["data"]["releases"]["totalCount"], 0, "{answer}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_expired_user_token_is_refused_and_the_cron_executor_removes_its_user_and_audits_it() {
    let (tunnel, gateway) = (free_port(), free_port());
    let [tunnel_addr, gateway_addr] = [tunnel, gateway].map(|p| format!("127.0.0.1:{p}"));
    let dir = std::env::temp_dir().join(format!("orrery-cron-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "\
accounts:
  - name: acme
    users:
      - {name: alice, token: alice-token, role: admin}
      - {name: olga, token: olga-token, role: admin, expires: 2020-01-01T00:00:00Z}
",
    )
    .unwrap();
    let _platform = control_plane(
        &tunnel_addr,
        &gateway_addr,
        "acme-prod=tok-1",
        &[
            "--users",
            "",
            "--policy",
            policy.to_str().unwrap(),
            "--cron-every",
            "1",
        ],
    );
    eventually("the gateway answers", Duration::from_secs(20), || {
        http(gateway, "GET", "/healthz", "").is_some()
    });
    // Refused from the start, by the GitOps API and to an app-proxy asking for permissions.
    let (status, answer) = ask_graphql(gateway, "olga-token", "{ me { name } }");
    let expired = answer["errors"][0]["message"].clone();
    // (The cron executor may already have removed her: then she is unknown.)
    assert_eq!(status, 401, "{answer}");
    assert!(
        expired == "user token expired at 2020-01-01T00:00:00Z" || expired == "unknown user token",
        "{answer}"
    );
    assert_eq!(
        http_as(gateway, "GET", "/api/permissions", "", "olga-token").map(|r| r.0),
        Some(401)
    );
    assert_eq!(
        ask_graphql(gateway, "alice-token", "{ me { name } }").0,
        200
    );
    // Within a second or two the cron executor removes olga, audited as the platform's.
    eventually(
        "the cron executor removed olga",
        Duration::from_secs(20),
        || {
            http_as(gateway, "GET", "/api/audit", "", "adm").is_some_and(|(_, body)| {
                body.contains("cron expired-tokens")
                    && body.contains("user olga's token expired at 2020-01-01T00:00:00Z: removed")
                    && body.contains(r#""kind":"platform""#)
            })
        },
    );
    let (status, answer) = ask_graphql(gateway, "olga-token", "{ me { name } }");
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["errors"][0]["message"], "unknown user token");
    assert_eq!(
        ask_graphql(gateway, "alice-token", "{ me { name } }").0,
        200
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--anti-entropy-every` is refused, with the reason, where the job cannot run: faithful
/// runs none, and hardened needs this process's events path to send what it finds.
/// `orrery serve control-plane` on free ports with `args`: its exit code and stderr.
fn serve_control_plane_with(args: &[&str]) -> (Option<i32>, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["serve", "control-plane", "--admin-token", "adm"])
        .args(["--tunnel", "127.0.0.1:0", "--api", "127.0.0.1:0"])
        .args(args)
        .env_remove("ORRERY_DATABASE_URL")
        .output()
        .expect("run orrery");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn serve_control_plane_refuses_an_anti_entropy_job_it_cannot_run() {
    let fails = serve_control_plane_with;
    let (code, stderr) = fails(&["--variant", "faithful", "--anti-entropy-every", "5"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("faithful runs no anti-entropy job"),
        "{stderr}"
    );
    let (code, stderr) = fails(&["--variant", "hardened", "--anti-entropy-every", "5"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--anti-entropy-every needs --events"),
        "{stderr}"
    );
}

#[test]
fn serve_control_plane_refuses_vcluster_flags_it_cannot_run() {
    let fails = serve_control_plane_with;
    for (args, says) in [
        (&["--vcluster", "acme"][..], "expected NAME=KUBECONFIG"),
        (&["--vcluster", "Acme,x=/tmp/k"][..], "must be a DNS label"),
        (
            &["--vcluster", "acme=/nonexistent/kubeconfig"][..],
            "--vcluster acme: /nonexistent/kubeconfig",
        ),
        (
            &[
                "--vcluster",
                "acme=/tmp/k",
                "--vcluster-selector",
                "env!=dev",
            ][..],
            "term \"env!=dev\" is not",
        ),
        (
            &[
                "--vcluster",
                "acme=/tmp/k",
                "--vcluster-host-namespace",
                "Bad_NS",
            ][..],
            "not a namespace name",
        ),
    ] {
        let (code, stderr) = fails(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
