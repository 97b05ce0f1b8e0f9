//! Workflows submitted until the calm phase, drawn from the seed: every `submit_every` a
//! workflow of `steps` sequential steps with a `retryStrategy` and a TTL, each step
//! attempt running 1..`max_step_seconds` and failing with `fail_percent` probability
//! (what its pod will do is set in the world's [`Jobs`] before it is submitted).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;

use super::{sequential, workflow_resource, Job, Jobs};
use crate::scenario::model::WorkflowsLoad as Config;

/// Name of the `i`-th submitted workflow.
pub fn workflow_name(i: u64) -> String {
    format!("wf-{i:05}")
}

/// Runs the Workflows workload until the calm phase.
pub async fn run(
    env: SharedEnv,
    client: kube::Client,
    config: Config,
    jobs: Jobs,
    calm: Arc<AtomicBool>,
) {
    if config.submit_every.is_zero() {
        return;
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &config.namespace, &workflow_resource());
    let mut submitted = 0u64;
    while !calm.load(Ordering::SeqCst) {
        env.sleep(config.submit_every).await;
        if calm.load(Ordering::SeqCst) {
            break;
        }
        let name = workflow_name(submitted);
        let key = format!("{}/{name}", config.namespace);
        let steps: Vec<String> = (0..config.steps).map(|s| format!("step-{s}")).collect();
        for (s, step) in steps.iter().enumerate() {
            let attempts = (0..=config.retry_limit)
                .map(|_| Job {
                    phase: if env.random_u64() % 100 < u64::from(config.fail_percent) {
                        "Failed"
                    } else {
                        "Succeeded"
                    },
                    seconds: 1 + env.random_u64() % config.max_step_seconds.max(1),
                })
                .collect();
            jobs.set(&key, &format!("{name}[{s}].{step}"), attempts);
        }
        let job = json!({"container": {"image": "registry.example/ci:1", "command": ["make"]}, "retryStrategy": {"limit": config.retry_limit}});
        let extra = if config.ttl_seconds > 0 {
            json!({"ttlStrategy": {"secondsAfterCompletion": config.ttl_seconds}})
        } else {
            json!({})
        };
        let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
        let object = sequential(&name, &config.namespace, &steps, job, extra);
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => submitted += 1,
            Err(kube::Error::Api(status)) if status.code == 409 => submitted += 1,
            // Tried again, under the same name, at the next turn.
            Err(error) => env.observe(
                WorldEvent::WorkflowsError {
                    object: key,
                    error: error.to_string(),
                }
                .into(),
            ),
        }
    }
}
