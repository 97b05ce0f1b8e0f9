//! The platform's side of the Codefresh Runner (cfapi's builds and agent routes; closed
//! source, `runner-research.md` §5): a build is made through the builds API, elected to an
//! agent's runtime at once, and turned into tasks the agent polls for, executes against its
//! cluster and reports on; the engine of a build reports its start and its end.
//!
//! - [`queue`]: the builds and the task queue (pure state, the modelling choices).
//! - [`serve`]: the HTTP API and the platform's timers.
//! - [`cronus`]: the cron event provider, firing cron triggers' ticks at hermes.
//! - [`logs`]: the build logs the engines send, and the broadcaster that streams them to
//!   clients over WebSocket.
//!
//! | route | who | answer |
//! |---|---|---|
//! | `GET /api/agent/{id}/tasks?waitForStatusReport=true` | agent (raw token) | its due tasks |
//! | `POST /api/agent/{id}/tasks/{taskId}/statuses` | agent | 200, 404 unknown task, 409 stale `statusRevision` |
//! | `PUT /api/agent/{id}/status` | agent (heartbeat) | 200 |
//! | `POST /api/builds` `{pipeline, agent, branch, steps, priority?, trigger?, parent?}` | trigger (admin token) | `{id}`, admitted or pending; 404 for an unknown `parent` build |
//! | `POST /api/webhooks` (header `X-GitHub-Delivery`), the same body | trigger (hermes) | `{id}` after [`Settings::webhook_delay`]; hardened answers a delivery seen before with its build |
//! | `PUT /api/cron/{name}` `{everyMs}`, `GET /api/cron/{name}` | cronus (hardened) | the trigger's ledger: period, registration, last tick handled |
//! | `POST /api/cron/{name}/ticks` `{scheduledMs, missed?}` + the build body | cronus (hermes `run/<eventURI>`) | `{id}`; hardened answers a tick seen before with its build; `missed: true` records the tick as missed |
//! | `POST /api/cronus/lease` `{holder, ttlMs}` | cronus (hardened) | `{leader, holder, untilMs}` |
//! | `PUT /api/pipelines/{name}` `{concurrency, branchConcurrency, triggerConcurrency, terminatePreviousOnBranch, terminateBranchPattern, terminateAll, terminateChildren, priority}` | trigger | the pipeline's admission settings (400 naming a bad one) |
//! | `GET /api/pipelines/{name}` | trigger | them |
//! | `POST /api/proxy-tasks` `{agent, url, method?, token, params?}` | trigger (the UI) | `{id}` of a `proxy` agent task: the agent sends `params` to `url` inside the customer's network (**inferred** route; the task is venona's) |
//! | `GET /api/proxy-tasks/{id}` | trigger | `{id, agent, deliveries, status}`: `ready`, `leased`, `done` with the agent's `outcome` and `reason`, or `expired` |
//! | `GET /api/builds/{id}` | trigger, agent | the build |
//! | `POST /api/builds/{id}/engine` `{exitCode}` | engine (the token of the build's agent, **inferred**) | 200; `null` while running; 403 for another agent's token |
//! | `POST /api/builds/{id}/logs` `{from, lines}` | engine (as above) | `{next}`: lines the log has; 409 `{next}` for a gap; lines it has already are skipped; 410 once the build ended |
//! | `GET /api/builds/{id}/logs?from=N` | trigger, agent | `{lines, next, ended}`; with `Upgrade: websocket` the broadcaster: `{seq, line}` text frames as lines come, then `{end, lines}` once the build ended and every line was sent |
//!
//! The agent routes and paths are venona's (`pkg/codefresh/codefresh.go` L83-133); the
//! builds and engine routes are orrery's (the real ones are not public: the engine reports
//! through Firebase and cfapi, §2.3 step 7).

pub mod cronus;
pub mod logs;
pub mod queue;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::core::runner::TaskStatus;
use crate::core::secret::TokenDigest;
use crate::env::http::{json, Body};
use crate::env::SharedEnv;
use crate::observe::RunnerEvent;
use crate::platform::store::{self, Journal};
pub use queue::{
    Build, CronTrigger, Lease, LogError, NewBuild, Pipeline, Queue, Settings, Status, Step, Tick,
};

/// The header a Git webhook delivery carries its id in (GitHub's; a redelivery keeps it).
pub const DELIVERY_HEADER: &str = "x-github-delivery";

