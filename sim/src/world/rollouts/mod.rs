//! Simulated Argo Rollouts: the controller that moves `Rollout`s
//! (`rollouts.argoproj.io/v1alpha1`) through canary steps and blue-green promotions,
//! owning their `ReplicaSet`s and `AnalysisRun`s, written through the API server with the
//! subresources the real CRDs have (Rollout and ReplicaSet status through `/status`,
//! AnalysisRun status on the object). Follows argo-rollouts v1.8; what is simplified is
//! marked in each module.
//!
//! - [`model`]: typed views of the three objects, the pod-template hash, merge patches;
//! - [`canary`]: a basic canary's replica counts (ported from upstream);
//! - [`reconcile`]: one reconcile of one Rollout, as a pure function;
//! - [`analysis`]: AnalysisRun measurements, with the world's metric provider ([`Verdicts`]);
//! - [`controller`]: the loop that reads the reflectors and writes the plans;
//! - [`events`]: the Kubernetes Events a reconcile records;
//! - [`plugin`]: `kubectl argo rollouts promote | abort | retry`, as the plugin patches.

pub mod analysis;
pub mod canary;
pub mod controller;
pub mod events;
pub mod model;
pub mod plugin;
pub mod reconcile;
pub mod workload;

pub use analysis::{Verdict, Verdicts};

use kube::api::{ApiResource, GroupVersionKind};

/// `argoproj.io/v1alpha1 Rollout`.
pub fn rollout_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout"))
}

/// `argoproj.io/v1alpha1 AnalysisRun`.
pub fn analysis_run_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "AnalysisRun",
    ))
}

/// `apps/v1 ReplicaSet`.
pub fn replica_set_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "ReplicaSet"))
}

/// Runs the Rollouts controller against `target`: reflectors of Rollouts, ReplicaSets and
/// AnalysisRuns in every namespace, and the controller loop. Runs until the host stops.
pub async fn run(
    env: orrery_system::env::SharedEnv,
    target: orrery_system::env::kube::KubeTarget,
    verdicts: Verdicts,
    config: controller::Config,
) {
    use futures::StreamExt;
    use kube::runtime::{reflector, watcher, WatchStreamExt};

    let client = orrery_system::env::kube::client(env.clone(), &target);
    let reflect = |resource: ApiResource| {
        let api: kube::Api<orrery_system::env::kube::Shared<kube::api::DynamicObject>> =
            kube::Api::all_with(client.clone(), &resource);
        let writer = reflector::store::Writer::new(resource);
        let store = writer.as_reader();
        let events = watcher(api, watcher::Config::default())
            .backoff(orrery_system::env::kube::SeededBackoff::new(env.clone()));
        tokio::spawn(reflector::reflector(writer, events).for_each(|_| async {}));
        store
    };
    let stores = controller::Stores {
        rollouts: reflect(rollout_resource()),
        replica_sets: reflect(replica_set_resource()),
        runs: reflect(analysis_run_resource()),
    };
    controller::run(env, client, stores, verdicts, config).await;
}

#[cfg(test)]
mod tests;
