//! cronus, the cron event provider (`runner-research.md` §5, CRONUS @9461a26): it keeps
//! cron triggers and, at each tick, asks hermes to run the trigger's event
//! (`POST run/<eventURI>`, `pkg/hermes/hermes.go` L47-71), which starts the linked
//! pipeline's build. Here the event goes to `POST /api/cron/{trigger}/ticks` with the
//! time the tick was due.
//!
//! | | faithful (§4 row 10) | hardened (§7) |
//! |---|---|---|
//! | schedule | in memory (robfig/cron), each replica its own | the same schedule, fired only by the lease holder |
//! | a replica per pod | every replica fires every tick: N replicas, N builds ("cronus is not supported in HA mode, otherwise builds with CRON triggers will be duplicated", ONPREM README L1062) | one lease (`POST /api/cronus/lease`), and hermes dedupes by (trigger, scheduled time) |
//! | the call | fire-and-forget; an error is only logged (`pkg/cron/cron.go` L45-52, L128-148) | awaited; a tick not answered is fired again at the next round |
//! | downtime | the ticks it spans are lost, silently | the leader reads the ledger (`GET /api/cron/{trigger}`) and fires every tick since the last one handled; a tick older than [`Config::catch_up`] is reported missed instead |
//!
//! Ticks fall on multiples of the trigger's period since the Unix epoch, in UTC (cron
//! triggers are UTC, DOCS `cron-triggers.md` L25; mapping a cron expression to one period
//! is a simplification). A period under [`Config::min_every`] is refused (cronus' `LIMIT`,
//! 60 s, `cmd/main.go` L90-93). The lease's term, its renewal and the catch-up window are
//! [INFERENCE]: orrery's design.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::core::Variant;
use crate::env::SharedEnv;
use crate::observe::RunnerEvent;
use crate::runtime::upstream::Client;

/// One cron trigger: its name, its period, and the build its event asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Trigger {
    /// The trigger's name (its event URI's last part).
    pub name: String,
    /// Time between two ticks.
    pub every: Duration,
    /// The build body hermes is asked for (`pipeline`, `agent`, `branch`, `steps`).
    pub build: Value,
}

/// A cronus replica's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which cronus runs.
    pub variant: Variant,
    /// This replica's name (the lease holder's; its pod's name).
    pub replica: String,
    /// The platform's builds API (`host:port`).
    pub platform_api: String,
    /// The token hermes is called with.
    pub token: String,
    /// Its triggers.
    pub triggers: Vec<Trigger>,
    /// The shortest period accepted. Default 60 s (cronus' `LIMIT`).
    pub min_every: Duration,
    /// hardened: how long a lease lasts unless renewed; it is renewed every third of it.
    /// Default 15 s.
    pub lease_ttl: Duration,
    /// hardened: a tick found owed later than this after it was due is reported missed, not
    /// run. Default 10 min.
    pub catch_up: Duration,
    /// How long a call to the platform may take. Default 10 s.
    pub timeout: Duration,
}

