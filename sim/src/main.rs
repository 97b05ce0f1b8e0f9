//! `orrery`: run scenarios, sweep seeds, check determinism, regenerate reports, and serve
//! the simulated API server on a real socket.

mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use orrery_sim::harness::runner;

/// Simulations allocate and free JSON bodies at a high rate; mimalloc roughly halves the
/// time glibc's allocator spends on them (measured with perf on queue-overflow).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use orrery_sim::report;
use orrery_sim::scenario::{self, Scenario, Variant};

const USAGE: &str = "orrery — deterministic simulation of a GitOps runtime

USAGE:
  orrery run FILE [--seed N] [--variant faithful|hardened] [--out DIR]
      Run one seed (default: the scenario's first seed; variant default: hardened).
      Prints one JSON line; exits 0 iff the result is the one the scenario expects.
  orrery sweep FILE --seeds A..B [--variant NAME] [--jobs N]
      Run seeds A..B (half-open; A..=B inclusive) for one or every declared variant;
      summarise failures by invariant with the first failing seed's repro command.
  orrery check-determinism FILE [--seed N] [--variant NAME]
      Run the seed twice in separate processes and compare trace hashes.
  orrery reports [--scenarios DIR] [--out DIR] [--jobs N]
      Regenerate the gated reports (OUT/<scenario>/<variant>.{json,md}, OUT/README.md)
      for every scenario and declared variant at its first seed, N runs at a time (default:
      the number of cores); perf goes to OUT/perf/.
  orrery bench [--events N] [--out FILE]
      Benchmark the reporter's hot path and end-to-end delivery in real mode (both
      variants); writes FILE (default reports/perf/bench.json, ungated).
  orrery apiserver --listen ADDR
      Serve the simulated Kubernetes API server on a real TCP socket (plain HTTP).
  orrery serve control-plane --admin-token T [--tunnel ADDR] [--api ADDR] [--variant V]
                             [--runtimes ACCOUNT-RUNTIME=TOKEN,...] [--users TOKEN=USER:OP+OP,...]
                             [--tls-cert PEM --tls-key PEM]
      The platform for real: tunnel server (default 127.0.0.1:8443) and client API
      (default 127.0.0.1:8081: POST /api/runtimes registers, /api/runtimes/NAME/... forwards).
  orrery serve runtime --platform ADDR --name ACCOUNT-RUNTIME --token T [--variant V]
                       [--app-proxy ADDR] [--workflows ADDR] [--ingress ADDR]
                       [--git ADDR --platform-api ADDR [--apiserver ADDR]] [--tls-ca PEM]
      A runtime for real: tunnel client, request routing service, and with --git the
      app-proxy (permissions from --platform-api; workflows patched through --apiserver,
      a plain-HTTP simulated API server, or the KUBECONFIG cluster).";

/// Command-line failure: message and exit code.
struct Fail(String, u8);

fn fail<T>(message: impl Into<String>) -> Result<T, Fail> {
    Err(Fail(message.into(), 2))
}

/// Parsed `--flag value` options after the positional arguments.
struct Args {
    positional: Vec<String>,
    flags: std::collections::BTreeMap<String, String>,
}

