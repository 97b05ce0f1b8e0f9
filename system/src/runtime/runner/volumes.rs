//! The dind volumes of the Runner's builds (`runner-research.md` §2.5): the **dind volume
//! provisioner**, which binds each build's claim to a volume of the same account — one a
//! finished build left behind (its Docker cache) or a new one — and deletes the volumes
//! marked for deletion once released; and the **local volumes cleaner** (`dind-lv-monitor`,
//! `lv-cleaner.sh`), which every 60 s, while the node's volumes fill 80 % of its disk, marks
//! the least recently used volume for deletion and `rm -rf`s a marked directory still there
//! 900 s later.
//!
//! | | faithful (`lv-cleaner.sh`, dind-volume-utils 25ac2cc) | hardened |
//! |---|---|---|
//! | which volume is marked | the least recently used of all (L220): a long build's volume, written at its start, is the oldest while still in use (§4 row 12, **inferred**: the script has no in-use check) | the least recently used of those no live claim holds |
//! | a marked directory 900 s later | removed (L167-189), under a running build if one holds it | removed only if no live claim holds it; otherwise unmarked |
//!
//! The **external volumes cleaner** (`dind-volume-cleanup`, chart values L234-256, README
//! L911-940): a CronJob every 10 minutes (`*/10 * * * *`, `concurrencyPolicy: Forbid`)
//! that deletes the volumes last used more than `RETENTION_DAYS` (4) ago, or more than a
//! claim's `codefresh.io/volume-retention` (`7d`). Its source is not public: that it
//! deletes only released volumes is **inferred** (Kubernetes' `pv-protection` finalizer
//! keeps a bound volume until its claim is gone anyway), and both variants run it alike —
//! no flaw of it is known. The provisioner copies the claim's annotation to its volume
//! (**inferred**), where the cleaner reads it after the claim is gone.
//!
//! The provisioner is not public (§0): reuse by the default selector (same account), the
//! same pipeline first (`reuseVolumeSortOrder: pipeline_id`), then the most recently used, is
//! **inferred** from the chart's README; a volume a live claim holds is never reused (the
//! docs' "locked", `pipeline-caching.md`). Volumes are modelled on one node whose volume
//! directory holds `node_gib`; each volume takes its claim's 16Gi. The directory is the
//! volume's annotations: its `last_used` file, the cleaner's `deleted` marker, and whether
//! it was removed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::{json, Value};

use crate::core::runner::dind_storage_class;
use crate::core::Variant;
use crate::env::kube::KubeTarget;
use crate::env::SharedEnv;
use crate::observe::RunnerEvent;

/// The `last_used` file: when a build last started or stopped on the volume (Unix ms).
pub const LAST_USED: &str = "codefresh.io/last-used";
/// The cleaner's `deleted` marker: when it marked the volume (Unix ms).
pub const DELETED: &str = "codefresh.io/deleted";
/// The volume's directory was removed (`rm -rf`) at this time (Unix ms).
pub const REMOVED: &str = "codefresh.io/removed";
/// The annotation the cleaner sets with its node's name (L123-137).
pub const NODE_REQUESTED_DELETION: &str = "node_requested_deletion";
/// The label the provisioner's volumes carry, as their claims do.
pub const APP_LABEL: &str = "codefresh-app";
/// The reuse selector's account label.
pub const ACCOUNT_LABEL: &str = "io.codefresh.accountName";
/// The sort order's label.
pub const PIPELINE_LABEL: &str = "pipeline_id";
/// The node the volumes live on (one here).
pub const NODE: &str = "node-1";
/// A claim's (and its volume's) own retention for the external cleaner (`7d`).
pub const RETENTION: &str = "codefresh.io/volume-retention";
/// The external cleaner's `RETENTION_DAYS` default.
pub const RETENTION_DAYS: Duration = Duration::from_secs(4 * 24 * 3600);
/// The external cleaner's CronJob period (`*/10 * * * *`).
pub const CLEANUP_EVERY: Duration = Duration::from_secs(600);

