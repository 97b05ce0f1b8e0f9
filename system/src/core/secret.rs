//! Secrets kept as their digests and compared in constant time (issue 53, secrets hygiene):
//! a token a process is handed (by a flag, a policy file or a registration) is hashed at
//! once and only its SHA-256 is kept, so no map, log, trace or error message holds it; a
//! presented token is hashed and its digest looked up or compared without an early exit, so
//! the time an answer takes says nothing about how much of a token was right.

use std::fmt;

/// A token's SHA-256: the only form a token is kept in.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// The digest of `token`.
    pub fn of(token: &str) -> TokenDigest {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(digest.as_ref());
        TokenDigest(bytes)
    }

    /// The whole digest in hex, as a map key (kept in memory, never logged: [`fmt::Debug`]
    /// shows a prefix).
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `token` is the one this is the digest of, in constant time.
    pub fn matches(&self, token: &str) -> bool {
        constant_time_eq(&self.0, &TokenDigest::of(token).0)
    }
}

/// Never the token, and not the whole digest either: enough to tell two apart in a log.
impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TokenDigest(sha256:{:02x}{:02x}{:02x}{:02x}…)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

/// `a == b` with no early exit: every byte is compared whatever the first difference.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)));
    difference == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_matches_its_token_only_and_shows_no_token() {
        let digest = TokenDigest::of("tok-secret-1");
        assert!(digest.matches("tok-secret-1"));
        assert!(!digest.matches("tok-secret-2"));
        assert!(!digest.matches(""));
        assert_eq!(digest, TokenDigest::of("tok-secret-1"));
        let shown = format!("{digest:?}");
        assert!(!shown.contains("tok-secret"), "{shown}");
        assert!(shown.starts_with("TokenDigest(sha256:"), "{shown}");
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
