//! `orrery check-determinism`: one seed run twice in separate processes, trace hashes
//! compared.

use std::path::PathBuf;

use clap::Args;

use orrery_sim::exit::Exit;
use orrery_sim::scenario::Variant;

use crate::common::{load, Fail, VariantArg};
use crate::jobs::{self, Job};

/// `orrery check-determinism`'s flags.
#[derive(Args)]
pub struct DeterminismArgs {
    /// The scenario file (YAML).
    file: PathBuf,
    /// Seed to run (default: the scenario's first seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Variant to run.
    #[arg(long, value_enum, default_value = "hardened")]
    variant: VariantArg,
}

pub(crate) fn cmd_check_determinism(args: DeterminismArgs) -> Result<Exit, Fail> {
    let (scenario, _) = load(&args.file)?;
    let path = args.file.display().to_string();
    let seed = args.seed.unwrap_or(scenario.seeds[0]);
    let variant = Variant::from(args.variant);
    let job = Job {
        path,
        scenario: scenario.clone(),
        variant,
        seed,
        out: None,
    };
    let twice = [job.clone(), job];
    let results = jobs::run(&twice, 1, |_, _| {})?;
    let hashes: Vec<String> = results
        .iter()
        .map(|r| r.line["trace_hash"].as_str().unwrap_or("").to_string())
        .collect();
    let same = hashes[0] == hashes[1] && !hashes[0].is_empty();
    println!(
        "{}",
        serde_json::json!({"scenario": scenario.name, "variant": variant.as_str(), "seed": seed, "result": if same { "pass" } else { "nondeterminism" }, "trace_hashes": hashes})
    );
    Ok(if same {
        Exit::Expected
    } else {
        Exit::Nondeterminism
    })
}
