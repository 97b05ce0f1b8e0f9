//! Reconnect schedules, one per variant, with jitter drawn from the environment.
//!
//! **Faithful** is frp 0.44's `Service.keepControllerWorking` (`client/service.go`), two loops
//! (measured against the real frpc by `conformance/tests/conformance/frp.rs`):
//!
//! - **per drop** (the outer loop): the first three drops of a one-minute window wait
//!   0–0.5 s (`RandomSleep(1s, 0, 0.5)`); later ones wait `reconnectDelay` ±10 %
//!   (`RandomSleep(d, 0.9, 1.1)`), which starts at 1 s and doubles without a cap. The window
//!   is fixed, not sliding: it starts when the client starts, and the first drop after it
//!   ends (after its wait is drawn) resets the count and the delay and opens the next one.
//! - **per failed login** (the inner loop, after a drop's wait): log in at once; each
//!   failure waits `delayTime` ±10 %, which starts at 1 s and doubles to a 20 s cap; a
//!   successful login puts it back to 1 s.
//!
//! So a fleet that lost its server together retries together: at once, then after about 1,
//! 2, 4, 8, 16, 20, 20 … s. A failed **first** login ends the real client (`login_fail_exit`
//! defaults to true) — see [`super::Fatal`].
//!
//! **Hardened** is "full jitter": uniform in `[0, min(15 s, 0.5 s · 2^n)]` for the n-th
//! failure in a row, the same after a drop as after a failed attempt, starting over once a
//! tunnel stayed up 10 s.

use std::time::Duration;

use crate::core::Variant;
use crate::env::SharedEnv;

/// frp's per-drop window: drops counted in it, delays doubled in it.
const FRP_WINDOW: Duration = Duration::from_secs(60);
/// frp's cap on the wait between failed logins (`maxDelayTime`).
const FRP_LOGIN_CAP: Duration = Duration::from_secs(20);

/// Faithful: how long after a refused proxy registration ("router config conflict") frpc
/// asks again. Its proxy wrapper checks every 3 s (`statusCheckInterval`, a timer restarted
/// after each check) and resends once 30 s have passed since the error (`startErrTimeout`):
/// the 10th check when its timers' drift outruns the round trip of the refusal, as measured
/// against the real frpc on loopback by the conformance suite (30.0 s), else the 11th (33 s).
pub const FRP_PROXY_RETRY: Duration = Duration::from_secs(30);

/// The delay before each reconnect attempt.
#[derive(Clone, Debug)]
pub struct Reconnect {
    variant: Variant,
    /// Hardened: failures in a row since the last reset.
    failures: u32,
    /// Faithful: `reconnectCounts` (starts at 1).
    drops: u32,
    /// Faithful: `reconnectDelay`, the per-drop wait after the third drop of a window.
    drop_delay: Duration,
    /// Faithful: `cutoffTime`, when the current one-minute window ends (environment time).
    cutoff: Duration,
    /// Faithful: `delayTime`, the wait after the next failed login.
    login_delay: Duration,
}

impl Reconnect {
    /// A fresh schedule for a client started at `now` (the environment's elapsed time).
    pub fn new(variant: Variant, now: Duration) -> Self {
        Reconnect {
            variant,
            failures: 0,
            drops: 1,
            drop_delay: Duration::from_secs(1),
            cutoff: now + FRP_WINDOW,
            login_delay: Duration::from_secs(1),
        }
    }

    /// A tunnel came up (a login succeeded): faithful puts the per-login wait back to 1 s.
    pub fn logged_in(&mut self) {
        self.login_delay = Duration::from_secs(1);
    }

    /// A tunnel that had been up for `up` dropped at `now`: the wait before logging in again.
    pub fn after_drop(&mut self, env: &SharedEnv, up: Duration, now: Duration) -> Duration {
        match self.variant {
            Variant::Faithful => {
                let wait = if self.drops > 3 {
                    let wait = jitter(env, self.drop_delay);
                    self.drop_delay = self.drop_delay.saturating_mul(2);
                    wait
                } else {
                    env.random_between(Duration::ZERO, Duration::from_millis(500))
                };
                self.drops += 1;
                // frp looks at the clock after the wait: the wait counts toward the window.
                if now + wait > self.cutoff {
                    self.cutoff = now + wait + FRP_WINDOW;
                    self.drop_delay = Duration::from_secs(1);
                    self.drops = 1;
                }
                wait
            }
            Variant::Hardened => {
                if up >= Duration::from_secs(10) {
                    self.failures = 0;
                }
                self.full_jitter(env)
            }
        }
    }

