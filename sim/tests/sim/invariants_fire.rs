//! Worlds in which an invariant must fire, for the invariants no committed scenario shows
//! firing (their counterparts, worlds in which they hold, are the scenarios' hardened runs).
//! A checker that never fires proves nothing; these keep each one honest end to end.

use orrery_sim::harness::runner;
use orrery_sim::scenario::{self, Outcome, Variant};

fn violated(yaml: &str, variant: Variant) -> (Outcome, Vec<String>) {
    let scenario = scenario::parse::parse("test.yaml", yaml).unwrap_or_else(|e| panic!("{e}"));
    let outcome = runner::run(&scenario, 1, variant);
    assert_eq!(outcome.harness_error, None);
    let names = outcome
        .violations
        .iter()
        .map(|v| v.invariant.clone())
        .collect();
    (outcome.result, names)
}

#[test]
fn requests_answered_fires_when_clients_lose_the_platform() {
    // The client is cut off from the gateway itself: its requests get no answer at all.
    let yaml = "name: t
description: clients partitioned from the platform
topology:
  hosts:
    - {name: gateway, role: gateway}
    - {name: prod, role: runtime}
    - {name: client-0, role: client}
tunnel: {request_every: 1s}
faults:
  - {at: 10s, partition: [client-0, gateway]}
  - {at: 50s, repair: [client-0, gateway]}
duration: 60s
calm: 20s
invariants:
  - name: requests_answered
expect: {hardened: safety_violation}
";
    let (result, names) = violated(yaml, Variant::Hardened);
    assert_eq!(result, Outcome::SafetyViolation);
    assert_eq!(names, vec!["requests_answered".to_string()]);
}

#[test]
fn all_reconnect_fires_when_the_restarted_server_registers_too_slowly() {
    // A tunnel server that takes 30 s per registration: after its restart the third of three
    // runtimes is back only after 90 s, past the 60 s bound, on a healthy network.
    let yaml = "name: t
description: a tunnel server too slow to take its fleet back in time
topology:
  hosts:
    - {name: gateway, role: gateway}
    - {name: fleet-0, role: runtime}
tunnel: {runtimes_per_host: 3, registration_cost: 30s}
faults:
  - {at: 99s, crash: gateway}
  - {at: 100s, restart: gateway}
duration: 200s
calm: 30s
invariants:
  - name: all_reconnect
expect: {hardened: liveness_timeout}
";
    let (result, names) = violated(yaml, Variant::Hardened);
    assert_eq!(result, Outcome::LivenessTimeout);
    assert_eq!(names, vec!["all_reconnect".to_string()]);
}

#[test]
fn single_owner_fires_while_faithful_replicas_disagree_on_the_replica_count() {
    // Scale 1 → 2 with the rolling restart of reporter-0 due after the run ends: reporter-0
    // still believes it is the only shard, reporter-1 owns half the apps too.
    let yaml = "name: t
description: faithful replicas with different replica counts at the end
topology:
  hosts:
    - {name: apiserver, role: apiserver}
    - {name: argocd, role: argocd}
    - {name: workload, role: workload}
    - {name: platform, role: platform}
    - {name: cache, role: cache}
    - {name: reporter-0, role: reporter}
    - {name: reporter-1, role: reporter}
workload: {applications: 40, repositories: 2}
reporter: {replicas: 1}
faults:
  - {at: 10s, scale: {replicas: 2, every: 10m}}
duration: 30s
calm: 20s
invariants:
  - name: single_owner
expect: {faithful: safety_violation}
";
    let (result, names) = violated(yaml, Variant::Faithful);
    assert_eq!(result, Outcome::SafetyViolation);
    assert_eq!(names, vec!["single_owner".to_string()]);
}