/// The longest cronus lease the platform grants by default (10 min, `runner.lease-max`).
pub const MAX_LEASE_MS: u64 = crate::env::limits::Limits::DEFAULT.lease_max.as_millis() as u64;

/// How far ahead of the platform's clock a tick may be scheduled (clock skew between
/// cronus and the platform) before it is refused.
pub const TICK_SLACK: Duration = Duration::from_secs(5);

/// How often the platform applies its limits.
pub const TICK: Duration = Duration::from_secs(1);

/// What can go wrong on the link in front of the agent routes, set by the simulator's
/// faults: a load balancer answering 502 (`lost_requests` percent never reach the API,
/// `lost_answers` percent are handled and their answer lost), or a link gone silent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    /// Percent of agent requests answered 502 before the platform saw them.
    pub lost_requests: u8,
    /// Percent of agent requests answered 502 after the platform handled them.
    pub lost_answers: u8,
    /// Agent requests taken now are never answered nor closed (a proxy whose other side
    /// vanished): the caller waits as long as its own deadline lets it.
    pub silent: bool,
}

/// The builds, the task queue and who may call: what outlives a process (the platform's
/// databases).
pub struct Builds {
    queue: Mutex<Queue>,
    knobs: Mutex<Knobs>,
    /// Agent token's digest → agent id (the tokens themselves are not kept).
    agents: BTreeMap<TokenDigest, String>,
    /// The digest of the token that may make builds.
    trigger_token: TokenDigest,
    /// Woken when a build's log grows: the broadcaster's followers wait on it.
    logs_changed: tokio::sync::Notify,
    /// With a database: where every change to the queue goes, in order.
    journal: OnceLock<Arc<Journal>>,
}

/// The queue, locked. When released, what changed is appended to the store's journal (with
/// a database), under the lock: the journal has the changes in the order they were made.
pub struct Locked<'a> {
    queue: MutexGuard<'a, Queue>,
    journal: Option<&'a Journal>,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Queue;
    fn deref(&self) -> &Queue {
        &self.queue
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Queue {
        &mut self.queue
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Some(journal) = self.journal {
            for change in self.queue.take_changes() {
                journal.append(change);
            }
        }
    }
}

impl Builds {
    /// Builds for the agents of `agents` (token → id), made with `trigger_token`.
    pub fn new(
        settings: Settings,
        agents: BTreeMap<String, String>,
        trigger_token: &str,
    ) -> Arc<Self> {
        Arc::new(Builds {
            queue: Mutex::new(Queue::new(settings)),
            knobs: Mutex::default(),
            agents: agents
                .into_iter()
                .map(|(token, agent)| (TokenDigest::of(&token), agent))
                .collect(),
            trigger_token: TokenDigest::of(trigger_token),
            logs_changed: tokio::sync::Notify::new(),
            journal: OnceLock::new(),
        })
    }

