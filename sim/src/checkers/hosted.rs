//! `vcluster_isolation` (safety, end state): each tenant sees only its virtual cluster, and
//! what its workloads read on the shared host cluster is its own. For every vcluster, after
//! the calm phase:
//!
//! - **foreign**: the host object a pod of a virtual object's namespace mounts under the
//!   object's name (the syncer's host name for it) is another object's copy — a Secret of
//!   another namespace or another tenant;
//! - **missing**: there is no object at that host name;
//! - **stale**: the copy is the object's but its content is not the object's;
//! - **orphan**: a copy in the vcluster's host namespace whose object is gone, that is not
//!   at its object's host name, or that is another vcluster's (tenants' copies never share
//!   a namespace).
//!
//! The calm phase is long enough for the syncer to finish (its retries wait at most 30 s),
//! so what is left then is what the tenant's workloads keep reading.
//!
//! `hosted_runtimes_converge` (safety, end state; `platform_converges` for each hosted
//! runtime): after the calm phase the platform shows each hosted runtime's apps exactly as
//! its own virtual cluster holds them — every tenant's apps have the same names, so an
//! event the platform filed under another tenant's runtime shows as a stale or extra app.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use orrery_system::platform::events::read_model::AppState;
use orrery_system::platform::vcluster::naming::Identity;

use super::{AppTruth, Checker, Class, FinalState, Violation};

/// What a pod mounts at a virtual object's host name.
#[derive(Clone, Debug, PartialEq)]
pub struct Mounted {
    /// Whose copy the host object says it is.
    pub owner: Identity,
    /// Its `data`, `binaryData` and `type`.
    pub content: Value,
}

/// One object of a virtual cluster at the end.
#[derive(Clone, Debug, PartialEq)]
pub struct VirtualObject {
    /// `configmaps` or `secrets`.
    pub kind: &'static str,
    /// Its namespace in the virtual cluster.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its `data`, `binaryData` and `type`.
    pub content: Value,
    /// The syncer's host name for it (the variant's naming).
    pub host_name: String,
    /// The host object at that name, if any.
    pub mounted: Option<Mounted>,
}

/// One object of a vcluster's host namespace at the end.
#[derive(Clone, Debug, PartialEq)]
pub struct Copy {
    /// `configmaps` or `secrets`.
    pub kind: &'static str,
    /// Its name on the host.
    pub host_name: String,
    /// Whose copy it says it is.
    pub owner: Identity,
    /// Its content.
    pub content: Value,
}

/// A vcluster and its host namespace at the end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VclusterTruth {
    /// The vcluster's name.
    pub vcluster: String,
    /// Its host namespace.
    pub host_namespace: String,
    /// Its virtual objects.
    pub objects: Vec<VirtualObject>,
    /// The objects of its host namespace.
    pub copies: Vec<Copy>,
    /// The tenant's hosted runtime, when the world runs one (`hosted.applications`).
    pub runtime: Option<HostedRuntimeTruth>,
}

/// A hosted runtime at the end: its virtual cluster's Applications and what the platform
/// shows for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostedRuntimeTruth {
    /// The platform's name for it (`<account>-<runtime>`, its read model's key).
    pub runtime: String,
    /// Every Application in its virtual cluster, sorted by key.
    pub apps: Vec<AppTruth>,
    /// The platform's read model of it.
    pub reported: BTreeMap<String, AppState>,
}

/// One broken promise, for the report.
fn problems(truth: &VclusterTruth) -> Vec<Value> {
    let mut found = Vec::new();
    for object in &truth.objects {
        let at = format!("{}/{}/{}", object.kind, object.namespace, object.name);
        match &object.mounted {
            None => found.push(json!({
                "problem": "missing", "object": at, "host_object": object.host_name,
            })),
            Some(mounted)
                if mounted.owner.vcluster != truth.vcluster
                    || mounted.owner.namespace != object.namespace
                    || mounted.owner.name != object.name =>
            {
                found.push(json!({
                    "problem": "foreign", "object": at, "host_object": object.host_name,
                    "holds": format!("{} {}", mounted.owner.vcluster, mounted.owner.object()),
                }))
            }
            Some(mounted) if mounted.content != object.content => found.push(json!({
                "problem": "stale", "object": at, "host_object": object.host_name,
            })),
            Some(_) => {}
        }
    }
    for copy in &truth.copies {
        // Owned: a live object's copy, at that object's host name.
        let owned = copy.owner.vcluster == truth.vcluster
            && truth.objects.iter().any(|o| {
                o.kind == copy.kind
                    && o.namespace == copy.owner.namespace
                    && o.name == copy.owner.name
                    && o.host_name == copy.host_name
            });
        if !owned {
            found.push(json!({
                "problem": "orphan", "host_object": format!("{}/{}", copy.kind, copy.host_name),
                "copy_of": format!("{} {}", copy.owner.vcluster, copy.owner.object()),
            }));
        }
    }
    found
}

