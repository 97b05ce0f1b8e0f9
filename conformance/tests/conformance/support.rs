//! Helpers the real-mode suites share: a prepared namespace on the real cluster, loopback
//! ports, the wall clock for commit times, polling a real server until a condition holds,
//! and orrery's Argo CD and runtime on loopback.

use std::time::Duration;

/// How long a step may take on a real, loaded API server.
pub const WITHIN: Duration = Duration::from_secs(90);

/// A free loopback port (bound and released; the suites run one test at a time).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Unix milliseconds now (commit times in real mode).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Polls `check` every 250 ms until it returns `Ok`, or fails with its last reason after
/// [`WITHIN`].
pub async fn eventually<F, Fut, T>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(reason) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {WITHIN:?}; last: {reason}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// `GET url` over a real socket: (status, JSON body; `null` when the body is not JSON).
pub async fn get_status(url: &str) -> Result<(u16, serde_json::Value), String> {
    use http_body_util::{BodyExt, Full};
    let env: orrery_system::env::SharedEnv =
        std::sync::Arc::new(orrery_system::env::RealEnv::new("probe"));
    let client = orrery_system::env::http::client::<Full<bytes::Bytes>>(
        env,
        std::time::Duration::from_secs(10),
    );
    let request = http::Request::get(url)
        .body(Full::new(bytes::Bytes::new()))
        .map_err(|e| e.to_string())?;
    let response = client.request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, serde_json::from_slice(&body).unwrap_or_default()))
}

/// orrery's Argo CD on loopback `port` against `target` (its namespace is Argo CD's),
/// reading `git`, accepting `token`: refreshes every 2 s, syncs taking `sync_duration`.
pub fn start_argocd(
    target: &orrery_system::env::kube::KubeTarget,
    git: &orrery_sim::world::git::SharedGit,
    port: u16,
    sync_duration: std::time::Duration,
    token: &str,
) -> tokio::task::JoinHandle<()> {
    use orrery_sim::world::argocd;
    let config = argocd::controller::Config {
        reconcile_every: std::time::Duration::from_secs(2),
        sync_duration,
        namespace: target.namespace.clone(),
        listen: format!("127.0.0.1:{port}"),
        ..Default::default()
    };
    let run = argocd::run(
        std::sync::Arc::new(orrery_system::env::RealEnv::new("argocd")),
        target.clone(),
        git.clone(),
        argocd::HealthOverrides::default(),
        config,
        token.to_string(),
    );
    tokio::spawn(async move { drop(run.await) })
}

/// The real cluster, with a fresh test namespace `namespace` prepared on it.
pub async fn prepared(namespace: String) -> (orrery_conformance::cluster::Cluster, String) {
    let cluster = orrery_conformance::cluster::Cluster::real()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cluster
        .prepare(&namespace)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (cluster, namespace)
}

/// The KUBECONFIG cluster as a target in `namespace`.
pub async fn real_target(namespace: &str) -> orrery_system::env::kube::KubeTarget {
    let config = kube::Config::infer().await.expect("kubeconfig");
    orrery_system::env::kube::KubeTarget::real(config, namespace)
}

/// The runtime assembly with `config`, as host `name`, until aborted.
pub fn start_runtime(
    name: &str,
    config: orrery_system::runtime::assembly::RuntimeConfig,
) -> tokio::task::JoinHandle<()> {
    let env = std::sync::Arc::new(orrery_system::env::RealEnv::new(name));
    tokio::spawn(async move {
        drop(orrery_system::runtime::assembly::run(env, config, std::future::pending()).await)
    })
}
