//! The restricted-source invariants (issue 15 item 4), judged from the world's typed events
//! (`restricted.*`: what the platform team applied, which AppProjects Argo CD was given,
//! what it deployed):
//!
//! - `restricted_sources` (safety): Argo CD never deploys an app outside the
//!   RestrictedGitSource that governs it. An app is governed by the source named like its
//!   project and by the source whose Git Source deployed it (its app-of-apps parent). It is
//!   inside a source when it lives in the source's `sourceNamespace` (or is the source's
//!   own Git Source app in `argocd`), its repository matches the source's repository or
//!   `sourceRepos`, and its destination matches `destinations` or the in-cluster
//!   `sourceNamespace`. A source that changed may still be in force for
//!   [`PROPAGATION_MS`] after the change (the operator and Argo CD need that long to apply
//!   it; `restricted_source_applied` bounds it): a deployment is judged at the time Argo CD
//!   recorded it (its history entry's `deployedAt`, to the second) against every version of
//!   the source in force during the preceding [`PROPAGATION_MS`], and must be inside one of
//!   them. Inside means what the source's author was promised — Argo CD's documented rule,
//!   "an allow entry permits it and no deny entry (`!`) rejects it" — with Argo CD's own
//!   globs and normalised repository URLs (`world::argocd::projects`, compared with a real
//!   Argo CD by the conformance suite). Argo CD's code differs once a deny entry is present:
//!   it permits everything the deny entries do not name (argoproj/argo-cd#21264), so a
//!   source with a deny entry copied into its AppProject as it is lets out what its allow
//!   entries keep in, and this invariant says so.
//! - `restricted_source_applied` (liveness): every change to a source is reflected in its
//!   AppProject (repositories, destinations and source namespaces as above; deleted with the
//!   source) within [`PROPAGATION_MS`], unless changed again before; the last version by the
//!   end of the run. A source with a deny entry is also reflected by having no AppProject:
//!   refusing it fails closed (hardened's answer to argo-cd#21264).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use orrery_system::core::json::Pointer as _;
use orrery_system::observe::WorldEvent;
use orrery_system::runtime::gitops_operator::restricted::{deny_entry, IN_CLUSTER};

use super::{Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;
use crate::world::argocd::projects::{destination_permitted, source_permitted, Destination};

/// How long a source change may take to reach Argo CD: a faithful poll (10 s) after a
/// leader failover (a 15 s lease and a 2 s retry), with slack.
pub const PROPAGATION_MS: u64 = 30_000;

/// What a source permits, reduced to what both the checker and the AppProject compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permits {
    /// Repository patterns.
    pub repos: BTreeSet<String>,
    /// (server, namespace) patterns.
    pub destinations: BTreeSet<(String, String)>,
    /// The namespace its Applications live in.
    pub namespaces: BTreeSet<String>,
    /// Whether a repository or destination entry (its server, name or namespace) is a deny
    /// entry (`!…`).
    pub deny: bool,
}

impl Permits {
    /// What a RestrictedGitSource's `spec` permits.
    pub fn of_source(spec: &Value) -> Permits {
        let mut repos: BTreeSet<String> = strings(&spec["sourceRepos"]);
        if let Some(repo) = spec.at("/source/repoURL").and_then(Value::as_str) {
            repos.insert(repo.to_string());
        }
        let namespace = spec["sourceNamespace"].as_str().unwrap_or("").to_string();
        let mut destinations = destinations(&spec["destinations"]);
        destinations.insert((IN_CLUSTER.to_string(), namespace.clone()));
        Permits {
            repos,
            destinations,
            namespaces: BTreeSet::from([namespace]),
            deny: deny_entry(spec).is_some(),
        }
    }

    /// What an AppProject's `spec` permits.
    pub fn of_project(spec: &Value) -> Permits {
        Permits {
            repos: strings(&spec["sourceRepos"]),
            destinations: destinations(&spec["destinations"]),
            namespaces: strings(&spec["sourceNamespaces"]),
            deny: deny_entry(spec).is_some(),
        }
    }

    /// Whether `deployed` is inside the source `source` permits this: it lives in the
    /// source's namespace (or is the source's own Git Source app in `argocd`), and its
    /// repository and destination are permitted by Argo CD's documented rule
    /// ([`intended_repo`], [`intended_destination`]).
    fn admits(&self, source: &str, deployed: &Deployed) -> bool {
        let (app_namespace, app_name) = deployed.app.split_once('/').unwrap_or(("", ""));
        let home = self.namespaces.contains(app_namespace)
            || (app_namespace == crate::world::argocd::NAMESPACE
                && app_name == source
                && deployed.parent.is_empty());
        let repos: Vec<String> = self.repos.iter().cloned().collect();
        let destinations: Vec<Destination> = self
            .destinations
            .iter()
            .map(|(server, namespace)| Destination {
                server: server.clone(),
                name: String::new(),
                namespace: namespace.clone(),
            })
            .collect();
        home && intended_repo(&repos, &deployed.repo)
            && intended_destination(&destinations, &deployed.server, &deployed.namespace)
    }
}

