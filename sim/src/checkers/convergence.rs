//! `probe_matches_apiserver`: after the calm phase the probe's view equals the API server.

use std::collections::BTreeSet;

use serde_json::json;

use super::{Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;
use crate::world::probe::digest;
use orrery_system::observe::WorldEvent;

/// Remembers the probe's last reported view digest.
#[derive(Default)]
pub struct ProbeMatches {
    last_view: Option<(u64, usize, String)>,
    /// The view rebuilt from events (`Init` … `InitDone` swaps, `Apply`/`Delete` edit).
    rebuilt: std::collections::BTreeMap<String, String>,
    buffer: Option<std::collections::BTreeMap<String, String>>,
}

impl Checker for ProbeMatches {
    fn name(&self) -> &'static str {
        "probe_matches_apiserver"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        match event.world()? {
            WorldEvent::ProbeView { count, digest } => {
                self.last_view = Some((event.at_ms, *count as usize, digest.clone()));
            }
            WorldEvent::ProbeInit => self.buffer = Some(Default::default()),
            WorldEvent::ProbeInitApply { name, rv } => {
                if let Some(buffer) = &mut self.buffer {
                    buffer.insert(name.clone(), rv.clone());
                }
            }
            WorldEvent::ProbeInitDone => {
                if let Some(buffer) = self.buffer.take() {
                    self.rebuilt = buffer;
                }
            }
            WorldEvent::ProbeApply { name, rv } => {
                self.rebuilt.insert(name.clone(), rv.clone());
            }
            WorldEvent::ProbeDelete { name, .. } => {
                self.rebuilt.remove(name);
            }
            _ => {}
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let truth = digest(state.name_rvs());
        let rebuilt: Vec<(String, String)> = self
            .rebuilt
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let view = self
            .last_view
            .as_ref()
            .map(|(_, count, digest)| (*count, digest.clone()));
        if view.as_ref() == Some(&truth) && digest(rebuilt.clone()) == truth {
            return None;
        }
        let truth_set: BTreeSet<_> = state.name_rvs().into_iter().collect();
        let seen_set: BTreeSet<_> = rebuilt.into_iter().collect();
        let missing: Vec<_> = truth_set
            .difference(&seen_set)
            .take(5)
            .map(|(n, rv)| format!("{n}@{rv}"))
            .collect();
        let extra: Vec<_> = seen_set
            .difference(&truth_set)
            .take(5)
            .map(|(n, rv)| format!("{n}@{rv}"))
            .collect();
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Liveness,
            at_ms: state.end_ms,
            host: "probe".into(),
            details: json!({
                "apiserver": {"count": truth.0, "digest": truth.1},
                "probe_view": view.map(|(c, d)| json!({"count": c, "digest": d})),
                "missing_or_stale_examples": missing,
                "extra_or_stale_examples": extra,
            }),
        })
    }
}