#[test]
fn probe_rv_monotonic_fires_when_a_restarted_probe_lists_from_a_lagging_cache() {
    // An HA control plane whose watch cache lags (kubernetes#59848): the probe restarts and
    // lists at resourceVersion=0, which that cache answers with objects older than the probe
    // saw before its crash. Without the lag, or with kube-rs's default quorum list, the same
    // world holds the invariant.
    let yaml = |lag: u64, from_cache: bool| {
        format!(
            "name: t
description: a restarted reflector relists from a stale cache
topology:
  hosts:
    - {{name: apiserver, role: apiserver}}
    - {{name: argocd, role: argocd}}
    - {{name: workload, role: workload}}
    - {{name: probe, role: probe}}
probe: {{list_from_cache: {from_cache}}}
workload: {{applications: 20, repositories: 2, commit_every: 200ms, churn_every: 0s, health_flap_every: 300ms}}
faults:
  - {{at: 20s, apiserver: {{stale_list_lag: {lag}}}}}
  - {{at: 40s, crash: probe}}
  - {{at: 41s, restart: probe}}
duration: 60s
calm: 30s
invariants:
  - name: probe_rv_monotonic
expect: {{hardened: safety_violation}}
"
        )
    };
    let (result, names) = violated(&yaml(30, true), Variant::Hardened);
    assert_eq!(result, Outcome::SafetyViolation);
    assert_eq!(names, vec!["probe_rv_monotonic".to_string()]);
    for (lag, from_cache) in [(0, true), (30, false)] {
        let (result, names) = violated(&yaml(lag, from_cache), Variant::Hardened);
        assert_eq!(
            (result, names),
            (Outcome::Pass, vec![]),
            "lag {lag}, from cache {from_cache}"
        );
    }
}

#[test]
fn no_app_stuck_unknown_fires_when_the_recovery_from_a_cluster_outage_is_dropped() {
    // 20 apps on one managed cluster, a faithful reporter whose rate limiter allows three
    // events per app per 10 minutes: created, synced, Unknown — the recovery is the fourth
    // and is dropped, and nothing re-sends it before the run ends.
    let yaml = "name: t
description: a cluster outage whose recovery the rate limiter drops
topology:
  hosts:
    - {name: apiserver, role: apiserver}
    - {name: argocd, role: argocd}
    - {name: workload, role: workload}
    - {name: platform, role: platform}
    - {name: cache, role: cache}
    - {name: reporter-0, role: reporter}
    - {name: cluster-a, role: cluster}
argocd: {reconcile_every: 180s}
workload: {applications: 20, repositories: 1, commit_every: 0s, churn_every: 0s, health_flap_every: 0s, refresh_every: 0s}
reporter: {rate_limiter: {bucket_size: 3, period: 600s}}
faults:
  - {at: 30s, partition: [argocd, cluster-a]}
  - {at: 60s, repair: [argocd, cluster-a]}
duration: 90s
calm: 30s
invariants:
  - name: no_app_stuck_unknown
expect: {faithful: liveness_timeout}
";
    let (result, names) = violated(yaml, Variant::Faithful);
    assert_eq!(result, Outcome::LivenessTimeout, "{names:?}");
    assert_eq!(names, ["no_app_stuck_unknown"]);
}

#[test]
fn platform_resources_never_older_fires_only_with_the_lagging_cache_in_reporter_stale_list() {
    // The committed scenario, faithful: the reporter's resourceVersion=0 relist after its
    // restart reads a cache 60 revisions behind and moves resources back to older
    // deployments. With the cache not lagging, the same restart (Redis emptied too) holds
    // the invariant: the stale list is the cause, not the restart.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/reporter-stale-list.yaml"
    );
    let yaml = std::fs::read_to_string(path).expect("scenarios/reporter-stale-list.yaml");
    assert!(
        yaml.contains("stale_list_lag: 60"),
        "the scenario's lag moved"
    );
    let (result, names) = violated(&yaml, Variant::Faithful);
    assert_eq!(result, Outcome::SafetyViolation);
    assert_eq!(names, vec!["platform_resources_never_older".to_string()]);
    let without_lag = yaml.replace("stale_list_lag: 60", "stale_list_lag: 0");
    let (result, names) = violated(&without_lag, Variant::Faithful);
    assert_eq!((result, names), (Outcome::Pass, vec![]));
}
