//! A multi-tenant platform's world (`tenants:`): every `role: runtime` host is an account of
//! its own (named after the host) with runtimes `rt-0`, `rt-1`, …; each account's apps have
//! the same names as every other account's (`argocd/web`, `argocd/api`, …). The platform's
//! own code (gateway, GitOps API, events path, tunnel server, the runtimes' tunnel clients
//! and routers) comes from the assemblies; this module supplies what the platform's users
//! and runtimes do: each account's reporter stand-in sends its apps' events with its runtime
//! tokens, and adversary hosts act as users of every account and probe the others'.
//!
//! Every app carries its account's marker in its destination namespace (`ns-<account>-<app>`),
//! so an answer that carries another account's data says so; the runtime hosts' app-proxy
//! stand-ins record whose token reached them. Both feed `tenant_isolation`.
//!
//! With `tenants.ingress`, each account's last runtime is in ingress mode: registered with
//! its host's router ingress and without a tunnel, so the gateway reaches it directly. With
//! `tenants.register_every`, adversaries also register runtimes of their own as accounts'
//! admins (`run_registrar`), for `no_acknowledged_write_lost`. Not modelled here: a client
//! that bypasses the gateway and calls an ingress directly — the real app-proxy refuses a
//! foreign user there (the real-mode test of `serve runtime --ingress`), the stand-in would
//! not.

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::json;

use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;
use orrery_system::platform::permissions::{Attributes, Pattern, Permissions, Role, Rule};
use orrery_system::platform::registry::Registry;

use super::addresses::PLATFORM_PORT;
use super::tunnel::GATEWAY_PORT;
use crate::scenario::model::Tenants;

/// The runtimes of `account`: `(runtime, tunnel name, runtime token)`.
pub fn runtimes(account: &str, per_host: u32) -> Vec<(String, String, String)> {
    (0..per_host.max(1))
        .map(|i| {
            let runtime = format!("rt-{i}");
            (
                runtime.clone(),
                format!("{account}-{runtime}"),
                runtime_token(account, &runtime),
            )
        })
        .collect()
}

/// Port of a runtime host's router ingress (`tenants.ingress`).
pub const INGRESS_PORT: u16 = 8088;

/// The runtime of each account that is in ingress mode, if any: the last one, with two or
/// more per account and `tenants.ingress` on.
pub fn ingress_runtime(settings: &Tenants, per_host: u32) -> Option<String> {
    (settings.ingress && per_host >= 2).then(|| format!("rt-{}", per_host - 1))
}

/// The token runtime `runtime` of `account` reports and connects with.
pub fn runtime_token(account: &str, runtime: &str) -> String {
    format!("rt-token-{account}-{runtime}")
}

/// The account's admin: (token, user name).
pub fn admin(account: &str) -> (String, String) {
    (format!("tok-{account}-admin"), format!("admin-{account}"))
}

/// The account's member of team dev: (token, user name). Their one rule: read and sync
/// apps of `rt-0` deploying to the account's own namespaces.
pub fn member(account: &str) -> (String, String) {
    (format!("tok-{account}-dev"), format!("dev-{account}"))
}

/// The account's former member, whose token expired (at the epoch): (token, user name).
/// Refused with 401 from the start, and removed by the cron executor's first run.
pub fn former(account: &str) -> (String, String) {
    (format!("tok-{account}-former"), format!("former-{account}"))
}

pub use super::addresses::account_of_token;

/// App names: `web`, `api`, `db`, then `app-<n>`.
pub fn app_names(count: u32) -> Vec<String> {
    (0..count)
        .map(|i| match i {
            0 => "web".to_string(),
            1 => "api".to_string(),
            2 => "db".to_string(),
            n => format!("app-{n}"),
        })
        .collect()
}

/// The destination namespace of `account`'s app `app`: its account's marker.
pub fn marker(account: &str, app: &str) -> String {
    format!("ns-{account}-{app}")
}

