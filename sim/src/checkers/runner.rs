//! The Codefresh Runner's invariants (issue 52), judged from the trace and, at the end,
//! from the platform's builds and the objects left in the cluster:
//!
//! - `runner_build_outcome` (safety): no build fails on a task whose effect is in the
//!   cluster — a creation reported failed although its object was created for the build
//!   (the agent ran the task again after its first status was lost, met `AlreadyExists`
//!   and reported that as an error, `runner-research.md` §1.6-1.7).
//! - `runner_builds_finish` (liveness): at the end every build has ended (success,
//!   failure, error or terminated).
//! - `runner_no_orphans` (liveness): at the end no Pod or PersistentVolumeClaim of an
//!   ended build is left in the cluster (§4 rows 5 and 18).
//! - `runner_stall_detected` (safety): an agent that has not polled the platform
//!   successfully for [`STALL_BOUND_MS`] is not reported ready by its readiness probe — a
//!   stalled agent whose `/health` still answers 200 is never restarted (§1.8, §4 row 4).
//! - `runner_trigger_once` (safety): at the end no webhook delivery id started more than
//!   one build — a provider's redelivery of one event is not a new event (§4 row 9).
//! - `runner_concurrency_limit` (safety): at no moment were more builds of a pipeline, of
//!   one of its branches, of one of its triggers or of the account admitted (elected and not
//!   yet ended) than the pipeline's, the branch's, the trigger's or the account's concurrency
//!   limit — judged from each build's
//!   admission and end times against the scenario's limits (§4 row 8).
//! - `runner_volume_kept` (safety): no dind volume's directory was removed while a build's
//!   claim held it — the local volumes cleaner marks the least recently used volume with no
//!   in-use check, and a long build's volume, used last at its start, is the oldest (§4 row
//!   12, **inferred**).
//! - `runner_engine_memory` (safety): no build's engine was killed for the memory its
//!   unsent log lines took — the engine's "memory leak, caused by delays in
//!   container-logger" (§4 row 13; one line a request is **inferred**).
//! - `runner_logs_complete` (liveness): at the end every log line a build's engine wrote is
//!   in the platform's log, and every client that followed the build to its end over the
//!   broadcaster received each line once, in order (§2.7).
//! - `runner_proxy_truthful` (safety): no `proxy` agent task is held by the platform as
//!   done with `Success` while what it asked for did not take effect (its commit is not in
//!   the repository) — venona reports any answer of the target, a 409 or 401 too, as
//!   success (§1.4, §4 row 16).
//! - `runner_cron_once` (safety): every tick of a cron trigger due before the calm phase
//!   started exactly one build, or was reported missed; no tick started two (§4 row 10:
//!   cronus replicas in HA each fire it; a tick due while cronus is down is lost silently).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use orrery_system::core::runner::Outcome;
use orrery_system::observe::{RunnerEvent, WorldEvent};
use orrery_system::platform::runner::queue::TaskState;
use orrery_system::platform::runner::{Build, CronTrigger, Tick};

use super::{Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;

/// How long an agent may go without a successful poll and still be reported ready: two
/// readiness periods past hardened's 30 s, with slack for a poll in flight.
pub const STALL_BOUND_MS: u64 = 60_000;

/// What the Runner's end-state checkers judge.
#[derive(Clone, Debug, Default)]
pub struct RunnerTruth {
    /// The platform's builds, oldest first.
    pub builds: Vec<Build>,
    /// The builds' objects left in the cluster: (kind, name, build).
    pub objects: Vec<(String, String, String)>,
    /// The pipeline's concurrency limit, as the scenario sets it.
    pub limit: Option<u32>,
    /// The pipeline's branch concurrency limit, as the scenario sets it.
    pub branch_limit: Option<u32>,
    /// The account's concurrency limit, as the scenario sets it.
    pub account_limit: Option<u32>,
    /// Each pipeline's trigger concurrency limit, as the scenario sets it.
    pub trigger_limit: Option<u32>,
    /// The builds' clock at the run's start (Unix ms): their times minus this are run times.
    pub started_ms: u64,
    /// The cron triggers' ledger, by name.
    pub crons: BTreeMap<String, CronTrigger>,
    /// Ticks reported missed.
    pub missed: Vec<Tick>,
    /// When the calm phase started (Unix ms): ticks due until then are owed.
    pub calm_ms: u64,
    /// The platform's `proxy` agent tasks.
    pub proxies: Vec<ProxyTruth>,
    /// The commit messages in the repository the proxy tasks commit to, with how many
    /// commits carry each.
    pub committed: BTreeMap<String, u32>,
    /// Pods per agent (`runner.replicas`).
    pub replicas: u32,
}

/// One `proxy` agent task as the platform holds it at the end.
#[derive(Clone, Debug, PartialEq)]
pub struct ProxyTruth {
    /// Its id.
    pub task: String,
    /// The commit message it asked for.
    pub message: String,
    /// Where it is: `Done` with the status the agent reported.
    pub state: TaskState,
}

impl RunnerTruth {
    /// Proxy tasks the platform holds as done with `Success` whose commit is not in the
    /// repository: the user was told a request took effect that the target refused.
    pub fn false_successes(&self) -> Vec<&ProxyTruth> {
        self.proxies
            .iter()
            .filter(|p| {
                matches!(
                    p.state,
                    TaskState::Done {
                        outcome: Outcome::Success,
                        ..
                    }
                ) && !self.committed.contains_key(&p.message)
            })
            .collect()
    }
}

/// What became of one cron tick.
#[derive(Clone, Debug, PartialEq)]
pub struct TickAccount<'a> {
    /// The tick.
    pub tick: Tick,
    /// Due before the calm phase (owed a build or a missed report).
    pub owed: bool,
    /// The builds it started.
    pub builds: Vec<&'a Build>,
    /// Reported missed.
    pub missed: bool,
}

