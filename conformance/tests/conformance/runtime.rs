//! The runtime suite: the application event reporter, unchanged, in real mode against a
//! real API server — several replicas of each variant watching real `Application`s and
//! holding real `Lease`s, reporting to the platform's events path on loopback. Application
//! status is written by orrery's Argo CD controller (in-process, real mode) from a Git
//! provider the test commits to, exactly as it does in simulation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use orrery_sim::world::argocd::{self, application_resource, HealthOverrides};
use orrery_sim::world::git::SharedGit;
use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::{RealEnv, SharedEnv};
use orrery_system::platform::assembly::{
    self as control_plane, ControlPlaneConfig, ControlPlaneState,
};
use orrery_system::platform::events::{self, Platform};
use orrery_system::runtime::app_reporter::{self, shard};
use orrery_system::runtime::assembly::{self as runtime_assembly, RuntimeConfig};
use serde_json::{json, Value};

use crate::support::prepared;

const TOKEN: &str = "conformance-runtime-token";
const ARGO_TOKEN: &str = "conformance-argo-token";
const REPO: &str = "https://git.example/conformance.git";
const REPLICAS: u32 = 3;
const APPS: usize = 24;
/// How long the platform may take to converge on a real cluster.
const CONVERGE: Duration = Duration::from_secs(120);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn app(name: &str, namespace: &str) -> DynamicObject {
    let mut app = DynamicObject::new(name, &application_resource()).within(namespace);
    app.data = json!({"spec": {"source": {"repoURL": REPO, "path": format!("apps/{name}")}, "syncPolicy": {"automated": {}}}});
    app
}

async fn get_json(url: &str) -> Option<Value> {
    crate::support::get_status(url)
        .await
        .ok()
        .map(|(_, body)| body)
}

