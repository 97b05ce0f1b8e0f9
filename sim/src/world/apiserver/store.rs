//! The API server's storage: one global resource version (like etcd's revision), the
//! current objects, and a history of changes trimmed by a time-based compaction window.
//!
//! Every write goes through [`Store::commit`], which stamps the next RV, records the change
//! with the object's previous body (needed for selector transitions and for serving pages
//! at an older snapshot) and compacts history older than the window.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::error::ApiError;
use super::resources::ResourceKind;
use super::selector::{FieldSelector, LabelSelector};

/// What a change did to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// The object was created.
    Added,
    /// The object was updated.
    Modified,
    /// The object was deleted; the change carries its last body stamped with the deletion's RV.
    Deleted,
}

/// One entry of the history a watch replays.
#[derive(Clone, Debug)]
pub struct Change {
    /// The RV this change created.
    pub rv: u64,
    /// [`ResourceKind::key`] of the object's type.
    pub resource: String,
    /// Namespace ("" for cluster-scoped objects).
    pub namespace: String,
    /// Added, modified or deleted.
    pub change: ChangeType,
    /// The body after the change (for deletions: the last body, stamped with `rv`).
    /// Shared: every watcher and page reads the same body without copying it.
    pub object: Arc<Value>,
    /// The body before the change, if the object existed.
    pub previous: Option<Arc<Value>>,
    /// Simulated time of the write, for compaction.
    pub at: Duration,
    /// `object` serialised once, on first use, for every watcher that sends it.
    pub encoded: Arc<std::sync::OnceLock<bytes::Bytes>>,
}

impl Change {
    /// The JSON text of `object` (serialised at most once, whatever the number of watchers).
    pub fn object_json(&self) -> bytes::Bytes {
        self.encoded
            .get_or_init(|| {
                bytes::Bytes::from(
                    serde_json::to_vec(&*self.object).expect("JSON values serialise"),
                )
            })
            .clone()
    }
}

type Key = (String, String, String);

/// What a write stored: the object and its JSON text, serialised once for the answer and for
/// every watcher that sends the change (instead of a deep copy for the answer and a second
/// serialisation for the watchers).
#[derive(Clone, Debug)]
pub struct Written {
    /// The stored object (shared with the store and its history).
    pub object: Arc<Value>,
    /// `object` as JSON.
    pub json: bytes::Bytes,
}

impl Written {
    /// The answer for `object`, serialised once.
    pub fn of(object: Arc<Value>) -> Written {
        let json = bytes::Bytes::from(serde_json::to_vec(&*object).expect("JSON values serialise"));
        Written { object, json }
    }
}

impl std::ops::Deref for Written {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.object
    }
}

/// The storage of the simulated API server. Cloned only for a dry run (`dryRun=All`), which
/// writes into the copy and throws it away.
#[derive(Clone, Debug, Default)]
pub struct Store {
    rv: u64,
    uid_counter: u64,
    objects: BTreeMap<Key, Arc<Value>>,
    history: VecDeque<Change>,
    /// History holds every change with `rv > compacted_rv`.
    compacted_rv: u64,
    /// The RV of the last write to each resource (`kind.key()`), for readers that only
    /// care whether one kind moved.
    last_write: BTreeMap<String, u64>,
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    /// The items in name order (namespace, then name).
    pub items: Vec<Arc<Value>>,
    /// The snapshot RV every page of this list reports.
    pub rv: u64,
    /// Set while more items remain.
    pub continue_token: Option<String>,
    /// How many items remain after this page; like kube-apiserver, only known (and set)
    /// for paged lists without label or field selectors.
    pub remaining: Option<usize>,
}

/// Which objects a list or watch wants.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Restrict to one namespace.
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
}

impl Filter {
    /// Whether `object` (in `namespace`) passes the filter.
    pub fn matches(&self, namespace: &str, object: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
            && self.labels.matches(object)
            && self.fields.matches(object)
    }
}

/// Whether `object` lists finalizers (the deletion waits for them).
pub fn has_finalizers(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

/// A full body sent to a named object's endpoint: a JSON object whose name, if it has one,
/// is the URL's.
fn check_body_name(body: &Value, name: &str) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    match meta_str(body, "name") {
        Some(body_name) if body_name != name => Err(ApiError::bad_request(&format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        ))),
        _ => Ok(()),
    }
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

fn set_meta(object: &mut Value, field: &str, value: Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(field.to_string(), value);
    }
}

/// The object without `metadata` (and without `status` when the type has a status
/// subresource): what `metadata.generation` tracks.
/// Whether `a` and `b` differ in what bumps `metadata.generation`: everything but
/// `metadata` (and `status` for types with a status subresource). Compared in place.
fn same_generation_view(a: &Value, b: &Value, kind: &ResourceKind) -> bool {
    let counted = |key: &String| key != "metadata" && !(kind.status_subresource && key == "status");
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            a.keys().filter(|k| counted(k)).count() == b.keys().filter(|k| counted(k)).count()
                && a.iter()
                    .filter(|(k, _)| counted(k))
                    .all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    }
}

/// Drops what kube-apiserver's encoding omits when empty: `metadata.labels` and
/// `metadata.annotations` always, and a built-in type's empty `data`/`binaryData` maps
/// (Go `omitempty`); custom resources keep their other empty maps, as unstructured JSON does.
fn omit_empty(object: &mut Value, kind: &ResourceKind) {
    let empty = |v: &Value| v.as_object().is_some_and(|m| m.is_empty()) || v.is_null();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["labels", "annotations"] {
            if meta.get(field).is_some_and(empty) {
                meta.shift_remove(field);
            }
        }
    }
    if !kind.custom {
        if let Some(map) = object.as_object_mut() {
            for field in ["data", "binaryData", "stringData"] {
                if map.get(field).is_some_and(empty) {
                    map.shift_remove(field);
                }
            }
        }
    }
}