/// The provisioner's and the cleaner's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design runs (the cleaner's choice).
    pub variant: Variant,
    /// The cluster; the builds' claims are in its namespace.
    pub apiserver: KubeTarget,
    /// The node's volume directory's size.
    pub node_gib: u64,
    /// Each volume's size (the claims' 16Gi).
    pub volume_gib: u64,
    /// `KB_USAGE_THRESHOLD`: the cleaner acts at this usage (percent).
    pub threshold_pct: u64,
    /// `SLEEP_INTERVAL`: the cleaner's loop.
    pub sleep_interval: Duration,
    /// `DELETE_BY_RM_AFTER`: a marked directory still there this long after is removed.
    pub delete_by_rm_after: Duration,
    /// How often the provisioner looks for claims to bind.
    pub bind_every: Duration,
    /// The external cleaner's `RETENTION_DAYS`: a released volume last used longer ago is
    /// deleted (a volume's own `codefresh.io/volume-retention` wins).
    pub retention: Duration,
    /// The external cleaner's schedule: at every multiple of this since the Unix epoch.
    pub cleanup_every: Duration,
}

impl Config {
    /// The chart's and the script's defaults on a node of `node_gib`.
    pub fn new(variant: Variant, apiserver: KubeTarget, node_gib: u64) -> Self {
        Config {
            variant,
            apiserver,
            node_gib,
            volume_gib: 16,
            threshold_pct: 80,
            sleep_interval: Duration::from_secs(60),
            delete_by_rm_after: Duration::from_secs(900),
            bind_every: Duration::from_secs(1),
            retention: RETENTION_DAYS,
            cleanup_every: CLEANUP_EVERY,
        }
    }
}

/// The PersistentVolume type (cluster-scoped).
pub fn volume_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "PersistentVolume"),
        "persistentvolumes",
    )
}

fn claim_resource() -> ApiResource {
    super::exec::resource("PersistentVolumeClaim").expect("a kind the agent's tasks make")
}

/// Runs the provisioner and the cleaner until the process stops.
pub async fn run(env: SharedEnv, config: Config) {
    let client = crate::env::kube::client(env.clone(), &config.apiserver);
    let volumes: Api<DynamicObject> = Api::all_with(client.clone(), &volume_resource());
    let claims: Api<DynamicObject> =
        Api::namespaced_with(client, &config.apiserver.namespace, &claim_resource());
    let mut next_clean = env.elapsed() + config.sleep_interval;
    let every = (config.cleanup_every.as_millis() as u64).max(1);
    let mut next_cleanup = (env.unix_millis() / every + 1) * every;
    loop {
        env.sleep(config.bind_every).await;
        let Some(mut view) = View::read(&volumes, &claims, &config).await else {
            continue;
        };
        provision(&env, &config, &volumes, &claims, &mut view).await;
        if env.elapsed() >= next_clean {
            next_clean = env.elapsed() + config.sleep_interval;
            clean(&env, &config, &volumes, &view).await;
        }
        // The CronJob runs one job at a time (`Forbid`): a run missed while this loop was
        // busy is not run twice.
        if env.unix_millis() >= next_cleanup {
            next_cleanup = (env.unix_millis() / every + 1) * every;
            expire(&env, &config, &volumes, &view).await;
        }
    }
}

/// One read of the volumes and the claims.
struct View {
    /// The provisioner's volumes, by name.
    volumes: BTreeMap<String, DynamicObject>,
    /// The dind claims, by name.
    claims: BTreeMap<String, DynamicObject>,
}

impl View {
    async fn read(
        volumes: &Api<DynamicObject>,
        claims: &Api<DynamicObject>,
        config: &Config,
    ) -> Option<View> {
        let class = dind_storage_class(&config.apiserver.namespace);
        let by_name = |items: Vec<DynamicObject>| {
            items
                .into_iter()
                .filter(|o| o.data["spec"]["storageClassName"] == class.as_str())
                .filter_map(|o| Some((o.metadata.name.clone()?, o)))
                .collect::<BTreeMap<_, _>>()
        };
        let v = volumes
            .list(&ListParams::default().labels(&format!("{APP_LABEL}=dind")))
            .await
            .ok()?;
        let c = claims.list(&ListParams::default()).await.ok()?;
        Some(View {
            volumes: by_name(v.items),
            claims: by_name(c.items),
        })
    }

