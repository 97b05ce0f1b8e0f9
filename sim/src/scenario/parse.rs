//! Strict scenario parsing: errors name the file, line, column and field.

use std::path::Path;

use super::model::{FaultStep, Role, Scenario};
use crate::checkers;
use crate::world::apiserver::Knobs;

/// A scenario that could not be read, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: cannot read scenario: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// YAML syntax, an unknown field or a value of the wrong type.
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde's message, which names the field.
        message: String,
    },
    /// A value that parses but makes no sense (unknown host, two actions in one step…).
    #[error("{path}:{line}: {field}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// 1-based line where the field appears (best effort).
        line: usize,
        /// Dotted path of the field, e.g. `faults[2].partition`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// Reads and validates a scenario file.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&path.display().to_string(), &text)
}

/// Parses and validates scenario text; `path` is only used in messages.
pub fn parse(path: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let scenario: Scenario = serde_yaml::from_str(text).map_err(|e| {
        let (line, column) = e
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((0, 0));
        let message = e.to_string();
        let message = match message.rfind(" at line ") {
            Some(i) => message[..i].to_string(),
            None => message,
        };
        ScenarioError::Syntax {
            path: path.to_string(),
            line,
            column,
            message,
        }
    })?;
    validate(path, text, &scenario)?;
    Ok(scenario)
}

/// The 1-based line of the first line at or after `from` containing `needle` (best effort).
fn line_of(text: &str, needle: &str, from: usize) -> usize {
    text.lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .unwrap_or(0)
}

fn invalid(path: &str, text: &str, field: String, needle: &str, message: String) -> ScenarioError {
    let section = field.split(['.', '[']).next().unwrap_or("");
    let from = line_of(text, &format!("{section}:"), 1);
    ScenarioError::Invalid {
        path: path.to_string(),
        line: line_of(text, needle, from),
        field,
        message,
    }
}

fn validate(path: &str, text: &str, s: &Scenario) -> Result<(), ScenarioError> {
    if !s.apiserver.forbidden.is_empty() {
        // The calm phase resets knobs to these, so a revoked resource could never converge.
        let message =
            "forbidden revokes access for good here; revoke it in a fault step instead".to_string();
        return Err(invalid(
            path,
            text,
            "apiserver.forbidden".into(),
            "forbidden:",
            message,
        ));
    }
    let hosts: Vec<&str> = s.topology.hosts.iter().map(|h| h.name.as_str()).collect();
    for (i, host) in s.topology.hosts.iter().enumerate() {
        if hosts.iter().filter(|h| **h == host.name).count() > 1 {
            return Err(invalid(
                path,
                text,
                format!("topology.hosts[{i}].name"),
                &host.name,
                format!("host {:?} is declared twice", host.name),
            ));
        }
    }
    let count = |role: Role| s.topology.hosts.iter().filter(|h| h.role == role).count();
    // The Kubernetes world (API server, Argo CD, workload) is needed by probes and reporters.
    let kube_world = count(Role::Probe) + count(Role::Reporter) > 0;
    for role in [Role::Apiserver, Role::Argocd, Role::Workload] {
        if (kube_world && count(role) != 1) || count(role) > 1 {
            return Err(invalid(
                path,
                text,
                "topology.hosts".into(),
                "hosts:",
                format!(
                    "exactly one host must have role {role:?} (found {})",
                    count(role)
                ),
            ));
        }
    }
    let tunnel_world = count(Role::Runtime) + count(Role::Client) > 0;
    if tunnel_world && count(Role::Gateway) != 1 {
        return Err(invalid(
            path,
            text,
            "topology.hosts".into(),
            "hosts:",
            "runtimes and clients need exactly one host with role gateway".into(),
        ));
    }
    for role in [Role::Probe, Role::Platform, Role::Cache, Role::Gateway] {
        if count(role) > 1 {
            return Err(invalid(
                path,
                text,
                "topology.hosts".into(),
                "hosts:",
                format!(
                    "at most one host may have role {role:?} (found {})",
                    count(role)
                ),
            ));
        }
    }
    let reporters = count(Role::Reporter);
    if reporters > 0 && (count(Role::Platform) != 1 || count(Role::Cache) != 1) {
        return Err(invalid(
            path,
            text,
            "topology.hosts".into(),
            "hosts:",
            "reporters need one host with role platform and one with role cache".into(),
        ));
    }
    for (i, host) in s
        .topology
        .hosts
        .iter()
        .enumerate()
        .filter(|(_, h)| h.role == Role::Reporter)
    {
        if orrery_system::env::Identity::from_host(host.name.as_str())
            .ordinal
            .is_none()
        {
            return Err(invalid(
                path,
                text,
                format!("topology.hosts[{i}].name"),
                &host.name,
                format!(
                    "reporter host {:?} needs an ordinal suffix like reporter-0",
                    host.name
                ),
            ));
        }
    }
    if let Some(replicas) = s.reporter.replicas {
        if replicas as usize > reporters || replicas == 0 {
            return Err(invalid(
                path,
                text,
                "reporter.replicas".into(),
                "replicas:",
                format!("replicas must be between 1 and the {reporters} reporter hosts declared"),
            ));
        }
    }
    if s.tick.is_zero() || s.tick > std::time::Duration::from_secs(1) {
        return Err(invalid(
            path,
            text,
            "tick".into(),
            "tick:",
            format!("tick must be between 1ms and 1s, got {:?}", s.tick),
        ));
    }
    if s.duration.is_zero() {
        return Err(invalid(
            path,
            text,
            "duration".into(),
            "duration:",
            "the fault phase must last longer than 0s".into(),
        ));
    }
    if s.seeds.is_empty() {
        return Err(invalid(
            path,
            text,
            "seeds".into(),
            "seeds:",
            "list at least one seed".into(),
        ));
    }
    if s.workload.repositories == 0 {
        return Err(invalid(
            path,
            text,
            "workload.repositories".into(),
            "repositories:",
            "at least one repository is needed".into(),
        ));
    }
    for (i, step) in s.faults.iter().enumerate() {
        validate_step(path, text, &hosts, reporters, i, step, s.duration)?;
    }
    for (i, invariant) in s.invariants.iter().enumerate() {
        checkers::validate(invariant)
            .map_err(|m| invalid(path, text, format!("invariants[{i}]"), &invariant.name, m))?;
    }
    if s.invariants.is_empty() {
        return Err(invalid(
            path,
            text,
            "invariants".into(),
            "invariants:",
            "a scenario must check at least one invariant".into(),
        ));
    }
    if s.expect.is_empty() {
        return Err(invalid(
            path,
            text,
            "expect".into(),
            "expect:",
            "declare the expected result for faithful and/or hardened".into(),
        ));
    }
    Ok(())
}

