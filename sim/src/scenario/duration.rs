//! Durations in scenario files: `"250ms"`, `"30s"`, `"5m"`, `"1h"`, or a bare number of seconds.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Parses `250ms`, `1.5s`, `30s`, `5m`, `1h` or a bare number of seconds.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. \"250ms\", \"30s\", \"5m\""))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("invalid duration {text:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if !value.is_finite() || value < 0.0 {
        return Err(format!("invalid duration {text:?}: must be a non-negative number"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

/// Renders a duration the way [`parse`] reads it (milliseconds when not whole seconds).
pub fn render(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// serde `with` support: deserialise.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }
    match Raw::deserialize(deserializer)? {
        Raw::Number(n) if n.is_finite() && n >= 0.0 => Ok(Duration::from_secs_f64(n)),
        Raw::Number(n) => Err(serde::de::Error::custom(format!("invalid duration {n}: must be a non-negative number"))),
        Raw::Text(t) => parse(&t).map_err(serde::de::Error::custom),
    }
}

/// serde `with` support: serialise.
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&render(*duration))
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
        assert_eq!(parse(&render(Duration::from_secs(42))).unwrap(), Duration::from_secs(42));
    }
}
