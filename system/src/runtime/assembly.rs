//! The runtime, assembled: one config naming the components to run, and one
//! [`run`]`(env, config, shutdown)` that starts them. `orrery serve runtime`, the simulated
//! world (one host per pod, or all on one host) and the benchmarks call it; nothing else wires
//! the runtime's components together.
//!
//! | component | enabled by | what it needs |
//! |---|---|---|
//! | tunnel clients | [`RuntimeConfig::tunnels`] (one per runtime name) | [`RuntimeConfig::router`] for the requests they carry, or [`RuntimeConfig::tunnel_local`] (a router in another process) |
//! | request routing service | [`RuntimeConfig::router`] (`ingress`: also on its own port) | the upstreams in its routes |
//! | app-proxy | [`RuntimeConfig::app_proxy`] | the platform, the Git provider, the Kubernetes API |
//! | application event reporter | [`RuntimeConfig::app_reporter`] | Kubernetes API, Argo CD, platform, dedup cache |
//! | dedup cache | [`RuntimeConfig::cache`] | — |
//! | resource event reporter | [`RuntimeConfig::resource_reporter`] | Kubernetes API, platform; faithful: the event bus |
//! | event bus (Argo Events EventBus) | [`RuntimeConfig::event_bus`] | — |
//! | Git webhook EventSources | [`RuntimeConfig::webhook_sources`] | the event bus |
//! | change-revision (ACR) controller | [`RuntimeConfig::acr`] | Kubernetes API, Argo CD |
//! | source server | [`RuntimeConfig::source_server`] | Argo CD (and its repo-server) |
//! | GitOps operator (one replica) | [`RuntimeConfig::operator`] | Kubernetes API, Git provider, Argo CD |

use std::future::Future;
use std::sync::Arc;

use super::router::{self, Router, Routes};
use super::{
    acr, app_proxy, app_reporter, cache, gitops_operator, resource_reporter, source_server,
    tunnel_client, webhook_source,
};
use std::time::Duration;

use crate::env::SharedEnv;
use crate::observe::TunnelEvent;

/// The request routing service: its routes, and whether it also listens directly.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// Where each path prefix goes.
    pub routes: Routes,
    /// Also serve the routes on this address (ingress mode); tunnels use them either way.
    pub ingress: Option<String>,
}

/// Which runtime components to run, and their settings.
#[derive(Clone, Debug, Default)]
pub struct RuntimeConfig {
    /// One tunnel client per runtime this process represents (a fleet host has many).
    pub tunnels: Vec<tunnel_client::Config>,
    /// Heartbeats to the platform's events path, one per runtime this process represents.
    pub heartbeats: Vec<super::heartbeat::Config>,
    /// The request routing service (required when there are tunnels, unless
    /// [`RuntimeConfig::tunnel_local`] names one elsewhere).
    pub router: Option<RouterConfig>,
    /// Tunnels hand every request, path unchanged, to this `host:port` instead of an
    /// in-process router: frpc's `local_ip:local_port`, which the chart points at the
    /// internal router's Service (`internal-router:80`) when each runs in its own pod.
    pub tunnel_local: Option<String>,
    /// The app-proxy.
    pub app_proxy: Option<app_proxy::Config>,
    /// The application event reporter (one replica).
    pub app_reporter: Option<app_reporter::Config>,
    /// The dedup cache, listening on this address.
    pub cache: Option<String>,
    /// The cache's memory, when the caller must reach it (the simulated world's `flush`
    /// fault); empty, new memory otherwise.
    pub cache_store: Option<cache::Store>,
    /// The resource event reporter (faithful: EventSource and Sensor; hardened: one process).
    pub resource_reporter: Option<resource_reporter::Config>,
    /// The event bus, listening on this address.
    pub event_bus: Option<String>,
    /// The bus's stored messages, when they must outlive this process (its file store);
    /// empty, new memory otherwise.
    pub bus_store: Option<resource_reporter::bus::Store>,
    /// Git webhook EventSources (one server each).
    pub webhook_sources: Vec<webhook_source::Config>,
    /// The change-revision (ACR) controller.
    pub acr: Option<acr::Config>,
    /// The source server.
    pub source_server: Option<source_server::Config>,
    /// The GitOps operator (one replica; replicas elect a leader through a Lease).
    pub operator: Option<gitops_operator::Config>,
    /// The Codefresh Runner's agent (one replica).
    pub runner: Option<super::runner::Config>,
    /// The stand-in for the engine pods of the runner's builds.
    pub engine: Option<super::runner::engine::Config>,
    /// The dind volume provisioner and the local volumes cleaner of the runner's builds.
    pub volumes: Option<super::runner::volumes::Config>,
    /// Who restarts a tunnel client that exits (faithful: a failed first login ends it, as
    /// it ends frpc). `None` in real mode: the client gives up, the process exits and the
    /// real kubelet restarts the pod. The simulator has no kubelet, so its world passes
    /// kubelet's CrashLoopBackOff here.
    pub tunnel_restart: Option<CrashLoopBackOff>,
}

