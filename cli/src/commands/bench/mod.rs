//! The ungated performance commands: `orrery bench` (the reporter's hot path in real mode),
//! `bench-apiserver`, `bench-sim` and `profile-split`. Wall-clock figures go to
//! `reports/perf/`, never into gated reports.

pub mod apiserver;
pub mod profile_split;
pub mod reporter;
pub mod sim;

use std::path::PathBuf;

use clap::Args;

use orrery_sim::exit::Exit;

use crate::common::{write_record, Fail};

/// `orrery bench`'s flags.
#[derive(Args)]
pub struct BenchArgs {
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

pub(crate) fn cmd_bench(args: BenchArgs) -> Result<Exit, Fail> {
    let record = crate::commands::bench::reporter::run(
        args.events.max(1),
        args.apps.max(1),
        std::time::Duration::from_secs(args.window.max(1)),
    )
    .map_err(|e| Fail(format!("benchmark failed: {e}"), Exit::Mismatch))?;
    write_record(&args.out, &record)?;
    Ok(Exit::Expected)
}

/// `orrery bench-apiserver`'s flags.
#[derive(Args)]
pub struct BenchApiserverArgs {
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

pub(crate) fn cmd_bench_apiserver(args: BenchApiserverArgs) -> Result<Exit, Fail> {
    let load = crate::commands::bench::apiserver::Load {
        objects: args.objects.max(1),
        concurrency: args.concurrency.max(1),
        lists: args.lists.max(1),
    };
    let record = crate::commands::bench::apiserver::run(load)
        .map_err(|e| Fail(format!("apiserver benchmark failed: {e}"), Exit::Mismatch))?;
    write_record(&args.out, &record)?;
    print!("{}", crate::commands::bench::apiserver::table(&record));
    Ok(Exit::Expected)
}

/// `orrery bench-sim`'s flags.
#[derive(Args)]
pub struct BenchSimArgs {
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

pub(crate) fn cmd_bench_sim(args: BenchSimArgs) -> Result<Exit, Fail> {
    let load = crate::commands::bench::sim::Load {
        requests: args.requests.max(1),
        concurrency: args.concurrency.max(1),
        body_bytes: args.body_bytes,
    };
    let record = crate::commands::bench::sim::run(load)
        .map_err(|e| Fail(format!("simulator benchmark failed: {e}"), Exit::Mismatch))?;
    write_record(&args.out, &record)?;
    print!("{}", crate::commands::bench::sim::table(&record));
    Ok(Exit::Expected)
}

/// `orrery profile-split`'s flags.
#[derive(Args)]
pub struct ProfileSplitArgs {
    /// The `perf script -F ip,sym` text; standard input if absent or `-`.
    input: Option<PathBuf>,
    /// The profiled run's wall seconds (its JSON line's `wall_seconds`): each share is
    /// printed as seconds too.
    #[arg(long)]
    wall_seconds: Option<f64>,
}

pub(crate) fn cmd_profile_split(args: ProfileSplitArgs) -> Result<Exit, Fail> {
    use crate::commands::bench::profile_split;
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
