//! The cron executor (`cron-executor`, research §6: a platform service with no dependencies
//! named; what it runs is not public, so every job and period here is **inferred**): the
//! platform's periodic jobs, on the environment's clock.
//!
//! - **expired tokens**: users whose token expired (`expires` in the permissions file) are
//!   removed from the directory once `grace` has passed since, each removal audited (actor
//!   `platform`, action `cron expired-tokens`). The gateway refuses an expired token from
//!   the moment it expires (401 `user token expired at …`), whether or not the job ran:
//!   the job is hygiene, never the check.
//!
//! No flaw of the real executor is known, so both variants run the same jobs.

use std::sync::Arc;
use std::time::Duration;

use super::audit::{Actor, Audit, Outcome, Record};
use super::permissions::Permissions;
use crate::env::SharedEnv;

/// The executor's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// How often the jobs run. Default 60 s.
    pub every: Duration,
    /// How long after a token expired its user is removed. Default 0 (at the next run).
    pub grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            every: Duration::from_secs(60),
            grace: Duration::ZERO,
        }
    }
}

/// What the jobs work on: the platform's databases.
#[derive(Clone)]
pub struct Stores {
    /// Users and their tokens.
    pub permissions: Arc<Permissions>,
    /// Where every job's changes are recorded.
    pub audit: Arc<Audit>,
}

/// Runs the jobs every `config.every`, for ever.
pub async fn run(env: SharedEnv, config: Config, stores: Stores) {
    loop {
        env.sleep(config.every).await;
        expired_tokens(&env, &config, &stores);
    }
}

/// The expired-tokens job: removes and audits the users whose token expired `grace` ago or
/// earlier. Returns how many.
pub fn expired_tokens(env: &SharedEnv, config: &Config, stores: &Stores) -> usize {
    let grace_ms = u64::try_from(config.grace.as_millis()).unwrap_or(u64::MAX);
    let before = env.unix_millis().saturating_sub(grace_ms);
    let removed = stores.permissions.remove_expired(before);
    for user in &removed {
        tracing::info!(user = %user.name, account = %user.account, "cron: removed a user whose token expired");
        stores.audit.record(
            env,
            Record {
                actor: Actor::Platform,
                account: user.account.clone(),
                action: "cron expired-tokens".into(),
                runtime: String::new(),
                outcome: Outcome::Allowed,
                status: 200,
                reason: format!(
                    "user {}'s token expired at {}: removed",
                    user.name,
                    crate::core::time::rfc3339(user.expired_ms)
                ),
            },
        );
    }
    removed.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::permissions::Role;

    #[tokio::test(flavor = "current_thread")]
    async fn an_expired_token_is_refused_at_once_and_its_user_removed_after_the_grace() {
        let env: SharedEnv = Arc::new(crate::env::RealEnv::new("cron-test"));
        let now = env.unix_millis();
        let stores = Stores {
            permissions: Arc::default(),
            audit: Arc::default(),
        };
        stores
            .permissions
            .grant_in("old", "acme", "olga", &["audit:read"]);
        stores
            .permissions
            .add_user("new", "acme", "nina", Role::Member, &[]);
        stores.permissions.expire_at("old", now - 10_000);
        stores.permissions.expire_at("new", now + 3_600_000);
        // Refused from the moment it expired, before any job ran.
        assert_eq!(
            stores.permissions.user_at("old", now).map(|u| u.is_some()),
            Err(now - 10_000)
        );
        assert!(stores.permissions.user_at("new", now).unwrap().is_some());
        // Within the grace nothing is removed; after it, only the expired one.
        let config = Config {
            every: Duration::from_secs(1),
            grace: Duration::from_secs(60),
        };
        assert_eq!(expired_tokens(&env, &config, &stores), 0);
        assert!(stores.permissions.user("old").is_some());
        let config = Config {
            grace: Duration::from_secs(5),
            ..config
        };
        assert_eq!(expired_tokens(&env, &config, &stores), 1);
        assert!(stores.permissions.user("old").is_none());
        assert_eq!(stores.permissions.user_at("old", now), Ok(None));
        assert!(stores.permissions.user("new").is_some());
        // Her own rule went with her: a later olga inherits nothing.
        stores
            .permissions
            .add_user("again", "acme", "olga", Role::Member, &[]);
        let again = stores.permissions.user("again").unwrap();
        assert!(stores.permissions.rules_of(&again).is_empty());
        assert!(!stores.permissions.may_read_audit(&again));
        let log = stores.audit.query(Some("acme"), 0, 10);
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].actor, Actor::Platform);
        assert_eq!(log[0].action, "cron expired-tokens");
        assert!(
            log[0].reason.starts_with("user olga's token expired at "),
            "{}",
            log[0].reason
        );
        // Nothing left to do.
        assert_eq!(expired_tokens(&env, &config, &stores), 0);
    }
}
