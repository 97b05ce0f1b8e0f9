//! Hosted runtimes' virtual clusters: the syncer that keeps each tenant's virtual cluster
//! (its own API server, which is all the tenant sees) on the shared host cluster, the
//! vcluster model (`codefresh-runtime.md`: hosted runtimes run "one isolated virtual
//! cluster per tenant"; that Codefresh uses loft's vcluster is **inferred** from the term).
//!
//! A tenant's ConfigMaps and Secrets, in any of its namespaces, become objects of one host
//! namespace, named by [`naming`] and labelled and annotated with whose copy they are;
//! workloads on the host read those copies (a pod in namespace `team-x-prod` that mounts
//! Secret `db` mounts the host object `db`'s translated name). Each virtual object is
//! reconciled ([`reconcile`]) when it changes and when its host copy changes (the host
//! watch maps a copy back to its object by its annotations), as vcluster's `SyncController`
//! does; a reconcile that fails (or takes longer than 10 s) is retried with backoff.
//!
//! | | faithful (vcluster's translator and syncer) | hardened |
//! |---|---|---|
//! | host name | `name-x-namespace-x-vcluster` (ambiguous: two objects can share it) | readable prefix + a digest of the three parts (injective) |
//! | a copy at the name that is another object's | taken for its own: its uid differs, so it is **deleted** — and the other object's reconcile creates it again | refused and reported, never touched |
//!
//! The flaw faithful keeps, from the code (`loft-sh/vcluster@4876675`,
//! `pkg/util/translate/single_namespace.go`, `pkg/syncer/syncer.go`; **inferred**, no public
//! report of it found): `db-x-team` of namespace `prod` and `db` of namespace `team-x-prod`
//! share host name `db-x-team-x-prod-x-<vcluster>`. Whichever was synced first keeps it;
//! the other has no copy of its own, and what a pod of its namespace mounts under its name
//! is the first one's data — another namespace's Secret.

pub mod naming;
pub mod reconcile;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams, TypeMeta};
use kube::runtime::{watcher, WatchStreamExt};

use crate::core::Variant;
use crate::env::kube::{KubeTarget, SeededBackoff};
use crate::env::SharedEnv;
use crate::observe::PlatformEvent;
use reconcile::{Action, Subject};

/// The kinds a virtual cluster keeps on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `v1 ConfigMap`.
    ConfigMap,
    /// `v1 Secret`.
    Secret,
}

impl Kind {
    /// Every kind synced.
    pub const ALL: [Kind; 2] = [Kind::ConfigMap, Kind::Secret];

    /// The resource's plural (`configmaps`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }

    /// The kind annotation's value, as Go prints a GVK.
    pub fn gvk(self) -> &'static str {
        match self {
            Kind::ConfigMap => "/v1, Kind=ConfigMap",
            Kind::Secret => "/v1, Kind=Secret",
        }
    }

    /// `apiVersion` and `kind`.
    pub fn types(self) -> TypeMeta {
        let kind = match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        };
        TypeMeta {
            api_version: "v1".into(),
            kind: kind.into(),
        }
    }

    /// The resource, for `Api::*_with`.
    pub fn resource(self) -> ApiResource {
        let types = self.types();
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: types.api_version,
            kind: types.kind,
            plural: self.plural().into(),
        }
    }
}

/// One virtual cluster's syncer.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design runs.
    pub variant: Variant,
    /// The vcluster's name: its copies' marker label and name suffix.
    pub name: String,
    /// The virtual cluster's API server (what the tenant sees).
    pub virtual_cluster: KubeTarget,
    /// The host cluster; its `namespace` is where the copies live.
    pub host: KubeTarget,
    /// Only virtual objects with these labels (a label selector; `None`: every one).
    pub selector: Option<String>,
    /// First and largest delay before a failed reconcile is tried again.
    pub retry: (Duration, Duration),
    /// Longest one reconcile may take (its reads and write): a host cluster that stopped
    /// answering fails it, to be retried, instead of holding the queue for the kube
    /// client's 90 s read deadline (reconciles run one at a time, so an outage still costs
    /// each queued object up to this long).
    pub reconcile_timeout: Duration,
}

