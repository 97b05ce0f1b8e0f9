//! One task, reconciled once: its steps run in order from the first unfinished one until a
//! step waits, fails or every step succeeded; the outcome is written to the task's status.
//! The two variants differ here in three places (see the module docs of
//! [`super`]): when the status is written relative to a step's side effect, whether a step
//! checks for its own earlier effect, and whether a status write is fenced by the
//! resourceVersion read.

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::clients::{transient, App, ArgoCd, CallError, Git};
use super::doc::Doc;
use super::task::{self, Phase, Step, Values};
use super::{promotion_task_resource, workflow_resource, Config};
use crate::core::json::Pointer as _;
use crate::core::Variant;
use crate::env::SharedEnv;
use crate::observe::OperatorEvent;

/// What one attempt at a step came to.
enum Outcome {
    /// The step is done; its status.
    Done(Value),
    /// It waits on something outside (a workflow, a merge, a sync); its status so far.
    Waiting(Value),
    /// It cannot succeed: an error code and message.
    Failed(&'static str, String),
    /// A transient error; worth another attempt.
    Retry(String),
}

impl From<CallError> for Outcome {
    fn from(error: CallError) -> Self {
        if transient(&error) {
            Outcome::Retry(error.to_string())
        } else {
            Outcome::Failed("UpstreamRefused", error.to_string())
        }
    }
}

/// The operator's clients and settings (one per leader term).
pub struct Operator {
    pub(super) env: SharedEnv,
    pub(super) config: Config,
    pub(super) tasks: Api<DynamicObject>,
    workflows: Api<DynamicObject>,
    git: Git,
    argocd: ArgoCd,
}

/// When to look at a task again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// It reached a final phase.
    Never,
    /// It waits (a workflow, a merge, a sync): look again after the poll interval.
    Poll,
    /// A transient error: after this many retries.
    Retry(u32),
    /// Our status write lost to a concurrent one: re-read now.
    Reread,
}

impl Operator {
    /// Clients for `config`.
    pub fn new(env: SharedEnv, config: Config) -> Self {
        let client = crate::env::kube::client(env.clone(), &config.apiserver);
        let namespace = config.apiserver.namespace.clone();
        Operator {
            tasks: Api::namespaced_with(client.clone(), &namespace, &promotion_task_resource()),
            workflows: Api::namespaced_with(
                client,
                &config.workflow_namespace,
                &workflow_resource(),
            ),
            git: Git::new(env.clone(), &config.git_addr, config.call_timeout),
            argocd: ArgoCd::new(
                env.clone(),
                &config.argocd_addr,
                &config.argocd_token,
                config.call_timeout,
            ),
            env,
            config,
        }
    }

    fn host(&self) -> String {
        self.env.identity().host.clone()
    }