fn validate_step(
    path: &str,
    text: &str,
    hosts: &[&str],
    reporters: usize,
    i: usize,
    step: &FaultStep,
    duration: std::time::Duration,
) -> Result<(), ScenarioError> {
    let field = |name: &str| format!("faults[{i}].{name}");
    let actions = [
        step.partition.is_some(),
        step.repair.is_some(),
        step.crash.is_some(),
        step.restart.is_some(),
        step.latency.is_some(),
        step.apiserver.is_some(),
        step.scale.is_some(),
        step.platform.is_some(),
    ];
    let set = actions.iter().filter(|a| **a).count();
    if set != 1 {
        return Err(invalid(path, text, format!("faults[{i}]"), &format!("at: {}", super::duration::render(step.at)), format!(
            "each fault step needs exactly one of partition, repair, crash, restart, latency, apiserver, scale, platform (found {set})"
        )));
    }
    if step.at > duration {
        return Err(invalid(
            path,
            text,
            field("at"),
            "at:",
            format!(
                "at {:?} is after the fault phase ends ({duration:?})",
                step.at
            ),
        ));
    }
    let mut named: Vec<(&str, &str)> = Vec::new();
    if let Some([a, b]) = &step.partition {
        named.extend([("partition", a.as_str()), ("partition", b.as_str())]);
    }
    if let Some([a, b]) = &step.repair {
        named.extend([("repair", a.as_str()), ("repair", b.as_str())]);
    }
    if let Some(h) = &step.crash {
        named.push(("crash", h));
    }
    if let Some(h) = &step.restart {
        named.push(("restart", h));
    }
    if let Some(l) = &step.latency {
        named.extend([
            ("latency.between", l.between[0].as_str()),
            ("latency.between", l.between[1].as_str()),
        ]);
    }
    for (name, host) in named {
        if !hosts.contains(&host) {
            return Err(invalid(
                path,
                text,
                field(name),
                host,
                format!("unknown host {host:?}; hosts are {hosts:?}"),
            ));
        }
    }
    if let Some(scale) = &step.scale {
        if scale.replicas == 0 || scale.replicas as usize > reporters {
            return Err(invalid(
                path,
                text,
                field("scale.replicas"),
                "replicas:",
                format!(
                    "scale to between 1 and the {reporters} reporter hosts declared, not {}",
                    scale.replicas
                ),
            ));
        }
    }
    if let Some(patch) = &step.apiserver {
        let knobs = apply_knob_patch(&Knobs::default(), patch)
            .map_err(|m| invalid(path, text, field("apiserver"), "apiserver:", m))?;
        let served: Vec<String> = crate::world::apiserver::resources::registry()
            .into_iter()
            .map(|k| k.plural)
            .collect();
        if let Some(unknown) = knobs.forbidden.iter().find(|r| !served.contains(r)) {
            let message = format!(
                "forbidden: {unknown:?} is not a served resource (one of: {})",
                served.join(", ")
            );
            return Err(invalid(
                path,
                text,
                field("apiserver.forbidden"),
                "forbidden:",
                message,
            ));
        }
    }
    Ok(())
}

