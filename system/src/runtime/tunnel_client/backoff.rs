//! Reconnect schedules, one per variant, with jitter drawn from the environment.

use std::time::Duration;

use crate::core::Variant;
use crate::env::SharedEnv;

/// The delay before each reconnect attempt.
#[derive(Clone, Debug)]
pub struct Reconnect {
    variant: Variant,
    failures: u32,
}

impl Reconnect {
    /// A fresh schedule.
    pub fn new(variant: Variant) -> Self {
        Reconnect {
            variant,
            failures: 0,
        }
    }

    /// How long a tunnel must stay up before the schedule starts over: the real client
    /// resets after a quiet minute; ours after 10 s.
    pub fn reset_after(&self) -> Duration {
        match self.variant {
            Variant::Faithful => Duration::from_secs(60),
            Variant::Hardened => Duration::from_secs(10),
        }
    }

    /// Starts over.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// The next delay.
    ///
    /// Faithful (frp's schedule): three quick retries of 1–1.5 s, then 1 s doubling to a
    /// 20 s cap with ±10 % jitter — clients that lost the server together stay in lockstep.
    /// Hardened: "full jitter", uniform in `[0, min(15 s, 0.5 s · 2^n)]`, which spreads a
    /// fleet's reconnects over the whole window instead of synchronised waves. The cap is
    /// half the 30 s recovery bound: with a 30 s cap (the first design) a swarm-tunnel seed
    /// found a runtime that drew a 29.9 s wait just before a repair and, after one more
    /// failed registration, was back only 33 s after it.
    pub fn next_delay(&mut self, env: &SharedEnv) -> Duration {
        let n = self.failures;
        self.failures = self.failures.saturating_add(1);
        match self.variant {
            Variant::Faithful if n < 3 => {
                env.random_between(Duration::from_millis(1000), Duration::from_millis(1500))
            }
            Variant::Faithful => {
                let base = Duration::from_secs(1)
                    .saturating_mul(1u32 << (n - 3).min(8))
                    .min(Duration::from_secs(20));
                env.random_between(base.mul_f64(0.9), base.mul_f64(1.1))
            }
            Variant::Hardened => {
                let cap = Duration::from_millis(500)
                    .saturating_mul(1u32 << n.min(10))
                    .min(Duration::from_secs(15));
                env.random_between(Duration::ZERO, cap)
            }
        }
    }
}