/// Every cron tick due before the calm phase, and every tick that started a build, with
/// what became of it, by trigger and time: what `runner_cron_once` judges and the report
/// counts.
pub fn cron_accounts(truth: &RunnerTruth) -> Vec<TickAccount<'_>> {
    let mut accounts: BTreeMap<Tick, TickAccount<'_>> = BTreeMap::new();
    let account = |tick: Tick| TickAccount {
        tick,
        owed: false,
        builds: Vec::new(),
        missed: false,
    };
    for (name, cron) in &truth.crons {
        let every = cron.every_ms.max(1);
        let mut scheduled = (cron.created_ms / every + 1) * every;
        while scheduled <= truth.calm_ms {
            let tick = Tick {
                trigger: name.clone(),
                scheduled_ms: scheduled,
            };
            accounts
                .entry(tick.clone())
                .or_insert_with(|| account(tick))
                .owed = true;
            scheduled += every;
        }
    }
    for build in &truth.builds {
        if let Some(tick) = &build.tick {
            accounts
                .entry(tick.clone())
                .or_insert_with(|| account(tick.clone()))
                .builds
                .push(build);
        }
    }
    for tick in &truth.missed {
        accounts
            .entry(tick.clone())
            .or_insert_with(|| account(tick.clone()))
            .missed = true;
    }
    accounts.into_values().collect()
}

/// `runner_cron_once`.
pub struct CronOnce;

impl Checker for CronOnce {
    fn name(&self) -> &'static str {
        "runner_cron_once"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = state.runner.as_ref()?;
        let accounts = cron_accounts(truth);
        let at = |ms: u64| ms.saturating_sub(truth.started_ms);
        // Two builds, or a build and a missed report: the tick was handled twice.
        let duplicated: Vec<&TickAccount<'_>> = accounts
            .iter()
            .filter(|a| a.builds.len() + usize::from(a.missed) > 1)
            .collect();
        let lost: Vec<&TickAccount<'_>> = accounts
            .iter()
            .filter(|a| a.owed && a.builds.is_empty() && !a.missed)
            .collect();
        let (first, reason) = if let Some(first) = duplicated.first() {
            let reason = format!(
                "the tick of cron trigger {} due at {} ms started {} builds ({}){}; {} ticks were handled more than once",
                first.tick.trigger,
                at(first.tick.scheduled_ms),
                first.builds.len(),
                first.builds.iter().map(|b| b.id.as_str()).collect::<Vec<_>>().join(", "),
                if first.missed { " and was reported missed" } else { "" },
                duplicated.len()
            );
            (first, reason)
        } else {
            let first = lost.first()?;
            let reason = format!(
                "the tick of cron trigger {} due at {} ms was neither run nor reported missed; {} ticks were lost",
                first.tick.trigger,
                at(first.tick.scheduled_ms),
                lost.len()
            );
            (first, reason)
        };
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: first
                .builds
                .get(1)
                .map_or(at(first.tick.scheduled_ms), |b| at(b.created_ms)),
            host: "platform".into(),
            details: json!({
                "reason": reason,
                "trigger": first.tick.trigger,
                "scheduled_ms": at(first.tick.scheduled_ms),
                "builds": first.builds.iter().map(|b| &b.id).collect::<Vec<_>>(),
                "duplicated_ticks": duplicated.len(),
                "lost_ticks": lost.len(),
            }),
        })
    }
}

/// `runner_trigger_once`.
pub struct TriggerOnce;

impl Checker for TriggerOnce {
    fn name(&self) -> &'static str {
        "runner_trigger_once"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = state.runner.as_ref()?;
        let mut started: BTreeMap<&str, Vec<&Build>> = BTreeMap::new();
        for build in &truth.builds {
            if let Some(delivery) = &build.delivery {
                started.entry(delivery.as_str()).or_default().push(build);
            }
        }
        let duplicated: Vec<(&str, Vec<&Build>)> =
            started.into_iter().filter(|(_, b)| b.len() > 1).collect();
        let (delivery, builds) = duplicated.first()?;
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: builds[1].created_ms.saturating_sub(truth.started_ms),
            host: "platform".into(),
            details: json!({
                "reason": format!(
                    "webhook delivery {delivery} started {} builds ({}); {} deliveries started more than one",
                    builds.len(),
                    builds.iter().map(|b| b.id.as_str()).collect::<Vec<_>>().join(", "),
                    duplicated.len()
                ),
                "delivery": delivery,
                "builds": builds.iter().map(|b| &b.id).collect::<Vec<_>>(),
            }),
        })
    }
}

