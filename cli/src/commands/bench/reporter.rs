//! `orrery bench`: the reporter's hot path in real mode (tokio, loopback TCP), for both
//! variants. Wall-clock figures: they go to the ungated perf report, never to gated ones.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kube::api::DynamicObject;
use serde_json::{json, Value};

use base64::prelude::{Engine as _, BASE64_STANDARD};
use orrery_system::core::event::{EventPayload, Source};
use orrery_system::core::Variant;
use orrery_system::env::{RealEnv, SharedEnv};
use orrery_system::platform::events::{self, Platform};
use orrery_system::runtime::app_reporter::dedup::AppFingerprint;
use orrery_system::runtime::app_reporter::process::encode_event;
use orrery_system::runtime::app_reporter::{application_resource, queue};

const TOKEN: &str = "bench-token";

fn app(i: usize) -> DynamicObject {
    let mut app =
        DynamicObject::new(&format!("app-{i:05}"), &application_resource()).within("argocd");
    app.metadata.resource_version = Some((i + 1).to_string());
    app.data = json!({
        "spec": {"source": {"repoURL": "https://git.example/r.git", "path": format!("apps/app-{i:05}")}},
        "status": {"sync": {"status": "Synced", "revision": "0123456789abcdef0123456789abcdef01234567"}, "health": {"status": "Healthy"},
                   "history": [{"id": 1, "revision": "0123456789abcdef0123456789abcdef01234567"}]},
    });
    app
}

fn payload(app: &DynamicObject) -> EventPayload {
    EventPayload {
        timestamp: "2026-01-01T00:00:00Z".into(),
        object: BASE64_STANDARD.encode(serde_json::to_vec(app).unwrap_or_default()),
        source: Source {
            app_name: app.metadata.name.clone().unwrap_or_default(),
            desired_manifest: "kind: Deployment\nspec: {replicas: 2}\n".repeat(4),
            actual_manifest: "kind: Deployment\nspec: {replicas: 2}\n".repeat(4),
            sync_status: "Synced".into(),
            health_status: "Healthy".into(),
            ..Source::default()
        },
        errors: vec![],
        app_versions: Value::Null,
        idempotency_key: None,
    }
}

/// Per-event cost of queueing, dedup digest and serialisation (gzip JSON), in ns.
fn hot_path_ns(variant: Variant, apps: &[DynamicObject]) -> f64 {
    let started = Instant::now(); // determinism: real-env (benchmark)
    let mut bytes = 0usize;
    match variant {
        Variant::Faithful => {
            let mut q = queue::FaithfulQueue::new(queue::QUEUE_CAPACITY);
            for a in apps {
                q.push(a);
                if let Some(a) = q.pop() {
                    let _ = AppFingerprint::of(a);
                    bytes += encode_event(&payload(a)).map(|b| b.len()).unwrap_or(0);
                }
            }
        }
        Variant::Hardened => {
            let mut q = queue::CoalescingQueue::new(queue::QUEUE_CAPACITY);
            for a in apps {
                let name = a.metadata.name.clone().unwrap_or_default();
                q.push(&name);
                q.push(&name); // a second change before processing coalesces
                if let Some(next) = q.pop() {
                    let _ = AppFingerprint::of(a);
                    bytes += encode_event(&payload(a)).map(|b| b.len()).unwrap_or(0);
                    q.done(&next);
                }
            }
        }
    }
    assert!(bytes > 0, "the benchmark serialised nothing");
    started.elapsed().as_nanos() as f64 / apps.len() as f64
}

