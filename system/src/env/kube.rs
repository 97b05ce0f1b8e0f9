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
    /// A real cluster (kubeconfig, TLS, credentials) instead of `addr`: the runtime runs
    /// unchanged against kind or a real kube-apiserver. Not used under simulation.
    pub kubeconfig: Option<kube::Config>,
}

impl KubeTarget {
    /// A target at `addr` in namespace `default` with a 90 s read deadline.
    pub fn new(addr: impl Into<String>) -> Self {
        KubeTarget {
            addr: addr.into(),
            namespace: "default".into(),
            read_idle: Duration::from_secs(90),
            kubeconfig: None,
        }
    }

    /// A real cluster from a kubeconfig (e.g. `kube::Config::infer()`), in `namespace`.
    pub fn real(config: kube::Config, namespace: &str) -> Self {
        KubeTarget {
            addr: config.cluster_url.to_string(),
            namespace: namespace.into(),
            read_idle: Duration::from_secs(90),
            kubeconfig: Some(config),
        }
    }
}

/// Why a kube client could not be built for a real cluster.
#[derive(Debug, thiserror::Error)]
#[error("cannot build a kube client for {cluster}: {source}")]
pub struct ClientError {
    /// The cluster URL from the kubeconfig.
    pub cluster: String,
    /// kube's reason (TLS material, auth plugin, …).
    #[source]
    pub source: kube::Error,
}

/// Builds a kube client for a real cluster described by `target.kubeconfig`, with the
/// target's read deadline and default namespace.
pub fn real_client(target: &KubeTarget) -> Result<Option<kube::Client>, ClientError> {
    let Some(config) = &target.kubeconfig else {
        return Ok(None);
    };
    let mut config = config.clone();
    config.read_timeout = Some(target.read_idle);
    config.default_namespace = target.namespace.clone();
    let cluster = config.cluster_url.to_string();
    kube::Client::try_from(config)
        .map(Some)
        .map_err(|source| ClientError { cluster, source })
}

/// Builds a kube client dialling through `env`. Must be called inside a tokio runtime
/// (the client spawns its request buffer task).
///
/// With `target.kubeconfig` set this is a real-cluster client (OS sockets, TLS); if that
/// kubeconfig cannot be turned into a client the error is logged and the client points at
/// an address that refuses connections, so callers see ordinary, retried request errors.
pub fn client(env: SharedEnv, target: &KubeTarget) -> kube::Client {
    match real_client(target) {
        Ok(Some(client)) => return client,
        Ok(None) => {}
        Err(error) => {
            env.observe(
                crate::observe::KubeEvent::ClientError {
                    error: error.to_string(),
                }
                .into(),
            );
            tracing::warn!(%error, "kube client setup failed");
        }
    }
    let http = super::http::client::<kube::client::Body>(env, target.read_idle);
    let base = target.addr.clone();
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut request: http::Request<kube::client::Body>| {
            let path = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
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
/// 30 s cap, full jitter in the upper half) but its randomness and clock come from
/// [`Env`](super::Env).
///
/// Like kube's `ResetTimerBackoff`, it starts over only once [`RESET_AFTER`] has passed
/// since the last delay, never on `reset()`: a watcher yields `Ok(Init)` before every
/// relist attempt, so a backoff that reset on any success would retry a persistently
/// failing list (a 403 after an RBAC change, an API server that refuses connections)
/// every 0.4–0.8 s forever instead of backing off to 30 s.
pub struct SeededBackoff {
    env: SharedEnv,
    next: Duration,
    last_delay_at: Option<Duration>,
    /// First delay, and the first again after a quiet [`SeededBackoff::reset_after`].
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Errors further apart than this start the schedule over.
    pub reset_after: Duration,
}

/// kube's reset window for watcher backoff: 120 s without an error.
pub const RESET_AFTER: Duration = Duration::from_secs(120);

impl SeededBackoff {
    /// kube's defaults: 800 ms initial, 30 s cap, reset after 120 s without errors.
    pub fn new(env: SharedEnv) -> Self {
        SeededBackoff {
            env,
            next: Duration::from_millis(800),
            last_delay_at: None,
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            reset_after: RESET_AFTER,
        }
    }
}

impl Iterator for SeededBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.env.elapsed();
        if self
            .last_delay_at
            .is_some_and(|last| now.saturating_sub(last) > self.reset_after)
        {
            self.next = self.initial;
        }
        self.last_delay_at = Some(now);
        let base = self.next.min(self.max);
        self.next = (base * 2).min(self.max);
        Some(self.env.random_between(base / 2, base))
    }
}