/// `runner_concurrency_limit`.
pub struct ConcurrencyLimit;

impl Checker for ConcurrencyLimit {
    fn name(&self) -> &'static str {
        "runner_concurrency_limit"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = state.runner.as_ref()?;
        // Each scope a limit applies to: its key for a build (none: the limit does not
        // hold that build), and the limit.
        type Key = fn(&Build) -> Option<String>;
        let scopes: [(&str, Option<u32>, Key); 4] = [
            ("pipeline", truth.limit, |b| Some(b.pipeline.clone())),
            ("branch", truth.branch_limit, |b| {
                Some(format!("{}@{}", b.pipeline, b.branch))
            }),
            ("account", truth.account_limit, |_| Some(String::new())),
            ("trigger", truth.trigger_limit, |b| {
                b.trigger.as_ref().map(|t| format!("{}#{t}", b.pipeline))
            }),
        ];
        let all = admissions(&truth.builds);
        for (scope, limit, key) in scopes {
            let Some(limit) = limit else {
                continue;
            };
            let mut moments: BTreeMap<String, Vec<(u64, i32, &str)>> = BTreeMap::new();
            for &(at_ms, change, build) in &all {
                if let Some(key) = key(build) {
                    moments
                        .entry(key)
                        .or_default()
                        .push((at_ms, change, build.id.as_str()));
                }
            }
            for (of, list) in moments {
                let mut admitted = 0i32;
                for (at_ms, change, build) in list {
                    admitted += change;
                    if change > 0 && admitted > limit as i32 {
                        let what = match scope {
                            "pipeline" => format!("builds of pipeline {of}"),
                            "branch" => format!("builds of branch {of}"),
                            "trigger" => format!("builds of trigger {of}"),
                            _ => "builds of the account".to_string(),
                        };
                        return Some(Violation {
                            invariant: self.name().into(),
                            class: Class::Safety,
                            at_ms: at_ms.saturating_sub(truth.started_ms),
                            host: "platform".into(),
                            details: json!({
                                "reason": format!(
                                    "{admitted} {what} were admitted at once (its limit is {limit}) when {build} was"
                                ),
                                (scope): of,
                                "build": build,
                                "admitted": admitted,
                                "limit": limit,
                            }),
                        });
                    }
                }
            }
        }
        None
    }
}

/// Each admission (+1) and end (-1) of an admitted build, in time order; an end at the same
/// moment as an admission comes first (it frees its place first). What
/// `runner_concurrency_limit` judges per pipeline and the peak figure counts.
pub fn admissions(builds: &[Build]) -> Vec<(u64, i32, &Build)> {
    let mut moments = Vec::new();
    for build in builds {
        let Some(admitted) = build.admitted_ms else {
            continue;
        };
        moments.push((admitted, 1, build));
        if let Some(ended) = build.finished_ms {
            moments.push((ended, -1, build));
        }
    }
    moments.sort_by(|a, b| (a.0, a.1, &a.2.id).cmp(&(b.0, b.1, &b.2.id)));
    moments
}

/// `runner_build_outcome`.
#[derive(Default)]
pub struct BuildOutcome {
    /// Pods and claims created so far (`pods/<name>`, `persistentvolumeclaims/<name>`).
    created: BTreeSet<String>,
}

impl Checker for BuildOutcome {
    fn name(&self) -> &'static str {
        "runner_build_outcome"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        if let Some(WorldEvent::ApiWrite {
            verb,
            resource,
            name,
            ..
        }) = event.world()
        {
            if verb == "create" && (resource == "pods" || resource == "persistentvolumeclaims") {
                self.created.insert(format!("{resource}/{name}"));
            }
            return None;
        }
        let Some(RunnerEvent::Build {
            build,
            status,
            reason,
        }) = event.runner()
        else {
            return None;
        };
        if status != "error" {
            return None;
        }
        // The platform's reason for a failed creation: "<TaskType> <object>: <why>".
        let (task, rest) = reason.split_once(' ')?;
        let (object, why) = rest.split_once(": ")?;
        let resource = match task {
            "CreatePod" => "pods",
            "CreatePvc" => "persistentvolumeclaims",
            _ => return None,
        };
        if !self.created.contains(&format!("{resource}/{object}")) {
            return None;
        }
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: event.at_ms,
            host: event.host.clone(),
            details: json!({
                "reason": format!(
                    "build {build} failed on {task} {object} ({why}), but {object} had been created for it"
                ),
                "build": build,
                "task": task,
                "object": object,
            }),
        })
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}

/// `runner_volume_kept`.
pub struct VolumeKept;

impl Checker for VolumeKept {
    fn name(&self) -> &'static str {
        "runner_volume_kept"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        let Some(RunnerEvent::Volume {
            volume,
            claim,
            action,
        }) = event.runner()
        else {
            return None;
        };
        if action != "removed" || claim.is_empty() {
            return None;
        }
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: event.at_ms,
            host: event.host.clone(),
            details: json!({
                "reason": format!(
                    "the local volumes cleaner removed {volume}'s directory while claim {claim} held it"
                ),
                "volume": volume,
                "claim": claim,
            }),
        })
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}

