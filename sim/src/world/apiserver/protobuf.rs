//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! which kubectl's typed clients send for built-in types (`kubectl create configmap`,
//! `kubectl create secret`, `kubectl create namespace`). The body is the magic `k8s\0` and a `runtime.Unknown`
//! envelope around the object's message (`k8s.io/api/core/v1/generated.proto`). Decoded
//! here into the JSON object the rest of the server handles, for the built-in types
//! kubectl creates this way: ConfigMap, Secret and Namespace. Anything else is 415, as a custom
//! resource is on the real server. Answers are JSON, which these clients also accept.

use base64::Engine;
use serde_json::{json, Map, Value};

use super::error::ApiError;

/// The media type of a protobuf body.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be read (the server answers 400 with it).
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The body does not start with `k8s\0`.
    #[error("the body does not start with the protobuf magic number")]
    Magic,
    /// A field ran past the end of the body, or a varint did not end.
    #[error("truncated protobuf message")]
    Truncated,
    /// A wire type this decoder does not know (groups, or garbage).
    #[error("unsupported protobuf wire type {0}")]
    WireType(u64),
    /// Text that is not UTF-8.
    #[error("field {0} is not valid UTF-8")]
    Utf8(u64),
}

/// One field of a message: its number and value.
enum Field<'a> {
    Varint(u64, u64),
    Bytes(u64, &'a [u8]),
}

/// The fields of one message, in order.
fn fields(mut bytes: &[u8]) -> Result<Vec<Field<'_>>, DecodeError> {
    fn varint(bytes: &mut &[u8]) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first().ok_or(DecodeError::Truncated)?;
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::Truncated)
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let tag = varint(&mut bytes)?;
        let (number, wire) = (tag >> 3, tag & 7);
        match wire {
            0 => out.push(Field::Varint(number, varint(&mut bytes)?)),
            1 | 5 => {
                let width = if wire == 1 { 8 } else { 4 };
                bytes = bytes.get(width..).ok_or(DecodeError::Truncated)?;
            }
            2 => {
                let length =
                    usize::try_from(varint(&mut bytes)?).map_err(|_| DecodeError::Truncated)?;
                let value = bytes.get(..length).ok_or(DecodeError::Truncated)?;
                bytes = &bytes[length..];
                out.push(Field::Bytes(number, value));
            }
            other => return Err(DecodeError::WireType(other)),
        }
    }
    Ok(out)
}

fn text(number: u64, bytes: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Utf8(number))
}

/// A `map<string, V>` entry: `(key, value bytes)`.
fn entry(bytes: &[u8]) -> Result<(String, &[u8]), DecodeError> {
    let mut key = String::new();
    let mut value: &[u8] = &[];
    for field in fields(bytes)? {
        match field {
            Field::Bytes(1, k) => key = text(1, k)?,
            Field::Bytes(2, v) => value = v,
            _ => {}
        }
    }
    Ok((key, value))
}

/// `metav1.Time` as RFC 3339.
fn time(bytes: &[u8]) -> Result<Value, DecodeError> {
    let seconds = fields(bytes)?.into_iter().find_map(|f| match f {
        Field::Varint(1, s) => Some(s),
        _ => None,
    });
    // A time before 1970 arrives as a huge varint (a negative int64): the server sets
    // creationTimestamp itself anyway, so anything out of range is dropped.
    let millis = seconds
        .and_then(|s| i64::try_from(s).ok())
        .and_then(|s| s.checked_mul(1000))
        .and_then(|ms| u64::try_from(ms).ok());
    Ok(millis.map_or(Value::Null, |ms| {
        json!(orrery_system::core::time::rfc3339(ms))
    }))
}

fn object_meta(bytes: &[u8]) -> Result<Value, DecodeError> {
    let mut meta = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = Vec::new();
    let mut owners = Vec::new();
    for field in fields(bytes)? {
        match field {
            // Go's encoder writes every string and struct field, set or not: empty means unset.
            Field::Bytes(_, []) | Field::Varint(_, 0) => {}
            Field::Bytes(n @ (1 | 2 | 3 | 5 | 6), v) => {
                let name = [
                    "",
                    "name",
                    "generateName",
                    "namespace",
                    "",
                    "uid",
                    "resourceVersion",
                ][n as usize];
                meta.insert(name.into(), json!(text(n, v)?));
            }
            Field::Varint(7, g) => {
                meta.insert("generation".into(), json!(g as i64));
            }
            Field::Bytes(8, v) => {
                let at = time(v)?;
                if !at.is_null() {
                    meta.insert("creationTimestamp".into(), at);
                }
            }
            Field::Bytes(11, v) => {
                let (k, v) = entry(v)?;
                labels.insert(k, json!(text(11, v)?));
            }
            Field::Bytes(12, v) => {
                let (k, v) = entry(v)?;
                annotations.insert(k, json!(text(12, v)?));
            }
            Field::Bytes(13, v) => owners.push(owner_reference(v)?),
            Field::Bytes(14, v) => finalizers.push(json!(text(14, v)?)),
            _ => {} // selfLink, deletion fields and managedFields are the server's to set
        }
    }
    for (name, map) in [("labels", labels), ("annotations", annotations)] {
        if !map.is_empty() {
            meta.insert(name.into(), Value::Object(map));
        }
    }
    if !owners.is_empty() {
        meta.insert("ownerReferences".into(), Value::Array(owners));
    }
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(meta))
}