impl kube::runtime::utils::Backoff for SeededBackoff {
    /// Deliberately nothing: the schedule starts over by time (see the type's doc), as
    /// kube's `ResetTimerBackoff` does.
    fn reset(&mut self) {}
}

/// A watched object shared by a reflector's store and the stream's consumer: the watch event
/// is decoded once and never copied (kube-rs's `Writer` clones every object it stores; a
/// clone of an `Arc` costs nothing). Derefs to the object.
#[derive(Debug)]
pub struct Shared<K>(pub std::sync::Arc<K>);

impl<K> Clone for Shared<K> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<K> std::ops::Deref for Shared<K> {
    type Target = K;

    fn deref(&self) -> &K {
        &self.0
    }
}

/// A shared object is the resource it holds: watched and listed as `Api<Shared<K>>`, looked
/// up by kube-rs's reflector as `K` itself (its blanket `Lookup`). Changing its metadata
/// copies the object first if anyone else holds it.
impl<K: kube::Resource + Clone> kube::Resource for Shared<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &kube::api::ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        std::sync::Arc::make_mut(&mut self.0).meta_mut()
    }
}

/// Decoded as [`Wire`] decodes, once per distinct JSON text on this thread: every watcher of
/// the same objects (five reporter replicas, Argo CD and the probe watch every Application in
/// a simulated world, all on one thread) shares one decoded object instead of decoding and
/// holding its own copy. The object is the one [`Wire`] would give (tested); only memory is
/// shared, and nobody can change a shared object in place.
impl<'de> serde::Deserialize<'de> for Shared<kube::api::DynamicObject> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <Box<serde_json::value::RawValue>>::deserialize(deserializer)?;
        decoded::shared(text.get())
            .map(Shared)
            .map_err(serde::de::Error::custom)
    }
}

/// The per-thread table of decoded objects behind `Shared<DynamicObject>`'s decoding.
mod decoded {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::hash::Hasher;
    use std::sync::{Arc, Weak};

    use kube::api::DynamicObject;

    /// Inserts between two sweeps of entries nobody holds any more.
    const SWEEP_EVERY: usize = 1 << 14;

    /// An object's text and the object, as long as anyone holds it.
    type Entry = (Box<str>, Weak<DynamicObject>);

    #[derive(Default)]
    struct Table {
        /// Objects by a hash of their text: each entry keeps the text to compare in full.
        /// (Ordered by hash, so nothing here depends on a hasher's random keys.)
        by_hash: BTreeMap<u64, Vec<Entry>>,
        inserts: usize,
    }

    thread_local! {
        static TABLE: RefCell<Table> = RefCell::default();
    }

    fn hash(text: &str) -> u64 {
        // SipHash with fixed keys: the same on every run (the table is never iterated into
        // any output, but nothing here needs the OS's randomness either).
        let mut hasher = std::hash::DefaultHasher::new();
        hasher.write(text.as_bytes());
        hasher.finish()
    }

    /// The object `text` decodes to: one already held on this thread if its text is the
    /// same, else a fresh decoding (which is then shared).
    pub(super) fn shared(text: &str) -> Result<Arc<DynamicObject>, serde_json::Error> {
        let key = hash(text);
        let held = TABLE.with_borrow(|table| {
            table.by_hash.get(&key).and_then(|entries| {
                entries
                    .iter()
                    .find(|(t, _)| &**t == text)
                    .and_then(|(_, object)| object.upgrade())
            })
        });
        if let Some(object) = held {
            return Ok(object);
        }
        let object = Arc::new(serde_json::from_str::<super::Wire>(text)?.into_inner());
        TABLE.with_borrow_mut(|table| {
            let entries = table.by_hash.entry(key).or_default();
            entries.retain(|(t, held)| held.strong_count() > 0 && &**t != text);
            entries.push((text.into(), Arc::downgrade(&object)));
            table.inserts += 1;
            if table.inserts % SWEEP_EVERY == 0 {
                table.by_hash.retain(|_, entries| {
                    entries.retain(|(_, held)| held.strong_count() > 0);
                    !entries.is_empty()
                });
            }
        });
        Ok(object)
    }

    /// Entries on this thread, live or not (for tests).
    #[cfg(test)]
    pub(super) fn entries() -> usize {
        TABLE.with_borrow(|table| table.by_hash.values().map(Vec::len).sum())
    }
}