/// `runner_engine_memory`.
pub struct EngineMemory;

impl Checker for EngineMemory {
    fn name(&self) -> &'static str {
        "runner_engine_memory"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        let Some(RunnerEvent::EngineOom {
            build,
            held_bytes,
            written,
            sent,
            ..
        }) = event.runner()
        else {
            return None;
        };
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: event.at_ms,
            host: event.host.clone(),
            details: json!({
                "reason": format!(
                    "build {build}'s engine was killed holding {held_bytes} bytes of log lines it had not sent ({sent} of {written} lines sent)"
                ),
                "build": build,
                "held_bytes": held_bytes,
            }),
        })
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}

/// `runner_logs_complete`.
#[derive(Default)]
pub struct LogsComplete {
    /// Build → lines its engine wrote and how many reached the platform (`None`: all, it
    /// sent its last line).
    written: BTreeMap<String, (u64, Option<u64>)>,
    /// Build → what a follower saw at its end: lines received, in order, the log's lines
    /// and the build's status.
    followed: BTreeMap<String, (u64, bool, u64, String)>,
}

impl Checker for LogsComplete {
    fn name(&self) -> &'static str {
        "runner_logs_complete"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        match event.runner()? {
            RunnerEvent::Logs { build, written, .. } => {
                self.written.insert(build.clone(), (*written, None));
            }
            RunnerEvent::EngineOom {
                build,
                written,
                sent,
                ..
            } => {
                self.written.insert(build.clone(), (*written, Some(*sent)));
            }
            RunnerEvent::Followed {
                build,
                received,
                in_order,
                lines,
                status,
            } => {
                self.followed.insert(
                    build.clone(),
                    (*received, *in_order, *lines, status.clone()),
                );
            }
            _ => {}
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let violation = |reason: String, build: &str| Violation {
            invariant: "runner_logs_complete".into(),
            class: Class::Liveness,
            at_ms: state.end_ms,
            host: String::new(),
            details: json!({"reason": reason, "build": build}),
        };
        for (build, (written, sent)) in &self.written {
            if let Some(sent) = sent.filter(|sent| sent < written) {
                return Some(violation(
                    format!(
                        "build {build}'s engine wrote {written} log lines and died; the platform has {sent}"
                    ),
                    build,
                ));
            }
        }
        for (build, (received, in_order, lines, status)) in &self.followed {
            if !in_order || received != lines {
                return Some(violation(
                    format!(
                        "a client following build {build}'s log received {received} lines{} of the {lines} the log has",
                        if *in_order { "" } else { " out of order" }
                    ),
                    build,
                ));
            }
            // A build its engine ended (success or failure) got every line first; one the
            // platform ended has what came before its end.
            let by_engine = matches!(status.as_str(), "success" | "failure");
            if let Some((written, None)) = self.written.get(build).filter(|_| by_engine) {
                if written != lines {
                    return Some(violation(
                        format!(
                            "build {build}'s engine wrote {written} log lines; the log a client followed to the end has {lines}"
                        ),
                        build,
                    ));
                }
            }
        }
        None
    }
}

/// `runner_stall_detected`.
#[derive(Default)]
pub struct StallDetected {
    /// Agent → when it last polled successfully (or started).
    last_poll: BTreeMap<String, u64>,
}

impl Checker for StallDetected {
    fn name(&self) -> &'static str {
        "runner_stall_detected"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        match event.runner()? {
            RunnerEvent::Start { host, .. } => {
                self.last_poll.insert(host.clone(), event.at_ms);
            }
            RunnerEvent::Poll { host, error, .. } if error.is_empty() => {
                self.last_poll.insert(host.clone(), event.at_ms);
            }
            RunnerEvent::Probe { agent, ok: true } => {
                let last = *self.last_poll.get(agent)?;
                let silent = event.at_ms.saturating_sub(last);
                if silent > STALL_BOUND_MS {
                    return Some(Violation {
                        invariant: self.name().into(),
                        class: Class::Safety,
                        at_ms: event.at_ms,
                        host: agent.clone(),
                        details: json!({
                            "reason": format!(
                                "agent {agent} has not polled the platform for {} s and its readiness probe still passes",
                                silent / 1000
                            ),
                            "last_poll_ms": last,
                        }),
                    });
                }
            }
            _ => {}
        }
        None
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}

/// `runner_builds_finish`.
pub struct BuildsFinish;

impl Checker for BuildsFinish {
    fn name(&self) -> &'static str {
        "runner_builds_finish"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = state.runner.as_ref()?;
        let open: Vec<&Build> = truth
            .builds
            .iter()
            .filter(|b| !b.status.is_final())
            .collect();
        let first = open.first()?;
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Liveness,
            at_ms: state.end_ms,
            host: "platform".into(),
            details: json!({
                "reason": format!(
                    "{} of {} builds never ended; {} is still {}",
                    open.len(),
                    truth.builds.len(),
                    first.id,
                    first.status.as_str()
                ),
                "open": open.iter().map(|b| &b.id).collect::<Vec<_>>(),
            }),
        })
    }
}