/// Polls `check` every 500 ms until it returns `Ok`, or fails with its last reason.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + CONVERGE;
    loop {
        match check().await {
            Ok(()) => return,
            Err(reason) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {CONVERGE:?}: {reason}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn reporter_suite(variant: Variant) {
    let (cluster, namespace) = prepared(format!(
        "orrery-runtime-{}-{}",
        std::process::id(),
        variant.as_str()
    ))
    .await;
    let config = kube::Config::infer().await.expect("kubeconfig");
    let target = KubeTarget::real(config, &namespace);

    // The world around the runtime, in-process on loopback: Git, Argo CD, the platform, the cache.
    let git = SharedGit::default();
    let names: Vec<String> = (0..APPS).map(|i| format!("app-{i:02}")).collect();
    let files: BTreeMap<String, String> = names
        .iter()
        .map(|n| {
            (
                format!("apps/{n}/deployment.yaml"),
                format!("image: {n}:v1"),
            )
        })
        .collect();
    let first = git
        .lock()
        .commit(REPO, "Dev <dev@example.com>", "init", unix_ms(), files);
    let (argocd_port, cache_port) = (free_port(), free_port());
    let argo_config = argocd::controller::Config {
        reconcile_every: Duration::from_secs(1),
        history_limit: 5,
        namespace: namespace.clone(),
        listen: format!("127.0.0.1:{argocd_port}"),
        ..Default::default()
    };
    let (platform, platform_port, mut tasks) =
        argocd_and_platform(&target, &git, argo_config, ARGO_TOKEN.into());
    // The dedup cache: a real redis-server when conformance/redis/run.sh started one (as
    // Argo CD's Redis in production), else orrery's RESP server.
    let real_redis = std::env::var("ORRERY_REDIS_ADDR").ok();
    let cache_addr = match &real_redis {
        Some(addr) => addr.clone(),
        None => {
            let cache_only = RuntimeConfig {
                cache: Some(format!("127.0.0.1:{cache_port}")),
                ..Default::default()
            };
            tasks.push(tokio::spawn(async move {
                let env = Arc::new(RealEnv::new("cache"));
                drop(runtime_assembly::run(env, cache_only, std::future::pending()).await)
            }));
            format!("127.0.0.1:{cache_port}")
        }
    };

    // The runtime: REPLICAS reporter replicas, unchanged, against the real API server.
    let mut serve_ports = Vec::new();
    for replica in 0..REPLICAS {
        let port = free_port();
        serve_ports.push(port);
        let mut config = app_reporter::Config::new(variant, target.clone(), &namespace);
        config.argocd_addr = format!("127.0.0.1:{argocd_port}");
        config.argocd_token = ARGO_TOKEN.into();
        config.platform_addr = format!("127.0.0.1:{platform_port}");
        config.runtime_token = TOKEN.into();
        config.cache_addr = cache_addr.clone();
        config.replicas = REPLICAS;
        config.shard = Some(replica);
        config.serve_addr = format!("127.0.0.1:{port}");
        config.resync_every = Duration::from_secs(10);
        let env: SharedEnv = Arc::new(RealEnv::new(format!("reporter-{replica}")));
        let runtime = RuntimeConfig {
            app_reporter: Some(config),
            ..Default::default()
        };
        tasks.push(tokio::spawn(async move {
            drop(runtime_assembly::run(env, runtime, std::future::pending()).await)
        }));
    }

    let apps: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &application_resource());
    for name in &names {
        apps.create(&PostParams::default(), &app(name, &namespace))
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }

    // The platform's read model keys apps by `namespace/name`.
    let key = |name: &str| format!("{namespace}/{name}");
    // 1. Every app reaches the platform, Synced at the first commit.
    eventually("every app reported Synced at the first commit", || {
        let apps = platform.apps_of("acme");
        let names: Vec<String> = names.iter().map(|n| key(n)).collect();
        let first = first.clone();
        async move {
            let missing: Vec<&String> = names
                .iter()
                .filter(|n| {
                    !apps.get(*n).is_some_and(|a| {
                        a.sync_status == "Synced" && a.revision == first && !a.deleted
                    })
                })
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} of {} apps not converged (platform knows {}), e.g. {:?}: {:?}",
                    missing.len(),
                    names.len(),
                    apps.len(),
                    missing.first(),
                    missing.first().and_then(|n| apps.get(*n))
                ))
            }
        }
    })
    .await;

    // 1b. The real event model: besides each app event, one event per resource of the app.
    eventually("every app's resources reported as resource events", || {
        let resources = platform.resources_of("acme");
        let names: Vec<String> = names.iter().map(|n| key(n)).collect();
        async move {
            let bare: Vec<&String> = names
                .iter()
                .filter(|n| !resources.keys().any(|k| k.starts_with(&format!("{n}/"))))
                .collect();
            if bare.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} of {} apps have no resource event (platform knows {} resources), e.g. {:?}",
                    bare.len(),
                    names.len(),
                    resources.len(),
                    bare.first()
                ))
            }
        }
    })
    .await;

    // 1c. The dedup entries are in the cache under the real key shape, after the sends.
    if let Some(redis) = &real_redis {
        let mut connection = orrery_conformance::resp::Connection::open(redis)
            .await
            .expect("redis-server answers");
        for name in &names {
            let entry = format!("app|{namespace}/{name}|last-sent-event");
            let answer = connection
                .send(
                    &orrery_conformance::resp::command(&[b"EXISTS", entry.as_bytes()]),
                    1,
                )
                .await
                .expect("EXISTS");
            assert_eq!(
                answer,
                orrery_conformance::resp::Answer::Replies(b":1\r\n".to_vec()),
                "{entry} in redis-server"
            );
        }
    }

    // 2. Shard ownership as specified: exactly one owner per app; faithful by FNV-1a.
    eventually("every app owned by exactly one replica", || {
        let ports = serve_ports.clone();
        let names = names.clone();
        async move {
            let mut owners: BTreeMap<String, Vec<u32>> = BTreeMap::new();
            for (replica, port) in ports.iter().enumerate() {
                let distribution = get_json(&format!("http://127.0.0.1:{port}/app-distribution"))
                    .await
                    .ok_or("no /app-distribution")?;
                for app in distribution
                    .as_object()
                    .ok_or("distribution is not an object")?
                    .keys()
                {
                    owners.entry(app.clone()).or_default().push(replica as u32);
                }
            }
            for name in &names {
                match owners.get(name).map(Vec::as_slice) {
                    Some([owner])
                        if variant == Variant::Faithful
                            && *owner != shard::faithful_shard(name, REPLICAS) =>
                    {
                        return Err(format!(
                            "{name} owned by {owner}, FNV-1a says {}",
                            shard::faithful_shard(name, REPLICAS)
                        ))
                    }
                    Some([_]) => {}
                    other => return Err(format!("{name} owners: {other:?}")),
                }
            }
            Ok(())
        }
    })
    .await;
    if variant == Variant::Hardened {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(cluster.client(), &namespace);
        let held = leases.list(&Default::default()).await.expect("list leases");
        let holders: Vec<String> = held
            .items
            .iter()
            .filter_map(|l| l.metadata.name.clone())
            .filter(|n| n.starts_with("app-reporter-"))
            .collect();
        assert_eq!(
            holders.len(),
            REPLICAS as usize,
            "one real Lease per hardened replica: {holders:?}"
        );
    }

    // 3. A new commit for some apps moves them to the new revision on the platform.
    let changed: Vec<String> = names.iter().take(6).cloned().collect();
    let files: BTreeMap<String, String> = changed
        .iter()
        .map(|n| {
            (
                format!("apps/{n}/deployment.yaml"),
                format!("image: {n}:v2"),
            )
        })
        .collect();
    let second = git
        .lock()
        .commit(REPO, "Dev <dev@example.com>", "bump", unix_ms(), files);
    eventually("changed apps reported at the new revision", || {
        let apps = platform.apps_of("acme");
        let changed: Vec<String> = changed.iter().map(|n| key(n)).collect();
        let second = second.clone();
        async move {
            let behind: Vec<&String> = changed
                .iter()
                .filter(|n| {
                    !apps
                        .get(*n)
                        .is_some_and(|a| a.revision == second && a.sync_status == "Synced")
                })
                .collect();
            if behind.is_empty() {
                Ok(())
            } else {
                Err(format!("{} apps behind", behind.len()))
            }
        }
    })
    .await;

    // 4. A deleted app is reported deleted.
    apps.delete("app-07", &DeleteParams::default())
        .await
        .expect("delete app-07");
    let deleted = key("app-07");
    eventually("the deleted app reported deleted", || {
        let apps = platform.apps_of("acme");
        let deleted = deleted.clone();
        async move {
            if apps.get(&deleted).is_some_and(|a| a.deleted) {
                Ok(())
            } else {
                Err(format!("{:?}", apps.get(&deleted)))
            }
        }
    })
    .await;

    for task in tasks {
        task.abort();
    }
    if let Err(e) = cluster.cleanup(&namespace).await {
        eprintln!("warning: cleanup of {namespace}: {e}");
    }
    println!("runtime: {} reporter ({REPLICAS} replicas, {APPS} apps) converged on a real API server; ownership as specified", variant.as_str());
    record_row(
        &format!("reporter-{}", variant.as_str()),
        &format!("{} application event reporter, {REPLICAS} replicas and {APPS} apps: the platform converges and each app is reported by its owner only ({})", variant.as_str(), match variant { Variant::Faithful => "FNV sharding by pod ordinal", Variant::Hardened => "Lease ownership" }),
    );
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn faithful_reporter_replicas_converge_on_a_real_api_server_with_fnv_sharding() {
    reporter_suite(Variant::Faithful).await;
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn hardened_reporter_replicas_converge_on_a_real_api_server_with_lease_ownership() {
    reporter_suite(Variant::Hardened).await;
}

/// The app-proxy, unchanged, terminates a real Argo `Workflow` and syncs and refreshes real
/// `Application`s by patching them through the real API server, after authorising the
/// caller with permissions from the platform (a rule limited to one destination namespace).
#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_app_proxy_terminates_a_real_workflow() {
    use orrery_system::platform::assembly::{GatewayConfig, TunnelServerConfig};
    use orrery_system::platform::tunnel as tunnel_server;
    use orrery_system::runtime::app_proxy::{self, workflow_resource};

    let (cluster, namespace) = prepared(format!("orrery-app-proxy-{}", std::process::id())).await;
    let workflows: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &workflow_resource());
    let mut workflow = DynamicObject::new("build-42", &workflow_resource()).within(&namespace);
    workflow.data = json!({"spec": {"entrypoint": "main"}});
    workflows
        .create(&PostParams::default(), &workflow)
        .await
        .expect("create a Workflow");

    // The platform's permissions, served by an in-process gateway on loopback.
    let state = ControlPlaneState::default();
    state
        .permissions
        .grant_in("ops-token", "acme", "ops", &["workflows:terminate"]);
    // carol may sync and refresh only the apps that deploy to team-a.
    {
        use orrery_system::platform::permissions::{Attributes, Pattern, Role, Rule};
        state
            .permissions
            .add_user("carol-token", "acme", "carol", Role::Member, &["dev"]);
        state.permissions.add_rule(
            "acme",
            Rule {
                teams: vec!["dev".into()],
                actions: [
                    "applications:sync".to_string(),
                    "applications:refresh".to_string(),
                ]
                .into(),
                attributes: Attributes {
                    namespaces: vec![Pattern("team-a".into())],
                    ..Attributes::default()
                },
                ..Rule::default()
            },
        );
    }
    let applications: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &application_resource());
    for (name, destination) in [("web", "team-a"), ("db", "team-b")] {
        let mut application = app(name, &namespace);
        application.data["spec"]["project"] = json!("default");
        application.data["spec"]["destination"] =
            json!({"server": "https://kubernetes.default.svc", "namespace": destination});
        applications
            .create(&PostParams::default(), &application)
            .await
            .expect("create an Application");
    }
    let (platform_port, proxy_port, tunnel_port) = (free_port(), free_port(), free_port());
    let gateway = ControlPlaneConfig {
        tunnel: Some(TunnelServerConfig {
            listen: format!("127.0.0.1:{tunnel_port}"),
            config: tunnel_server::Config::new(Variant::Hardened),
        }),
        gateway: Some(GatewayConfig {
            listen: format!("127.0.0.1:{platform_port}"),
            admin_token: "adm".into(),
        }),
        events: None,
        promotions: None,
        runner: None,
        monitor: None,
        cron: None,
        anti_entropy: None,
        vclusters: Vec::new(),
        database: None,
    };
    let platform = tokio::spawn(async move {
        let env = Arc::new(RealEnv::new("platform"));
        drop(control_plane::run(env, gateway, state, std::future::pending()).await)
    });
    let config = kube::Config::infer().await.expect("kubeconfig");
    let proxy_config = app_proxy::Config {
        platform_addr: format!("127.0.0.1:{platform_port}"),
        git_addr: "127.0.0.1:9".into(),
        sources_addr: None,
        kube: KubeTarget::real(config, &namespace),
        permissions_ttl: Duration::from_secs(30),
        runtime: String::new(),
        account: "acme".into(),
        listen: format!("127.0.0.1:{proxy_port}"),
    };
    let proxy_only = RuntimeConfig {
        app_proxy: Some(proxy_config),
        ..Default::default()
    };
    let proxy = tokio::spawn(async move {
        let env = Arc::new(RealEnv::new("app-proxy"));
        drop(runtime_assembly::run(env, proxy_only, std::future::pending()).await)
    });

    let terminate = |token: &'static str| {
        post_as(
            format!("http://127.0.0.1:{proxy_port}/app-proxy/api/workflows/{namespace}/build-42/terminate"),
            token,
            "",
        )
    };
    eventually("the app-proxy answers", || async {
        terminate("nobody")
            .await
            .map(|_| ())
            .ok_or_else(|| "no answer".to_string())
    })
    .await;
    assert_eq!(
        terminate("nobody").await,
        Some(401),
        "an unknown token is refused"
    );
    assert_eq!(terminate("ops-token").await, Some(200));
    let patched = workflows.get("build-42").await.expect("get the Workflow");
    assert_eq!(
        patched.data["spec"]["shutdown"], "Terminate",
        "spec.shutdown set on the real Workflow"
    );
    // Sync and refresh real Applications: the real API server takes the app-proxy's merge
    // patches under the real Application CRD's schema; carol's rule is judged against
    // each app's destination namespace.
    let act = |app: &'static str, action: &'static str, body: &'static str| {
        post_as(
            format!("http://127.0.0.1:{proxy_port}/app-proxy/api/applications/{namespace}/{app}/{action}"),
            "carol-token",
            body,
        )
    };
    assert_eq!(
        act("web", "sync", r#"{"revision": "abc123"}"#).await,
        Some(200)
    );
    assert_eq!(act("web", "refresh", "{}").await, Some(200));
    assert_eq!(
        act("db", "sync", "{}").await,
        Some(404),
        "db deploys to team-b, outside carol's rule, and she may not read it either: answered as a missing app"
    );
    assert_eq!(act("missing", "sync", "{}").await, Some(404));
    let web = applications.get("web").await.expect("get web");
    assert_eq!(
        web.data["operation"],
        json!({"sync": {"revision": "abc123"}, "initiatedBy": {"username": "carol"}}),
        "the sync operation as the real server stored it"
    );
    assert_eq!(
        web.metadata
            .annotations
            .unwrap_or_default()
            .get("argocd.argoproj.io/refresh")
            .map(String::as_str),
        Some("normal")
    );
    let db = applications.get("db").await.expect("get db");
    assert!(
        db.data.get("operation").is_none_or(Value::is_null),
        "db untouched"
    );
    platform.abort();
    proxy.abort();
    let _ = cluster.cleanup(&namespace).await;
    println!("runtime: the app-proxy terminated a real Workflow and synced and refreshed a real Application through the real API server");
    record_row("app-proxy", "the app-proxy, authorised by the platform's permissions (a rule limited to a destination namespace), terminates a real Argo Workflow and syncs and refreshes a real Application through the real API server; an app outside the rule, which the user may not read either, is answered as a missing one (404)");
}

