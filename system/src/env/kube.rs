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

/// Exponential backoff for kube-rs watchers with jitter drawn from the environment.
///
/// kube's `default_backoff()` draws jitter from a thread-local `fastrand` generator, a
/// determinism leak under simulation; this one has the same shape (800 ms doubling to a
/// 30 s cap, full jitter in the upper half) but its randomness comes from [`Env`](super::Env).
pub struct SeededBackoff {
    env: SharedEnv,
    next: Duration,
    /// First delay after a success.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl SeededBackoff {
    /// kube's defaults: 800 ms initial, 30 s cap.
    pub fn new(env: SharedEnv) -> Self {
        SeededBackoff { env, next: Duration::from_millis(800), initial: Duration::from_millis(800), max: Duration::from_secs(30) }
    }
}

impl Iterator for SeededBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.next.min(self.max);
        self.next = (base * 2).min(self.max);
        Some(self.env.random_between(base / 2, base))
    }
}

impl kube::runtime::utils::Backoff for SeededBackoff {
    fn reset(&mut self) {
        self.next = self.initial;
    }
}
