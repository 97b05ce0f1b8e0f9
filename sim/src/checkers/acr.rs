//! The change-revision invariants (issue 14):
//!
//! - `change_revision_correct` (safety): after the calm phase every app's change revision
//!   is the one its last finished sync should carry. The truth is recorded by the simulated
//!   Argo CD when the sync finishes (`argocd.synced`'s `expected`): the newest commit on the
//!   first-parent chain `previous..current` whose changes touch the app's refresh paths, or
//!   none. The calm phase gives any controller time to catch up, so a difference left then
//!   is a change revision that will never be right.
//! - `no_spurious_change` (safety): every change revision the ACR controller writes is a
//!   commit that touched the app's refresh paths — the platform and notifications never
//!   attribute a commit to an app it did not change.

use std::collections::BTreeMap;

use serde_json::json;

use orrery_system::observe::WorldEvent;

use super::{Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;

/// Apps whose change revision differs from their last sync's expected one, with both
/// values (`app → (expected, actual)`).
pub fn wrong_change_revisions(
    expected: &BTreeMap<String, String>,
    state: &FinalState,
) -> Vec<(String, String, String)> {
    state
        .apps
        .iter()
        .filter_map(|app| {
            let want = expected.get(&app.key)?;
            (*want != app.change_revision)
                .then(|| (app.key.clone(), want.clone(), app.change_revision.clone()))
        })
        .collect()
}

/// `change_revision_correct`.
#[derive(Default)]
pub struct ChangeRevisionCorrect {
    /// The expected change revision of each app's last finished sync.
    expected: BTreeMap<String, String>,
}

impl Checker for ChangeRevisionCorrect {
    fn name(&self) -> &'static str {
        "change_revision_correct"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        if let Some(WorldEvent::Synced { app, expected, .. }) = event.world() {
            self.expected.insert(app.clone(), expected.clone());
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let wrong = wrong_change_revisions(&self.expected, state);
        let (app, want, have) = wrong.first()?.clone();
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: state.end_ms,
            host: "argocd".into(),
            details: json!({
                "reason": format!(
                    "{} of {} synced apps carry a wrong change revision; {app} has {:?}, its last sync should carry {:?}",
                    wrong.len(),
                    self.expected.len(),
                    have,
                    want,
                ),
                "wrong": wrong.len(),
                "app": app,
                "expected": want,
                "actual": have,
            }),
        })
    }
}

/// `no_spurious_change`.
pub struct NoSpuriousChange;

impl Checker for NoSpuriousChange {
    fn name(&self) -> &'static str {
        "no_spurious_change"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let spurious: Vec<_> = state.attributions.iter().filter(|a| !a.touches).collect();
        let first = spurious.first()?;
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: first.at_ms,
            host: "acr".into(),
            details: json!({
                "reason": format!(
                    "{} change revision(s) written for commits that did not touch the app; first: {} attributed to {}",
                    spurious.len(),
                    first.revision,
                    first.app,
                ),
                "spurious": spurious.len(),
                "app": first.app,
                "revision": first.revision,
            }),
        })
    }
}
