//! The runtime monitor: what the platform shows about each registered runtime's health —
//! `Healthy`, or `Unable to communicate` when it cannot reach the runtime — from probes of
//! the runtime's URL through its tunnel (`GET /healthz`, answered by the runtime's router).
//!
//! The real platform shows "Unable to communicate with <runtime>" when the runtime URL is
//! unreachable (`codefresh-research.md` §3.4, from the Codefresh docs). How often it checks,
//! and on what, is not public: both variants' timings are **inferred**, and no flaw of the
//! real monitor is known, so both must keep to the same bounds.
//!
//! | | faithful | hardened |
//! |---|---|---|
//! | probe | every 30 s, waiting as long as the tunnel server's request deadline | every 5 s, 3 s timeout |
//! | a runtime without a tunnel | found by the next probe (503) | shown at once (checked every second) |
//! | heartbeats (through the events path, [`crate::runtime::heartbeat`]) | silent for 30 s: `Unable to communicate`; healthy again with the next heartbeat if the last probe answered | the same |
//! | state | the last probe's result, and the heartbeats | the last probe's result, or no tunnel, and the heartbeats |
//!
//! Heartbeats catch what a probe cannot: a runtime whose tunnel still answers but which
//! cannot reach the platform's events path (its reporters' events are not arriving). A
//! runtime that never sent a heartbeat is judged by its probes alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Request;
use serde::Serialize;

use crate::core::Variant;
use crate::env::SharedEnv;
use crate::observe::PlatformEvent;
use crate::platform::registry::Registry;
use crate::platform::tunnel::TunnelServer;

/// What the platform shows for a runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Health {
    /// Not probed yet.
    Unknown,
    /// The last check reached it.
    Healthy,
    /// The last check could not reach it.
    #[serde(rename = "Unable to communicate")]
    UnableToCommunicate,
}

impl Health {
    /// The name the API shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "Unknown",
            Health::Healthy => "Healthy",
            Health::UnableToCommunicate => "Unable to communicate",
        }
    }
}

/// One runtime's shown health.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuntimeHealth {
    /// What is shown.
    pub health: Health,
    /// Since when (milliseconds since the epoch, the environment's clock).
    pub since_ms: u64,
    /// Why, for `Unable to communicate`: the failed check's answer.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The monitor's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design.
    pub variant: Variant,
    /// How often every runtime is probed.
    pub probe_every: Duration,
    /// How long a probe may take (`None`: as long as the tunnel server's request deadline).
    pub probe_timeout: Option<Duration>,
    /// How long a runtime that sends heartbeats may be silent before it is shown
    /// `Unable to communicate` (three missed heartbeats of [`crate::runtime::heartbeat::EVERY`]).
    pub heartbeat_timeout: Duration,
}

/// The heartbeat timeout both variants use (inferred: see the module doc).
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(30);

impl Config {
    /// The variant's timings (inferred: see the module doc).
    pub fn new(variant: Variant) -> Self {
        match variant {
            Variant::Faithful => Config {
                variant,
                probe_every: Duration::from_secs(30),
                probe_timeout: None,
                heartbeat_timeout: HEARTBEAT_TIMEOUT,
            },
            Variant::Hardened => Config {
                variant,
                probe_every: Duration::from_secs(5),
                probe_timeout: Some(Duration::from_secs(3)),
                heartbeat_timeout: HEARTBEAT_TIMEOUT,
            },
        }
    }
}

/// Every runtime's shown health: control-plane state (it outlives a monitor process, as
/// the platform's database would).
#[derive(Default)]
pub struct Monitor {
    runtimes: Mutex<BTreeMap<String, RuntimeHealth>>,
}

impl Monitor {
    /// Every monitored runtime's shown health, by name.
    pub fn shown(&self) -> BTreeMap<String, RuntimeHealth> {
        self.runtimes.lock().expect("monitor lock").clone()
    }

    /// Shows `health` for `runtime` (observed when it changes what is shown).
    fn show(&self, env: &SharedEnv, runtime: &str, health: Health, reason: String) {
        let mut runtimes = self.runtimes.lock().expect("monitor lock");
        if runtimes.get(runtime).is_some_and(|r| r.health == health) {
            return;
        }
        runtimes.insert(
            runtime.to_string(),
            RuntimeHealth {
                health,
                since_ms: env.unix_millis(),
                reason: reason.clone(),
            },
        );
        drop(runtimes);
        env.observe(
            PlatformEvent::RuntimeHealth {
                runtime: runtime.to_string(),
                health: health.as_str().to_string(),
                reason,
            }
            .into(),
        );
    }
}