/// The platform's anti-entropy job (hardened), unchanged, in real mode: no reporter runs,
/// so the read model starts empty; the job lists the runtime's real Applications through
/// the tunnel, the router and the app-proxy (which asks the gateway what the job's token
/// may do), and sends them through the events path. A status changed and an app deleted on
/// the real API server are shown at the next pass; each repair is audited.
#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_platforms_anti_entropy_job_fills_and_repairs_its_read_model_from_real_applications() {
    use orrery_system::platform::anti_entropy;
    use orrery_system::platform::assembly::{GatewayConfig, TunnelServerConfig};
    use orrery_system::platform::tunnel as tunnel_server;
    use orrery_system::runtime::app_proxy;
    use orrery_system::runtime::assembly::RouterConfig;
    use orrery_system::runtime::router::Routes;
    use orrery_system::runtime::tunnel_client;

    let (cluster, namespace) =
        prepared(format!("orrery-anti-entropy-{}", std::process::id())).await;
    let applications: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &application_resource());
    for (name, destination, sync) in [("web", "team-a", "Synced"), ("db", "team-b", "OutOfSync")] {
        let mut application = app(name, &namespace);
        application.data["spec"]["project"] = json!("default");
        application.data["spec"]["destination"] =
            json!({"server": "https://kubernetes.default.svc", "namespace": destination});
        application.data["status"] =
            json!({"sync": {"status": sync, "revision": "abc"}, "health": {"status": "Healthy"}});
        applications
            .create(&PostParams::default(), &application)
            .await
            .expect("create an Application");
    }
    let state = ControlPlaneState {
        events: Some(Platform::new(events::Config {
            tokens: BTreeMap::new(),
            bus_capacity: 1_000,
            durability: events::bus::Durability::of(Variant::Hardened),
            idempotency_keys: true,
        })),
        ..ControlPlaneState::default()
    };
    state.registry.insert("tok-1", "acme", "prod");
    let (read_model, audit) = (state.events.clone().unwrap(), state.audit.clone());
    let (gateway_port, events_port, tunnel_port, proxy_port) =
        (free_port(), free_port(), free_port(), free_port());
    let platform_config = ControlPlaneConfig {
        tunnel: Some(TunnelServerConfig {
            listen: format!("127.0.0.1:{tunnel_port}"),
            config: tunnel_server::Config::new(Variant::Hardened),
        }),
        gateway: Some(GatewayConfig {
            listen: format!("127.0.0.1:{gateway_port}"),
            admin_token: "adm".into(),
        }),
        events: Some(format!("127.0.0.1:{events_port}")),
        anti_entropy: Some(anti_entropy::Config {
            every: Duration::from_secs(1),
            ..anti_entropy::Config::default()
        }),
        ..ControlPlaneConfig::default()
    };
    let platform = tokio::spawn(async move {
        let env = Arc::new(RealEnv::new("platform"));
        drop(control_plane::run(env, platform_config, state, std::future::pending()).await)
    });
    let config = kube::Config::infer().await.expect("kubeconfig");
    let runtime_config = RuntimeConfig {
        tunnels: vec![tunnel_client::Config::new(
            Variant::Hardened,
            &format!("127.0.0.1:{tunnel_port}"),
            "acme-prod",
            "tok-1",
        )],
        router: Some(RouterConfig {
            routes: Routes {
                app_proxy: format!("127.0.0.1:{proxy_port}"),
                ..Default::default()
            },
            ingress: None,
        }),
        app_proxy: Some(app_proxy::Config {
            platform_addr: format!("127.0.0.1:{gateway_port}"),
            git_addr: "127.0.0.1:9".into(),
            sources_addr: None,
            kube: KubeTarget::real(config, &namespace),
            permissions_ttl: Duration::from_secs(30),
            runtime: "prod".into(),
            account: "acme".into(),
            listen: format!("127.0.0.1:{proxy_port}"),
        }),
        ..Default::default()
    };
    let runtime = tokio::spawn(async move {
        let env = Arc::new(RealEnv::new("runtime"));
        drop(runtime_assembly::run(env, runtime_config, std::future::pending()).await)
    });
    let shown = |key: &str| {
        read_model
            .apps_of("acme-prod")
            .get(&format!("{namespace}/{key}"))
            .map(|s| (s.sync_status.clone(), s.health_status.clone(), s.deleted))
    };
    eventually(
        "the job lists both apps into the empty read model",
        || async {
            let (web, db) = (shown("web"), shown("db"));
            let want = (
                Some(("Synced".to_string(), "Healthy".to_string(), false)),
                Some(("OutOfSync".to_string(), "Healthy".to_string(), false)),
            );
            ((web.clone(), db.clone()) == want)
                .then_some(())
                .ok_or(format!("web {web:?}, db {db:?}"))
        },
    )
    .await;
    let mut web = applications.get("web").await.expect("get web");
    web.data["status"]["sync"]["status"] = json!("OutOfSync");
    applications
        .replace("web", &PostParams::default(), &web)
        .await
        .expect("change web's status");
    applications
        .delete("db", &DeleteParams::default())
        .await
        .expect("delete db");
    eventually(
        "the next pass shows web's new status and db deleted",
        || async {
            let (web, db) = (shown("web"), shown("db"));
            (web.as_ref().is_some_and(|w| w.0 == "OutOfSync") && db.as_ref().is_some_and(|d| d.2))
                .then_some(())
                .ok_or(format!("web {web:?}, db {db:?}"))
        },
    )
    .await;
    let repairs: Vec<String> = audit
        .all()
        .into_iter()
        .filter(|e| e.action == "cron anti-entropy")
        .map(|e| e.reason)
        .collect();
    assert!(
        repairs.iter().any(|r| r.contains("2 sent again"))
            && repairs.iter().any(|r| r.contains("1 shown deleted")),
        "every repair audited: {repairs:?}"
    );
    platform.abort();
    runtime.abort();
    let _ = cluster.cleanup(&namespace).await;
    println!("runtime: the platform's anti-entropy job filled and repaired its read model from real Applications through the tunnel and the app-proxy");
    record_row("app-proxy anti-entropy", "the platform's anti-entropy job (hardened) lists a runtime's real Applications through its tunnel, router and app-proxy with a token good for that one listing, and fills an empty read model from them; a status changed and an app deleted on the real API server are shown at the next pass, each repair audited");
}