    /// An attempt to log in failed (no connection, a refusal, a failed handshake): the wait
    /// before the next one.
    pub fn after_failed_attempt(&mut self, env: &SharedEnv) -> Duration {
        match self.variant {
            Variant::Faithful => {
                let wait = jitter(env, self.login_delay);
                self.login_delay = self.login_delay.saturating_mul(2).min(FRP_LOGIN_CAP);
                wait
            }
            Variant::Hardened => self.full_jitter(env),
        }
    }

    /// Hardened's wait: uniform in `[0, min(15 s, 0.5 s · 2^n)]`. The cap is half the 30 s
    /// recovery bound: with a 30 s cap (the first design) a swarm-tunnel seed found a runtime
    /// that drew a 29.9 s wait just before a repair and, after one more failed registration,
    /// was back only 33 s after it.
    fn full_jitter(&mut self, env: &SharedEnv) -> Duration {
        let n = self.failures;
        self.failures = self.failures.saturating_add(1);
        let cap = Duration::from_millis(500)
            .saturating_mul(1u32 << n.min(10))
            .min(Duration::from_secs(15));
        env.random_between(Duration::ZERO, cap)
    }
}

/// frp's `RandomSleep(d, 0.9, 1.1)`.
fn jitter(env: &SharedEnv, d: Duration) -> Duration {
    env.random_between(d.mul_f64(0.9), d.mul_f64(1.1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn env() -> SharedEnv {
        Arc::new(crate::env::RealEnv::new("backoff-test"))
    }

    #[test]
    fn faithful_retries_a_drop_at_once_then_doubles_failed_logins_to_20_s() {
        let env = env();
        let mut schedule = Reconnect::new(Variant::Faithful, Duration::ZERO);
        let first = schedule.after_drop(&env, Duration::from_secs(300), Duration::from_secs(300));
        assert!(first <= Duration::from_millis(500), "{first:?}");
        let waits: Vec<f64> = (0..8)
            .map(|_| schedule.after_failed_attempt(&env).as_secs_f64())
            .collect();
        for (wait, base) in waits
            .iter()
            .zip([1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0, 20.0])
        {
            assert!((wait - base).abs() <= base * 0.1 + 1e-9, "{waits:?}");
        }
        schedule.logged_in();
        let again = schedule.after_failed_attempt(&env).as_secs_f64();
        assert!((0.9..=1.1).contains(&again), "{again}");
    }

    #[test]
    fn faithful_slows_down_from_the_fourth_drop_of_a_minute_and_starts_over_after_it() {
        let env = env();
        let mut schedule = Reconnect::new(Variant::Faithful, Duration::ZERO);
        let mut now = Duration::from_secs(1);
        let mut waits = Vec::new();
        for _ in 0..5 {
            let wait = schedule.after_drop(&env, Duration::from_secs(1), now);
            waits.push(wait.as_secs_f64());
            now += wait + Duration::from_secs(1);
        }
        assert!(waits[..3].iter().all(|w| *w <= 0.5), "{waits:?}");
        assert!((0.9..=1.1).contains(&waits[3]), "{waits:?}");
        assert!((1.8..=2.2).contains(&waits[4]), "{waits:?}");
        // The first drop after the window still waits the doubled delay (frp looks at the
        // clock after sleeping), then the window starts over: quick again.
        let late = schedule.after_drop(&env, Duration::from_secs(100), Duration::from_secs(120));
        assert!((3.6..=4.4).contains(&late.as_secs_f64()), "{late:?}");
        let next = schedule.after_drop(&env, Duration::from_secs(1), Duration::from_secs(130));
        assert!(next <= Duration::from_millis(500), "{next:?}");
    }

    #[test]
    fn hardened_waits_are_full_jitter_and_start_over_after_a_tunnel_stayed_up() {
        let env = env();
        let mut schedule = Reconnect::new(Variant::Hardened, Duration::ZERO);
        for n in 0..12u32 {
            let cap = Duration::from_millis(500)
                .saturating_mul(1 << n.min(10))
                .min(Duration::from_secs(15));
            assert!(schedule.after_failed_attempt(&env) <= cap);
        }
        let wait = schedule.after_drop(&env, Duration::from_secs(10), Duration::from_secs(99));
        assert!(wait <= Duration::from_millis(500), "{wait:?}");
    }
}
