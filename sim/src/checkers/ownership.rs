//! Shard ownership as the replicas themselves decide it, rebuilt from their observations
//! (`reporter.start` config, `reporter.membership`, harness `host.start`/`host.stop`) with
//! the same pure functions the reporter uses — the checker never reads reporter internals.
//!
//! - `single_owner` (checker): at the end every app has exactly one live owner.
//! - [`analyse`]: over the whole run, the fraction of apps that changed owner at each
//!   change, and the longest window an app had no live owner.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;

use orrery_system::core::Variant;
use orrery_system::runtime::app_reporter::shard;

use super::{Checker, Class, FinalState, Violation};
use crate::trace::{HarnessEvent, TraceEvent};
use orrery_system::observe::ReporterEvent;

/// What one replica believes, as last observed.
#[derive(Clone, Debug, PartialEq)]
struct Belief {
    variant: Variant,
    shard: Option<u32>,
    replicas: u32,
    members: Vec<String>,
}

/// Replica → belief, for replicas whose host is up.
#[derive(Clone, Debug, Default)]
struct Replicas {
    live: BTreeMap<String, Belief>,
}

impl Replicas {
    /// Folds one event in; returns true when ownership may have changed.
    fn apply(&mut self, event: &TraceEvent) -> bool {
        match (event.reporter(), event.harness()) {
            (
                Some(ReporterEvent::Start {
                    replica,
                    variant,
                    shard,
                    replicas,
                }),
                _,
            ) => {
                let belief = Belief {
                    variant: *variant,
                    shard: *shard,
                    replicas: *replicas,
                    members: Vec::new(),
                };
                self.live.insert(replica.clone(), belief);
                true
            }
            (
                Some(ReporterEvent::Membership {
                    replica, members, ..
                }),
                _,
            ) => match self.live.get_mut(replica) {
                Some(belief) => {
                    belief.members = members.clone();
                    true
                }
                None => false,
            },
            (_, Some(HarnessEvent::HostStop { host, .. })) => self.live.remove(host).is_some(),
            _ => false,
        }
    }

    /// The live replicas that process `app`.
    fn owners(&self, app: &str) -> Vec<&str> {
        self.live
            .iter()
            .filter(|(me, b)| match b.variant {
                Variant::Faithful => shard::faithful_owns(app, b.shard, b.replicas),
                Variant::Hardened => shard::rendezvous_owner(app, &b.members) == Some(me.as_str()),
            })
            .map(|(me, _)| me.as_str())
            .collect()
    }
}

/// `single_owner`: every app has exactly one live owner at the end.
#[derive(Default)]
pub struct SingleOwner {
    replicas: Replicas,
}

impl Checker for SingleOwner {
    fn name(&self) -> &'static str {
        "single_owner"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        self.replicas.apply(event);
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let mut orphaned = Vec::new();
        let mut doubled = Vec::new();
        for app in &state.apps {
            match self.replicas.owners(&app.name).len() {
                0 => orphaned.push(app.name.clone()),
                1 => {}
                _ => doubled.push(app.name.clone()),
            }
        }
        if orphaned.is_empty() && doubled.is_empty() {
            return None;
        }
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: state.end_ms,
            host: "reporter".into(),
            details: json!({
                "orphaned": orphaned.len(),
                "doubly_owned": doubled.len(),
                "orphaned_examples": orphaned.iter().take(5).collect::<Vec<_>>(),
                "doubly_owned_examples": doubled.iter().take(5).collect::<Vec<_>>(),
                "live_replicas": self.replicas.live.keys().collect::<Vec<_>>(),
            }),
        })
    }
}

/// One ownership change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    /// Simulated milliseconds.
    pub at_ms: u64,
    /// The event that caused it.
    pub cause: String,
    /// Fraction of apps whose owner set changed.
    pub moved_fraction: f64,
    /// Apps with no live owner after it.
    pub orphaned: usize,
    /// Apps with more than one live owner after it.
    pub doubly_owned: usize,
}

/// Ownership over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Analysis {
    /// Every change, in time order.
    pub changes: Vec<Change>,
    /// Longest time any app had no live owner (ms), counting to the end if never resolved.
    pub longest_orphan_window_ms: u64,
    /// Apps that were ever without a live owner for a non-zero time after every app first had one.
    pub apps_ever_orphaned: usize,
}

/// Replays ownership over the run for the apps alive at the end.
pub fn analyse(events: &[TraceEvent], apps: &[String], end_ms: u64) -> Analysis {
    let mut replicas = Replicas::default();
    let mut owners: Vec<Vec<String>> = vec![Vec::new(); apps.len()];
    let mut orphaned_since: Vec<Option<u64>> = vec![None; apps.len()];
    let mut ever: Vec<bool> = vec![false; apps.len()];
    let mut established = false;
    let mut analysis = Analysis::default();
    for event in events {
        if !replicas.apply(event) {
            continue;
        }
        let mut moved = 0;
        let (mut orphaned, mut doubled) = (0, 0);
        for (i, app) in apps.iter().enumerate() {
            let now: Vec<String> = replicas.owners(app).into_iter().map(String::from).collect();
            if now != owners[i] {
                moved += 1;
            }
            match now.len() {
                0 => {
                    orphaned += 1;
                    if established && orphaned_since[i].is_none() {
                        orphaned_since[i] = Some(event.at_ms);
                    }
                }
                n => {
                    if n > 1 {
                        doubled += 1;
                    }
                    if let Some(since) = orphaned_since[i].take() {
                        // A restart that rejoins within the same instant orphans nothing.
                        ever[i] |= event.at_ms > since;
                        analysis.longest_orphan_window_ms =
                            analysis.longest_orphan_window_ms.max(event.at_ms - since);
                    }
                }
            }
            owners[i] = now;
        }
        // Orphan windows count only once every app has had an owner (not during start-up).
        established = established || orphaned == 0;
        let who = match (event.reporter(), event.harness()) {
            (Some(ReporterEvent::Start { replica, .. }), _)
            | (Some(ReporterEvent::Membership { replica, .. }), _) => replica.as_str(),
            (_, Some(HarnessEvent::HostStop { host, .. })) => host.as_str(),
            _ => "?",
        };
        let cause = format!("{} {who}", event.kind());
        analysis.changes.push(Change {
            at_ms: event.at_ms,
            cause,
            moved_fraction: if apps.is_empty() {
                0.0
            } else {
                (moved as f64 / apps.len() as f64 * 1e4).round() / 1e4
            },
            orphaned,
            doubly_owned: doubled,
        });
    }
    for (i, since) in orphaned_since.into_iter().enumerate() {
        if let Some(since) = since {
            ever[i] = true;
            analysis.longest_orphan_window_ms =
                analysis.longest_orphan_window_ms.max(end_ms - since);
        }
    }
    analysis.apps_ever_orphaned = ever.iter().filter(|e| **e).count();
    analysis
}
