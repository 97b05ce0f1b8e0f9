//! `orrery shrink`: a failing run cut down to a minimal scenario that fails the same way
//! (the logic is the library's, `orrery_sim::explore::shrink`; candidates run as child
//! processes with `--jobs`).

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use orrery_sim::exit::Exit;
use orrery_sim::scenario::Variant;

use crate::common::{load, parallelism, Fail, VariantArg};
use crate::jobs::{self};

/// `orrery shrink`'s flags.
#[derive(Args)]
pub struct ShrinkArgs {
    /// The scenario file (YAML).
    file: PathBuf,
    /// The failing seed.
    #[arg(long)]
    seed: u64,
    /// Variant to run.
    #[arg(long, value_enum, default_value = "hardened")]
    variant: VariantArg,
    /// The invariant to keep breaking (default: the first one the run breaks).
    #[arg(long)]
    invariant: Option<String>,
    /// Where to write the result (default: <file stem>.min.yaml next to FILE).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Candidates run at a time, as child processes (default: the number of cores); the
    /// scenario kept is the same at any width.
    #[arg(long)]
    jobs: Option<usize>,
}

pub(crate) fn cmd_shrink(args: ShrinkArgs) -> Result<Exit, Fail> {
    let (scenario, _) = load(&args.file)?;
    let variant = Variant::from(args.variant);
    let out = args.out.clone().unwrap_or_else(|| {
        let stem = args
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into());
        args.file.with_file_name(format!("{stem}.min.yaml"))
    });
    let started = Instant::now(); // determinism: real-env (wall-clock progress figure only)
    let mut progress = |step: &str| eprintln!("orrery shrink: {step}");
    let mut judge = jobs::ProcessJudge::new(parallelism(args.jobs))?;
    let shrunk = orrery_sim::explore::shrink::shrink_with(
        &scenario,
        args.seed,
        variant,
        args.invariant.as_deref(),
        &mut judge,
        &mut progress,
    )
    .map_err(|e| Fail::usage(e.to_string()))?;
    let yaml = serde_saphyr::to_string(&shrunk.scenario)
        .map_err(|e| Fail::usage(format!("cannot render the scenario: {e}")))?;
    let text = format!(
        "# Shrunk by: orrery shrink {} --seed {} --variant {}\n# Still breaks {}. {}\n{yaml}",
        args.file.display(),
        args.seed,
        variant.as_str(),
        shrunk.invariant,
        shrunk.changes.join(", "),
    );
    std::fs::write(&out, text)
        .map_err(|e| Fail::usage(format!("{}: cannot write: {e}", out.display())))?;
    println!(
        "{}: still breaks {} after {} runs ({:.0} s): {}",
        out.display(),
        shrunk.invariant,
        shrunk.runs,
        started.elapsed().as_secs_f64(),
        if shrunk.changes.is_empty() {
            "nothing could be removed".to_string()
        } else {
            shrunk.changes.join(", ")
        }
    );
    println!(
        "replay: cargo run -q --bin orrery -- run {} --variant {}",
        out.display(),
        variant.as_str()
    );
    Ok(Exit::Expected)
}
