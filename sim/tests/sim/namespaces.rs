//! Namespaces on the simulated API server as kube-apiserver serves them (answers read off
//! v1.36.3; the kubectl conformance suite compares them): a server that requires namespaces
//! refuses content in a missing or terminating one, a deleted namespace is Terminating until
//! the namespace stand-in has removed its content and its `kubernetes` finalizer, and the
//! system namespaces cannot be deleted. Unit tests' servers (`ApiServer::new`) keep implicit namespaces.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use orrery_sim::trace::Trace;
use orrery_sim::world::apiserver::{ApiServer, Knobs};
use serde_json::json;

use crate::support::{apiserver_host, configmap, crash_when_ready, kube, sim, with_apiserver};

fn status(error: kube::Error) -> (u16, String, String) {
    match error {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("not an API error: {other}"),
    }
}

/// Runs `test` on a client host against a server that requires namespaces (or not).
fn with_server<F, Fut>(required: bool, test: F)
where
    F: FnOnce(kube::Client, orrery_system::env::SharedEnv) -> Fut + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let api = if required {
        // Made at the simulation's start, as the host would make it.
        let unix_millis = orrery_sim::env::SIM_EPOCH_UNIX_MS;
        ApiServer::requiring_namespaces(Knobs::default(), Duration::ZERO, unix_millis)
    } else {
        ApiServer::new(Knobs::default())
    };
    with_apiserver(
        sim(Duration::from_secs(600)),
        api,
        Duration::from_secs(300),
        test,
    );
}

#[test]
fn a_namespace_lives_terminates_while_its_content_goes_and_is_then_gone() {
    with_server(true, |client, env| async move {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let names: Vec<String> = namespaces
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        assert_eq!(
            names,
            ["default", "kube-node-lease", "kube-public", "kube-system"]
        );

        // Content in a missing namespace is refused as kube-apiserver refuses it.
        let in_team: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
        let missing = in_team
            .create(&PostParams::default(), &configmap("c", &[]))
            .await
            .unwrap_err();
        assert_eq!(
            status(missing),
            (
                404,
                "NotFound".into(),
                "namespaces \"team-a\" not found".into()
            )
        );

        let mut ns = Namespace::default();
        ns.metadata.name = Some("team-a".into());
        let made = namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let label = made.metadata.labels.unwrap_or_default();
        assert_eq!(
            label.get("kubernetes.io/metadata.name").map(String::as_str),
            Some("team-a")
        );
        assert_eq!(
            made.spec.unwrap().finalizers,
            Some(vec!["kubernetes".to_string()])
        );
        assert_eq!(made.status.unwrap().phase.as_deref(), Some("Active"));

        in_team
            .create(&PostParams::default(), &configmap("held", &[]))
            .await
            .unwrap();
        let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
        in_team
            .patch("held", &PatchParams::default(), &Patch::Merge(&hold))
            .await
            .unwrap();

        let deleted = namespaces
            .delete("team-a", &DeleteParams::default())
            .await
            .unwrap();
        let deleted = deleted
            .left()
            .expect("the namespace is answered while it terminates");
        assert!(deleted.metadata.deletion_timestamp.is_some());
        assert_eq!(
            deleted.status.unwrap().phase.as_deref(),
            Some("Terminating")
        );

        // New content is refused, with the lifecycle plugin's cause.
        let late = in_team
            .create(&PostParams::default(), &configmap("late", &[]))
            .await
            .unwrap_err();
        assert_eq!(
            status(late),
            (403, "Forbidden".into(), "configmaps \"late\" is forbidden: unable to create new content in namespace team-a because it is being terminated".into())
        );

        // The stand-in marked the held ConfigMap and waits for it.
        env.sleep(Duration::from_secs(5)).await;
        let held = in_team.get("held").await.unwrap();
        assert!(
            held.metadata.deletion_timestamp.is_some(),
            "the stand-in deletes the content"
        );
        let still = namespaces.get("team-a").await.unwrap();
        assert_eq!(still.status.unwrap().phase.as_deref(), Some("Terminating"));

        // The finalizer goes: the ConfigMap, then the namespace.
        let release = json!({"metadata": {"finalizers": null}});
        in_team
            .patch("held", &PatchParams::default(), &Patch::Merge(&release))
            .await
            .unwrap();
        env.sleep(Duration::from_secs(3)).await;
        let gone = namespaces.get("team-a").await.unwrap_err();
        assert_eq!(
            status(gone).0,
            404,
            "the namespace is deleted once it is empty"
        );

        // The system namespaces stay.
        let immortal = namespaces
            .delete("kube-system", &DeleteParams::default())
            .await
            .unwrap_err();
        assert_eq!(
            status(immortal),
            (
                403,
                "Forbidden".into(),
                "namespaces \"kube-system\" is forbidden: this namespace may not be deleted".into()
            )
        );
    });
}

