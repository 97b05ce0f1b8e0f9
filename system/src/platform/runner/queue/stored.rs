//! The queue in the platform's store (real mode with `--database`): what changed since the
//! journal last took it, as whole objects by kind and key ([`RunnerKind`]), and a queue
//! rebuilt from what the database holds.
//!
//! Every change goes through [`Queue::touch`] (or the log's own mark) while tracking is on;
//! [`Queue::take_changes`] then writes each touched object as it is now, or its deletion. A
//! test replays random operations through the journal into a model of the database and
//! checks that the queue rebuilt from it equals the live one, object for object.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::{Build, CronTrigger, Pipeline, Queue, Queued, Settings, Tick};
use crate::platform::store::records::{RunnerKind, RunnerLog, RunnerObject};
use crate::platform::store::Change;

/// What changed since the journal last took it.
#[derive(Debug, Default)]
pub(super) struct Dirty {
    /// Objects changed, made or removed.
    pub(super) objects: BTreeSet<(RunnerKind, String)>,
    /// Builds whose log grew: the first line not taken yet.
    pub(super) logs: BTreeMap<String, u64>,
}

/// A stored object this build cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the stored runner {kind} {key:?} cannot be read: {reason}")]
pub struct Unreadable {
    /// Its kind.
    pub kind: &'static str,
    /// Its key.
    pub key: String,
    /// Why.
    pub reason: String,
}

impl Queue {
    /// From now on, records what changes for [`Queue::take_changes`] (a control plane with
    /// a database; the simulator's platform does not pay for it).
    pub fn track(&mut self) {
        self.dirty.get_or_insert_with(Dirty::default);
    }

    /// What changed since the last call, as the store's journal keeps it: each touched
    /// object whole (or its deletion), then the lines each log gained.
    pub fn take_changes(&mut self) -> Vec<Change> {
        let Some(dirty) = self.dirty.as_mut() else {
            return Vec::new();
        };
        if dirty.objects.is_empty() && dirty.logs.is_empty() {
            return Vec::new();
        }
        let dirty = std::mem::take(dirty);
        let mut changes = Vec::with_capacity(dirty.objects.len() + dirty.logs.len());
        for (kind, key) in dirty.objects {
            changes.push(match self.stored(kind, &key) {
                Some(value) => Change::RunnerPut { kind, key, value },
                None => Change::RunnerDelete { kind, key },
            });
        }
        for (build, from) in dirty.logs {
            // A log gone with its build went with the build's deletion above.
            if let Some((lines, _)) = self.logs.get(&build) {
                let lines = lines.get(from as usize..).unwrap_or(&[]).to_vec();
                if !lines.is_empty() {
                    changes.push(Change::RunnerLog { build, from, lines });
                }
            }
        }
        changes
    }

    /// Object `key` of `kind` as the store keeps it (`None`: there is none).
    fn stored(&self, kind: RunnerKind, key: &str) -> Option<Value> {
        match kind {
            RunnerKind::Build => self.builds.get(key).map(to_json),
            RunnerKind::Task => self.tasks.get(key).map(to_json),
            RunnerKind::Pipeline => self.pipelines.get(key).map(to_json),
            RunnerKind::Claim => self
                .deliveries
                .get(key)
                .map(|(build, at)| json!({"build": build, "claimedMs": at})),
            RunnerKind::Cron => self.crons.get(key).map(to_json),
            RunnerKind::Missed => (!self.missed.is_empty()).then(|| to_json(&self.missed)),
            RunnerKind::Lease => self
                .lease
                .as_ref()
                .map(|(holder, until)| json!({"holder": holder, "untilMs": until})),
            RunnerKind::Counters => Some(json!({
                "builds": self.made_builds,
                "tasks": self.made_tasks,
            })),
            RunnerKind::Heartbeat => self.heartbeats.get(key).map(|ms| json!(ms)),
        }
    }

