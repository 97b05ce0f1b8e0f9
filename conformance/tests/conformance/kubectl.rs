//! kubectl against both servers: the OpenAPI documents the simulated server serves are the
//! real server's, cut down to the served types (recorded here with `ORRERY_RECORD=1`,
//! checked against the real server otherwise).

use orrery_conformance::cluster::Cluster;
use orrery_conformance::openapi::{cut_v2, cut_v3, served};
use orrery_conformance::repo_root;
use orrery_sim::world::apiserver::openapi::{DOCUMENTS, V2_FILE};
use orrery_sim::world::apiserver::resources::registry;
use serde_json::Value;

async fn get(cluster: &Cluster, path: &str) -> Value {
    let answer = cluster
        .send("GET", path, None, None)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(answer.status, 200, "GET {path}: {}", String::from_utf8_lossy(&answer.body));
    serde_json::from_slice(&answer.body).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Writes `cut` to `file` when recording; otherwise asserts the committed file holds it.
fn record_or_check(file: &str, cut: &Value) -> Option<String> {
    let path = repo_root().join("fixtures/openapi").join(file);
    if std::env::var("ORRERY_RECORD").is_ok_and(|v| v == "1") {
        std::fs::write(&path, serde_json::to_vec(cut).unwrap()).unwrap();
        return None;
    }
    let committed: Value = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    (committed != *cut).then(|| {
        format!("{file}: differs from the real server's (re-record with ORRERY_RECORD=1)")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real cluster: make conformance-apiserver or make conformance"]
async fn the_served_openapi_documents_are_the_real_servers_cut_to_the_served_types() {
    let cluster = Cluster::real().await.expect("a real cluster");
    cluster.install_crds().await.expect("fixture CRDs install");
    let served = served(&registry());
    let mut drift = Vec::new();
    for (group_version, file, _) in DOCUMENTS {
        let document = get(&cluster, &format!("/openapi/v3/{group_version}")).await;
        drift.extend(record_or_check(file, &cut_v3(&document, &served)));
    }
    let v2 = get(&cluster, "/openapi/v2").await;
    drift.extend(record_or_check(V2_FILE, &cut_v2(&v2, &served)));
    assert!(drift.is_empty(), "{}", drift.join("\n"));
}
