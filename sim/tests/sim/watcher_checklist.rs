//! The kube-rs watcher checklist (../shared/reference/kubernetes-api.md) run with real
//! kube-rs `Api`, `watcher` and `reflector` against the simulated API server over turmoil.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use orrery_sim::world::apiserver::Knobs;
use orrery_system::env::kube::SeededBackoff;
use orrery_system::env::SharedEnv;
use orrery_system::observe::WatchEnd;
use serde_json::json;

use crate::support::*;

const IDLE: Duration = Duration::from_secs(60);

/// Runs a watcher on Secrets in the background and counts its `Init` events (one per relist).
fn count_relists(env: SharedEnv, api: Api<Secret>, config: watcher::Config) -> Arc<AtomicUsize> {
    let inits = Arc::new(AtomicUsize::new(0));
    let counter = inits.clone();
    tokio::spawn(async move {
        let mut stream = watcher(api, config)
            .backoff(SeededBackoff::new(env))
            .boxed();
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Init) = event {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    inits
}

/// Keeps writing ConfigMaps once a second so the global RV and history move on.
async fn churn(api: &Api<ConfigMap>, env: &SharedEnv, seconds: u64) {
    for i in 0..seconds {
        api.create(
            &PostParams::default(),
            &configmap(&format!("churn-{i}"), &[]),
        )
        .await
        .expect("create");
        env.sleep(Duration::from_secs(1)).await;
    }
}

#[test]
fn list_pages_carry_continue_tokens_and_one_snapshot_rv() {
    let mut w = world(Knobs::default());
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (_env, client) = kube("probe", &trace, IDLE);
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        create_configmaps(&api, (0..7).map(|i| format!("c{i}"))).await?;
        let first = api.list(&ListParams::default().limit(3)).await?;
        assert_eq!(first.items.len(), 3);
        let token = first.metadata.continue_.clone().expect("more pages remain");
        api.create(&PostParams::default(), &configmap("late", &[]))
            .await?;
        let second = api
            .list(&ListParams::default().limit(3).continue_token(&token))
            .await?;
        let third = api
            .list(
                &ListParams::default()
                    .limit(3)
                    .continue_token(second.metadata.continue_.as_deref().unwrap()),
            )
            .await?;
        assert_eq!(
            first.metadata.resource_version, second.metadata.resource_version,
            "every page reports the first page's RV"
        );
        assert_eq!(
            third.items.len(),
            1,
            "the object created after the first page is not in this list"
        );
        assert!(third.metadata.continue_.is_none());
        Ok(())
    });
    w.sim.run().unwrap();
}

#[test]
fn watcher_pages_its_initial_list_then_reports_init_done() {
    let mut w = world(Knobs::default());
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (_env, client) = kube("probe", &trace, IDLE);
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        create_configmaps(&api, (0..7).map(|i| format!("c{i}"))).await?;
        let events: Vec<_> = watcher(api, watcher::Config::default().page_size(2))
            .take(9)
            .try_collect()
            .await?;
        assert!(matches!(events[0], watcher::Event::Init));
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, watcher::Event::InitApply(_)))
                .count(),
            7
        );
        assert!(matches!(events[8], watcher::Event::InitDone));
        Ok(())
    });
    w.sim.run().unwrap();
}

#[test]
fn watch_list_sends_initial_events_then_the_initial_events_end_bookmark() {
    let mut w = world(Knobs::default());
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (_env, client) = kube("probe", &trace, IDLE);
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        create_configmaps(&api, (0..3).map(|i| format!("c{i}"))).await?;
        let events: Vec<_> = watcher(api, watcher::Config::default().streaming_lists())
            .take(5)
            .try_collect()
            .await?;
        assert!(matches!(events[0], watcher::Event::Init));
        assert!(
            matches!(events[4], watcher::Event::InitDone),
            "the annotated bookmark ends the initial events"
        );
        Ok(())
    });
    w.sim.run().unwrap();
}

