//! Shrinking: delta-debugs a failing run down to a small scenario that still breaks the same
//! invariant, so a 23-fault, 10,000-app failure becomes something a person can read.
//!
//! Starting from the plain scenario the seed ran (a swarm's draws made concrete), it tries,
//! until none helps: dropping fault steps (halves, quarters, … single steps, as ddmin does),
//! dropping fault points, bringing healing steps closer to the fault they heal (shorter
//! faults), lowering the queue capacity, the number of applications and repositories,
//! dropping surplus reporter and client hosts, and shortening the fault and calm phases. A
//! candidate is kept when it is a valid scenario, the same seed and variant still break the
//! target invariant and — when the scenario expects the other variant to pass — the other
//! variant still holds it (so what is kept is the variant's flaw, not a world in which the
//! invariant cannot hold, such as a calm phase too short to drain a backlog). Every
//! candidate is a whole deterministic run, so the result replays exactly.

use std::time::Duration;

use crate::checkers::Class;
use crate::harness::runner;
use crate::scenario::model::{FaultStep, Role};
use crate::scenario::{self, swarm, Outcome, Scenario, Variant};

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

struct Search<'a> {
    seed: u64,
    variant: Variant,
    invariant: String,
    /// The other variant when the scenario expects it to pass: a candidate must still pass
    /// there, so the failure kept is the variant's flaw, not a world in which the invariant
    /// cannot hold (a calm phase too short to drain anything, say).
    contrast: Option<Variant>,
    runs: u32,
    progress: &'a mut dyn FnMut(&str),
}

impl Search<'_> {
    /// Whether `candidate` is valid and still breaks the invariant.
    fn fails(&mut self, candidate: &Scenario) -> bool {
        if self.runs >= MAX_RUNS {
            return false;
        }
        // Only scenarios a user could write: render and parse back through the validator.
        let Ok(text) = serde_saphyr::to_string(candidate) else {
            return false;
        };
        if scenario::parse::parse("candidate.yaml", &text).is_err() {
            return false;
        }
        self.runs += 1;
        let breaks = |variant| {
            runner::run(candidate, self.seed, variant)
                .violations
                .iter()
                .any(|v| v.invariant == self.invariant)
        };
        if !breaks(self.variant) {
            return false;
        }
        match self.contrast {
            Some(other) => {
                self.runs += 1;
                !breaks(other)
            }
            None => true,
        }
    }

    /// Replaces `best` with `candidate` if it still fails; says whether it did.
    fn try_keep(&mut self, best: &mut Scenario, candidate: Scenario, what: &str) -> bool {
        if candidate == *best {
            return false;
        }
        let runs = self.runs;
        let fails = self.fails(&candidate);
        if self.runs > runs {
            let verdict = if fails { "kept" } else { "no longer fails:" };
            (self.progress)(&format!("run {}: {verdict} {what}", self.runs));
        }
        if fails {
            *best = candidate;
        }
        fails
    }
}

/// Shrinks `scenario`'s run at `seed` and `variant` while `invariant` (default: the first one
/// broken of the class the run's result stands for) still breaks. `progress` hears about each
/// step kept.
pub fn shrink(
    scenario: &Scenario,
    seed: u64,
    variant: Variant,
    invariant: Option<&str>,
    progress: &mut dyn FnMut(&str),
) -> Result<Shrunk, ShrinkError> {
    let mut best = swarm::concretize(scenario, seed);
    best.seeds = vec![seed];
    let first = runner::run(&best, seed, variant);
    let broken: Vec<String> = first
        .violations
        .iter()
        .map(|v| v.invariant.clone())
        .collect();
    let target = match invariant {
        Some(name) if broken.iter().any(|b| b == name) => name.to_string(),
        Some(name) => {
            return Err(ShrinkError::NotBroken {
                seed,
                wanted: name.to_string(),
                broken: if broken.is_empty() {
                    "none".into()
                } else {
                    broken.join(", ")
                },
            })
        }
        None => the_failure(&first).ok_or(ShrinkError::DoesNotFail {
            seed,
            variant: variant.as_str(),
        })?,
    };
    let original = best.clone();
    let contrast = [Variant::Faithful, Variant::Hardened]
        .into_iter()
        .find(|v| *v != variant && scenario.expect.get(v) == Some(&Outcome::Pass));
    if let Some(other) = contrast {
        progress(&format!(
            "keeping only candidates where {} still holds {target} (the scenario expects it to pass)",
            other.as_str()
        ));
    }
    let mut search = Search {
        seed,
        variant,
        invariant: target.clone(),
        contrast,
        runs: 1,
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
    // The written scenario checks the invariant it keeps breaking, for the one variant, and
    // expects what that gives when replayed (so the file holds its own `expect:`).
    best.invariants.retain(|i| i.name == target);
    best.reach.clear();
    best.expect.clear();
    best.expect
        .insert(variant, runner::run(&best, seed, variant).result);
    best.name = format!("{}-min", scenario.name);
    best.description = format!(
        "{} seed {seed} ({}) shrunk by orrery shrink: still breaks {target}. {}",
        scenario.name,
        variant.as_str(),
        changes(&original, &best).join(", ")
    );
    Ok(Shrunk {
        changes: changes(&original, &best),
        scenario: best,
        invariant: target,
        runs: search.runs,
    })
}

/// The invariant whose failure a run's result stands for: the first one broken of the
/// result's class (a run that is a safety violation may also have broken a liveness invariant
/// first — a write run twice, then a tunnel slow to come back — and it is the safety violation
/// the scenario declares and a user shrinks).
fn the_failure(run: &runner::RunOutcome) -> Option<String> {
    let class = match run.result {
        Outcome::SafetyViolation => Some(Class::Safety),
        Outcome::LivenessTimeout => Some(Class::Liveness),
        _ => None,
    };
    run.violations
        .iter()
        .find(|v| Some(v.class) == class)
        .or(run.violations.first())
        .map(|v| v.invariant.clone())
}

/// ddmin over the fault steps: drop chunks of halving size while the run still fails.
fn drop_faults(search: &mut Search<'_>, best: &mut Scenario) {
    let mut chunk = best.faults.len().div_ceil(2).max(1);
    while !best.faults.is_empty() {
        let mut start = 0;
        while start < best.faults.len() {
            let mut candidate = best.clone();
            let end = (start + chunk).min(candidate.faults.len());
            candidate.faults.drain(start..end);
            let what = format!("without fault steps {}..{}", start + 1, end);
            if !search.try_keep(best, candidate, &what) {
                start += chunk;
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
    let calm = Duration::from_secs((best.calm / 2).as_secs());
    if calm < best.calm {
        let mut candidate = best.clone();
        candidate.calm = calm;
        search.try_keep(best, candidate, &format!("calm phase {calm:?}"));
    }
}

/// What shrinking changed, one line per figure that moved.
fn changes(before: &Scenario, after: &Scenario) -> Vec<String> {
    let points = |s: &Scenario| s.buggify.as_ref().map_or(0, |b| b.points.len());
    let hosts = |s: &Scenario, role: Role| s.topology.hosts.iter().filter(|h| h.has(role)).count();
    let figures: [(&str, String, String); 9] = [
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
