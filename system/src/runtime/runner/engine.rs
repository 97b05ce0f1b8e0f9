//! A stand-in for a build's engine pod and the kubelet that runs it (the engine,
//! `codefresh/engine`, is not public; §2.3 steps 6-8): once a build's engine and dind pods
//! exist, it reports the build started, runs its steps (their times and exit codes come
//! from the build), reports every 30 s while a step runs (task-logger's health check, §2.3
//! step 7), and reports the last step's end with the build's exit code. A pod deleted while
//! its build runs stops it. How the engine reports is **inferred**: the real one writes to
//! Firebase and cfapi; here one platform route takes it.
//!
//! **Logs** (§2.7; `runner-research.md` §4 row 13): a step with `lines` writes them evenly
//! over its time, and the engine sends them to the platform's log route
//! ([`crate::platform::runner::logs`]), holding what is not sent yet in its memory. faithful
//! sends one line a request, each after the last one's answer, and holds the rest without a
//! bound: when the link to the platform is slow, the backlog grows until the pod passes its
//! memory limit and is killed — the engine's "memory leak, caused by delays in
//! container-logger" (chart 6.3.14, venona#444, engine 1.169.7; that it is one line a
//! request is [INFERENCE]). The killed engine reports no more; the platform terminates the
//! build after `TIME_ENGINE_INACTIVE_UNTIL_TERMINATION`, and the lines it held are lost.
//! hardened sends every line it holds in one request (up to [`LOG_BATCH_BYTES`]) and holds at
//! most half its memory: a step that writes faster than that waits for room, as a container
//! whose stdout is full waits (Docker's default `blocking` log mode). Both send their last
//! lines before they report the build's end.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{json, Value};

use crate::core::runner::{AGENT_LABEL, BUILD_LABEL};
use crate::core::Variant;
use crate::env::kube::KubeTarget;
use crate::env::SharedEnv;
use crate::observe::RunnerEvent;
use crate::platform::runner::Step;

/// How often the pods are listed.
pub const LIST_EVERY: Duration = Duration::from_secs(1);
/// How often a running engine reports (task-logger's health-check interval).
pub const REPORT_EVERY: Duration = Duration::from_secs(30);
/// A report that fails is sent again after this.
pub const RETRY_EVERY: Duration = Duration::from_secs(5);
/// Log lines whose request failed are sent again after this.
pub const LOG_RETRY: Duration = Duration::from_secs(1);
/// hardened: the most bytes of lines one log request carries (under the platform's 1 MiB
/// `runner.body`).
pub const LOG_BATCH_BYTES: usize = 256 * 1024;
/// The engine pod's memory limit by default (the chart's `engine.resources.limits.memory`,
/// 2048Mi; `runner-research.md` §4 row 13).
pub const DEFAULT_MEMORY: u64 = 2048 * 1024 * 1024;

/// The stand-in's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster the agent creates the pods in (its namespace is watched).
    pub apiserver: KubeTarget,
    /// The platform's builds API, `host:port`.
    pub platform_api: String,
    /// The token the engine reports with.
    pub token: String,
    /// The builds' claims are bound by the dind volume provisioner ([`super::volumes`]): a
    /// build starts once its claim is bound, writes its volume's `last_used` at start and at
    /// its end, and fails if the volume's directory is removed while it runs. `false`: no
    /// provisioner runs and claims are not waited for.
    pub volumes: bool,
    /// The tokens of other agents whose builds' pods are in this cluster, by their
    /// [`AGENT_LABEL`] value (one agent per cluster, the real layout, needs none): an engine
    /// reports with its build's agent's token, `token` when its pod names no other.
    pub tokens: BTreeMap<String, String>,
    /// Which engine runs: how it sends its logs (see the module's doc).
    pub variant: Variant,
    /// The engine pod's memory limit in bytes: what the log lines it has not sent may take
    /// (faithful is killed past it; hardened holds at most half of it).
    pub memory: u64,
}

impl Config {
    /// An engine of `variant` for the pods in `apiserver`'s namespace, reporting to
    /// `platform_api` with `token`; no volumes, the chart's memory limit.
    pub fn new(variant: Variant, apiserver: KubeTarget, platform_api: &str, token: &str) -> Self {
        Config {
            apiserver,
            platform_api: platform_api.into(),
            token: token.into(),
            volumes: false,
            tokens: BTreeMap::new(),
            variant,
            memory: DEFAULT_MEMORY,
        }
    }
}