    /// The queue (never held across an await).
    pub fn lock(&self) -> Locked<'_> {
        Locked {
            queue: self.queue.lock().expect("runner queue lock poisoned"),
            journal: self.journal.get().map(Arc::as_ref),
        }
    }

    /// Replaces the queue with what the store kept (`objects`, `logs`): a restarted
    /// control plane serves the builds, tasks and logs the last one committed. Its own
    /// settings stay. The number of builds restored.
    pub fn restore(
        &self,
        objects: &[store::records::RunnerObject],
        logs: &[store::records::RunnerLog],
    ) -> Result<usize, queue::Unreadable> {
        let mut queue = self.queue.lock().expect("runner queue lock poisoned");
        *queue = Queue::restore(queue.settings().clone(), objects, logs)?;
        Ok(queue.builds().count())
    }

    /// Keeps every change from now on in `journal` (once; a second call is ignored).
    pub fn keep_in(&self, journal: Arc<Journal>) {
        let mut queue = self.queue.lock().expect("runner queue lock poisoned");
        if self.journal.set(journal).is_ok() {
            queue.track();
        }
    }

    /// Waits until every change made so far is committed (at once without a database).
    pub async fn durable(&self) -> Result<(), store::Unavailable> {
        match self.journal.get() {
            Some(journal) => journal.sync().await,
            None => Ok(()),
        }
    }

    /// The link's faults now.
    pub fn knobs(&self) -> Knobs {
        *self.knobs.lock().expect("runner knobs lock poisoned")
    }

    /// Sets the link's faults.
    pub fn set_knobs(&self, knobs: Knobs) {
        *self.knobs.lock().expect("runner knobs lock poisoned") = knobs;
    }

    fn agent_of(&self, req: &Request<Incoming>) -> Option<&str> {
        let token = req.headers().get("authorization")?.to_str().ok()?;
        self.agents.get(&TokenDigest::of(token)).map(String::as_str)
    }

    /// The refusal of `req` unless it comes from build `build`'s engine: the token of the
    /// agent whose runtime runs it (another agent's token may not report on it or write its
    /// log). A build not found is left to the route (404).
    fn refuse_engine(&self, req: &Request<Incoming>, build: &str) -> Option<http::Response<Body>> {
        let Some(agent) = self.agent_of(req) else {
            return Some(error(StatusCode::UNAUTHORIZED, "unknown agent token"));
        };
        let owner = self.lock().build(build).map(|b| b.agent.clone());
        match owner {
            Some(owner) if owner != agent => Some(error(
                StatusCode::FORBIDDEN,
                format!(
                    "build {build} runs on agent {owner}'s runtime; the token is agent {agent}'s"
                ),
            )),
            _ => None,
        }
    }

    fn is_trigger(&self, req: &Request<Incoming>) -> bool {
        req.headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                self.trigger_token
                    .matches(v.strip_prefix("Bearer ").unwrap_or(v))
            })
    }
}

