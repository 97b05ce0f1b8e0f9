//! The simulated Argo CD: the controller syncs apps from Git (automated policy), reports
//! OutOfSync otherwise, keeps history and operationState, and the server answers the REST
//! subset behind its bearer token.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use kube::api::{Api, DynamicObject, PostParams};
use orrery_sim::world::apiserver::Knobs;
use orrery_sim::world::argocd::{self, application_resource, HealthOverrides, NAMESPACE};
use orrery_sim::world::git::SharedGit;
use orrery_system::env::SharedEnv;
use serde_json::{json, Value};

use crate::support::*;

const TOKEN: &str = "t0ken";
const REPO: &str = "https://git.example/r.git";

async fn get(env: &SharedEnv, path: &str, token: Option<&str>) -> (u16, Value) {
    let client =
        orrery_system::env::http::client::<Empty<Bytes>>(env.clone(), Duration::from_secs(10));
    let mut request = http::Request::get(format!("http://argocd:8080{path}"));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .expect("argocd answers");
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn app(name: &str, automated: bool) -> DynamicObject {
    let mut app = DynamicObject::new(name, &application_resource()).within(NAMESPACE);
    let mut spec =
        json!({"project": "default", "source": {"repoURL": REPO, "path": format!("apps/{name}")}});
    if automated {
        spec["syncPolicy"] = json!({"automated": {}});
    }
    app.data = json!({"spec": spec});
    app
}

fn files(app: &str, version: u32) -> BTreeMap<String, String> {
    BTreeMap::from([(
        format!("apps/{app}/deployment.yaml"),
        format!("image: {app}:v{version}"),
    )])
}

#[test]
fn the_controller_syncs_automated_apps_and_the_server_serves_their_tree_and_revisions() {
    let mut w = world(Knobs::default());
    let git = SharedGit::default();
    let first = git.lock().commit(
        REPO,
        "Dev <d@x>",
        "init",
        0,
        files("auto", 1)
            .into_iter()
            .chain(files("manual", 1))
            .collect(),
    );
    let config = argocd::controller::Config {
        reconcile_every: Duration::from_secs(5),
        history_limit: 2,
        ..Default::default()
    };
    w.argocd(&git, &HealthOverrides::default(), config, TOKEN);
    let trace = w.trace.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(30));
        let apps: Api<DynamicObject> =
            Api::namespaced_with(client, NAMESPACE, &application_resource());
        apps.create(&PostParams::default(), &app("auto", true))
            .await?;
        apps.create(&PostParams::default(), &app("manual", false))
            .await?;
        env.sleep(Duration::from_secs(12)).await;
        let auto = apps.get("auto").await?;
        assert_eq!(auto.data["status"]["sync"]["status"], "Synced");
        assert_eq!(auto.data["status"]["sync"]["revision"], first.as_str());
        assert_eq!(auto.data["status"]["operationState"]["phase"], "Succeeded");
        assert_eq!(auto.data["status"]["health"]["status"], "Healthy");
        assert_eq!(auto.data["status"]["history"].as_array().unwrap().len(), 1);
        assert_eq!(
            apps.get("manual").await?.data["status"]["sync"]["status"],
            "OutOfSync"
        );

        for version in 2..=4 {
            git.lock().commit(
                REPO,
                "Dev <d@x>",
                &format!("bump v{version}"),
                0,
                files("auto", version),
            );
            env.sleep(Duration::from_secs(6)).await;
        }
        let auto = apps.get("auto").await?;
        let head = git.lock().head(REPO).unwrap().sha.clone();
        assert_eq!(
            auto.data["status"]["sync"]["revision"],
            head.as_str(),
            "auto-synced to the new head"
        );
        assert_eq!(
            auto.data["status"]["history"].as_array().unwrap().len(),
            2,
            "history is trimmed to its limit"
        );
        assert!(
            auto.metadata.generation.unwrap() > 1,
            "Application has no status subresource: status writes bump generation"
        );

        let (code, _) = get(&env, "/api/v1/applications/auto/resource-tree", None).await;
        assert_eq!(code, 401, "no token → unauthorised");
        let (code, tree) = get(&env, "/api/v1/applications/auto/resource-tree", Some(TOKEN)).await;
        assert_eq!(code, 200);
        assert_eq!(
            (&tree["nodes"][0]["kind"], &tree["nodes"][0]["group"], &tree["nodes"][0]["version"]),
            (&serde_json::json!("Deployment"), &serde_json::json!("apps"), &serde_json::json!("v1"))
        );
        let (_, manifests) = get(
            &env,
            &format!("/api/v1/applications/auto/manifests?revision={first}"),
            Some(TOKEN),
        )
        .await;
        let first_manifest = &manifests["manifests"][0];
        assert_eq!(
            first_manifest["rawManifest"], "image: auto:v1",
            "manifests at an older revision"
        );
        assert_eq!(first_manifest["path"], "apps/auto/deployment.yaml");
        let compiled: serde_json::Value =
            serde_json::from_str(first_manifest["compiledManifest"].as_str().unwrap()).unwrap();
        assert_eq!(
            (
                &compiled["apiVersion"],
                &compiled["kind"],
                &compiled["metadata"]["namespace"],
                &compiled["image"]
            ),
            (
                &serde_json::json!("apps/v1"),
                &serde_json::json!("Deployment"),
                &serde_json::json!("auto"),
                &serde_json::json!("auto:v1")
            ),
            "the compiled manifest is the rendered object"
        );
        assert_eq!(
            manifests["applicationVersions"],
            serde_json::Value::Null,
            "no Chart.yaml under the app's path: no app versions"
        );
        let (_, meta) = get(
            &env,
            &format!("/api/v1/applications/auto/revisions/{head}/metadata"),
            Some(TOKEN),
        )
        .await;
        assert_eq!(meta["message"], "bump v4");
        let (_, live) = get(
            &env,
            "/api/v1/applications/auto/resource?appNamespace=argocd&namespace=auto&resourceName=auto&version=v1&group=apps&kind=Deployment&project=default",
            Some(TOKEN),
        )
        .await;
        let live: serde_json::Value =
            serde_json::from_str(live["manifest"].as_str().unwrap()).unwrap();
        assert_eq!(live["image"], "auto:v4", "the live object at the deployed revision");
        let (code, _) = get(
            &env,
            "/api/v1/applications/auto/resource?namespace=auto&resourceName=auto&version=v1&group=&kind=Deployment",
            Some(TOKEN),
        )
        .await;
        assert_eq!(code, 404, "the group is part of the resource's identity");
        // A missing app: 404 when its project is named, 403 otherwise (Argo CD's
        // getAppEnforceRBAC does not reveal whether an app exists).
        let (code, _) = get(
            &env,
            "/api/v1/applications/nope/resource-tree?project=default",
            Some(TOKEN),
        )
        .await;
        assert_eq!(code, 404);
        let (code, body) =
            get(&env, "/api/v1/applications/nope/resource-tree", Some(TOKEN)).await;
        assert_eq!((code, &body["message"]), (403, &json!("permission denied")));
        Ok(())
    });
    w.sim.run().unwrap();
}

