//! Tunnel invariants, from what clients, the gateway and the runtime recorded.
//!
//! - `requests_answered` (safety): every client request is answered — success or a clear
//!   error — within [`ANSWER_BOUND`]; a client that waited [`CLIENT_TIMEOUT`] saw a hang.
//! - `executed_at_most_once` (safety): no state-changing request (idempotency key) is
//!   executed twice by the runtime, however often it was retried.
//! - `all_reconnect` (liveness): after the tunnel server restarts (or the calm phase
//!   starts), every runtime that had a tunnel has it back within [`RECONNECT_BOUND`]; a
//!   runtime whose client gave up counts as stuck.
//! - `tunnel_recovers` (liveness): after a repair, a restart or the calm phase, requests
//!   succeed through the tunnel again within [`RECOVERY_BOUND`] (unless a new fault hits first).
//!
//! A fault point firing (`buggify.fired`) is a new fault too: a running recovery clock of
//! either liveness invariant starts again from it. Fault points are silent in the calm phase,
//! so the calm phase's clocks judge a healed system.
//!
//! [`CLIENT_TIMEOUT`]: crate::world::tunnel::CLIENT_TIMEOUT

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use super::{Checker, Class, FinalState, Violation};
use crate::faults::Fault;
use crate::trace::{Entry, HarnessEvent, TraceEvent};
use orrery_system::observe::{FaultPointEvent, Observation};
use orrery_system::observe::{RequestOutcome, TunnelEvent, WorldEvent};

/// The fault point that fired at `event`, if one did.
fn fault_point(event: &TraceEvent) -> Option<orrery_system::env::Point> {
    match &event.entry {
        Entry::Observed(Observation::FaultPoint(FaultPointEvent::Fired { point })) => Some(*point),
        _ => None,
    }
}

/// A running clock `(start, deadline, cause)` restarted by a fault point firing at `event`.
fn restarted(
    clock: &Option<(u64, u64, String)>,
    event: &TraceEvent,
    bound: Duration,
) -> Option<(u64, u64, String)> {
    let point = fault_point(event)?;
    let (_, _, cause) = clock.as_ref()?;
    Some((
        event.at_ms,
        event.at_ms + bound.as_millis() as u64,
        format!("{cause}, then fault point {point} at {} ms", event.at_ms),
    ))
}

/// What a harness event means to the tunnel's recovery clocks.
enum Clock {
    /// A repair, a restart or the calm phase with no link left partitioned: recovery is due
    /// within the bound.
    Start(&'static str),
    /// A new partition or crash: the running clock no longer applies.
    Stop,
}

/// The links partitioned now. A recovery bound applies only once none is: a tunnel cannot
/// come back through a link that is still cut (a restart during a partition starts no
/// clock; the repair that clears the last partition does).
/// It also keeps the hosts crashed and not restarted yet, for a clock that must wait for them
/// too (`tunnel_recovers`).
#[derive(Default)]
struct Links(BTreeSet<[String; 2]>, BTreeSet<String>);

impl Links {
    /// Folds in a harness event; returns what it means to a recovery clock.
    fn clock(&mut self, event: &TraceEvent) -> Option<Clock> {
        let key = |[a, b]: &[String; 2]| {
            if a <= b {
                [a.clone(), b.clone()]
            } else {
                [b.clone(), a.clone()]
            }
        };
        let start = |links: &Links, cause| links.0.is_empty().then_some(Clock::Start(cause));
        match event.harness()? {
            HarnessEvent::Fault(Fault::Partition(link)) => {
                self.0.insert(key(link));
                Some(Clock::Stop)
            }
            HarnessEvent::Fault(Fault::Crash(host)) => {
                self.1.insert(host.clone());
                Some(Clock::Stop)
            }
            HarnessEvent::Fault(Fault::Repair(link)) => {
                self.0.remove(&key(link));
                start(self, "fault.repair")
            }
            HarnessEvent::Fault(Fault::Restart(host)) => {
                self.1.remove(host);
                start(self, "fault.restart")
            }
            HarnessEvent::CalmStart { .. } => {
                self.0.clear();
                self.1.clear();
                Some(Clock::Start("calm.start"))
            }
            _ => None,
        }
    }