/// `POST url` with `body` as the user of `token`: the answer's status, or `None`.
async fn post_as(url: String, token: &'static str, body: &'static str) -> Option<u16> {
    let env: SharedEnv = Arc::new(RealEnv::new("caller"));
    let client = orrery_system::env::http::client::<http_body_util::Full<bytes::Bytes>>(
        env,
        Duration::from_secs(10),
    );
    let request = http::Request::post(url)
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .ok()?;
    client
        .request(request)
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

/// The app `name` as the real API server holds it: (sync, health, condition types).
async fn app_state(
    apps: &Api<DynamicObject>,
    name: &str,
) -> Result<(String, String, Vec<String>), String> {
    let app = apps.get(name).await.map_err(|e| e.to_string())?;
    let text = |p: &str| {
        app.data
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let conditions = app
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|c| c["type"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok((
        text("/status/sync/status"),
        text("/status/health/status"),
        conditions,
    ))
}

/// Argo CD's stand-in against two API servers: the real kube-apiserver as the management
/// cluster (Applications and the cluster Secret live there) and an in-process `orrery
/// apiserver` on loopback as a destination cluster, which is stopped and started again;
/// plus an app whose destination is not registered at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn argo_cd_marks_apps_unknown_while_their_destination_cluster_is_down_and_recovers() {
    use k8s_openapi::api::core::v1::Secret;
    use orrery_sim::world::apiserver::{self, ApiServer};
    use orrery_sim::world::argocd::clusters::SECRET_TYPE_LABEL;

    let (cluster, namespace) = prepared(format!("orrery-clusters-{}", std::process::id())).await;
    let config = kube::Config::infer().await.expect("kubeconfig");
    let target = KubeTarget::real(config, &namespace);

    // The destination cluster: a second API server, plain HTTP on loopback.
    let dest_port = free_port();
    let dest_addr = format!("127.0.0.1:{dest_port}");
    let start_destination = || {
        let addr = dest_addr.clone();
        tokio::spawn(async move {
            let env: SharedEnv = Arc::new(RealEnv::new("cluster-a"));
            drop(apiserver::run(env, ApiServer::new(Default::default()), &addr).await)
        })
    };
    let destination = start_destination();
    let server = format!("http://{dest_addr}");

    // Registered as Argo CD registers clusters: a labelled Secret in its namespace.
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), &namespace);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cluster-a", "labels": {SECRET_TYPE_LABEL: "cluster"}},
        "stringData": {"name": "cluster-a", "server": server, "config": "{\"tlsClientConfig\":{\"insecure\":true}}"}
    }))
    .expect("a Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the cluster Secret");

    let git = SharedGit::default();
    let names = ["dest-a", "dest-b", "nowhere"];
    let files: BTreeMap<String, String> = names
        .iter()
        .map(|n| {
            (
                format!("apps/{n}/deployment.yaml"),
                format!("image: {n}:v1"),
            )
        })
        .collect();
    git.lock()
        .commit(REPO, "Dev <dev@example.com>", "init", unix_ms(), files);
    let argo_config = argocd::controller::Config {
        reconcile_every: Duration::from_secs(2),
        namespace: namespace.clone(),
        listen: format!("127.0.0.1:{}", free_port()),
        ..Default::default()
    };
    let argo = tokio::spawn({
        let run = argocd::run(
            Arc::new(RealEnv::new("argocd")),
            target.clone(),
            git.clone(),
            HealthOverrides::default(),
            argo_config,
            ARGO_TOKEN,
        );
        async move { drop(run.await) }
    });
    let apps: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &application_resource());
    for name in names {
        let mut object = app(name, &namespace);
        let destination = if name == "nowhere" {
            "http://127.0.0.1:1".to_string()
        } else {
            server.clone()
        };
        object.data["spec"]["destination"] = json!({"server": destination, "namespace": name});
        apps.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }

    let expect = |wanted: [(
        &'static str,
        &'static str,
        &'static str,
        Option<&'static str>,
    ); 3]| {
        let apps = apps.clone();
        move || {
            let apps = apps.clone();
            async move {
                for (name, sync, health, condition) in wanted {
                    let (s, h, conditions) = app_state(&apps, name).await?;
                    let has = |c: &str| conditions.iter().any(|x| x == c);
                    let ok = s == sync
                        && h == health
                        && match condition {
                            Some(c) => has(c),
                            None => !has("ComparisonError") && !has("InvalidSpecError"),
                        };
                    if !ok {
                        return Err(format!("{name}: {s}/{h} {conditions:?}"));
                    }
                }
                Ok(())
            }
        }
    };
    let unregistered = ("nowhere", "Unknown", "Unknown", Some("InvalidSpecError"));
    eventually(
        "apps on the registered destination synced and healthy; the other Unknown",
        expect([
            ("dest-a", "Synced", "Healthy", None),
            ("dest-b", "Synced", "Healthy", None),
            unregistered,
        ]),
    )
    .await;

    // The destination goes away: its apps go Unknown with a ComparisonError.
    destination.abort();
    let _ = destination.await;
    eventually(
        "apps on the stopped destination Unknown with a ComparisonError",
        expect([
            ("dest-a", "Unknown", "Unknown", Some("ComparisonError")),
            ("dest-b", "Unknown", "Unknown", Some("ComparisonError")),
            unregistered,
        ]),
    )
    .await;

    // It comes back: the comparison recovers and the condition goes.
    let destination = start_destination();
    eventually(
        "apps on the restarted destination synced and healthy again",
        expect([
            ("dest-a", "Synced", "Healthy", None),
            ("dest-b", "Synced", "Healthy", None),
            unregistered,
        ]),
    )
    .await;
    destination.abort();
    argo.abort();
    eprintln!(
        "runtime: Argo CD's stand-in on a real management cluster followed a destination cluster down and back up"
    );
    let _ = cluster.cleanup(&namespace).await;
    record_row("destination", "Argo CD's stand-in on a real management cluster marks apps Unknown while their destination cluster (an `orrery apiserver`) is down, recovers when it is back, and an app whose destination is not registered stays Unknown");
}

