//! Managed (destination) clusters as Argo CD knows them: registered by cluster Secrets
//! (`argocd.argoproj.io/secret-type: cluster` in Argo CD's namespace, with `name`, `server`
//! and `config` keys), and watched by Argo CD's cluster cache. An app whose destination is not
//! registered gets an `InvalidSpecError` condition; one whose cluster cannot be reached gets a
//! `ComparisonError`; both read sync and health `Unknown` until the cluster is back (issue 12;
//! the condition types are Argo CD's, the message texts and the `Unknown` health while the
//! comparison fails are [inferred] from Argo CD's behaviour, not from its source).
//!
//! Reachability is checked the way the cluster cache notices a dead cluster: a request to the
//! cluster's API server (`GET /version`) every [`PROBE_EVERY`], with a timeout; a change
//! marks every app on that cluster for an urgent refresh.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;
use serde_json::Value;

/// The in-cluster destination (the cluster Argo CD runs in).
pub const IN_CLUSTER: &str = "https://kubernetes.default.svc";
/// The label that makes a Secret a cluster registration.
pub const SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
/// How often each registered cluster is checked.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);
/// How long a check may take before the cluster counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What Argo CD knows about an app's destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The in-cluster destination: always there.
    InCluster,
    /// Registered and answering (or not checked yet).
    Connected,
    /// Registered, but the last check failed with this error.
    Unreachable(String),
    /// No cluster Secret names this server.
    Unregistered,
}

impl Reach {
    /// The app-status condition this reach gives, if any: (type, message).
    pub fn condition(&self, server: &str, namespace: &str) -> Option<(&'static str, String)> {
        match self {
            Reach::InCluster | Reach::Connected => None,
            Reach::Unreachable(error) => Some((
                "ComparisonError",
                format!("failed to sync cluster {server}: {error}"),
            )),
            Reach::Unregistered => Some((
                "InvalidSpecError",
                format!(
                    "Application destination {{{server} {namespace}}} is invalid: there are no clusters with this URL: {server}"
                ),
            )),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// server URL → `host:port` to dial.
    registered: BTreeMap<String, String>,
    /// server URL → the last check's error.
    unreachable: BTreeMap<String, String>,
    /// Servers whose reach changed since the controller last looked.
    changed: BTreeSet<String>,
}

/// Argo CD's view of its destination clusters, shared by the watch, the checks and the
/// controller.
#[derive(Clone, Debug, Default)]
pub struct Clusters(Arc<Mutex<Inner>>);

impl Clusters {
    /// How `server` stands now.
    pub fn reach(&self, server: &str) -> Reach {
        if server == IN_CLUSTER || server.is_empty() {
            return Reach::InCluster;
        }
        let inner = self.0.lock().expect("clusters lock poisoned");
        if !inner.registered.contains_key(server) {
            return Reach::Unregistered;
        }
        match inner.unreachable.get(server) {
            Some(error) => Reach::Unreachable(error.clone()),
            None => Reach::Connected,
        }
    }

    /// Servers whose reach changed since the last call.
    pub fn take_changed(&self) -> BTreeSet<String> {
        std::mem::take(&mut self.0.lock().expect("clusters lock poisoned").changed)
    }

    fn set_registered(&self, registered: BTreeMap<String, String>) {
        let mut inner = self.0.lock().expect("clusters lock poisoned");
        let before: BTreeSet<String> = inner.registered.keys().cloned().collect();
        let after: BTreeSet<String> = registered.keys().cloned().collect();
        let moved: Vec<String> = before.symmetric_difference(&after).cloned().collect();
        inner.changed.extend(moved);
        inner.unreachable.retain(|server, _| after.contains(server));
        inner.registered = registered;
    }

    /// Records a check's result; true when the cluster's reachability changed.
    fn set_checked(&self, server: &str, result: Result<(), String>) -> bool {
        let mut inner = self.0.lock().expect("clusters lock poisoned");
        if !inner.registered.contains_key(server) {
            return false;
        }
        let before = inner.unreachable.get(server).cloned();
        match result {
            Ok(()) => inner.unreachable.remove(server),
            Err(error) => inner.unreachable.insert(server.to_string(), error),
        };
        // A new error text for a cluster that was already down is not a change.
        let changed = before.is_some() != inner.unreachable.contains_key(server);
        if changed {
            inner.changed.insert(server.to_string());
        }
        changed
    }

    fn registered(&self) -> Vec<(String, String)> {
        let inner = self.0.lock().expect("clusters lock poisoned");
        inner
            .registered
            .iter()
            .map(|(s, a)| (s.clone(), a.clone()))
            .collect()
    }
}

/// `host:port` of a cluster's server URL (`https://cluster-a:6443` → `cluster-a:6443`;
/// the default port for the scheme when none is given).
pub fn addr_of(server: &str) -> Option<String> {
    let (scheme, rest) = server.split_once("://")?;
    let authority = rest.split('/').next().filter(|a| !a.is_empty())?;
    if authority.contains(':') {
        Some(authority.to_string())
    } else {
        let port = if scheme == "http" { 80 } else { 443 };
        Some(format!("{authority}:{port}"))
    }
}

/// The registered servers a set of cluster Secrets names.
fn registrations(secrets: &[Arc<Secret>]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for secret in secrets {
        let server = secret
            .data
            .as_ref()
            .and_then(|d| d.get("server"))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get("server").cloned())
            });
        if let Some((server, addr)) = server.and_then(|s| addr_of(&s).map(|a| (s, a))) {
            out.insert(server, addr);
        }
    }
    out
}

