//! The request path as the gateway routes it: normalised before anything reads it, so a
//! client cannot reach another route (or another tenant's runtime) through `..`, `.`,
//! doubled slashes or percent-escapes that the router downstream would read differently.
//!
//! Escapes are decoded segment by segment; an escape that decodes to a separator (`%2F`,
//! `%5C`) or to a control character is refused, never passed on. `.` segments and empty
//! segments are dropped and `..` removes the segment before it (RFC 3986 §5.2.4); a `..`
//! above the root is refused. The result is re-encoded with one spelling per character.

/// Why a path is refused (answered 400 with this text, and audited).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// An escape decodes to `/` or `\`: a separator hidden from whoever splits the path.
    #[error("the path {path:?} encodes a path separator ({escape}); send / unencoded")]
    EncodedSeparator {
        /// The raw path.
        path: String,
        /// The escape, as sent.
        escape: String,
    },
    /// A `..` would leave the root.
    #[error("the path {path:?} climbs above the root with ..")]
    AboveRoot {
        /// The raw path.
        path: String,
    },
    /// A `%` not followed by two hex digits, a control character, a literal `\`, or bytes
    /// that are not UTF-8 once decoded.
    #[error("the path {path:?} has a malformed escape or a character paths may not carry")]
    Malformed {
        /// The raw path.
        path: String,
    },
}

/// `raw` (the request target's path) normalised, or why it is refused.
pub fn normalise(raw: &str) -> Result<String, PathError> {
    let malformed = || PathError::Malformed {
        path: raw.to_string(),
    };
    let Some(rest) = raw.strip_prefix('/') else {
        return Err(malformed());
    };
    let mut kept: Vec<String> = Vec::new();
    let mut trailing_slash = false;
    for segment in rest.split('/') {
        let decoded = decode(raw, segment)?;
        trailing_slash = true;
        match decoded.as_str() {
            "" | "." => {}
            ".." => {
                if kept.pop().is_none() {
                    return Err(PathError::AboveRoot {
                        path: raw.to_string(),
                    });
                }
            }
            _ => {
                kept.push(decoded);
                trailing_slash = false;
            }
        }
    }
    if kept.is_empty() {
        return Ok("/".to_string());
    }
    let mut out = String::with_capacity(raw.len());
    for segment in &kept {
        out.push('/');
        encode(segment, &mut out);
    }
    if trailing_slash {
        out.push('/');
    }
    Ok(out)
}

/// One segment with its escapes decoded.
fn decode(raw: &str, segment: &str) -> Result<String, PathError> {
    let malformed = || PathError::Malformed {
        path: raw.to_string(),
    };
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if byte == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(malformed)?;
            if hex == b'/' || hex == b'\\' {
                return Err(PathError::EncodedSeparator {
                    path: raw.to_string(),
                    escape: segment[i..i + 3].to_string(),
                });
            }
            out.push(hex);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    if out.iter().any(|b| *b == b'\\' || b.is_ascii_control()) {
        return Err(malformed());
    }
    String::from_utf8(out).map_err(|_| malformed())
}

/// Appends `segment` percent-encoded: unreserved characters, sub-delimiters, `:` and `@`
/// stay as they are (RFC 3986 `pchar`); every other byte is escaped in upper case.
fn encode(segment: &str, out: &mut String) {
    for byte in segment.bytes() {
        let keep = byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&byte);
        if keep {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_and_doubled_slashes_resolve_before_routing() {
        let ok = |raw: &str| normalise(raw).unwrap();
        assert_eq!(
            ok("/api/runtimes/acme-prod/healthz"),
            "/api/runtimes/acme-prod/healthz"
        );
        assert_eq!(
            ok("/api/runtimes/acme-prod/../globex-prod/healthz"),
            "/api/runtimes/globex-prod/healthz"
        );
        assert_eq!(
            ok("/api//runtimes/./acme-prod/x/"),
            "/api/runtimes/acme-prod/x/"
        );
        assert_eq!(
            ok("/api/runtimes/acme-prod/a/.."),
            "/api/runtimes/acme-prod/"
        );
        assert_eq!(ok("/"), "/");
        // Escaped dots are dots (RFC 3986: unreserved characters decode to themselves).
        assert_eq!(
            ok("/api/runtimes/acme-prod/%2e%2E/globex-prod/x"),
            "/api/runtimes/globex-prod/x"
        );
        // Other escapes keep one spelling.
        assert_eq!(ok("/a/b%20c/%41"), "/a/b%20c/A");
    }

    #[test]
    fn hidden_separators_escapes_above_the_root_and_bad_escapes_are_refused() {
        assert!(matches!(
            normalise("/api/runtimes/acme-prod%2F..%2Fglobex-prod/x"),
            Err(PathError::EncodedSeparator { escape, .. }) if escape == "%2F"
        ));
        assert!(matches!(
            normalise("/api/runtimes/a%5cb"),
            Err(PathError::EncodedSeparator { .. })
        ));
        assert!(matches!(
            normalise("/api/../../etc/passwd"),
            Err(PathError::AboveRoot { .. })
        ));
        for bad in ["/a/%zz", "/a/%4", "/a/%00", "/a/%ff", "relative", "/a\\b"] {
            assert!(
                matches!(normalise(bad), Err(PathError::Malformed { .. })),
                "{bad}"
            );
        }
        let text = normalise("/x/%2f").unwrap_err().to_string();
        assert!(text.contains("encodes a path separator (%2f)"), "{text}");
    }
}