/// Orrery's Argo CD (real mode, `config`, accepting `tokens`) and the platform's events path
/// (from its assembly) on loopback: the platform, its port and the tasks running them.
fn argocd_and_platform(
    target: &KubeTarget,
    git: &SharedGit,
    config: argocd::controller::Config,
    tokens: argocd::Tokens,
) -> (Arc<Platform>, u16, Vec<tokio::task::JoinHandle<()>>) {
    let platform_port = free_port();
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn({
        let run = argocd::run(
            Arc::new(RealEnv::new("argocd")),
            target.clone(),
            git.clone(),
            HealthOverrides::default(),
            config,
            tokens,
        );
        async move { drop(run.await) }
    }));
    let platform = Platform::new(events::Config {
        tokens: [(TOKEN.to_string(), "acme".to_string())]
            .into_iter()
            .collect(),
        bus_capacity: 1000,
        durability: Default::default(),
        idempotency_keys: false,
    });
    let state = ControlPlaneState {
        events: Some(platform.clone()),
        ..Default::default()
    };
    let events_only = ControlPlaneConfig {
        events: Some(format!("127.0.0.1:{platform_port}")),
        ..Default::default()
    };
    tasks.push(tokio::spawn(async move {
        let env = Arc::new(RealEnv::new("platform"));
        drop(control_plane::run(env, events_only, state, std::future::pending()).await)
    }));
    (platform, platform_port, tasks)
}