/// Argo CD's documented rule for `sourceRepos`: an allow entry matches `repo` and no deny
/// entry (`!pattern`) does. Without deny entries this is exactly Argo CD's
/// [`source_permitted`]; with one, Argo CD permits more (argoproj/argo-cd#21264).
pub fn intended_repo(patterns: &[String], repo: &str) -> bool {
    let (denies, allows): (Vec<String>, Vec<String>) =
        patterns.iter().cloned().partition(|p| p.starts_with('!'));
    source_permitted(&allows, repo)
        && !denies
            .iter()
            .any(|d| source_permitted(&[d[1..].to_string()], repo))
}

/// Argo CD's documented rule for `destinations`: an allow entry matches and no deny entry
/// (a `!` server or namespace) rejects — a deny entry rejects what it matches with its `!`
/// removed (an entry denying both server and namespace rejects only the pair). Without deny
/// entries this is exactly Argo CD's [`destination_permitted`]. Destinations are compared
/// by server (the scenarios' Applications name no cluster by `name`).
pub fn intended_destination(destinations: &[Destination], server: &str, namespace: &str) -> bool {
    let deny = |d: &&Destination| d.server.starts_with('!') || d.namespace.starts_with('!');
    let allows: Vec<Destination> = destinations.iter().filter(|d| !deny(d)).cloned().collect();
    let rejected = destinations.iter().filter(deny).any(|d| {
        let stripped = Destination {
            server: d.server.trim_start_matches('!').to_string(),
            name: String::new(),
            namespace: d.namespace.trim_start_matches('!').to_string(),
        };
        destination_permitted(&[stripped], server, "", namespace)
    });
    destination_permitted(&allows, server, "", namespace) && !rejected
}