    /// Every object the store would hold for this queue, by kind and key.
    pub fn export(&self) -> Vec<RunnerObject> {
        let mut keys: Vec<(RunnerKind, String)> = Vec::new();
        keys.extend(self.builds.keys().map(|k| (RunnerKind::Build, k.clone())));
        keys.extend(self.tasks.keys().map(|k| (RunnerKind::Task, k.clone())));
        keys.extend(
            self.pipelines
                .keys()
                .map(|k| (RunnerKind::Pipeline, k.clone())),
        );
        keys.extend(
            self.deliveries
                .keys()
                .map(|k| (RunnerKind::Claim, k.clone())),
        );
        keys.extend(self.crons.keys().map(|k| (RunnerKind::Cron, k.clone())));
        keys.extend(
            self.heartbeats
                .keys()
                .map(|k| (RunnerKind::Heartbeat, k.clone())),
        );
        for kind in [RunnerKind::Missed, RunnerKind::Lease, RunnerKind::Counters] {
            keys.push((kind, String::new()));
        }
        keys.sort();
        keys.into_iter()
            .filter_map(|(kind, key)| {
                self.stored(kind, &key)
                    .map(|value| RunnerObject { kind, key, value })
            })
            .collect()
    }

    /// Every build's log, by build.
    pub fn export_logs(&self) -> Vec<RunnerLog> {
        self.logs
            .iter()
            .filter(|(_, (lines, _))| !lines.is_empty())
            .map(|(build, (lines, _))| RunnerLog {
                build: build.clone(),
                lines: lines.clone(),
            })
            .collect()
    }

    /// A queue with `settings` holding what the store kept (`objects`, `logs`): what a
    /// restarted control plane serves. Tracking is off until [`Queue::track`].
    pub fn restore(
        settings: Settings,
        objects: &[RunnerObject],
        logs: &[RunnerLog],
    ) -> Result<Queue, Unreadable> {
        let mut queue = Queue::new(settings);
        for object in objects {
            let key = object.key.clone();
            let unreadable = |reason: String| Unreadable {
                kind: object.kind.as_str(),
                key: object.key.clone(),
                reason,
            };
            let value = object.value.clone();
            match object.kind {
                RunnerKind::Build => {
                    let build: Build = read(value).map_err(unreadable)?;
                    queue.builds.insert(key, build);
                }
                RunnerKind::Task => {
                    let task: Queued = read(value).map_err(unreadable)?;
                    queue.tasks.insert(key, task);
                }
                RunnerKind::Pipeline => {
                    let pipeline: Pipeline = read(value).map_err(unreadable)?;
                    if let Some(pattern) = &pipeline.terminate_branch_pattern {
                        queue
                            .patterns
                            .insert(key.clone(), super::branch_pattern(pattern).ok());
                    }
                    queue.pipelines.insert(key, pipeline);
                }
                RunnerKind::Claim => {
                    #[derive(serde::Deserialize)]
                    #[serde(rename_all = "camelCase")]
                    struct Claim {
                        build: Option<String>,
                        claimed_ms: u64,
                    }
                    let claim: Claim = read(value).map_err(unreadable)?;
                    queue
                        .deliveries
                        .insert(key, (claim.build, claim.claimed_ms));
                }
                RunnerKind::Cron => {
                    let cron: CronTrigger = read(value).map_err(unreadable)?;
                    queue.crons.insert(key, cron);
                }
                RunnerKind::Missed => {
                    queue.missed = read::<Vec<Tick>>(value).map_err(unreadable)?;
                }
                RunnerKind::Lease => {
                    #[derive(serde::Deserialize)]
                    #[serde(rename_all = "camelCase")]
                    struct Lease {
                        holder: String,
                        until_ms: u64,
                    }
                    let lease: Lease = read(value).map_err(unreadable)?;
                    queue.lease = Some((lease.holder, lease.until_ms));
                }
                RunnerKind::Counters => {
                    #[derive(serde::Deserialize)]
                    struct Counters {
                        builds: u64,
                        tasks: u64,
                    }
                    let counters: Counters = read(value).map_err(unreadable)?;
                    queue.made_builds = counters.builds;
                    queue.made_tasks = counters.tasks;
                }
                RunnerKind::Heartbeat => {
                    let at: u64 = read(value).map_err(unreadable)?;
                    queue.heartbeats.insert(key, at);
                }
            }
        }
        for log in logs {
            let bytes = log.lines.iter().map(|l| l.len() as u64).sum();
            queue
                .logs
                .insert(log.build.clone(), (log.lines.clone(), bytes));
        }
        Ok(queue)
    }
}

fn read<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// A record as JSON (the queue's records always serialise).
fn to_json<T: serde::Serialize>(record: &T) -> Value {
    serde_json::to_value(record).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests;
