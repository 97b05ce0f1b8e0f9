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
    /// Log format (the level follows RUST_LOG, default info).
    #[arg(long, value_enum, default_value = "human")]
    log_format: serve::LogFormat,
}

pub(crate) fn cmd_apiserver(args: ApiserverArgs) -> Result<Exit, Fail> {
    serve::init_logging(args.log_format);
    let listen = args.listen;
    serve::block_on(async move {
        let env: orrery_system::env::SharedEnv =
            std::sync::Arc::new(orrery_system::env::RealEnv::new("apiserver"));
        let server = orrery_sim::world::apiserver::ApiServer::new(Default::default());
        tracing::info!("orrery apiserver listening on http://{listen}");
        orrery_sim::world::apiserver::run(env, server, &listen)
            .await
            .map_err(|e| Fail::usage(format!("{listen}: {e}")))
    })?;
    Ok(Exit::Expected)
}