/// kube-apiserver's cache watcher sends a bookmark only above its floor: the RV the watch
/// started from, raised by the events found in the cache at the start but not by live ones.
#[test]
fn bookmarks_stay_above_the_start_floor_and_may_repeat_a_live_events_rv() {
    let knobs = Knobs {
        bookmark_interval: Duration::from_secs(2),
        ..Knobs::default()
    };
    let mut w = world(knobs);
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (env, client) = kube("probe", &trace, IDLE);
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let first = api
            .create(&PostParams::default(), &configmap("first", &[]))
            .await?;
        let start = first.metadata.resource_version.clone().unwrap();
        let params = WatchParams::default().timeout(9);
        let (events, live_rv) = futures::join!(
            async {
                let stream = api.watch(&params, &start).await?;
                stream.try_collect::<Vec<_>>().await
            },
            async {
                env.sleep(Duration::from_secs(1)).await;
                let live = api
                    .create(&PostParams::default(), &configmap("live", &[]))
                    .await
                    .expect("create");
                live.metadata.resource_version.unwrap()
            }
        );
        let events = events?;
        let bookmarks: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                WatchEvent::Bookmark(b) => Some(b.metadata.resource_version.clone()),
                _ => None,
            })
            .collect();
        assert!(
            matches!(&events[0], WatchEvent::Added(cm) if cm.metadata.name.as_deref() == Some("live")),
            "{events:?}"
        );
        assert!(!bookmarks.is_empty(), "{events:?}");
        assert!(
            bookmarks.iter().all(|rv| *rv == live_rv),
            "every bookmark repeats the live event's RV {live_rv}: {bookmarks:?}"
        );
        // From the newest RV, nothing newer: no bookmark before or at the timeout.
        let quiet: Vec<_> = api
            .watch(&WatchParams::default().timeout(5), &live_rv)
            .await?
            .try_collect()
            .await?;
        assert!(quiet.is_empty(), "{quiet:?}");
        Ok(())
    });
    w.sim.run().unwrap();
}

#[test]
fn compaction_past_the_watched_rv_makes_the_watcher_relist_after_an_in_stream_410() {
    let knobs = Knobs {
        compaction_window: Duration::from_secs(10),
        ..Knobs::default()
    };
    let mut w = world(knobs);
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (env, client) = kube("probe", &trace, IDLE);
        // Nothing changes Secrets, so without bookmarks the watcher's RV stays put while
        // ConfigMap writes move history on; each 5 s stream end re-watches the old RV.
        let inits = count_relists(
            env.clone(),
            Api::namespaced(client.clone(), "default"),
            watcher::Config::default().timeout(5).disable_bookmarks(),
        );
        churn(&Api::namespaced(client, "default"), &env, 40).await;
        assert!(
            inits.load(Ordering::SeqCst) >= 2,
            "expected a relist after 410, saw {} Init events",
            inits.load(Ordering::SeqCst)
        );
        Ok(())
    });
    w.sim.run().unwrap();
    assert!(
        watch_ends(&w.trace, WatchEnd::Expired) >= 1,
        "the server sent an in-stream 410"
    );
}

#[test]
fn bookmarks_advance_the_watchers_rv_so_compaction_causes_no_relist() {
    let knobs = Knobs {
        compaction_window: Duration::from_secs(10),
        bookmark_interval: Duration::from_secs(2),
        ..Knobs::default()
    };
    let mut w = world(knobs);
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (env, client) = kube("probe", &trace, IDLE);
        let inits = count_relists(
            env.clone(),
            Api::namespaced(client.clone(), "default"),
            watcher::Config::default().timeout(5),
        );
        churn(&Api::namespaced(client, "default"), &env, 40).await;
        assert_eq!(
            inits.load(Ordering::SeqCst),
            1,
            "bookmarks kept the RV fresh: only the first list"
        );
        Ok(())
    });
    w.sim.run().unwrap();
    assert_eq!(watch_ends(&w.trace, WatchEnd::Expired), 0);
    assert!(
        watch_ends(&w.trace, WatchEnd::Timeout) >= 5,
        "streams closed cleanly at timeoutSeconds"
    );
}

