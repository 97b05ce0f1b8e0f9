//! Every checker over hand-written traces: one trace where its invariant must fire and one
//! where it must not. (Whole worlds in which they fire are in `tests/sim/`: the scenarios'
//! faithful runs and `scenarios::a_probe_that_cannot_converge_is_reported_as_a_liveness_timeout`.)

use std::collections::BTreeMap;

use orrery_system::core::Variant;
use orrery_system::observe::{Observation, ReporterEvent, RequestOutcome, TunnelEvent, WorldEvent};
use orrery_system::platform::events::read_model::AppState;

use super::restricted::PROPAGATION_MS;
use super::*;
use crate::faults::Fault;
use crate::trace::{HarnessEvent, HostChange, TraceEvent};
use crate::world::probe::digest;

fn at(at_ms: u64, host: &str, observation: impl Into<Observation>) -> TraceEvent {
    TraceEvent::observed(at_ms, host, observation)
}

fn harness(at_ms: u64, event: HarnessEvent) -> TraceEvent {
    TraceEvent::of_harness(at_ms, event)
}

/// Runs the named invariant's checker over `events`, then `state`.
fn violations(name: &str, events: &[TraceEvent], state: &FinalState) -> Vec<Violation> {
    let invariant = Invariant {
        name: name.into(),
        params: BTreeMap::new(),
    };
    let mut checkers = vec![build(&invariant).unwrap()];
    check(&mut checkers, events, state)
}

fn app(name: &str, rv: &str, sync: &str) -> AppTruth {
    AppTruth {
        key: format!("argocd/{name}"),
        name: name.into(),
        rv: rv.into(),
        sync_status: sync.into(),
        revision: "abc".into(),
        health_status: "Healthy".into(),
        destination: "https://kubernetes.default.svc".into(),
        change_revision: String::new(),
        ..Default::default()
    }
}

/// The tunnel server accepted `runtime`'s tunnel at `ms`.
fn up(ms: u64, runtime: &str) -> TraceEvent {
    at(
        ms,
        "gateway",
        TunnelEvent::ServerUp {
            runtime: runtime.into(),
            generation: 1,
        },
    )
}

fn request(outcome: RequestOutcome, latency_ms: u64) -> WorldEvent {
    WorldEvent::Request {
        key: "c-1".into(),
        write: false,
        attempt: 1,
        outcome,
        latency_ms,
    }
}

#[test]
fn probe_matches_apiserver_fires_on_a_stale_view_only() {
    let state = FinalState {
        apps: vec![app("a", "7", "Synced")],
        ..Default::default()
    };
    let (count, view) = digest(vec![("a".into(), "7".into())]);
    let seen = |rv: &str, view: &str| {
        vec![
            at(1, "probe", WorldEvent::ProbeInit),
            at(
                2,
                "probe",
                WorldEvent::ProbeInitApply {
                    name: "a".into(),
                    rv: rv.into(),
                },
            ),
            at(3, "probe", WorldEvent::ProbeInitDone),
            at(
                4,
                "probe",
                WorldEvent::ProbeView {
                    count: count as u64,
                    digest: view.into(),
                },
            ),
        ]
    };
    assert!(violations("probe_matches_apiserver", &seen("7", &view), &state).is_empty());
    let stale = violations("probe_matches_apiserver", &seen("6", "stale"), &state);
    assert_eq!(stale.len(), 1);
    assert_eq!(stale[0].class, Class::Liveness);
}

#[test]
fn probe_rv_monotonic_fires_when_an_object_goes_back() {
    let forward = [
        at(
            1,
            "probe",
            WorldEvent::ProbeApply {
                name: "a".into(),
                rv: "5".into(),
            },
        ),
        at(
            2,
            "probe",
            WorldEvent::ProbeApply {
                name: "a".into(),
                rv: "9".into(),
            },
        ),
        at(
            3,
            "probe",
            WorldEvent::ProbeApply {
                name: "b".into(),
                rv: "6".into(),
            },
        ),
    ];
    let state = FinalState::default();
    assert!(violations("probe_rv_monotonic", &forward, &state).is_empty());
    let mut back = forward.to_vec();
    back.push(at(
        4,
        "probe",
        WorldEvent::ProbeApply {
            name: "a".into(),
            rv: "8".into(),
        },
    ));
    let found = violations("probe_rv_monotonic", &back, &state);
    assert_eq!((found.len(), found[0].at_ms), (1, 4));
    assert_eq!(found[0].class, Class::Safety);
}

#[test]
fn platform_converges_fires_on_a_lost_final_state() {
    let reported = |sync: &str| {
        let state = AppState {
            resource_version: 7,
            deleted: false,
            sync_status: sync.into(),
            revision: "abc".into(),
            health_status: "Healthy".into(),
            runtime: "acme".into(),
            read_errors: 0,
            ..Default::default()
        };
        [("argocd/a".to_string(), state)].into_iter().collect()
    };
    let state = |sync: &str| FinalState {
        apps: vec![app("a", "7", "Synced")],
        reported: reported(sync),
        end_ms: 10,
        unregistered: Default::default(),
        ..Default::default()
    };
    assert!(violations("platform_converges", &[], &state("Synced")).is_empty());
    let lost = violations("platform_converges", &[], &state("OutOfSync"));
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].class, Class::Safety);
}

