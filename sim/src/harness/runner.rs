//! Runs one scenario seed for one variant: build the world, apply the timed faults during
//! the fault phase, heal everything for the calm phase, then check the invariants.

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use orrery_system::env::kube::KubeTarget;
use orrery_system::env::Observation;

use super::trace::Trace;
use crate::checkers::{self, FinalState, Violation};
use crate::env::{SimEnv, SIM_EPOCH_UNIX_MS};
use crate::scenario::model::{FaultStep, Role};
use crate::scenario::parse::apply_knob_patch;
use crate::scenario::{Outcome, Scenario, Variant};
use crate::world::apiserver::{self, ApiServer};
use crate::world::argocd::{self, HealthOverrides};
use crate::world::git::SharedGit;
use crate::world::{probe, workload};

/// Port of the simulated API server.
pub const APISERVER_PORT: u16 = 6443;
/// Token the simulated Argo CD server accepts.
pub const ARGOCD_TOKEN: &str = "argocd-sim-token";
/// Default link latency bound (turmoil's default is 100 ms; a LAN is closer to this).
const DEFAULT_MAX_LATENCY: Duration = Duration::from_millis(5);

/// A fault as it was applied.
#[derive(Clone, Debug, Serialize)]
pub struct AppliedFault {
    /// Simulated milliseconds when it was applied.
    pub at_ms: u64,
    /// What was done.
    pub action: String,
    /// Its arguments.
    pub detail: Value,
}

/// Everything a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    /// The result class.
    pub result: Outcome,
    /// Broken invariants, in time order.
    pub violations: Vec<Violation>,
    /// Faults applied, including the calm-phase heal.
    pub faults: Vec<AppliedFault>,
    /// The trace (for hashes, tails and metrics).
    pub trace: Trace,
    /// Simulated seconds run.
    pub sim_seconds: f64,
    /// A harness error message, if the run could not complete.
    pub harness_error: Option<String>,
}

fn host_of<'a>(scenario: &'a Scenario, role: Role) -> &'a str {
    scenario.topology.hosts.iter().find(|h| h.role == role).map(|h| h.name.as_str()).expect("validated: one host per role")
}

/// Shared state between the harness and the hosts.
struct World {
    api: Arc<ApiServer>,
    git: SharedGit,
    health: HealthOverrides,
    calm: Arc<AtomicBool>,
    trace: Trace,
}

fn register_hosts(sim: &mut turmoil::Sim<'static>, scenario: &Scenario, seed: u64, world: &World) {
    let apiserver_addr = format!("{}:{APISERVER_PORT}", host_of(scenario, Role::Apiserver));
    for host in &scenario.topology.hosts {
        let name = host.name.clone();
        let trace = world.trace.clone();
        let target = KubeTarget { addr: apiserver_addr.clone(), namespace: argocd::NAMESPACE.into(), read_idle: scenario.probe.read_idle };
        match host.role {
            Role::Apiserver => {
                let api = world.api.clone();
                sim.host(host.name.as_str(), move || {
                    let env = SimEnv::new(&name, seed, trace.clone());
                    let api = api.clone();
                    async move {
                        apiserver::run(env, api, &format!("0.0.0.0:{APISERVER_PORT}")).await?;
                        Ok(())
                    }
                });
            }
            Role::Argocd => {
                let (git, health) = (world.git.clone(), world.health.clone());
                let config = argocd::controller::Config { reconcile_every: scenario.argocd.reconcile_every, history_limit: scenario.argocd.history_limit };
                sim.host(host.name.as_str(), move || {
                    let env = SimEnv::new(&name, seed, trace.clone());
                    let run = argocd::run(env, target.clone(), git.clone(), health.clone(), config.clone(), ARGOCD_TOKEN.into());
                    async move {
                        run.await?;
                        Ok(())
                    }
                });
            }
            Role::Workload => {
                let (git, health, calm) = (world.git.clone(), world.health.clone(), world.calm.clone());
                let config = scenario.workload.clone();
                sim.host(host.name.as_str(), move || {
                    let env = SimEnv::new(&name, seed, trace.clone());
                    let handles = workload::Handles { git: git.clone(), health: health.clone(), calm: calm.clone() };
                    let (config, target) = (config.clone(), target.clone());
                    async move {
                        let client = orrery_system::env::kube::client(env.clone(), &target);
                        workload::run(env, client, config, handles).await;
                        std::future::pending::<()>().await;
                        Ok(())
                    }
                });
            }
            Role::Probe => {
                let config = probe::Config { watch_timeout_seconds: scenario.probe.watch_timeout_seconds };
                sim.host(host.name.as_str(), move || {
                    let env = SimEnv::new(&name, seed, trace.clone());
                    let (config, target) = (config.clone(), target.clone());
                    async move {
                        let client = orrery_system::env::kube::client(env.clone(), &target);
                        probe::run(env, client, config).await;
                        Ok(())
                    }
                });
            }
        }
    }
}

