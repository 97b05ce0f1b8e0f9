//! `orrery record`: a real cluster's Application, Rollout and Workflow changes as a
//! workload trace ([`orrery_sim::scenario::trace`]) that a scenario replays with
//! `workload: {replay: FILE}`. It watches each kind in every namespace for a wall-clock
//! duration (Rollouts and Workflows only where their CRDs are served): the objects that
//! exist at the start are `added` at 0 ms; afterwards an object appearing or disappearing
//! is a record, and so is what the trace keeps of it changing — an app's synced revision,
//! health and refresh requests (the state an app is first seen in is part of its `added`),
//! a Rollout's pod-template hash and phase, a Workflow's phase (a Rollout's or Workflow's
//! phase is also recorded as first seen).
//! Real mode only (wall clock): never part of a simulation.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::watcher;
use serde_json::Value;

use orrery_sim::scenario::trace::{Change, Header, Kind, Record, Trace, FORMAT};
use orrery_sim::world::argocd::application_resource;
use orrery_sim::world::rollouts::rollout_resource;
use orrery_sim::world::workflows::workflow_resource;
use orrery_system::core::json::Pointer as _;

/// Why a recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The watch failed and could not be resumed before the end.
    #[error("watching {kind}s failed: {error}")]
    Watch {
        /// Which kind.
        kind: &'static str,
        /// The last error.
        error: String,
    },
}

/// What the trace keeps of an object between changes.
#[derive(Clone, Debug, Default, PartialEq)]
struct Seen {
    revision: Option<String>,
    health: Option<String>,
    refresh: Option<String>,
    phase: Option<String>,
}

fn seen(kind: Kind, object: &DynamicObject) -> Seen {
    let text = |pointer: &str| {
        object
            .data
            .at(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match kind {
        Kind::Application => Seen {
            revision: text("/status/sync/revision"),
            health: text("/status/health/status"),
            refresh: object
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("argocd.argoproj.io/refresh"))
                .cloned(),
            phase: None,
        },
        Kind::Rollout => Seen {
            revision: text("/status/currentPodHash"),
            phase: text("/status/phase"),
            ..Seen::default()
        },
        Kind::Workflow => Seen {
            phase: text("/status/phase"),
            ..Seen::default()
        },
    }
}

/// `namespace/name`, or with `hash` an FNV-1a digest of it (names can say more than a
/// trace should), prefixed by the kind (`app-`, `rollout-`, `workflow-`).
fn name_of(kind: Kind, object: &DynamicObject, hash: bool) -> String {
    let name = format!(
        "{}/{}",
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default()
    );
    if !hash {
        return name;
    }
    let digest = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let prefix = match kind {
        Kind::Application => "app",
        Kind::Rollout => "rollout",
        Kind::Workflow => "workflow",
    };
    format!("{prefix}-{digest:016x}")
}

/// The changes from `before` to `after` of one object, in a fixed order.
fn changes(kind: Kind, before: &Seen, after: &Seen) -> Vec<Change> {
    let mut out = Vec::new();
    // A Rollout first seen before its controller wrote a status gets its first hash
    // later: that is the version it was added with, not a new one.
    let first_hash = kind == Kind::Rollout && before.revision.is_none();
    if after.revision != before.revision && !first_hash {
        if let Some(revision) = &after.revision {
            out.push(Change::Revision {
                revision: revision.clone(),
            });
        }
    }
    if after.health != before.health {
        if let Some(health) = &after.health {
            out.push(Change::Health {
                health: health.clone(),
            });
        }
    }
    if after.refresh.is_some() && after.refresh != before.refresh {
        out.push(Change::Refresh);
    }
    if after.phase != before.phase {
        if let Some(phase) = &after.phase {
            out.push(Change::Phase {
                phase: phase.clone(),
            });
        }
    }
    out
}

/// The objects seen so far and the records made.
#[derive(Default)]
struct Recording {
    objects: BTreeMap<(Kind, String), Seen>,
    records: Vec<Record>,
}

impl Recording {
    fn push(&mut self, at_ms: u64, kind: Kind, app: &str, change: Change) {
        self.records.push(Record {
            at_ms,
            kind,
            app: app.to_string(),
            change,
        });
    }

    /// An object seen in `now` state: `added` the first time (with a Rollout's or
    /// Workflow's phase), its changes afterwards.
    fn observe(&mut self, at_ms: u64, kind: Kind, name: String, now: Seen) {
        let key = (kind, name.clone());
        match self.objects.get(&key) {
            // The state an app is first seen in is part of being added (the world's own
            // add syncs it); a Rollout's or Workflow's phase is recorded with it.
            None => {
                self.push(at_ms, kind, &name, Change::Added);
                if let Some(phase) = &now.phase {
                    let phase = phase.clone();
                    self.push(at_ms, kind, &name, Change::Phase { phase });
                }
            }
            Some(before) => {
                for change in changes(kind, before, &now) {
                    self.push(at_ms, kind, &name, change);
                }
            }
        }
        self.objects.insert(key, now);
    }

    fn delete(&mut self, at_ms: u64, kind: Kind, name: &str) {
        if self.objects.remove(&(kind, name.to_string())).is_some() {
            self.push(at_ms, kind, name, Change::Deleted);
        }
    }
}

/// Whether `resource` can be recorded here: listed (its CRD may not be installed, or the
/// credentials may not read it; said why when not).
async fn served(client: &kube::Client, kind: Kind, resource: &ApiResource) -> bool {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => true,
        Err(error) => {
            eprintln!(
                "{}s are not recorded: listing them failed: {error}",
                kind.name()
            );
            false
        }
    }
}

