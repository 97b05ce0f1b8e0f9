//! `orrery farm`: runs seeds of every scenario file for a budget, as parallel child
//! processes; records every run in the results database; shrinks every unexpected failure into
//! `scenarios/regressions/`; mutates runs that reached rare conditions; writes the farm
//! report. The choices are the library's (`orrery_sim::explore::farm`); this module runs processes.

use std::collections::VecDeque;
use std::io::{IsTerminal, Read as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use orrery_sim::exit::Exit;
use orrery_sim::explore::farm::db::{self, Db, Origin, Record};
use orrery_sim::explore::farm::mutate;
use orrery_sim::explore::farm::policy::{Arm, Plan, Policy, Shard};
use orrery_sim::explore::farm::report;
use orrery_sim::scenario::{self, Outcome, Scenario, Variant};

use crate::{common::Fail, shard};

/// Children of one parent run that reached a rare condition.
const MUTANTS_PER_PARENT: u32 = 4;
/// Parents per (arm, rare feature) in one farm run: a feature found once is mutated a few
/// times, not forever.
const PARENTS_PER_FEATURE: usize = 3;
/// How long a shrink running when the budget ends may go on before it is stopped (its
/// failure stays recorded, with the command that shrinks it by hand).
const SHRINK_GRACE: Duration = Duration::from_secs(15 * 60);
/// Shrinks of one (scenario, variant, invariant) per farm run: the fourth failure of the same
/// kind is recorded, not shrunk (each shrink is up to 400 runs).
const SHRINKS_PER_FAILURE: usize = 3;

/// Which policy chooses the next run.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum PolicyArg {
    /// Floors first, then weight per CPU second: rare reach conditions, recent failures, cost.
    Adaptive,
    /// Every arm in turn (with --seeds-per-arm: a fixed plan, as tests and shards use).
    Uniform,
}

/// `orrery farm`'s flags.
#[derive(Args)]
pub struct FarmArgs {
    /// Scenario files or directories of them (default: scenarios/, its *.yaml).
    paths: Vec<PathBuf>,
    /// Wall-clock budget, e.g. 90m: no run starts after it (running ones finish).
    #[arg(long, value_parser = scenario::duration::parse)]
    budget: Option<Duration>,
    /// CPU budget, e.g. 3h: the runs' CPU time summed.
    #[arg(long, value_parser = scenario::duration::parse)]
    cpu_budget: Option<Duration>,
    /// Stop after this many runs (seeds and mutants).
    #[arg(long)]
    max_runs: Option<u64>,
    /// How the next run is chosen.
    #[arg(long, value_enum, default_value = "adaptive")]
    policy: PolicyArg,
    /// Seeds each (file, variant) considers, then it is done (a shard considers the same
    /// seeds and runs its own).
    #[arg(long)]
    seeds_per_arm: Option<u64>,
    /// Seeds each (file, variant) gets before the policy weighs them (half for an arm four
    /// times costlier than the median).
    #[arg(long, default_value_t = 200)]
    floor: u64,
    /// Runs at a time (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// The results database (JSON lines; created if absent, appended to).
    #[arg(long, default_value = ".farm/results.jsonl")]
    db: PathBuf,
    /// Where the farm report goes.
    #[arg(long, default_value = "reports/farm")]
    report: PathBuf,
    /// Where shrunk failures are written as regression scenarios.
    #[arg(long, default_value = "scenarios/regressions")]
    regressions: PathBuf,
    /// Share of runs that may be mutants of rare runs (0 turns mutation off).
    #[arg(long, default_value_t = 0.25)]
    mutation: f64,
    /// Run only seeds s with s % N == I (`env/N`: I from JOB_COMPLETION_INDEX).
    #[arg(long, value_name = "I/N", value_parser = shard::parse)]
    shard: Option<shard::Shard>,
    /// The farm run's id: shards of one run share it (default: the start time, UTC).
    #[arg(long)]
    run_id: Option<String>,
    /// Record unexpected failures without shrinking them.
    #[arg(long)]
    no_shrink: bool,
}

