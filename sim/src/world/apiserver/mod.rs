//! The simulated Kubernetes API server.
//!
//! Real kube-rs clients, watchers and reflectors talk to it over (simulated or real) TCP
//! and must behave as they would against kube-apiserver. Semantics follow
//! `../shared/reference/kubernetes-api.md`; every deliberate simplification is documented
//! next to the code that makes it (see [`apply`] for server-side apply).
//!
//! - [`store`]: global RV, objects, history, compaction, writes and paged lists.
//! - [`watch`]: watch streams (bookmarks, selector transitions, in-stream 410, timeouts).
//! - [`http`]: REST routing, query parsing and the request-level fault knobs.
//! - [`apply`]: simplified server-side apply.
//!
//! The state lives in an [`ApiServer`] shared with the harness, so it survives a crash of
//! the host that serves it (like etcd's data would).

pub mod apply;
pub mod error;
pub mod http;
pub mod resources;
pub mod selector;
pub mod store;
pub mod watch;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use resources::ResourceKind;
pub use store::Store;

/// Fault and behaviour knobs; the fault schedule may change them while a scenario runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Knobs {
    /// History older than this is compacted; watches from an older RV get an in-stream 410.
    /// Default 300 s (kube-apiserver compacts etcd every 5 minutes).
    #[serde(with = "crate::scenario::duration")]
    pub compaction_window: Duration,
    /// A bookmark goes to each bookmark-enabled watch this often. Default 60 s, as upstream.
    #[serde(with = "crate::scenario::duration")]
    pub bookmark_interval: Duration,
    /// Lines buffered per watch before the watcher counts as slow. Default 256.
    pub watch_buffer: usize,
    /// Close a watch with no ERROR when its buffer is full (kube-apiserver drops slow watchers).
    pub drop_slow_watchers: bool,
    /// Probability per watch line that the stream is cut in the middle of that line.
    pub cut_stream_rate: f64,
    /// Probability per request of `429 TooManyRequests` with `Retry-After`.
    pub throttle_rate: f64,
    /// Seconds sent in `Retry-After` with a 429.
    pub retry_after_seconds: u64,
    /// Added before every response.
    #[serde(with = "crate::scenario::duration")]
    pub latency: Duration,
    /// Resources (plural names, e.g. `applications`) the caller may no longer touch: every
    /// request for them is `403 Forbidden`, as after its RBAC binding is removed. Empty by
    /// default. See [`http`] for who "the caller" is.
    pub forbidden: Vec<String>,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            compaction_window: Duration::from_secs(300),
            bookmark_interval: Duration::from_secs(60),
            watch_buffer: 256,
            drop_slow_watchers: false,
            cut_stream_rate: 0.0,
            throttle_rate: 0.0,
            retry_after_seconds: 1,
            latency: Duration::ZERO,
            forbidden: Vec::new(),
        }
    }
}

/// The API server's shared state: storage, knobs and the change notifier watches wait on.
pub struct ApiServer {
    store: Mutex<Store>,
    knobs: Mutex<Knobs>,
    kinds: Vec<ResourceKind>,
    rv_sender: tokio::sync::watch::Sender<u64>,
}

impl ApiServer {
    /// A server with an empty store and the given knobs, serving [`resources::registry`].
    pub fn new(knobs: Knobs) -> Arc<Self> {
        Arc::new(ApiServer {
            store: Mutex::new(Store::default()),
            knobs: Mutex::new(knobs),
            kinds: resources::registry(),
            rv_sender: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Locks the store (never held across an await).
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().expect("apiserver store lock poisoned")
    }

    /// A copy of the current knobs.
    pub fn knobs(&self) -> Knobs {
        self.knobs.lock().expect("knobs lock poisoned").clone()
    }

    /// Replaces the knobs (fault schedule).
    pub fn set_knobs(&self, knobs: Knobs) {
        *self.knobs.lock().expect("knobs lock poisoned") = knobs;
    }

    /// The served types.
    pub fn kinds(&self) -> &[ResourceKind] {
        &self.kinds
    }

    /// Finds a served type by plural name.
    pub fn kind(&self, plural: &str) -> Option<&ResourceKind> {
        self.kinds.iter().find(|k| k.plural == plural)
    }

    /// Wakes watches after a write.
    fn notify(&self, rv: u64) {
        self.rv_sender.send_replace(rv);
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.rv_sender.subscribe()
    }
}

/// Serves `server` on `addr` through `env` until the listener fails.
pub async fn run(
    env: orrery_system::env::SharedEnv,
    server: Arc<ApiServer>,
    addr: &str,
) -> std::io::Result<()> {
    let listener = env.listen(addr).await?;
    serve(env, server, listener).await
}

/// Serves `server` on an already bound listener (real mode binds port 0 and reads the port).
pub async fn serve(
    env: orrery_system::env::SharedEnv,
    server: Arc<ApiServer>,
    listener: Box<dyn orrery_system::env::Listener>,
) -> std::io::Result<()> {
    let handler = http::Handler::new(env, server);
    orrery_system::env::http::serve(listener, move |req, peer| {
        let handler = handler.clone();
        async move { handler.handle(req, peer).await }
    })
    .await
}