/// A [`kube::api::DynamicObject`] decoded in one pass. kube-core derives `DynamicObject`'s
/// decoding with `#[serde(flatten)]`, which buffers the whole body as serde `Content` and
/// decodes it a second time; for watchers of thousands of objects that was most of the cost
/// of a watch event. Watch and list through `Api<Wire>`, then keep [`Wire::into_inner`]:
/// the object is the one kube-core's derive would have produced (tested against it).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(transparent)]
pub struct Wire(pub kube::api::DynamicObject);

impl Wire {
    /// The decoded object.
    pub fn into_inner(self) -> kube::api::DynamicObject {
        self.0
    }
}

impl kube::Resource for Wire {
    type DynamicType = kube::api::ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        kube::api::DynamicObject::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        kube::api::DynamicObject::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        kube::api::DynamicObject::version(dt)
    }

    fn api_version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        kube::api::DynamicObject::api_version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        kube::api::DynamicObject::plural(dt)
    }

    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        &mut self.0.metadata
    }
}

impl<'de> serde::Deserialize<'de> for Wire {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(WireVisitor)
    }
}

struct WireVisitor;

impl<'de> serde::de::Visitor<'de> for WireVisitor {
    type Value = Wire;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        // The derive's words, so a refusal reads the same either way.
        f.write_str("struct DynamicObject")
    }

    /// As the derive decodes: `metadata` as `ObjectMeta` (default when absent), every other
    /// field in order into `data`, except `apiVersion` and `kind`, which become the type
    /// when both are strings, once each. Otherwise serde's flattened `Option` gives no type
    /// and drops what it took: in document order, each of the two up to and including the
    /// first that is not a string or repeats one seen.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Wire, A::Error> {
        use serde::de::Error;
        use serde_json::Value;
        let mut metadata: Option<kube::api::ObjectMeta> = None;
        let mut entries: Vec<(String, Value)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "metadata" {
                if metadata.is_some() {
                    return Err(A::Error::duplicate_field("metadata"));
                }
                metadata = Some(map.next_value()?);
            } else {
                let value = map.next_value()?;
                entries.push((key, value));
            }
        }
        let (mut api_version, mut kind) = (None, None);
        let mut taken = 0; // entries[..taken] hold every type field the derive took
        let mut failed = false;
        for (at, (key, value)) in entries.iter().enumerate() {
            let slot = match key.as_str() {
                "apiVersion" => &mut api_version,
                "kind" => &mut kind,
                _ => continue,
            };
            taken = at + 1;
            if slot.is_some() {
                failed = true; // a duplicate field: the derive's TypeMeta fails there
                break;
            }
            match value.as_str() {
                Some(text) => *slot = Some(text.to_string()),
                None => {
                    failed = true;
                    break;
                }
            }
        }
        let types = match (failed, api_version, kind) {
            (false, Some(api_version), Some(kind)) => {
                Some(kube::api::TypeMeta { api_version, kind })
            }
            _ => None,
        };
        let data: serde_json::Map<String, Value> = entries
            .into_iter()
            .enumerate()
            .filter(|(at, (key, _))| !(*at < taken && (key == "apiVersion" || key == "kind")))
            .map(|(_, entry)| entry)
            .collect();
        Ok(Wire(kube::api::DynamicObject {
            types,
            metadata: metadata.unwrap_or_default(),
            data: Value::Object(data),
        }))
    }
}

