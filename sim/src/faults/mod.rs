//! Faults: everything a scenario can do to the world, as one enum with one `apply`.
//!
//! A scenario file writes a fault step as a mapping with exactly one action key
//! (`{at: 50s, partition: [probe, apiserver]}`); [`Fault::from_step`] turns that syntax into
//! a [`Fault`], and [`Fault::apply`] carries it out on a [`Target`] — the harness, which
//! owns the turmoil simulation and the world's knobs. Adding a fault kind touches this file,
//! the scenario model (its syntax) and the target, never a chain of `if let`s.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::scenario::knobs::ApiServerPatch;
use crate::scenario::model::{FaultStep, GitChange, PlatformChange};

/// One fault, as the harness applies it. In the trace it is written as the scenario file
/// writes it, e.g. `{"partition": ["probe", "apiserver"]}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// Cut the link between two hosts, both directions, silently (packets are lost).
    Partition([String; 2]),
    /// Heal the link between two hosts.
    Repair([String; 2]),
    /// Crash a host: its software stops and its connections die.
    Crash(String),
    /// Restart a crashed host's software (with fresh randomness).
    Restart(String),
    /// Set the maximum one-way message latency of a link.
    Latency {
        /// The two hosts of the link.
        between: [String; 2],
        /// The new bound.
        #[serde(with = "crate::scenario::duration")]
        max: Duration,
    },
    /// Change the simulated API server's knobs (only the fields given).
    #[serde(rename = "apiserver")]
    ApiServer(ApiServerPatch),
    /// Roll the reporter StatefulSet to `replicas`, one pod change every `every`.
    Scale {
        /// The new replica count.
        replicas: u32,
        /// Time between two pod changes.
        #[serde(with = "crate::scenario::duration")]
        every: Duration,
    },
    /// Change the platform's knobs (only the fields given).
    Platform(PlatformChange),
    /// Drop every key of a cache host.
    Flush(String),
    /// Remove a destination cluster's registration from Argo CD.
    Unregister(String),
    /// Revoke the runtime's Argo CD token; the new one reaches its Secret later.
    RotateToken(crate::scenario::model::RotateToken),
    /// Change how the Git provider serves fetches (only the fields given).
    Git(GitChange),
}

/// What faults act on: the harness's simulation and world.
pub trait Target {
    /// Cuts the link between `a` and `b`.
    fn partition(&mut self, a: &str, b: &str);
    /// Heals the link between `a` and `b`.
    fn repair(&mut self, a: &str, b: &str);
    /// Crashes `host`.
    fn crash(&mut self, host: &str);
    /// Restarts a crashed `host`.
    fn restart(&mut self, host: &str);
    /// Sets the latency bound of the link between `a` and `b`.
    fn set_latency(&mut self, a: &str, b: &str, max: Duration);
    /// Changes the API server knobs `patch` names.
    fn patch_apiserver(&mut self, patch: &ApiServerPatch);
    /// Applies platform knob changes.
    fn change_platform(&mut self, change: &PlatformChange);
    /// Plans a rolling change of the reporters to `replicas`.
    fn scale(&mut self, replicas: u32, every: Duration);
    /// Drops every key the cache on `host` holds.
    fn flush(&mut self, host: &str);
    /// Removes cluster `host`'s registration from Argo CD.
    fn unregister(&mut self, host: &str);
    /// Revokes the runtime's token on Argo CD host `argocd`; the operator writes the new one
    /// into the token Secret `secret_after` later.
    fn rotate_token(&mut self, argocd: &str, secret_after: Duration);
    /// Changes how the Git provider serves fetches.
    fn change_git(&mut self, change: &GitChange);
}

impl Fault {
    /// The fault a scenario step describes, or `None` for a step without exactly one action
    /// (the parser refuses those, naming the step's line and column).
    pub fn from_step(step: &FaultStep) -> Option<Fault> {
        let mut actions: Vec<Fault> = Vec::new();
        actions.extend(step.partition.clone().map(Fault::Partition));
        actions.extend(step.repair.clone().map(Fault::Repair));
        actions.extend(step.crash.clone().map(Fault::Crash));
        actions.extend(step.restart.clone().map(Fault::Restart));
        actions.extend(step.latency.as_ref().map(|l| Fault::Latency {
            between: l.between.clone(),
            max: l.max,
        }));
        actions.extend(step.apiserver.clone().map(Fault::ApiServer));
        actions.extend(step.scale.as_ref().map(|s| Fault::Scale {
            replicas: s.replicas,
            every: s.every,
        }));
        actions.extend(step.platform.clone().map(Fault::Platform));
        actions.extend(step.flush.clone().map(Fault::Flush));
        actions.extend(step.unregister.clone().map(Fault::Unregister));
        actions.extend(step.rotate_token.clone().map(Fault::RotateToken));
        actions.extend(step.git.clone().map(Fault::Git));
        match actions.len() {
            1 => actions.pop(),
            _ => None,
        }
    }

