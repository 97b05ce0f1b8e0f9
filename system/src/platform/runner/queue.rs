//! The builds and the agent task queue, as pure state: what the API (`super::api`) and the
//! platform's timers (`super::run`) change. No IO; every method takes the time.
//!
//! The platform side is closed source (`runner-research.md` §5, §6); what is modelled is
//! **inferred** from the agent's protocol and the public facts, each marked below:
//! - a build is elected at once and gets three tasks, `CreatePvc pvc-dind-<id>`, `CreatePod
//!   dind-<id>`, `CreatePod engine-<id>` (§2.3 step 3, [INFERENCE] on the set and order);
//! - with `waitForStatusReport` a task handed out stays the agent's until it reports a
//!   status; one not reported within [`Settings::redeliver_after`] is handed out again
//!   (§1.7, §6.1: "model it as a parameter");
//! - a status is accepted only with `statusRevision` = the task's revision + 1 (§1.3,
//!   [INFERENCE] optimistic concurrency);
//! - `Error` with `isRetriable` hands the task out again, up to
//!   [`MAXIMUM_RETRY_ATTEMPTS_ALLOWED`]; a non-retriable `Error` of a creation fails the
//!   build ([INFERENCE]: the build cannot run without its pods);
//! - a finished build gets `DeletePod engine-<id>`, `DeletePod dind-<id>`, `DeletePvc
//!   pvc-dind-<id>` (§2.3 step 8, [INFERENCE]);
//! - the platform's limits (§2.4): elected at most 900 s, no engine report for 300 s
//!   terminates the build, a task not done within [`Settings::expire_after`] expires (the
//!   `expireAt` TTL index, §1.3).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use crate::core::runner::{self, Metadata, Outcome, Task, TaskStatus, TaskType};
use crate::core::time::rfc3339;

/// `MAXIMUM_RETRY_ATTEMPTS_ALLOWED` (§2.4), applied to a task handed out again after a
/// retriable error ([INFERENCE]: the real limit counts a build's retries).
pub const MAXIMUM_RETRY_ATTEMPTS_ALLOWED: u32 = 20;

/// The platform's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// A task handed out and not reported is handed out again after this (§6.1).
    pub redeliver_after: Duration,
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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            redeliver_after: Duration::from_secs(60),
            elected_max_age: Duration::from_secs(900),
            engine_inactive: Duration::from_secs(300),
            expire_after: Duration::from_secs(3600),
            namespace: "codefresh".into(),
            re_name: "runtime".into(),
        }
    }
}

/// A build's status (task-logger's `enums.js`, §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
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
        !matches!(self, Status::Elected | Status::Running)
    }

    /// The name in the API and the trace.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Elected => "elected",
            Status::Running => "running",
            Status::Success => "success",
            Status::Failure => "failure",
            Status::Error => "error",
            Status::Terminated => "terminated",
        }
    }
}

/// One step of a pipeline: how long it runs and how it exits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Step {
    /// Its running time in milliseconds.
    pub millis: u64,
    /// Its exit code.
    pub exit_code: i32,
}

/// One build.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Build {
    /// `b<n>`.
    pub id: String,
    /// Its pipeline.
    pub pipeline: String,
    /// The agent whose runtime runs it.
    pub agent: String,
    /// What the engine runs.
    pub steps: Vec<Step>,
    /// Where it is.
    pub status: Status,
    /// Why it ended as it did, when not by its steps.
    pub reason: Option<String>,
    /// When it was made (Unix ms).
    pub created_ms: u64,
    /// When the engine last reported (Unix ms).
    pub engine_seen_ms: Option<u64>,
    /// When it ended (Unix ms).
    pub finished_ms: Option<u64>,
    /// Its cleanup tasks were made.
    pub cleanup_queued: bool,
}

/// Where a task is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
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
}

