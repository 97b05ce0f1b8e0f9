//! The store's side of a Namespace's lifecycle (see [`super::super::namespaces`]): its
//! DELETE, its `finalize` subresource and the namespace stand-in's content removal.

use std::time::Duration;

use serde_json::{json, Value};

use super::super::error::ApiError;
use super::super::namespaces::{has_spec_finalizers, FINALIZER, IMMORTAL};
use super::super::resources::ResourceKind;
use super::{check_body_name, has_finalizers, rfc3339, Store, Written};

/// Whether `kind` is the core Namespace type.
pub fn is_namespace(kind: &ResourceKind) -> bool {
    !kind.custom && kind.kind == "Namespace"
}

impl Store {
    /// DELETE of a Namespace (the namespace registry's `Delete`): the first marks it
    /// (`deletionTimestamp`, phase `Terminating`: MODIFIED) and answers it; later ones answer
    /// it unchanged while `spec.finalizers` lists anything; after that the generic deletion
    /// (metadata finalizers hold it, with `deletionGracePeriodSeconds` 0). The answer is
    /// always the object, the last stored one once it is gone.
    pub(super) fn delete_namespace(
        &mut self,
        kind: &ResourceKind,
        name: &str,
        now: Duration,
        unix_millis: u64,
    ) -> Result<Written, ApiError> {
        if IMMORTAL.contains(&name) {
            return Err(ApiError::namespace_immortal(name));
        }
        let key = Self::key(kind, "", name);
        let Some(current) = self.objects.get(&key).cloned() else {
            return Err(ApiError::not_found(kind, name));
        };
        if current["metadata"].get("deletionTimestamp").is_none() {
            let mut next = (*current).clone();
            next["metadata"]["deletionTimestamp"] = json!(rfc3339(unix_millis));
            next["status"]["phase"] = json!("Terminating");
            return Ok(self.commit(kind, key, Some(next), now));
        }
        if has_spec_finalizers(&current) {
            return Ok(Written::of(current));
        }
        if has_finalizers(&current) {
            if current["metadata"]
                .get("deletionGracePeriodSeconds")
                .is_some()
            {
                return Ok(Written::of(current));
            }
            let mut next = (*current).clone();
            next["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            return Ok(self.commit(kind, key, Some(next), now));
        }
        Ok(self.commit(kind, key, None, now))
    }

    /// PUT of `/api/v1/namespaces/<name>/finalize`: only `spec.finalizers` is taken from the
    /// body. A terminating Namespace left with no finalizers of either kind is deleted (the
    /// answer is the update's result, as `ShouldDeleteNamespaceDuringUpdate`).
    pub fn finalize_namespace(
        &mut self,
        kind: &ResourceKind,
        name: &str,
        body: &Value,
        now: Duration,
    ) -> Result<Written, ApiError> {
        check_body_name(body, name)?;
        let key = Self::key(kind, "", name);
        let current = self
            .objects
            .get(&key)
            .map(|o| (**o).clone())
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        Self::check_precondition(kind, &current, body)?;
        let mut next = current.clone();
        match body["spec"].get("finalizers") {
            Some(finalizers) if !finalizers.is_null() => {
                next["spec"]["finalizers"] = finalizers.clone();
            }
            _ => {
                if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.shift_remove("finalizers");
                }
            }
        }
        if next["spec"]["finalizers"]
            .as_array()
            .is_some_and(Vec::is_empty)
        {
            next["spec"]
                .as_object_mut()
                .map(|spec| spec.shift_remove("finalizers"));
        }
        super::super::validation::write(kind, name, "", &next, false)?;
        if current["metadata"].get("deletionTimestamp").is_some()
            && !has_spec_finalizers(&next)
            && !has_finalizers(&next)
        {
            return Ok(self.delete_updated(kind, key, &current, next, now));
        }
        if Self::unchanged(&current, &next) {
            return Ok(Written::of(std::sync::Arc::new(current)));
        }
        Ok(self.commit(kind, key, Some(next), now))
    }

    /// The namespaces that wait for the namespace controller: marked for deletion with the
    /// `kubernetes` finalizer still in `spec.finalizers`, in name order.
    pub fn terminating_namespaces(&self, kinds: &[ResourceKind]) -> Vec<String> {
        let Some(ns_kind) = kinds.iter().find(|k| is_namespace(k)) else {
            return Vec::new();
        };
        let key = ns_kind.key();
        self.objects
            .iter()
            .filter(|(k, object)| k.0 == key && waits_for_controller(object))
            .map(|(k, _)| k.2.clone())
            .collect()
    }

    /// One pass of the namespace stand-in over `namespace`: deletes every object in it (those
    /// with finalizers are marked), and once none is left removes the `kubernetes` finalizer.
    /// True when there is nothing more to do: the Namespace is gone, not terminating, or no
    /// longer lists the finalizer.
    pub fn remove_namespace_content(
        &mut self,
        kinds: &[ResourceKind],
        namespace: &str,
        now: Duration,
        unix_millis: u64,
    ) -> bool {
        let Some(ns_kind) = kinds.iter().find(|k| is_namespace(k)) else {
            return true;
        };
        let key = Self::key(ns_kind, "", namespace);
        let Some(current) = self.objects.get(&key).cloned() else {
            return true;
        };
        if !waits_for_controller(&current) {
            return true;
        }
        let content: Vec<(ResourceKind, String, bool)> = self
            .objects
            .iter()
            .filter(|(key, _)| key.1 == namespace)
            .filter_map(|(key, object)| {
                let kind = kinds.iter().find(|k| k.namespaced && k.key() == key.0)?;
                let marked = object["metadata"].get("deletionTimestamp").is_some();
                Some((kind.clone(), key.2.clone(), marked))
            })
            .collect();
        if !content.is_empty() {
            for (kind, name, marked) in content {
                if !marked {
                    let _ = self.delete(&kind, namespace, &name, now, unix_millis);
                }
            }
            return false;
        }
        let mut body = (*current).clone();
        if let Some(finalizers) = body["spec"]["finalizers"].as_array_mut() {
            finalizers.retain(|f| f != FINALIZER);
        }
        let _ = self.finalize_namespace(ns_kind, namespace, &body, now);
        true
    }
}

/// Whether a Namespace is terminating and still holds the namespace controller's finalizer.
fn waits_for_controller(namespace: &Value) -> bool {
    namespace["metadata"].get("deletionTimestamp").is_some()
        && namespace["spec"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}
