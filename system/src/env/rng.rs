//! A small seeded generator (SplitMix64): every random choice in simulated code flows from it.

/// SplitMix64: tiny, fast, and good enough for jitter, fault draws and workload choices.
/// Chosen over a crate so the sequence is fixed forever by this file, not by a dependency bump.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose whole sequence is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// Derives an independent stream for a named purpose (e.g. a host name) from a seed.
    pub fn derive(seed: u64, label: &str) -> Self {
        Rng::new(seed ^ fnv1a_64(label.as_bytes()).rotate_left(17))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "Rng::below needs a positive bound");
        self.next_u64() % bound
    }

    /// True with probability `p` (clamped to `[0, 1]`).
    pub fn chance(&mut self, p: f64) -> bool {
        let p = p.clamp(0.0, 1.0);
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 1.0 < p
    }
}

/// FNV-1a 64-bit: used for trace hashes and seed derivation.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hash = Fnv1a64::new();
    hash.write(bytes);
    hash.finish()
}

/// FNV-1a 64-bit fed in pieces: [`fnv1a_64`] of the pieces joined, without joining them
/// (and, as an `io::Write`, of JSON as it is serialised, without the text).
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv1a64 {
    /// The hash of nothing (FNV-1a's offset basis).
    pub fn new() -> Self {
        Fnv1a64(0xcbf2_9ce4_8422_2325)
    }

    /// Hashes `bytes` after what came before.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// As a `Hasher`: a map keyed by strings with a seed-free, deterministic hash (std's
/// default `RandomState` is seeded from the OS), for maps that are only looked up, never
/// iterated.
impl std::hash::Hasher for Fnv1a64 {
    fn write(&mut self, bytes: &[u8]) {
        Fnv1a64::write(self, bytes);
    }

    fn finish(&self) -> u64 {
        Fnv1a64::finish(self)
    }
}

/// Builds [`Fnv1a64`] hashers for `HashMap`s that are looked up, never iterated.
pub type FnvBuild = std::hash::BuildHasherDefault<Fnv1a64>;

impl std::io::Write for Fnv1a64 {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        Fnv1a64::write(self, bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_a_hasher_it_hashes_what_is_written_as_fnv1a_64_does() {
        use std::hash::{BuildHasher, Hasher};
        let mut h = FnvBuild::default().build_hasher();
        Hasher::write(&mut h, b"argocd/");
        Hasher::write(&mut h, b"app-00001");
        assert_eq!(Hasher::finish(&h), fnv1a_64(b"argocd/app-00001"));
        // Seed-free: two builders hash a key alike (std's RandomState would not).
        let key = "argocd/app-00001".to_string();
        assert_eq!(
            FnvBuild::default().hash_one(&key),
            FnvBuild::default().hash_one(&key)
        );
    }

    #[test]
    fn same_seed_gives_same_sequence_and_different_seeds_differ() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let c: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(8);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn fnv1a_64_matches_the_published_test_vector() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn hashing_in_pieces_is_hashing_the_pieces_joined() {
        let mut pieces = Fnv1a64::new();
        pieces.write(b"guest");
        pieces.write(b"");
        pieces.write(b"book\0reporter-1");
        assert_eq!(pieces.finish(), fnv1a_64(b"guestbook\0reporter-1"));
    }
}