/// Defaulting the real server applies to a built-in type on every write
/// (`SetDefaults_Secret`, and the Secret strategy's `stringData` fold): a Secret's
/// `stringData` is folded into `data` base64-encoded and dropped, and its `type`
/// defaults to `Opaque`.
fn default_fields(object: &mut Value, kind: &ResourceKind) {
    use base64::Engine;
    if !kind.custom && kind.kind == "Event" {
        return event_fields(object);
    }
    if kind.custom || kind.kind != "Secret" {
        return;
    }
    let Some(map) = object.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(plain)) = map.shift_remove("stringData") {
        if !map.get("data").is_some_and(Value::is_object) {
            map.insert("data".into(), json!({}));
        }
        if let Some(data) = map.get_mut("data").and_then(Value::as_object_mut) {
            for (key, value) in plain {
                let text = value.as_str().unwrap_or_default().as_bytes();
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(key, json!(encoded));
            }
        }
    }
    if map
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        map.insert("type".into(), json!("Opaque"));
    }
}

/// A core/v1 Event as the typed object serialises: `source`, the three timestamps and the
/// reporting fields always there (null or empty), `count`, `reason`, `message`, `type` and
/// `action` left out when zero or empty (`omitempty`).
fn event_fields(object: &mut Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    // Go's zero time is no time: the typed object writes it as null.
    for field in ["eventTime", "firstTimestamp", "lastTimestamp"] {
        if map.get(field).is_some_and(super::events::is_zero_time) {
            map.insert(field.into(), Value::Null);
        }
    }
    for (field, default) in [
        ("source", json!({})),
        ("firstTimestamp", Value::Null),
        ("lastTimestamp", Value::Null),
        ("eventTime", Value::Null),
        ("reportingComponent", json!("")),
        ("reportingInstance", json!("")),
    ] {
        if !map.contains_key(field) {
            map.insert(field.into(), default);
        }
    }
    for field in ["reason", "message", "type", "action"] {
        if map.get(field).is_some_and(|v| v == "" || v.is_null()) {
            map.shift_remove(field);
        }
    }
    if map.get("count").is_some_and(|v| v == 0 || v.is_null()) {
        map.shift_remove("count");
    }
    // An EventSeries as it serialises: `lastObservedTime` always (null when unset), a zero
    // `count` left out.
    if let Some(series) = map.get_mut("series").and_then(Value::as_object_mut) {
        if !series.contains_key("lastObservedTime") {
            series.insert("lastObservedTime".into(), Value::Null);
        }
        if series.get("count").is_some_and(|v| v == 0 || v.is_null()) {
            series.shift_remove("count");
        }
    }
}

mod namespaces;
pub use namespaces::is_namespace;

pub use super::mergepatch::merge_patch;

pub use orrery_system::core::time::rfc3339;

fn encode_continue(rv: u64, key: &Key) -> String {
    let raw = format!("{rv}\u{1}{}\u{1}{}", key.1, key.2);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> Option<(u64, String, String)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let mut parts = text.split('\u{1}');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, parts.next()?.to_string(), parts.next()?.to_string()))
}

impl Store {
    /// The current global resource version.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// The RV of the last write to objects of `kind` (0 before the first).
    pub fn last_write(&self, kind: &ResourceKind) -> u64 {
        self.last_write.get(&kind.key()).copied().unwrap_or(0)
    }

    /// Changes with RV at or below this are gone from history.
    pub fn compacted_rv(&self) -> u64 {
        self.compacted_rv
    }

    /// Number of stored objects of every type.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Every stored object of `kind` in key order (for checkers and reports).
    pub fn objects_of(&self, kind: &ResourceKind) -> Vec<Value> {
        let key = kind.key();
        self.objects
            .iter()
            .filter(|((r, _, _), _)| *r == key)
            .map(|(_, v)| (**v).clone())
            .collect()
    }

    /// Calls `f` on every stored object of `kind` in key order, without copying them.
    pub fn visit(&self, kind: &ResourceKind, f: impl FnMut(&Value)) {
        self.iter(kind).for_each(f);
    }