/// Whether the project state `project` reflects the source state `source`: the same
/// permits, or — for a source with a deny entry — no project (refused: fail closed).
fn reflects(project: &Option<Permits>, source: &Option<Permits>) -> bool {
    project == source || (project.is_none() && source.as_ref().is_some_and(|s| s.deny))
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

fn destinations(value: &Value) -> BTreeSet<(String, String)> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            (
                d["server"].as_str().unwrap_or("").to_string(),
                d["namespace"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// A deployment the monitor saw.
#[derive(Clone, Debug)]
struct Deployed {
    app: String,
    project: String,
    parent: String,
    repo: String,
    server: String,
    namespace: String,
}

/// Source name → its versions: (from ms, what it permits; `None` while deleted).
type Timeline = BTreeMap<String, Vec<(u64, Option<Permits>)>>;

fn record_source(timeline: &mut Timeline, at_ms: u64, source: &str, spec: &Value) {
    let permits = (!spec.is_null()).then(|| Permits::of_source(spec));
    timeline
        .entry(source.to_string())
        .or_default()
        .push((at_ms, permits));
}

/// `restricted_sources`.
#[derive(Default)]
pub struct RestrictedSourcesChecker {
    timeline: Timeline,
}

/// Every deployment outside its source in `events` (what `restricted_sources` fires on
/// first).
pub fn outside(events: &[TraceEvent]) -> Vec<Violation> {
    let mut checker = RestrictedSourcesChecker::default();
    events.iter().filter_map(|e| checker.on_event(e)).collect()
}

impl Checker for RestrictedSourcesChecker {
    fn name(&self) -> &'static str {
        "restricted_sources"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        match event.world()? {
            WorldEvent::SourceChanged { source, spec } => {
                record_source(&mut self.timeline, event.at_ms, source, spec);
                None
            }
            WorldEvent::AppDeployed {
                app,
                project,
                parent,
                repo,
                server,
                namespace,
                deployed_at_ms,
                ..
            } => {
                // Judged when Argo CD deployed it (its history entry's time), not when the
                // monitor saw it.
                let at_ms = *deployed_at_ms;
                let deployed = Deployed {
                    app: app.clone(),
                    project: project.clone(),
                    parent: parent.clone(),
                    repo: repo.clone(),
                    server: server.clone(),
                    namespace: namespace.clone(),
                };
                let (app_namespace, app_name) = app.split_once('/').unwrap_or(("", ""));
                // The sources governing it: its project's, its parent's, and its own when
                // it is a source's Git Source app.
                let governing: BTreeSet<&String> = self
                    .timeline
                    .keys()
                    .filter(|s| {
                        **s == deployed.project
                            || **s == deployed.parent
                            || (app_namespace == crate::world::argocd::NAMESPACE
                                && app_name == s.as_str())
                    })
                    .collect();
                for source in governing {
                    let versions = &self.timeline[source];
                    let from = at_ms.saturating_sub(PROPAGATION_MS);
                    // `deployedAt` has a second's precision: the deployment happened within
                    // the second it names, so a version that began in that second counts.
                    let upto = at_ms + 999;
                    let in_force = versions.iter().enumerate().filter(|(i, (start, _))| {
                        let end = versions.get(i + 1).map_or(u64::MAX, |next| next.0);
                        *start <= upto && end >= from
                    });
                    let inside = in_force
                        .clone()
                        .any(|(_, (_, p))| p.as_ref().is_some_and(|p| p.admits(source, &deployed)));
                    if !inside {
                        return Some(Violation {
                            invariant: self.name().into(),
                            class: Class::Safety,
                            at_ms,
                            host: event.host.clone(),
                            details: json!({
                                "reason": format!(
                                    "Argo CD deployed {app} (project {project}, repository {repo}, destination {server} {namespace}) outside RestrictedGitSource {source}"
                                ),
                                "app": app,
                                "source": source,
                                "sources_in_force": in_force.count(),
                            }),
                        });
                    }
                }
                None
            }
            _ => None,
        }
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}

/// `restricted_source_applied`.
#[derive(Default)]
pub struct SourceApplied {
    timeline: Timeline,
    /// Project → (at, what it permits; `None`: deleted), in order.
    projects: BTreeMap<String, Vec<(u64, Option<Permits>)>>,
}

/// Per change of a source: when its project reflected it (`None`: not by the end).
pub fn propagation(events: &[TraceEvent]) -> Vec<(String, u64, Option<u64>)> {
    let mut checker = SourceApplied::default();
    for event in events {
        checker.on_event(event);
    }
    checker.delays()
}

impl SourceApplied {
    /// (source, changed at, reflected at) for every change.
    fn delays(&self) -> Vec<(String, u64, Option<u64>)> {
        let mut out = Vec::new();
        for (source, versions) in &self.timeline {
            let seen = self.projects.get(source).map(Vec::as_slice).unwrap_or(&[]);
            for (i, (at, permits)) in versions.iter().enumerate() {
                let until = versions.get(i + 1).map_or(u64::MAX, |next| next.0);
                // The project state in force at or after the change that equals it.
                let current_before = seen
                    .iter()
                    .rev()
                    .find(|(t, _)| *t <= *at)
                    .map(|(_, p)| p.clone())
                    .unwrap_or(None);
                let reflected = if reflects(&current_before, permits) {
                    Some(*at)
                } else {
                    seen.iter()
                        .find(|(t, p)| *t >= *at && *t <= until && reflects(p, permits))
                        .map(|(t, _)| *t)
                };
                out.push((source.clone(), *at, reflected));
            }
        }
        out
    }
}

impl Checker for SourceApplied {
    fn name(&self) -> &'static str {
        "restricted_source_applied"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        match event.world()? {
            WorldEvent::SourceChanged { source, spec } => {
                record_source(&mut self.timeline, event.at_ms, source, spec);
            }
            WorldEvent::ProjectSeen { project, spec } => {
                let permits = (!spec.is_null()).then(|| Permits::of_project(spec));
                self.projects
                    .entry(project.clone())
                    .or_default()
                    .push((event.at_ms, permits));
            }
            _ => {}
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        for (source, at, reflected) in self.delays() {
            let versions = &self.timeline[&source];
            let next = versions.iter().map(|v| v.0).find(|t| *t > at);
            // A change superseded before its bound passed is judged by its successor.
            let deadline = at + PROPAGATION_MS;
            if next.is_some_and(|n| n <= deadline) {
                continue;
            }
            let late = reflected.is_none_or(|t| t > deadline);
            if late {
                return Some(Violation {
                    invariant: self.name().into(),
                    class: Class::Liveness,
                    at_ms: deadline.min(state.end_ms),
                    host: "argocd".into(),
                    details: json!({
                        "reason": match reflected {
                            Some(t) => format!(
                                "RestrictedGitSource {source} changed at {at} ms reached its AppProject only at {t} ms (bound {PROPAGATION_MS} ms)"
                            ),
                            None => format!(
                                "RestrictedGitSource {source} changed at {at} ms never reached its AppProject"
                            ),
                        },
                        "source": source,
                        "changed_at_ms": at,
                        "reflected_at_ms": reflected,
                    }),
                });
            }
        }
        None
    }
}
