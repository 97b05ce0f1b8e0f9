//! The same API server code on real OS sockets, driven by real kube-rs through `RealEnv`:
//! the environment seam works in both worlds without a `cfg` fork.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use orrery_sim::world::apiserver::{self, ApiServer, Knobs};
use orrery_system::env::kube::{client, KubeTarget, SeededBackoff};
use orrery_system::env::{RealEnv, SharedEnv};

use crate::support::configmap;

#[tokio::test(flavor = "current_thread")]
async fn the_api_server_serves_real_kube_rs_over_loopback_tcp() {
    let env: SharedEnv = Arc::new(RealEnv::new("test"));
    let listener = env.listen("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(apiserver::serve(env.clone(), ApiServer::new(Knobs::default()), listener));

    let kube = client(env.clone(), &KubeTarget::new(addr));
    let api: Api<ConfigMap> = Api::namespaced(kube, "default");
    let mut events = watcher(api.clone(), watcher::Config::default()).backoff(SeededBackoff::new(env.clone())).applied_objects().boxed();
    api.create(&PostParams::default(), &configmap("real", &[])).await.expect("create over real TCP");
    let seen = tokio::time::timeout(Duration::from_secs(10), events.next()).await.expect("watch event within 10 s");
    assert_eq!(seen.unwrap().unwrap().metadata.name.as_deref(), Some("real"));
}
