//! The GitOps operator, unchanged, in real mode: PromotionTasks on a real kube-apiserver
//! (the fixture CRDs), its leader Lease there, a local Git repository served by `orrery
//! serve git`'s provider API (real `git`), and orrery's Argo CD stand-in for the apps'
//! sources. A task reads the promotion values from the dev app's file at a commit and
//! commits them into the staging app's file; then the same promotion again: hardened sees
//! the file already holds the values and commits nothing, faithful commits again (as the
//! provider's API, an unchanged file is still a commit). The CRD's CEL rule refuses a step
//! with two kinds on the real server (the simulated one does not evaluate CEL; the operator
//! refuses such a task itself).
//!
//! `verifyApp` and `runWorkflow` are not run here: the Argo CD stand-in follows the
//! simulated provider's history, not a real repository, and no Argo Workflows runs; the
//! simulator's operator tests (`sim/tests/sim/operator.rs`) cover both.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, PostParams};
use orrery_sim::world::argocd::application_resource;
use orrery_sim::world::git::SharedGit;
use orrery_system::core::Variant;
use orrery_system::env::RealEnv;
use orrery_system::runtime::assembly::RuntimeConfig;
use orrery_system::runtime::gitops_operator::{self, leader, promotion_task_resource, restricted};
use serde_json::{json, Value};

use crate::support::{eventually, free_port, prepared, real_target, start_argocd, start_runtime};

const REPO: &str = "https://git.example/org/shop.git";
const TOKEN: &str = "argocd-operator-token";

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "Dev")
        .env("GIT_AUTHOR_EMAIL", "dev@example.com")
        .env("GIT_COMMITTER_NAME", "Dev")
        .env("GIT_COMMITTER_EMAIL", "dev@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn write(dir: &Path, file: &str, content: &str) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn promotion(name: &str, namespace: &str, dev_commit: &str) -> DynamicObject {
    let mut task = DynamicObject::new(name, &promotion_task_resource()).within(namespace);
    task.data = json!({"spec": {"steps": [
        {"getPromotionValues": {"targetApplication": "shop-dev", "commitSha": dev_commit,
            "promotionProperties": {"values.json": {"jsonPaths": ["$.image.tag"]}},
            "versionProperty": {"file": "values.json", "jsonPath": "$.image.tag"}}},
        {"promoteAppWithCommit": {"targetApplication": "shop-staging",
            "promotionValues": {"values.json": {"$.image.tag": "v2"}},
            "commitMessage": "promote shop v2 to staging"}},
    ]}});
    task
}

async fn task_status(tasks: &Api<DynamicObject>, name: &str) -> Result<Value, String> {
    let task = tasks.get(name).await.map_err(|e| e.to_string())?;
    let status = task.data.get("status").cloned().unwrap_or(Value::Null);
    match status["phase"].as_str() {
        Some("Succeeded") => Ok(status),
        Some("Failed") => panic!("{name} failed: {status}"),
        _ => Err(status.to_string()),
    }
}

