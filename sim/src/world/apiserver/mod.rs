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
//! - [`encoded`]: each listed or read object's JSON text, made once while the object lives.
//!
//! The state lives in an [`ApiServer`] shared with the harness, so it survives a crash of
//! the host that serves it (like etcd's data would).

pub mod apply;
pub mod discovery;
pub mod encoded;
pub mod error;
pub mod events;
pub mod events_v1;
pub mod http;
pub mod jsonpatch;
pub mod mergepatch;
pub mod namespaces;
pub mod openapi;
pub mod protobuf;
pub mod resources;
pub mod scale;
pub mod selector;
pub mod store;
pub mod strategic;
pub mod table;
pub mod validation;
pub mod watch;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use resources::ResourceKind;
pub use store::Store;

/// The API server's knobs are scenario settings; they live with the scenario model.
pub use crate::scenario::knobs::ApiServerKnobs as Knobs;

/// The Event reaper's name among the server's tasks.
const REAPER: &str = "events";

/// The API server's shared state: storage, knobs and the change notifier watches wait on.
pub struct ApiServer {
    store: Mutex<Store>,
    knobs: Mutex<Knobs>,
    kinds: Vec<ResourceKind>,
    rv_sender: tokio::sync::watch::Sender<u64>,
    /// The lines and bytes its watches sent (beside the trace: the cost figures), counted
    /// into the run's one [`Cost`](crate::world::cost::Cost).
    cost: Arc<crate::world::cost::Cost>,
    /// Listed objects' JSON texts, made once per object (the answers are the same bytes).
    encoded: Mutex<encoded::Encoded>,
    /// Whether a create needs its namespace to exist ([`namespaces::Mode`]).
    namespaces: namespaces::Mode,
    /// The server's own background tasks by name (`namespace/<name>`: a namespace stand-in;
    /// `events`: the Event reaper), one each, started again when they ended or died with
    /// the host that ran them ([`ApiServer::keep_running`]).
    tasks: Mutex<std::collections::BTreeMap<String, tokio::task::AbortHandle>>,
    /// When each stored Event expires, by (namespace, name) ([`events`]).
    event_expiry: Mutex<std::collections::BTreeMap<(String, String), Duration>>,
}

impl ApiServer {
    /// A server with an empty store and the given knobs, serving [`resources::registry`].
    pub fn new(knobs: Knobs) -> Arc<Self> {
        Self::counted(knobs, Arc::default())
    }

    /// A server like [`ApiServer::new`] whose watch lines count into `cost`, the run's
    /// (so every cluster of a world adds to one set of cost figures).
    pub fn counted(knobs: Knobs, cost: Arc<crate::world::cost::Cost>) -> Arc<Self> {
        Arc::new(ApiServer {
            store: Mutex::new(Store::default()),
            knobs: Mutex::new(knobs),
            kinds: resources::registry(),
            rv_sender: tokio::sync::watch::Sender::new(0),
            cost,
            encoded: Mutex::default(),
            namespaces: namespaces::Mode::Implicit,
            tasks: Mutex::default(),
            event_expiry: Mutex::default(),
        })
    }

    /// A server that requires namespaces as kube-apiserver does, holding the four it
    /// creates on start (`default`, `kube-node-lease`, `kube-public`, `kube-system`), made
    /// at `unix_millis`: what `orrery apiserver` and the conformance suites serve.
    pub fn requiring_namespaces(knobs: Knobs, now: Duration, unix_millis: u64) -> Arc<Self> {
        Self::booted(knobs, Arc::default(), &[], now, unix_millis)
    }