fn trace(env: &SharedEnv, changes: &queue::Changes) {
    for (build, status, reason) in &changes.builds {
        env.observe(
            RunnerEvent::Build {
                build: build.clone(),
                status: status.as_str().into(),
                reason: reason.clone().unwrap_or_default(),
            }
            .into(),
        );
    }
    for task in &changes.expired {
        env.observe(RunnerEvent::Expired { task: task.clone() }.into());
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> http::Response<Body> {
    json(status, &json!({"message": message.into()}))
}

fn lost() -> http::Response<Body> {
    error(StatusCode::BAD_GATEWAY, "bad gateway")
}

/// Largest request body the API reads by default (`runner.body`).
pub const BODY_LIMIT: usize = crate::env::limits::Limits::DEFAULT.runner_body;

/// Why a request's body is refused, with the status to answer: 413 over `runner.body`, else 400.
struct Refused(StatusCode, String);

/// Reads a JSON body of at most `limit` bytes (`runner.body`).
async fn body(req: Request<Incoming>, limit: usize) -> Result<Value, Refused> {
    let bytes = crate::env::http::read_body(req.into_body(), limit)
        .await
        .map_err(|e| Refused(e.status(), e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Refused(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {e}"),
        )
    })
}

/// Whether a drawn percentage falls under `percent`.
fn draw(env: &SharedEnv, percent: u8) -> bool {
    percent > 0 && env.random_u64() % 100 < u64::from(percent)
}

async fn handle(
    env: SharedEnv,
    builds: Arc<Builds>,
    req: Request<Incoming>,
) -> http::Response<Body> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method().clone();
    match segments.as_slice() {
        ["api", "agent", id, rest @ ..] => {
            let (id, rest) = (id.to_string(), rest.join("/"));
            let Some(agent) = builds.agent_of(&req).map(str::to_string) else {
                return error(StatusCode::UNAUTHORIZED, "unknown agent token");
            };
            if agent != id {
                return error(
                    StatusCode::FORBIDDEN,
                    format!("the token is not agent {id}'s"),
                );
            }
            let knobs = builds.knobs();
            if knobs.silent {
                return std::future::pending().await;
            }
            if draw(&env, knobs.lost_requests) {
                return lost();
            }
            let answer = agent_route(&env, &builds, &agent, &method, &rest, req).await;
            if draw(&env, knobs.lost_answers) {
                return lost();
            }
            answer
        }
        ["api", "builds"] if method == http::Method::POST => {
            if !builds.is_trigger(&req) {
                return error(StatusCode::UNAUTHORIZED, "a build needs the trigger token");
            }
            let request =
                match build_request(&builds, env.limits().runner_body, req, None, None).await {
                    Ok(request) => request,
                    Err(refused) => return refused,
                };
            let id = admit(&env, &builds, request).await;
            json(StatusCode::CREATED, &json!({"id": id}))
        }
        ["api", "proxy-tasks"] if method == http::Method::POST => {
            if !builds.is_trigger(&req) {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "a proxy task needs the trigger token",
                );
            }
            let body = match body(req, env.limits().runner_body).await {
                Ok(body) => body,
                Err(Refused(status, e)) => return error(status, e),
            };
            let spec = match proxy_task(&builds, &body) {
                Ok(spec) => spec,
                Err((status, e)) => return error(status, e),
            };
            let agent = body["agent"].as_str().unwrap_or_default();
            let id = builds.lock().proxy(agent, spec, env.unix_millis());
            json(StatusCode::CREATED, &json!({"id": id}))
        }
        ["api", "proxy-tasks", id] if method == http::Method::GET => {
            if !builds.is_trigger(&req) {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "a proxy task needs the trigger token",
                );
            }
            let queue = builds.lock();
            match queue
                .task(id)
                .filter(|q| q.task.kind == crate::core::runner::TaskType::AgentTask)
            {
                Some(q) => json(
                    StatusCode::OK,
                    &json!({"id": id, "agent": q.agent, "deliveries": q.deliveries, "status": q.state}),
                ),
                None => error(StatusCode::NOT_FOUND, format!("no proxy task {id}")),
            }
        }
        ["api", "webhooks"] if method == http::Method::POST => {
            if !builds.is_trigger(&req) {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "a webhook needs the trigger token",
                );
            }
            let Some(delivery) = req
                .headers()
                .get(DELIVERY_HEADER)
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
            else {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("a webhook delivery needs its `{DELIVERY_HEADER}` header"),
                );
            };
            let request = match build_request(
                &builds,
                env.limits().runner_body,
                req,
                Some(delivery.clone()),
                None,
            )
            .await
            {
                Ok(request) => request,
                Err(refused) => return refused,
            };
            run_event(
                &env,
                &builds,
                &queue::delivery_key(&delivery),
                request,
                json!({"delivery": delivery}),
            )
            .await
        }
        ["api", "cronus", "lease"] if method == http::Method::POST => {
            if !builds.is_trigger(&req) {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "the lease needs the trigger token",
                );
            }
            let body = match body(req, env.limits().runner_body).await {
                Ok(body) => body,
                Err(Refused(status, e)) => return error(status, e),
            };
            let longest = env.limits().lease_max.as_millis() as u64;
            let (Some(holder), Some(ttl)) = (
                body.get("holder")
                    .and_then(Value::as_str)
                    .filter(|h| !h.is_empty()),
                body.get("ttlMs")
                    .and_then(Value::as_u64)
                    .filter(|t| (1..=longest).contains(t)),
            ) else {
                // A lease without an end would let one holder keep the cron ticks for ever.
                return error(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "a lease request needs `holder` (a name) and `ttlMs` (1 to {longest}, runner.lease-max)"
                    ),
                );
            };
            let lease =
                builds
                    .lock()
                    .take_lease(holder, Duration::from_millis(ttl), env.unix_millis());
            json(StatusCode::OK, &lease)
        }
        ["api", "cron", "", ..] => error(
            StatusCode::BAD_REQUEST,
            "a cron trigger needs a name: /api/cron/{name}",
        ),
        ["api", "cron", name] => {
            if !builds.is_trigger(&req) {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "cron triggers need the trigger token",
                );
            }
            let name = name.to_string();
            match method {
                http::Method::GET => match builds.lock().cron(&name) {
                    Some(cron) => json(StatusCode::OK, cron),
                    None => error(StatusCode::NOT_FOUND, format!("no cron trigger {name}")),
                },
                http::Method::PUT => {
                    let every = match body(req, env.limits().runner_body).await.and_then(|v| {
                        v.get("everyMs")
                            .and_then(Value::as_u64)
                            .filter(|ms| *ms > 0)
                            .ok_or_else(|| {
                                Refused(
                                    StatusCode::BAD_REQUEST,
                                    "a cron trigger needs `everyMs` (above 0)".into(),
                                )
                            })
                    }) {
                        Ok(every) => every,
                        Err(Refused(status, e)) => return error(status, e),
                    };
                    let mut queue = builds.lock();
                    let cron = queue
                        .register_cron(&name, Duration::from_millis(every), env.unix_millis())
                        .clone();
                    json(StatusCode::OK, &cron)
                }
                _ => error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("{method} /api/cron/{name}: GET or PUT"),
                ),
            }
        }
        ["api", "cron", name, "ticks"] if method == http::Method::POST => {
            if !builds.is_trigger(&req) {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "a cron tick needs the trigger token",
                );
            }
            let name = name.to_string();
            let body = match body(req, env.limits().runner_body).await {
                Ok(body) => body,
                Err(Refused(status, e)) => return error(status, e),
            };
            let Some(scheduled_ms) = body.get("scheduledMs").and_then(Value::as_u64) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "a cron tick needs `scheduledMs` (the Unix ms it was due)",
                );
            };
            let tick = queue::Tick {
                trigger: name,
                scheduled_ms,
            };
            let now = env.unix_millis();
            if let Some(cron) = builds.lock().cron(&tick.trigger) {
                if !tick.fits(cron, now, TICK_SLACK.as_millis() as u64) {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "`scheduledMs` {scheduled_ms} is not a tick of cron trigger {}: ticks are multiples of {} ms, none later than now ({now}) plus {} ms",
                            tick.trigger,
                            cron.every_ms,
                            TICK_SLACK.as_millis()
                        ),
                    );
                }
            }
            if body.get("missed").and_then(Value::as_bool) == Some(true) {
                let reported = builds.lock().report_missed(tick.clone(), now);
                return match reported {
                    Ok(()) => json(StatusCode::OK, &json!({"missed": true, "tick": tick})),
                    // It was run (or is being run): not missed.
                    Err(build) => json(
                        StatusCode::OK,
                        &json!({"id": build, "duplicate": true, "tick": tick}),
                    ),
                };
            }
            let request = match parse_build(&builds, &body, None, Some(tick.clone())) {
                Ok(request) => request,
                Err((status, e)) => return error(status, e),
            };
            run_event(&env, &builds, &tick.key(), request, json!({"tick": tick})).await
        }
        ["api", "pipelines", name @ ..] if !name.is_empty() => {
            if !builds.is_trigger(&req) {
                return error(StatusCode::UNAUTHORIZED, "pipelines need the trigger token");
            }
            let name = name.join("/");
            match method {
                http::Method::GET => json(StatusCode::OK, &builds.lock().pipeline(&name)),
                http::Method::PUT => {
                    let pipeline: Pipeline =
                        match body(req, env.limits().runner_body).await.and_then(|v| {
                            serde_json::from_value(v).map_err(|e| {
                                Refused(StatusCode::BAD_REQUEST, format!("not a pipeline: {e}"))
                            })
                        }) {
                            Ok(pipeline) => pipeline,
                            Err(Refused(status, e)) => return error(status, e),
                        };
                    if let Err(e) = pipeline.check() {
                        return error(StatusCode::BAD_REQUEST, format!("not a pipeline: {e}"));
                    }
                    let changes =
                        builds
                            .lock()
                            .set_pipeline(&name, pipeline.clone(), env.unix_millis());
                    trace(&env, &changes);
                    json(StatusCode::OK, &pipeline)
                }
                _ => error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("{method} /api/pipelines/{name}: GET or PUT"),
                ),
            }
        }
        ["api", "builds", id, "logs"] => {
            let id = id.to_string();
            match method {
                http::Method::POST => match builds.refuse_engine(&req, &id) {
                    None => logs::append(&env, &builds, &id, req).await,
                    Some(refused) => refused,
                },
                http::Method::GET if builds.is_trigger(&req) || builds.agent_of(&req).is_some() => {
                    logs::read(&env, &builds, &id, req)
                }
                http::Method::GET => error(StatusCode::UNAUTHORIZED, "unknown token"),
                _ => error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("{method} /api/builds/{id}/logs: GET or POST"),
                ),
            }
        }
        ["api", "builds", id] if method == http::Method::GET => {
            if !builds.is_trigger(&req) && builds.agent_of(&req).is_none() {
                return error(StatusCode::UNAUTHORIZED, "unknown token");
            }
            match builds.lock().build(id) {
                Some(build) => json(StatusCode::OK, build),
                None => error(StatusCode::NOT_FOUND, format!("no build {id}")),
            }
        }
        ["api", "builds", id, "engine"] if method == http::Method::POST => {
            let id = id.to_string();
            if let Some(refused) = builds.refuse_engine(&req, &id) {
                return refused;
            }
            let body = match body(req, env.limits().runner_body).await {
                Ok(body) => body,
                Err(Refused(status, e)) => return error(status, e),
            };
            let exit_code = match body.get("exitCode") {
                None | Some(Value::Null) => None,
                Some(code) => match code.as_i64().and_then(|c| i32::try_from(c).ok()) {
                    Some(code) => Some(code),
                    None => return error(StatusCode::BAD_REQUEST, "`exitCode` is not an integer"),
                },
            };
            let changes = builds
                .lock()
                .engine_report(&id, exit_code, env.unix_millis());
            match changes {
                Some(changes) => {
                    trace(&env, &changes);
                    json(StatusCode::OK, &json!({}))
                }
                None => error(StatusCode::CONFLICT, format!("build {id} is not running")),
            }
        }
        _ => error(
            StatusCode::NOT_FOUND,
            format!("{method} {path}: no such route"),
        ),
    }
}