impl Config {
    /// A syncer for vcluster `name` between two clusters, retrying after 1 s up to 30 s.
    pub fn new(
        variant: Variant,
        name: &str,
        virtual_cluster: KubeTarget,
        host: KubeTarget,
    ) -> Self {
        Config {
            variant,
            name: name.into(),
            virtual_cluster,
            host,
            selector: None,
            retry: (Duration::from_secs(1), Duration::from_secs(30)),
            reconcile_timeout: Duration::from_secs(10),
        }
    }
}

/// Why one reconcile did not finish.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("host object {name} is {owner}'s copy, not this object's")]
    Refused { name: String, owner: String },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// A virtual object: (namespace, name).
type Key = (String, String);

/// Runs the syncer for every kind until the host stops.
pub async fn run(env: SharedEnv, config: Config) {
    let runs = Kind::ALL.map(|kind| sync_kind(env.clone(), config.clone(), kind));
    futures::future::join_all(runs).await;
}

/// What `run` works with for one kind.
struct Syncer {
    env: SharedEnv,
    config: Config,
    kind: Kind,
    virtual_client: kube::Client,
    host: Api<DynamicObject>,
}

impl Syncer {
    fn subject<'a>(&'a self, key: &'a Key) -> Subject<'a> {
        Subject {
            variant: self.config.variant,
            vcluster: &self.config.name,
            host_namespace: &self.config.host.namespace,
            kind: self.kind,
            namespace: &key.0,
            name: &key.1,
        }
    }

    fn object(&self, key: &Key) -> String {
        format!("{}/{}/{}", self.kind.plural(), key.0, key.1)
    }

