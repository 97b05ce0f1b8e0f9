//! The Codefresh Runner's world (`runner:`): the platform's builds and task queue on the
//! `role: platform` host (port [`API_PORT`]), the agent on the `role: runner` host, the
//! engine stand-in on the `role: apiserver` host (the cluster its pods run in), and a
//! trigger on the platform host that makes `builds` builds during the fault phase.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::SharedEnv;
use orrery_system::platform::runner::{
    cronus, Builds, Knobs, Pipeline, Settings, Step, DELIVERY_HEADER,
};
use orrery_system::runtime::runner::{self as agent, engine, volumes};
use serde_json::json;

use super::addresses::APISERVER_PORT;
use crate::scenario::model::{Role, Runner};
use crate::scenario::Scenario;

/// Port of the platform's builds and agent API.
pub const API_PORT: u16 = 8086;
/// The agent's token (`CODEFRESH_TOKEN`).
pub const AGENT_TOKEN: &str = "runner-agent-token";
/// The token builds are made with (a user's API key).
pub const TRIGGER_TOKEN: &str = "runner-trigger-token";
/// The namespace the builds' pods and claims go to (the runtime's).
pub const NAMESPACE: &str = "codefresh";
/// The one pipeline.
pub const PIPELINE: &str = "demo/build";
/// The agent's `/health` port (venona's `PORT`).
pub const HEALTH_PORT: u16 = 8080;

/// The first host with `role` (the parser requires one of each this world uses).
fn host_of(scenario: &Scenario, role: Role) -> &str {
    scenario
        .topology
        .hosts
        .iter()
        .find(|h| h.has(role))
        .map_or("absent", |h| h.name.as_str())
}

/// The first agent's id: its host's name.
pub fn agent_id(scenario: &Scenario) -> String {
    host_of(scenario, Role::Runner).to_string()
}

/// The `role: runner` hosts (the agents' pods), in topology order.
fn runner_hosts(scenario: &Scenario) -> Vec<String> {
    scenario
        .topology
        .hosts
        .iter()
        .filter(|h| h.has(Role::Runner))
        .map(|h| h.name.clone())
        .collect()
}

/// Every agent's id, in topology order: builds go to them in turn. Every `runner.replicas`
/// consecutive runner hosts are one agent's pods; its id is the first one's name.
pub fn agent_ids(scenario: &Scenario) -> Vec<String> {
    let replicas = replicas(scenario);
    runner_hosts(scenario)
        .into_iter()
        .step_by(replicas)
        .collect()
}

/// Pods per agent (`runner.replicas`, at least 1).
fn replicas(scenario: &Scenario) -> usize {
    scenario
        .runner
        .as_ref()
        .map_or(1, |r| r.replicas.max(1) as usize)
}

/// Where the pod on `host` stands among the runner hosts: (its index, its index among its
/// agent's pods).
fn pod_of(scenario: &Scenario, host: &str) -> (usize, usize) {
    let at = runner_hosts(scenario)
        .iter()
        .position(|h| h == host)
        .unwrap_or(0);
    (at, at % replicas(scenario))
}

/// The id of the agent whose pod runs on `host` (a `role: runner` host).
pub fn agent_of(scenario: &Scenario, host: &str) -> String {
    let (at, k) = pod_of(scenario, host);
    runner_hosts(scenario)
        .get(at - k)
        .cloned()
        .unwrap_or_else(|| host.to_string())
}

/// Agent `id`'s token: [`AGENT_TOKEN`] for the first, `<AGENT_TOKEN>-<id>` for the others.
pub fn agent_token(scenario: &Scenario, id: &str) -> String {
    if id == agent_id(scenario) {
        AGENT_TOKEN.into()
    } else {
        format!("{AGENT_TOKEN}-{id}")
    }
}

/// The platform's builds and queue for the world's one agent and its one pipeline; they
/// outlive the platform host's restarts (its databases). The link starts with the fault
/// phase's losses.
pub fn builds(scenario: &Scenario, runner: &Runner, variant: Variant) -> Arc<Builds> {
    let settings = Settings {
        redeliver_after: runner.redeliver_after,
        namespace: NAMESPACE.into(),
        re_name: "sim/codefresh".into(),
        variant,
        account_concurrency: runner.account_concurrency,
        webhook_delay: runner
            .webhook
            .as_ref()
            .map_or(std::time::Duration::ZERO, |w| w.delay),
        ..Settings::default()
    };
    let agents = agent_ids(scenario)
        .into_iter()
        .map(|id| (agent_token(scenario, &id), id))
        .collect();
    let builds = Builds::new(settings, agents, TRIGGER_TOKEN);
    // No build exists yet: nothing to admit, nothing to trace.
    for n in 0..runner.pipelines.max(1) {
        let _ = builds
            .lock()
            .set_pipeline(&pipeline_of(runner, n), pipeline(runner), 0);
    }
    // The cron triggers exist from the run's start (made with the pipeline, before any
    // cronus replica runs): ticks after it are owed.
    for trigger in cron_triggers(scenario, runner) {
        builds
            .lock()
            .register_cron(&trigger.name, trigger.every, crate::env::SIM_EPOCH_UNIX_MS);
    }
    builds.set_knobs(fault_knobs(runner));
    builds
}

