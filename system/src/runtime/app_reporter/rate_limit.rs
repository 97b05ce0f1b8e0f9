//! The real reporter's per-app rate limiter (research §1.4, `event_reporter/reporter/
//! rate_limiter.go` on `sethvargo/go-limiter`'s memorystore): keyed by **app name**,
//! `bucket_size` tokens per `period`, a **fixed window per key** that starts when the key
//! is first seen and refills to full when the window tick advances. Applied at enqueue
//! time. Limited events are dropped (faithful) unless learning mode is on, where they are
//! only counted and still enqueued.

use std::collections::BTreeMap;
use std::time::Duration;

/// `RATE_LIMITER_BUCKET_SIZE`, `RATE_LIMITER_DURATION`, `RATE_LIMITER_LEARNING_MODE_ENABLED`
/// (the limiter is off unless configured, as `RATE_LIMITER_ENABLED` defaults to false).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Tokens per window, per app.
    pub bucket_size: u64,
    /// Window length.
    pub period: Duration,
    /// Count limited events but do not drop them.
    pub learning_mode: bool,
}

/// What the limiter says of one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A token was taken.
    Allowed,
    /// No token left in this window; `retry_in` is the time until the window refills.
    Limited {
        /// Time until the app's window refills.
        retry_in: Duration,
    },
}

/// One key's window: when its first window started, the window index of `left`, tokens left.
#[derive(Clone, Debug)]
struct Bucket {
    start: Duration,
    tick: u64,
    left: u64,
}

/// Fixed windows per app name.
#[derive(Debug)]
pub struct RateLimiter {
    limit: RateLimit,
    buckets: BTreeMap<String, Bucket>,
}

impl RateLimiter {
    /// A limiter with no key seen yet.
    pub fn new(limit: RateLimit) -> Self {
        RateLimiter {
            limit,
            buckets: BTreeMap::new(),
        }
    }

    /// The settings.
    pub fn limit(&self) -> &RateLimit {
        &self.limit
    }

    /// Takes one token for `app` at `now` (time since the process started).
    pub fn take(&mut self, app: &str, now: Duration) -> Verdict {
        let period = self.limit.period.max(Duration::from_millis(1));
        let size = self.limit.bucket_size;
        let bucket = self
            .buckets
            .entry(app.to_string())
            .or_insert_with(|| Bucket {
                start: now,
                tick: 0,
                left: size,
            });
        let tick = (now.saturating_sub(bucket.start).as_nanos() / period.as_nanos()) as u64;
        if tick > bucket.tick {
            bucket.tick = tick;
            bucket.left = size;
        }
        if bucket.left > 0 {
            bucket.left -= 1;
            return Verdict::Allowed;
        }
        let next = bucket.start + period * (bucket.tick as u32 + 1);
        Verdict::Limited {
            retry_in: next.saturating_sub(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(size: u64, period_s: u64) -> RateLimiter {
        RateLimiter::new(RateLimit {
            bucket_size: size,
            period: Duration::from_secs(period_s),
            learning_mode: false,
        })
    }

    #[test]
    fn each_app_gets_its_own_fixed_window_that_refills_when_the_tick_advances() {
        let mut l = limiter(2, 10);
        let at = Duration::from_secs;
        assert_eq!(l.take("a", at(3)), Verdict::Allowed);
        assert_eq!(l.take("a", at(4)), Verdict::Allowed);
        // The window started at 3 s (first sight of "a"), so it refills at 13 s, not 10 s.
        assert_eq!(
            l.take("a", at(10)),
            Verdict::Limited {
                retry_in: Duration::from_secs(3)
            }
        );
        assert_eq!(
            l.take("b", at(10)),
            Verdict::Allowed,
            "keys are independent"
        );
        assert_eq!(l.take("a", at(13)), Verdict::Allowed);
        assert_eq!(l.take("a", at(14)), Verdict::Allowed);
        assert!(matches!(l.take("a", at(22)), Verdict::Limited { .. }));
        // A window skipped entirely does not bank tokens: still two per window.
        assert_eq!(l.take("a", at(45)), Verdict::Allowed);
        assert_eq!(l.take("a", at(45)), Verdict::Allowed);
        assert!(matches!(l.take("a", at(45)), Verdict::Limited { .. }));
    }
}