    /// A server that requires namespaces, counting into `cost` like [`ApiServer::counted`],
    /// holding the system namespaces and `namespaces` (a cluster's bootstrap: what the
    /// simulated world creates before its components write), made at `unix_millis`.
    pub fn booted(
        knobs: Knobs,
        cost: Arc<crate::world::cost::Cost>,
        namespaces: &[String],
        now: Duration,
        unix_millis: u64,
    ) -> Arc<Self> {
        let server = Arc::new(ApiServer {
            namespaces: namespaces::Mode::Required,
            ..Arc::into_inner(Self::counted(knobs, cost)).expect("just made")
        });
        let system = namespaces::SYSTEM.iter().copied();
        let mut names: Vec<&str> = system
            .chain(namespaces.iter().map(String::as_str))
            .collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            server
                .create_namespace(name, now, unix_millis)
                .expect("a fresh store takes valid namespace names");
        }
        server
    }

    /// Creates Namespace `name` (a cluster's bootstrap; clients POST them).
    pub fn create_namespace(
        &self,
        name: &str,
        now: Duration,
        unix_millis: u64,
    ) -> Result<(), error::ApiError> {
        let object = serde_json::json!({"metadata": {"name": name}});
        let rv = {
            let mut store = self.store();
            store.create(self.namespace_kind(), "", object, now, unix_millis)?;
            store.rv()
        };
        self.notify(rv);
        Ok(())
    }

    /// core/v1's Event type (events.k8s.io/v1 is served from its store).
    pub fn event_kind(&self) -> &ResourceKind {
        self.kinds
            .iter()
            .find(|k| events::is_event(k))
            .expect("the registry serves core/v1 Events")
    }

    /// The served Namespace type.
    pub fn namespace_kind(&self) -> &ResourceKind {
        self.kinds
            .iter()
            .find(|k| store::is_namespace(k))
            .expect("the registry serves namespaces")
    }

    /// Starts the namespace controller's stand-in ([`namespaces::finish`]) for `namespace`
    /// unless one runs: after the DELETE that makes it terminate, and again when the server
    /// starts serving — a crash of the host ends the task, not the namespace's termination
    /// (the state outlives the host, as etcd's does).
    pub fn finish_namespace(
        self: &Arc<Self>,
        env: &orrery_system::env::SharedEnv,
        namespace: &str,
    ) {
        let task = namespaces::finish(env.clone(), self.clone(), namespace.to_string());
        self.keep_running(&format!("namespace/{namespace}"), task);
    }

    /// Spawns `task` on the calling host as the server's task `name` unless one by that name
    /// still runs (one that ended, or died with a crashed host, is replaced).
    fn keep_running(
        &self,
        name: &str,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.retain(|_, running| !running.is_finished());
        if !tasks.contains_key(name) {
            tasks.insert(name.to_string(), tokio::spawn(task).abort_handle());
        }
    }

    /// Records that Event `namespace/name` was written at `env`'s now: it expires
    /// [`events::TTL`] later, unless written again. Starts the reaper if none runs.
    pub fn event_written(
        self: &Arc<Self>,
        env: &orrery_system::env::SharedEnv,
        namespace: &str,
        name: &str,
    ) {
        let mut expiry = self
            .event_expiry
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        expiry.insert(
            (namespace.to_string(), name.to_string()),
            env.elapsed() + events::TTL,
        );
        // Under the expiry lock: a reaper ends only under it too, so it cannot decide to
        // end between this check and the new entry.
        self.start_reaper(env);
    }

    /// Starts the Event reaper unless one runs. Called with the expiry lock held.
    fn start_reaper(self: &Arc<Self>, env: &orrery_system::env::SharedEnv) {
        self.keep_running(REAPER, events::reap(env.clone(), self.clone()));
    }

    /// Drops the Events whose expiry has come (in namespace and name order) whatever their
    /// finalizers, as etcd drops an expired lease's keys; returns when the next one expires.
    /// With none left the reaper is forgotten here, under the expiry lock, and ends.
    fn expire_events(&self, env: &orrery_system::env::SharedEnv) -> Option<Duration> {
        let now = env.elapsed();
        let mut expiry = self
            .event_expiry
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let due: Vec<(String, String)> = expiry
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        if !due.is_empty() {
            let kind = self
                .kinds
                .iter()
                .find(|k| events::is_event(k))
                .expect("the registry serves events");
            let window = self.knobs().compaction_window;
            let mut expired = Vec::new();
            let rv = {
                let mut store = self.store();
                for key in &due {
                    expiry.remove(key);
                    // Deleted already: nothing to drop.
                    if let Some(gone) = store.expire(kind, &key.0, &key.1, now) {
                        let rv = gone["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        expired.push((key.1.clone(), rv));
                    }
                }
                store.compact(now, window);
                store.rv()
            };
            self.notify(rv);
            for (name, rv) in expired {
                env.observe(
                    orrery_system::observe::WorldEvent::ApiWrite {
                        verb: "expire".into(),
                        resource: kind.plural.clone(),
                        name,
                        rv,
                    }
                    .into(),
                );
            }
        }
        let next = expiry.values().min().copied();
        if next.is_none() {
            self.tasks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(REAPER);
        }
        next
    }

    /// Whether a create needs its namespace to exist.
    pub fn namespace_mode(&self) -> namespaces::Mode {
        self.namespaces
    }

    /// What its watches sent, counted beside the trace.
    pub fn cost(&self) -> &crate::world::cost::Cost {
        &self.cost
    }

    /// Locks the store (never held across an await). A request whose handler panicked does
    /// not take the server down with it: the next one still gets the store (found by
    /// fuzzing: one bad apply body made every later request panic on the poisoned lock).
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks the listed objects' texts (never held across an await).
    pub fn encoded(&self) -> MutexGuard<'_, encoded::Encoded> {
        self.encoded.lock().unwrap_or_else(PoisonError::into_inner)
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
    // Namespaces a stand-in was emptying when the host went down carry on (in name order).
    let terminating = server.store().terminating_namespaces(&server.kinds);
    for namespace in terminating {
        server.finish_namespace(&env, &namespace);
    }
    // So do the Events' expiries.
    {
        let expiry = server
            .event_expiry
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !expiry.is_empty() {
            server.start_reaper(&env);
        }
    }
    let handler = http::Handler::new(env, server);
    orrery_system::env::http::serve(listener, move |req, peer| {
        let handler = handler.clone();
        async move { handler.handle(req, peer).await }
    })
    .await
}