#[test]
fn no_stale_read_errors_fires_while_an_app_still_shows_argo_cd_read_errors() {
    let state = |read_errors: u32, deleted: bool| FinalState {
        apps: vec![app("a", "7", "Synced")],
        reported: [(
            "argocd/a".to_string(),
            AppState {
                resource_version: 7,
                deleted,
                sync_status: "Synced".into(),
                revision: "abc".into(),
                health_status: "Healthy".into(),
                runtime: "acme".into(),
                read_errors,
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        end_ms: 10,
        unregistered: Default::default(),
        ..Default::default()
    };
    assert!(violations("no_stale_read_errors", &[], &state(0, false)).is_empty());
    assert!(
        violations("no_stale_read_errors", &[], &state(2, true)).is_empty(),
        "a deleted app's last report does not count"
    );
    let shown = violations("no_stale_read_errors", &[], &state(2, false));
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].class, Class::Liveness);
    assert_eq!(shown[0].details["apps_with_read_errors"], 1);
}

#[test]
fn single_owner_fires_when_apps_are_orphaned_or_doubly_owned() {
    let start = |replica: &str, shard: u32| {
        at(
            1,
            replica,
            ReporterEvent::Start {
                replica: replica.into(),
                variant: Variant::Faithful,
                shard: Some(shard),
                replicas: 2,
            },
        )
    };
    let state = FinalState {
        apps: (0..20)
            .map(|i| app(&format!("app-{i}"), "1", "Synced"))
            .collect(),
        ..Default::default()
    };
    let split = [start("reporter-0", 0), start("reporter-1", 1)];
    assert!(violations("single_owner", &split, &state).is_empty());
    // Both replicas believe they are shard 0 of 2: half the apps twice, half never.
    let same_shard = [start("reporter-0", 0), start("reporter-1", 0)];
    assert_eq!(violations("single_owner", &same_shard, &state).len(), 1);
    // A stopped replica owns nothing any more.
    let mut stopped = split.to_vec();
    stopped.push(harness(
        5,
        HarnessEvent::HostStop {
            host: "reporter-1".into(),
            why: HostChange::Crash,
        },
    ));
    assert_eq!(violations("single_owner", &stopped, &state).len(), 1);
}

#[test]
fn requests_answered_fires_on_a_hung_or_late_answer() {
    let state = FinalState::default();
    let answered = [at(
        1,
        "client",
        request(RequestOutcome::Status(503), 10_000),
    )];
    assert!(violations("requests_answered", &answered, &state).is_empty());
    let hung = [at(1, "client", request(RequestOutcome::Hung, 30_000))];
    assert_eq!(violations("requests_answered", &hung, &state).len(), 1);
    let late = [at(
        1,
        "client",
        request(RequestOutcome::Status(200), 16_000),
    )];
    assert_eq!(violations("requests_answered", &late, &state).len(), 1);
}

#[test]
fn executed_at_most_once_fires_on_a_second_execution_of_a_key() {
    let state = FinalState::default();
    let run = |key: &str| at(1, "prod", WorldEvent::Execute { key: key.into() });
    assert!(violations("executed_at_most_once", &[run("k1"), run("k2")], &state).is_empty());
    let twice = violations("executed_at_most_once", &[run("k1"), run("k1")], &state);
    assert_eq!(twice.len(), 1);
}

#[test]
fn tunnel_recovers_fires_when_nothing_succeeds_within_the_bound_after_a_repair() {
    let repair = harness(
        1_000,
        HarnessEvent::Fault(Fault::Repair(["prod".into(), "gateway".into()])),
    );
    let ok = |ms| at(ms, "client", request(RequestOutcome::Status(200), 5));
    let bad = |ms| at(ms, "client", request(RequestOutcome::Status(503), 5));
    let state = |end_ms| FinalState {
        end_ms,
        ..Default::default()
    };
    let back = [repair.clone(), bad(2_000), ok(20_000)];
    assert!(violations("tunnel_recovers", &back, &state(60_000)).is_empty());
    let never = [repair.clone(), bad(2_000), bad(40_000)];
    let found = violations("tunnel_recovers", &never, &state(60_000));
    assert_eq!((found.len(), found[0].at_ms), (1, 31_000));
    assert_eq!(found[0].class, Class::Liveness);
    // A new partition stops the clock: the bound applies to repairs that stay repaired.
    let cut_again = [
        repair,
        harness(
            10_000,
            HarnessEvent::Fault(Fault::Partition(["prod".into(), "gateway".into()])),
        ),
    ];
    assert!(violations("tunnel_recovers", &cut_again, &state(60_000)).is_empty());
}

#[test]
fn tunnel_recovers_starts_no_clock_at_a_repair_while_a_host_is_down() {
    // The seed farm's mutant, shrunk: the runtime crashes, a link is repaired a moment later,
    // and the runtime stays down until the calm phase restarts it.
    let fault = |ms, fault| harness(ms, HarnessEvent::Fault(fault));
    let bad = |ms| at(ms, "client", request(RequestOutcome::Status(503), 5));
    let state = FinalState {
        end_ms: 300_000,
        ..Default::default()
    };
    let calm = harness(
        240_000,
        HarnessEvent::CalmStart {
            restarted: vec!["prod".into()],
        },
    );
    let down_until_calm = [
        fault(178_093, Fault::Crash("prod".into())),
        fault(178_100, Fault::Repair(["prod".into(), "gateway".into()])),
        bad(200_000),
        bad(230_000),
        calm.clone(),
        at(245_000, "client", request(RequestOutcome::Status(200), 5)),
    ];
    assert!(violations("tunnel_recovers", &down_until_calm, &state).is_empty());
    // The calm phase's restart starts the clock: nothing back by its bound still fires.
    let never_back = [
        down_until_calm[0].clone(),
        down_until_calm[1].clone(),
        calm,
        bad(280_000),
    ];
    let found = violations("tunnel_recovers", &never_back, &state);
    assert_eq!((found.len(), found[0].at_ms), (1, 270_000));
    // A restart before the calm phase starts it too.
    let restarted = [
        down_until_calm[0].clone(),
        down_until_calm[1].clone(),
        fault(190_000, Fault::Restart("prod".into())),
        bad(225_000),
    ];
    let found = violations("tunnel_recovers", &restarted, &state);
    assert_eq!((found.len(), found[0].at_ms), (1, 220_000));
}

#[test]
fn all_reconnect_fires_when_a_runtime_is_not_back_within_the_bound_after_a_restart() {
    let restart = harness(
        10_000,
        HarnessEvent::Fault(Fault::Restart("gateway".into())),
    );
    let state = FinalState {
        end_ms: 120_000,
        ..Default::default()
    };
    let all_back = [
        up(1, "a"),
        up(2, "b"),
        restart.clone(),
        up(20_000, "a"),
        up(30_000, "b"),
    ];
    assert!(violations("all_reconnect", &all_back, &state).is_empty());
    let one_missing = [up(1, "a"), up(2, "b"), restart, up(20_000, "a")];
    let found = violations("all_reconnect", &one_missing, &state);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].details["not_reconnected"], 1);
}

#[test]
fn recovery_clocks_wait_for_the_last_partition_to_heal() {
    let fault = |ms, fault| harness(ms, HarnessEvent::Fault(fault));
    let link = || ["prod".to_string(), "gateway".to_string()];
    let bad = |ms| at(ms, "client", request(RequestOutcome::Status(503), 5));
    let state = FinalState {
        end_ms: 200_000,
        ..Default::default()
    };
    // Restarted while still cut off: no bound until the repair; back soon after it.
    let restarted_while_cut = [
        fault(1_000, Fault::Partition(link())),
        fault(5_000, Fault::Crash("prod".into())),
        fault(10_000, Fault::Restart("prod".into())),
        bad(50_000),
        fault(100_000, Fault::Repair(link())),
        at(110_000, "client", request(RequestOutcome::Status(200), 5)),
    ];
    assert!(violations("tunnel_recovers", &restarted_while_cut, &state).is_empty());
    // ... but the repair that clears the last partition does start the clock.
    let never_back = &restarted_while_cut[..5];
    let found = violations("tunnel_recovers", never_back, &state);
    assert_eq!((found.len(), found[0].at_ms), (1, 130_000));
    // all_reconnect: a server restart during a partition is judged from the repair.
    let deferred = [
        up(1, "a"),
        fault(1_000, Fault::Partition(link())),
        fault(9_000, Fault::Crash("gateway".into())),
        fault(10_000, Fault::Restart("gateway".into())),
        fault(100_000, Fault::Repair(link())),
        up(150_000, "a"),
    ];
    assert!(violations("all_reconnect", &deferred, &state).is_empty());
    let late = [&deferred[..5], &[up(170_000, "a")]].concat();
    let found = violations("all_reconnect", &late, &state);
    assert_eq!((found.len(), found[0].at_ms), (1, 160_000));
}

