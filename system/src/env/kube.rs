//! kube-rs over the environment: a real `kube::Client` whose connections are dialled by
//! [`Env::connect`](super::Env::connect), so the same watcher code talks to the simulated
//! API server over turmoil TCP or to a real one over OS TCP.

use std::time::Duration;

use http::Uri;

use super::SharedEnv;

/// How to reach an API server through the environment.
#[derive(Clone, Debug)]
pub struct KubeTarget {
    /// `host:port` of a plain-HTTP API server (the simulated one), e.g. `apiserver:6443`.
    pub addr: String,
    /// Namespace used by `Api::default_namespaced`.
    pub namespace: String,
    /// Reads idle longer than this fail; must exceed the server's bookmark interval.
    /// Default 90 s: kube-apiserver sends a bookmark about every minute.
    pub read_idle: Duration,
}

impl KubeTarget {
    /// A target at `addr` in namespace `default` with a 90 s read deadline.
    pub fn new(addr: impl Into<String>) -> Self {
        KubeTarget { addr: addr.into(), namespace: "default".into(), read_idle: Duration::from_secs(90) }
    }
}

/// Builds a kube client dialling through `env`. Must be called inside a tokio runtime
/// (the client spawns its request buffer task).
pub fn client(env: SharedEnv, target: &KubeTarget) -> kube::Client {
    let http = super::http::client::<kube::client::Body>(env, target.read_idle);
    let base = target.addr.clone();
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut request: http::Request<kube::client::Body>| {
            let path = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
            // The path comes from kube itself and the base from our own config: both are valid.
            if let Ok(uri) = format!("http://{base}{path}").parse::<Uri>() {
                *request.uri_mut() = uri;
            }
            request
        })
        .service(http);
    kube::Client::new(service, target.namespace.clone())
}
