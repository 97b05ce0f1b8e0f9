//! `orrery record`: a real cluster's Application changes as a workload trace
//! ([`crate::scenario::trace`]) that a scenario replays with `workload: {replay: FILE}`.
//! It watches Applications in every namespace for a wall-clock duration: the apps that
//! exist at the start are `added` at 0 ms; afterwards an app appearing, disappearing, its
//! synced revision or its health changing, and a refresh being asked for are records (the
//! state an app is first seen in is part of its `added`).
//! Real mode only (wall clock): never part of a simulation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;

use crate::scenario::trace::{Change, Header, Record, Trace, FORMAT};
use crate::world::argocd::application_resource;

/// Why a recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The watch failed and could not be resumed before the end.
    #[error("watching Applications failed: {0}")]
    Watch(String),
}

/// What the trace keeps of an app between changes.
#[derive(Clone, Debug, Default, PartialEq)]
struct Seen {
    revision: Option<String>,
    health: Option<String>,
    refresh: Option<String>,
}

fn seen(app: &DynamicObject) -> Seen {
    let text = |pointer: &str| {
        app.data
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    Seen {
        revision: text("/status/sync/revision"),
        health: text("/status/health/status"),
        refresh: app
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("argocd.argoproj.io/refresh"))
            .cloned(),
    }
}

/// `namespace/name`, or with `hash` an FNV-1a digest of it (names can say more than a
/// trace should).
fn name_of(app: &DynamicObject, hash: bool) -> String {
    let name = format!(
        "{}/{}",
        app.metadata.namespace.as_deref().unwrap_or_default(),
        app.metadata.name.as_deref().unwrap_or_default()
    );
    if !hash {
        return name;
    }
    let digest = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("app-{digest:016x}")
}

/// The changes from `before` to `after` of one app, in a fixed order.
fn changes(before: &Seen, after: &Seen) -> Vec<Change> {
    let mut out = Vec::new();
    if after.revision != before.revision {
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
    out
}

/// An app seen in `now` state: `added` the first time, its changes afterwards.
fn observe(
    apps: &mut BTreeMap<String, Seen>,
    records: &mut Vec<Record>,
    at_ms: u64,
    name: String,
    now: Seen,
) {
    match apps.get(&name) {
        // The state an app is first seen in is part of being added (the world's own add
        // syncs it); only later changes are records.
        None => records.push(Record {
            at_ms,
            app: name.clone(),
            change: Change::Added,
        }),
        Some(before) => {
            for change in changes(before, &now) {
                records.push(Record {
                    at_ms,
                    app: name.clone(),
                    change,
                });
            }
        }
    }
    apps.insert(name, now);
}

/// Records `duration` of the cluster `client` reaches; `ready` is told when the apps that
/// exist at the start have been listed (changes from then on are records).
pub async fn record(
    client: kube::Client,
    duration: Duration,
    hash: bool,
    mut ready: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<Trace, RecordError> {
    let api: Api<DynamicObject> = Api::all_with(client, &application_resource());
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    let started = Instant::now(); // determinism: real-env (recording a real cluster)
    let mut apps: BTreeMap<String, Seen> = BTreeMap::new();
    let mut records = Vec::new();
    let mut initial = true;
    let mut relisted: std::collections::BTreeSet<String> = Default::default();
    let mut errors = 0;
    let deadline = tokio::time::Instant::now() + duration; // determinism: real-env (recording a real cluster)
    loop {
        let event = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) | Ok(None) => break,
            Ok(Some(event)) => event,
        };
        let at_ms = if initial {
            0
        } else {
            started.elapsed().as_millis() as u64
        };
        let mut push = |app: &str, change: Change| {
            records.push(Record {
                at_ms,
                app: app.to_string(),
                change,
            })
        };
        match event {
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitApply(app)) => {
                let name = name_of(&app, hash);
                relisted.insert(name.clone());
                observe(&mut apps, &mut records, at_ms, name, seen(&app));
            }
            Ok(watcher::Event::Apply(app)) => {
                observe(
                    &mut apps,
                    &mut records,
                    at_ms,
                    name_of(&app, hash),
                    seen(&app),
                );
            }
            Ok(watcher::Event::InitDone) => {
                // After a relist, apps it did not return are gone.
                let gone: Vec<String> = apps
                    .keys()
                    .filter(|k| !relisted.contains(*k))
                    .cloned()
                    .collect();
                for name in gone {
                    apps.remove(&name);
                    push(&name, Change::Deleted);
                }
                initial = false;
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
            }
            Ok(watcher::Event::Delete(app)) => {
                let name = name_of(&app, hash);
                if apps.remove(&name).is_some() {
                    push(&name, Change::Deleted);
                }
            }
            Err(e) => {
                errors += 1;
                if initial && errors > 10 {
                    return Err(RecordError::Watch(e.to_string()));
                }
                tracing::warn!(error = %e, "the Application watch failed; changes until it resumes may be missing");
                let pause = tokio::time::Instant::now() + Duration::from_millis(500); // determinism: real-env (recording)
                tokio::time::sleep_until(pause.min(deadline)).await;
            }
        }
    }
    Ok(Trace {
        header: Header {
            format: FORMAT.into(),
            duration_ms: duration.as_millis() as u64,
            hashed: hash,
        },
        records,
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
        };
        let after = Seen {
            revision: Some("b".into()),
            health: Some("Healthy".into()),
            refresh: Some("hard".into()),
        };
        assert_eq!(
            changes(&before, &after),
            [
                Change::Revision {
                    revision: "b".into()
                },
                Change::Refresh
            ]
        );
        assert!(changes(&after, &after).is_empty());
        let mut app = DynamicObject::new("a", &application_resource()).within("argocd");
        assert_eq!(name_of(&app, false), "argocd/a");
        let hashed = name_of(&app, true);
        assert!(hashed.starts_with("app-") && !hashed.contains("argocd"));
        app.metadata.name = Some("b".into());
        assert_ne!(
            name_of(&app, true),
            hashed,
            "different apps, different hashes"
        );
    }
}