#[test]
fn no_app_stuck_unknown_fires_for_unknown_apps_on_registered_clusters_only() {
    let reported = |health: &str| {
        let state = orrery_system::platform::events::read_model::AppState {
            resource_version: 7,
            deleted: false,
            sync_status: "Synced".into(),
            revision: "abc".into(),
            health_status: health.into(),
            runtime: "acme".into(),
            read_errors: 0,
            ..Default::default()
        };
        [("argocd/a".to_string(), state)].into_iter().collect()
    };
    let on = |server: &str, argocd_health: &str, platform_health: &str, removed: &[&str]| {
        let mut truth = app("a", "7", "Synced");
        truth.destination = server.into();
        truth.health_status = argocd_health.into();
        FinalState {
            apps: vec![truth],
            reported: reported(platform_health),
            end_ms: 10,
            unregistered: removed.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    };
    let c = "https://cluster-c:6443";
    assert!(violations(
        "no_app_stuck_unknown",
        &[],
        &on(c, "Healthy", "Healthy", &[])
    )
    .is_empty());
    let stuck_in_argocd = violations(
        "no_app_stuck_unknown",
        &[],
        &on(c, "Unknown", "Healthy", &[]),
    );
    assert_eq!(stuck_in_argocd.len(), 1);
    assert_eq!(stuck_in_argocd[0].class, Class::Liveness);
    let stuck_on_platform = violations(
        "no_app_stuck_unknown",
        &[],
        &on(c, "Healthy", "Unknown", &[]),
    );
    assert_eq!(
        stuck_on_platform.len(),
        1,
        "the recovery never reached the platform"
    );
    assert!(
        violations(
            "no_app_stuck_unknown",
            &[],
            &on(c, "Unknown", "Unknown", &[c])
        )
        .is_empty(),
        "Unknown by right: the cluster's registration was removed"
    );
}

#[test]
fn stale_count_counts_what_stale_apps_lists() {
    let shown = |sync: &str, deleted: bool| AppState {
        resource_version: 7,
        deleted,
        sync_status: sync.into(),
        revision: "abc".into(),
        health_status: "Healthy".into(),
        runtime: "acme".into(),
        read_errors: 0,
        ..Default::default()
    };
    let apps = vec![
        app("same", "1", "Synced"),
        app("differs", "2", "Synced"),
        app("missing", "3", "Synced"),
        app("shown-deleted", "4", "Synced"),
    ];
    let reported: std::collections::BTreeMap<String, AppState> = [
        ("argocd/same", shown("Synced", false)),
        ("argocd/differs", shown("OutOfSync", false)),
        ("argocd/shown-deleted", shown("Synced", true)),
        ("argocd/gone-but-shown", shown("Synced", false)),
        ("argocd/gone-and-deleted", shown("Synced", true)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let listed = crate::checkers::stale_apps(&apps, &reported);
    assert_eq!(
        listed,
        [
            "argocd/differs",
            "argocd/gone-but-shown",
            "argocd/missing",
            "argocd/shown-deleted"
        ]
    );
    let views = apps.iter().map(|a| {
        (
            a.key.as_str(),
            a.sync_status.as_str(),
            a.revision.as_str(),
            a.health_status.as_str(),
        )
    });
    assert_eq!(
        crate::checkers::stale_count(views, &reported),
        (4, listed.len() as u64)
    );
}

/// The count is the same whatever order the apps come in: the read model's key order, the
/// API server's (namespace, name) order (which differs from it for `a` and `a-b`), reversed.
#[test]
fn stale_count_does_not_depend_on_the_order_of_the_apps() {
    let shown = |sync: &str, deleted: bool| AppState {
        sync_status: sync.into(),
        revision: "abc".into(),
        health_status: "Healthy".into(),
        deleted,
        ..Default::default()
    };
    let reported: BTreeMap<String, AppState> = [
        ("a-b/x", shown("Synced", false)),
        ("a-b/y", shown("OutOfSync", false)),
        ("a/x", shown("Synced", false)),
        ("a/z", shown("Synced", true)),
        ("a/gone", shown("Synced", false)),
        ("b/x", shown("Synced", false)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    // (namespace, name) order, as the API server lists them.
    let apps = ["a/x", "a/y", "a/z", "a-b/x", "a-b/y", "b/x"];
    let view = |key: &'static str| (key, "Synced", "abc", "Healthy");
    // Stale: a/y (missing), a/z (shown deleted), a-b/y (differs), a/gone (shown, gone).
    let expected = (6, 4);
    let mut sorted = apps.to_vec();
    sorted.sort_unstable();
    let reversed: Vec<_> = apps.iter().rev().copied().collect();
    for order in [apps.to_vec(), sorted, reversed] {
        assert_eq!(
            crate::checkers::stale_count(order.iter().map(|k| view(k)), &reported),
            expected,
            "{order:?}"
        );
    }
}

/// A Rollout view as the platform would show it (`acme/shop/web`).
fn rollout_view(
    phase: &str,
    step: Option<i64>,
    sets: &[(&str, i64)],
    deleted: bool,
) -> BTreeMap<String, orrery_system::platform::events::cluster::RolloutView> {
    use orrery_system::platform::events::cluster::{Fields, ReplicaSetView, RolloutView};
    let view = RolloutView {
        resource_version: 9,
        deleted,
        fields: Fields {
            phase: phase.into(),
            step,
            ..Fields::default()
        },
        replica_sets: sets
            .iter()
            .map(|(hash, replicas)| {
                (
                    hash.to_string(),
                    ReplicaSetView {
                        replicas: *replicas,
                        available: *replicas,
                    },
                )
            })
            .collect(),
        analysis_runs: BTreeMap::new(),
    };
    [("acme/shop/web".to_string(), view)].into_iter().collect()
}

#[test]
fn platform_shows_rollouts_fires_on_a_wrong_phase_step_or_weight_and_on_a_lost_deletion() {
    let truth = resources::RolloutTruth {
        key: "shop/web".into(),
        phase: "Paused".into(),
        step: Some(1),
        replica_sets: [("aaa".to_string(), 3), ("bbb".to_string(), 1)]
            .into_iter()
            .collect(),
    };
    let state = |views, rollouts: Vec<resources::RolloutTruth>| FinalState {
        rollouts,
        reported_rollouts: views,
        end_ms: 10,
        ..Default::default()
    };
    let right = rollout_view(
        "Paused",
        Some(1),
        &[("aaa", 3), ("bbb", 1), ("old", 0)],
        false,
    );
    assert!(violations(
        "platform_shows_rollouts",
        &[],
        &state(right.clone(), vec![truth.clone()])
    )
    .is_empty());
    for (wrong, why) in [
        (
            rollout_view("Progressing", Some(1), &[("aaa", 3), ("bbb", 1)], false),
            "phase",
        ),
        (
            rollout_view("Paused", Some(0), &[("aaa", 3), ("bbb", 1)], false),
            "phase/step",
        ),
        (
            rollout_view("Paused", Some(1), &[("aaa", 4), ("bbb", 0)], false),
            "ReplicaSet aaa",
        ),
        (
            rollout_view(
                "Paused",
                Some(1),
                &[("aaa", 3), ("bbb", 1), ("old", 2)],
                false,
            ),
            "ReplicaSet old is gone",
        ),
        (
            rollout_view("Paused", Some(1), &[("aaa", 3), ("bbb", 1)], true),
            "not shown",
        ),
    ] {
        let found = violations(
            "platform_shows_rollouts",
            &[],
            &state(wrong, vec![truth.clone()]),
        );
        assert_eq!(found.len(), 1, "{why}");
        assert_eq!(found[0].class, Class::Safety);
        assert!(
            found[0].details["why"].as_str().unwrap().contains(why),
            "{why}: {}",
            found[0].details
        );
    }
    // Deleted from the cluster but still shown live.
    let gone = violations("platform_shows_rollouts", &[], &state(right, vec![]));
    assert_eq!(gone[0].details["why"], "gone, platform shows it live");
}

fn cluster_event(ms: u64, rv: &str, deleted: bool) -> TraceEvent {
    at(
        ms,
        "platform",
        orrery_system::observe::PlatformEvent::ClusterEvent {
            kind: "Rollout".into(),
            object: "shop/web".into(),
            rv: rv.into(),
            deleted,
            applied: orrery_system::observe::Projection::Updated,
            seq: ms,
        },
    )
}

#[test]
fn platform_never_older_fires_when_an_older_version_is_applied_after_a_newer_one() {
    let state = FinalState::default();
    let ordered = [cluster_event(1, "5", false), cluster_event(2, "7", false)];
    assert!(violations("platform_never_older", &ordered, &state).is_empty());
    // A typed deletion below the held version ends the object; it is not a regression.
    let deletion = [cluster_event(1, "7", false), cluster_event(2, "0", true)];
    assert!(violations("platform_never_older", &deletion, &state).is_empty());
    let older = [cluster_event(1, "7", false), cluster_event(2, "5", false)];
    let found = violations("platform_never_older", &older, &state);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].at_ms, 2);
    assert_eq!(found[0].details["shown_rv"], 7);
}

fn resource_event(ms: u64, app: &str, history_id: i64) -> TraceEvent {
    at(
        ms,
        "platform",
        orrery_system::observe::PlatformEvent::ResourceEvent {
            resource: format!("argocd/{app}/apps/Deployment/shop/{app}"),
            seq: ms,
            history_id,
        },
    )
}

fn app_event(ms: u64, app: &str, deleted: bool) -> TraceEvent {
    at(
        ms,
        "platform",
        orrery_system::observe::PlatformEvent::Event {
            app: app.into(),
            rv: ms.to_string(),
            deleted,
            applied: orrery_system::observe::Projection::Updated,
            seq: ms,
        },
    )
}

#[test]
fn platform_resources_never_older_fires_when_a_resource_goes_back_to_an_older_deployment() {
    let state = FinalState::default();
    let name = "platform_resources_never_older";
    // The same deployment reported again (a health change), then a newer one: fine.
    let forward = [
        resource_event(1, "a", 3),
        resource_event(2, "a", 3),
        resource_event(3, "a", 4),
    ];
    assert!(violations(name, &forward, &state).is_empty());
    // Other apps' histories are their own.
    let apart = [resource_event(1, "a", 4), resource_event(2, "b", 1)];
    assert!(violations(name, &apart, &state).is_empty());
    // An app deleted and created again under its name starts from history id 0.
    let recreated = [
        resource_event(1, "a", 4),
        app_event(2, "a", true),
        resource_event(3, "a", 0),
    ];
    assert!(violations(name, &recreated, &state).is_empty());
    // The app's resources shown from deployment 4, then from deployment 2.
    let older = [
        resource_event(1, "a", 4),
        app_event(2, "a", false),
        resource_event(3, "a", 2),
    ];
    let found = violations(name, &older, &state);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].at_ms, 3);
    assert_eq!(found[0].details["shown_history_id"], 4);
    assert_eq!(found[0].details["then_history_id"], 2);
}

#[test]
fn workflow_phases_reported_fires_when_a_finished_workflow_is_not_shown_finished() {
    use orrery_system::platform::events::cluster::{Fields, WorkflowView};
    let finished = [
        at(
            1,
            "workflows",
            WorldEvent::WorkflowPhase {
                workflow: "ci/build".into(),
                phase: "Running".into(),
                message: String::new(),
            },
        ),
        at(
            2,
            "workflows",
            WorldEvent::WorkflowPhase {
                workflow: "ci/build".into(),
                phase: "Failed".into(),
                message: "step 2 failed".into(),
            },
        ),
    ];
    let shown = |phase: &str, deleted: bool| FinalState {
        reported_workflows: [(
            "acme/ci/build".to_string(),
            WorkflowView {
                resource_version: 4,
                deleted,
                fields: Fields {
                    phase: phase.into(),
                    ..Fields::default()
                },
            },
        )]
        .into_iter()
        .collect(),
        end_ms: 10,
        ..Default::default()
    };
    assert!(violations(
        "workflow_phases_reported",
        &finished,
        &shown("Failed", false)
    )
    .is_empty());
    assert!(
        violations(
            "workflow_phases_reported",
            &finished,
            &shown("Failed", true)
        )
        .is_empty(),
        "deleted by its TTL after the platform took its final phase"
    );
    let stale = violations(
        "workflow_phases_reported",
        &finished,
        &shown("Running", false),
    );
    assert_eq!(stale.len(), 1);
    assert_eq!(stale[0].details["platform_shows"], "Running");
    let never = violations(
        "workflow_phases_reported",
        &finished,
        &FinalState::default(),
    );
    assert_eq!(never[0].details["platform_shows"], "nothing");
    // A workflow still running at the end is not owed a final phase.
    assert!(violations(
        "workflow_phases_reported",
        &finished[..1],
        &FinalState::default()
    )
    .is_empty());
}

/// Argo CD finished a sync of `app` whose change revision should be `expected`.
fn synced(ms: u64, app: &str, expected: &str) -> TraceEvent {
    at(
        ms,
        "argocd",
        WorldEvent::Synced {
            app: format!("argocd/{app}"),
            revision: "head".into(),
            previous: "before".into(),
            expected: expected.into(),
        },
    )
}

#[test]
fn change_revision_correct_fires_when_the_last_sync_carries_another_revision() {
    let mut right = app("a", "5", "Synced");
    right.change_revision = "c2".into();
    let mut stale = app("b", "6", "Synced");
    stale.change_revision = "c1".into();
    let state = FinalState {
        apps: vec![right.clone(), stale],
        end_ms: 9_000,
        ..FinalState::default()
    };
    // b's last sync should carry c3; it still has c1 (a merge patch carried it over).
    let events = [
        synced(1_000, "a", "c2"),
        synced(2_000, "b", "c1"),
        synced(3_000, "b", "c3"),
    ];
    let found = violations("change_revision_correct", &events, &state);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].details["app"], "argocd/b");
    assert_eq!(found[0].details["expected"], "c3");
    assert_eq!(found[0].details["actual"], "c1");
    // The same world with b corrected passes; an app never synced is not judged.
    let mut fixed = app("b", "7", "Synced");
    fixed.change_revision = "c3".into();
    let state = FinalState {
        apps: vec![right, fixed, app("never-synced", "8", "OutOfSync")],
        end_ms: 9_000,
        ..FinalState::default()
    };
    assert!(violations("change_revision_correct", &events, &state).is_empty());
}

