//! The agent's loops (venona `pkg/agent/agent.go`, `pkg/queue/queue.go`; §1.4-1.7): a
//! ticker polls the platform and pushes each workflow's tasks, sorted, onto a bounded queue
//! (a full queue blocks the poll loop); `concurrency` handlers take batches off it, one
//! workflow at a time per process; each task is executed, then its status reported.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tokio::sync::{mpsc, Mutex as AsyncMutex};

use super::exec;
use super::Config;
use crate::core::runner::{Outcome, Task, TaskStatus, TaskType};
use crate::core::time::rfc3339;
use crate::core::Variant;
use crate::env::SharedEnv;
use crate::observe::RunnerEvent;

/// One workflow's tasks from one poll, in the order they run.
type Batch = Vec<Task>;

/// Why a call to the platform got no answer it could use.
#[derive(Debug)]
pub(super) enum CallError {
    /// No answer within the deadline.
    Deadline,
    /// The connection failed.
    Transport(String),
    /// An answer of 400 or more (`codefresh.Error`).
    Status(StatusCode, String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Deadline => write!(f, "context deadline exceeded"),
            CallError::Transport(e) => write!(f, "{e}"),
            CallError::Status(code, body) => write!(f, "{code}: {body}"),
        }
    }
}

/// hardened: the tasks this agent did, with the status it reported (bounded, oldest out).
#[derive(Default)]
struct Done {
    statuses: BTreeMap<String, (Outcome, bool, Option<String>)>,
    order: VecDeque<String>,
}

/// The agent: its clients, its settings and what its handlers share.
pub struct Agent {
    env: SharedEnv,
    config: Config,
    http: crate::env::http::Client<Full<Bytes>>,
    kube: kube::Client,
    /// Workflows a handler is running now (`activeWorkflows`).
    active: Mutex<BTreeSet<String>>,
    /// hardened: task ids queued or running now.
    in_flight: Mutex<BTreeSet<String>>,
    /// hardened: tasks done and what was reported.
    done: Mutex<Done>,
    /// When a poll last succeeded (the environment's elapsed time).
    last_poll: Mutex<Duration>,
}

impl Agent {
    /// An agent for `config`, with its platform and Kubernetes clients.
    pub fn new(env: SharedEnv, config: Config) -> Arc<Self> {
        let idle = match config.variant {
            Variant::Faithful => super::NO_TIMEOUT,
            Variant::Hardened => config.request_timeout * 2,
        };
        Arc::new(Agent {
            http: crate::env::http::client(env.clone(), idle),
            kube: crate::env::kube::client(env.clone(), &config.apiserver),
            last_poll: Mutex::new(env.elapsed()),
            env,
            config,
            active: Mutex::default(),
            in_flight: Mutex::default(),
            done: Mutex::default(),
        })
    }

    fn hardened(&self) -> bool {
        self.config.variant == Variant::Hardened
    }

    fn host(&self) -> String {
        self.env.identity().host.clone()
    }

    /// Polls, heartbeats, handles and serves `/health` until the process stops.
    pub async fn run(self: Arc<Self>) {
        let (tx, rx) = mpsc::channel::<Batch>(self.config.buffer.max(1));
        let rx = Arc::new(AsyncMutex::new(rx));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..self.config.concurrency.max(1) {
            tasks.spawn(self.clone().handler(rx.clone(), tx.clone()));
        }
        // The first heartbeat is sent before polling starts (agent.go L157-159).
        self.heartbeat().await;
        tasks.spawn(self.clone().heartbeats());
        if let Some(addr) = self.config.listen.clone() {
            tasks.spawn(self.clone().health(addr));
        }
        if self.hardened() {
            tasks.spawn(self.clone().sweeper());
        }
        self.poll_loop(tx).await;
    }