    /// The live claim holding `volume`, if any (a volume whose claim was deleted is
    /// released).
    fn holder(&self, volume: &DynamicObject) -> Option<&str> {
        let name = volume.data["spec"]["claimRef"]["name"].as_str()?;
        self.claims.get_key_value(name).map(|(k, _)| k.as_str())
    }
}

fn annotation(object: &DynamicObject, key: &str) -> Option<u64> {
    text_annotation(object, key)?.parse().ok()
}

fn text_annotation<'a>(object: &'a DynamicObject, key: &str) -> Option<&'a str> {
    object
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn label<'a>(object: &'a DynamicObject, key: &str) -> &'a str {
    object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

fn event(env: &SharedEnv, volume: &str, claim: &str, action: &str) {
    env.observe(
        RunnerEvent::Volume {
            volume: volume.into(),
            claim: claim.into(),
            action: action.into(),
        }
        .into(),
    );
}

/// Binds every unbound claim; deletes the released volumes marked for deletion.
async fn provision(
    env: &SharedEnv,
    config: &Config,
    volumes: &Api<DynamicObject>,
    claims: &Api<DynamicObject>,
    view: &mut View,
) {
    // A released volume whose reclaim policy the cleaner set to Delete is deleted.
    let doomed: Vec<String> = view
        .volumes
        .values()
        .filter(|v| v.data["spec"]["persistentVolumeReclaimPolicy"] == "Delete")
        .filter(|v| v.metadata.deletion_timestamp.is_none())
        .filter(|v| view.holder(v).is_none())
        .filter_map(|v| v.metadata.name.clone())
        .collect();
    for name in doomed {
        if volumes
            .delete(&name, &DeleteParams::default())
            .await
            .is_ok()
        {
            view.volumes.remove(&name);
            event(env, &name, "", "deleted");
        }
    }
    let unbound: Vec<DynamicObject> = view
        .claims
        .values()
        .filter(|c| {
            c.data["spec"]["volumeName"]
                .as_str()
                .unwrap_or("")
                .is_empty()
        })
        .cloned()
        .collect();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for claim in unbound {
        let Some(claim_name) = claim.metadata.name.clone() else {
            continue;
        };
        let account = label(&claim, ACCOUNT_LABEL);
        let pipeline = label(&claim, PIPELINE_LABEL);
        let mut free: Vec<&DynamicObject> = view
            .volumes
            .values()
            .filter(|v| view.holder(v).is_none() && v.metadata.deletion_timestamp.is_none())
            .filter(|v| annotation(v, DELETED).is_none() && annotation(v, REMOVED).is_none())
            .filter(|v| label(v, ACCOUNT_LABEL) == account)
            .filter(|v| !taken.contains(v.metadata.name.as_deref().unwrap_or("")))
            .collect();
        // The same pipeline's volume first, then the most recently used (its cache warmest).
        free.sort_by_key(|v| {
            (
                label(v, PIPELINE_LABEL) != pipeline,
                std::cmp::Reverse(annotation(v, LAST_USED).unwrap_or(0)),
                v.metadata.name.clone(),
            )
        });
        let claim_ref = json!({
            "kind": "PersistentVolumeClaim",
            "namespace": config.apiserver.namespace,
            "name": claim_name,
        });
        let (volume, action) = match free.first().and_then(|v| v.metadata.name.clone()) {
            Some(name) => {
                // The volume takes its new claim's retention (or loses the old one's).
                let retention = text_annotation(&claim, RETENTION);
                let patch = json!({
                    "metadata": {"annotations": {RETENTION: retention}},
                    "spec": {"claimRef": claim_ref},
                });
                if volumes
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_err()
                {
                    continue;
                }
                // The cleaner's pass below reads this view: the volume is held now.
                if let Some(held) = view.volumes.get_mut(&name) {
                    held.data["spec"]["claimRef"] = claim_ref;
                }
                (name, "reused")
            }
            None => {
                // Named after the claim's uid, as Kubernetes' provisioners name theirs
                // (`pvc-<uid>`): unique across namespaces and runs on one cluster.
                let id = claim
                    .metadata
                    .uid
                    .clone()
                    .unwrap_or_else(|| claim_name.clone());
                let name = format!("vol-{id}");
                let object = new_volume(config, &name, &claim, claim_ref, env.unix_millis());
                let Ok(object) = serde_json::from_value::<DynamicObject>(object) else {
                    continue;
                };
                match volumes.create(&PostParams::default(), &object).await {
                    Ok(created) => {
                        view.volumes.insert(name.clone(), created);
                    }
                    // Created by an earlier pass whose claim patch failed: bind it now.
                    Err(kube::Error::Api(e)) if e.reason == "AlreadyExists" => {}
                    Err(_) => continue,
                }
                (name, "created")
            }
        };
        taken.insert(volume.clone());
        let patch = json!({"spec": {"volumeName": volume}});
        if claims
            .patch(&claim_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .is_err()
        {
            continue;
        }
        let status = json!({"status": {"phase": "Bound"}});
        let _ = claims
            .patch_status(&claim_name, &PatchParams::default(), &Patch::Merge(&status))
            .await;
        event(env, &volume, &claim_name, action);
    }
}

/// A new volume's annotations: its `last_used`, and the claim's own retention if it has one.
fn volume_annotations(claim: &DynamicObject, now_ms: u64) -> Value {
    let mut annotations = json!({LAST_USED: now_ms.to_string()});
    if let Some(retention) = text_annotation(claim, RETENTION) {
        annotations[RETENTION] = json!(retention);
    }
    annotations
}

fn new_volume(
    config: &Config,
    name: &str,
    claim: &DynamicObject,
    claim_ref: Value,
    now_ms: u64,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "labels": {
                APP_LABEL: "dind",
                ACCOUNT_LABEL: label(claim, ACCOUNT_LABEL),
                PIPELINE_LABEL: label(claim, PIPELINE_LABEL),
            },
            "annotations": volume_annotations(claim, now_ms),
        },
        "spec": {
            "capacity": {"storage": format!("{}Gi", config.volume_gib)},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": dind_storage_class(&config.apiserver.namespace),
            "claimRef": claim_ref,
            "local": {"path": format!("/var/lib/codefresh/dind-volumes/{name}")},
            // A local volume needs its node (kube-apiserver refuses one without).
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]},
            ]}]}},
        },
    })
}