/// The first account other than `own` whose marker `body` carries (empty: none).
pub fn leak(body: &str, own: &str, accounts: &[String]) -> String {
    accounts
        .iter()
        .find(|a| *a != own && body.contains(&format!("ns-{a}-")))
        .cloned()
        .unwrap_or_default()
}

/// Registers every account's runtimes, its admin and its member with the member's rule
/// (platform state that outlives a gateway process, as a database would).
pub fn register(
    registry: &Registry,
    permissions: &Permissions,
    accounts: &[String],
    per_host: u32,
    ingress: Option<&str>,
) {
    for account in accounts {
        for (runtime, _, token) in runtimes(account, per_host) {
            if ingress == Some(runtime.as_str()) {
                // Its router's ingress on the account's host; no tunnel.
                let info = orrery_system::platform::registry::Info {
                    access_mode: orrery_system::platform::registry::AccessMode::Ingress,
                    ingress_host: format!("{account}:{INGRESS_PORT}"),
                    cluster: orrery_system::platform::registry::DEFAULT_CLUSTER.into(),
                    ..Default::default()
                };
                registry.insert_with(&token, account, &runtime, info);
            } else {
                registry.insert(&token, account, &runtime);
            }
        }
        let (token, name) = admin(account);
        permissions.add_user(&token, account, &name, Role::Admin, &[]);
        let (token, name) = member(account);
        permissions.add_user(&token, account, &name, Role::Member, &["dev"]);
        let (token, name) = former(account);
        permissions.add_user(&token, account, &name, Role::Member, &["dev"]);
        permissions.expire_at(&token, 0);
        permissions.add_rule(
            account,
            Rule {
                teams: vec!["dev".into()],
                actions: [
                    "applications:read".to_string(),
                    "applications:sync".to_string(),
                ]
                .into(),
                attributes: Attributes {
                    runtimes: vec![Pattern("rt-0".into())],
                    namespaces: vec![Pattern(format!("ns-{account}-*"))],
                    ..Attributes::default()
                },
                ..Rule::default()
            },
        );
    }
}

type Client = orrery_system::env::http::Client<Full<Bytes>>;

/// The GitOps API's path on the gateway.
const GRAPHQL_PATH: &str = "/2.0/api/graphql";

/// One exchange: (status, body); status 0 when no answer came within 10 s.
async fn send(
    env: &SharedEnv,
    client: &Client,
    method: &str,
    url: &str,
    token: Option<&str>,
    body: String,
) -> (u16, String) {
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let Ok(request) = request.body(Full::new(Bytes::from(body))) else {
        return (0, String::new());
    };
    let exchange = async {
        match client.request(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                let bytes = response
                    .into_body()
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let answer = String::from_utf8_lossy(&bytes).into_owned();
                // The GitOps API answers every executed request 200 (GraphQL over HTTP);
                // what a probe records is the status its errors carry (NOT_FOUND's 404,
                // FORBIDDEN's 403, …), which is what tells a refusal from an answer.
                let status = match serde_json::from_str(&answer) {
                    Ok(json) if status == 200 && url.ends_with(GRAPHQL_PATH) => {
                        orrery_system::platform::graphql::error_status(&json).as_u16()
                    }
                    _ => status,
                };
                (status, answer)
            }
            Err(_) => (0, String::new()),
        }
    };
    tokio::select! {
        biased;
        answer = exchange => answer,
        _ = env.sleep(Duration::from_secs(10)) => (0, String::new()),
    }
}

