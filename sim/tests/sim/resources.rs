//! The resource event reporter in small worlds: both variants report Rollouts and
//! Workflows through the runtime assembly (faithful over the event bus); a Rollout deleted
//! while the reporter is down stays on the platform in faithful and is deleted there by
//! hardened's resync; the committed scenarios, scaled down, show the flaw and the fix.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use orrery_sim::harness::runner;
use orrery_sim::report;
use orrery_sim::scenario::{self, Outcome, Variant};
use orrery_sim::world::apiserver::Knobs;
use orrery_system::core;
use orrery_system::env::kube::KubeTarget;
use orrery_system::observe::{LossReason, ResourceReporterEvent};
use orrery_system::platform::events::{self, Platform};
use orrery_system::runtime::assembly::RuntimeConfig;
use orrery_system::runtime::resource_reporter::{self, bus, Kind};
use serde_json::json;

use crate::support::*;

const TOKEN: &str = "rt-token";

/// The reporter (and, for faithful, the bus on host `eventbus`) through the runtime
/// assembly, with a 10 s resync.
fn boot_reporter(w: &mut World, variant: core::Variant, bus_store: &bus::Store) {
    let mut config = resource_reporter::Config::new(
        variant,
        KubeTarget::new("apiserver:6443"),
        "platform:8080",
        TOKEN,
    );
    config.resync_every = Duration::from_secs(10);
    config.bus_addr = format!("eventbus:{}", resource_reporter::BUS_PORT);
    boot_runtime(
        w,
        "resources",
        RuntimeConfig {
            resource_reporter: Some(config),
            ..Default::default()
        },
    );
    boot_runtime(
        w,
        "eventbus",
        RuntimeConfig {
            event_bus: Some(format!("0.0.0.0:{}", resource_reporter::BUS_PORT)),
            bus_store: Some(bus_store.clone()),
            ..Default::default()
        },
    );
}

fn object(kind: Kind, name: &str, status: serde_json::Value) -> DynamicObject {
    let mut object = DynamicObject::new(name, &kind.resource()).within("shop");
    object.data = json!({"spec": {}, "status": status});
    object
}

/// Creates a Rollout and sets its phase through the status subresource (a create drops
/// `status`, as the real CRD's does).
async fn create_rollout(api: &Api<DynamicObject>, name: &str, phase: &str) -> kube::Result<()> {
    api.create(
        &PostParams::default(),
        &object(Kind::Rollout, name, json!({})),
    )
    .await?;
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": phase}})),
    )
    .await?;
    Ok(())
}

/// Creates Rollouts `web` and `api` and Workflow `build` at once, deletes `web` at 40 s;
/// the harness keeps the reporter down from 30 s to 50 s.
fn run_gap_world(variant: core::Variant) -> (Arc<Platform>, orrery_sim::trace::Trace) {
    let mut w = world(Knobs::default());
    let platform = Platform::new(events::Config {
        tokens: [(TOKEN.to_string(), "acme".to_string())]
            .into_iter()
            .collect(),
        bus_capacity: 100,
        durability: Default::default(),
        idempotency_keys: false,
    });
    boot_platform(&mut w, &platform);
    boot_reporter(&mut w, variant, &bus::Store::default());
    let trace = w.trace.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(30));
        let rollouts: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "shop", &Kind::Rollout.resource());
        let workflows: Api<DynamicObject> =
            Api::namespaced_with(client, "shop", &Kind::Workflow.resource());
        for name in ["web", "api"] {
            create_rollout(&rollouts, name, "Healthy").await?;
        }
        workflows
            .create(
                &PostParams::default(),
                &object(Kind::Workflow, "build", json!({"phase": "Succeeded"})),
            )
            .await?;
        env.sleep(Duration::from_secs(40)).await;
        rollouts.delete("web", &DeleteParams::default()).await?;
        env.sleep(Duration::from_secs(50)).await;
        Ok(())
    });
    while w.sim.elapsed() < Duration::from_secs(30) {
        w.sim.step().unwrap();
    }
    w.sim.crash("resources");
    while w.sim.elapsed() < Duration::from_secs(50) {
        w.sim.step().unwrap();
    }
    w.sim.bounce("resources");
    while !w.sim.step().unwrap() {}
    (platform, w.trace)
}

