//! `orrery sweep` and `orrery merge`: a range of seeds as parallel child processes (or one
//! shard of them), summarised; the shards' results merged into one sweep report.

pub mod sweep_report;

use std::path::PathBuf;

use clap::Args;

use orrery_sim::exit::Exit;
use orrery_sim::report;
use orrery_sim::scenario::Variant;

use crate::common::{load, parallelism, parse_seeds, Fail, VariantArg};
use crate::jobs::{self, Job};
use crate::{shard, summary};

/// `orrery sweep`'s flags.
#[derive(Args)]
pub struct SweepArgs {
    /// The scenario file (YAML).
    file: PathBuf,
    /// Seeds: A..B (half-open) or A..=B (inclusive).
    #[arg(long, default_value = "1..11", value_parser = parse_seeds)]
    seeds: std::ops::Range<u64>,
    /// Only this variant (default: every variant the scenario declares).
    #[arg(long, value_enum)]
    variant: Option<VariantArg>,
    /// Runs at a time (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Also write the sweep's cost (runs, CPU seconds, seeds per CPU-minute) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    perf: Option<PathBuf>,
    /// Run only slice I (0-based) of N disjoint, contiguous slices of the seeds; `env/N`
    /// takes I from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job's pod index).
    #[arg(long, value_name = "I/N", value_parser = shard::parse)]
    shard: Option<shard::Shard>,
    /// Also write every run's result line to FILE (JSON lines, after a header naming the
    /// scenario file, the seeds and the shard), as each run finishes: what `orrery merge`
    /// combines.
    #[arg(long, value_name = "FILE")]
    results: Option<PathBuf>,
    /// Also write the sweep report (DIR/sweep.{json,md}, per-seed charts) to DIR.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

/// `orrery merge`'s flags.
#[derive(Args)]
pub struct MergeArgs {
    /// The results files of the shards (`sweep --results FILE`).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Where the sweep report goes (DIR/sweep.{json,md}, per-seed charts).
    #[arg(long, value_name = "DIR")]
    report: PathBuf,
    /// The scenario file (default: the one the results files name, relative to here).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
}

pub(crate) fn cmd_sweep(args: SweepArgs) -> Result<Exit, Fail> {
    let (scenario, text) = load(&args.file)?;
    let path = args.file.display().to_string();
    let variants: Vec<Variant> = match args.variant {
        Some(v) => vec![v.into()],
        None => scenario.expect.keys().copied().collect(),
    };
    let seeds = match &args.shard {
        Some(shard) => shard.slice(&args.seeds)?,
        None => args.seeds.clone(),
    };
    let jobs: Vec<Job> = variants
        .iter()
        .flat_map(|v| seeds.clone().map(move |seed| (*v, seed)))
        .map(|(variant, seed)| Job {
            path: path.clone(),
            scenario: scenario.clone(),
            variant,
            seed,
            out: None,
            real_delay_us: 0,
        })
        .collect();
    let mut results_file = match &args.results {
        Some(file) => Some(shard::ResultsWriter::create(
            file,
            &shard::Header {
                scenario_file: path.clone(),
                scenario_fnv: shard::fnv(&text),
                seeds: format!("{}..{}", args.seeds.start, args.seeds.end),
                shard: args.shard.as_ref().map(|s| s.to_string()),
                variants: variants.iter().map(|v| v.as_str().to_string()).collect(),
            },
        )?),
        None => None,
    };
    let mut write_error = None;
    let progress = jobs::Progress::new(jobs.len() as u64);
    let results = jobs::run(&jobs, parallelism(args.jobs), |_, result| {
        // Each run's result line goes out as soon as it is known, so an interrupted long
        // sweep keeps what it found.
        progress.line(&result.line.to_string(), result.exit != Exit::Expected);
        if let Some(file) = results_file.as_mut() {
            if let Err(e) = file.append(&result.line) {
                write_error.get_or_insert(e);
            }
        }
    })?;
    progress.finish();
    if let Some(e) = write_error {
        return Err(e);
    }
    if let Some(dir) = &args.report {
        let runs: Vec<(Variant, u64, &jobs::JobResult)> = jobs
            .iter()
            .zip(&results)
            .map(|(j, r)| (j.variant, j.seed, r))
            .collect();
        crate::commands::sweep::sweep_report::SweepReport::of(&scenario, &path, &seeds, &runs)
            .write(dir)?;
    }
    let mut worst = Exit::Expected;
    let mut perf = Vec::new();
    for variant in variants {
        let runs: Vec<(u64, &jobs::JobResult)> = jobs
            .iter()
            .zip(&results)
            .filter(|(j, _)| j.variant == variant)
            .map(|(j, r)| (j.seed, r))
            .collect();
        let summary = summary::Summary::of(&scenario, variant, &runs);
        println!(
            "{}",
            summary.text(|seed| report::repro(&path, seed, variant))
        );
        worst = worst.max(summary.worst);
        perf.push(serde_json::json!({
            "scenario": scenario.name, "variant": variant.as_str(),
            "seeds": format!("{}..{}", args.seeds.start, args.seeds.end),
            "runs": summary.runs, "cpu_seconds": (summary.cpu_seconds * 10.0).round() / 10.0,
            "seeds_per_cpu_minute": (summary.seeds_per_cpu_minute() * 10.0).round() / 10.0,
            "debug_build": cfg!(debug_assertions),
        }));
    }
    if let Some(file) = &args.perf {
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Fail::usage(format!("{}: {e}", dir.display())))?;
        }
        let text = serde_json::to_string_pretty(&perf).expect("JSON values serialise");
        std::fs::write(file, text + "\n")
            .map_err(|e| Fail::usage(format!("{}: cannot write: {e}", file.display())))?;
    }
    if args.shard.is_some() {
        // A shard's findings (unexpected results, conditions its slice did not reach) are
        // judged over the whole sweep by `orrery merge`; a shard that ran its seeds succeeded,
        // so a Job does not retry it for what it found.
        println!("shard done: its findings are judged with the other shards by `orrery merge`");
        return Ok(Exit::Expected);
    }
    Ok(worst)
}

pub(crate) fn cmd_merge(args: MergeArgs) -> Result<Exit, Fail> {
    let merged = shard::read_all(&args.files)?;
    let file = args
        .scenario
        .clone()
        .unwrap_or_else(|| PathBuf::from(&merged.header.scenario_file));
    let (scenario, text) = load(&file)?;
    if shard::fnv(&text) != merged.header.scenario_fnv {
        return Err(Fail::usage(format!(
            "{}: not the scenario file the sweep ran (its FNV-1a is {}, the results name {})",
            file.display(),
            shard::fnv(&text),
            merged.header.scenario_fnv
        )));
    }
    let seeds = parse_seeds(&merged.header.seeds).map_err(Fail::usage)?;
    let results = merged.results(&scenario, &seeds)?;
    let runs: Vec<(Variant, u64, &jobs::JobResult)> =
        results.iter().map(|(v, seed, r)| (*v, *seed, r)).collect();
    let report = crate::commands::sweep::sweep_report::SweepReport::of(
        &scenario,
        &merged.header.scenario_file,
        &seeds,
        &runs,
    );
    report.write(&args.report)?;
    let mut worst = Exit::Expected;
    for v in &report.variants {
        let variant = Variant::parse(v.summary.variant).map_err(Fail::usage)?;
        let path = &merged.header.scenario_file;
        println!(
            "{}",
            v.summary.text(|seed| report::repro(path, seed, variant))
        );
        worst = worst.max(v.summary.worst);
    }
    Ok(worst)
}