/// A trigger's body as a build request: `pipeline` and `agent` (one of the agents),
/// `branch` (default `main`), `steps`; or the answer refusing it, naming what is wrong.
async fn build_request(
    builds: &Builds,
    limit: usize,
    req: Request<Incoming>,
    delivery: Option<String>,
    tick: Option<queue::Tick>,
) -> Result<NewBuild, http::Response<Body>> {
    let body = body(req, limit)
        .await
        .map_err(|Refused(status, e)| error(status, e))?;
    parse_build(builds, &body, delivery, tick).map_err(|(status, e)| error(status, e))
}

/// The spec of the proxy task `body` asks for (`{agent, url, method?, token, params?}`), or
/// why it is refused: an unknown agent, a URL that is not `http(s)://…`, a method that is
/// not one, no token, `params` not an object.
fn proxy_task(builds: &Builds, body: &Value) -> Result<Value, (StatusCode, String)> {
    let field = |name: &str| body.get(name).and_then(Value::as_str).unwrap_or_default();
    let (agent, url, token) = (field("agent"), field("url"), field("token"));
    let method = match field("method") {
        "" => "POST",
        m => m,
    };
    if !builds.agents.values().any(|a| a == agent) {
        return Err((StatusCode::NOT_FOUND, format!("no agent {agent:?}")));
    }
    let url_ok = url
        .parse::<http::Uri>()
        .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if !url_ok {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("`url` {url:?} is not an http(s) URL"),
        ));
    }
    if http::Method::from_bytes(method.as_bytes()).is_err() {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("`method` {method:?} is not an HTTP method"),
        ));
    }
    if token.is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            "a proxy task needs `token` (sent as x-access-token)".into(),
        ));
    }
    let params = match body.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err((StatusCode::BAD_REQUEST, "`params` is not an object".into())),
    };
    Ok(crate::core::runner::proxy_spec(url, method, token, params))
}