/// An app-of-apps parent in `argocd` whose path holds two child Application manifests, one
/// for `argocd` and one for `team-a`.
fn parent_files() -> BTreeMap<String, String> {
    let child = |name: &str, namespace: &str| {
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec: {{project: default, source: {{repoURL: \"{REPO}\", path: apps/{name}}}, syncPolicy: {{automated: {{}}}}}}\n"
        )
    };
    BTreeMap::from([
        (
            "roots/root/child-a.yaml".to_string(),
            child("child-a", NAMESPACE),
        ),
        (
            "roots/root/child-b.yaml".to_string(),
            child("child-b", "team-a"),
        ),
    ])
}

#[test]
fn a_parent_sync_creates_its_children_in_their_namespaces_and_the_server_serves_every_managed_namespace(
) {
    let mut w = world(Knobs::default());
    let git = SharedGit::default();
    git.lock().commit(
        REPO,
        "Dev <d@x>",
        "init",
        0,
        parent_files()
            .into_iter()
            .chain(files("child-a", 1))
            .chain(files("child-b", 1))
            .chain(files("stray", 1))
            .collect(),
    );
    let config = argocd::controller::Config {
        reconcile_every: Duration::from_secs(5),
        application_namespaces: vec!["team-a".into()],
        ..Default::default()
    };
    w.argocd(&git, &HealthOverrides::default(), config, TOKEN);
    let trace = w.trace.clone();
    w.sim.client("client", async move {
        let (env, client) = kube("client", &trace, Duration::from_secs(30));
        let in_ns = |ns: &str| -> Api<DynamicObject> {
            Api::namespaced_with(client.clone(), ns, &application_resource())
        };
        let mut root = app("root", true);
        root.data["spec"]["source"]["path"] = json!("roots/root");
        in_ns(NAMESPACE).create(&PostParams::default(), &root).await?;
        // An app in a namespace Argo CD does not manage: ignored.
        let mut stray = app("stray", true);
        stray.metadata.namespace = Some("team-z".into());
        in_ns("team-z").create(&PostParams::default(), &stray).await?;
        env.sleep(Duration::from_secs(8)).await;

        let child_b = in_ns("team-a").get("child-b").await?;
        assert_eq!(
            child_b.metadata.labels.as_ref().and_then(|l| l.get("app.kubernetes.io/instance")).map(String::as_str),
            Some("root"),
            "a child carries its parent's instance label (label tracking)"
        );
        assert_eq!(child_b.data["status"]["sync"]["status"], "Synced", "children are reconciled in team-a too");
        let child_a = in_ns(NAMESPACE).get("child-a").await?;
        assert_eq!(child_a.data["status"]["health"]["status"], "Healthy");
        let root = in_ns(NAMESPACE).get("root").await?;
        let kinds: Vec<(String, String, String)> = root.data["status"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["kind"].as_str().unwrap().to_string(),
                    r["namespace"].as_str().unwrap().to_string(),
                    r["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("Application".to_string(), NAMESPACE.to_string(), "child-a".to_string()),
                ("Application".to_string(), "team-a".to_string(), "child-b".to_string()),
            ],
            "the parent's resources are its children"
        );
        assert!(
            in_ns("team-z").get("stray").await?.data.get("status").is_none(),
            "an app outside the managed namespaces is never reconciled"
        );

        // A child deleted by hand comes back at the parent's next sync.
        in_ns("team-a").delete("child-b", &Default::default()).await?;
        env.sleep(Duration::from_secs(8)).await;
        assert!(in_ns("team-a").get_opt("child-b").await?.is_some(), "recreated by the parent");

        let (code, tree) = get(
            &env,
            "/api/v1/applications/child-b/resource-tree?appNamespace=team-a",
            Some(TOKEN),
        )
        .await;
        assert_eq!((code, &tree["nodes"][0]["kind"]), (200, &json!("Deployment")));
        let (code, _) = get(
            &env,
            "/api/v1/applications/child-b/resource-tree?project=default",
            Some(TOKEN),
        )
        .await;
        assert_eq!(code, 404, "without appNamespace the server looks in argocd");
        let (code, body) = get(
            &env,
            "/api/v1/applications/stray?appNamespace=team-z",
            Some(TOKEN),
        )
        .await;
        assert_eq!(code, 403, "{body}");
        assert_eq!(body["message"], "namespace 'team-z' is not permitted");
        let (_, live) = get(
            &env,
            "/api/v1/applications/root/resource?appNamespace=argocd&namespace=team-a&resourceName=child-b&version=v1alpha1&group=argoproj.io&kind=Application",
            Some(TOKEN),
        )
        .await;
        let live: Value = serde_json::from_str(live["manifest"].as_str().unwrap_or("null")).unwrap();
        assert_eq!(live["metadata"]["namespace"], "team-a", "a child's live manifest, in its own namespace");
        Ok(())
    });
    w.sim.run().unwrap();
}
