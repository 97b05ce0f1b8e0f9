//! `orrery serve control-plane|runtime`: the same components as in simulation, on real
//! sockets, logging through `tracing` and stopping cleanly on SIGINT/SIGTERM.

pub mod git;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};

use orrery_sim::exit::Exit;
use orrery_system::core::names::dns_label;
use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::{RealEnv, SharedEnv};
use orrery_system::platform::assembly::{
    self as control_plane_assembly, ControlPlaneConfig, ControlPlaneState, GatewayConfig,
    TunnelServerConfig,
};
use orrery_system::platform::events::{self, Platform};
use orrery_system::platform::permissions::{Permissions, ACTIONS};
use orrery_system::platform::registry::Registry;
use orrery_system::platform::tunnel;
use orrery_system::runtime::assembly::{self as runtime_assembly, RouterConfig, RuntimeConfig};
use orrery_system::runtime::router::Routes;
use orrery_system::runtime::{
    app_proxy, app_reporter, gitops_operator, resource_reporter, source_server, tunnel_client,
};

use crate::common::{Fail, VariantArg};

/// What to serve.
// Parsed once per process; boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Serve {
    /// The platform for real: tunnel server and client API (POST /api/runtimes registers,
    /// /api/runtimes/NAME/... forwards into that runtime's tunnel).
    ControlPlane(ControlPlaneArgs),
    /// A runtime for real: tunnel client and request routing service; with --git the
    /// app-proxy (permissions from --platform-api; workflows patched through --apiserver,
    /// a plain-HTTP simulated API server, or the KUBECONFIG cluster); with --argocd the
    /// application event reporter (events to --events-api, dedup cache at --cache).
    Runtime(RuntimeArgs),
    /// orrery's key-value cache on its own (the runtime's Redis stand-in): a store that
    /// outlives runtime restarts, e.g. for `serve runtime --durable-requests`.
    Cache(CacheArgs),
    /// The Codefresh Runner's agent (venona): polls --platform-api for its build tasks and
    /// creates and deletes their PVCs and pods in --namespace of --apiserver or the
    /// KUBECONFIG cluster; with --engine also the engine stand-in that runs the builds.
    Runner(RunnerArgs),
    /// One cronus replica: fires its cron triggers' ticks at --platform-api (`serve
    /// control-plane --runner`), each tick a build of the trigger's pipeline. Run several
    /// for HA: faithful replicas each fire every tick (cronus' flaw), hardened ones share a
    /// lease and catch up ticks owed after a downtime.
    Cronus(CronusArgs),
    /// Local Git repositories behind the Git provider's HTTP API (`GET /api/repos`,
    /// `GET /api/commits?repo=&sha=&paths=`, `POST /api/commits`), answered by `git`:
    /// point the app-proxy (`--git`) and the ACR controller at real history.
    Git(GitArgs),
}

/// `orrery serve git`.
#[derive(Args)]
pub struct GitArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8929")]
    listen: String,
    /// A repository as URL=DIR (the URL clients name, the local clone or worktree);
    /// repeatable.
    #[arg(long = "repo", required = true, value_parser = parse_repo)]
    repos: Vec<(String, PathBuf)>,
    /// Log format (the level follows RUST_LOG, default info).
    #[arg(long, value_enum, default_value = "human")]
    log_format: LogFormat,
}

/// `URL=DIR`, with DIR an existing directory.
fn parse_repo(text: &str) -> Result<(String, PathBuf), String> {
    let (url, dir) = text
        .split_once('=')
        .filter(|(u, d)| !u.is_empty() && !d.is_empty())
        .ok_or_else(|| format!("--repo {text:?}: want URL=DIR"))?;
    let dir = PathBuf::from(dir);
    if !dir.is_dir() {
        return Err(format!(
            "--repo {text:?}: {} is not a directory",
            dir.display()
        ));
    }
    Ok((url.to_string(), dir))
}

/// `orrery serve cache`.
#[derive(Args)]
pub struct CacheArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6379")]
    listen: String,
    /// Log format (the level follows RUST_LOG, default info).
    #[arg(long, value_enum, default_value = "human")]
    log_format: LogFormat,
    /// Sets one of the cache's limits (repeatable): `cache.line`, `cache.args`,
    /// `cache.bulk` (`orrery limits` lists them).
    #[arg(long = "limit", value_name = "NAME=VALUE")]
    limits: Vec<String>,
}

/// How real mode logs.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    Human,
    /// One JSON object per line (for log shippers).
    Json,
}

/// Options every served process has.
#[derive(Args)]
pub struct Common {
    /// Component variant.
    #[arg(long, value_enum, default_value = "hardened")]
    variant: VariantArg,
    /// Log format (the level follows RUST_LOG, default info).
    #[arg(long, value_enum, default_value = "human")]
    log_format: LogFormat,
    /// Sets one of the servers' limits (repeatable), e.g. `--limit events.body=10MiB`;
    /// `orrery limits` lists them with their defaults.
    #[arg(long = "limit", value_name = "NAME=VALUE")]
    limits: Vec<String>,
}

/// The limits `--limit` flags give, over the defaults; a usage error naming a bad one.
fn limits_of(flags: &[String]) -> Result<orrery_system::env::limits::Limits, Fail> {
    let mut limits = orrery_system::env::limits::Limits::DEFAULT;
    let mut seen = std::collections::BTreeSet::new();
    for flag in flags {
        limits
            .set(flag)
            .map_err(|e| Fail::usage(format!("--limit {e}")))?;
        let name = flag
            .split('=')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        if !seen.insert(name.clone()) {
            return Err(Fail::usage(format!("--limit {name} is given twice")));
        }
    }
    Ok(limits)
}