#[test]
fn no_spurious_change_fires_on_a_commit_that_did_not_touch_the_app() {
    let attribution = |ms: u64, revision: &str, touches: bool| crate::checkers::Attribution {
        at_ms: ms,
        app: "argocd/a".into(),
        revision: revision.into(),
        touches,
    };
    let clean = FinalState {
        attributions: vec![attribution(1_000, "c1", true)],
        ..FinalState::default()
    };
    assert!(violations("no_spurious_change", &[], &clean).is_empty());
    let spurious = FinalState {
        attributions: vec![
            attribution(1_000, "c1", true),
            attribution(2_000, "c9", false),
            attribution(3_000, "c8", false),
        ],
        ..FinalState::default()
    };
    let found = violations("no_spurious_change", &[], &spurious);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].at_ms, 2_000);
    assert_eq!(found[0].details["revision"], "c9");
    assert_eq!(found[0].details["spurious"], 2);
}

#[test]
fn app_version_and_change_revision_reported_fire_on_missing_git_details() {
    use orrery_system::platform::events::read_model::CommitShown;
    let mut truth = app("a", "7", "Synced");
    truth.app_version = "1.4".into();
    truth.change_revision = "c3".into();
    truth.change_commit = Some(("Dev".into(), "bump a".into()));
    let shown = |version: &str, commits: Vec<CommitShown>, revision: &str| AppState {
        resource_version: 6,
        sync_status: "Synced".into(),
        revision: revision.into(),
        health_status: "Healthy".into(),
        app_version: version.into(),
        change_commits: commits,
        ..Default::default()
    };
    let commit = |revision: &str, message: &str| CommitShown {
        revision: revision.into(),
        author: "Dev".into(),
        message: message.into(),
        date: String::new(),
    };
    let state = |reported: AppState| FinalState {
        apps: vec![truth.clone()],
        reported: [("argocd/a".to_string(), reported)].into_iter().collect(),
        end_ms: 9_000,
        ..FinalState::default()
    };
    // Everything shown (at an older resourceVersion that only moved reconciledAt): holds.
    let good = state(shown("1.4", vec![commit("c3", "bump a")], "abc"));
    assert!(violations("app_version_reported", &[], &good).is_empty());
    assert!(violations("change_revision_reported", &[], &good).is_empty());
    // Sent without the details: each invariant names its own.
    let bare = state(shown("", Vec::new(), "abc"));
    let found = violations("app_version_reported", &[], &bare);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].class, super::Class::Liveness);
    assert_eq!(
        (
            found[0].details["expected"].as_str(),
            found[0].details["actual"].as_str()
        ),
        (Some("1.4"), Some(""))
    );
    let found = violations("change_revision_reported", &[], &bare);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].details["change_revision"], "c3");
    // Another commit's metadata, or the right SHA with another message, is not the change.
    for commits in [vec![commit("c2", "bump a")], vec![commit("c3", "other")]] {
        let wrong = state(shown("1.4", commits, "abc"));
        assert_eq!(violations("change_revision_reported", &[], &wrong).len(), 1);
    }
    // An app the platform shows at another sync is platform_converges's concern.
    let behind = state(shown("", Vec::new(), "older"));
    assert!(violations("app_version_reported", &[], &behind).is_empty());
    assert!(violations("change_revision_reported", &[], &behind).is_empty());
}

