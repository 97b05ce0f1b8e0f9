//! hardened: Argo CD answers that cannot change, kept so they are asked for once.
//!
//! - **Manifests at a revision**, per (app, source, revision): a Git commit names its
//!   content, and Argo CD's repo-server itself caches manifests per revision and source
//!   (`reposerver/cache`: `ManifestCacheKey` holds the revision and the source). The key
//!   holds a digest of the app's `spec.source(s)`, so a changed source (path, Helm values,
//!   parameters) asks again; a hard refresh (`argocd.argoproj.io/refresh: hard`, which makes
//!   Argo CD regenerate them) and a new Argo CD token drop what is kept.
//! - **Revision metadata**, per (repository, revision): author, date and message of a
//!   commit never change (the repo-server caches them per repository and revision too,
//!   `GetRevisionMetadata`).
//!
//! The real reporter asks for both on every app event (research §1.6): 49,494 manifests and
//! 19,093 metadata reads in a queue-overflow seed for 34,901 application changes. Bounded:
//! the oldest entry goes first, so memory stays flat however many revisions pass.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// A bounded map of immutable answers, oldest evicted first (insertion order: the same
/// runs evict the same entries).
pub struct Memo {
    capacity: usize,
    entries: Mutex<Entries>,
}

/// The answers by key with the number of their insertion, and the keys in the order they
/// came. A forgotten key's place in `order` is left behind and skipped when it comes up
/// (its number no longer matches), so forgetting one app's answers costs what they are, not
/// a pass over every kept key: hard refreshes come in storms.
#[derive(Default)]
struct Entries {
    answers: BTreeMap<String, (u64, Arc<Value>)>,
    order: VecDeque<(u64, String)>,
    inserted: u64,
}

impl Entries {
    /// Drops the places in `order` of keys forgotten since, once they outnumber the live
    /// ones (each place is dropped once: amortised, the order stays within twice the bound).
    fn compact(&mut self) {
        if self.order.len() > 2 * self.answers.len() + 64 {
            let answers = &self.answers;
            self.order
                .retain(|(n, k)| answers.get(k).is_some_and(|(m, _)| m == n));
        }
    }
}

impl Memo {
    /// An empty memo of at most `capacity` answers.
    pub fn new(capacity: usize) -> Self {
        Memo {
            capacity,
            entries: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().expect("memo lock poisoned")
    }

    /// The answer kept under `key`.
    pub fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.lock().answers.get(key).map(|(_, a)| a.clone())
    }

    /// Keeps `answer` under `key`, evicting the oldest entry when full.
    pub fn put(&self, key: String, answer: Arc<Value>) {
        if self.capacity == 0 {
            return;
        }
        let mut guard = self.lock();
        let entries = &mut *guard;
        if let Some((_, kept)) = entries.answers.get_mut(&key) {
            // Replaced in place: its place in the order stays.
            *kept = answer;
            return;
        }
        entries.inserted += 1;
        let n = entries.inserted;
        entries.answers.insert(key.clone(), (n, answer));
        entries.order.push_back((n, key));
        while entries.answers.len() > self.capacity {
            let Some((n, old)) = entries.order.pop_front() else {
                break;
            };
            if entries.answers.get(&old).is_some_and(|(m, _)| *m == n) {
                entries.answers.remove(&old);
            }
        }
    }

    /// Forgets every answer whose key starts with `prefix` (one app's, on a hard refresh).
    pub fn forget(&self, prefix: &str) {
        let mut guard = self.lock();
        let entries = &mut *guard;
        let gone: Vec<String> = entries
            .answers
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect();
        if gone.is_empty() {
            return;
        }
        for key in &gone {
            entries.answers.remove(key);
        }
        entries.compact();
    }

    /// Forgets everything (a new Argo CD token: perhaps another Argo CD).
    pub fn clear(&self) {
        *self.lock() = Entries::default();
    }

    /// How many answers are kept (the tests' view of the bound).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().answers.len()
    }
}