/// `orrery serve control-plane`.
#[derive(Args)]
pub struct ControlPlaneArgs {
    /// Token that protects runtime registration.
    #[arg(long, env = "ORRERY_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: String,
    /// Address of the tunnel server.
    #[arg(long, default_value = "127.0.0.1:8443")]
    tunnel: String,
    /// Address of the client API (registration and forwarding).
    #[arg(long, default_value = "127.0.0.1:8081")]
    api: String,
    /// Runtimes known at start: ACCOUNT-RUNTIME=TOKEN,... (split at the first `-`; write
    /// ACCOUNT/RUNTIME=TOKEN for an account whose name has a `-`).
    #[arg(
        long,
        env = "ORRERY_RUNTIMES",
        hide_env_values = true,
        default_value = ""
    )]
    runtimes: String,
    /// Users: TOKEN=USER@ACCOUNT:OPERATION+OPERATION,... The gateway forwards a user's
    /// requests only into their account's runtimes (a user without @ACCOUNT reaches none);
    /// the app-proxy allows them the listed operations.
    #[arg(long, env = "ORRERY_USERS", hide_env_values = true, default_value = "")]
    users: String,
    /// Accounts' users (token, admin or member, teams) and permission rules (actions on
    /// runtimes, clusters, namespaces, labels; deny by default), from a YAML file; see
    /// `orrery_system::platform::permissions::policy` and docs/components/permissions.md.
    /// Adds to --users.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Also serve the events API (`POST /2.0/api/events`, where the runtimes' reporters
    /// send) on this address; runtimes authenticate with their --runtimes tokens.
    #[arg(long)]
    events: Option<String>,
    /// Also run the promotion orchestrator for one Product, from a YAML file: the Git
    /// provider, the repository, its user token, each environment's app, and the Product's
    /// CRs (see `orrery_system::platform::promotions::file` and docs/components/gitops-operator.md's promotion orchestrator
    /// section). Its releases are served by the GitOps API (`releases`, `release`).
    #[arg(long)]
    promotions: Option<PathBuf>,
    /// Seconds between runs of the cron executor's jobs (the platform's periodic jobs:
    /// users whose token expired — `expires` in --policy — are removed and audited; an
    /// expired token is refused from the moment it expires either way).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    cron_every: u64,
    /// hardened, with --events: seconds between the anti-entropy job's passes — every
    /// connected runtime's Applications are listed through its app-proxy and what the read
    /// model missed is sent through the events path again. Default 120; 0 turns it off.
    /// faithful runs no such job (the real platform is not known to).
    #[arg(long)]
    anti_entropy_every: Option<u64>,
    /// Also run the runtime monitor: every registered runtime is probed through its tunnel
    /// and `GET /api/runtimes` shows `Healthy` or `Unable to communicate` for each
    /// (faithful: every 30 s; hardened: every 5 s, and at once when its tunnel is gone).
    #[arg(long)]
    monitor: bool,
    /// With --monitor: seconds a runtime that sends heartbeats may be silent before it is
    /// shown `Unable to communicate`.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_timeout: u64,
    /// Keep the platform's state in this PostgreSQL database
    /// (`postgres://USER:PASSWORD@HOST:PORT/DB`): runtimes and their token digests, the audit
    /// log, the accepted events (the read models are rebuilt from them) and, with --runner,
    /// the builds, task queue and build logs, loaded at start
    /// and committed as they change; migrations are applied at start. Add
    /// `?sslrootcert=CA.pem` for TLS (the server's certificate verified against that CA and
    /// the host name; `sslmode=prefer` allows a server without TLS). Without it everything
    /// is in memory and a restart starts empty.
    #[arg(long, env = "ORRERY_DATABASE_URL", hide_env_values = true)]
    database: Option<String>,
    /// TLS certificate (PEM) for the tunnel (WSS); goes with --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for the tunnel; goes with --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Longest a runtime's connection may take to finish its TLS handshake, then to send its
    /// upgrade request, before the tunnel server closes it (a client that never finishes
    /// would hold a registration slot); default 10s. The same as `--limit
    /// tunnel.handshake-timeout=`.
    #[arg(long)]
    tunnel_handshake_timeout: Option<String>,
    /// A hosted runtime's virtual cluster, NAME=KUBECONFIG (repeatable): the tenant's own
    /// API server, whose ConfigMaps and Secrets are kept as copies in one namespace of the
    /// host cluster (KUBECONFIG, then ~/.kube/config) — vcluster's syncer. faithful names
    /// copies as vcluster does (`name-x-namespace-x-NAME`, which two objects can share);
    /// hardened names them injectively and never touches another object's copy.
    #[arg(long, value_name = "NAME=KUBECONFIG")]
    vcluster: Vec<String>,
    /// With --vcluster: the host namespace of the copies, the same for every --vcluster
    /// (default: `vc-NAME`, each its own).
    #[arg(long, requires = "vcluster")]
    vcluster_host_namespace: Option<String>,
    /// With --vcluster: sync only virtual objects with these labels (a label selector of
    /// `key=value` and `key` terms, comma-separated).
    #[arg(long, requires = "vcluster")]
    vcluster_selector: Option<String>,
    /// Also serve the Codefresh Runner's builds and agent API on this address
    /// (`POST /api/builds` with --admin-token; the agents' `GET /api/agent/ID/tasks`, …;
    /// see docs/components/runner.md).
    #[arg(long)]
    runner: Option<String>,
    /// With --runner: the agents that may poll, ID=TOKEN,… (each agent's `serve runner
    /// --agent-id ID --token TOKEN`); without it no agent can poll and no build be made.
    #[arg(long, env = "ORRERY_RUNNER_AGENTS", hide_env_values = true)]
    runner_agents: Option<String>,
    /// With --runner: the namespace the builds' PVCs and pods are made in (the agents'
    /// --namespace).
    #[arg(long, default_value = "codefresh", requires = "runner")]
    runner_namespace: String,
    /// With --runner: builds of every pipeline admitted at once (the account's plan); the
    /// others wait, pending. Default: unlimited.
    #[arg(long, requires = "runner")]
    runner_account_concurrency: Option<u32>,
    /// With --runner: a task handed out whose status has not come this long after is
    /// handed out again (`30s`, `2m`; 1 s to 1 h; the real rule is not public). Default 60s.
    #[arg(long, requires = "runner", value_name = "DURATION")]
    runner_redeliver_after: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// `orrery serve runner`.
#[derive(Args)]
pub struct RunnerArgs {
    /// This agent's id (`AGENT_ID`): the platform hands it the tasks of builds elected to it.
    #[arg(long, env = "AGENT_ID")]
    agent_id: String,
    /// This agent's token (`CODEFRESH_TOKEN`): one of the control plane's --runner-agents.
    #[arg(long, env = "CODEFRESH_TOKEN", hide_env_values = true)]
    token: String,
    /// The platform's builds and agent API, host:port (`serve control-plane --runner`).
    #[arg(long, env = "CODEFRESH_HOST")]
    platform_api: String,
    /// A plain-HTTP Kubernetes API server (e.g. `orrery apiserver`); default: the
    /// KUBECONFIG cluster.
    #[arg(long)]
    apiserver: Option<String>,
    /// The namespace the builds' objects are made in (the control plane's
    /// --runner-namespace); the engine stand-in watches it.
    #[arg(long, default_value = "codefresh")]
    namespace: String,
    /// Where `/health` is answered (venona's `PORT`; the pod's readiness probe).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Also run the engine stand-in: it runs each build whose engine and dind pods exist
    /// (steps from the build) and reports to the platform — for a cluster where nothing runs
    /// the engine image (an API server without kubelets, as in the conformance suite).
    #[arg(long)]
    engine: bool,
    /// Also run the dind volume provisioner and the local volumes cleaner for a node whose
    /// volume directory holds this many GiB (each build's volume takes 16): claims are
    /// bound to PersistentVolumes, reused across builds, and the cleaner frees the node at
    /// 80 %. With --engine, builds wait for their claims to be bound.
    #[arg(long, value_name = "GIB")]
    volumes_node_gib: Option<u64>,
    /// With --volumes-node-gib: the external volumes cleaner's retention (`RETENTION_DAYS`;
    /// `4d`, `12h`, `30m`, at least 60s): every 10 minutes it deletes the released volumes
    /// last used longer ago (a claim's `codefresh.io/volume-retention` wins). Default 4d.
    #[arg(long, value_name = "RETENTION", requires = "volumes_node_gib")]
    volumes_retention: Option<String>,
    /// With --engine: the engine pod's memory limit in MiB — what the log lines it has not
    /// sent yet may take (faithful is killed past it, hardened holds at most half). Default
    /// 2048, the chart's.
    #[arg(long, value_name = "MIB", requires = "engine", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    engine_memory_mib: Option<u64>,
    /// This replica's name (its pod's: set it from the downward API). hardened sends it
    /// with each poll and heartbeat, so the platform keeps a build's tasks with the one
    /// replica that holds them; replicas of one agent need distinct names. Default:
    /// --agent-id.
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// `orrery serve cronus`.
#[derive(Args)]
pub struct CronusArgs {
    /// This replica's name (its pod's name): the lease holder's.
    #[arg(long, env = "POD_NAME")]
    replica: String,
    /// The platform's builds API, host:port (`serve control-plane --runner`).
    #[arg(long, env = "CODEFRESH_HOST")]
    platform_api: String,
    /// The token builds are made with (the control plane's --admin-token).
    #[arg(long, env = "ORRERY_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    /// A cron trigger: NAME=EVERY:PIPELINE@AGENT (`nightly=1h:demo/build@agent-1`), a
    /// build of PIPELINE on AGENT's runtime at every multiple of EVERY since the Unix epoch
    /// (UTC). Repeat for more, or give them comma-separated in `CRON_TRIGGERS`.
    #[arg(
        long = "trigger",
        env = "CRON_TRIGGERS",
        value_delimiter = ',',
        required = true
    )]
    triggers: Vec<String>,
    /// Where `/health` is answered (the pod's probes: 200 while the process runs); none by
    /// default.
    #[arg(long)]
    listen: Option<String>,
    /// The shortest period accepted (cronus' LIMIT).
    #[arg(long, default_value = "60s")]
    min_every: String,
    /// hardened: a tick found owed later than this after it was due is reported missed
    /// instead of run.
    #[arg(long, default_value = "10m")]
    catch_up: String,
    /// hardened: the lease's term (renewed every third of it).
    #[arg(long, default_value = "15s")]
    lease_ttl: String,
    #[command(flatten)]
    common: Common,
}