/// Kubelet's restart backoff for a container that keeps exiting ("CrashLoopBackOff"): the
/// first exit is restarted at once (kubelet has no backoff entry for it yet), then 10 s,
/// doubling to 5 minutes; a container that ran 10 minutes without exiting starts over
/// (Kubernetes documentation, "Pod Lifecycle: container restarts"; kubelet's `doBackOff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashLoopBackOff {
    /// The first restart's delay.
    pub initial: Duration,
    /// The longest delay.
    pub cap: Duration,
    /// A run this long puts the delay back to `initial`.
    pub reset_after: Duration,
}

impl CrashLoopBackOff {
    /// Kubelet's defaults: 10 s, 300 s, 10 min.
    pub fn kubelet() -> Self {
        CrashLoopBackOff {
            initial: Duration::from_secs(10),
            cap: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }

    /// The delay before restart number `restarts` (0 for the first: at once).
    pub fn delay(&self, restarts: u32) -> Duration {
        match restarts {
            0 => Duration::ZERO,
            n => self
                .initial
                .saturating_mul(1u32 << (n - 1).min(16))
                .min(self.cap),
        }
    }
}

/// Why the runtime stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A component could not start (a port in use, an unusable address).
    #[error("{component}: {source}")]
    Start {
        /// Which component.
        component: &'static str,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Every tunnel client gave up (faithful: its first login was refused), as the real
    /// client exits and its pod restarts.
    #[error("tunnel client {runtime}: {source}")]
    TunnelGaveUp {
        /// The runtime whose client gave up last.
        runtime: String,
        /// Why.
        #[source]
        source: tunnel_client::Fatal,
    },
    /// Tunnels were configured without a router to hand their requests to.
    #[error("tunnel clients need a router (RuntimeConfig::router or RuntimeConfig::tunnel_local)")]
    NoRouter,
}

/// Runs the enabled components until `shutdown` resolves or the runtime cannot go on
/// (every tunnel client gave up). Either way the components stop when this returns; after
/// a requested shutdown the hardened reporter also releases its lease.
pub async fn run(
    env: SharedEnv,
    config: RuntimeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    // Servers live as long as this future: dropping the set stops them.
    let mut servers = tokio::task::JoinSet::new();
    if let Some(addr) = config.cache.clone() {
        let cache_env = env.clone();
        let store = config.cache_store.clone().unwrap_or_default();
        spawn_server(&mut servers, &env, "cache", async move {
            cache::run_with(cache_env, &addr, store).await
        });
    }
    if let Some(addr) = config.event_bus.clone() {
        let bus_env = env.clone();
        let store = config.bus_store.clone().unwrap_or_default();
        spawn_server(&mut servers, &env, "event-bus", async move {
            resource_reporter::bus::run(bus_env, &addr, store).await
        });
    }
    for source in config.webhook_sources.clone() {
        let source_env = env.clone();
        spawn_server(&mut servers, &env, "webhook-eventsource", async move {
            webhook_source::run(source_env, source).await
        });
    }
    if let Some(reporter) = config.resource_reporter.clone() {
        let reporter_env = env.clone();
        servers.spawn(resource_reporter::run(reporter_env, reporter));
    }
    if let Some(controller) = config.acr.clone() {
        servers.spawn(acr::run(env.clone(), controller));
    }
    for heartbeat in config.heartbeats.clone() {
        servers.spawn(super::heartbeat::run(env.clone(), heartbeat));
    }
    if let Some(operator) = config.operator.clone() {
        servers.spawn(gitops_operator::run(env.clone(), operator));
    }
    if let Some(agent) = config.runner.clone() {
        servers.spawn(super::runner::run(env.clone(), agent));
    }
    if let Some(engine) = config.engine.clone() {
        servers.spawn(super::runner::engine::run(env.clone(), engine));
    }
    if let Some(volumes) = config.volumes.clone() {
        servers.spawn(super::runner::volumes::run(env.clone(), volumes));
    }
    if let Some(sources) = config.source_server.clone() {
        let sources_env = env.clone();
        spawn_server(&mut servers, &env, "source-server", async move {
            source_server::run(sources_env, sources).await
        });
    }
    if let Some(proxy) = config.app_proxy.clone() {
        let proxy_env = env.clone();
        spawn_server(
            &mut servers,
            &env,
            "app-proxy",
            app_proxy::run(proxy_env, proxy),
        );
    }
    let reporter = {
        let (env, reporter) = (env.clone(), config.app_reporter.clone());
        async move {
            match reporter {
                Some(reporter) => app_reporter::run(env, reporter).await,
                None => std::future::pending().await,
            }
        }
    };
    let router = match &config.router {
        Some(settings) => {
            if let Some(addr) = settings.ingress.clone() {
                let (ingress_env, routes) = (env.clone(), settings.routes.clone());
                spawn_server(&mut servers, &env, "router", async move {
                    router::run(ingress_env, routes, &addr).await
                });
            }
            Some(Router::new(env.clone(), settings.routes.clone()))
        }
        None => config
            .tunnel_local
            .as_ref()
            .map(|upstream| Router::to_one(env.clone(), upstream.clone())),
    };
    let (mut clients, gave_up) = tunnels(&env, &config, router)?;
    let requested = tokio::select! {
        biased;
        () = shutdown => Ok(true),
        ended = gave_up => ended.map(|()| false),
        () = reporter => Ok(false),
    };
    // The reporter's future is gone (its tasks stopped); stop the servers and clients too.
    servers.abort_all();
    clients.abort_all();
    if requested? {
        if let Some(reporter) = &config.app_reporter {
            app_reporter::release_lease(env.clone(), reporter).await;
        }
    }
    Ok(())
}

/// Spawns a server into `servers`; a server that cannot start or stops with an error is
/// logged, not fatal to the other components.
fn spawn_server(
    servers: &mut tokio::task::JoinSet<()>,
    env: &SharedEnv,
    component: &'static str,
    server: impl Future<Output = std::io::Result<()>> + Send + 'static,
) {
    let host = env.identity().host.clone();
    servers.spawn(async move {
        if let Err(error) = server.await {
            tracing::error!(%host, component, %error, "component stopped");
        }
    });
}

/// Starts one client per configured tunnel; the returned future resolves when every one of
/// them has given up for good (never, when there are none).
#[allow(clippy::type_complexity)]
fn tunnels(
    env: &SharedEnv,
    config: &RuntimeConfig,
    router: Option<Arc<Router>>,
) -> Result<
    (
        tokio::task::JoinSet<()>,
        impl Future<Output = Result<(), Error>>,
    ),
    Error,
> {
    let handler: Option<tunnel_client::Handler> = match (router, config.tunnels.is_empty()) {
        (_, true) => None,
        (None, false) => return Err(Error::NoRouter),
        (Some(router), false) => Some(Arc::new(move |request| {
            let router = router.clone();
            Box::pin(async move { router.handle(request).await })
        })),
    };
    let (gave_up, mut exits) = tokio::sync::mpsc::unbounded_channel();
    let mut clients = tokio::task::JoinSet::new();
    for client in config.tunnels.clone() {
        let (env, handler, gave_up) = (env.clone(), handler.clone(), gave_up.clone());
        let handler = handler.expect("a handler exists whenever there are tunnels");
        let restart = config.tunnel_restart;
        clients.spawn(async move {
            let runtime = client.name.clone();
            let mut client = client;
            let mut restarts = 0u32;
            loop {
                let started = env.elapsed();
                let Err(fatal) =
                    tunnel_client::run(env.clone(), client.clone(), handler.clone()).await
                else {
                    return;
                };
                env.observe(
                    TunnelEvent::ClientExit {
                        runtime: runtime.clone(),
                        why: fatal.to_string(),
                    }
                    .into(),
                );
                let Some(policy) = restart else {
                    let _ = gave_up.send((runtime, fatal));
                    return;
                };
                if env.elapsed().saturating_sub(started) >= policy.reset_after {
                    restarts = 0;
                }
                let delay = policy.delay(restarts);
                restarts = restarts.saturating_add(1);
                env.observe(
                    TunnelEvent::ClientRestart {
                        runtime: runtime.clone(),
                        after_ms: delay.as_millis() as u64,
                        restarts,
                    }
                    .into(),
                );
                env.sleep(delay).await;
                client.start_after = Duration::ZERO;
            }
        });
    }
    let count = config.tunnels.len();
    let all_gave_up = async move {
        if count == 0 {
            return std::future::pending().await;
        }
        let mut last = None;
        for _ in 0..count {
            last = exits.recv().await;
        }
        match last {
            Some((runtime, source)) => Err(Error::TunnelGaveUp { runtime, source }),
            None => std::future::pending().await,
        }
    };
    Ok((clients, all_gave_up))
}