#[test]
fn a_stream_that_ends_is_rewatched_from_the_last_rv_without_relisting() {
    let mut w = world(Knobs::default());
    let (trace, api_state) = (w.trace.clone(), w.api.clone());
    w.sim.client("probe", async move {
        let (env, client) = kube("probe", &trace, IDLE);
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let (reader, writer) = reflector::store();
        let inits = Arc::new(AtomicUsize::new(0));
        let counter = inits.clone();
        let stream = watcher(api.clone(), watcher::Config::default().timeout(3))
            .backoff(SeededBackoff::new(env.clone()))
            .reflect(writer)
            .inspect_ok(move |e| {
                if matches!(e, watcher::Event::Init) {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            })
            .for_each(|_| async {});
        tokio::spawn(stream);
        churn(&api, &env, 20).await;
        await_convergence(&env, &reader, &api_state, Duration::from_secs(10)).await;
        assert_eq!(
            inits.load(Ordering::SeqCst),
            1,
            "stream ends resume, they do not relist"
        );
        Ok(())
    });
    w.sim.run().unwrap();
    assert!(watch_ends(&w.trace, WatchEnd::Timeout) >= 5);
}

#[test]
fn label_selector_transitions_arrive_as_added_and_deleted_with_the_new_rv() {
    let mut w = world(Knobs::default());
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (_env, client) = kube("probe", &trace, IDLE);
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let start = api
            .list(&ListParams::default())
            .await?
            .metadata
            .resource_version
            .unwrap();
        let mut events = api
            .watch(&WatchParams::default().labels("app=web"), &start)
            .await?
            .boxed();
        api.create(&PostParams::default(), &configmap("c", &[]))
            .await?;
        let labelled = api
            .patch(
                "c",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
            )
            .await?;
        let moved = api
            .patch(
                "c",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
            )
            .await?;
        api.create(&PostParams::default(), &configmap("d", &[("app", "web")]))
            .await?;
        api.delete("d", &DeleteParams::default()).await?;
        let mut seen = Vec::new();
        for _ in 0..4 {
            match events.try_next().await?.expect("watch stays open") {
                WatchEvent::Added(o) => seen.push((
                    "ADDED",
                    o.metadata.name.unwrap(),
                    o.metadata.resource_version.unwrap(),
                )),
                WatchEvent::Deleted(o) => seen.push((
                    "DELETED",
                    o.metadata.name.unwrap(),
                    o.metadata.resource_version.unwrap(),
                )),
                other => panic!("unexpected event {other:?}"),
            }
        }
        let rv = |s: &str| s.parse::<u64>().unwrap();
        assert_eq!(
            seen[0],
            (
                "ADDED",
                "c".into(),
                labelled.metadata.resource_version.clone().unwrap()
            ),
            "starts matching → ADDED"
        );
        assert_eq!(
            seen[1],
            (
                "DELETED",
                "c".into(),
                moved.metadata.resource_version.clone().unwrap()
            ),
            "stops matching → DELETED at the new RV"
        );
        assert_eq!((seen[2].0, seen[2].1.as_str()), ("ADDED", "d"));
        assert_eq!((seen[3].0, seen[3].1.as_str()), ("DELETED", "d"));
        assert!(
            rv(&seen[3].2) > rv(&seen[2].2),
            "a DELETED event carries the deletion's RV"
        );
        Ok(())
    });
    w.sim.run().unwrap();
}

/// The HTTP code of a kube API error (panics on success: the test expected a refusal).
fn code<T>(result: kube::Result<T>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("expected an API error, got {other}"),
        Ok(_) => panic!("expected an API error, the call succeeded"),
    }
}

#[test]
fn writes_follow_the_409_422_404_rules_through_kube_rs() {
    let mut w = world(Knobs::default());
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (_env, client) = kube("probe", &trace, IDLE);
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let created = api.create(&PostParams::default(), &configmap("c", &[])).await?;
        api.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await?;
        assert_eq!(code(api.replace("c", &PostParams::default(), &created).await), 409, "stale RV → Conflict");
        assert_eq!(code(api.create(&PostParams::default(), &configmap("c", &[])).await), 409, "existing name → AlreadyExists");
        let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application");
        let apps: Api<DynamicObject> = Api::namespaced_with(client, "default", &ApiResource::from_gvk(&gvk));
        let mut app: DynamicObject = serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "a"}, "spec": {}}))?;
        assert_eq!(code(apps.replace("a", &PostParams::default(), &app).await), 404, "PUT of a missing custom resource");
        apps.create(&PostParams::default(), &app).await?;
        app.data["spec"] = json!({"project": "x"});
        assert_eq!(code(apps.replace("a", &PostParams::default(), &app).await), 422, "PUT of a custom resource without RV");
        let ssa = PatchParams::apply("alice");
        apps.patch("a", &ssa, &Patch::Apply(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "spec": {"project": "p1"}}))).await?;
        let conflict = apps.patch("a", &PatchParams::apply("bob"), &Patch::Apply(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "spec": {"project": "p2"}}))).await;
        assert_eq!(code(conflict), 409, "apply conflict without force");
        let forced = apps.patch("a", &PatchParams::apply("bob").force(), &Patch::Apply(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "spec": {"project": "p2"}}))).await?;
        assert_eq!(forced.data["spec"]["project"], "p2");
        Ok(())
    });
    w.sim.run().unwrap();
}