/// A duration flag (`90s`, `10m`, `1h`), or a usage error naming the flag.
fn duration_flag(flag: &str, text: &str) -> Result<std::time::Duration, Fail> {
    orrery_sim::scenario::duration::parse(text)
        .map_err(|e| Fail::usage(format!("--{flag} {text:?}: {e}")))
}

/// `--trigger NAME=EVERY:PIPELINE@AGENT` as a cron trigger.
fn cron_trigger(flag: &str) -> Result<orrery_system::platform::runner::cronus::Trigger, Fail> {
    let usage = || {
        Fail::usage(format!(
            "--trigger {flag:?}: expected NAME=EVERY:PIPELINE@AGENT (e.g. nightly=1h:demo/build@agent-1)"
        ))
    };
    let (name, rest) = flag.split_once('=').ok_or_else(usage)?;
    let (every, rest) = rest.split_once(':').ok_or_else(usage)?;
    let (pipeline, agent) = rest.rsplit_once('@').ok_or_else(usage)?;
    let named = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    if !named(name) {
        return Err(Fail::usage(format!(
            "--trigger {flag:?}: the name {name:?} must be letters, digits, '-', '_' or '.' (it is a path segment)"
        )));
    }
    if pipeline.is_empty() || agent.is_empty() {
        return Err(usage());
    }
    Ok(orrery_system::platform::runner::cronus::Trigger {
        name: name.into(),
        every: duration_flag("trigger", every)?,
        build: serde_json::json!({"pipeline": pipeline, "agent": agent}),
    })
}

/// The `--vcluster NAME=KUBECONFIG` flags as syncer configs (the host cluster from
/// KUBECONFIG or ~/.kube/config).
async fn vclusters(
    variant: Variant,
    flags: &[String],
    host_namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<orrery_system::platform::vcluster::Config>, Fail> {
    if let Some(namespace) = host_namespace.filter(|n| !dns_label(n)) {
        return Err(Fail::usage(format!(
            "--vcluster-host-namespace {namespace:?}: not a namespace name (a DNS label: lowercase letters, digits and '-', at most 63)"
        )));
    }
    if let Some(term) = selector.and_then(|s| s.split(',').find(|term| !selector_term(term))) {
        return Err(Fail::usage(format!(
            "--vcluster-selector: term {term:?} is not `key=value` or `key` (the only forms the syncer understands; a key or value is letters, digits, '-', '_', '.', and '/' in a key)"
        )));
    }
    let mut configs = Vec::new();
    for flag in flags {
        let Some((name, path)) = flag
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
        else {
            return Err(Fail::usage(format!(
                "--vcluster {flag:?}: expected NAME=KUBECONFIG (the virtual cluster's name and its kubeconfig file)"
            )));
        };
        if !dns_label(name) || name.len() > 60 {
            return Err(Fail::usage(format!(
                "--vcluster {flag:?}: the name {name:?} must be a DNS label of at most 60 characters (lowercase letters, digits and '-', starting and ending with a letter or digit): it becomes the copies' label value and, with vc-, their host namespace"
            )));
        }
        let namespace = host_namespace.map_or_else(|| format!("vc-{name}"), str::to_string);
        let kubeconfig = kube::config::Kubeconfig::read_from(path)
            .map_err(|e| Fail::usage(format!("--vcluster {name}: {path}: {e}")))?;
        let virtual_config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| Fail::usage(format!("--vcluster {name}: {path}: {e}")))?;
        let host = kube::Config::infer().await.map_err(|e| {
            Fail::usage(format!(
                "--vcluster {name}: no host cluster (KUBECONFIG or ~/.kube/config): {e}"
            ))
        })?;
        let mut config = orrery_system::platform::vcluster::Config::new(
            variant,
            name,
            KubeTarget::real(virtual_config, "default"),
            KubeTarget::real(host, &namespace),
        );
        config.selector = selector.map(str::to_string);
        configs.push(config);
    }
    Ok(configs)
}

/// A `key=value` or `key` term of `--vcluster-selector`.
fn selector_term(term: &str) -> bool {
    let part = |text: &str, slash: bool| {
        !text.is_empty()
            && text.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') || (slash && c == '/')
            })
    };
    match term.trim().split_once('=') {
        Some((key, value)) => {
            part(key.trim(), true) && (value.trim().is_empty() || part(value.trim(), false))
        }
        None => part(term.trim(), true),
    }
}

/// A runtime component `serve runtime --components` can run (each pod of the chart runs one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Component {
    /// The tunnel client (needs --platform and --name; hands requests to the router in this
    /// process if `router` is listed, else to --tunnel-local).
    TunnelClient,
    /// The request routing service (for the tunnel client in this process, and on --ingress).
    Router,
    /// The app-proxy, on --app-proxy (needs --git and --platform-api).
    AppProxy,
    /// The application event reporter (needs --argocd and --events-api).
    AppReporter,
    /// The source server, on --serve-sources (needs --argocd).
    SourceServer,
    /// The resource event reporter (needs --events-api).
    ResourceReporter,
    /// The dedup cache, on --cache.
    Cache,
    /// The event bus, on --event-bus.
    EventBus,
    /// The GitOps operator: PromotionTasks and RestrictedGitSources in --namespace (needs
    /// --git and --argocd).
    GitopsOperator,
}

impl Component {
    /// The name `--components` takes.
    fn name(self) -> &'static str {
        match self {
            Component::TunnelClient => "tunnel-client",
            Component::Router => "router",
            Component::AppProxy => "app-proxy",
            Component::AppReporter => "app-reporter",
            Component::SourceServer => "source-server",
            Component::ResourceReporter => "resource-reporter",
            Component::Cache => "cache",
            Component::EventBus => "event-bus",
            Component::GitopsOperator => "gitops-operator",
        }
    }
}

