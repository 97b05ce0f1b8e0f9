//! OpenAPI v3 and v2 documents. They are the real kube-apiserver v1.36's, cut down to the
//! types this server serves and committed under `fixtures/openapi/` by the kubectl
//! conformance suite (which also checks them against the real server). Clients read them
//! for field validation support (`fieldValidation` on PATCH) and for strategic merge patch
//! metadata; this server reads the same schemas for its own strategic merge patches
//! ([`super::strategic`]). v2 is served as JSON only: a client asking for protobuf gets 406.

use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use super::resources::ResourceKind;

/// `(group version path, fixture file, document)` of every served OpenAPI v3 document.
pub const DOCUMENTS: [(&str, &str, &str); 7] = [
    (
        "api/v1",
        "v3-api-v1.json",
        include_str!("../../../../fixtures/openapi/v3-api-v1.json"),
    ),
    (
        "apis/apps/v1",
        "v3-apis-apps-v1.json",
        include_str!("../../../../fixtures/openapi/v3-apis-apps-v1.json"),
    ),
    (
        "apis/events.k8s.io/v1",
        "v3-apis-events.k8s.io-v1.json",
        include_str!("../../../../fixtures/openapi/v3-apis-events.k8s.io-v1.json"),
    ),
    (
        "apis/coordination.k8s.io/v1",
        "v3-apis-coordination.k8s.io-v1.json",
        include_str!("../../../../fixtures/openapi/v3-apis-coordination.k8s.io-v1.json"),
    ),
    (
        "apis/argoproj.io/v1alpha1",
        "v3-apis-argoproj.io-v1alpha1.json",
        include_str!("../../../../fixtures/openapi/v3-apis-argoproj.io-v1alpha1.json"),
    ),
    (
        "apis/codefresh.io/v1beta1",
        "v3-apis-codefresh.io-v1beta1.json",
        include_str!("../../../../fixtures/openapi/v3-apis-codefresh.io-v1beta1.json"),
    ),
    (
        "apis/codefresh.io/v1beta2",
        "v3-apis-codefresh.io-v1beta2.json",
        include_str!("../../../../fixtures/openapi/v3-apis-codefresh.io-v1beta2.json"),
    ),
];

/// The fixture file of the OpenAPI v2 document.
pub const V2_FILE: &str = "v2.json";
const V2: &str = include_str!("../../../../fixtures/openapi/v2.json");

/// FNV-1a of a document: the `hash` its root entry links with (clients cache by URL).
fn hash(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016X}")
}

/// `GET /openapi/v3`: where each group version's document is.
pub fn root() -> Value {
    let paths: Map<String, Value> = DOCUMENTS
        .iter()
        .map(|(gv, _, text)| {
            let url = format!("/openapi/v3/{gv}?hash={}", hash(text));
            (gv.to_string(), json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `GET /openapi/v3/<group version>`: the document's text, if served.
pub fn v3(group_version: &str) -> Option<&'static str> {
    DOCUMENTS
        .iter()
        .find(|(gv, _, _)| *gv == group_version)
        .map(|(_, _, text)| *text)
}

/// `GET /openapi/v2`.
pub fn v2() -> &'static str {
    V2
}

/// The parsed v3 documents (parsed once, on the first strategic merge patch).
fn parsed() -> &'static [(String, Value)] {
    static PARSED: OnceLock<Vec<(String, Value)>> = OnceLock::new();
    PARSED.get_or_init(|| {
        DOCUMENTS
            .iter()
            .map(|(gv, file, text)| {
                let document = serde_json::from_str(text)
                    .unwrap_or_else(|e| panic!("fixtures/openapi/{file}: {e}"));
                (gv.to_string(), document)
            })
            .collect()
    })
}

/// A type's schema and the schemas its `$ref`s name, if its document has one.
pub fn schema_of(kind: &ResourceKind) -> Option<Schema<'static>> {
    let group_version = if kind.group.is_empty() {
        format!("api/{}", kind.version)
    } else {
        format!("apis/{}/{}", kind.group, kind.version)
    };
    let (_, document) = parsed().iter().find(|(gv, _)| *gv == group_version)?;
    let schemas = document["components"]["schemas"].as_object()?;
    let schema = schemas.values().find(|schema| {
        schema["x-kubernetes-group-version-kind"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|gvk| {
                gvk["group"] == kind.group.as_str()
                    && gvk["version"] == kind.version.as_str()
                    && gvk["kind"] == kind.kind.as_str()
            })
    })?;
    Some(Schema {
        node: schema,
        schemas,
    })
}

/// A position in a schema, with the named schemas `$ref`s resolve against.
#[derive(Clone, Copy)]
pub struct Schema<'a> {
    node: &'a Value,
    schemas: &'a Map<String, Value>,
}

impl<'a> Schema<'a> {
    /// Follows `$ref` and a single-element `allOf` (how v3 documents wrap references).
    fn resolved(self) -> Schema<'a> {
        let mut node = self.node;
        for _ in 0..8 {
            let reference = node["$ref"]
                .as_str()
                .or_else(|| node["allOf"][0]["$ref"].as_str());
            match reference
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .and_then(|name| self.schemas.get(name))
            {
                Some(next) => node = next,
                None => break,
            }
        }
        Schema {
            node,
            schemas: self.schemas,
        }
    }

    /// The schema of property `key`, and its patch strategy and merge key.
    pub fn field(self, key: &str) -> Option<(Schema<'a>, PatchMeta)> {
        let property = self.resolved().node["properties"].get(key)?;
        let meta = PatchMeta {
            strategy: property["x-kubernetes-patch-strategy"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            merge_key: property["x-kubernetes-patch-merge-key"]
                .as_str()
                .map(str::to_string),
        };
        Some((
            Schema {
                node: property,
                schemas: self.schemas,
            },
            meta,
        ))
    }

    /// The schema of a list's items.
    pub fn items(self) -> Schema<'a> {
        let node = &self.resolved().node["items"];
        Schema {
            node,
            schemas: self.schemas,
        }
    }
}

/// How a field merges in a strategic merge patch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchMeta {
    /// `x-kubernetes-patch-strategy`: `merge`, `retainKeys`, `merge,retainKeys`, or empty (replace).
    pub strategy: String,
    /// `x-kubernetes-patch-merge-key` of a list of objects merged by key.
    pub merge_key: Option<String>,
}

impl PatchMeta {
    /// Whether lists under this field merge rather than replace.
    pub fn merges(&self) -> bool {
        self.strategy.split(',').any(|s| s == "merge")
    }
}
