//! `platform_converges`: after the calm phase the platform shows every app as the API
//! server has it. `platform_resources_never_older`: it never shows an app's resources from
//! an older deployment than it showed them from before.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use orrery_system::platform::events::read_model::AppState;

use super::{AppTruth, Checker, Class, FinalState, Violation};

/// Keys of apps the platform shows differently from the API server: missing, stale, or
/// still shown (not deleted) although gone.
pub fn stale_apps(apps: &[AppTruth], reported: &BTreeMap<String, AppState>) -> Vec<String> {
    let mut stale: Vec<String> = apps
        .iter()
        .filter(|a| {
            shown_differently(
                reported.get(&a.key),
                &a.sync_status,
                &a.revision,
                &a.health_status,
            )
        })
        .map(|a| a.key.clone())
        .collect();
    let live: std::collections::BTreeSet<&str> = apps.iter().map(|a| a.key.as_str()).collect();
    stale.extend(
        reported
            .iter()
            .filter(|(k, r)| !r.deleted && !live.contains(k.as_str()))
            .map(|(k, _)| k.clone()),
    );
    stale.sort();
    stale
}

/// Whether the platform shows an app differently from the API server's sync status,
/// revision and health: not at all, as deleted, or with another value.
pub fn shown_differently(
    reported: Option<&AppState>,
    sync_status: &str,
    revision: &str,
    health_status: &str,
) -> bool {
    match reported {
        Some(r) => {
            r.deleted
                || r.sync_status != sync_status
                || r.revision != revision
                || r.health_status != health_status
        }
        None => true,
    }
}

/// The number of keys [`stale_apps`] would return, from borrowed views of the API server's
/// apps (`(key, sync status, revision, health)`), without building [`AppTruth`]s.
pub fn stale_count<'a>(
    apps: impl IntoIterator<Item = (&'a str, &'a str, &'a str, &'a str)>,
    reported: &BTreeMap<String, AppState>,
) -> (u64, u64) {
    let (mut live, mut stale, mut shown_live) = (0u64, 0u64, 0u64);
    // The apps usually come in the order of `reported`'s keys (one namespace): each entry is
    // found by stepping a cursor forward instead of searching the whole map. A key the
    // cursor has passed (apps out of that order) is searched for.
    let mut cursor = reported.iter().peekable();
    for (key, sync_status, revision, health_status) in apps {
        live += 1;
        while cursor.next_if(|(k, _)| k.as_str() < key).is_some() {}
        let entry = match cursor.peek() {
            Some((k, r)) if k.as_str() == key => Some(*r),
            _ => reported.get(key),
        };
        if entry.is_some_and(|r| !r.deleted) {
            shown_live += 1;
        }
        if shown_differently(entry, sync_status, revision, health_status) {
            stale += 1;
        }
    }
    // Shown (not deleted) but gone from the API server.
    let shown = reported.values().filter(|r| !r.deleted).count() as u64;
    (live, stale + shown - shown_live)
}

/// A violation of `invariant` seen on the platform at the end of the run.
fn on_platform(invariant: &str, class: Class, state: &FinalState, details: Value) -> Violation {
    Violation {
        invariant: invariant.into(),
        class,
        at_ms: state.end_ms,
        host: "platform".into(),
        details,
    }
}

/// The checker (stateless: it reads the final state).
pub struct PlatformConverges;

impl Checker for PlatformConverges {
    fn name(&self) -> &'static str {
        "platform_converges"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let stale = stale_apps(&state.apps, &state.reported);
        if stale.is_empty() {
            return None;
        }
        let example = |key: &String| {
            let truth = state.apps.iter().find(|a| &a.key == key);
            json!({
                "app": key,
                "apiserver": truth.map(|t| json!({"sync": t.sync_status, "revision": t.revision, "health": t.health_status})),
                "platform": state.reported.get(key).map(|r| json!({"sync": r.sync_status, "revision": r.revision, "health": r.health_status, "deleted": r.deleted, "rv": r.resource_version})),
            })
        };
        Some(on_platform(
            self.name(),
            Class::Safety,
            state,
            json!({
                "apps": state.apps.len(),
                "stale_or_missing": stale.len(),
                "examples": stale.iter().take(5).map(example).collect::<Vec<_>>(),
            }),
        ))
    }
}

/// Liveness: after the calm phase, no app whose destination cluster is still registered is
/// `Unknown` — neither in Argo CD (the comparison recovered once the cluster answered again)
/// nor on the platform (the recovery reached it). Apps on a cluster whose registration was
/// removed are `Unknown` by right and are not counted.
pub struct NoAppStuckUnknown;