#[test]
fn a_rollout_deleted_while_the_reporter_was_down_stays_in_faithful_and_is_deleted_by_hardened() {
    let (platform, trace) = run_gap_world(core::Variant::Faithful);
    let rollouts = platform.rollouts();
    assert_eq!(rollouts["acme/shop/api"].fields.phase, "Healthy");
    assert!(
        !rollouts["acme/shop/web"].deleted,
        "faithful: the restarted informer never knew web, and the Sensor sends no type"
    );
    assert_eq!(
        platform.workflows()["acme/shop/build"].fields.phase,
        "Succeeded"
    );
    let delivered = trace
        .events()
        .iter()
        .filter(|e| matches!(e.resources(), Some(ResourceReporterEvent::Delivered { .. })))
        .count();
    assert!(
        delivered >= 6,
        "each object before the crash and again after ({delivered})"
    );

    let (platform, trace) = run_gap_world(core::Variant::Hardened);
    let rollouts = platform.rollouts();
    assert_eq!(rollouts["acme/shop/api"].fields.phase, "Healthy");
    assert!(
        rollouts["acme/shop/web"].deleted,
        "hardened: the resync found web on the platform but not in the cluster"
    );
    assert!(trace.events().iter().any(|e| matches!(
        e.resources(),
        Some(ResourceReporterEvent::Resync { deleted: 1, .. })
    )));
}

#[test]
fn a_sensor_meeting_a_404_acks_the_event_and_the_state_is_lost_while_hardened_retries() {
    for variant in [core::Variant::Faithful, core::Variant::Hardened] {
        let mut w = world(Knobs::default());
        let platform = Platform::new(events::Config {
            tokens: [(TOKEN.to_string(), "acme".to_string())]
                .into_iter()
                .collect(),
            bus_capacity: 100,
            durability: Default::default(),
            idempotency_keys: false,
        });
        platform.set_knobs(events::Knobs {
            reject: Some((http::StatusCode::NOT_FOUND, 100)),
            ..Default::default()
        });
        boot_platform(&mut w, &platform);
        boot_reporter(&mut w, variant, &bus::Store::default());
        let (trace, knobs_platform) = (w.trace.clone(), platform.clone());
        w.sim.client("client", async move {
            let (env, client) = kube("client", &trace, Duration::from_secs(30));
            let rollouts: Api<DynamicObject> =
                Api::namespaced_with(client, "shop", &Kind::Rollout.resource());
            create_rollout(&rollouts, "web", "Degraded").await?;
            env.sleep(Duration::from_secs(20)).await;
            // The ingress is fixed; nothing changes the Rollout again.
            knobs_platform.set_knobs(events::Knobs::default());
            env.sleep(Duration::from_secs(60)).await;
            Ok(())
        });
        w.sim.run().unwrap();
        let shown = platform
            .rollouts()
            .get("acme/shop/web")
            .map(|v| v.fields.phase.clone());
        let events = w.trace.events();
        let lost = events.iter().any(|e| {
            matches!(
                e.resources(),
                Some(ResourceReporterEvent::Lost {
                    status: 404,
                    why: LossReason::AcceptedAsFinal,
                    ..
                })
            )
        });
        match variant {
            core::Variant::Faithful => {
                assert!(lost, "the 404 is in the trigger's allowed statuses");
                assert_eq!(
                    shown, None,
                    "the aborted canary never shows on the dashboard"
                );
            }
            core::Variant::Hardened => {
                assert!(!lost);
                assert_eq!(shown.as_deref(), Some("Degraded"));
            }
        }
    }
}

/// A committed scenario with fewer objects, run for both variants at seed 1.
fn scaled(file: &str, shrink: impl Fn(&mut scenario::Scenario)) {
    let path = format!("{}/../scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    let mut s = scenario::load(std::path::Path::new(&path)).unwrap();
    shrink(&mut s);
    for variant in [Variant::Faithful, Variant::Hardened] {
        let run = runner::run(&s, 1, variant);
        assert_eq!(
            run.result,
            report::expected(&s, variant),
            "{file} {variant:?}: {:?}",
            run.violations
        );
        if variant == Variant::Faithful {
            assert_eq!(run.result, Outcome::SafetyViolation);
        }
    }
}

#[test]
fn rollout_storm_scaled_down_loses_final_states_in_faithful_only() {
    scaled("rollout-storm.yaml", |s| {
        let load = s.workload.rollouts.as_mut().unwrap();
        load.count = 40;
        load.deploy_every = Duration::from_millis(500);
    });
}

#[test]
fn workflow_flood_shortened_loses_final_phases_in_faithful_only() {
    scaled("workflow-flood.yaml", |s| {
        s.duration = Duration::from_secs(150);
        s.calm = Duration::from_secs(120);
        s.faults[0].at = Duration::from_secs(30);
        s.faults[1].at = Duration::from_secs(120);
    });
}
