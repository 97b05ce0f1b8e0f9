//! Workflows submitted until the calm phase, drawn from the seed: every `submit_every` a
//! workflow of `steps` sequential steps with a `retryStrategy` and a TTL, each step
//! attempt running 1..`max_step_seconds` and failing with `fail_percent` probability
//! (what its pod will do is set in the world's [`Jobs`] before it is submitted).
//!
//! Replaying a recorded trace, the workflows are the trace's instead: each recorded
//! Workflow is submitted when it was, as one step whose pod runs until the workflow's
//! recorded end and ends as it did (`Succeeded`, `Failed` or `Error`; still running when
//! the recording stopped: to its end), and deleted when it was.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;

use super::{sequential, workflow_resource, Job, Jobs};
use crate::scenario::model::WorkflowsLoad as Config;
use crate::scenario::trace::{Change, Kind, Record, Replay};

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
    replay: Option<Replay>,
) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &config.namespace, &workflow_resource());
    if let Some(replay) = replay.filter(|r| r.trace.has(Kind::Workflow)) {
        return replay_trace(&env, &api, &config, &jobs, &calm, &replay).await;
    }
    if config.submit_every.is_zero() {
        return;
    }
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

/// What the recorded Workflow added by `records[at]` did: how it ended and after how long
/// (recorded time, ms); one still running at the end of the recording ran to its end.
fn recorded_run(records: &[&Record], at: usize, duration_ms: u64) -> (&'static str, u64) {
    let added = records[at];
    let end = records[at + 1..]
        .iter()
        .filter(|r| r.app == added.app)
        .take_while(|r| r.change != Change::Deleted)
        .find_map(|r| match &r.change {
            Change::Phase { phase } => match phase.as_str() {
                "Succeeded" => Some(("Succeeded", r.at_ms)),
                "Failed" => Some(("Failed", r.at_ms)),
                "Error" => Some(("Error", r.at_ms)),
                _ => None,
            },
            _ => None,
        });
    let (phase, at_ms) = end.unwrap_or(("Succeeded", duration_ms.max(added.at_ms)));
    (phase, at_ms - added.at_ms)
}

/// Submits and deletes the trace's Workflows when they were, until the calm phase; a
/// submission or delete the API server refused is tried again a second later.
async fn replay_trace(
    env: &SharedEnv,
    api: &Api<DynamicObject>,
    config: &Config,
    jobs: &Jobs,
    calm: &AtomicBool,
    replay: &Replay,
) {
    let records: Vec<&Record> = replay.trace.of(Kind::Workflow).collect();
    let started = env.elapsed();
    // The world's name of each recorded Workflow, by order of appearance.
    let mut name_of: std::collections::BTreeMap<&str, String> = Default::default();
    let mut submitted = 0u64;
    let mut retry: Vec<(String, bool)> = Vec::new();
    let mut cursor = 0;
    while !calm.load(Ordering::SeqCst) && (cursor < records.len() || !retry.is_empty()) {
        let mut due = std::mem::take(&mut retry);
        let now = env.elapsed();
        while cursor < records.len() && started + replay.offset(records[cursor].at_ms) <= now {
            let record = records[cursor];
            match &record.change {
                Change::Added => {
                    // A new name each time: a recorded name can come back after a delete.
                    let name = workflow_name(submitted);
                    submitted += 1;
                    let (phase, ms) =
                        recorded_run(&records, cursor, replay.trace.header.duration_ms);
                    let seconds = replay.offset(ms).as_secs_f64().ceil().max(1.0) as u64;
                    let key = format!("{}/{name}", config.namespace);
                    jobs.set(
                        &key,
                        &format!("{name}[0].run"),
                        vec![Job { phase, seconds }],
                    );
                    name_of.insert(&record.app, name.clone());
                    due.push((name, true));
                }
                Change::Deleted => {
                    if let Some(name) = name_of.remove(record.app.as_str()) {
                        due.push((name, false));
                    }
                }
                // Phases are the world's controller's to make (the end was set above).
                _ => {}
            }
            cursor += 1;
        }
        for (name, submit) in due {
            let done = if submit {
                let job =
                    json!({"container": {"image": "registry.example/ci:1", "command": ["make"]}});
                let extra = if config.ttl_seconds > 0 {
                    json!({"ttlStrategy": {"secondsAfterCompletion": config.ttl_seconds}})
                } else {
                    json!({})
                };
                let object = sequential(&name, &config.namespace, &["run"], job, extra);
                match api.create(&PostParams::default(), &object).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                    Err(error) => Err(error),
                }
            } else {
                match api.delete(&name, &Default::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                    Err(error) => Err(error),
                }
            };
            if let Err(error) = done {
                env.observe(
                    WorldEvent::WorkflowsError {
                        object: format!("{}/{name}", config.namespace),
                        error: error.to_string(),
                    }
                    .into(),
                );
                retry.push((name, submit));
            }
        }
        let mut wake = env.elapsed() + Duration::from_secs(1);
        if let Some(record) = records.get(cursor) {
            wake = wake.min(started + replay.offset(record.at_ms));
        }
        env.sleep(wake.saturating_sub(env.elapsed())).await;
    }
}
