//! The runtime assembly's lifecycle: it runs what its config enables until told to stop, and
//! on shutdown the hardened reporter releases its lease (so the other replicas take its apps
//! at their next renewal, not after the lease expires); faithful has no lease to release.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use orrery_sim::env::SimEnv;
use orrery_sim::world::apiserver::Knobs;
use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::observe::ReporterEvent;
use orrery_system::runtime::app_reporter;
use orrery_system::runtime::assembly::{self as runtime_assembly, RuntimeConfig};

use crate::support::*;

/// Runs one reporter replica that is told to shut down at 20 s; returns (lease seen at
/// 10 s, lease seen at 30 s, the assembly's result, lease-released events).
fn reporter_shut_down_at_20s(variant: Variant) -> (bool, bool, Option<String>, Vec<bool>) {
    let mut w = world(Knobs::default());
    let trace = w.trace.clone();
    let ended: Arc<Mutex<Option<String>>> = Arc::default();
    let host_ended = ended.clone();
    w.sim.host("reporter-0", move || {
        let env = SimEnv::shared("reporter-0", SEED, trace.clone());
        let reporter =
            app_reporter::Config::new(variant, KubeTarget::new("apiserver:6443"), "argocd");
        let config = RuntimeConfig {
            app_reporter: Some(reporter),
            ..Default::default()
        };
        let ended = host_ended.clone();
        async move {
            let shutdown = env.sleep(Duration::from_secs(20));
            let result = runtime_assembly::run(env, config, shutdown).await;
            *ended.lock().unwrap() = Some(format!("{result:?}"));
            std::future::pending::<()>().await;
            Ok(())
        }
    });
    let (trace, seen) = (w.trace.clone(), Arc::new(Mutex::new((false, false))));
    let result = seen.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(60));
        let leases: Api<Lease> = Api::namespaced(client, "argocd");
        env.sleep(Duration::from_secs(10)).await;
        let before = leases.get_opt("app-reporter-reporter-0").await?.is_some();
        env.sleep(Duration::from_secs(20)).await;
        let after = leases.get_opt("app-reporter-reporter-0").await?.is_some();
        *result.lock().unwrap() = (before, after);
        Ok(())
    });
    w.sim.run().unwrap();
    let (before, after) = *seen.lock().unwrap();
    let released: Vec<bool> = w
        .trace
        .events()
        .iter()
        .filter_map(|e| match e.reporter() {
            Some(ReporterEvent::LeaseReleased { deleted, .. }) => Some(*deleted),
            _ => None,
        })
        .collect();
    let ended = ended.lock().unwrap().clone();
    (before, after, ended, released)
}

#[test]
fn on_shutdown_the_hardened_reporter_releases_its_lease() {
    let (before, after, ended, released) = reporter_shut_down_at_20s(Variant::Hardened);
    assert!(before, "the running replica holds its lease");
    assert!(!after, "the lease is gone right after the shutdown");
    assert_eq!(
        ended.as_deref(),
        Some("Ok(())"),
        "a requested stop is a clean stop"
    );
    assert_eq!(released, vec![true]);
}

#[test]
fn the_faithful_reporter_has_no_lease_and_still_stops_cleanly() {
    let (before, after, ended, released) = reporter_shut_down_at_20s(Variant::Faithful);
    assert!(
        !before && !after,
        "faithful shards by FNV-1a, without leases"
    );
    assert_eq!(ended.as_deref(), Some("Ok(())"));
    assert!(released.is_empty());
}