#[test]
fn a_partitioned_watch_hits_its_read_deadline_and_recovers_after_repair() {
    let knobs = Knobs {
        bookmark_interval: Duration::from_secs(5),
        ..Knobs::default()
    };
    let mut w = world(knobs);
    let (trace, api_state) = (w.trace.clone(), w.api.clone());
    let writer_trace = w.trace.clone();
    w.sim.client("writer", async move {
        let (env, client) = kube("writer", &writer_trace, IDLE);
        churn(&Api::namespaced(client, "default"), &env, 60).await;
        Ok(())
    });
    w.sim.client("probe", async move {
        let (env, client) = kube("probe", &trace, Duration::from_secs(15));
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let (reader, writer) = reflector::store();
        let errors = Arc::new(AtomicUsize::new(0));
        let counter = errors.clone();
        tokio::spawn(
            watcher(api, watcher::Config::default())
                .backoff(SeededBackoff::new(env.clone()))
                .reflect(writer)
                .for_each(move |e| {
                    if e.is_err() {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    async {}
                }),
        );
        env.sleep(Duration::from_secs(10)).await;
        turmoil::partition("probe", "apiserver");
        env.sleep(Duration::from_secs(30)).await;
        turmoil::repair("probe", "apiserver");
        assert!(
            errors.load(Ordering::SeqCst) >= 1,
            "a silent partition must surface as an error (read deadline)"
        );
        env.sleep(Duration::from_secs(25)).await;
        await_convergence(&env, &reader, &api_state, Duration::from_secs(60)).await;
        Ok(())
    });
    w.sim.run().unwrap();
}

#[test]
fn streams_cut_mid_line_and_429s_do_not_stop_a_reflector_from_converging() {
    let knobs = Knobs {
        cut_stream_rate: 0.1,
        throttle_rate: 0.2,
        ..Knobs::default()
    };
    let mut w = world(knobs);
    let (trace, api_state) = (w.trace.clone(), w.api.clone());
    w.sim.client("probe", async move {
        let (env, client) = kube("probe", &trace, IDLE);
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let (reader, writer) = reflector::store();
        tokio::spawn(
            watcher(api.clone(), watcher::Config::default())
                .backoff(SeededBackoff::new(env.clone()))
                .reflect(writer)
                .for_each(|_| async {}),
        );
        // The writer retries its own 429s.
        for i in 0..30 {
            while api
                .create(&PostParams::default(), &configmap(&format!("c{i}"), &[]))
                .await
                .is_err()
            {
                env.sleep(Duration::from_secs(1)).await;
            }
        }
        await_convergence(&env, &reader, &api_state, Duration::from_secs(120)).await;
        Ok(())
    });
    w.sim.run().unwrap();
    assert!(watch_ends(&w.trace, WatchEnd::Cut) >= 1, "the fault fired");
}

#[test]
fn a_403_keeps_the_watcher_retrying_with_backoff_until_access_returns() {
    let mut w = world(Knobs::default());
    let (trace, api_state) = (w.trace.clone(), w.api.clone());
    w.sim.client("probe", async move {
        let (env, client) = kube("probe", &trace, IDLE);
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        create_configmaps(&api, (0..5).map(|i| format!("c{i}"))).await?;
        // The binding is removed: every request for configmaps is now 403.
        api_state.set_knobs(Knobs {
            forbidden: vec!["configmaps".into()],
            ..Knobs::default()
        });
        assert_eq!(
            code(api.get("c0").await),
            403,
            "a direct read is refused too"
        );
        let (reader, writer) = reflector::store();
        let forbidden = Arc::new(AtomicUsize::new(0));
        let counter = forbidden.clone();
        tokio::spawn(
            watcher(api.clone(), watcher::Config::default())
                .backoff(SeededBackoff::new(env.clone()))
                .reflect(writer)
                .for_each(move |event| {
                    if let Err(watcher::Error::InitialListFailed(kube::Error::Api(status))) = &event
                    {
                        assert_eq!(status.code, 403, "only the authorization error is expected");
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    async {}
                }),
        );
        env.sleep(Duration::from_secs(60)).await;
        let refused = forbidden.load(Ordering::SeqCst);
        assert!(
            refused >= 3,
            "the watcher must keep retrying a 403, not give up (refused {refused} times)"
        );
        assert!(
            refused <= 20,
            "retries must back off, not spin (refused {refused} times in 60 s)"
        );
        assert!(
            reader.state().is_empty(),
            "nothing is listed while forbidden"
        );
        // The binding is restored: the next retry lists and the store converges.
        api_state.set_knobs(Knobs::default());
        await_convergence(&env, &reader, &api_state, Duration::from_secs(60)).await;
        Ok(())
    });
    w.sim.run().unwrap();
}

#[test]
fn watcher_backoff_doubles_to_its_cap_ignores_reset_and_starts_over_only_after_a_quiet_period() {
    let mut w = world(Knobs::default());
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (env, _client) = kube("probe", &trace, IDLE);
        let mut backoff = SeededBackoff::new(env.clone());
        let mut base = Duration::from_millis(800);
        for step in 0..9 {
            let delay = backoff.next().expect("the backoff never gives up");
            assert!(
                delay >= base / 2 && delay <= base,
                "step {step}: {delay:?} outside [{:?}, {base:?}]",
                base / 2
            );
            base = (base * 2).min(Duration::from_secs(30));
        }
        // The watcher yields Ok(Init) before every relist attempt, so reset() must not start over.
        kube::runtime::utils::Backoff::reset(&mut backoff);
        assert!(
            backoff.next().unwrap() >= Duration::from_secs(15),
            "reset() alone keeps the long delay"
        );
        env.sleep(Duration::from_secs(119)).await;
        assert!(
            backoff.next().unwrap() >= Duration::from_secs(15),
            "errors 119 s apart keep the long delay"
        );
        env.sleep(Duration::from_secs(121)).await;
        assert!(
            backoff.next().unwrap() <= Duration::from_millis(800),
            "after 120 s without errors the schedule starts over"
        );
        Ok(())
    });
    w.sim.run().unwrap();
}

