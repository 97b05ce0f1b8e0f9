//! Leader election through a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` does it for controller-runtime (`LEADER_ELECT` when replicas > 1):
//! a candidate takes the Lease when its record has not changed for `lease_duration` as
//! the candidate observed it (its own clock, not the record's times), the leader renews
//! every `retry_period` and steps down when it could not renew for `renew_deadline`.
//! controller-runtime then exits the process; here the caller drops its work and becomes a
//! candidate again (the pod's restart).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::core::time::rfc3339_micros;
use crate::env::SharedEnv;

/// client-go's and controller-runtime's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// How long a record must stay unchanged before another candidate takes it (15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down (10 s).
    pub renew_deadline: Duration,
    /// Between attempts to acquire or renew (2 s).
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate for one Lease.
pub struct Elector {
    env: SharedEnv,
    leases: Api<Lease>,
    name: String,
    me: String,
    timings: Timings,
    /// The record last seen (holder, renew time, transitions) and when it was first seen.
    observed: Option<(String, Duration)>,
}

/// What one attempt found.
enum Attempt {
    /// We hold the Lease.
    Held,
    /// Another holder's record is live.
    Taken,
    /// The API server could not be asked.
    Failed,
}

impl Elector {
    /// A candidate `me` for Lease `name` in the Api's namespace.
    pub fn new(env: SharedEnv, leases: Api<Lease>, name: &str, me: &str, timings: Timings) -> Self {
        Elector {
            env,
            leases,
            name: name.into(),
            me: me.into(),
            timings,
            observed: None,
        }
    }

    /// Returns once this candidate holds the Lease.
    pub async fn acquire(&mut self) {
        loop {
            if let Attempt::Held = self.attempt().await {
                return;
            }
            self.env.sleep(self.timings.retry_period).await;
        }
    }

    /// Renews the held Lease until a renewal has not succeeded for `renew_deadline`, then
    /// returns: leadership is lost.
    pub async fn hold(&mut self) {
        let mut renewed = self.env.elapsed();
        loop {
            self.env.sleep(self.timings.retry_period).await;
            // One deadline for the whole renewal, not one per attempt: past it another
            // candidate may already hold the Lease.
            let left = (renewed + self.timings.renew_deadline).saturating_sub(self.env.elapsed());
            let attempt = tokio::time::timeout(left, self.attempt()).await;
            match attempt {
                Ok(Attempt::Held) => renewed = self.env.elapsed(),
                Ok(Attempt::Taken) => return,
                Ok(Attempt::Failed) | Err(_) => {}
            }
            if self.env.elapsed().saturating_sub(renewed) >= self.timings.renew_deadline {
                return;
            }
        }
    }

    /// Gives the Lease up (a clean shutdown): its holder is cleared so another candidate
    /// takes it at once.
    pub async fn release(&mut self) {
        if let Ok(mut lease) = self.leases.get(&self.name).await {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() == Some(self.me.as_str()) {
                spec.holder_identity = None;
                let _ = self
                    .leases
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await;
            }
        }
    }

    /// One try: create the Lease, renew it, or take it over if its record expired.
    async fn attempt(&mut self) -> Attempt {
        let now = self.env.elapsed();
        let stamp = rfc3339_micros(self.env.unix_millis());
        let duration_s = self.timings.lease_duration.as_secs().max(1) as i32;
        let current = match self.leases.get_opt(&self.name).await {
            Ok(current) => current,
            Err(_) => return Attempt::Failed,
        };
        let Some(mut lease) = current else {
            let fresh: Lease = serde_json::from_value(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name},
                "spec": {"holderIdentity": self.me, "leaseDurationSeconds": duration_s,
                    "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0},
            }))
            .expect("a Lease");
            return match self.leases.create(&PostParams::default(), &fresh).await {
                Ok(_) => Attempt::Held,
                // Another candidate created it first.
                Err(kube::Error::Api(e)) if e.code == 409 => Attempt::Taken,
                Err(_) => Attempt::Failed,
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let record = format!(
            "{holder}|{}|{}",
            spec.renew_time
                .as_ref()
                .and_then(|t| serde_json::to_string(t).ok())
                .unwrap_or_default(),
            spec.lease_transitions.unwrap_or(0)
        );
        if self.observed.as_ref().map(|(r, _)| r) != Some(&record) {
            self.observed = Some((record, now));
        }
        let seen_at = self.observed.as_ref().map_or(now, |(_, at)| *at);
        let mine = holder == self.me;
        if !mine && !holder.is_empty() && now < seen_at + self.timings.lease_duration {
            return Attempt::Taken;
        }
        let mut next = spec;
        if !mine {
            next.holder_identity = Some(self.me.clone());
            next.acquire_time = serde_json::from_value(json!(stamp)).ok();
            next.lease_transitions = Some(next.lease_transitions.unwrap_or(0) + 1);
        }
        next.lease_duration_seconds = Some(duration_s);
        next.renew_time = serde_json::from_value(json!(stamp)).ok();
        lease.spec = Some(next);
        match self
            .leases
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Attempt::Held,
            // Another candidate wrote it since we read it.
            Err(kube::Error::Api(e)) if e.code == 409 => Attempt::Taken,
            // A 5xx or 429 is not someone else's lease: try again within the deadline.
            Err(_) => Attempt::Failed,
        }
    }
}