/// `orrery serve runtime`.
#[derive(Args)]
pub struct RuntimeArgs {
    /// Run exactly these components (comma-separated), as the chart runs each in its own
    /// pod; default: the tunnel client and the router, plus whatever --git, --argocd,
    /// --serve-sources, --report-resources, --serve-cache, --serve-event-bus and
    /// --gitops-operator enable.
    #[arg(long, value_enum, value_delimiter = ',')]
    components: Option<Vec<Component>>,
    /// The platform's tunnel server (host:port); needed by the tunnel client.
    #[arg(long)]
    platform: Option<String>,
    /// This runtime's tunnel name, ACCOUNT-RUNTIME; needed by the tunnel client.
    #[arg(long)]
    name: Option<String>,
    /// This runtime's account, when its name has a `-` (account `acme-corp`, runtime
    /// `prod`: `--account acme-corp --name acme-corp-prod`); without it --name is split at
    /// its first `-`.
    #[arg(long, env = "ORRERY_ACCOUNT")]
    account: Option<String>,
    /// Without a router in this process, the tunnel client hands every request, path
    /// unchanged, to this host:port (frpc's local_ip:local_port; the chart's
    /// internal-router:80).
    #[arg(long)]
    tunnel_local: Option<String>,
    /// This process's host name: the reporters' identity (lease holder) and, through its
    /// `-<n>` suffix, the faithful reporter's shard (a StatefulSet pod's name: set it from
    /// the downward API); default: --name, else "runtime".
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
    /// This runtime's token; needed by the tunnel client, the reporters and the source
    /// server's promotion templates.
    #[arg(long, env = "ORRERY_RUNTIME_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Seconds between the runtime's heartbeats (sent with --events-api and --token).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_every: u64,
    /// The app-proxy's address (where /app-proxy requests go).
    #[arg(long, default_value = "127.0.0.1:3017")]
    app_proxy: String,
    /// Argo Workflows' server (where /workflows requests go).
    #[arg(long, default_value = "127.0.0.1:2746")]
    workflows: String,
    /// Also serve the request routing service directly on this address (ingress mode).
    #[arg(long)]
    ingress: Option<String>,
    /// Run the app-proxy against this Git provider (host:port).
    #[arg(long, requires = "platform_api")]
    git: Option<String>,
    /// The platform's client API (host:port): the app-proxy's permissions, and with --token
    /// the source server's promotion templates (each app's versionSource).
    #[arg(long)]
    platform_api: Option<String>,
    /// A plain-HTTP Kubernetes API server for the app-proxy (default: the KUBECONFIG cluster).
    #[arg(long)]
    apiserver: Option<String>,
    /// CA certificate (PEM) to verify the tunnel server with (WSS).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Run the application event reporter against this Argo CD server (host:port).
    #[arg(long)]
    argocd: Option<String>,
    /// Bearer token for the Argo CD server.
    #[arg(long, env = "ARGOCD_TOKEN", hide_env_values = true, default_value = "")]
    argocd_token: String,
    /// An existing Argo CD: read its token from this Secret (key `token`) in --namespace
    /// instead of --argocd-token; hardened follows the Secret through rotations.
    #[arg(
        long,
        env = "ARGO_CD_TOKEN_SECRET_NAME",
        conflicts_with = "argocd_token"
    )]
    argocd_token_secret: Option<String>,
    /// More namespaces whose Applications the reporter watches besides --namespace
    /// (Argo CD's `application.namespaces`; comma-separated).
    #[arg(long, env = "ARGOCD_APPLICATION_NAMESPACES", value_delimiter = ',')]
    application_namespaces: Vec<String>,
    /// The platform's events API (host:port), where the reporter sends events; with --token,
    /// the runtime also sends its heartbeats there (every 10 s; the runtime monitor shows a
    /// runtime silent for 30 s as `Unable to communicate`).
    #[arg(long)]
    events_api: Option<String>,
    /// The reporters' dedup cache (host:port).
    #[arg(long, default_value = "127.0.0.1:6379")]
    cache: String,
    /// Also run the dedup cache, on --cache's address.
    #[arg(long)]
    serve_cache: bool,
    /// Namespace of the Applications the reporter watches.
    #[arg(long, default_value = "argocd")]
    namespace: String,
    /// Reporter replicas in this runtime (faithful shards by it).
    #[arg(long, env = "EVENT_REPORTER_REPLICAS", default_value_t = 1)]
    replicas: u32,
    /// This reporter's shard (default: the host name's ordinal suffix).
    #[arg(long, env = "EVENT_REPORTER_SHARD")]
    shard: Option<u32>,
    /// The reporter's health and metrics address.
    #[arg(long, default_value = "127.0.0.1:8087")]
    reporter_listen: String,
    /// Also run the source server on this address, reading from --argocd; the reporter
    /// and the app-proxy then read app versions and revision metadata from it.
    #[arg(long, requires = "argocd")]
    serve_sources: Option<String>,
    /// hardened: keep the tunnel's request records in the cache at --cache, so a retried
    /// write is not run again after this process restarts (in memory only without it).
    #[arg(long)]
    durable_requests: bool,
    /// Run the resource event reporter (Rollouts, ReplicaSets, AnalysisRuns, Workflows) to
    /// --events-api: faithful through the event bus at --event-bus, hardened directly.
    #[arg(long, requires = "events_api")]
    report_resources: bool,
    /// Where the resource reporter answers `GET /healthz` (its pod's probes); default:
    /// nowhere.
    #[arg(long)]
    resources_listen: Option<String>,
    /// The event bus the faithful resource reporter publishes to and its Sensor reads.
    #[arg(long, default_value = "127.0.0.1:4222")]
    event_bus: String,
    /// Also run the event bus, on --event-bus's address.
    #[arg(long)]
    serve_event_bus: bool,
    /// Namespace whose Workflows the resource reporter watches (the chart: the runtime's);
    /// default: every namespace.
    #[arg(long)]
    workflows_namespace: Option<String>,
    /// Run the GitOps operator (PromotionTasks and RestrictedGitSources in --namespace,
    /// against --git and --argocd).
    #[arg(long)]
    gitops_operator: bool,
    /// GitOps operator replicas (`LEADER_ELECT` when more than one: they elect a leader
    /// through a Lease in --namespace; each replica's identity is the host name).
    #[arg(long, default_value_t = 1)]
    operator_replicas: u32,
    #[command(flatten)]
    common: Common,
}

/// Runs a future on a single-threaded tokio runtime.
pub fn block_on<T>(future: impl Future<Output = Result<T, Fail>>) -> Result<T, Fail> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail::usage(format!("cannot start tokio: {e}")))?
        .block_on(future)
}

/// Real-mode logging: `tracing` to stderr, level from `RUST_LOG` (default info).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: CI logs and log shippers get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    // A second init (tests calling serve twice in one process) keeps the first subscriber.
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// A real environment whose observations are logged (they are the components' events),
/// holding its servers to `limits`.
fn logged_env(host: &str, limits: orrery_system::env::limits::Limits) -> SharedEnv {
    Arc::new(RealEnv::new(host).with_limits(limits).with_observer(|o| {
        tracing::info!(target: "orrery::observation", kind = o.kind(), event = %o.to_json());
    }))
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM (what Kubernetes sends a pod it stops). The
/// handlers are installed when this is called, not when the future is first polled: the
/// assemblies poll it only once their listeners are bound, and a SIGTERM in between took
/// the default action (death, exit status none) instead of a clean stop. Call it inside the
/// runtime.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let handlers = {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::interrupt()).and_then(|interrupt| {
            signal(SignalKind::terminate()).map(|terminate| (interrupt, terminate))
        })
    };
    async move {
        #[cfg(unix)]
        {
            match handlers {
                Ok((mut interrupt, mut terminate)) => tokio::select! {
                    biased;
                    _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
                    _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
                },
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGINT/SIGTERM; only Ctrl-C stops");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("Ctrl-C: shutting down");
        }
    }
}

/// Dispatches `orrery serve …`.
pub fn run(what: Serve) -> Result<Exit, Fail> {
    match what {
        Serve::ControlPlane(args) => control_plane(args),
        Serve::Runtime(args) => runtime(args),
        Serve::Cache(args) => cache(args),
        Serve::Runner(args) => runner(args),
        Serve::Cronus(args) => cronus(args),
        Serve::Git(args) => git(args),
    }
    .map(|()| Exit::Expected)
}

