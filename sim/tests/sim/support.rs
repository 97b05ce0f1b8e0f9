//! Shared test world: a turmoil sim with the simulated API server on host `apiserver`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store as ReflectorStore;
use orrery_sim::env::SimEnv;
use orrery_sim::trace::Trace;
use orrery_sim::world::apiserver::{self, ApiServer, Knobs};
use orrery_system::env::kube::{client, KubeTarget};
use orrery_system::env::SharedEnv;
use orrery_system::observe::{WatchEnd, WorldEvent};

/// A sim with an API server, plus the handles tests inspect.
pub struct World {
    pub sim: turmoil::Sim<'static>,
    pub api: Arc<ApiServer>,
    pub trace: Trace,
}

pub const SEED: u64 = 11;

/// A turmoil sim with the tests' seed, epoch and 10 ms tick, running at most `duration`.
pub fn sim(duration: Duration) -> turmoil::Sim<'static> {
    sim_ticking(duration, Duration::from_millis(10))
}

/// As [`sim`], with another tick (tests that wait simulated hours take 100 ms).
pub fn sim_ticking(duration: Duration, tick: Duration) -> turmoil::Sim<'static> {
    turmoil::Builder::new()
        .simulation_duration(duration)
        .tick_duration(tick)
        .epoch(std::time::UNIX_EPOCH + Duration::from_millis(orrery_sim::env::SIM_EPOCH_UNIX_MS))
        .rng_seed(SEED)
        .build()
}

/// Serves `api` on host `apiserver`: the same server every time the host starts, so its
/// state outlives a crash (as etcd's would).
pub fn apiserver_host(sim: &mut turmoil::Sim<'static>, api: Arc<ApiServer>, trace: &Trace) {
    let trace = trace.clone();
    sim.host("apiserver", move || {
        let api = api.clone();
        let env = SimEnv::shared("apiserver", SEED, trace.clone());
        async move {
            apiserver::run(env, api, "0.0.0.0:6443").await?;
            Ok(())
        }
    });
}

/// Runs `test` on client host `test` (kube client with `read_idle`) against `api` served on
/// host `apiserver`, to the end of `sim`.
pub fn with_apiserver<F, Fut>(
    mut sim: turmoil::Sim<'static>,
    api: Arc<ApiServer>,
    read_idle: Duration,
    test: F,
) where
    F: FnOnce(kube::Client, SharedEnv) -> Fut + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let trace = Trace::default();
    apiserver_host(&mut sim, api, &trace);
    sim.client("test", async move {
        let (env, client) = kube("test", &trace, read_idle);
        test(client, env).await;
        Ok(())
    });
    sim.run().unwrap();
}

/// Steps `sim` until a client says it is ready, crashes `host`, lets 100 steps pass and
/// starts the host again; then runs the sim to its end.
pub fn crash_when_ready(
    mut sim: turmoil::Sim<'static>,
    ready: std::sync::mpsc::Receiver<()>,
    host: &str,
) {
    while ready.try_recv().is_err() {
        sim.step().unwrap();
    }
    sim.crash(host);
    for _ in 0..100 {
        sim.step().unwrap();
    }
    sim.bounce(host);
    sim.run().unwrap();
}

pub fn world(knobs: Knobs) -> World {
    let mut sim = sim(Duration::from_secs(3600));
    let api = ApiServer::new(knobs);
    let trace = Trace::default();
    apiserver_host(&mut sim, api.clone(), &trace);
    World { sim, api, trace }
}

impl World {
    /// Boots orrery's simulated Argo CD on host `argocd` (server on port 8080, accepting
    /// `token`) against the world's API server, reading `git` and `health`.
    pub fn argocd(
        &mut self,
        git: &orrery_sim::world::git::SharedGit,
        health: &orrery_sim::world::argocd::HealthOverrides,
        config: orrery_sim::world::argocd::controller::Config,
        token: &'static str,
    ) {
        let (trace, git, health) = (self.trace.clone(), git.clone(), health.clone());
        self.sim.host("argocd", move || {
            let env = SimEnv::shared("argocd", SEED, trace.clone());
            let run = orrery_sim::world::argocd::run(
                env,
                KubeTarget::new("apiserver:6443"),
                git.clone(),
                health.clone(),
                config.clone(),
                token,
            );
            async move {
                run.await?;
                Ok(())
            }
        });
    }
}

/// The environment and kube client of a test client host (call inside the host).
pub fn kube(host: &str, trace: &Trace, read_idle: Duration) -> (SharedEnv, kube::Client) {
    let env = SimEnv::shared(host, SEED, trace.clone());
    let mut target = KubeTarget::new("apiserver:6443");
    target.read_idle = read_idle;
    let client = client(env.clone(), &target);
    (env, client)
}

