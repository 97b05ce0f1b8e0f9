//! Where a virtual object lives on the host cluster, and whose a host object is.
//!
//! faithful follows vcluster's single-namespace translator (`loft-sh/vcluster@4876675`,
//! `pkg/util/translate/single_namespace.go` and `translate.go`): the host name is
//! `SafeConcatName(name, "x", namespace, "x", vcluster)`, the parts joined with `-`, cut to
//! 52 characters plus `-` and 10 hex digits of the SHA-256 of the whole when longer than 63.
//! Names and namespaces may themselves contain `-x-`, so two objects can share a host name:
//! `db-x-team` of namespace `prod` and `db` of namespace `team-x-prod` are both
//! `db-x-team-x-prod-x-<vcluster>`. Its ownership check (`IsManaged`) reads the name back
//! from the annotations and translates it again, which the other object passes too.
//!
//! hardened keeps the readable prefix and always appends a digest of the three parts with
//! their lengths, so distinct (vcluster, namespace, name) get distinct host names (short of
//! a 40-bit digest collision, which the syncer's ownership check turns into a refusal).

use std::collections::BTreeMap;

use kube::api::DynamicObject;

use crate::core::Variant;

/// The vcluster that synced the object (`MarkerLabel`).
pub const MARKER_LABEL: &str = "vcluster.loft.sh/managed-by";
/// The virtual namespace of the object (`NamespaceLabel`).
pub const NAMESPACE_LABEL: &str = "vcluster.loft.sh/namespace";
/// The virtual object's name (`NameAnnotation`).
pub const NAME_ANNOTATION: &str = "vcluster.loft.sh/object-name";
/// The virtual object's namespace (`NamespaceAnnotation`).
pub const NAMESPACE_ANNOTATION: &str = "vcluster.loft.sh/object-namespace";
/// The virtual object's uid (`UIDAnnotation`).
pub const UID_ANNOTATION: &str = "vcluster.loft.sh/object-uid";
/// The virtual object's kind, as Go prints a GVK (`KindAnnotation`): `/v1, Kind=Secret`.
pub const KIND_ANNOTATION: &str = "vcluster.loft.sh/object-kind";

/// vcluster's `SafeConcatName`: the parts joined with `-`; longer than 63 → the first 52
/// characters, `-`, the first 10 hex digits of the SHA-256 of the whole, with `.-` → `-`.
pub fn safe_concat_name(parts: &[&str]) -> String {
    let full = parts.join("-");
    if full.len() <= 63 {
        return full;
    }
    let cut = char_prefix(&full, 52);
    format!("{cut}-{}", hex10(full.as_bytes())).replace(".-", "-")
}

/// The host name of virtual object `namespace/name` of vcluster `vcluster`.
pub fn host_name(variant: Variant, name: &str, namespace: &str, vcluster: &str) -> String {
    match variant {
        Variant::Faithful => safe_concat_name(&[name, "x", namespace, "x", vcluster]),
        Variant::Hardened => {
            // Lengths make the encoding unambiguous: `a-x`+`b` and `a`+`x-b` differ.
            let identity = format!(
                "{}:{name}/{}:{namespace}/{}:{vcluster}",
                name.len(),
                namespace.len(),
                vcluster.len()
            );
            let readable = [name, "x", namespace, "x", vcluster].join("-");
            let prefix = char_prefix(&readable, 52)
                .trim_end_matches(['-', '.'])
                .to_string();
            format!("{prefix}-{}", hex10(identity.as_bytes()))
        }
    }
}

/// Whose copy a host object is, as its labels and annotations say.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Identity {
    /// `MarkerLabel`: the vcluster that synced it.
    pub vcluster: String,
    /// The virtual object's namespace.
    pub namespace: String,
    /// The virtual object's name.
    pub name: String,
    /// The virtual object's uid.
    pub uid: String,
    /// The kind annotation (`/v1, Kind=Secret`).
    pub kind: String,
}

impl Identity {
    /// Reads a host object's labels and annotations.
    pub fn of(host: &DynamicObject) -> Identity {
        let label = |key: &str| text(host.metadata.labels.as_ref(), key);
        let annotation = |key: &str| text(host.metadata.annotations.as_ref(), key);
        Identity {
            vcluster: label(MARKER_LABEL),
            namespace: annotation(NAMESPACE_ANNOTATION),
            name: annotation(NAME_ANNOTATION),
            uid: annotation(UID_ANNOTATION),
            kind: annotation(KIND_ANNOTATION),
        }
    }

    /// `namespace/name` of the virtual object it names.
    pub fn object(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

fn text(map: Option<&BTreeMap<String, String>>, key: &str) -> String {
    map.and_then(|m| m.get(key)).cloned().unwrap_or_default()
}

/// The first `n` characters (names are ASCII; a multi-byte one is never split).
fn char_prefix(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// The first 10 hex digits of the SHA-256 of `bytes`.
fn hex10(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref()[..5]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// faithful's names are vcluster's: short names joined, long ones cut and hashed.
    #[test]
    fn faithful_names_follow_vclusters_safe_concat_name() {
        assert_eq!(
            host_name(Variant::Faithful, "db", "prod", "acme"),
            "db-x-prod-x-acme"
        );
        let long = "a".repeat(60);
        let name = host_name(Variant::Faithful, &long, "prod", "acme");
        assert_eq!(name.len(), 63);
        assert!(name.starts_with(&"a".repeat(52)), "{name}");
        // sha256("aaa…a-x-prod-x-acme")[..10 hex], computed independently of this module.
        let full = format!("{long}-x-prod-x-acme");
        let digest = ring::digest::digest(&ring::digest::SHA256, full.as_bytes());
        let hex: String = digest.as_ref()[..5]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(name, format!("{}-{hex}", "a".repeat(52)));
    }

    /// The flaw faithful keeps: two objects of one vcluster share a host name.
    #[test]
    fn faithful_names_collide_across_namespaces_and_hardened_names_do_not() {
        let pairs = [
            (("db-x-team", "prod"), ("db", "team-x-prod")),
            (("a-x", "b"), ("a", "x-b")),
        ];
        for ((n1, ns1), (n2, ns2)) in pairs {
            assert_eq!(
                host_name(Variant::Faithful, n1, ns1, "acme"),
                host_name(Variant::Faithful, n2, ns2, "acme"),
            );
            assert_ne!(
                host_name(Variant::Hardened, n1, ns1, "acme"),
                host_name(Variant::Hardened, n2, ns2, "acme"),
            );
        }
    }

    /// hardened's names are valid DNS labels of at most 63 characters, and stable.
    #[test]
    fn hardened_names_are_dns_labels() {
        for (name, namespace) in [("db", "prod"), (&*"n".repeat(70), "ns"), ("a.b-", "c")] {
            let host = host_name(Variant::Hardened, name, namespace, "acme");
            assert!(host.len() <= 63, "{host}");
            assert!(!host.starts_with('-') && !host.ends_with('-'), "{host}");
            assert_eq!(host, host_name(Variant::Hardened, name, namespace, "acme"));
        }
        assert!(host_name(Variant::Hardened, "db", "prod", "acme").starts_with("db-x-prod-x-acme-"));
    }
}
