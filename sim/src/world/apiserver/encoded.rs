//! Each listed object's JSON text, kept while the object lives, so that a list of mostly
//! unchanged objects is written from text already made instead of serialising every object
//! again (an operator listing 300 Rollouts every simulated second spent a tenth of a
//! rollout-storm seed there). The bytes are exactly what `serde_json` writes for the object,
//! so the answers are the same byte for byte.
//!
//! Stored objects are immutable `Arc<Value>`s (a write stores a new one), so an object's
//! text never goes stale. The cache is keyed by the object's address and holds a `Weak` to
//! it: the `Weak` keeps that address from being reused while the entry exists, so an entry
//! found for a live object is that object's. Entries whose object is gone are dropped every
//! [`PRUNE_EVERY`] additions. Nothing here reaches a trace: it only saves work.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use serde_json::Value;

/// Additions between two sweeps of entries whose object is gone.
const PRUNE_EVERY: usize = 4096;

/// One object's text: as stored, and as an item of a typed (built-in) list.
struct Entry {
    object: Weak<Value>,
    whole: Option<Bytes>,
    typed: Option<Bytes>,
}

/// The texts, by object address.
#[derive(Default)]
pub struct Encoded {
    entries: BTreeMap<usize, Entry>,
    added: usize,
}

impl Encoded {
    /// `object`'s JSON text; for a typed list item (`typed`), without its `apiVersion` and
    /// `kind`, as a Go list of typed objects serialises them.
    pub fn text(&mut self, object: &Arc<Value>, typed: bool) -> Bytes {
        let address = Arc::as_ptr(object) as usize;
        if !self.entries.contains_key(&address) {
            self.added += 1;
            if self.added.is_multiple_of(PRUNE_EVERY) {
                self.entries.retain(|_, e| e.object.strong_count() > 0);
            }
            self.entries.insert(
                address,
                Entry {
                    object: Arc::downgrade(object),
                    whole: None,
                    typed: None,
                },
            );
        }
        let entry = self.entries.get_mut(&address).expect("inserted above");
        let slot = if typed {
            &mut entry.typed
        } else {
            &mut entry.whole
        };
        slot.get_or_insert_with(|| {
            let text = if typed {
                serde_json::to_vec(&TypedItem(object))
            } else {
                serde_json::to_vec(&**object)
            };
            Bytes::from(text.expect("JSON values serialise"))
        })
        .clone()
    }

    /// How many objects have a text kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A stored object as a typed list item: its fields without `apiVersion` and `kind`.
pub struct TypedItem<'a>(pub &'a Value);

impl serde::Serialize for TypedItem<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self.0.as_object() {
            Some(fields) => {
                let kept = |(key, _): &(&String, &Value)| key != &"apiVersion" && key != &"kind";
                let mut map = serializer.serialize_map(Some(fields.iter().filter(kept).count()))?;
                for (key, value) in fields.iter().filter(kept) {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
            None => self.0.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn texts_are_what_serde_json_writes_and_are_made_once_per_object() {
        let mut encoded = Encoded::default();
        let object = Arc::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "7"}, "data": {"k": "v \"q\""}}));
        let whole = encoded.text(&object, false);
        assert_eq!(&whole[..], &serde_json::to_vec(&*object).unwrap()[..]);
        let typed = encoded.text(&object, true);
        assert_eq!(
            &typed[..],
            br#"{"metadata":{"name":"a","resourceVersion":"7"},"data":{"k":"v \"q\""}}"#
        );
        // The second time the same text (the same buffer, not made again).
        assert_eq!(encoded.text(&object, false).as_ptr(), whole.as_ptr());
        assert_eq!(encoded.len(), 1);
    }

    #[test]
    fn a_new_object_gets_its_own_text_and_gone_objects_are_pruned() {
        let mut encoded = Encoded::default();
        let first = Arc::new(json!({"n": 0}));
        encoded.text(&first, false);
        drop(first);
        // Many objects made and dropped: none is answered with another's text, and the
        // entries of the gone ones do not pile up.
        for n in 1..3 * PRUNE_EVERY {
            let object = Arc::new(json!({ "n": n }));
            assert_eq!(
                encoded.text(&object, false),
                Bytes::from(format!(r#"{{"n":{n}}}"#))
            );
        }
        assert!(encoded.len() <= PRUNE_EVERY, "{} kept", encoded.len());
    }
}
