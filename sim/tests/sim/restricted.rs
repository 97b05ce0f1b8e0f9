//! Restricted Git Sources in the `restricted-sources` world: the GitOps operator turns each
//! tenant's RestrictedGitSource into an AppProject and a Git Source; Argo CD deploys what
//! is inside and refuses each way out with Argo CD's condition; a narrowed, deleted and
//! restored source reaches Argo CD, faithful on its poll and hardened on the watch event; a
//! deny entry opens team-a's project in faithful (argo-cd#21264) and hardened refuses it.

use std::collections::{BTreeMap, BTreeSet};

use orrery_sim::harness::runner;
use orrery_sim::scenario::{self, Variant};
use orrery_sim::trace::TraceEvent;
use orrery_system::observe::{OperatorEvent, WorldEvent};

fn run(variant: Variant) -> runner::RunOutcome {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/restricted-sources.yaml");
    let scenario = scenario::parse::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let run = runner::run(&scenario, 1, variant);
    assert_eq!(run.harness_error, None);
    match variant {
        Variant::Hardened => assert!(run.violations.is_empty(), "{:?}", run.violations),
        // Only team-a/steal, once the deny entry is in force (see below).
        Variant::Faithful => assert!(
            !run.violations.is_empty()
                && run
                    .violations
                    .iter()
                    .all(|v| v.invariant == "restricted_sources"
                        && v.details["app"] == "team-a/steal"
                        && v.at_ms > DENY_AT_MS),
            "{:?}",
            run.violations
        ),
    }
    run
}

/// When the scenario gives team-a's source its deny entry.
const DENY_AT_MS: u64 = 230_000;

/// The events before the deny entry.
fn before_deny(events: Vec<TraceEvent>) -> Vec<TraceEvent> {
    events
        .into_iter()
        .filter(|e| e.at_ms < DENY_AT_MS)
        .collect()
}

/// App → the first refusal message Argo CD gave it.
fn refusals(events: &[TraceEvent]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in events {
        if let Some(WorldEvent::AppRefused { app, message, .. }) = e.world() {
            out.entry(app.clone()).or_insert_with(|| message.clone());
        }
    }
    out
}

fn deployed(events: &[TraceEvent]) -> BTreeSet<String> {
    events
        .iter()
        .filter_map(|e| match e.world() {
            Some(WorldEvent::AppDeployed { app, .. }) => Some(app.clone()),
            _ => None,
        })
        .collect()
}

/// (source, changed at, reflected at) of the run.
fn propagation(events: &[TraceEvent]) -> Vec<(String, u64, Option<u64>)> {
    orrery_sim::checkers::restricted::propagation(events)
}

#[test]
fn argo_cd_deploys_what_is_inside_and_refuses_each_way_out() {
    let run = run(Variant::Faithful);
    let events = before_deny(run.trace.events());
    assert_eq!(
        deployed(&events),
        BTreeSet::from(
            [
                "argocd/team-a",
                "argocd/team-b",
                "team-a/web",
                "team-b/web",
                "team-b/staging"
            ]
            .map(String::from)
        ),
        "the Git Sources and the apps inside their sources, nothing else"
    );
    let refused = refusals(&events);
    let expect = [
        ("team-a/steal", "application repo https://git.example/team-b/web.git is not permitted in project 'team-a'"),
        ("team-a/kube", "application destination server 'https://kubernetes.default.svc' and namespace 'kube-system' do not match any of the allowed destinations in project 'team-a'"),
        ("team-a/borrow", "application 'borrow' in namespace 'team-a' is not permitted to use project 'team-b'"),
        ("team-a/sneaky", "application 'sneaky' in namespace 'team-a' is not permitted to use project 'default'"),
        ("team-b/staging", "application destination server 'https://kubernetes.default.svc' and namespace 'team-b-staging' do not match any of the allowed destinations in project 'team-b'"),
        ("team-a/web", "Application referencing project team-a which does not exist"),
    ];
    for (app, message) in expect {
        assert_eq!(refused.get(app).map(String::as_str), Some(message), "{app}");
    }
    assert_eq!(refused.len(), expect.len(), "{refused:?}");
    // The Application in Argo CD's own namespace is never created: team-a's Git Source may
    // deploy into team-a only.
    assert!(events.iter().any(|e| matches!(
        e.world(),
        Some(WorldEvent::ReconcileError { app, error })
            if app == "team-a" && error == "namespace argocd is not permitted in project 'team-a'"
    )));
    assert!(!events.iter().any(|e| matches!(
        e.world(),
        Some(WorldEvent::ChildCreated { child, .. }) if child == "argocd/admin"
    )));
    // Widening the source moved its project only; deleting the source deleted its Git
    // Source app before its project; restoring it brought both back, and team-a/web is
    // deployed again (a re-created app's history starts again: the monitor follows it).
    let actions: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e.operator() {
            Some(OperatorEvent::Source { source, action, .. }) if source == "argocd/team-a" => {
                Some((action.clone(), e.at_ms.to_string()))
            }
            _ => None,
        })
        .collect();
    let order: Vec<&str> = actions.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        order,
        [
            "project_applied",
            "application_applied",
            "project_applied", // widened during the failover
            "application_deleted",
            "project_deleted",
            "project_applied",
            "application_applied",
        ]
    );
    let restored_at = actions[5].1.parse::<u64>().unwrap();
    assert!(
        events.iter().any(|e| matches!(
            e.world(),
            Some(WorldEvent::AppDeployed { app, deployed_at_ms, .. })
                if app == "argocd/team-a" && *deployed_at_ms >= restored_at / 1000 * 1000
        )),
        "the re-created Git Source app's first deployment is reported"
    );
    assert!(events.iter().any(|e| e.at_ms > restored_at
        && matches!(e.world(), Some(WorldEvent::AppDeployed { app, .. }) if app == "team-a/web")));
}