    /// The ticker loop: one poll per tick, its batches queued before the next (Go's ticker
    /// drops the ticks missed meanwhile).
    async fn poll_loop(self: Arc<Self>, tx: mpsc::Sender<Batch>) {
        let every = self.config.poll_every;
        let mut next = self.env.elapsed() + every;
        let mut failures: u32 = 0;
        loop {
            let now = self.env.elapsed();
            if next > now {
                self.env.sleep(next - now).await;
            }
            let mut path = format!(
                "/api/agent/{}/tasks?waitForStatusReport=true",
                self.config.agent_id
            );
            // hardened names its pod, so the platform keeps each workflow with one replica.
            if self.hardened() {
                path.push_str("&replica=");
                path.extend(form_urlencoded::byte_serialize(self.host().as_bytes()));
            }
            let answer = self.call(Method::GET, &path, None).await;
            let tasks: Vec<Task> = match answer.and_then(|bytes| {
                serde_json::from_slice(&bytes)
                    .map_err(|e| CallError::Transport(format!("the tasks are not JSON: {e}")))
            }) {
                Ok(tasks) => {
                    failures = 0;
                    *self.last_poll.lock().expect("poll time lock poisoned") = self.env.elapsed();
                    tasks
                }
                Err(error) => {
                    self.env.observe(
                        RunnerEvent::Poll {
                            host: self.host(),
                            tasks: 0,
                            error: error.to_string(),
                        }
                        .into(),
                    );
                    failures += 1;
                    next = self.env.elapsed()
                        + if self.hardened() {
                            self.backoff(failures)
                        } else {
                            every
                        };
                    continue;
                }
            };
            self.env.observe(
                RunnerEvent::Poll {
                    host: self.host(),
                    tasks: tasks.len() as u64,
                    error: String::new(),
                }
                .into(),
            );
            let (agent_tasks, batches) = self.split(tasks);
            // Each agent task runs on its own, unbounded (a goroutine each, agent.go L340-355).
            for task in agent_tasks {
                let me = self.clone();
                tokio::spawn(async move { me.handle(&task).await });
            }
            for batch in batches {
                // A full queue blocks the poll loop (a blocking channel send, queue.go L109).
                if tx.send(batch).await.is_err() {
                    return;
                }
            }
            let now = self.env.elapsed();
            next += every;
            while next <= now {
                next += every;
            }
        }
    }

    /// hardened: 1 s doubling to 30 s, drawn in its upper half.
    fn backoff(&self, failures: u32) -> Duration {
        let cap = Duration::from_secs(1)
            .saturating_mul(1 << failures.min(5).saturating_sub(1))
            .min(Duration::from_secs(30));
        self.env.random_between(cap / 2, cap)
    }

    /// `splitTasks` (agent.go L290-338): the agent tasks, and one batch per workflow, its
    /// tasks sorted by type, batches oldest first. hardened leaves out tasks already queued
    /// or running.
    fn split(&self, tasks: Vec<Task>) -> (Vec<Task>, Vec<Batch>) {
        let mut agent_tasks = Vec::new();
        let mut by_workflow: BTreeMap<String, Batch> = BTreeMap::new();
        let mut in_flight = self.in_flight.lock().expect("in-flight lock poisoned");
        for task in tasks {
            if self.hardened() && !in_flight.insert(task.id.clone()) {
                continue;
            }
            if task.kind == TaskType::AgentTask {
                agent_tasks.push(task);
                continue;
            }
            by_workflow
                .entry(task.metadata.workflow_id.clone())
                .or_default()
                .push(task);
        }
        let mut batches: Vec<Batch> = by_workflow.into_values().collect();
        for batch in &mut batches {
            batch.sort_by_key(|t| t.kind.rank());
        }
        // Stable: equal times keep the workflow ids' order.
        batches.sort_by(|a, b| a[0].metadata.created_at.cmp(&b[0].metadata.created_at));
        (agent_tasks, batches)
    }

    /// One handler (queue.go L122-140): a busy workflow's batch goes back to the end of the
    /// queue after a short pause.
    async fn handler(
        self: Arc<Self>,
        rx: Arc<AsyncMutex<mpsc::Receiver<Batch>>>,
        tx: mpsc::Sender<Batch>,
    ) {
        loop {
            let Some(batch) = rx.lock().await.recv().await else {
                return;
            };
            let workflow = batch[0].metadata.workflow_id.clone();
            let free = self
                .active
                .lock()
                .expect("active workflows lock poisoned")
                .insert(workflow.clone());
            if !free {
                self.env.sleep(super::BUSY_WORKFLOW_PAUSE).await;
                if tx.send(batch).await.is_err() {
                    return;
                }
                continue;
            }
            for task in &batch {
                self.handle(task).await;
            }
            self.active
                .lock()
                .expect("active workflows lock poisoned")
                .remove(&workflow);
        }
    }

