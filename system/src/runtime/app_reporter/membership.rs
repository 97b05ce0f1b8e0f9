//! hardened: shard membership from Kubernetes `Lease`s.
//!
//! Each replica holds the lease `app-reporter-<host>` and renews it every `lease_renew`;
//! members are the holders whose lease has not expired. On every change the replica
//! recomputes which apps it owns (rendezvous hashing), queues the apps it gained (a
//! targeted resync) and forgets those it lost. A crashed replica's apps move once its
//! lease expires, so an app is orphaned for at most `lease_duration + lease_renew`.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use super::{shard, Config, Replica};
use crate::core::time::{parse_rfc3339, rfc3339_micros};
use crate::core::Variant;
use crate::env::{Point, SharedEnv};
use crate::observe::ReporterEvent;

const PREFIX: &str = "app-reporter-";

/// Renews this replica's lease and refreshes membership until the host stops.
pub async fn run(replica: Arc<Replica>, client: kube::Client) {
    let leases: Api<Lease> = Api::namespaced(client, &replica.config.namespace);
    let name = format!("{PREFIX}{}", replica.me);
    let duration_s = replica.config.lease_duration.as_secs().max(1) as i32;
    // When our lease was last written (its renewTime, in environment time): the others
    // count it live until `last_renewed + lease_duration`, and so do we.
    let mut last_renewed = replica.env.elapsed();
    loop {
        let now_ms = replica.env.unix_millis();
        let attempt_at = replica.env.elapsed();
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": replica.me, "leaseDurationSeconds": duration_s, "renewTime": rfc3339_micros(now_ms)},
        });
        let renewal = async {
            if replica.env.buggify(Point::ReporterLeaseRenewLate) {
                // Fault point: the renewal is held back (a throttled client, a long pause)
                // past the lease's expiry, while the replica's other tasks go on.
                let duration = replica.config.lease_duration;
                let late = replica.env.random_between(duration, duration * 2);
                replica.env.sleep(late).await;
            }
            let renewed = leases
                .patch(
                    &name,
                    &PatchParams::apply("app-reporter").force(),
                    &Patch::Apply(lease),
                )
                .await;
            let listed = leases.list(&ListParams::default()).await;
            (renewed, listed)
        };
        tokio::pin!(renewal);
        // Our lease expires for the others at `last_renewed + lease_duration` whether or not
        // this renewal is still under way: step down then instead of reporting apps we can
        // no longer prove we own (client-go's leader election has the same renew deadline).
        let expires_in =
            (last_renewed + replica.config.lease_duration).saturating_sub(replica.env.elapsed());
        let (renewed, listed) = tokio::select! {
            done = &mut renewal => done,
            _ = replica.env.sleep(expires_in) => {
                replica.env.observe(ReporterEvent::LeaseError { replica: replica.me.clone() }.into());
                update(&replica, Vec::new());
                renewal.await
            }
        };
        match listed {
            Ok(list) if renewed.is_ok() => {
                last_renewed = attempt_at;
                let mut members: Vec<String> = list
                    .items
                    .iter()
                    .filter(|l| {
                        l.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(PREFIX))
                    })
                    .filter_map(|l| {
                        let spec = l.spec.as_ref()?;
                        let renew = parse_rfc3339(
                            serde_json::to_value(spec.renew_time.as_ref()?)
                                .ok()?
                                .as_str()?,
                        )?;
                        let live = renew + u64::try_from(spec.lease_duration_seconds?).ok()? * 1000
                            > now_ms;
                        live.then(|| spec.holder_identity.clone()).flatten()
                    })
                    .collect();
                members.sort();
                members.dedup();
                update(&replica, members);
            }
            _ => {
                // Cannot renew: once our lease has expired others own our apps, so stop
                // reporting what we can no longer prove we own.
                replica.env.observe(
                    ReporterEvent::LeaseError {
                        replica: replica.me.clone(),
                    }
                    .into(),
                );
                if replica.env.elapsed().saturating_sub(last_renewed)
                    > replica.config.lease_duration
                {
                    update(&replica, Vec::new());
                }
            }
        }
        replica.env.sleep(replica.config.lease_renew).await;
    }
}

/// Applies a new member list: queue apps gained, forget apps lost.
fn update(replica: &Replica, members: Vec<String>) {
    let previous = replica.state().members.clone();
    if previous == members {
        return;
    }
    let mut apps = replica.store.state();
    apps.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut gained = 0;
    {
        let mut state = replica.state();
        for app in &apps {
            let Some(name) = app.metadata.name.as_deref() else {
                continue;
            };
            let namespace = app.metadata.namespace.as_deref().unwrap_or("");
            if !replica.config.reports(namespace) {
                continue;
            }
            let key = super::app_key(namespace, name);
            let was = shard::rendezvous_owner(name, &previous) == Some(replica.me.as_str());
            let is = shard::rendezvous_owner(name, &members) == Some(replica.me.as_str());
            if is && !was {
                state.hardened.push(&key);
                gained += 1;
            } else if was && !is {
                state.hardened.forget(&key);
            }
        }
        state.members = members.clone();
    }
    replica.env.observe(
        ReporterEvent::Membership {
            replica: replica.me.clone(),
            members,
            gained: gained as u64,
        }
        .into(),
    );
    replica.wake.notify_waiters();
}

/// hardened: deletes this replica's lease on shutdown, so the other replicas see it gone at
/// their next renewal instead of after the lease expires. faithful has no lease.
pub async fn release_lease(env: SharedEnv, config: &Config) {
    if config.variant != Variant::Hardened {
        return;
    }
    let me = env.identity().host.clone();
    let client = crate::env::kube::client(env.clone(), &config.apiserver);
    let leases: Api<Lease> = Api::namespaced(client, &config.namespace);
    let deleted = leases
        .delete(&format!("{PREFIX}{me}"), &DeleteParams::default())
        .await
        .is_ok();
    env.observe(
        ReporterEvent::LeaseReleased {
            replica: me,
            deleted,
        }
        .into(),
    );
}
