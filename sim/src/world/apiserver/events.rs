//! Events expire. kube-apiserver stores every Event under an etcd lease of `--event-ttl`
//! (one hour by default), set again by each write that changes it, and etcd drops the key
//! when the lease runs out: watchers see it DELETED. Here each written Event's expiry is
//! kept beside the store and a reaper task deletes the Events whose hour is up. (etcd's
//! leases are shared by the writes of a short window, so a real Event can outlive its hour
//! by up to 5 %; that spread is not modelled.)

use std::sync::Arc;
use std::time::Duration;

use orrery_system::env::SharedEnv;

use super::{ApiServer, ResourceKind};

/// kube-apiserver's `--event-ttl` default.
pub const TTL: Duration = Duration::from_secs(3600);

/// Whether `kind` is core/v1 Event, the type that expires.
pub fn is_event(kind: &ResourceKind) -> bool {
    !kind.custom && kind.group.is_empty() && kind.kind == "Event"
}

/// Whether `value` is Go's zero time written out (`0001-01-01T00:00:00Z`, any zero
/// fraction): the typed object writes it back as null (validation still counts an
/// `eventTime` sent so as set).
pub fn is_zero_time(value: &serde_json::Value) -> bool {
    value.as_str().is_some_and(|text| {
        text.strip_prefix("0001-01-01T00:00:00")
            .and_then(|rest| rest.strip_suffix('Z'))
            .is_some_and(|fraction| {
                fraction.is_empty()
                    || fraction.strip_prefix('.').is_some_and(|digits| {
                        !digits.is_empty() && digits.bytes().all(|b| b == b'0')
                    })
            })
    })
}

/// The reaper: deletes the Events that are due, sleeps until the next one is, and ends when
/// none is left to expire (a write of an Event starts it again).
pub async fn reap(env: SharedEnv, server: Arc<ApiServer>) {
    loop {
        let now = env.elapsed();
        let Some(next) = server.expire_events(&env) else {
            return;
        };
        env.sleep(next.saturating_sub(now)).await;
    }
}