/// Records `duration` of the cluster `client` reaches; `ready` is told when the objects
/// that exist at the start have been listed (changes from then on are records).
pub async fn record(
    client: kube::Client,
    duration: Duration,
    hash: bool,
    mut ready: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<Trace, RecordError> {
    let mut streams = Vec::new();
    for (kind, resource) in [
        (Kind::Application, application_resource()),
        (Kind::Rollout, rollout_resource()),
        (Kind::Workflow, workflow_resource()),
    ] {
        if kind != Kind::Application && !served(&client, kind, &resource).await {
            continue;
        }
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        streams.push(
            watcher(api, watcher::Config::default())
                .map(move |event| (kind, event))
                .boxed(),
        );
    }
    let kinds = streams.len();
    let mut stream = futures::stream::select_all(streams);
    let started = Instant::now(); // determinism: real-env (recording a real cluster)
    let mut recording = Recording::default();
    let mut listed: BTreeSet<Kind> = BTreeSet::new();
    let mut relisted: BTreeMap<Kind, BTreeSet<String>> = BTreeMap::new();
    let mut errors: BTreeMap<Kind, u32> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + duration; // determinism: real-env (recording a real cluster)
    loop {
        let (kind, event) = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) | Ok(None) => break,
            Ok(Some(event)) => event,
        };
        let initial = !listed.contains(&kind);
        let at_ms = if initial {
            0
        } else {
            started.elapsed().as_millis() as u64
        };
        match event {
            Ok(watcher::Event::Init) => {
                relisted.insert(kind, BTreeSet::new());
            }
            Ok(watcher::Event::InitApply(object)) => {
                let name = name_of(kind, &object, hash);
                relisted.entry(kind).or_default().insert(name.clone());
                recording.observe(at_ms, kind, name, seen(kind, &object));
            }
            Ok(watcher::Event::Apply(object)) => {
                recording.observe(
                    at_ms,
                    kind,
                    name_of(kind, &object, hash),
                    seen(kind, &object),
                );
            }
            Ok(watcher::Event::InitDone) => {
                // After a relist, objects it did not return are gone.
                let returned = relisted.remove(&kind).unwrap_or_default();
                let gone: Vec<String> = recording
                    .objects
                    .keys()
                    .filter(|(k, name)| *k == kind && !returned.contains(name))
                    .map(|(_, name)| name.clone())
                    .collect();
                for name in gone {
                    recording.delete(at_ms, kind, &name);
                }
                listed.insert(kind);
                if listed.len() == kinds {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
            }
            Ok(watcher::Event::Delete(object)) => {
                recording.delete(at_ms, kind, &name_of(kind, &object, hash));
            }
            Err(e) => {
                let count = errors.entry(kind).or_default();
                *count += 1;
                if initial && *count > 10 {
                    return Err(RecordError::Watch {
                        kind: kind.name(),
                        error: e.to_string(),
                    });
                }
                tracing::warn!(error = %e, "the {} watch failed; changes until it resumes may be missing", kind.name());
                let pause = tokio::time::Instant::now() + Duration::from_millis(500); // determinism: real-env (recording)
                tokio::time::sleep_until(pause.min(deadline)).await;
            }
        }
    }
    // The initial lists interleave: each kind's adds at 0 ms first, in time order after.
    recording.records.sort_by_key(|r| r.at_ms);
    Ok(Trace {
        header: Header {
            format: FORMAT.into(),
            duration_ms: duration.as_millis() as u64,
            hashed: hash,
        },
        records: recording.records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_the_revision_health_and_refresh_that_moved() {
        let before = Seen {
            revision: Some("a".into()),
            health: Some("Healthy".into()),
            refresh: None,
            phase: None,
        };
        let after = Seen {
            revision: Some("b".into()),
            health: Some("Healthy".into()),
            refresh: Some("hard".into()),
            phase: None,
        };
        assert_eq!(
            changes(Kind::Application, &before, &after),
            [
                Change::Revision {
                    revision: "b".into()
                },
                Change::Refresh
            ]
        );
        assert!(changes(Kind::Application, &after, &after).is_empty());
        let mut app = DynamicObject::new("a", &application_resource()).within("argocd");
        assert_eq!(name_of(Kind::Application, &app, false), "argocd/a");
        let hashed = name_of(Kind::Application, &app, true);
        assert!(hashed.starts_with("app-") && !hashed.contains("argocd"));
        assert!(name_of(Kind::Rollout, &app, true).starts_with("rollout-"));
        app.metadata.name = Some("b".into());
        assert_ne!(
            name_of(Kind::Application, &app, true),
            hashed,
            "different apps, different hashes"
        );
    }

    #[test]
    fn a_rollout_or_workflow_is_added_with_its_phase_then_changes() {
        let mut recording = Recording::default();
        let rollout = |hash: &str, phase: &str| Seen {
            revision: Some(hash.into()),
            phase: Some(phase.into()),
            ..Seen::default()
        };
        recording.observe(
            0,
            Kind::Rollout,
            "shop/web".into(),
            rollout("a1", "Healthy"),
        );
        recording.observe(
            900,
            Kind::Rollout,
            "shop/web".into(),
            rollout("b2", "Progressing"),
        );
        recording.observe(
            900,
            Kind::Rollout,
            "shop/web".into(),
            rollout("b2", "Progressing"),
        );
        recording.delete(1000, Kind::Rollout, "shop/web");
        recording.delete(1000, Kind::Rollout, "shop/web");
        let changes: Vec<(u64, Change)> = recording
            .records
            .iter()
            .map(|r| (r.at_ms, r.change.clone()))
            .collect();
        assert_eq!(
            changes,
            [
                (0, Change::Added),
                (
                    0,
                    Change::Phase {
                        phase: "Healthy".into()
                    }
                ),
                (
                    900,
                    Change::Revision {
                        revision: "b2".into()
                    }
                ),
                (
                    900,
                    Change::Phase {
                        phase: "Progressing".into()
                    }
                ),
                (1000, Change::Deleted),
            ]
        );
        assert!(recording.records.iter().all(|r| r.kind == Kind::Rollout));
        // Seen before its controller wrote a status: its first hash is not a new version.
        let mut recording = Recording::default();
        recording.observe(0, Kind::Rollout, "shop/api".into(), Seen::default());
        recording.observe(
            400,
            Kind::Rollout,
            "shop/api".into(),
            rollout("c3", "Healthy"),
        );
        let changes: Vec<Change> = recording.records.iter().map(|r| r.change.clone()).collect();
        assert_eq!(
            changes,
            [
                Change::Added,
                Change::Phase {
                    phase: "Healthy".into()
                }
            ]
        );
    }
}