/// `--runtimes acme-prod=TOKEN,acme-dev=TOKEN2` into the registry; returns token → runtime.
fn preregister(
    registry: &Registry,
    list: &str,
) -> Result<std::collections::BTreeMap<String, String>, Fail> {
    let mut tokens = std::collections::BTreeMap::new();
    for entry in list.split(',').filter(|e| !e.is_empty()) {
        let Some((name, token)) = entry.split_once('=') else {
            return Err(Fail::usage(format!(
                "--runtimes: {entry:?} is not <account>-<runtime>=<token> (or <account>/<runtime>=<token>)"
            )));
        };
        // ACCOUNT/RUNTIME names an account with a `-` in it; ACCOUNT-RUNTIME is split at
        // its first `-`.
        let split = name.split_once('/').or_else(|| name.split_once('-'));
        let Some((account, runtime)) = split.filter(|(a, r)| !a.is_empty() && !r.is_empty()) else {
            return Err(Fail::usage(format!(
                "--runtimes: {name:?} is not <account>-<runtime> or <account>/<runtime>"
            )));
        };
        registry.insert(token, account, runtime);
        tokens.insert(token.to_string(), format!("{account}-{runtime}"));
    }
    Ok(tokens)
}

/// `--runner-agents ID=TOKEN,…` as token → agent id.
fn runner_agents(list: &str) -> Result<std::collections::BTreeMap<String, String>, Fail> {
    let mut agents = std::collections::BTreeMap::new();
    for entry in list.split(',').filter(|e| !e.is_empty()) {
        let Some((id, token)) = entry
            .split_once('=')
            .filter(|(id, token)| !id.is_empty() && !token.is_empty())
        else {
            return Err(Fail::usage(format!(
                "--runner-agents: {entry:?} is not <agent-id>=<token>"
            )));
        };
        if agents.insert(token.to_string(), id.to_string()).is_some() {
            return Err(Fail::usage(format!(
                "--runner-agents: agent {id:?}'s token is another agent's too"
            )));
        }
    }
    Ok(agents)
}

/// `serve runtime`'s account and runtime name: `--name ACCOUNT-RUNTIME` after
/// `--account ACCOUNT`, or split at its first `-` without it; empty without `--name`.
fn split_name(name: Option<&str>, account: Option<&str>) -> Result<(String, String), Fail> {
    let Some(name) = name else {
        return Ok((String::new(), String::new()));
    };
    match account {
        Some(account) => name
            .strip_prefix(account)
            .and_then(|rest| rest.strip_prefix('-'))
            .filter(|runtime| !runtime.is_empty())
            .map(|runtime| (account.to_string(), runtime.to_string()))
            .ok_or_else(|| {
                Fail::usage(format!(
                    "--name {name:?} is not --account {account:?} followed by -RUNTIME"
                ))
            }),
        None => Ok(name
            .split_once('-')
            .map(|(a, r)| (a.to_string(), r.to_string()))
            .unwrap_or_default()),
    }
}

/// `--users TOKEN=alice@acme:repositories:list+workflows:terminate,…` into the permissions.
fn users(permissions: &Permissions, list: &str) -> Result<(), Fail> {
    for entry in list.split(',').filter(|e| !e.is_empty()) {
        let Some((token, rest)) = entry.split_once('=') else {
            return Err(Fail::usage(format!(
                "--users: {entry:?} is not <token>=<user>@<account>:<operation>+<operation>"
            )));
        };
        let (user, operations) = rest.split_once(':').unwrap_or((rest, ""));
        let (user, account) = match user.split_once('@') {
            Some((user, account)) => (user, Some(account)),
            None => (user, None),
        };
        let named =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !named(user) || account.is_some_and(|a| !named(a)) {
            return Err(Fail::usage(format!(
                "--users: {entry:?}: user and account names are [A-Za-z0-9-], as in <token>=<user>@<account>:<operations>"
            )));
        }
        let operations: Vec<&str> = operations.split('+').filter(|o| !o.is_empty()).collect();
        if let Some(bad) = operations.iter().find(|o| !ACTIONS.contains(o)) {
            return Err(Fail::usage(format!(
                "--users: unknown operation {bad:?} (known: {ACTIONS:?})"
            )));
        }
        match account {
            Some(account) => permissions.grant_in(token, account, user, &operations),
            None => permissions.grant(token, user, &operations),
        }
    }
    Ok(())
}

fn read(path: &PathBuf) -> Result<Vec<u8>, Fail> {
    std::fs::read(path).map_err(|e| Fail::usage(format!("{}: {e}", path.display())))
}

/// The cache alone, until SIGINT/SIGTERM.
fn cache(args: CacheArgs) -> Result<(), Fail> {
    init_logging(args.log_format);
    let limits = limits_of(&args.limits)?;
    tracing::info!("orrery cache on {}", args.listen);
    block_on(async move {
        let env: orrery_system::env::SharedEnv =
            std::sync::Arc::new(orrery_system::env::RealEnv::new("cache").with_limits(limits));
        tokio::select! {
            served = orrery_system::runtime::cache::run(env, &args.listen) => {
                served.map_err(|e| Fail::usage(format!("cache on {}: {e}", args.listen)))
            }
            () = shutdown_signal() => Ok(()),
        }
    })
}

/// Local Git repositories behind the Git provider's API, until Ctrl-C.
fn git(args: GitArgs) -> Result<(), Fail> {
    init_logging(args.log_format);
    for (url, dir) in &args.repos {
        tracing::info!("orrery git: {url} from {}", dir.display());
    }
    tracing::info!("orrery git on {}", args.listen);
    block_on(async move {
        let env: orrery_system::env::SharedEnv =
            std::sync::Arc::new(orrery_system::env::RealEnv::new("git"));
        let repos = args.repos.into_iter().collect();
        tokio::select! {
            served = crate::commands::serve::git::serve(env, repos, &args.listen) => {
                served.map_err(|e| Fail::usage(format!("git on {}: {e}", args.listen)))
            }
            () = shutdown_signal() => Ok(()),
        }
    })
}

