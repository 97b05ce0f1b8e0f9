//! `runtime_health_shown` (liveness): what the platform shows about a runtime follows the
//! runtime's real reachability within bounds.
//!
//! - **A drop** — a partition of the runtime's host from the monitor's host, or a crash of
//!   the runtime's host — at `t` must be shown
//!   as `Unable to communicate` by `t +` [`DETECT_BOUND`], unless the runtime is reachable
//!   again before then (a short blip need not be shown).
//! - **A recovery** — the runtime's tunnel up again (`tunnel.server_up`) after the last cut
//!   was lifted — at `t` must be shown as `Healthy` by `t +` [`RECOVER_BOUND`], unless it is
//!   cut again first or the tunnel goes down again (`tunnel.server_down`: the next tunnel
//!   starts a new obligation). Recovery is judged from the tunnel, not from the repair: a
//!   runtime whose tunnel is refused after a restart (faithful's name conflict) is truly
//!   unreachable.
//! - While the platform's gateway host (where the monitor runs) is down, nothing can be
//!   shown: its restart starts a new obligation for the runtime's state at that moment.
//! - **Heartbeats.** A runtime that sends heartbeats (`platform.heartbeat`) is also cut when
//!   its host is partitioned from the events path's host (where the heartbeats arrive), or
//!   that host is down: the drop must be shown the same way. When only that cut ends, its
//!   tunnel never went away, so `Healthy` is due from the repair.
//!
//! The runtime of a tunnel named `acme-<host>` (or `acme-<host>-<n>` with several runtimes
//! per host) lives on `<host>`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;

use super::{Checker, Class, FinalState, Violation};
use crate::faults::Fault;
use crate::trace::{HarnessEvent, TraceEvent};
use crate::world::tunnel::ACCOUNT;
use orrery_system::observe::{Observation, PlatformEvent, TunnelEvent};

/// Longest a drop may go unshown.
pub const DETECT_BOUND: Duration = Duration::from_secs(60);
/// Longest a recovered runtime may go on being shown unreachable.
pub const RECOVER_BOUND: Duration = Duration::from_secs(45);

/// What the platform must come to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// `Unable to communicate`, after a drop.
    Unable,
    /// `Healthy`, after a recovery.
    Healthy,
}

impl Due {
    fn shown_as(self) -> &'static str {
        match self {
            Due::Unable => "Unable to communicate",
            Due::Healthy => "Healthy",
        }
    }

    fn bound(self) -> Duration {
        match self {
            Due::Unable => DETECT_BOUND,
            Due::Healthy => RECOVER_BOUND,
        }
    }
}

/// One obligation and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Obligation {
    /// The runtime (tunnel name).
    pub runtime: String,
    /// What must be shown.
    pub due: Due,
    /// When the obligation began (the drop, the recovery).
    pub since_ms: u64,
    /// What began it.
    pub cause: String,
    /// When the platform showed it (`None`: never, or the obligation was cancelled).
    pub met_ms: Option<u64>,
    /// Cancelled before its bound (the runtime changed state again first).
    pub cancelled: bool,
}

