//! `orrery apiserver`: the simulated Kubernetes API server on a real socket.

use clap::Args;

use orrery_sim::exit::Exit;

use crate::commands::serve;
use crate::common::Fail;

/// `orrery apiserver`'s flags.
#[derive(Args)]
pub struct ApiserverArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: String,
    /// A namespace to create at start, beside default, kube-node-lease, kube-public and
    /// kube-system (repeat it): as on a real cluster, nothing is created in a namespace
    /// that does not exist (`kubectl create namespace NAME` makes one later).
    #[arg(long = "namespace", value_name = "NAME")]
    namespaces: Vec<String>,
    /// Log format (the level follows RUST_LOG, default info).
    #[arg(long, value_enum, default_value = "human")]
    log_format: serve::LogFormat,
}

pub(crate) fn cmd_apiserver(args: ApiserverArgs) -> Result<Exit, Fail> {
    serve::init_logging(args.log_format);
    for name in &args.namespaces {
        if !orrery_sim::world::apiserver::validation::namespace_name(name) {
            return Err(Fail::usage(format!(
                "--namespace {name:?}: not a namespace name (a DNS label: lowercase letters, digits and '-', at most 63)"
            )));
        }
    }
    let listen = args.listen;
    let namespaces = args.namespaces;
    serve::block_on(async move {
        let env: orrery_system::env::SharedEnv =
            std::sync::Arc::new(orrery_system::env::RealEnv::new("apiserver"));
        // Namespaces as on a real cluster: the four system ones exist, others are created.
        let server = orrery_sim::world::apiserver::ApiServer::requiring_namespaces(
            Default::default(),
            env.elapsed(),
            env.unix_millis(),
        );
        for name in &namespaces {
            server
                .create_namespace(name, env.elapsed(), env.unix_millis())
                .map_err(|e| Fail::usage(format!("--namespace {name:?}: {}", e.message)))?;
        }
        tracing::info!("orrery apiserver listening on http://{listen}");
        orrery_sim::world::apiserver::run(env, server, &listen)
            .await
            .map_err(|e| Fail::usage(format!("{listen}: {e}")))
    })?;
    Ok(Exit::Expected)
}