/// Runs engines for the builds whose pods appear, until the process stops.
pub async fn run(env: SharedEnv, config: Config) {
    let client = crate::env::kube::client(env.clone(), &config.apiserver);
    let pods: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &config.apiserver.namespace,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods"),
    );
    let http = crate::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(20));
    let mut running: BTreeMap<String, tokio::task::JoinHandle<()>> = BTreeMap::new();
    loop {
        env.sleep(LIST_EVERY).await;
        let Ok(list) = pods.list(&ListParams::default()).await else {
            continue;
        };
        let mut engines = BTreeMap::new();
        let mut dinds = BTreeMap::new();
        for pod in &list.items {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let (Some(build), Some(role)) =
                (labels.get(BUILD_LABEL), labels.get("codefresh.io/role"))
            else {
                continue;
            };
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match role.as_str() {
                "engine" => {
                    let token = labels
                        .get(AGENT_LABEL)
                        .and_then(|agent| config.tokens.get(agent))
                        .unwrap_or(&config.token);
                    engines.insert(build.clone(), token.clone());
                }
                "dind" => {
                    dinds.insert(build.clone(), ());
                }
                _ => {}
            }
        }
        // A deleted engine pod stops its build.
        running.retain(|build, task| {
            let keep = engines.contains_key(build);
            if !keep {
                task.abort();
            }
            keep
        });
        for (build, token) in &engines {
            if running.contains_key(build) || !dinds.contains_key(build) {
                continue;
            }
            let engine = Engine {
                env: env.clone(),
                client: client.clone(),
                http: http.clone(),
                config: Config {
                    token: token.clone(),
                    ..config.clone()
                },
                build: build.clone(),
            };
            running.insert(build.clone(), tokio::spawn(engine.run()));
        }
    }
}

struct Engine {
    env: SharedEnv,
    client: kube::Client,
    http: crate::env::http::Client<Full<Bytes>>,
    config: Config,
    build: String,
}

impl Engine {
    async fn run(self) {
        let volume = if self.config.volumes {
            // The dind pod waits for its claim to be bound.
            let claim = crate::core::runner::dind_pvc(&self.build);
            loop {
                let ns = &self.config.apiserver.namespace;
                match super::volumes::touch(&self.env, &self.client, ns, &claim).await {
                    Some(volume) => break Some(volume),
                    None => self.env.sleep(LIST_EVERY).await,
                }
            }
        } else {
            None
        };
        if !self.report(None).await {
            return;
        }
        self.env.observe(
            RunnerEvent::Engine {
                build: self.build.clone(),
                started: true,
                exit_code: 0,
            }
            .into(),
        );
        let steps = loop {
            match self.steps().await {
                Some(steps) => break steps,
                None => self.env.sleep(RETRY_EVERY).await,
            }
        };
        let log = Arc::new(Log::default());
        let shipper = (steps.iter().any(|s| s.lines > 0)).then(|| {
            // The log sender dies with its engine.
            crate::platform::events::AbortOnDrop([tokio::spawn(ship(
                self.env.clone(),
                self.http.clone(),
                self.config.clone(),
                self.build.clone(),
                log.clone(),
            ))])
        });
        let mut exit_code = 0;
        for (n, step) in steps.iter().enumerate() {
            let mut left = Duration::from_millis(step.millis);
            // The step's own time, when it next reports, and when its next line is due.
            let mut elapsed = Duration::ZERO;
            let mut next_report = REPORT_EVERY;
            let mut written = 0u32;
            let line_at = |k: u32| {
                Duration::from_millis(step.millis * u64::from(k + 1) / u64::from(step.lines))
            };
            while !left.is_zero() {
                let mut slice = left.min(next_report - elapsed);
                if written < step.lines {
                    slice = slice.min(line_at(written).saturating_sub(elapsed));
                }
                self.env.sleep(slice).await;
                left -= slice;
                elapsed += slice;
                while written < step.lines && line_at(written) <= elapsed {
                    let line = line_text(&self.build, n, written, step.line_len());
                    match self.write_line(&log, line).await {
                        Written::Held => written += 1,
                        Written::Stopped => return,
                        Written::Killed => {
                            let held = log.held();
                            self.env.observe(
                                RunnerEvent::EngineOom {
                                    build: self.build.clone(),
                                    held_bytes: held.bytes as u64,
                                    written: held.written,
                                    sent: held.first,
                                    requests: held.requests,
                                }
                                .into(),
                            );
                            // The pod is killed: nothing more is sent or reported.
                            return;
                        }
                    }
                }
                if elapsed < next_report && !left.is_zero() {
                    // A line's time, not a report's.
                    continue;
                }
                next_report += REPORT_EVERY;
                if let Some(volume) = &volume {
                    if super::volumes::intact(&self.client, volume).await == Some(false) {
                        self.env.observe(
                            RunnerEvent::VolumeLost {
                                build: self.build.clone(),
                                volume: volume.clone(),
                            }
                            .into(),
                        );
                        // Docker's data root is gone under the step: it fails.
                        exit_code = 1;
                        break;
                    }
                }
                if !left.is_zero() && !self.report(None).await {
                    return;
                }
            }
            if exit_code != 0 {
                break;
            }
            if step.exit_code != 0 {
                exit_code = step.exit_code;
                break;
            }
        }
        if let Some(volume) = &volume {
            let ns = &self.config.apiserver.namespace;
            let claim = crate::core::runner::dind_pvc(&self.build);
            if super::volumes::touch(&self.env, &self.client, ns, &claim)
                .await
                .is_none()
            {
                tracing::debug!(%volume, "last_used not written at the build's end");
            }
        }
        if shipper.is_some() {
            log.flushed().await;
            let held = log.held();
            self.env.observe(
                RunnerEvent::Logs {
                    build: self.build.clone(),
                    written: held.written,
                    requests: held.requests,
                    peak_bytes: held.peak as u64,
                }
                .into(),
            );
        }
        if self.report(Some(exit_code)).await {
            self.env.observe(
                RunnerEvent::Engine {
                    build: self.build.clone(),
                    started: false,
                    exit_code,
                }
                .into(),
            );
        }
    }

