//! The builds and the agent task queue, as pure state: what the API (`super::api`) and the
//! platform's timers (`super::run`) change. No IO; every method takes the time.
//!
//! The platform side is closed source (`runner-research.md` §5, §6); what is modelled is
//! **inferred** from the agent's protocol and the public facts, each marked below:
//! - a build is elected at once and gets three tasks, `CreatePvc pvc-dind-<id>`, `CreatePod
//!   dind-<id>`, `CreatePod engine-<id>` (§2.3 step 3, [INFERENCE] on the set and order);
//! - with `waitForStatusReport` a task handed out stays the agent's until it reports a
//!   status; one not reported within [`Settings::redeliver_after`] is handed out again
//!   (§1.7, §6.1: "model it as a parameter"); hardened keeps a workflow with the replica
//!   (agent pod) a task of it is leased to, renewed by that pod's heartbeats (§4 row 2's
//!   fix, orrery's design: see [`Queue::poll`] and [`Queue::renew`]);
//! - a status is accepted only with `statusRevision` = the task's revision + 1 (§1.3,
//!   [INFERENCE] optimistic concurrency);
//! - `Error` with `isRetriable` hands the task out again, up to
//!   [`MAXIMUM_RETRY_ATTEMPTS_ALLOWED`]; a non-retriable `Error` of a creation fails the
//!   build ([INFERENCE]: the build cannot run without its pods);
//! - a finished build gets `DeletePod engine-<id>`, `DeletePod dind-<id>`, `DeletePvc
//!   pvc-dind-<id>` (§2.3 step 8, [INFERENCE]);
//! - the platform's limits (§2.4): elected at most 900 s, no engine report for 300 s
//!   terminates the build, a task not done within [`Settings::expire_after`] expires (the
//!   `expireAt` TTL index, §1.3);
//! - **admission** (`pipelines.md` L237-322, §5): a pipeline's concurrency limit admits a
//!   build (elects it) or keeps it `pending` until an admitted build of the pipeline ends
//!   (oldest first); 0 is maintenance mode. The check is made by the caller with
//!   [`Queue::admitted_counts`] and handed to [`Queue::make_build`]: faithful reads the count, waits
//!   for its database ([`Settings::admission_read`]) and then elects on what it read — builds
//!   made at the same moment all pass a limit one of them fills (§4 row 8, "pipeline
//!   concurrency limit ignored periodically"; the check-then-act mechanism is
//!   [INFERENCE]); hardened checks and elects in one step. The same holds for the
//!   branch's, the trigger's and the account's limits;
//! - **termination policy** "terminate previous builds from the same branch": a new build
//!   terminates the branch's builds that have not ended. faithful then deletes only the
//!   engine pod, so the dind pod and its claim stay (§4 row 5, "builds terminated because
//!   of pipeline policy leave running `dind` pods"; which objects stay is [INFERENCE]);
//!   hardened deletes all three, as on every other end. "Terminate child builds" (L239)
//!   ends a terminated build's children with the same cleanup ([INFERENCE]: a child's end
//!   is the same policy's);
//! - **cron ledger** (hardened's fix of §4 row 10, [INFERENCE] as design): per cron trigger
//!   its period, when it was registered and the last tick run or reported missed, so a
//!   leader that takes over catches up; and one lease the cronus replicas share (who fires).
//!   A tick's build carries its [`Tick`]; hardened claims `cron:<trigger>@<ms>` as it claims
//!   a delivery id, so a tick fired twice still starts one build.

mod stored;

pub use stored::Unreadable;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::core::runner::{self, Metadata, Outcome, Task, TaskStatus, TaskType};
use crate::core::time::rfc3339;
use crate::core::Variant;
use crate::platform::store::records::RunnerKind;

/// `MAXIMUM_RETRY_ATTEMPTS_ALLOWED` (§2.4), applied to a task handed out again after a
/// retriable error ([INFERENCE]: the real limit counts a build's retries).
pub const MAXIMUM_RETRY_ATTEMPTS_ALLOWED: u32 = 20;

/// hardened: how long a claimed delivery id or tick may wait for its build before it is
/// taken to have died with its hermes ([INFERENCE]: orrery's design; hermes answers in
/// seconds).
pub const CLAIM_TTL: Duration = Duration::from_secs(60);

/// How long the platform keeps a build that ended, with its log
/// (`TTL_RETENTION_POLICY_IN_DAYS`, default 180, on `workflowprocesses`; §5).
pub const BUILD_RETENTION: Duration = Duration::from_secs(180 * 24 * 3600);

/// hardened: how long a webhook delivery id or cron tick key is remembered after it was
/// claimed — GitHub redelivers a delivery (by hand or by its API) for 3 days; a tick past
/// its catch-up window is not run anyway ([INFERENCE]: orrery's design).
pub const DELIVERY_RETENTION: Duration = Duration::from_secs(3 * 24 * 3600);

/// The platform's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// A task handed out and not reported is handed out again after this (§6.1).
    pub redeliver_after: Duration,
    /// The account's concurrency (its plan): builds of every pipeline admitted at once
    /// (`None`: unlimited).
    pub account_concurrency: Option<u32>,
    /// `MAXIMUM_ELECTED_STATE_AGE_ALLOWED`: a build not running by then is failed.
    pub elected_max_age: Duration,
    /// `TIME_ENGINE_INACTIVE_UNTIL_TERMINATION`: a running build whose engine is silent
    /// this long is terminated.
    pub engine_inactive: Duration,
    /// A task not done this long after it was made expires (`expireAt`).
    pub expire_after: Duration,
    /// The namespace the build's objects go to (the runtime's).
    pub namespace: String,
    /// The runtime environment's name (`reName`).
    pub re_name: String,
    /// Which platform runs: how admission and a policy termination behave.
    pub variant: Variant,
    /// faithful: how long the admission check's read takes before it elects on what it
    /// read ([INFERENCE]: a database round trip).
    pub admission_read: Duration,
    /// How long hermes takes from a webhook delivery to the build it asks for (resolving the
    /// trigger, then cfapi's `runPipeline`, §5): the provider waits that long for its answer.
    pub webhook_delay: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            redeliver_after: Duration::from_secs(60),
            account_concurrency: None,
            elected_max_age: Duration::from_secs(900),
            engine_inactive: Duration::from_secs(300),
            expire_after: Duration::from_secs(3600),
            namespace: "codefresh".into(),
            re_name: "runtime".into(),
            variant: Variant::Hardened,
            admission_read: Duration::from_millis(50),
            webhook_delay: Duration::ZERO,
        }
    }
}

/// A build's status (task-logger's `enums.js`, §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting for admission: its pipeline is at its concurrency limit.
    Pending,
    /// Given to a runtime; its pods are being made.
    Elected,
    /// The engine reported it started.
    Running,
    /// Every step exited 0.
    Success,
    /// A step exited non-zero.
    Failure,
    /// The platform gave up on it (a task failed, a limit passed).
    Error,
    /// The platform stopped it (its engine went silent).
    Terminated,
}

impl Status {
    /// True once the build ended.
    pub fn is_final(self) -> bool {
        !matches!(self, Status::Pending | Status::Elected | Status::Running)
    }

    /// The name in the API and the trace.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Elected => "elected",
            Status::Running => "running",
            Status::Success => "success",
            Status::Failure => "failure",
            Status::Error => "error",
            Status::Terminated => "terminated",
        }
    }
}

/// One step of a pipeline: how long it runs, how it exits and how much it logs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Step {
    /// Its running time in milliseconds.
    pub millis: u64,
    /// Its exit code.
    pub exit_code: i32,
    /// Lines of log it writes, evenly over its running time (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lines: u32,
    /// Each line's length in bytes (0: 80).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub line_bytes: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The longest line a step may write, and the most lines (the engine's stand-in holds what
/// it has not sent: a step's log is bounded so a build body cannot ask for gigabytes).
pub const MAX_LINE_BYTES: u32 = 64 * 1024;
/// The most lines one step may write.
pub const MAX_STEP_LINES: u32 = 1_000_000;

impl Step {
    /// A step that writes no log.
    pub fn new(millis: u64, exit_code: i32) -> Self {
        Step {
            millis,
            exit_code,
            lines: 0,
            line_bytes: 0,
        }
    }

    /// Each line's length in bytes.
    pub fn line_len(&self) -> usize {
        match self.line_bytes {
            0 => 80,
            n => n as usize,
        }
    }
}

/// Why a build's log lines were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// No such build.
    #[error("no build {0}")]
    NotFound(String),
    /// The build ended: its log is closed (its followers were told its end).
    #[error("build {0} ended: its log takes no more lines")]
    Ended(String),
    /// The lines would take the build's log past `runner.log-bytes`: none of them is kept.
    #[error("build {build}: its log would pass {limit} bytes (runner.log-bytes)")]
    TooLarge {
        /// The build.
        build: String,
        /// The limit.
        limit: u64,
    },
    /// The lines start past the end of the log: the ones before were never received.
    #[error("build {build}: lines from {sent} leave a gap; the log has {next}")]
    Gap {
        /// The build.
        build: String,
        /// Where the lines said they start.
        sent: u64,
        /// The next line the log takes.
        next: u64,
    },
}

/// A pipeline's admission settings (`pipelines.md` L237-322; the termination policy's
/// three forms are the Codefresh Terraform provider's `termination_policy.on_create_branch`,
/// `docs/resources/pipeline.md`): what a build of it waits for and what it ends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Pipeline {
    /// Builds admitted at once (`None`: unlimited; 0: maintenance mode, none is admitted).
    pub concurrency: Option<u32>,
    /// Builds of one branch admitted at once ("branch concurrency", 1-15 or unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_concurrency: Option<u32>,
    /// Builds one trigger started admitted at once ("trigger concurrency", 1-15 or
    /// unlimited): counted among the builds that name the same trigger; a build no trigger
    /// started is not held by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_concurrency: Option<u32>,
    /// A new build terminates the builds of its branch that have not ended.
    pub terminate_previous_on_branch: bool,
    /// With `terminate_previous_on_branch`: only when the new build's branch matches this
    /// regular expression ("terminate previous builds only from a specific branch").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminate_branch_pattern: Option<String>,
    /// A new build terminates every other build of the pipeline that has not ended ("once a
    /// build is created, terminate all other running builds").
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub terminate_all: bool,
    /// "On termination, terminate child builds": a build of this pipeline that is
    /// terminated ends the builds it started (its children, `parent`) that have not ended.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub terminate_children: bool,
    /// Its builds' priority, -100 to 100: waiting builds are admitted highest first, then
    /// oldest first.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

/// The longest `terminateBranchPattern` a pipeline takes, and the most its compiled form
/// may take, so that a pattern cannot cost the platform a lot of memory.
pub const MAX_PATTERN_LEN: usize = 1024;
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

