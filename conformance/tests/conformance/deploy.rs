//! The manifests under `deploy/` as a real kube-apiserver takes them: every document passes a
//! server-side dry run (schema, defaulting and validation of the pinned Kubernetes version),
//! and a broken one does not, so the check can fail.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;

use crate::support::prepared;

/// Every document of every YAML file under `deploy/`, with the file it came from.
fn manifests() -> Vec<(String, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut documents = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            documents.push((file.display().to_string(), doc));
        }
    }
    documents
}

/// Creates `doc` in `namespace` as a dry run: what the server answers.
async fn dry_run(
    client: &kube::Client,
    namespace: &str,
    doc: &Value,
) -> Result<DynamicObject, kube::Error> {
    let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, doc["kind"].as_str().unwrap());
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let object: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&params, &object).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_deploy_manifests_pass_a_server_side_dry_run_on_a_real_api_server() {
    let (cluster, namespace) = prepared(format!("orrery-deploy-{}", std::process::id())).await;
    let client = cluster.client();
    let documents = manifests();
    assert!(
        documents
            .iter()
            .any(|(_, d)| d["kind"] == "Job" && d["spec"]["completionMode"] == "Indexed"),
        "deploy/ holds the sweep's Indexed Job"
    );
    for (file, doc) in &documents {
        let answer = dry_run(&client, &namespace, doc).await.unwrap_or_else(|e| {
            panic!(
                "{file}: {} {}: refused: {e}",
                doc["kind"], doc["metadata"]["name"]
            )
        });
        assert_eq!(
            answer.metadata.name.as_deref(),
            doc["metadata"]["name"].as_str()
        );
        if doc["kind"] == "Job" {
            // The server defaulted and kept what the sweep relies on.
            assert_eq!(answer.data["spec"]["completionMode"], "Indexed", "{file}");
            assert_eq!(
                answer.data["spec"]["completions"], answer.data["spec"]["parallelism"],
                "{file}: every shard runs at once"
            );
        }
    }
    // A broken Job (an Indexed Job needs completions) is refused: the dry run validates.
    let (_, job) = documents.iter().find(|(_, d)| d["kind"] == "Job").unwrap();
    let mut broken = job.clone();
    broken["spec"]
        .as_object_mut()
        .unwrap()
        .remove("completions");
    let refused = dry_run(&client, &namespace, &broken).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 422),
        "{refused:?}"
    );
    println!(
        "deploy: {} manifest documents pass a server-side dry run",
        documents.len()
    );
}
