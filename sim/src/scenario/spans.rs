//! Where each value of a scenario file is: a tree of YAML node positions, looked up by field
//! path, so that a semantic error (an unknown host, a bad invariant parameter) points at the
//! exact line and column of the value it is about. Built by the same parser that reads the
//! model (serde-saphyr), so the two always agree; the model itself stays free of spans.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// A YAML node that remembers only where it and its children are.
#[derive(Debug)]
enum Node {
    Map(BTreeMap<String, Spanned<Node>>),
    Seq(Vec<Spanned<Node>>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any YAML node")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i128<E: de::Error>(self, _: i128) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u128<E: de::Error>(self, _: u128) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_none<E: de::Error>(self) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<Node>>()? {
                    items.push(item);
                }
                Ok(Node::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = BTreeMap::new();
                // Keys that are not strings (numbers, booleans) are kept by their text.
                while let Some(key) = map.next_key::<serde_json::Value>()? {
                    let key = match key {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    entries.insert(key, map.next_value::<Spanned<Node>>()?);
                }
                Ok(Node::Map(entries))
            }
        }
        deserializer.deserialize_any(NodeVisitor)
    }
}

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// A field's path in a scenario file, e.g. `faults[2].partition[1]`: what an error names,
/// and how [`Spans`] finds the value's position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Field(Vec<Step>);

impl Field {
    /// A top-level field.
    pub fn root(key: &str) -> Field {
        Field(vec![Step::Key(key.to_string())])
    }

    /// The field `key` inside this mapping.
    #[must_use]
    pub fn key(&self, key: &str) -> Field {
        let mut steps = self.0.clone();
        steps.push(Step::Key(key.to_string()));
        Field(steps)
    }

    /// Element `index` of this sequence.
    #[must_use]
    pub fn index(&self, index: usize) -> Field {
        let mut steps = self.0.clone();
        steps.push(Step::Index(index));
        Field(steps)
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(key) if i == 0 => write!(f, "{key}")?,
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// Positions of every node of one YAML document.
pub struct Spans(Option<Spanned<Node>>);

impl Spans {
    /// Indexes `text`; a document that does not parse gives no positions (the model's own
    /// parse reports the syntax error first).
    pub fn parse(text: &str) -> Spans {
        Spans(serde_saphyr::from_str(text).ok())
    }

    /// The 1-based (line, column) of `field`'s value, or of its nearest ancestor that is
    /// written in the file (a defaulted field has no position of its own).
    pub fn locate(&self, field: &Field) -> (usize, usize) {
        let Some(root) = &self.0 else { return (0, 0) };
        let mut node = root;
        for step in &field.0 {
            let next = match (&node.value, step) {
                (Node::Map(entries), Step::Key(key)) => entries.get(key),
                (Node::Seq(items), Step::Index(index)) => items.get(*index),
                _ => None,
            };
            match next {
                Some(next) => node = next,
                None => break,
            }
        }
        let at = node.referenced;
        (at.line() as usize, at.column() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "name: t
faults:
  - at: 1s
    partition: [a, b]
  - at: 3s
    partition:
      - apiserver
      - nosuchhost
";

    #[test]
    fn values_are_found_by_path_in_flow_and_block_style() {
        let spans = Spans::parse(TEXT);
        let partition = Field::root("faults").index(0).key("partition");
        assert_eq!(spans.locate(&partition.index(1)), (4, 20));
        assert_eq!(spans.locate(&partition), (4, 16));
        let block = Field::root("faults").index(1).key("partition").index(1);
        assert_eq!(block.to_string(), "faults[1].partition[1]");
        assert_eq!(spans.locate(&block), (8, 9));
    }

    #[test]
    fn a_field_not_written_points_at_its_nearest_written_ancestor() {
        let spans = Spans::parse(TEXT);
        assert_eq!(
            spans.locate(&Field::root("faults").index(1).key("crash")),
            (5, 5)
        );
        assert_eq!(Spans::parse("[unclosed").locate(&Field::root("x")), (0, 0));
    }
}
