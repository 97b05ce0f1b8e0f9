//! The promotion invariants (issue 15), judged at the end against the Git provider's
//! history and the orchestrator's read model:
//!
//! - `promotion_commit_once` (safety): one promotion commit per environment per release —
//!   no (task, step, file) has two commits (on `main`, or on a pull request's branch). A second one is a promotion run twice
//!   (a new leader redoing a step it found unrecorded, a retry after a lost answer).
//! - `promotion_ordered` (safety): no environment receives a release's promotion commit
//!   before every environment it depends on verified that release healthy.
//! - `promotion_terminates` (liveness): every release ends (Succeeded, Failed or
//!   Terminated) within its timeout after it started (plus slack for the orchestrator's
//!   polls and calls); one still running at the end past that is stuck.

use std::collections::BTreeMap;

use serde_json::json;

use orrery_system::platform::promotions::{EnvPhase, Release};

use super::{Checker, Class, FinalState, Violation};

/// A promotion commit (any branch), read from its trailers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromotionCommit {
    /// The PromotionTask (`<release>-<environment>`).
    pub task: String,
    /// The step.
    pub step: u32,
    /// The file it wrote.
    pub path: String,
    /// Its SHA.
    pub sha: String,
    /// Commit time, Unix ms.
    pub unix_ms: u64,
}

/// What the promotion checkers judge.
#[derive(Clone, Debug, Default)]
pub struct PromotionTruth {
    /// The orchestrator's releases.
    pub releases: Vec<Release>,
    /// The promotion commits on every branch, oldest first.
    pub commits: Vec<PromotionCommit>,
    /// Flow → environment → the environments it depends on (the trigger's: none).
    pub depends_on: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// Flow → its timeout (ms).
    pub timeout_ms: BTreeMap<String, u64>,
    /// Slack on the timeout: the orchestrator looks every poll and a call may take its
    /// timeout (ms).
    pub slack_ms: u64,
    /// Simulated epoch (Unix ms) to turn commit times into run time.
    pub epoch_ms: u64,
}

/// Duplicate promotion commits: (task, step, path) → their SHAs, for those with two or more.
pub fn duplicates(truth: &PromotionTruth) -> BTreeMap<(String, u32, String), Vec<String>> {
    let mut by: BTreeMap<(String, u32, String), Vec<String>> = BTreeMap::new();
    for c in &truth.commits {
        by.entry((c.task.clone(), c.step, c.path.clone()))
            .or_default()
            .push(c.sha.clone());
    }
    by.retain(|_, shas| shas.len() > 1);
    by
}

fn run_ms(truth: &PromotionTruth, unix_ms: u64) -> u64 {
    unix_ms.saturating_sub(truth.epoch_ms)
}

/// `promotion_commit_once`.
pub struct PromotionCommitOnce;

impl Checker for PromotionCommitOnce {
    fn name(&self) -> &'static str {
        "promotion_commit_once"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = state.promotions.as_ref()?;
        let twice = duplicates(truth);
        let ((task, step, path), shas) = twice.iter().next()?;
        let second = truth.commits.iter().find(|c| c.sha == shas[1])?;
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: run_ms(truth, second.unix_ms),
            host: "git".into(),
            details: json!({
                "reason": format!(
                    "{} promotion(s) committed more than once; {task} step {step} wrote {path} in {} commits",
                    twice.len(),
                    shas.len()
                ),
                "duplicated": twice.len(),
                "task": task,
                "step": step,
                "path": path,
                "commits": shas,
            }),
        })
    }
}

/// `promotion_ordered`.
pub struct PromotionOrdered;

impl Checker for PromotionOrdered {
    fn name(&self) -> &'static str {
        "promotion_ordered"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = state.promotions.as_ref()?;
        for release in &truth.releases {
            let Some(deps) = truth.depends_on.get(&release.flow) else {
                continue;
            };
            for (environment, needs) in deps {
                let task = format!("{}-{environment}", release.id);
                let Some(first) = truth.commits.iter().find(|c| c.task == task) else {
                    continue;
                };
                for need in needs {
                    let verified = release
                        .environments
                        .get(need)
                        .filter(|s| s.phase == EnvPhase::Succeeded)
                        .map(|s| s.ended_ms);
                    // Verified before the commit, as the orchestrator saw it end.
                    if verified.is_some_and(|at| at <= first.unix_ms) {
                        continue;
                    }
                    return Some(Violation {
                        invariant: self.name().into(),
                        class: Class::Safety,
                        at_ms: run_ms(truth, first.unix_ms),
                        host: "git".into(),
                        details: json!({
                            "reason": format!(
                                "{} reached {environment} ({}) before {need} verified it",
                                release.id, first.sha
                            ),
                            "release": release.id,
                            "environment": environment,
                            "depends_on": need,
                            "commit": first.sha,
                        }),
                    });
                }
            }
        }
        None
    }
}

/// `promotion_terminates`.
pub struct PromotionTerminates;

impl Checker for PromotionTerminates {
    fn name(&self) -> &'static str {
        "promotion_terminates"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = state.promotions.as_ref()?;
        for release in &truth.releases {
            let timeout = truth
                .timeout_ms
                .get(&release.flow)
                .copied()
                .unwrap_or(u64::MAX);
            // A queued release that never started is judged from when it was created.
            let from = if release.started_ms > 0 {
                release.started_ms
            } else {
                release.created_ms
            };
            let over =
                |end_ms: u64| end_ms.saturating_sub(from) > timeout.saturating_add(truth.slack_ms);
            let end_unix = truth.epoch_ms + state.end_ms;
            let stuck = !release.phase.is_final() && over(end_unix);
            let late = release.phase.is_final() && over(release.ended_ms);
            if stuck || late {
                let stuck_in: Vec<&String> = release
                    .environments
                    .iter()
                    .filter(|(_, s)| s.phase == EnvPhase::Promoting)
                    .map(|(n, _)| n)
                    .collect();
                return Some(Violation {
                    invariant: self.name().into(),
                    class: Class::Liveness,
                    at_ms: state.end_ms,
                    host: "platform".into(),
                    details: json!({
                        "reason": if stuck {
                            format!("{} is still {:?} at the end (promoting {stuck_in:?})", release.id, release.phase)
                        } else {
                            format!("{} ended {} ms after it started, past its timeout of {timeout} ms", release.id, release.ended_ms.saturating_sub(release.started_ms))
                        },
                        "release": release.id,
                        "phase": release.phase,
                    }),
                });
            }
        }
        None
    }
}