    /// Reconciles `task` once and says when to look again.
    pub async fn reconcile(&self, mut task: DynamicObject) -> Next {
        let name = task.metadata.name.clone().unwrap_or_default();
        let key = format!("{}/{name}", self.config.apiserver.namespace);
        let mut status = task.data.get("status").cloned().unwrap_or(json!({}));
        if !status.is_object() {
            status = json!({});
        }
        let before = status.clone();
        if Phase::of(&task.data).is_terminal() {
            return Next::Never;
        }
        let steps = match task::parse(task.data.get("spec").unwrap_or(&Value::Null)) {
            Ok(steps) => steps,
            Err(e) => {
                let index = match &e {
                    task::SpecError::Step { index, .. } => *index as i64,
                    task::SpecError::NoSteps => -1,
                };
                fail(
                    &mut status,
                    "InvalidSpec",
                    &e.to_string(),
                    index,
                    "parsing the task",
                );
                return self
                    .finish(&mut task, &key, &before, status, Next::Never)
                    .await;
            }
        };
        status["phase"] = json!(Phase::Executing.as_str());
        let mut recorded = status["steps"].as_array().cloned().unwrap_or_default();
        recorded.resize(steps.len(), json!({}));
        status["steps"] = Value::Array(recorded);
        loop {
            let Some(index) =
                (0..steps.len()).find(|i| status["steps"][*i]["phase"] != "Succeeded")
            else {
                status["phase"] = json!(Phase::Succeeded.as_str());
                return self
                    .finish(&mut task, &key, &before, status, Next::Never)
                    .await;
            };
            let step = &steps[index];
            let idempotency = format!(
                "{}/{index}",
                task.metadata.uid.as_deref().unwrap_or(name.as_str())
            );
            // Whether an earlier attempt (ours or another leader's) recorded the intent: only
            // then can the side effect already have happened.
            let resumed = !status["steps"][index]["intent"].is_null();
            if self.config.variant == Variant::Hardened
                && step.has_side_effect()
                && status["steps"][index]["intent"].is_null()
            {
                // hardened: the step's idempotency key is in the status before its side
                // effect, so whoever runs it next knows it may already have happened.
                status["steps"][index]["intent"] = json!({"key": idempotency});
                status["steps"][index]["phase"] = json!("Running");
                match self.write(&mut task, &status).await {
                    Ok(()) => {}
                    Err(next) => return next,
                }
            }
            let prior = status["steps"][index].clone();
            let recorded = status["steps"].as_array().cloned().unwrap_or_default();
            let outcome = self
                .execute(&key, &name, index, step, &recorded, &idempotency, resumed)
                .await;
            let retries = status["retries"].as_u64().unwrap_or(0) as u32;
            let (label, detail, next) = match outcome {
                Outcome::Done(mut s) => {
                    s["phase"] = json!("Succeeded");
                    keep(&prior, &mut s);
                    status["steps"][index] = s;
                    clear_retries(&mut status);
                    ("succeeded", String::new(), None)
                }
                Outcome::Waiting(mut s) => {
                    s["phase"] = json!("Running");
                    keep(&prior, &mut s);
                    status["steps"][index] = s;
                    clear_retries(&mut status);
                    ("waiting", String::new(), Some(Next::Poll))
                }
                Outcome::Failed(code, message) => {
                    status["steps"][index]["phase"] = json!("Failed");
                    fail(&mut status, code, &message, index as i64, step.kind());
                    ("failed", message, Some(Next::Never))
                }
                Outcome::Retry(message) => {
                    let retries = retries + 1;
                    status["retries"] = json!(retries);
                    let now_ms = self.env.unix_millis();
                    let since = status["retrySince"].as_u64().unwrap_or(now_ms);
                    status["retrySince"] = json!(since);
                    let exhausted = match self.config.variant {
                        Variant::Faithful => retries >= self.config.max_retries,
                        // hardened: a transient error fails the task only after it lasted
                        // `give_up_after` (and `max_retries` attempts) — an outage of a few
                        // minutes is waited out, not turned into a failed release.
                        Variant::Hardened => {
                            retries >= self.config.max_retries
                                && now_ms.saturating_sub(since)
                                    >= self.config.give_up_after.as_millis() as u64
                        }
                    };
                    if exhausted {
                        status["steps"][index]["phase"] = json!("Failed");
                        let why = format!("giving up after {retries} attempts: {message}");
                        fail(
                            &mut status,
                            "RetriesExhausted",
                            &why,
                            index as i64,
                            step.kind(),
                        );
                        ("failed", why, Some(Next::Never))
                    } else {
                        ("retry", message, Some(Next::Retry(retries)))
                    }
                }
            };
            self.env.observe(
                OperatorEvent::Step {
                    host: self.host(),
                    task: key.clone(),
                    step: index as u32,
                    kind: step.kind().into(),
                    outcome: label.into(),
                    retries: status["retries"].as_u64().unwrap_or(0) as u32,
                    detail,
                }
                .into(),
            );
            if let Some(next) = next {
                return self.finish(&mut task, &key, &before, status, next).await;
            }
            // A step succeeded: record it before the next one starts.
            if let Err(next) = self.write(&mut task, &status).await {
                return next;
            }
        }
    }

    /// Writes the final status of this reconcile (when it changed) and reports a final phase.
    async fn finish(
        &self,
        task: &mut DynamicObject,
        key: &str,
        before: &Value,
        status: Value,
        next: Next,
    ) -> Next {
        if status != *before {
            if let Err(reread) = self.write(task, &status).await {
                return reread;
            }
        }
        let phase = Phase::of(&json!({"status": status}));
        if phase.is_terminal() && Phase::of(&json!({"status": before})) != phase {
            self.env.observe(
                OperatorEvent::Task {
                    host: self.host(),
                    task: key.into(),
                    phase: phase.as_str().into(),
                }
                .into(),
            );
        }
        next
    }