/// A release of flow `f` (dev → staging → prod) whose environments ended at the given
/// times (Unix ms; `None`: still promoting).
fn release(
    id: &str,
    ended: &[(&str, Option<u64>)],
    phase: orrery_system::platform::promotions::ReleasePhase,
) -> orrery_system::platform::promotions::Release {
    use orrery_system::platform::promotions::{EnvPhase, EnvStatus, Release};
    Release {
        id: id.into(),
        flow: "f".into(),
        commit: "c".into(),
        created_ms: 1_000,
        started_ms: 1_000,
        phase,
        why: String::new(),
        values: None,
        version: None,
        environments: ended
            .iter()
            .map(|(env, at)| {
                (
                    env.to_string(),
                    EnvStatus {
                        phase: if at.is_some() {
                            EnvPhase::Succeeded
                        } else {
                            EnvPhase::Promoting
                        },
                        task: format!("{id}-{env}"),
                        started_ms: 1_000,
                        ended_ms: at.unwrap_or(0),
                        stop_sent: false,
                    },
                )
            })
            .collect(),
        ended_ms: if phase.is_final() { 9_000 } else { 0 },
        hooks: Vec::new(),
    }
}

fn promotion_state(
    releases: Vec<orrery_system::platform::promotions::Release>,
    commits: &[(&str, u32, &str, u64)],
) -> FinalState {
    use promotions::{PromotionCommit, PromotionTruth};
    let deps = BTreeMap::from([
        ("dev".to_string(), vec![]),
        ("staging".to_string(), vec!["dev".to_string()]),
        ("prod".to_string(), vec!["staging".to_string()]),
    ]);
    FinalState {
        end_ms: 100_000,
        promotions: Some(PromotionTruth {
            releases,
            commits: commits
                .iter()
                .map(|(task, step, sha, at)| PromotionCommit {
                    task: task.to_string(),
                    step: *step,
                    path: "envs/x/values.json".into(),
                    sha: sha.to_string(),
                    unix_ms: *at,
                })
                .collect(),
            depends_on: BTreeMap::from([("f".to_string(), deps)]),
            timeout_ms: BTreeMap::from([("f".to_string(), 60_000)]),
            slack_ms: 10_000,
            epoch_ms: 0,
        }),
        ..FinalState::default()
    }
}

#[test]
fn promotion_commit_once_fires_on_a_step_committed_twice() {
    use orrery_system::platform::promotions::ReleasePhase::Succeeded;
    let done = release(
        "r-1",
        &[
            ("dev", Some(2_000)),
            ("staging", Some(4_000)),
            ("prod", Some(6_000)),
        ],
        Succeeded,
    );
    let once = promotion_state(
        vec![done.clone()],
        &[("r-1-staging", 1, "a", 3_000), ("r-1-prod", 0, "b", 5_000)],
    );
    assert!(violations("promotion_commit_once", &[], &once).is_empty());
    let twice = promotion_state(
        vec![done],
        &[
            ("r-1-staging", 1, "a", 3_000),
            ("r-1-staging", 1, "a2", 3_500),
            ("r-1-prod", 0, "b", 5_000),
        ],
    );
    let found = violations("promotion_commit_once", &[], &twice);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].at_ms, 3_500);
    assert_eq!(found[0].details["commits"], serde_json::json!(["a", "a2"]));
}

#[test]
fn promotion_ordered_fires_when_an_environment_gets_a_release_before_its_dependency_verified_it() {
    use orrery_system::platform::promotions::ReleasePhase::Succeeded;
    let in_order = release(
        "r-1",
        &[
            ("dev", Some(2_000)),
            ("staging", Some(4_000)),
            ("prod", Some(6_000)),
        ],
        Succeeded,
    );
    let fine = promotion_state(
        vec![in_order],
        &[("r-1-staging", 1, "a", 3_000), ("r-1-prod", 0, "b", 5_000)],
    );
    assert!(violations("promotion_ordered", &[], &fine).is_empty());
    // prod's commit at 3.5 s, staging verified at 4 s.
    let early = release(
        "r-1",
        &[
            ("dev", Some(2_000)),
            ("staging", Some(4_000)),
            ("prod", Some(6_000)),
        ],
        Succeeded,
    );
    let wrong = promotion_state(
        vec![early],
        &[("r-1-staging", 1, "a", 3_000), ("r-1-prod", 0, "b", 3_500)],
    );
    let found = violations("promotion_ordered", &[], &wrong);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].details["environment"], "prod");
    assert_eq!(found[0].details["depends_on"], "staging");
}

#[test]
fn promotion_terminates_fires_on_a_stuck_or_late_release() {
    use orrery_system::platform::promotions::ReleasePhase::{Running, Succeeded};
    let ended = release(
        "r-1",
        &[
            ("dev", Some(2_000)),
            ("staging", Some(4_000)),
            ("prod", Some(6_000)),
        ],
        Succeeded,
    );
    assert!(violations(
        "promotion_terminates",
        &[],
        &promotion_state(vec![ended.clone()], &[])
    )
    .is_empty());
    let stuck = release(
        "r-2",
        &[("dev", Some(2_000)), ("staging", None), ("prod", None)],
        Running,
    );
    let found = violations(
        "promotion_terminates",
        &[],
        &promotion_state(vec![ended.clone(), stuck], &[]),
    );
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].class, Class::Liveness);
    assert!(found[0].details["reason"]
        .as_str()
        .unwrap()
        .contains("r-2 is still Running"));
    let mut late = ended;
    late.ended_ms = 1_000 + 60_000 + 10_001;
    let found = violations(
        "promotion_terminates",
        &[],
        &promotion_state(vec![late], &[]),
    );
    assert!(found[0].details["reason"]
        .as_str()
        .unwrap()
        .contains("past its timeout"));
}

fn source_changed(at_ms: u64, spec: serde_json::Value) -> TraceEvent {
    at(
        at_ms,
        "workload",
        WorldEvent::SourceChanged {
            source: "team-a".into(),
            spec,
        },
    )
}

fn team_a(destination: &str) -> serde_json::Value {
    serde_json::json!({
        "source": {"repoURL": "https://git.example/team-a/gitops.git", "path": "apps"},
        "sourceNamespace": "team-a",
        "sourceRepos": ["https://git.example/team-a/*"],
        "destinations": [{"server": "https://kubernetes.default.svc", "namespace": destination}],
    })
}

fn deployed(at_ms: u64, app: &str, project: &str, repo: &str, namespace: &str) -> TraceEvent {
    at(
        at_ms,
        "workload",
        WorldEvent::AppDeployed {
            app: app.into(),
            project: project.into(),
            parent: "team-a".into(),
            repo: repo.into(),
            server: "https://kubernetes.default.svc".into(),
            namespace: namespace.into(),
            revision: "abc".into(),
            deployed_at_ms: at_ms,
        },
    )
}

