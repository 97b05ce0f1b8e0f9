//! The app-proxy end to end over turmoil: a client calls it through the platform gateway,
//! the tunnel and the router; it authorises each call with permissions fetched from the
//! platform, lists and commits through the Git provider's API, and terminates an Argo
//! Workflow by patching it through the (simulated) Kubernetes API.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kube::api::{Api, DynamicObject, PostParams};
use orrery_sim::env::SimEnv;
use orrery_sim::world::apiserver::Knobs;
use orrery_sim::world::argocd::application_resource;
use orrery_sim::world::git::{self, SharedGit};
use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::SharedEnv;
use orrery_system::platform::assembly::{
    self as control_plane, ControlPlaneConfig, ControlPlaneState, GatewayConfig, TunnelServerConfig,
};
use orrery_system::platform::permissions::{Attributes, Pattern, Role, Rule};
use orrery_system::platform::tunnel;
use orrery_system::runtime::app_proxy::{self, workflow_resource};
use orrery_system::runtime::assembly::{self as runtime_assembly, RouterConfig, RuntimeConfig};
use orrery_system::runtime::router::Routes;
use orrery_system::runtime::{source_server, tunnel_client};
use serde_json::{json, Value};

use crate::support::*;

const REPO: &str = "https://git.example/apps.git";