/// Argo CD (accepting `tokens`, managing `namespace` and `more_namespaces`), the platform's
/// events path and one reporter replica of `variant` (configured further by `configure`),
/// in-process on loopback around the real API server. Returns the platform and the tasks.
fn one_replica_world(
    variant: Variant,
    target: &KubeTarget,
    namespace: &str,
    git: &SharedGit,
    tokens: argocd::Tokens,
    more_namespaces: &[String],
    configure: impl FnOnce(&mut app_reporter::Config),
) -> (Arc<Platform>, Vec<tokio::task::JoinHandle<()>>) {
    let (argocd_port, cache_port) = (free_port(), free_port());
    let argo_config = argocd::controller::Config {
        reconcile_every: Duration::from_secs(1),
        namespace: namespace.to_string(),
        application_namespaces: more_namespaces.to_vec(),
        listen: format!("127.0.0.1:{argocd_port}"),
        ..Default::default()
    };
    let (platform, platform_port, mut tasks) =
        argocd_and_platform(target, git, argo_config, tokens);
    let mut config = app_reporter::Config::new(variant, target.clone(), namespace);
    config.argocd_addr = format!("127.0.0.1:{argocd_port}");
    config.platform_addr = format!("127.0.0.1:{platform_port}");
    config.runtime_token = TOKEN.into();
    config.cache_addr = format!("127.0.0.1:{cache_port}");
    config.serve_addr = format!("127.0.0.1:{}", free_port());
    config.application_namespaces = more_namespaces.to_vec();
    configure(&mut config);
    let runtime = RuntimeConfig {
        app_reporter: Some(config),
        cache: Some(format!("127.0.0.1:{cache_port}")),
        ..Default::default()
    };
    tasks.push(tokio::spawn(async move {
        let env: SharedEnv = Arc::new(RealEnv::new("reporter-0"));
        drop(runtime_assembly::run(env, runtime, std::future::pending()).await)
    }));
    (platform, tasks)
}