fn project_seen(at_ms: u64, spec: serde_json::Value) -> TraceEvent {
    at(
        at_ms,
        "workload",
        WorldEvent::ProjectSeen {
            project: "team-a".into(),
            spec,
        },
    )
}

#[test]
fn restricted_sources_fires_on_a_deployment_outside_its_source_after_the_propagation_bound() {
    let repo = "https://git.example/team-a/web.git";
    let state = FinalState::default();
    // Inside: its namespace, repository and destination are the source's.
    let inside = [
        source_changed(0, team_a("team-a-*")),
        deployed(1_000, "team-a/web", "team-a", repo, "team-a-web"),
        // The sourceNamespace itself is a permitted destination (the Git Source's).
        deployed(2_000, "team-a/web", "team-a", repo, "team-a"),
    ];
    assert!(violations("restricted_sources", &inside, &state).is_empty());
    for (what, event) in [
        (
            "another repository",
            deployed(
                1_000,
                "team-a/web",
                "team-a",
                "https://git.example/team-b/web.git",
                "team-a-web",
            ),
        ),
        (
            "another destination",
            deployed(1_000, "team-a/web", "team-a", repo, "kube-system"),
        ),
        (
            "another namespace (a child of team-a's Git Source in argocd)",
            deployed(1_000, "argocd/admin", "default", repo, "team-a-web"),
        ),
    ] {
        let fired = violations(
            "restricted_sources",
            &[source_changed(0, team_a("team-a-*")), event],
            &state,
        );
        assert_eq!(fired.len(), 1, "{what}");
        assert_eq!(fired[0].class, Class::Safety);
        assert_eq!(fired[0].details["source"], "team-a");
    }
    // Narrowed at 10 s: the old version stays in force for the propagation bound.
    let narrowed = |deployed_at: u64| {
        violations(
            "restricted_sources",
            &[
                source_changed(0, team_a("team-a-*")),
                source_changed(10_000, team_a("team-a-web")),
                deployed(deployed_at, "team-a/old", "team-a", repo, "team-a-old"),
            ],
            &state,
        )
    };
    assert!(narrowed(10_000 + PROPAGATION_MS).is_empty());
    assert_eq!(narrowed(10_001 + PROPAGATION_MS).len(), 1);
    // Deleted: nothing it governs may be deployed once the bound has passed.
    let deleted = violations(
        "restricted_sources",
        &[
            source_changed(0, team_a("team-a-*")),
            source_changed(10_000, serde_json::Value::Null),
            deployed(50_000, "team-a/web", "team-a", repo, "team-a-web"),
        ],
        &state,
    );
    assert_eq!(deleted.len(), 1);
}

#[test]
fn restricted_sources_judges_a_deny_entry_as_argo_cds_documentation_promises_not_as_its_code() {
    use crate::world::argocd::projects::{source_permitted, Destination};
    let state = FinalState::default();
    // team-a's repositories except its legacy ones: the author keeps team-b's out.
    let mut denying = team_a("team-a-*");
    denying["sourceRepos"] = serde_json::json!([
        "https://git.example/team-a/*",
        "!https://git.example/team-a/legacy*"
    ]);
    let repos: Vec<String> = vec![
        "https://git.example/team-a/gitops.git".into(),
        "https://git.example/team-a/*".into(),
        "!https://git.example/team-a/legacy*".into(),
    ];
    let foreign = "https://git.example/team-b/web.git";
    // Argo CD's code (argo-cd#21264) permits the foreign repository; the documented rule does
    // not, and neither does it permit the denied one.
    assert!(source_permitted(&repos, foreign));
    assert!(!super::restricted::intended_repo(&repos, foreign));
    assert!(!super::restricted::intended_repo(
        &repos,
        "https://git.example/team-a/legacy-web.git"
    ));
    assert!(super::restricted::intended_repo(
        &repos,
        "https://git.example/team-a/web.git"
    ));
    let fired = violations(
        "restricted_sources",
        &[
            source_changed(0, denying.clone()),
            deployed(1_000, "team-a/steal", "team-a", foreign, "team-a-steal"),
        ],
        &state,
    );
    assert_eq!(fired.len(), 1, "a repository no allow entry names");
    assert_eq!(fired[0].class, Class::Safety);
    let inside = violations(
        "restricted_sources",
        &[
            source_changed(0, denying),
            deployed(
                1_000,
                "team-a/web",
                "team-a",
                "https://git.example/team-a/web.git",
                "team-a-web",
            ),
        ],
        &state,
    );
    assert!(inside.is_empty(), "{inside:?}");
    // Destinations: a deny namespace rejects what it names, and permits nothing by itself.
    let in_cluster = "https://kubernetes.default.svc";
    let destinations = [
        Destination {
            server: in_cluster.into(),
            name: String::new(),
            namespace: "team-a-*".into(),
        },
        Destination {
            server: in_cluster.into(),
            name: String::new(),
            namespace: "!team-a-admin".into(),
        },
    ];
    let intended =
        |namespace| super::restricted::intended_destination(&destinations, in_cluster, namespace);
    assert!(intended("team-a-web"));
    assert!(!intended("team-a-admin"));
    assert!(!intended("kube-system"));
    // A denied server rejects every namespace on it, whatever an allow entry says.
    let server_denied = [
        Destination {
            server: "*".into(),
            name: String::new(),
            namespace: "team-a-*".into(),
        },
        Destination {
            server: format!("!{in_cluster}"),
            name: String::new(),
            namespace: "*".into(),
        },
    ];
    let intended = |server: &str| {
        super::restricted::intended_destination(&server_denied, server, "team-a-web")
    };
    assert!(!intended(in_cluster));
    assert!(intended("https://other.example"));
}

#[test]
fn restricted_source_applied_fires_when_a_change_reaches_its_project_late_or_never() {
    let state = FinalState {
        end_ms: 200_000,
        ..FinalState::default()
    };
    let project = |destination: &str| {
        serde_json::json!({
            "sourceRepos": ["https://git.example/team-a/gitops.git", "https://git.example/team-a/*"],
            "destinations": [
                {"server": "https://kubernetes.default.svc", "namespace": destination},
                {"server": "https://kubernetes.default.svc", "namespace": "team-a"},
            ],
            "sourceNamespaces": ["team-a"],
        })
    };
    let in_time = [
        source_changed(0, team_a("team-a-*")),
        project_seen(5_000, project("team-a-*")),
        source_changed(60_000, serde_json::Value::Null),
        project_seen(61_000, serde_json::Value::Null),
    ];
    assert!(violations("restricted_source_applied", &in_time, &state).is_empty());
    let late = [
        source_changed(0, team_a("team-a-*")),
        project_seen(PROPAGATION_MS + 1, project("team-a-*")),
    ];
    let fired = violations("restricted_source_applied", &late, &state);
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].class, Class::Liveness);
    // A project that does not say what the source says does not count.
    let wrong = [
        source_changed(0, team_a("team-a-*")),
        project_seen(1_000, project("*")),
    ];
    assert_eq!(
        violations("restricted_source_applied", &wrong, &state).len(),
        1
    );
    // A deletion whose project stays.
    let kept = [
        source_changed(0, team_a("team-a-*")),
        project_seen(1_000, project("team-a-*")),
        source_changed(60_000, serde_json::Value::Null),
    ];
    assert_eq!(
        violations("restricted_source_applied", &kept, &state).len(),
        1
    );
    // A change superseded before its bound is judged by its successor only.
    let superseded = [
        source_changed(0, team_a("team-a-*")),
        source_changed(1_000, team_a("team-a-web")),
        project_seen(2_000, project("team-a-web")),
    ];
    assert!(violations("restricted_source_applied", &superseded, &state).is_empty());
    // A source with a deny entry is reflected by its copy or by no project (refused), not by
    // the project of its previous version.
    let mut denying = team_a("team-a-*");
    denying["sourceRepos"] = serde_json::json!(["!https://git.example/team-a/legacy*"]);
    let refused = [
        source_changed(0, team_a("team-a-*")),
        project_seen(1_000, project("team-a-*")),
        source_changed(60_000, denying.clone()),
        project_seen(61_000, serde_json::Value::Null),
    ];
    assert!(violations("restricted_source_applied", &refused, &state).is_empty());
    let stale = [
        source_changed(0, team_a("team-a-*")),
        project_seen(1_000, project("team-a-*")),
        source_changed(60_000, denying),
    ];
    assert_eq!(
        violations("restricted_source_applied", &stale, &state).len(),
        1
    );
    // A deny entry in a destination's cluster name counts too.
    let mut named = team_a("team-a-*");
    named["destinations"] = serde_json::json!([{"name": "!prod", "namespace": "team-a-*"}]);
    let refused = [
        source_changed(0, named),
        project_seen(1_000, serde_json::Value::Null),
    ];
    assert!(violations("restricted_source_applied", &refused, &state).is_empty());
}