impl Checker for NoAppStuckUnknown {
    fn name(&self) -> &'static str {
        "no_app_stuck_unknown"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let stuck: Vec<Value> = state
            .apps
            .iter()
            .filter(|a| !state.unregistered.contains(&a.destination))
            .filter_map(|a| {
                let reported = state.reported.get(&a.key);
                let in_argocd = a.health_status == "Unknown" || a.sync_status == "Unknown";
                let on_platform = reported.is_some_and(|r| {
                    !r.deleted && (r.health_status == "Unknown" || r.sync_status == "Unknown")
                });
                (in_argocd || on_platform).then(|| {
                    json!({"app": a.key, "destination": a.destination,
                           "argocd": {"sync": a.sync_status, "health": a.health_status},
                           "platform": reported.map(|r| json!({"sync": r.sync_status, "health": r.health_status}))})
                })
            })
            .collect();
        if stuck.is_empty() {
            return None;
        }
        Some(on_platform(
            self.name(),
            Class::Liveness,
            state,
            json!({"stuck_apps": stuck.len(), "examples": stuck.iter().take(5).collect::<Vec<_>>()}),
        ))
    }
}

/// Liveness: after the calm phase, the platform shows no app with the reporter's Argo CD
/// read errors (events of type `transient`: 401s of a revoked token, an unreachable
/// server) — once Argo CD answers again, every app's last report is a clean one.
pub struct NoStaleReadErrors;

impl Checker for NoStaleReadErrors {
    fn name(&self) -> &'static str {
        "no_stale_read_errors"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let shown: Vec<Value> = state
            .apps
            .iter()
            .filter_map(|a| {
                let r = state.reported.get(&a.key)?;
                (!r.deleted && r.read_errors > 0)
                    .then(|| json!({"app": a.key, "read_errors": r.read_errors, "rv": r.resource_version}))
            })
            .collect();
        if shown.is_empty() {
            return None;
        }
        Some(on_platform(
            self.name(),
            Class::Liveness,
            state,
            json!({"apps_with_read_errors": shown.len(), "examples": shown.iter().take(5).collect::<Vec<_>>()}),
        ))
    }
}

/// `platform_resources_never_older`: the deployment (the app's history id) each resource
/// of an app was last shown from, keyed by the resource's `<app ns>/<app>/…` key.
///
/// The platform orders app events by resourceVersion and ignores older ones, but a resource
/// event carries no version it could order by: the newest report wins
/// (`read_model::ReadModel::apply_resource`). So a runtime that reports an app's older
/// state — its reporter relisted from an API server cache behind the store
/// (kubernetes#59848) — moves the app's resources back to an older deployment on the
/// platform, although the app event itself is ignored as stale.
#[derive(Default)]
pub struct ResourcesNeverOlder {
    shown: BTreeMap<String, i64>,
}

impl ResourcesNeverOlder {
    /// The app name inside a resource key (`<app ns>/<app>/<group>/<kind>/<ns>/<name>`).
    fn app_of(resource: &str) -> &str {
        resource.split('/').nth(1).unwrap_or("")
    }
}

impl Checker for ResourcesNeverOlder {
    fn name(&self) -> &'static str {
        "platform_resources_never_older"
    }

    fn on_event(&mut self, event: &crate::trace::TraceEvent) -> Option<Violation> {
        use orrery_system::observe::{PlatformEvent, Projection};
        match event.platform()? {
            // An app shown deleted ends its history: one created again under its name
            // starts from history id 0. (The event names the app without its namespace,
            // so an app of that name in any namespace is forgotten; inferred harmless.)
            PlatformEvent::Event {
                app,
                deleted: true,
                applied: Projection::Updated,
                ..
            } => {
                self.shown
                    .retain(|key, _| Self::app_of(key) != app.as_str());
                None
            }
            PlatformEvent::ResourceEvent {
                resource,
                history_id,
                ..
            } => {
                let last = self.shown.entry(resource.clone()).or_insert(*history_id);
                if *history_id < *last {
                    return Some(Violation {
                        invariant: "platform_resources_never_older".into(),
                        class: Class::Safety,
                        at_ms: event.at_ms,
                        host: event.host.clone(),
                        details: json!({
                            "resource": resource,
                            "shown_history_id": *last,
                            "then_history_id": *history_id,
                        }),
                    });
                }
                *last = *history_id;
                None
            }
            _ => None,
        }
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}
