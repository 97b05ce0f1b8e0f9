//! Rollouts and Workflows in a scenario world: the workload creates Rollouts, deploys new
//! versions with drawn analysis verdicts and promotes/retries as an operator, submits
//! workflows with drawn step outcomes; the controllers run them to their ends. The same
//! seed gives the same trace; a scenario that asks for a load without its controller is
//! refused with the reason.

use orrery_sim::harness::runner;
use orrery_sim::scenario::{self, Variant};
use orrery_system::observe::WorldEvent;

const WORLD: &str = "name: argo-world
description: Rollouts and Workflows with their controllers
topology:
  hosts:
    - {name: apiserver, role: apiserver}
    - {name: argocd, role: argocd}
    - {name: probe, role: probe}
    - {name: workload, role: workload}
    - {name: rollouts, role: rollouts}
    - {name: workflows, role: workflows}
workload:
  applications: 0
  commit_every: 0s
  churn_every: 0s
  health_flap_every: 0s
  rollouts:
    count: 12
    deploy_every: 3s
    verdicts: {good: 50, bad: 20, unsure: 10, unreachable: 0, crash_loop: 20}
    promote_after: 20s
    retry_after: 40s
  workflows: {submit_every: 4s, steps: 3, fail_percent: 30, max_step_seconds: 8, ttl_seconds: 30}
duration: 240s
calm: 60s
invariants:
  - name: probe_rv_monotonic
expect: {faithful: pass, hardened: pass}
";

#[test]
fn the_workload_drives_rollouts_and_workflows_through_every_outcome_deterministically() {
    let scenario =
        scenario::parse::parse("argo-world.yaml", WORLD).unwrap_or_else(|e| panic!("{e}"));
    let run = runner::run(&scenario, 1, Variant::Hardened);
    assert_eq!(run.harness_error, None);
    let events = run.trace.events();
    let phases = |prefix: &str| -> std::collections::BTreeSet<String> {
        events
            .iter()
            .filter_map(|e| match e.world() {
                Some(WorldEvent::RolloutPhase { phase, message, .. }) if prefix == "ro" => Some(
                    format!("{phase}: {}", message.split(':').next().unwrap_or("")),
                ),
                Some(WorldEvent::WorkflowPhase { phase, .. }) if prefix == "wf" => {
                    Some(phase.clone())
                }
                Some(WorldEvent::AnalysisDone { phase, .. }) if prefix == "ar" => {
                    Some(phase.clone())
                }
                _ => None,
            })
            .collect()
    };
    let rollouts = phases("ro");
    for seen in [
        "Healthy: ",
        "Paused: CanaryPauseStep",
        "Paused: BlueGreenPause",
        "Degraded: RolloutAborted",
    ] {
        // (A crash-looping version reaches the 600 s progress deadline only in longer
        // runs; the pure reconcile's tests show it.)
        assert!(
            rollouts.contains(seen),
            "no Rollout went {seen:?}: {rollouts:?}"
        );
    }
    let runs = phases("ar");
    assert!(
        runs.contains("Successful") && runs.contains("Failed"),
        "{runs:?}"
    );
    let workflows = phases("wf");
    assert!(
        workflows.contains("Succeeded") && workflows.contains("Failed"),
        "{workflows:?}"
    );
    assert!(
        events.iter().any(|e| matches!(e.world(), Some(WorldEvent::ApiWrite { verb, resource, .. }) if verb == "delete" && resource == "workflows")),
        "TTL collection deleted workflows"
    );
    let again = runner::run(&scenario, 1, Variant::Hardened);
    assert_eq!(
        run.trace.hash(),
        again.trace.hash(),
        "same seed, same trace"
    );
}

#[test]
fn a_load_without_its_controller_is_refused_with_the_reason() {
    let yaml = WORLD.replace("    - {name: rollouts, role: rollouts}\n", "");
    let error = scenario::parse::parse("argo-world.yaml", &yaml).expect_err("refused");
    assert!(
        error
            .to_string()
            .contains("a rollouts load needs one host with role Rollouts"),
        "{error}"
    );
}
