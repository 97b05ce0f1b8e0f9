//! `orrery record`: a real cluster's workload as a trace a scenario replays.

pub mod recorder;

use std::path::PathBuf;

use clap::Args;

use orrery_sim::exit::Exit;

use crate::commands::serve;
use crate::common::Fail;

/// `orrery record`'s flags.
#[derive(Args)]
pub struct RecordArgs {
    /// The cluster's kubeconfig (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// How long to record, e.g. 10m or 90s.
    #[arg(long, value_parser = orrery_sim::scenario::duration::parse)]
    duration: std::time::Duration,
    /// The trace file to write.
    #[arg(long)]
    out: PathBuf,
    /// Replace app names by hashes of `namespace/name`.
    #[arg(long)]
    hash_names: bool,
}

pub(crate) fn cmd_record(args: RecordArgs) -> Result<Exit, Fail> {
    serve::block_on(async move {
        let config = match &args.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| Fail::usage(format!("{}: {e}", path.display())))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .map_err(|e| Fail::usage(format!("{}: {e}", path.display())))?
            }
            None => kube::Config::infer().await.map_err(|e| {
                Fail::usage(format!("no kubeconfig (--kubeconfig or KUBECONFIG): {e}"))
            })?,
        };
        let client = kube::Client::try_from(config)
            .map_err(|e| Fail::usage(format!("cannot build a client: {e}")))?;
        eprintln!(
            "recording Application, Rollout and Workflow changes for {}",
            orrery_sim::scenario::duration::render(args.duration)
        );
        let trace =
            crate::commands::record::recorder::record(client, args.duration, args.hash_names, None)
                .await
                .map_err(|e| Fail(e.to_string(), Exit::Mismatch))?;
        std::fs::write(&args.out, trace.to_text())
            .map_err(|e| Fail::usage(format!("{}: {e}", args.out.display())))?;
        eprintln!(
            "wrote {}: {} apps, {} Rollouts and {} Workflows at the start, {} records in all",
            args.out.display(),
            trace.initial_apps().len(),
            trace
                .initial(orrery_sim::scenario::trace::Kind::Rollout)
                .len(),
            trace
                .initial(orrery_sim::scenario::trace::Kind::Workflow)
                .len(),
            trace.records.len()
        );
        Ok(())
    })?;
    Ok(Exit::Expected)
}
