//! The Argo CD server's REST subset used by the reporters, behind a bearer token:
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/v1/applications/{name}` | the Application |
//! | `GET /api/v1/applications/{name}/resource-tree` | `{nodes: [...]}` from `status.resources` |
//! | `GET /api/v1/applications/{name}/manifests[?revision=R]` | the fork's answer: `{manifests: [{compiledManifest, rawManifest, path, line}], revision, applicationVersions}` from Git |
//! | `GET /api/v1/applications/{name}/revisions/{rev}/metadata` | `{author, date, message}` |
//! | `GET /api/v1/applications/{name}/files?revision=R` | `{revision, files: {path: content}}`: the files directly under the app's path — a stand-in for the repo-server's `GetGitFiles` (gRPC in Argo CD), which the source server reads |
//! | `GET /api/v1/applications/{name}/resource?namespace=&resourceName=&group=&version=&kind=` | `{manifest}`: the live object as a JSON string |
//! | `GET /api/v1/application/changeRevision?appName=&namespace=&currentRevision=&previousRevision=` | the fork's `GetChangeRevision`: `{revision}` or `{}` ([`super::repo_server`]); 400 `FailedPrecondition` without the `manifest-generate-paths` annotation; 500 when Git cannot be fetched |
//!
//! Manifests, metadata and files come from the repo-server's clone of the repository: a
//! revision the clone already holds is answered even while the Git provider is down
//! (Argo CD fetches only a revision it does not have); anything else needs a fetch, which
//! waits out the `git` fault's latency and fails in an outage (500, as the repo-server's
//! "failed to fetch"). The clone lives as long as the Argo CD process. [inferred: one clone
//! per repository, fetched whole]
//!
//! `appNamespace` selects the app's namespace (default: Argo CD's own); a namespace Argo CD
//! does not manage is refused as the real server refuses it. A missing app is 404 when the
//! request names its `project` and 403 `permission denied` when it does not, as Argo CD's
//! `getAppEnforceRBAC` answers (compared with a real Argo CD by the conformance suite);
//! `sourceIndex` is accepted and ignored.

use std::collections::BTreeMap;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use serde_json::{json, Value};

use orrery_system::env::http::{json, Body};
use orrery_system::env::kube::Shared;

use super::{compiled, resources_of, source_of};
use crate::world::apiserver::store::rfc3339;
use crate::world::git::SharedGit;

/// What the server reads from.
#[derive(Clone)]
pub struct Server {
    /// The controller's reflector of Applications.
    pub apps: Store<Shared<DynamicObject>>,
    /// The Git provider.
    pub git: SharedGit,
    /// The bearer token it accepts.
    pub tokens: super::Tokens,
    /// The controller's settings: its namespace and the other namespaces it manages.
    pub config: super::controller::Config,
    /// Compiled manifests as JSON text, by app, file and file content: rendering is pure,
    /// and the reporters ask for the same few versions over and over.
    pub compiled: std::sync::Arc<std::sync::Mutex<CompiledCache>>,
    /// Time, for the Git fetches a change-revision request waits on.
    pub env: orrery_system::env::SharedEnv,
    /// The repo-server's clones: per repository, the newest commit fetched (see
    /// [`crate::world::git::Git::pushed_as`]).
    pub clones: std::sync::Arc<std::sync::Mutex<BTreeMap<String, usize>>>,
}

/// Compiled manifests by (app, file, file content), found by a hash of the three and
/// compared in full (no key is built per lookup; a hash collision only shares a bucket).
#[derive(Default)]
pub struct CompiledCache {
    buckets: BTreeMap<u64, Vec<Compiled>>,
    entries: usize,
}

/// One cached rendering.
struct Compiled {
    app: String,
    file: String,
    raw: String,
    text: String,
}

impl CompiledCache {
    /// The cached text for (app, file, raw), rendering and keeping it on a miss.
    fn get_or_render(
        &mut self,
        app: &str,
        file: &str,
        raw: &str,
        render: impl FnOnce() -> String,
    ) -> String {
        let mut pieces = orrery_system::env::Fnv1a64::new();
        for part in [app, file, raw] {
            pieces.write(part.as_bytes());
            pieces.write(&[0]);
        }
        let hash = pieces.finish();
        if let Some(hit) = self.buckets.get(&hash).and_then(|bucket| {
            bucket
                .iter()
                .find(|c| c.app == app && c.file == file && c.raw == raw)
        }) {
            return hit.text.clone();
        }
        if self.entries >= COMPILED_CACHE_LIMIT {
            self.buckets.clear();
            self.entries = 0;
        }
        let text = render();
        self.buckets.entry(hash).or_default().push(Compiled {
            app: app.to_string(),
            file: file.to_string(),
            raw: raw.to_string(),
            text: text.clone(),
        });
        self.entries += 1;
        text
    }
}

/// Entries kept in the compiled-manifest cache before it is cleared.
const COMPILED_CACHE_LIMIT: usize = 50_000;

/// `applicationVersions` of the fork's manifests answer: the default `versionSource`
/// (`Chart.yaml` / `$.appVersion`, research §4.3) read from the app's files; `null` without
/// one.
fn app_versions(files: &BTreeMap<String, String>, app_path: &str) -> Value {
    use orrery_system::runtime::source_server::version;
    version::application_versions(files, app_path, &version::VersionSource::default())
        .unwrap_or(Value::Null)
}

/// The route a request path's segments ask for, as the cost figures name it.
fn route(segments: &[&str]) -> &'static str {
    match segments {
        ["api", "v1", "application", "changeRevision"] => "change-revision",
        ["api", "v1", "applications", _] => "application",
        ["api", "v1", "applications", _, "resource-tree"] => "resource-tree",
        ["api", "v1", "applications", _, "manifests"] => "manifests",
        ["api", "v1", "applications", _, "files"] => "files",
        ["api", "v1", "applications", _, "revisions", _, "metadata"] => "revision-metadata",
        ["api", "v1", "applications", _, "resource"] => "resource",
        _ => "other",
    }
}

fn error(code: StatusCode, grpc: u8, message: String) -> Response<Body> {
    json(
        code,
        &json!({"error": message, "code": grpc, "message": message}),
    )
}

impl Server {
    /// The repo-server has `revision` of `repo` (the branch head when empty, which takes
    /// an `ls-remote` every time), fetching it if its clone does not: `Err` with the answer
    /// to give when the fetch fails (an outage).
    async fn fetch(&self, repo: &str, revision: &str) -> Result<(), Response<Body>> {
        let (have, needed) = {
            let git = self.git.lock();
            let wanted = if revision.is_empty() {
                git.newest_pushed(repo)
            } else {
                git.pushed_as(repo, revision)
            };
            let have = self
                .clones
                .lock()
                .expect("clones lock poisoned")
                .get(repo)
                .copied();
            (have, wanted)
        };
        // A commit the clone has needs no fetch; a branch (no revision) always needs
        // `ls-remote` to be resolved.
        if let (false, Some(have), Some(needed)) = (revision.is_empty(), have, needed) {
            if needed <= have {
                return Ok(());
            }
        }
        let serving = self.git.lock().serving;
        if !serving.latency.is_zero() {
            self.env.sleep(serving.latency).await;
        }
        if serving.outage {
            return Err(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                13,
                format!("rpc error: code = Internal desc = failed to fetch {repo}: 503 Service Unavailable"),
            ));
        }
        if let Some(newest) = self.git.lock().newest_pushed(repo) {
            self.clones
                .lock()
                .expect("clones lock poisoned")
                .insert(repo.to_string(), newest);
        }
        Ok(())
    }

    /// `resource`'s compiled manifest as JSON text (cached).
    fn compiled(&self, resource: &super::Resource, raw: &str, app: &str) -> String {
        self.compiled
            .lock()
            .expect("compiled cache lock poisoned")
            .get_or_render(app, &resource.file, raw, || {
                compiled(resource, raw, app).to_string()
            })
    }

    /// `GetChangeRevision` (`server/application/application.go` of the fork): the app must
    /// carry the `manifest-generate-paths` annotation; the repo-server fetches the repository
    /// (waiting out a throttled provider, failing in an outage) and runs
    /// [`super::repo_server::change_revision`] with the app's refresh paths.
    async fn change_revision(&self, params: &BTreeMap<String, String>) -> Response<Body> {
        use orrery_system::runtime::acr::paths::{refresh_paths, MANIFEST_GENERATE_PATHS};
        let param = |key: &str| params.get(key).cloned().unwrap_or_default();
        let (name, current, previous) = (
            param("appName"),
            param("currentRevision"),
            param("previousRevision"),
        );
        let namespace = Some(param("namespace"))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| self.config.namespace.clone());
        let key =
            kube::runtime::reflector::ObjectRef::new_with(&name, super::application_resource())
                .within(&namespace);
        let Some(app) = self.apps.get(&key) else {
            return error(
                StatusCode::NOT_FOUND,
                5,
                format!("applications.argoproj.io \"{name}\" not found"),
            );
        };
        let annotation = app
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MANIFEST_GENERATE_PATHS))
            .filter(|v| !v.is_empty())
            .cloned();
        let (Some(annotation), Some((repo, source_path))) = (annotation, source_of(&app)) else {
            // [inferred wording] FailedPrecondition without the annotation.
            return error(
                StatusCode::BAD_REQUEST,
                9,
                format!("application {name} has no {MANIFEST_GENERATE_PATHS} annotation"),
            );
        };
        let serving = self.git.lock().serving;
        if !serving.latency.is_zero() {
            self.env.sleep(serving.latency).await;
        }
        if serving.outage {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                13,
                format!("unable to resolve git revision {current}: failed to fetch {repo}: 503 Service Unavailable"),
            );
        }
        let refresh = refresh_paths(&annotation, source_path);
        let answer = super::repo_server::change_revision(
            &self.git.lock(),
            repo,
            &current,
            &previous,
            &refresh,
        );
        match answer {
            Ok(Some(revision)) => json(StatusCode::OK, &json!({"revision": revision})),
            Ok(None) => json(StatusCode::OK, &json!({})),
            Err(super::repo_server::ChangeRevisionError::InvalidArgument(message)) => {
                error(StatusCode::BAD_REQUEST, 3, message)
            }
            Err(super::repo_server::ChangeRevisionError::Internal(message)) => {
                error(StatusCode::INTERNAL_SERVER_ERROR, 13, message)
            }
        }
    }

    /// Answers one request.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path().to_string();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        if let Some(cost) = &self.config.cost {
            cost.argocd_request(route(&segments));
        }
        let authorised = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|token| self.tokens.accepts(token));
        if !authorised {
            return error(
                StatusCode::UNAUTHORIZED,
                16,
                "invalid session: token is missing or wrong".into(),
            );
        }
        let params = orrery_system::env::http::query(req.uri());
        if path == "/api/v1/application/changeRevision" {
            return self.change_revision(&params).await;
        }
        let ["api", "v1", "applications", name, rest @ ..] = segments.as_slice() else {
            return error(StatusCode::NOT_FOUND, 5, format!("unknown route {path}"));
        };
        let namespace = params
            .get("appNamespace")
            .filter(|n| !n.is_empty())
            .cloned()
            .unwrap_or_else(|| self.config.namespace.clone());
        if !self.config.manages(&namespace) {
            // [inferred wording] Argo CD answers apps outside `application.namespaces` with
            // PermissionDenied ("namespace '<ns>' is not permitted").
            return error(
                StatusCode::FORBIDDEN,
                7,
                format!("namespace '{namespace}' is not permitted"),
            );
        }
        let key =
            kube::runtime::reflector::ObjectRef::new_with(name, super::application_resource())
                .within(&namespace);
        let Some(app) = self.apps.get(&key) else {
            // `getAppEnforceRBAC`: a missing app is NotFound only when the request named its
            // project (the RBAC check could run first); otherwise PermissionDenied, so as not
            // to reveal whether it exists.
            if params.get("project").is_some_and(|p| !p.is_empty()) {
                return error(
                    StatusCode::NOT_FOUND,
                    5,
                    format!("applications.argoproj.io \"{name}\" not found"),
                );
            }
            return error(StatusCode::FORBIDDEN, 7, "permission denied".into());
        };
        let Some((repo, app_path)) = source_of(&app) else {
            return error(
                StatusCode::BAD_REQUEST,
                3,
                format!("application {name} has no spec.source"),
            );
        };
        let fetched = match rest {
            ["manifests"] | ["files"] => params.get("revision").cloned().unwrap_or_default(),
            ["revisions", revision, "metadata"] => revision.to_string(),
            _ => String::new(),
        };
        if matches!(
            rest,
            ["manifests"] | ["files"] | ["revisions", _, "metadata"]
        ) {
            if let Err(answer) = self.fetch(repo, &fetched).await {
                return answer;
            }
        }
        let git = self.git.lock();
        let no_status = json!({});
        let status = app.data.get("status").unwrap_or(&no_status);
        match rest {
            [] => json(
                StatusCode::OK,
                &serde_json::to_value(&**app).unwrap_or(Value::Null),
            ),
            ["resource-tree"] => {
                let nodes: Vec<Value> = status["resources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| json!({"group": r["group"], "version": r["version"], "kind": r["kind"], "namespace": r["namespace"], "name": r["name"], "health": r["health"]}))
                    .collect();
                json(StatusCode::OK, &json!({"nodes": nodes}))
            }
            ["manifests"] => {
                let revision = params
                    .get("revision")
                    .filter(|r| !r.is_empty())
                    .cloned()
                    .or_else(|| git.head(repo).map(|c| c.sha.clone()))
                    .unwrap_or_default();
                match git.files_at(repo, &revision, app_path) {
                    Some(files) => {
                        let manifests: Vec<Value> = resources_of(&files, name)
                            .iter()
                            .map(|r| {
                                let raw = files.get(&r.file).map(String::as_str).unwrap_or("");
                                json!({
                                    "compiledManifest": self.compiled(r, raw, name),
                                    "rawManifest": raw,
                                    "path": r.file,
                                    "line": 1,
                                })
                            })
                            .collect();
                        json(
                            StatusCode::OK,
                            &json!({
                                "manifests": manifests,
                                "revision": revision,
                                "sourceType": "Directory",
                                "applicationVersions": app_versions(&files, app_path),
                            }),
                        )
                    }
                    None => error(
                        StatusCode::NOT_FOUND,
                        5,
                        format!("revision {revision} not found in {repo}"),
                    ),
                }
            }
            ["files"] => {
                let revision = Some(fetched)
                    .filter(|r| !r.is_empty())
                    .or_else(|| git.head(repo).map(|c| c.sha.clone()))
                    .unwrap_or_default();
                match git.files_at(repo, &revision, app_path) {
                    Some(files) => json(
                        StatusCode::OK,
                        &json!({"revision": revision, "files": files}),
                    ),
                    None => error(
                        StatusCode::NOT_FOUND,
                        5,
                        format!("revision {revision} not found in {repo}"),
                    ),
                }
            }
            ["revisions", revision, "metadata"] => match git.commit_by_sha(repo, revision) {
                Some(c) => json(
                    StatusCode::OK,
                    &json!({"author": c.author, "date": rfc3339(c.unix_ms), "message": c.message}),
                ),
                None => error(
                    StatusCode::NOT_FOUND,
                    5,
                    format!("revision {revision} not found in {repo}"),
                ),
            },
            ["resource"] => {
                // Live = what was last deployed (the newest history entry), not what was compared.
                let revision = status["history"]
                    .as_array()
                    .and_then(|h| h.last())
                    .and_then(|h| h["revision"].as_str())
                    .unwrap_or("");
                let want = |key: &str| params.get(key).map(String::as_str).unwrap_or("");
                let live = git.files_at(repo, revision, app_path).and_then(|files| {
                    resources_of(&files, name)
                        .into_iter()
                        .find(|r| {
                            r.kind == want("kind")
                                && r.group == want("group")
                                && r.name == want("resourceName")
                                && r.namespace == want("namespace")
                        })
                        .map(|r| {
                            self.compiled(
                                &r,
                                files.get(&r.file).map(String::as_str).unwrap_or(""),
                                name,
                            )
                        })
                });
                match live {
                    Some(object) => json(StatusCode::OK, &json!({"manifest": object})),
                    None => error(
                        StatusCode::NOT_FOUND,
                        5,
                        format!(
                            "{} {}/{} of {name} is not live",
                            want("kind"),
                            want("namespace"),
                            want("resourceName")
                        ),
                    ),
                }
            }
            _ => error(StatusCode::NOT_FOUND, 5, format!("unknown route {path}")),
        }
    }
}