/// The platform: tunnel server and client gateway, from the control-plane assembly.
fn control_plane(args: ControlPlaneArgs) -> Result<(), Fail> {
    init_logging(args.common.log_format);
    let variant = Variant::from(args.common.variant);
    let mut state = ControlPlaneState::default();
    let tokens = preregister(&state.registry, &args.runtimes)?;
    if args.events.is_some() {
        state.events = Some(Platform::new(events::Config {
            tokens,
            bus_capacity: 10_000,
            // The bus itself is in memory; with --database, what it accepted is kept in the
            // store (hardened answers once it is committed).
            durability: events::bus::Durability::of(variant),
            idempotency_keys: variant == Variant::Hardened,
        }));
    }
    users(&state.permissions, &args.users)?;
    if let Some(path) = &args.policy {
        let text = String::from_utf8(read(path)?)
            .map_err(|e| Fail::usage(format!("{}: not UTF-8: {e}", path.display())))?;
        orrery_system::platform::permissions::policy::Policy::parse(
            &path.display().to_string(),
            &text,
        )
        .map_err(|e| Fail::usage(format!("--policy {e}")))?
        .apply(&state.permissions);
    }
    let promotions = match &args.promotions {
        None => None,
        Some(path) => {
            let text = String::from_utf8(read(path)?)
                .map_err(|e| Fail::usage(format!("{}: not UTF-8: {e}", path.display())))?;
            let mut config = orrery_system::platform::promotions::file::OrchestratorFile::parse(
                &path.display().to_string(),
                &text,
            )
            .map_err(|e| Fail::usage(format!("--promotions {e}")))?
            .config;
            if config.gateway_addr.is_empty() {
                // This process's gateway: its users are known here, so a token that is
                // nobody's is refused now rather than answered 401 on every call.
                config.gateway_addr = args.api.clone();
                let now = std::time::SystemTime::now() // determinism: real-env (serve's start-up check)
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                match state.permissions.user_at(&config.token, now) {
                    Ok(Some(_)) => {}
                    Ok(None) => return Err(Fail::usage(format!(
                        "--promotions {}: token: no user has this token (give the orchestrator's user with --users or --policy)",
                        path.display()
                    ))),
                    Err(expired) => return Err(Fail::usage(format!(
                        "--promotions {}: token: the orchestrator's user's token expired at {}",
                        path.display(),
                        orrery_system::core::time::rfc3339(expired)
                    ))),
                }
            }
            Some(config)
        }
    };
    if args.runner.is_some() {
        let agents = runner_agents(args.runner_agents.as_deref().unwrap_or_default())?;
        if agents.is_empty() {
            tracing::warn!("--runner without --runner-agents: no agent can poll for tasks");
        }
        let mut settings = orrery_system::platform::runner::Settings {
            namespace: args.runner_namespace.clone(),
            variant,
            account_concurrency: args.runner_account_concurrency,
            ..Default::default()
        };
        if let Some(text) = &args.runner_redeliver_after {
            let after = duration_flag("runner-redeliver-after", text)?;
            if !(std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(3600))
                .contains(&after)
            {
                return Err(Fail::usage(format!(
                    "--runner-redeliver-after {text:?}: must be 1s to 1h"
                )));
            }
            settings.redeliver_after = after;
        }
        state.runner = Some(orrery_system::platform::runner::Builds::new(
            settings,
            agents,
            &args.admin_token,
        ));
    }
    let mut tunnel = tunnel::Config::new(variant);
    let mut limits = limits_of(&args.common.limits)?;
    if let Some(text) = &args.tunnel_handshake_timeout {
        if args
            .common
            .limits
            .iter()
            .any(|l| l.trim_start().starts_with("tunnel.handshake-timeout"))
        {
            return Err(Fail::usage(
                "--tunnel-handshake-timeout and --limit tunnel.handshake-timeout both given: keep one",
            ));
        }
        limits.tunnel_handshake_timeout = duration_flag("tunnel-handshake-timeout", text)?;
        if limits.tunnel_handshake_timeout.is_zero() {
            return Err(Fail::usage(
                "--tunnel-handshake-timeout must be above 0 (no runtime could register)",
            ));
        }
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        tunnel.tls = Some(
            orrery_system::tunnel::tls::server_config(&read(cert)?, &read(key)?)
                .map_err(|e| Fail::usage(e.to_string()))?,
        );
    }
    let scheme = if tunnel.tls.is_some() { "wss" } else { "ws" };
    tracing::info!(
        variant = variant.as_str(),
        events_api = args.events.as_deref().unwrap_or("off"),
        "orrery control-plane: tunnel on {scheme}://{}, client API on http://{}",
        args.tunnel,
        args.api
    );
    let anti_entropy = match (variant, args.anti_entropy_every, args.events.is_some()) {
        (_, Some(0), _) | (Variant::Faithful, None, _) | (Variant::Hardened, None, false) => None,
        (Variant::Faithful, Some(_), _) => {
            return Err(Fail::usage(
                "--anti-entropy-every: faithful runs no anti-entropy job (the real platform is not known to); use --variant hardened",
            ))
        }
        (Variant::Hardened, Some(_), false) => {
            return Err(Fail::usage(
                "--anti-entropy-every needs --events: the job sends what it finds through this process's events path",
            ))
        }
        (Variant::Hardened, every, true) => Some(orrery_system::platform::anti_entropy::Config {
            every: std::time::Duration::from_secs(every.unwrap_or(120)),
            ..Default::default()
        }),
    };
    let vclusters = block_on(vclusters(
        variant,
        &args.vcluster,
        args.vcluster_host_namespace.as_deref(),
        args.vcluster_selector.as_deref(),
    ))?;
    let config = ControlPlaneConfig {
        anti_entropy,
        vclusters,
        tunnel: Some(TunnelServerConfig {
            listen: args.tunnel,
            config: tunnel,
        }),
        gateway: Some(GatewayConfig {
            listen: args.api,
            admin_token: args.admin_token,
        }),
        events: args.events,
        promotions,
        runner: args.runner.clone(),
        monitor: args
            .monitor
            .then(|| orrery_system::platform::monitor::Config {
                heartbeat_timeout: std::time::Duration::from_secs(args.heartbeat_timeout),
                ..orrery_system::platform::monitor::Config::new(variant)
            }),
        cron: Some(orrery_system::platform::cron::Config {
            every: std::time::Duration::from_secs(args.cron_every),
            ..Default::default()
        }),
        database: args.database.as_deref().map(|url| {
            Arc::new(orrery_system::platform::store::postgres::Postgres::new(url))
                as Arc<dyn orrery_system::platform::store::Open>
        }),
    };
    block_on(async move {
        let env = logged_env("control-plane", limits);
        control_plane_assembly::run(env, config, state, shutdown_signal())
            .await
            .map_err(|e| Fail::usage(e.to_string()))
    })
}

/// The Kubernetes API the runtime's components use: a plain-HTTP (simulated) server if
/// given, else the KUBECONFIG cluster.
async fn kube_target(apiserver: Option<String>, namespace: &str) -> Result<KubeTarget, Fail> {
    match apiserver {
        Some(addr) => Ok(KubeTarget::new(addr)),
        None => {
            let config = kube::Config::infer()
                .await
                .map_err(|e| Fail::usage(format!("needs --apiserver or a kubeconfig: {e}")))?;
            Ok(KubeTarget::real(config, namespace))
        }
    }
}

/// The components `serve runtime` runs: `--components` as given, else the default set
/// (tunnel client and router, and what the enabling flags ask for).
fn components(args: &RuntimeArgs) -> std::collections::BTreeSet<Component> {
    if let Some(listed) = &args.components {
        return listed.iter().copied().collect();
    }
    let enabled = [
        (true, Component::TunnelClient),
        (true, Component::Router),
        (args.git.is_some(), Component::AppProxy),
        (args.argocd.is_some(), Component::AppReporter),
        (args.serve_sources.is_some(), Component::SourceServer),
        (args.report_resources, Component::ResourceReporter),
        (args.serve_cache, Component::Cache),
        (args.serve_event_bus, Component::EventBus),
        (args.gitops_operator, Component::GitopsOperator),
    ];
    enabled
        .into_iter()
        .filter_map(|(on, component)| on.then_some(component))
        .collect()
}

/// `value` of the flag `flag`, which `component` needs.
fn needed<'a>(
    value: &'a Option<String>,
    flag: &str,
    component: Component,
) -> Result<&'a str, Fail> {
    value.as_deref().ok_or_else(|| {
        Fail::usage(format!(
            "serve runtime: the {} component needs {flag}",
            component.name()
        ))
    })
}

