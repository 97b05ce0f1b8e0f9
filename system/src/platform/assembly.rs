//! The control plane, assembled: one config naming the services to run, the state they
//! share (the platform's databases), and one [`run`]`(env, config, state, shutdown)`.
//! `orrery serve control-plane`, the simulated world and the benchmarks call it; nothing
//! else wires the platform's services together.
//!
//! | service | enabled by | what it needs |
//! |---|---|---|
//! | tunnel server | [`ControlPlaneConfig::tunnel`] | the runtime registry |
//! | gateway (client API: registration, forwarding, permissions, the GitOps API) | [`ControlPlaneConfig::gateway`] | the tunnel server; [`ControlPlaneState::events`] for the API's applications |
//! | events path (events API → bus → handler → read model) | [`ControlPlaneConfig::events`] | [`ControlPlaneState::events`] |
//! | runtime monitor | [`ControlPlaneConfig::monitor`] | the tunnel server; [`ControlPlaneState::health`]; the heartbeats [`ControlPlaneState::events`] received, if any |
//! | store (PostgreSQL) | [`ControlPlaneConfig::database`] | the registry, the audit log and the events path's accepted events are loaded from it at start and committed to it as they change |
//! | cron executor | [`ControlPlaneConfig::cron`] | [`ControlPlaneState::permissions`], [`ControlPlaneState::audit`] |
//! | anti-entropy job (hardened) | [`ControlPlaneConfig::anti_entropy`] | the gateway (it reaches runtimes as the gateway forwards) and [`ControlPlaneState::events`] |
//! | vcluster syncers (hosted runtimes) | [`ControlPlaneConfig::vclusters`] | each its virtual cluster's and its host cluster's API servers |
//! | promotion orchestrator | [`ControlPlaneConfig::promotions`] | the gateway (its own or another process's), the Git provider; [`ControlPlaneState::releases`] |

use std::future::Future;
use std::sync::Arc;

use super::audit::Audit;
use super::events::{self, Platform};
use super::gateway::{self, Gateway};
use super::monitor::{self, Monitor};
use super::permissions::Permissions;
use super::promotions;
use super::registry::Registry;
use super::store::{self, Journal};
use super::tunnel::{self, TunnelServer};
use crate::env::{Listener, SharedEnv};

/// How long the gateway waits on a silent runtime ingress.
const INGRESS_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// The tunnel server's settings and address.
#[derive(Clone)]
pub struct TunnelServerConfig {
    /// Where runtimes connect.
    pub listen: String,
    /// Variant, timeouts, admission control, TLS.
    pub config: tunnel::Config,
}

/// The gateway's settings and address.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Where clients connect.
    pub listen: String,
    /// Token allowed to register runtimes.
    pub admin_token: String,
}

/// Which control-plane services to run.
#[derive(Clone, Default)]
pub struct ControlPlaneConfig {
    /// The tunnel server.
    pub tunnel: Option<TunnelServerConfig>,
    /// The client gateway (needs the tunnel server).
    pub gateway: Option<GatewayConfig>,
    /// The events path, listening on this address (needs [`ControlPlaneState::events`]).
    pub events: Option<String>,
    /// The promotion orchestrator (one Product).
    pub promotions: Option<promotions::Config>,
    /// The Runner's builds and agent API, listening on this address (needs
    /// [`ControlPlaneState::runner`]).
    pub runner: Option<String>,
    /// The runtime monitor (needs the tunnel server).
    pub monitor: Option<monitor::Config>,
    /// The cron executor (the platform's periodic jobs).
    pub cron: Option<super::cron::Config>,
    /// hardened: the cron executor's anti-entropy job (needs the gateway and the events
    /// path in this process; `None`: not run, as in faithful).
    pub anti_entropy: Option<super::anti_entropy::Config>,
    /// Hosted runtimes' virtual clusters, each kept on its host cluster by a syncer.
    pub vclusters: Vec<super::vcluster::Config>,
    /// Keep the state in this database ([`store::postgres::Postgres`] for a `--database`
    /// URL; the simulator's database host in the world): loaded at start, committed as it
    /// changes. `None`: in memory only (the simulator then keeps [`ControlPlaneState`]
    /// across restarts itself).
    pub database: Option<Arc<dyn store::Open>>,
}