    /// Every stored object of `kind` in key order, borrowed.
    pub fn iter<'a>(&'a self, kind: &ResourceKind) -> impl Iterator<Item = &'a Value> + 'a {
        self.iter_shared(kind).map(|(_, _, value)| value.as_ref())
    }

    /// Every stored object of `kind` in key order with its namespace and name, shared: a
    /// reader that remembers an object's `Arc` knows it unchanged while the store still
    /// holds the same one (every write commits a new `Arc`).
    pub fn iter_shared<'a>(
        &'a self,
        kind: &ResourceKind,
    ) -> impl Iterator<Item = (&'a str, &'a str, &'a Arc<Value>)> + 'a {
        let key = kind.key();
        let first = (key.clone(), String::new(), String::new());
        self.objects
            .range(first..)
            .take_while(move |((resource, _, _), _)| *resource == key)
            .map(|((_, namespace, name), value)| (namespace.as_str(), name.as_str(), value))
    }

    /// Drops history written before `now - window`.
    pub fn compact(&mut self, now: Duration, window: Duration) {
        while let Some(front) = self.history.front() {
            if now.saturating_sub(front.at) <= window {
                break;
            }
            self.compacted_rv = front.rv;
            self.history.pop_front();
        }
    }

    fn key(kind: &ResourceKind, namespace: &str, name: &str) -> Key {
        (kind.key(), namespace.to_string(), name.to_string())
    }

    /// Records a change and returns the stamped object.
    fn commit(
        &mut self,
        kind: &ResourceKind,
        key: Key,
        new: Option<Value>,
        now: Duration,
    ) -> Written {
        self.rv += 1;
        let rv = self.rv;
        match self.last_write.get_mut(&key.0) {
            Some(last) => *last = rv,
            None => {
                self.last_write.insert(key.0.clone(), rv);
            }
        }
        let previous = self.objects.get(&key).cloned();
        let (change, object) = match new {
            Some(mut object) => {
                set_meta(&mut object, "resourceVersion", json!(rv.to_string()));
                let object = Arc::new(object);
                self.objects.insert(key.clone(), object.clone());
                let change = if previous.is_some() {
                    ChangeType::Modified
                } else {
                    ChangeType::Added
                };
                (change, object)
            }
            None => {
                let mut object = (*self
                    .objects
                    .remove(&key)
                    .expect("commit(None) only for existing objects"))
                .clone();
                set_meta(&mut object, "resourceVersion", json!(rv.to_string()));
                (ChangeType::Deleted, Arc::new(object))
            }
        };
        let written = Written::of(object);
        self.history.push_back(Change {
            rv,
            resource: kind.key(),
            namespace: key.1,
            change,
            object: written.object.clone(),
            previous,
            at: now,
            encoded: Arc::new(std::sync::OnceLock::from(written.json.clone())),
        });
        written
    }

    /// Reads one object.
    pub fn get(&self, kind: &ResourceKind, namespace: &str, name: &str) -> Result<Value, ApiError> {
        self.get_shared(kind, namespace, name).map(|o| (*o).clone())
    }

    /// As [`Store::get`], the stored object itself (shared, not copied).
    pub fn get_shared(
        &self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        self.objects
            .get(&Self::key(kind, namespace, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(kind, name))
    }

    /// POST: creates a new object; 409 if the name is taken, 422 if it has no name.
    pub fn create(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        mut object: Value,
        now: Duration,
        unix_millis: u64,
    ) -> Result<Written, ApiError> {
        if !object.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        let name = match meta_str(&object, "name") {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match meta_str(&object, "generateName") {
                Some(prefix) => format!("{prefix}{:05x}", self.rv + 1),
                None => {
                    return Err(ApiError::invalid(
                        kind,
                        "",
                        "metadata.name",
                        "FieldValueRequired",
                        "Required value: name or generateName is required",
                    ))
                }
            },
        };
        // Validation comes before storage: an invalid name is 422 even if it exists.
        super::validation::write(kind, &name, namespace, &object, true)?;
        let key = Self::key(kind, namespace, &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(kind, &name));
        }
        self.uid_counter += 1;
        let map = object.as_object_mut().expect("checked above");
        map.insert("apiVersion".into(), json!(kind.api_version()));
        map.insert("kind".into(), json!(kind.kind));
        if kind.status_subresource {
            map.remove("status");
        }
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        if !meta.is_object() {
            return Err(ApiError::bad_request("metadata must be an object"));
        }
        let meta = meta.as_object_mut().expect("checked above");
        meta.insert("name".into(), json!(name));
        if kind.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        }
        meta.insert(
            "uid".into(),
            json!(format!("00000000-0000-4000-8000-{:012x}", self.uid_counter)),
        );
        meta.insert("creationTimestamp".into(), json!(rfc3339(unix_millis)));
        if kind.has_generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.shift_remove("generation");
        }
        meta.shift_remove("resourceVersion");
        // A new object is not being deleted (kube-apiserver's `BeforeCreate`).
        meta.shift_remove("deletionTimestamp");
        meta.shift_remove("deletionGracePeriodSeconds");
        if is_namespace(kind) {
            super::namespaces::prepare_create(&mut object);
        }
        default_fields(&mut object, kind);
        omit_empty(&mut object, kind);
        Ok(self.commit(kind, key, Some(object), now))
    }

    /// Carries server-owned metadata over from `current` into an incoming full body and
    /// decides the new generation.
    fn prepare_update(
        kind: &ResourceKind,
        current: &Value,
        incoming: &mut Value,
        status_only: bool,
    ) {
        let mut next = if status_only {
            let mut next = current.clone();
            match incoming.get("status") {
                Some(status) => next["status"] = status.clone(),
                None => {
                    next.as_object_mut().map(|m| m.remove("status"));
                }
            }
            next
        } else {
            let mut next = std::mem::take(incoming);
            if kind.status_subresource {
                match current.get("status") {
                    Some(status) => next["status"] = status.clone(),
                    None => {
                        next.as_object_mut().map(|m| m.remove("status"));
                    }
                }
            }
            next
        };
        let map = next.as_object_mut().expect("objects are JSON objects");
        map.insert("apiVersion".into(), json!(kind.api_version()));
        map.insert("kind".into(), json!(kind.kind));
        if !map.get("metadata").is_some_and(Value::is_object) {
            map.insert("metadata".into(), json!({}));
        }
        // An update can never set, remove or change a deletion timestamp or grace period
        // (kube-apiserver's `BeforeUpdate`).
        for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
            match current["metadata"].get(field) {
                Some(v) => next["metadata"][field] = v.clone(),
                None => {
                    next["metadata"]
                        .as_object_mut()
                        .map(|m| m.shift_remove(field));
                }
            }
        }
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            match current["metadata"].get(field) {
                Some(v) if field != "managedFields" || next["metadata"].get(field).is_none() => {
                    next["metadata"][field] = v.clone();
                }
                _ => {}
            }
        }
        if is_namespace(kind) && !status_only {
            super::namespaces::prepare_update(current, &mut next);
        }
        if kind.has_generation {
            let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
            if !same_generation_view(&next, current, kind) {
                next["metadata"]["generation"] = json!(generation + 1);
            }
        } else if let Some(meta) = next["metadata"].as_object_mut() {
            meta.shift_remove("generation");
        }
        default_fields(&mut next, kind);
        omit_empty(&mut next, kind);
        *incoming = next;
    }

    /// Checks an optional RV precondition in a body against the stored object.
    fn check_precondition(
        kind: &ResourceKind,
        current: &Value,
        body: &Value,
    ) -> Result<(), ApiError> {
        match meta_str(body, "resourceVersion") {
            Some(rv) if Some(rv) != meta_str(current, "resourceVersion") => Err(
                ApiError::conflict(kind, meta_str(current, "name").unwrap_or("")),
            ),
            _ => Ok(()),
        }
    }

    /// PUT (or PUT `/status` when `status_only`): replaces an object.
    pub fn replace(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        mut body: Value,
        status_only: bool,
        now: Duration,
    ) -> Result<Written, ApiError> {
        check_body_name(&body, name)?;
        let key = Self::key(kind, namespace, name);
        let current = self
            .objects
            .get(&key)
            .map(|o| (**o).clone())
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        if meta_str(&body, "resourceVersion").is_none() && kind.custom {
            return Err(ApiError::invalid(
                kind,
                name,
                "metadata.resourceVersion",
                "FieldValueInvalid",
                "Invalid value: 0: must be specified for an update",
            ));
        }
        Self::check_precondition(kind, &current, &body)?;
        Self::prepare_update(kind, &current, &mut body, status_only);
        super::validation::write(kind, name, namespace, &body, false)?;
        if Self::deletes_on_update(kind, name, &current, &body)? {
            return Ok(self.delete_updated(kind, key, &current, body, now));
        }
        if Self::unchanged(&current, &body) {
            return Ok(Written::of(Arc::new(current)));
        }
        Ok(self.commit(kind, key, Some(body), now))
    }

    /// PATCH with `application/merge-patch+json` (or on `/status` when `status_only`).
    pub fn patch_merge(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        patch: &Value,
        status_only: bool,
        now: Duration,
    ) -> Result<Written, ApiError> {
        self.patch_with(
            kind,
            namespace,
            name,
            patch,
            status_only,
            now,
            |next, patch| {
                merge_patch(next, patch);
                Ok(())
            },
        )
    }

    /// Patches an object with `apply` (a merge or strategic merge patch), then validates
    /// and stores it as [`Store::patch_merge`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_with(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        patch: &Value,
        status_only: bool,
        now: Duration,
        apply: impl FnOnce(&mut Value, &Value) -> Result<(), ApiError>,
    ) -> Result<Written, ApiError> {
        let key = Self::key(kind, namespace, name);
        let current = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        Self::check_precondition(kind, &current, patch)?;
        let mut next = (*current).clone();
        apply(&mut next, patch)?;
        if meta_str(&next, "name") != Some(name) {
            return Err(ApiError::bad_request(
                "metadata.name cannot be changed by a patch",
            ));
        }
        Self::prepare_update(kind, &current, &mut next, status_only);
        super::validation::write(kind, name, namespace, &next, false)?;
        if Self::deletes_on_update(kind, name, &current, &next)? {
            return Ok(self.delete_updated(kind, key, &current, next, now));
        }
        if Self::unchanged(&current, &next) {
            return Ok(Written::of(current));
        }
        Ok(self.commit(kind, key, Some(next), now))
    }

    /// Whether an update leaves the object as stored: the real server then writes nothing
    /// (no new resourceVersion, no watch event; etcd3's `GuaranteedUpdate` compares the
    /// bytes), which controllers that re-patch the same value rely on.
    /// Compares `next`, its resourceVersion taken as the current one, without copying it.
    fn unchanged(current: &Value, next: &Value) -> bool {
        let (Some(rv), Some(now), Some(then)) = (
            current["metadata"].get("resourceVersion"),
            current.as_object(),
            next.as_object(),
        ) else {
            return next == current;
        };
        now.len() == then.len()
            && then.iter().all(|(key, value)| {
                let Some(was) = now.get(key) else {
                    return false;
                };
                match (key.as_str(), value.as_object(), was.as_object()) {
                    // `next`'s metadata with the current resourceVersion set in it.
                    ("metadata", Some(meta), Some(was_meta)) => {
                        let added = usize::from(!meta.contains_key("resourceVersion"));
                        meta.len() + added == was_meta.len()
                            && was_meta.get("resourceVersion") == Some(rv)
                            && meta.iter().all(|(field, v)| {
                                field == "resourceVersion" || was_meta.get(field) == Some(v)
                            })
                    }
                    _ => value == was,
                }
            })
    }

    /// DELETE: removes an object; the DELETED change carries the deletion's RV. An object
    /// with finalizers stays until an update empties them: the first delete marks it
    /// (`deletionTimestamp` now, `deletionGracePeriodSeconds` 0, `generation` + 1 where it
    /// has one: a MODIFIED event), later ones change nothing; the answer is the object then,
    /// which is how the caller tells (kube-apiserver's `markAsDeleting` and
    /// `updateForGracefulDeletionAndFinalizers`).
    pub fn delete(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        now: Duration,
        unix_millis: u64,
    ) -> Result<Written, ApiError> {
        if is_namespace(kind) {
            return self.delete_namespace(kind, name, now, unix_millis);
        }
        let key = Self::key(kind, namespace, name);
        let Some(current) = self.objects.get(&key).cloned() else {
            return Err(ApiError::not_found(kind, name));
        };
        if has_finalizers(&current) {
            if current["metadata"].get("deletionTimestamp").is_some() {
                return Ok(Written::of(current));
            }
            let mut next = (*current).clone();
            let meta = next["metadata"]
                .as_object_mut()
                .expect("stored objects have metadata");
            if let Some(generation) = meta.get("generation").and_then(Value::as_i64) {
                if generation > 0 {
                    meta.insert("generation".into(), json!(generation + 1));
                }
            }
            meta.insert("deletionTimestamp".into(), json!(rfc3339(unix_millis)));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            return Ok(self.commit(kind, key, Some(next), now));
        }
        Ok(self.commit(kind, key, None, now))
    }

    /// Deletes the object an update emptied of finalizers. Watchers get DELETED with its last
    /// stored body; the caller gets the update's result at the stored resourceVersion, as
    /// kube-apiserver's `deleteWithoutFinalizers` answers.
    fn delete_updated(
        &mut self,
        kind: &ResourceKind,
        key: Key,
        current: &Value,
        mut updated: Value,
        now: Duration,
    ) -> Written {
        self.commit(kind, key, None, now);
        updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        if let Some(meta) = updated["metadata"].as_object_mut() {
            // An empty list is left out of the answer, as Go's `omitempty` leaves it.
            if meta
                .get("finalizers")
                .is_some_and(|f| f.as_array().is_some_and(Vec::is_empty))
            {
                meta.shift_remove("finalizers");
            }
        }
        Written::of(Arc::new(updated))
    }

    /// A dry run's copy of the store used `uids` of the counter: the store skips them, as a
    /// real server never hands a dry run's uid to a later object.
    pub fn skip_uids(&mut self, counter: u64) {
        self.uid_counter = self.uid_counter.max(counter);
    }

    /// How many uids the store has handed out.
    pub fn uid_counter(&self) -> u64 {
        self.uid_counter
    }

    /// An update of an object being deleted: it may not add finalizers (422, worded as
    /// kube-apiserver's `ValidateNoNewFinalizers`), and once it leaves none the object is
    /// deleted instead of updated (`shouldDeleteDuringUpdate`): true.
    fn deletes_on_update(
        kind: &ResourceKind,
        name: &str,
        current: &Value,
        next: &Value,
    ) -> Result<bool, ApiError> {
        if current["metadata"].get("deletionTimestamp").is_none() {
            return Ok(false);
        }
        let finalizers = |object: &Value| -> Vec<String> {
            object["metadata"]["finalizers"]
                .as_array()
                .map(|f| {
                    f.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let before = finalizers(current);
        let mut added: Vec<String> = finalizers(next)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        added.sort();
        added.dedup();
        if !added.is_empty() {
            let listed: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            let cause = (
                "metadata.finalizers".to_string(),
                format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    listed.join(", ")
                ),
            );
            let mut error = ApiError::invalid_causes(kind, name, std::slice::from_ref(&cause));
            if kind.custom {
                // A custom resource's metadata is validated twice on update (the generic
                // object-meta update check and the CRD strategy's); the real server lists
                // the cause twice under one message.
                if let Some(causes) = error.details["causes"].as_array_mut() {
                    let again = causes[0].clone();
                    causes.push(again);
                }
            }
            return Err(error);
        }
        // A Namespace also waits for its `spec.finalizers` (`ShouldDeleteNamespaceDuringUpdate`).
        let held = is_namespace(kind) && super::namespaces::has_spec_finalizers(next);
        Ok(!has_finalizers(next) && !held)
    }

    /// Server-side apply (simplified, see [`super::apply`]).
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        applied: Value,
        manager: &str,
        force: bool,
        status_only: bool,
        now: Duration,
        unix_millis: u64,
    ) -> Result<Written, ApiError> {
        let key = Self::key(kind, namespace, name);
        match self.objects.get(&key).cloned() {
            None if status_only => Err(ApiError::not_found(kind, name)),
            None => {
                let mut object = applied.clone();
                super::apply::record_owner(
                    &mut object,
                    &applied,
                    manager,
                    kind,
                    &rfc3339(unix_millis),
                );
                if meta_str(&object, "name").is_none() {
                    set_meta(&mut object, "name", json!(name));
                }
                self.create(kind, namespace, object, now, unix_millis)
            }
            Some(current) => {
                Self::check_precondition(kind, &current, &applied)?;
                let mut next = super::apply::apply(
                    &current,
                    &applied,
                    manager,
                    force,
                    kind,
                    &rfc3339(unix_millis),
                )?;
                Self::prepare_update(kind, &current, &mut next, status_only);
                if next == *current {
                    return Ok(Written::of(current)); // an apply that changes nothing writes nothing, as upstream
                }
                super::validation::write(kind, name, namespace, &next, false)?;
                if Self::deletes_on_update(kind, name, &current, &next)? {
                    return Ok(self.delete_updated(kind, key, &current, next, now));
                }
                Ok(self.commit(kind, key, Some(next), now))
            }
        }
    }

    /// What the objects of `kind` were at `rv` where they differ from now: the body before
    /// the oldest change since (`None`: created since), or `None` if history no longer
    /// reaches back. A list walks the live objects through it, so it copies no key and
    /// looks at no other kind (a store holds tens of thousands of Events beside the apps).
    fn changed_since(&self, resource: &str, rv: u64) -> Option<BTreeMap<Key, Option<Arc<Value>>>> {
        if rv < self.compacted_rv {
            return None;
        }
        let mut earlier = BTreeMap::new();
        let since = self.history.partition_point(|c| c.rv <= rv);
        // Newest first, so the oldest change's body is the one left.
        for change in self.history.range(since..).rev() {
            if change.resource != resource {
                continue;
            }
            let name = meta_str(&change.object, "name").unwrap_or("").to_string();
            let key = (resource.to_string(), change.namespace.clone(), name);
            earlier.insert(key, change.previous.clone());
        }
        Some(earlier)
    }

    /// The objects of `resource` as they were when `earlier` was taken, in key order, from
    /// the first key after `after` (every one when `None`).
    fn snapshot<'a>(
        &'a self,
        resource: &'a str,
        earlier: &'a BTreeMap<Key, Option<Arc<Value>>>,
        after: Option<&Key>,
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<Value>)> + 'a {
        use std::ops::Bound;
        let lower = match after {
            Some(key) => Bound::Excluded(key.clone()),
            None => Bound::Included((resource.to_string(), String::new(), String::new())),
        };
        let of_kind = move |((r, _, _), _): &(&Key, _)| r == resource;
        let mut now = self
            .objects
            .range((lower.clone(), Bound::Unbounded))
            .take_while(of_kind)
            .peekable();
        let mut then = earlier.range((lower, Bound::Unbounded)).peekable();
        std::iter::from_fn(move || loop {
            let order = match (now.peek(), then.peek()) {
                (None, None) => return None,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some((a, _)), Some((b, _))) => a.cmp(b),
            };
            let (key, body) = match order {
                std::cmp::Ordering::Less => {
                    let (key, body) = now.next()?;
                    (key, Some(body))
                }
                std::cmp::Ordering::Greater => {
                    let (key, body) = then.next()?;
                    (key, body.as_ref())
                }
                std::cmp::Ordering::Equal => {
                    now.next();
                    let (key, body) = then.next()?;
                    (key, body.as_ref())
                }
            };
            if let Some(body) = body {
                return Some((key, body));
            }
        })
    }

    /// Drops `namespace/name` whatever its finalizers, as etcd drops a key whose lease ran
    /// out (an expired Event); `None` when there is no such object.
    pub fn expire(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        now: Duration,
    ) -> Option<Written> {
        let key = Self::key(kind, namespace, name);
        if !self.objects.contains_key(&key) {
            return None;
        }
        Some(self.commit(kind, key, None, now))
    }

    /// A page of a list, consistent with the snapshot of the first page.
    pub fn list(
        &self,
        kind: &ResourceKind,
        filter: &Filter,
        limit: Option<usize>,
        token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        self.list_lagging(kind, filter, limit, token, 0)
    }

    /// As [`Store::list`], a first page served `lag` resource versions behind the newest (a
    /// lagging watch cache; as far back as history reaches).
    pub fn list_lagging(
        &self,
        kind: &ResourceKind,
        filter: &Filter,
        limit: Option<usize>,
        token: Option<&str>,
        lag: u64,
    ) -> Result<ListPage, ApiError> {
        let (rv, after) = match token {
            Some(token) => {
                let (rv, ns, name) = decode_continue(token).ok_or_else(|| {
                    ApiError::bad_request(&format!("invalid continue token {token:?}"))
                })?;
                (rv, Some((kind.key(), ns, name)))
            }
            None => (self.rv.saturating_sub(lag).max(self.compacted_rv), None),
        };
        let resource = kind.key();
        let earlier = self.changed_since(&resource, rv).ok_or_else(|| {
            ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
        })?;
        let mut matching = self
            .snapshot(&resource, &earlier, after.as_ref())
            .filter(|((_, ns, _), v)| filter.matches(ns, v));
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut last_key = None;
        for (key, value) in matching.by_ref() {
            items.push(value.clone());
            if items.len() == limit {
                last_key = Some(key.clone());
                break;
            }
        }
        let rest = matching.count();
        let continue_token = match (rest > 0, last_key) {
            (true, Some(key)) => Some(encode_continue(rv, &key)),
            _ => None,
        };
        let remaining =
            (rest > 0 && filter.labels.is_empty() && filter.fields.is_empty()).then_some(rest);
        Ok(ListPage {
            items,
            rv,
            continue_token,
            remaining,
        })
    }

    /// History of `resource` after `rv` and the newest RV looked at, or [`Compacted`] if it
    /// was compacted away (the watcher must relist).
    pub fn changes_after(&self, rv: u64, resource: &str) -> Result<(Vec<Change>, u64), Compacted> {
        if rv < self.compacted_rv {
            return Err(Compacted);
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        let changes = self
            .history
            .range(start..)
            .filter(|c| c.resource == resource)
            .cloned()
            .collect();
        Ok((changes, self.rv.max(rv)))
    }
}