/// The host a runtime's tunnel name belongs to, among `hosts` (the longest that fits:
/// `acme-node-1` is `node-1`'s runtime when both `node` and `node-1` are hosts).
fn host_of<'a>(runtime: &str, hosts: &'a BTreeSet<String>) -> Option<&'a String> {
    let rest = runtime.strip_prefix(ACCOUNT)?.strip_prefix('-')?;
    hosts
        .iter()
        .filter(|h| {
            rest == h.as_str()
                || rest
                    .strip_prefix(h.as_str())
                    .and_then(|r| r.strip_prefix('-'))
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        .max_by_key(|h| h.len())
}

/// Per runtime: cut or not, and the running obligation.
#[derive(Default)]
struct RuntimeState {
    cut: bool,
    /// Cut only from the events path (its tunnel reachable all along).
    beats_only: bool,
    shown: String,
    open: Option<usize>,
}

/// Every obligation of a run, from its trace, in the order they began. Runtimes the monitor
/// showed, and runtimes that had a tunnel, are judged — once the monitor showed anything (a
/// run without a monitor has no obligations).
pub fn obligations(events: &[TraceEvent]) -> Vec<Obligation> {
    let Some(monitor) = events.iter().find_map(|e| match &e.entry {
        crate::trace::Entry::Observed(Observation::Platform(PlatformEvent::RuntimeHealth {
            ..
        })) => Some(e.host.clone()),
        _ => None,
    }) else {
        return Vec::new();
    };
    let shown: BTreeSet<String> = events
        .iter()
        .filter_map(|e| match &e.entry {
            crate::trace::Entry::Observed(Observation::Platform(
                PlatformEvent::RuntimeHealth { runtime, .. },
            ))
            | crate::trace::Entry::Observed(Observation::Tunnel(TunnelEvent::ServerUp {
                runtime,
                ..
            })) => Some(runtime.clone()),
            _ => None,
        })
        .collect();
    let monitor_host = Some(monitor);
    // Where heartbeats arrive, if any runtime sends them.
    let beat_host = events.iter().find_map(|e| match &e.entry {
        crate::trace::Entry::Observed(Observation::Platform(PlatformEvent::Heartbeat {
            ..
        })) => Some(e.host.clone()),
        _ => None,
    });
    // Runtimes that have sent a heartbeat so far.
    let mut beating: BTreeSet<String> = BTreeSet::new();
    // Hosts the faults name: a runtime on any other host is never cut.
    let hosts: BTreeSet<String> = events
        .iter()
        .filter_map(|e| e.harness())
        .flat_map(|h| match h {
            HarnessEvent::Fault(Fault::Partition(link) | Fault::Repair(link)) => link.to_vec(),
            HarnessEvent::HostStop { host, .. } | HarnessEvent::HostStart { host, .. } => {
                vec![host.clone()]
            }
            _ => Vec::new(),
        })
        .collect();
    let mut state: BTreeMap<String, RuntimeState> = shown
        .iter()
        .map(|r| (r.clone(), RuntimeState::default()))
        .collect();
    let mut links: BTreeSet<[String; 2]> = BTreeSet::new();
    let mut down: BTreeSet<String> = BTreeSet::new();
    let mut out: Vec<Obligation> = Vec::new();
    let open = |out: &mut Vec<Obligation>,
                rt: &mut RuntimeState,
                runtime: &str,
                due: Due,
                at: u64,
                cause: String| {
        if let Some(i) = rt.open.take() {
            if out[i].met_ms.is_none() {
                out[i].cancelled = true;
            }
        }
        let met = (rt.shown == due.shown_as()).then_some(at);
        out.push(Obligation {
            runtime: runtime.to_string(),
            due,
            since_ms: at,
            cause,
            met_ms: met,
            cancelled: false,
        });
        if met.is_none() {
            rt.open = Some(out.len() - 1);
        }
    };
    for event in events {
        let at = event.at_ms;
        if let crate::trace::Entry::Observed(Observation::Platform(PlatformEvent::Heartbeat {
            runtime,
        })) = &event.entry
        {
            beating.insert(runtime.clone());
            continue;
        }
        // The platform shows something: it may meet an open obligation.
        if let crate::trace::Entry::Observed(Observation::Platform(
            PlatformEvent::RuntimeHealth {
                runtime, health, ..
            },
        )) = &event.entry
        {
            if let Some(rt) = state.get_mut(runtime) {
                rt.shown = health.clone();
                if let Some(i) = rt.open {
                    if out[i].due.shown_as() == health {
                        out[i].met_ms = Some(at);
                        rt.open = None;
                    }
                }
            }
            continue;
        }
        if let crate::trace::Entry::Observed(Observation::Tunnel(TunnelEvent::ServerUp {
            runtime,
            ..
        })) = &event.entry
        {
            if let Some(rt) = state.get_mut(runtime) {
                if !rt.cut {
                    let due_healthy = rt.open.is_none_or(|i| out[i].due != Due::Healthy);
                    if due_healthy && rt.shown != Due::Healthy.shown_as() {
                        open(
                            &mut out,
                            rt,
                            runtime,
                            Due::Healthy,
                            at,
                            format!("tunnel up at {at} ms"),
                        );
                    }
                }
            }
            continue;
        }
        if let crate::trace::Entry::Observed(Observation::Tunnel(TunnelEvent::ServerDown {
            runtime,
            ..
        })) = &event.entry
        {
            // The tunnel that came up went again: Healthy is due at the next one.
            if let Some(rt) = state.get_mut(runtime) {
                if let Some(i) = rt.open.filter(|i| out[*i].due == Due::Healthy) {
                    out[i].cancelled = true;
                    rt.open = None;
                }
            }
            continue;
        }
        let Some(harness) = event.harness() else {
            continue;
        };
        let (changed_host, cause): (Option<String>, String) = match harness {
            HarnessEvent::Fault(Fault::Partition([a, b])) => {
                links.insert([a.clone(), b.clone()]);
                (None, format!("partition {a}/{b} at {at} ms"))
            }
            HarnessEvent::Fault(Fault::Repair([a, b])) => {
                links.remove(&[a.clone(), b.clone()]);
                links.remove(&[b.clone(), a.clone()]);
                (None, format!("repair {a}/{b} at {at} ms"))
            }
            HarnessEvent::HostStop { host, .. } => {
                down.insert(host.clone());
                (Some(host.clone()), format!("{host} stopped at {at} ms"))
            }
            HarnessEvent::HostStart { host, .. } => {
                down.remove(host);
                (Some(host.clone()), format!("{host} started at {at} ms"))
            }
            HarnessEvent::CalmStart { .. } => {
                links.clear();
                (None, format!("calm phase at {at} ms"))
            }
            _ => continue,
        };
        let monitor_restarted = changed_host.is_some()
            && changed_host == monitor_host
            && !down.contains(changed_host.as_deref().unwrap_or_default());
        let monitor_down = monitor_host.as_ref().is_some_and(|h| down.contains(h));
        for (runtime, rt) in state.iter_mut() {
            let Some(host) = host_of(runtime, &hosts) else {
                continue;
            };
            // Cut: the host is down, or partitioned from the monitor's host, or (a runtime
            // that sends heartbeats) from the events path's host.
            let tunnel_cut = down.contains(host)
                || monitor_host
                    .as_ref()
                    .is_some_and(|m| links.iter().any(|l| l.contains(host) && l.contains(m)));
            let beats_cut = beating.contains(runtime)
                && beat_host.as_ref().is_some_and(|b| {
                    down.contains(b) || links.iter().any(|l| l.contains(host) && l.contains(b))
                });
            let cut = tunnel_cut || beats_cut;
            if monitor_down {
                // Nothing can be shown while the monitor is down.
                if let Some(i) = rt.open.take() {
                    out[i].cancelled = true;
                }
                rt.cut = cut;
                continue;
            }
            if cut && (!rt.cut || monitor_restarted) {
                open(&mut out, rt, runtime, Due::Unable, at, cause.clone());
            } else if !cut && rt.cut && rt.beats_only {
                // Its heartbeats can arrive again and its tunnel never went: Healthy is due.
                open(&mut out, rt, runtime, Due::Healthy, at, cause.clone());
            } else if !cut && rt.cut {
                // Reachable again: no longer due Unable; Healthy is due once the tunnel is up.
                if let Some(i) = rt.open.take() {
                    if out[i].met_ms.is_none() {
                        out[i].cancelled = true;
                    }
                }
            }
            rt.beats_only = cut && !tunnel_cut && (rt.beats_only || !rt.cut);
            rt.cut = cut;
        }
    }
    out
}

/// The checker.
#[derive(Default)]
pub struct RuntimeHealthShown {
    events: Vec<TraceEvent>,
}

impl Checker for RuntimeHealthShown {
    fn name(&self) -> &'static str {
        "runtime_health_shown"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        let relevant = match &event.entry {
            crate::trace::Entry::Observed(Observation::Platform(
                PlatformEvent::RuntimeHealth { .. } | PlatformEvent::Heartbeat { .. },
            )) => true,
            crate::trace::Entry::Observed(Observation::Tunnel(
                TunnelEvent::ServerUp { .. } | TunnelEvent::ServerDown { .. },
            )) => true,
            _ => event.harness().is_some(),
        };
        if relevant {
            self.events.push(event.clone());
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        obligations(&self.events)
            .into_iter()
            .filter(|o| !o.cancelled)
            .find(|o| {
                let deadline = o.since_ms + o.due.bound().as_millis() as u64;
                o.met_ms
                    .map_or(deadline < state.end_ms, |met| met > deadline)
            })
            .map(|o| Violation {
                invariant: self.name().into(),
                class: Class::Liveness,
                at_ms: o.since_ms + o.due.bound().as_millis() as u64,
                host: o.runtime.clone(),
                details: json!({
                    "runtime": o.runtime,
                    "after": o.cause,
                    "wanted": o.due.shown_as(),
                    "bound_ms": o.due.bound().as_millis() as u64,
                    "shown_at_ms": o.met_ms,
                    "why": "the platform did not show the runtime's state within the bound",
                }),
            })
    }
}