/// Each pipeline's admission settings.
pub fn pipeline(runner: &Runner) -> Pipeline {
    Pipeline {
        concurrency: runner.concurrency,
        branch_concurrency: runner.branch_concurrency,
        trigger_concurrency: runner.trigger_concurrency,
        terminate_previous_on_branch: runner.terminate_previous,
        terminate_branch_pattern: runner.terminate_branch_pattern.clone(),
        terminate_all: runner.terminate_all,
        terminate_children: false,
        priority: 0,
    }
}

/// Build `n`'s pipeline: [`PIPELINE`] when there is one, else `<PIPELINE>-<n mod count>`.
pub fn pipeline_of(runner: &Runner, n: u32) -> String {
    match runner.pipelines {
        0 | 1 => PIPELINE.to_string(),
        count => format!("{PIPELINE}-{}", n % count),
    }
}

/// The link's losses during the fault phase (the calm phase has none).
pub fn fault_knobs(runner: &Runner) -> Knobs {
    Knobs {
        lost_requests: runner.lost_requests,
        lost_answers: runner.lost_answers,
        silent: false,
    }
}

fn cluster(scenario: &Scenario) -> KubeTarget {
    let mut target = KubeTarget::new(format!(
        "{}:{APISERVER_PORT}",
        host_of(scenario, Role::Apiserver)
    ));
    target.namespace = NAMESPACE.into();
    target
}

fn platform_api(scenario: &Scenario) -> String {
    format!("{}:{API_PORT}", host_of(scenario, Role::Platform))
}

/// The agent's pod on `host` (a `role: runner` host).
pub fn agent(scenario: &Scenario, variant: Variant, host: &str) -> agent::Config {
    let id = agent_of(scenario, host);
    let mut config = agent::Config::new(
        variant,
        &id,
        &agent_token(scenario, &id),
        &platform_api(scenario),
        cluster(scenario),
    );
    config.listen = Some(format!("0.0.0.0:{HEALTH_PORT}"));
    // An agent's pods start spread over one poll period: the k-th of n polls k/n of a
    // period after the first (the same instant for all would hand every task to the first
    // host the simulator steps).
    let (_, k) = pod_of(scenario, host);
    config.start_after = config.poll_every * k as u32 / replicas(scenario) as u32;
    config
}

/// The build body each build of the scenario asks for (`branch` only with several).
fn steps(runner: &Runner) -> Vec<Step> {
    runner
        .steps
        .iter()
        .map(|s| Step {
            lines: s.lines,
            line_bytes: s.line_bytes,
            ..Step::new(s.duration.as_millis() as u64, s.exit_code)
        })
        .collect()
}

/// The scenario's cron triggers (`cron-<n>`), each asking for a build of the pipeline.
pub fn cron_triggers(scenario: &Scenario, runner: &Runner) -> Vec<cronus::Trigger> {
    let Some(cron) = &runner.cron else {
        return Vec::new();
    };
    let body = json!({"pipeline": PIPELINE, "agent": agent_id(scenario), "steps": steps(runner)});
    (0..cron.triggers)
        .map(|n| cronus::Trigger {
            name: format!("cron-{n}"),
            every: cron.every,
            build: body.clone(),
        })
        .collect()
}

/// The cronus replica on `host` (a `role: cron` host).
pub fn cronus(scenario: &Scenario, variant: Variant, host: &str) -> Option<cronus::Config> {
    let runner = scenario.runner.as_ref()?;
    let cron = runner.cron.as_ref()?;
    let mut config = cronus::Config::new(variant, host, &platform_api(scenario), TRIGGER_TOKEN);
    config.triggers = cron_triggers(scenario, runner);
    config.catch_up = cron.catch_up;
    Some(config)
}