impl Pipeline {
    /// Why these settings cannot be taken, naming the field.
    pub fn check(&self) -> Result<(), String> {
        if self.branch_concurrency == Some(0) {
            return Err("`branchConcurrency` must be at least 1 (leave it out: unlimited)".into());
        }
        if self.trigger_concurrency == Some(0) {
            return Err("`triggerConcurrency` must be at least 1 (leave it out: unlimited)".into());
        }
        if !(-100..=100).contains(&self.priority) {
            return Err(format!("`priority` {} is not in -100..=100", self.priority));
        }
        if let Some(pattern) = &self.terminate_branch_pattern {
            branch_pattern(pattern).map_err(|e| format!("`terminateBranchPattern`: {e}"))?;
        }
        Ok(())
    }
}

/// The settings of a pipeline not set: no limit, no policy.
static UNSET: Pipeline = Pipeline {
    concurrency: None,
    branch_concurrency: None,
    trigger_concurrency: None,
    terminate_previous_on_branch: false,
    terminate_branch_pattern: None,
    terminate_all: false,
    terminate_children: false,
    priority: 0,
};

/// `pattern` compiled, bounded in length and size.
fn branch_pattern(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(format!("longer than {MAX_PATTERN_LEN} bytes"));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

/// The admitted builds that have not ended, as admission counts them against the limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Admitted {
    /// Of the pipeline.
    pub pipeline: u32,
    /// Of the pipeline's branch.
    pub branch: u32,
    /// Of the pipeline started by the build's trigger (0 for a build no trigger started).
    pub trigger: u32,
    /// Of the account (every pipeline).
    pub account: u32,
}

/// What a trigger asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewBuild {
    /// The pipeline.
    pub pipeline: String,
    /// The agent whose runtime runs it.
    pub agent: String,
    /// The branch it builds.
    pub branch: String,
    /// What the engine runs.
    pub steps: Vec<Step>,
    /// The Git webhook delivery that asked for it (`X-GitHub-Delivery`), if one did.
    pub delivery: Option<String>,
    /// The cron tick that asked for it, if one did.
    pub tick: Option<Tick>,
    /// Its priority (`None`: its pipeline's).
    pub priority: Option<i32>,
    /// The trigger that started it (a cron trigger's name for a tick), if one did: what its
    /// pipeline's trigger concurrency counts.
    pub trigger: Option<String>,
    /// The build whose step started it (`codefresh-run`), if one did.
    pub parent: Option<String>,
}

/// The key hardened dedupes a webhook delivery by (apart from the ticks' keys).
pub fn delivery_key(delivery: &str) -> String {
    format!("webhook:{delivery}")
}

/// One tick of a cron trigger (cronus → hermes `run/<eventURI>`, §5): which trigger, and
/// the time it was scheduled for (Unix ms, UTC) — the same for every replica that fires it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tick {
    /// The trigger's name.
    pub trigger: String,
    /// When it was due (Unix ms).
    pub scheduled_ms: u64,
}

impl Tick {
    /// The key hardened dedupes a tick by (the trigger's URI and the scheduled time, §7).
    pub fn key(&self) -> String {
        format!("cron:{}@{}", self.trigger, self.scheduled_ms)
    }

    /// Whether this tick can be one of `cron`'s: on its schedule and not later than
    /// `slack_ms` after `now_ms` (a tick from the future would move the ledger past ticks
    /// still owed).
    pub fn fits(&self, cron: &CronTrigger, now_ms: u64, slack_ms: u64) -> bool {
        self.scheduled_ms.is_multiple_of(cron.every_ms.max(1))
            && self.scheduled_ms <= now_ms.saturating_add(slack_ms)
    }
}

/// A cron trigger as the platform's ledger keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronTrigger {
    /// Its period (ms).
    pub every_ms: u64,
    /// When it was registered (Unix ms): its first tick is the first multiple of the period
    /// after this.
    pub created_ms: u64,
    /// The latest tick run or reported missed (Unix ms), if any.
    pub last_ms: Option<u64>,
}

impl CronTrigger {
    /// The time ticks after which are still owed: the last tick handled, else registration.
    pub fn handled_until(&self) -> u64 {
        self.last_ms.unwrap_or(self.created_ms)
    }
}

/// Who holds the cronus lease, and until when (Unix ms).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Whether the asker holds it now.
    pub leader: bool,
    /// Its holder.
    pub holder: String,
    /// When it lapses unless renewed.
    pub until_ms: u64,
}

/// How a build's objects are removed when it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cleanup {
    /// Its engine pod, dind pod and claim.
    All,
    /// Its engine pod only (faithful's policy termination, §4 row 5).
    EngineOnly,
}

/// One build.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Build {
    /// `b<n>`.
    pub id: String,
    /// Its pipeline.
    pub pipeline: String,
    /// The branch it builds.
    pub branch: String,
    /// The webhook delivery that asked for it, if one did.
    pub delivery: Option<String>,
    /// The cron tick that asked for it, if one did.
    pub tick: Option<Tick>,
    /// The trigger that started it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// The build whose step started it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The agent whose runtime runs it.
    pub agent: String,
    /// What the engine runs.
    pub steps: Vec<Step>,
    /// Its priority: waiting builds are admitted highest first.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// Where it is.
    pub status: Status,
    /// Why it ended as it did, when not by its steps.
    pub reason: Option<String>,
    /// When it was made (Unix ms).
    pub created_ms: u64,
    /// When it was admitted (elected; Unix ms).
    pub admitted_ms: Option<u64>,
    /// When the engine last reported (Unix ms).
    pub engine_seen_ms: Option<u64>,
    /// When it ended (Unix ms).
    pub finished_ms: Option<u64>,
    /// Its cleanup tasks were made.
    pub cleanup_queued: bool,
}

/// Where a task is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum TaskState {
    /// Waiting for a poll.
    Ready,
    /// Handed out; handed out again at `until_ms` unless reported.
    Leased {
        /// Unix ms.
        until_ms: u64,
    },
    /// Reported.
    Done {
        /// What the agent said.
        outcome: Outcome,
        /// Why it failed.
        reason: Option<String>,
    },
    /// Not done before its `expireAt`.
    Expired,
    /// hardened: a creation its build ended before it was done — never handed out again
    /// (a pod made after its build's cleanup would be left for the sweeper).
    Withdrawn,
}

/// A task and where it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Queued {
    /// What the agent gets.
    pub task: Task,
    /// The agent it is for.
    pub agent: String,
    /// Where it is.
    pub state: TaskState,
    /// How many times it was handed out.
    pub deliveries: u32,
    /// When it was made (Unix ms).
    pub created_ms: u64,
    /// hardened: the agent pod (replica) it was last handed to, which holds its workflow
    /// while the lease lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// Why a status was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// No such task for this agent.
    #[error("task {0} not found")]
    NotFound(String),
    /// The revision is not the next one (a stale or repeated report).
    #[error("task {task}: statusRevision {sent} is not {expected}")]
    Conflict {
        /// The task.
        task: String,
        /// What the report said.
        sent: u64,
        /// What the platform expects.
        expected: u64,
    },
}

/// What changed, for the caller to trace: builds whose status moved.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// `(build, new status, reason)`.
    pub builds: Vec<(String, Status, Option<String>)>,
    /// Tasks that expired.
    pub expired: Vec<String>,
}

/// The builds and the task queue.
#[derive(Debug, Default)]
pub struct Queue {
    settings: Settings,
    builds: BTreeMap<String, Build>,
    tasks: BTreeMap<String, Queued>,
    heartbeats: BTreeMap<String, u64>,
    pipelines: BTreeMap<String, Pipeline>,
    /// Each pipeline's `terminateBranchPattern`, compiled when it was set (`None`: it does
    /// not compile, so it matches no branch).
    patterns: BTreeMap<String, Option<regex::Regex>>,
    /// hardened: webhook delivery id or tick key → its build (`None` while it is being made)
    /// and when it was claimed (Unix ms).
    deliveries: BTreeMap<String, (Option<String>, u64)>,
    /// Cron triggers by name.
    crons: BTreeMap<String, CronTrigger>,
    /// Ticks reported missed (past the catch-up window), in report order.
    missed: Vec<Tick>,
    /// The cronus lease: holder and until when (Unix ms).
    lease: Option<(String, u64)>,
    /// Each build's log: the lines its engine sent, in order, and their bytes.
    logs: BTreeMap<String, (Vec<String>, u64)>,
    made_builds: u64,
    made_tasks: u64,
    /// With a database: what changed since the store's journal last took it
    /// ([`Queue::take_changes`]).
    dirty: Option<stored::Dirty>,
}

impl TaskState {
    /// Whether it may still be handed out (ready, or leased).
    fn is_open(&self) -> bool {
        matches!(self, TaskState::Ready | TaskState::Leased { .. })
    }
}

impl Queue {
    /// An empty queue with `settings`.
    pub fn new(settings: Settings) -> Self {
        Queue {
            settings,
            ..Queue::default()
        }
    }

    /// The limits.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Marks an object changed, for the store's journal (nothing without one).
    fn touch(&mut self, kind: RunnerKind, key: &str) {
        if let Some(dirty) = &mut self.dirty {
            dirty.objects.insert((kind, key.to_string()));
        }
    }

    /// Every build, oldest first.
    pub fn builds(&self) -> impl Iterator<Item = &Build> {
        self.builds.values()
    }

    /// One build.
    pub fn build(&self, id: &str) -> Option<&Build> {
        self.builds.get(id)
    }

    /// Every task, oldest first.
    pub fn tasks(&self) -> impl Iterator<Item = &Queued> {
        self.tasks.values()
    }

    /// When each agent last sent a heartbeat (Unix ms).
    pub fn heartbeats(&self) -> &BTreeMap<String, u64> {
        &self.heartbeats
    }

    /// Appends `lines`, the lines of `build`'s log from line `from` on: lines the log has
    /// already (a request sent again after its answer was lost) are skipped, so a line is
    /// kept once. The number of lines the log now has. An ended build's log is closed: what
    /// its followers were shown at its end is all of it.
    pub fn append_log(
        &mut self,
        build: &str,
        from: u64,
        lines: Vec<String>,
        max_bytes: u64,
    ) -> Result<u64, LogError> {
        match self.builds.get(build) {
            None => return Err(LogError::NotFound(build.into())),
            Some(b) if b.status.is_final() => return Err(LogError::Ended(build.into())),
            Some(_) => {}
        }
        let (log, bytes) = self.logs.entry(build.into()).or_default();
        let next = log.len() as u64;
        if from > next {
            return Err(LogError::Gap {
                build: build.into(),
                sent: from,
                next,
            });
        }
        let new: Vec<String> = lines.into_iter().skip((next - from) as usize).collect();
        let adding: u64 = new.iter().map(|l| l.len() as u64).sum();
        if bytes.saturating_add(adding) > max_bytes {
            return Err(LogError::TooLarge {
                build: build.into(),
                limit: max_bytes,
            });
        }
        *bytes += adding;
        let added = !new.is_empty();
        log.extend(new);
        let len = log.len() as u64;
        if let Some(dirty) = self.dirty.as_mut().filter(|_| added) {
            dirty.logs.entry(build.into()).or_insert(next);
        }
        Ok(len)
    }

