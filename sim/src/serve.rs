//! `orrery serve control-plane|runtime`: the same components as in simulation, on real
//! sockets, logging through `tracing` and stopping cleanly on SIGINT/SIGTERM.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};

use orrery_sim::exit::Exit;
use orrery_system::core::Variant;
use orrery_system::env::{RealEnv, SharedEnv};
use orrery_system::platform::gateway::{self, Gateway};
use orrery_system::platform::permissions::{Permissions, OPERATIONS};
use orrery_system::platform::registry::Registry;
use orrery_system::platform::tunnel::{self, TunnelServer};
use orrery_system::runtime::router::{self, Router, Routes};
use orrery_system::runtime::tunnel_client;

use crate::{Fail, VariantArg};

/// What to serve.
#[derive(Subcommand)]
pub enum Serve {
    /// The platform for real: tunnel server and client API (POST /api/runtimes registers,
    /// /api/runtimes/NAME/... forwards into that runtime's tunnel).
    ControlPlane(ControlPlaneArgs),
    /// A runtime for real: tunnel client and request routing service, and with --git the
    /// app-proxy (permissions from --platform-api; workflows patched through --apiserver,
    /// a plain-HTTP simulated API server, or the KUBECONFIG cluster).
    Runtime(RuntimeArgs),
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
    /// Runtimes known at start: ACCOUNT-RUNTIME=TOKEN,...
    #[arg(long, default_value = "")]
    runtimes: String,
    /// App-proxy users: TOKEN=USER:OPERATION+OPERATION,...
    #[arg(long, default_value = "")]
    users: String,
    /// TLS certificate (PEM) for the tunnel (WSS); goes with --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for the tunnel; goes with --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// `orrery serve runtime`.
#[derive(Args)]
pub struct RuntimeArgs {
    /// The platform's tunnel server (host:port).
    #[arg(long)]
    platform: String,
    /// This runtime's tunnel name, ACCOUNT-RUNTIME.
    #[arg(long)]
    name: String,
    /// This runtime's token.
    #[arg(long, env = "ORRERY_RUNTIME_TOKEN", hide_env_values = true)]
    token: String,
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
    /// The platform's client API, for the app-proxy's permissions.
    #[arg(long)]
    platform_api: Option<String>,
    /// A plain-HTTP Kubernetes API server for the app-proxy (default: the KUBECONFIG cluster).
    #[arg(long)]
    apiserver: Option<String>,
    /// CA certificate (PEM) to verify the tunnel server with (WSS).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
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

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests calling serve twice in one process) keeps the first subscriber.
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// A real environment whose observations are logged (they are the components' events).
fn logged_env(host: &str) -> SharedEnv {
    Arc::new(RealEnv::new(host).with_observer(|o| {
        tracing::info!(target: "orrery::observation", kind = %o.kind, detail = %o.detail);
    }))
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM (what Kubernetes sends a pod it stops).
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            biased;
            _ = interrupt => tracing::info!("SIGINT: shutting down"),
            _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
        tracing::info!("Ctrl-C: shutting down");
    }
}

/// Runs `serve` until it ends or a shutdown signal arrives.
async fn until_signal(serve: impl Future<Output = Result<(), Fail>>) -> Result<(), Fail> {
    tokio::select! {
        biased;
        _ = shutdown_signal() => Ok(()),
        ended = serve => ended,
    }
}

/// Dispatches `orrery serve …`.
pub fn run(what: Serve) -> Result<Exit, Fail> {
    match what {
        Serve::ControlPlane(args) => control_plane(args),
        Serve::Runtime(args) => runtime(args),
    }
    .map(|()| Exit::Expected)
}

/// `--runtimes acme-prod=TOKEN,acme-dev=TOKEN2` into the registry.
fn preregister(registry: &Registry, list: &str) -> Result<(), Fail> {
    for entry in list.split(',').filter(|e| !e.is_empty()) {
        let Some((name, token)) = entry.split_once('=') else {
            return Err(Fail::usage(format!(
                "--runtimes: {entry:?} is not <account>-<runtime>=<token>"
            )));
        };
        let Some((account, runtime)) = name.split_once('-') else {
            return Err(Fail::usage(format!(
                "--runtimes: {name:?} is not <account>-<runtime>"
            )));
        };
        registry.insert(token, account, runtime);
    }
    Ok(())
}

/// `--users TOKEN=alice:repositories:list+workflows:terminate,…` into the permissions.
fn users(permissions: &Permissions, list: &str) -> Result<(), Fail> {
    for entry in list.split(',').filter(|e| !e.is_empty()) {
        let Some((token, rest)) = entry.split_once('=') else {
            return Err(Fail::usage(format!(
                "--users: {entry:?} is not <token>=<user>:<operation>+<operation>"
            )));
        };
        let (user, operations) = rest.split_once(':').unwrap_or((rest, ""));
        let operations: Vec<&str> = operations.split('+').filter(|o| !o.is_empty()).collect();
        if let Some(bad) = operations.iter().find(|o| !OPERATIONS.contains(o)) {
            return Err(Fail::usage(format!(
                "--users: unknown operation {bad:?} (known: {OPERATIONS:?})"
            )));
        }
        permissions.grant(token, user, &operations);
    }
    Ok(())
}