/// A task and where it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
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
    made_builds: u64,
    made_tasks: u64,
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

    /// A new build of `pipeline` on `agent`'s runtime, elected at once: its id. Its
    /// creation tasks are queued.
    pub fn create_build(
        &mut self,
        pipeline: &str,
        agent: &str,
        steps: Vec<Step>,
        now_ms: u64,
    ) -> String {
        self.made_builds += 1;
        let id = format!("b{:05}", self.made_builds);
        self.builds.insert(
            id.clone(),
            Build {
                id: id.clone(),
                pipeline: pipeline.into(),
                agent: agent.into(),
                steps,
                status: Status::Elected,
                reason: None,
                created_ms: now_ms,
                engine_seen_ms: None,
                finished_ms: None,
                cleanup_queued: false,
            },
        );
        let ns = self.settings.namespace.clone();
        for (kind, spec) in [
            (TaskType::CreatePvc, pvc(&id, &ns)),
            (
                TaskType::CreatePod,
                pod(&runner::dind_pod(&id), &id, &ns, "dind"),
            ),
            (
                TaskType::CreatePod,
                pod(&runner::engine_pod(&id), &id, &ns, "engine"),
            ),
        ] {
            self.enqueue(&id, agent, kind, spec, now_ms);
        }
        id
    }

    fn enqueue(&mut self, build: &str, agent: &str, kind: TaskType, spec: Value, now_ms: u64) {
        self.made_tasks += 1;
        let id = format!("t{:06}", self.made_tasks);
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
            id,
            Queued {
                task,
                agent: agent.into(),
                state: TaskState::Ready,
                deliveries: 0,
                created_ms: now_ms,
            },
        );
    }

    /// `GET /api/agent/{agent}/tasks`: the agent's tasks that are ready, or handed out and
    /// not reported for [`Settings::redeliver_after`]; each is leased again. With each, how
    /// many times it has now been handed out.
    pub fn poll(&mut self, agent: &str, now_ms: u64) -> Vec<(Task, u32)> {
        let lease = self.settings.redeliver_after.as_millis() as u64;
        let mut out = Vec::new();
        for queued in self.tasks.values_mut().filter(|q| q.agent == agent) {
            let due = match queued.state {
                TaskState::Ready => true,
                TaskState::Leased { until_ms } => until_ms <= now_ms,
                TaskState::Done { .. } | TaskState::Expired => false,
            };
            if due {
                queued.state = TaskState::Leased {
                    until_ms: now_ms + lease,
                };
                queued.deliveries += 1;
                out.push((queued.task.clone(), queued.deliveries));
            }
        }
        out
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
            return Ok(changes);
        }
        queued.state = TaskState::Done {
            outcome: status.status,
            reason: status.reason.clone(),
        };
        let (kind, build) = (queued.task.kind, queued.task.metadata.workflow_id.clone());
        let name = queued.task.object_name().to_string();
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
        if entry.status.is_final() {
            return None;
        }
        entry.engine_seen_ms = Some(now_ms);
        let mut changes = Changes::default();
        match exit_code {
            None if entry.status == Status::Elected => {
                entry.status = Status::Running;
                changes.builds.push((build.into(), Status::Running, None));
            }
            None => {}
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
                Status::Elected if now_ms >= b.created_ms + elected => Some((
                    b.id.clone(),
                    Status::Error,
                    "elected longer than MAXIMUM_ELECTED_STATE_AGE_ALLOWED".to_string(),
                )),
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
            let open = matches!(queued.state, TaskState::Ready | TaskState::Leased { .. });
            if open && now_ms >= queued.created_ms + expire {
                queued.state = TaskState::Expired;
                changes.expired.push(queued.task.id.clone());
            }
        }
        changes
    }

    /// Ends `build` with `status` and queues its cleanup (once).
    fn finish(
        &mut self,
        build: &str,
        status: Status,
        reason: Option<String>,
        now_ms: u64,
        changes: &mut Changes,
    ) {
        let Some(entry) = self.builds.get_mut(build) else {
            return;
        };
        if entry.status.is_final() {
            return;
        }
        entry.status = status;
        entry.reason = reason.clone();
        entry.finished_ms = Some(now_ms);
        changes.builds.push((build.into(), status, reason));
        if entry.cleanup_queued {
            return;
        }
        entry.cleanup_queued = true;
        let agent = entry.agent.clone();
        let ns = self.settings.namespace.clone();
        for (kind, name) in [
            (TaskType::DeletePod, runner::engine_pod(build)),
            (TaskType::DeletePod, runner::dind_pod(build)),
            (TaskType::DeletePvc, runner::dind_pvc(build)),
        ] {
            self.enqueue(
                build,
                &agent,
                kind,
                json!({"name": name, "namespace": ns}),
                now_ms,
            );
        }
    }
}

/// A build's pod (`role` is `engine` or `dind`). Only what the agent and the engine
/// stand-in read is set; the real specs come from the runtime environment (§2.2).
fn pod(name: &str, build: &str, namespace: &str, role: &str) -> Value {
    let image = match role {
        "engine" => "quay.io/codefresh/engine:3.3.13",
        _ => "quay.io/codefresh/dind:3.0.25",
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {runner::BUILD_LABEL: build, "codefresh.io/role": role},
        },
        "spec": {"containers": [{"name": role, "image": image}], "restartPolicy": "Never"},
    })
}

/// A build's dind volume claim (16Gi, the chart's default, §3).
fn pvc(build: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": runner::dind_pvc(build),
            "namespace": namespace,
            "labels": {runner::BUILD_LABEL: build},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
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
        vec![Step {
            millis: 1000,
            exit_code: 0,
        }]
    }

    #[test]
    fn a_build_gets_its_claim_and_pods_then_their_deletion_when_it_ends() {
        let mut q = Queue::new(Settings::default());
        let b = q.create_build("p", "agent", steps(), 0);
        let tasks = tasks_of(q.poll("agent", 0));
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
            q.poll("agent", 1).is_empty(),
            "leased tasks are not handed out twice at once"
        );
        assert!(q.poll("other", 1).is_empty());
        for t in &tasks {
            q.report("agent", &t.id, &ok(t), 2).unwrap();
        }
        q.engine_report(&b, None, 3).unwrap();
        assert_eq!(q.build(&b).unwrap().status, Status::Running);
        let changes = q.engine_report(&b, Some(0), 4).unwrap();
        assert_eq!(changes.builds, [(b.clone(), Status::Success, None)]);
        let cleanup = tasks_of(q.poll("agent", 5));
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
        let first = tasks_of(q.poll("agent", 0));
        assert!(q.poll("agent", 59_999).is_empty());
        let again = q.poll("agent", 60_000);
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
    fn a_failed_creation_fails_the_build_and_a_retriable_error_hands_the_task_out_again() {
        let mut q = Queue::new(Settings::default());
        let b = q.create_build("p", "agent", steps(), 0);
        let tasks = tasks_of(q.poll("agent", 0));
        let mut retriable = ok(&tasks[0]);
        retriable.status = Outcome::Error;
        retriable.is_retriable = true;
        q.report("agent", &tasks[0].id, &retriable, 1).unwrap();
        assert_eq!(q.poll("agent", 2).len(), 1, "handed out again at once");
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
        let mut q = Queue::new(Settings::default());
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
        assert_eq!(changes.expired.len(), 6, "the creations were never done");
    }
}
