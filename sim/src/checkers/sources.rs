//! What the platform shows of an app's Git side (issue 14: the source server and the
//! reporters' app versions and revisions metadata):
//!
//! - `app_version_reported` (liveness): after the calm phase, every app the platform shows
//!   at its current sync shows the app version Git holds at the app's last sync
//!   (`Chart.yaml`'s `appVersion` under its path at `syncResult.revision`).
//! - `change_revision_reported` (liveness): after the calm phase, every app the platform
//!   shows at its current sync, whose sync has a change revision, shows that
//!   commit's author and message (the reporter's `app.meta.revisions-metadata`).
//!
//! An app the platform shows at another sync status or revision is `platform_converges`'s
//! concern and is skipped here, so each invariant names one defect.

use serde_json::json;

use super::{AppTruth, Checker, Class, FinalState, Violation};
use orrery_system::platform::events::read_model::AppState;

/// Apps the platform shows with the API server's sync status and revision: (truth, shown).
/// (A later resourceVersion that only moved `reconciledAt` is not re-sent, by design.)
fn current(state: &FinalState) -> impl Iterator<Item = (&AppTruth, &AppState)> {
    state.apps.iter().filter_map(|app| {
        let shown = state.reported.get(&app.key)?;
        (!shown.deleted && shown.revision == app.revision && shown.sync_status == app.sync_status)
            .then_some((app, shown))
    })
}

/// Apps shown at their current sync without the app version Git has.
fn without_version(state: &FinalState) -> Vec<(&AppTruth, &AppState)> {
    current(state)
        .filter(|(app, shown)| !app.app_version.is_empty() && shown.app_version != app.app_version)
        .collect()
}

/// Apps shown at their current sync without their change revision's commit.
fn without_change_commit(state: &FinalState) -> Vec<(&AppTruth, &AppState)> {
    current(state)
        .filter(|(app, shown)| {
            app.change_commit.as_ref().is_some_and(|(author, message)| {
                !shown.change_commits.iter().any(|c| {
                    c.revision == app.change_revision
                        && c.author == *author
                        && c.message == *message
                })
            })
        })
        .collect()
}

/// How many apps each invariant would name: (without version, without change commit).
pub fn missing(state: &FinalState) -> (usize, usize) {
    (
        without_version(state).len(),
        without_change_commit(state).len(),
    )
}

/// A liveness violation on the platform at the end of the run.
fn liveness(invariant: &str, state: &FinalState, details: serde_json::Value) -> Violation {
    Violation {
        invariant: invariant.into(),
        class: Class::Liveness,
        at_ms: state.end_ms,
        host: "platform".into(),
        details,
    }
}

/// `app_version_reported`.
pub struct AppVersionReported;

impl Checker for AppVersionReported {
    fn name(&self) -> &'static str {
        "app_version_reported"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let wrong = without_version(state);
        let (app, shown) = wrong.first()?;
        Some(liveness(
            self.name(),
            state,
            json!({
                "reason": format!(
                    "{} apps show another app version than Git holds at their sync; {} shows {:?}, Git has {:?}",
                    wrong.len(), app.key, shown.app_version, app.app_version
                ),
                "wrong": wrong.len(),
                "app": app.key,
                "expected": app.app_version,
                "actual": shown.app_version,
            }),
        ))
    }
}

/// `change_revision_reported`.
pub struct ChangeRevisionReported;

impl Checker for ChangeRevisionReported {
    fn name(&self) -> &'static str {
        "change_revision_reported"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let wrong = without_change_commit(state);
        let (app, shown) = wrong.first()?;
        Some(liveness(
            self.name(),
            state,
            json!({
                "reason": format!(
                    "{} apps with a change revision do not show its commit; {} has change revision {} and shows {} change commits",
                    wrong.len(), app.key, app.change_revision, shown.change_commits.len()
                ),
                "wrong": wrong.len(),
                "app": app.key,
                "change_revision": app.change_revision,
            }),
        ))
    }
}
