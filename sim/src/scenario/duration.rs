//! Durations in scenario files: `"250ms"`, `"30s"`, `"5m"`, `"1h"`, or a bare number of seconds.

use std::time::Duration;

use serde::{Deserializer, Serializer};

/// Parses `250ms`, `1.5s`, `30s`, `5m`, `1h` or a bare number of seconds.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("invalid duration {text:?}: expected e.g. \"250ms\", \"30s\", \"5m\"")
    })?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "invalid duration {text:?}: unknown unit {unit:?} (use ms, s, m or h)"
            ))
        }
    };
    if !value.is_finite() || value < 0.0 {
        return Err(format!(
            "invalid duration {text:?}: must be a non-negative number"
        ));
    }
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("invalid duration {text:?}: too large"))
}

/// Renders a duration the way [`parse`] reads it (milliseconds when not whole seconds).
pub fn render(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// serde `with` support: deserialise. A visitor (not an untagged enum) so that errors keep
/// the scalar's line and column.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = Duration;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a duration such as \"250ms\", \"30s\", \"5m\" or a number of seconds")
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
            parse(v).map_err(E::custom)
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Duration, E> {
            Ok(Duration::from_secs(v))
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Duration, E> {
            u64::try_from(v).map(Duration::from_secs).map_err(|_| {
                E::custom(format!(
                    "invalid duration {v}: must be a non-negative number"
                ))
            })
        }

        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Duration, E> {
            if v.is_finite() && v >= 0.0 {
                Duration::try_from_secs_f64(v)
                    .map_err(|_| E::custom(format!("invalid duration {v}: too large")))
            } else {
                Err(E::custom(format!(
                    "invalid duration {v}: must be a non-negative number"
                )))
            }
        }
    }
    deserializer.deserialize_any(Visitor)
}

/// serde `with` support: serialise.
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&render(*duration))
}

/// A duration as scenario files write it, where serde's `with` cannot reach (e.g. the
/// two ends of a range, `[5s, 60s]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

impl serde::Serialize for Span {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize(&self.0, serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize(deserializer).map(Span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_and_render_round_trips() {
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("2").unwrap(), Duration::from_secs(2));
        assert!(parse("5 parsecs").unwrap_err().contains("unknown unit"));
        assert_eq!(render(Duration::from_millis(1500)), "1500ms");
        assert_eq!(
            parse(&render(Duration::from_secs(42))).unwrap(),
            Duration::from_secs(42)
        );
    }

    #[test]
    fn a_duration_past_what_a_duration_holds_is_an_error_not_a_panic() {
        // Found by fuzzing (fuzz/regressions/scenario/): `Duration::from_secs_f64` panicked.
        assert!(parse("99999999999999999999s")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("99999999999999999999h")
            .unwrap_err()
            .contains("too large"));
        let yaml: Result<Wrapped, _> = serde_saphyr::from_str("d: 1e20");
        assert!(yaml.unwrap_err().to_string().contains("too large"));
    }

    #[derive(serde::Deserialize, Debug)]
    struct Wrapped {
        #[serde(with = "super")]
        #[allow(dead_code)]
        d: Duration,
    }
}

/// serde `with` support for `Option<Duration>`.
pub mod option {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    /// Deserialises a present duration.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        super::deserialize(deserializer).map(Some)
    }

    /// Serialises a present duration.
    pub fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(d) => super::serialize(d, serializer),
            None => serializer.serialize_none(),
        }
    }
}
