//! The platform's promotion orchestrator (`argo-platform-promotion-orchestrator`, research
//! §5–6; the orchestration living in the platform is **inferred**): a commit in a Product's
//! trigger environment starts a release; the release walks the flow's DAG and has each
//! environment's runtime execute a `PromotionTask` (pre-action workflow → promotion commit
//! or pull request → verification → post-action workflow), created and followed through the
//! platform's gateway, the runtime's tunnel, its router and its app-proxy. The read model
//! ([`Releases`]) holds every release with its environments' phases and times.
//!
//! - [`plan`]: which flow a commit triggers, the DAG, the merged policies (pure).
//! - [`file`]: the orchestrator's file for `orrery serve control-plane --promotions`.
//! - [`run`]: the loop — find new commits, start releases, advance them, end them.
//!
//! A release first runs a task in the trigger environment (`getPromotionValues` at the
//! commit, then `verifyApp`): the values to promote come from there. Then every
//! environment whose `dependsOn` all verified the release gets its task. A failed task
//! fails the release (environments not started are `Skipped`); a release still running
//! after `promotionTimeoutLimit` is `Terminated`. `concurrency: queue` starts a release
//! when the one before it ended; `terminate` ends the one before it (`Terminated`) at
//! once. How the real platform learns of commits is not public: here it polls the Git
//! provider's API for the newest commit touching the trigger environment's path.

pub mod file;
pub mod plan;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::Method;
use serde_json::{json, Value};

use crate::env::http::query_escape as q;
use crate::env::SharedEnv;
use crate::observe::PromotionEvent;
use crate::runtime::upstream::{CallError, Client};
use plan::{Action, FlowPlan};

/// Where an environment's app lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The runtime's name at the gateway (`<account>-<runtime>`).
    pub runtime: String,
    /// The Argo CD Application.
    pub app: String,
    /// Its path in the repository (the trigger environment's is watched for commits).
    pub path: String,
    /// The Application's labels: PromotionTemplates choose their apps by them when the
    /// Product names no template.
    pub labels: BTreeMap<String, String>,
}

/// What a new release does to one still running (Product v1beta2 `concurrency`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Concurrency {
    /// It waits until the one before it ended.
    #[default]
    Queue,
    /// The one before it is terminated.
    Terminate,
}

/// How often commits and tasks are looked at by default.
pub const POLL: Duration = Duration::from_secs(5);
/// A release's timeout when its flow sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// The default per-call timeout.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Orchestrator settings: one Product.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Product's name.
    pub product: String,
    /// The Product's `spec` (`promotionFlows` with their trigger selectors,
    /// `promotionTemplate`).
    pub product_spec: Value,
    /// Its flows, planned.
    pub flows: BTreeMap<String, FlowPlan>,
    /// When `product_spec` has no `promotionTemplate`: the PromotionTemplates that choose
    /// each app's template by its labels.
    pub templates: plan::Templates,
    /// Environment → its app.
    pub targets: BTreeMap<String, Target>,
    /// The GitOps repository.
    pub repo: String,
    /// The Git provider's API, `host:port`.
    pub git_addr: String,
    /// The platform's gateway, `host:port` (forwards into runtimes' tunnels).
    pub gateway_addr: String,
    /// The orchestrator's user token (`promotions:write`, `promotions:read`).
    pub token: String,
    /// `concurrency`.
    pub concurrency: Concurrency,
    /// How often commits and tasks are looked at. Default 5 s.
    pub poll: Duration,
    /// A release's timeout when its flow sets none. Default 30 minutes.
    pub default_timeout: Duration,
    /// Per-call timeout.
    pub call_timeout: Duration,
}

impl Config {
    /// Defaults for `product`.
    pub fn new(
        product: &str,
        product_spec: Value,
        repo: &str,
        git_addr: &str,
        gateway_addr: &str,
        token: &str,
    ) -> Self {
        Config {
            product: product.into(),
            product_spec,
            flows: BTreeMap::new(),
            templates: plan::Templates::default(),
            targets: BTreeMap::new(),
            repo: repo.into(),
            git_addr: git_addr.into(),
            gateway_addr: gateway_addr.into(),
            token: token.into(),
            concurrency: Concurrency::Queue,
            poll: POLL,
            default_timeout: DEFAULT_TIMEOUT,
            call_timeout: CALL_TIMEOUT,
        }
    }
}

