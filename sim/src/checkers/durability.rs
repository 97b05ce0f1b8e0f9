//! `no_acknowledged_event_lost` (safety): every event the events API answered 2xx for
//! reaches the read model — handled by the event handler, however many times the platform
//! crashed in between. An event acknowledged at least [`GRACE`] before the end of the run
//! and never handled is lost: the calm phase gives a backlog time to drain, and a crash that
//! lost an event never gives it back.
//!
//! Judged from the platform's outside: what the API acknowledged (`platform.acknowledged`)
//! against what the handler projected (`platform.event`, `platform.resource_event`,
//! `platform.cluster_event`), joined by the bus's sequence number (a world has one host
//! with the platform role, so one bus numbers every event). An acknowledgement is observed
//! as the API writes its 2xx: a crash between the two counts one the client never saw.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;

use orrery_system::observe::PlatformEvent;

use super::{Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;

/// How long before the end an acknowledged event may still be on its way.
pub const GRACE: Duration = Duration::from_secs(30);

/// Most lost events a violation names (it counts them all).
const NAMED: usize = 10;

/// An acknowledged event not handled yet.
struct Owed {
    at_ms: u64,
    host: String,
    object: String,
}

/// The checker: events owed to the read model, and events handled before their
/// acknowledgement was seen (a confirm may follow the handling).
#[derive(Default)]
pub struct NoAcknowledgedEventLost {
    owed: BTreeMap<u64, Owed>,
    handled_early: BTreeSet<u64>,
}

impl NoAcknowledgedEventLost {
    /// Acknowledged events not handled, of those acknowledged at least [`GRACE`] before
    /// `end_ms` (what the invariant judges at a run's end).
    pub fn owed_by(&self, end_ms: u64) -> usize {
        self.lost(end_ms).len()
    }

    fn lost(&self, end_ms: u64) -> Vec<(&u64, &Owed)> {
        let judged = end_ms.saturating_sub(GRACE.as_millis() as u64);
        self.owed
            .iter()
            .filter(|(_, owed)| owed.at_ms <= judged)
            .collect()
    }

    fn acknowledged(&mut self, seq: u64, object: &str, event: &TraceEvent) {
        if !self.handled_early.remove(&seq) {
            let owed = Owed {
                at_ms: event.at_ms,
                host: event.host.clone(),
                object: object.to_string(),
            };
            self.owed.insert(seq, owed);
        }
    }

    fn handled(&mut self, seq: u64) {
        if self.owed.remove(&seq).is_none() {
            self.handled_early.insert(seq);
        }
    }
}

impl Checker for NoAcknowledgedEventLost {
    fn name(&self) -> &'static str {
        "no_acknowledged_event_lost"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        match event.platform()? {
            PlatformEvent::Acknowledged { seq, object } => self.acknowledged(*seq, object, event),
            PlatformEvent::Event { seq, .. }
            | PlatformEvent::ResourceEvent { seq, .. }
            | PlatformEvent::DuplicateKey { seq, .. }
            | PlatformEvent::ClusterEvent { seq, .. } => self.handled(*seq),
            _ => {}
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let lost = self.lost(state.end_ms);
        let (_, first) = lost.iter().min_by_key(|(seq, owed)| (owed.at_ms, **seq))?;
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: first.at_ms,
            host: first.host.clone(),
            details: json!({
                "key": first.object,
                "lost": lost.len(),
                "why": "acknowledged (2xx) by the events API, never projected into the read model",
                "events": lost
                    .iter()
                    .take(NAMED)
                    .map(|(seq, owed)| json!({"seq": seq, "object": owed.object, "acknowledged_ms": owed.at_ms}))
                    .collect::<Vec<_>>(),
            }),
        })
    }
}