    /// Whether a crashed host has not been restarted yet.
    fn host_down(&self) -> bool {
        !self.1.is_empty()
    }
}

/// Longest acceptable wait for any answer: the platform's 10 s request deadline plus slack.
pub const ANSWER_BOUND: Duration = Duration::from_secs(15);
/// Longest acceptable time for a whole fleet to reconnect after the tunnel server restarts.
pub const RECONNECT_BOUND: Duration = Duration::from_secs(60);
/// Longest acceptable time from a repair to the tunnel being back.
pub const RECOVERY_BOUND: Duration = Duration::from_secs(30);

/// `requests_answered`.
#[derive(Default)]
pub struct RequestsAnswered;

impl Checker for RequestsAnswered {
    fn name(&self) -> &'static str {
        "requests_answered"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        let Some(
            request @ WorldEvent::Request {
                outcome,
                latency_ms,
                ..
            },
        ) = event.world()
        else {
            return None;
        };
        let hung = *outcome == RequestOutcome::Hung;
        (hung || *latency_ms > ANSWER_BOUND.as_millis() as u64).then(|| Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: event.at_ms,
            host: event.host.clone(),
            details: json!({"request": request, "bound_ms": ANSWER_BOUND.as_millis() as u64, "why": if hung { "no answer at all (hung)" } else { "answered too late" }}),
        })
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}

/// `executed_at_most_once`.
#[derive(Default)]
pub struct ExecutedAtMostOnce {
    executed: BTreeSet<String>,
}

impl Checker for ExecutedAtMostOnce {
    fn name(&self) -> &'static str {
        "executed_at_most_once"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        let Some(WorldEvent::Execute { key }) = event.world() else {
            return None;
        };
        let key = key.clone();
        if self.executed.insert(key.clone()) {
            return None;
        }
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: event.at_ms,
            host: event.host.clone(),
            details: json!({"idempotency_key": key, "why": "a state-changing request ran a second time (its retry was executed again)"}),
        })
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}

/// `tunnel_recovers`: judged end to end, from the clients' side — a tunnel that is dead but
/// not yet noticed is not "back". After a repair, a restart or the calm phase at `t` (with no
/// new fault before the bound), some request must succeed through the tunnel by `t + bound`.
/// Like a cut link, a crashed host holds the clock: a repair while a host is down starts
/// none (no tunnel can come back through a host that is not running); its restart, or the
/// calm phase that restarts it, does. (Found by the seed farm's mutation: a mutant without
/// a restart step repaired a link while the runtime stayed down for 62 s, and this checker
/// blamed hardened 30 s after the repair; `scenarios/regressions/swarm-tunnel-172-m0.yaml`.)
#[derive(Default)]
pub struct TunnelRecovers {
    /// (start ms, deadline ms, what started the clock).
    pending: Option<(u64, u64, String)>,
    links: Links,
    violated: bool,
}

impl TunnelRecovers {
    fn expire(&mut self, now_ms: u64) -> Option<Violation> {
        let (_, deadline, cause) = self.pending.clone().filter(|(_, d, _)| *d < now_ms)?;
        self.pending = None;
        self.violated = true;
        Some(Violation {
            invariant: "tunnel_recovers".into(),
            class: Class::Liveness,
            at_ms: deadline,
            host: "gateway".into(),
            details: json!({"after": cause, "bound_ms": RECOVERY_BOUND.as_millis() as u64, "why": "no request succeeded through the tunnel within the bound after the repair"}),
        })
    }
}