fn shown(ms: u64, health: &str) -> TraceEvent {
    at(
        ms,
        "gateway",
        orrery_system::observe::PlatformEvent::RuntimeHealth {
            runtime: "acme-prod".into(),
            health: health.into(),
            reason: String::new(),
        },
    )
}

#[test]
fn runtime_health_shown_fires_when_a_drop_or_a_recovery_is_shown_late_or_never() {
    use super::health::{DETECT_BOUND, RECOVER_BOUND};
    let unable = "Unable to communicate";
    let cut = |ms| {
        harness(
            ms,
            HarnessEvent::Fault(Fault::Partition(["prod".into(), "gateway".into()])),
        )
    };
    let repair = |ms| {
        harness(
            ms,
            HarnessEvent::Fault(Fault::Repair(["prod".into(), "gateway".into()])),
        )
    };
    let state = FinalState {
        end_ms: 300_000,
        ..Default::default()
    };
    let detect = DETECT_BOUND.as_millis() as u64;
    let recover = RECOVER_BOUND.as_millis() as u64;
    // Shown in time both ways.
    let in_time = [
        shown(1_000, "Healthy"),
        cut(10_000),
        shown(10_000 + detect - 1, unable),
        repair(100_000),
        up(105_000, "acme-prod"),
        shown(105_000 + recover, "Healthy"),
    ];
    assert!(violations("runtime_health_shown", &in_time, &state).is_empty());
    // A drop never shown.
    let never = [shown(1_000, "Healthy"), cut(10_000)];
    let fired = violations("runtime_health_shown", &never, &state);
    assert_eq!((fired.len(), fired[0].at_ms), (1, 10_000 + detect));
    assert_eq!(fired[0].class, Class::Liveness);
    // A blip repaired before the bound need not be shown.
    let blip = [shown(1_000, "Healthy"), cut(10_000), repair(18_000)];
    assert!(violations("runtime_health_shown", &blip, &state).is_empty());
    // A recovery shown late: the clock starts when the tunnel is up, not at the repair.
    let late = [
        shown(1_000, "Healthy"),
        cut(10_000),
        shown(20_000, unable),
        repair(100_000),
        up(130_000, "acme-prod"),
        shown(130_000 + recover + 1, "Healthy"),
    ];
    let fired = violations("runtime_health_shown", &late, &state);
    assert_eq!((fired.len(), fired[0].at_ms), (1, 130_000 + recover));
    // A crash of the runtime's host is a drop too.
    let crashed = [
        shown(1_000, "Healthy"),
        harness(
            10_000,
            HarnessEvent::HostStop {
                host: "prod".into(),
                why: HostChange::Crash,
            },
        ),
    ];
    assert_eq!(
        violations("runtime_health_shown", &crashed, &state).len(),
        1
    );
    // Without a monitor (nothing ever shown) nothing is judged.
    assert!(violations("runtime_health_shown", &[cut(10_000)], &state).is_empty());
}

#[test]
fn runtime_health_shown_judges_a_runtime_cut_off_from_the_events_path_by_its_heartbeats() {
    use super::health::{DETECT_BOUND, RECOVER_BOUND};
    let unable = "Unable to communicate";
    let beat = |ms| {
        at(
            ms,
            "platform",
            orrery_system::observe::PlatformEvent::Heartbeat {
                runtime: "acme-prod".into(),
            },
        )
    };
    let link = |ms, fault: fn([String; 2]) -> Fault| {
        harness(
            ms,
            HarnessEvent::Fault(fault(["prod".into(), "platform".into()])),
        )
    };
    let state = FinalState {
        end_ms: 300_000,
        ..Default::default()
    };
    let detect = DETECT_BOUND.as_millis() as u64;
    let recover = RECOVER_BOUND.as_millis() as u64;
    // Heartbeats stop while the tunnel stays up: a drop that must be shown.
    let never = [
        shown(1_000, "Healthy"),
        beat(5_000),
        link(10_000, Fault::Partition),
    ];
    let fired = violations("runtime_health_shown", &never, &state);
    assert_eq!((fired.len(), fired[0].at_ms), (1, 10_000 + detect));
    // Shown in time; after the repair Healthy is due from the repair itself (the tunnel
    // never went), and late here.
    let late = [
        shown(1_000, "Healthy"),
        beat(5_000),
        link(10_000, Fault::Partition),
        shown(45_000, unable),
        link(100_000, Fault::Repair),
        beat(105_000),
        shown(100_000 + recover + 1, "Healthy"),
    ];
    let fired = violations("runtime_health_shown", &late, &state);
    assert_eq!((fired.len(), fired[0].at_ms), (1, 100_000 + recover));
    let in_time = [
        shown(1_000, "Healthy"),
        beat(5_000),
        link(10_000, Fault::Partition),
        shown(45_000, unable),
        link(100_000, Fault::Repair),
        shown(106_000, "Healthy"),
    ];
    assert!(violations("runtime_health_shown", &in_time, &state).is_empty());
    // A runtime that never sent a heartbeat is judged by its tunnel alone.
    let silent = [shown(1_000, "Healthy"), link(10_000, Fault::Partition)];
    assert!(violations("runtime_health_shown", &silent, &state).is_empty());
}

fn acknowledged(ms: u64, seq: u64) -> TraceEvent {
    at(
        ms,
        "platform",
        orrery_system::observe::PlatformEvent::Acknowledged {
            seq,
            object: format!("argocd/app-{seq}"),
        },
    )
}

fn projected_seq(ms: u64, seq: u64) -> TraceEvent {
    at(
        ms,
        "platform",
        orrery_system::observe::PlatformEvent::Event {
            app: format!("app-{seq}"),
            rv: "7".into(),
            deleted: false,
            applied: orrery_system::observe::Projection::Updated,
            seq,
        },
    )
}

#[test]
fn no_acknowledged_event_lost_fires_on_an_acknowledged_event_never_projected() {
    let end = FinalState {
        end_ms: 100_000,
        ..Default::default()
    };
    // Handled after its acknowledgement, handled before it (a confirm that followed the
    // handling), a resource and a cluster event: nothing is owed.
    let kept = [
        acknowledged(1_000, 1),
        projected_seq(1_500, 1),
        projected_seq(2_000, 2),
        acknowledged(2_010, 2),
        acknowledged(3_000, 3),
        at(
            3_100,
            "platform",
            orrery_system::observe::PlatformEvent::ResourceEvent {
                resource: "argocd/a/apps/Deployment/shop/web".into(),
                seq: 3,
                history_id: 1,
            },
        ),
        acknowledged(4_000, 4),
        at(
            4_100,
            "platform",
            orrery_system::observe::PlatformEvent::ClusterEvent {
                kind: "Rollout".into(),
                object: "shop/web".into(),
                rv: "9".into(),
                deleted: false,
                applied: orrery_system::observe::Projection::Updated,
                seq: 4,
            },
        ),
        // Acknowledged within the grace period before the end: still on its way.
        acknowledged(80_000, 5),
    ];
    assert!(violations("no_acknowledged_event_lost", &kept, &end).is_empty());
    // A crash lost two acknowledged events: the first is where the violation is.
    let mut lost = kept.to_vec();
    lost.extend([acknowledged(5_000, 6), acknowledged(6_000, 7)]);
    let found = violations("no_acknowledged_event_lost", &lost, &end);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].class, Class::Safety);
    assert_eq!(found[0].at_ms, 5_000);
    assert_eq!(found[0].details["lost"], 2);
    assert_eq!(found[0].details["events"][0]["object"], "argocd/app-6");
}

