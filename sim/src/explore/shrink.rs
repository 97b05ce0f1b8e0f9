//! Shrinking: delta-debugs a failing run down to a small scenario that still breaks the same
//! invariant, so a 23-fault, 10,000-app failure becomes something a person can read.
//!
//! Starting from the plain scenario the seed ran (a swarm's draws made concrete), it tries,
//! until none helps: dropping fault steps (halves, quarters, … single steps, as ddmin does),
//! dropping fault points, bringing healing steps closer to the fault they heal (shorter
//! faults), lowering the queue capacity, the number of applications, repositories and
//! Rollouts, dropping surplus reporter and client hosts, and shortening the fault and calm
//! phases. A candidate is kept when it is a valid scenario, the same seed and variant still break the
//! target invariant and — when the scenario expects the other variant to pass — the other
//! variant still holds it (so what is kept is the variant's flaw, not a world in which the
//! invariant cannot hold, such as a calm phase too short to drain a backlog). Every
//! candidate is a whole deterministic run, so the result replays exactly.

use std::time::Duration;

use crate::harness::runner;
use crate::scenario::model::{FaultStep, Role};
use crate::scenario::{self, draw, Outcome, Scenario, Variant};

/// Why a run cannot be shrunk.
#[derive(Debug, thiserror::Error)]
pub enum ShrinkError {
    /// The seed breaks no invariant: nothing to keep failing.
    #[error("seed {seed} ({variant}) breaks no invariant: nothing to shrink")]
    DoesNotFail {
        /// The seed.
        seed: u64,
        /// The variant.
        variant: &'static str,
    },
    /// `--invariant` named one the run did not break.
    #[error("seed {seed} does not break {wanted} (it breaks: {broken})")]
    NotBroken {
        /// The seed.
        seed: u64,
        /// The invariant asked for.
        wanted: String,
        /// Those it does break.
        broken: String,
    },
}

/// A shrunk scenario and what shrinking took away.
#[derive(Debug)]
pub struct Shrunk {
    /// The minimal scenario (plain, `seeds: [seed]`).
    pub scenario: Scenario,
    /// The invariant it still breaks.
    pub invariant: String,
    /// Runs made.
    pub runs: u32,
    /// What changed, e.g. `faults 23 → 2`.
    pub changes: Vec<String>,
}

/// Most runs one shrink makes (each is a full simulation).
pub const MAX_RUNS: u32 = 400;

/// What a candidate's run said: enough to tell whether it still fails as the original did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The run's result class.
    pub result: Outcome,
    /// The invariant its result stands for (see [`runner::RunOutcome::failure`]), if it broke any.
    pub failure: Option<String>,
    /// Every invariant it broke, in time order.
    pub broken: Vec<String>,
}

impl Verdict {
    /// The verdict of a finished run.
    pub fn of(run: &runner::RunOutcome) -> Verdict {
        Verdict {
            result: run.result,
            failure: run.failure(),
            broken: run.violations.iter().map(|v| v.invariant.clone()).collect(),
        }
    }
}

/// Runs candidates: in this process one after another ([`InProcess`]), or as parallel child
/// processes (the command line's judge), so a shrink uses every core.
pub trait Judge {
    /// How many candidates are worth running at once (the search speculates this far ahead;
    /// what it keeps is the same as with one at a time).
    fn width(&self) -> usize;
    /// Runs each (candidate, seed, variant) and says what each run gave, in order.
    fn run(&mut self, runs: &[(&Scenario, u64, Variant)]) -> Vec<Verdict>;
}

/// Runs candidates one after another in this process.
pub struct InProcess;

impl Judge for InProcess {
    fn width(&self) -> usize {
        1
    }
    fn run(&mut self, runs: &[(&Scenario, u64, Variant)]) -> Vec<Verdict> {
        runs.iter()
            .map(|(s, seed, v)| Verdict::of(&runner::run(s, *seed, *v)))
            .collect()
    }
}

/// What a candidate must still do to be kept.
#[derive(Clone, Debug)]
enum Target {
    /// The failure the original run's result stands for: the same result class and the same
    /// first invariant broken of that class (what the scenario declares and a user shrinks).
    Failure { result: Outcome, invariant: String },
    /// Break this invariant (`--invariant`), whatever else happens.
    Breaks(String),
}