    /// `build`'s log from line `from` on (`None`: no such build).
    pub fn log(&self, build: &str, from: u64) -> Option<&[String]> {
        self.builds.get(build)?;
        let log = self
            .logs
            .get(build)
            .map_or(&[][..], |(lines, _)| lines.as_slice());
        Some(log.get(from as usize..).unwrap_or(&[]))
    }

    /// A pipeline's settings (a pipeline not set has no limit and no policy); a raised
    /// limit admits its waiting builds at once, oldest first.
    pub fn set_pipeline(&mut self, name: &str, pipeline: Pipeline, now_ms: u64) -> Changes {
        match &pipeline.terminate_branch_pattern {
            Some(pattern) => {
                self.patterns
                    .insert(name.into(), branch_pattern(pattern).ok());
            }
            None => {
                self.patterns.remove(name);
            }
        }
        self.pipelines.insert(name.into(), pipeline);
        self.touch(RunnerKind::Pipeline, name);
        let mut changes = Changes::default();
        self.admit_pending(now_ms, &mut changes);
        changes
    }

    /// The admitted builds that have not ended: of `pipeline`, of its `branch`, of its
    /// `trigger` (if one started the build), of the account.
    pub fn admitted_counts(&self, pipeline: &str, branch: &str, trigger: Option<&str>) -> Admitted {
        let mut counts = Admitted::default();
        for b in self
            .builds
            .values()
            .filter(|b| b.admitted_ms.is_some() && !b.status.is_final())
        {
            counts.account += 1;
            if b.pipeline == pipeline {
                counts.pipeline += 1;
                counts.branch += u32::from(b.branch == branch);
                counts.trigger += u32::from(trigger.is_some() && b.trigger.as_deref() == trigger);
            }
        }
        counts
    }

    /// Whether `counts` leave room for one more build of `pipeline` under its limits and the
    /// account's.
    /// (`triggered`: a trigger started the build, so its pipeline's trigger concurrency
    /// holds it.)
    fn room(&self, pipeline: &Pipeline, counts: Admitted, triggered: bool) -> bool {
        pipeline.concurrency.is_none_or(|l| counts.pipeline < l)
            && pipeline
                .branch_concurrency
                .is_none_or(|l| counts.branch < l)
            && (!triggered
                || pipeline
                    .trigger_concurrency
                    .is_none_or(|l| counts.trigger < l))
            && self
                .settings
                .account_concurrency
                .is_none_or(|l| counts.account < l)
    }

    /// Whether any limit applies to a build of `pipeline` (faithful reads the counts first).
    pub fn limited(&self, pipeline: &str) -> bool {
        let p = self.settings_of(pipeline);
        p.concurrency.is_some()
            || p.branch_concurrency.is_some()
            || p.trigger_concurrency.is_some()
            || self.settings.account_concurrency.is_some()
    }

    /// `name`'s settings.
    pub fn pipeline(&self, name: &str) -> Pipeline {
        self.settings_of(name).clone()
    }

    fn settings_of(&self, name: &str) -> &Pipeline {
        self.pipelines.get(name).unwrap_or(&UNSET)
    }

    /// Whether a new build of `pipeline` on `branch` terminates its branch's earlier builds.
    fn terminates_branch(&self, pipeline: &str, branch: &str) -> bool {
        self.settings_of(pipeline).terminate_previous_on_branch
            && self
                .patterns
                .get(pipeline)
                .is_none_or(|re| re.as_ref().is_some_and(|re| re.is_match(branch)))
    }

    /// A new build of `pipeline` on `agent`'s runtime on branch `main`, with no stale
    /// admission read: its id.
    pub fn create_build(
        &mut self,
        pipeline: &str,
        agent: &str,
        steps: Vec<Step>,
        now_ms: u64,
    ) -> String {
        let request = NewBuild {
            trigger: None,
            parent: None,
            pipeline: pipeline.into(),
            agent: agent.into(),
            branch: "main".into(),
            steps,
            delivery: None,
            tick: None,
            priority: None,
        };
        self.make_build(request, None, now_ms).0
    }

    /// A new build: its pipeline's policy terminates the branch's earlier builds, or all of
    /// the pipeline's (pending ones included), then it joins the queue. With `seen`, the
    /// admitted builds the caller counted earlier (faithful's check-then-act), it is elected
    /// when that read left room, whatever the counts are now; then the queue admits waiting
    /// builds, highest priority and oldest first, while each fits its limits. Its id, and
    /// what changed.
    pub fn make_build(
        &mut self,
        request: NewBuild,
        seen: Option<Admitted>,
        now_ms: u64,
    ) -> (String, Changes) {
        self.made_builds += 1;
        let id = format!("b{:05}", self.made_builds);
        self.touch(RunnerKind::Counters, "");
        self.touch(RunnerKind::Build, &id);
        let mut changes = Changes::default();
        let pipeline = self.settings_of(&request.pipeline);
        let (all, priority) = (pipeline.terminate_all, pipeline.priority);
        if all || self.terminates_branch(&request.pipeline, &request.branch) {
            let previous: Vec<String> = self
                .builds
                .values()
                .filter(|b| {
                    b.pipeline == request.pipeline
                        && (all || b.branch == request.branch)
                        && !b.status.is_final()
                })
                .map(|b| b.id.clone())
                .collect();
            let cleanup = match self.settings.variant {
                Variant::Faithful => Cleanup::EngineOnly,
                Variant::Hardened => Cleanup::All,
            };
            // All end before any waiting build is admitted: none of them is elected only to
            // be terminated.
            for build in previous {
                let reason = match all {
                    true => format!("terminated by the pipeline's policy: build {id} started"),
                    false => format!(
                        "terminated by the pipeline's policy: build {id} of branch {} started",
                        request.branch
                    ),
                };
                self.end(
                    &build,
                    Status::Terminated,
                    Some(reason),
                    now_ms,
                    cleanup,
                    &mut changes,
                );
            }
        }
        let triggered = request.trigger.is_some();
        let stale_room = seen
            .is_some_and(|seen| self.room(self.settings_of(&request.pipeline), seen, triggered));
        self.builds.insert(
            id.clone(),
            Build {
                id: id.clone(),
                pipeline: request.pipeline,
                agent: request.agent,
                branch: request.branch,
                delivery: request.delivery.clone(),
                tick: request.tick.clone(),
                trigger: request.trigger,
                parent: request.parent,
                steps: request.steps,
                priority: request.priority.unwrap_or(priority),
                status: Status::Pending,
                reason: None,
                created_ms: now_ms,
                admitted_ms: None,
                engine_seen_ms: None,
                finished_ms: None,
                cleanup_queued: false,
            },
        );
        if stale_room {
            self.elect(&id, now_ms, &mut changes);
        }
        self.admit_pending(now_ms, &mut changes);
        if self.builds[&id].status == Status::Pending {
            changes.builds.push((id.clone(), Status::Pending, None));
        }
        let key = request
            .delivery
            .as_deref()
            .map(delivery_key)
            .or_else(|| request.tick.as_ref().map(Tick::key));
        if let Some(key) = key.filter(|key| self.deliveries.contains_key(key)) {
            if let Some(slot) = self.deliveries.get_mut(&key) {
                slot.0 = Some(id.clone());
            }
            self.touch(RunnerKind::Claim, &key);
        }
        if let Some(tick) = &request.tick {
            self.handled(tick);
        }
        (id, changes)
    }

    /// hardened: takes webhook delivery `delivery` — `Ok` the first time (its build is
    /// made next and recorded), else `Err` with the build it already asked for (`None`
    /// while that build is still being made). A claim whose build has not come
    /// [`CLAIM_TTL`] after it was taken died with the hermes that took it (a crash between
    /// the claim and the build): it is taken again. hermes keeps no such key (§4 row 9).
    pub fn claim_delivery(&mut self, delivery: &str, now_ms: u64) -> Result<(), Option<String>> {
        match self.deliveries.get(delivery) {
            Some((Some(build), _)) => Err(Some(build.clone())),
            Some((None, at_ms)) if now_ms < at_ms.saturating_add(CLAIM_TTL.as_millis() as u64) => {
                Err(None)
            }
            _ => {
                self.deliveries.insert(delivery.into(), (None, now_ms));
                self.touch(RunnerKind::Claim, delivery);
                Ok(())
            }
        }
    }

    /// Registers cron trigger `name` with period `every` (its registration time is kept when
    /// it exists): its ledger entry.
    pub fn register_cron(&mut self, name: &str, every: Duration, now_ms: u64) -> &CronTrigger {
        let every_ms = every.as_millis() as u64;
        self.touch(RunnerKind::Cron, name);
        let entry = self.crons.entry(name.into()).or_insert(CronTrigger {
            every_ms,
            created_ms: now_ms,
            last_ms: None,
        });
        entry.every_ms = every_ms;
        entry
    }

    /// Cron trigger `name`'s ledger entry.
    pub fn cron(&self, name: &str) -> Option<&CronTrigger> {
        self.crons.get(name)
    }

    /// Every cron trigger, by name.
    pub fn crons(&self) -> &BTreeMap<String, CronTrigger> {
        &self.crons
    }

    /// Records that `tick` was reported missed (past its catch-up window); a second report
    /// of the same tick is not recorded again. A tick already claimed (its build made or
    /// being made) was not missed: `Err` with its build (`None` while being made).
    pub fn report_missed(&mut self, tick: Tick, now_ms: u64) -> Result<(), Option<String>> {
        match self.deliveries.get(&tick.key()) {
            Some((Some(build), _)) => return Err(Some(build.clone())),
            Some((None, at_ms)) if now_ms < at_ms.saturating_add(CLAIM_TTL.as_millis() as u64) => {
                return Err(None)
            }
            _ => {}
        }
        self.handled(&tick);
        if !self.missed.contains(&tick) {
            self.missed.push(tick);
            self.touch(RunnerKind::Missed, "");
        }
        Ok(())
    }

    /// Ticks reported missed, in report order.
    pub fn missed(&self) -> &[Tick] {
        &self.missed
    }

    fn handled(&mut self, tick: &Tick) {
        if let Some(cron) = self.crons.get_mut(&tick.trigger) {
            cron.last_ms = Some(
                cron.last_ms
                    .map_or(tick.scheduled_ms, |l| l.max(tick.scheduled_ms)),
            );
            self.touch(RunnerKind::Cron, &tick.trigger);
        }
    }