/// One pass of `lv-cleaner.sh`: removes the directories marked long enough ago, then, if
/// the node is still full, marks the least recently used volume.
async fn clean(env: &SharedEnv, config: &Config, volumes: &Api<DynamicObject>, view: &View) {
    let now = env.unix_millis();
    let after = config.delete_by_rm_after.as_millis() as u64;
    let mut present = 0u64;
    for (name, volume) in &view.volumes {
        if annotation(volume, REMOVED).is_some() {
            continue;
        }
        let marked = annotation(volume, DELETED);
        let holder = view.holder(volume).unwrap_or("");
        if marked.is_some_and(|at| now.saturating_sub(at) >= after) {
            if config.variant == Variant::Hardened && !holder.is_empty() {
                // Reused before the provisioner deleted it: keep it, unmarked.
                let patch = json!({
                    "metadata": {"annotations": {DELETED: null, NODE_REQUESTED_DELETION: null}},
                    "spec": {"persistentVolumeReclaimPolicy": "Retain"},
                });
                if volumes
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok()
                {
                    event(env, name, holder, "kept");
                }
                present += 1;
                continue;
            }
            let patch = json!({"metadata": {"annotations": {REMOVED: now.to_string()}}});
            if volumes
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
            {
                event(env, name, holder, "removed");
                continue;
            }
        }
        present += 1;
    }
    let usage = present * config.volume_gib * 100 / config.node_gib.max(1);
    if usage < config.threshold_pct {
        return;
    }
    let oldest = view
        .volumes
        .iter()
        .filter(|(_, v)| annotation(v, DELETED).is_none() && annotation(v, REMOVED).is_none())
        .filter(|(_, v)| config.variant == Variant::Faithful || view.holder(v).is_none())
        .min_by_key(|(name, v)| (annotation(v, LAST_USED).unwrap_or(0), (*name).clone()));
    let Some((name, volume)) = oldest else {
        return;
    };
    let patch = json!({
        "metadata": {"annotations": {DELETED: now.to_string(), NODE_REQUESTED_DELETION: NODE}},
        "spec": {"persistentVolumeReclaimPolicy": "Delete"},
    });
    if volumes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .is_ok()
    {
        event(env, name, view.holder(volume).unwrap_or(""), "marked");
    }
}