/// Events per second delivered to a local platform over loopback with `concurrency` senders.
async fn end_to_end(
    env: SharedEnv,
    addr: String,
    bodies: Arc<Vec<Bytes>>,
    concurrency: usize,
) -> f64 {
    let started = Instant::now(); // determinism: real-env (benchmark)
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let (env, addr, bodies) = (env.clone(), addr.clone(), bodies.clone());
        tasks.push(tokio::spawn(async move {
            let client =
                orrery_system::env::http::client::<Full<Bytes>>(env, Duration::from_secs(30));
            for body in bodies.iter().skip(worker).step_by(concurrency) {
                let request = http::Request::post(format!("http://{addr}/2.0/api/events"))
                    .header("authorization", TOKEN)
                    .header("content-encoding", "gzip")
                    .body(Full::new(body.clone()))
                    .expect("valid request");
                let response = client.request(request).await.expect("platform answers");
                assert!(
                    response.status().is_success(),
                    "platform refused: {}",
                    response.status()
                );
                let _ = response.into_body().collect().await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("sender finished");
    }
    bodies.len() as f64 / started.elapsed().as_secs_f64()
}

/// The benchmark's user (the gateway forwards only for a user of the runtime's account).
const BENCH_USER_TOKEN: &str = "bench-user-token";

/// `requests` GETs at `concurrency` against `url`: (requests per second, per-request latency
/// p50 and p99 in microseconds).
async fn load(
    env: SharedEnv,
    url: String,
    host: Option<&'static str>,
    requests: usize,
    concurrency: usize,
) -> (f64, u64, u64) {
    let started = Instant::now(); // determinism: real-env (benchmark)
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let (env, url) = (env.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let client =
                orrery_system::env::http::client::<Full<Bytes>>(env, Duration::from_secs(30));
            let mut latencies = Vec::new();
            for _ in (worker..requests).step_by(concurrency) {
                let sent = Instant::now(); // determinism: real-env (benchmark)
                                           // Every path gets the user's token the gateway needs, so all three carry
                                           // the same request.
                let mut request = http::Request::get(&url)
                    .header("authorization", format!("Bearer {BENCH_USER_TOKEN}"));
                if let Some(host) = host {
                    request = request.header("host", host);
                }
                let request = request
                    .body(Full::new(Bytes::new()))
                    .expect("valid request");
                let response = client.request(request).await.expect("answers");
                assert!(
                    response.status().is_success(),
                    "{url}: {}",
                    response.status()
                );
                let _ = response.into_body().collect().await;
                latencies.push(sent.elapsed().as_micros() as u64);
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("client finished"));
    }
    let rate = requests as f64 / started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |p: f64| {
        latencies
            .get(((p * latencies.len() as f64).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0)
    };
    (rate, at(0.50), at(0.99))
}

/// Request latency and throughput through platform gateway → tunnel (WebSocket + HTTP/2) →
/// router → upstream, against the same upstream reached directly, on loopback.
fn tunnel_bench(
    runtime: &tokio::runtime::Runtime,
    requests: usize,
    concurrency: usize,
) -> Result<Value, String> {
    use orrery_system::platform::assembly::{
        self as control_plane, ControlPlaneConfig, ControlPlaneState, GatewayConfig,
        TunnelServerConfig,
    };
    use orrery_system::platform::tunnel;
    use orrery_system::runtime::assembly::{self as runtime_assembly, RouterConfig, RuntimeConfig};
    use orrery_system::runtime::router::Routes;
    use orrery_system::runtime::tunnel_client;
    runtime.block_on(async {
        let env: SharedEnv = Arc::new(RealEnv::new("bench"));
        // A free loopback port (the assemblies bind their own addresses).
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.to_string())
                .map_err(|e| e.to_string())
        };
        let upstream = env.listen("127.0.0.1:0").await.map_err(|e| e.to_string())?;
        let upstream_addr = upstream.local_addr().map_err(|e| e.to_string())?;
        let (tunnel_addr, gateway_addr) = (free()?, free()?);
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(async move { drop(orrery_system::env::http::serve(upstream, |_, _| async { http::Response::new(orrery_system::env::http::full("ok")) }).await) }));
        let state = ControlPlaneState::default();
        state.registry.insert("bench-token", "bench", "runtime");
        state.permissions.grant_in(BENCH_USER_TOKEN, "bench", "bench-user", &[]);
        let platform = ControlPlaneConfig {
            tunnel: Some(TunnelServerConfig { listen: tunnel_addr.clone(), config: tunnel::Config::new(Variant::Hardened) }),
            gateway: Some(GatewayConfig { listen: gateway_addr.clone(), admin_token: "bench-admin".into() }),
            events: None,
            promotions: None,
            runner: None,
            monitor: None,
            cron: None,
            anti_entropy: None,
            vclusters: Vec::new(),
            database: None,
        };
        let platform_env = env.clone();
        tasks.push(tokio::spawn(async move { drop(control_plane::run(platform_env, platform, state, std::future::pending()).await) }));
        let runtime_config = RuntimeConfig {
            tunnels: vec![tunnel_client::Config::new(Variant::Hardened, &tunnel_addr, "bench-runtime", "bench-token")],
            router: Some(RouterConfig { routes: Routes { app_proxy: upstream_addr.clone(), ..Default::default() }, ingress: None }),
            ..Default::default()
        };
        let runtime_env = env.clone();
        tasks.push(tokio::spawn(async move { drop(runtime_assembly::run(runtime_env, runtime_config, std::future::pending()).await) }));
        // Up once a request goes through the tunnel.
        let probe = format!("http://{gateway_addr}/api/runtimes/bench-runtime/app-proxy/ping");
        let client = orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(5));
        let mut up = false;
        for _ in 0..500 {
            let request = http::Request::get(&probe).header("authorization", format!("Bearer {BENCH_USER_TOKEN}")).body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
            if client.request(request).await.is_ok_and(|r| r.status().is_success()) {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !up {
            return Err("the benchmark's tunnel did not come up".to_string());
        }
        let direct = load(env.clone(), format!("http://{upstream_addr}/app-proxy/ping"), None, requests, concurrency).await;
        let through = load(env.clone(), format!("http://{gateway_addr}/api/runtimes/bench-runtime/app-proxy/ping"), None, requests, concurrency).await;
        // The real frp 0.44 between the same load and the same upstream, when
        // conformance/frp/run.sh built it (make bench runs under it).
        let frp = match frp::Frp::start(&upstream_addr).await {
            Ok(Some(frp)) => {
                let measured = load(env.clone(), frp.url(), Some(frp::HOST), requests, concurrency).await;
                drop(frp);
                Some(measured)
            }
            Ok(None) => {
                eprintln!("  tunnel: FRP SKIPPED (no ORRERY_FRPC/ORRERY_FRPS; make bench builds frp with conformance/frp/run.sh)");
                None
            }
            Err(e) => {
                // frp is optional here as everywhere: say why, keep the other figures.
                eprintln!("  tunnel: FRP FAILED: {e}");
                None
            }
        };
        tasks.iter().for_each(|t| t.abort());
        let record = |(rate, p50, p99): (f64, u64, u64)| json!({"requests_per_second": rate.round(), "latency_p50_us": p50, "latency_p99_us": p99});
        eprintln!(
            "  tunnel: direct {:>6.0} req/s (p50 {} µs, p99 {} µs) vs orrery's tunnel {:>6.0} req/s (p50 {} µs, p99 {} µs), {concurrency} clients",
            direct.0, direct.1, direct.2, through.0, through.1, through.2
        );
        if let Some((rate, p50, p99)) = frp {
            eprintln!("  tunnel: real frp 0.44 {rate:>6.0} req/s (p50 {p50} µs, p99 {p99} µs), same load and upstream");
        }
        Ok(json!({"requests": requests, "concurrency": concurrency, "direct": record(direct), "through_tunnel": record(through), "through_frp": frp.map(record)}))
    })
}

/// The real frp for the tunnel benchmark: frps with an HTTP vhost port and frpc exposing the
/// benchmark's upstream under one custom domain, both on loopback, plain TCP (as orrery's
/// tunnel in this benchmark).
mod frp {
    use std::time::Duration;

    /// The custom domain frpc registers; requests carry it as their `Host`.
    pub const HOST: &str = "bench.frp.local";

    /// frps and frpc while the benchmark runs; both are killed on drop.
    pub struct Frp {
        children: Vec<std::process::Child>,
        vhost: u16,
        dir: std::path::PathBuf,
    }

    impl Frp {
        /// Starts frps and frpc (paths from `ORRERY_FRPS`/`ORRERY_FRPC`) in front of
        /// `upstream` and waits until a request goes through; `None` without the binaries.
        pub async fn start(upstream: &str) -> Result<Option<Frp>, String> {
            let (Ok(frps), Ok(frpc)) = (std::env::var("ORRERY_FRPS"), std::env::var("ORRERY_FRPC"))
            else {
                return Ok(None);
            };
            let free = || {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
                    .map_err(|e| e.to_string())
            };
            let (bind, vhost) = (free()?, free()?);
            let local_port = upstream.rsplit(':').next().unwrap_or_default();
            let dir = std::env::temp_dir().join(format!("orrery-bench-frp-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let write = |name: &str, text: String| {
                std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"))
            };
            write("frps.ini", format!("[common]\nbind_port = {bind}\nvhost_http_port = {vhost}\ntoken = bench\nlog_level = warn\n"))?;
            write("frpc.ini", format!("[common]\nserver_addr = 127.0.0.1\nserver_port = {bind}\ntoken = bench\nlog_level = warn\n\n[web]\ntype = http\nlocal_ip = 127.0.0.1\nlocal_port = {local_port}\ncustom_domains = {HOST}\n"))?;
            let spawn = |program: &str, config: &str| {
                let log = std::fs::File::create(dir.join(format!("{config}.log")))
                    .map_err(|e| e.to_string())?;
                std::process::Command::new(program)
                    .arg("-c")
                    .arg(dir.join(config))
                    .stdout(log.try_clone().map_err(|e| e.to_string())?)
                    .stderr(log)
                    .spawn()
                    .map_err(|e| format!("{program}: {e}"))
            };
            let mut frp = Frp {
                children: vec![spawn(&frps, "frps.ini")?],
                vhost,
                dir: dir.clone(),
            };
            // frpc exits if its first login finds no server: start it once frps listens.
            let mut listening = false;
            for _ in 0..500 {
                if tokio::net::TcpStream::connect(("127.0.0.1", bind))
                    .await
                    .is_ok()
                {
                    listening = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if !listening {
                return Err("frps did not listen within 10 s".into());
            }
            frp.children.push(spawn(&frpc, "frpc.ini")?);
            let env: orrery_system::env::SharedEnv =
                std::sync::Arc::new(orrery_system::env::RealEnv::new("bench-frp"));
            let client = orrery_system::env::http::client::<http_body_util::Full<bytes::Bytes>>(
                env,
                Duration::from_secs(1),
            );
            let now = std::time::Instant::now; // determinism: real-env (benchmark)
            let deadline = now() + Duration::from_secs(10);
            while now() < deadline {
                let request = http::Request::get(frp.url())
                    .header("host", HOST)
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .map_err(|e| e.to_string())?;
                if client
                    .request(request)
                    .await
                    .is_ok_and(|r| r.status().is_success())
                {
                    return Ok(Some(frp));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let logs = ["frps.ini.log", "frpc.ini.log"]
                .iter()
                .map(|l| std::fs::read_to_string(dir.join(l)).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n");
            Err(format!(
                "frp did not forward a request within 10 s:\n{logs}"
            ))
        }

        /// The upstream's ping through frps's vhost port.
        pub fn url(&self) -> String {
            format!("http://127.0.0.1:{}/app-proxy/ping", self.vhost)
        }
    }

    impl Drop for Frp {
        fn drop(&mut self) {
            for child in &mut self.children {
                let _ = child.kill();
                let _ = child.wait();
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs the benchmark and returns its JSON record: the reporter under the real event model
/// (`apps` apps, each variant measured for `window`), the serialisation hot path and single
/// event delivery (`events` events), and the tunnel.
pub fn run(events: usize, apps: usize, window: Duration) -> Result<Value, String> {
    let reporter = reporter_bench(apps, window)?;
    let apps: Vec<DynamicObject> = (0..events).map(app).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut results = Vec::new();
    for variant in Variant::ALL {
        let ns = hot_path_ns(variant, &apps);
        let concurrency = match variant {
            Variant::Faithful => 1,
            Variant::Hardened => 8,
        };
        let bodies: Arc<Vec<Bytes>> = Arc::new(
            apps.iter()
                .map(|a| encode_event(&payload(a)).expect("encodes"))
                .collect(),
        );
        let per_second = runtime.block_on(async {
            let env: SharedEnv = Arc::new(RealEnv::new("bench"));
            let platform = Platform::new(events::Config {
                tokens: [(TOKEN.to_string(), "bench".to_string())]
                    .into_iter()
                    .collect(),
                bus_capacity: events.max(1),
                durability: Default::default(),
                idempotency_keys: false,
            });
            let listener = env.listen("127.0.0.1:0").await.map_err(|e| e.to_string())?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            let server = tokio::spawn(events::serve(env.clone(), platform, listener));
            let rate = end_to_end(env, addr, bodies, concurrency).await;
            server.abort();
            Ok::<f64, String>(rate)
        })?;
        eprintln!(
            "{:>8}: hot path {:>8.0} ns/event; end to end {:>8.0} events/s ({} sender{})",
            variant.as_str(),
            ns,
            per_second,
            concurrency,
            if concurrency == 1 { "" } else { "s" }
        );
        results.push(json!({"variant": variant.as_str(), "hot_path_ns_per_event": ns.round(), "end_to_end_events_per_second": per_second.round(), "senders": concurrency}));
    }
    let tunnel = tunnel_bench(&runtime, events.min(20_000), 8)?;
    Ok(json!({"reporter": reporter, "events": events, "results": results, "tunnel": tunnel}))
}

/// One measured run of the reporter under the real event model.
#[derive(Debug, Clone, Copy)]
pub struct ReporterRun {
    /// Events the platform received per wall second during the window.
    pub events_per_second: f64,
    /// Events received during the window.
    pub events: u64,
}

/// The whole reporter in real mode on loopback, under the real event model: the simulated
/// API server and Argo CD (in-process, real sockets), `apps` Applications of one Deployment and
/// one Service each whose health changes about once a second (each change is an app event
/// and two resource events), the orrery RESP cache, and the platform answering each event after
/// `platform_latency`. Argo CD's client rate limit is raised so the reporter, not the load
/// generator, is the bottleneck. Counts what the platform received during `window`, after a
/// warm-up in which every app reached the platform. Each run has its own tokio runtime, so
/// nothing of one run outlives it.
pub fn reporter_run(
    variant: Variant,
    apps: usize,
    platform_latency: Duration,
    window: Duration,
) -> Result<ReporterRun, String> {
    use kube::api::{Api, PostParams};
    use orrery_sim::world::apiserver::{self, ApiServer};
    use orrery_sim::world::argocd::{self, application_resource as app_type, HealthOverrides};
    use orrery_sim::world::git::SharedGit;
    use orrery_system::env::kube::KubeTarget;
    use orrery_system::runtime::{app_reporter, cache};

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let result = runtime.block_on(async move {
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.to_string())
                .map_err(|e| e.to_string())
        };
        let (api_addr, argo_addr, platform_addr, cache_addr, serve_addr) =
            (free()?, free()?, free()?, free()?, free()?);
        let env = |name: &str| -> SharedEnv { Arc::new(RealEnv::new(name)) };
        let api = ApiServer::new(Default::default());
        let listen = api_addr.clone();
        let api_env = env("apiserver");
        tokio::spawn(async move { apiserver::run(api_env, api, &listen).await });
        let cache_env = env("cache");
        let listen = cache_addr.clone();
        tokio::spawn(async move { cache::run(cache_env, &listen).await });
        let platform = Platform::new(events::Config {
            tokens: [(TOKEN.to_string(), "bench".to_string())]
                .into_iter()
                .collect(),
            bus_capacity: 1_000_000,
            durability: Default::default(),
            idempotency_keys: false,
        });
        platform.set_knobs(events::Knobs {
            api_latency: platform_latency,
            ..Default::default()
        });
        let (platform_env, serving, listen) = (env("platform"), platform.clone(), platform_addr.clone());
        tokio::spawn(async move { events::run(platform_env, serving, &listen).await });

        const REPO: &str = "https://git.example/bench.git";
        let git = SharedGit::default();
        let files = (0..apps)
            .flat_map(|i| {
                [
                    (format!("apps/app-{i:05}/deployment.yaml"), format!("image: app-{i}:v1")),
                    (format!("apps/app-{i:05}/service.yaml"), "port: 80".to_string()),
                ]
            })
            .collect();
        git.lock().commit(REPO, "Bench <b@x>", "init", 0, files);
        let health = HealthOverrides::default();
        let target = KubeTarget::new(&api_addr);
        let argo = argocd::controller::Config {
            reconcile_every: Duration::from_secs(20),
            k8s_client_qps: 100_000,
            k8s_client_burst: 100_000,
            listen: argo_addr.clone(),
            ..Default::default()
        };
        let namespace = argo.namespace.clone();
        tokio::spawn(argocd::run(env("argocd"), target.clone(), git, health.clone(), argo, "bench-argo"));

        let client = orrery_system::env::kube::client(env("bench"), &target);
        let applications: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &app_type());
        // The API server comes up asynchronously.
        let mut created = 0;
        for attempt in 0.. {
            let mut app = DynamicObject::new(&format!("app-{created:05}"), &app_type()).within(&namespace);
            app.data = json!({"spec": {"project": "default", "source": {"repoURL": REPO, "path": format!("apps/app-{created:05}")}, "syncPolicy": {"automated": {}}}});
            match applications.create(&PostParams::default(), &app).await {
                Ok(_) => created += 1,
                Err(e) if attempt > 200 => return Err(format!("cannot create Applications: {e}")),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
            if created == apps {
                break;
            }
        }

        let mut config = app_reporter::Config::new(variant, target, &namespace);
        config.argocd_addr = argo_addr;
        config.argocd_token = "bench-argo".into();
        config.platform_addr = platform_addr;
        config.runtime_token = TOKEN.into();
        config.cache_addr = cache_addr;
        config.serve_addr = serve_addr;
        config.shard = Some(0);
        tokio::spawn(app_reporter::run(env("reporter-0"), config));

        // Warm-up: every app reached the platform.
        let warm = Instant::now(); // determinism: real-env (benchmark)
        while platform.apps_of("bench").len() < apps {
            if warm.elapsed() > Duration::from_secs(120) {
                return Err(format!(
                    "{}: only {} of {apps} apps reached the platform in 120 s",
                    variant.as_str(),
                    platform.apps_of("bench").len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The churn: every app's health moves to the next of three states once a second, a
        // tenth of the apps every 100 ms (three states, so Argo CD's 1 s refresh sees a change
        // even when two moves fall between two refreshes).
        let churn = tokio::spawn(async move {
            const STATES: [&str; 3] = ["Degraded", "Progressing", "Healthy"];
            for step in 0usize.. {
                let (round, slice) = (step / 10, step % 10);
                for i in (slice..apps).step_by(10) {
                    health.set(&format!("app-{i:05}"), STATES[round % 3]);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let received = || platform.events_received();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (before, started) = (received(), Instant::now()); // determinism: real-env (benchmark)
        tokio::time::sleep(window).await;
        let events = received() - before;
        let elapsed = started.elapsed().as_secs_f64();
        churn.abort();
        Ok(ReporterRun {
            events_per_second: events as f64 / elapsed,
            events,
        })
    });
    runtime.shutdown_background();
    result
}

/// Both variants, with the platform answering at once and after 20 ms, in one run.
pub fn reporter_bench(apps: usize, window: Duration) -> Result<Value, String> {
    let mut rows = Vec::new();
    for latency_ms in [0u64, 20] {
        let mut per_variant = Vec::new();
        for variant in Variant::ALL {
            let run = reporter_run(variant, apps, Duration::from_millis(latency_ms), window)?;
            eprintln!(
                "  reporter, platform answering after {latency_ms:>2} ms: {:>8} {:>8.0} events/s ({} events in {:?})",
                variant.as_str(),
                run.events_per_second,
                run.events,
                window
            );
            per_variant.push((variant, run));
        }
        let rate = |v: Variant| {
            per_variant
                .iter()
                .find(|(w, _)| *w == v)
                .map_or(0.0, |(_, r)| r.events_per_second)
        };
        let ratio = rate(Variant::Hardened) / rate(Variant::Faithful).max(f64::MIN_POSITIVE);
        eprintln!("  reporter, platform after {latency_ms} ms: hardened / faithful = {ratio:.1}×");
        rows.push(json!({
            "platform_latency_ms": latency_ms,
            "faithful_events_per_second": rate(Variant::Faithful).round(),
            "hardened_events_per_second": rate(Variant::Hardened).round(),
            "hardened_over_faithful": (ratio * 10.0).round() / 10.0,
        }));
    }
    Ok(json!({"apps": apps, "window_seconds": window.as_secs_f64(), "runs": rows}))
}