    /// `holder` asks for the cronus lease for `ttl`: granted when free, lapsed or its own.
    pub fn take_lease(&mut self, holder: &str, ttl: Duration, now_ms: u64) -> Lease {
        let free = match &self.lease {
            None => true,
            Some((current, until)) => current == holder || *until <= now_ms,
        };
        if free {
            self.lease = Some((holder.into(), now_ms.saturating_add(ttl.as_millis() as u64)));
            self.touch(RunnerKind::Lease, "");
        }
        let (current, until_ms) = self.lease.clone().expect("the lease was just set");
        Lease {
            leader: current == holder,
            holder: current,
            until_ms,
        }
    }

    /// Elects `build`: admitted now, its claim and pods asked for.
    fn elect(&mut self, build: &str, now_ms: u64, changes: &mut Changes) {
        let Some(entry) = self.builds.get_mut(build) else {
            return;
        };
        entry.status = Status::Elected;
        entry.admitted_ms = Some(now_ms);
        let agent = entry.agent.clone();
        changes.builds.push((build.into(), Status::Elected, None));
        let ns = self.settings.namespace.clone();
        let pipeline = entry.pipeline.clone();
        self.touch(RunnerKind::Build, build);
        for (kind, spec) in [
            (TaskType::CreatePvc, pvc(build, &pipeline, &ns)),
            (
                TaskType::CreatePod,
                pod(&runner::dind_pod(build), build, &agent, &ns, "dind"),
            ),
            (
                TaskType::CreatePod,
                pod(&runner::engine_pod(build), build, &agent, &ns, "engine"),
            ),
        ] {
            let _ = self.enqueue(build, &agent, kind, spec, now_ms);
        }
    }

    /// Admits waiting builds, highest priority first, then oldest first, each when it fits
    /// its pipeline's, its branch's and the account's limits (one that does not fit waits
    /// without holding up the others).
    fn admit_pending(&mut self, now_ms: u64, changes: &mut Changes) {
        let mut waiting: Vec<(i32, &str)> = Vec::new();
        // The admitted builds that have not ended, counted once: per pipeline, per
        // (pipeline, branch), and the account's.
        let mut pipelines: BTreeMap<&str, u32> = BTreeMap::new();
        let mut branches: BTreeMap<(&str, &str), u32> = BTreeMap::new();
        // Per (pipeline, trigger), of the builds a trigger started.
        let mut triggers: BTreeMap<(&str, &str), u32> = BTreeMap::new();
        let mut account = 0u32;
        for b in self.builds.values() {
            if b.status == Status::Pending {
                waiting.push((-b.priority, b.id.as_str()));
            } else if b.admitted_ms.is_some() && !b.status.is_final() {
                account += 1;
                *pipelines.entry(b.pipeline.as_str()).or_default() += 1;
                *branches
                    .entry((b.pipeline.as_str(), b.branch.as_str()))
                    .or_default() += 1;
                if let Some(trigger) = &b.trigger {
                    *triggers
                        .entry((b.pipeline.as_str(), trigger.as_str()))
                        .or_default() += 1;
                }
            }
        }
        if waiting.is_empty() {
            return;
        }
        // Stable: equal priorities keep the ids' (creation) order.
        waiting.sort();
        let mut admit = Vec::new();
        for (_, id) in waiting {
            let b = &self.builds[id];
            let counts = Admitted {
                pipeline: pipelines.get(b.pipeline.as_str()).copied().unwrap_or(0),
                branch: branches
                    .get(&(b.pipeline.as_str(), b.branch.as_str()))
                    .copied()
                    .unwrap_or(0),
                trigger: b
                    .trigger
                    .as_deref()
                    .and_then(|t| triggers.get(&(b.pipeline.as_str(), t)).copied())
                    .unwrap_or(0),
                account,
            };
            if !self.room(self.settings_of(&b.pipeline), counts, b.trigger.is_some()) {
                continue;
            }
            account += 1;
            *pipelines.entry(b.pipeline.as_str()).or_default() += 1;
            *branches
                .entry((b.pipeline.as_str(), b.branch.as_str()))
                .or_default() += 1;
            if let Some(trigger) = &b.trigger {
                *triggers
                    .entry((b.pipeline.as_str(), trigger.as_str()))
                    .or_default() += 1;
            }
            admit.push(id.to_string());
            if self
                .settings
                .account_concurrency
                .is_some_and(|l| account >= l)
            {
                break;
            }
        }
        for id in admit {
            self.elect(&id, now_ms, changes);
        }
    }

    /// A `proxy` agent task for `agent` with `spec` ([`runner::proxy_spec`]): the agent sends
    /// the request inside the customer's network and reports how it went; it is handed out
    /// again as a workflow task is ([INFERENCE]: the platform's use of agent tasks is not
    /// public; the agent's side is venona's). Its id.
    pub fn proxy(&mut self, agent: &str, spec: Value, now_ms: u64) -> String {
        self.enqueue("", agent, TaskType::AgentTask, spec, now_ms)
    }

    /// Task `id` and where it is.
    pub fn task(&self, id: &str) -> Option<&Queued> {
        self.tasks.get(id)
    }

    fn enqueue(
        &mut self,
        build: &str,
        agent: &str,
        kind: TaskType,
        spec: Value,
        now_ms: u64,
    ) -> String {
        self.made_tasks += 1;
        let id = format!("t{:06}", self.made_tasks);
        self.touch(RunnerKind::Counters, "");
        self.touch(RunnerKind::Task, &id);
        let task = Task {
            id: id.clone(),
            kind,
            metadata: Metadata {
                created_at: rfc3339(now_ms),
                re_name: self.settings.re_name.clone(),
                workflow_id: build.into(),
                current_status_revision: 0,
                should_report_status: true,
            },
            spec,
        };
        self.tasks.insert(
            id.clone(),
            Queued {
                task,
                agent: agent.into(),
                state: TaskState::Ready,
                deliveries: 0,
                created_ms: now_ms,
                holder: None,
            },
        );
        id
    }

    /// `GET /api/agent/{agent}/tasks`: the agent's tasks that are ready, or handed out and
    /// not reported for [`Settings::redeliver_after`]; each is leased again. With each, how
    /// many times it has now been handed out.
    ///
    /// `replica` is the polling pod (hardened agents name it; venona does not). hardened
    /// hands a workflow's tasks to one replica at a time: while a task of it is leased to
    /// a replica, no other replica gets any task of that workflow — its deletions wait for
    /// the pod still creating (§4 row 2: venona serializes a workflow per process only;
    /// "a lease shared across replicas" is orrery's design, [INFERENCE]). faithful hands
    /// every due task to whoever polls.
    pub fn poll(&mut self, agent: &str, replica: Option<&str>, now_ms: u64) -> Vec<(Task, u32)> {
        let lease = self.settings.redeliver_after.as_millis() as u64;
        let hardened = self.settings.variant == Variant::Hardened;
        // hardened: each workflow held by a live lease, and by whom.
        let mut held: BTreeMap<String, String> = BTreeMap::new();
        if hardened {
            for queued in self.tasks.values().filter(|q| q.agent == agent) {
                if let (TaskState::Leased { until_ms }, Some(holder)) =
                    (&queued.state, &queued.holder)
                {
                    if *until_ms > now_ms {
                        held.insert(queued.task.metadata.workflow_id.clone(), holder.clone());
                    }
                }
            }
        }
        let mut out = Vec::new();
        for queued in self.tasks.values_mut().filter(|q| q.agent == agent) {
            let due = match queued.state {
                TaskState::Ready => true,
                TaskState::Leased { until_ms } => until_ms <= now_ms,
                TaskState::Done { .. } | TaskState::Expired | TaskState::Withdrawn => false,
            };
            let elsewhere = match (held.get(&queued.task.metadata.workflow_id), replica) {
                (Some(holder), Some(me)) => holder != me,
                _ => false,
            };
            if due && !elsewhere {
                queued.state = TaskState::Leased {
                    until_ms: now_ms + lease,
                };
                queued.deliveries += 1;
                if hardened {
                    queued.holder = replica.map(str::to_string);
                }
                out.push((queued.task.clone(), queued.deliveries));
            }
        }
        for (task, _) in &out {
            self.touch(RunnerKind::Task, &task.id);
        }
        out
    }

    /// hardened, with `PUT /api/agent/{agent}/status`: the replica still holds `tasks`
    /// (queued or running in it), so their leases last another
    /// [`Settings::redeliver_after`] — a replica slow at its work keeps its workflows
    /// while it heartbeats, and one that stopped loses them. A task it does not name (an
    /// answer it never got) is not renewed. Returns how many were renewed.
    pub fn renew(&mut self, agent: &str, replica: &str, tasks: &[String], now_ms: u64) -> usize {
        if self.settings.variant != Variant::Hardened {
            return 0;
        }
        let until_ms = now_ms + self.settings.redeliver_after.as_millis() as u64;
        let mut renewed = 0;
        for id in tasks {
            let Some(queued) = self.tasks.get_mut(id) else {
                continue;
            };
            // A lease run out is renewed too while no other pod took the task: the
            // heartbeat proves this pod still has it.
            let leased = matches!(queued.state, TaskState::Leased { .. });
            if queued.agent == agent && leased && queued.holder.as_deref() == Some(replica) {
                queued.state = TaskState::Leased { until_ms };
                renewed += 1;
                self.touch(RunnerKind::Task, id);
            }
        }
        renewed
    }

    /// `POST /api/agent/{agent}/tasks/{task}/statuses`.
    pub fn report(
        &mut self,
        agent: &str,
        task: &str,
        status: &TaskStatus,
        now_ms: u64,
    ) -> Result<Changes, ReportError> {
        let queued = self
            .tasks
            .get_mut(task)
            .filter(|q| q.agent == agent)
            .ok_or_else(|| ReportError::NotFound(task.into()))?;
        let expected = queued.task.metadata.current_status_revision + 1;
        if status.status_revision != expected {
            return Err(ReportError::Conflict {
                task: task.into(),
                sent: status.status_revision,
                expected,
            });
        }
        queued.task.metadata.current_status_revision = expected;
        let mut changes = Changes::default();
        let retry = status.status == Outcome::Error
            && status.is_retriable
            && queued.deliveries < MAXIMUM_RETRY_ATTEMPTS_ALLOWED;
        if retry {
            queued.state = TaskState::Ready;
            self.touch(RunnerKind::Task, task);
            return Ok(changes);
        }
        queued.state = TaskState::Done {
            outcome: status.status,
            reason: status.reason.clone(),
        };
        let (kind, build) = (queued.task.kind, queued.task.metadata.workflow_id.clone());
        let name = queued.task.object_name().to_string();
        self.touch(RunnerKind::Task, task);
        if status.status == Outcome::Error && kind.creates() {
            let reason = format!(
                "{kind:?} {name}: {}",
                status.reason.as_deref().unwrap_or("failed")
            );
            self.finish(&build, Status::Error, Some(reason), now_ms, &mut changes);
        }
        Ok(changes)
    }