/// `runner_proxy_truthful`.
pub struct ProxyTruthful;

impl Checker for ProxyTruthful {
    fn name(&self) -> &'static str {
        "runner_proxy_truthful"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = state.runner.as_ref()?;
        let false_successes = truth.false_successes();
        let first = false_successes.first()?;
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: state.end_ms,
            host: "platform".into(),
            details: json!({
                "reason": format!(
                    "{} of {} proxy tasks are reported Success but their request did not take effect; \
                     {} ({:?}) is not in the repository",
                    false_successes.len(),
                    truth.proxies.len(),
                    first.task,
                    first.message
                ),
                "tasks": false_successes.iter().map(|p| &p.task).collect::<Vec<_>>(),
            }),
        })
    }
}

/// `runner_no_orphans`.
pub struct NoOrphans;

impl Checker for NoOrphans {
    fn name(&self) -> &'static str {
        "runner_no_orphans"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = state.runner.as_ref()?;
        let ended: BTreeSet<&str> = truth
            .builds
            .iter()
            .filter(|b| b.status.is_final())
            .map(|b| b.id.as_str())
            .collect();
        let orphans: Vec<_> = truth
            .objects
            .iter()
            .filter(|(_, _, build)| ended.contains(build.as_str()))
            .collect();
        let (kind, name, build) = orphans.first()?;
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Liveness,
            at_ms: state.end_ms,
            host: "apiserver".into(),
            details: json!({
                "reason": format!(
                    "{} objects of ended builds are left in the cluster; {kind} {name} of {build}",
                    orphans.len()
                ),
                "orphans": orphans.iter().map(|(k, n, _)| format!("{k}/{n}")).collect::<Vec<_>>(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use orrery_system::platform::runner::Status;

    use super::*;

    fn build(id: &str, status: Status) -> Build {
        Build {
            id: id.into(),
            pipeline: "p".into(),
            branch: "main".into(),
            delivery: None,
            tick: None,
            trigger: None,
            parent: None,
            agent: "runner".into(),
            steps: Vec::new(),
            priority: 0,
            status,
            reason: None,
            created_ms: 0,
            admitted_ms: None,
            engine_seen_ms: None,
            finished_ms: None,
            cleanup_queued: status.is_final(),
        }
    }

    fn created(at_ms: u64, resource: &str, name: &str) -> TraceEvent {
        TraceEvent::observed(
            at_ms,
            "apiserver",
            WorldEvent::ApiWrite {
                verb: "create".into(),
                resource: resource.into(),
                name: name.into(),
                rv: "1".into(),
            },
        )
    }

    fn ended(at_ms: u64, build: &str, status: &str, reason: &str) -> TraceEvent {
        TraceEvent::observed(
            at_ms,
            "platform",
            RunnerEvent::Build {
                build: build.into(),
                status: status.into(),
                reason: reason.into(),
            },
        )
    }

    fn first(checker: &mut dyn Checker, events: &[TraceEvent]) -> Option<Violation> {
        events.iter().find_map(|e| checker.on_event(e))
    }

    #[test]
    fn a_build_failed_on_an_object_it_had_created_breaks_the_outcome_invariant() {
        let events = [
            created(1_000, "pods", "engine-b00001"),
            ended(
                61_000,
                "b00001",
                "error",
                "CreatePod engine-b00001: AlreadyExists",
            ),
        ];
        let v = first(&mut BuildOutcome::default(), &events).expect("fires");
        assert_eq!((v.class, v.at_ms), (Class::Safety, 61_000));
        assert_eq!(v.details["object"], "engine-b00001");
        // A creation that really failed, a claim of another name, a timeout: no violation.
        let fine = [
            created(1_000, "persistentvolumeclaims", "pvc-dind-b00002"),
            ended(
                2_000,
                "b00001",
                "error",
                "CreatePod engine-b00001: 403 Forbidden: no",
            ),
            ended(
                3_000,
                "b00002",
                "error",
                "CreatePvc pvc-dind-b00003: AlreadyExists",
            ),
            ended(4_000, "b00003", "terminated", "engine inactive"),
            ended(5_000, "b00004", "failure", ""),
        ];
        assert!(first(&mut BuildOutcome::default(), &fine).is_none());
    }

    fn runner(at_ms: u64, event: RunnerEvent) -> TraceEvent {
        TraceEvent::observed(at_ms, "runner", event)
    }

    fn poll(at_ms: u64, error: &str) -> TraceEvent {
        runner(
            at_ms,
            RunnerEvent::Poll {
                host: "runner".into(),
                tasks: 0,
                error: error.into(),
            },
        )
    }

    fn probe(at_ms: u64, ok: bool) -> TraceEvent {
        runner(
            at_ms,
            RunnerEvent::Probe {
                agent: "runner".into(),
                ok,
            },
        )
    }

    #[test]
    fn a_volume_directory_removed_under_a_live_claim_breaks_volume_kept() {
        let volume = |at_ms: u64, claim: &str, action: &str| {
            runner(
                at_ms,
                RunnerEvent::Volume {
                    volume: "vol-dind-b00001".into(),
                    claim: claim.into(),
                    action: action.into(),
                },
            )
        };
        // hardened: marked once released, then deleted — or unmarked when a claim holds it.
        let kept = [
            volume(1_000, "pvc-dind-b00001", "created"),
            volume(60_000, "", "marked"),
            volume(61_000, "", "deleted"),
            volume(120_000, "pvc-dind-b00002", "kept"),
            volume(130_000, "", "removed"),
        ];
        assert!(first(&mut VolumeKept, &kept).is_none());
        // faithful: the directory removed while the build's claim holds it.
        let removed = [
            volume(1_000, "pvc-dind-b00001", "created"),
            volume(60_000, "pvc-dind-b00001", "marked"),
            volume(960_000, "pvc-dind-b00001", "removed"),
        ];
        let violation = first(&mut VolumeKept, &removed).expect("fires");
        assert_eq!(violation.invariant, "runner_volume_kept");
        assert_eq!(violation.at_ms, 960_000);
        assert_eq!(violation.details["claim"], "pvc-dind-b00001");
    }

    fn oom(at_ms: u64, build: &str) -> TraceEvent {
        runner(
            at_ms,
            RunnerEvent::EngineOom {
                build: build.into(),
                held_bytes: 4 << 20,
                written: 2_000,
                sent: 900,
                requests: 900,
            },
        )
    }

    fn logs(at_ms: u64, build: &str, written: u64) -> TraceEvent {
        runner(
            at_ms,
            RunnerEvent::Logs {
                build: build.into(),
                written,
                requests: written / 2,
                peak_bytes: 8_192,
            },
        )
    }

    fn followed(
        at_ms: u64,
        build: &str,
        received: u64,
        in_order: bool,
        lines: u64,
        status: &str,
    ) -> TraceEvent {
        runner(
            at_ms,
            RunnerEvent::Followed {
                build: build.into(),
                received,
                in_order,
                lines,
                status: status.into(),
            },
        )
    }

    #[test]
    fn an_engine_killed_for_its_unsent_log_breaks_engine_memory() {
        let fine = [logs(100_000, "b00001", 3_000)];
        assert!(first(&mut EngineMemory, &fine).is_none());
        let killed = [logs(100_000, "b00001", 3_000), oom(150_000, "b00002")];
        let v = first(&mut EngineMemory, &killed).expect("fires");
        assert_eq!((v.class, v.at_ms), (Class::Safety, 150_000));
        assert_eq!(v.details["build"], "b00002");
    }

    #[test]
    fn a_line_lost_or_not_followed_breaks_logs_complete() {
        let judge = |events: &[TraceEvent]| {
            let mut checker = LogsComplete::default();
            assert!(first(&mut checker, events).is_none(), "judged at the end");
            checker.at_end(&FinalState {
                end_ms: 900_000,
                ..FinalState::default()
            })
        };
        // Every line sent and followed; a build the platform ended shows what came before.
        let complete = [
            logs(100_000, "b00001", 3_000),
            followed(101_000, "b00001", 3_000, true, 3_000, "success"),
            logs(120_000, "b00002", 500),
            followed(90_000, "b00002", 300, true, 300, "error"),
        ];
        assert!(judge(&complete).is_none());
        let v = judge(&[oom(150_000, "b00001")]).expect("lost lines");
        assert_eq!((v.class, v.at_ms), (Class::Liveness, 900_000));
        assert!(v.details["reason"].as_str().unwrap().contains("died"));
        let short = [
            logs(100_000, "b00001", 3_000),
            followed(101_000, "b00001", 2_990, true, 3_000, "success"),
        ];
        assert!(judge(&short).is_some(), "a follower missed lines");
        let reordered = [followed(101_000, "b00001", 3_000, false, 3_000, "success")];
        assert!(judge(&reordered).is_some(), "out of order");
        let unsent = [
            logs(100_000, "b00001", 3_000),
            followed(101_000, "b00001", 2_000, true, 2_000, "failure"),
        ];
        assert!(
            judge(&unsent).is_some(),
            "the engine's end came before its lines"
        );
    }

    #[test]
    fn a_stalled_agent_must_not_be_reported_ready() {
        let stalled = [poll(3_000, ""), probe(60_000, true), probe(65_000, true)];
        let v = first(&mut StallDetected::default(), &stalled).expect("fires");
        assert_eq!((v.class, v.at_ms), (Class::Safety, 65_000));
        // Failing polls reported unready; a restart starts the clock again; polls resume.
        let fine = [
            poll(3_000, ""),
            poll(40_000, "502 Bad Gateway"),
            probe(70_000, false),
            runner(
                80_000,
                RunnerEvent::Start {
                    host: "runner".into(),
                    variant: orrery_system::core::Variant::Hardened,
                },
            ),
            probe(85_000, true),
            poll(140_000, ""),
            probe(141_000, true),
        ];
        assert!(first(&mut StallDetected::default(), &fine).is_none());
    }

    #[test]
    fn builds_must_end_and_leave_nothing_behind() {
        let state = |builds: Vec<Build>, objects: Vec<(&str, &str, &str)>| FinalState {
            end_ms: 300_000,
            runner: Some(RunnerTruth {
                limit: None,
                started_ms: 0,
                builds,
                objects: objects
                    .into_iter()
                    .map(|(k, n, b)| (k.to_string(), n.to_string(), b.to_string()))
                    .collect(),
                ..RunnerTruth::default()
            }),
            ..FinalState::default()
        };
        let running = state(
            vec![
                build("b00001", Status::Success),
                build("b00002", Status::Running),
            ],
            vec![("Pod", "engine-b00002", "b00002")],
        );
        let v = BuildsFinish.at_end(&running).expect("an open build");
        assert_eq!(v.details["open"], json!(["b00002"]));
        // The running build's own pods are not orphans.
        assert!(NoOrphans.at_end(&running).is_none());
        let left = state(
            vec![build("b00001", Status::Error)],
            vec![("Pod", "dind-b00001", "b00001")],
        );
        assert!(BuildsFinish.at_end(&left).is_none());
        let v = NoOrphans.at_end(&left).expect("an orphan");
        assert_eq!(v.details["orphans"], json!(["Pod/dind-b00001"]));
        assert!(BuildsFinish.at_end(&FinalState::default()).is_none());
        assert!(NoOrphans.at_end(&FinalState::default()).is_none());
    }

    #[test]
    fn a_proxy_task_reported_success_whose_commit_is_missing_breaks_proxy_truthful() {
        let done = |outcome: Outcome| TaskState::Done {
            outcome,
            reason: None,
        };
        let proxy = |task: &str, message: &str, state: TaskState| ProxyTruth {
            task: task.into(),
            message: message.into(),
            state,
        };
        let state = |proxies: Vec<ProxyTruth>, committed: &[&str]| FinalState {
            end_ms: 300_000,
            runner: Some(RunnerTruth {
                proxies,
                committed: committed.iter().map(|m| (m.to_string(), 1)).collect(),
                ..RunnerTruth::default()
            }),
            ..FinalState::default()
        };
        // Landed and reported Success; refused and reported Error; still open: all truthful.
        let truthful = state(
            vec![
                proxy("t000001", "r1", done(Outcome::Success)),
                proxy("t000002", "r2", done(Outcome::Error)),
                proxy("t000003", "r3", TaskState::Ready),
            ],
            &["r1"],
        );
        assert!(ProxyTruthful.at_end(&truthful).is_none());
        let lied = state(
            vec![
                proxy("t000001", "r1", done(Outcome::Success)),
                proxy("t000002", "r2", done(Outcome::Success)),
            ],
            &["r1"],
        );
        let v = ProxyTruthful.at_end(&lied).expect("a false success");
        assert_eq!(v.class, Class::Safety);
        assert_eq!(v.details["tasks"], json!(["t000002"]));
        assert!(ProxyTruthful.at_end(&FinalState::default()).is_none());
    }

    #[test]
    fn more_builds_admitted_at_once_than_the_limit_breaks_it() {
        let admitted = |id: &str, from: u64, to: Option<u64>| Build {
            admitted_ms: Some(from),
            finished_ms: to,
            ..build(id, Status::Success)
        };
        let state = |limit, builds| FinalState {
            runner: Some(RunnerTruth {
                builds,
                objects: Vec::new(),
                limit,
                started_ms: 0,
                ..RunnerTruth::default()
            }),
            ..FinalState::default()
        };
        // One after the other (an end and the next admission at the same moment): within 1.
        let serial = vec![
            admitted("b1", 0, Some(10)),
            admitted("b2", 10, Some(20)),
            Build {
                admitted_ms: None,
                ..build("b3", Status::Pending)
            },
        ];
        assert!(ConcurrencyLimit.at_end(&state(Some(1), serial)).is_none());
        let overlapping = vec![admitted("b1", 0, Some(10)), admitted("b2", 5, None)];
        let v = ConcurrencyLimit
            .at_end(&state(Some(1), overlapping.clone()))
            .expect("fires");
        assert_eq!((v.class, v.at_ms), (Class::Safety, 5));
        assert_eq!(v.details["build"], "b2");
        assert!(ConcurrencyLimit
            .at_end(&state(Some(2), overlapping.clone()))
            .is_none());
        assert!(ConcurrencyLimit.at_end(&state(None, overlapping)).is_none());
        // Branch and account limits: two builds of one branch of a pipeline, and three of
        // the account across pipelines.
        let of = |id: &str, pipeline: &str, branch: &str, from: u64| Build {
            pipeline: pipeline.into(),
            branch: branch.into(),
            ..admitted(id, from, None)
        };
        let builds = vec![
            of("b1", "p", "main", 0),
            of("b2", "p", "dev", 1),
            of("b3", "q", "main", 2),
            of("b4", "p", "main", 3),
        ];
        let limits = |branch, account| FinalState {
            runner: Some(RunnerTruth {
                builds: builds.clone(),
                branch_limit: branch,
                account_limit: account,
                ..RunnerTruth::default()
            }),
            ..FinalState::default()
        };
        let v = ConcurrencyLimit
            .at_end(&limits(Some(1), None))
            .expect("two of p@main");
        assert_eq!(v.details["branch"], "p@main");
        assert_eq!(v.details["build"], "b4");
        assert!(ConcurrencyLimit.at_end(&limits(Some(2), None)).is_none());
        let v = ConcurrencyLimit
            .at_end(&limits(None, Some(3)))
            .expect("four of the account");
        assert_eq!((v.details["build"].as_str(), v.at_ms), (Some("b4"), 3));
        assert!(ConcurrencyLimit.at_end(&limits(None, Some(4))).is_none());
        // A trigger limit counts the builds one trigger started, and no other.
        let by = |id: &str, trigger: Option<&str>, from: u64| Build {
            trigger: trigger.map(str::to_string),
            ..admitted(id, from, None)
        };
        let triggered = |limit| FinalState {
            runner: Some(RunnerTruth {
                builds: vec![
                    by("b1", Some("push"), 0),
                    by("b2", Some("nightly"), 1),
                    by("b3", None, 2),
                    by("b4", Some("push"), 3),
                ],
                trigger_limit: limit,
                ..RunnerTruth::default()
            }),
            ..FinalState::default()
        };
        let v = ConcurrencyLimit
            .at_end(&triggered(Some(1)))
            .expect("two of push");
        assert_eq!(
            (v.details["trigger"].as_str(), v.details["build"].as_str()),
            (Some("p#push"), Some("b4"))
        );
        assert!(ConcurrencyLimit.at_end(&triggered(Some(2))).is_none());
    }

    #[test]
    fn a_delivery_that_started_two_builds_breaks_trigger_once() {
        let of = |id: &str, delivery: Option<&str>, at: u64| Build {
            delivery: delivery.map(str::to_string),
            created_ms: 1_000_000 + at,
            ..build(id, Status::Success)
        };
        let state = |builds| FinalState {
            runner: Some(RunnerTruth {
                builds,
                objects: Vec::new(),
                limit: None,
                started_ms: 1_000_000,
                ..RunnerTruth::default()
            }),
            ..FinalState::default()
        };
        let once = vec![
            of("b1", Some("d1"), 0),
            of("b2", Some("d2"), 5),
            of("b3", None, 6),
        ];
        assert!(TriggerOnce.at_end(&state(once)).is_none());
        let twice = vec![of("b1", Some("d1"), 0), of("b2", Some("d1"), 10_000)];
        let v = TriggerOnce.at_end(&state(twice)).expect("fires");
        assert_eq!((v.class, v.at_ms), (Class::Safety, 10_000));
        assert_eq!(v.details["builds"], json!(["b1", "b2"]));
    }

    #[test]
    fn a_cron_tick_run_twice_or_lost_without_a_word_breaks_cron_once() {
        let of = |id: &str, scheduled_ms: Option<u64>| Build {
            tick: scheduled_ms.map(|scheduled_ms| Tick {
                trigger: "cron-0".into(),
                scheduled_ms,
            }),
            created_ms: scheduled_ms.unwrap_or(0) + 5,
            ..build(id, Status::Success)
        };
        let state = |builds: Vec<Build>, missed: Vec<u64>| FinalState {
            runner: Some(RunnerTruth {
                builds,
                crons: [(
                    "cron-0".to_string(),
                    CronTrigger {
                        every_ms: 60_000,
                        created_ms: 1_000_000,
                        last_ms: None,
                    },
                )]
                .into_iter()
                .collect(),
                missed: missed
                    .into_iter()
                    .map(|scheduled_ms| Tick {
                        trigger: "cron-0".into(),
                        scheduled_ms,
                    })
                    .collect(),
                // Ticks owed: 1,020,000, 1,080,000 and 1,140,000.
                calm_ms: 1_140_000,
                started_ms: 1_000_000,
                ..RunnerTruth::default()
            }),
            ..FinalState::default()
        };
        // Each tick once, or the last one reported missed: kept.
        let once = state(
            vec![of("b1", Some(1_020_000)), of("b2", Some(1_080_000))],
            vec![1_140_000],
        );
        assert!(
            CronOnce.at_end(&once).is_none(),
            "{:?}",
            CronOnce.at_end(&once)
        );
        // A tick after the calm phase started is not owed, and a build from elsewhere is no tick.
        let mut late = once.clone();
        late.runner.as_mut().unwrap().builds.push(of("b3", None));
        assert!(CronOnce.at_end(&late).is_none());
        // Two replicas fired the second tick.
        let twice = state(
            vec![
                of("b1", Some(1_020_000)),
                of("b2", Some(1_080_000)),
                of("b3", Some(1_080_000)),
            ],
            vec![1_140_000],
        );
        let violation = CronOnce.at_end(&twice).expect("a tick ran twice");
        assert_eq!(violation.details["builds"], json!(["b2", "b3"]));
        assert_eq!(violation.details["scheduled_ms"], json!(80_000));
        // The last tick was neither run nor reported.
        let lost = state(
            vec![of("b1", Some(1_020_000)), of("b2", Some(1_080_000))],
            vec![],
        );
        let violation = CronOnce.at_end(&lost).expect("a tick was lost");
        assert_eq!(violation.details["lost_ticks"], json!(1));
        assert_eq!(violation.at_ms, 140_000);
    }
}