/// An application event as a reporter sends it (uncompressed JSON), for `account`'s app
/// `app` at resourceVersion `rv`; `claims` adds payload fields naming another account (the
/// platform must attribute an event to its token, never to what its payload claims).
fn app_event(account: &str, app: &str, rv: u64, claims: Option<&str>) -> String {
    let object = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": app, "namespace": "argocd", "resourceVersion": rv.to_string(),
                     "labels": {"owner": account}},
        "spec": {"destination": {"server": "https://kubernetes.default.svc",
                                 "namespace": marker(account, app)}},
        "status": {"sync": {"status": "Synced", "revision": format!("r{rv}")},
                   "health": {"status": "Healthy"}}
    });
    let mut data = json!({
        "timestamp": "2026-01-01T00:00:00Z",
        "object": base64::engine::general_purpose::STANDARD.encode(object.to_string()),
        "source": {"desiredManifest": "{}", "actualManifest": "{}", "revision": format!("r{rv}"),
                   "syncStatus": "Synced", "healthStatus": "Healthy", "appName": app},
        "errors": [], "appVersions": {}
    });
    if let Some(other) = claims {
        data["account"] = json!(other);
        data["runtime"] = json!(format!("{other}-rt-0"));
    }
    json!({ "data": data }).to_string()
}

/// Runs `account`'s reporter stand-in: every `report_every` each of its runtimes reports
/// each app with a new resourceVersion, the first app's event claiming the next account.
pub async fn run_reporter(
    env: SharedEnv,
    platform_host: String,
    account: String,
    next_account: String,
    per_host: u32,
    settings: Tenants,
) {
    let client =
        orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(10));
    let url = format!("http://{platform_host}:{PLATFORM_PORT}/2.0/api/events");
    let apps = app_names(settings.apps_per_runtime);
    let mut round: u64 = 0;
    loop {
        round += 1;
        for (_, _, token) in runtimes(&account, per_host) {
            for (i, app) in apps.iter().enumerate() {
                let claims = (i == 0).then_some(next_account.as_str());
                let body = app_event(&account, app, round, claims);
                // The raw token, as the real reporter sends it.
                let request = http::Request::post(&url)
                    .header("content-type", "application/json")
                    .header("authorization", token.as_str())
                    .body(Full::new(Bytes::from(body)));
                if let Ok(request) = request {
                    let _ = tokio::select! {
                        biased;
                        answer = client.request(request) => answer.map(|r| r.status().as_u16()).ok(),
                        _ = env.sleep(Duration::from_secs(10)) => None,
                    };
                }
            }
        }
        env.sleep(settings.report_every).await;
    }
}

/// What an adversary tries; each is answered as the world expects (see docs/components/gateway.md's
/// `tenant-isolation`), and `tenant_isolation` judges what came back.
const KINDS: [&str; 13] = [
    "no_token",
    "forged_token",
    "expired_token",
    "foreign_path",
    "dotdot_path",
    "encoded_path",
    "foreign_query",
    "foreign_mutation",
    "own_list",
    "member_write",
    "own_write",
    "replayed_registration",
    "forged_payload",
];

