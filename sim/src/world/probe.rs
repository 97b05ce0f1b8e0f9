//! The probe: a kube-rs watcher + reflector over Applications whose every event is
//! observed, so checkers can compare what a real client saw with the API server's truth.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject};
use kube::runtime::{reflector, watcher, WatchStreamExt};

use orrery_system::env::kube::SeededBackoff;
use orrery_system::env::{fnv1a_64, SharedEnv};
use orrery_system::observe::WorldEvent;

use crate::world::argocd::{application_resource, NAMESPACE};

/// Probe settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// `timeoutSeconds` of each watch.
    pub watch_timeout_seconds: u32,
    /// List at `resourceVersion=0`, unpaginated (kube-rs's `ListSemantic::Any` without a page
    /// size, client-go's default), which an API server may answer from its watch cache; else
    /// a paginated quorum read (kube-rs's default, `MostRecent`).
    pub list_from_cache: bool,
}

/// (name, resourceVersion) of an object the probe saw.
fn id(object: &DynamicObject) -> (String, String) {
    (
        object.metadata.name.clone().unwrap_or_default(),
        object.metadata.resource_version.clone().unwrap_or_default(),
    )
}

/// Digest of a view: (count, FNV-1a over sorted `name@rv` lines).
pub fn digest(mut entries: Vec<(String, String)>) -> (usize, String) {
    entries.sort();
    let text: String = entries
        .iter()
        .map(|(n, rv)| format!("{n}@{rv}\n"))
        .collect();
    (entries.len(), format!("{:016x}", fnv1a_64(text.as_bytes())))
}

/// Runs the probe until the host stops. Observes `probe.*` events and, once a second
/// when it changed, `probe.view` with the reflector's digest.
pub async fn run(env: SharedEnv, client: kube::Client, config: Config) {
    let api: Api<orrery_system::env::kube::Wire> =
        Api::namespaced_with(client, NAMESPACE, &application_resource());
    let writer = reflector::store::Writer::new(application_resource());
    let reader = writer.as_reader();
    let events_env = env.clone();
    let stream = watcher(api, {
        let wc = watcher::Config::default().timeout(config.watch_timeout_seconds);
        if config.list_from_cache {
            // kube-core drops resourceVersion=0 from a paginated list: list unpaginated,
            // as client-go's reflector does for its RV=0 first list.
            watcher::Config {
                page_size: None,
                ..wc.any_semantic()
            }
        } else {
            wc
        }
    })
    .backoff(SeededBackoff::new(env.clone()))
    .map_ok(orrery_system::env::kube::unwire)
    .reflect(writer)
    .for_each(move |event| {
        let seen = match &event {
            Ok(watcher::Event::Init) => WorldEvent::ProbeInit,
            Ok(watcher::Event::InitApply(o)) => {
                let (name, rv) = id(o);
                WorldEvent::ProbeInitApply { name, rv }
            }
            Ok(watcher::Event::InitDone) => WorldEvent::ProbeInitDone,
            Ok(watcher::Event::Apply(o)) => {
                let (name, rv) = id(o);
                WorldEvent::ProbeApply { name, rv }
            }
            Ok(watcher::Event::Delete(o)) => {
                let (name, rv) = id(o);
                WorldEvent::ProbeDelete { name, rv }
            }
            Err(e) => WorldEvent::ProbeError {
                error: e.to_string(),
            },
        };
        events_env.observe(seen.into());
        async {}
    });
    tokio::spawn(stream);
    let mut last = None;
    loop {
        env.sleep(Duration::from_secs(1)).await;
        let entries = reader
            .state()
            .iter()
            .map(|o| {
                (
                    o.metadata.name.clone().unwrap_or_default(),
                    o.metadata.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect();
        let view = digest(entries);
        if last.as_ref() != Some(&view) {
            env.observe(
                WorldEvent::ProbeView {
                    count: view.0 as u64,
                    digest: view.1.clone(),
                }
                .into(),
            );
            last = Some(view);
        }
    }
}