/// `orrery farm-merge`'s flags.
#[derive(Args)]
pub struct FarmMergeArgs {
    /// The shards' results databases.
    #[arg(required = true)]
    shards: Vec<PathBuf>,
    /// The merged database to write (appended to if it exists; runs held already are
    /// dropped).
    #[arg(long, default_value = ".farm/results.jsonl")]
    db: PathBuf,
    /// Where the farm report goes.
    #[arg(long, default_value = "reports/farm")]
    report: PathBuf,
    /// The farm run to report (default: the last one in the database).
    #[arg(long)]
    run_id: Option<String>,
    /// The scenario files (for the declared verdicts in the report).
    #[arg(long, default_value = "scenarios")]
    scenarios: PathBuf,
}

/// A scenario file the farm runs: path as given, parsed, FNV of its bytes.
type File = (String, Scenario, String);

fn files(paths: &[PathBuf]) -> Result<Vec<File>, Fail> {
    let paths = if paths.is_empty() {
        vec![PathBuf::from("scenarios")]
    } else {
        paths.to_vec()
    };
    let mut found = Vec::new();
    for path in &paths {
        if path.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| Fail::usage(format!("{}: {e}", path.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                .collect();
            inside.sort();
            found.extend(inside);
        } else {
            found.push(path.clone());
        }
    }
    if found.is_empty() {
        return Err(Fail::usage("no scenario file to farm".to_string()));
    }
    found
        .into_iter()
        .map(|p| {
            let (scenario, text) = crate::common::load(&p)?;
            Ok((p.display().to_string(), scenario, shard::fnv(&text)))
        })
        .collect()
}

/// The declared verdicts of the files, for the report: (scenario, variant) → expectation.
fn expects(files: &[File]) -> std::collections::BTreeMap<(String, String), String> {
    files
        .iter()
        .flat_map(|(_, s, _)| {
            s.expect.iter().map(|(v, e)| {
                (
                    (s.name.clone(), v.as_str().to_string()),
                    e.as_str().to_string(),
                )
            })
        })
        .collect()
}

/// `<version>+<FNV-1a of this executable>`: a rebuilt binary is another binary.
fn binary_id() -> String {
    let bytes = std::env::current_exe()
        .and_then(std::fs::read)
        .unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}+{hash:016x}", env!("CARGO_PKG_VERSION"))
}

/// SIGINT count, set by a watcher thread: 1 stops launching, 2 kills the children.
fn watch_sigint() -> Arc<AtomicU8> {
    let count = Arc::new(AtomicU8::new(0));
    let seen = count.clone();
    let watcher = move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        });
    };
    std::thread::spawn(watcher); // determinism: real-env (the Ctrl-C watcher, no simulation)
    count
}

/// What a child process is doing.
enum Task {
    /// A run: of an arm's seed, or of a mutant.
    Run {
        arm: usize,
        seed: u64,
        variant: Variant,
        origin: Origin,
    },
    /// A shrink of an unexpected failure.
    Shrink { failed: Box<db::Run>, out: PathBuf },
}

struct Running {
    child: Child,
    task: Task,
    started: Instant,
}

/// A failure waiting for a free slot to be shrunk.
struct ShrinkJob {
    failed: db::Run,
    file: String,
    out: PathBuf,
}

fn spawn(exe: &Path, args: &[String]) -> Result<Child, Fail> {
    Command::new(exe)
        .args(args)
        // Its own process group: a terminal's Ctrl-C reaches the farm only, which lets the
        // running seeds finish (kept) and stops launching.
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Fail::usage(format!("cannot start a child: {e}")))
}

fn output(mut child: Child) -> (Option<i32>, String, String) {
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    let code = child.wait().ok().and_then(|s| s.code());
    (code, stdout, stderr)
}

/// The shape of a minimal scenario: its fault steps without their times, its fault points
/// and the invariant. Two failures of one scenario with one shape are one failure.
fn shape(min: &Scenario, invariant: &str) -> String {
    let mut parts: Vec<String> = min
        .faults
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f.at = Duration::ZERO;
            serde_json::to_string(&f).unwrap_or_default()
        })
        .collect();
    if let Some(b) = &min.buggify {
        parts.extend(b.points.iter().map(|p| p.name().to_string()));
    }
    parts.push(invariant.to_string());
    shard::fnv(&parts.join("\n"))
}

/// A progress bar on a terminal; a line every 100 runs otherwise.
struct Ticker {
    bar: Option<ProgressBar>,
}