    /// Writes `status` through the status subresource. faithful: a merge patch, last
    /// writer wins. hardened: fenced by the resourceVersion last read or written (a
    /// conflict means another writer — an old leader — moved it: re-read).
    async fn write(&self, task: &mut DynamicObject, status: &Value) -> Result<(), Next> {
        let name = task.metadata.name.clone().unwrap_or_default();
        let mut patch = json!({"status": status});
        if self.config.variant == Variant::Hardened {
            patch["metadata"] = json!({"resourceVersion": task.metadata.resource_version});
        }
        match self
            .tasks
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                task.metadata.resource_version = written.metadata.resource_version;
                task.data["status"] = status.clone();
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Err(Next::Reread),
            Err(_) => Err(Next::Retry(1)),
        }
    }

    /// One attempt at step `index` (`resumed`: an earlier attempt recorded its intent).
    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        key: &str,
        name: &str,
        index: usize,
        step: &Step,
        status_steps: &[Value],
        idempotency: &str,
        resumed: bool,
    ) -> Outcome {
        let prior = &status_steps[index];
        match step {
            Step::RunWorkflow {
                template,
                parameters,
                stage,
            } => {
                self.run_workflow(name, index, template, parameters, stage, prior)
                    .await
            }
            Step::PromoteWithCommit {
                target,
                values,
                message,
            } => {
                let app = match self.app(target).await {
                    Ok(app) => app,
                    Err(outcome) => return outcome,
                };
                let message = trailer(message, key, index, idempotency);
                match self
                    .promote(key, index, &app, values, "main", &message, resumed)
                    .await
                {
                    Ok(commit) => Outcome::Done(json!({"commitInfo": commit})),
                    Err(outcome) => outcome,
                }
            }
            Step::PromoteWithPr {
                target,
                values,
                message,
                title,
                branch,
            } => {
                let app = match self.app(target).await {
                    Ok(app) => app,
                    Err(outcome) => return outcome,
                };
                let branch = branch
                    .clone()
                    .unwrap_or_else(|| format!("promotion/{name}"));
                let message = trailer(message, key, index, idempotency);
                self.promote_with_pr(
                    key, index, &app, values, &branch, &message, title, prior, resumed,
                )
                .await
            }
            Step::VerifyApp { target, commit_sha } => {
                let earlier = || {
                    (0..index).rev().find_map(|i| {
                        status_steps[i]
                            .at("/commitInfo/sha")
                            .or_else(|| status_steps[i].at("/prInfo/mergeCommitSha"))
                            .and_then(Value::as_str)
                            .filter(|sha| !sha.is_empty())
                            .map(str::to_string)
                    })
                };
                let commit_sha = if commit_sha.is_empty() {
                    match earlier() {
                        Some(sha) => sha,
                        None => {
                            return Outcome::Failed(
                                "NoCommit",
                                "verifyApp without commitSha and no earlier promotion commit"
                                    .into(),
                            )
                        }
                    }
                } else {
                    commit_sha.clone()
                };
                let commit_sha = &commit_sha;
                let app = match self.app(target).await {
                    Ok(app) => app,
                    Err(outcome) => return outcome,
                };
                let app_status =
                    json!({"sync": app.sync, "health": app.health, "revision": app.revision});
                if app.revision.is_empty() {
                    return Outcome::Waiting(json!({"appStatus": app_status}));
                }
                let contains = match self
                    .git
                    .contains(&app.repo, &app.revision, commit_sha)
                    .await
                {
                    Ok(contains) => contains,
                    Err(e) => return e.into(),
                };
                match (contains, app.sync.as_str(), app.health.as_str()) {
                    (true, "Synced", "Healthy") => Outcome::Done(json!({"appStatus": app_status})),
                    (true, "Synced", "Degraded") => Outcome::Failed(
                        "AppDegraded",
                        format!(
                            "{target} is Degraded at {} (contains {commit_sha})",
                            app.revision
                        ),
                    ),
                    _ => Outcome::Waiting(json!({"appStatus": app_status})),
                }
            }
            Step::GetPromotionValues {
                target,
                commit_sha,
                properties,
                version,
            } => {
                let app = match self.app(target).await {
                    Ok(app) => app,
                    Err(outcome) => return outcome,
                };
                let mut found = serde_json::Map::new();
                let mut docs = std::collections::BTreeMap::new();
                let mut files: Vec<&String> = properties.keys().collect();
                if let Some((file, _)) = version {
                    files.push(file);
                }
                for file in files {
                    if docs.contains_key(file) {
                        continue;
                    }
                    let doc = match self.read_doc(&app, file, commit_sha).await {
                        Ok(Some((doc, _))) => doc,
                        Ok(None) => {
                            return Outcome::Failed(
                                "FileNotFound",
                                format!("{} at {commit_sha}", app.file(file)),
                            )
                        }
                        Err(outcome) => return outcome,
                    };
                    docs.insert(file.clone(), doc);
                }
                for (file, paths) in properties {
                    let mut values = serde_json::Map::new();
                    for path in paths {
                        match task::get(docs[file].value(), path) {
                            Some(value) => {
                                values.insert(path.clone(), value);
                            }
                            None => {
                                return Outcome::Failed(
                                    "PropertyNotFound",
                                    format!("{path} is not in {} at {commit_sha}", app.file(file)),
                                )
                            }
                        }
                    }
                    found.insert(file.clone(), Value::Object(values));
                }
                let version = version
                    .as_ref()
                    .and_then(|(file, path)| task::get(docs[file].value(), path))
                    .unwrap_or(Value::Null);
                Outcome::Done(json!({"promotionValues": found, "version": version}))
            }
        }
    }

    async fn app(&self, target: &str) -> Result<App, Outcome> {
        match self.argocd.app(target).await {
            Ok(Some(app)) if !app.repo.is_empty() => Ok(app),
            Ok(Some(_)) => Err(Outcome::Failed(
                "InvalidApplication",
                format!("application {target} has no spec.source.repoURL"),
            )),
            Ok(None) => Err(Outcome::Failed(
                "ApplicationNotFound",
                format!("application {target} not found"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// A promotion file of `app` at `rev` (JSON, or YAML edited in place) and its blob;
    /// `None` when it does not exist.
    async fn read_doc(
        &self,
        app: &App,
        file: &str,
        rev: &str,
    ) -> Result<Option<(Doc, String)>, Outcome> {
        let path = app.file(file);
        match self.git.contents(&app.repo, &path, rev).await {
            Ok(Some(found)) => match Doc::parse(&path, &found.content) {
                Ok(doc) => Ok(Some((doc, found.blob))),
                Err(e) => Err(Outcome::Failed(
                    "InvalidFile",
                    format!("{path} at {rev}: {e}"),
                )),
            },
            Ok(None) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `values` into `app`'s files on `branch`, one commit per file that needs one;
    /// the step's `commitInfo`.
    #[allow(clippy::too_many_arguments)]
    async fn promote(
        &self,
        key: &str,
        index: usize,
        app: &App,
        values: &Values,
        branch: &str,
        message: &str,
        resumed: bool,
    ) -> Result<Value, Outcome> {
        let hardened = self.config.variant == Variant::Hardened;
        let mut commits = Vec::new();
        for (file, paths) in values {
            let path = app.file(file);
            // A branch that does not exist yet forks from main.
            let mut read = self.read_doc(app, file, branch).await?;
            if read.is_none() && branch != "main" {
                read = self.read_doc(app, file, "main").await?;
            }
            let (mut doc, blob) = read.unwrap_or((Doc::empty(&path), String::new()));
            let mut changed = false;
            for (json_path, value) in paths {
                changed |= doc
                    .set(json_path, value)
                    .map_err(|e| Outcome::Failed("InvalidFile", format!("{path}: {e}")))?;
            }
            if hardened && !changed {
                // The file already holds the values: an earlier attempt (ours, or a leader
                // before us) committed them, or nothing needs promoting. No second commit.
                let existing = self
                    .git
                    .last_change(&app.repo, &path)
                    .await
                    .map_err(Outcome::from)?
                    .unwrap_or_default();
                let deduplicated = resumed;
                self.observe_commit(key, index, app, &path, branch, &existing, deduplicated);
                commits.push(json!({"sha": existing, "path": path, "deduplicated": deduplicated}));
                continue;
            }
            let content = doc.render();
            // hardened writes only over the blob it read (GitHub's create-or-update
            // precondition): a concurrent writer's commit turns ours into a 409 and a re-read.
            let expected = hardened.then_some(blob.as_str());
            let sha = self
                .git
                .commit(&app.repo, branch, &path, &content, message, expected)
                .await
                .map_err(Outcome::from)?;
            self.observe_commit(key, index, app, &path, branch, &sha, false);
            commits.push(json!({"sha": sha, "path": path}));
        }
        let sha = commits
            .last()
            .and_then(|c| c["sha"].as_str())
            .unwrap_or_default()
            .to_string();
        Ok(json!({"sha": sha, "repo": app.repo, "branch": branch, "commits": commits}))
    }

    #[allow(clippy::too_many_arguments)]
    fn observe_commit(
        &self,
        key: &str,
        index: usize,
        app: &App,
        path: &str,
        branch: &str,
        sha: &str,
        deduplicated: bool,
    ) {
        self.env.observe(
            OperatorEvent::Commit {
                host: self.host(),
                task: key.into(),
                step: index as u32,
                repo: app.repo.clone(),
                path: path.into(),
                branch: branch.into(),
                sha: sha.into(),
                deduplicated,
            }
            .into(),
        );
    }

    #[allow(clippy::too_many_arguments)]
    async fn promote_with_pr(
        &self,
        key: &str,
        index: usize,
        app: &App,
        values: &Values,
        branch: &str,
        message: &str,
        title: &str,
        prior: &Value,
        resumed: bool,
    ) -> Outcome {
        let hardened = self.config.variant == Variant::Hardened;
        let pr_info = |pull: &super::clients::Pull| {
            json!({"id": pull.number.to_string(), "state": if pull.open { "Open" } else { "Closed" },
                "isMerged": pull.merge_commit.is_some(),
                "mergeCommitSha": pull.merge_commit.clone().unwrap_or_default()})
        };
        let number = prior
            .at("/prInfo/id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse::<u64>().ok());
        let number = match number {
            Some(number) => number,
            None => {
                if hardened {
                    // Adopt a pull request an earlier attempt opened (still open, or merged
                    // meanwhile).
                    match self.git.pulls_from(&app.repo, branch).await {
                        Ok(pulls) => {
                            if let Some(pull) = pulls
                                .iter()
                                .rev()
                                .find(|p| p.open || p.merge_commit.is_some())
                            {
                                return Outcome::Waiting(json!({"prInfo": pr_info(pull)}));
                            }
                        }
                        Err(e) => return e.into(),
                    }
                }
                let commit = match self
                    .promote(key, index, app, values, branch, message, resumed)
                    .await
                {
                    Ok(commit) => commit,
                    Err(outcome) => return outcome,
                };
                return match self.git.open_pull(&app.repo, branch, title).await {
                    Ok(number) => Outcome::Waiting(json!({"commitInfo": commit, "prInfo": {
                        "id": number.to_string(), "state": "Open", "isMerged": false}})),
                    Err(e) => e.into(),
                };
            }
        };
        match self.git.pulls_from(&app.repo, branch).await {
            Ok(pulls) => match pulls.iter().find(|p| p.number == number) {
                Some(pull) if pull.merge_commit.is_some() => {
                    Outcome::Done(json!({"prInfo": pr_info(pull)}))
                }
                Some(pull) if !pull.open => Outcome::Failed(
                    "PullRequestClosed",
                    format!("pull request #{number} was closed without a merge"),
                ),
                Some(pull) => Outcome::Waiting(json!({"prInfo": pr_info(pull)})),
                None => Outcome::Failed(
                    "PullRequestNotFound",
                    format!("pull request #{number} from {branch} not found"),
                ),
            },
            Err(e) => e.into(),
        }
    }

    async fn run_workflow(
        &self,
        name: &str,
        index: usize,
        template: &str,
        parameters: &std::collections::BTreeMap<String, String>,
        stage: &str,
        prior: &Value,
    ) -> Outcome {
        let submitted = prior
            .at("/workflow/name")
            .and_then(Value::as_str)
            .map(str::to_string);
        let Some(workflow) = submitted else {
            let mut body = wrapper(name, index, template, parameters, stage);
            if self.config.variant == Variant::Hardened {
                // A fixed name: a second submission of the same step is refused (409) and
                // the first one adopted.
                body["metadata"]["name"] = json!(format!("{name}-{index}"));
            } else {
                body["metadata"]["generateName"] = json!(format!("{name}-{index}-"));
            }
            let object: DynamicObject = match serde_json::from_value(body) {
                Ok(object) => object,
                Err(e) => return Outcome::Failed("InvalidWorkflow", e.to_string()),
            };
            return match self.workflows.create(&PostParams::default(), &object).await {
                Ok(created) => Outcome::Waiting(json!({"workflow": {
                    "name": created.metadata.name, "phase": "Pending"}})),
                Err(kube::Error::Api(e)) if e.code == 409 => Outcome::Waiting(json!({"workflow": {
                    "name": format!("{name}-{index}"), "phase": "Pending"}})),
                Err(kube::Error::Api(e)) if e.code < 500 && e.code != 429 => {
                    Outcome::Failed("WorkflowRefused", e.message)
                }
                Err(e) => Outcome::Retry(e.to_string()),
            };
        };
        match self.workflows.get_opt(&workflow).await {
            Ok(Some(found)) => {
                let phase = found
                    .data
                    .at("/status/phase")
                    .and_then(Value::as_str)
                    .unwrap_or("Pending")
                    .to_string();
                let status = json!({"workflow": {"name": workflow, "phase": phase}});
                match phase.as_str() {
                    "Succeeded" => Outcome::Done(status),
                    "Failed" | "Error" => Outcome::Failed(
                        "WorkflowFailed",
                        format!("workflow {workflow} ({template}) ended {phase}"),
                    ),
                    _ => Outcome::Waiting(status),
                }
            }
            Ok(None) => Outcome::Failed(
                "WorkflowNotFound",
                format!("workflow {workflow} ({template}) is gone"),
            ),
            Err(e) => Outcome::Retry(e.to_string()),
        }
    }
}

/// The wrapper workflow the operator submits for a `runWorkflow` step
/// (`PROMOTION_WRAPPER_TEMPLATE`, embedded upstream; its content is not public): here one
/// container step named after the template, labelled with the task and stage.
fn wrapper(
    task: &str,
    index: usize,
    template: &str,
    parameters: &std::collections::BTreeMap<String, String>,
    stage: &str,
) -> Value {
    let parameters: Vec<Value> = parameters
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"labels": {
            "codefresh.io/promotion-task": task,
            "codefresh.io/promotion-step": index.to_string(),
            "codefresh.io/promotion-stage": if stage.is_empty() { "action" } else { stage },
        }},
        "spec": {
            "entrypoint": template,
            "arguments": {"parameters": parameters},
            "templates": [{"name": template, "container": {
                "image": "quay.io/codefresh/promotion-wrapper", "args": [template]}}],
        },
    })
}

/// The commit message with the trailers that name the task, step and idempotency key.
fn trailer(message: &str, key: &str, index: usize, idempotency: &str) -> String {
    format!(
        "{message}\n\nPromotion-Task: {key}\nPromotion-Step: {index}\nPromotion-Key: {idempotency}"
    )
}

/// A step made progress: the streak of transient errors is over.
fn clear_retries(status: &mut Value) {
    status["retries"] = json!(0);
    // null, not absent: a merge patch leaves an absent key as it was on the server.
    if status.get("retrySince").is_some() {
        status["retrySince"] = Value::Null;
    }
}

/// Carries the step's recorded intent into its new status.
fn keep(prior: &Value, next: &mut Value) {
    if !prior["intent"].is_null() {
        next["intent"] = prior["intent"].clone();
    }
}

/// Marks `status` Failed with the CRD's `failure.error`.
fn fail(status: &mut Value, code: &str, message: &str, step: i64, during: &str) {
    status["phase"] = json!(Phase::Failed.as_str());
    status["failure"] = json!({"error": {"code": code, "message": message, "stepIndex": step,
        "while": during}});
}

/// The pause before retry number `retries` (hardened): doubling from `initial` to `max`,
/// jittered down to half.
pub fn backoff(env: &SharedEnv, initial: Duration, max: Duration, retries: u32) -> Duration {
    let full = initial
        .saturating_mul(1u32 << retries.saturating_sub(1).min(16))
        .min(max);
    env.random_between(full / 2, full)
}