/// Runs an adversary host: every `probe_every` it picks an account to act as, another to
/// attack and a probe, sends it and records what came back.
pub async fn run_adversary(
    env: SharedEnv,
    gateway_host: String,
    platform_host: String,
    accounts: Vec<String>,
    per_host: u32,
    settings: Tenants,
) {
    let client =
        orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(10));
    let gateway = format!("http://{gateway_host}:{GATEWAY_PORT}");
    let graphql = format!("{gateway}{GRAPHQL_PATH}");
    let events = format!("http://{platform_host}:{PLATFORM_PORT}/2.0/api/events");
    let me = env.identity().host.clone();
    let mut n: u64 = 0;
    loop {
        env.sleep(settings.probe_every).await;
        n += 1;
        if accounts.len() < 2 {
            continue;
        }
        let pick = |bound: usize| (env.random_u64() % bound as u64) as usize;
        let own = accounts[pick(accounts.len())].clone();
        let victim = loop {
            let v = &accounts[pick(accounts.len())];
            if *v != own {
                break v.clone();
            }
        };
        let mut kind = KINDS[pick(KINDS.len())];
        // With an ingress runtime, every other foreign path and own write aims at it.
        let aimed = ingress_runtime(&settings, per_host).filter(|_| n % 2 == 1);
        let target = aimed.clone().unwrap_or_else(|| "rt-0".to_string());
        if aimed.is_some() && kind == "own_write" {
            kind = "own_ingress_write";
        }
        let (admin_token, admin_name) = admin(&own);
        let (member_token, member_name) = member(&own);
        let query = |q: String| json!({"query": q}).to_string();
        let gql = |q: String| (graphql.clone(), query(q));
        let status_path =
            |target: &str| format!("{gateway}/api/runtimes/{target}/app-proxy/api/status");
        // (method, url, token, body, actor as the audit log names it)
        let (method, url, token, body, actor): (&str, String, Option<String>, String, String) =
            match kind {
                "no_token" => {
                    let (url, body) = gql(
                        "{ applications(first: 500) { items { destinationNamespace } } }".into(),
                    );
                    ("POST", url, None, body, "anonymous".into())
                }
                "forged_token" => {
                    let (url, body) = gql(
                        "{ applications(first: 500) { items { destinationNamespace } } }".into(),
                    );
                    (
                        "POST",
                        url,
                        Some(format!("forged-{me}-{n}")),
                        body,
                        "anonymous".into(),
                    )
                }
                "expired_token" => {
                    let (url, body) = gql(
                        "{ applications(first: 500) { items { destinationNamespace } } }".into(),
                    );
                    ("POST", url, Some(former(&own).0), body, "anonymous".into())
                }
                "foreign_path" => (
                    "GET",
                    status_path(&format!("{victim}-{target}")),
                    Some(admin_token.clone()),
                    String::new(),
                    format!("user:{admin_name}"),
                ),
                "dotdot_path" => (
                    "GET",
                    status_path(&format!("{own}-rt-0/../{victim}-rt-0")),
                    Some(admin_token.clone()),
                    String::new(),
                    format!("user:{admin_name}"),
                ),
                "encoded_path" => (
                    "GET",
                    if n.is_multiple_of(2) {
                        status_path(&format!("{own}-rt-0/%2e%2e/{victim}-rt-0"))
                    } else {
                        status_path(&format!("{own}-rt-0%2F..%2F{victim}-rt-0"))
                    },
                    Some(admin_token.clone()),
                    String::new(),
                    format!("user:{admin_name}"),
                ),
                "foreign_query" => {
                    let q = if n.is_multiple_of(2) {
                        format!(r#"{{ runtime(name: "{victim}-rt-0") {{ name cluster }} }}"#)
                    } else {
                        format!(
                            r#"{{ application(runtime: "{victim}-rt-0", namespace: "argocd", name: "web") {{ destinationNamespace }} }}"#
                        )
                    };
                    let (url, body) = gql(q);
                    (
                        "POST",
                        url,
                        Some(admin_token.clone()),
                        body,
                        format!("user:{admin_name}"),
                    )
                }
                "foreign_mutation" => {
                    let (url, body) = gql(format!(
                        r#"mutation {{ syncApplication(runtime: "{victim}-rt-0", namespace: "argocd", name: "web") {{ status body }} }}"#
                    ));
                    (
                        "POST",
                        url,
                        Some(admin_token.clone()),
                        body,
                        format!("user:{admin_name}"),
                    )
                }
                "own_list" => {
                    let (url, body) = gql("{ applications(first: 500) { totalCount items { runtime name destinationNamespace } } }".into());
                    (
                        "POST",
                        url,
                        Some(member_token.clone()),
                        body,
                        format!("user:{member_name}"),
                    )
                }
                "member_write" => (
                    "POST",
                    format!(
                        "{gateway}/api/runtimes/{own}-rt-{}/app-proxy/api/commit",
                        per_host.max(2) - 1
                    ),
                    Some(member_token.clone()),
                    String::new(),
                    format!("user:{member_name}"),
                ),
                "own_write" | "own_ingress_write" => (
                    "POST",
                    format!("{gateway}/api/runtimes/{own}-{target}/app-proxy/api/commit"),
                    Some(admin_token.clone()),
                    String::new(),
                    format!("user:{admin_name}"),
                ),
                "replayed_registration" => {
                    let (url, body) = gql(
                        r#"mutation { createRuntime(name: "rt-0") { newAccessToken } }"#.into(),
                    );
                    (
                        "POST",
                        url,
                        Some(member_token.clone()),
                        body,
                        format!("user:{member_name}"),
                    )
                }
                _ => (
                    "POST",
                    events.clone(),
                    Some(runtime_token(&own, "rt-0")),
                    app_event(&own, "web", 1_000_000 + n, Some(&victim)),
                    String::new(),
                ),
            };
        let raw_token = kind == "forged_payload";
        let (status, answer) = if raw_token {
            // The events API takes the raw runtime token.
            let request = http::Request::post(&url)
                .header("content-type", "application/json")
                .header("authorization", token.clone().unwrap_or_default())
                .body(Full::new(Bytes::from(body)));
            match request {
                Ok(request) => {
                    let sent = tokio::select! {
                        biased;
                        answer = client.request(request) => answer.ok(),
                        _ = env.sleep(Duration::from_secs(10)) => None,
                    };
                    match sent {
                        Some(response) => {
                            let status = response.status().as_u16();
                            let _ = response.into_body().collect().await;
                            (status, String::new())
                        }
                        None => (0, String::new()),
                    }
                }
                Err(_) => (0, String::new()),
            }
        } else {
            send(&env, &client, method, &url, token.as_deref(), body).await
        };
        let account = match kind {
            "no_token" | "forged_token" | "expired_token" => String::new(),
            _ => own.clone(),
        };
        env.observe(
            WorldEvent::TenantProbe {
                kind: kind.to_string(),
                leak: leak(&answer, &account, &accounts),
                account,
                actor,
                victim,
                status,
            }
            .into(),
        );
    }
}