/// What outlives a control-plane process, as its databases would: runtimes and tokens,
/// users and permissions, the audit log, the events read model. A restarted process gets the same state.
#[derive(Clone, Default)]
pub struct ControlPlaneState {
    /// Accounts' runtimes and their tokens.
    pub registry: Arc<Registry>,
    /// Users and what they may do.
    pub permissions: Arc<Permissions>,
    /// Mutating requests and denials, append-only.
    pub audit: Arc<Audit>,
    /// What the platform shows about each runtime's health.
    pub health: Arc<Monitor>,
    /// The events path's configuration and read model.
    pub events: Option<Arc<Platform>>,
    /// The promotion orchestrator's read model of releases.
    pub releases: promotions::Releases,
    /// The Runner's builds and agent task queue.
    pub runner: Option<Arc<super::runner::Builds>>,
}

/// Why the control plane stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A service could not listen.
    #[error("{service} on {addr}: {source}")]
    Listen {
        /// Which service.
        service: &'static str,
        /// The address.
        addr: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A service stopped serving.
    #[error("{service}: {source}")]
    Serve {
        /// Which service.
        service: &'static str,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The configuration cannot run (a service without what it needs).
    #[error("{0}")]
    Config(&'static str),
    /// The database could not be opened, migrated or read.
    #[error("the platform's store: {0}")]
    Store(#[from] store::OpenError),
}

/// Opens the database, loads what it holds into `state` (a restarted process serves what
/// the last one committed) and connects `state` to a journal; returns the writer to run
/// and the journal.
async fn open_store(
    env: &SharedEnv,
    database: &dyn store::Open,
    state: &ControlPlaneState,
) -> Result<(impl Future<Output = std::io::Error>, Arc<Journal>), Error> {
    let store::Opened {
        snapshot,
        migrations_applied,
        backend,
    } = database.open(env).await?;
    if let Some((at, entry)) = snapshot
        .audit
        .iter()
        .enumerate()
        .find(|(at, entry)| entry.seq != *at as u64 + 1)
    {
        return Err(store::OpenError::from(store::postgres::Error::Unreadable {
            table: "audit_log",
            key: entry.seq.to_string(),
            reason: format!("expected entry {} (the log has a gap)", at + 1),
        })
        .into());
    }
    state
        .registry
        .restore(&snapshot.runtimes, &snapshot.revoked);
    let audited = snapshot.audit.len();
    state.audit.restore(snapshot.audit);
    let journal = Arc::new(Journal::new(snapshot.last_event_id));
    state.registry.keep_in(journal.clone());
    state.audit.keep_in(journal.clone());
    let mut events = 0;
    if let Some(platform) = state.events.as_ref().filter(|_| database.keeps_events()) {
        platform.keep_in(journal.clone());
        events = platform.restore(env, &snapshot.events);
    }
    let mut builds = 0;
    if let Some(runner) = state.runner.as_ref().filter(|_| database.keeps_builds()) {
        builds = runner
            .restore(&snapshot.runner, &snapshot.runner_logs)
            .map_err(|e| {
                store::OpenError::from(store::postgres::Error::Unreadable {
                    table: "runner_objects",
                    key: format!("{}/{}", e.kind, e.key),
                    reason: e.reason,
                })
            })?;
        runner.keep_in(journal.clone());
    }
    tracing::info!(
        ?migrations_applied,
        runtimes = snapshot.runtimes.len(),
        audit_entries = audited,
        events_replayed = events,
        runner_builds = builds,
        "the platform's store is open"
    );
    Ok((store::write(env.clone(), backend, journal.clone()), journal))
}

/// Longest a clean stop waits for the store to commit what was appended.
const STORE_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

async fn bind(
    env: &SharedEnv,
    service: &'static str,
    addr: &str,
) -> Result<Box<dyn Listener>, Error> {
    env.listen(addr).await.map_err(|source| Error::Listen {
        service,
        addr: addr.to_string(),
        source,
    })
}

/// Binds every enabled service (failing fast if one cannot listen), then serves until
/// `shutdown` resolves or a service stops.
pub async fn run(
    env: SharedEnv,
    config: ControlPlaneConfig,
    state: ControlPlaneState,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let mut services = tokio::task::JoinSet::new();
    let mut journal = None;
    if let Some(database) = &config.database {
        let (writer, opened) = open_store(&env, database.as_ref(), &state).await?;
        journal = Some(opened);
        services.spawn(async move { ("store writer", Err(writer.await)) });
    }
    let tunnels = match &config.tunnel {
        Some(settings) => {
            let listener = bind(&env, "tunnel server", &settings.listen).await?;
            let server = TunnelServer::new(settings.config.clone(), state.registry.clone());
            let serve = tunnel::serve(env.clone(), server.clone(), listener);
            services.spawn(async move { ("tunnel server", serve.await) });
            Some(server)
        }
        None => None,
    };
    if let Some(settings) = config.monitor.clone() {
        let tunnels = tunnels
            .clone()
            .ok_or(Error::Config("the runtime monitor needs the tunnel server"))?;
        let watch = monitor::run(
            env.clone(),
            settings,
            state.health.clone(),
            state.registry.clone(),
            tunnels,
            state.events.clone(),
        );
        services.spawn(async move {
            watch.await;
            ("runtime monitor", Ok(()))
        });
    }
    if let Some(settings) = &config.gateway {
        let tunnels = tunnels.ok_or(Error::Config("the gateway needs the tunnel server"))?;
        let listener = bind(&env, "gateway", &settings.listen).await?;
        let gateway = Arc::new(Gateway::new(
            settings.admin_token.clone(),
            gateway::Sources {
                registry: state.registry.clone(),
                tunnels,
                permissions: state.permissions.clone(),
                audit: state.audit.clone(),
                health: state.health.clone(),
                events: state.events.clone(),
                ingress: crate::env::http::client(env.clone(), INGRESS_IDLE),
                releases: state.releases.clone(),
                job_tokens: Arc::default(),
            },
        ));
        if let Some(job) = config.anti_entropy.clone() {
            if gateway.sources.events.is_none() {
                return Err(Error::Config(
                    "the anti-entropy job needs the events path in the same process",
                ));
            }
            let (env, sources) = (env.clone(), gateway.sources.clone());
            services.spawn(async move {
                super::anti_entropy::run(env, job, sources).await;
                ("anti-entropy job", Ok(()))
            });
        }
        let serve = gateway::serve(env.clone(), gateway, listener);
        services.spawn(async move { ("gateway", serve.await) });
    }
    if let Some(addr) = &config.events {
        let platform = state.events.clone().ok_or(Error::Config(
            "the events path needs ControlPlaneState::events",
        ))?;
        // One registry: runtimes registered through the gateway report with their token.
        platform.accept_registry_tokens(state.registry.clone());
        let listener = bind(&env, "events API", addr).await?;
        let serve = events::serve(env.clone(), platform, listener);
        services.spawn(async move { ("events API", serve.await) });
    }
    if let Some(addr) = &config.runner {
        let builds = state.runner.clone().ok_or(Error::Config(
            "the runner API needs ControlPlaneState::runner",
        ))?;
        let listener = bind(&env, "runner API", addr).await?;
        let serve = super::runner::serve(env.clone(), builds, listener);
        services.spawn(async move { ("runner API", serve.await) });
    }
    if let Some(cron) = config.cron.clone() {
        let stores = super::cron::Stores {
            permissions: state.permissions.clone(),
            audit: state.audit.clone(),
        };
        let env = env.clone();
        services.spawn(async move {
            super::cron::run(env, cron, stores).await;
            ("cron executor", Ok(()))
        });
    }
    for syncer in config.vclusters.clone() {
        let env = env.clone();
        services.spawn(async move {
            super::vcluster::run(env, syncer).await;
            ("vcluster syncer", Ok(()))
        });
    }
    if let Some(orchestrator) = config.promotions.clone() {
        let (env, releases) = (env.clone(), state.releases.clone());
        services.spawn(async move {
            promotions::run(env, orchestrator, releases).await;
            ("promotion orchestrator", Ok(()))
        });
    }
    tokio::select! {
        biased;
        () = shutdown => {
            // A clean stop commits what was appended (a faithful 2xx, a last audit entry).
            if let Some(journal) = journal {
                tokio::select! {
                    _ = journal.sync() => {}
                    () = env.sleep(STORE_DRAIN) => {}
                }
            }
            Ok(())
        }
        Some(ended) = services.join_next() => match ended {
            Ok((service, Err(source))) => Err(Error::Serve { service, source }),
            Ok((_, Ok(()))) | Err(_) => Ok(()),
        },
    }
}