/// [`build_request`] on a body already read.
fn parse_build(
    builds: &Builds,
    body: &Value,
    delivery: Option<String>,
    tick: Option<queue::Tick>,
) -> Result<NewBuild, (StatusCode, String)> {
    let (Some(pipeline), Some(agent)) = (
        body.get("pipeline").and_then(Value::as_str),
        body.get("agent").and_then(Value::as_str),
    ) else {
        return Err((
            StatusCode::BAD_REQUEST,
            "a build needs `pipeline` and `agent`".into(),
        ));
    };
    if !builds.agents.values().any(|a| a == agent) {
        return Err((StatusCode::NOT_FOUND, format!("no agent {agent}")));
    }
    let branch = match body.get("branch") {
        None | Some(Value::Null) => "main",
        Some(Value::String(branch)) if !branch.is_empty() => branch.as_str(),
        Some(_) => {
            return Err((
                StatusCode::BAD_REQUEST,
                "`branch` is not a branch name".into(),
            ))
        }
    };
    let steps: Vec<Step> =
        serde_json::from_value(body.get("steps").cloned().unwrap_or_else(|| json!([])))
            .map_err(|e| (StatusCode::BAD_REQUEST, format!("`steps`: {e}")))?;
    for (n, step) in steps.iter().enumerate() {
        if step.lines > queue::MAX_STEP_LINES || step.line_bytes > queue::MAX_LINE_BYTES {
            return Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "`steps[{n}]`: at most {} lines of at most {} bytes",
                    queue::MAX_STEP_LINES,
                    queue::MAX_LINE_BYTES
                ),
            ));
        }
    }
    let priority = match body.get("priority") {
        None | Some(Value::Null) => None,
        Some(p) => match p.as_i64().filter(|p| (-100..=100).contains(p)) {
            Some(p) => Some(p as i32),
            None => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    "`priority` is not an integer in -100..=100".into(),
                ))
            }
        },
    };
    let text = |field: &str| match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if !text.is_empty() => Ok(Some(text.clone())),
        Some(_) => Err((
            StatusCode::BAD_REQUEST,
            format!("`{field}` is not a non-empty string"),
        )),
    };
    // A tick's build was started by its cron trigger.
    let trigger = text("trigger")?.or_else(|| tick.as_ref().map(|t| t.trigger.clone()));
    let parent = text("parent")?;
    if let Some(parent) = &parent {
        if builds.lock().build(parent).is_none() {
            return Err((
                StatusCode::NOT_FOUND,
                format!("`parent`: no build {parent}"),
            ));
        }
    }
    Ok(NewBuild {
        priority,
        trigger,
        parent,
        pipeline: pipeline.into(),
        agent: agent.into(),
        branch: branch.into(),
        steps,
        delivery,
        tick,
    })
}