/// A retention as `dind-volume-cleanup` takes it: a number and `d`, `h`, `m` or `s`.
pub fn parse_retention(text: &str) -> Option<Duration> {
    let text = text.trim();
    let unit = text.chars().last()?;
    let n: u64 = text[..text.len() - unit.len_utf8()].parse().ok()?;
    let secs = match unit {
        'd' => n.checked_mul(24 * 3600)?,
        'h' => n.checked_mul(3600)?,
        'm' => n.checked_mul(60)?,
        's' => n,
        _ => return None,
    };
    Some(Duration::from_secs(secs))
}

/// One run of the external cleaner: deletes every released volume last used longer ago
/// than its retention. A volume whose `codefresh.io/volume-retention` does not parse keeps
/// the default, and the run says so.
async fn expire(env: &SharedEnv, config: &Config, volumes: &Api<DynamicObject>, view: &View) {
    let now = env.unix_millis();
    for (name, volume) in &view.volumes {
        if view.holder(volume).is_some() || volume.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let own = text_annotation(volume, RETENTION);
        let retention = match own.map(|text| (text, parse_retention(text))) {
            Some((_, Some(retention))) => retention,
            Some((text, None)) => {
                tracing::warn!(volume = %name, retention = %text, "not a retention (7d, 12h, 30m, 90s): the default applies");
                config.retention
            }
            None => config.retention,
        };
        let last_used = annotation(volume, LAST_USED).unwrap_or(0);
        if now.saturating_sub(last_used) < retention.as_millis() as u64 {
            continue;
        }
        if volumes.delete(name, &DeleteParams::default()).await.is_ok() {
            event(env, name, "", "expired");
        }
    }
}

/// The dind stand-in's part: the build's claim is bound (its pod can start), and the
/// volume's `last_used` is written (DIND `run.sh` L36-54, at start; again at its stop).
/// `None` while the claim is unbound or on an error.
pub async fn touch(
    env: &SharedEnv,
    client: &kube::Client,
    namespace: &str,
    claim: &str,
) -> Option<String> {
    let claims: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &claim_resource());
    let object = claims.get(claim).await.ok()?;
    let volume = object.data["spec"]["volumeName"].as_str()?.to_string();
    if volume.is_empty() {
        return None;
    }
    let volumes: Api<DynamicObject> = Api::all_with(client.clone(), &volume_resource());
    let patch = json!({"metadata": {"annotations": {LAST_USED: env.unix_millis().to_string()}}});
    volumes
        .patch(&volume, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .ok()?;
    Some(volume)
}

/// Whether `volume`'s directory is still there (`Some(false)`: removed or the volume
/// deleted; `None`: the API server did not answer).
pub async fn intact(client: &kube::Client, volume: &str) -> Option<bool> {
    let volumes: Api<DynamicObject> = Api::all_with(client.clone(), &volume_resource());
    match volumes.get_opt(volume).await {
        Ok(Some(v)) => Some(annotation(&v, REMOVED).is_none()),
        Ok(None) => Some(false),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_is_a_number_and_a_unit() {
        assert_eq!(parse_retention("7d"), Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_retention(" 12h "), Some(Duration::from_secs(43_200)));
        assert_eq!(parse_retention("30m"), Some(Duration::from_secs(1_800)));
        assert_eq!(parse_retention("90s"), Some(Duration::from_secs(90)));
        for bad in ["", "d", "7", "7w", "-1d", "1.5d", "99999999999999999999d"] {
            assert_eq!(parse_retention(bad), None, "{bad:?}");
        }
    }
}