async fn promotion_on_a_real_api_server(variant: Variant) {
    let (cluster, namespace) = prepared(format!(
        "orrery-operator-{}-{}",
        variant.as_str(),
        std::process::id()
    ))
    .await;
    let target = real_target(&namespace).await;

    // The repository: dev already runs v2, staging v1.
    let dir = std::env::temp_dir().join(format!(
        "orrery-operator-{}-{}",
        variant.as_str(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    write(
        &dir,
        "envs/dev/values.json",
        "{\"image\": {\"tag\": \"v2\"}}\n",
    );
    write(
        &dir,
        "envs/staging/values.json",
        "{\"image\": {\"tag\": \"v1\"}}\n",
    );
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "-q", "-m", "shop: dev v2, staging v1"]);
    let dev_commit = git(&dir, &["rev-parse", "HEAD"]);
    let git_port = free_port();
    let provider = tokio::spawn({
        let repos = BTreeMap::from([(REPO.to_string(), dir.clone())]);
        async move {
            let env = Arc::new(RealEnv::new("git"));
            drop(
                orrery_cli::commands::serve::git::serve(
                    env,
                    repos,
                    &format!("127.0.0.1:{git_port}"),
                )
                .await,
            )
        }
    });

    // Argo CD's stand-in knows the apps' sources (its own history is not used here).
    let argo_port = free_port();
    let argo = start_argocd(
        &target,
        &SharedGit::default(),
        argo_port,
        Duration::ZERO,
        TOKEN,
    );
    let apps: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &application_resource());
    for (name, path) in [("shop-dev", "envs/dev"), ("shop-staging", "envs/staging")] {
        let mut app = DynamicObject::new(name, &application_resource()).within(&namespace);
        app.data = json!({"spec": {"project": "default",
            "source": {"repoURL": REPO, "path": path}}});
        apps.create(&PostParams::default(), &app)
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }

    // One replica, electing itself through a real Lease (short timings).
    let mut config = gitops_operator::Config::new(
        variant,
        target.clone(),
        "operator-0",
        &format!("127.0.0.1:{git_port}"),
        &format!("127.0.0.1:{argo_port}"),
        TOKEN,
    );
    config.lease = leader::Timings {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(500),
    };
    config.task_polling = Duration::from_secs(1);
    let runtime = start_runtime(
        "operator-0",
        RuntimeConfig {
            operator: Some(config),
            ..Default::default()
        },
    );

    let tasks: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &promotion_task_resource());
    // The CRD's CEL rule: a step with two kinds is refused by the real API server.
    let mut two = DynamicObject::new("two-kinds", &promotion_task_resource()).within(&namespace);
    two.data = json!({"spec": {"steps": [{"verifyApp": {"targetApplication": "a", "commitSha": "b"},
        "runWorkflow": {"workflowTemplateName": "t"}}]}});
    match tasks.create(&PostParams::default(), &two).await {
        Err(kube::Error::Api(e)) => assert!(
            e.code == 422 && e.message.contains("exactly one of"),
            "{e:?}"
        ),
        other => panic!("a step with two kinds was not refused: {other:?}"),
    }
    tasks
        .create(
            &PostParams::default(),
            &promotion("release-1", &namespace, &dev_commit),
        )
        .await
        .expect("the API server accepts the PromotionTask");
    let status = eventually(&format!("{variant:?}: release-1 succeeds"), || {
        task_status(&tasks, "release-1")
    })
    .await;
    assert_eq!(
        status["steps"][0]["promotionValues"],
        json!({"values.json": {"$.image.tag": "v2"}}),
        "{status}"
    );
    assert_eq!(status["steps"][0]["version"], "v2");
    let promoted = status["steps"][1]["commitInfo"]["sha"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]), promoted, "{status}");
    let staging: Value =
        serde_json::from_str(&git(&dir, &["show", "HEAD:envs/staging/values.json"])).unwrap();
    assert_eq!(staging["image"]["tag"], "v2");
    let message = git(&dir, &["log", "-1", "--format=%B"]);
    assert!(
        message.starts_with("promote shop v2 to staging")
            && message.contains(&format!("Promotion-Task: {namespace}/release-1")),
        "{message}"
    );
    let lease = Api::<Lease>::namespaced(cluster.client(), &namespace)
        .get(gitops_operator::LEASE_NAME)
        .await
        .expect("the leader's Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("operator-0")
    );

    // The same promotion again: the file already holds v2.
    let commits = || git(&dir, &["rev-list", "--count", "HEAD"]);
    let before = commits();
    tasks
        .create(
            &PostParams::default(),
            &promotion("release-1-again", &namespace, &dev_commit),
        )
        .await
        .expect("created");
    let again = eventually(&format!("{variant:?}: release-1-again succeeds"), || {
        task_status(&tasks, "release-1-again")
    })
    .await;
    let after = commits();
    match variant {
        Variant::Faithful => assert_eq!(
            after.parse::<u32>().unwrap(),
            before.parse::<u32>().unwrap() + 1,
            "faithful commits the unchanged file again"
        ),
        Variant::Hardened => {
            assert_eq!(after, before, "hardened makes no second commit: {again}");
            assert_eq!(
                again["steps"][1]["commitInfo"]["sha"], promoted,
                "it records the commit that made the change"
            );
        }
    }
    runtime.abort();
    argo.abort();
    provider.abort();
    let _ = cluster.cleanup(&namespace).await;
    let _ = std::fs::remove_dir_all(&dir);
    crate::runtime::record_row(
        &format!("operator-{}", variant.as_str()),
        &format!(
            "the GitOps operator ({}) executes a PromotionTask from the real API server (which refuses a step with two kinds by the CRD's CEL rule) — values read at a commit, a promotion commit to a local Git repository — under a real Lease; the same promotion again {}",
            variant.as_str(),
            match variant {
                Variant::Faithful => "commits again",
                Variant::Hardened => "commits nothing",
            }
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn faithful_operator_promotes_on_a_real_api_server_and_a_local_git_repository() {
    promotion_on_a_real_api_server(Variant::Faithful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn hardened_operator_promotes_on_a_real_api_server_and_a_local_git_repository() {
    promotion_on_a_real_api_server(Variant::Hardened).await;
}

/// A RestrictedGitSource in `namespace` for team-a.
fn restricted_source(namespace: &str, destinations: Value) -> DynamicObject {
    let mut source = DynamicObject::new("team-a", &restricted::restricted_git_source_resource())
        .within(namespace);
    source.data = json!({"spec": {
        "source": {"repoURL": "https://git.example/team-a/gitops.git", "path": "apps"},
        "sourceNamespace": "team-a",
        "sourceRepos": ["https://git.example/team-a/*"],
        "destinations": destinations,
        "namespaceResourceBlacklist": [{"group": "", "kind": "Secret"}],
    }});
    source
}

/// Waits until `api` holds `name` with `spec` (and the operator's marks), or (`None`) until
/// it holds no `name`.
async fn until_generated(api: &Api<DynamicObject>, name: &str, spec: Option<&Value>) {
    eventually(&format!("{name}: {spec:?}"), || async {
        match (api.get_opt(name).await.map_err(|e| e.to_string())?, spec) {
            (None, None) => Ok(()),
            (Some(object), Some(spec)) if object.data.get("spec") == Some(spec) => {
                let labels = object.metadata.labels.unwrap_or_default();
                let annotations = object.metadata.annotations.unwrap_or_default();
                assert_eq!(
                    labels.get(restricted::MANAGED_BY.0).map(String::as_str),
                    Some(restricted::MANAGED_BY.1)
                );
                assert!(annotations.contains_key(restricted::GENERATED_FROM));
                Ok(())
            }
            (other, _) => Err(format!("holds {other:?}")),
        }
    })
    .await;
}

/// The operator turns a RestrictedGitSource on the real API server into its AppProject and
/// Git Source Application (which the real server accepts: the fixture CRDs), follows a
/// narrowed source, and deletes both when the source goes.
async fn restricted_sources_on_a_real_api_server(variant: Variant) {
    let (cluster, namespace) = prepared(format!(
        "orrery-restricted-{}-{}",
        variant.as_str(),
        std::process::id()
    ))
    .await;
    let target = real_target(&namespace).await;
    let sources: Api<DynamicObject> = Api::namespaced_with(
        cluster.client(),
        &namespace,
        &restricted::restricted_git_source_resource(),
    );
    // The CRD's required fields hold on the real server.
    let mut incomplete = restricted_source(&namespace, json!([]));
    incomplete.metadata.name = Some("incomplete".into());
    incomplete.data["spec"]
        .as_object_mut()
        .unwrap()
        .remove("sourceNamespace");
    match sources.create(&PostParams::default(), &incomplete).await {
        Err(kube::Error::Api(e)) => assert!(
            e.code == 422 && e.message.contains("sourceNamespace"),
            "{e:?}"
        ),
        other => panic!("a source without sourceNamespace was accepted: {other:?}"),
    }
    let in_cluster = restricted::IN_CLUSTER;
    sources
        .create(
            &PostParams::default(),
            &restricted_source(
                &namespace,
                json!([{"server": in_cluster, "namespace": "team-a-*"},
                       {"server": in_cluster, "namespace": "team-a-staging"}]),
            ),
        )
        .await
        .expect("the API server accepts the RestrictedGitSource");

    let mut config = gitops_operator::Config::new(
        variant,
        target.clone(),
        "operator-0",
        "127.0.0.1:9",
        "127.0.0.1:9",
        TOKEN,
    );
    config.leader_elect = false;
    config.task_polling = Duration::from_secs(1);
    let runtime = start_runtime(
        "operator-0",
        RuntimeConfig {
            operator: Some(config),
            ..Default::default()
        },
    );
    let projects: Api<DynamicObject> = Api::namespaced_with(
        cluster.client(),
        &namespace,
        &restricted::app_project_resource(),
    );
    let apps: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &application_resource());
    let expected = |source: &DynamicObject| {
        restricted::generate(source, &namespace, variant).expect("a valid source")
    };
    let first = expected(&sources.get("team-a").await.unwrap());
    assert_eq!(
        first.project["spec"]["destinations"][2],
        json!({"server": in_cluster, "namespace": "team-a"}),
        "the Git Source's own namespace is a destination"
    );
    until_generated(&projects, "team-a", Some(&first.project["spec"])).await;
    until_generated(&apps, "team-a", Some(&first.application["spec"])).await;

    // Narrowed: staging is no destination any more.
    let narrowed = sources
        .patch(
            "team-a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"destinations": [
                {"server": in_cluster, "namespace": "team-a-web"}]}})),
        )
        .await
        .expect("narrowed");
    let second = expected(&narrowed);
    until_generated(&projects, "team-a", Some(&second.project["spec"])).await;

    // A deny entry (argo-cd#21264: Argo CD would permit every repository it does not name):
    // faithful copies it into the project; hardened refuses the source, project and Git
    // Source removed, until the entry is gone.
    let deny = json!({"spec": {"sourceRepos": [
        "https://git.example/team-a/*", "!https://git.example/team-a/legacy*"]}});
    let denying = sources
        .patch(
            "team-a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(deny),
        )
        .await
        .expect("a deny entry");
    match variant {
        Variant::Faithful => {
            let copied = expected(&denying);
            until_generated(&projects, "team-a", Some(&copied.project["spec"])).await;
        }
        Variant::Hardened => {
            let refused = restricted::generate(&denying, &namespace, variant).unwrap_err();
            assert!(refused.to_string().contains("argo-cd#21264"), "{refused}");
            until_generated(&apps, "team-a", None).await;
            until_generated(&projects, "team-a", None).await;
        }
    }
    let undenied = sources
        .patch(
            "team-a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"sourceRepos": null}})),
        )
        .await
        .expect("the deny entry removed");
    let restored = expected(&undenied);
    until_generated(&projects, "team-a", Some(&restored.project["spec"])).await;
    until_generated(&apps, "team-a", Some(&restored.application["spec"])).await;

    // Deleted: the Git Source app and the project go.
    sources
        .delete("team-a", &kube::api::DeleteParams::default())
        .await
        .expect("deleted");
    until_generated(&apps, "team-a", None).await;
    until_generated(&projects, "team-a", None).await;
    runtime.abort();
    let _ = cluster.cleanup(&namespace).await;
    crate::runtime::record_row(
        &format!("restricted-sources-{}", variant.as_str()),
        &format!(
            "the GitOps operator ({}) turns a RestrictedGitSource on the real API server (which refuses one without sourceNamespace) into its AppProject and Git Source Application, follows a narrowed source, and deletes both with the source",
            variant.as_str()
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn faithful_operator_generates_app_projects_on_a_real_api_server() {
    restricted_sources_on_a_real_api_server(Variant::Faithful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn hardened_operator_generates_app_projects_on_a_real_api_server() {
    restricted_sources_on_a_real_api_server(Variant::Hardened).await;
}