/// Watches the cluster Secrets in `namespace` and keeps `clusters` registered servers current.
pub async fn watch(env: SharedEnv, client: kube::Client, namespace: String, clusters: Clusters) {
    use futures::StreamExt;
    use kube::runtime::{reflector, watcher, WatchStreamExt};
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(&format!("{SECRET_TYPE_LABEL}=cluster"));
    let backoff = orrery_system::env::kube::SeededBackoff::new(env);
    watcher(api, config)
        .backoff(backoff)
        .reflect(writer)
        .for_each(move |event| {
            if matches!(
                event,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
            ) {
                clusters.set_registered(registrations(&reader.state()));
            }
            async {}
        })
        .await;
}

/// Checks every registered cluster every [`PROBE_EVERY`], all at once.
pub async fn check(env: SharedEnv, clusters: Clusters) {
    let http = orrery_system::env::http::client::<Full<Bytes>>(env.clone(), PROBE_TIMEOUT * 2);
    loop {
        let checks = clusters.registered().into_iter().map(|(server, addr)| {
            let http = http.clone();
            async move {
                let request = http::Request::get(format!("http://{addr}/version"))
                    .body(Full::new(Bytes::new()))
                    .expect("a valid request");
                let result = match tokio::time::timeout(PROBE_TIMEOUT, http.request(request)).await
                {
                    Err(_) => Err(format!(
                        "Get \"{server}/version\": dial tcp {addr}: i/o timeout"
                    )),
                    Ok(Err(e)) => Err(format!("Get \"{server}/version\": {e}")),
                    Ok(Ok(response)) if response.status().is_success() => Ok(()),
                    Ok(Ok(response)) => Err(format!(
                        "Get \"{server}/version\": the server answered {}",
                        response.status()
                    )),
                };
                (server, result)
            }
        });
        for (server, result) in futures::future::join_all(checks).await {
            let reachable = result.is_ok();
            if clusters.set_checked(&server, result) {
                env.observe(WorldEvent::ClusterReach { server, reachable }.into());
            }
        }
        env.sleep(PROBE_EVERY).await;
    }
}

// --- An Application's destination, as the controller and the AppProject checks read it. ---

/// `spec.destination` as (server, namespace); no server means in-cluster.
pub fn destination_of(app: &DynamicObject) -> (String, String) {
    (
        destination_server(app).to_string(),
        destination_field(app, "namespace").to_string(),
    )
}

/// The server of `app`'s destination (the in-cluster one when unset), borrowed: what
/// the controller checks for every app it looks at.
pub fn destination_server(app: &DynamicObject) -> &str {
    match destination_field(app, "server") {
        "" => IN_CLUSTER,
        server => server,
    }
}

/// `spec.destination[field]` as text ("" when absent).
fn destination_field<'a>(app: &'a DynamicObject, field: &str) -> &'a str {
    app.data
        .get("spec")
        .and_then(|s| s.get("destination"))
        .and_then(|d| d.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_map_to_addresses() {
        assert_eq!(
            addr_of("https://cluster-a:6443").as_deref(),
            Some("cluster-a:6443")
        );
        assert_eq!(
            addr_of("https://c.example").as_deref(),
            Some("c.example:443")
        );
        assert_eq!(
            addr_of("http://127.0.0.1:9/x").as_deref(),
            Some("127.0.0.1:9")
        );
        assert_eq!(addr_of("cluster-a"), None);
    }

    #[test]
    fn reach_follows_registration_and_checks_and_reports_changes() {
        let clusters = Clusters::default();
        let a = "https://cluster-a:6443";
        assert_eq!(clusters.reach(IN_CLUSTER), Reach::InCluster);
        assert_eq!(clusters.reach(a), Reach::Unregistered);
        clusters.set_registered(BTreeMap::from([(
            a.to_string(),
            "cluster-a:6443".to_string(),
        )]));
        assert_eq!(clusters.reach(a), Reach::Connected);
        assert_eq!(clusters.take_changed(), BTreeSet::from([a.to_string()]));
        clusters.set_checked(a, Err("i/o timeout".into()));
        clusters.set_checked(a, Err("refused".into()));
        assert_eq!(clusters.reach(a), Reach::Unreachable("refused".into()));
        assert_eq!(clusters.take_changed().len(), 1, "one change, not two");
        let (kind, message) = clusters.reach(a).condition(a, "ns").unwrap();
        assert_eq!(kind, "ComparisonError");
        assert!(message.contains("failed to sync cluster https://cluster-a:6443"));
        clusters.set_registered(BTreeMap::new());
        assert_eq!(clusters.reach(a), Reach::Unregistered);
        assert_eq!(
            clusters.reach(a).condition(a, "ns").unwrap().0,
            "InvalidSpecError"
        );
    }
}