impl Ticker {
    fn new() -> Ticker {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .expect("a valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Ticker { bar }
    }

    fn status(&self, runs: u64, text: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(text.to_string()),
            None if runs.is_multiple_of(100) => eprintln!("orrery farm: {text}"),
            None => {}
        }
    }

    fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// A mutant waiting for a slot: its parent's arm and seed, its number, the variant it runs,
/// its file, and what was changed.
type Mutant = (usize, u64, u32, Variant, PathBuf, String);

/// One farm run under way: what it runs with, what is running and waiting, what it counted.
/// Its phases are methods: [`Farm::launch`] fills free slots, [`Farm::record_run`] and
/// [`Farm::record_shrink`] take what a child left, [`Farm::wind_down`] handles the budget's
/// end, [`Farm::finish`] writes the report.
struct Farm<'a> {
    args: &'a FarmArgs,
    db: Db,
    plan: Plan,
    run_id: String,
    binary: String,
    exe: PathBuf,
    mutants_dir: PathBuf,
    budget_text: String,
    shard: Option<String>,
    parallel: usize,
    sigint: Arc<AtomicU8>,
    started: Instant,
    ticker: Ticker,
    running: Vec<Running>,
    mutants: VecDeque<Mutant>,
    shrinks: VecDeque<ShrinkJob>,
    parents: std::collections::BTreeMap<(usize, String), usize>,
    shrunk_kinds: std::collections::BTreeMap<(String, String, String), usize>,
    runs: u64,
    unexpected: u64,
    cpu: f64,
    mutant_cpu: f64,
    launched: u64,
    plan_done: bool,
    interrupted: bool,
    budget_end: Option<Instant>,
    worst: Exit,
}