async fn call(env: &SharedEnv, method: &str, path: &str, token: &str, body: Value) -> (u16, Value) {
    let client =
        orrery_system::env::http::client::<Full<Bytes>>(env.clone(), Duration::from_secs(60));
    let request = http::Request::builder()
        .method(method)
        .uri(format!(
            "http://platform:8080/api/runtimes/acme-prod/app-proxy/api/{path}"
        ))
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(if body.is_null() {
            String::new()
        } else {
            body.to_string()
        })))
        .unwrap();
    let response = client.request(request).await.expect("the gateway answers");
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[test]
fn the_app_proxy_lists_commits_and_terminates_workflows_for_authorised_users_only() {
    let mut w = world(Knobs::default());
    let git = SharedGit::default();
    git.lock().commit(
        REPO,
        "Dev <d@x>",
        "init",
        0,
        [
            ("apps/a.yaml".to_string(), "kind: Deployment\n".to_string()),
            (
                "apps/Chart.yaml".to_string(),
                "name: a\nappVersion: \"2.0\"\n".to_string(),
            ),
        ]
        .into_iter()
        .collect(),
    );
    let first = git.lock().head(REPO).expect("the init commit").sha.clone();
    // Argo CD (the source server reads it), with the Git provider's history.
    let argo_git = git.clone();
    let trace = w.trace.clone();
    w.sim.host("argocd", move || {
        let (env, git) = (
            SimEnv::shared("argocd", SEED, trace.clone()),
            argo_git.clone(),
        );
        async move {
            orrery_sim::world::argocd::run(
                env,
                KubeTarget::new("apiserver:6443"),
                git,
                Default::default(),
                Default::default(),
                "argo-token",
            )
            .await?;
            Ok(())
        }
    });
    let host_git = git.clone();
    let trace = w.trace.clone();
    w.sim.host("git", move || {
        let (env, git) = (SimEnv::shared("git", SEED, trace.clone()), host_git.clone());
        async move {
            git::serve(env, git, "0.0.0.0:80").await?;
            Ok(())
        }
    });
    let state = ControlPlaneState::default();
    state.registry.insert("rt-token", "acme", "prod");
    state.permissions.grant_in(
        "alice-token",
        "acme",
        "alice",
        &[
            "repositories:list",
            "applications:commit",
            "workflows:terminate",
            "applications:read",
        ],
    );
    state
        .permissions
        .grant_in("bob-token", "acme", "bob", &["repositories:list"]);
    state.permissions.grant_in(
        "dave-token",
        "acme",
        "dave",
        &["applications:sync", "applications:refresh"],
    );
    // eve is globex's admin: the runtime is acme's.
    state
        .permissions
        .add_user("eve-token", "globex", "eve", Role::Admin, &[]);
    // carol's one rule: terminate workflows in namespace ci, sync apps deploying to team-a.
    state
        .permissions
        .add_user("carol-token", "acme", "carol", Role::Member, &["ci"]);
    state.permissions.add_rule(
        "acme",
        Rule {
            teams: vec!["ci".into()],
            actions: [
                "workflows:terminate".to_string(),
                "applications:sync".to_string(),
            ]
            .into(),
            attributes: Attributes {
                namespaces: vec![Pattern("ci".into()), Pattern("team-a".into())],
                ..Attributes::default()
            },
            ..Rule::default()
        },
    );
    let platform = ControlPlaneConfig {
        tunnel: Some(TunnelServerConfig {
            listen: "0.0.0.0:8443".into(),
            config: tunnel::Config::new(Variant::Hardened),
        }),
        gateway: Some(GatewayConfig {
            listen: "0.0.0.0:8080".into(),
            admin_token: "adm".into(),
        }),
        events: None,
        promotions: None,
        runner: None,
        monitor: None,
        cron: None,
        anti_entropy: None,
        vclusters: Vec::new(),
        database: None,
    };
    let permissions = state.permissions.clone();
    let trace = w.trace.clone();
    w.sim.host("platform", move || {
        let env = SimEnv::shared("platform", SEED, trace.clone());
        let (config, state) = (platform.clone(), state.clone());
        async move {
            control_plane::run(env, config, state, std::future::pending())
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        }
    });
    let runtime = RuntimeConfig {
        tunnels: vec![tunnel_client::Config::new(
            Variant::Hardened,
            "platform:8443",
            "acme-prod",
            "rt-token",
        )],
        router: Some(RouterConfig {
            routes: Routes {
                app_proxy: "runtime:3017".into(),
                ..Default::default()
            },
            ingress: None,
        }),
        app_proxy: Some(app_proxy::Config {
            platform_addr: "platform:8080".into(),
            git_addr: "git:80".into(),
            sources_addr: Some("runtime:8090".into()),
            kube: KubeTarget::new("apiserver:6443"),
            permissions_ttl: Duration::from_secs(30),
            runtime: String::new(),
            account: "acme".into(),
            listen: "0.0.0.0:3017".into(),
        }),
        source_server: Some(source_server::Config::new(
            "0.0.0.0:8090",
            "argocd:8080",
            "argo-token",
        )),
        ..Default::default()
    };
    let trace = w.trace.clone();
    w.sim.host("runtime", move || {
        let env = SimEnv::shared("runtime", SEED, trace.clone());
        let config = runtime.clone();
        async move {
            runtime_assembly::run(env, config, std::future::pending())
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        }
    });
    let (trace, check_git) = (w.trace.clone(), git.clone());
    w.sim.client("client", async move {
        let (env, kube) = kube("client", &trace, Duration::from_secs(60));
        let workflows: Api<DynamicObject> = Api::namespaced_with(kube.clone(), "default", &workflow_resource());
        let mut wf = DynamicObject::new("build-42", &workflow_resource()).within("default");
        wf.data = json!({"spec": {"entrypoint": "main"}});
        workflows.create(&PostParams::default(), &wf).await?;
        env.sleep(Duration::from_secs(3)).await;

        let (code, body) = call(&env, "GET", "repositories", "alice-token", Value::Null).await;
        assert_eq!((code, body["repositories"].clone()), (200, json!([REPO])), "{body}");
        let commit = json!({"repo": REPO, "path": "apps/b.yaml", "content": "kind: Application", "message": "add b"});
        let (code, body) = call(&env, "POST", "applications/commit", "alice-token", commit.clone()).await;
        assert_eq!(code, 201, "{body}");
        let head = check_git.lock().head(REPO).cloned().expect("a head commit");
        assert_eq!((head.author.as_str(), head.message.as_str()), ("alice", "add b"));
        assert_eq!(head.changes.get("apps/b.yaml").map(String::as_str), Some("kind: Application"));

        let (code, body) = call(&env, "POST", "workflows/default/build-42/terminate", "alice-token", Value::Null).await;
        assert_eq!(code, 200, "{body}");
        let patched = workflows.get("build-42").await?;
        assert_eq!(patched.data["spec"]["shutdown"], "Terminate", "the workflow is terminated through the Kubernetes API");
        assert_eq!(call(&env, "POST", "workflows/default/missing/terminate", "alice-token", Value::Null).await.0, 404);

        // An app's manifests and version at a revision, through the source server.
        let apps: Api<DynamicObject> = Api::namespaced_with(kube.clone(), "argocd", &application_resource());
        let mut app = DynamicObject::new("a", &application_resource()).within("argocd");
        app.data = json!({"spec": {"source": {"repoURL": REPO, "path": "apps"}}});
        apps.create(&PostParams::default(), &app).await?;
        env.sleep(Duration::from_secs(3)).await;
        let manifests = format!("applications/argocd/a/manifests?revision={first}");
        let (code, body) = call(&env, "GET", &manifests, "alice-token", Value::Null).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["applicationVersions"]["appVersion"], "2.0", "{body}");
        assert_eq!(body["manifests"][0]["path"], "apps/a.yaml", "{body}");
        assert_eq!(body["manifests"][0]["line"], 1, "{body}");
        let (code, body) = call(&env, "GET", "applications/argocd/missing/manifests?revision=x", "alice-token", Value::Null).await;
        assert_eq!(code, 404, "an unknown app is the source server's 404: {body}");
        assert_eq!(call(&env, "GET", &manifests, "bob-token", Value::Null).await.0, 403);

        // Sync and refresh set the Application's operation and refresh annotation; rules
        // limited to namespaces are judged against a workflow's namespace and an app's
        // destination.
        let (code, body) = call(&env, "POST", "applications/argocd/a/sync", "dave-token", json!({"revision": first})).await;
        assert_eq!(code, 200, "{body}");
        let synced = apps.get("a").await?;
        assert_eq!(synced.data["operation"], json!({"sync": {"revision": first}, "initiatedBy": {"username": "dave"}}));
        let (code, body) = call(&env, "POST", "applications/argocd/a/refresh", "dave-token", Value::Null).await;
        assert_eq!(code, 200, "{body}");
        let refreshed = apps.get("a").await?;
        assert_eq!(refreshed.metadata.annotations.unwrap_or_default().get("argocd.argoproj.io/refresh").map(String::as_str), Some("normal"));
        assert_eq!(call(&env, "POST", "applications/argocd/missing/sync", "dave-token", json!({})).await.0, 404);
        // dave's token expires in 2 s: the app-proxy's cached grant (30 s TTL) dies with it.
        permissions.expire_at("dave-token", env.unix_millis() + 2_000);
        assert_eq!(call(&env, "POST", "applications/argocd/a/refresh", "dave-token", Value::Null).await.0, 200);
        env.sleep(Duration::from_secs(3)).await;
        let (code, body) = call(&env, "POST", "applications/argocd/a/refresh", "dave-token", Value::Null).await;
        assert_eq!(code, 401, "{body}");
        assert!(body["error"].as_str().unwrap().starts_with("user token expired at "), "{body}");
        permissions.expire_at("dave-token", u64::MAX);
        assert_eq!(call(&env, "POST", "applications/argocd/a/sync", "alice-token", json!({})).await.0, 403, "alice has no sync grant");
        // a deploys to no namespace of carol's, and she may not read it: answered as a missing
        // app, word for word (a 403 would tell her it exists).
        let (code, body) = call(&env, "POST", "applications/argocd/a/sync", "carol-token", json!({})).await;
        let missing = call(&env, "POST", "applications/argocd/nothing/sync", "carol-token", json!({})).await;
        assert_eq!(code, 404, "{body}");
        assert_eq!(body["error"], "no application argocd/a", "{body}");
        assert_eq!((missing.0, missing.1["error"].clone()), (404, json!("no application argocd/nothing")));
        let (code, body) = call(&env, "POST", "workflows/default/build-42/terminate", "carol-token", Value::Null).await;
        assert_eq!(code, 403, "{body}");
        assert!(body["error"].as_str().unwrap().contains("may not workflows:terminate in namespace default"), "{body}");
        // Another account's admin may do everything in their own account, nothing here:
        // the gateway answers as if the runtime did not exist (the app-proxy's own account
        // check, for a runtime reached without the gateway, is in real_mode's ingress test).
        let (code, body) = call(&env, "POST", "workflows/default/build-42/terminate", "eve-token", Value::Null).await;
        assert_eq!(code, 404, "{body}");
        let mut ci = DynamicObject::new("build-7", &workflow_resource()).within("ci");
        ci.data = json!({"spec": {"entrypoint": "main"}});
        Api::<DynamicObject>::namespaced_with(kube.clone(), "ci", &workflow_resource()).create(&PostParams::default(), &ci).await?;
        let (code, body) = call(&env, "POST", "workflows/ci/build-7/terminate", "carol-token", Value::Null).await;
        assert_eq!(code, 200, "in ci she may: {body}");

        let (code, body) = call(&env, "POST", "applications/commit", "bob-token", commit).await;
        assert_eq!(code, 403, "bob may only list: {body}");
        assert!(body["error"].as_str().unwrap().contains("bob may not applications:commit"), "{body}");
        assert_eq!(call(&env, "GET", "repositories", "stolen", Value::Null).await.0, 401);
        let (code, body) = call(&env, "POST", "applications/commit", "alice-token", json!({"repo": REPO})).await;
        assert_eq!(code, 400, "a malformed body is refused with the reason: {body}");
        Ok(())
    });
    w.sim.run().unwrap();
}