    /// Executes one task and reports it. It keeps going after a failure: the next task of
    /// the batch runs anyway (queue.go L152-187).
    async fn handle(&self, task: &Task) {
        let remembered = self
            .hardened()
            .then(|| {
                self.done
                    .lock()
                    .expect("done tasks lock poisoned")
                    .statuses
                    .get(&task.id)
                    .cloned()
            })
            .flatten();
        let (outcome, retriable, reason, deduplicated) = match remembered {
            Some((outcome, retriable, reason)) => (outcome, retriable, reason, true),
            None if task.kind == TaskType::AgentTask => match self.proxy(task).await {
                Some((outcome, retriable, reason)) => (outcome, retriable, reason, false),
                // faithful: a spec it cannot run is dropped unreported (agent.go L367-373).
                None => return,
            },
            None => {
                let result =
                    exec::execute(&self.kube, task, &self.config.apiserver.namespace).await;
                let (outcome, retriable, reason) = self.classify(&result);
                (outcome, retriable, reason, false)
            }
        };
        self.env.observe(
            RunnerEvent::Exec {
                host: self.host(),
                task: task.id.clone(),
                kind: format!("{:?}", task.kind),
                object: task.object_name().into(),
                outcome: format!("{outcome:?}"),
                retriable,
                detail: reason.clone().unwrap_or_default(),
                deduplicated,
            }
            .into(),
        );
        if self.hardened() && !(outcome == Outcome::Error && retriable) {
            let mut done = self.done.lock().expect("done tasks lock poisoned");
            if done
                .statuses
                .insert(task.id.clone(), (outcome, retriable, reason.clone()))
                .is_none()
            {
                done.order.push_back(task.id.clone());
                while done.order.len() > self.config.remembered_tasks {
                    if let Some(old) = done.order.pop_front() {
                        done.statuses.remove(&old);
                    }
                }
            }
        }
        if task.metadata.should_report_status {
            self.report(task, outcome, retriable, reason).await;
        }
        self.in_flight
            .lock()
            .expect("in-flight lock poisoned")
            .remove(&task.id);
    }

    /// Runs a `proxy` agent task (see [`super::proxy`]) and traces it: the status to report,
    /// or `None` when faithful reports none.
    async fn proxy(&self, task: &Task) -> Option<(Outcome, bool, Option<String>)> {
        let request = crate::core::runner::proxy_request(&task.spec);
        let result = match &request {
            Ok(request) => {
                Ok(super::proxy::send(&self.env, &self.http, request, self.config.variant).await)
            }
            Err(error) => Err(error.clone()),
        };
        let status = super::proxy::classify(&result, self.config.variant);
        let (answer, attempts, detail) = match &result {
            Ok(p) => (
                p.status.map(|s| s.as_u16()).unwrap_or_default(),
                p.attempts,
                p.error.clone().unwrap_or_default(),
            ),
            Err(error) => (0, 0, error.to_string()),
        };
        self.env.observe(
            RunnerEvent::Proxy {
                host: self.host(),
                task: task.id.clone(),
                url: request.map(|r| r.url).unwrap_or_default(),
                answer,
                attempts,
                outcome: status
                    .as_ref()
                    .map(|(o, ..)| format!("{o:?}"))
                    .unwrap_or_else(|| "unreported".into()),
                detail,
            }
            .into(),
        );
        status
    }

    /// The status a result is reported with: faithful as `NewK8sError` says; hardened takes
    /// an object already there (create) or already gone (delete) as the task's effect.
    fn classify(&self, result: &exec::Result) -> (Outcome, bool, Option<String>) {
        match result {
            exec::Result::Done => (Outcome::Success, false, None),
            exec::Result::AlreadyExists | exec::Result::NotFound if self.hardened() => {
                (Outcome::Success, false, None)
            }
            exec::Result::AlreadyExists => (Outcome::Error, false, Some("AlreadyExists".into())),
            exec::Result::NotFound => (Outcome::Error, false, Some("NotFound".into())),
            exec::Result::Failed { retriable, reason } => {
                (Outcome::Error, *retriable, Some(reason.clone()))
            }
        }
    }