/// The history a watch asked for was compacted away: the watcher must relist (410 Gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compacted;

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy-free comparison agrees with setting the resourceVersion in a copy.
    #[test]
    fn unchanged_ignores_only_the_resource_version() {
        let copying = |current: &Value, next: &Value| {
            let mut next = next.clone();
            if let Some(rv) = current["metadata"].get("resourceVersion") {
                set_meta(&mut next, "resourceVersion", rv.clone());
            }
            next == *current
        };
        let current = json!({"kind": "A", "metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "1"}}, "spec": {"n": 1}});
        let cases = [
            current.clone(),
            json!({"kind": "A", "metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"n": 1}}),
            json!({"kind": "A", "metadata": {"name": "a", "resourceVersion": "6", "labels": {"x": "1"}}, "spec": {"n": 1}}),
            json!({"spec": {"n": 1}, "metadata": {"labels": {"x": "1"}, "resourceVersion": "7", "name": "a"}, "kind": "A"}),
            json!({"kind": "A", "metadata": {"name": "a", "labels": {"x": "2"}}, "spec": {"n": 1}}),
            json!({"kind": "A", "metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"n": 2}}),
            json!({"kind": "A", "metadata": {"name": "a", "labels": {"x": "1"}, "uid": "u"}, "spec": {"n": 1}}),
            json!({"kind": "A", "metadata": {"name": "a"}, "spec": {"n": 1}}),
            json!({"kind": "A", "metadata": {"name": "a", "labels": {"x": "1"}}}),
            json!({"kind": "A", "metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"n": 1}, "status": {}}),
            json!({"kind": "A", "metadata": "a", "spec": {"n": 1}}),
            json!("text"),
        ];
        for next in &cases {
            assert_eq!(
                Store::unchanged(&current, next),
                copying(&current, next),
                "{next}"
            );
        }
        let without_rv = json!({"kind": "A", "metadata": {"name": "a"}});
        for next in &cases {
            assert_eq!(
                Store::unchanged(&without_rv, next),
                copying(&without_rv, next),
                "{next}"
            );
        }
        assert!(Store::unchanged(&current, &cases[1]));
        assert!(Store::unchanged(&current, &cases[3]));
        assert!(!Store::unchanged(&current, &cases[4]));
    }
    use crate::world::apiserver::resources::registry;

    fn kind(plural: &str) -> ResourceKind {
        registry().into_iter().find(|k| k.plural == plural).unwrap()
    }

    fn app(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"project": "default"}})
    }

    /// A delete waits for finalizers: it marks the object (MODIFIED, deletionTimestamp,
    /// generation + 1), a second delete writes nothing, no update may add a finalizer, and
    /// the update that removes the last one deletes the object (DELETED).
    #[test]
    fn finalizers_hold_a_deletion_until_the_last_is_removed() {
        let mut store = Store::default();
        let k = kind("applications");
        let mut held = app("a");
        held["metadata"]["finalizers"] = json!(["example.com/hold", "example.com/other"]);
        store.create(&k, "ns", held, Duration::ZERO, 0).unwrap();
        let marked = store.delete(&k, "ns", "a", Duration::ZERO, 1_000).unwrap();
        assert_eq!(
            marked["metadata"]["deletionTimestamp"],
            json!("1970-01-01T00:00:01Z")
        );
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], json!(0));
        assert_eq!(marked["metadata"]["generation"], json!(2));
        let rv = store.rv();
        let again = store.delete(&k, "ns", "a", Duration::ZERO, 5_000).unwrap();
        assert_eq!(store.rv(), rv, "a second delete writes nothing");
        assert_eq!(
            again["metadata"]["deletionTimestamp"],
            json!("1970-01-01T00:00:01Z")
        );
        // No new finalizer on an object being deleted; an update cannot clear the timestamp.
        let refused = store
            .patch_merge(&k, "ns", "a", &json!({"metadata": {"finalizers": ["example.com/hold", "example.com/other", "example.com/late"]}}), false, Duration::ZERO)
            .unwrap_err();
        assert_eq!(refused.code, 422);
        assert!(refused.message.contains("no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/late\"}"), "{}", refused.message);
        let kept = store
            .patch_merge(&k, "ns", "a", &json!({"metadata": {"finalizers": ["example.com/hold"], "deletionTimestamp": null}}), false, Duration::ZERO)
            .unwrap();
        assert_eq!(
            kept["metadata"]["deletionTimestamp"],
            json!("1970-01-01T00:00:01Z")
        );
        let gone = store
            .patch_merge(
                &k,
                "ns",
                "a",
                &json!({"metadata": {"finalizers": null}}),
                false,
                Duration::ZERO,
            )
            .unwrap();
        assert!(
            store.get(&k, "ns", "a").is_err(),
            "the last finalizer's removal deletes it"
        );
        // The answer is the update's result at the last stored resourceVersion.
        assert!(gone["metadata"].get("finalizers").is_none());
        assert_eq!(
            gone["metadata"]["resourceVersion"],
            kept["metadata"]["resourceVersion"]
        );
        let (changes, _) = store.changes_after(0, &k.key()).unwrap();
        let kinds: Vec<ChangeType> = changes.iter().map(|c| c.change).collect();
        assert_eq!(
            kinds,
            [
                ChangeType::Added,
                ChangeType::Modified,
                ChangeType::Modified,
                ChangeType::Deleted
            ]
        );
        // Without finalizers a delete is immediate, and a create drops deletion fields.
        let mut marked = app("b");
        marked["metadata"]["deletionTimestamp"] = json!("2000-01-01T00:00:00Z");
        let created = store.create(&k, "ns", marked, Duration::ZERO, 0).unwrap();
        assert!(created["metadata"].get("deletionTimestamp").is_none());
        store.delete(&k, "ns", "b", Duration::ZERO, 0).unwrap();
        assert!(store.get(&k, "ns", "b").is_err());
    }

    #[test]
    fn a_write_answers_with_the_bytes_its_watchers_send() {
        let mut store = Store::default();
        let k = kind("applications");
        let created = store.create(&k, "ns", app("a"), Duration::ZERO, 0).unwrap();
        assert_eq!(created.json, serde_json::to_vec(&*created.object).unwrap());
        let (changes, _) = store.changes_after(0, &k.key()).unwrap();
        assert_eq!(changes[0].object_json(), created.json);
    }

    #[test]
    fn resource_versions_are_global_and_strictly_increasing_across_types() {
        let mut store = Store::default();
        let a = store
            .create(&kind("applications"), "ns", app("a"), Duration::ZERO, 0)
            .unwrap();
        let c = store
            .create(
                &kind("configmaps"),
                "ns",
                json!({"metadata": {"name": "c"}}),
                Duration::ZERO,
                0,
            )
            .unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], "1");
        assert_eq!(c["metadata"]["resourceVersion"], "2");
        assert_eq!(store.rv(), 2);
    }

    #[test]
    fn stale_put_conflicts_and_custom_resource_put_without_rv_is_invalid() {
        let mut store = Store::default();
        let k = kind("applications");
        let created = store.create(&k, "ns", app("a"), Duration::ZERO, 0).unwrap();
        let mut stale = (*created).clone();
        store
            .patch_merge(
                &k,
                "ns",
                "a",
                &json!({"spec": {"x": 1}}),
                false,
                Duration::ZERO,
            )
            .unwrap();
        stale["spec"]["y"] = json!(2);
        assert_eq!(
            store
                .replace(&k, "ns", "a", stale, false, Duration::ZERO)
                .unwrap_err()
                .code,
            409
        );
        let no_rv = app("a");
        assert_eq!(
            store
                .replace(&k, "ns", "a", no_rv, false, Duration::ZERO)
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            store
                .replace(&k, "ns", "missing", app("missing"), false, Duration::ZERO)
                .unwrap_err()
                .code,
            404
        );
        assert_eq!(
            store
                .create(&k, "ns", app("a"), Duration::ZERO, 0)
                .unwrap_err()
                .code,
            409
        );
    }

    #[test]
    fn status_bumps_generation_without_subresource_and_not_with_it() {
        let mut store = Store::default();
        let apps = kind("applications");
        store
            .create(&apps, "ns", app("a"), Duration::ZERO, 0)
            .unwrap();
        let out = store
            .patch_merge(
                &apps,
                "ns",
                "a",
                &json!({"status": {"sync": {"status": "Synced"}}}),
                false,
                Duration::ZERO,
            )
            .unwrap();
        assert_eq!(
            out["metadata"]["generation"], 2,
            "Application has no status subresource"
        );

        let rollouts = kind("rollouts");
        store
            .create(
                &rollouts,
                "ns",
                json!({"metadata": {"name": "r"}, "spec": {"replicas": 1}}),
                Duration::ZERO,
                0,
            )
            .unwrap();
        let ignored = store
            .patch_merge(
                &rollouts,
                "ns",
                "r",
                &json!({"status": {"phase": "Healthy"}}),
                false,
                Duration::ZERO,
            )
            .unwrap();
        assert!(
            ignored.get("status").is_none(),
            "main endpoint ignores status with a subresource"
        );
        let status = store
            .patch_merge(
                &rollouts,
                "ns",
                "r",
                &json!({"status": {"phase": "Healthy"}}),
                true,
                Duration::ZERO,
            )
            .unwrap();
        assert_eq!(status["status"]["phase"], "Healthy");
        assert_eq!(status["metadata"]["generation"], 1);
        let spec = store
            .patch_merge(
                &rollouts,
                "ns",
                "r",
                &json!({"spec": {"replicas": 3}}),
                false,
                Duration::ZERO,
            )
            .unwrap();
        assert_eq!(spec["metadata"]["generation"], 2);
    }

    #[test]
    fn pages_are_served_from_the_first_pages_snapshot() {
        let mut store = Store::default();
        let k = kind("configmaps");
        for i in 0..5 {
            store
                .create(
                    &k,
                    "ns",
                    json!({"metadata": {"name": format!("c{i}")}}),
                    Duration::ZERO,
                    0,
                )
                .unwrap();
        }
        let first = store.list(&k, &Filter::default(), Some(2), None).unwrap();
        store.delete(&k, "ns", "c3", Duration::ZERO, 0).unwrap();
        let second = store
            .list(
                &k,
                &Filter::default(),
                Some(2),
                first.continue_token.as_deref(),
            )
            .unwrap();
        let third = store
            .list(
                &k,
                &Filter::default(),
                Some(2),
                second.continue_token.as_deref(),
            )
            .unwrap();
        let names: Vec<_> = [first.items, second.items, third.items]
            .concat()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["c0", "c1", "c2", "c3", "c4"]);
        assert_eq!(first.rv, second.rv);
        assert!(third.continue_token.is_none());
    }

    #[test]
    fn a_lagging_list_shows_each_object_as_it_was_and_only_its_kind() {
        let mut store = Store::default();
        let (maps, secrets) = (kind("configmaps"), kind("secrets"));
        let body =
            |name: &str, v: u64| json!({"metadata": {"name": name}, "data": {"v": v.to_string()}});
        for (ns, name) in [("a", "c0"), ("a", "c1"), ("b", "c0")] {
            store
                .create(&maps, ns, body(name, 1), Duration::ZERO, 0)
                .unwrap();
            store
                .create(&secrets, ns, body(name, 1), Duration::ZERO, 0)
                .unwrap();
        }
        // Since the list's revision: one changed twice, one deleted, one created, and
        // another kind written.
        for v in [2, 3] {
            store
                .replace(&maps, "a", "c1", body("c1", v), false, Duration::ZERO)
                .unwrap();
        }
        store.delete(&maps, "b", "c0", Duration::ZERO, 0).unwrap();
        store
            .create(&maps, "a", body("c2", 1), Duration::ZERO, 0)
            .unwrap();
        store
            .create(&secrets, "a", body("s9", 1), Duration::ZERO, 0)
            .unwrap();
        let seen = |page: &ListPage| -> Vec<String> {
            page.items
                .iter()
                .map(|o| {
                    format!(
                        "{}/{}={}",
                        o["metadata"]["namespace"].as_str().unwrap_or(""),
                        o["metadata"]["name"].as_str().unwrap(),
                        o["data"]["v"].as_str().unwrap()
                    )
                })
                .collect()
        };
        let lagging = store
            .list_lagging(&maps, &Filter::default(), None, None, 5)
            .unwrap();
        assert_eq!(seen(&lagging), ["a/c0=1", "a/c1=1", "b/c0=1"]);
        let now = store.list(&maps, &Filter::default(), None, None).unwrap();
        assert_eq!(seen(&now), ["a/c0=1", "a/c1=3", "a/c2=1"]);
        // Paged from the lagging snapshot: the same objects, one at a time.
        let mut paged = Vec::new();
        let mut token = None;
        let first = store
            .list_lagging(&maps, &Filter::default(), Some(1), None, 5)
            .unwrap();
        paged.extend(seen(&first));
        token = first.continue_token.clone().or(token);
        while let Some(t) = token.take() {
            let page = store
                .list(&maps, &Filter::default(), Some(1), Some(&t))
                .unwrap();
            paged.extend(seen(&page));
            token = page.continue_token;
        }
        assert_eq!(paged, seen(&lagging));
    }

    #[test]
    fn compaction_expires_old_history_and_continue_tokens() {
        let mut store = Store::default();
        let k = kind("configmaps");
        for i in 0..2 {
            store
                .create(
                    &k,
                    "ns",
                    json!({"metadata": {"name": format!("c{i}")}}),
                    Duration::from_secs(i),
                    0,
                )
                .unwrap();
        }
        let first = store.list(&k, &Filter::default(), Some(1), None).unwrap();
        store
            .create(
                &k,
                "ns",
                json!({"metadata": {"name": "c2"}}),
                Duration::from_secs(2),
                0,
            )
            .unwrap();
        store
            .patch_merge(
                &k,
                "ns",
                "c0",
                &json!({"data": {"a": "b"}}),
                false,
                Duration::from_secs(100),
            )
            .unwrap();
        store.compact(Duration::from_secs(100), Duration::from_secs(10));
        assert!(store.changes_after(1, &k.key()).is_err());
        assert_eq!(store.changes_after(3, &k.key()).unwrap().0.len(), 1);
        assert_eq!(
            store
                .list(
                    &k,
                    &Filter::default(),
                    Some(1),
                    first.continue_token.as_deref()
                )
                .unwrap_err()
                .code,
            410
        );
    }
}
