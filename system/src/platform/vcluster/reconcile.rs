//! One virtual object's reconcile, as a decision over what the two clusters hold: no I/O,
//! so each rule is a unit test.
//!
//! | virtual | host copy | faithful (`syncer.go` `Reconcile`) | hardened |
//! |---|---|---|---|
//! | any | at the host name, not managed (marker label or name annotations wrong) | nothing: the object is never synced | refused (reported, retried) while the object exists; nothing once it is gone |
//! | any | at the host name, managed, but another object's (the `-x-` ambiguity) | as its own: the rows below | refused (reported, retried) |
//! | present | present, `object-uid` another uid | host copy deleted ("virtual object uid is different") | replaced (the same object re-created) |
//! | present | present, same uid | replaced when its content differs | the same |
//! | present | absent | created | created |
//! | absent | present | deleted ("virtual object was deleted") | deleted |
//!
//! Not modelled: vcluster's bidirectional merge (host-side edits flowing back up), label
//! translation into `vcluster.loft.sh/label-…` keys, and its syncing only the ConfigMaps
//! and Secrets a pod uses (here every one is synced, as with `sync.toHost.*.all: true`).

use std::collections::BTreeMap;

use kube::api::{DynamicObject, ObjectMeta};
use serde_json::{Map, Value};

use super::naming::{self, Identity};
use super::Kind;
use crate::core::Variant;

/// What the syncer must do on the host for one virtual object.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The two agree (or faithful ignores the host object).
    Nothing,
    /// Create this host copy.
    Create(DynamicObject),
    /// Replace the host copy with this one (it carries the read resourceVersion).
    Replace(DynamicObject),
    /// Delete the host object `name`, the copy of `copy_of`. `conflict`: it was another
    /// virtual object's copy (faithful only: the flaw).
    Delete {
        /// Host name.
        name: String,
        /// Whose copy its annotations say it is.
        copy_of: Identity,
        /// Why (vcluster's reason text).
        reason: &'static str,
        /// Whether the copy belongs to another virtual object than the one reconciled.
        conflict: bool,
    },
    /// hardened: the host name holds an object this reconcile does not own; leave it.
    Refuse {
        /// Whose it is, as its labels and annotations say (empty: nobody's).
        owner: Identity,
    },
}

/// What a reconcile is about: which vcluster, which kind, which virtual object.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// Which design decides.
    pub variant: Variant,
    /// The vcluster's name (its marker label and name suffix).
    pub vcluster: &'a str,
    /// The host namespace its copies live in.
    pub host_namespace: &'a str,
    /// ConfigMap or Secret.
    pub kind: Kind,
    /// The virtual object's namespace.
    pub namespace: &'a str,
    /// The virtual object's name.
    pub name: &'a str,
}

