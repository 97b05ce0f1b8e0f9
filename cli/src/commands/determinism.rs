//! `orrery check-determinism`: one seed run twice in separate processes, trace hashes
//! compared; with `--slow`, the second run sleeps real time before each step, so a trace
//! that read the wall clock shows.

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
    /// Run the second process slowed by this many microseconds of real time before each
    /// simulation step (200 is a good start): a trace that changes then reads the wall clock
    /// somewhere, as a loaded machine would show.
    #[arg(long, value_name = "MICROS")]
    slow: Option<u64>,
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
        real_delay_us: 0,
    };
    let slow = args.slow.unwrap_or(0);
    let twice = [
        job.clone(),
        Job {
            real_delay_us: slow,
            ..job
        },
    ];
    let results = jobs::run(&twice, 1, |_, _| {})?;
    let hashes: Vec<String> = results
        .iter()
        .map(|r| r.line["trace_hash"].as_str().unwrap_or("").to_string())
        .collect();
    let same = hashes[0] == hashes[1] && !hashes[0].is_empty();
    let mut line = serde_json::json!({"scenario": scenario.name, "variant": variant.as_str(), "seed": seed, "result": if same { "pass" } else { "nondeterminism" }, "trace_hashes": hashes});
    if slow > 0 {
        // The second hash is the slowed run's.
        line["slowed_us"] = serde_json::json!(slow);
    }
    println!("{line}");
    Ok(if same {
        Exit::Expected
    } else {
        Exit::Nondeterminism
    })
}