/// Applies one scheduled fault.
fn apply_fault(sim: &mut turmoil::Sim<'static>, world: &World, step: &FaultStep, crashed: &mut BTreeSet<String>) -> Result<AppliedFault, String> {
    let at_ms = sim.elapsed().as_millis() as u64;
    let (action, detail) = if let Some([a, b]) = &step.partition {
        sim.partition(a.as_str(), b.as_str());
        ("partition", json!([a, b]))
    } else if let Some([a, b]) = &step.repair {
        sim.repair(a.as_str(), b.as_str());
        ("repair", json!([a, b]))
    } else if let Some(host) = &step.crash {
        sim.crash(host.as_str());
        crashed.insert(host.clone());
        ("crash", json!(host))
    } else if let Some(host) = &step.restart {
        sim.bounce(host.as_str());
        crashed.remove(host);
        ("restart", json!(host))
    } else if let Some(latency) = &step.latency {
        let [a, b] = &latency.between;
        sim.set_link_max_message_latency(a.as_str(), b.as_str(), latency.max);
        ("latency", json!({"between": [a, b], "max_ms": latency.max.as_millis() as u64}))
    } else if let Some(patch) = &step.apiserver {
        let knobs = apply_knob_patch(&world.api.knobs(), patch)?;
        world.api.set_knobs(knobs);
        ("apiserver", serde_json::to_value(patch).unwrap_or(Value::Null))
    } else {
        return Err("a fault step without an action (the parser should have refused it)".into());
    };
    world.trace.record(sim.elapsed(), "harness", Observation::new(format!("fault.{action}"), detail.clone()));
    Ok(AppliedFault { at_ms, action: action.into(), detail })
}

/// Heals everything for the calm phase: links, latencies, crashed hosts, knobs; stops the workload.
fn start_calm(sim: &mut turmoil::Sim<'static>, scenario: &Scenario, world: &World, crashed: &mut BTreeSet<String>) -> AppliedFault {
    let hosts: Vec<&str> = scenario.topology.hosts.iter().map(|h| h.name.as_str()).collect();
    for (i, a) in hosts.iter().enumerate() {
        for b in &hosts[i + 1..] {
            sim.repair(*a, *b);
            sim.set_link_max_message_latency(*a, *b, DEFAULT_MAX_LATENCY);
        }
    }
    let restarted: Vec<String> = std::mem::take(crashed).into_iter().collect();
    for host in &restarted {
        sim.bounce(host.as_str());
    }
    world.api.set_knobs(scenario.apiserver.clone());
    world.calm.store(true, Ordering::SeqCst);
    let detail = json!({"restarted": restarted, "links_repaired": true, "apiserver_knobs_reset": true, "workload_stopped": true});
    world.trace.record(sim.elapsed(), "harness", Observation::new("calm.start", detail.clone()));
    AppliedFault { at_ms: sim.elapsed().as_millis() as u64, action: "calm".into(), detail }
}

/// Runs `scenario` with `seed` for `variant`.
///
/// The variant is recorded in the trace; components with variants (the reporter, the
/// tunnel) read it. The watch-convergence world has none yet, so both variants run the
/// same code there and are expected to pass alike.
pub fn run(scenario: &Scenario, seed: u64, variant: Variant) -> RunOutcome {
    let trace = Trace::default();
    let world = World {
        api: ApiServer::new(scenario.apiserver.clone()),
        git: SharedGit::default(),
        health: HealthOverrides::default(),
        calm: Arc::new(AtomicBool::new(false)),
        trace: trace.clone(),
    };
    workload::seed_git(&world.git, &scenario.workload, SIM_EPOCH_UNIX_MS);
    let total = scenario.duration + scenario.calm;
    let mut faults = Vec::new();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(scenario.tick)
        .epoch(std::time::UNIX_EPOCH + Duration::from_millis(SIM_EPOCH_UNIX_MS))
        .simulation_duration(total + Duration::from_secs(60))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(DEFAULT_MAX_LATENCY)
        .build();
    trace.record(Duration::ZERO, "harness", Observation::new("run.start", json!({"scenario": scenario.name, "seed": seed, "variant": variant.as_str()})));
    register_hosts(&mut sim, scenario, seed, &world);
    let mut schedule: Vec<&FaultStep> = scenario.faults.iter().collect();
    schedule.sort_by_key(|s| s.at);
    let mut crashed = BTreeSet::new();
    let mut next_fault = 0;
    let mut calm_started = false;
    let stepped = std::panic::catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        while sim.elapsed() < total {
            while next_fault < schedule.len() && schedule[next_fault].at <= sim.elapsed() {
                faults.push(apply_fault(&mut sim, &world, schedule[next_fault], &mut crashed)?);
                next_fault += 1;
            }
            if !calm_started && sim.elapsed() >= scenario.duration {
                faults.push(start_calm(&mut sim, scenario, &world, &mut crashed));
                calm_started = true;
            }
            sim.step().map_err(|e| format!("a host failed: {e}"))?;
        }
        Ok(())
    }));
    let sim_seconds = sim.elapsed().as_secs_f64();
    let end_ms = sim.elapsed().as_millis() as u64;
    drop(sim);
    let harness_error = match stepped {
        Ok(Ok(())) => None,
        Ok(Err(message)) => Some(message),
        Err(panic) => Some(format!(
            "the simulation panicked: {}",
            panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
        )),
    };
    let applications = {
        let kind = world.api.kind("applications").expect("applications are served").clone();
        let mut apps: Vec<(String, String)> = world
            .api
            .store()
            .objects_of(&kind)
            .iter()
            .map(|o| (o["metadata"]["name"].as_str().unwrap_or("").into(), o["metadata"]["resourceVersion"].as_str().unwrap_or("").into()))
            .collect();
        apps.sort();
        apps
    };
    let mut checkers: Vec<_> = scenario.invariants.iter().map(|i| checkers::build(i).expect("validated when parsed")).collect();
    let violations = checkers::check(&mut checkers, &trace.events(), &FinalState { applications, end_ms });
    let result = if harness_error.is_some() {
        Outcome::HarnessError
    } else if violations.iter().any(|v| v.class == checkers::Class::Safety) {
        Outcome::SafetyViolation
    } else if !violations.is_empty() {
        Outcome::LivenessTimeout
    } else {
        Outcome::Pass
    };
    RunOutcome { result, violations, faults, trace, sim_seconds, harness_error }
}
