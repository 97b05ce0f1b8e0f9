//! What developers and operators do to Rollouts, drawn from the seed: Rollouts created at
//! the start (canaries, and every n-th a blue-green with manual promotion and
//! pre-promotion analysis); until the calm phase, a new version of a random Rollout every
//! `deploy_every` with the verdict its analysis will find drawn by weight; and an operator
//! who promotes a Rollout paused for `promote_after` and retries one aborted for
//! `retry_after`, with the kubectl plugin's patches. API errors are observed and the action
//! is tried again on its next turn.
//!
//! Replaying a recorded trace ([`Replay`]), the Rollouts and their new versions are the
//! trace's instead of drawn: each recorded Rollout is one of the world's (by order of
//! appearance), a recorded new pod template is a new version whose analysis fails when a
//! phase recorded right after it (before the Rollout's next other change) is `Degraded`,
//! and a recorded delete deletes it; the operator is the configured one.

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
use crate::scenario::trace::{Change, Kind, Record, Replay};

/// The verdict for a recorded new version of `app`, the record at `at` of `records`: a
/// failed analysis when one of the phases recorded right after it (before the Rollout's
/// next other change) is `Degraded`.
fn recorded_verdict(records: &[&Record], at: usize) -> Verdict {
    let app = &records[at].app;
    let next = records[at + 1..]
        .iter()
        .filter(|r| &r.app == app)
        .take_while(|r| matches!(r.change, Change::Phase { .. }))
        .find_map(|r| match &r.change {
            Change::Phase { phase } if phase == "Degraded" => Some(Verdict::Bad),
            _ => None,
        });
    next.unwrap_or(Verdict::Good)
}

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
    replay: Option<Replay>,
) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &config.namespace, &rollout_resource());
    // Replaying (a trace with Rollouts): the recorded Rollouts by order of appearance, and
    // the records after the initial ones, applied in order when due.
    let replay = replay.filter(|r| r.trace.has(Kind::Rollout));
    let records: Vec<&Record> = replay
        .as_ref()
        .map(|r| r.trace.changes_of(Kind::Rollout).collect())
        .unwrap_or_default();
    let recorded: Vec<&str> = replay
        .as_ref()
        .map(|r| r.trace.initial(Kind::Rollout))
        .unwrap_or_default();
    let initial = if replay.is_some() {
        recorded.len()
    } else {
        config.count
    };
    let mut index_of: BTreeMap<&str, usize> = recorded
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, i))
        .collect();
    let mut next_index = initial;
    let mut cursor = 0;
    let mut deletes: Vec<usize> = Vec::new();
    let started = env.elapsed();
    let mut pending: Vec<usize> = (0..initial).collect();
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
        if let Some(replay) = &replay {
            // Deletes that failed before, then every record now due.
            let mut left = Vec::new();
            for i in deletes.drain(..) {
                match api.delete(&rollout_name(i), &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => {
                        observe_error(&env, rollout_name(i), error);
                        left.push(i);
                    }
                }
            }
            deletes = left;
            while cursor < records.len() && started + replay.offset(records[cursor].at_ms) <= now {
                let record = records[cursor];
                match (&record.change, index_of.get(record.app.as_str()).copied()) {
                    (Change::Added, _) => {
                        index_of.insert(&record.app, next_index);
                        pending.push(next_index);
                        next_index += 1;
                    }
                    (Change::Deleted, Some(i)) => {
                        index_of.remove(record.app.as_str());
                        pending.retain(|p| *p != i);
                        if versions.remove(&i).is_some() {
                            deletes.push(i);
                        }
                    }
                    (Change::Revision { .. }, Some(i)) if versions.contains_key(&i) => {
                        let version = versions[&i] + 1;
                        let verdict = recorded_verdict(&records, cursor);
                        if deploy(&env, &api, &config, &verdicts, i, version, verdict).await {
                            versions.insert(i, version);
                        }
                    }
                    // Phases are the world's controller's to make; a version of a Rollout
                    // not created yet is lost with it.
                    _ => {}
                }
                cursor += 1;
            }
        } else if !config.deploy_every.is_zero() && now >= next_deploy && !versions.is_empty() {
            next_deploy = now + config.deploy_every;
            let keys: Vec<usize> = versions.keys().copied().collect();
            let i = keys[(env.random_u64() % keys.len() as u64) as usize];
            let version = versions[&i] + 1;
            let verdict = draw(&env, &config);
            if deploy(&env, &api, &config, &verdicts, i, version, verdict).await {
                versions.insert(i, version);
            }
        }
        if !config.promote_after.is_zero() || !config.retry_after.is_zero() {
            match list(&client, &api).await {
                Ok(list) => {
                    for object in list.items {
                        let name = object.metadata.name.unwrap_or_default();
                        let status = object.status.unwrap_or_default();
                        let phase = status.phase.as_ref().and_then(|p| p.as_str());
                        let phase = phase.unwrap_or("");
                        let aborted = status.abort == Some(json!(true));
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
        // A turn a second, or sooner when a recorded change is due.
        let mut wake = env.elapsed() + Duration::from_secs(1);
        if let (Some(replay), Some(record)) = (&replay, records.get(cursor)) {
            wake = wake.min(started + replay.offset(record.at_ms));
        }
        env.sleep(wake.saturating_sub(env.elapsed())).await;
    }
}

/// What the operator reads of a listed Rollout: its name, `status.phase` and `status.abort`
/// (each absent or `null` read as `DynamicObject` reads it).
#[derive(serde::Deserialize)]
struct Listed {
    #[serde(default)]
    metadata: ListedMeta,
    #[serde(default)]
    status: Option<ListedStatus>,
}

#[derive(serde::Deserialize, Default)]
struct ListedMeta {
    name: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct ListedStatus {
    phase: Option<serde_json::Value>,
    abort: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct ListedRollouts {
    items: Vec<Listed>,
}

/// The operator's look at every Rollout: the request `Api::list` sends, its answer decoded
/// into only the fields the operator reads. Decoding 300 whole Rollouts into
/// `DynamicObject`s every second was a seventh of a rollout-storm seed's time.
async fn list(client: &kube::Client, api: &Api<DynamicObject>) -> kube::Result<ListedRollouts> {
    let mut request = kube::core::Request::new(api.resource_url())
        .list(&ListParams::default())
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("list");
    client.request::<ListedRollouts>(request).await
}

/// Deploys `version` of Rollout `i`, whose analysis will find `verdict`: whether the new
/// template was written.
async fn deploy(
    env: &SharedEnv,
    api: &Api<DynamicObject>,
    config: &Config,
    verdicts: &Verdicts,
    i: usize,
    version: u64,
    verdict: Verdict,
) -> bool {
    let name = rollout_name(i);
    let next = template(&name, version);
    // The verdict is the world's before the controller sees the version.
    verdicts.set(
        &format!("{}/{name}", config.namespace),
        &pod_template_hash(&next, None),
        verdict,
    );
    let patch = json!({"spec": {"template": next}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => true,
        Err(error) => {
            observe_error(env, name, error);
            false
        }
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

#[cfg(test)]
mod tests {
    use super::ListedRollouts;

    #[test]
    fn the_operators_list_reads_name_phase_and_abort_and_takes_what_dynamic_object_takes() {
        let body = br#"{"apiVersion":"argoproj.io/v1alpha1","kind":"RolloutList","metadata":{"resourceVersion":"9"},"items":[
            {"metadata":{"name":"ro-0000","labels":{"a":"b"}},"spec":{"replicas":3},"status":{"phase":"Paused","abort":true,"currentStepIndex":2}},
            {"metadata":{"name":"ro-0001"},"status":null},
            {"metadata":{"name":"ro-0002"}},
            {"status":{"phase":7}}]}"#;
        let list: ListedRollouts = serde_json::from_slice(body).unwrap();
        let read: Vec<(Option<String>, Option<String>, bool)> = list
            .items
            .into_iter()
            .map(|item| {
                let status = item.status.unwrap_or_default();
                let phase = status.phase.and_then(|p| p.as_str().map(String::from));
                let aborted = status.abort == Some(serde_json::json!(true));
                (item.metadata.name, phase, aborted)
            })
            .collect();
        assert_eq!(
            read,
            vec![
                (Some("ro-0000".into()), Some("Paused".into()), true),
                (Some("ro-0001".into()), None, false),
                (Some("ro-0002".into()), None, false),
                (None, None, false),
            ]
        );
        // kube's DynamicObject takes the same body.
        let whole: kube::core::ObjectList<kube::api::DynamicObject> =
            serde_json::from_slice(body).unwrap();
        assert_eq!(whole.items.len(), 4);
    }
}
