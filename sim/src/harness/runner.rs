//! Runs one scenario seed for one variant: build the world, apply the timed faults during
//! the fault phase, heal everything for the calm phase, then check the invariants.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use orrery_system::core::json::Pointer as _;
use orrery_system::env::kube::KubeTarget;

use crate::checkers::{self, FinalState, Violation};
use crate::env::{Boots, FaultPoints, SimEnv, SIM_EPOCH_UNIX_MS};
use crate::faults::{Fault, Target};
use crate::scenario::knobs::ApiServerPatch;
use crate::scenario::model::Host;
use crate::scenario::model::{FaultStep, Install, PlatformChange, Role};
use crate::scenario::trace::Replay;
use crate::scenario::{Outcome, Scenario, Variant};
use crate::trace::Trace;
use crate::trace::{HarnessEvent, HostChange};
use crate::world::apiserver::{self, ApiServer};
use crate::world::argocd::{self, HealthOverrides};
use crate::world::git::SharedGit;
use crate::world::placement::{self, host_of, hosts_with};
use crate::world::{probe, rollouts, tunnel, workflows, workload};
use orrery_system::env::{BoxFuture, SharedEnv};
use orrery_system::platform::assembly::{self as control_plane_assembly, ControlPlaneState};
use orrery_system::platform::events::{self as platform_events, Platform};
use orrery_system::runtime::assembly as runtime_assembly;
use orrery_system::runtime::cache;

pub use crate::world::placement::{
    APISERVER_PORT, ARGOCD_TOKEN, CACHE_PORT, EXISTING_ARGOCD_TOKEN, PLATFORM_PORT, RUNTIME_NAME,
    RUNTIME_TOKEN,
};
/// Default link latency bound (turmoil's default is 100 ms; a LAN is closer to this).
const DEFAULT_MAX_LATENCY: Duration = Duration::from_millis(5);

/// A fault as it was applied.
#[derive(Clone, Debug, Serialize)]
pub struct AppliedFault {
    /// Simulated milliseconds when it was applied.
    pub at_ms: u64,
    /// What was done.
    pub action: String,
    /// Its arguments.
    pub detail: Value,
}

/// Everything a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    /// The result class.
    pub result: Outcome,
    /// Broken invariants, in time order.
    pub violations: Vec<Violation>,
    /// Faults applied, including the calm-phase heal.
    pub faults: Vec<AppliedFault>,
    /// The trace (for hashes, tails and metrics).
    pub trace: Trace,
    /// Simulated seconds run.
    pub sim_seconds: f64,
    /// A harness error message, if the run could not complete.
    pub harness_error: Option<String>,
    /// The world at the end (for figures that need it).
    pub state: FinalState,
    /// Every reach condition the run reached.
    pub reached: Vec<crate::explore::reach::Condition>,
    /// How often each fault point fired (those that did).
    pub fault_points: std::collections::BTreeMap<orrery_system::env::Point, u64>,
}

impl RunOutcome {
    /// The invariant whose failure the run's result stands for: the first one broken of the
    /// result's class. A run that is a safety violation may also have broken a liveness
    /// invariant first (a write run twice, then a tunnel slow to come back); it is the safety
    /// violation its scenario declares, a shrink keeps and the seed farm files.
    pub fn failure(&self) -> Option<String> {
        let class = match self.result {
            Outcome::SafetyViolation => Some(crate::checkers::Class::Safety),
            Outcome::LivenessTimeout => Some(crate::checkers::Class::Liveness),
            _ => None,
        };
        self.violations
            .iter()
            .find(|v| Some(v.class) == class)
            .or(self.violations.first())
            .map(|v| v.invariant.clone())
    }
}

/// Reporter host names in ordinal order.
fn reporter_hosts(scenario: &Scenario) -> Vec<String> {
    let mut hosts: Vec<(u32, String)> = scenario
        .topology
        .hosts
        .iter()
        .filter(|h| h.has(Role::Reporter))
        .map(|h| {
            (
                orrery_system::env::Identity::from_host(h.name.as_str())
                    .ordinal
                    .unwrap_or(0),
                h.name.clone(),
            )
        })
        .collect();
    hosts.sort();
    hosts.into_iter().map(|(_, h)| h).collect()
}

/// Shared state between the harness and the hosts.
struct World {
    api: Arc<ApiServer>,
    git: SharedGit,
    health: HealthOverrides,
    calm: Arc<AtomicBool>,
    trace: Trace,
    platform: Arc<Platform>,
    /// Requests Argo CD answered, by route (the reports' cost figures; not traced).
    cost: Arc<crate::world::cost::Cost>,
    /// The replica count a reporter pod reads when it starts (`EVENT_REPORTER_REPLICAS`).
    reporter_replicas: Arc<Mutex<u32>>,
    /// The platform's databases (registry, permissions, events read model): they survive a
    /// restart of the hosts that serve them.
    control_plane: ControlPlaneState,
    /// How many builds the Runner's trigger made (it goes on where it stopped after a
    /// restart).
    runner_builds_made: Arc<std::sync::atomic::AtomicU32>,
    /// Proxy tasks the UI had the platform make (`runner.proxy`), across its restarts.
    runner_proxies_made: Arc<std::sync::atomic::AtomicU32>,
    /// The memory of each cache host's current boot (a crash loses it; `flush` empties it).
    caches: Arc<Mutex<BTreeMap<String, cache::Store>>>,
    /// Cluster hosts whose registration an `unregister` fault removed.
    unregister: Arc<Mutex<BTreeSet<String>>>,
    /// The token Argo CD accepts (it survives Argo CD's restarts; `rotate_token` revokes it).
    argocd_tokens: argocd::Tokens,
    /// An existing Argo CD: the token the operator keeps in Secret `argocd-token`, and when
    /// (simulated time) it is written there.
    token_secret: Option<workload::TokenSecret>,
    /// What analysing each Rollout version finds (the workload draws it).
    verdicts: rollouts::Verdicts,
    /// What each workflow step's pod does (the workload draws it).
    jobs: workflows::Jobs,
    /// The event bus's stored messages (its file store outlives the bus process).
    bus: orrery_system::runtime::resource_reporter::bus::Store,
    /// Each `role: vcluster` host's tenant: its API server (its store outlives the host's
    /// crashes), and its hosted runtime's Git and health.
    vclusters: BTreeMap<String, crate::world::hosted::Tenant>,
    /// The platform's database, when a host has `role: database` (what it committed
    /// outlives its host's crashes; the gateway's registry and audit log live there, not
    /// in `control_plane`).
    database: Option<crate::world::database::Database>,
}

/// A pod change of a rolling update, applied at its time.
#[derive(Clone, Debug)]
enum PodChange {
    Start(String),
    Stop(String),
    Restart(String),
}

