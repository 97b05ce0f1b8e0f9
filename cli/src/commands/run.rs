//! `orrery run`: one seed of a scenario, one JSON line, exit 0 iff the result is the
//! expected one.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use orrery_sim::exit::Exit;
use orrery_sim::harness::runner;
use orrery_sim::report;
use orrery_sim::scenario::{self, Scenario, Variant};

use crate::common::{load, Fail, VariantArg};

/// `orrery run`'s flags.
#[derive(Args)]
pub struct RunArgs {
    /// The scenario file (YAML).
    file: PathBuf,
    /// Seed to run (default: the scenario's first seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Variant to run.
    #[arg(long, value_enum, default_value = "hardened")]
    variant: VariantArg,
    /// Also write the run's report to DIR/<variant>.{json,md}.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Also write the plain scenario this seed ran to FILE (a swarm's drawn faults and
    /// knobs, `seeds: [N]`); running it with the same seed and variant gives the same trace
    /// hash. An `any` expectation becomes this run's result.
    #[arg(long, value_name = "FILE")]
    print_scenario: Option<PathBuf>,
    /// Sleep this many microseconds of real time before each simulation step. The trace must
    /// not change: code that reads the wall clock (directly or inside a library) traces
    /// differently when a run is slow (`check-determinism --slow`).
    #[arg(long, value_name = "MICROS", default_value_t = 0)]
    real_delay_us: u64,
}

pub(crate) fn cmd_run(args: RunArgs) -> Result<Exit, Fail> {
    let (scenario, text) = load(&args.file)?;
    let path = args.file.display().to_string();
    let seed = args.seed.unwrap_or(scenario.seeds[0]);
    let variant = Variant::from(args.variant);
    let started = Instant::now(); // determinism: real-env (wall-clock perf figure only)
    let drive = runner::Drive {
        real_delay_per_step: std::time::Duration::from_micros(args.real_delay_us),
    };
    let outcome = runner::run_driven(&scenario, seed, variant, drive);
    if std::env::var_os("ORRERY_TEST_NONDETERMINISM").is_some() {
        // Test hook (cli/tests/cli/cli.rs): makes each process's trace differ, to prove that
        // check-determinism notices and exits 5. Never set outside that test.
        outcome.trace.record_harness(
            std::time::Duration::ZERO,
            orrery_sim::trace::HarnessEvent::TestNondeterminism {
                pid: std::process::id(),
            },
        );
    }
    let wall = started.elapsed().as_secs_f64();
    let figures = match &args.out {
        Some(out) => {
            let built = report::build(&scenario, &text, &path, seed, variant, &outcome);
            report::write(out, &built)
                .map_err(|e| Fail::usage(format!("{}: cannot write report: {e}", out.display())))?;
            built.headline
        }
        None => report::headline::of(&orrery_sim::harness::metrics::compute(
            &outcome.trace.events(),
            &outcome.state,
        )),
    };
    if let Some(file) = &args.print_scenario {
        print_scenario(&scenario, &path, seed, variant, outcome.result, file)?;
    }
    println!(
        "{}",
        report::summary_line(&scenario, seed, variant, &outcome, wall, &figures)
    );
    if let Some(error) = &outcome.harness_error {
        eprintln!("orrery: harness error: {error}");
    }
    Ok(Exit::of(
        outcome.result,
        report::expected(&scenario, variant),
    ))
}

/// Writes the plain scenario `seed` runs (see `--print-scenario`).
pub(crate) fn print_scenario(
    scenario: &Scenario,
    path: &str,
    seed: u64,
    variant: Variant,
    result: scenario::Outcome,
    file: &Path,
) -> Result<(), Fail> {
    let mut concrete = scenario::draw::concretize(scenario, seed);
    // `any` belongs to swarm families: the run variant's becomes what it did, others go.
    if concrete.expect.get(&variant) == Some(&scenario::Outcome::Any) {
        concrete.expect.insert(variant, result);
    }
    concrete.expect.retain(|_, e| *e != scenario::Outcome::Any);
    let yaml = serde_saphyr::to_string(&concrete)
        .map_err(|e| Fail::usage(format!("cannot render the scenario: {e}")))?;
    let text = format!(
        "# The plain scenario {path} runs for seed {seed} (orrery run --print-scenario).\n{yaml}"
    );
    std::fs::write(file, text)
        .map_err(|e| Fail::usage(format!("{}: cannot write: {e}", file.display())))
}