/// The checker.
#[derive(Default)]
pub struct VclusterIsolation;

impl Checker for VclusterIsolation {
    fn name(&self) -> &'static str {
        "vcluster_isolation"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let (vcluster, found) = state
            .hosted
            .iter()
            .map(|truth| (truth, problems(truth)))
            .find(|(_, found)| !found.is_empty())?;
        let count = |kind: &str| found.iter().filter(|p| p["problem"] == kind).count();
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: state.end_ms,
            host: vcluster.vcluster.clone(),
            details: json!({
                "foreign": count("foreign"),
                "missing": count("missing"),
                "stale": count("stale"),
                "orphan": count("orphan"),
                "first": found.first(),
            }),
        })
    }
}

/// The checker of `hosted_runtimes_converge`.
pub struct HostedRuntimesConverge;

impl Checker for HostedRuntimesConverge {
    fn name(&self) -> &'static str {
        "hosted_runtimes_converge"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let diverged: Vec<_> = state
            .hosted
            .iter()
            .filter_map(|truth| Some((truth.vcluster.as_str(), truth.runtime.as_ref()?)))
            .map(|(vcluster, runtime)| {
                let stale = super::platform::stale_apps(&runtime.apps, &runtime.reported);
                (vcluster, runtime, stale)
            })
            .filter(|(_, _, stale)| !stale.is_empty())
            .collect();
        let (vcluster, runtime, stale) = diverged.first()?;
        let example = |key: &String| {
            let truth = runtime.apps.iter().find(|a| &a.key == key);
            json!({
                "app": key,
                "vcluster": truth.map(|t| json!({"sync": t.sync_status, "revision": t.revision, "health": t.health_status})),
                "platform": runtime.reported.get(key).map(|r| json!({"sync": r.sync_status, "revision": r.revision, "health": r.health_status, "deleted": r.deleted})),
            })
        };
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: state.end_ms,
            host: vcluster.to_string(),
            details: json!({
                "runtime": runtime.runtime,
                "runtimes_diverged": diverged.iter().map(|(_, r, _)| r.runtime.as_str()).collect::<Vec<_>>(),
                "apps": runtime.apps.len(),
                "stale_or_missing": stale.len(),
                "examples": stale.iter().take(5).map(example).collect::<Vec<_>>(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(namespace: &str, name: &str) -> Identity {
        Identity {
            vcluster: "acme".into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Identity::default()
        }
    }

    fn object(namespace: &str, name: &str, mounted: Option<Mounted>) -> VirtualObject {
        VirtualObject {
            kind: "secrets",
            namespace: namespace.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            content: json!({"data": {"value": name}}),
            host_name: format!("{name}-x-{namespace}-x-acme"),
            mounted,
        }
    }

    fn copy_of(namespace: &str, name: &str) -> Copy {
        Copy {
            kind: "secrets",
            host_name: format!("{name}-x-{namespace}-x-acme"),
            owner: owner(namespace, name),
            content: json!({"data": {"value": name}}),
        }
    }

    fn mounted(namespace: &str, name: &str) -> Option<Mounted> {
        Some(Mounted {
            owner: owner(namespace, name),
            content: json!({"data": {"value": name}}),
        })
    }

    fn check(truth: VclusterTruth) -> Option<Violation> {
        let state = FinalState {
            hosted: vec![truth],
            end_ms: 5_000,
            ..FinalState::default()
        };
        VclusterIsolation.at_end(&state)
    }

    fn synced() -> VclusterTruth {
        VclusterTruth {
            vcluster: "acme".into(),
            host_namespace: "vc-acme".into(),
            objects: vec![object("prod", "db", mounted("prod", "db"))],
            copies: vec![copy_of("prod", "db")],
            runtime: None,
        }
    }

    #[test]
    fn holds_when_every_object_mounts_its_own_copy() {
        assert!(check(synced()).is_none());
    }

    /// The faithful collision: `team-x-prod/db` mounts `prod/db-x-team`'s copy.
    #[test]
    fn fires_on_another_objects_copy() {
        let mut truth = synced();
        truth
            .objects
            .push(object("prod", "db-x-team", mounted("prod", "db-x-team")));
        truth
            .objects
            .push(object("team-x-prod", "db", mounted("prod", "db-x-team")));
        truth.copies.push(copy_of("prod", "db-x-team"));
        let violation = check(truth).expect("a foreign copy is a violation");
        assert_eq!(violation.class, Class::Safety);
        assert_eq!(violation.details["foreign"], 1);
        assert_eq!(
            violation.details["first"]["object"],
            "secrets/team-x-prod/db"
        );
    }

    #[test]
    fn fires_on_a_missing_stale_or_orphaned_copy() {
        let mut missing = synced();
        missing.objects[0].mounted = None;
        missing.copies.clear();
        assert_eq!(check(missing).expect("missing").details["missing"], 1);

        let mut stale = synced();
        stale.objects[0].content = json!({"data": {"value": "new"}});
        assert_eq!(check(stale).expect("stale").details["stale"], 1);

        let mut orphan = synced();
        orphan.copies.push(copy_of("prod", "gone"));
        assert_eq!(check(orphan).expect("orphan").details["orphan"], 1);

        let mut stray = synced();
        let mut second = copy_of("prod", "db");
        second.host_name = "db-stray".into();
        stray.copies.push(second);
        assert_eq!(
            check(stray).expect("a copy at a stray name").details["orphan"],
            1
        );

        let mut other_tenant = synced();
        let mut theirs = copy_of("prod", "db");
        theirs.owner.vcluster = "globex".into();
        theirs.host_name = "db-x-prod-x-globex".into();
        other_tenant.copies.push(theirs);
        assert_eq!(
            check(other_tenant).expect("another vcluster's").details["orphan"],
            1
        );
    }

    fn app(key: &str, revision: &str) -> AppTruth {
        AppTruth {
            key: key.into(),
            sync_status: "Synced".into(),
            revision: revision.into(),
            health_status: "Healthy".into(),
            ..AppTruth::default()
        }
    }

    fn shown(revision: &str) -> AppState {
        AppState {
            sync_status: "Synced".into(),
            revision: revision.into(),
            health_status: "Healthy".into(),
            ..AppState::default()
        }
    }

    fn converge(runtimes: Vec<HostedRuntimeTruth>) -> Option<Violation> {
        let state = FinalState {
            hosted: runtimes
                .into_iter()
                .map(|runtime| VclusterTruth {
                    runtime: Some(runtime),
                    ..synced()
                })
                .collect(),
            end_ms: 5_000,
            ..FinalState::default()
        };
        HostedRuntimesConverge.at_end(&state)
    }

    fn runtime(name: &str, revision: &str) -> HostedRuntimeTruth {
        HostedRuntimeTruth {
            runtime: name.into(),
            apps: vec![app("argocd/web", revision)],
            reported: BTreeMap::from([("argocd/web".to_string(), shown(revision))]),
        }
    }

    #[test]
    fn hosted_runtimes_converge_holds_when_each_runtime_shows_its_own_apps() {
        assert!(converge(vec![
            runtime("acme-hosted", "a1"),
            runtime("globex-hosted", "g1")
        ])
        .is_none());
        // A world without hosted runtimes has nothing to check.
        assert!(converge(Vec::new()).is_none());
    }

    /// Two tenants' apps share names: one shown with the other's revision, or an app of
    /// the other's shown under it, is a violation naming the runtime.
    #[test]
    fn hosted_runtimes_converge_fires_on_another_tenants_state_or_a_missing_app() {
        let mut mixed = runtime("globex-hosted", "g1");
        mixed.reported.insert("argocd/web".into(), shown("a1"));
        let violation = converge(vec![runtime("acme-hosted", "a1"), mixed])
            .expect("another tenant's revision is a violation");
        assert_eq!(violation.class, Class::Safety);
        // Each runtime's truth sits on the vcluster `synced()` names.
        assert_eq!(violation.host, "acme");
        assert_eq!(violation.details["runtime"], "globex-hosted");
        assert_eq!(
            violation.details["runtimes_diverged"],
            json!(["globex-hosted"])
        );
        assert_eq!(violation.details["stale_or_missing"], 1);

        let mut extra = runtime("acme-hosted", "a1");
        extra.reported.insert("argocd/api".into(), shown("g1"));
        assert_eq!(
            converge(vec![extra])
                .expect("an app it does not have")
                .details["examples"][0]["app"],
            "argocd/api"
        );

        let mut missing = runtime("acme-hosted", "a1");
        missing.reported.clear();
        assert!(converge(vec![missing]).is_some());
    }
}
