//! `orrery serve control-plane|runtime`: the same components as in simulation, on real
//! sockets (plain TCP; TLS is not wired yet).

use std::process::ExitCode;
use std::sync::Arc;

use orrery_system::core::Variant;
use orrery_system::env::{RealEnv, SharedEnv};
use orrery_system::platform::gateway::{self, Gateway};
use orrery_system::platform::registry::Registry;
use orrery_system::platform::tunnel::{self, TunnelServer};
use orrery_system::runtime::router::{self, Router, Routes};
use orrery_system::runtime::tunnel_client;

use crate::{fail, parse_args, Fail};

fn variant(args: &crate::Args) -> Result<Variant, Fail> {
    Variant::parse(
        args.flags
            .get("variant")
            .map(String::as_str)
            .unwrap_or("hardened"),
    )
    .map_err(|e| Fail(e, 2))
}

fn runtime() -> Result<tokio::runtime::Runtime, Fail> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail(format!("cannot start tokio: {e}"), 2))
}

/// `--runtimes acme-prod=TOKEN,acme-dev=TOKEN2` into the registry.
fn preregister(registry: &Registry, list: &str) -> Result<(), Fail> {
    for entry in list.split(',').filter(|e| !e.is_empty()) {
        let Some((name, token)) = entry.split_once('=') else {
            return fail(format!(
                "--runtimes: {entry:?} is not <account>-<runtime>=<token>"
            ));
        };
        let Some((account, runtime)) = name.split_once('-') else {
            return fail(format!("--runtimes: {name:?} is not <account>-<runtime>"));
        };
        registry.insert(token, account, runtime);
    }
    Ok(())
}

/// `--users TOKEN=alice:repositories:list+workflows:terminate,…` into the permissions.
fn users(
    permissions: &orrery_system::platform::permissions::Permissions,
    list: &str,
) -> Result<(), Fail> {
    for entry in list.split(',').filter(|e| !e.is_empty()) {
        let Some((token, rest)) = entry.split_once('=') else {
            return fail(format!(
                "--users: {entry:?} is not <token>=<user>:<operation>+<operation>"
            ));
        };
        let (user, operations) = rest.split_once(':').unwrap_or((rest, ""));
        let operations: Vec<&str> = operations.split('+').filter(|o| !o.is_empty()).collect();
        if let Some(bad) = operations
            .iter()
            .find(|o| !orrery_system::platform::permissions::OPERATIONS.contains(o))
        {
            return fail(format!(
                "--users: unknown operation {bad:?} (known: {:?})",
                orrery_system::platform::permissions::OPERATIONS
            ));
        }
        permissions.grant(token, user, &operations);
    }
    Ok(())
}