/// A runtime: the tunnel client and request routing service (optionally also on an
/// ingress port), the app-proxy with `--git`, the application event reporter with
/// `--argocd`, …; or exactly the `--components` listed. All from the runtime assembly.
fn runtime(args: RuntimeArgs) -> Result<(), Fail> {
    init_logging(args.common.log_format);
    let variant = Variant::from(args.common.variant);
    let limits = limits_of(&args.common.limits)?;
    let run = components(&args);
    let has = |c: Component| run.contains(&c);
    if run.is_empty() {
        return Err(Fail::usage(
            "serve runtime: --components lists nothing to run",
        ));
    }
    let account_and_runtime = split_name(args.name.as_deref(), args.account.as_deref())?;
    let routes = Routes::new(args.app_proxy.clone(), args.workflows.clone());
    let mut tunnels = Vec::new();
    if has(Component::TunnelClient) {
        let platform = needed(&args.platform, "--platform", Component::TunnelClient)?;
        let name = needed(&args.name, "--name", Component::TunnelClient)?;
        if !has(Component::Router) && args.tunnel_local.is_none() {
            return Err(Fail::usage(
                "serve runtime: the tunnel-client component needs the router component or \
                 --tunnel-local HOST:PORT (where the router runs)",
            ));
        }
        let token = needed(&args.token, "--token", Component::TunnelClient)?;
        let mut client = tunnel_client::Config::new(variant, platform, name, token);
        client.dedup_store = args.durable_requests.then(|| args.cache.clone());
        if let Some(path) = &args.tls_ca {
            client.tls = Some(
                orrery_system::tunnel::tls::client_config(&read(path)?)
                    .map_err(|e| Fail::usage(e.to_string()))?,
            );
        }
        tunnels.push(client);
    }
    if has(Component::Router) && args.tunnel_local.is_some() {
        return Err(Fail::usage(
            "serve runtime: --tunnel-local is for a tunnel client whose router runs in another \
             process: list the components without router (--components tunnel-client)",
        ));
    }
    if has(Component::Router) && !has(Component::TunnelClient) && args.ingress.is_none() {
        return Err(Fail::usage(
            "serve runtime: the router component without the tunnel client needs --ingress ADDR",
        ));
    }
    if has(Component::AppProxy) {
        needed(&args.git, "--git", Component::AppProxy)?;
        needed(&args.platform_api, "--platform-api", Component::AppProxy)?;
    }
    if has(Component::AppReporter) {
        needed(&args.argocd, "--argocd", Component::AppReporter)?;
        needed(&args.events_api, "--events-api", Component::AppReporter)?;
        needed(&args.token, "--token", Component::AppReporter)?;
    }
    if has(Component::SourceServer) {
        needed(&args.argocd, "--argocd", Component::SourceServer)?;
        needed(
            &args.serve_sources,
            "--serve-sources",
            Component::SourceServer,
        )?;
    }
    if has(Component::ResourceReporter) {
        needed(
            &args.events_api,
            "--events-api",
            Component::ResourceReporter,
        )?;
        needed(&args.token, "--token", Component::ResourceReporter)?;
    }
    if has(Component::GitopsOperator) {
        needed(&args.git, "--git", Component::GitopsOperator)?;
        needed(&args.argocd, "--argocd", Component::GitopsOperator)?;
        // Replicas elect a leader by identity: each needs its own.
        if args.operator_replicas > 1 && args.pod_name.is_none() {
            return Err(Fail::usage(
                "serve runtime: --operator-replicas above 1 needs --pod-name (POD_NAME), each replica's own Lease identity",
            ));
        }
    }
    let mut config = RuntimeConfig {
        tunnels,
        router: has(Component::Router).then(|| RouterConfig {
            routes: routes.clone(),
            ingress: args.ingress.clone(),
        }),
        tunnel_local: args.tunnel_local.clone(),
        cache: has(Component::Cache).then(|| args.cache.clone()),
        event_bus: has(Component::EventBus).then(|| args.event_bus.clone()),
        ..Default::default()
    };
    let host = args
        .pod_name
        .clone()
        .or_else(|| args.name.clone())
        .unwrap_or_else(|| "runtime".into());
    let listed: Vec<&str> = run.iter().map(|c| c.name()).collect();
    block_on(async move {
        let needs_kube = has(Component::AppProxy)
            || has(Component::AppReporter)
            || has(Component::ResourceReporter)
            || has(Component::GitopsOperator);
        let kube = match needs_kube {
            true => Some(kube_target(args.apiserver.clone(), &args.namespace).await?),
            false => None,
        };
        if let (Some(git_addr), Some(kube), true) =
            (args.git.clone(), &kube, has(Component::AppProxy))
        {
            config.app_proxy = Some(app_proxy::Config {
                platform_addr: args.platform_api.clone().unwrap_or_default(),
                git_addr,
                sources_addr: args.serve_sources.clone(),
                kube: kube.clone(),
                permissions_ttl: std::time::Duration::from_secs(30),
                // The runtime's name within its account: --name is ACCOUNT-RUNTIME.
                runtime: account_and_runtime.1.clone(),
                account: account_and_runtime.0.clone(),
                listen: routes.app_proxy.clone(),
            });
        }
        if let (Some(argocd), true) = (args.argocd.clone(), has(Component::SourceServer)) {
            if let Some(listen) = &args.serve_sources {
                let mut sources = source_server::Config::new(listen, &argocd, &args.argocd_token);
                // With the platform's API and the runtime's token, each app's versionSource
                // is asked of the platform (its PromotionTemplates).
                if let (Some(platform), Some(token)) = (&args.platform_api, &args.token) {
                    sources.templates = Some(source_server::TemplateLookup::new(platform, token));
                }
                config.source_server = Some(sources);
            }
        }
        if let (Some(argocd), Some(kube), true) =
            (args.argocd.clone(), &kube, has(Component::AppReporter))
        {
            let mut reporter = app_reporter::Config::new(variant, kube.clone(), &args.namespace);
            reporter.argocd_addr = argocd;
            reporter.argocd_token = args.argocd_token.clone();
            reporter.argocd_token_secret = args.argocd_token_secret.clone();
            reporter.application_namespaces = args.application_namespaces.clone();
            reporter.platform_addr = args.events_api.clone().unwrap_or_default();
            reporter.runtime_token = args.token.clone().unwrap_or_default();
            reporter.cache_addr = args.cache.clone();
            reporter.replicas = args.replicas.max(1);
            reporter.shard = args.shard;
            reporter.serve_addr = args.reporter_listen.clone();
            reporter.sources_addr = args.serve_sources.clone();
            config.app_reporter = Some(reporter);
        }
        if let (Some(events_api), Some(token)) = (&args.events_api, &args.token) {
            let mut heartbeat = orrery_system::runtime::heartbeat::Config::new(events_api, token);
            heartbeat.every = std::time::Duration::from_secs(args.heartbeat_every);
            config.heartbeats = vec![heartbeat];
        }
        if let (Some(kube), true) = (&kube, has(Component::ResourceReporter)) {
            let mut resources = resource_reporter::Config::new(
                variant,
                kube.clone(),
                &args.events_api.clone().unwrap_or_default(),
                args.token.as_deref().unwrap_or_default(),
            );
            resources.bus_addr = args.event_bus.clone();
            resources.health_addr = args.resources_listen.clone();
            resources.workflow_namespace = args.workflows_namespace.clone();
            config.resource_reporter = Some(resources);
        }
        if let (Some(git), Some(argocd), Some(kube), true) = (
            args.git.clone(),
            args.argocd.clone(),
            &kube,
            has(Component::GitopsOperator),
        ) {
            let mut operator = gitops_operator::Config::new(
                variant,
                kube.clone(),
                &host,
                &git,
                &argocd,
                &args.argocd_token,
            );
            operator.leader_elect = args.operator_replicas > 1;
            config.operator = Some(operator);
        }
        let env = logged_env(&host, limits);
        match (&args.name, &args.platform) {
            (Some(name), Some(platform)) if has(Component::TunnelClient) => tracing::info!(
                variant = variant.as_str(),
                components = ?listed,
                "orrery runtime {name} ({host}): tunnel to {platform}"
            ),
            _ => tracing::info!(
                variant = variant.as_str(),
                components = ?listed,
                "orrery runtime ({host})"
            ),
        }
        runtime_assembly::run(env, config, shutdown_signal())
            .await
            .map_err(|e| match e {
                // The runtime gave up (as the real client exits and its pod restarts): 1.
                runtime_assembly::Error::TunnelGaveUp { .. } => Fail(e.to_string(), Exit::Mismatch),
                _ => Fail::usage(e.to_string()),
            })
    })
}