/// hermes running one event (a webhook delivery, a cron tick) keyed by `key`: hardened
/// answers an event seen before with its build; otherwise hermes resolves the trigger and
/// asks cfapi for the build (§5) after [`Settings::webhook_delay`]. The caller waits for
/// this answer and may give up and send again; the work goes on when it hangs up (Go's
/// handler is not cancelled with its connection, and runPipeline's client has no timeout).
async fn run_event(
    env: &SharedEnv,
    builds: &Arc<Builds>,
    key: &str,
    request: NewBuild,
    mut answer: Value,
) -> http::Response<Body> {
    let settings = builds.lock().settings().clone();
    if settings.variant == crate::core::Variant::Hardened {
        let claimed = builds.lock().claim_delivery(key, env.unix_millis());
        if let Err(build) = claimed {
            answer["id"] = json!(build);
            answer["duplicate"] = json!(true);
            return json(StatusCode::OK, &answer);
        }
    }
    let work = {
        let (env, builds) = (env.clone(), builds.clone());
        tokio::spawn(async move {
            env.sleep(settings.webhook_delay).await;
            admit(&env, &builds, request).await
        })
    };
    match work.await {
        Ok(id) => {
            answer["id"] = json!(id);
            json(StatusCode::CREATED, &answer)
        }
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the build was not made: {e}"),
        ),
    }
}

/// Makes the build `request` asks for through admission: faithful checks the limit, waits
/// for its read and elects on what it read (queue.rs: admission); hardened checks and
/// elects at once. Without a limit there is nothing to read. Its id.
async fn admit(env: &SharedEnv, builds: &Builds, request: NewBuild) -> String {
    let (settings, limited) = {
        let queue = builds.lock();
        let limited = queue.limited(&request.pipeline);
        (queue.settings().clone(), limited)
    };
    let seen = match (settings.variant, limited) {
        (crate::core::Variant::Faithful, true) => {
            let seen = builds.lock().admitted_counts(
                &request.pipeline,
                &request.branch,
                request.trigger.as_deref(),
            );
            env.sleep(settings.admission_read).await;
            Some(seen)
        }
        _ => None,
    };
    let (id, changes) = builds.lock().make_build(request, seen, env.unix_millis());
    trace(env, &changes);
    id
}

/// What a hardened agent's heartbeat adds to venona's `{"message": …}`.
#[derive(serde::Deserialize)]
struct Held {
    /// The agent pod sending it.
    #[serde(default)]
    replica: Option<String>,
    /// Task ids queued or running in that pod.
    #[serde(default)]
    holding: Vec<String>,
}

