//! `orrery`: run scenarios, sweep seeds, check determinism, regenerate reports, explore with
//! the seed farm, and serve the simulated API server, the control plane and a runtime on real
//! sockets. One module per command in [`commands`]; what they share in [`common`], [`jobs`]
//! (child-process runs), [`shard`] and [`summary`].

pub mod commands;
pub mod common;
pub mod jobs;
pub mod shard;
pub mod summary;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use orrery_sim::exit::Exit;

use commands::{apiserver, bench, determinism, farm, record, reports, run, serve, shrink, sweep};
use common::{deterministic_build, Fail};

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
pub struct Cli {
    #[command(subcommand)]
    /// The command to run.
    pub command: Command,
}

/// The commands.
// Parsed once per process; boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Run one seed of a scenario; print one JSON line; exit 0 iff the result is the expected one.
    Run(run::RunArgs),
    /// Run a range of seeds (as parallel child processes); summarise unexpected results.
    Sweep(sweep::SweepArgs),
    /// Combine the results files of a sharded sweep (`sweep --shard I/N --results FILE`)
    /// into one sweep report.
    Merge(sweep::MergeArgs),
    /// Run one seed twice in separate processes and compare the trace hashes.
    CheckDeterminism(determinism::DeterminismArgs),
    /// Regenerate the gated reports for every scenario and declared variant at its first seed.
    Reports(reports::ReportsArgs),
    /// Benchmark the reporter's hot path and the tunnel in real mode (ungated perf figures).
    Bench(bench::BenchArgs),
    /// Serve the simulated Kubernetes API server on a real TCP socket (plain HTTP).
    Apiserver(apiserver::ApiserverArgs),
    /// Record a real cluster's Application, Rollout and Workflow changes as a workload trace that a scenario
    /// replays (`workload: {replay: FILE, speed: N}`).
    Record(record::RecordArgs),
    /// Measure `orrery apiserver` and the real kube-apiserver KUBECONFIG names side by side
    /// (start-up; create, list and watch throughput); figures to reports/perf/.
    BenchApiserver(bench::BenchApiserverArgs),
    /// Measure the simulator's own plumbing: one HTTP request between two simulated hosts
    /// (real hyper over turmoil, as components use it) and one idle step; figures to
    /// reports/perf/.
    BenchSim(bench::BenchSimArgs),
    /// Split a profiled seed's samples (`perf script -F ip,sym` text, as `make profile`
    /// records) into the wire between hosts and the components' own logic.
    ProfileSplit(bench::ProfileSplitArgs),
    /// List the fault points compiled into the system code (name, tab, what firing does).
    BuggifyPoints,
    /// List the limits `serve --limit NAME=VALUE` sets (name, default, what it bounds, what
    /// a client past it gets), tab-separated.
    Limits,
    /// Shrink a failing run to a minimal scenario that still breaks the same invariant;
    /// writes <file stem>.min.yaml next to FILE.
    Shrink(shrink::ShrinkArgs),
    /// Explore for a budget: new seeds of every scenario file (both variants), chosen by
    /// rarity, recent failures and cost; every run in a results database; every unexpected
    /// failure shrunk into scenarios/regressions/; rare runs mutated; report in reports/farm/.
    Farm(farm::FarmArgs),
    /// Merge the results databases of a sharded farm run (`farm --shard I/N --db FILE`) into
    /// one database and one farm report.
    FarmMerge(farm::FarmMergeArgs),
    /// Run the control plane or a runtime for real.
    #[command(subcommand)]
    Serve(serve::Serve),
}

/// Parses the command line and runs the command; the process's exit code.
pub fn main() -> ExitCode {
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
        Command::Run(args) => run::cmd_run(args),
        Command::Sweep(args) => sweep::cmd_sweep(args),
        Command::Merge(args) => sweep::cmd_merge(args),
        Command::Shrink(args) => shrink::cmd_shrink(args),
        Command::Farm(args) => farm::cmd_farm(args),
        Command::FarmMerge(args) => farm::cmd_farm_merge(args),
        Command::BuggifyPoints => {
            for point in orrery_system::env::Point::ALL {
                println!("{}\t{}", point.name(), point.what());
            }
            Ok(Exit::Expected)
        }
        Command::Limits => {
            for spec in orrery_system::env::limits::SPECS {
                println!(
                    "{}\t{}\t{}\t{}",
                    spec.name,
                    spec.default_value(),
                    spec.about,
                    spec.past
                );
            }
            Ok(Exit::Expected)
        }
        Command::CheckDeterminism(args) => determinism::cmd_check_determinism(args),
        Command::Reports(args) => reports::cmd_reports(args),
        Command::Bench(args) => bench::cmd_bench(args),
        Command::Apiserver(args) => apiserver::cmd_apiserver(args),
        Command::BenchApiserver(args) => bench::cmd_bench_apiserver(args),
        Command::BenchSim(args) => bench::cmd_bench_sim(args),
        Command::ProfileSplit(args) => bench::cmd_profile_split(args),
        Command::Record(args) => record::cmd_record(args),
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
