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