impl Checker for TunnelRecovers {
    fn name(&self) -> &'static str {
        "tunnel_recovers"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        if self.violated {
            return None;
        }
        if let Some(violation) = self.expire(event.at_ms) {
            return Some(violation);
        }
        if let Some(clock) = restarted(&self.pending, event, RECOVERY_BOUND) {
            self.pending = Some(clock);
        }
        if let Some(WorldEvent::Request { outcome, .. }) = event.world() {
            if outcome.succeeded()
                && self
                    .pending
                    .as_ref()
                    .is_some_and(|(start, _, _)| event.at_ms > *start)
            {
                self.pending = None;
            }
        }
        match self.links.clock(event) {
            // A new fault stops the clock: the bound applies to repairs that stay repaired.
            Some(Clock::Stop) => self.pending = None,
            // A host still down: recovery is due from its restart, not before.
            Some(Clock::Start(_)) if self.links.host_down() => {}
            Some(Clock::Start(cause)) => {
                let deadline = event.at_ms + RECOVERY_BOUND.as_millis() as u64;
                self.pending = Some((
                    event.at_ms,
                    deadline,
                    format!("{cause} at {} ms", event.at_ms),
                ));
            }
            None => {}
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        if self.violated {
            return None;
        }
        self.expire(state.end_ms)
    }
}

/// `all_reconnect`.
#[derive(Default)]
pub struct AllReconnect {
    /// Runtimes that had a tunnel at some point.
    known: BTreeSet<String>,
    /// Still waiting since (start ms, deadline ms, cause).
    clock: Option<(u64, u64, String)>,
    waiting: BTreeSet<String>,
    links: Links,
    /// The server restarted while a link was cut: the repair that clears the last
    /// partition starts the clock instead.
    restart_deferred: bool,
    violated: bool,
}

impl AllReconnect {
    fn expire(&mut self, now_ms: u64) -> Option<Violation> {
        let (start, deadline, cause) = self.clock.clone().filter(|(_, d, _)| *d < now_ms)?;
        self.clock = None;
        if self.waiting.is_empty() {
            return None;
        }
        self.violated = true;
        Some(Violation {
            invariant: "all_reconnect".into(),
            class: Class::Liveness,
            at_ms: deadline,
            host: "gateway".into(),
            details: json!({
                "after": cause,
                "since_ms": start,
                "bound_ms": RECONNECT_BOUND.as_millis() as u64,
                "runtimes": self.known.len(),
                "not_reconnected": self.waiting.len(),
                "examples": self.waiting.iter().take(5).collect::<Vec<_>>(),
            }),
        })
    }
}

impl Checker for AllReconnect {
    fn name(&self) -> &'static str {
        "all_reconnect"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        if self.violated {
            return None;
        }
        if let Some(violation) = self.expire(event.at_ms) {
            return Some(violation);
        }
        if let Some(clock) = restarted(&self.clock, event, RECONNECT_BOUND) {
            self.clock = Some(clock);
        }
        if let Some(TunnelEvent::ServerUp { runtime, .. }) = event.tunnel() {
            self.waiting.remove(runtime);
            self.known.insert(runtime.clone());
        }
        let restarted = matches!(
            event.harness(),
            Some(HarnessEvent::Fault(Fault::Restart(_)))
        );
        let decision = self.links.clock(event);
        if restarted && decision.is_none() {
            self.restart_deferred = true;
        }
        let start = match decision {
            Some(Clock::Stop) => {
                self.clock = None;
                None
            }
            Some(Clock::Start(cause @ ("fault.restart" | "calm.start"))) => Some(cause),
            Some(Clock::Start(cause)) if self.restart_deferred => Some(cause),
            _ => None,
        };
        if let Some(cause) = start {
            self.restart_deferred = false;
            let deadline = event.at_ms + RECONNECT_BOUND.as_millis() as u64;
            self.waiting = self.known.clone();
            self.clock = Some((
                event.at_ms,
                deadline,
                format!("{cause} at {} ms", event.at_ms),
            ));
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        if self.violated {
            return None;
        }
        self.expire(state.end_ms + 1)
    }
}
