//! `orrery`: run scenarios, sweep seeds, check determinism, regenerate reports, and serve
//! the simulated API server, the control plane and a runtime on real sockets.

mod farm_cmd;
mod jobs;
mod serve;
mod shard;
mod summary;
mod sweep_report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};

use orrery_sim::exit::Exit;
use orrery_sim::harness::runner;
use orrery_sim::report;
use orrery_sim::scenario::{self, Scenario, Variant};

use jobs::Job;

/// Simulations allocate and free JSON bodies at a high rate; mimalloc roughly halves the
/// time glibc's allocator spends on them (measured with perf on queue-overflow).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EXIT_CODES: &str = "Exit codes (run, sweep, check-determinism, reports):
  0  the expected result (every run as its scenario declares)
  1  another mismatch, e.g. an unexpected pass
  2  usage or harness error (bad flag, bad scenario file, a host failed)
  3  unexpected safety violation
  4  unexpected liveness timeout
  5  nondeterminism (two runs of one seed differed)
  6  a declared reach condition was never reached
A sweep or reports run exits with the highest code among its unexpected results.";

/// orrery — deterministic simulation of a GitOps runtime and its control plane.
#[derive(Parser)]
#[command(name = "orrery", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process; boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run one seed of a scenario; print one JSON line; exit 0 iff the result is the expected one.
    Run(RunArgs),
    /// Run a range of seeds (as parallel child processes); summarise unexpected results.
    Sweep(SweepArgs),
    /// Combine the results files of a sharded sweep (`sweep --shard I/N --results FILE`)
    /// into one sweep report.
    Merge(MergeArgs),
    /// Run one seed twice in separate processes and compare the trace hashes.
    CheckDeterminism(DeterminismArgs),
    /// Regenerate the gated reports for every scenario and declared variant at its first seed.
    Reports(ReportsArgs),
    /// Benchmark the reporter's hot path and the tunnel in real mode (ungated perf figures).
    Bench(BenchArgs),
    /// Serve the simulated Kubernetes API server on a real TCP socket (plain HTTP).
    Apiserver(ApiserverArgs),
    /// Record a real cluster's Application, Rollout and Workflow changes as a workload trace that a scenario
    /// replays (`workload: {replay: FILE, speed: N}`).
    Record(RecordArgs),
    /// Measure `orrery apiserver` and the real kube-apiserver KUBECONFIG names side by side
    /// (start-up; create, list and watch throughput); figures to reports/perf/.
    BenchApiserver(BenchApiserverArgs),
    /// Measure the simulator's own plumbing: one HTTP request between two simulated hosts
    /// (real hyper over turmoil, as components use it) and one idle step; figures to
    /// reports/perf/.
    BenchSim(BenchSimArgs),
    /// Split a profiled seed's samples (`perf script -F ip,sym` text, as `make profile`
    /// records) into the wire between hosts and the components' own logic.
    ProfileSplit(ProfileSplitArgs),
    /// List the fault points compiled into the system code (name, tab, what firing does).
    BuggifyPoints,
    /// Shrink a failing run to a minimal scenario that still breaks the same invariant;
    /// writes <file stem>.min.yaml next to FILE.
    Shrink(ShrinkArgs),
    /// Explore for a budget: new seeds of every scenario file (both variants), chosen by
    /// rarity, recent failures and cost; every run in a results database; every unexpected
    /// failure shrunk into scenarios/regressions/; rare runs mutated; report in reports/farm/.
    Farm(farm_cmd::FarmArgs),
    /// Merge the results databases of a sharded farm run (`farm --shard I/N --db FILE`) into
    /// one database and one farm report.
    FarmMerge(farm_cmd::FarmMergeArgs),
    /// Run the control plane or a runtime for real.
    #[command(subcommand)]
    Serve(serve::Serve),
}

/// Which variants to run.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum VariantArg {
    /// Reproduces the real system, known flaws included.
    Faithful,
    /// orrery's design, which must fix each flaw.
    Hardened,
}

impl From<VariantArg> for Variant {
    fn from(v: VariantArg) -> Variant {
        match v {
            VariantArg::Faithful => Variant::Faithful,
            VariantArg::Hardened => Variant::Hardened,
        }
    }
}

#[derive(Args)]
struct RunArgs {
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
}

