//! A stand-in for a build's engine pod and the kubelet that runs it (the engine,
//! `codefresh/engine`, is not public; §2.3 steps 6-8): once a build's engine and dind pods
//! exist, it reports the build started, runs its steps (their times and exit codes come
//! from the build), reports every 30 s while a step runs (task-logger's health check, §2.3
//! step 7), and reports the last step's end with the build's exit code. A pod deleted while
//! its build runs stops it. How the engine reports is **inferred**: the real one writes to
//! Firebase and cfapi; here one platform route takes it.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{json, Value};

use crate::core::runner::BUILD_LABEL;
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
                "engine" => engines.insert(build.clone(), ()),
                "dind" => dinds.insert(build.clone(), ()),
                _ => None,
            };
        }
        // A deleted engine pod stops its build.
        running.retain(|build, task| {
            let keep = engines.contains_key(build);
            if !keep {
                task.abort();
            }
            keep
        });
        for build in engines.keys() {
            if running.contains_key(build) || !dinds.contains_key(build) {
                continue;
            }
            let engine = Engine {
                env: env.clone(),
                client: client.clone(),
                http: http.clone(),
                config: config.clone(),
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
        let mut exit_code = 0;
        for step in steps {
            let mut left = Duration::from_millis(step.millis);
            while !left.is_zero() {
                let slice = left.min(REPORT_EVERY);
                self.env.sleep(slice).await;
                left -= slice;
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