fn parse_args(raw: &[String], allowed: &[&str]) -> Result<Args, Fail> {
    let mut args = Args {
        positional: Vec::new(),
        flags: Default::default(),
    };
    let mut iter = raw.iter();
    while let Some(arg) = iter.next() {
        if let Some(flag) = arg.strip_prefix("--") {
            if !allowed.contains(&flag) {
                return fail(format!(
                    "unknown option --{flag} (allowed: {})",
                    allowed
                        .iter()
                        .map(|a| format!("--{a}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            let Some(value) = iter.next() else {
                return fail(format!("--{flag} needs a value"));
            };
            args.flags.insert(flag.to_string(), value.clone());
        } else {
            args.positional.push(arg.clone());
        }
    }
    Ok(args)
}

fn load(path: &str) -> Result<(Scenario, String), Fail> {
    let scenario = scenario::load(Path::new(path)).map_err(|e| Fail(e.to_string(), 2))?;
    let text = std::fs::read_to_string(path).map_err(|e| Fail(format!("{path}: {e}"), 2))?;
    Ok((scenario, text))
}

fn one_file(args: &Args, command: &str) -> Result<String, Fail> {
    match args.positional.as_slice() {
        [file] => Ok(file.clone()),
        _ => fail(format!(
            "orrery {command} takes exactly one scenario FILE\n\n{USAGE}"
        )),
    }
}

fn seed_arg(args: &Args, scenario: &Scenario) -> Result<u64, Fail> {
    match args.flags.get("seed") {
        Some(s) => s
            .parse()
            .map_err(|_| Fail(format!("--seed {s:?} is not a number"), 2)),
        None => Ok(scenario.seeds[0]),
    }
}

fn variants_arg(args: &Args, scenario: &Scenario, default_all: bool) -> Result<Vec<Variant>, Fail> {
    match args.flags.get("variant") {
        Some(v) => Ok(vec![Variant::parse(v).map_err(|e| Fail(e, 2))?]),
        None if default_all => Ok(scenario.expect.keys().copied().collect()),
        None => Ok(vec![Variant::Hardened]),
    }
}

fn cmd_run(raw: &[String]) -> Result<ExitCode, Fail> {
    let args = parse_args(raw, &["seed", "variant", "out"])?;
    let path = one_file(&args, "run")?;
    let (scenario, text) = load(&path)?;
    let seed = seed_arg(&args, &scenario)?;
    let variant = variants_arg(&args, &scenario, false)?[0];
    let started = Instant::now(); // determinism: real-env (wall-clock perf figure only)
    let outcome = runner::run(&scenario, seed, variant);
    let wall = started.elapsed().as_secs_f64();
    if let Some(out) = args.flags.get("out") {
        let built = report::build(&scenario, &text, &path, seed, variant, &outcome);
        report::write(Path::new(out), &built)
            .map_err(|e| Fail(format!("{out}: cannot write report: {e}"), 2))?;
    }
    println!(
        "{}",
        report::summary_line(&scenario, seed, variant, &outcome, wall)
    );
    Ok(if outcome.result == report::expected(&scenario, variant) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn parse_seeds(text: &str) -> Result<std::ops::Range<u64>, Fail> {
    let bad = || {
        Fail(
            format!("--seeds {text:?}: expected A..B (half-open) or A..=B (inclusive)"),
            2,
        )
    };
    if let Some((a, b)) = text.split_once("..=") {
        let (a, b): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        return Ok(a..b + 1);
    }
    let (a, b) = text.split_once("..").ok_or_else(bad)?;
    Ok(a.parse().map_err(|_| bad())?..b.parse().map_err(|_| bad())?)
}

fn jobs_arg(args: &Args) -> Result<usize, Fail> {
    match args.flags.get("jobs") {
        Some(j) => j
            .parse::<usize>()
            .map(|j| j.max(1))
            .map_err(|_| Fail(format!("--jobs {j:?} is not a number"), 2)),
        None => Ok(std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)),
    }
}

fn cmd_sweep(raw: &[String]) -> Result<ExitCode, Fail> {
    let args = parse_args(raw, &["seeds", "variant", "jobs"])?;
    let path = one_file(&args, "sweep")?;
    let (scenario, _) = load(&path)?;
    let seeds = parse_seeds(
        args.flags
            .get("seeds")
            .map(String::as_str)
            .unwrap_or("1..11"),
    )?;
    let variants = variants_arg(&args, &scenario, true)?;
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
    let total = jobs.len();
    let (mut finished, mut unexpected) = (0, 0);
    let results = run_jobs(&jobs, jobs_arg(&args)?, |_, value| {
        // Each run's result line goes out as soon as it is known, so an interrupted long
        // sweep keeps what it found (the progress bar is redrawn under it).
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprint!("\r\x1b[K");
        }
        println!("{value}");
        finished += 1;
        unexpected += usize::from(!value["expected"].as_bool().unwrap_or(false));
        let width = 30;
        let filled = finished * width / total.max(1);
        eprint!(
            "\r[{}{}] {finished}/{total} runs, {unexpected} unexpected",
            "=".repeat(filled),
            " ".repeat(width - filled)
        );
    })?;
    eprintln!();
    for variant in variants {
        let expected = report::expected(&scenario, variant);
        let mut by_result: std::collections::BTreeMap<String, u64> = Default::default();
        let mut by_invariant: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        let mut first_failure: Option<(u64, String)> = None;
        for (job, value) in jobs
            .iter()
            .zip(&results)
            .filter(|(j, _)| j.variant == variant)
        {
            let result = value["result"].as_str().unwrap_or("?").to_string();
            *by_result.entry(result.clone()).or_default() += 1;
            if !value["expected"].as_bool().unwrap_or(false) {
                first_failure.get_or_insert((job.seed, result));
                for invariant in value["violations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str())
                {
                    by_invariant
                        .entry(invariant.to_string())
                        .or_insert((0, job.seed))
                        .0 += 1;
                }
            }
        }
        println!(
            "{} / {}: expected {} — results {:?}",
            scenario.name,
            variant.as_str(),
            expected.as_str(),
            by_result
        );
        for (invariant, (count, seed)) in &by_invariant {
            println!("  unexpected violations of {invariant}: {count} seeds (first: seed {seed})");
        }
        if let Some((seed, result)) = first_failure {
            println!(
                "  first unexpected: seed {seed} ({result}); reproduce with:\n    {}",
                report::repro(&path, seed, variant)
            );
        }
    }
    Ok(if unexpected == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn cmd_check_determinism(raw: &[String]) -> Result<ExitCode, Fail> {
    let args = parse_args(raw, &["seed", "variant"])?;
    let path = one_file(&args, "check-determinism")?;
    let (scenario, _) = load(&path)?;
    let seed = seed_arg(&args, &scenario)?;
    let variant = variants_arg(&args, &scenario, false)?[0];
    let exe =
        std::env::current_exe().map_err(|e| Fail(format!("cannot find own executable: {e}"), 2))?;
    let mut hashes = Vec::new();
    for _ in 0..2 {
        let output = std::process::Command::new(&exe)
            .args([
                "run",
                &path,
                "--seed",
                &seed.to_string(),
                "--variant",
                variant.as_str(),
            ])
            .output()
            .map_err(|e| Fail(format!("cannot start a run: {e}"), 2))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout.lines().last().unwrap_or("");
        let value: serde_json::Value = serde_json::from_str(line).map_err(|_| {
            Fail(
                format!(
                    "a run printed no result line: {stdout}{}",
                    String::from_utf8_lossy(&output.stderr)
                ),
                2,
            )
        })?;
        hashes.push(value["trace_hash"].as_str().unwrap_or("").to_string());
    }
    let same = hashes[0] == hashes[1] && !hashes[0].is_empty();
    println!(
        "{}",
        serde_json::json!({"scenario": scenario.name, "variant": variant.as_str(), "seed": seed, "result": if same { "pass" } else { "nondeterminism" }, "trace_hashes": hashes})
    );
    Ok(if same {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One run to make in a child process: a scenario file, a seed, a variant, and where its
/// report goes (none for sweeps).
struct Job {
    path: String,
    scenario: Scenario,
    variant: Variant,
    seed: u64,
    out: Option<PathBuf>,
}

/// Runs `jobs` as `orrery run` child processes, `parallel` at a time (each simulation is
/// single-threaded; separate processes use the machine's cores without threads in the
/// simulator). Calls `done` as each finishes; returns the summary lines in job order.
fn run_jobs(
    jobs: &[Job],
    parallel: usize,
    mut done: impl FnMut(&Job, &serde_json::Value),
) -> Result<Vec<serde_json::Value>, Fail> {
    let exe =
        std::env::current_exe().map_err(|e| Fail(format!("cannot find own executable: {e}"), 2))?;
    let mut results: Vec<Option<serde_json::Value>> = vec![None; jobs.len()];
    let mut running: Vec<(usize, std::process::Child)> = Vec::new();
    let mut next = 0;
    while next < jobs.len() || !running.is_empty() {
        while next < jobs.len() && running.len() < parallel {
            let job = &jobs[next];
            let mut command = std::process::Command::new(&exe);
            command.args([
                "run",
                &job.path,
                "--seed",
                &job.seed.to_string(),
                "--variant",
                job.variant.as_str(),
            ]);
            if let Some(dir) = &job.out {
                command.arg("--out").arg(dir);
            }
            let child = command
                .stdout(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| Fail(format!("cannot start a run: {e}"), 2))?;
            running.push((next, child));
            next += 1;
        }
        let mut finished = None;
        for (slot, (_, child)) in running.iter_mut().enumerate() {
            if child
                .try_wait()
                .map_err(|e| Fail(format!("waiting for a run: {e}"), 2))?
                .is_some()
            {
                finished = Some(slot);
                break;
            }
        }
        match finished {
            Some(slot) => {
                let (index, child) = running.remove(slot);
                let output = child
                    .wait_with_output()
                    .map_err(|e| Fail(format!("reading a run: {e}"), 2))?;
                let stdout = String::from_utf8_lossy(&output.stdout);
                let line = stdout.lines().last().unwrap_or("");
                let value: serde_json::Value = serde_json::from_str(line).map_err(|_| {
                    Fail(
                        format!(
                            "{} / {}: the run printed no result line",
                            jobs[index].scenario.name,
                            jobs[index].variant.as_str()
                        ),
                        2,
                    )
                })?;
                done(&jobs[index], &value);
                results[index] = Some(value);
            }
            None => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every job finished"))
        .collect())
}

fn cmd_reports(raw: &[String]) -> Result<ExitCode, Fail> {
    let args = parse_args(raw, &["scenarios", "out", "jobs"])?;
    let dir = PathBuf::from(
        args.flags
            .get("scenarios")
            .map(String::as_str)
            .unwrap_or("scenarios"),
    );
    let out = PathBuf::from(
        args.flags
            .get("out")
            .map(String::as_str)
            .unwrap_or("reports"),
    );
    let parallel = jobs_arg(&args)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| Fail(format!("{}: {e}", dir.display()), 2))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut jobs = Vec::new();
    for file in files {
        let path = file.display().to_string();
        let (scenario, _) = load(&path)?;
        for variant in scenario.expect.keys().copied() {
            let out = Some(out.join(&scenario.name));
            jobs.push(Job {
                path: path.clone(),
                seed: scenario.seeds[0],
                scenario: scenario.clone(),
                variant,
                out,
            });
        }
    }
    let results = run_jobs(&jobs, parallel.max(1), |job, value| {
        eprintln!(
            "{} / {}: {} in {:.1} s wall",
            job.scenario.name,
            job.variant.as_str(),
            value["result"].as_str().unwrap_or("?"),
            value["wall_seconds"].as_f64().unwrap_or(0.0)
        );
    })?;
    let mut index = String::from("# orrery reports\n\nGenerated by `make reports`; never edit by hand. One row per scenario and variant, at the scenario's first seed.\n\n| scenario | variant | seed | result | expected | trace hash |\n|---|---|---|---|---|---|\n");
    let mut perf = Vec::new();
    let mut surprises = 0;
    for (job, result) in jobs.iter().zip(&results) {
        let expected = report::expected(&job.scenario, job.variant);
        let as_expected = result["expected"].as_bool().unwrap_or(false);
        let mark = if as_expected {
            "yes"
        } else {
            surprises += 1;
            "**NO**"
        };
        let name = &job.scenario.name;
        index.push_str(&format!(
            "| [{name}]({name}/{}.md) | {} | {} | `{}` | `{}` ({mark}) | `{}` |\n",
            job.variant.as_str(),
            job.variant.as_str(),
            job.scenario.seeds[0],
            result["result"].as_str().unwrap_or("?"),
            expected.as_str(),
            result["trace_hash"].as_str().unwrap_or("?")
        ));
        let (sim, wall) = (
            result["sim_seconds"].as_f64().unwrap_or(0.0),
            result["wall_seconds"].as_f64().unwrap_or(0.0),
        );
        let events = result["events"].as_f64().unwrap_or(0.0);
        perf.push(serde_json::json!({
            "scenario": name, "variant": job.variant.as_str(), "seed": job.scenario.seeds[0],
            "sim_seconds": sim, "wall_seconds": wall,
            "sim_seconds_per_wall_second": if wall > 0.0 { sim / wall } else { 0.0 },
            "events_per_wall_second": if wall > 0.0 { events / wall } else { 0.0 },
            "parallel_runs": parallel,
        }));
    }
    std::fs::write(out.join("README.md"), index)
        .map_err(|e| Fail(format!("cannot write index: {e}"), 2))?;
    let perf_dir = out.join("perf");
    std::fs::create_dir_all(&perf_dir)
        .map_err(|e| Fail(format!("{}: {e}", perf_dir.display()), 2))?;
    let perf_text = serde_json::to_string_pretty(&perf).expect("JSON values serialise");
    std::fs::write(perf_dir.join("perf.json"), perf_text + "\n")
        .map_err(|e| Fail(format!("cannot write perf: {e}"), 2))?;
    Ok(if surprises == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn cmd_bench(raw: &[String]) -> Result<ExitCode, Fail> {
    let args = parse_args(raw, &["events", "out"])?;
    let events: usize = args
        .flags
        .get("events")
        .map(|e| {
            e.parse()
                .map_err(|_| Fail(format!("--events {e:?} is not a number"), 2))
        })
        .transpose()?
        .unwrap_or(20_000);
    let out = PathBuf::from(
        args.flags
            .get("out")
            .map(String::as_str)
            .unwrap_or("reports/perf/bench.json"),
    );
    let record = orrery_sim::bench::run(events.max(1))
        .map_err(|e| Fail(format!("benchmark failed: {e}"), 1))?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Fail(format!("{}: {e}", dir.display()), 2))?;
    }
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&record).expect("JSON values serialise") + "\n",
    )
    .map_err(|e| Fail(format!("{}: {e}", out.display()), 2))?;
    eprintln!("wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}

fn cmd_apiserver(raw: &[String]) -> Result<ExitCode, Fail> {
    let args = parse_args(raw, &["listen"])?;
    let listen = args
        .flags
        .get("listen")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:6443".into());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail(format!("cannot start tokio: {e}"), 2))?;
    runtime.block_on(async {
        let env: orrery_system::env::SharedEnv =
            std::sync::Arc::new(orrery_system::env::RealEnv::new("apiserver"));
        let server = orrery_sim::world::apiserver::ApiServer::new(Default::default());
        eprintln!("orrery apiserver listening on http://{listen}");
        orrery_sim::world::apiserver::run(env, server, &listen)
            .await
            .map_err(|e| Fail(format!("{listen}: {e}"), 1))
    })?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = raw.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match command.as_str() {
        "run" => cmd_run(rest),
        "sweep" => cmd_sweep(rest),
        "check-determinism" => cmd_check_determinism(rest),
        "reports" => cmd_reports(rest),
        "apiserver" => cmd_apiserver(rest),
        "bench" => cmd_bench(rest),
        "serve" => match rest.split_first() {
            Some((what, rest)) if what == "control-plane" => serve::control_plane(rest),
            Some((what, rest)) if what == "runtime" => serve::runtime_cmd(rest),
            _ => fail(format!("serve needs control-plane or runtime\n\n{USAGE}")),
        },
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => fail(format!("unknown command {other:?}\n\n{USAGE}")),
    };
    match result {
        Ok(code) => code,
        Err(Fail(message, code)) => {
            eprintln!("orrery: {message}");
            ExitCode::from(code)
        }
    }
}