impl Config {
    /// A replica named `replica` of `variant` with the defaults above.
    pub fn new(variant: Variant, replica: &str, platform_api: &str, token: &str) -> Self {
        Config {
            variant,
            replica: replica.into(),
            platform_api: platform_api.into(),
            token: token.into(),
            triggers: Vec::new(),
            min_every: Duration::from_secs(60),
            lease_ttl: Duration::from_secs(15),
            catch_up: Duration::from_secs(600),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Why cronus does not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A trigger's period is under the minimum.
    #[error("cron trigger {name}: period {every:?} is under the minimum {min:?} (cronus' LIMIT)")]
    TooFrequent {
        /// The trigger.
        name: String,
        /// Its period.
        every: Duration,
        /// The minimum.
        min: Duration,
    },
    /// Two triggers share a name.
    #[error("cron trigger {0} is defined twice")]
    Duplicate(String),
}

/// Runs one cronus replica until the process ends; an `Err` when its triggers are refused.
pub async fn run(env: SharedEnv, config: Config) -> Result<(), Error> {
    let mut names = std::collections::BTreeSet::new();
    for trigger in &config.triggers {
        if trigger.every < config.min_every || trigger.every.is_zero() {
            return Err(Error::TooFrequent {
                name: trigger.name.clone(),
                every: trigger.every,
                min: config.min_every,
            });
        }
        if !names.insert(trigger.name.as_str()) {
            return Err(Error::Duplicate(trigger.name.clone()));
        }
    }
    if config.triggers.is_empty() {
        return std::future::pending().await;
    }
    let client = Client::new(env.clone(), &config.platform_api, config.timeout);
    match config.variant {
        Variant::Faithful => faithful(env, config, client).await,
        Variant::Hardened => hardened(env, config, client).await,
    }
    Ok(())
}

/// The first tick of a period of `every_ms` strictly after `after_ms` (`u64::MAX` past the
/// end of time).
fn next_tick(every_ms: u64, after_ms: u64) -> u64 {
    (after_ms / every_ms.max(1))
        .checked_add(1)
        .and_then(|n| n.checked_mul(every_ms.max(1)))
        .unwrap_or(u64::MAX)
}

fn every_ms(trigger: &Trigger) -> u64 {
    (trigger.every.as_millis() as u64).max(1)
}

/// The call hermes gets for `trigger`'s tick at `scheduled_ms`: the build body with the time.
fn tick_body(trigger: &Trigger, scheduled_ms: u64, missed: bool) -> Value {
    let mut body = trigger.build.clone();
    if !body.is_object() {
        body = json!({});
    }
    body["scheduledMs"] = json!(scheduled_ms);
    if missed {
        body["missed"] = json!(true);
    }
    body
}

fn outcome(answer: &Value) -> String {
    let id = answer.get("id").and_then(Value::as_str).unwrap_or("?");
    if answer.get("duplicate").and_then(Value::as_bool) == Some(true) {
        format!("duplicate of {id}")
    } else {
        format!("build {id}")
    }
}

fn observe(env: &SharedEnv, config: &Config, trigger: &str, scheduled_ms: u64, outcome: String) {
    env.observe(
        RunnerEvent::Tick {
            host: config.replica.clone(),
            trigger: trigger.into(),
            scheduled_ms,
            outcome,
        }
        .into(),
    );
}

/// robfig/cron: sleep to the next tick, fire every trigger due then without waiting, again.
async fn faithful(env: SharedEnv, config: Config, client: Client) {
    let client = std::sync::Arc::new(client);
    loop {
        let now = env.unix_millis();
        let at = config
            .triggers
            .iter()
            .map(|t| next_tick(every_ms(t), now))
            .min()
            .expect("cronus has triggers");
        env.sleep(Duration::from_millis(at - now)).await;
        for trigger in config
            .triggers
            .iter()
            .filter(|t| at.is_multiple_of(every_ms(t)))
        {
            let (env, client, config) = (env.clone(), client.clone(), config.clone());
            let body = tick_body(trigger, at, false);
            let path = format!("/api/cron/{}/ticks", trigger.name);
            let name = trigger.name.clone();
            tokio::spawn(async move {
                let answer = client
                    .send(http::Method::POST, path, Some(&config.token), Some(&body))
                    .await;
                let outcome = match answer {
                    Ok(answer) => outcome(&answer),
                    Err(e) => format!("error: {e}"),
                };
                observe(&env, &config, &name, at, outcome);
            });
        }
    }
}

/// The lease holder fires what the ledger says is owed; the others only ask for the lease.
async fn hardened(env: SharedEnv, config: Config, client: Client) {
    let renew_every = config.lease_ttl / 3;
    // The lease's term on this replica's monotonic clock (`elapsed`), not its wall clock: a
    // wall clock stepped back (NTP) must not make a lapsed lease look held. Ticks are wall
    // time, as cron's are.
    let mut leader_until: Option<Duration> = None;
    // The ledger as the leader knows it: trigger → ticks handled up to (Unix ms).
    let mut handled: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        let asked = env.elapsed();
        let lease = client
            .send(
                http::Method::POST,
                "/api/cronus/lease".into(),
                Some(&config.token),
                Some(&json!({"holder": config.replica, "ttlMs": config.lease_ttl.as_millis() as u64})),
            )
            .await;
        let was_leader = leader_until.is_some();
        match lease {
            Ok(lease) if lease.get("leader").and_then(Value::as_bool) == Some(true) => {
                // Counted from when it was asked for: the platform granted it no earlier.
                leader_until = Some(asked + config.lease_ttl);
            }
            Ok(_) => leader_until = None,
            // Unanswered: it is ours until its term, no longer.
            Err(_) => {}
        }
        if leader_until.is_some_and(|until| env.elapsed() >= until) {
            leader_until = None;
        }
        if leader_until.is_some() != was_leader {
            env.observe(
                RunnerEvent::CronLeader {
                    host: config.replica.clone(),
                    leader: leader_until.is_some(),
                }
                .into(),
            );
            handled.clear();
        }
        if let Some(until) = leader_until {
            fire_owed(&env, &config, &client, &mut handled, until).await;
        }
        let now = env.unix_millis();
        let next = config
            .triggers
            .iter()
            .map(|t| next_tick(every_ms(t), now))
            .min()
            .unwrap_or(u64::MAX);
        let renew_in = (asked + renew_every).saturating_sub(env.elapsed());
        let tick_in = Duration::from_millis(next.saturating_sub(now));
        env.sleep(renew_in.min(tick_in)).await;
    }
}

/// Fires (or reports missed) every tick owed now, trigger by trigger, oldest first, while
/// the lease lasts; a trigger whose call was not answered waits for the next round, the
/// others go on.
async fn fire_owed(
    env: &SharedEnv,
    config: &Config,
    client: &Client,
    handled: &mut BTreeMap<String, u64>,
    lease_until: Duration,
) {
    for trigger in &config.triggers {
        let every = every_ms(trigger);
        if !handled.contains_key(&trigger.name) {
            // Registration is idempotent: the platform keeps the first time it saw it.
            let path = format!("/api/cron/{}", trigger.name);
            let body = json!({"everyMs": every});
            let Ok(ledger) = client
                .send(http::Method::PUT, path, Some(&config.token), Some(&body))
                .await
            else {
                continue;
            };
            let until = ledger
                .get("lastMs")
                .and_then(Value::as_u64)
                .or_else(|| ledger.get("createdMs").and_then(Value::as_u64))
                .unwrap_or_else(|| env.unix_millis());
            handled.insert(trigger.name.clone(), until);
        }
        loop {
            if env.elapsed() >= lease_until {
                return;
            }
            let now = env.unix_millis();
            let scheduled = next_tick(every, handled[&trigger.name]);
            if scheduled > now {
                break;
            }
            let missed = now - scheduled > config.catch_up.as_millis() as u64;
            let path = format!("/api/cron/{}/ticks", trigger.name);
            let body = tick_body(trigger, scheduled, missed);
            match client
                .send(http::Method::POST, path, Some(&config.token), Some(&body))
                .await
            {
                Ok(answer) if answer.get("missed").and_then(Value::as_bool) == Some(true) => {
                    observe(env, config, &trigger.name, scheduled, "missed".into());
                    handled.insert(trigger.name.clone(), scheduled);
                }
                // Claimed by an earlier call whose build is still being made: not handled
                // until it is (the next round asks again). The trigger's later ticks wait
                // (they go in order); the other triggers do not.
                Ok(answer) if answer.get("id").is_some_and(Value::is_null) => {
                    observe(env, config, &trigger.name, scheduled, "in flight".into());
                    break;
                }
                Ok(answer) => {
                    observe(env, config, &trigger.name, scheduled, outcome(&answer));
                    handled.insert(trigger.name.clone(), scheduled);
                }
                Err(e) => {
                    observe(env, config, &trigger.name, scheduled, format!("error: {e}"));
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_fall_on_multiples_of_the_period() {
        assert_eq!(next_tick(60_000, 0), 60_000);
        assert_eq!(next_tick(60_000, 59_999), 60_000);
        assert_eq!(next_tick(60_000, 60_000), 120_000);
        assert_eq!(next_tick(60_000, u64::MAX - 1), u64::MAX);
    }

    #[test]
    fn a_tick_body_carries_its_time_and_whether_it_was_missed() {
        let trigger = Trigger {
            name: "nightly".into(),
            every: Duration::from_secs(60),
            build: json!({"pipeline": "p", "agent": "a"}),
        };
        assert_eq!(
            tick_body(&trigger, 120_000, false),
            json!({"pipeline": "p", "agent": "a", "scheduledMs": 120_000})
        );
        assert_eq!(tick_body(&trigger, 60_000, true)["missed"], json!(true));
    }
}