/// An existing Argo CD: the runtime's token lives in Secret `argocd-token` on the real API
/// server. Argo CD revokes it and issues another; the Secret is updated. Both variants keep
/// reporting (sync and health come from the watched Application), but only hardened follows
/// the Secret: its next events carry no Argo CD read errors, while faithful's keep the 401s
/// until a restart. Also: no replica works before the Secret exists.
async fn token_rotation_suite(variant: Variant) {
    use k8s_openapi::api::core::v1::Secret;
    let (cluster, namespace) = prepared(format!(
        "orrery-token-{}-{}",
        std::process::id(),
        variant.as_str()
    ))
    .await;
    let config = kube::Config::infer().await.expect("kubeconfig");
    let target = KubeTarget::real(config, &namespace);
    let git = SharedGit::default();
    git.lock().commit(
        REPO,
        "Dev <dev@example.com>",
        "init",
        unix_ms(),
        BTreeMap::from([(
            "apps/tok/deployment.yaml".to_string(),
            "image: tok:v1".to_string(),
        )]),
    );
    let tokens = argocd::Tokens::from("argocd-token-1");
    let (platform, tasks) = one_replica_world(
        variant,
        &target,
        &namespace,
        &git,
        tokens.clone(),
        &[],
        |config| config.argocd_token_secret = Some("argocd-token".into()),
    );

    let apps: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &application_resource());
    apps.create(&PostParams::default(), &app("tok", &namespace))
        .await
        .expect("create the app");
    let key = format!("{namespace}/tok");
    // No Secret yet: the replica waits instead of reporting with no token.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !platform.apps_of("acme").contains_key(&key),
        "nothing is reported before the token Secret exists"
    );
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), &namespace);
    let secret = |token: &str| -> Secret {
        serde_json::from_value(
            json!({"metadata": {"name": "argocd-token"}, "stringData": {"token": token}}),
        )
        .expect("a Secret")
    };
    secrets
        .create(&PostParams::default(), &secret("argocd-token-1"))
        .await
        .expect("create the token Secret");
    let reported = |wanted_errors: u32, revision: String| {
        let (platform, key) = (platform.clone(), key.clone());
        move || {
            let (platform, key, revision) = (platform.clone(), key.clone(), revision.clone());
            async move {
                match platform.apps_of("acme").get(&key) {
                    Some(a) if a.revision == revision && a.read_errors == wanted_errors => Ok(()),
                    other => Err(format!("platform shows {other:?}")),
                }
            }
        }
    };
    let first = git.lock().head(REPO).expect("a head").sha.clone();
    eventually(
        "the app reported with the first token, no read errors",
        reported(0, first),
    )
    .await;

    // The token is revoked; the next change is reported with Argo CD's 401s as read errors.
    let second_token = tokens.rotate();
    let commit = |version: u32| {
        git.lock().commit(
            REPO,
            "Dev <dev@example.com>",
            &format!("v{version}"),
            unix_ms(),
            BTreeMap::from([(
                "apps/tok/deployment.yaml".to_string(),
                format!("image: tok:v{version}"),
            )]),
        )
    };
    let second = commit(2);
    eventually(
        "the next change reported with the revoked token's read errors",
        reported(2, second.clone()),
    )
    .await;

    // The operator puts the new token into the Secret.
    secrets
        .replace(
            "argocd-token",
            &PostParams::default(),
            &secret(&second_token),
        )
        .await
        .expect("update the token Secret");
    match variant {
        Variant::Hardened => {
            eventually(
                "hardened re-sent the app with the new token: no read errors",
                reported(0, second),
            )
            .await
        }
        Variant::Faithful => {
            // A further change still goes out with the old token's errors.
            let third = commit(3);
            eventually(
                "faithful still reports with the revoked token until a restart",
                reported(2, third),
            )
            .await
        }
    }
    for task in tasks {
        task.abort();
    }
    let _ = cluster.cleanup(&namespace).await;
    record_row(
        &format!("token-{}", variant.as_str()),
        &format!(
            "{} reporter through a rotation of its Argo CD token Secret: {}",
            variant.as_str(),
            match variant {
                Variant::Faithful =>
                    "keeps the revoked token it read at start, as the real reporter",
                Variant::Hardened => "follows the Secret to the new token",
            }
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn faithful_reporter_keeps_a_revoked_argo_cd_token_read_from_its_secret_at_start() {
    token_rotation_suite(Variant::Faithful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn hardened_reporter_follows_its_argo_cd_token_secret_through_a_rotation() {
    token_rotation_suite(Variant::Hardened).await;
}

/// Apps in any namespace on a real API server: Argo CD and the reporter watch every
/// namespace and keep the listed ones; an app-of-apps parent's sync creates its child in
/// another namespace, and the child reaches the platform as its parent's child event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn apps_in_several_namespaces_and_an_app_of_apps_child_reach_the_platform() {
    let pid = std::process::id();
    let (cluster, home) = prepared(format!("orrery-ns-{pid}-home")).await;
    let (team, other) = (
        format!("orrery-ns-{pid}-team"),
        format!("orrery-ns-{pid}-other"),
    );
    for namespace in [&team, &other] {
        cluster
            .prepare(namespace)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let config = kube::Config::infer().await.expect("kubeconfig");
    let target = KubeTarget::real(config, &home);
    let git = SharedGit::default();
    let child = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: kid, namespace: {team}}}\nspec: {{project: default, source: {{repoURL: \"{REPO}\", path: apps/kid}}, syncPolicy: {{automated: {{}}}}}}\n"
    );
    let files = BTreeMap::from([
        ("roots/root/kid.yaml".to_string(), child),
        (
            "apps/kid/deployment.yaml".to_string(),
            "image: kid:v1".to_string(),
        ),
        (
            "apps/solo/deployment.yaml".to_string(),
            "image: solo:v1".to_string(),
        ),
        (
            "apps/stray/deployment.yaml".to_string(),
            "image: stray:v1".to_string(),
        ),
    ]);
    git.lock()
        .commit(REPO, "Dev <dev@example.com>", "init", unix_ms(), files);
    let (platform, tasks) = one_replica_world(
        Variant::Hardened,
        &target,
        &home,
        &git,
        argocd::Tokens::from(ARGO_TOKEN),
        std::slice::from_ref(&team),
        |config| config.argocd_token = ARGO_TOKEN.into(),
    );
    let create = |namespace: &str, name: &str, path: &str| {
        let mut object = app(name, namespace);
        object.data["spec"]["source"]["path"] = json!(path);
        let apps: Api<DynamicObject> =
            Api::namespaced_with(cluster.client(), namespace, &application_resource());
        let name = name.to_string();
        async move {
            apps.create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("create {name}: {e}"));
        }
    };
    create(&home, "root", "roots/root").await;
    create(&team, "solo", "apps/solo").await;
    create(&other, "stray", "apps/stray").await;
    let wanted = [
        format!("{home}/root"),
        format!("{team}/solo"),
        format!("{team}/kid"),
    ];
    eventually(
        "apps of both managed namespaces, the child included, reported Synced",
        || {
            let (apps, wanted) = (platform.apps_of("acme"), wanted.clone());
            async move {
                match wanted
                    .iter()
                    .find(|k| apps.get(*k).is_none_or(|a| a.sync_status != "Synced"))
                {
                    None => Ok(()),
                    Some(k) => Err(format!(
                        "{k}: {:?}; platform knows {:?}",
                        apps.get(k),
                        apps.keys()
                    )),
                }
            }
        },
    )
    .await;
    let kid: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &team, &application_resource());
    let kid = kid.get("kid").await.expect("the child exists");
    assert_eq!(
        kid.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/instance"))
            .map(String::as_str),
        Some("root"),
        "created by the parent's sync, with its instance label"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !platform
            .apps_of("acme")
            .contains_key(&format!("{other}/stray")),
        "an app in a namespace neither Argo CD nor the reporter manages is not reported"
    );
    for task in tasks {
        task.abort();
    }
    for namespace in [&home, &team, &other] {
        let _ = cluster.cleanup(namespace).await;
    }
    record_row("namespaces", "apps in several namespaces and an app-of-apps child created by its parent's sync reach the platform (Argo CD and the reporter watch every namespace)");
}

/// Keeps each test's row and rewrites the runtime section of `reports/conformance.md` with
/// the rows so far (the tests run one at a time; rows keep a fixed order by key). A row is
/// written only when its test's checks passed.
pub(crate) fn record_row(key: &str, behaviour: &str) {
    static ROWS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    // Against k3s (make conformance-k3s, beside the kube-apiserver run) the rows go to a
    // section of their own, so neither run overwrites the other's.
    if std::env::var("ORRERY_CONFORMANCE_CLUSTER").as_deref() == Ok("k3s") {
        record_section_row(
            &ROWS,
            "runtime-k3s",
            "## runtime on k3s: orrery's runtime components against a real k3s cluster\n\n- The same suite against k3s in Docker, with its controllers, kubelet and namespace lifecycle (`make conformance-k3s`, testcontainers); one row per test.\n\n",
            key,
            behaviour,
        );
        return;
    }
    record_section_row(
        &ROWS,
        "runtime",
        "## runtime: orrery's runtime components against a real kube-apiserver\n\n- The runtime's components, unchanged, in real mode against the real kube-apiserver (`conformance/kube/run.sh`; kind with `make conformance`), with Argo CD's stand-in and the platform in process; one row per test.\n\n",
        key,
        behaviour,
    );
}

/// [`record_row`] for section `section` of `reports/conformance.md`, opened by `head`, its
/// rows kept in `rows`.
pub(crate) fn record_section_row(
    rows: &std::sync::Mutex<Vec<(String, String)>>,
    section: &str,
    head: &str,
    key: &str,
    behaviour: &str,
) {
    let mut rows = rows.lock().unwrap();
    rows.retain(|(k, _)| k != key);
    rows.push((key.to_string(), format!("| {behaviour} | passes |")));
    rows.sort();
    let mut body = String::from(head);
    body.push_str("| behaviour | verdict |\n|---|---|\n");
    for (_, row) in rows.iter() {
        body.push_str(row);
        body.push('\n');
    }
    orrery_conformance::report::write_section(section, &body)
        .expect("write reports/conformance.md");
}