/// The platform: tunnel server and client gateway.
pub fn control_plane(raw: &[String]) -> Result<ExitCode, Fail> {
    let args = parse_args(
        raw,
        &[
            "tunnel",
            "api",
            "variant",
            "admin-token",
            "runtimes",
            "users",
            "tls-cert",
            "tls-key",
        ],
    )?;
    let variant = variant(&args)?;
    let tunnel_addr = args
        .flags
        .get("tunnel")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:8443".into());
    let api_addr = args
        .flags
        .get("api")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:8081".into());
    let Some(admin_token) = args
        .flags
        .get("admin-token")
        .cloned()
        .or_else(|| std::env::var("ORRERY_ADMIN_TOKEN").ok())
    else {
        return fail("control-plane needs --admin-token TOKEN (or ORRERY_ADMIN_TOKEN) to protect runtime registration");
    };
    let registry = Arc::new(Registry::default());
    preregister(
        &registry,
        args.flags.get("runtimes").map(String::as_str).unwrap_or(""),
    )?;
    let permissions = Arc::new(orrery_system::platform::permissions::Permissions::default());
    users(
        &permissions,
        args.flags.get("users").map(String::as_str).unwrap_or(""),
    )?;
    let mut config = tunnel::Config::new(variant);
    match (args.flags.get("tls-cert"), args.flags.get("tls-key")) {
        (Some(cert), Some(key)) => {
            let read =
                |path: &String| std::fs::read(path).map_err(|e| Fail(format!("{path}: {e}"), 2));
            config.tls = Some(
                orrery_system::tunnel::tls::server_config(&read(cert)?, &read(key)?)
                    .map_err(|e| Fail(e.to_string(), 2))?,
            );
        }
        (None, None) => {}
        _ => return fail("--tls-cert and --tls-key go together"),
    }
    let scheme = if config.tls.is_some() { "wss" } else { "ws" };
    runtime()?.block_on(async move {
        let env: SharedEnv = Arc::new(RealEnv::new("control-plane"));
        let tunnels = TunnelServer::new(config, registry.clone());
        let gateway = Arc::new(Gateway { admin_token, registry, tunnels: tunnels.clone(), permissions: permissions.clone() });
        let tunnel_listener = env.listen(&tunnel_addr).await.map_err(|e| Fail(format!("{tunnel_addr}: {e}"), 1))?;
        eprintln!("orrery control-plane ({}): tunnel on {scheme}://{tunnel_addr}, client API on http://{api_addr}", variant.as_str());
        tokio::spawn(tunnel::serve(env.clone(), tunnels, tunnel_listener));
        gateway::run(env, gateway, &api_addr).await.map_err(|e| Fail(format!("{api_addr}: {e}"), 1))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// A runtime: tunnel client and request routing service (optionally also on an ingress
/// port), and the app-proxy when `--git` names a Git provider.
pub fn runtime_cmd(raw: &[String]) -> Result<ExitCode, Fail> {
    let args = parse_args(
        raw,
        &[
            "platform",
            "platform-api",
            "name",
            "token",
            "variant",
            "app-proxy",
            "workflows",
            "ingress",
            "git",
            "apiserver",
            "tls-ca",
        ],
    )?;
    let variant = variant(&args)?;
    let required = |flag: &str| {
        args.flags
            .get(flag)
            .cloned()
            .ok_or_else(|| Fail(format!("runtime needs --{flag}"), 2))
    };
    let (platform, name) = (required("platform")?, required("name")?);
    let token = args
        .flags
        .get("token")
        .cloned()
        .or_else(|| std::env::var("ORRERY_RUNTIME_TOKEN").ok())
        .ok_or_else(|| Fail("runtime needs --token (or ORRERY_RUNTIME_TOKEN)".into(), 2))?;
    let routes = Routes {
        app_proxy: args
            .flags
            .get("app-proxy")
            .cloned()
            .unwrap_or_else(|| "127.0.0.1:3017".into()),
        workflows: args
            .flags
            .get("workflows")
            .cloned()
            .unwrap_or_else(|| "127.0.0.1:2746".into()),
        event_sources: Default::default(),
    };
    let ingress = args.flags.get("ingress").cloned();
    let mut client = tunnel_client::Config::new(variant, &platform, &name, &token);
    if let Some(path) = args.flags.get("tls-ca") {
        let roots = std::fs::read(path).map_err(|e| Fail(format!("{path}: {e}"), 2))?;
        client.tls = Some(
            orrery_system::tunnel::tls::client_config(&roots)
                .map_err(|e| Fail(e.to_string(), 2))?,
        );
    }
    let app_proxy = match args.flags.get("git") {
        None => None,
        Some(git) => Some((
            git.clone(),
            args.flags.get("platform-api").cloned().ok_or_else(|| {
                Fail(
                    "the app-proxy (--git) needs --platform-api ADDR for permissions".into(),
                    2,
                )
            })?,
            args.flags.get("apiserver").cloned(),
        )),
    };
    runtime()?.block_on(async move {
        let env: SharedEnv = Arc::new(RealEnv::new(name.clone()));
        if let Some((git_addr, platform_addr, apiserver)) = app_proxy {
            // The Kubernetes API: a plain-HTTP (simulated) server if given, else KUBECONFIG.
            let kube = match apiserver {
                Some(addr) => orrery_system::env::kube::KubeTarget::new(addr),
                None => {
                    let config = kube::Config::infer().await.map_err(|e| {
                        Fail(
                            format!("the app-proxy needs --apiserver or a kubeconfig: {e}"),
                            2,
                        )
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
        eprintln!(
            "orrery runtime {name} ({}): tunnel to {platform}",
            variant.as_str()
        );
        tunnel_client::run(env, client, handler)
            .await
            .map_err(|e| Fail(e.to_string(), 1))
    })?;
    Ok(ExitCode::SUCCESS)
}