    /// `POST …/tasks/{id}/statuses` with the task's revision plus one. faithful sends it
    /// once; hardened until the platform has it (409: it has a newer status already; 404:
    /// the task is gone).
    async fn report(&self, task: &Task, outcome: Outcome, retriable: bool, reason: Option<String>) {
        let status = TaskStatus {
            status: outcome,
            occurred_at: rfc3339(self.env.unix_millis()),
            status_revision: task.metadata.current_status_revision + 1,
            is_retriable: retriable,
            reason,
        };
        let body = serde_json::to_vec(&status).expect("a status serialises");
        let path = format!(
            "/api/agent/{}/tasks/{}/statuses",
            self.config.agent_id, task.id
        );
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.call(Method::POST, &path, Some(body.clone())).await;
            let settled = match &result {
                Ok(_) => true,
                Err(CallError::Status(code, _)) => {
                    *code == StatusCode::CONFLICT || *code == StatusCode::NOT_FOUND
                }
                Err(_) => false,
            };
            self.env.observe(
                RunnerEvent::Ack {
                    host: self.host(),
                    task: task.id.clone(),
                    delivered: result.is_ok(),
                    attempt,
                    detail: result.err().map(|e| e.to_string()).unwrap_or_default(),
                }
                .into(),
            );
            // faithful: "Failed reporting status" is logged, nothing else (queue.go L202-205).
            if settled || !self.hardened() || attempt >= 10 {
                return;
            }
            self.env.sleep(self.backoff(attempt)).await;
        }
    }

    /// `PUT /api/agent/{id}/status` (a failure is only logged, agent.go L220-243).
    async fn heartbeat(&self) {
        let path = format!("/api/agent/{}/status", self.config.agent_id);
        let body = if self.hardened() {
            // The tasks this pod holds keep their leases while it heartbeats.
            let holding: Vec<String> = self
                .in_flight
                .lock()
                .expect("in-flight lock poisoned")
                .iter()
                .cloned()
                .collect();
            json!({"message": "All good", "replica": self.host(), "holding": holding})
        } else {
            json!({"message": "All good"})
        };
        let body = serde_json::to_vec(&body).expect("a heartbeat is JSON");
        if let Err(error) = self.call(Method::PUT, &path, Some(body)).await {
            tracing::debug!(%error, "failed reporting the agent's status");
        }
    }

    async fn heartbeats(self: Arc<Self>) {
        loop {
            self.env.sleep(self.config.heartbeat_every).await;
            // Each heartbeat runs on its own (a goroutine per tick in venona).
            let me = self.clone();
            tokio::spawn(async move { me.heartbeat().await });
        }
    }

    /// hardened: every [`super::SWEEP_EVERY`], deletes the labelled pods and claims of builds
    /// the platform says ended. The real agent cannot (its RBAC has no list, §4 row 5), so a
    /// policy-terminated build's dind pod, or a claim whose creation was handed out again
    /// after its build's cleanup ran (row 1), stays for good.
    async fn sweeper(self: Arc<Self>) {
        use kube::api::{Api, DynamicObject, ListParams};
        let ns = self.config.apiserver.namespace.clone();
        loop {
            self.env.sleep(super::SWEEP_EVERY).await;
            let mut found: Vec<(&str, String, String)> = Vec::new();
            for kind in ["Pod", "PersistentVolumeClaim"] {
                let resource = exec::resource(kind).expect("both kinds are known");
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.kube.clone(), &ns, &resource);
                let Ok(list) = api
                    .list(&ListParams::default().labels(crate::core::runner::BUILD_LABEL))
                    .await
                else {
                    continue;
                };
                for object in list.items {
                    let build = object
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(crate::core::runner::BUILD_LABEL))
                        .cloned();
                    if let (Some(name), Some(build)) = (object.metadata.name, build) {
                        if object.metadata.deletion_timestamp.is_none() {
                            found.push((kind, name, build));
                        }
                    }
                }
            }
            let mut ended: BTreeMap<String, bool> = BTreeMap::new();
            for (kind, name, build) in found {
                let over = match ended.get(&build) {
                    Some(over) => *over,
                    None => {
                        let over = self.build_ended(&build).await;
                        ended.insert(build.clone(), over);
                        over
                    }
                };
                if !over {
                    continue;
                }
                let outcome = match exec::delete(&self.kube, kind, &name, &ns).await {
                    exec::Result::Failed { reason, .. } => reason,
                    // Deleted, or gone already (a delete never meets AlreadyExists).
                    _ => "Success".to_string(),
                };
                self.env.observe(
                    RunnerEvent::Swept {
                        host: self.host(),
                        object: format!("{kind}/{name}"),
                        build,
                        outcome,
                    }
                    .into(),
                );
            }
        }
    }

    /// Whether the platform says `build` ended (an unknown build or no answer: not known to
    /// have ended, so its objects stay).
    async fn build_ended(&self, build: &str) -> bool {
        let Ok(bytes) = self
            .call(Method::GET, &format!("/api/builds/{build}"), None)
            .await
        else {
            return false;
        };
        let status = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("status").and_then(|s| s.as_str()).map(str::to_string));
        matches!(
            status.as_deref(),
            Some("success" | "failure" | "error" | "terminated")
        )
    }

    /// `/health`: faithful always 200; hardened 503 once no poll succeeded for
    /// `unhealthy_after`.
    async fn health(self: Arc<Self>, addr: String) {
        let Ok(listener) = self.env.listen(&addr).await else {
            tracing::warn!("the agent cannot serve /health on {addr}");
            return;
        };
        let me = self.clone();
        let _ = crate::env::http::serve(listener, move |req, _peer| {
            let me = me.clone();
            async move {
                if req.uri().path() != "/health" {
                    return crate::env::http::json(StatusCode::NOT_FOUND, &json!({}));
                }
                if me.healthy() {
                    crate::env::http::json(StatusCode::OK, &"OK")
                } else {
                    crate::env::http::json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &json!({"message": "no successful poll of the platform lately"}),
                    )
                }
            }
        })
        .await;
    }

    /// Whether `/health` answers 200 now.
    pub fn healthy(&self) -> bool {
        if !self.hardened() {
            return true;
        }
        let last = *self.last_poll.lock().expect("poll time lock poisoned");
        self.env.elapsed().saturating_sub(last) < self.config.unhealthy_after
    }

    /// One call to the platform: faithful waits as long as it takes, hardened gives up after
    /// `request_timeout`.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, CallError> {
        let deadline = self.hardened().then_some(self.config.request_timeout);
        let to = (
            self.config.platform_api.as_str(),
            self.config.token.as_str(),
        );
        call(&self.env, &self.http, to, method, path, body, deadline).await
    }
}

/// One call to the platform's builds or agent API with the agent's token, raw in
/// `Authorization` as venona sends it (`codefresh.go` L179-185): the answer's body on a 2xx,
/// any status of 400 or more an error (`codefresh.Error`); given up after `deadline` of the
/// environment's time (`None`: never). The agent and the engine stand-in both call so.
pub(super) async fn call(
    env: &SharedEnv,
    http: &crate::env::http::Client<Full<Bytes>>,
    (addr, token): (&str, &str),
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
    deadline: Option<Duration>,
) -> Result<Bytes, CallError> {
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("authorization", token)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| CallError::Transport(e.to_string()))?;
    let exchange = async {
        let response = http
            .request(request)
            .await
            .map_err(|e| CallError::Transport(e.to_string()))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| CallError::Transport(e.to_string()))?
            .to_bytes();
        if status.as_u16() >= 400 {
            return Err(CallError::Status(
                status,
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
        Ok(bytes)
    };
    let Some(deadline) = deadline else {
        return exchange.await;
    };
    tokio::select! {
        biased;
        result = exchange => result,
        () = env.sleep(deadline) => Err(CallError::Deadline),
    }
}