/// `orrery farm`: runs for the budget, shrinks what failed, writes the report.
pub fn cmd_farm(args: FarmArgs) -> Result<Exit, Fail> {
    if args.budget.is_none()
        && args.cpu_budget.is_none()
        && args.max_runs.is_none()
        && args.seeds_per_arm.is_none()
    {
        return Err(Fail::usage(
            "give the farm a budget: --budget 90m (wall), --cpu-budget 3h, --max-runs N or --seeds-per-arm N".to_string(),
        ));
    }
    if !(0.0..=1.0).contains(&args.mutation) {
        return Err(Fail::usage(format!(
            "--mutation {}: a share between 0 and 1",
            args.mutation
        )));
    }
    let files = files(&args.paths)?;
    let shard = match &args.shard {
        Some(s) => {
            let (index, count) = s.resolve()?;
            Some(Shard { index, count })
        }
        None => None,
    };
    let db = Db::open(&args.db).map_err(|e| Fail::usage(e.to_string()))?;
    if !db.skipped.is_empty() {
        eprintln!(
            "orrery farm: {}: skipped a torn last line (a farm killed while writing it)",
            args.db.display()
        );
    }
    let run_id = args.run_id.clone().unwrap_or_else(|| {
        // determinism: real-env (the farm run's name, never inside a simulation)
        jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%SZ")
            .to_string()
    });
    let budget_text = [
        args.budget
            .map(|b| format!("{} wall", scenario::duration::render(b))),
        args.cpu_budget
            .map(|b| format!("{} CPU", scenario::duration::render(b))),
        args.max_runs.map(|n| format!("{n} runs")),
        args.seeds_per_arm.map(|n| format!("{n} seeds per arm")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ");
    let policy = match args.policy {
        PolicyArg::Adaptive => Policy::Adaptive,
        PolicyArg::Uniform => Policy::Uniform,
    };
    let expects = expects(&files);
    let plan = Plan::new(
        files.clone(),
        &db,
        policy,
        args.floor,
        shard,
        args.seeds_per_arm,
        &run_id,
    );
    let exe = std::env::current_exe()
        .map_err(|e| Fail::usage(format!("cannot find own executable: {e}")))?;
    let farm_dir = args
        .db
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let mut farm = Farm {
        args: &args,
        db,
        plan,
        run_id,
        binary: binary_id(),
        exe,
        mutants_dir: farm_dir.join("mutants"),
        budget_text,
        shard: shard.map(|s| format!("{}/{}", s.index, s.count)),
        parallel: crate::common::parallelism(args.jobs),
        sigint: watch_sigint(),
        started: Instant::now(), // determinism: real-env (the farm's wall budget)
        ticker: Ticker::new(),
        running: Vec::new(),
        mutants: VecDeque::new(),
        shrinks: VecDeque::new(),
        parents: Default::default(),
        shrunk_kinds: Default::default(),
        runs: 0,
        unexpected: 0,
        cpu: 0.0,
        mutant_cpu: 0.0,
        launched: 0,
        plan_done: false,
        interrupted: false,
        budget_end: None,
        worst: Exit::Expected,
    };
    farm.append(farm.session("start"))?;
    farm.run()?;
    farm.finish(&expects)
}

impl Farm<'_> {
    fn append(&mut self, record: Record) -> Result<(), Fail> {
        self.db
            .append(record)
            .map_err(|e| Fail::usage(e.to_string()))
    }

    /// The session record of `phase` (start or end) with what the run has done so far.
    fn session(&self, phase: &str) -> Record {
        Record::Session(db::Session {
            session: self.run_id.clone(),
            phase: phase.to_string(),
            budget: self.budget_text.clone(),
            shard: self.shard.clone(),
            jobs: self.parallel,
            wall_seconds: (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            runs: self.runs,
            interrupted: self.interrupted,
        })
    }

    /// The loop: launch into free slots, wait for a child, record what it left; until the
    /// budget ends (or Ctrl-C) and the last child is done.
    fn run(&mut self) -> Result<(), Fail> {
        loop {
            let signals = self.on_signals();
            let launching = !self.interrupted && !self.out_of_budget();
            if launching {
                self.launch()?;
            } else {
                self.wind_down()?;
            }
            if self.running.is_empty()
                && (!launching
                    || (self.plan_done && self.mutants.is_empty() && self.shrinks.is_empty()))
            {
                return Ok(());
            }
            let finished = self
                .running
                .iter_mut()
                .position(|r| matches!(r.child.try_wait(), Ok(Some(_))));
            let Some(i) = finished else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let Running {
                child,
                task,
                started: began,
            } = self.running.remove(i);
            let (code, stdout, stderr) = output(child);
            match task {
                Task::Run {
                    arm,
                    seed,
                    variant,
                    origin,
                } => {
                    let line = stdout.lines().last().unwrap_or("");
                    let Ok(line) = serde_json::from_str::<serde_json::Value>(line) else {
                        if signals >= 2 {
                            continue; // killed by the second Ctrl-C: nothing to keep
                        }
                        return Err(Fail::usage(format!(
                            "{} / {} seed {seed}: the run printed no result line (exit {code:?}): {}",
                            self.plan.arms[arm].scenario.name,
                            variant.as_str(),
                            stderr.trim()
                        )));
                    };
                    self.record_run(arm, seed, variant, origin, &line, began)?;
                }
                Task::Shrink { failed, out } => self.record_shrink(*failed, out, code, &stderr)?,
            }
            self.status();
        }
    }

    /// Ctrl-C once: no new runs, shrinks stopped; twice: every child stopped. The count.
    fn on_signals(&mut self) -> u8 {
        let signals = self.sigint.load(Ordering::SeqCst);
        if signals >= 1 && !self.interrupted {
            self.interrupted = true;
            self.ticker.say("orrery farm: SIGINT: no new runs; the running ones finish and are kept (Ctrl-C again to stop them)");
            // Shrinks can take long: stop them now (their failures stay recorded).
            for r in self.running.iter_mut() {
                if matches!(r.task, Task::Shrink { .. }) {
                    let _ = r.child.kill();
                }
            }
        }
        if signals >= 2 {
            for r in self.running.iter_mut() {
                let _ = r.child.kill();
            }
        }
        signals
    }

    fn out_of_budget(&self) -> bool {
        let args = self.args;
        args.budget.is_some_and(|b| self.started.elapsed() >= b)
            || args.cpu_budget.is_some_and(|b| self.cpu >= b.as_secs_f64())
            || args.max_runs.is_some_and(|n| self.launched >= n)
    }

    /// The budget has ended (or Ctrl-C): failures waiting for a slot are recorded as not
    /// shrunk; a shrink running past the grace is stopped.
    fn wind_down(&mut self) -> Result<(), Fail> {
        while let Some(job) = self.shrinks.pop_front() {
            self.append(Record::Shrunk(not_shrunk(
                &job.failed,
                "the farm stopped before a slot was free (shrink it with the replay command's file and `orrery shrink`)",
            )))?;
        }
        let stop_at = self.budget_end.get_or_insert_with(Instant::now);
        if stop_at.elapsed() >= SHRINK_GRACE {
            for r in self.running.iter_mut() {
                if matches!(r.task, Task::Shrink { .. }) {
                    let _ = r.child.kill();
                }
            }
        }
        Ok(())
    }

    /// Fills free slots: a failure to shrink first, then a mutant while mutants are under
    /// their share, then the policy's next seed.
    fn launch(&mut self) -> Result<(), Fail> {
        let args = self.args;
        while self.running.len() < self.parallel {
            if !args.no_shrink {
                if let Some(job) = self.shrinks.pop_front() {
                    std::fs::create_dir_all(&args.regressions)
                        .map_err(|e| Fail::usage(format!("{}: {e}", args.regressions.display())))?;
                    let task_args = vec![
                        "shrink".to_string(),
                        job.file.clone(),
                        "--seed".into(),
                        job.failed.seed.to_string(),
                        "--variant".into(),
                        job.failed.variant.clone(),
                        "--out".into(),
                        job.out.display().to_string(),
                        "--jobs".into(),
                        "1".into(),
                    ];
                    self.running.push(Running {
                        child: spawn(&self.exe, &task_args)?,
                        task: Task::Shrink {
                            failed: Box::new(job.failed),
                            out: job.out,
                        },
                        started: Instant::now(), // determinism: real-env (a child's wall time)
                    });
                    continue;
                }
            }
            // Once the policy has nothing left (a fixed plan), queued mutants still run.
            let mutant_turn = !self.mutants.is_empty()
                && (self.plan_done || self.mutant_cpu <= args.mutation * self.cpu.max(1.0));
            let (arm, seed, variant, origin, file) = if mutant_turn {
                let (arm, seed, child, variant, path, changes) =
                    self.mutants.pop_front().expect("not empty");
                let file = path.display().to_string();
                (
                    arm,
                    seed,
                    variant,
                    Origin::Mutant {
                        parent_seed: seed,
                        child,
                        changes,
                        file: file.clone(),
                    },
                    file,
                )
            } else if self.plan_done {
                return Ok(());
            } else {
                match self.plan.next_run() {
                    Some((arm, seed)) => {
                        let a = &self.plan.arms[arm];
                        (arm, seed, a.variant, Origin::Seed, a.file.clone())
                    }
                    None => {
                        self.plan_done = true;
                        return Ok(());
                    }
                }
            };
            let task_args = vec![
                "run".to_string(),
                file,
                "--seed".into(),
                seed.to_string(),
                "--variant".into(),
                variant.as_str().to_string(),
            ];
            self.running.push(Running {
                child: spawn(&self.exe, &task_args)?,
                task: Task::Run {
                    arm,
                    seed,
                    variant,
                    origin,
                },
                started: Instant::now(), // determinism: real-env (a child's wall time)
            });
            self.launched += 1;
        }
        Ok(())
    }

    /// Records a finished run; an unexpected failure is queued to be shrunk, a rare one
    /// becomes a parent of mutants.
    fn record_run(
        &mut self,
        arm: usize,
        seed: u64,
        variant: Variant,
        origin: Origin,
        line: &serde_json::Value,
        began: Instant,
    ) -> Result<(), Fail> {
        let a = self.plan.arms[arm].clone();
        let strings = |v: &serde_json::Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let run = db::Run {
            session: self.run_id.clone(),
            scenario: a.scenario.name.clone(),
            file: a.file.clone(),
            scenario_fnv: a.fnv.clone(),
            binary: self.binary.clone(),
            seed,
            variant: variant.as_str().to_string(),
            origin: origin.clone(),
            result: line["result"].as_str().unwrap_or("?").to_string(),
            expected: line["expected"].as_bool().unwrap_or(false),
            violations: strings(&line["violations"]),
            failure: line["failure"].as_str().map(str::to_string),
            reached: strings(&line["reached"]),
            fault_points: serde_json::from_value(line["fault_points"].clone()).unwrap_or_default(),
            cpu_seconds: line["wall_seconds"]
                .as_f64()
                .unwrap_or_else(|| began.elapsed().as_secs_f64()),
            trace_hash: line["trace_hash"].as_str().unwrap_or("").to_string(),
        };
        self.runs += 1;
        self.cpu += run.cpu_seconds;
        if origin != Origin::Seed {
            self.mutant_cpu += run.cpu_seconds;
        } else {
            self.plan.record(arm, &run);
        }
        self.db
            .append(Record::Run(run.clone()))
            .map_err(|e| Fail::usage(e.to_string()))?;
        if !run.expected {
            self.on_unexpected(&a, seed, variant, &origin, &run, line)?;
        }
        if origin == Origin::Seed && self.args.mutation > 0.0 {
            self.breed(arm, seed, variant, &a, &run)?;
        }
        Ok(())
    }

    /// An unexpected result: counted toward the exit code, told, and queued to be shrunk
    /// (the first few of a kind; the rest recorded as not shrunk).
    fn on_unexpected(
        &mut self,
        a: &Arm,
        seed: u64,
        variant: Variant,
        origin: &Origin,
        run: &db::Run,
        line: &serde_json::Value,
    ) -> Result<(), Fail> {
        let args = self.args;
        self.unexpected += 1;
        let result: Outcome =
            serde_json::from_value(line["result"].clone()).unwrap_or(Outcome::Pass);
        let declared = match &origin {
            Origin::Seed => orrery_sim::report::expected(&a.scenario, variant),
            Origin::Mutant { .. } => Outcome::Pass,
        };
        self.worst = self.worst.max(Exit::of(result, declared));
        self.ticker.say(&format!(
            "orrery farm: {} / {} seed {seed}{}: {} (declared {}){}",
            a.scenario.name,
            variant.as_str(),
            match &origin {
                Origin::Seed => String::new(),
                Origin::Mutant { child, .. } => format!(" mutant {child}"),
            },
            run.result,
            declared.as_str(),
            run.failure
                .as_deref()
                .map_or(String::new(), |f| format!(", breaking {f}"))
        ));
        if let Some(invariant) = run.failure.clone() {
            let kind = (a.fnv.clone(), run.variant.clone(), invariant);
            let count = self.shrunk_kinds.entry(kind).or_default();
            *count += 1;
            if *count <= SHRINKS_PER_FAILURE && !args.no_shrink {
                let name = match &origin {
                    Origin::Seed => format!("{}-{seed}", a.scenario.name),
                    Origin::Mutant { child, .. } => {
                        format!("{}-{seed}-m{child}", a.scenario.name)
                    }
                };
                let name = match variant {
                    Variant::Hardened => name,
                    Variant::Faithful => format!("{name}-faithful"),
                };
                self.shrinks.push_back(ShrinkJob {
                    file: run.repro_file().to_string(),
                    out: args.regressions.join(format!("{name}.yaml")),
                    failed: run.clone(),
                });
            } else {
                self.db
                    .append(Record::Shrunk(not_shrunk(
                        run,
                        if args.no_shrink {
                            "--no-shrink"
                        } else {
                            "three of this kind were shrunk in this farm run already"
                        },
                    )))
                    .map_err(|e| Fail::usage(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// A run that reached a rare condition becomes a parent: its mutants are written and
    /// queued (a few per rare feature and arm).
    fn breed(
        &mut self,
        arm: usize,
        seed: u64,
        variant: Variant,
        a: &Arm,
        run: &db::Run,
    ) -> Result<(), Fail> {
        let variants = Plan::mutant_variants(&a.scenario);
        let fresh: Vec<String> = self
            .plan
            .rare(arm, run)
            .into_iter()
            .filter(|f| {
                self.parents.get(&(arm, f.clone())).copied().unwrap_or(0) < PARENTS_PER_FEATURE
            })
            .collect();
        if !fresh.is_empty() && !variants.is_empty() {
            for f in &fresh {
                *self.parents.entry((arm, f.clone())).or_default() += 1;
            }
            std::fs::create_dir_all(&self.mutants_dir)
                .map_err(|e| Fail::usage(format!("{}: {e}", self.mutants_dir.display())))?;
            for child in 0..MUTANTS_PER_PARENT {
                let Some(m) = mutate::mutate(&a.scenario, seed, child) else {
                    continue;
                };
                let path = self
                    .mutants_dir
                    .join(format!("{}-{seed}-m{child}.yaml", a.scenario.name));
                let yaml = serde_saphyr::to_string(&m.scenario)
                    .map_err(|e| Fail::usage(format!("cannot render a mutant: {e}")))?;
                std::fs::write(
                    &path,
                    format!(
                        "# A mutant of {} seed {seed} (orrery farm, rare: {}): {}\n{yaml}",
                        a.file,
                        fresh.join(", "),
                        m.changes
                    ),
                )
                .map_err(|e| Fail::usage(format!("{}: {e}", path.display())))?;
                // Mutant arms share their parent's arm index; the variant is
                // one the file declares to pass (the parent's, if it does).
                for v in &variants {
                    if *v == variant {
                        self.mutants.push_back((
                            arm,
                            seed,
                            child,
                            *v,
                            path.clone(),
                            m.changes.clone(),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Records what a shrink left: the regression file it wrote, a known shape, or why not.
    fn record_shrink(
        &mut self,
        failed: db::Run,
        out: PathBuf,
        code: Option<i32>,
        stderr: &str,
    ) -> Result<(), Fail> {
        let record = if code == Some(0) && out.exists() {
            shrunk_record(&self.db, &failed, &out, &self.run_id)?
        } else if code.is_none() {
            not_shrunk(
                &failed,
                "stopped (Ctrl-C, or the budget ended and its 15-minute grace ran out)",
            )
        } else {
            let why = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or(if self.interrupted {
                    "interrupted"
                } else {
                    "the shrink failed"
                })
                .to_string();
            not_shrunk(&failed, &why)
        };
        self.ticker.say(&format!(
            "orrery farm: {} / {} seed {}: {}",
            failed.scenario,
            failed.variant,
            failed.seed,
            match (&record.regression, record.known) {
                (_, true) => "known failure (same shape as an earlier one)".to_string(),
                (Some(path), _) => format!("shrunk into {path}"),
                (None, _) => format!("not shrunk: {}", record.note),
            }
        ));
        self.db
            .append(Record::Shrunk(record))
            .map_err(|e| Fail::usage(e.to_string()))?;
        Ok(())
    }

    fn status(&self) {
        let (args, runs, cpu, unexpected) = (self.args, self.runs, self.cpu, self.unexpected);
        let mutants = &self.mutants;
        let started = self.started;
        let elapsed = started.elapsed().as_secs_f64();
        self.ticker.status(
        runs,
        &format!(
            "{runs} runs ({:.0} CPU-s), {unexpected} not as declared, {} mutants queued, {:.0}/{} s",
            cpu,
            mutants.len(),
            elapsed,
            args.budget.map_or("—".to_string(), |b| b.as_secs().to_string())
        ),
    );
    }

    /// The end: the session record, the report, and the exit code.
    fn finish(
        mut self,
        expects: &std::collections::BTreeMap<(String, String), String>,
    ) -> Result<Exit, Fail> {
        let args = self.args;
        self.ticker.finish();
        let end = self.session("end");
        self.append(end)?;
        let mut farm = report::build(&self.db, Some(&self.run_id), expects)
            .ok_or_else(|| Fail::usage("no farm run to report".to_string()))?;
        farm.known_limits = report::known_limits(&args.regressions);
        farm.write(&self.db, &args.report)
            .map_err(|e| Fail::usage(format!("{}: {e}", args.report.display())))?;
        println!(
            "orrery farm: {} runs ({} seeds, {} mutants) in {:.0} s wall, {:.0} CPU-s; {} not as declared; report in {}",
            farm.runs,
            farm.seed_runs,
            farm.runs - farm.seed_runs,
            self.started.elapsed().as_secs_f64(),
            farm.cpu_seconds,
            farm.unexpected,
            args.report.display()
        );
        Ok(if self.interrupted {
            Exit::Expected.max(self.worst)
        } else {
            self.worst
        })
    }
}

fn not_shrunk(run: &db::Run, why: &str) -> db::Shrunk {
    db::Shrunk {
        session: run.session.clone(),
        scenario: run.scenario.clone(),
        scenario_fnv: run.scenario_fnv.clone(),
        seed: run.seed,
        variant: run.variant.clone(),
        origin: run.origin.clone(),
        result: run.result.clone(),
        invariant: run.failure.clone().unwrap_or_default(),
        shape: String::new(),
        regression: None,
        replay: format!(
            "orrery run {} --seed {} --variant {}",
            run.repro_file(),
            run.seed,
            run.variant
        ),
        known: false,
        note: why.to_string(),
    }
}

/// The record of a finished shrink: a new failure keeps its regression file (with a header
/// saying where it came from); a known one's file is removed.
fn shrunk_record(db: &Db, failed: &db::Run, out: &Path, run_id: &str) -> Result<db::Shrunk, Fail> {
    let min = scenario::load(out).map_err(|e| Fail::usage(e.to_string()))?;
    let invariant = failed.failure.clone().unwrap_or_default();
    let shape = shape(&min, &invariant);
    let known = db.shrunk().any(|s| {
        s.scenario_fnv == failed.scenario_fnv
            && s.invariant == invariant
            && s.shape == shape
            && (s.regression.is_some() || s.known)
    });
    let path = out.display().to_string();
    let replay = format!("orrery run {path} --variant {}", failed.variant);
    if known {
        let _ = std::fs::remove_file(out);
    } else {
        let text = std::fs::read_to_string(out).map_err(|e| Fail::usage(format!("{path}: {e}")))?;
        let declared = min
            .expect
            .get(&Variant::parse(&failed.variant).map_err(Fail::usage)?)
            .map_or("?", |o| o.as_str());
        let header = format!(
            "# Found by orrery farm (run {run_id}): {} seed {} ({}) gave {} breaking {invariant},\n# not as declared. Shrunk automatically; replay: {replay}\n# It declares what it does today ({}: {declared}), so it can be committed as a known\n# limit; once the flaw is fixed, its `expect:` becomes pass.\n",
            failed.file, failed.seed, failed.variant, failed.result, failed.variant
        );
        // Named as its file, so its reports go to reports/<file stem>/ (make reports runs it).
        let stem = out
            .file_stem()
            .map_or(String::new(), |s| s.to_string_lossy().into_owned());
        let text = text.replacen(
            &format!("\nname: {}\n", min.name),
            &format!("\nname: {stem}\n"),
            1,
        );
        std::fs::write(out, header + &text).map_err(|e| Fail::usage(format!("{path}: {e}")))?;
    }
    Ok(db::Shrunk {
        session: run_id.to_string(),
        scenario: failed.scenario.clone(),
        scenario_fnv: failed.scenario_fnv.clone(),
        seed: failed.seed,
        variant: failed.variant.clone(),
        origin: failed.origin.clone(),
        result: failed.result.clone(),
        invariant,
        shape,
        regression: (!known).then_some(path),
        replay,
        known,
        note: String::new(),
    })
}

/// `orrery farm-merge`: the shards' databases into one, and its report.
pub fn cmd_farm_merge(args: FarmMergeArgs) -> Result<Exit, Fail> {
    let mut db = Db::open(&args.db).map_err(|e| Fail::usage(e.to_string()))?;
    for shard in &args.shards {
        let added = db.read(shard).map_err(|e| Fail::usage(e.to_string()))?;
        eprintln!(
            "orrery farm-merge: {}: {added} new records",
            shard.display()
        );
    }
    if let Some(dir) = args.db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Fail::usage(format!("{}: {e}", dir.display())))?;
    }
    db.write_all(&args.db)
        .map_err(|e| Fail::usage(e.to_string()))?;
    let expects = files(std::slice::from_ref(&args.scenarios))
        .map(|f| expects(&f))
        .unwrap_or_default();
    let mut farm = report::build(&db, args.run_id.as_deref(), &expects)
        .ok_or_else(|| Fail::usage("the databases hold no farm run".to_string()))?;
    farm.known_limits = report::known_limits(&args.scenarios.join("regressions"));
    farm.write(&db, &args.report)
        .map_err(|e| Fail::usage(format!("{}: {e}", args.report.display())))?;
    println!(
        "orrery farm-merge: farm run {}: {} runs from {} shard(s); report in {}",
        farm.run,
        farm.runs,
        farm.shards.len().max(1),
        args.report.display()
    );
    Ok(Exit::Expected)
}
