//! RFC 3339 timestamps from and to Unix milliseconds (jiff does the calendar), without a
//! clock: callers pass the time they got from their environment.

use jiff::Timestamp;

fn timestamp(unix_ms: u64) -> Timestamp {
    i64::try_from(unix_ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .unwrap_or(Timestamp::MAX)
}

/// `2026-01-01T00:00:00Z` (second precision, as `metav1.Time` renders).
pub fn rfc3339(unix_ms: u64) -> String {
    timestamp(unix_ms)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `2026-01-01T00:00:00.000Z` (millisecond precision: Go's `2006-01-02T15:04:05.000Z`, the
/// reporter's event timestamps).
pub fn rfc3339_millis(unix_ms: u64) -> String {
    timestamp(unix_ms)
        .strftime("%Y-%m-%dT%H:%M:%S.%3fZ")
        .to_string()
}

/// `2026-01-01T00:00:00.000000Z` (microsecond precision, as `metav1.MicroTime`).
pub fn rfc3339_micros(unix_ms: u64) -> String {
    timestamp(unix_ms)
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// Parses an RFC 3339 timestamp (`…Z` or with an offset) into Unix milliseconds; `None`
/// for anything else, or a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let parsed: Timestamp = text.parse().ok()?;
    u64::try_from(parsed.as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants_format_and_round_trip() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_millis(1_234), "1970-01-01T00:00:01.234Z");
        assert_eq!(rfc3339(1_767_225_600_000), "2026-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_600_999), "2026-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_micros(1_767_225_600_123),
            "2026-01-01T00:00:00.123000Z"
        );
        for ms in [0u64, 1_767_225_600_123, 1_767_312_000_999] {
            assert_eq!(parse_rfc3339(&rfc3339_micros(ms)), Some(ms));
        }
        assert_eq!(
            parse_rfc3339("2026-01-01T00:00:00Z"),
            Some(1_767_225_600_000)
        );
        assert_eq!(
            parse_rfc3339("2026-01-01T01:00:00+01:00"),
            Some(1_767_225_600_000)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), None);
    }
}