#[derive(Args)]
struct SweepArgs {
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

#[derive(Args)]
struct MergeArgs {
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

#[derive(Args)]
struct ShrinkArgs {
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

#[derive(Args)]
struct DeterminismArgs {
    /// The scenario file (YAML).
    file: PathBuf,
    /// Seed to run (default: the scenario's first seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Variant to run.
    #[arg(long, value_enum, default_value = "hardened")]
    variant: VariantArg,
}

#[derive(Args)]
struct ReportsArgs {
    /// Directory of scenario files.
    #[arg(long, default_value = "scenarios")]
    scenarios: PathBuf,
    /// Where the reports go (OUT/<scenario>/<variant>.{json,md}, OUT/README.md, OUT/perf/).
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    /// Runs at a time (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
}

#[derive(Args)]
struct BenchArgs {
    /// Events through the reporter's hot path per variant.
    #[arg(long, default_value_t = 20_000)]
    events: usize,
    /// Applications in the reporter benchmark (real event model); enough that the offered
    /// load (three events per app per second) exceeds what either variant delivers.
    #[arg(long, default_value_t = 1000)]
    apps: usize,
    /// Wall seconds each variant is measured for in the reporter benchmark.
    #[arg(long, default_value_t = 10)]
    window: u64,
    /// Where the figures go (ungated).
    #[arg(long, default_value = "reports/perf/bench.json")]
    out: PathBuf,
}

#[derive(Args)]
struct RecordArgs {
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

#[derive(Args)]
struct BenchApiserverArgs {
    /// ConfigMaps created on each server (and as many again while watching).
    #[arg(long, default_value_t = 2000)]
    objects: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Full lists of the benchmark namespace.
    #[arg(long, default_value_t = 20)]
    lists: usize,
    /// Where the figures go (ungated).
    #[arg(long, default_value = "reports/perf/apiserver.json")]
    out: PathBuf,
}

#[derive(Args)]
struct BenchSimArgs {
    /// Requests per measurement.
    #[arg(long, default_value_t = 100_000)]
    requests: usize,
    /// Requests in flight at once in the concurrent measurements.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Bytes of each JSON answer.
    #[arg(long, default_value_t = 1200)]
    body_bytes: usize,
    /// Where the figures go (ungated).
    #[arg(long, default_value = "reports/perf/sim.json")]
    out: PathBuf,
}

#[derive(Args)]
struct ProfileSplitArgs {
    /// The `perf script -F ip,sym` text; standard input if absent or `-`.
    input: Option<PathBuf>,
    /// The profiled run's wall seconds (its JSON line's `wall_seconds`): each share is
    /// printed as seconds too.
    #[arg(long)]
    wall_seconds: Option<f64>,
}

#[derive(Args)]
struct ApiserverArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: String,
    /// Log format (the level follows RUST_LOG, default info).
    #[arg(long, value_enum, default_value = "human")]
    log_format: serve::LogFormat,
}

/// A command that could not do its job: the message and the exit class.
#[derive(Debug)]
pub struct Fail(String, Exit);

impl Fail {
    /// A usage or harness error (exit 2).
    pub fn usage(message: impl Into<String>) -> Fail {
        Fail(message.into(), Exit::Usage)
    }
}

/// `A..B` (half-open) or `A..=B` (inclusive).
fn parse_seeds(text: &str) -> Result<std::ops::Range<u64>, String> {
    let bad = || format!("{text:?}: expected A..B (half-open) or A..=B (inclusive)");
    let number = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
    let range = match text.split_once("..=") {
        Some((a, b)) => number(a)?..number(b)?.checked_add(1).ok_or_else(bad)?,
        None => {
            let (a, b) = text.split_once("..").ok_or_else(bad)?;
            number(a)?..number(b)?
        }
    };
    if range.is_empty() {
        return Err(format!("{text:?} holds no seed"));
    }
    Ok(range)
}

fn load(path: &Path) -> Result<(Scenario, String), Fail> {
    let scenario = scenario::load(path).map_err(|e| Fail::usage(e.to_string()))?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| Fail::usage(format!("{}: {e}", path.display())))?;
    Ok((scenario, text))
}

fn parallelism(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

fn cmd_run(args: RunArgs) -> Result<Exit, Fail> {
    let (scenario, text) = load(&args.file)?;
    let path = args.file.display().to_string();
    let seed = args.seed.unwrap_or(scenario.seeds[0]);
    let variant = Variant::from(args.variant);
    let started = Instant::now(); // determinism: real-env (wall-clock perf figure only)
    let outcome = runner::run(&scenario, seed, variant);
    if std::env::var_os("ORRERY_TEST_NONDETERMINISM").is_some() {
        // Test hook (tests/sim/cli.rs): makes each process's trace differ, to prove that
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
fn print_scenario(
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

fn cmd_sweep(args: SweepArgs) -> Result<Exit, Fail> {
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
        sweep_report::SweepReport::of(&scenario, &path, &seeds, &runs).write(dir)?;
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

fn cmd_merge(args: MergeArgs) -> Result<Exit, Fail> {
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
    let report =
        sweep_report::SweepReport::of(&scenario, &merged.header.scenario_file, &seeds, &runs);
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

fn cmd_shrink(args: ShrinkArgs) -> Result<Exit, Fail> {
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
    let shrunk = orrery_sim::shrink::shrink_with(
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
        "replay: cargo run -q -p orrery-sim --bin orrery -- run {} --variant {}",
        out.display(),
        variant.as_str()
    );
    Ok(Exit::Expected)
}

fn cmd_check_determinism(args: DeterminismArgs) -> Result<Exit, Fail> {
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

/// A swarm family's runs of one variant: (scenario, variant, (seed, result) per run).
type FamilyRuns<'a> = (&'a Scenario, Variant, Vec<(u64, &'a jobs::JobResult)>);

fn cmd_reports(args: ReportsArgs) -> Result<Exit, Fail> {
    let parallel = parallelism(args.jobs);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.scenarios)
        .map_err(|e| Fail::usage(format!("{}: {e}", args.scenarios.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    // The regression scenarios (shrunk failures, known limits) are reported and gated too.
    if let Ok(entries) = std::fs::read_dir(args.scenarios.join("regressions")) {
        files.extend(
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml")),
        );
    }
    files.sort();
    let mut jobs = Vec::new();
    for file in files {
        let (scenario, _) = load(&file)?;
        for variant in scenario.expect.keys().copied() {
            let out = Some(args.out.join(&scenario.name));
            jobs.push(Job {
                path: file.display().to_string(),
                seed: scenario.seeds[0],
                scenario: scenario.clone(),
                variant,
                out,
            });
            // Every other listed seed runs too: its declared verdict must hold there. A swarm
            // family's give its seeds.{json,md} (results, failure rate by invariant, reach
            // conditions and fault points); a scripted scenario's are listed in the index.
            for seed in scenario.seeds.iter().skip(1) {
                jobs.push(Job {
                    path: file.display().to_string(),
                    seed: *seed,
                    scenario: scenario.clone(),
                    variant,
                    out: None,
                });
            }
        }
    }
    // The scenarios' reported runs first, the other listed seeds after: the long runs then
    // never end alone on one core while the other idles. (Stable: each scenario's seeds keep
    // their order, and everything below reads the same sequence.)
    jobs.sort_by_key(|job| job.out.is_none());
    let results = jobs::run(&jobs, parallel, |job, result| {
        if job.out.is_none() {
            if result.exit != Exit::Expected {
                eprintln!(
                    "{} / {} seed {}: {}, not as declared",
                    job.scenario.name,
                    job.variant.as_str(),
                    job.seed,
                    result.line["result"].as_str().unwrap_or("?")
                );
            }
            return; // another listed seed
        }
        eprintln!(
            "{} / {}: {} in {:.1} s wall",
            job.scenario.name,
            job.variant.as_str(),
            result.line["result"].as_str().unwrap_or("?"),
            result.line["wall_seconds"].as_f64().unwrap_or(0.0)
        );
    })?;
    let mut index = String::from("# orrery reports\n\nGenerated by `make reports`; never edit by hand. One row per scenario and variant, at the scenario's first seed; each scenario's page shows its variants side by side, with charts.\n\n| scenario | variant | seed | result | expected | trace hash |\n|---|---|---|---|---|---|\n");
    let mut perf = Vec::new();
    let mut worst = Exit::Expected;
    let mut families: Vec<FamilyRuns> = Vec::new();
    let mut other_seeds = String::new();
    for (job, result) in jobs.iter().zip(&results) {
        if job.scenario.swarm.is_some() {
            match families
                .iter_mut()
                .find(|(s, v, _)| s.name == job.scenario.name && *v == job.variant)
            {
                Some((_, _, runs)) => runs.push((job.seed, result)),
                None => families.push((&job.scenario, job.variant, vec![(job.seed, result)])),
            }
        }
        worst = worst.max(result.exit);
        if job.out.is_none() {
            if job.scenario.swarm.is_none() {
                other_seeds.push_str(&index_row(job, result));
            }
            continue;
        }
        index.push_str(&index_row(job, result));
        let name = &job.scenario.name;
        let line = &result.line;
        let (sim, wall) = (
            line["sim_seconds"].as_f64().unwrap_or(0.0),
            line["wall_seconds"].as_f64().unwrap_or(0.0),
        );
        let events = line["events"].as_f64().unwrap_or(0.0);
        perf.push(serde_json::json!({
            "scenario": name, "variant": job.variant.as_str(), "seed": job.scenario.seeds[0],
            "sim_seconds": sim, "wall_seconds": wall,
            "sim_seconds_per_wall_second": if wall > 0.0 { sim / wall } else { 0.0 },
            "seeds_per_cpu_minute": if wall > 0.0 { 60.0 / wall } else { 0.0 },
            "events_per_wall_second": if wall > 0.0 { events / wall } else { 0.0 },
            "parallel_runs": parallel,
        }));
    }
    let write = |path: PathBuf, text: String| {
        std::fs::write(&path, text)
            .map_err(|e| Fail::usage(format!("{}: cannot write: {e}", path.display())))
    };
    // The swarm families, once each, in scenario order.
    let mut swept: Vec<&Scenario> = Vec::new();
    for (scenario, _, _) in &families {
        if !swept.iter().any(|s| s.name == scenario.name) {
            swept.push(scenario);
        }
    }
    if !other_seeds.is_empty() {
        index.push_str("\n## The other listed seeds\n\nEvery other seed of each scripted scenario's `seeds:` list, where its declared verdict must hold too (`make test` fails otherwise):\n\n| scenario | variant | seed | result | expected | trace hash |\n|---|---|---|---|---|---|\n");
        index.push_str(&other_seeds);
    }
    if !swept.is_empty() {
        index.push_str("\n## Sweeps\n\nEvery listed seed of each swarm family, both variants:\n\n");
        for name in swept.iter().map(|s| &s.name) {
            index.push_str(&format!("- [{name}](sweeps/{name}/sweep.md)\n"));
        }
    }
    if args.out.join("farm").join("README.md").exists() {
        index.push_str("\n## Seed farm\n\n[The last farm run](farm/README.md) (`make farm`): new seeds of every scenario file, failures shrunk into `scenarios/regressions/`.\n");
    }
    write(args.out.join("README.md"), index)?;
    // Each scenario's side-by-side page, from the variants' reports just written.
    let mut paged: Vec<&str> = Vec::new();
    for job in jobs.iter().filter(|j| j.out.is_some()) {
        if paged.contains(&job.scenario.name.as_str()) {
            continue;
        }
        paged.push(&job.scenario.name);
        let variants: Vec<&str> = job.scenario.expect.keys().map(|v| v.as_str()).collect();
        report::page::write(
            &args.out.join(&job.scenario.name),
            &variants,
            job.scenario.swarm.is_some(),
        )
        .map_err(|e| Fail::usage(e.to_string()))?;
    }
    // Each swarm family's sweep, as `orrery sweep --report` writes it, and from the same
    // summaries its seeds.{json,md} (before the HTML views are rendered from them).
    for scenario in &swept {
        let runs: Vec<(Variant, u64, &jobs::JobResult)> = families
            .iter()
            .filter(|(s, _, _)| s.name == scenario.name)
            .flat_map(|(_, v, runs)| runs.iter().map(move |(seed, r)| (*v, *seed, *r)))
            .collect();
        let path = jobs
            .iter()
            .find(|j| j.scenario.name == scenario.name)
            .map(|j| j.path.clone())
            .unwrap_or_default();
        let first = scenario.seeds.iter().min().copied().unwrap_or(1);
        let last = scenario.seeds.iter().max().copied().unwrap_or(first);
        let sweep = sweep_report::SweepReport::of(scenario, &path, &(first..last + 1), &runs);
        sweep.write(&args.out.join("sweeps").join(&scenario.name))?;
        let summaries: Vec<&summary::Summary> = sweep.variants.iter().map(|v| &v.summary).collect();
        for summary in &summaries {
            worst = worst.max(summary.worst);
        }
        let name = &scenario.name;
        let seeds = summaries.first().map_or(0, |s| s.runs);
        let mut md = format!(
            "# {name}: seeds 1–{seeds}\n\nGenerated by `make reports`; never edit by hand. Every listed seed of this swarm family, per variant: results, the failure rate by invariant, and how many seeds reached each reach condition and fired each fault point.\n\n"
        );
        for summary in &summaries {
            md.push_str(&summary.markdown());
        }
        let dir = args.out.join(name);
        write(dir.join("seeds.md"), md)?;
        let json = serde_json::to_string_pretty(&summaries).expect("summaries serialise");
        write(dir.join("seeds.json"), json + "\n")?;
    }
    // The browser view: an HTML file beside each page, and the index.
    let html = |md: PathBuf, page: &str, home: Option<&str>| {
        let target = md.with_file_name(page);
        report::html::write_view(&md, &target, home).map_err(|e| Fail::usage(e.to_string()))
    };
    for name in &paged {
        let dir = args.out.join(name);
        let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| Fail::usage(format!("{}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        pages.sort();
        for md in pages {
            let file = md.file_name().and_then(|f| f.to_str()).unwrap_or_default();
            let Some(view) = report::html::html_name(file) else {
                continue;
            };
            html(md.clone(), &view, Some("../index.html"))?;
        }
    }
    for scenario in &swept {
        html(
            args.out
                .join("sweeps")
                .join(&scenario.name)
                .join("sweep.md"),
            "sweep.html",
            Some("../../index.html"),
        )?;
    }
    html(args.out.join("README.md"), "index.html", None)?;
    let perf_dir = args.out.join("perf");
    std::fs::create_dir_all(&perf_dir)
        .map_err(|e| Fail::usage(format!("{}: {e}", perf_dir.display())))?;
    let perf_text = serde_json::to_string_pretty(&perf).expect("JSON values serialise");
    write(perf_dir.join("perf.json"), perf_text + "\n")?;
    Ok(worst)
}

/// One row of the reports' index: a run's seed, result, declared verdict and trace hash.
fn index_row(job: &Job, result: &jobs::JobResult) -> String {
    let mark = if result.exit == Exit::Expected {
        "yes"
    } else {
        "**NO**"
    };
    let name = &job.scenario.name;
    let v = job.variant.as_str();
    format!(
        "| [{name}]({name}/README.md) | [{v}]({name}/{v}.md) | {} | `{}` | `{}` ({mark}) | `{}` |\n",
        job.seed,
        result.line["result"].as_str().unwrap_or("?"),
        report::expected(&job.scenario, job.variant).as_str(),
        result.line["trace_hash"].as_str().unwrap_or("?")
    )
}

fn cmd_bench(args: BenchArgs) -> Result<Exit, Fail> {
    let record = orrery_sim::bench::run(
        args.events.max(1),
        args.apps.max(1),
        std::time::Duration::from_secs(args.window.max(1)),
    )
    .map_err(|e| Fail(format!("benchmark failed: {e}"), Exit::Mismatch))?;
    write_record(&args.out, &record)?;
    Ok(Exit::Expected)
}

fn cmd_record(args: RecordArgs) -> Result<Exit, Fail> {
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
        let trace = orrery_sim::record::record(client, args.duration, args.hash_names, None)
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

/// Writes a benchmark's record (pretty JSON) to `out`, creating its directory, and says so.
fn write_record(out: &std::path::Path, record: &serde_json::Value) -> Result<(), Fail> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Fail::usage(format!("{}: {e}", dir.display())))?;
    }
    let text = serde_json::to_string_pretty(record).expect("JSON values serialise") + "\n";
    std::fs::write(out, text).map_err(|e| Fail::usage(format!("{}: {e}", out.display())))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn cmd_bench_sim(args: BenchSimArgs) -> Result<Exit, Fail> {
    let load = orrery_sim::bench_sim::Load {
        requests: args.requests.max(1),
        concurrency: args.concurrency.max(1),
        body_bytes: args.body_bytes,
    };
    let record = orrery_sim::bench_sim::run(load)
        .map_err(|e| Fail(format!("simulator benchmark failed: {e}"), Exit::Mismatch))?;
    write_record(&args.out, &record)?;
    print!("{}", orrery_sim::bench_sim::table(&record));
    Ok(Exit::Expected)
}

fn cmd_profile_split(args: ProfileSplitArgs) -> Result<Exit, Fail> {
    use orrery_sim::profile_split;
    if let Some(wall) = args.wall_seconds.filter(|w| !(w.is_finite() && *w > 0.0)) {
        return Err(Fail::usage(format!(
            "--wall-seconds {wall}: expected a positive number of seconds"
        )));
    }
    let split = match args.input.as_deref().filter(|path| path.as_os_str() != "-") {
        None => profile_split::split(std::io::stdin().lock()),
        Some(path) => {
            let file = std::fs::File::open(path)
                .map_err(|e| Fail::usage(format!("{}: {e}", path.display())))?;
            profile_split::split(std::io::BufReader::new(file))
        }
    }
    .map_err(|e| Fail::usage(e.to_string()))?;
    print!("{}", profile_split::table(&split, args.wall_seconds));
    Ok(Exit::Expected)
}

fn cmd_bench_apiserver(args: BenchApiserverArgs) -> Result<Exit, Fail> {
    let load = orrery_sim::bench_apiserver::Load {
        objects: args.objects.max(1),
        concurrency: args.concurrency.max(1),
        lists: args.lists.max(1),
    };
    let record = orrery_sim::bench_apiserver::run(load)
        .map_err(|e| Fail(format!("apiserver benchmark failed: {e}"), Exit::Mismatch))?;
    write_record(&args.out, &record)?;
    print!("{}", orrery_sim::bench_apiserver::table(&record));
    Ok(Exit::Expected)
}

fn cmd_apiserver(args: ApiserverArgs) -> Result<Exit, Fail> {
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

/// Refuses to simulate in a binary built without `--cfg tokio_unstable`: without it turmoil
/// cannot seed tokio's RNG, so `select!` picks branches by a per-process random order and two
/// runs of one seed differ. A `RUSTFLAGS` in the environment replaces `.cargo/config.toml`'s
/// flags instead of adding to them, which is how such a binary gets built.
fn deterministic_build() -> Result<(), Fail> {
    if cfg!(tokio_unstable) {
        return Ok(());
    }
    Err(Fail::usage(
        "this binary was built without --cfg tokio_unstable, so its simulations are not \
         deterministic (tokio's select! order is random per process); a RUSTFLAGS variable \
         replaces .cargo/config.toml's flags: rebuild with RUSTFLAGS=\"--cfg tokio_unstable ...\"",
    ))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let simulates = matches!(
        cli.command,
        Command::Run(_)
            | Command::Sweep(_)
            | Command::Shrink(_)
            | Command::CheckDeterminism(_)
            | Command::Reports(_)
            | Command::Farm(_)
    );
    if let (true, Err(Fail(message, exit))) = (simulates, deterministic_build()) {
        eprintln!("orrery: {message}");
        return exit.into();
    }
    let result = match cli.command {
        Command::Run(args) => cmd_run(args),
        Command::Sweep(args) => cmd_sweep(args),
        Command::Merge(args) => cmd_merge(args),
        Command::Shrink(args) => cmd_shrink(args),
        Command::Farm(args) => farm_cmd::cmd_farm(args),
        Command::FarmMerge(args) => farm_cmd::cmd_farm_merge(args),
        Command::BuggifyPoints => {
            for point in orrery_system::env::Point::ALL {
                println!("{}\t{}", point.name(), point.what());
            }
            Ok(Exit::Expected)
        }
        Command::CheckDeterminism(args) => cmd_check_determinism(args),
        Command::Reports(args) => cmd_reports(args),
        Command::Bench(args) => cmd_bench(args),
        Command::Apiserver(args) => cmd_apiserver(args),
        Command::BenchApiserver(args) => cmd_bench_apiserver(args),
        Command::BenchSim(args) => cmd_bench_sim(args),
        Command::ProfileSplit(args) => cmd_profile_split(args),
        Command::Record(args) => cmd_record(args),
        Command::Serve(what) => serve::run(what),
    };
    match result {
        Ok(exit) => exit.into(),
        Err(Fail(message, exit)) => {
            eprintln!("orrery: {message}");
            exit.into()
        }
    }
}