impl Subject<'_> {
    /// Where the virtual object's copy lives.
    pub fn host_name(&self) -> String {
        naming::host_name(self.variant, self.name, self.namespace, self.vcluster)
    }

    /// faithful's `IsManaged`: the marker label is this vcluster's, and translating the
    /// annotations' name gives the host object's name (the kind annotation, when set, is
    /// this kind).
    fn managed(&self, host: &DynamicObject) -> bool {
        let id = Identity::of(host);
        id.vcluster == self.vcluster
            && !id.name.is_empty()
            && naming::host_name(self.variant, &id.name, &id.namespace, self.vcluster)
                == host.metadata.name.clone().unwrap_or_default()
            && (id.kind.is_empty() || id.kind == self.kind.gvk())
    }

    /// Whether a host object is this very virtual object's copy.
    fn owns(&self, host: &DynamicObject) -> bool {
        let id = Identity::of(host);
        id.vcluster == self.vcluster
            && id.namespace == self.namespace
            && id.name == self.name
            && (id.kind.is_empty() || id.kind == self.kind.gvk())
    }

    /// The host copy of `virtual_`: its content, the identity labels and annotations.
    pub fn copy(&self, virtual_: &DynamicObject) -> DynamicObject {
        let labels = BTreeMap::from([
            (naming::MARKER_LABEL.to_string(), self.vcluster.to_string()),
            (
                naming::NAMESPACE_LABEL.to_string(),
                self.namespace.to_string(),
            ),
        ]);
        let annotations = BTreeMap::from([
            (naming::NAME_ANNOTATION.to_string(), self.name.to_string()),
            (
                naming::NAMESPACE_ANNOTATION.to_string(),
                self.namespace.to_string(),
            ),
            (
                naming::UID_ANNOTATION.to_string(),
                virtual_.metadata.uid.clone().unwrap_or_default(),
            ),
            (
                naming::KIND_ANNOTATION.to_string(),
                self.kind.gvk().to_string(),
            ),
        ]);
        DynamicObject {
            types: Some(self.kind.types()),
            metadata: ObjectMeta {
                name: Some(self.host_name()),
                namespace: Some(self.host_namespace.to_string()),
                labels: Some(labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            data: Value::Object(content(virtual_)),
        }
    }

    /// Decides what the host needs, from the virtual object and what the host name holds.
    pub fn decide(&self, virtual_: Option<&DynamicObject>, host: Option<&DynamicObject>) -> Action {
        let host = match (self.variant, host) {
            (_, None) => None,
            (Variant::Faithful, Some(h)) if !self.managed(h) => return Action::Nothing,
            // Another object's copy (or nobody's) where this object's would be: left alone,
            // and reported only while there is an object to sync.
            (Variant::Hardened, Some(h)) if virtual_.is_none() && !self.owns(h) => {
                return Action::Nothing
            }
            (Variant::Hardened, Some(h)) if !self.owns(h) => {
                return Action::Refuse {
                    owner: Identity::of(h),
                }
            }
            (_, Some(h)) => Some(h),
        };
        match (virtual_, host) {
            (None, None) => Action::Nothing,
            (Some(v), None) => Action::Create(self.copy(v)),
            (None, Some(h)) => self.delete(h, "virtual object was deleted"),
            (Some(v), Some(h)) => {
                let id = Identity::of(h);
                let uid = v.metadata.uid.clone().unwrap_or_default();
                let same_uid = id.uid.is_empty() || id.uid == uid;
                if self.variant == Variant::Faithful && !same_uid {
                    return self.delete(h, "virtual object uid is different");
                }
                if same_uid && content(v) == content(h) {
                    return Action::Nothing;
                }
                let mut copy = self.copy(v);
                copy.metadata.resource_version = h.metadata.resource_version.clone();
                Action::Replace(copy)
            }
        }
    }

    fn delete(&self, host: &DynamicObject, reason: &'static str) -> Action {
        let copy_of = Identity::of(host);
        Action::Delete {
            name: host.metadata.name.clone().unwrap_or_default(),
            conflict: copy_of.namespace != self.namespace || copy_of.name != self.name,
            copy_of,
            reason,
        }
    }
}

/// What a copy carries of its object: `data`, `binaryData`, `type`.
pub fn content(object: &DynamicObject) -> Map<String, Value> {
    ["data", "binaryData", "type"]
        .iter()
        .filter_map(|key| Some((key.to_string(), object.data.get(*key)?.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(namespace: &str, name: &str, uid: &str, value: &str) -> DynamicObject {
        DynamicObject {
            types: Some(Kind::Secret.types()),
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            data: json!({"data": {"password": value}}),
        }
    }

    fn subject(variant: Variant, namespace: &'static str, name: &'static str) -> Subject<'static> {
        Subject {
            variant,
            vcluster: "acme",
            host_namespace: "vc-acme",
            kind: Kind::Secret,
            namespace,
            name,
        }
    }

    /// A synced host copy of `virtual_` (with a resourceVersion, as read back).
    fn synced(subject: &Subject, virtual_: &DynamicObject) -> DynamicObject {
        let mut copy = subject.copy(virtual_);
        copy.metadata.resource_version = Some("7".into());
        copy
    }

    #[test]
    fn both_variants_create_update_and_delete_a_copy() {
        for variant in [Variant::Faithful, Variant::Hardened] {
            let s = subject(variant, "prod", "db");
            let v = secret("prod", "db", "u1", "cGFzcw==");
            let Action::Create(copy) = s.decide(Some(&v), None) else {
                panic!("{variant:?}: not created");
            };
            assert_eq!(copy.metadata.namespace.as_deref(), Some("vc-acme"));
            assert_eq!(Identity::of(&copy).object(), "prod/db");
            assert_eq!(copy.data["data"]["password"], "cGFzcw==");
            let host = synced(&s, &v);
            assert_eq!(s.decide(Some(&v), Some(&host)), Action::Nothing);
            let changed = secret("prod", "db", "u1", "bmV3");
            let Action::Replace(copy) = s.decide(Some(&changed), Some(&host)) else {
                panic!("{variant:?}: not replaced");
            };
            assert_eq!(copy.metadata.resource_version.as_deref(), Some("7"));
            assert!(matches!(
                s.decide(None, Some(&host)),
                Action::Delete {
                    conflict: false,
                    ..
                }
            ));
        }
    }

    /// The flaw: faithful takes another namespace's copy for its own object's and deletes
    /// it; hardened's names differ, and a foreign object at its name is refused.
    #[test]
    fn faithful_deletes_another_objects_copy_and_hardened_refuses_to() {
        let a = secret("prod", "db-x-team", "uid-a", "YQ==");
        let b = secret("team-x-prod", "db", "uid-b", "Yg==");
        let sa = subject(Variant::Faithful, "prod", "db-x-team");
        let sb = subject(Variant::Faithful, "team-x-prod", "db");
        assert_eq!(sa.host_name(), sb.host_name());
        let a_copy = synced(&sa, &a);
        match sb.decide(Some(&b), Some(&a_copy)) {
            Action::Delete {
                conflict: true,
                copy_of,
                reason,
                ..
            } => {
                assert_eq!(copy_of.object(), "prod/db-x-team");
                assert_eq!(reason, "virtual object uid is different");
            }
            other => panic!("faithful: {other:?}"),
        }
        // B deleted: its reconcile deletes A's copy too.
        assert!(matches!(
            sb.decide(None, Some(&a_copy)),
            Action::Delete { conflict: true, .. }
        ));

        let ha = subject(Variant::Hardened, "prod", "db-x-team");
        let hb = subject(Variant::Hardened, "team-x-prod", "db");
        assert_ne!(ha.host_name(), hb.host_name());
        // Even at one name (a digest collision, or an object placed there), never touched.
        let a_copy = synced(&ha, &a);
        let Action::Refuse { owner } = hb.decide(Some(&b), Some(&a_copy)) else {
            panic!("hardened touched another object's copy");
        };
        assert_eq!(owner.object(), "prod/db-x-team");
        // B gone: nothing to sync, nothing to report, A's copy stays.
        assert_eq!(hb.decide(None, Some(&a_copy)), Action::Nothing);
    }

    /// An object nobody synced at the host name: faithful never syncs the virtual object,
    /// hardened says so.
    #[test]
    fn an_unmanaged_object_at_the_host_name() {
        let v = secret("prod", "db", "u1", "YQ==");
        for variant in [Variant::Faithful, Variant::Hardened] {
            let s = subject(variant, "prod", "db");
            let mut foreign = secret("vc-acme", &s.host_name(), "u9", "eA==");
            foreign.metadata.resource_version = Some("3".into());
            let action = s.decide(Some(&v), Some(&foreign));
            match variant {
                Variant::Faithful => assert_eq!(action, Action::Nothing),
                Variant::Hardened => assert!(matches!(action, Action::Refuse { .. })),
            }
        }
    }

    /// A virtual object deleted and created again (a new uid): faithful deletes the old
    /// copy first (then creates), hardened replaces it in place.
    #[test]
    fn a_recreated_object() {
        let old = secret("prod", "db", "u1", "YQ==");
        let new = secret("prod", "db", "u2", "YQ==");
        let f = subject(Variant::Faithful, "prod", "db");
        assert!(matches!(
            f.decide(Some(&new), Some(&synced(&f, &old))),
            Action::Delete {
                conflict: false,
                ..
            }
        ));
        let h = subject(Variant::Hardened, "prod", "db");
        let Action::Replace(copy) = h.decide(Some(&new), Some(&synced(&h, &old))) else {
            panic!("hardened: not replaced");
        };
        assert_eq!(Identity::of(&copy).uid, "u2");
    }
}
