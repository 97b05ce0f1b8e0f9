//! RFC 3339 timestamps from and to Unix milliseconds, without a clock: callers pass the
//! time they got from their environment.

fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn split(unix_ms: u64) -> (i64, u32, u32, u64, u64, u64) {
    let secs = unix_ms / 1000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `2026-01-01T00:00:00Z` (second precision, as `metav1.Time`).
pub fn rfc3339(unix_ms: u64) -> String {
    let (y, m, d, h, min, s) = split(unix_ms);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}Z")
}

/// `2026-01-01T00:00:00.000000Z` (microsecond precision, as `metav1.MicroTime`).
pub fn rfc3339_micros(unix_ms: u64) -> String {
    let (y, m, d, h, min, s) = split(unix_ms);
    format!(
        "{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{:06}Z",
        (unix_ms % 1000) * 1000
    )
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction]Z` into Unix milliseconds.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(str::parse::<i64>);
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(str::parse::<u64>);
    let (h, min, s) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let days = u64::try_from(days_from_civil(y, m, day)).ok()?;
    let millis: u64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    Some((days * 86_400 + h * 3600 + min * 60 + s) * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants_format_and_round_trip() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_600_000), "2026-01-01T00:00:00Z");
        for ms in [0u64, 1_767_225_600_123, 1_767_312_000_999] {
            assert_eq!(parse_rfc3339(&rfc3339_micros(ms)), Some(ms));
        }
        assert_eq!(
            parse_rfc3339("2026-01-01T00:00:00Z"),
            Some(1_767_225_600_000)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