fn owner_reference(bytes: &[u8]) -> Result<Value, DecodeError> {
    let mut owner = Map::new();
    for field in fields(bytes)? {
        match field {
            Field::Bytes(n @ (1 | 3 | 4 | 5), v) => {
                let name = ["", "kind", "", "name", "uid", "apiVersion"][n as usize];
                owner.insert(name.into(), json!(text(n, v)?));
            }
            Field::Varint(6, b) => {
                owner.insert("controller".into(), json!(b != 0));
            }
            Field::Varint(7, b) => {
                owner.insert("blockOwnerDeletion".into(), json!(b != 0));
            }
            _ => {}
        }
    }
    Ok(Value::Object(owner))
}

/// A ConfigMap, Secret or Namespace message as its JSON object (`binary` marks the map fields whose
/// values are bytes, which JSON carries base64-encoded).
fn object(api_version: &str, kind: &str, bytes: &[u8]) -> Result<Option<Value>, DecodeError> {
    let b64 = |v: &[u8]| json!(base64::engine::general_purpose::STANDARD.encode(v));
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!(api_version));
    object.insert("kind".into(), json!(kind));
    let mut maps: [(&str, Map<String, Value>); 3] = [
        ("data", Map::new()),
        ("binaryData", Map::new()),
        ("stringData", Map::new()),
    ];
    for field in fields(bytes)? {
        match (kind, field) {
            (_, Field::Bytes(1, v)) => {
                object.insert("metadata".into(), object_meta(v)?);
            }
            ("ConfigMap", Field::Bytes(2, v)) => {
                let (k, v) = entry(v)?;
                maps[0].1.insert(k, json!(text(2, v)?));
            }
            ("ConfigMap", Field::Bytes(3, v)) => {
                let (k, v) = entry(v)?;
                maps[1].1.insert(k, b64(v));
            }
            ("ConfigMap", Field::Varint(4, b)) | ("Secret", Field::Varint(5, b)) => {
                object.insert("immutable".into(), json!(b != 0));
            }
            ("Secret", Field::Bytes(2, v)) => {
                let (k, v) = entry(v)?;
                maps[0].1.insert(k, b64(v));
            }
            ("Secret", Field::Bytes(3, v)) if !v.is_empty() => {
                object.insert("type".into(), json!(text(3, v)?));
            }
            ("Secret", Field::Bytes(4, v)) => {
                let (k, v) = entry(v)?;
                maps[2].1.insert(k, json!(text(4, v)?));
            }
            // NamespaceSpec { repeated string finalizers = 1 }, NamespaceStatus { phase = 1 }.
            ("Namespace", Field::Bytes(2, v)) => {
                let mut finalizers = Vec::new();
                for f in fields(v)? {
                    if let Field::Bytes(1, name) = f {
                        finalizers.push(json!(text(1, name)?));
                    }
                }
                object.insert("spec".into(), json!({"finalizers": finalizers}));
            }
            ("Namespace", Field::Bytes(3, v)) => {
                let mut status = Map::new();
                for f in fields(v)? {
                    if let Field::Bytes(1, phase) = f {
                        status.insert("phase".into(), json!(text(1, phase)?));
                    }
                }
                object.insert("status".into(), Value::Object(status));
            }
            _ => {}
        }
    }
    for (name, map) in maps {
        if !map.is_empty() {
            object.insert(name.into(), Value::Object(map));
        }
    }
    Ok(Some(Value::Object(object)))
}

/// Decodes a protobuf request body into a JSON object, if it is a type this server reads
/// in protobuf (`Ok(None)` otherwise: the caller answers 415).
pub fn decode(body: &[u8]) -> Result<Option<Value>, DecodeError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(DecodeError::Magic)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for field in fields(envelope)? {
        match field {
            Field::Bytes(1, type_meta) => {
                for f in fields(type_meta)? {
                    match f {
                        Field::Bytes(1, v) => api_version = text(1, v)?,
                        Field::Bytes(2, v) => kind = text(2, v)?,
                        _ => {}
                    }
                }
            }
            Field::Bytes(2, v) => raw = v,
            _ => {}
        }
    }
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap" | "Secret" | "Namespace") => object(&api_version, &kind, raw),
        _ => Ok(None),
    }
}