pub fn configmap(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    if !labels.is_empty() {
        cm.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    cm
}

pub async fn create_configmaps(
    api: &Api<ConfigMap>,
    names: impl IntoIterator<Item = String>,
) -> kube::Result<()> {
    for name in names {
        api.create(&PostParams::default(), &configmap(&name, &[]))
            .await?;
    }
    Ok(())
}

/// (name, resourceVersion) pairs of a reflector's view, sorted (its map order is random).
pub fn view_of(reader: &ReflectorStore<ConfigMap>) -> Vec<(String, String)> {
    let mut view: Vec<_> = reader
        .state()
        .iter()
        .map(|cm| {
            (
                cm.metadata.name.clone().unwrap_or_default(),
                cm.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    view.sort();
    view
}

/// (name, resourceVersion) pairs of the API server's ConfigMaps, sorted.
pub fn truth(api: &ApiServer) -> Vec<(String, String)> {
    let kind = api
        .kind("configmaps")
        .expect("configmaps are served")
        .clone();
    let mut view: Vec<_> = api
        .store()
        .objects_of(&kind)
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    view.sort();
    view
}

/// Waits (in simulated time) until the reflector's view equals the server's, or panics.
pub async fn await_convergence(
    env: &SharedEnv,
    reader: &ReflectorStore<ConfigMap>,
    api: &ApiServer,
    within: Duration,
) {
    let deadline = env.elapsed() + within;
    loop {
        if view_of(reader) == truth(api) {
            return;
        }
        assert!(
            env.elapsed() < deadline,
            "reflector did not converge within {within:?}: view {:?} vs truth {:?}",
            view_of(reader).len(),
            truth(api).len()
        );
        env.sleep(Duration::from_millis(500)).await;
    }
}

/// Counts the API server's watch streams that ended as `end`.
pub fn watch_ends(trace: &Trace, end: WatchEnd) -> usize {
    trace
        .events()
        .iter()
        .filter(
            |e| matches!(e.world(), Some(WorldEvent::WatchEnded { end: seen, .. }) if *seen == end),
        )
        .count()
}

/// A loopback port for a real-mode test's server, free at the time of asking.
///
/// Not one `bind(:0)` hands out: those come from the kernel's ephemeral range (32768–60999 on
/// Linux), where any outgoing connection of a test running beside it may take the port before
/// the server started for it binds — under `make test`'s load a server then never answered
/// its health check. These are below that range, each handed out once per test process
/// (from a counter at an offset of the process id) and checked bindable.
#[allow(dead_code)] // used by the command line's tests (cli/tests), which share this file
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000; // up to 31999, below the ephemeral range
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let offset = std::process::id().wrapping_mul(613) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (FIRST + (offset + n) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}..{}", FIRST + SPAN);
}

/// Waits (on the wall clock: real-mode tests only) until `check` holds, failing after `within`.
#[allow(dead_code)] // used by the command line's tests (cli/tests), which share this file
pub fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within; // determinism: real-env (real-mode test)
    while !check() {
        let late = std::time::Instant::now() >= deadline; // determinism: real-env (real-mode test)
        assert!(!late, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Boots the platform's events path (the control-plane assembly) on host `platform`,
/// port 8080, projecting into `platform`.
pub fn boot_platform(w: &mut World, platform: &Arc<orrery_system::platform::events::Platform>) {
    use orrery_system::platform::assembly::{
        self as control_plane, ControlPlaneConfig, ControlPlaneState,
    };
    let (trace, host_platform) = (w.trace.clone(), platform.clone());
    w.sim.host("platform", move || {
        let env = SimEnv::shared("platform", SEED, trace.clone());
        let state = ControlPlaneState {
            events: Some(host_platform.clone()),
            ..Default::default()
        };
        let config = ControlPlaneConfig {
            events: Some("0.0.0.0:8080".into()),
            ..Default::default()
        };
        async move {
            control_plane::run(env, config, state, std::future::pending())
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        }
    });
}

/// Boots the runtime assembly with `config` on `host` (what that pod runs).
pub fn boot_runtime(
    w: &mut World,
    host: &'static str,
    config: orrery_system::runtime::assembly::RuntimeConfig,
) {
    let trace = w.trace.clone();
    w.sim.host(host, move || {
        let env = SimEnv::shared(host, SEED, trace.clone());
        let config = config.clone();
        async move {
            orrery_system::runtime::assembly::run(env, config, std::future::pending())
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        }
    });
}