/// The agent's own routes (`rest` after `/api/agent/{id}/`).
async fn agent_route(
    env: &SharedEnv,
    builds: &Builds,
    agent: &str,
    method: &http::Method,
    rest: &str,
    req: Request<Incoming>,
) -> http::Response<Body> {
    let parts: Vec<&str> = rest.split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["tasks"]) => {
            // hardened agents name their pod (`?replica=`); venona sends no such thing.
            let replica = req.uri().query().and_then(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .find(|(k, _)| k == "replica")
                    .map(|(_, v)| v.into_owned())
            });
            let polled = builds
                .lock()
                .poll(agent, replica.as_deref(), env.unix_millis());
            let mut tasks = Vec::with_capacity(polled.len());
            for (task, delivery) in polled {
                env.observe(
                    RunnerEvent::Handout {
                        agent: agent.into(),
                        task: task.id.clone(),
                        kind: format!("{:?}", task.kind),
                        object: task.object_name().into(),
                        delivery,
                    }
                    .into(),
                );
                tasks.push(task);
            }
            json(StatusCode::OK, &tasks)
        }
        ("POST", ["tasks", task, "statuses"]) => {
            let task = task.to_string();
            let status: TaskStatus = match body(req, env.limits().runner_body).await.and_then(|v| {
                serde_json::from_value(v).map_err(|e| {
                    Refused(StatusCode::BAD_REQUEST, format!("not a task status: {e}"))
                })
            }) {
                Ok(status) => status,
                Err(Refused(status, e)) => return error(status, e),
            };
            let result = builds
                .lock()
                .report(agent, &task, &status, env.unix_millis());
            let (accepted, detail) = match &result {
                Ok(_) => (true, String::new()),
                Err(e) => (false, e.to_string()),
            };
            env.observe(
                RunnerEvent::Report {
                    agent: agent.into(),
                    task,
                    outcome: format!("{:?}", status.status),
                    retriable: status.is_retriable,
                    accepted,
                    detail,
                }
                .into(),
            );
            match result {
                Ok(changes) => {
                    trace(env, &changes);
                    json(StatusCode::OK, &json!({}))
                }
                Err(e @ queue::ReportError::NotFound(_)) => {
                    error(StatusCode::NOT_FOUND, e.to_string())
                }
                Err(e @ queue::ReportError::Conflict { .. }) => {
                    error(StatusCode::CONFLICT, e.to_string())
                }
            }
        }
        ("PUT", ["status"]) => {
            // venona sends `{"message": …}`; a hardened agent adds its pod and the tasks it
            // holds, whose leases the heartbeat renews. A body that is not that is still a
            // heartbeat (the agent is alive), with nothing renewed.
            // (faithful, as the real platform, reads nothing of it.)
            let hardened = builds.lock().settings().variant == crate::core::Variant::Hardened;
            let held: Option<Held> = if hardened {
                body(req, env.limits().runner_body)
                    .await
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok())
            } else {
                None
            };
            let mut builds = builds.lock();
            let now = env.unix_millis();
            builds.heartbeat(agent, now);
            if let Some(Held {
                replica: Some(replica),
                holding,
            }) = held
            {
                builds.renew(agent, &replica, &holding, now);
            }
            json(StatusCode::OK, &json!({}))
        }
        _ => error(
            StatusCode::NOT_FOUND,
            format!("{method} /api/agent/{agent}/{rest}: no such route"),
        ),
    }
}

/// Serves the builds and agent API on `listener` and applies the platform's limits every
/// [`TICK`], until the listener fails.
pub async fn serve(
    env: SharedEnv,
    builds: Arc<Builds>,
    listener: Box<dyn crate::env::Listener>,
) -> std::io::Result<()> {
    let (tick_env, tick_builds) = (env.clone(), builds.clone());
    let ticker = tokio::spawn(async move {
        loop {
            tick_env.sleep(TICK).await;
            let changes = tick_builds.lock().tick(tick_env.unix_millis());
            trace(&tick_env, &changes);
        }
    });
    let _ticker = super::events::AbortOnDrop([ticker]);
    let limits = env.limits().clone();
    crate::env::http::serve_limited(listener, &limits, move |req, _peer| {
        let (env, builds) = (env.clone(), builds.clone());
        async move {
            // With a database, a change is answered only once it is committed (a poll hands
            // out leases the agent's next poll renews: it does not wait).
            let writes = req.method() != http::Method::GET && req.method() != http::Method::HEAD;
            let answer = handle(env, builds.clone(), req).await;
            if writes && answer.status().is_success() {
                if let Err(e) = builds.durable().await {
                    return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
                }
            }
            answer
        }
    })
    .await
}