/// The Runner's agent (and with `--engine` the engine stand-in), from the runtime assembly.
fn runner(args: RunnerArgs) -> Result<(), Fail> {
    init_logging(args.common.log_format);
    let variant = Variant::from(args.common.variant);
    let limits = limits_of(&args.common.limits)?;
    block_on(async move {
        let mut kube = kube_target(args.apiserver.clone(), &args.namespace).await?;
        kube.namespace = args.namespace.clone();
        let mut agent = orrery_system::runtime::runner::Config::new(
            variant,
            &args.agent_id,
            &args.token,
            &args.platform_api,
            kube.clone(),
        );
        agent.listen = Some(args.listen.clone());
        let config = RuntimeConfig {
            runner: Some(agent),
            engine: args
                .engine
                .then(|| orrery_system::runtime::runner::engine::Config {
                    volumes: args.volumes_node_gib.is_some(),
                    memory: args.engine_memory_mib.map_or(
                        orrery_system::runtime::runner::engine::DEFAULT_MEMORY,
                        |m| m << 20,
                    ),
                    ..orrery_system::runtime::runner::engine::Config::new(
                        variant,
                        kube.clone(),
                        &args.platform_api,
                        &args.token,
                    )
                }),
            volumes: match args.volumes_node_gib {
                None => None,
                Some(gib) => {
                    use orrery_system::runtime::runner::volumes;
                    let mut config = volumes::Config::new(variant, kube, gib);
                    if let Some(text) = &args.volumes_retention {
                        config.retention = volumes::parse_retention(text)
                            .filter(|r| r.as_secs() >= 60)
                            .ok_or_else(|| {
                                Fail::usage(format!(
                                    "--volumes-retention {text:?}: expected a number and d, h, m or s (4d, 12h), at least 60s"
                                ))
                            })?;
                    }
                    Some(config)
                }
            },
            ..Default::default()
        };
        tracing::info!(
            variant = variant.as_str(),
            engine = args.engine,
            "orrery runner {}: tasks from {}, objects in namespace {}, /health on {}",
            args.agent_id,
            args.platform_api,
            args.namespace,
            args.listen
        );
        let env = logged_env(args.pod_name.as_deref().unwrap_or(&args.agent_id), limits);
        runtime_assembly::run(env, config, shutdown_signal())
            .await
            .map_err(|e| Fail::usage(e.to_string()))
    })
}

fn cronus(args: CronusArgs) -> Result<(), Fail> {
    init_logging(args.common.log_format);
    let variant = Variant::from(args.common.variant);
    let limits = limits_of(&args.common.limits)?;
    let mut config = orrery_system::platform::runner::cronus::Config::new(
        variant,
        &args.replica,
        &args.platform_api,
        &args.token,
    );
    config.triggers = args
        .triggers
        .iter()
        .map(|t| cron_trigger(t))
        .collect::<Result<_, _>>()?;
    config.min_every = duration_flag("min-every", &args.min_every)?;
    config.catch_up = duration_flag("catch-up", &args.catch_up)?;
    config.lease_ttl = duration_flag("lease-ttl", &args.lease_ttl)?;
    if config.lease_ttl < std::time::Duration::from_millis(3) {
        return Err(Fail::usage(
            "--lease-ttl must be at least 3 ms (it is renewed every third of it)",
        ));
    }
    let longest = orrery_system::platform::runner::MAX_LEASE_MS;
    if config.lease_ttl > std::time::Duration::from_millis(longest) {
        return Err(Fail::usage(format!(
            "--lease-ttl must be at most {}s (the longest lease the platform grants by default, runner.lease-max)",
            longest / 1000
        )));
    }
    block_on(async move {
        tracing::info!(
            variant = variant.as_str(),
            "orrery cronus {}: {} triggers, ticks to {}",
            args.replica,
            config.triggers.len(),
            args.platform_api
        );
        let env = logged_env(&args.replica, limits);
        let health = match &args.listen {
            Some(addr) => {
                let listener = env
                    .listen(addr)
                    .await
                    .map_err(|e| Fail::usage(format!("--listen {addr}: {e}")))?;
                let answer = serde_json::json!({
                    "replica": args.replica,
                    "variant": variant.as_str(),
                });
                Some(tokio::spawn(orrery_system::env::http::serve(
                    listener,
                    move |req, _peer| {
                        let answer = answer.clone();
                        async move {
                            if req.uri().path() == "/health" {
                                orrery_system::env::http::json(http::StatusCode::OK, &answer)
                            } else {
                                orrery_system::env::http::json(
                                    http::StatusCode::NOT_FOUND,
                                    &serde_json::json!({"message": "cronus answers /health only"}),
                                )
                            }
                        }
                    },
                )))
            }
            None => None,
        };
        let ran = tokio::select! {
            ran = orrery_system::platform::runner::cronus::run(env, config) => {
                ran.map_err(|e| Fail::usage(e.to_string()))
            }
            () = shutdown_signal() => Ok(()),
        };
        if let Some(health) = health {
            health.abort();
        }
        ran
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_name_splits_at_its_first_dash_unless_its_account_is_given() {
        let split = |name, account| split_name(name, account).map_err(|e| e.0);
        assert_eq!(
            split(Some("acme-prod"), None),
            Ok(("acme".into(), "prod".into()))
        );
        assert_eq!(
            split(Some("acme-corp-prod"), Some("acme-corp")),
            Ok(("acme-corp".into(), "prod".into()))
        );
        assert_eq!(
            split(None, Some("acme")),
            Ok((String::new(), String::new()))
        );
        for (name, account) in [
            ("acme-prod", "acme-corp"),
            ("acme-corp", "acme-corp"),
            ("globex-prod", "acme"),
        ] {
            let error = split(Some(name), Some(account)).unwrap_err();
            assert!(
                error.contains("is not --account"),
                "{name} {account}: {error}"
            );
        }
    }

    #[test]
    fn preregistered_runtimes_take_an_account_with_a_dash_after_a_slash() {
        let registry = Registry::default();
        let tokens = preregister(&registry, "acme-corp/prod=t-1,globex-prod=t-2").unwrap();
        let first = registry.lookup("t-1").unwrap();
        assert_eq!(
            (first.account.as_str(), first.runtime.as_str()),
            ("acme-corp", "prod")
        );
        assert_eq!(tokens["t-1"], "acme-corp-prod");
        let second = registry.lookup("t-2").unwrap();
        assert_eq!(
            (second.account.as_str(), second.runtime.as_str()),
            ("globex", "prod")
        );
        for bad in ["x=t", "/prod=t", "acme/=t", "acme-prod"] {
            let error = preregister(&Registry::default(), bad).unwrap_err().0;
            assert!(error.contains("--runtimes"), "{bad}: {error}");
        }
    }
}