/// How many runtime names each registrar cycles through (so most registrations rotate).
const REGISTERED_NAMES: u64 = 3;

/// Runs an adversary host's registrations (`tenants.register_every`): every period it picks
/// an account and registers one of its own runtime names there as the account's admin, and
/// records what came back — the token's digest, for `no_acknowledged_write_lost` to find in
/// the platform's database at the end. Names are the host's own (`reg-<host>-<k>`), so one
/// host's registrations of a name are sequential. It stops when the calm phase begins (as
/// the workload does), so no registration is still on its way when the run ends — one that
/// committed unseen would look like a lost answer.
pub async fn run_registrar(
    env: SharedEnv,
    gateway_host: String,
    accounts: Vec<String>,
    every: Duration,
    calm: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let client =
        orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(10));
    let graphql = format!("http://{gateway_host}:{GATEWAY_PORT}{GRAPHQL_PATH}");
    let me = env.identity().host.clone();
    loop {
        env.sleep(every).await;
        if calm.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        if accounts.is_empty() {
            continue;
        }
        let account = accounts[(env.random_u64() % accounts.len() as u64) as usize].clone();
        let runtime = format!("reg-{me}-{}", env.random_u64() % REGISTERED_NAMES);
        let body = json!({"query": format!(
            r#"mutation {{ createRuntime(name: "{runtime}") {{ newAccessToken rotated }} }}"#
        )})
        .to_string();
        let (status, answer) = send(
            &env,
            &client,
            "POST",
            &graphql,
            Some(&admin(&account).0),
            body,
        )
        .await;
        let answer: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
        let created = &answer["data"]["createRuntime"];
        let token_sha256 = created["newAccessToken"]
            .as_str()
            .map(orrery_system::platform::store::token_digest)
            .unwrap_or_default();
        env.observe(
            WorldEvent::TenantRegistered {
                account,
                runtime,
                status,
                token_sha256,
                rotated: created["rotated"].as_bool().unwrap_or(false),
            }
            .into(),
        );
    }
}
