//! What developers and operators do to Rollouts, drawn from the seed: Rollouts created at
//! the start (canaries, and every n-th a blue-green with manual promotion and
//! pre-promotion analysis); until the calm phase, a new version of a random Rollout every
//! `deploy_every` with the verdict its analysis will find drawn by weight; and an operator
//! who promotes a Rollout paused for `promote_after` and retries one aborted for
//! `retry_after`, with the kubectl plugin's patches. API errors are observed and the action
//! is tried again on its next turn.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;

use super::analysis::{Verdict, Verdicts};
use super::model::pod_template_hash;
use super::{plugin, rollout_resource};
use crate::scenario::model::RolloutsLoad as Config;

/// Name of the `i`-th Rollout.
pub fn rollout_name(i: usize) -> String {
    format!("ro-{i:04}")
}

fn template(name: &str, version: u64) -> serde_json::Value {
    json!({"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": format!("registry.example/{name}:v{version}")}]}})
}

/// The Rollout object of index `i` at version 1.
fn rollout(i: usize, config: &Config) -> DynamicObject {
    let name = rollout_name(i);
    let analysis = json!({"templates": [{"templateName": "success-rate"}]});
    let strategy = if config.blue_green_every > 0
        && i % config.blue_green_every == config.blue_green_every - 1
    {
        json!({"blueGreen": {"activeService": format!("{name}-active"), "previewService": format!("{name}-preview"), "autoPromotionEnabled": false, "prePromotionAnalysis": analysis}})
    } else {
        json!({"canary": {"steps": [
            {"setWeight": 20},
            {"pause": {"duration": "20s"}},
            {"setWeight": 50},
            {"analysis": analysis},
            {"pause": {}},
            {"setWeight": 80},
        ]}})
    };
    let mut object = DynamicObject::new(&name, &rollout_resource()).within(&config.namespace);
    object.data = json!({"spec": {
        "replicas": config.replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": template(&name, 1),
        "strategy": strategy,
    }});
    object
}

/// Draws a verdict by the configured weights.
fn draw(env: &SharedEnv, config: &Config) -> Verdict {
    let w = &config.verdicts;
    let choices = [
        (w.good, Verdict::Good),
        (w.bad, Verdict::Bad),
        (w.unsure, Verdict::Unsure),
        (w.unreachable, Verdict::Unreachable),
        (w.crash_loop, Verdict::CrashLoop),
    ];
    let total: u64 = choices.iter().map(|(w, _)| u64::from(*w)).sum();
    if total == 0 {
        return Verdict::Good;
    }
    let mut pick = env.random_u64() % total;
    for (weight, verdict) in choices {
        if pick < u64::from(weight) {
            return verdict;
        }
        pick -= u64::from(weight);
    }
    Verdict::Good
}

fn observe_error(env: &SharedEnv, object: String, error: impl std::fmt::Display) {
    env.observe(
        WorldEvent::RolloutsError {
            object,
            error: error.to_string(),
        }
        .into(),
    );
}

/// Runs the Rollouts workload until the calm phase.
pub async fn run(
    env: SharedEnv,
    client: kube::Client,
    config: Config,
    verdicts: Verdicts,
    calm: Arc<AtomicBool>,
) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &config.namespace, &rollout_resource());
    let mut pending: Vec<usize> = (0..config.count).collect();
    let mut versions: BTreeMap<usize, u64> = BTreeMap::new();
    // The operator's memory: since when a Rollout is paused or aborted.
    let mut paused_since: BTreeMap<String, Duration> = BTreeMap::new();
    let mut aborted_since: BTreeMap<String, Duration> = BTreeMap::new();
    let mut next_deploy = env.elapsed() + config.deploy_every;
    while !calm.load(Ordering::SeqCst) {
        // Creation, retried until every Rollout exists.
        let mut left = Vec::new();
        for i in pending {
            match api
                .create(&PostParams::default(), &rollout(i, &config))
                .await
            {
                Ok(_) => {
                    versions.insert(i, 1);
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    versions.insert(i, 1);
                }
                Err(error) => {
                    observe_error(&env, rollout_name(i), error);
                    left.push(i);
                }
            }
        }
        pending = left;
        let now = env.elapsed();
        if !config.deploy_every.is_zero() && now >= next_deploy && !versions.is_empty() {
            next_deploy = now + config.deploy_every;
            let keys: Vec<usize> = versions.keys().copied().collect();
            let i = keys[(env.random_u64() % keys.len() as u64) as usize];
            let name = rollout_name(i);
            let version = versions[&i] + 1;
            let next = template(&name, version);
            // The verdict is the world's before the controller sees the version.
            verdicts.set(
                &format!("{}/{name}", config.namespace),
                &pod_template_hash(&next, None),
                draw(&env, &config),
            );
            let patch = json!({"spec": {"template": next}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => {
                    versions.insert(i, version);
                }
                Err(error) => observe_error(&env, name, error),
            }
        }
        if !config.promote_after.is_zero() || !config.retry_after.is_zero() {
            match api.list(&ListParams::default()).await {
                Ok(list) => {
                    for object in list.items {
                        let name = object.metadata.name.clone().unwrap_or_default();
                        let phase = object
                            .data
                            .pointer("/status/phase")
                            .and_then(|p| p.as_str())
                            .unwrap_or("");
                        let aborted = object.data.pointer("/status/abort") == Some(&json!(true));
                        operate(
                            &env,
                            &api,
                            &config,
                            &name,
                            phase == "Paused",
                            aborted,
                            &mut paused_since,
                            &mut aborted_since,
                            now,
                        )
                        .await;
                    }
                }
                Err(error) => observe_error(&env, config.namespace.clone(), error),
            }
        }
        env.sleep(Duration::from_secs(1)).await;
    }
}

/// The operator's turn on one Rollout.
#[allow(clippy::too_many_arguments)]
async fn operate(
    env: &SharedEnv,
    api: &Api<DynamicObject>,
    config: &Config,
    name: &str,
    paused: bool,
    aborted: bool,
    paused_since: &mut BTreeMap<String, Duration>,
    aborted_since: &mut BTreeMap<String, Duration>,
    now: Duration,
) {
    if paused && !aborted && !config.promote_after.is_zero() {
        let since = *paused_since.entry(name.to_string()).or_insert(now);
        if now.saturating_sub(since) >= config.promote_after {
            match plugin::promote(api, name, false).await {
                Ok(()) => {
                    paused_since.remove(name);
                }
                Err(error) => observe_error(env, name.to_string(), error),
            }
        }
    } else {
        paused_since.remove(name);
    }
    if aborted && !config.retry_after.is_zero() {
        let since = *aborted_since.entry(name.to_string()).or_insert(now);
        if now.saturating_sub(since) >= config.retry_after {
            match plugin::retry(api, name).await {
                Ok(()) => {
                    aborted_since.remove(name);
                }
                Err(error) => observe_error(env, name.to_string(), error),
            }
        }
    } else {
        aborted_since.remove(name);
    }
}