    /// `PUT /api/agent/{agent}/status`.
    pub fn heartbeat(&mut self, agent: &str, now_ms: u64) {
        self.heartbeats.insert(agent.into(), now_ms);
        self.touch(RunnerKind::Heartbeat, agent);
    }

    /// The engine of `build` reports: `exit_code` `None` while it runs (it started, or a
    /// step ended), `Some` when the last step ended. A report about a build that ended is
    /// ignored (`false`).
    pub fn engine_report(
        &mut self,
        build: &str,
        exit_code: Option<i32>,
        now_ms: u64,
    ) -> Option<Changes> {
        let entry = self.builds.get_mut(build)?;
        // A build that ended, or was never admitted, has no engine.
        if entry.status.is_final() || entry.status == Status::Pending {
            return None;
        }
        entry.engine_seen_ms = Some(now_ms);
        let mut changes = Changes::default();
        match exit_code {
            None if entry.status == Status::Elected => {
                entry.status = Status::Running;
                changes.builds.push((build.into(), Status::Running, None));
                self.touch(RunnerKind::Build, build);
            }
            None => self.touch(RunnerKind::Build, build),
            Some(code) => {
                let status = if code == 0 {
                    Status::Success
                } else {
                    Status::Failure
                };
                self.finish(build, status, None, now_ms, &mut changes);
            }
        }
        Some(changes)
    }

    /// The platform's limits at `now_ms`: builds elected or silent too long end, tasks not
    /// done by their `expireAt` expire.
    pub fn tick(&mut self, now_ms: u64) -> Changes {
        let mut changes = Changes::default();
        let s = &self.settings;
        let (elected, silent) = (
            s.elected_max_age.as_millis() as u64,
            s.engine_inactive.as_millis() as u64,
        );
        let ending: Vec<(String, Status, String)> = self
            .builds
            .values()
            .filter_map(|b| match b.status {
                Status::Elected if now_ms >= b.admitted_ms.unwrap_or(b.created_ms) + elected => {
                    Some((
                        b.id.clone(),
                        Status::Error,
                        "elected longer than MAXIMUM_ELECTED_STATE_AGE_ALLOWED".to_string(),
                    ))
                }
                Status::Running if now_ms >= b.engine_seen_ms.unwrap_or(b.created_ms) + silent => {
                    Some((
                        b.id.clone(),
                        Status::Terminated,
                        "engine inactive longer than TIME_ENGINE_INACTIVE_UNTIL_TERMINATION"
                            .to_string(),
                    ))
                }
                _ => None,
            })
            .collect();
        for (build, status, reason) in ending {
            self.finish(&build, status, Some(reason), now_ms, &mut changes);
        }
        let expire = self.settings.expire_after.as_millis() as u64;
        for queued in self.tasks.values_mut() {
            if queued.state.is_open() && now_ms >= queued.created_ms + expire {
                queued.state = TaskState::Expired;
                changes.expired.push(queued.task.id.clone());
            }
        }
        for id in changes.expired.clone() {
            self.touch(RunnerKind::Task, &id);
        }
        self.forget(now_ms);
        changes
    }

    /// Forgets what a long-lived platform must not keep for ever: a task record past its
    /// `expireAt` (the TTL index deletes it, §1.3; an open one expired above first), a build
    /// ended [`BUILD_RETENTION`] ago with its log, a delivery or tick key claimed
    /// [`DELIVERY_RETENTION`] ago, a missed tick as old as a build kept.
    fn forget(&mut self, now_ms: u64) {
        let expire = self.settings.expire_after.as_millis() as u64;
        // What goes, for the store's journal (rare: collected whether or not one runs).
        let mut gone: Vec<(RunnerKind, String)> = Vec::new();
        self.tasks.retain(|id, queued| {
            let keep = queued.state.is_open() || now_ms < queued.created_ms.saturating_add(expire);
            if !keep {
                gone.push((RunnerKind::Task, id.clone()));
            }
            keep
        });
        let kept = BUILD_RETENTION.as_millis() as u64;
        let builds: Vec<String> = self
            .builds
            .values()
            .filter(|b| {
                b.finished_ms
                    .is_some_and(|f| now_ms >= f.saturating_add(kept))
            })
            .map(|b| b.id.clone())
            .collect();
        for build in builds {
            self.builds.remove(&build);
            self.logs.remove(&build);
            gone.push((RunnerKind::Build, build));
        }
        let claims = DELIVERY_RETENTION.as_millis() as u64;
        self.deliveries.retain(|key, (_, claimed)| {
            let keep = now_ms < claimed.saturating_add(claims);
            if !keep {
                gone.push((RunnerKind::Claim, key.clone()));
            }
            keep
        });
        let missed = self.missed.len();
        self.missed
            .retain(|tick| now_ms < tick.scheduled_ms.saturating_add(kept));
        if self.missed.len() != missed {
            gone.push((RunnerKind::Missed, String::new()));
        }
        for (kind, key) in gone {
            self.touch(kind, &key);
        }
    }

    /// Ends `build` with `status`, removes all its objects and admits its pipeline's next
    /// waiting builds.
    fn finish(
        &mut self,
        build: &str,
        status: Status,
        reason: Option<String>,
        now_ms: u64,
        changes: &mut Changes,
    ) {
        self.end(build, status, reason, now_ms, Cleanup::All, changes);
        self.admit_pending(now_ms, changes);
    }

    /// Ends `build` with `status` and queues the removal of its objects (once, if it was
    /// admitted); the caller admits what its end made room for. A terminated build whose
    /// pipeline terminates child builds ends its children that have not ended too, and
    /// theirs, with the same cleanup.
    fn end(
        &mut self,
        build: &str,
        status: Status,
        reason: Option<String>,
        now_ms: u64,
        cleanup: Cleanup,
        changes: &mut Changes,
    ) {
        let mut ending = vec![(build.to_string(), reason)];
        while let Some((build, reason)) = ending.pop() {
            if !self.end_one(&build, status, reason, now_ms, cleanup, changes) {
                continue;
            }
            let pipeline = &self.builds[&build].pipeline;
            if status != Status::Terminated || !self.settings_of(pipeline).terminate_children {
                continue;
            }
            let children = self
                .builds
                .values()
                .filter(|b| b.parent.as_deref() == Some(build.as_str()) && !b.status.is_final());
            let reason = format!("terminated with its parent build {build}");
            // Reversed: popped oldest first.
            let mut children: Vec<_> = children
                .map(|b| (b.id.clone(), Some(reason.clone())))
                .collect();
            children.reverse();
            ending.extend(children);
        }
    }

    /// hardened: `build` ended, so its creations not done yet are withdrawn — a creation
    /// handed out again after the cleanup would make an object nothing deletes but the
    /// sweeper (the create/delete race of §4 row 1; faithful hands them out as before,
    /// [INFERENCE]: the platform's side is not public). One already being executed still
    /// lands; the sweeper removes what it makes.
    fn withdraw_creations(&mut self, build: &str) {
        let mut withdrawn = Vec::new();
        for queued in self.tasks.values_mut() {
            let ours = queued.task.kind.creates() && queued.task.metadata.workflow_id == build;
            if ours && queued.state.is_open() {
                queued.state = TaskState::Withdrawn;
                withdrawn.push(queued.task.id.clone());
            }
        }
        for id in withdrawn {
            self.touch(RunnerKind::Task, &id);
        }
    }

    /// [`Queue::end`] of `build` alone; false when it had ended already (or is unknown).
    fn end_one(
        &mut self,
        build: &str,
        status: Status,
        reason: Option<String>,
        now_ms: u64,
        cleanup: Cleanup,
        changes: &mut Changes,
    ) -> bool {
        let Some(entry) = self.builds.get_mut(build) else {
            return false;
        };
        if entry.status.is_final() {
            return false;
        }
        entry.status = status;
        entry.reason = reason.clone();
        entry.finished_ms = Some(now_ms);
        changes.builds.push((build.into(), status, reason));
        let admitted = entry.admitted_ms.is_some();
        // Its objects exist only if it was admitted; their removal is queued once.
        let clean_up = admitted && !entry.cleanup_queued;
        entry.cleanup_queued |= clean_up;
        let agent = entry.agent.clone();
        self.touch(RunnerKind::Build, build);
        if admitted && self.settings.variant == Variant::Hardened {
            self.withdraw_creations(build);
        }
        if clean_up {
            let ns = self.settings.namespace.clone();
            let objects: &[(TaskType, String)] = &[
                (TaskType::DeletePod, runner::engine_pod(build)),
                (TaskType::DeletePod, runner::dind_pod(build)),
                (TaskType::DeletePvc, runner::dind_pvc(build)),
            ];
            let objects = match cleanup {
                Cleanup::All => objects,
                Cleanup::EngineOnly => &objects[..1],
            };
            for (kind, name) in objects {
                let _ = self.enqueue(
                    build,
                    &agent,
                    *kind,
                    json!({"name": name, "namespace": ns}),
                    now_ms,
                );
            }
        }
        true
    }
}

/// A build's pod (`role` is `engine` or `dind`). Only what the agent and the engine
/// stand-in read is set; the real specs come from the runtime environment (§2.2).
fn pod(name: &str, build: &str, agent: &str, namespace: &str, role: &str) -> Value {
    let image = match role {
        "engine" => "quay.io/codefresh/engine:3.3.13",
        _ => "quay.io/codefresh/dind:3.0.25",
    };
    let mut labels = json!({runner::BUILD_LABEL: build, "codefresh.io/role": role});
    if role == "engine" {
        labels[runner::AGENT_LABEL] = json!(runner::label_value(agent));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
        },
        "spec": {"containers": [{"name": role, "image": image}], "restartPolicy": "Never"},
    })
}