impl Config {
    /// Whether the orchestrator can run: a flow, every environment of every flow with its
    /// app, and one trigger environment for all flows (the one whose commits are watched).
    /// Returns that trigger environment, or what is wrong.
    pub fn check(&self) -> Result<String, String> {
        let Some(trigger) = self.flows.values().next().map(|f| f.trigger.clone()) else {
            return Err(format!("Product {} has no promotion flow", self.product));
        };
        let missing: std::collections::BTreeSet<&String> = self
            .flows
            .values()
            .flat_map(|f| {
                std::iter::once(&f.trigger).chain(f.stages.iter().map(|s| &s.environment))
            })
            .filter(|e| !self.targets.contains_key(*e))
            .collect();
        if !missing.is_empty() {
            let missing: Vec<&str> = missing.into_iter().map(String::as_str).collect();
            return Err(format!(
                "Product {}: no app (target) for environment(s) {}",
                self.product,
                missing.join(", ")
            ));
        }
        let triggers: std::collections::BTreeSet<&String> =
            self.flows.values().map(|f| &f.trigger).collect();
        for trigger in &triggers {
            let target = &self.targets[*trigger];
            if self.template_for(target).is_none() {
                return Err(format!(
                    "Product {}: it names no promotion template, and no PromotionTemplate's applicationSourceSelector matches app {} (environment {trigger}) with labels {:?}",
                    self.product, target.app, target.labels
                ));
            }
        }
        if triggers.len() > 1 {
            let triggers: Vec<&str> = triggers.into_iter().map(String::as_str).collect();
            return Err(format!(
                "Product {}: its flows start in different environments ({}); one trigger environment is watched",
                self.product,
                triggers.join(", ")
            ));
        }
        Ok(trigger)
    }

    /// The promotion template for `target`'s app: the Product's own, or the composite of
    /// the PromotionTemplates that select the app by its labels; `None` when neither.
    pub fn template_for(&self, target: &Target) -> Option<Value> {
        match self.product_spec.get("promotionTemplate") {
            Some(template) if template.is_object() => Some(template.clone()),
            _ => self.templates.composite(&target.labels).map(|(t, _)| t),
        }
    }
}

/// An environment's phase in a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum EnvPhase {
    /// Not started (its dependencies have not all verified the release).
    Waiting,
    /// Its PromotionTask runs.
    Promoting,
    /// Promoted and verified healthy.
    Succeeded,
    /// Its task failed.
    Failed,
    /// Never started: the release failed or ended first.
    Skipped,
    /// Its release was terminated while it ran.
    Terminated,
}

impl EnvPhase {
    /// Its name, as the API shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvPhase::Waiting => "Waiting",
            EnvPhase::Promoting => "Promoting",
            EnvPhase::Succeeded => "Succeeded",
            EnvPhase::Failed => "Failed",
            EnvPhase::Skipped => "Skipped",
            EnvPhase::Terminated => "Terminated",
        }
    }
}

/// A release's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ReleasePhase {
    /// Waiting for the release before it (`concurrency: queue`).
    Queued,
    /// Its environments are being promoted.
    Running,
    /// Every environment succeeded.
    Succeeded,
    /// An environment failed.
    Failed,
    /// Timed out, or replaced (`concurrency: terminate`).
    Terminated,
}

impl ReleasePhase {
    /// Whether the release is over.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            ReleasePhase::Succeeded | ReleasePhase::Failed | ReleasePhase::Terminated
        )
    }

    /// Its name, as the API shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleasePhase::Queued => "Queued",
            ReleasePhase::Running => "Running",
            ReleasePhase::Succeeded => "Succeeded",
            ReleasePhase::Failed => "Failed",
            ReleasePhase::Terminated => "Terminated",
        }
    }
}

/// One environment of a release.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EnvStatus {
    /// Its phase.
    pub phase: EnvPhase,
    /// The PromotionTask it runs as (once started).
    pub task: String,
    /// When its task was created (Unix ms; 0 before).
    pub started_ms: u64,
    /// When it ended (Unix ms; 0 before).
    pub ended_ms: u64,
    /// Terminated while its task ran: whether the runtime has been told to stop the task
    /// (a queued release waits until every such task was told).
    pub stop_sent: bool,
}