/// The key of an app's manifests at `revision`: `<namespace>/<name>|<source digest>|<revision>`
/// (the app's prefix first, so a hard refresh forgets its entries by prefix).
pub fn manifests_key(app_key: &str, source: &Value, revision: &str) -> String {
    let mut digest = crate::env::Fnv1a64::new();
    digest.write(source.to_string().as_bytes());
    format!("{app_key}|{:016x}|{revision}", digest.finish())
}

/// The key of a commit's metadata: `<repoURL>@<revision>`.
pub fn metadata_key(repo_url: &str, revision: &str) -> String {
    format!("{repo_url}@{revision}")
}

/// Whether the app asks Argo CD for a hard refresh (`argocd.argoproj.io/refresh: hard`).
pub fn hard_refresh(app: &kube::api::DynamicObject) -> bool {
    app.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("argocd.argoproj.io/refresh"))
        .is_some_and(|v| v == "hard")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_oldest_answer_goes_first_and_a_prefix_is_forgotten_whole() {
        let memo = Memo::new(2);
        memo.put("a|1".into(), Arc::new(json!(1)));
        memo.put("b|1".into(), Arc::new(json!(2)));
        memo.put("a|1".into(), Arc::new(json!(3))); // replaced, not reordered
        memo.put("c|1".into(), Arc::new(json!(4)));
        assert_eq!(memo.get("a|1"), None, "the oldest was evicted");
        assert_eq!(memo.get("b|1").as_deref(), Some(&json!(2)));
        memo.put("b|2".into(), Arc::new(json!(5)));
        memo.forget("b|");
        assert!(memo.get("b|1").is_none() && memo.get("b|2").is_none());
        assert_eq!(memo.len(), 1);
        assert_eq!(memo.get("c|1").as_deref(), Some(&json!(4)));
    }

    #[test]
    fn a_changed_source_is_another_key() {
        let a = manifests_key("argocd/app", &json!({"path": "a"}), "sha");
        let b = manifests_key("argocd/app", &json!({"path": "b"}), "sha");
        assert_ne!(a, b);
        assert!(a.starts_with("argocd/app|"));
    }

    /// The memo before forgetting became lazy: the order holds exactly the live keys.
    struct Eager {
        capacity: usize,
        answers: BTreeMap<String, i64>,
        order: VecDeque<String>,
    }

    impl Eager {
        fn put(&mut self, key: String, answer: i64) {
            if self.answers.insert(key.clone(), answer).is_none() {
                self.order.push_back(key);
                while self.order.len() > self.capacity {
                    let old = self.order.pop_front().unwrap();
                    self.answers.remove(&old);
                }
            }
        }

        fn forget(&mut self, prefix: &str) {
            self.answers.retain(|k, _| !k.starts_with(prefix));
            let answers = &self.answers;
            self.order.retain(|k| answers.contains_key(k));
        }
    }

    #[test]
    fn forgetting_lazily_evicts_exactly_what_forgetting_eagerly_did() {
        let memo = Memo::new(16);
        let mut eager = Eager {
            capacity: 16,
            answers: BTreeMap::new(),
            order: VecDeque::new(),
        };
        let mut x: u64 = 7;
        for step in 0..20_000i64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let app = (x >> 33) % 24;
            let rev = (x >> 40) % 3;
            if (x >> 20).is_multiple_of(5) {
                memo.forget(&format!("{app}|"));
                eager.forget(&format!("{app}|"));
            } else {
                memo.put(format!("{app}|{rev}"), Arc::new(json!(step)));
                eager.put(format!("{app}|{rev}"), step);
            }
            let kept: Vec<(String, i64)> = {
                let entries = memo.lock();
                entries
                    .answers
                    .iter()
                    .map(|(k, (_, a))| (k.clone(), a.as_i64().unwrap()))
                    .collect()
            };
            let expected: Vec<(String, i64)> =
                eager.answers.iter().map(|(k, a)| (k.clone(), *a)).collect();
            assert_eq!(kept, expected, "step {step}");
            assert!(memo.lock().order.len() <= 2 * 16 + 64 + 1);
        }
    }
}