/// Reads a protobuf body sent to an endpoint of `kind` as the server does: 415 for a type
/// it cannot take this way (every custom resource), 400 for a body that is not a message
/// or is a message of another kind.
pub fn read(body: &[u8], content_type: &str, kind: &str, custom: bool) -> Result<Value, ApiError> {
    if custom {
        return Err(ApiError::unsupported_media_type(content_type));
    }
    match decode(body) {
        Ok(Some(object)) if object["kind"] == kind => Ok(object),
        Ok(Some(object)) => Err(ApiError::bad_request(&format!(
            "the object provided is unrecognized (must be of type {kind}): {} is not a {kind}",
            object["kind"].as_str().unwrap_or_default()
        ))),
        Ok(None) => Err(ApiError::unsupported_media_type(content_type)),
        Err(e) => Err(ApiError::bad_request(&format!(
            "the body of the request could not be decoded as protobuf: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Protobuf encoding of length-delimited field `number` holding `bytes`.
    fn bytes_field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    fn map_entry(number: u8, key: &str, value: &[u8]) -> Vec<u8> {
        let entry = [bytes_field(1, key.as_bytes()), bytes_field(2, value)].concat();
        bytes_field(number, &entry)
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [
            bytes_field(1, api_version.as_bytes()),
            bytes_field(2, kind.as_bytes()),
        ]
        .concat();
        [
            MAGIC.to_vec(),
            bytes_field(1, &type_meta),
            bytes_field(2, raw),
        ]
        .concat()
    }

    #[test]
    fn a_configmap_and_a_secret_decode_to_their_json_objects() {
        let meta = [bytes_field(1, b"c"), map_entry(11, "app", b"x")].concat();
        let cm = [
            bytes_field(1, &meta),
            map_entry(2, "k", b"v"),
            map_entry(3, "b", &[0, 1]),
        ]
        .concat();
        assert_eq!(
            decode(&envelope("v1", "ConfigMap", &cm)).unwrap().unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "labels": {"app": "x"}},
                   "data": {"k": "v"}, "binaryData": {"b": "AAE="}})
        );
        let secret = [
            bytes_field(1, &bytes_field(1, b"s")),
            map_entry(2, "k", b"v"),
            bytes_field(3, b"Opaque"),
        ]
        .concat();
        assert_eq!(
            decode(&envelope("v1", "Secret", &secret)).unwrap().unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                   "type": "Opaque", "data": {"k": "dg=="}})
        );
    }

    #[test]
    fn other_types_and_broken_bodies_are_refused_without_panicking() {
        assert!(decode(&envelope("apps/v1", "ReplicaSet", &[]))
            .unwrap()
            .is_none());
        let replica_set = envelope("apps/v1", "ReplicaSet", &[]);
        assert_eq!(
            read(&replica_set, MEDIA_TYPE, "ReplicaSet", false)
                .unwrap_err()
                .code,
            415
        );
        let cm = envelope("v1", "ConfigMap", &bytes_field(1, &bytes_field(1, b"c")));
        let custom = read(&cm, MEDIA_TYPE, "Application", true).unwrap_err();
        assert_eq!(custom.code, 415, "custom resources take no protobuf");
        let mismatched = read(&cm, MEDIA_TYPE, "Secret", false).unwrap_err();
        assert_eq!(mismatched.code, 400, "a ConfigMap is not a Secret");
        assert!(read(&cm, MEDIA_TYPE, "ConfigMap", false).is_ok());
        // A creation time before 1970 (a negative int64 varint) is dropped, not a panic.
        let before_1970 = [vec![0x08], vec![0xff; 9], vec![0x01]].concat();
        let meta = [bytes_field(1, b"c"), bytes_field(8, &before_1970)].concat();
        let old = envelope("v1", "ConfigMap", &bytes_field(1, &meta));
        assert_eq!(
            decode(&old).unwrap().unwrap()["metadata"],
            json!({"name": "c"})
        );
        assert!(matches!(decode(b"{}"), Err(DecodeError::Magic)));
        let truncated = [MAGIC, &[0x0a, 0x10, 0x01]].concat();
        assert!(matches!(decode(&truncated), Err(DecodeError::Truncated)));
        assert_eq!(
            read(&truncated, MEDIA_TYPE, "ConfigMap", false)
                .unwrap_err()
                .code,
            400
        );
        let endless = [MAGIC, &[0x80, 0x80]].concat();
        assert!(decode(&endless).is_err());
    }
}