#[test]
fn tenant_isolation_fires_on_a_leak_a_foreign_reach_and_an_unaudited_denial() {
    use orrery_system::platform::audit::{Actor, Entry, Outcome};
    let probe = |ms: u64, status: u16, leak: &str| {
        at(
            ms,
            "mallory-0",
            WorldEvent::TenantProbe {
                kind: "foreign_query".into(),
                account: "t01".into(),
                actor: "user:admin-t01".into(),
                victim: "t02".into(),
                status,
                leak: leak.into(),
            },
        )
    };
    let reached = |ms: u64, account: &str, caller: &str| {
        at(
            ms,
            account,
            WorldEvent::TenantReached {
                account: account.into(),
                caller: caller.into(),
            },
        )
    };
    let denial = |status: u16| Entry {
        seq: 1,
        at: "2026-01-01T00:00:01Z".into(),
        actor: Actor::User {
            name: "admin-t01".into(),
        },
        account: "t01".into(),
        action: "graphql runtime".into(),
        runtime: "t02-rt-0".into(),
        outcome: Outcome::Denied,
        status,
        reason: "no runtime".into(),
    };
    let audited = FinalState {
        audit: vec![denial(404)],
        ..Default::default()
    };
    // Refused, audited, own runtime reached by its own user: holds.
    let fine = [probe(1_000, 404, ""), reached(2_000, "t01", "t01")];
    assert!(violations("tenant_isolation", &fine, &audited).is_empty());
    // A foreign query that succeeded, even without foreign data in its answer.
    let through = violations("tenant_isolation", &[probe(1_000, 200, "")], &audited);
    assert_eq!(through.len(), 1);
    assert_eq!(
        through[0].details["what"],
        "a request that must be refused succeeded"
    );
    // A token that expired, answered as a good one.
    let expired = at(
        1_000,
        "mallory-0",
        WorldEvent::TenantProbe {
            kind: "expired_token".into(),
            account: String::new(),
            actor: "anonymous".into(),
            victim: "t02".into(),
            status: 200,
            leak: String::new(),
        },
    );
    let through = violations("tenant_isolation", &[expired], &audited);
    assert_eq!(through.len(), 1);
    assert_eq!(through[0].details["probe"], "expired_token");
    // An answer with t02's data.
    let leaked = violations("tenant_isolation", &[probe(1_000, 200, "t02")], &audited);
    assert_eq!(leaked.len(), 1);
    assert_eq!(leaked[0].details["data_of"], "t02");
    // t02's runtime reached with t01's token, or with none.
    for caller in ["t01", ""] {
        let crossed = violations(
            "tenant_isolation",
            &[reached(1_000, "t02", caller)],
            &audited,
        );
        assert_eq!(crossed.len(), 1, "{caller:?}");
        assert_eq!(crossed[0].class, Class::Safety);
    }
    // Two refusals, one audit entry; or an entry of another status.
    let twice = [probe(1_000, 404, ""), probe(2_000, 404, "")];
    let missing = violations("tenant_isolation", &twice, &audited);
    assert_eq!(missing.len(), 1);
    assert_eq!(
        missing[0].details["what"],
        "a refused request is missing from the audit log"
    );
    let other = FinalState {
        audit: vec![denial(403)],
        ..Default::default()
    };
    assert_eq!(violations("tenant_isolation", &fine[..1], &other).len(), 1);
}

#[test]
fn no_acknowledged_write_lost_fires_on_a_lost_token_a_revived_token_and_an_unaudited_registration()
{
    use orrery_system::platform::audit::{Actor, Entry, Outcome};
    use orrery_system::platform::registry::Info;
    use orrery_system::platform::store::{Snapshot, StoredRuntime};
    let registered = |ms: u64, status: u16, token: &str| {
        at(
            ms,
            "mallory-0",
            WorldEvent::TenantRegistered {
                account: "t01".into(),
                runtime: "reg-0".into(),
                status,
                token_sha256: token.into(),
                rotated: false,
            },
        )
    };
    let audited = |seq: u64| Entry {
        seq,
        at: "2026-01-01T00:00:01Z".into(),
        actor: Actor::User {
            name: "admin-t01".into(),
        },
        account: "t01".into(),
        action: "graphql createRuntime".into(),
        runtime: "reg-0".into(),
        outcome: Outcome::Allowed,
        status: 201,
        reason: String::new(),
    };
    // The database holds `held`, has revoked `revoked`, and audited `entries` registrations.
    let state = |held: &str, revoked: &[&str], entries: u64| FinalState {
        database: Some(DatabaseTruth {
            snapshot: Snapshot {
                runtimes: vec![StoredRuntime {
                    name: "t01-reg-0".into(),
                    account: "t01".into(),
                    runtime: "reg-0".into(),
                    token_sha256: held.into(),
                    info: Info::default(),
                }],
                revoked: revoked.iter().map(|t| t.to_string()).collect(),
                audit: (1..=entries).map(audited).collect(),
                ..Snapshot::default()
            },
            figures: Default::default(),
        }),
        ..Default::default()
    };
    let two = [registered(1_000, 200, "a"), registered(2_000, 200, "b")];
    assert!(violations("no_acknowledged_write_lost", &two, &state("b", &["a"], 2)).is_empty());
    // The last answered token is not the one held.
    let lost = violations("no_acknowledged_write_lost", &two, &state("a", &["a"], 2));
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(lost[0].details["what"]
        .as_str()
        .unwrap()
        .contains("not what its database holds"));
    assert_eq!(lost[0].at_ms, 2_000);
    // ... unless a later registration went unanswered (it may have replaced it), but not
    // after a refusal (4xx: it changed nothing).
    let unseen = [two[0].clone(), two[1].clone(), registered(3_000, 0, "")];
    assert!(violations(
        "no_acknowledged_write_lost",
        &unseen,
        &state("c", &["a", "b"], 3)
    )
    .is_empty());
    let refused = [two[0].clone(), two[1].clone(), registered(3_000, 409, "")];
    assert_eq!(
        violations(
            "no_acknowledged_write_lost",
            &refused,
            &state("c", &["a", "b"], 3)
        )
        .len(),
        1
    );
    // A replaced token that is not revoked would work again after a restart.
    let revived = violations("no_acknowledged_write_lost", &two, &state("b", &[], 2));
    assert_eq!(revived.len(), 1, "{revived:?}");
    assert!(revived[0].details["what"]
        .as_str()
        .unwrap()
        .contains("not revoked"));
    assert_eq!(revived[0].at_ms, 1_000);
    // An answered registration missing from the audit log.
    let unaudited = violations("no_acknowledged_write_lost", &two, &state("b", &["a"], 1));
    assert_eq!(unaudited.len(), 1, "{unaudited:?}");
    assert_eq!(unaudited[0].details["audited"], 1);
    // Registrations with no database to judge them in are a harness mistake, said so.
    let nowhere = violations("no_acknowledged_write_lost", &two, &FinalState::default());
    assert_eq!(nowhere.len(), 1);
}