/// A build's dind volume claim (16Gi, the chart's default, §3), of the runtime's dind storage
/// class, labelled with what the default reuse selector and sort order read
/// (`codefresh-app`, `io.codefresh.accountName`, `pipeline_id`: §2.5).
fn pvc(build: &str, pipeline: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": runner::dind_pvc(build),
            "namespace": namespace,
            "labels": {
                runner::BUILD_LABEL: build,
                "codefresh-app": "dind",
                "io.codefresh.accountName": runner::ACCOUNT,
                "pipeline_id": runner::label_value(pipeline),
            },
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": runner::dind_storage_class(namespace),
            "resources": {"requests": {"storage": "16Gi"}},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(task: &Task) -> TaskStatus {
        TaskStatus {
            status: Outcome::Success,
            occurred_at: "t".into(),
            status_revision: task.metadata.current_status_revision + 1,
            is_retriable: false,
            reason: None,
        }
    }

    fn tasks_of(polled: Vec<(Task, u32)>) -> Vec<Task> {
        polled.into_iter().map(|(t, _)| t).collect()
    }

    fn steps() -> Vec<Step> {
        vec![Step::new(1000, 0)]
    }

    #[test]
    fn a_build_gets_its_claim_and_pods_then_their_deletion_when_it_ends() {
        let mut q = Queue::new(Settings::default());
        let b = q.create_build("p", "agent", steps(), 0);
        let tasks = tasks_of(q.poll("agent", None, 0));
        let names: Vec<_> = tasks
            .iter()
            .map(|t| (t.kind, t.object_name().to_string()))
            .collect();
        assert_eq!(
            names,
            [
                (TaskType::CreatePvc, format!("pvc-dind-{b}")),
                (TaskType::CreatePod, format!("dind-{b}")),
                (TaskType::CreatePod, format!("engine-{b}")),
            ]
        );
        assert!(
            q.poll("agent", None, 1).is_empty(),
            "leased tasks are not handed out twice at once"
        );
        assert!(q.poll("other", None, 1).is_empty());
        for t in &tasks {
            q.report("agent", &t.id, &ok(t), 2).unwrap();
        }
        q.engine_report(&b, None, 3).unwrap();
        assert_eq!(q.build(&b).unwrap().status, Status::Running);
        let changes = q.engine_report(&b, Some(0), 4).unwrap();
        assert_eq!(changes.builds, [(b.clone(), Status::Success, None)]);
        let cleanup = tasks_of(q.poll("agent", None, 5));
        assert_eq!(
            cleanup.iter().map(|t| t.kind).collect::<Vec<_>>(),
            [
                TaskType::DeletePod,
                TaskType::DeletePod,
                TaskType::DeletePvc
            ]
        );
    }

    #[test]
    fn an_unreported_task_is_handed_out_again_after_the_lease_and_a_stale_report_is_refused() {
        let mut q = Queue::new(Settings::default());
        q.create_build("p", "agent", steps(), 0);
        let first = tasks_of(q.poll("agent", None, 0));
        assert!(q.poll("agent", None, 59_999).is_empty());
        let again = q.poll("agent", None, 60_000);
        assert_eq!(again.len(), 3, "every unreported task comes back");
        assert!(again.iter().all(|(_, n)| *n == 2));
        let again = tasks_of(again);
        let t = &again[0];
        q.report("agent", &t.id, &ok(t), 60_001).unwrap();
        // The first delivery's report arrives late: same revision, already used.
        let stale = q.report("agent", &first[0].id, &ok(&first[0]), 60_002);
        assert_eq!(
            stale,
            Err(ReportError::Conflict {
                task: t.id.clone(),
                sent: 1,
                expected: 2
            })
        );
        assert!(matches!(
            q.report("agent", "t999", &ok(t), 1),
            Err(ReportError::NotFound(_))
        ));
    }

    #[test]
    fn hardened_keeps_a_workflow_with_the_replica_that_holds_it_while_its_heartbeats_renew_it() {
        for variant in [Variant::Faithful, Variant::Hardened] {
            let mut q = queue_of(variant);
            q.create_build("p", "agent", steps(), 0);
            let held = tasks_of(q.poll("agent", Some("pod-a"), 0));
            assert_eq!(held.len(), 3);
            let ids: Vec<String> = held.iter().map(|t| t.id.clone()).collect();
            // pod-a heartbeats at 50 s naming two of its three tasks (the third's answer it
            // never got): faithful renews nothing.
            let renewed = q.renew("agent", "pod-a", &ids[..2], 50_000);
            let other = q.poll("agent", Some("pod-b"), 60_000);
            match variant {
                Variant::Faithful => {
                    assert_eq!(renewed, 0);
                    assert_eq!(other.len(), 3, "every lease ran out: pod-b runs them all");
                }
                Variant::Hardened => {
                    assert_eq!(renewed, 2);
                    assert!(
                        other.is_empty(),
                        "pod-a still holds the workflow: pod-b gets none of it, not even \
                         the task whose lease ran out"
                    );
                    // pod-a gets the unrenewed task again itself.
                    let mine = tasks_of(q.poll("agent", Some("pod-a"), 60_001));
                    assert_eq!(mine.iter().map(|t| &t.id).collect::<Vec<_>>(), [&ids[2]]);
                    // A pod that stops heartbeating loses the workflow once its leases end.
                    let taken = q.poll("agent", Some("pod-b"), 120_001);
                    assert_eq!(taken.len(), 3, "pod-a went silent: pod-b takes over");
                    assert_eq!(
                        q.renew("agent", "pod-a", &ids, 120_002),
                        0,
                        "pod-a's late heartbeat renews nothing pod-b took"
                    );
                }
            }
        }
    }

    #[test]
    fn a_failed_creation_fails_the_build_and_a_retriable_error_hands_the_task_out_again() {
        let mut q = Queue::new(Settings::default());
        let b = q.create_build("p", "agent", steps(), 0);
        let tasks = tasks_of(q.poll("agent", None, 0));
        let mut retriable = ok(&tasks[0]);
        retriable.status = Outcome::Error;
        retriable.is_retriable = true;
        q.report("agent", &tasks[0].id, &retriable, 1).unwrap();
        assert_eq!(
            q.poll("agent", None, 2).len(),
            1,
            "handed out again at once"
        );
        let mut fatal = ok(&tasks[1]);
        fatal.status = Outcome::Error;
        fatal.reason = Some("already exists".into());
        let changes = q.report("agent", &tasks[1].id, &fatal, 3).unwrap();
        assert_eq!(changes.builds.len(), 1);
        let build = q.build(&b).unwrap();
        assert_eq!(build.status, Status::Error);
        assert_eq!(
            build.reason.as_deref(),
            Some(format!("CreatePod dind-{b}: already exists").as_str())
        );
        assert!(
            q.engine_report(&b, Some(0), 4).is_none(),
            "an ended build stays ended"
        );
    }

    #[test]
    fn the_platforms_limits_end_builds_and_expire_tasks() {
        for variant in [Variant::Faithful, Variant::Hardened] {
            let mut q = queue_of(variant);
            let stuck = q.create_build("p", "agent", steps(), 0);
            let silent = q.create_build("p", "agent", steps(), 0);
            q.engine_report(&silent, None, 1_000).unwrap();
            assert!(q.tick(299_999).builds.is_empty());
            let changes = q.tick(301_000);
            assert_eq!(changes.builds[0].0, silent);
            assert_eq!(changes.builds[0].1, Status::Terminated);
            let changes = q.tick(900_000);
            assert_eq!(changes.builds[0].0, stuck);
            assert_eq!(changes.builds[0].1, Status::Error);
            let changes = q.tick(3_600_000);
            // The creations were never done: faithful's expire; hardened withdrew them
            // when their builds ended.
            let expired = match variant {
                Variant::Faithful => 6,
                Variant::Hardened => 0,
            };
            assert_eq!(changes.expired.len(), expired, "{variant:?}");
        }
    }

    fn request(branch: &str) -> NewBuild {
        NewBuild {
            trigger: None,
            parent: None,
            pipeline: "p".into(),
            agent: "agent".into(),
            branch: branch.into(),
            steps: steps(),
            delivery: None,
            tick: None,
            priority: None,
        }
    }

    /// An empty queue of `variant`.
    fn queue_of(variant: Variant) -> Queue {
        Queue::new(Settings {
            variant,
            ..Settings::default()
        })
    }

    fn limited(variant: Variant, pipeline: Pipeline) -> Queue {
        let mut q = queue_of(variant);
        q.set_pipeline("p", pipeline, 0);
        q
    }

    #[test]
    fn a_pipeline_at_its_limit_keeps_a_build_pending_until_an_admitted_one_ends() {
        let mut q = limited(
            Variant::Hardened,
            Pipeline {
                concurrency: Some(1),
                ..Pipeline::default()
            },
        );
        let (first, _) = q.make_build(request("main"), None, 0);
        let (second, changes) = q.make_build(request("main"), None, 1);
        assert_eq!(changes.builds, [(second.clone(), Status::Pending, None)]);
        assert_eq!(q.admitted_counts("p", "main", None).pipeline, 1);
        assert_eq!(
            q.poll("agent", None, 2).len(),
            3,
            "only the admitted build's tasks"
        );
        let changes = q.engine_report(&first, Some(0), 3).unwrap();
        assert_eq!(
            changes.builds,
            [
                (first.clone(), Status::Success, None),
                (second.clone(), Status::Elected, None)
            ]
        );
        assert_eq!(q.build(&second).unwrap().admitted_ms, Some(3));
        // Maintenance mode admits nothing; leaving it admits the waiting builds at once.
        q.set_pipeline(
            "p",
            Pipeline {
                concurrency: Some(0),
                ..Pipeline::default()
            },
            4,
        );
        let (third, _) = q.make_build(request("main"), None, 4);
        assert_eq!(q.build(&third).unwrap().status, Status::Pending);
        assert!(
            q.engine_report(&third, Some(0), 5).is_none(),
            "a waiting build has no engine"
        );
        let changes = q.set_pipeline("p", Pipeline::default(), 6);
        assert_eq!(changes.builds, [(third.clone(), Status::Elected, None)]);
    }

    #[test]
    fn an_admission_on_a_stale_read_passes_the_limit() {
        let mut q = limited(
            Variant::Faithful,
            Pipeline {
                concurrency: Some(1),
                ..Pipeline::default()
            },
        );
        // Both checks read 0 before either elected.
        let seen = q.admitted_counts("p", "main", None);
        q.make_build(request("main"), Some(seen), 0);
        q.make_build(request("main"), Some(seen), 0);
        assert_eq!(
            q.admitted_counts("p", "main", None).pipeline,
            2,
            "faithful's check-then-act"
        );
        let (late, _) = q.make_build(request("main"), None, 1);
        assert_eq!(q.build(&late).unwrap().status, Status::Pending);
        // A stale read that saw no room does not strand a build once there is room.
        let mut q = limited(
            Variant::Faithful,
            Pipeline {
                concurrency: Some(1),
                terminate_previous_on_branch: true,
                ..Pipeline::default()
            },
        );
        let (first, _) = q.make_build(request("main"), None, 0);
        let seen = q.admitted_counts("p", "main", None);
        assert_eq!(seen.pipeline, 1);
        // The policy ends the first build: the read was stale, the slot is free.
        let (second, changes) = q.make_build(request("main"), Some(seen), 1);
        assert_eq!(q.build(&first).unwrap().status, Status::Terminated);
        assert_eq!(
            q.build(&second).unwrap().status,
            Status::Elected,
            "{changes:?}"
        );
    }

    #[test]
    fn the_branch_policy_does_not_elect_a_waiting_build_it_then_terminates() {
        let mut q = limited(
            Variant::Hardened,
            Pipeline {
                concurrency: Some(1),
                terminate_previous_on_branch: true,
                ..Pipeline::default()
            },
        );
        let (first, _) = q.make_build(request("main"), None, 0);
        let (other, _) = q.make_build(request("dev"), None, 0);
        assert_eq!(q.build(&other).unwrap().status, Status::Pending);
        let (third, changes) = q.make_build(request("main"), None, 1);
        // first ends; the oldest waiting build (dev's) takes the slot; third waits.
        assert_eq!(
            changes
                .builds
                .iter()
                .map(|(b, s, _)| (b.as_str(), *s))
                .collect::<Vec<_>>(),
            [
                (first.as_str(), Status::Terminated),
                (other.as_str(), Status::Elected),
                (third.as_str(), Status::Pending)
            ]
        );
        let (fourth, changes) = q.make_build(request("main"), None, 2);
        assert_eq!(
            changes
                .builds
                .iter()
                .map(|(b, s, _)| (b.as_str(), *s))
                .collect::<Vec<_>>(),
            [
                (third.as_str(), Status::Terminated),
                (fourth.as_str(), Status::Pending)
            ],
            "a waiting build of the branch is terminated without ever being elected"
        );
    }

    fn status(q: &Queue, id: &str) -> Status {
        q.build(id).unwrap().status
    }

    #[test]
    fn a_branch_limit_holds_only_its_branch_and_an_account_limit_every_pipeline() {
        let mut q = limited(
            Variant::Hardened,
            Pipeline {
                branch_concurrency: Some(1),
                ..Pipeline::default()
            },
        );
        let (main1, _) = q.make_build(request("main"), None, 0);
        let (main2, _) = q.make_build(request("main"), None, 0);
        let (dev, _) = q.make_build(request("dev"), None, 0);
        assert_eq!(status(&q, &main1), Status::Elected);
        assert_eq!(status(&q, &main2), Status::Pending, "its branch is full");
        assert_eq!(
            status(&q, &dev),
            Status::Elected,
            "another branch is not held up"
        );
        q.engine_report(&main1, Some(0), 1).unwrap();
        assert_eq!(status(&q, &main2), Status::Elected);
        // The account's limit counts every pipeline's builds; an end in one pipeline
        // admits another pipeline's waiting build.
        let mut q = Queue::new(Settings {
            account_concurrency: Some(2),
            ..Settings::default()
        });
        let of = |pipeline: &str| NewBuild {
            trigger: None,
            parent: None,
            pipeline: pipeline.into(),
            ..request("main")
        };
        let (a, _) = q.make_build(of("a"), None, 0);
        let (b, _) = q.make_build(of("b"), None, 0);
        let (c, _) = q.make_build(of("c"), None, 0);
        assert_eq!(status(&q, &c), Status::Pending);
        assert_eq!(q.admitted_counts("c", "main", None).account, 2);
        q.engine_report(&a, Some(0), 1).unwrap();
        assert_eq!(status(&q, &c), Status::Elected);
        assert_eq!(status(&q, &b), Status::Elected);
    }

    #[test]
    fn waiting_builds_are_admitted_highest_priority_first() {
        let mut q = limited(
            Variant::Hardened,
            Pipeline {
                concurrency: Some(1),
                ..Pipeline::default()
            },
        );
        let (first, _) = q.make_build(request("main"), None, 0);
        let (low, _) = q.make_build(request("main"), None, 0);
        let (high, _) = q.make_build(
            NewBuild {
                trigger: None,
                parent: None,
                priority: Some(50),
                ..request("main")
            },
            None,
            0,
        );
        assert_eq!(q.build(&high).unwrap().priority, 50);
        q.engine_report(&first, Some(0), 1).unwrap();
        assert_eq!(status(&q, &high), Status::Elected, "the higher priority");
        assert_eq!(status(&q, &low), Status::Pending);
        q.engine_report(&high, Some(0), 2).unwrap();
        assert_eq!(status(&q, &low), Status::Elected);
    }

    #[test]
    fn the_termination_policies_end_all_builds_or_only_a_matching_branchs() {
        let mut q = limited(
            Variant::Hardened,
            Pipeline {
                terminate_all: true,
                ..Pipeline::default()
            },
        );
        let (main, _) = q.make_build(request("main"), None, 0);
        let (dev, _) = q.make_build(request("dev"), None, 1);
        assert_eq!(status(&q, &main), Status::Terminated, "another branch too");
        let reason = q.build(&main).unwrap().reason.clone().unwrap();
        assert!(reason.contains(&format!("build {dev} started")), "{reason}");
        assert_eq!(status(&q, &dev), Status::Elected);
        let mut q = limited(
            Variant::Hardened,
            Pipeline {
                terminate_previous_on_branch: true,
                terminate_branch_pattern: Some("^release/".into()),
                ..Pipeline::default()
            },
        );
        let (main1, _) = q.make_build(request("main"), None, 0);
        let (_, _) = q.make_build(request("main"), None, 1);
        assert_eq!(
            status(&q, &main1),
            Status::Elected,
            "main does not match the pattern"
        );
        let (release1, _) = q.make_build(request("release/1"), None, 2);
        let (release2, _) = q.make_build(request("release/1"), None, 3);
        assert_eq!(status(&q, &release1), Status::Terminated);
        assert_eq!(status(&q, &release2), Status::Elected);
        assert_eq!(status(&q, &main1), Status::Elected, "only its branch's");
    }

    #[test]
    fn a_stale_read_passes_a_branch_limit_in_faithful() {
        let mut q = limited(
            Variant::Faithful,
            Pipeline {
                branch_concurrency: Some(1),
                ..Pipeline::default()
            },
        );
        let seen = q.admitted_counts("p", "main", None);
        let (a, _) = q.make_build(request("main"), Some(seen), 0);
        let (b, _) = q.make_build(request("main"), Some(seen), 0);
        assert_eq!(
            (status(&q, &a), status(&q, &b)),
            (Status::Elected, Status::Elected)
        );
        assert_eq!(q.admitted_counts("p", "main", None).branch, 2);
    }

    #[test]
    fn pipeline_settings_out_of_range_are_refused_by_name() {
        let check = |p: Pipeline| p.check().unwrap_err();
        assert!(check(Pipeline {
            branch_concurrency: Some(0),
            ..Pipeline::default()
        })
        .contains("branchConcurrency"));
        assert!(check(Pipeline {
            priority: 101,
            ..Pipeline::default()
        })
        .contains("priority"));
        assert!(check(Pipeline {
            terminate_branch_pattern: Some("(".into()),
            ..Pipeline::default()
        })
        .contains("terminateBranchPattern"));
        assert!(check(Pipeline {
            terminate_branch_pattern: Some("a".repeat(MAX_PATTERN_LEN + 1)),
            ..Pipeline::default()
        })
        .contains("longer than"));
        assert!(Pipeline {
            terminate_branch_pattern: Some("^release/.*$".into()),
            priority: -100,
            ..Pipeline::default()
        }
        .check()
        .is_ok());
    }

    #[test]
    fn a_policy_termination_leaves_the_dind_pod_and_claim_only_in_faithful() {
        for (variant, deletions) in [(Variant::Faithful, 1), (Variant::Hardened, 3)] {
            let mut q = limited(
                variant,
                Pipeline {
                    terminate_previous_on_branch: true,
                    ..Pipeline::default()
                },
            );
            let (first, _) = q.make_build(request("main"), None, 0);
            let (other, _) = q.make_build(request("dev"), None, 0);
            q.poll("agent", None, 0);
            let (second, changes) = q.make_build(request("main"), None, 1);
            let ended = changes.builds[0].clone();
            assert_eq!(
                (ended.0, ended.1),
                (first.clone(), Status::Terminated),
                "{variant:?}"
            );
            assert!(ended.2.unwrap().contains(&second));
            assert!(
                !q.build(&other).unwrap().status.is_final(),
                "another branch's build runs on"
            );
            let cleanup: Vec<_> = tasks_of(q.poll("agent", None, 2))
                .into_iter()
                .filter(|t| t.metadata.workflow_id == first)
                .map(|t| t.object_name().to_string())
                .collect();
            assert_eq!(cleanup.len(), deletions, "{variant:?}: {cleanup:?}");
            assert_eq!(cleanup[0], format!("engine-{first}"));
        }
    }

    #[test]
    fn a_log_keeps_each_line_once_refuses_a_gap_and_closes_when_its_build_ends() {
        let mut q = Queue::new(Settings::default());
        let id = q.create_build("p", "agent", steps(), 0);
        let lines = |range: std::ops::Range<u32>| range.map(|n| format!("line {n}")).collect();
        assert_eq!(q.append_log(&id, 0, lines(0..3), u64::MAX), Ok(3));
        // Sent again after a lost answer, with one more: only the new line is kept.
        assert_eq!(q.append_log(&id, 1, lines(1..4), u64::MAX), Ok(4));
        assert_eq!(
            q.append_log(&id, 6, lines(6..7), u64::MAX),
            Err(LogError::Gap {
                build: id.clone(),
                sent: 6,
                next: 4
            })
        );
        assert_eq!(q.log(&id, 2), Some(&lines(2..4)[..]));
        // Past its bytes (each line here is 6 bytes): refused whole, nothing kept.
        assert_eq!(
            q.append_log(&id, 4, lines(4..6), 30),
            Err(LogError::TooLarge {
                build: id.clone(),
                limit: 30
            })
        );
        assert_eq!(q.append_log(&id, 4, lines(4..5), 30), Ok(5));
        assert_eq!(
            q.append_log(&id, 5, lines(5..6), 30),
            Err(LogError::TooLarge {
                build: id.clone(),
                limit: 30
            })
        );
        assert_eq!(q.log(&id, 9), Some(&[][..]));
        assert_eq!(q.log("b99999", 0), None);
        assert_eq!(
            q.append_log("b99999", 0, lines(0..1), u64::MAX),
            Err(LogError::NotFound("b99999".into()))
        );
        q.engine_report(&id, None, 1_000);
        q.engine_report(&id, Some(0), 2_000);
        assert_eq!(
            q.append_log(&id, 5, lines(5..6), u64::MAX),
            Err(LogError::Ended(id.clone()))
        );
        assert_eq!(q.log(&id, 0).map(<[String]>::len), Some(5));
    }

    #[test]
    fn a_long_lived_platform_forgets_old_tasks_builds_logs_and_delivery_ids() {
        let mut q = Queue::new(Settings::default());
        let hour = 3_600_000;
        let day = 24 * hour;
        assert_eq!(q.claim_delivery("d-1", 0), Ok(()));
        let (done, _) = q.make_build(
            NewBuild {
                trigger: None,
                parent: None,
                delivery: Some("d-1".into()),
                ..request("main")
            },
            None,
            0,
        );
        assert_eq!(
            q.append_log(&done, 0, vec!["a line".into()], u64::MAX),
            Ok(1)
        );
        for (task, _) in q.poll("agent", None, 0) {
            q.report("agent", &task.id, &ok(&task), 1_000).unwrap();
        }
        q.engine_report(&done, None, 2_000);
        q.engine_report(&done, Some(0), 3_000);
        // A build made later has open tasks: they are kept until they expire.
        let open = q.create_build("p", "agent", steps(), hour);
        let tasks = |q: &Queue| q.tasks().count();
        let before = tasks(&q);
        q.tick(hour + 4_000);
        assert!(
            tasks(&q) < before,
            "done tasks past their expireAt are gone"
        );
        assert!(q.tasks().all(|t| t.task.metadata.workflow_id == open));
        assert!(
            q.build(&done).is_some(),
            "an ended build is kept for its retention"
        );
        q.tick(4 * day);
        assert_eq!(
            q.claim_delivery("d-1", 4 * day),
            Ok(()),
            "a delivery id is remembered 3 days"
        );
        let retention = BUILD_RETENTION.as_millis() as u64;
        q.tick(3_000 + retention);
        assert!(q.build(&done).is_none() && q.log(&done, 0).is_none());
        assert!(
            q.build(&open).is_some(),
            "a build that ended later (elected too long, at 4 days) is kept until its own retention"
        );
    }

    #[test]
    fn a_delivery_is_claimed_once_and_answers_with_its_build_after() {
        let mut q = limited(Variant::Hardened, Pipeline::default());
        let (d1, d2) = (delivery_key("d1"), delivery_key("d2"));
        assert_eq!(q.claim_delivery(&d1, 0), Ok(()));
        assert_eq!(q.claim_delivery(&d1, 59_999), Err(None), "in flight");
        let (id, _) = q.make_build(
            NewBuild {
                trigger: None,
                parent: None,
                delivery: Some("d1".into()),
                tick: None,
                priority: None,
                ..request("main")
            },
            None,
            0,
        );
        assert_eq!(q.claim_delivery(&d1, 600_000), Err(Some(id.clone())));
        assert_eq!(q.build(&id).unwrap().delivery.as_deref(), Some("d1"));
        assert_eq!(q.claim_delivery(&d2, 0), Ok(()));
        // A claim whose build never came (its hermes died) is taken again after the TTL.
        assert_eq!(q.claim_delivery(&d2, 59_999), Err(None));
        assert_eq!(q.claim_delivery(&d2, 60_000), Ok(()));
    }

    #[test]
    fn the_cron_ledger_remembers_the_last_tick_handled_and_a_hardened_tick_is_claimed_once() {
        let mut q = Queue::new(Settings::default());
        let cron = q
            .register_cron("nightly", Duration::from_secs(60), 1_000)
            .clone();
        assert_eq!(cron.handled_until(), 1_000);
        // Registering again keeps when it was first registered.
        assert_eq!(
            q.register_cron("nightly", Duration::from_secs(60), 9_000)
                .created_ms,
            1_000
        );
        let tick = Tick {
            trigger: "nightly".into(),
            scheduled_ms: 60_000,
        };
        assert_eq!(q.claim_delivery(&tick.key(), 60_000), Ok(()));
        let (id, _) = q.make_build(
            NewBuild {
                trigger: None,
                parent: None,
                tick: Some(tick.clone()),
                priority: None,
                ..request("main")
            },
            None,
            60_000,
        );
        assert_eq!(q.claim_delivery(&tick.key(), 60_000), Err(Some(id.clone())));
        assert_eq!(q.build(&id).unwrap().tick, Some(tick));
        assert_eq!(q.cron("nightly").unwrap().handled_until(), 60_000);
        let missed = Tick {
            trigger: "nightly".into(),
            scheduled_ms: 120_000,
        };
        assert_eq!(q.report_missed(missed.clone(), 130_000), Ok(()));
        assert_eq!(q.report_missed(missed.clone(), 130_000), Ok(()));
        assert_eq!(q.missed(), [missed]);
        // A tick whose build was made was not missed.
        let ran = Tick {
            trigger: "nightly".into(),
            scheduled_ms: 60_000,
        };
        assert_eq!(q.report_missed(ran, 900_000), Err(Some(id.clone())));
        assert_eq!(q.missed().len(), 1);
        assert_eq!(q.cron("nightly").unwrap().last_ms, Some(120_000));
    }

    #[test]
    fn the_cronus_lease_has_one_holder_until_it_lapses() {
        let mut q = Queue::new(Settings::default());
        let ttl = Duration::from_secs(15);
        assert!(q.take_lease("cronus-0", ttl, 0).leader);
        let refused = q.take_lease("cronus-1", ttl, 5_000);
        assert!(!refused.leader);
        assert_eq!(
            (refused.holder.as_str(), refused.until_ms),
            ("cronus-0", 15_000)
        );
        assert!(
            q.take_lease("cronus-0", ttl, 10_000).leader,
            "the holder renews"
        );
        assert!(!q.take_lease("cronus-1", ttl, 24_999).leader);
        assert!(
            q.take_lease("cronus-1", ttl, 25_000).leader,
            "a lapsed lease is free"
        );
    }

    fn triggered(branch: &str, trigger: &str) -> NewBuild {
        NewBuild {
            trigger: Some(trigger.into()),
            ..request(branch)
        }
    }

    #[test]
    fn a_trigger_limit_holds_only_the_builds_its_trigger_started() {
        let mut q = limited(
            Variant::Hardened,
            Pipeline {
                trigger_concurrency: Some(1),
                ..Pipeline::default()
            },
        );
        let (push1, _) = q.make_build(triggered("main", "push"), None, 0);
        let (push2, _) = q.make_build(triggered("dev", "push"), None, 1);
        let (nightly, _) = q.make_build(triggered("main", "nightly"), None, 2);
        let (manual, _) = q.make_build(request("main"), None, 3);
        assert_eq!(
            [&push1, &push2, &nightly, &manual].map(|b| status(&q, b)),
            [
                Status::Elected,
                Status::Pending,
                Status::Elected,
                Status::Elected
            ],
            "one build of each trigger; a build no trigger started is not held"
        );
        assert_eq!(q.admitted_counts("p", "x", Some("push")).trigger, 1);
        q.engine_report(&push1, Some(0), 4).unwrap();
        assert_eq!(
            status(&q, &push2),
            Status::Elected,
            "admitted as push1 ends"
        );
        // faithful's stale read passes it, as every other limit.
        let mut q = limited(
            Variant::Faithful,
            Pipeline {
                trigger_concurrency: Some(1),
                ..Pipeline::default()
            },
        );
        assert!(q.limited("p"));
        let seen = q.admitted_counts("p", "main", Some("push"));
        let (a, _) = q.make_build(triggered("main", "push"), Some(seen), 0);
        let (b, _) = q.make_build(triggered("main", "push"), Some(seen), 0);
        assert_eq!(
            (status(&q, &a), status(&q, &b)),
            (Status::Elected, Status::Elected)
        );
        let refused = Pipeline {
            trigger_concurrency: Some(0),
            ..Pipeline::default()
        }
        .check()
        .unwrap_err();
        assert!(refused.contains("triggerConcurrency"), "{refused}");
    }

    #[test]
    fn a_terminated_build_ends_its_children_when_its_pipeline_says_so() {
        for (children, variant) in [
            (true, Variant::Hardened),
            (true, Variant::Faithful),
            (false, Variant::Hardened),
        ] {
            let mut q = limited(
                variant,
                Pipeline {
                    terminate_previous_on_branch: true,
                    terminate_children: children,
                    ..Pipeline::default()
                },
            );
            let (parent, _) = q.make_build(request("main"), None, 0);
            let child_of = |parent: &str| NewBuild {
                pipeline: "q".into(),
                parent: Some(parent.into()),
                ..request("main")
            };
            let (child, _) = q.make_build(child_of(&parent), None, 1);
            // The child's pipeline does not terminate children: its own child runs on.
            let (grandchild, _) = q.make_build(child_of(&child), None, 2);
            let (_, changes) = q.make_build(request("main"), None, 3);
            assert_eq!(status(&q, &parent), Status::Terminated);
            let want = match children {
                true => Status::Terminated,
                false => Status::Elected,
            };
            assert_eq!(status(&q, &child), want, "children: {children}");
            assert_eq!(status(&q, &grandchild), Status::Elected);
            if children {
                let reason = q.build(&child).unwrap().reason.clone().unwrap();
                assert_eq!(reason, format!("terminated with its parent build {parent}"));
                assert!(changes
                    .builds
                    .iter()
                    .any(|(b, s, _)| *b == child && *s == Status::Terminated));
                // The child's cleanup is the policy's: faithful deletes its engine pod only.
                let cleanup: Vec<String> = q
                    .tasks()
                    .filter(|t| t.task.metadata.workflow_id == child && !t.task.kind.creates())
                    .map(|t| t.task.object_name().to_string())
                    .collect();
                let expected = match variant {
                    Variant::Faithful => vec![format!("engine-{child}")],
                    Variant::Hardened => vec![
                        format!("engine-{child}"),
                        format!("dind-{child}"),
                        format!("pvc-dind-{child}"),
                    ],
                };
                assert_eq!(cleanup, expected);
            }
        }
    }

    #[test]
    fn hardened_withdraws_an_ended_builds_creations_and_faithful_hands_them_out_again() {
        for variant in [Variant::Faithful, Variant::Hardened] {
            let mut q = queue_of(variant);
            let b = q.create_build("p", "agent", steps(), 0);
            // The three creations are handed out; their answers are lost.
            assert_eq!(q.poll("agent", None, 0).len(), 3);
            // The build ends (its pipeline's policy, another build of its branch) before
            // any creation is reported.
            q.set_pipeline(
                "p",
                Pipeline {
                    terminate_previous_on_branch: true,
                    ..Pipeline::default()
                },
                1,
            );
            let next = q.create_build("p", "agent", steps(), 2);
            assert_eq!(status(&q, &b), Status::Terminated);
            let lease = Settings::default().redeliver_after.as_millis() as u64;
            let again: Vec<(TaskType, String)> = tasks_of(q.poll("agent", None, 3 + lease))
                .iter()
                .filter(|t| t.metadata.workflow_id == b)
                .map(|t| (t.kind, t.object_name().to_string()))
                .collect();
            let creations = again.iter().filter(|(kind, _)| kind.creates()).count();
            match variant {
                Variant::Faithful => assert_eq!(creations, 3, "{again:?}"),
                Variant::Hardened => {
                    assert_eq!(creations, 0, "{again:?}");
                    assert_eq!(again.len(), 3, "only its deletions: {again:?}");
                    assert!(q
                        .tasks()
                        .filter(|t| t.task.metadata.workflow_id == b && t.task.kind.creates())
                        .all(|t| t.state == TaskState::Withdrawn));
                }
            }
            assert_eq!(status(&q, &next), Status::Elected);
        }
    }
}
