//! Which replica reports which app.
//!
//! - faithful: `fnv1a_32(name) % replicas`, the replica's own index from config or its
//!   hostname ordinal (unparsable → -1, which owns nothing), filtering only when
//!   replicas > 1 — exactly the real reporter, including its rebalancing flaw: replicas
//!   that read different counts disagree, so some apps are owned twice and some by nobody.
//! - hardened: rendezvous (highest-random-weight) hashing over the live members read from
//!   Kubernetes `Lease`s, so every replica that sees the same membership agrees, and a
//!   membership change moves only the apps of the member that came or went.

/// FNV-1a 32-bit, as the real reporter hashes app names.
pub fn fnv1a_32(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The faithful shard of an app: `fnv1a_32(name) % replicas`.
pub fn faithful_shard(app: &str, replicas: u32) -> u32 {
    fnv1a_32(app.as_bytes()) % replicas.max(1)
}

/// Whether a faithful replica with index `shard` (None = unparsable, i.e. -1) that read
/// `replicas` processes `app`.
pub fn faithful_owns(app: &str, shard: Option<u32>, replicas: u32) -> bool {
    if replicas <= 1 {
        return true; // the filter is only on when replicas > 1
    }
    shard.is_some_and(|s| faithful_shard(app, replicas) == s)
}

/// Rendezvous weight of (app, member), from `prefix`, the hash of `"{app}\0"`: FNV-1a 64
/// of `"{app}\0{member}"`, finalised for spread.
fn weight(prefix: crate::env::Fnv1a64, member: &str) -> u64 {
    let mut hash = prefix;
    hash.write(member.as_bytes());
    let mut h = hash.finish();
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// The hardened owner of `app` among `members` (None when there are no members).
pub fn rendezvous_owner<'a>(app: &str, members: &'a [String]) -> Option<&'a str> {
    // The app's part of every member's hash is the same: hashed once, not per member.
    let mut prefix = crate::env::Fnv1a64::new();
    prefix.write(app.as_bytes());
    prefix.write(&[0]);
    members
        .iter()
        .max_by_key(|m| (weight(prefix, m), m.as_str()))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_hash_the_app_a_nul_and_the_member() {
        let joined = crate::env::fnv1a_64(b"guestbook\0reporter-1");
        let mut h = joined ^ (joined >> 33);
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        let mut prefix = crate::env::Fnv1a64::new();
        prefix.write(b"guestbook\0");
        assert_eq!(weight(prefix, "reporter-1"), h ^ (h >> 33));
    }

    /// The owner is the member of highest weight over the joined string (ties: the greater
    /// name), whatever the order of the members.
    #[test]
    fn the_owner_has_the_highest_weight_of_the_joined_name() {
        let finalised = |joined: u64| {
            let h = (joined ^ (joined >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^ (h >> 33)
        };
        let members: Vec<String> = ["reporter-3", "reporter-0", "reporter-4", "reporter-1"]
            .map(String::from)
            .to_vec();
        for i in 0..300 {
            let app = format!("app-{i:05}");
            let expected = members
                .iter()
                .max_by_key(|m| {
                    let joined = crate::env::fnv1a_64(format!("{app}\0{m}").as_bytes());
                    (finalised(joined), m.as_str())
                })
                .map(String::as_str);
            assert_eq!(rendezvous_owner(&app, &members), expected, "{app}");
        }
        assert_eq!(rendezvous_owner("app", &[]), None);
    }

    #[test]
    fn fnv1a_32_matches_the_reference_vectors() {
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn faithful_filter_is_off_with_one_replica_and_unparsable_ordinals_own_nothing() {
        assert!(faithful_owns("x", None, 1));
        assert!(!faithful_owns("x", None, 3));
        let owners: Vec<u32> = (0..3)
            .filter(|s| faithful_owns("guestbook", Some(*s), 3))
            .collect();
        assert_eq!(owners.len(), 1);
    }

    #[test]
    fn rendezvous_moves_only_the_apps_of_a_member_that_leaves() {
        let three: Vec<String> = ["r-0", "r-1", "r-2"].map(String::from).to_vec();
        let two: Vec<String> = ["r-0", "r-2"].map(String::from).to_vec();
        for i in 0..500 {
            let app = format!("app-{i}");
            let before = rendezvous_owner(&app, &three).unwrap();
            let after = rendezvous_owner(&app, &two).unwrap();
            if before != "r-1" {
                assert_eq!(before, after, "{app} moved although its owner stayed");
            }
        }
    }
}
