//! Runs scenario seeds as `orrery run` child processes, a few at a time, and shows progress.
//!
//! Each simulation is single-threaded; separate processes use the machine's cores without
//! threads in the simulator.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use orrery_sim::exit::Exit;
use orrery_sim::scenario::{Scenario, Variant};

use crate::common::Fail;

/// One run to make in a child process: a scenario file, a seed, a variant, and where its
/// report goes (none for sweeps).
#[derive(Clone)]
pub struct Job {
    /// The scenario file, as given on the command line.
    pub path: String,
    /// The parsed scenario (for names and expectations).
    pub scenario: Scenario,
    /// Variant to run.
    pub variant: Variant,
    /// Seed to run.
    pub seed: u64,
    /// Report directory, if the run writes one.
    pub out: Option<PathBuf>,
    /// Real time the run sleeps before each simulation step, in microseconds (`run
    /// --real-delay-us`; 0: none).
    pub real_delay_us: u64,
}

/// What a finished child said: its result line and its exit class.
pub struct JobResult {
    /// The run's final JSON line.
    pub line: serde_json::Value,
    /// The class its exit code stands for.
    pub exit: Exit,
}

fn spawn(exe: &PathBuf, job: &Job) -> Result<Child, Fail> {
    let mut command = Command::new(exe);
    command.args([
        "run",
        &job.path,
        "--seed",
        &job.seed.to_string(),
        "--variant",
        job.variant.as_str(),
    ]);
    if job.real_delay_us > 0 {
        command.args(["--real-delay-us", &job.real_delay_us.to_string()]);
    }
    if let Some(dir) = &job.out {
        command.arg("--out").arg(dir);
    }
    command
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Fail::usage(format!("cannot start a run: {e}")))
}

fn collect(job: &Job, child: Child) -> Result<JobResult, Fail> {
    let output = child
        .wait_with_output()
        .map_err(|e| Fail::usage(format!("reading a run: {e}")))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or("");
    let line: serde_json::Value = serde_json::from_str(line).map_err(|_| {
        Fail::usage(format!(
            "{} / {} seed {}: the run printed no result line",
            job.scenario.name,
            job.variant.as_str(),
            job.seed
        ))
    })?;
    let exit = output
        .status
        .code()
        .and_then(Exit::from_code)
        .unwrap_or(Exit::Usage);
    Ok(JobResult { line, exit })
}

/// Runs `jobs`, `parallel` at a time; calls `done` as each finishes; returns the results in
/// job order.
pub fn run(
    jobs: &[Job],
    parallel: usize,
    mut done: impl FnMut(&Job, &JobResult),
) -> Result<Vec<JobResult>, Fail> {
    let exe = std::env::current_exe()
        .map_err(|e| Fail::usage(format!("cannot find own executable: {e}")))?;
    let mut results: Vec<Option<JobResult>> = jobs.iter().map(|_| None).collect();
    let mut running: Vec<(usize, Child)> = Vec::new();
    let mut next = 0;
    while next < jobs.len() || !running.is_empty() {
        while next < jobs.len() && running.len() < parallel.max(1) {
            running.push((next, spawn(&exe, &jobs[next])?));
            next += 1;
        }
        let mut finished = None;
        for (slot, (_, child)) in running.iter_mut().enumerate() {
            let status = child
                .try_wait()
                .map_err(|e| Fail::usage(format!("waiting for a run: {e}")))?;
            if status.is_some() {
                finished = Some(slot);
                break;
            }
        }
        match finished {
            Some(slot) => {
                let (index, child) = running.remove(slot);
                let result = collect(&jobs[index], child)?;
                done(&jobs[index], &result);
                results[index] = Some(result);
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every job finished"))
        .collect())
}

/// A progress bar on stderr when it is a terminal; nothing at all in CI logs.
pub struct Progress {
    bar: Option<ProgressBar>,
    unexpected: std::cell::Cell<u64>,
}

impl Progress {
    /// A bar for `total` runs (hidden unless stderr is a terminal).
    pub fn new(total: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template("[{bar:30}] {pos}/{len} runs, {msg} ({eta} left)")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.set_message("0 unexpected");
            bar
        });
        Progress {
            bar,
            unexpected: Default::default(),
        }
    }

    /// Prints a run's result line on stdout (above the bar) and advances the bar.
    pub fn line(&self, line: &str, unexpected: bool) {
        self.unexpected
            .set(self.unexpected.get() + u64::from(unexpected));
        match &self.bar {
            Some(bar) => {
                bar.suspend(|| println!("{line}"));
                bar.set_message(format!("{} unexpected", self.unexpected.get()));
                bar.inc(1);
            }
            None => println!("{line}"),
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Runs shrink candidates as parallel `orrery run` child processes: each candidate is
/// written to a scratch directory and run from there (what a user replays is the same file
/// format, so a candidate's run in a child is the run the search judges).
pub struct ProcessJudge {
    dir: PathBuf,
    parallel: usize,
    written: u64,
}

impl ProcessJudge {
    /// A judge running `parallel` candidates at a time, its files under a fresh scratch
    /// directory (removed when the judge is dropped).
    pub fn new(parallel: usize) -> Result<ProcessJudge, Fail> {
        let dir = std::env::temp_dir().join(format!("orrery-shrink-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Fail::usage(format!("{}: {e}", dir.display())))?;
        Ok(ProcessJudge {
            dir,
            parallel: parallel.max(1),
            written: 0,
        })
    }
}

impl Drop for ProcessJudge {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl orrery_sim::explore::shrink::Judge for ProcessJudge {
    fn width(&self) -> usize {
        self.parallel
    }

    fn run(
        &mut self,
        runs: &[(&Scenario, u64, Variant)],
    ) -> Vec<orrery_sim::explore::shrink::Verdict> {
        let mut jobs = Vec::new();
        for (scenario, seed, variant) in runs {
            self.written += 1;
            let path = self.dir.join(format!("candidate-{}.yaml", self.written));
            let text = serde_saphyr::to_string(*scenario).unwrap_or_default();
            let _ = std::fs::write(&path, text);
            jobs.push(Job {
                path: path.display().to_string(),
                scenario: (*scenario).clone(),
                variant: *variant,
                seed: *seed,
                out: None,
                real_delay_us: 0,
            });
        }
        // A child that could not run (no result line) judges as a pass: the search then
        // never keeps a candidate it could not check.
        let unchecked = || orrery_sim::explore::shrink::Verdict {
            result: orrery_sim::scenario::Outcome::Pass,
            failure: None,
            broken: Vec::new(),
        };
        match run(&jobs, self.parallel, |_, _| {}) {
            Ok(results) => results
                .iter()
                .map(|r| {
                    let line = &r.line;
                    let result = serde_json::from_value(line["result"].clone());
                    match result {
                        Ok(result) => orrery_sim::explore::shrink::Verdict {
                            result,
                            failure: line["failure"].as_str().map(str::to_string),
                            broken: line["violations"]
                                .as_array()
                                .map(|a| {
                                    a.iter()
                                        .filter_map(|v| v.as_str().map(str::to_string))
                                        .collect()
                                })
                                .unwrap_or_default(),
                        },
                        Err(_) => unchecked(),
                    }
                })
                .collect(),
            Err(_) => runs.iter().map(|_| unchecked()).collect(),
        }
    }
}