/// A release: one commit of the trigger environment on its way through the flow.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Release {
    /// `<product>-<n>`, n from 1.
    pub id: String,
    /// The flow it follows.
    pub flow: String,
    /// The trigger environment's commit.
    pub commit: String,
    /// When the orchestrator saw the commit (Unix ms); lead times count from here.
    pub created_ms: u64,
    /// When it started running (Unix ms; later than `created_ms` when it was queued); its
    /// timeout counts from here.
    pub started_ms: u64,
    /// Its phase.
    pub phase: ReleasePhase,
    /// Why it ended (empty while it runs or when it succeeded).
    pub why: String,
    /// The values to promote (file → JSON path → value), read in the trigger environment.
    pub values: Option<Value>,
    /// The version read there (`versionSource`).
    pub version: Option<Value>,
    /// The trigger environment and every stage.
    pub environments: BTreeMap<String, EnvStatus>,
    /// When it ended (Unix ms; 0 while it runs).
    pub ended_ms: u64,
    /// Its promotion hooks, in the order they became due.
    pub hooks: Vec<HookRun>,
}

/// A promotion hook of a release: a Promotion Workflow run once, as a PromotionTask of its
/// own with one `runWorkflow` step, when the release or an environment's promotion starts,
/// succeeds or fails (docs.codefresh.io, "Configure hooks in Promotion Workflows"). A hook
/// does not change the release's outcome and nothing waits for it (**inferred**: the docs
/// present hooks as notifications and audit, "without requiring users to monitor the
/// promotion").
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HookRun {
    /// `onStart`, `onSuccess` or `onFail`.
    pub event: String,
    /// Creates tried so far (it is given up after [`HOOK_ATTEMPTS`]).
    pub attempts: u32,
    /// The workflow template it runs.
    pub template: String,
    /// The runtime it runs on: the environment's, or for a release hook the trigger
    /// environment's (**inferred**).
    pub runtime: String,
    /// Its PromotionTask.
    pub task: String,
    /// Its environment (empty for a release hook).
    pub environment: String,
    /// Whether the runtime accepted the task (retried until it does).
    pub sent: bool,
}

impl HookRun {
    /// `release.onStart`, `<environment>.onSuccess`, …: how events and errors name it.
    pub fn name(&self) -> String {
        match self.environment.as_str() {
            "" => format!("release.{}", self.event),
            environment => format!("{environment}.{}", self.event),
        }
    }
}

/// A hook's task is created at most this many times (one a poll) before it is given up
/// (inferred, as the operator's `MAX_RECONCILE_RETRIES`).
pub const HOOK_ATTEMPTS: u32 = 10;

/// Queues `release`'s hook `event` (`onStart`, `onSuccess`, `onFail`) running `template`,
/// once: the release's own when `environment` is empty, else that environment's.
fn queue_hook(
    config: &Config,
    release: &mut Release,
    environment: &str,
    event: &str,
    template: Option<&String>,
) {
    let Some(template) = template else {
        return;
    };
    if release
        .hooks
        .iter()
        .any(|h| h.environment == environment && h.event == event)
    {
        return;
    }
    let runtime_env = if environment.is_empty() {
        config.flows[&release.flow].trigger.clone()
    } else {
        environment.to_string()
    };
    let Some(target) = config.targets.get(&runtime_env) else {
        return;
    };
    let task = if environment.is_empty() {
        format!("{}-hook-release-{}", release.id, event.to_lowercase())
    } else {
        format!(
            "{}-hook-env-{environment}-{}",
            release.id,
            event.to_lowercase()
        )
    };
    release.hooks.push(HookRun {
        task,
        event: event.to_string(),
        attempts: 0,
        template: template.clone(),
        runtime: target.runtime.clone(),
        environment: environment.to_string(),
        sent: false,
    });
}

/// The hooks a release's end makes due (`onSuccess`, `onFail`; none when terminated).
fn queue_end_hooks(config: &Config, release: &mut Release) {
    let hooks = config.flows[&release.flow].hooks.clone();
    match release.phase {
        ReleasePhase::Succeeded => {
            queue_hook(config, release, "", "onSuccess", hooks.on_success.as_ref())
        }
        ReleasePhase::Failed => queue_hook(config, release, "", "onFail", hooks.on_fail.as_ref()),
        _ => {}
    }
}