    /// Holds `line` in the engine's log until it is sent. hardened waits for room, and
    /// goes on reporting while it waits (the engine's health checks do not wait for a
    /// step's output).
    async fn write_line(&self, log: &Log, line: String) -> Written {
        loop {
            let room = log.changed.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match log.try_write(&self.config, &line) {
                Some(true) => return Written::Held,
                Some(false) => return Written::Killed,
                None => {}
            }
            tokio::select! {
                biased;
                () = &mut room => {}
                () = self.env.sleep(REPORT_EVERY) => {
                    if !self.report(None).await {
                        return Written::Stopped;
                    }
                }
            }
        }
    }

    /// The build's steps, from the platform.
    async fn steps(&self) -> Option<Vec<Step>> {
        let answer = self
            .call(Method::GET, &format!("/api/builds/{}", self.build), None)
            .await
            .ok()?;
        serde_json::from_value(answer.get("steps")?.clone()).ok()
    }

    /// Reports to the platform until it answers: `false` when the build is not running
    /// there any more (409), so the engine stops.
    async fn report(&self, exit_code: Option<i32>) -> bool {
        let path = format!("/api/builds/{}/engine", self.build);
        let body = json!({"exitCode": exit_code});
        loop {
            match self.call(Method::POST, &path, Some(&body)).await {
                Ok(_) => return true,
                Err(Some(409)) => return false,
                Err(_) => self.env.sleep(RETRY_EVERY).await,
            }
        }
    }

    /// One call (10 s at most): the JSON answer of a 2xx, else the status (`None`: no
    /// answer).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, Option<u16>> {
        let body = body.map(|b| b.to_string().into_bytes());
        let to = (
            self.config.platform_api.as_str(),
            self.config.token.as_str(),
        );
        let deadline = Some(Duration::from_secs(10));
        match super::agent::call(&self.env, &self.http, to, method, path, body, deadline).await {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null)),
            Err(super::agent::CallError::Status(status, _)) => Err(Some(status.as_u16())),
            Err(_) => Err(None),
        }
    }
}

/// The text of line `k` of step `step` of `build`, `len` bytes long.
fn line_text(build: &str, step: usize, k: u32, len: usize) -> String {
    let mut line = format!("{build} step {step} line {k} ");
    if line.len() < len {
        line.extend(std::iter::repeat_n('.', len - line.len()));
    } else {
        line.truncate(len);
    }
    line
}

/// What became of a line the engine wrote.
enum Written {
    /// The engine holds it.
    Held,
    /// It took the pod past its memory limit: the pod is killed.
    Killed,
    /// The platform says the build is not running: the engine stops.
    Stopped,
}

/// The lines an engine holds until the platform has them.
#[derive(Default)]
struct Log {
    state: Mutex<Held>,
    /// Woken when lines are written or sent.
    changed: tokio::sync::Notify,
}

