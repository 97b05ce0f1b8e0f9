//! `probe_rv_monotonic`: the probe never sees an object's resourceVersion go backwards.
//! (RVs are one global increasing counter, so even a re-created object has a larger RV.)

use std::collections::BTreeMap;

use serde_json::json;

use super::{Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;
use orrery_system::observe::WorldEvent;

/// Highest RV seen per object name.
#[derive(Default)]
pub struct RvMonotonic {
    highest: BTreeMap<String, u64>,
}

impl Checker for RvMonotonic {
    fn name(&self) -> &'static str {
        "probe_rv_monotonic"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        let (name, rv) = match event.world()? {
            WorldEvent::ProbeApply { name, rv }
            | WorldEvent::ProbeInitApply { name, rv }
            | WorldEvent::ProbeDelete { name, rv } => (name.clone(), rv),
            _ => return None,
        };
        let kind = event.kind();
        // An object without an RV cannot go backwards; nothing to compare.
        let rv: u64 = rv.parse().ok()?;
        let previous = self.highest.get(&name).copied().unwrap_or(0);
        if rv < previous {
            return Some(Violation {
                invariant: self.name().into(),
                class: Class::Safety,
                at_ms: event.at_ms,
                host: event.host.clone(),
                details: json!({"object": name, "seen_rv": rv, "previously_seen_rv": previous, "event": kind}),
            });
        }
        self.highest.insert(name, rv);
        None
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}