    /// The action's name as scenario files and traces write it (`fault.<name>`).
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Partition(_) => "partition",
            Fault::Repair(_) => "repair",
            Fault::Crash(_) => "crash",
            Fault::Restart(_) => "restart",
            Fault::Latency { .. } => "latency",
            Fault::ApiServer(_) => "apiserver",
            Fault::Scale { .. } => "scale",
            Fault::Platform(_) => "platform",
            Fault::Flush(_) => "flush",
            Fault::Unregister(_) => "unregister",
            Fault::RotateToken(_) => "rotate_token",
            Fault::Git(_) => "git",
        }
    }

    /// Its arguments, as reports list them (the value under the action's name).
    pub fn detail(&self) -> Value {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map.into_iter().next().map(|(_, v)| v).unwrap_or_default(),
            _ => Value::Null,
        }
    }

    /// Carries the fault out on `target`.
    pub fn apply(&self, target: &mut impl Target) {
        match self {
            Fault::Partition([a, b]) => target.partition(a, b),
            Fault::Repair([a, b]) => target.repair(a, b),
            Fault::Crash(host) => target.crash(host),
            Fault::Restart(host) => target.restart(host),
            Fault::Latency {
                between: [a, b],
                max,
            } => target.set_latency(a, b, *max),
            Fault::ApiServer(patch) => target.patch_apiserver(patch),
            Fault::Scale { replicas, every } => target.scale(*replicas, *every),
            Fault::Platform(change) => target.change_platform(change),
            Fault::Flush(host) => target.flush(host),
            Fault::Unregister(host) => target.unregister(host),
            Fault::RotateToken(r) => target.rotate_token(&r.argocd, r.secret_after),
            Fault::Git(change) => target.change_git(change),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what was asked of it.
    #[derive(Default)]
    struct Log(Vec<String>);

    impl Target for Log {
        fn partition(&mut self, a: &str, b: &str) {
            self.0.push(format!("partition {a} {b}"));
        }
        fn repair(&mut self, a: &str, b: &str) {
            self.0.push(format!("repair {a} {b}"));
        }
        fn crash(&mut self, host: &str) {
            self.0.push(format!("crash {host}"));
        }
        fn restart(&mut self, host: &str) {
            self.0.push(format!("restart {host}"));
        }
        fn set_latency(&mut self, a: &str, b: &str, max: Duration) {
            self.0.push(format!("latency {a} {b} {max:?}"));
        }
        fn patch_apiserver(&mut self, patch: &ApiServerPatch) {
            self.0.push(format!("apiserver {:?}", patch.throttle_rate));
        }
        fn change_platform(&mut self, change: &PlatformChange) {
            self.0.push(format!("platform {:?}", change.api_latency));
        }
        fn scale(&mut self, replicas: u32, every: Duration) {
            self.0.push(format!("scale {replicas} {every:?}"));
        }
        fn flush(&mut self, host: &str) {
            self.0.push(format!("flush {host}"));
        }
        fn unregister(&mut self, host: &str) {
            self.0.push(format!("unregister {host}"));
        }
        fn rotate_token(&mut self, argocd: &str, secret_after: Duration) {
            self.0
                .push(format!("rotate_token {argocd} {secret_after:?}"));
        }
        fn change_git(&mut self, change: &GitChange) {
            self.0.push(format!(
                "git {:?} {:?} {:?} {:?}",
                change.latency, change.outage, change.rate_limit, change.hourly_limit
            ));
        }
    }

    fn step(yaml: &str) -> FaultStep {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn each_step_syntax_becomes_one_fault_that_applies_and_describes_itself() {
        let cases = [
            (
                "{at: 1s, partition: [a, b]}",
                "partition a b",
                "[\"a\",\"b\"]",
            ),
            ("{at: 1s, crash: a}", "crash a", "\"a\""),
            ("{at: 1s, flush: c}", "flush c", "\"c\""),
            ("{at: 1s, unregister: k}", "unregister k", "\"k\""),
            (
                "{at: 1s, git: {latency: 2s}}",
                "git Some(2s) None None None",
                "{\"latency\":\"2s\"}",
            ),
            (
                "{at: 1s, git: {hourly_limit: 5000}}",
                "git None None None Some(5000)",
                "{\"hourly_limit\":5000}",
            ),
            (
                "{at: 1s, latency: {between: [a, b], max: 300ms}}",
                "latency a b 300ms",
                "{\"between\":[\"a\",\"b\"],\"max\":\"300ms\"}",
            ),
            (
                "{at: 1s, scale: {replicas: 3}}",
                "scale 3 10s",
                "{\"replicas\":3,\"every\":\"10s\"}",
            ),
            (
                "{at: 1s, apiserver: {throttle_rate: 0.5}}",
                "apiserver Some(0.5)",
                "{\"throttle_rate\":0.5}",
            ),
        ];
        for (yaml, applied, detail) in cases {
            let fault = Fault::from_step(&step(yaml)).expect(yaml);
            let mut log = Log::default();
            fault.apply(&mut log);
            assert_eq!(log.0, vec![applied.to_string()], "{yaml}");
            assert_eq!(fault.detail().to_string(), detail, "{yaml}");
        }
    }

    #[test]
    fn a_step_with_no_or_two_actions_is_no_fault() {
        assert_eq!(Fault::from_step(&step("{at: 1s}")), None);
        assert_eq!(
            Fault::from_step(&step("{at: 1s, crash: a, restart: b}")),
            None
        );
    }
}