impl Target {
    fn holds(&self, verdict: &Verdict) -> bool {
        match self {
            Target::Failure { result, invariant } => {
                verdict.result == *result && verdict.failure.as_deref() == Some(invariant)
            }
            Target::Breaks(name) => verdict.broken.iter().any(|b| b == name),
        }
    }

    fn invariant(&self) -> &str {
        match self {
            Target::Failure { invariant, .. } | Target::Breaks(invariant) => invariant,
        }
    }
}

struct Search<'a> {
    seed: u64,
    variant: Variant,
    target: Target,
    /// The other variant when the scenario expects it to pass: a candidate must still hold
    /// the target invariant there, so the failure kept is the variant's flaw, not a world in
    /// which the invariant cannot hold (a calm phase too short to drain anything, say).
    contrast: Option<Variant>,
    runs: u32,
    judge: &'a mut dyn Judge,
    progress: &'a mut dyn FnMut(&str),
}

impl Search<'_> {
    /// The index of the first of `candidates` that is valid and still fails as the target
    /// says, running up to the judge's width of them at once.
    fn first_failing(&mut self, best: &Scenario, candidates: &[Scenario]) -> Option<usize> {
        // Only changed scenarios a user could write: render and parse back through the
        // validator.
        let valid: Vec<bool> = candidates
            .iter()
            .map(|c| {
                c != best
                    && serde_saphyr::to_string(c)
                        .ok()
                        .is_some_and(|text| scenario::parse::parse("candidate.yaml", &text).is_ok())
            })
            .collect();
        let indices: Vec<usize> = (0..candidates.len()).filter(|i| valid[*i]).collect();
        for batch in indices.chunks(self.judge.width().max(1)) {
            let room = MAX_RUNS.saturating_sub(self.runs) as usize;
            let batch = &batch[..batch.len().min(room)];
            if batch.is_empty() {
                return None;
            }
            let runs: Vec<(&Scenario, u64, Variant)> = batch
                .iter()
                .map(|i| (&candidates[*i], self.seed, self.variant))
                .collect();
            self.runs += runs.len() as u32;
            let verdicts = self.judge.run(&runs);
            let failing: Vec<usize> = batch
                .iter()
                .zip(&verdicts)
                .filter(|(_, v)| self.target.holds(v))
                .map(|(i, _)| *i)
                .collect();
            let kept = match self.contrast {
                None => failing.first().copied(),
                Some(other) => {
                    let runs: Vec<(&Scenario, u64, Variant)> = failing
                        .iter()
                        .map(|i| (&candidates[*i], self.seed, other))
                        .collect();
                    self.runs += runs.len() as u32;
                    let invariant = self.target.invariant().to_string();
                    let verdicts = self.judge.run(&runs);
                    failing
                        .iter()
                        .zip(&verdicts)
                        .find(|(_, v)| !v.broken.contains(&invariant))
                        .map(|(i, _)| *i)
                }
            };
            if kept.is_some() {
                return kept;
            }
        }
        None
    }

    /// Replaces `best` with the first of `candidates` that still fails (each with what it
    /// changes); returns its index.
    fn keep_first(
        &mut self,
        best: &mut Scenario,
        candidates: Vec<(Scenario, String)>,
    ) -> Option<usize> {
        let scenarios: Vec<Scenario> = candidates.iter().map(|(c, _)| c.clone()).collect();
        let runs = self.runs;
        let kept = self.first_failing(best, &scenarios);
        match kept {
            _ if self.runs == runs => {}
            Some(i) => {
                (self.progress)(&format!("run {}: kept {}", self.runs, candidates[i].1));
                *best = scenarios[i].clone();
            }
            None => (self.progress)(&format!(
                "run {}: no longer fails: {}",
                self.runs,
                candidates
                    .iter()
                    .map(|(_, what)| what.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        }
        kept
    }

    /// Replaces `best` with `candidate` if it still fails; says whether it did.
    fn try_keep(&mut self, best: &mut Scenario, candidate: Scenario, what: &str) -> bool {
        self.keep_first(best, vec![(candidate, what.to_string())])
            .is_some()
    }
}

/// Shrinks `scenario`'s run at `seed` and `variant`, in this process, keeping its failure
/// (see [`shrink_with`]).
pub fn shrink(
    scenario: &Scenario,
    seed: u64,
    variant: Variant,
    invariant: Option<&str>,
    progress: &mut dyn FnMut(&str),
) -> Result<Shrunk, ShrinkError> {
    shrink_with(scenario, seed, variant, invariant, &mut InProcess, progress)
}

/// Shrinks `scenario`'s run at `seed` and `variant` while it still fails as it did: the same
/// result class and the same first invariant broken of that class — or, with `invariant`,
/// while it still breaks that one. `judge` runs the candidates; `progress` hears about each
/// step. The scenario written keeps every invariant and declares what each variant it ran
/// gives when replayed, so it holds its own `expect:`.
pub fn shrink_with(
    scenario: &Scenario,
    seed: u64,
    variant: Variant,
    invariant: Option<&str>,
    judge: &mut dyn Judge,
    progress: &mut dyn FnMut(&str),
) -> Result<Shrunk, ShrinkError> {
    let mut best = draw::concretize(scenario, seed);
    best.seeds = vec![seed];
    best.expect.retain(|_, e| *e != Outcome::Any);
    let first = judge.run(&[(&best, seed, variant)]).remove(0);
    let target = match invariant {
        Some(name) if first.broken.iter().any(|b| b == name) => Target::Breaks(name.to_string()),
        Some(name) => {
            return Err(ShrinkError::NotBroken {
                seed,
                wanted: name.to_string(),
                broken: if first.broken.is_empty() {
                    "none".into()
                } else {
                    first.broken.join(", ")
                },
            })
        }
        None => Target::Failure {
            result: first.result,
            invariant: first.failure.clone().ok_or(ShrinkError::DoesNotFail {
                seed,
                variant: variant.as_str(),
            })?,
        },
    };
    let name = target.invariant().to_string();
    let original = best.clone();
    let contrast = [Variant::Faithful, Variant::Hardened]
        .into_iter()
        .find(|v| *v != variant && scenario.expect.get(v) == Some(&Outcome::Pass));
    match &target {
        Target::Failure { result, invariant } => progress(&format!(
            "keeping the run's failure: {} breaking {invariant} first",
            result.as_str()
        )),
        Target::Breaks(invariant) => progress(&format!("keeping {invariant} broken")),
    }
    if let Some(other) = contrast {
        progress(&format!(
            "keeping only candidates where {} still holds {name} (the scenario expects it to pass)",
            other.as_str()
        ));
    }
    let mut search = Search {
        seed,
        variant,
        target,
        contrast,
        runs: 1,
        judge,
        progress,
    };
    loop {
        let before = best.clone();
        drop_faults(&mut search, &mut best);
        drop_fault_points(&mut search, &mut best);
        shorten_faults(&mut search, &mut best);
        lower_counts(&mut search, &mut best);
        drop_hosts(&mut search, &mut best);
        shorten_phases(&mut search, &mut best);
        if best == before || search.runs >= MAX_RUNS {
            break;
        }
    }
    // The written scenario declares what each variant it ran gives when replayed (so the
    // file holds its own `expect:`); reach conditions belong to the family, not to it.
    best.reach.clear();
    let mut replays = vec![(&best, seed, variant)];
    if let Some(other) = contrast {
        replays.push((&best, seed, other));
    }
    let verdicts = search.judge.run(&replays);
    let declared: Vec<(Variant, Outcome)> = replays
        .iter()
        .zip(&verdicts)
        .map(|((_, _, v), verdict)| (*v, verdict.result))
        .collect();
    best.expect.clear();
    best.expect.extend(declared);
    best.name = format!("{}-min", scenario.name);
    best.description = format!(
        "{} seed {seed} ({}) shrunk by orrery shrink: still breaks {name}. {}",
        scenario.name,
        variant.as_str(),
        changes(&original, &best).join(", ")
    );
    Ok(Shrunk {
        changes: changes(&original, &best),
        scenario: best,
        invariant: name,
        runs: search.runs,
    })
}

/// ddmin over the fault steps: drop chunks of halving size while the run still fails. The
/// chunks after the current one are tried as one batch (as many as the judge runs at once);
/// the first that still fails is kept, so the result is the same as trying them in turn.
fn drop_faults(search: &mut Search<'_>, best: &mut Scenario) {
    let mut chunk = best.faults.len().div_ceil(2).max(1);
    while !best.faults.is_empty() {
        let mut start = 0;
        while start < best.faults.len() {
            let width = search.judge.width().max(1);
            let candidates: Vec<(Scenario, String)> = (0..width)
                .map(|k| start + k * chunk)
                .take_while(|s| *s < best.faults.len())
                .map(|s| {
                    let mut candidate = best.clone();
                    let end = (s + chunk).min(candidate.faults.len());
                    candidate.faults.drain(s..end);
                    (candidate, format!("without fault steps {}..{}", s + 1, end))
                })
                .collect();
            let tried = candidates.len();
            match search.keep_first(best, candidates) {
                Some(k) => start += k * chunk,
                None => start += tried * chunk,
            }
            if search.runs >= MAX_RUNS {
                return;
            }
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
}

fn drop_fault_points(search: &mut Search<'_>, best: &mut Scenario) {
    if best.buggify.is_none() {
        return;
    }
    let mut candidate = best.clone();
    candidate.buggify = None;
    if search.try_keep(best, candidate, "without fault points") {
        return;
    }
    let mut i = 0;
    while let Some(point) = best.buggify.as_ref().and_then(|b| b.points.get(i)).copied() {
        let mut candidate = best.clone();
        if let Some(b) = candidate.buggify.as_mut() {
            b.points.remove(i);
        }
        if !search.try_keep(best, candidate, &format!("without fault point {point}")) {
            i += 1;
        }
    }
}

/// True for a step that heals an earlier fault (repair, restart, a knob or latency put back).
fn heals(step: &FaultStep) -> bool {
    step.repair.is_some() || step.restart.is_some()
}

/// Brings each healing step halfway closer to the step before it (a shorter fault).
fn shorten_faults(search: &mut Search<'_>, best: &mut Scenario) {
    for i in 1..best.faults.len() {
        if !heals(&best.faults[i]) {
            continue;
        }
        let (previous, at) = (best.faults[i - 1].at, best.faults[i].at);
        let halfway = previous + (at - previous) / 2;
        let halfway = Duration::from_millis(halfway.as_millis() as u64 / 10 * 10);
        if halfway <= previous {
            continue;
        }
        let mut candidate = best.clone();
        candidate.faults[i].at = halfway;
        search.try_keep(
            best,
            candidate,
            &format!("fault step {} at {halfway:?}", i + 1),
        );
    }
}

/// Halves a count while the run still fails (`set` writes it into a candidate).
fn halve(
    search: &mut Search<'_>,
    best: &mut Scenario,
    name: &str,
    get: fn(&Scenario) -> usize,
    set: fn(&mut Scenario, usize),
    floor: usize,
) {
    loop {
        let now = get(best);
        let half = (now / 2).max(floor);
        if half >= now {
            return;
        }
        let mut candidate = best.clone();
        set(&mut candidate, half);
        if !search.try_keep(best, candidate, &format!("{name} {half}")) {
            return;
        }
    }
}

/// Lowers the counts that matter to this world (a count of a role it lacks is left alone).
fn lower_counts(search: &mut Search<'_>, best: &mut Scenario) {
    let has = |s: &Scenario, role| s.topology.hosts.iter().any(|h| h.has(role));
    if has(best, Role::Reporter) {
        halve(
            search,
            best,
            "queue capacity",
            |s| s.reporter.queue_capacity,
            |s, n| s.reporter.queue_capacity = n,
            1,
        );
    }
    // A replayed workload's apps are the trace's: its count is not the shrinker's to halve.
    if has(best, Role::Workload) && best.workload.trace.is_none() {
        halve(
            search,
            best,
            "applications",
            |s| s.workload.applications,
            |s, n| s.workload.applications = n,
            1,
        );
        halve(
            search,
            best,
            "repositories",
            |s| s.workload.repositories,
            |s, n| s.workload.repositories = n,
            1,
        );
    }
    // Rollouts are the workload's only where a controller runs them.
    if has(best, Role::Workload) && has(best, Role::Rollouts) && best.workload.rollouts.is_some() {
        halve(
            search,
            best,
            "rollouts",
            rollouts_count,
            |s, n| {
                if let Some(load) = s.workload.rollouts.as_mut() {
                    load.count = n;
                }
            },
            1,
        );
    }
    if has(best, Role::Runtime) {
        halve(
            search,
            best,
            "runtimes per host",
            |s| s.tunnel.runtimes_per_host as usize,
            |s, n| s.tunnel.runtimes_per_host = n as u32,
            1,
        );
    }
}

/// The Rollouts the workload creates (0 without a Rollouts load).
fn rollouts_count(s: &Scenario) -> usize {
    s.workload.rollouts.as_ref().map_or(0, |r| r.count)
}

/// Drops reporter and client hosts beyond the first, last first.
fn drop_hosts(search: &mut Search<'_>, best: &mut Scenario) {
    for role in [Role::Reporter, Role::Client] {
        loop {
            let of_role: Vec<String> = best
                .topology
                .hosts
                .iter()
                .filter(|h| h.role == role && h.roles.is_empty())
                .map(|h| h.name.clone())
                .collect();
            let Some(last) = of_role.last().filter(|_| of_role.len() > 1).cloned() else {
                break;
            };
            let mut candidate = best.clone();
            candidate.topology.hosts.retain(|h| h.name != last);
            if let Some(replicas) = candidate.reporter.replicas.as_mut() {
                *replicas = (*replicas).min(of_role.len() as u32 - 1).max(1);
            }
            candidate.faults.retain(|f| !mentions(f, &last));
            if !search.try_keep(best, candidate, &format!("without host {last}")) {
                break;
            }
        }
    }
}

/// True when a fault step names `host`.
fn mentions(step: &FaultStep, host: &str) -> bool {
    let pair = |p: &Option<[String; 2]>| p.as_ref().is_some_and(|[a, b]| a == host || b == host);
    pair(&step.partition)
        || pair(&step.repair)
        || step.crash.as_deref() == Some(host)
        || step.restart.as_deref() == Some(host)
        || step
            .latency
            .as_ref()
            .is_some_and(|l| l.between.iter().any(|h| h == host))
}

fn shorten_phases(search: &mut Search<'_>, best: &mut Scenario) {
    let last_fault = best.faults.iter().map(|f| f.at).max().unwrap_or_default();
    let shorter = (best.duration * 3 / 4).max(last_fault + Duration::from_secs(1));
    let shorter = Duration::from_secs(shorter.as_secs().max(1));
    if shorter < best.duration {
        let mut candidate = best.clone();
        candidate.duration = shorter;
        search.try_keep(best, candidate, &format!("fault phase {shorter:?}"));
    }
    // A shorter calm phase only where the other variant still passes in it: without that
    // witness, a failure kept with a one-second calm phase may be a world in which nothing
    // could converge (a hardened failure of a swarm family, whose faithful is `any`), not the
    // variant's flaw.
    let calm = Duration::from_secs((best.calm / 2).as_secs());
    if calm < best.calm && search.contrast.is_some() {
        let mut candidate = best.clone();
        candidate.calm = calm;
        search.try_keep(best, candidate, &format!("calm phase {calm:?}"));
    }
}

/// What shrinking changed, one line per figure that moved.
fn changes(before: &Scenario, after: &Scenario) -> Vec<String> {
    let points = |s: &Scenario| s.buggify.as_ref().map_or(0, |b| b.points.len());
    let hosts = |s: &Scenario, role: Role| s.topology.hosts.iter().filter(|h| h.has(role)).count();
    let figures: [(&str, String, String); 10] = [
        (
            "fault steps",
            before.faults.len().to_string(),
            after.faults.len().to_string(),
        ),
        (
            "fault points",
            points(before).to_string(),
            points(after).to_string(),
        ),
        (
            "applications",
            before.workload.applications.to_string(),
            after.workload.applications.to_string(),
        ),
        (
            "repositories",
            before.workload.repositories.to_string(),
            after.workload.repositories.to_string(),
        ),
        (
            "rollouts",
            rollouts_count(before).to_string(),
            rollouts_count(after).to_string(),
        ),
        (
            "queue capacity",
            before.reporter.queue_capacity.to_string(),
            after.reporter.queue_capacity.to_string(),
        ),
        (
            "reporter hosts",
            hosts(before, Role::Reporter).to_string(),
            hosts(after, Role::Reporter).to_string(),
        ),
        (
            "client hosts",
            hosts(before, Role::Client).to_string(),
            hosts(after, Role::Client).to_string(),
        ),
        (
            "fault phase",
            format!("{:?}", before.duration),
            format!("{:?}", after.duration),
        ),
        (
            "calm phase",
            format!("{:?}", before.calm),
            format!("{:?}", after.calm),
        ),
    ];
    figures
        .into_iter()
        .filter(|(_, a, b)| a != b)
        .map(|(name, a, b)| format!("{name} {a} → {b}"))
        .collect()
}