#[test]
fn hardened_applies_a_source_change_on_its_watch_event_faithful_on_its_poll() {
    use orrery_sim::checkers::restricted::PROPAGATION_MS;
    // Per change: (changed at, delay until its AppProject said it).
    let delays = |variant| -> Vec<(u64, u64)> {
        let events = run(variant).trace.events();
        let delays = propagation(&events);
        assert_eq!(
            delays.len(),
            7,
            "two creations, a widening during the failover, a narrowing, a deletion, a restore, a deny entry"
        );
        delays
            .iter()
            .map(|(source, at, reflected)| {
                let reflected =
                    reflected.unwrap_or_else(|| panic!("{source} at {at} never reflected"));
                (*at, reflected - at)
            })
            .collect()
    };
    // The leader crashes at 50 s; the change at 55 s waits for the next leader.
    let failover = |at: u64| (50_000..80_000).contains(&at);
    let hardened = delays(Variant::Hardened);
    let faithful = delays(Variant::Faithful);
    for (at, delay) in &hardened {
        if failover(*at) {
            assert!(*delay <= PROPAGATION_MS, "hardened at {at}: {delay} ms");
        } else {
            assert!(
                *delay < 1_000,
                "hardened at {at}: {delay} ms on the watch event"
            );
        }
    }
    assert!(faithful.iter().all(|(_, delay)| *delay <= PROPAGATION_MS));
    assert!(
        faithful
            .iter()
            .any(|(at, delay)| !failover(*at) && *delay >= 1_000),
        "faithful waits for its poll: {faithful:?}"
    );
}

#[test]
fn a_deny_entry_opens_the_project_in_faithful_and_hardened_refuses_the_source() {
    let source_actions = |events: &[TraceEvent]| -> Vec<(String, String)> {
        events
            .iter()
            .filter(|e| e.at_ms >= DENY_AT_MS)
            .filter_map(|e| match e.operator() {
                Some(OperatorEvent::Source {
                    source,
                    action,
                    detail,
                    ..
                }) if source == "argocd/team-a" => Some((action.clone(), detail.clone())),
                _ => None,
            })
            .collect()
    };
    let after = |events: &[TraceEvent]| -> Vec<TraceEvent> {
        events
            .iter()
            .filter(|e| e.at_ms >= DENY_AT_MS)
            .cloned()
            .collect()
    };
    // faithful: the entries copied; Argo CD now permits team-b's repository, and deploys
    // team-a/steal from it.
    let faithful = run(Variant::Faithful).trace.events();
    let actions = source_actions(&faithful);
    assert_eq!(
        actions.first().map(|a| a.0.as_str()),
        Some("project_applied")
    );
    assert!(faithful.iter().any(|e| e.at_ms >= DENY_AT_MS
        && matches!(e.world(), Some(WorldEvent::AppDeployed { app, repo, .. })
            if app == "team-a/steal" && repo == "https://git.example/team-b/web.git")));
    // hardened: refused, its Git Source and project removed (fail closed), team-a's apps
    // refused from then on and team-a/steal never deployed.
    let hardened = run(Variant::Hardened).trace.events();
    let actions = source_actions(&hardened);
    assert!(
        actions[0].0 == "invalid" && actions[0].1.contains("argoproj/argo-cd#21264"),
        "{actions:?}"
    );
    let order: Vec<&str> = actions
        .iter()
        .map(|(a, _)| a.as_str())
        .filter(|a| *a != "invalid")
        .collect();
    assert_eq!(order, ["application_deleted", "project_deleted"]);
    assert!(!deployed(&hardened).contains("team-a/steal"));
    assert!(after(&hardened).iter().any(|e| matches!(e.world(),
        Some(WorldEvent::AppRefused { app, message, .. })
            if app == "team-a/web" && message.contains("does not exist"))));
}