/// Hands the runtimes the hooks not yet accepted (each until its create succeeded; a
/// retried create is answered as one).
async fn send_hooks(env: &SharedEnv, releases: &Releases, links: &Links) {
    let pending: Vec<(Release, HookRun)> = releases
        .lock()
        .iter()
        .flat_map(|r| {
            r.hooks
                .iter()
                .filter(|h| !h.sent && h.attempts < HOOK_ATTEMPTS)
                .map(|h| (r.clone(), h.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    // A runtime that failed a create is not asked again in this poll (each call may wait
    // for its timeout, and the releases' own work waits behind it).
    let mut failed_runtimes = std::collections::BTreeSet::new();
    for (release, hook) in pending {
        if failed_runtimes.contains(&hook.runtime) {
            continue;
        }
        let mut parameters = json!({"release": release.id, "commit": release.commit,
            "hook": hook.name()});
        if let Some(version) = release.version.as_ref().and_then(Value::as_str) {
            parameters["version"] = json!(version);
        }
        if !hook.environment.is_empty() {
            parameters["environment"] = json!(hook.environment);
        }
        let steps = json!([{"runWorkflow": {"workflowTemplateName": hook.template,
            "stage": "hook", "parameters": parameters}}]);
        let result = links.create_task(&hook.runtime, &hook.task, steps).await;
        if let Some(slot) = releases
            .lock()
            .iter_mut()
            .find(|r| r.id == release.id)
            .and_then(|r| r.hooks.iter_mut().find(|h| h.task == hook.task))
        {
            slot.attempts += 1;
            slot.sent = result.is_ok();
        }
        match result {
            Ok(()) => {
                env.observe(
                    PromotionEvent::Hook {
                        release: release.id.clone(),
                        hook: hook.name(),
                        template: hook.template.clone(),
                        runtime: hook.runtime.clone(),
                        task: hook.task.clone(),
                    }
                    .into(),
                );
            }
            Err(e) => {
                failed_runtimes.insert(hook.runtime.clone());
                env.observe(
                    PromotionEvent::RuntimeError {
                        release: release.id.clone(),
                        runtime: hook.runtime.clone(),
                        error: format!("hook {}: {e}", hook.name()),
                    }
                    .into(),
                );
            }
        }
    }
}

/// The platform's read model of releases, shared with whoever shows it (the harness's
/// checkers, the GitOps API).
#[derive(Clone, Debug, Default)]
pub struct Releases {
    releases: Arc<Mutex<Vec<Release>>>,
    placement: Arc<Mutex<Option<Placement>>>,
    templates: Arc<Mutex<Option<TemplateSource>>>,
}

/// The promotion templates the GitOps API answers a runtime's `promotionTemplateByRuntime`
/// from: the Product's own template (for its environments' apps), else the account's
/// PromotionTemplates chosen by the app's labels.
#[derive(Clone, Debug, Default)]
pub struct TemplateSource {
    /// The Product's `promotionTemplate`, if it has one.
    pub product_template: Option<Value>,
    /// The PromotionTemplates that choose their apps by label.
    pub templates: plan::Templates,
}

/// Which Product the releases are of and where each environment's app lives: what the
/// GitOps API needs to show a release only to the account whose runtimes it runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The Product.
    pub product: String,
    /// Environment → its app.
    pub targets: BTreeMap<String, Target>,
}

impl Releases {
    /// The releases, oldest first.
    pub fn lock(&self) -> MutexGuard<'_, Vec<Release>> {
        self.releases.lock().expect("releases lock poisoned")
    }

    /// The Product and its environments' apps, once an orchestrator runs for it.
    pub fn placement(&self) -> Option<Placement> {
        self.placement
            .lock()
            .expect("placement lock poisoned")
            .clone()
    }

    /// Records the templates the GitOps API answers versionSource lookups from.
    pub fn keep_templates(&self, source: TemplateSource) {
        *self.templates.lock().expect("templates lock poisoned") = Some(source);
    }

    /// The `versionSource` of the template that applies to app `app` (labelled `labels`) of
    /// the runtime whose gateway name is `runtime`: the Product's own template for one of its
    /// environments' apps, else the composite of the PromotionTemplates that select it;
    /// `None` when no template applies or it names no versionSource (the reader then takes
    /// `Chart.yaml` / `$.appVersion`).
    pub fn version_source_for(
        &self,
        runtime: &str,
        app: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<Value> {
        let source = self
            .templates
            .lock()
            .expect("templates lock poisoned")
            .clone()?;
        let in_product = self.placement().is_some_and(|placement| {
            placement
                .targets
                .values()
                .any(|t| t.runtime == runtime && t.app == app)
        });
        let template = match source.product_template {
            Some(template) if in_product => template,
            _ => source.templates.composite(labels)?.0,
        };
        template
            .get("versionSource")
            .filter(|v| v.is_object())
            .cloned()
    }

    /// Records the Product whose releases these are and its environments' apps.
    pub fn place(&self, product: &str, targets: &BTreeMap<String, Target>) {
        *self.placement.lock().expect("placement lock poisoned") = Some(Placement {
            product: product.to_string(),
            targets: targets.clone(),
        });
    }
}

/// The orchestrator's clients.
struct Links {
    git: Client,
    gateway: Client,
    token: String,
}

impl Links {
    /// The newest commit touching `path`: (sha, message).
    async fn newest(&self, repo: &str, path: &str) -> Result<Option<(String, String)>, CallError> {
        let answer = self
            .git
            .get(
                format!(
                    "/api/commits?repo={}&sha=main&paths={}",
                    q(repo),
                    q(&format!("/{path}"))
                ),
                None,
            )
            .await?;
        Ok(answer[0]["sha"].as_str().map(|sha| {
            (
                sha.to_string(),
                answer[0]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        }))
    }

    /// Creates a PromotionTask on `runtime` (a retried create is answered as one).
    async fn create_task(&self, runtime: &str, name: &str, steps: Value) -> Result<(), CallError> {
        let body = json!({"metadata": {"name": name}, "spec": {"steps": steps}});
        self.gateway
            .send(
                Method::POST,
                format!("/api/runtimes/{runtime}/app-proxy/api/promotion-tasks"),
                Some(&self.token),
                Some(&body),
            )
            .await
            .map(drop)
    }

    /// Tells `runtime` to stop a PromotionTask (its phase becomes Terminated); a task that
    /// is gone counts as stopped.
    async fn terminate_task(&self, runtime: &str, name: &str) -> Result<(), CallError> {
        match self
            .gateway
            .send(
                Method::POST,
                format!("/api/runtimes/{runtime}/app-proxy/api/promotion-tasks/{name}/terminate"),
                Some(&self.token),
                None,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(CallError::Status { status, .. }) if status == http::StatusCode::NOT_FOUND => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// A PromotionTask's status on `runtime`.
    async fn task_status(&self, runtime: &str, name: &str) -> Result<Value, CallError> {
        let answer = self
            .gateway
            .get(
                format!("/api/runtimes/{runtime}/app-proxy/api/promotion-tasks/{name}"),
                Some(&self.token),
            )
            .await?;
        Ok(answer["status"].clone())
    }
}

/// Runs the orchestrator until the host stops, recording releases in `releases`. A
/// configuration it cannot orchestrate (an environment without an app, flows with
/// different trigger environments) is logged and nothing is done; it never returns.
pub async fn run(env: SharedEnv, config: Config, releases: Releases) {
    let links = Links {
        git: Client::new(env.clone(), &config.git_addr, config.call_timeout),
        gateway: Client::new(env.clone(), &config.gateway_addr, config.call_timeout),
        token: config.token.clone(),
    };
    let trigger = match config.check() {
        Ok(trigger) => trigger,
        Err(why) => {
            tracing::error!(product = %config.product, %why, "nothing is orchestrated");
            return std::future::pending().await;
        }
    };
    releases.place(&config.product, &config.targets);
    releases.keep_templates(TemplateSource {
        product_template: config
            .product_spec
            .get("promotionTemplate")
            .filter(|t| t.is_object())
            .cloned(),
        templates: config.templates.clone(),
    });
    let watched = config.targets[&trigger].clone();
    // The commit the trigger environment was at when we started (or last released).
    let mut last_seen: Option<String> = releases.lock().last().map(|r| r.commit.clone());
    let mut baseline_taken = last_seen.is_some();
    loop {
        match links.newest(&config.repo, &watched.path).await {
            Ok(Some((sha, message))) if last_seen.as_deref() != Some(sha.as_str()) => {
                if baseline_taken {
                    if let Some(flow) = plan::triggered_flow(&config.product_spec, &message, &sha)
                        .filter(|f| config.flows.contains_key(f))
                    {
                        start(&env, &config, &releases, &flow, &sha);
                    }
                }
                last_seen = Some(sha);
                baseline_taken = true;
            }
            Ok(_) => baseline_taken = true,
            Err(e) => tracing::warn!(error = %e, "cannot read the trigger environment's commits"),
        }
        let running: Vec<String> = releases
            .lock()
            .iter()
            .filter(|r| !r.phase.is_final())
            .map(|r| r.id.clone())
            .collect();
        stop_terminated(&env, &config, &releases, &links).await;
        for id in running {
            advance(&env, &config, &releases, &links, &id).await;
        }
        send_hooks(&env, &releases, &links).await;
        env.sleep(config.poll).await;
    }
}

/// Tells the runtimes to stop the tasks of environments terminated while they ran (a
/// release that timed out, was replaced, or failed in another environment), until each
/// call succeeded.
async fn stop_terminated(env: &SharedEnv, config: &Config, releases: &Releases, links: &Links) {
    let pending: Vec<(String, String, String)> = releases
        .lock()
        .iter()
        .flat_map(|r| {
            r.environments
                .iter()
                .filter(|(_, s)| {
                    s.phase == EnvPhase::Terminated && !s.task.is_empty() && !s.stop_sent
                })
                .map(|(e, s)| (r.id.clone(), e.clone(), s.task.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    for (release, environment, task) in pending {
        let Some(target) = config.targets.get(&environment) else {
            continue;
        };
        match links.terminate_task(&target.runtime, &task).await {
            Ok(()) => {
                let mut all = releases.lock();
                if let Some(status) = all
                    .iter_mut()
                    .find(|r| r.id == release)
                    .and_then(|r| r.environments.get_mut(&environment))
                {
                    status.stop_sent = true;
                }
            }
            Err(e) => env.observe(
                PromotionEvent::RuntimeError {
                    release,
                    runtime: target.runtime.clone(),
                    error: e.to_string(),
                }
                .into(),
            ),
        }
    }
}

/// Records a new release of `flow` for `commit` (queued, or replacing the running one).
fn start(env: &SharedEnv, config: &Config, releases: &Releases, flow: &str, commit: &str) {
    let plan = &config.flows[flow];
    let now = env.unix_millis();
    let mut all = releases.lock();
    let id = format!("{}-{}", config.product, all.len() + 1);
    let active = all.iter().any(|r| !r.phase.is_final());
    if config.concurrency == Concurrency::Terminate {
        for release in all.iter_mut().filter(|r| !r.phase.is_final()) {
            end(
                env,
                release,
                ReleasePhase::Terminated,
                &format!("replaced by {id}"),
            );
        }
    }
    let mut environments = BTreeMap::new();
    for env_name in std::iter::once(&plan.trigger).chain(plan.stages.iter().map(|s| &s.environment))
    {
        environments.insert(
            env_name.clone(),
            EnvStatus {
                phase: EnvPhase::Waiting,
                task: String::new(),
                started_ms: 0,
                ended_ms: 0,
                stop_sent: false,
            },
        );
    }
    let phase = if active && config.concurrency == Concurrency::Queue {
        ReleasePhase::Queued
    } else {
        ReleasePhase::Running
    };
    env.observe(
        PromotionEvent::Release {
            release: id.clone(),
            product: config.product.clone(),
            flow: flow.into(),
            commit: commit.into(),
        }
        .into(),
    );
    all.push(Release {
        id,
        flow: flow.into(),
        commit: commit.into(),
        created_ms: now,
        started_ms: if phase == ReleasePhase::Running {
            now
        } else {
            0
        },
        phase,
        why: String::new(),
        values: None,
        version: None,
        environments,
        ended_ms: 0,
        hooks: Vec::new(),
    });
}

/// Ends `release` in `phase`: environments still running are `Terminated` (or `Failed`
/// ones stay), those not started `Skipped`.
fn end(env: &SharedEnv, release: &mut Release, phase: ReleasePhase, why: &str) {
    let now = env.unix_millis();
    for (name, status) in release.environments.iter_mut() {
        let next = match status.phase {
            EnvPhase::Waiting => EnvPhase::Skipped,
            EnvPhase::Promoting => EnvPhase::Terminated,
            other => other,
        };
        if next != status.phase {
            status.phase = next;
            status.ended_ms = now;
            env.observe(
                PromotionEvent::Environment {
                    release: release.id.clone(),
                    environment: name.clone(),
                    phase: next.as_str().into(),
                    task: status.task.clone(),
                }
                .into(),
            );
        }
    }
    release.phase = phase;
    release.why = why.into();
    release.ended_ms = now;
    env.observe(
        PromotionEvent::ReleaseEnd {
            release: release.id.clone(),
            phase: phase.as_str().into(),
            lead_ms: now.saturating_sub(release.created_ms),
            why: why.into(),
        }
        .into(),
    );
}

/// The steps of the trigger environment's task: read the values at the commit, verify it.
fn trigger_steps(config: &Config, target: &Target, commit: &str) -> Value {
    let template = &config.template_for(target).unwrap_or(Value::Null);
    let properties: serde_json::Map<String, Value> = template["promotion"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut read = json!({"targetApplication": target.app, "commitSha": commit,
        "promotionProperties": properties});
    if template["versionSource"].is_object() {
        read["versionProperty"] = template["versionSource"].clone();
    }
    json!([
        {"getPromotionValues": read},
        {"verifyApp": {"targetApplication": target.app, "commitSha": commit}},
    ])
}

/// The steps of a stage's task: pre-action, promotion (per its action), verification,
/// post-action.
fn stage_steps(stage: &plan::Stage, target: &Target, release: &Release) -> Value {
    let mut steps = Vec::new();
    let workflow = |template: &str, stage_name: &str| {
        json!({"runWorkflow": {"workflowTemplateName": template, "stage": stage_name,
            "parameters": {"release": release.id, "environment": stage.environment}}})
    };
    if let Some(pre) = &stage.policy.pre_action {
        steps.push(workflow(pre, "pre-action"));
    }
    let message = format!(
        "promote {} to {} ({})",
        release.id, stage.environment, release.commit
    );
    let values = release.values.clone().unwrap_or(json!({}));
    match stage.policy.action.unwrap_or(Action::Commit) {
        Action::Commit => steps.push(json!({"promoteAppWithCommit": {
            "targetApplication": target.app, "promotionValues": values, "commitMessage": message}})),
        Action::Pr => steps.push(json!({"promoteAppWithPR": {
            "targetApplication": target.app, "promotionValues": values, "commitMessage": message,
            "prTitle": message, "prBranchName": format!("promotion/{}-{}", release.id, stage.environment)}})),
        Action::None => {}
    }
    // After a promotion the operator verifies the commit it made; with `none`, the app's
    // current revision must contain the trigger commit's history (it is only verified).
    let mut verify = json!({"verifyApp": {"targetApplication": target.app}});
    if stage.policy.action == Some(Action::None) {
        verify["verifyApp"]["commitSha"] = json!(release.commit);
    }
    steps.push(verify);
    if let Some(post) = &stage.policy.post_action {
        steps.push(workflow(post, "post-action"));
    }
    Value::Array(steps)
}

/// One look at release `id`: follow its running tasks, start the environments whose
/// dependencies all succeeded, end it when it is done, failed or out of time.
async fn advance(env: &SharedEnv, config: &Config, releases: &Releases, links: &Links, id: &str) {
    let Some(mut release) = releases.lock().iter().find(|r| r.id == id).cloned() else {
        return;
    };
    if release.phase == ReleasePhase::Queued {
        // It waits for the releases before it, and for their terminated tasks to be told
        // to stop (a task still running could commit an older version after ours).
        let earlier_running = releases.lock().iter().take_while(|r| r.id != id).any(|r| {
            !r.phase.is_final()
                || r.environments
                    .values()
                    .any(|s| s.phase == EnvPhase::Terminated && !s.task.is_empty() && !s.stop_sent)
        });
        if earlier_running {
            return;
        }
        release.phase = ReleasePhase::Running;
        release.started_ms = env.unix_millis();
    }
    let plan = config.flows[&release.flow].clone();
    queue_hook(
        config,
        &mut release,
        "",
        "onStart",
        plan.hooks.on_start.as_ref(),
    );
    let now = env.unix_millis();
    let timeout = plan
        .timeout_s
        .map_or(config.default_timeout, Duration::from_secs);
    if now.saturating_sub(release.started_ms) >= timeout.as_millis() as u64 {
        end(
            env,
            &mut release,
            ReleasePhase::Terminated,
            "promotionTimeoutLimit reached",
        );
        store(releases, release);
        return;
    }
    // Follow the environments whose tasks run.
    let promoting: Vec<String> = release
        .environments
        .iter()
        .filter(|(_, s)| s.phase == EnvPhase::Promoting)
        .map(|(n, _)| n.clone())
        .collect();
    let mut failure: Option<String> = None;
    for name in promoting {
        let target = &config.targets[&name];
        let task = release.environments[&name].task.clone();
        let status = match links.task_status(&target.runtime, &task).await {
            Ok(status) => status,
            Err(e) => {
                env.observe(
                    PromotionEvent::RuntimeError {
                        release: release.id.clone(),
                        runtime: target.runtime.clone(),
                        error: e.to_string(),
                    }
                    .into(),
                );
                continue;
            }
        };
        let phase = match status["phase"].as_str() {
            Some("Succeeded") => EnvPhase::Succeeded,
            Some("Failed") => EnvPhase::Failed,
            Some("Terminated") => EnvPhase::Terminated,
            _ => continue,
        };
        if name == plan.trigger && phase == EnvPhase::Succeeded {
            release.values = Some(status["steps"][0]["promotionValues"].clone());
            release.version = Some(status["steps"][0]["version"].clone());
        }
        let entry = release
            .environments
            .get_mut(&name)
            .expect("known environment");
        entry.phase = phase;
        entry.ended_ms = env.unix_millis();
        env.observe(
            PromotionEvent::Environment {
                release: release.id.clone(),
                environment: name.clone(),
                phase: phase.as_str().into(),
                task: task.clone(),
            }
            .into(),
        );
        if let Some(stage) = plan.stages.iter().find(|s| s.environment == name) {
            let (event, template) = match phase {
                EnvPhase::Succeeded => ("onSuccess", stage.hooks.on_success.as_ref()),
                _ => ("onFail", stage.hooks.on_fail.as_ref()),
            };
            queue_hook(config, &mut release, &name, event, template);
        }
        // Every environment whose task ended is read first (its hook queued), then the
        // release fails for the first that did not succeed.
        if phase != EnvPhase::Succeeded && failure.is_none() {
            failure = Some(format!(
                "{name}: {}",
                status["failure"]["error"]["message"]
                    .as_str()
                    .unwrap_or("task did not succeed")
            ));
        }
    }
    if let Some(why) = failure {
        end(env, &mut release, ReleasePhase::Failed, &why);
        queue_end_hooks(config, &mut release);
        store(releases, release);
        return;
    }
    // Start what is ready: the trigger environment first, then stages whose dependencies
    // all succeeded.
    let succeeded = |name: &str| {
        release
            .environments
            .get(name)
            .is_some_and(|s| s.phase == EnvPhase::Succeeded)
    };
    let mut ready: Vec<(String, Value)> = Vec::new();
    if release.environments[&plan.trigger].phase == EnvPhase::Waiting {
        let target = &config.targets[&plan.trigger];
        ready.push((
            plan.trigger.clone(),
            trigger_steps(config, target, &release.commit),
        ));
    } else {
        for stage in &plan.stages {
            if release.environments[&stage.environment].phase == EnvPhase::Waiting
                && stage.depends_on.iter().all(|d| succeeded(d))
            {
                let target = &config.targets[&stage.environment];
                ready.push((
                    stage.environment.clone(),
                    stage_steps(stage, target, &release),
                ));
            }
        }
    }
    for (name, steps) in ready {
        let target = &config.targets[&name];
        let task = format!("{}-{name}", release.id);
        match links.create_task(&target.runtime, &task, steps).await {
            Ok(()) => {
                let entry = release
                    .environments
                    .get_mut(&name)
                    .expect("known environment");
                entry.phase = EnvPhase::Promoting;
                entry.task = task.clone();
                entry.started_ms = env.unix_millis();
                if let Some(stage) = plan.stages.iter().find(|s| s.environment == name) {
                    queue_hook(
                        config,
                        &mut release,
                        &name,
                        "onStart",
                        stage.hooks.on_start.as_ref(),
                    );
                }
                env.observe(
                    PromotionEvent::Environment {
                        release: release.id.clone(),
                        environment: name,
                        phase: EnvPhase::Promoting.as_str().into(),
                        task,
                    }
                    .into(),
                );
            }
            Err(e) => env.observe(
                PromotionEvent::RuntimeError {
                    release: release.id.clone(),
                    runtime: target.runtime.clone(),
                    error: e.to_string(),
                }
                .into(),
            ),
        }
    }
    if release
        .environments
        .values()
        .all(|s| s.phase == EnvPhase::Succeeded)
    {
        end(env, &mut release, ReleasePhase::Succeeded, "");
        queue_end_hooks(config, &mut release);
    }
    store(releases, release);
}

/// Writes `release` back into the read model (a terminate by a newer release wins).
fn store(releases: &Releases, release: Release) {
    let mut all = releases.lock();
    if let Some(slot) = all.iter_mut().find(|r| r.id == release.id) {
        if slot.phase.is_final() && !release.phase.is_final() {
            return;
        }
        *slot = release;
    }
}