/// Applies a partial knob map (from a fault step) onto `base`; unknown knobs are errors.
pub fn apply_knob_patch(base: &Knobs, patch: &serde_yaml::Value) -> Result<Knobs, String> {
    let mut merged = serde_yaml::to_value(base).map_err(|e| e.to_string())?;
    let (Some(target), Some(changes)) = (merged.as_mapping_mut(), patch.as_mapping()) else {
        return Err("apiserver knobs must be a mapping, e.g. {cut_stream_rate: 0.1}".into());
    };
    for (key, value) in changes {
        target.insert(key.clone(), value.clone());
    }
    serde_yaml::from_value(merged).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name: t
description: d
topology:
  hosts:
    - {name: apiserver, role: apiserver}
    - {name: argocd, role: argocd}
    - {name: workload, role: workload}
    - {name: probe, role: probe}
faults:
  - at: 5s
    partition: [probe, apiserver]
duration: 10s
calm: 10s
invariants:
  - name: probe_matches_apiserver
expect:
  faithful: pass
";

    #[test]
    fn a_good_scenario_parses_with_defaults() {
        let s = parse("t.yaml", GOOD).unwrap();
        assert_eq!(s.seeds, vec![1]);
        assert_eq!(s.workload.applications, 50);
    }

    #[test]
    fn a_misspelt_field_names_file_line_column_and_field() {
        let bad = GOOD.replace(
            "    partition: [probe, apiserver]",
            "    partiton: [probe, apiserver]",
        );
        let err = parse("scenarios/t.yaml", &bad).unwrap_err().to_string();
        assert!(err.starts_with("scenarios/t.yaml:11:"), "{err}");
        assert!(err.contains("unknown field `partiton`"), "{err}");
    }

    #[test]
    fn an_unknown_host_in_a_fault_is_rejected_with_its_line() {
        let bad = GOOD.replace("[probe, apiserver]", "[prob, apiserver]");
        let err = parse("t.yaml", &bad).unwrap_err().to_string();
        assert!(
            err.starts_with("t.yaml:11: faults[0].partition: unknown host \"prob\""),
            "{err}"
        );
    }

    #[test]
    fn a_bad_duration_and_a_bad_knob_are_rejected() {
        let err = parse("t.yaml", &GOOD.replace("calm: 10s", "calm: 10 parsecs"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.yaml:13:7: calm:") && err.contains("unknown unit"),
            "{err}"
        );
        let knob = GOOD.replace(
            "    partition: [probe, apiserver]",
            "    apiserver: {cut_rate: 0.5}",
        );
        let err = parse("t.yaml", &knob).unwrap_err().to_string();
        assert!(
            err.contains("faults[0].apiserver") && err.contains("cut_rate"),
            "{err}"
        );
    }

    #[test]
    fn a_forbidden_fault_must_name_served_resources() {
        let good = GOOD.replace(
            "    partition: [probe, apiserver]",
            "    apiserver: {forbidden: [applications, configmaps]}",
        );
        assert!(parse("t.yaml", &good).is_ok());
        let typo = GOOD.replace(
            "    partition: [probe, apiserver]",
            "    apiserver: {forbidden: [aplications]}",
        );
        let err = parse("t.yaml", &typo).unwrap_err().to_string();
        assert!(
            err.contains("faults[0].apiserver.forbidden")
                && err.contains("\"aplications\" is not a served resource"),
            "{err}"
        );
    }
}
