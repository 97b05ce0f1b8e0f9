//! The change-revision (ACR) controller, unchanged, in real mode against a real
//! kube-apiserver: orrery's Argo CD (visible sync operations, its `changeRevision` endpoint)
//! syncs two annotated Applications of one monorepo; a commit touching one app's directory
//! and then one touching the other's move both to the same head; each variant must write
//! the commit that really changed each app into its finished sync. The simulated Git
//! provider's API runs on loopback too (hardened asks it for first syncs).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use orrery_sim::world::argocd::application_resource;
use orrery_sim::world::git::SharedGit;
use orrery_system::core::Variant;
use orrery_system::env::RealEnv;
use orrery_system::runtime::acr::{self, paths::MANIFEST_GENERATE_PATHS};
use orrery_system::runtime::assembly::RuntimeConfig;
use serde_json::{json, Value};

use crate::support::{
    eventually, free_port, prepared, real_target, start_argocd, start_runtime, unix_ms,
};

const REPO: &str = "https://git.example/org/mono.git";
const ARGO_TOKEN: &str = "argocd-acr-token";

fn files(dirs: &[&str], version: u32) -> BTreeMap<String, String> {
    dirs.iter()
        .map(|d| {
            (
                format!("teams/{d}/values.yaml"),
                format!("version: {version}\n"),
            )
        })
        .collect()
}

/// `name`'s finished sync: (history length, `syncResult.revision`, change revision).
async fn finished(
    apps: &Api<DynamicObject>,
    name: &str,
) -> Result<(usize, String, String), String> {
    let app = apps.get(name).await.map_err(|e| e.to_string())?;
    let text = |p: &str| {
        app.data
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let history = app
        .data
        .pointer("/status/history")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    Ok((
        history,
        text("/status/operationState/syncResult/revision"),
        text("/status/operationState/operation/sync/changeRevision"),
    ))
}

async fn change_revisions_on_a_real_api_server(variant: Variant) {
    let (cluster, namespace) = prepared(format!(
        "orrery-acr-{}-{}",
        variant.as_str(),
        std::process::id()
    ))
    .await;
    let target = real_target(&namespace).await;

    // The monorepo: a README root, then the import of both teams' directories.
    let git = SharedGit::default();
    let readme = BTreeMap::from([("README.md".to_string(), "# mono\n".to_string())]);
    git.lock().commit(
        REPO,
        "Dev <dev@example.com>",
        "Initial commit",
        unix_ms(),
        readme,
    );
    let import = git.lock().commit(
        REPO,
        "Dev <dev@example.com>",
        "import",
        unix_ms(),
        files(&["a", "b"], 1),
    );
    let argo_port = free_port();
    let argo = start_argocd(&target, &git, argo_port, Duration::from_secs(1), ARGO_TOKEN);
    // The Git provider's API on loopback: hardened asks it for first syncs.
    let git_port = free_port();
    let provider = tokio::spawn({
        let git = git.clone();
        async move {
            let addr = format!("127.0.0.1:{git_port}");
            let env = Arc::new(RealEnv::new("git"));
            drop(orrery_sim::world::git::serve(env, git, &addr).await)
        }
    });
    let mut acr = acr::Config::new(
        variant,
        target.clone(),
        &format!("127.0.0.1:{argo_port}"),
        ARGO_TOKEN,
    );
    acr.git_api = Some(format!("127.0.0.1:{git_port}"));
    let runtime = start_runtime(
        "acr",
        RuntimeConfig {
            acr: Some(acr),
            ..Default::default()
        },
    );
    let apps: Api<DynamicObject> =
        Api::namespaced_with(cluster.client(), &namespace, &application_resource());
    for name in ["a", "b"] {
        let mut app = DynamicObject::new(name, &application_resource()).within(&namespace);
        app.metadata.annotations = Some(BTreeMap::from([(
            MANIFEST_GENERATE_PATHS.to_string(),
            ".".to_string(),
        )]));
        app.data = json!({"spec": {
            "source": {"repoURL": REPO, "path": format!("teams/{name}")},
            "syncPolicy": {"automated": {}},
        }});
        apps.create(&PostParams::default(), &app)
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }
    // First syncs: the import changed both directories.
    for name in ["a", "b"] {
        eventually(
            &format!("{variant:?}: {name}'s first sync carries the import"),
            || async {
                match finished(&apps, name).await? {
                    (1, result, change) if result == import && change == import => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    // a's directory, then b's: both apps sync to the same head.
    let touched_a = git.lock().commit(
        REPO,
        "Dev <dev@example.com>",
        "bump a",
        unix_ms(),
        files(&["a"], 2),
    );
    let head = git.lock().commit(
        REPO,
        "Dev <dev@example.com>",
        "bump b",
        unix_ms(),
        files(&["b"], 2),
    );
    for (name, want) in [("a", &touched_a), ("b", &head)] {
        eventually(
            &format!("{variant:?}: {name} synced to the head carries {want}"),
            || async {
                match finished(&apps, name).await? {
                    (2, result, change) if result == head && change == *want => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    runtime.abort();
    argo.abort();
    provider.abort();
    let _ = cluster.cleanup(&namespace).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn faithful_acr_writes_change_revisions_on_a_real_api_server() {
    change_revisions_on_a_real_api_server(Variant::Faithful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn hardened_acr_writes_change_revisions_on_a_real_api_server() {
    change_revisions_on_a_real_api_server(Variant::Hardened).await;
}