#[test]
fn finalize_takes_only_the_spec_finalizers_and_deletes_an_emptied_terminating_namespace() {
    with_server(true, |client, _env| async move {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut ns = Namespace::default();
        ns.metadata.name = Some("team-b".into());
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        // The main endpoint does not change spec.finalizers.
        let patch = json!({"spec": {"finalizers": []}});
        let patched = namespaces
            .patch("team-b", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        assert_eq!(
            patched.spec.unwrap().finalizers,
            Some(vec!["kubernetes".to_string()])
        );
        // `finalize` does; an invalid finalizer name is 422 there.
        let mut body = namespaces.get("team-b").await.unwrap();
        body.spec.as_mut().unwrap().finalizers = Some(vec!["bad name".into()]);
        let finalize = |body: &Namespace| {
            let (body, namespaces) = (body.clone(), namespaces.clone());
            async move {
                namespaces
                    .replace_subresource("finalize", "team-b", &PostParams::default(), &body)
                    .await
            }
        };
        let invalid = finalize(&body).await.unwrap_err();
        assert_eq!(status(invalid).0, 422);
        body.spec.as_mut().unwrap().finalizers = Some(vec![]);
        let finalized = finalize(&body).await.unwrap();
        assert_eq!(finalized.spec.unwrap().finalizers, None);
        // Not terminating: it stays. The first delete marks it; the second deletes it.
        namespaces.get("team-b").await.unwrap();
        let first = namespaces
            .delete("team-b", &DeleteParams::default())
            .await
            .unwrap();
        assert!(first.left().unwrap().metadata.deletion_timestamp.is_some());
        namespaces
            .delete("team-b", &DeleteParams::default())
            .await
            .unwrap();
        assert_eq!(status(namespaces.get("team-b").await.unwrap_err()).0, 404);
    });
}

#[test]
fn the_simulated_worlds_namespaces_stay_implicit() {
    with_server(false, |client, _env| async move {
        let in_any: Api<ConfigMap> = Api::namespaced(client.clone(), "anything");
        in_any
            .create(&PostParams::default(), &configmap("c", &[]))
            .await
            .unwrap();
        let namespaces: Api<Namespace> = Api::all(client);
        let implicit = namespaces.get("anything").await.unwrap();
        assert_eq!(implicit.status.unwrap().phase.as_deref(), Some("Active"));
        let bad: Api<ConfigMap> = Api::namespaced(namespaces.into_client(), "Bad_Name");
        let refused = bad
            .create(&PostParams::default(), &configmap("c", &[]))
            .await
            .unwrap_err();
        assert_eq!(status(refused).0, 404);
    });
}

#[test]
fn a_terminating_namespace_finishes_after_the_api_servers_host_crashed() {
    let mut sim = sim(Duration::from_secs(600));
    let trace = Trace::default();
    let api = ApiServer::requiring_namespaces(Knobs::default(), Duration::ZERO, 0);
    apiserver_host(&mut sim, api, &trace);
    let (marked_tx, marked_rx) = std::sync::mpsc::channel();
    sim.client("test", async move {
        let (env, client) = kube("test", &trace, Duration::from_secs(300));
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut ns = Namespace::default();
        ns.metadata.name = Some("team-c".into());
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let in_team: Api<ConfigMap> = Api::namespaced(client.clone(), "team-c");
        let mut held = configmap("held", &[]);
        held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        in_team.create(&PostParams::default(), &held).await.unwrap();
        namespaces
            .delete("team-c", &DeleteParams::default())
            .await
            .unwrap();
        env.sleep(Duration::from_secs(3)).await;
        marked_tx.send(()).unwrap();
        // The harness crashes the API server's host here and starts it again.
        env.sleep(Duration::from_secs(30)).await;
        let release = json!({"metadata": {"finalizers": null}});
        in_team
            .patch("held", &PatchParams::default(), &Patch::Merge(&release))
            .await
            .unwrap();
        env.sleep(Duration::from_secs(5)).await;
        let gone = namespaces.get("team-c").await.unwrap_err();
        assert_eq!(
            status(gone).0,
            404,
            "the restarted server's stand-in finished the namespace"
        );
        Ok(())
    });
    crash_when_ready(sim, marked_rx, "apiserver");
}