/// The engine stand-in on the cluster's host.
pub fn engine(scenario: &Scenario, variant: Variant) -> engine::Config {
    let runner = scenario.runner.as_ref();
    let mut config = engine::Config::new(
        variant,
        cluster(scenario),
        &platform_api(scenario),
        AGENT_TOKEN,
    );
    config.volumes = runner.is_some_and(|r| r.volumes.is_some());
    // The world's agents share one cluster: each build's engine reports with its own agent's
    // token.
    config.tokens = agent_ids(scenario)
        .into_iter()
        .map(|id| {
            let token = agent_token(scenario, &id);
            (orrery_system::core::runner::label_value(&id), token)
        })
        .collect();
    if let Some(mib) = runner.and_then(|r| r.engine_memory_mib) {
        config.memory = mib * 1024 * 1024;
    }
    config
}

/// The dind volume provisioner and cleaner on the cluster's host, when `runner.volumes` is
/// set.
pub fn volumes(scenario: &Scenario, variant: Variant) -> Option<volumes::Config> {
    let node = scenario.runner.as_ref()?.volumes.as_ref()?;
    let mut config = volumes::Config::new(variant, cluster(scenario), node.node_gib);
    config.threshold_pct = node.threshold_pct;
    config.retention = node.retention;
    Some(config)
}

/// The readiness probe's period and timeout (the chart's: 5 s, and Kubernetes' default 1 s).
pub const PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a probe waits for its answer.
pub const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// The kubelet's readiness probe of the agent (`GET /health` every 5 s, chart values
/// L124-129), traced: what Kubernetes — and whoever watches the pod — is told about the
/// agent. It runs on the cluster's host.
pub async fn probe(env: SharedEnv, scenario: Scenario) {
    for pod in runner_hosts(&scenario).into_iter().skip(1) {
        tokio::spawn(probe_one(env.clone(), pod));
    }
    probe_one(env, agent_id(&scenario)).await;
}

/// The readiness probe of one agent pod (`agent` in its events is the pod's host).
async fn probe_one(env: SharedEnv, agent: String) {
    use http_body_util::BodyExt;
    let url = format!("http://{agent}:{HEALTH_PORT}/health");
    let http = orrery_system::env::http::client::<http_body_util::Full<bytes::Bytes>>(
        env.clone(),
        PROBE_TIMEOUT,
    );
    loop {
        env.sleep(PROBE_EVERY).await;
        let request = http::Request::get(&url)
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .expect("a probe request is valid");
        let answer = async {
            let response = http.request(request).await.ok()?;
            let ok = response.status().is_success();
            response.into_body().collect().await.ok()?;
            Some(ok)
        };
        let ok = tokio::select! {
            biased;
            ok = answer => ok.unwrap_or(false),
            () = env.sleep(PROBE_TIMEOUT) => false,
        };
        env.observe(
            orrery_system::observe::RunnerEvent::Probe {
                agent: agent.clone(),
                ok,
            }
            .into(),
        );
    }
}

/// Makes the scenario's builds, `burst` at once every `every` (their branches cycling
/// through `branches`), until `runner.builds` were made or the calm phase starts; `made`
/// counts across the host's restarts, so a restart goes on where it stopped. A refused or
/// lost request is tried again at the next slot.
pub async fn trigger(
    env: SharedEnv,
    scenario: Scenario,
    made: Arc<AtomicU32>,
    calm: Arc<AtomicBool>,
) {
    let Some(runner) = scenario.runner.clone() else {
        return;
    };
    let steps = steps(&runner);
    let client = orrery_system::runtime::upstream::Client::new(
        env.clone(),
        &platform_api(&scenario),
        std::time::Duration::from_secs(10),
    );
    let agents = agent_ids(&scenario);
    // Steps that log: a user follows each build's log (builds made through the API).
    let logs = runner.steps.iter().any(|s| s.lines > 0);
    // A Git provider's deliveries: each waits `timeout` for its answer.
    let api = platform_api(&scenario);
    while made.load(Ordering::SeqCst) < runner.builds && !calm.load(Ordering::SeqCst) {
        env.sleep(runner.every).await;
        let first = made.load(Ordering::SeqCst);
        let burst = runner.burst.min(runner.builds - first);
        let sends = (first..first + burst).map(|n| {
            // Builds go to the agents in turn (one agent: always it).
            let agent = &agents[n as usize % agents.len()];
            let pipeline = pipeline_of(&runner, n);
            let mut body = match runner.branches {
                // One branch: the body the first slice sent (traces unchanged).
                1 => json!({"pipeline": pipeline, "agent": agent, "steps": steps}),
                branches => json!({
                    "pipeline": pipeline,
                    "agent": agent,
                    "branch": format!("branch-{}", n % branches),
                    "steps": steps,
                }),
            };
            if runner.triggers > 0 {
                body["trigger"] = json!(format!("trigger-{}", n % runner.triggers));
            }
            let (client, env, api, webhook) = (&client, &env, &api, &runner.webhook);
            async move {
                let Some(webhook) = webhook.clone() else {
                    let made = client
                        .send(
                            http::Method::POST,
                            "/api/builds".into(),
                            Some(TRIGGER_TOKEN),
                            Some(&body),
                        )
                        .await;
                    if let Some(id) = made.as_ref().ok().and_then(|v| v["id"].as_str()) {
                        if logs {
                            tokio::spawn(follow(env.clone(), api.clone(), id.to_string()));
                        }
                    }
                    return made.is_ok();
                };
                // One push event: the provider delivers it, and delivers it again with the
                // same id when no answer comes within its timeout, until answered or out of
                // attempts — on its own time: the next events do not wait for it. The event
                // counts as sent either way.
                let provider = orrery_system::runtime::upstream::Client::new(
                    env.clone(),
                    api,
                    webhook.timeout,
                );
                let delivery = format!("delivery-{n:05}");
                tokio::spawn(async move {
                    for _ in 0..webhook.attempts {
                        let answer = provider
                            .send_with(
                                http::Method::POST,
                                "/api/webhooks".into(),
                                Some(TRIGGER_TOKEN),
                                &[(DELIVERY_HEADER, delivery.as_str())],
                                Some(&body),
                            )
                            .await;
                        if answer.is_ok() {
                            break;
                        }
                    }
                });
                true
            }
        });
        let sent = futures::future::join_all(sends).await;
        let accepted = sent.into_iter().filter(|ok| *ok).count() as u32;
        made.fetch_add(accepted, Ordering::SeqCst);
    }
}