/// A watcher event of [`Wire`] objects as plain `DynamicObject`s.
pub fn unwire(
    event: kube::runtime::watcher::Event<Wire>,
) -> kube::runtime::watcher::Event<kube::api::DynamicObject> {
    use kube::runtime::watcher::Event;
    match event {
        Event::Apply(o) => Event::Apply(o.0),
        Event::Delete(o) => Event::Delete(o.0),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.0),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::{Shared, Wire};
    use kube::api::DynamicObject;

    /// The one-pass decoder gives what kube-core's derive gives, or fails where it fails.
    #[test]
    fn wire_decodes_every_object_as_kube_cores_derive_does() {
        let cases = [
            r#"{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{"name":"a","namespace":"argocd","resourceVersion":"7","annotations":{"x":"y"}},"spec":{"source":{"repoURL":"r","path":"p"}},"status":{"sync":{"status":"Synced","revision":"abc"},"health":{"status":"Healthy"},"operationState":null}}"#,
            r#"{"metadata":{"name":"a"},"spec":{}}"#,
            r#"{"spec":{"z":1,"a":2},"metadata":{"name":"a"},"kind":"Application","apiVersion":"v1","data":[1,2]}"#,
            r#"{"apiVersion":"v1","metadata":{"name":"a"},"spec":1}"#,
            r#"{"kind":"ConfigMap","metadata":{"name":"a"}}"#,
            r#"{"apiVersion":1,"kind":"ConfigMap","metadata":{"name":"a"}}"#,
            r#"{"kind":"ConfigMap","x":1,"apiVersion":null,"metadata":{"name":"a"}}"#,
            r#"{"kind":7,"x":1,"apiVersion":"v1"}"#,
            r#"{"apiVersion":"a","apiVersion":"b","kind":"K"}"#,
            r#"{"kind":"K","apiVersion":"v1","kind":"K","x":1}"#,
            r#"null"#,
            r#""x""#,
            r#"{"apiVersion":"v1","kind":"ConfigMap"}"#,
            r#"{}"#,
            r#"{"metadata":null}"#,
            r#"{"metadata":{"name":"a"},"metadata":{"name":"b"}}"#,
            r#"{"metadata":{"name":7}}"#,
            r#"{"status":null,"a\"b":"\u00e9\n"}"#,
            r#"[]"#,
            r#"{"metadata":{"name":"a"}"#,
        ];
        for case in cases {
            let derived = serde_json::from_str::<DynamicObject>(case);
            let wire = serde_json::from_str::<Wire>(case).map(Wire::into_inner);
            match (&derived, &wire) {
                (Ok(d), Ok(w)) => {
                    assert_eq!(d, w, "{case}");
                    assert_eq!(
                        serde_json::to_string(d).unwrap(),
                        serde_json::to_string(w).unwrap(),
                        "{case}"
                    );
                }
                (Err(d), Err(w)) => assert_eq!(d.to_string(), w.to_string(), "{case}"),
                _ => panic!("{case}: derive {derived:?}, wire {wire:?}"),
            }
        }
        // A watch event decodes through it too.
        let event = r#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}}"#;
        let decoded: kube::core::WatchEvent<Wire> = serde_json::from_str(event).unwrap();
        let kube::core::WatchEvent::Modified(object) = decoded else {
            panic!("{decoded:?}");
        };
        assert_eq!(object.0.data["data"]["k"], "v");

        // Shared decoding gives Wire's object, or fails where Wire fails.
        for case in cases {
            let wire = serde_json::from_str::<Wire>(case).map(Wire::into_inner);
            let shared = serde_json::from_str::<Shared<DynamicObject>>(case);
            match (&wire, &shared) {
                (Ok(w), Ok(s)) => assert_eq!(w, &*s.0, "{case}"),
                (Err(_), Err(_)) => {}
                _ => panic!("{case}: wire {wire:?}, shared {shared:?}"),
            }
        }
    }

    /// Watchers on one thread share one decoded object per distinct text, never a stale one.
    #[test]
    fn the_same_text_decodes_to_one_shared_object_while_anyone_holds_it() {
        use std::sync::Arc;
        let a = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"1"},"data":{"k":"v"}}"#;
        let a2 = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"2"},"data":{"k":"v"}}"#;
        let event = format!(r#"{{"type":"MODIFIED","object":{a}}}"#);
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMapList","metadata":{{"resourceVersion":"2"}},"items":[{a},{a2}]}}"#
        );
        let kube::core::WatchEvent::Modified(watched) =
            serde_json::from_str::<kube::core::WatchEvent<Shared<DynamicObject>>>(&event).unwrap()
        else {
            panic!("not a modification");
        };
        let listed: kube::core::ObjectList<Shared<DynamicObject>> =
            serde_json::from_str(&list).unwrap();
        // The listed copy of the same text is the watched object itself; another version is not.
        assert!(Arc::ptr_eq(&watched.0, &listed.items[0].0));
        assert!(!Arc::ptr_eq(&watched.0, &listed.items[1].0));
        assert_eq!(
            listed.items[1].metadata.resource_version.as_deref(),
            Some("2")
        );
        // Changing a shared object's metadata copies it: the other holders keep theirs.
        let mut changed = listed.items[0].clone();
        kube::Resource::meta_mut(&mut changed).name = Some("b".into());
        assert_eq!(watched.metadata.name.as_deref(), Some("a"));
        assert_eq!(changed.metadata.name.as_deref(), Some("b"));
        // Once nobody holds it, the same text decodes afresh (equal, not the dropped one).
        let before = Arc::downgrade(&watched.0);
        drop((watched, listed, changed));
        assert!(before.upgrade().is_none());
        let again = serde_json::from_str::<Shared<DynamicObject>>(a).unwrap();
        assert_eq!(again.data["data"]["k"], "v");
        // The table keeps one entry per text: the dead entry of `a` was replaced.
        assert_eq!(super::decoded::entries(), 2);
    }
}