/// One probe of `runtime` through its tunnel: `Ok` when it answered 2xx, else why not.
async fn probe(
    env: &SharedEnv,
    tunnels: &TunnelServer,
    runtime: &str,
    timeout: Option<Duration>,
) -> Result<(), String> {
    let request = Request::get("/healthz")
        .body(crate::env::http::full(""))
        .expect("a static request is valid");
    let forward = tunnels.forward(env, runtime, request);
    let answer = match timeout {
        None => forward.await,
        Some(timeout) => tokio::select! {
            biased;
            answer = forward => answer,
            () = env.sleep(timeout) => return Err(format!("no answer within {} ms", timeout.as_millis())),
        },
    };
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(format!("probe answered {}", answer.status()))
    }
}

/// Runs the monitor until the process stops: every registered runtime is checked on the
/// variant's schedule, and against its heartbeats where `heartbeats` (the events path)
/// has any, and what the platform shows is updated.
pub async fn run(
    env: SharedEnv,
    config: Config,
    monitor: Arc<Monitor>,
    registry: Arc<Registry>,
    tunnels: Arc<TunnelServer>,
    heartbeats: Option<Arc<crate::platform::events::Platform>>,
) {
    // Every second: the tunnels (hardened) and the heartbeats; probes on their schedule
    // (faithful's first after a whole interval, hardened's at once).
    let tick = Duration::from_secs(1);
    let mut next_probe = match config.variant {
        Variant::Faithful => config.probe_every,
        Variant::Hardened => Duration::ZERO,
    };
    // Whether each runtime's last probe answered.
    let mut answered: BTreeMap<String, bool> = BTreeMap::new();
    loop {
        env.sleep(tick).await;
        let runtimes = registry.names();
        let connected: BTreeSet<String> = tunnels.connected().into_iter().collect();
        if config.variant == Variant::Hardened {
            for runtime in runtimes.iter().filter(|r| !connected.contains(*r)) {
                monitor.show(
                    &env,
                    runtime,
                    Health::UnableToCommunicate,
                    "the runtime has no tunnel".to_string(),
                );
            }
        }
        // Runtimes that send heartbeats and went silent, with how long.
        let now = env.unix_millis();
        let last_beats = heartbeats
            .as_ref()
            .map(|p| p.heartbeats())
            .unwrap_or_default();
        let silent = |runtime: &str| {
            last_beats.get(runtime).and_then(|last| {
                let quiet = now.saturating_sub(*last);
                (quiet > config.heartbeat_timeout.as_millis() as u64).then_some(quiet)
            })
        };
        for runtime in &runtimes {
            if !last_beats.contains_key(runtime) {
                continue;
            }
            match silent(runtime) {
                Some(quiet) => monitor.show(
                    &env,
                    runtime,
                    Health::UnableToCommunicate,
                    format!("no heartbeat for {} s", quiet / 1000),
                ),
                // Heartbeats again: healthy if the last probe answered (and, hardened, the
                // tunnel is there).
                None if answered.get(runtime) == Some(&true)
                    && (config.variant == Variant::Faithful || connected.contains(runtime)) =>
                {
                    monitor.show(&env, runtime, Health::Healthy, String::new())
                }
                None => {}
            }
        }
        if env.elapsed() < next_probe {
            continue;
        }
        next_probe = env.elapsed() + config.probe_every;
        // Hardened already shows the runtimes without a tunnel; faithful finds them by
        // probing (the tunnel server answers 503).
        let probed: Vec<&String> = runtimes
            .iter()
            .filter(|r| config.variant == Variant::Faithful || connected.contains(*r))
            .collect();
        let results = futures::future::join_all(
            probed
                .iter()
                .map(|runtime| probe(&env, &tunnels, runtime, config.probe_timeout)),
        )
        .await;
        for (runtime, result) in probed.into_iter().zip(results) {
            answered.insert(runtime.clone(), result.is_ok());
            match result {
                Ok(()) if silent(runtime).is_some() => {}
                Ok(()) => monitor.show(&env, runtime, Health::Healthy, String::new()),
                Err(why) => monitor.show(&env, runtime, Health::UnableToCommunicate, why),
            }
        }
    }
}
