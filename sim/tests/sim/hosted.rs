//! Hosted runtimes' virtual clusters end to end: the control plane's vcluster syncer (real
//! kube-rs watches and writes) between a tenant's simulated API server and the shared host
//! cluster's, judged by `vcluster_isolation`.

use orrery_sim::harness::runner;
use orrery_sim::scenario::{self, Outcome, Variant};

fn world(colliding: bool) -> String {
    format!(
        "name: t
description: one tenant's virtual cluster on a host cluster
topology:
  hosts:
    - {{name: apiserver, role: apiserver}}
    - {{name: acme, role: vcluster}}
hosted:
  write_every: 300ms
  colliding: {colliding}
duration: 40s
calm: 30s
invariants:
  - name: vcluster_isolation
expect: {{hardened: pass}}
"
    )
}

fn run(colliding: bool, variant: Variant) -> runner::RunOutcome {
    let scenario =
        scenario::parse::parse("test.yaml", &world(colliding)).unwrap_or_else(|e| panic!("{e}"));
    let outcome = runner::run(&scenario, 1, variant);
    assert_eq!(outcome.harness_error, None);
    outcome
}

/// vcluster's naming maps `prod/db-x-team` and `team-x-prod/db` to one host Secret: a pod of
/// `team-x-prod` mounting `db` reads `prod`'s Secret. hardened keeps both apart.
#[test]
fn vcluster_isolation_fires_when_a_pod_would_mount_another_namespaces_secret() {
    let faithful = run(true, Variant::Faithful);
    assert_eq!(faithful.result, Outcome::SafetyViolation);
    let violation = &faithful.violations[0];
    assert_eq!(violation.invariant, "vcluster_isolation");
    assert_eq!(violation.details["first"]["problem"], "foreign");
    assert_eq!(
        violation.details["first"]["object"],
        "secrets/team-x-prod/db"
    );
    assert_eq!(violation.details["first"]["holds"], "acme prod/db-x-team");
    assert!(faithful
        .reached
        .iter()
        .any(|c| c.name() == "vcluster_conflict"));

    let hardened = run(true, Variant::Hardened);
    assert_eq!(hardened.result, Outcome::Pass, "{:?}", hardened.violations);
    assert!(!hardened.state.hosted[0].objects.is_empty());
    let copies = &hardened.state.hosted[0].copies;
    let objects = &hardened.state.hosted[0].objects;
    assert_eq!(copies.len(), objects.len(), "one copy per object");
}

/// Without colliding names faithful keeps every copy too: the violation is the naming's.
#[test]
fn faithful_keeps_a_tenant_apart_when_no_names_collide() {
    let faithful = run(false, Variant::Faithful);
    assert_eq!(faithful.result, Outcome::Pass, "{:?}", faithful.violations);
}

/// Two tenants with hosted runtimes: each vcluster host runs its tenant's workload, Argo CD,
/// reporter and cache against its own virtual cluster, and reports with its hosted runtime's
/// token. Both tenants' apps have the same names.
fn with_runtimes(queue_capacity: usize) -> String {
    format!(
        "name: t
description: two tenants' hosted runtimes
topology:
  hosts:
    - {{name: apiserver, role: apiserver}}
    - {{name: platform, role: platform}}
    - {{name: acme, role: vcluster}}
    - {{name: globex, role: vcluster}}
hosted:
  write_every: 1s
  applications: 30
reporter:
  queue_capacity: {queue_capacity}
duration: 60s
calm: 60s
invariants:
  - name: vcluster_isolation
  - name: hosted_runtimes_converge
expect: {{hardened: pass}}
"
    )
}

fn run_with_runtimes(queue_capacity: usize, variant: Variant) -> runner::RunOutcome {
    let scenario = scenario::parse::parse("test.yaml", &with_runtimes(queue_capacity))
        .unwrap_or_else(|e| panic!("{e}"));
    let outcome = runner::run(&scenario, 1, variant);
    assert_eq!(outcome.harness_error, None);
    outcome
}

/// The platform files each hosted runtime's events under its own runtime: both show all of
/// their own 30-odd apps (same names, each tenant's revisions), none of the other's.
#[test]
fn hosted_runtimes_each_show_their_own_virtual_clusters_apps() {
    let outcome = run_with_runtimes(1_000, Variant::Hardened);
    assert_eq!(outcome.result, Outcome::Pass, "{:?}", outcome.violations);
    let runtimes: Vec<_> = outcome
        .state
        .hosted
        .iter()
        .map(|t| t.runtime.as_ref().expect("a hosted runtime per vcluster"))
        .collect();
    assert_eq!(runtimes[0].runtime, "acme-hosted");
    assert_eq!(runtimes[1].runtime, "globex-hosted");
    for runtime in &runtimes {
        assert!(runtime.apps.len() >= 25, "{} apps", runtime.apps.len());
        let shown = runtime.reported.values().filter(|r| !r.deleted).count();
        assert_eq!(shown, runtime.apps.len(), "{}", runtime.runtime);
    }
    // Same names, the tenants' own histories: some app's revision differs between them.
    let (acme, globex) = (&runtimes[0].apps, &runtimes[1].apps);
    assert!(acme.iter().any(|a| globex
        .iter()
        .any(|g| g.key == a.key && g.revision != a.revision)));
}

/// A faithful reporter whose queue holds 2 events drops most of them and never resyncs:
/// `hosted_runtimes_converge` names the runtime whose apps the platform shows stale.
#[test]
fn hosted_runtimes_converge_fires_when_a_runtimes_events_are_lost() {
    let outcome = run_with_runtimes(2, Variant::Faithful);
    let violation = outcome
        .violations
        .iter()
        .find(|v| v.invariant == "hosted_runtimes_converge")
        .unwrap_or_else(|| panic!("expected a violation, got {:?}", outcome.violations));
    assert!(violation.details["stale_or_missing"].as_u64() > Some(0));
    let runtime = violation.details["runtime"].as_str().unwrap_or_default();
    assert_eq!(runtime, format!("{}-hosted", violation.host));
}