fn read(path: &PathBuf) -> Result<Vec<u8>, Fail> {
    std::fs::read(path).map_err(|e| Fail::usage(format!("{}: {e}", path.display())))
}

/// The platform: tunnel server and client gateway.
fn control_plane(args: ControlPlaneArgs) -> Result<(), Fail> {
    init_logging(args.common.log_format);
    let variant = Variant::from(args.common.variant);
    let registry = Arc::new(Registry::default());
    preregister(&registry, &args.runtimes)?;
    let permissions = Arc::new(Permissions::default());
    users(&permissions, &args.users)?;
    let mut config = tunnel::Config::new(variant);
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.tls = Some(
            orrery_system::tunnel::tls::server_config(&read(cert)?, &read(key)?)
                .map_err(|e| Fail::usage(e.to_string()))?,
        );
    }
    let scheme = if config.tls.is_some() { "wss" } else { "ws" };
    let (tunnel_addr, api_addr, admin_token) = (args.tunnel, args.api, args.admin_token);
    block_on(until_signal(async move {
        let env = logged_env("control-plane");
        let tunnels = TunnelServer::new(config, registry.clone());
        let gateway = Arc::new(Gateway {
            admin_token,
            registry,
            tunnels: tunnels.clone(),
            permissions: permissions.clone(),
        });
        let tunnel_listener = env
            .listen(&tunnel_addr)
            .await
            .map_err(|e| Fail::usage(format!("{tunnel_addr}: {e}")))?;
        tracing::info!(
            variant = variant.as_str(),
            "orrery control-plane: tunnel on {scheme}://{tunnel_addr}, client API on http://{api_addr}"
        );
        tokio::spawn(tunnel::serve(env.clone(), tunnels, tunnel_listener));
        gateway::run(env, gateway, &api_addr)
            .await
            .map_err(|e| Fail::usage(format!("{api_addr}: {e}")))
    }))
}

/// A runtime: tunnel client and request routing service (optionally also on an ingress
/// port), and the app-proxy when `--git` names a Git provider.
fn runtime(args: RuntimeArgs) -> Result<(), Fail> {
    init_logging(args.common.log_format);
    let variant = Variant::from(args.common.variant);
    let routes = Routes {
        app_proxy: args.app_proxy.clone(),
        workflows: args.workflows.clone(),
        event_sources: Default::default(),
    };
    let mut client = tunnel_client::Config::new(variant, &args.platform, &args.name, &args.token);
    if let Some(path) = &args.tls_ca {
        client.tls = Some(
            orrery_system::tunnel::tls::client_config(&read(path)?)
                .map_err(|e| Fail::usage(e.to_string()))?,
        );
    }
    let app_proxy = args.git.clone().map(|git| {
        let platform_api = args.platform_api.clone().unwrap_or_default();
        (git, platform_api, args.apiserver.clone())
    });
    let (name, platform, ingress) = (args.name, args.platform, args.ingress);
    block_on(until_signal(async move {
        let env = logged_env(&name);
        if let Some((git_addr, platform_addr, apiserver)) = app_proxy {
            // The Kubernetes API: a plain-HTTP (simulated) server if given, else KUBECONFIG.
            let kube = match apiserver {
                Some(addr) => orrery_system::env::kube::KubeTarget::new(addr),
                None => {
                    let config = kube::Config::infer().await.map_err(|e| {
                        Fail::usage(format!(
                            "the app-proxy needs --apiserver or a kubeconfig: {e}"
                        ))
                    })?;
                    orrery_system::env::kube::KubeTarget::real(config, "default")
                }
            };
            let config = orrery_system::runtime::app_proxy::Config {
                platform_addr,
                git_addr,
                kube,
                permissions_ttl: std::time::Duration::from_secs(30),
                listen: routes.app_proxy.clone(),
            };
            let env = env.clone();
            tokio::spawn(async move { orrery_system::runtime::app_proxy::run(env, config).await });
        }
        if let Some(addr) = ingress {
            let (env, routes) = (env.clone(), routes.clone());
            tokio::spawn(async move { router::run(env, routes, &addr).await });
        }
        let router = Router::new(env.clone(), routes);
        let handler: tunnel_client::Handler = Arc::new(move |request| {
            let router = router.clone();
            Box::pin(async move { router.handle(request).await })
        });
        tracing::info!(
            variant = variant.as_str(),
            "orrery runtime {name}: tunnel to {platform}"
        );
        tunnel_client::run(env, client, handler)
            .await
            .map_err(|e| Fail::usage(e.to_string()))
    }))
}