/// Registers every host: the simulated world's pieces its roles name, and the product's
/// assemblies (runtime, control plane) as `world::placement` configures them.
fn register_hosts(
    sim: &mut turmoil::Sim<'static>,
    scenario: &Scenario,
    seed: u64,
    variant: Variant,
    world: &World,
) {
    let apiserver_addr = format!("{}:{APISERVER_PORT}", host_of(scenario, Role::Apiserver));
    let target = KubeTarget {
        addr: apiserver_addr,
        namespace: argocd::NAMESPACE.into(),
        read_idle: scenario.probe.read_idle,
        kubeconfig: None,
    };
    for host in &scenario.topology.hosts {
        let name = host.name.clone();
        // Each restart of the host boots with fresh (deterministic) randomness.
        let boots = Boots::default();
        let trace = world.trace.clone();
        let pieces = world_pieces(scenario, host, &target, world, variant);
        let runtime = placement::runtime(scenario, host, variant);
        // A hosted runtime's reporter (on a vcluster host) is its runtime's only replica.
        let replica = host.has(Role::Reporter);
        let control_plane = placement::control_plane(scenario, host, variant);
        let (replicas, state) = (world.reporter_replicas.clone(), world.control_plane.clone());
        let caches = world.caches.clone();
        let bus = world.bus.clone();
        let buggify = scenario
            .buggify
            .clone()
            .map(|b| FaultPoints::new(b, world.calm.clone()));
        sim.host(host.name.as_str(), move || {
            let env = SimEnv::with_fault_points(
                &name,
                seed,
                boots.next(),
                trace.clone(),
                buggify.as_ref(),
            );
            let pieces: Vec<_> = pieces.iter().map(|start| start(env.clone())).collect();
            let mut runtime = runtime.clone();
            if let Some(reporter) = runtime
                .as_mut()
                .and_then(|r| r.app_reporter.as_mut())
                .filter(|_| replica)
            {
                // Read once at start, like the real reporter's environment variable.
                reporter.replicas = *replicas.lock().expect("replicas lock poisoned");
            }
            if let Some(runtime) = runtime.as_mut().filter(|r| r.event_bus.is_some()) {
                runtime.bus_store = Some(bus.clone());
            }
            if let Some(runtime) = runtime.as_mut().filter(|r| r.cache.is_some()) {
                // Each boot starts with empty memory, like Redis without persistence.
                let store = cache::Store::default();
                caches
                    .lock()
                    .expect("caches lock poisoned")
                    .insert(name.clone(), store.clone());
                runtime.cache_store = Some(store);
            }
            let (control_plane, state) = (control_plane.clone(), state.clone());
            async move {
                for piece in pieces {
                    tokio::spawn(piece);
                }
                if let Some(config) = control_plane {
                    tokio::spawn(supervise_control_plane(env.clone(), config, state));
                }
                if let Some(config) = runtime {
                    // A tunnel client that exits is restarted by the world's kubelet
                    // (CrashLoopBackOff, `placement::runtime`); the runtime runs on.
                    let _ = runtime_assembly::run(env, config, std::future::pending()).await;
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    // Each hosted tenant's developers work from outside the platform: a host of their own
    // (`<vcluster>-developers`) that no fault names, so a crash of the vcluster host leaves
    // their apps, commits and churn as they were.
    if let Some(hosted) = scenario.hosted.as_ref().filter(|h| h.runs_runtimes()) {
        for (vcluster, tenant) in &world.vclusters {
            let name = crate::world::hosted::developers(vcluster);
            let own = crate::world::hosted::runtime_target(vcluster, target.read_idle);
            let (config, layout) = crate::world::hosted::workload(hosted);
            let handles = workload::Handles {
                git: tenant.git.clone(),
                health: tenant.health.clone(),
                calm: world.calm.clone(),
                clusters: Vec::new(),
                unregister: Arc::default(),
                layout,
                token_secret: None,
            };
            let piece = workload_piece(config, own, handles);
            let trace = world.trace.clone();
            let host = name.clone();
            sim.host(host.as_str(), move || {
                let env = SimEnv::with_fault_points(&name, seed, 0, trace.clone(), None);
                let run = piece(env);
                async move {
                    run.await;
                    std::future::pending::<()>().await;
                    Ok(())
                }
            });
        }
    }
}

/// Runs the control plane on a (re)booted host. Without a database it runs once, on the
/// state the world holds for it. With one, each start loads the registry and audit log from
/// the database into fresh memory (only what was committed survives), and a control plane
/// that stops — its store writer lost the database, or the database could not be opened —
/// is started again as its pod would be: the world plays kubelet, with its CrashLoopBackOff
/// (as for tunnel clients).
async fn supervise_control_plane(
    env: SharedEnv,
    config: orrery_system::platform::assembly::ControlPlaneConfig,
    state: ControlPlaneState,
) {
    let policy = runtime_assembly::CrashLoopBackOff::kubelet();
    let mut restarts = 0u32;
    loop {
        let state = match config.database {
            Some(_) => ControlPlaneState {
                registry: Arc::default(),
                audit: Arc::default(),
                ..state.clone()
            },
            None => state.clone(),
        };
        let started = env.elapsed();
        let ended =
            control_plane_assembly::run(env.clone(), config.clone(), state, std::future::pending())
                .await;
        if let Err(error) = ended {
            tracing::error!(%error, "control plane stopped");
        }
        if config.database.is_none() {
            return;
        }
        if env.elapsed().saturating_sub(started) >= policy.reset_after {
            restarts = 0;
        }
        env.sleep(policy.delay(restarts)).await;
        restarts = restarts.saturating_add(1);
    }
}

/// Starts one of the world's own pieces on a (re)booted host.
type Piece = Box<dyn Fn(SharedEnv) -> BoxFuture<'static, ()>>;

/// A simulated API server over `api` (its store outlives the host's crashes) on port 6443.
fn api_server_piece(api: Arc<ApiServer>, what: &'static str) -> Piece {
    Box::new(move |env| {
        let api = api.clone();
        Box::pin(async move {
            if let Err(error) = apiserver::run(env, api, &format!("0.0.0.0:{APISERVER_PORT}")).await
            {
                tracing::error!(%error, "{what} stopped");
            }
        })
    })
}

/// A simulated Argo CD over `target`'s API server, with its Git, health and tokens.
fn argocd_piece(
    config: argocd::controller::Config,
    target: KubeTarget,
    git: SharedGit,
    health: HealthOverrides,
    tokens: argocd::Tokens,
) -> Piece {
    Box::new(move |env| {
        let run = argocd::run(
            env,
            target.clone(),
            git.clone(),
            health.clone(),
            config.clone(),
            tokens.clone(),
        );
        Box::pin(async move {
            if let Err(error) = run.await {
                tracing::error!(%error, "simulated Argo CD stopped");
            }
        })
    })
}

/// The workload generator against `target`'s API server.
fn workload_piece(
    config: crate::scenario::model::Workload,
    target: KubeTarget,
    handles: workload::Handles,
) -> Piece {
    Box::new(move |env| {
        let handles = handles.clone();
        let (config, target) = (config.clone(), target.clone());
        Box::pin(async move {
            let client = orrery_system::env::kube::client(env.clone(), &target);
            workload::run(env, client, config, handles).await;
        })
    })
}

/// The simulated world's pieces `host`'s roles name (API server, Argo CD, workload, probe,
/// tunnel clients, the runtime's app-proxy stand-in).
fn world_pieces(
    scenario: &Scenario,
    host: &Host,
    target: &KubeTarget,
    world: &World,
    variant: Variant,
) -> Vec<Piece> {
    let mut pieces: Vec<Piece> = Vec::new();
    if host.has(Role::Apiserver) {
        pieces.push(api_server_piece(world.api.clone(), "simulated API server"));
    }
    if let (true, Some(database)) = (host.has(Role::Database), world.database.clone()) {
        pieces.push(Box::new(move |env| {
            let database = database.clone();
            Box::pin(async move {
                let addr = format!("0.0.0.0:{}", crate::world::database::PORT);
                let latency = crate::world::database::COMMIT_LATENCY;
                if let Err(error) = crate::world::database::run(env, database, &addr, latency).await
                {
                    tracing::error!(%error, "the platform's database stopped");
                }
            })
        }));
    }
    if host.has(Role::Cluster) {
        // A destination cluster: its own API server; a restart boots it empty.
        let knobs = scenario.apiserver.clone();
        let cost = world.cost.clone();
        let namespaces = namespaces_used(scenario);
        pieces.push(Box::new(move |env| {
            let (now, unix_millis) = (env.elapsed(), env.unix_millis());
            let api = ApiServer::booted(knobs.clone(), cost.clone(), &namespaces, now, unix_millis);
            Box::pin(async move {
                if let Err(error) = apiserver::run(env, api, "0.0.0.0:6443").await {
                    tracing::error!(%error, "destination cluster's API server stopped");
                }
            })
        }));
    }
    if host.has(Role::Argocd) {
        let config = argocd::controller::Config {
            reconcile_every: scenario.argocd.reconcile_every,
            history_limit: scenario.argocd.history_limit,
            k8s_client_qps: scenario.argocd.k8s_client_qps,
            k8s_client_burst: scenario.argocd.k8s_client_burst,
            application_namespaces: scenario.argocd.application_namespaces.clone(),
            sync_duration: scenario.argocd.sync_duration,
            projects: if scenario.argocd.projects {
                argocd::projects::Projects::enforced()
            } else {
                argocd::projects::Projects::default()
            },
            calm: Some(world.calm.clone()),
            cost: Some(world.cost.clone()),
            ..Default::default()
        };
        let (git, health) = (world.git.clone(), world.health.clone());
        let tokens = world.argocd_tokens.clone();
        pieces.push(argocd_piece(config, target.clone(), git, health, tokens));
    }
    if host.has(Role::Workload) {
        let clusters = hosts_with(scenario, Role::Cluster);
        let layout = workload::Layout::of(
            &scenario.workload,
            &scenario.argocd.application_namespaces,
            &clusters,
        );
        let handles = workload::Handles {
            git: world.git.clone(),
            health: world.health.clone(),
            calm: world.calm.clone(),
            clusters,
            unregister: world.unregister.clone(),
            layout,
            token_secret: world.token_secret.clone(),
        };
        pieces.push(workload_piece(
            scenario.workload.clone(),
            target.clone(),
            handles,
        ));
    }
    if host.has(Role::Git) {
        let git = world.git.clone();
        pieces.push(Box::new(move |env| {
            let git = git.clone();
            Box::pin(async move {
                tokio::spawn(crate::world::git::deliver_webhooks(
                    env.clone(),
                    git.clone(),
                ));
                if let Err(error) = crate::world::git::serve(env, git, "0.0.0.0:80").await {
                    tracing::error!(%error, "simulated Git provider stopped");
                }
            })
        }));
    }
    if host.has(Role::Apiserver) && scenario.runner.is_some() {
        let scenario = scenario.clone();
        pieces.push(Box::new(move |env| {
            Box::pin(crate::world::runner::probe(env, scenario.clone()))
        }));
    }
    if host.has(Role::Platform) && scenario.runner.is_some() {
        let (scenario, made, calm) = (
            scenario.clone(),
            world.runner_builds_made.clone(),
            world.calm.clone(),
        );
        pieces.push(Box::new(move |env| {
            Box::pin(crate::world::runner::trigger(
                env,
                scenario.clone(),
                made.clone(),
                calm.clone(),
            ))
        }));
    }
    if host.has(Role::Platform) && scenario.runner.as_ref().is_some_and(|r| r.proxy.is_some()) {
        let (scenario, made, calm) = (
            scenario.clone(),
            world.runner_proxies_made.clone(),
            world.calm.clone(),
        );
        pieces.push(Box::new(move |env| {
            Box::pin(crate::world::runner::proxy_requests(
                env,
                scenario.clone(),
                made.clone(),
                calm.clone(),
            ))
        }));
    }
    if host.has(Role::Cron) {
        if let Some(config) = crate::world::runner::cronus(scenario, variant, &host.name) {
            pieces.push(Box::new(move |env| {
                let config = config.clone();
                Box::pin(async move {
                    if let Err(error) =
                        orrery_system::platform::runner::cronus::run(env, config).await
                    {
                        tracing::error!(%error, "cronus stopped");
                    }
                })
            }));
        }
    }
    if host.has(Role::Rollouts) {
        let (target, verdicts) = (target.clone(), world.verdicts.clone());
        pieces.push(Box::new(move |env| {
            Box::pin(rollouts::run(
                env,
                target.clone(),
                verdicts.clone(),
                rollouts::controller::Config::default(),
            ))
        }));
    }
    if host.has(Role::Workflows) {
        let (target, jobs) = (target.clone(), world.jobs.clone());
        let finalizers = placement::workflow_finalizers(scenario, variant);
        pieces.push(Box::new(move |env| {
            Box::pin(workflows::run(
                env,
                target.clone(),
                jobs.clone(),
                finalizers.clone(),
            ))
        }));
    }
    if host.has(Role::Workload) {
        let (calm, target) = (world.calm.clone(), target.clone());
        let (verdicts, jobs) = (world.verdicts.clone(), world.jobs.clone());
        let (ro, wf) = (
            scenario.workload.rollouts.clone(),
            scenario.workload.workflows.clone(),
        );
        // A recorded trace's Rollouts and Workflows are replayed by their workloads.
        let replay = scenario.workload.trace.clone().map(|trace| Replay {
            trace,
            speed: scenario.workload.speed,
        });
        if ro.is_some() || wf.is_some() {
            pieces.push(Box::new(move |env| {
                let (target, calm) = (target.clone(), calm.clone());
                let (verdicts, jobs) = (verdicts.clone(), jobs.clone());
                let (ro, wf) = (ro.clone(), wf.clone());
                let replay = replay.clone();
                Box::pin(async move {
                    let client = orrery_system::env::kube::client(env.clone(), &target);
                    if let Some(config) = ro {
                        tokio::spawn(rollouts::workload::run(
                            env.clone(),
                            client.clone(),
                            config,
                            verdicts,
                            calm.clone(),
                            replay.clone(),
                        ));
                    }
                    if let Some(config) = wf {
                        workflows::workload::run(env, client, config, jobs, calm, replay).await;
                    }
                })
            }));
        }
    }
    if host.has(Role::Probe) {
        let config = probe::Config {
            watch_timeout_seconds: scenario.probe.watch_timeout_seconds,
            list_from_cache: scenario.probe.list_from_cache,
        };
        let target = target.clone();
        pieces.push(Box::new(move |env| {
            let (config, target) = (config.clone(), target.clone());
            Box::pin(async move {
                let client = orrery_system::env::kube::client(env.clone(), &target);
                probe::run(env, client, config).await;
            })
        }));
    }
    if host.has(Role::Workload) {
        if let Some(restricted) = scenario.restricted_sources.clone() {
            let (git, target) = (world.git.clone(), target.clone());
            pieces.push(Box::new(move |env| {
                let (git, restricted) = (git.clone(), restricted.clone());
                let client = orrery_system::env::kube::client(env.clone(), &target);
                Box::pin(crate::world::restricted::run(env, client, git, restricted))
            }));
        }
        if let Some(promotions) = scenario.promotions.clone() {
            let (git, health, target) = (world.git.clone(), world.health.clone(), target.clone());
            pieces.push(Box::new(move |env| {
                let (git, health, promotions) = (git.clone(), health.clone(), promotions.clone());
                let client = orrery_system::env::kube::client(env.clone(), &target);
                Box::pin(crate::world::promotions::run(
                    env, client, git, health, promotions,
                ))
            }));
        }
    }
    // The real app-proxy takes the stand-in's place on an appproxy host.
    if host.has(Role::Runtime) && !host.has(Role::Appproxy) {
        let settings = scenario.tunnel.clone();
        // In a multi-tenant world the host is an account: its stand-in records callers.
        let account = scenario.tenants.as_ref().map(|_| host.name.clone());
        pieces.push(Box::new(move |env| {
            let (settings, account) = (settings.clone(), account.clone());
            Box::pin(async move {
                if let Err(error) = tunnel::run_app_proxy_stand_in(env, settings, account).await {
                    tracing::error!(%error, "app-proxy stand-in stopped");
                }
            })
        }));
    }
    if let (Some(tenants), true) = (&scenario.tenants, host.has(Role::Runtime)) {
        let accounts = hosts_with(scenario, Role::Runtime);
        let at = accounts.iter().position(|a| *a == host.name).unwrap_or(0);
        let next = accounts[(at + 1) % accounts.len()].clone();
        let (platform, account) = (
            host_of(scenario, Role::Platform).to_string(),
            host.name.clone(),
        );
        let (per_host, settings) = (scenario.tunnel.runtimes_per_host, tenants.clone());
        pieces.push(Box::new(move |env| {
            Box::pin(crate::world::tenants::run_reporter(
                env,
                platform.clone(),
                account.clone(),
                next.clone(),
                per_host,
                settings.clone(),
            ))
        }));
    }
    if let (Some(tenants), true) = (&scenario.tenants, host.has(Role::Adversary)) {
        let (gateway, platform) = (
            host_of(scenario, Role::Gateway).to_string(),
            host_of(scenario, Role::Platform).to_string(),
        );
        let accounts = hosts_with(scenario, Role::Runtime);
        let (per_host, settings) = (scenario.tunnel.runtimes_per_host, tenants.clone());
        if let Some(every) = tenants.register_every {
            let (gateway, accounts, calm) = (gateway.clone(), accounts.clone(), world.calm.clone());
            pieces.push(Box::new(move |env| {
                Box::pin(crate::world::tenants::run_registrar(
                    env,
                    gateway.clone(),
                    accounts.clone(),
                    every,
                    calm.clone(),
                ))
            }));
        }
        pieces.push(Box::new(move |env| {
            Box::pin(crate::world::tenants::run_adversary(
                env,
                gateway.clone(),
                platform.clone(),
                accounts.clone(),
                per_host,
                settings.clone(),
            ))
        }));
    }
    if let (Some(hosted), Some(tenant)) = (&scenario.hosted, world.vclusters.get(&host.name)) {
        pieces.push(api_server_piece(
            tenant.api.clone(),
            "virtual cluster's API server",
        ));
        if hosted.runs_runtimes() {
            // The tenant's hosted runtime sees its virtual cluster only.
            let own = crate::world::hosted::runtime_target(&host.name, target.read_idle);
            let config = argocd::controller::Config {
                calm: Some(world.calm.clone()),
                cost: Some(world.cost.clone()),
                ..Default::default()
            };
            let (git, health) = (tenant.git.clone(), tenant.health.clone());
            let tokens = argocd::Tokens::from(placement::ARGOCD_TOKEN);
            pieces.push(argocd_piece(config, own, git, health, tokens));
        }
        let (name, settings, calm) = (host.name.clone(), hosted.clone(), world.calm.clone());
        pieces.push(Box::new(move |env| {
            Box::pin(crate::world::hosted::run_tenant(
                env,
                name.clone(),
                settings.clone(),
                calm.clone(),
            ))
        }));
    }
    if host.has(Role::Client) {
        let gateway = host_of(scenario, Role::Gateway).to_string();
        let (settings, runtimes) = (scenario.tunnel.clone(), hosts_with(scenario, Role::Runtime));
        pieces.push(Box::new(move |env| {
            let (gateway, runtimes, settings) =
                (gateway.clone(), runtimes.clone(), settings.clone());
            Box::pin(tunnel::run_client(env, gateway, runtimes, settings))
        }));
    }
    pieces
}

/// Hosts the harness has taken down: crashed by a fault (restarted for the calm phase) or
/// stopped by a scale-down (left down).
#[derive(Default)]
struct Down {
    crashed: BTreeSet<String>,
    stopped: BTreeSet<String>,
}

fn stop_host(sim: &mut turmoil::Sim<'static>, world: &World, host: &str, why: HostChange) {
    crate::env::tear_down(|| sim.crash(host));
    let host = host.to_string();
    world
        .trace
        .record_harness(sim.elapsed(), HarnessEvent::HostStop { host, why });
}

fn start_host(sim: &mut turmoil::Sim<'static>, world: &World, host: &str, why: HostChange) {
    crate::env::tear_down(|| sim.bounce(host));
    let host = host.to_string();
    world
        .trace
        .record_harness(sim.elapsed(), HarnessEvent::HostStart { host, why });
}

/// Plans a StatefulSet-style rolling change from `current` to `target` replicas.
fn plan_scale(
    reporters: &[String],
    current: u32,
    target: u32,
    at: Duration,
    every: Duration,
) -> Vec<(Duration, PodChange)> {
    let mut changes = Vec::new();
    if target > current {
        changes.extend((current..target).map(|i| PodChange::Start(reporters[i as usize].clone())));
    } else {
        changes.extend(
            (target..current)
                .rev()
                .map(|i| PodChange::Stop(reporters[i as usize].clone())),
        );
    }
    changes.extend(
        (0..current.min(target))
            .rev()
            .map(|i| PodChange::Restart(reporters[i as usize].clone())),
    );
    changes
        .into_iter()
        .enumerate()
        .map(|(k, c)| (at + every * k as u32, c))
        .collect()
}

fn apply_pod_change(
    sim: &mut turmoil::Sim<'static>,
    world: &World,
    change: &PodChange,
    down: &mut Down,
) {
    match change {
        PodChange::Start(host) => {
            down.stopped.remove(host);
            start_host(sim, world, host, HostChange::ScaleUp);
        }
        PodChange::Stop(host) => {
            down.stopped.insert(host.clone());
            stop_host(sim, world, host, HostChange::ScaleDown);
        }
        PodChange::Restart(host)
            if !down.crashed.contains(host) && !down.stopped.contains(host) =>
        {
            start_host(sim, world, host, HostChange::RollingRestart);
        }
        PodChange::Restart(_) => {}
    }
}

/// The harness as faults see it: the simulation, the world's knobs, and the bookkeeping of
/// hosts taken down and pod changes planned.
struct Harness<'a> {
    sim: &'a mut turmoil::Sim<'static>,
    scenario: &'a Scenario,
    world: &'a World,
    down: &'a mut Down,
    pods: &'a mut Vec<(Duration, PodChange)>,
}

impl Target for Harness<'_> {
    fn partition(&mut self, a: &str, b: &str) {
        self.sim.partition(a, b);
    }

    fn repair(&mut self, a: &str, b: &str) {
        self.sim.repair(a, b);
    }

    fn crash(&mut self, host: &str) {
        self.down.crashed.insert(host.to_string());
        stop_host(self.sim, self.world, host, HostChange::Crash);
        // The events path's bus keeps only what it flushed (one host has the platform role).
        if host == host_of(self.scenario, Role::Platform) {
            self.world.platform.crash();
        }
    }

    fn restart(&mut self, host: &str) {
        self.down.crashed.remove(host);
        start_host(self.sim, self.world, host, HostChange::Restart);
    }

    fn set_latency(&mut self, a: &str, b: &str, max: Duration) {
        self.sim.set_link_max_message_latency(a, b, max);
    }

    fn patch_apiserver(&mut self, patch: &ApiServerPatch) {
        let knobs = patch.apply(&self.world.api.knobs());
        self.world.api.set_knobs(knobs);
        // Hosted runtimes' virtual API servers suffer the same (the tenants' own clusters).
        for tenant in self.world.vclusters.values() {
            tenant.api.set_knobs(patch.apply(&tenant.api.knobs()));
        }
    }

    fn rotate_token(&mut self, _argocd: &str, secret_after: Duration) {
        let next = self.world.argocd_tokens.rotate();
        if let Some(secret) = &self.world.token_secret {
            secret.set(next, self.sim.elapsed() + secret_after);
        }
    }

    fn change_git(&mut self, change: &crate::scenario::model::GitChange) {
        let mut git = self.world.git.lock();
        git.serving.latency = change.latency.unwrap_or(git.serving.latency);
        git.serving.outage = change.outage.unwrap_or(git.serving.outage);
        git.serving.rate_limit = change.rate_limit.unwrap_or(git.serving.rate_limit);
        git.serving.hourly_limit = change.hourly_limit.unwrap_or(git.serving.hourly_limit);
        git.serving.lost_commit_answers = change
            .lost_commit_answers
            .unwrap_or(git.serving.lost_commit_answers);
    }

    fn unregister(&mut self, host: &str) {
        self.world
            .unregister
            .lock()
            .expect("unregister lock")
            .insert(host.to_string());
    }

    fn flush(&mut self, host: &str) {
        if let Some(store) = self.world.caches.lock().expect("caches lock").get(host) {
            store.flush();
        }
    }

    fn change_platform(&mut self, change: &PlatformChange) {
        let mut knobs = self.world.platform.knobs();
        knobs.api_latency = change.api_latency.unwrap_or(knobs.api_latency);
        knobs.handler_delay = change.handler_delay.unwrap_or(knobs.handler_delay);
        if let Some(reject) = &change.reject {
            knobs.reject = http::StatusCode::from_u16(reject.status)
                .ok()
                .filter(|_| reject.percent > 0)
                .map(|status| (status, reject.percent));
        }
        self.world.platform.set_knobs(knobs);
        if let (Some(silent), Some(builds)) =
            (change.runner_silent, &self.world.control_plane.runner)
        {
            builds.set_knobs(orrery_system::platform::runner::Knobs {
                silent,
                ..builds.knobs()
            });
        }
    }

    fn scale(&mut self, replicas: u32, every: Duration) {
        let mut current = self
            .world
            .reporter_replicas
            .lock()
            .expect("replicas lock poisoned");
        let planned = plan_scale(
            &reporter_hosts(self.scenario),
            *current,
            replicas,
            self.sim.elapsed(),
            every,
        );
        *current = replicas;
        self.pods.extend(planned);
        self.pods.sort_by_key(|(at, _)| *at);
    }
}

/// Applies one scheduled fault and records it in the trace.
fn apply_fault(harness: &mut Harness<'_>, step: &FaultStep) -> Result<AppliedFault, String> {
    let at_ms = harness.sim.elapsed().as_millis() as u64;
    let fault = Fault::from_step(step)
        .ok_or("a fault step without exactly one action (the parser should have refused it)")?;
    fault.apply(harness);
    let (action, detail) = (fault.name(), fault.detail());
    harness
        .world
        .trace
        .record_harness(harness.sim.elapsed(), HarnessEvent::Fault(fault));
    Ok(AppliedFault {
        at_ms,
        action: action.into(),
        detail,
    })
}

/// Heals everything for the calm phase: links, latencies, crashed hosts, knobs; stops the
/// workload. Hosts stopped by a scale-down stay down (that is the desired state).
fn start_calm(
    sim: &mut turmoil::Sim<'static>,
    scenario: &Scenario,
    world: &World,
    down: &mut Down,
) -> AppliedFault {
    let hosts: Vec<&str> = scenario
        .topology
        .hosts
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    for (i, a) in hosts.iter().enumerate() {
        for b in &hosts[i + 1..] {
            sim.repair(*a, *b);
            sim.set_link_max_message_latency(*a, *b, DEFAULT_MAX_LATENCY);
        }
    }
    let restarted: Vec<String> = std::mem::take(&mut down.crashed)
        .into_iter()
        .filter(|h| !down.stopped.contains(h))
        .collect();
    for host in &restarted {
        start_host(sim, world, host, HostChange::Calm);
    }
    world.api.set_knobs(scenario.apiserver.clone());
    for tenant in world.vclusters.values() {
        tenant.api.set_knobs(scenario.apiserver.clone());
    }
    world.platform.set_knobs(platform_knobs(scenario));
    if let Some(builds) = &world.control_plane.runner {
        builds.set_knobs(Default::default());
    }
    world.git.lock().serving = Default::default();
    world.calm.store(true, Ordering::SeqCst);
    let detail = json!({"restarted": restarted, "links_repaired": true, "knobs_reset": true, "workload_stopped": true});
    world
        .trace
        .record_harness(sim.elapsed(), HarnessEvent::CalmStart { restarted });
    AppliedFault {
        at_ms: sim.elapsed().as_millis() as u64,
        action: "calm".into(),
        detail,
    }
}

fn platform_knobs(scenario: &Scenario) -> platform_events::Knobs {
    platform_events::Knobs {
        api_latency: scenario.platform.api_latency,
        handler_delay: scenario.platform.handler_delay,
        reject: None,
    }
}

/// The API server's Applications: `namespace/name` → (name, rv, reported state), with
/// what Git says of their last sync (the app version at `syncResult.revision`, the change
/// revision's commit).
fn truth_of_apps(api: &ApiServer, git: &SharedGit) -> Vec<checkers::AppTruth> {
    use orrery_system::runtime::source_server::version;
    let git = git.lock();
    let kind = api
        .kind("applications")
        .expect("applications are served")
        .clone();
    let text = |o: Option<&Value>, field: &str| text(o, field).to_string();
    let mut apps: Vec<checkers::AppTruth> = Vec::new();
    api.store().visit(&kind, |o| {
        let (metadata, status) = (o.get("metadata"), o.get("status"));
        let name = text(metadata, "name");
        apps.push(checkers::AppTruth {
            key: format!("{}/{}", text(metadata, "namespace"), name),
            name,
            rv: text(metadata, "resourceVersion"),
            sync_status: text(status.and_then(|s| s.get("sync")), "status"),
            revision: text(status.and_then(|s| s.get("sync")), "revision"),
            health_status: text(status.and_then(|s| s.get("health")), "status"),
            destination: text(o.get("spec").and_then(|s| s.get("destination")), "server"),
            change_revision: o
                .at("/status/operationState/operation/sync/changeRevision")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            ..Default::default()
        });
        let truth = apps.last_mut().expect("just pushed");
        let source = o.at("/spec/source");
        let (repo, path) = (text(source, "repoURL"), text(source, "path"));
        let synced = o
            .at("/status/operationState/syncResult/revision")
            .and_then(Value::as_str)
            .unwrap_or("");
        if let Some(files) = (!synced.is_empty())
            .then(|| git.files_at(&repo, synced, &path))
            .flatten()
        {
            truth.app_version =
                version::application_versions(&files, &path, &version::VersionSource::default())
                    .ok()
                    .and_then(|v| {
                        v.get("appVersion")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
                    .unwrap_or_default();
        }
        if let Some(commit) = git.commit_by_sha(&repo, &truth.change_revision) {
            truth.change_commit = Some((commit.author.clone(), commit.message.clone()));
        }
    });
    // Store order is (namespace, name) already; the sort keeps the contract explicit.
    apps.sort_by(|a, b| a.key.cmp(&b.key));
    apps
}

/// Every change revision the ACR controller wrote into an app that still exists, judged
/// against Git: does the commit change a file under the app's refresh paths (its annotation
/// and source path as the API server holds them at the end)?
/// The releases the orchestrator recorded and the promotion commits (on any branch).
fn promotion_truth(
    scenario: &Scenario,
    git: &SharedGit,
    control_plane: &ControlPlaneState,
) -> Option<checkers::promotions::PromotionTruth> {
    use crate::world::promotions::{Planned, REPO};
    let planned = Planned::of(scenario.promotions.as_ref()?).ok()?;
    let git = git.lock();
    let mut commits = Vec::new();
    {
        // Every branch: a pull request's promotion commit is on its branch.
        for commit in git.commits(REPO) {
            let trailer = |name: &str| {
                commit
                    .message
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_string())
            };
            let (Some(task), Some(step)) =
                (trailer("Promotion-Task: "), trailer("Promotion-Step: "))
            else {
                continue;
            };
            let task = task.rsplit('/').next().unwrap_or("").to_string();
            for path in commit.changes.keys() {
                commits.push(checkers::promotions::PromotionCommit {
                    task: task.clone(),
                    step: step.parse().unwrap_or(0),
                    path: path.clone(),
                    sha: commit.sha.clone(),
                    unix_ms: commit.unix_ms,
                });
            }
        }
    }
    let depends_on = planned
        .flows
        .iter()
        .map(|(name, flow)| {
            let mut deps: BTreeMap<String, Vec<String>> = flow
                .stages
                .iter()
                .map(|s| (s.environment.clone(), s.depends_on.clone()))
                .collect();
            deps.insert(flow.trigger.clone(), Vec::new());
            (name.clone(), deps)
        })
        .collect();
    use orrery_system::platform::promotions::{CALL_TIMEOUT, DEFAULT_TIMEOUT, POLL};
    let timeout_ms = planned
        .flows
        .iter()
        .map(|(name, flow)| {
            let timeout = flow.timeout_s.map_or(DEFAULT_TIMEOUT, Duration::from_secs);
            (name.clone(), timeout.as_millis() as u64)
        })
        .collect();
    Some(checkers::promotions::PromotionTruth {
        releases: control_plane.releases.lock().clone(),
        commits,
        depends_on,
        timeout_ms,
        slack_ms: (2 * POLL + 2 * CALL_TIMEOUT).as_millis() as u64,
        epoch_ms: crate::env::SIM_EPOCH_UNIX_MS,
    })
}

fn attributions(
    events: &[crate::trace::TraceEvent],
    api: &ApiServer,
    git: &SharedGit,
) -> Vec<checkers::Attribution> {
    use orrery_system::observe::AcrEvent;
    use orrery_system::runtime::acr::paths;
    let patched: Vec<(u64, &String, &String)> = events
        .iter()
        .filter_map(|e| match e.acr()? {
            AcrEvent::Patched { app, revision, .. } if !revision.is_empty() => {
                Some((e.at_ms, app, revision))
            }
            _ => None,
        })
        .collect();
    if patched.is_empty() {
        return Vec::new();
    }
    // Each app's repository and refresh paths.
    let mut apps: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    if let Some(kind) = api.kind("applications").cloned() {
        api.store().visit(&kind, |o| {
            let metadata = o.get("metadata");
            let key = format!("{}/{}", text(metadata, "namespace"), text(metadata, "name"));
            let source = o.at("/spec/source");
            let annotation = o
                .at("/metadata/annotations")
                .and_then(|a| a.get(paths::MANIFEST_GENERATE_PATHS))
                .and_then(Value::as_str)
                .unwrap_or("");
            apps.insert(
                key,
                (
                    text(source, "repoURL").to_string(),
                    paths::refresh_paths(annotation, text(source, "path")),
                ),
            );
        });
    }
    let git = git.lock();
    patched
        .into_iter()
        // An app deleted since has no paths left to judge by (names are never reused).
        .filter_map(|(at_ms, app, revision)| {
            let (repo, refresh) = apps.get(app)?;
            let touches = git
                .commit_by_sha(repo, revision)
                .is_some_and(|commit| commit.touches(refresh));
            Some(checkers::Attribution {
                at_ms,
                app: app.clone(),
                revision: revision.clone(),
                touches,
            })
        })
        .collect()
}

/// The API server's Rollouts with their ReplicaSets' replicas (empty when Rollouts are not
/// served).
/// The Runner's builds, and the Pods and claims of builds left in the cluster.
fn runner_truth(
    builds: &orrery_system::platform::runner::Builds,
    api: &ApiServer,
    git: &SharedGit,
    scenario: &Scenario,
) -> checkers::runner::RunnerTruth {
    let mut objects = Vec::new();
    let store = api.store();
    for plural in ["pods", "persistentvolumeclaims"] {
        let Some(kind) = api.kind(plural).cloned() else {
            continue;
        };
        store.visit(&kind, |o| {
            let metadata = o.get("metadata");
            let build = metadata
                .and_then(|m| m.get("labels"))
                .and_then(|l| l.get(orrery_system::core::runner::BUILD_LABEL))
                .and_then(Value::as_str);
            if let Some(build) = build {
                objects.push((
                    kind.kind.clone(),
                    text(metadata, "name").to_string(),
                    build.to_string(),
                ));
            }
        });
    }
    let queue = builds.lock();
    checkers::runner::RunnerTruth {
        builds: queue.builds().cloned().collect(),
        objects,
        limit: scenario.runner.as_ref().and_then(|r| r.concurrency),
        branch_limit: scenario.runner.as_ref().and_then(|r| r.branch_concurrency),
        account_limit: scenario.runner.as_ref().and_then(|r| r.account_concurrency),
        trigger_limit: scenario.runner.as_ref().and_then(|r| r.trigger_concurrency),
        replicas: scenario.runner.as_ref().map_or(1, |r| r.replicas),
        started_ms: SIM_EPOCH_UNIX_MS,
        crons: queue.crons().clone(),
        missed: queue.missed().to_vec(),
        calm_ms: SIM_EPOCH_UNIX_MS + scenario.duration.as_millis() as u64,
        proxies: queue
            .tasks()
            .filter(|q| q.task.kind == orrery_system::core::runner::TaskType::AgentTask)
            .map(|q| checkers::runner::ProxyTruth {
                task: q.task.id.clone(),
                message: q
                    .task
                    .spec
                    .pointer("/params/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                state: q.state.clone(),
            })
            .collect(),
        committed: git
            .lock()
            .commits(crate::world::runner::PROXY_REPO)
            .iter()
            .fold(BTreeMap::new(), |mut counts, c| {
                *counts.entry(c.message.clone()).or_insert(0) += 1;
                counts
            }),
    }
}

fn rollout_truth(api: &ApiServer) -> Vec<checkers::resources::RolloutTruth> {
    let (Some(rollouts), Some(sets)) = (
        api.kind("rollouts").cloned(),
        api.kind("replicasets").cloned(),
    ) else {
        return Vec::new();
    };
    let mut truth: BTreeMap<String, checkers::resources::RolloutTruth> = BTreeMap::new();
    let store = api.store();
    store.visit(&rollouts, |o| {
        let metadata = o.get("metadata");
        let status = o.get("status");
        let key = format!("{}/{}", text(metadata, "namespace"), text(metadata, "name"));
        truth.insert(
            key.clone(),
            checkers::resources::RolloutTruth {
                key,
                phase: text(status, "phase").to_string(),
                step: status
                    .and_then(|s| s.get("currentStepIndex"))
                    .and_then(Value::as_i64),
                replica_sets: BTreeMap::new(),
            },
        );
    });
    store.visit(&sets, |o| {
        let metadata = o.get("metadata");
        let owner = metadata
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|r| r["kind"] == "Rollout")
            .and_then(|r| r["name"].as_str());
        let Some(owner) = owner else { return };
        let key = format!("{}/{owner}", text(metadata, "namespace"));
        let hash = metadata
            .and_then(|m| m.get("labels"))
            .and_then(|l| l.get("rollouts-pod-template-hash"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let replicas = o
            .get("spec")
            .and_then(|s| s.get("replicas"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if let Some(rollout) = truth.get_mut(&key) {
            rollout.replica_sets.insert(hash.to_string(), replicas);
        }
    });
    truth.into_values().collect()
}

/// Records how many Rollouts the platform shows differently from the API server.
fn sample_rollouts(sim: &turmoil::Sim<'static>, world: &World) {
    let truth = rollout_truth(&world.api);
    let stale = checkers::resources::stale_rollouts(&truth, &world.platform.rollouts());
    world.trace.record_harness(
        sim.elapsed(),
        HarnessEvent::StaleRollouts {
            rollouts: truth.len() as u64,
            stale: stale.len() as u64,
        },
    );
}

/// Records how many Workflows the platform shows in another phase than the API server's.
fn sample_workflows(sim: &turmoil::Sim<'static>, world: &World) {
    let Some(kind) = world.api.kind("workflows").cloned() else {
        return;
    };
    let shown: BTreeMap<String, String> = world
        .platform
        .workflows()
        .into_iter()
        .filter(|(_, view)| !view.deleted)
        .filter_map(|(key, view)| Some((key.split_once('/')?.1.to_string(), view.fields.phase)))
        .collect();
    let (mut workflows, mut stale) = (0u64, 0u64);
    world.api.store().visit(&kind, |o| {
        let metadata = o.get("metadata");
        let key = format!("{}/{}", text(metadata, "namespace"), text(metadata, "name"));
        let phase = text(o.get("status"), "phase");
        workflows += 1;
        if shown.get(&key).map(String::as_str) != Some(phase) {
            stale += 1;
        }
    });
    world.trace.record_harness(
        sim.elapsed(),
        HarnessEvent::StaleWorkflows { workflows, stale },
    );
}

/// Records how many apps the platform shows differently from the API server (a time series):
/// counts what [`checkers::stale_apps`] of [`truth`] would return, from borrowed objects and
/// the read model in place (a copy of 10,000 apps per sample cost 7 % of a run).
///
/// The count depends only on the API server's apps and the platform's app states, so a
/// sample taken when neither moved since the last one (no Application written, the read
/// model's update count the same) repeats the last count without recounting.
fn sample_staleness(
    sim: &turmoil::Sim<'static>,
    world: &World,
    last: &mut Option<StaleSample>,
    views: &mut AppViews,
) {
    let kind = world
        .api
        .kind("applications")
        .expect("applications are served")
        .clone();
    let marks = (
        world.api.store().last_write(&kind),
        world.platform.projection_counts().0,
    );
    let (apps, stale) = match last {
        Some(sample) if sample.marks == marks => sample.counts,
        _ => {
            let counts = count_stale(world, &kind, views);
            *last = Some(StaleSample { marks, counts });
            counts
        }
    };
    world
        .trace
        .record_harness(sim.elapsed(), HarnessEvent::StaleApps { apps, stale });
}

/// The last staleness count and what it was counted from: (RV of the last write to an
/// Application, read model updates).
struct StaleSample {
    marks: (u64, u64),
    counts: (u64, u64),
}

/// What the staleness count reads of one app, kept from one sample to the next: an app
/// whose stored object is the same `Arc` (every write stores a new one) is not read again.
/// With 10,000 apps sampled every 10 s, reading them afresh was most of the harness's time.
struct AppView {
    /// The object read. Weak: a replaced object's tree is freed as soon as the store drops
    /// it, while its `Arc`'s address stays taken (so never equal to a newer object's).
    object: std::sync::Weak<Value>,
    /// `namespace/name`, as the platform keys its read model.
    key: String,
    /// Where the namespace ends in `key`.
    namespace_len: usize,
    sync: String,
    revision: String,
    health: String,
}

impl AppView {
    fn of(namespace: &str, name: &str, object: &Arc<Value>) -> AppView {
        let status = object.get("status");
        let sync = status.and_then(|s| s.get("sync"));
        let health = status.and_then(|s| s.get("health"));
        AppView {
            object: Arc::downgrade(object),
            key: format!("{namespace}/{name}"),
            namespace_len: namespace.len(),
            sync: text(sync, "status").to_string(),
            revision: text(sync, "revision").to_string(),
            health: text(health, "status").to_string(),
        }
    }

    /// (namespace, name): the store's order.
    fn store_key(&self) -> (&str, &str) {
        (
            &self.key[..self.namespace_len],
            &self.key[self.namespace_len + 1..],
        )
    }
}

/// The apps' views in the store's key order, as of the last count.
#[derive(Default)]
struct AppViews {
    views: Vec<AppView>,
    /// Objects the last refresh read (the others were kept).
    read: usize,
}

impl AppViews {
    /// The views of the store's apps now: each kept if its object is unchanged, else read.
    fn refresh(&mut self, store: &apiserver::store::Store, kind: &apiserver::ResourceKind) {
        let old = std::mem::take(&mut self.views);
        self.views.reserve(old.len());
        let mut old = old.into_iter().peekable();
        self.read = 0;
        for (namespace, name, object) in store.iter_shared(kind) {
            while old.next_if(|v| v.store_key() < (namespace, name)).is_some() {}
            let view = old
                .next_if(|v| {
                    v.store_key() == (namespace, name)
                        && std::ptr::eq(v.object.as_ptr(), Arc::as_ptr(object))
                })
                .unwrap_or_else(|| {
                    self.read += 1;
                    AppView::of(namespace, name, object)
                });
            self.views.push(view);
        }
    }
}

/// (apps, stale apps) now: [`checkers::stale_count`] over the store's apps.
fn count_stale(world: &World, kind: &apiserver::ResourceKind, views: &mut AppViews) -> (u64, u64) {
    views.refresh(&world.api.store(), kind);
    world.platform.with_apps_of(RUNTIME_NAME, |reported| {
        let apps = views.views.iter().map(|v| {
            (
                v.key.as_str(),
                v.sync.as_str(),
                v.revision.as_str(),
                v.health.as_str(),
            )
        });
        checkers::stale_count(apps, reported)
    })
}

/// `o[field]` as text ("" when absent or not a string).
fn text<'a>(o: Option<&'a Value>, field: &str) -> &'a str {
    o.and_then(|o| o.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// How often the harness samples platform staleness when reporters run.
const STALENESS_SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// Runs `scenario` with `seed` for `variant`.
///
/// The variant selects the design of components that have one (the application event
/// reporter); the watch-convergence world has none, so there both variants run the same
/// code and are expected to pass alike. Four phases: the world is built, the simulation
/// steps through the fault schedule, the final state is read off the world, and the
/// checkers judge the trace and that state.
pub fn run(scenario: &Scenario, seed: u64, variant: Variant) -> RunOutcome {
    run_driven(scenario, seed, variant, Drive::default())
}

/// How a run is driven, besides its scenario, seed and variant.
#[derive(Clone, Copy, Debug, Default)]
pub struct Drive {
    /// Real time slept before each simulation step. A run's trace must not change with it:
    /// code that reads the wall clock — directly or inside a library, as h2's expiry of
    /// locally reset streams did — traces differently when the run is slow, as it is on a
    /// loaded machine. The determinism tests drive runs slowly to find such code.
    pub real_delay_per_step: Duration,
}

/// [`run`], driven as `drive` says.
pub fn run_driven(scenario: &Scenario, seed: u64, variant: Variant, drive: Drive) -> RunOutcome {
    // A swarm scenario runs the plain scenario its seed draws (the same one
    // `orrery run --print-scenario` writes).
    let concrete = crate::scenario::draw::concretize(scenario, seed);
    let scenario = &concrete;
    let trace = Trace::default();
    let world = build_world(scenario, variant, &trace);
    let stepped = simulate(scenario, seed, variant, &world, &trace, drive);
    if std::env::var_os("ORRERY_DEBUG_TRACE").is_some() {
        for e in trace.events() {
            eprintln!("{}", e.line());
        }
    }
    let events = trace.events();
    let state = final_state(scenario, variant, &world, &events, stepped.end_ms);
    let (result, violations) = judge(scenario, &events, &state, stepped.error.is_some());
    let reached = crate::explore::reach::reached(scenario, &events);
    let fault_points = crate::explore::reach::fault_points(&events);
    RunOutcome {
        result,
        violations,
        faults: stepped.faults,
        trace,
        sim_seconds: stepped.sim_seconds,
        harness_error: stepped.error,
        state,
        reached,
        fault_points,
    }
}

/// The world of a run before its first step: the simulated dependencies, the control plane's
/// state with the runtimes registered, and Git seeded with the workload.
fn build_world(scenario: &Scenario, variant: Variant, trace: &Trace) -> World {
    let reporters = reporter_hosts(scenario);
    let initial_replicas = scenario.reporter.replicas.unwrap_or(reporters.len() as u32);
    let platform = Platform::new(platform_events::Config {
        tokens: [(RUNTIME_TOKEN.to_string(), RUNTIME_NAME.to_string())]
            .into_iter()
            .collect(),
        bus_capacity: scenario.platform.bus_capacity,
        durability: platform_events::bus::Durability::of(variant),
        idempotency_keys: variant == Variant::Hardened,
    });
    // A bundled Argo CD accepts the token the runtime is configured with; an existing one
    // issued its own.
    let argocd_tokens = match scenario.argocd.install {
        Install::Bundled => argocd::Tokens::from(ARGOCD_TOKEN),
        Install::Existing => argocd::Tokens::from(EXISTING_ARGOCD_TOKEN),
    };
    let cost = Arc::<crate::world::cost::Cost>::default();
    let namespaces = namespaces_used(scenario);
    let booted = |namespaces: &[String]| {
        let (knobs, cost) = (scenario.apiserver.clone(), cost.clone());
        ApiServer::booted(knobs, cost, namespaces, Duration::ZERO, SIM_EPOCH_UNIX_MS)
    };
    // The host cluster also holds each virtual cluster's namespace (the platform made it
    // with the vcluster).
    let vclusters = hosts_with(scenario, Role::Vcluster);
    let host_namespaces = vclusters
        .iter()
        .map(|v| crate::world::hosted::host_namespace(v));
    let world = World {
        api: booted(
            &namespaces
                .iter()
                .cloned()
                .chain(host_namespaces)
                .collect::<Vec<_>>(),
        ),
        git: SharedGit::default(),
        health: HealthOverrides::default(),
        calm: Arc::new(AtomicBool::new(false)),
        trace: trace.clone(),
        platform: platform.clone(),
        reporter_replicas: Arc::new(Mutex::new(initial_replicas)),
        cost: cost.clone(),
        caches: Arc::default(),
        bus: Default::default(),
        unregister: Arc::default(),
        argocd_tokens: argocd_tokens.clone(),
        token_secret: (scenario.argocd.install == Install::Existing)
            .then(|| workload::TokenSecret::new(argocd_tokens.current())),
        control_plane: ControlPlaneState {
            events: Some(platform),
            runner: scenario
                .runner
                .as_ref()
                .map(|r| crate::world::runner::builds(scenario, r, variant)),
            ..Default::default()
        },
        runner_builds_made: Arc::default(),
        runner_proxies_made: Arc::default(),
        verdicts: rollouts::Verdicts::default(),
        jobs: workflows::Jobs::default(),
        database: scenario
            .topology
            .hosts
            .iter()
            .any(|h| h.has(Role::Database))
            .then(crate::world::database::Database::default),
        vclusters: vclusters
            .into_iter()
            .map(|host| {
                let tenant = crate::world::hosted::Tenant {
                    api: booted(&namespaces),
                    git: SharedGit::default(),
                    health: HealthOverrides::default(),
                };
                (host, tenant)
            })
            .collect(),
    };
    seed_world(scenario, &world);
    world
}

/// The namespaces the scenario's components write into, which every API server of its
/// world holds from its first boot (with kube-apiserver's own four), as a cluster's
/// bootstrap creates them: a write into any other namespace is refused as kube-apiserver
/// refuses it (404, `namespaces "x" not found`).
fn namespaces_used(scenario: &Scenario) -> Vec<String> {
    let mut names = BTreeSet::from([argocd::NAMESPACE.to_string()]);
    names.extend(scenario.argocd.application_namespaces.iter().cloned());
    let loads = &scenario.workload;
    names.extend(loads.rollouts.as_ref().map(|l| l.namespace.clone()));
    names.extend(loads.workflows.as_ref().map(|l| l.namespace.clone()));
    if scenario.runner.is_some() {
        names.insert(crate::world::runner::NAMESPACE.to_string());
    }
    if scenario.hosted.is_some() {
        let hosted = crate::world::hosted::NAMESPACES.iter();
        let colliding = crate::world::hosted::COLLIDING.iter().map(|(ns, _)| ns);
        names.extend(hosted.chain(colliding).map(|ns| ns.to_string()));
    }
    names.into_iter().collect()
}

/// What the world holds before the run starts, as an earlier life of the platform left it:
/// the runtimes (tenants', hosted) registered with their users' grants, the promotion
/// orchestrator's jobs, and every Git repository seeded with its workload.
fn seed_world(scenario: &Scenario, world: &World) {
    if let Some(promotions) = &scenario.promotions {
        world.control_plane.permissions.grant_in(
            crate::world::promotions::ORCHESTRATOR_TOKEN,
            tunnel::ACCOUNT,
            "promotion-orchestrator",
            &["promotions:write", "promotions:read"],
        );
        crate::world::promotions::program_jobs(&world.jobs, promotions);
    }
    if let Some(tenants) = &scenario.tenants {
        let per_host = scenario.tunnel.runtimes_per_host;
        crate::world::tenants::register(
            &world.control_plane.registry,
            &world.control_plane.permissions,
            &hosts_with(scenario, Role::Runtime),
            per_host,
            crate::world::tenants::ingress_runtime(tenants, per_host).as_deref(),
        );
    } else {
        tunnel::register(
            &world.control_plane.registry,
            &world.control_plane.permissions,
            &hosts_with(scenario, Role::Runtime),
            scenario.tunnel.runtimes_per_host,
        );
    }
    if let Some(hosted) = scenario.hosted.as_ref().filter(|h| h.runs_runtimes()) {
        let vclusters: Vec<String> = world.vclusters.keys().cloned().collect();
        crate::world::hosted::register(&world.control_plane.registry, &vclusters);
        let (config, layout) = crate::world::hosted::workload(hosted);
        for tenant in world.vclusters.values() {
            workload::seed_git(&tenant.git, &config, &layout, SIM_EPOCH_UNIX_MS);
        }
    }
    if let Some(database) = &world.database {
        // Registered before the run: committed by an earlier life of the platform.
        database.seed(world.control_plane.registry.stored());
    }
    world.platform.set_knobs(platform_knobs(scenario));
    let layout = workload::Layout::of(
        &scenario.workload,
        &scenario.argocd.application_namespaces,
        &hosts_with(scenario, Role::Cluster),
    );
    workload::seed_git(&world.git, &scenario.workload, &layout, SIM_EPOCH_UNIX_MS);
    if let Some(restricted) = &scenario.restricted_sources {
        crate::world::restricted::seed_git(&world.git, restricted, SIM_EPOCH_UNIX_MS);
    }
}

/// What stepping the simulation left: the faults applied, the simulated time it reached,
/// and the harness error that stopped it early (a host failed, a component panicked).
struct Stepped {
    faults: Vec<AppliedFault>,
    sim_seconds: f64,
    end_ms: u64,
    error: Option<String>,
}

/// Steps the world for the scenario's duration and calm phase: hosts registered, faults and
/// pod changes applied at their times, the calm phase started, staleness sampled.
fn simulate(
    scenario: &Scenario,
    seed: u64,
    variant: Variant,
    world: &World,
    trace: &Trace,
    drive: Drive,
) -> Stepped {
    let reporters = reporter_hosts(scenario);
    let resources = scenario
        .topology
        .hosts
        .iter()
        .any(|h| h.has(Role::Resources));
    let initial_replicas = scenario.reporter.replicas.unwrap_or(reporters.len() as u32);
    let total = scenario.duration + scenario.calm;
    let mut faults = Vec::new();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(scenario.tick)
        .epoch(std::time::UNIX_EPOCH + Duration::from_millis(SIM_EPOCH_UNIX_MS))
        .simulation_duration(total + Duration::from_secs(60))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(DEFAULT_MAX_LATENCY)
        .tcp_capacity(1024)
        .build();
    trace.record_harness(
        Duration::ZERO,
        HarnessEvent::RunStart {
            scenario: scenario.name.clone(),
            seed,
            variant,
            trace_format: crate::trace::TRACE_FORMAT,
        },
    );
    register_hosts(&mut sim, scenario, seed, variant, world);
    let mut down = Down::default();
    for host in reporters.iter().skip(initial_replicas as usize) {
        down.stopped.insert(host.clone());
        stop_host(&mut sim, world, host, HostChange::NotYetScaled);
    }
    let mut schedule: Vec<&FaultStep> = scenario.faults.iter().collect();
    schedule.sort_by_key(|s| s.at);
    let mut pods: Vec<(Duration, PodChange)> = Vec::new();
    let mut next_fault = 0;
    let mut calm_started = false;
    let mut next_sample = STALENESS_SAMPLE_EVERY;
    let mut last_sample = None;
    let mut app_views = AppViews::default();
    let stepped = std::panic::catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        while sim.elapsed() < total {
            while next_fault < schedule.len() && schedule[next_fault].at <= sim.elapsed() {
                let mut harness = Harness {
                    sim: &mut sim,
                    scenario,
                    world,
                    down: &mut down,
                    pods: &mut pods,
                };
                faults.push(apply_fault(&mut harness, schedule[next_fault])?);
                next_fault += 1;
            }
            while pods.first().is_some_and(|(at, _)| *at <= sim.elapsed()) {
                let (_, change) = pods.remove(0);
                apply_pod_change(&mut sim, world, &change, &mut down);
            }
            if !calm_started && sim.elapsed() >= scenario.duration {
                faults.push(start_calm(&mut sim, scenario, world, &mut down));
                calm_started = true;
            }
            if (!reporters.is_empty() || resources) && sim.elapsed() >= next_sample {
                if !reporters.is_empty() {
                    sample_staleness(&sim, world, &mut last_sample, &mut app_views);
                }
                if resources && scenario.workload.rollouts.is_some() {
                    sample_rollouts(&sim, world);
                }
                if resources && scenario.workload.workflows.is_some() {
                    sample_workflows(&sim, world);
                }
                next_sample += STALENESS_SAMPLE_EVERY;
            }
            if !drive.real_delay_per_step.is_zero() {
                std::thread::sleep(drive.real_delay_per_step); // determinism: the slow-run test's own delay
            }
            sim.step().map_err(|e| format!("a host failed: {e}"))?;
        }
        Ok(())
    }));
    let sim_seconds = sim.elapsed().as_secs_f64();
    let end_ms = sim.elapsed().as_millis() as u64;
    drop(sim);
    let harness_error = match stepped {
        Ok(Ok(())) => None,
        Ok(Err(message)) => Some(message),
        Err(panic) => Some(format!(
            "the simulation panicked: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    };
    Stepped {
        faults,
        sim_seconds,
        end_ms,
        error: harness_error,
    }
}

/// The truth the checkers compare the trace with, read off the world after the run.
fn final_state(
    scenario: &Scenario,
    variant: Variant,
    world: &World,
    events: &[crate::trace::TraceEvent],
    end_ms: u64,
) -> FinalState {
    FinalState {
        attributions: attributions(events, &world.api, &world.git),
        apps: truth_of_apps(&world.api, &world.git),
        reported: world.platform.apps_of(RUNTIME_NAME),
        end_ms,
        cost: {
            let mut counters = world.cost.counters();
            counters.extend(world.platform.traffic().counters());
            counters
        },
        unregistered: world
            .unregister
            .lock()
            .expect("unregister lock")
            .iter()
            .map(|host| workload::cluster_server(host))
            .collect(),
        rollouts: rollout_truth(&world.api),
        reported_rollouts: world.platform.rollouts(),
        reported_workflows: world.platform.workflows(),
        promotions: promotion_truth(scenario, &world.git, &world.control_plane),
        runner: world
            .control_plane
            .runner
            .as_ref()
            .map(|builds| runner_truth(builds, &world.api, &world.git, scenario)),
        audit: match &world.database {
            // What the database committed: an answered denial must be there.
            Some(database) => database.snapshot().audit,
            None => world.control_plane.audit.all(),
        },
        database: world
            .database
            .as_ref()
            .map(|database| checkers::DatabaseTruth {
                snapshot: database.snapshot(),
                figures: database.figures(),
            }),
        hosted: world
            .vclusters
            .iter()
            .map(|(name, tenant)| {
                let mut truth = crate::world::hosted::truth(variant, name, &tenant.api, &world.api);
                if scenario.hosted.as_ref().is_some_and(|h| h.runs_runtimes()) {
                    let runtime = crate::world::hosted::runtime_name(name);
                    truth.runtime = Some(checkers::hosted::HostedRuntimeTruth {
                        apps: truth_of_apps(&tenant.api, &tenant.git),
                        reported: world.platform.apps_of(&runtime),
                        runtime,
                    });
                }
                truth
            })
            .collect(),
    }
}

/// The checkers' verdict: every violation, and the result class (a harness error first,
/// then any safety violation, then liveness).
fn judge(
    scenario: &Scenario,
    events: &[crate::trace::TraceEvent],
    state: &FinalState,
    harness_failed: bool,
) -> (Outcome, Vec<Violation>) {
    let mut checkers: Vec<_> = scenario
        .invariants
        .iter()
        .map(|i| checkers::build(i).expect("validated when parsed"))
        .collect();
    let violations = checkers::check(&mut checkers, events, state);
    let result = if harness_failed {
        Outcome::HarnessError
    } else if violations
        .iter()
        .any(|v| v.class == checkers::Class::Safety)
    {
        Outcome::SafetyViolation
    } else if !violations.is_empty() {
        Outcome::LivenessTimeout
    } else {
        Outcome::Pass
    };
    (result, violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::apiserver::resources::registry;
    use crate::world::apiserver::store::Store;

    fn app(name: &str, sync: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"project": "default"},
               "status": {"sync": {"status": sync, "revision": "r1"},
                          "health": {"status": "Healthy"}}})
    }

    /// The views as read afresh: what the count read before it kept views.
    fn read_afresh(store: &Store, kind: &apiserver::ResourceKind) -> Vec<[String; 4]> {
        store
            .iter_shared(kind)
            .map(|(namespace, name, object)| {
                let v = AppView::of(namespace, name, object);
                [v.key, v.sync, v.revision, v.health]
            })
            .collect()
    }

    /// The Namespace objects `api` holds, by name.
    fn namespaces_in(api: &ApiServer) -> Vec<String> {
        let store = api.store();
        let kind = api.namespace_kind();
        store
            .iter_shared(kind)
            .map(|(_, name, _)| name.to_string())
            .collect()
    }

    #[test]
    fn the_world_creates_the_namespaces_its_scenario_writes_into_and_requires_them() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let load = |name: &str| crate::scenario::load(&root.join(name)).expect("a scenario");
        let system = ["default", "kube-node-lease", "kube-public", "kube-system"];

        let resources = load("swarm-resources.yaml");
        let world = build_world(&resources, Variant::Hardened, &Trace::default());
        assert_eq!(
            world.api.namespace_mode(),
            apiserver::namespaces::Mode::Required
        );
        let mut want = vec!["argocd", "rollouts", "workflows"];
        want.extend(system);
        want.sort_unstable();
        assert_eq!(namespaces_in(&world.api), want);

        // The host cluster holds each virtual cluster's namespace; a virtual cluster only
        // what its tenants write into.
        let hosted = load("hosted-tenants.yaml");
        let world = build_world(&hosted, Variant::Faithful, &Trace::default());
        let host = namespaces_in(&world.api);
        let (name, tenant) = world.vclusters.iter().next().expect("a vcluster");
        let inside = namespaces_in(&tenant.api);
        for ns in [
            "prod",
            "staging",
            "team",
            "team-x-prod",
            "argocd",
            "default",
        ] {
            assert!(
                host.iter().any(|h| h == ns) && inside.iter().any(|i| i == ns),
                "{ns}"
            );
        }
        let vc = crate::world::hosted::host_namespace(name);
        assert!(host.contains(&vc) && !inside.contains(&vc), "{vc}");

        let runner = load("runner-agent-restart.yaml");
        let world = build_world(&runner, Variant::Faithful, &Trace::default());
        assert!(namespaces_in(&world.api)
            .iter()
            .any(|n| n == crate::world::runner::NAMESPACE));
    }

    fn kept(views: &AppViews) -> Vec<[String; 4]> {
        views
            .views
            .iter()
            .map(|v| {
                [
                    v.key.clone(),
                    v.sync.clone(),
                    v.revision.clone(),
                    v.health.clone(),
                ]
            })
            .collect()
    }

    #[test]
    fn kept_app_views_follow_every_write_and_keep_only_unchanged_objects() {
        let kind = registry()
            .into_iter()
            .find(|k| k.plural == "applications")
            .unwrap();
        let mut store = Store::default();
        let now = Duration::ZERO;
        // Names whose store order ("a" < "a-b" in namespace "n") differs from the
        // platform's key order ("n/a-b" < "n/a/…" is not at stake, but "n/a" < "n/a-b").
        for (namespace, name) in [("n", "a"), ("n", "a-b"), ("n", "b"), ("m", "z")] {
            store
                .create(&kind, namespace, app(name, "OutOfSync"), now, 0)
                .unwrap();
        }
        let mut views = AppViews::default();
        views.refresh(&store, &kind);
        assert_eq!(kept(&views), read_afresh(&store, &kind));
        assert_eq!(views.views[0].key, "m/z");
        assert_eq!(views.read, 4);

        // One app synced, one deleted, one created between two existing ones.
        store
            .patch_merge(
                &kind,
                "n",
                "a-b",
                &json!({"status": {"sync": {"status": "Synced", "revision": "r2"}}}),
                true,
                now,
            )
            .unwrap();
        store.delete(&kind, "n", "b", now, 0).unwrap();
        store
            .create(&kind, "n", app("a-a", "Unknown"), now, 0)
            .unwrap();
        views.refresh(&store, &kind);
        assert_eq!(kept(&views), read_afresh(&store, &kind));
        let synced = views.views.iter().find(|v| v.key == "n/a-b").unwrap();
        assert_eq!(
            (synced.sync.as_str(), synced.revision.as_str()),
            ("Synced", "r2")
        );
        assert!(!views.views.iter().any(|v| v.key == "n/b"));
        // Only the two written apps were read again.
        assert_eq!(views.read, 2);
        views.refresh(&store, &kind);
        assert_eq!(views.read, 0);
        assert_eq!(kept(&views), read_afresh(&store, &kind));
    }
}