    async fn reconcile(&self, key: &Key) -> Result<(), Error> {
        let subject = self.subject(key);
        let virtual_api: Api<DynamicObject> =
            Api::namespaced_with(self.virtual_client.clone(), &key.0, &self.kind.resource());
        let found = virtual_api.get_opt(&key.1).await?;
        let virtual_ = found.filter(|v| self.selected(v));
        let host_name = subject.host_name();
        let host = self.host.get_opt(&host_name).await?;
        let (action, object) = match subject.decide(virtual_.as_ref(), host.as_ref()) {
            Action::Nothing => return Ok(()),
            Action::Create(copy) => {
                self.host.create(&PostParams::default(), &copy).await?;
                ("created", self.object(key))
            }
            Action::Replace(copy) => {
                match self
                    .host
                    .replace(&host_name, &PostParams::default(), &copy)
                    .await
                {
                    Ok(_) => ("updated", self.object(key)),
                    // The copy cannot take the change (a re-created Secret of another
                    // `type`; an immutable one): it is this object's own, so it is deleted,
                    // and the host watch brings the reconcile that creates it anew.
                    Err(kube::Error::Api(e)) if e.code == 422 => {
                        self.host
                            .delete(&host_name, &DeleteParams::default())
                            .await?;
                        ("deleted", self.object(key))
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Action::Delete {
                name,
                copy_of,
                reason,
                conflict,
            } => {
                match self.host.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
                if conflict {
                    self.env.observe(
                        PlatformEvent::VclusterConflict {
                            vcluster: self.config.name.clone(),
                            object: self.object(key),
                            host_object: name,
                            owner: copy_of.object(),
                            action: format!("deleted: {reason}"),
                        }
                        .into(),
                    );
                    return Ok(());
                }
                ("deleted", self.object(key))
            }
            Action::Refuse { owner } => {
                let owner = if owner.name.is_empty() {
                    "nobody".to_string()
                } else {
                    format!("{} {}", owner.vcluster, owner.object())
                };
                self.env.observe(
                    PlatformEvent::VclusterConflict {
                        vcluster: self.config.name.clone(),
                        object: self.object(key),
                        host_object: host_name.clone(),
                        owner: owner.clone(),
                        action: "refused".into(),
                    }
                    .into(),
                );
                return Err(Error::Refused {
                    name: host_name,
                    owner,
                });
            }
        };
        self.env.observe(
            PlatformEvent::VclusterSynced {
                vcluster: self.config.name.clone(),
                object,
                host_object: host_name,
                action: action.into(),
            }
            .into(),
        );
        Ok(())
    }

    /// Whether a virtual object is synced at all: the selector's labels, not the host
    /// namespace itself (when both are one cluster), not the API server's own CA bundle.
    fn selected(&self, object: &DynamicObject) -> bool {
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        let same_cluster = self.config.virtual_cluster.addr == self.config.host.addr;
        if same_cluster && namespace == self.config.host.namespace {
            return false;
        }
        if object.metadata.name.as_deref() == Some("kube-root-ca.crt") {
            return false;
        }
        let Some(selector) = &self.config.selector else {
            return true;
        };
        let labels = object.metadata.labels.clone().unwrap_or_default();
        selector.split(',').all(|term| match term.split_once('=') {
            Some((key, value)) => labels.get(key.trim()).map(String::as_str) == Some(value.trim()),
            None => labels.contains_key(term.trim()),
        })
    }
}

/// One kind's controller: a queue of virtual objects fed by both watches, drained one at a
/// time, failures retried with doubling delays.
async fn sync_kind(env: SharedEnv, config: Config, kind: Kind) {
    let virtual_client = crate::env::kube::client(env.clone(), &config.virtual_cluster);
    let host_client = crate::env::kube::client(env.clone(), &config.host);
    let resource = kind.resource();
    let host = Api::namespaced_with(host_client, &config.host.namespace, &resource);
    let mut virtual_watch = watcher::Config::default();
    if let Some(selector) = &config.selector {
        virtual_watch = virtual_watch.labels(selector);
    }
    let virtual_events = watcher(
        Api::<DynamicObject>::all_with(virtual_client.clone(), &resource),
        virtual_watch,
    )
    .backoff(SeededBackoff::new(env.clone()))
    .scan(Seen::default(), |seen, event| {
        let keys = event.map(|event| {
            seen.keys(event, |o| {
                Some((o.metadata.namespace.clone()?, o.metadata.name.clone()?))
            })
        });
        futures::future::ready(Some(keys))
    });
    let marker = format!("{}={}", naming::MARKER_LABEL, config.name);
    let host_events = watcher(host.clone(), watcher::Config::default().labels(&marker))
        .backoff(SeededBackoff::new(env.clone()))
        .scan(Seen::default(), |seen, event| {
            let keys = event.map(|event| {
                seen.keys(event, |o| {
                    let id = naming::Identity::of(o);
                    (!id.name.is_empty()).then_some((id.namespace, id.name))
                })
            });
            futures::future::ready(Some(keys))
        });
    let mut events = futures::stream::select(virtual_events.boxed(), host_events.boxed());
    let syncer = Syncer {
        env: env.clone(),
        config,
        kind,
        virtual_client,
        host,
    };
    let mut pending: BTreeSet<Key> = BTreeSet::new();
    let mut retries: BTreeMap<Key, (u32, Duration)> = BTreeMap::new();
    loop {
        // Retries that are due join the events' objects (a steady stream of events must not
        // starve them: the event branch below is polled first).
        let now = env.elapsed();
        pending.extend(
            retries
                .iter()
                .filter(|(_, (_, at))| *at <= now)
                .map(|(key, _)| key.clone()),
        );
        while let Some(key) = pending.pop_first() {
            let limit = syncer.config.reconcile_timeout;
            let outcome = tokio::select! {
                biased;
                outcome = syncer.reconcile(&key) => outcome,
                () = env.sleep(limit) => Err(Error::Timeout(limit)),
            };
            match outcome {
                Ok(()) => {
                    retries.remove(&key);
                }
                Err(error) => {
                    let attempts = retries.get(&key).map_or(0, |(n, _)| *n);
                    let (first, largest) = syncer.config.retry;
                    let delay = first.saturating_mul(1 << attempts.min(16)).min(largest);
                    retries.insert(key.clone(), (attempts + 1, env.elapsed() + delay));
                    if !matches!(error, Error::Refused { .. }) {
                        env.observe(
                            PlatformEvent::VclusterFailed {
                                vcluster: syncer.config.name.clone(),
                                object: syncer.object(&key),
                                error: error.to_string(),
                            }
                            .into(),
                        );
                    }
                }
            }
        }
        let next_retry = retries.values().map(|(_, due)| *due).min();
        let wait = next_retry.map(|due| due.saturating_sub(env.elapsed()));
        tokio::select! {
            biased;
            event = events.next() => {
                let Some(event) = event else { return };
                // Take every event already delivered before reconciling, so a backlog (the
                // host was slow or unreachable) collapses into one reconcile per object, as
                // a workqueue does.
                let mut next = Some(event);
                while let Some(event) = next {
                    match event {
                        Ok(keys) => pending.extend(keys),
                        Err(error) => env.observe(
                            PlatformEvent::VclusterFailed {
                                vcluster: syncer.config.name.clone(),
                                object: kind.plural().into(),
                                error: format!("watch: {error}"),
                            }
                            .into(),
                        ),
                    }
                    next = match events.next().now_or_never() {
                        Some(Some(event)) => Some(event),
                        Some(None) => return,
                        None => None,
                    };
                }
            }
            // Due retries are taken at the top of the loop.
            () = async {
                match wait {
                    Some(wait) => env.sleep(wait).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

/// One watch's view of which virtual objects it has shown, so a relist (after a cut, an
/// expired resourceVersion or a restart of the watch) also names those that vanished while
/// it was down — a client-go informer's `Replace` does the same, with
/// `DeletedFinalStateUnknown`; kube-rs's watcher reports only what the list holds.
#[derive(Default)]
struct Seen {
    known: BTreeSet<Key>,
    relisted: Option<BTreeSet<Key>>,
}

impl Seen {
    /// The virtual objects an event concerns (`key` reads one from a watched object).
    fn keys(
        &mut self,
        event: watcher::Event<DynamicObject>,
        key: impl Fn(&DynamicObject) -> Option<Key>,
    ) -> Vec<Key> {
        match event {
            watcher::Event::Init => {
                self.relisted = Some(BTreeSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(o) => {
                let Some(k) = key(&o) else { return Vec::new() };
                self.relisted
                    .get_or_insert_with(BTreeSet::new)
                    .insert(k.clone());
                vec![k]
            }
            watcher::Event::InitDone => {
                let relisted = self.relisted.take().unwrap_or_default();
                let vanished = self.known.difference(&relisted).cloned().collect();
                self.known = relisted;
                vanished
            }
            watcher::Event::Apply(o) => {
                let Some(k) = key(&o) else { return Vec::new() };
                self.known.insert(k.clone());
                vec![k]
            }
            watcher::Event::Delete(o) => {
                let Some(k) = key(&o) else { return Vec::new() };
                self.known.remove(&k);
                vec![k]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn object(name: &str) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("prod".into()),
                ..ObjectMeta::default()
            },
            data: serde_json::Value::Null,
        }
    }

    fn key(o: &DynamicObject) -> Option<Key> {
        Some((o.metadata.namespace.clone()?, o.metadata.name.clone()?))
    }

    /// An object deleted while the watch was down is named when the relist ends.
    #[test]
    fn a_relist_names_the_objects_that_vanished_meanwhile() {
        let mut seen = Seen::default();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(object("a")),
            watcher::Event::InitApply(object("b")),
            watcher::Event::InitDone,
            watcher::Event::Apply(object("c")),
        ] {
            seen.keys(event, key);
        }
        seen.keys(watcher::Event::Init, key);
        assert_eq!(
            seen.keys(watcher::Event::InitApply(object("b")), key),
            vec![("prod".to_string(), "b".to_string())]
        );
        let vanished = seen.keys(watcher::Event::InitDone, key);
        assert_eq!(
            vanished,
            vec![
                ("prod".to_string(), "a".to_string()),
                ("prod".to_string(), "c".to_string())
            ]
        );
    }
}