/// A user following build `id`'s log over the broadcaster until the build ends, traced.
async fn follow(env: SharedEnv, api: String, id: String) {
    let seen = orrery_system::platform::runner::logs::follow_build(
        env.clone(),
        &api,
        TRIGGER_TOKEN,
        &id,
        |_| {},
    )
    .await;
    env.observe(
        orrery_system::observe::RunnerEvent::Followed {
            build: id,
            received: seen.received,
            in_order: seen.in_order,
            lines: seen.lines,
            status: seen.status,
        }
        .into(),
    );
}

/// The repository the UI's proxy requests commit to (`runner.proxy`).
pub const PROXY_REPO: &str = "https://git.example/customer/config";
/// The token the UI's proxy requests carry (`x-access-token`).
pub const PROXY_TOKEN: &str = "runner-proxy-token";

/// The commit message of proxy request `n`: what the checker looks for in the repository.
pub fn proxy_message(n: u32) -> String {
    format!("proxy request r{n:04}")
}

/// The UI asking the platform for `runner.proxy.requests` proxy tasks, one every `every`
/// until they were all made or the calm phase starts, to the agents in turn: each commits
/// `proxy/r<n>.txt` on the `role: git` host's provider (every `stale_every`-th with a blob
/// SHA its file does not have, so the provider refuses it). `made` counts across the
/// host's restarts; a refused or lost request is asked again at the next slot.
pub async fn proxy_requests(
    env: SharedEnv,
    scenario: Scenario,
    made: Arc<AtomicU32>,
    calm: Arc<AtomicBool>,
) {
    let Some(proxy) = scenario.runner.as_ref().and_then(|r| r.proxy.clone()) else {
        return;
    };
    let client = orrery_system::runtime::upstream::Client::new(
        env.clone(),
        &platform_api(&scenario),
        std::time::Duration::from_secs(10),
    );
    let agents = agent_ids(&scenario);
    let url = format!("http://{}:80/api/commits", host_of(&scenario, Role::Git));
    while made.load(Ordering::SeqCst) < proxy.requests && !calm.load(Ordering::SeqCst) {
        env.sleep(proxy.every).await;
        let n = made.load(Ordering::SeqCst);
        let mut params = json!({
            "repo": PROXY_REPO,
            "branch": "main",
            "path": format!("proxy/r{n:04}.txt"),
            "content": format!("request {n}\n"),
            "message": proxy_message(n),
            "author": "ui",
        });
        if (n + 1).is_multiple_of(proxy.stale_every) {
            params["sha"] = json!(crate::world::git::blob_sha("an older edit\n"));
        }
        let body = json!({
            "agent": agents[n as usize % agents.len()],
            "url": url,
            "method": "POST",
            "token": PROXY_TOKEN,
            "params": params,
        });
        let asked = client
            .send(
                http::Method::POST,
                "/api/proxy-tasks".into(),
                Some(TRIGGER_TOKEN),
                Some(&body),
            )
            .await;
        if asked.is_ok() {
            made.fetch_add(1, Ordering::SeqCst);
        }
    }
}