/// What a [`Log`] holds, and its counts.
#[derive(Default)]
struct Held {
    /// Lines not yet taken by the platform, the first being line `counts.first`.
    pending: VecDeque<String>,
    /// What is known of them.
    counts: Counts,
}

/// A [`Log`]'s counts.
#[derive(Clone, Copy, Default)]
struct Counts {
    /// The number of the first pending line: lines before it were sent.
    first: u64,
    /// Bytes of the pending lines.
    bytes: usize,
    /// Lines written so far.
    written: u64,
    /// Most bytes held at once.
    peak: usize,
    /// Log requests sent.
    requests: u64,
}

impl Log {
    /// The counts now.
    fn held(&self) -> Counts {
        self.state.lock().expect("log lock poisoned").counts
    }

    /// Holds `line` until it is sent: `Some(false)` when that takes the pod past its memory
    /// (faithful); `None` when hardened has no room below half of it (the caller waits for
    /// lines to be sent).
    fn try_write(&self, config: &Config, line: &str) -> Option<bool> {
        let cap = (config.memory / 2) as usize;
        let mut held = self.state.lock().expect("log lock poisoned");
        let counts = &mut held.counts;
        let fits = counts.bytes == 0 || counts.bytes + line.len() <= cap;
        if config.variant == Variant::Hardened && !fits {
            return None;
        }
        counts.bytes += line.len();
        counts.peak = counts.peak.max(counts.bytes);
        counts.written += 1;
        let over = counts.bytes as u64 > config.memory;
        held.pending.push_back(line.to_string());
        drop(held);
        self.changed.notify_waiters();
        Some(!over)
    }

    /// Waits until every line written was sent.
    async fn flushed(&self) {
        loop {
            let sent = self.changed.notified();
            tokio::pin!(sent);
            sent.as_mut().enable();
            if self
                .state
                .lock()
                .expect("log lock poisoned")
                .pending
                .is_empty()
            {
                return;
            }
            sent.await;
        }
    }
}

/// Sends `log`'s lines to the platform as they are written, until aborted: faithful one
/// line a request, hardened all it holds (up to [`LOG_BATCH_BYTES`]).
async fn ship(
    env: SharedEnv,
    http: crate::env::http::Client<Full<Bytes>>,
    config: Config,
    build: String,
    log: Arc<Log>,
) {
    let path = format!("/api/builds/{build}/logs");
    loop {
        let written = log.changed.notified();
        tokio::pin!(written);
        written.as_mut().enable();
        let batch = {
            let mut held = log.state.lock().expect("log lock poisoned");
            if held.pending.is_empty() {
                None
            } else {
                held.counts.requests += 1;
                let mut lines = Vec::new();
                let mut bytes = 0;
                for line in &held.pending {
                    let full = match config.variant {
                        Variant::Faithful => !lines.is_empty(),
                        Variant::Hardened => {
                            !lines.is_empty() && bytes + line.len() > LOG_BATCH_BYTES
                        }
                    };
                    if full {
                        break;
                    }
                    bytes += line.len();
                    lines.push(line.clone());
                }
                Some((held.counts.first, lines))
            }
        };
        let Some((from, lines)) = batch else {
            written.await;
            continue;
        };
        let body = json!({"from": from, "lines": lines})
            .to_string()
            .into_bytes();
        let to = (config.platform_api.as_str(), config.token.as_str());
        let deadline = Some(Duration::from_secs(10));
        let answer =
            super::agent::call(&env, &http, to, Method::POST, &path, Some(body), deadline).await;
        let next = match answer {
            Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("next").and_then(Value::as_u64)),
            // The build ended (or is gone, or its log is full): its log takes nothing more.
            Err(super::agent::CallError::Status(status, _))
                if status == http::StatusCode::GONE
                    || status == http::StatusCode::NOT_FOUND
                    || status == http::StatusCode::PAYLOAD_TOO_LARGE =>
            {
                let mut held = log.state.lock().expect("log lock poisoned");
                held.counts.first += held.pending.len() as u64;
                held.pending.clear();
                held.counts.bytes = 0;
                drop(held);
                log.changed.notify_waiters();
                return;
            }
            Err(_) => None,
        };
        let Some(next) = next else {
            env.sleep(LOG_RETRY).await;
            continue;
        };
        {
            let mut held = log.state.lock().expect("log lock poisoned");
            while held.counts.first < next {
                let Some(line) = held.pending.pop_front() else {
                    break;
                };
                held.counts.bytes -= line.len();
                held.counts.first += 1;
            }
        }
        log.changed.notify_waiters();
    }
}