/// PersistentVolumes are cluster-scoped, as in kube-apiserver: created, read, patched,
/// listed and deleted without a namespace (the dind volume provisioner's objects).
#[test]
fn persistent_volumes_are_served_without_a_namespace() {
    let mut w = world(Knobs::default());
    let trace = w.trace.clone();
    w.sim.client("probe", async move {
        let (_env, client) = kube("probe", &trace, IDLE);
        let pv = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "PersistentVolume"), "persistentvolumes");
        let pvs: Api<DynamicObject> = Api::all_with(client, &pv);
        let volume: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "vol-1", "labels": {"a": "b"}}, "spec": {"capacity": {"storage": "16Gi"}}}))?;
        let created = pvs.create(&PostParams::default(), &volume).await?;
        assert_eq!(created.metadata.namespace, None, "no namespace on a cluster-scoped object");
        pvs.patch("vol-1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"claimRef": {"namespace": "ns", "name": "c"}}}))).await?;
        assert_eq!(pvs.get("vol-1").await?.data["spec"]["claimRef"]["name"], "c");
        let listed = pvs.list(&ListParams::default().labels("a=b")).await?;
        assert_eq!(listed.items.len(), 1);
        pvs.delete("vol-1", &DeleteParams::default()).await?;
        assert_eq!(code(pvs.get("vol-1").await), 404);
        Ok(())
    });
    w.sim.run().unwrap();
}
