//! The source server (the runtime's `sources-server`, now `argo-gateway`; research §4.2):
//! the Git side of an app for the reporters and the app-proxy — raw and rendered manifests
//! with `path` and `line`, revision metadata, and app versions read from the app's
//! `versionSource` — so that the runtime does not need the Codefresh fork of Argo CD for
//! them. Its source is not public; what it asks and caches is [inferred] from its wiring
//! (`ARGOCD_SERVER`, `REPO_SERVER`, Redis) and the docs ("retrieves Git manifest and revision
//! data from Argo CD upon request from the Event Reporters or App Proxy").
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/v1/applications/{name}/manifests?appNamespace=&revision=` | `{manifests: [{compiledManifest, rawManifest, path, line}], revision, applicationVersions}` — the fork's answer shape, so a reporter reads it as it reads the fork |
//! | `GET /api/v1/applications/{name}/revisions/{rev}/metadata?appNamespace=` | `{author, date, message}` |
//! | `GET /healthz` | 200 |
//!
//! Upstream, per request: the Application (for its source path), Argo CD's rendered
//! manifests at the revision, and the raw files under the app's path at the revision from
//! the repo-server (`GetGitFiles`; through the Argo CD server in the simulated world).
//!
//! **Cache.** An answer at a commit SHA does not change while the app's source does, so it
//! is kept (up to `cache_entries`, oldest out first) and served again without upstream
//! calls; answers at a branch are not cached. [limitation] The key is (app, revision): an
//! app deleted and re-created under the same name with another source path is answered
//! from the old entry until it ages out.
//!
//! **Git or Argo CD unavailable.** Cached answers are still served; otherwise 503 with the
//! upstream's failure in `message` (404 when Argo CD says the app or revision does not
//! exist, or refuses a missing app as it does without its project), never an empty answer
//! that could pass for "no versions".
//!
//! **Which file holds the version.** With [`Config::templates`] set, each app's
//! `versionSource` is asked of the platform: the GraphQL query `promotionTemplateByRuntime`
//! with the app's metadata and the runtime's token, as go-sdk's `GetVersionSourceByRuntime`
//! sends it and the fork's repo-server asked it (research §4.3). No template (null) means
//! the default, `Chart.yaml` / `$.appVersion`. The answer is kept per app for
//! [`TemplateLookup::ttl`] [inferred: the fork kept it in Redis per `<ns>/<name>`; how long
//! is not public]; when the platform cannot answer, the last answer is used, and without one
//! the request is 503 (a version read from the wrong file would be a wrong version).

pub mod version;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::core::json::Pointer as _;
use crate::env::http::{json, query_escape as q, Body};
use crate::env::SharedEnv;
use crate::observe::SourcesEvent;
use crate::runtime::upstream::{CallError, Client};
pub use version::VersionSource;

/// The port the real server listens on (`sources-server`: 8090).
pub const PORT: u16 = 8090;

/// Source server settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to listen on.
    pub listen: String,
    /// Argo CD's server, `host:port` (`ARGOCD_SERVER`); the repo-server's files are read
    /// through it.
    pub argocd_addr: String,
    /// Argo CD API token.
    pub argocd_token: String,
    /// Per-call timeout of upstream calls.
    pub call_timeout: Duration,
    /// Where app versions are read from (`Chart.yaml` / `$.appVersion`).
    pub version_source: VersionSource,
    /// Answers kept. Default 10,000.
    pub cache_entries: usize,
    /// Where each app's `versionSource` is asked for; `None`: every app reads
    /// [`Config::version_source`].
    pub templates: Option<TemplateLookup>,
}

/// How the source server asks the platform which template versions an app.
#[derive(Clone, Debug)]
pub struct TemplateLookup {
    /// The platform's gateway, `host:port` (`POST /2.0/api/graphql`).
    pub platform_addr: String,
    /// The runtime's own token.
    pub token: String,
    /// How long an app's answer is used before it is asked again. Default 10 minutes
    /// [inferred].
    pub ttl: Duration,
}

impl TemplateLookup {
    /// Asks the platform at `platform_addr` with the runtime's `token`.
    pub fn new(platform_addr: &str, token: &str) -> Self {
        TemplateLookup {
            platform_addr: platform_addr.into(),
            token: token.into(),
            ttl: Duration::from_secs(600),
        }
    }
}

/// The query go-sdk sends (`pkg/graphql/promotion_template.go`).
pub const TEMPLATE_QUERY: &str = "query ($applicationMetadata: Object!) { promotionTemplateByRuntime(applicationMetadata: $applicationMetadata) { versionSource { file jsonPath } } }";

impl Config {
    /// Defaults, listening on `listen`, reading from Argo CD at `argocd_addr` with `token`.
    pub fn new(listen: &str, argocd_addr: &str, token: &str) -> Self {
        Config {
            listen: listen.into(),
            argocd_addr: argocd_addr.into(),
            argocd_token: token.into(),
            call_timeout: Duration::from_secs(30),
            version_source: VersionSource::default(),
            cache_entries: 10_000,
            templates: None,
        }
    }
}

/// What an answer is about: (route, `namespace/name`, revision).
type Key = (&'static str, String, String);

/// Answers at commit SHAs, oldest first out.
#[derive(Default)]
struct Cache {
    answers: BTreeMap<Key, Value>,
    order: VecDeque<Key>,
}

impl Cache {
    fn get(&self, key: &Key) -> Option<Value> {
        self.answers.get(key).cloned()
    }

    fn put(&mut self, key: Key, answer: Value, limit: usize) {
        if limit == 0 || self.answers.contains_key(&key) {
            return;
        }
        while self.answers.len() >= limit {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.answers.remove(&oldest);
        }
        self.order.push_back(key.clone());
        self.answers.insert(key, answer);
    }
}

/// A revision that names a commit (40 hex digits): its answers never change.
fn is_sha(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Why a request could not be answered.
#[derive(Debug, thiserror::Error)]
enum Unanswered {
    /// Argo CD says the app or revision does not exist.
    #[error("{0}")]
    NotFound(String),
    /// An upstream failed (Argo CD, the repo-server, Git).
    #[error("{0}")]
    Unavailable(String),
    /// The app's version file or path is unusable.
    #[error("{0}")]
    Version(#[from] version::VersionError),
}

impl From<CallError> for Unanswered {
    /// Argo CD answers a missing app asked for without its project with 403 `permission
    /// denied` (`getAppEnforceRBAC`, so as not to reveal whether it exists; measured against a
    /// real Argo CD by the conformance suite): the source server's token reads every app, so
    /// that 403 means the app is not there, as a 404 does [inferred]. Other 403s (a namespace
    /// Argo CD does not manage) stay failures with their reason.
    fn from(e: CallError) -> Self {
        match e {
            CallError::Status {
                status, ref body, ..
            } if status == StatusCode::NOT_FOUND
                || (status == StatusCode::FORBIDDEN && body.contains("permission denied")) =>
            {
                Unanswered::NotFound(e.to_string())
            }
            other => Unanswered::Unavailable(other.to_string()),
        }
    }
}

/// The YAML documents of a file: (1-based line where each starts, its text). Documents
/// with nothing but comments and blank lines are left out.
pub fn documents(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    let mut push = |start: usize, doc: &mut String| {
        let content = doc
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if content {
            out.push((start, std::mem::take(doc)));
        }
        doc.clear();
    };
    for (index, line) in text.lines().enumerate() {
        if line.trim_end() == "---" {
            push(start, &mut current);
            start = index + 2;
        } else if current.is_empty() && line.trim().is_empty() {
            start = index + 2;
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    push(start, &mut current);
    out
}

/// The document of `file` a rendered object comes from, with its line: the file's only
/// document, or the one whose top-level `kind` (and `metadata.name`, when it has one)
/// match; `("", 0)` when none does — no line rather than a wrong one.
fn raw_document(file: &str, compiled: &Value) -> (String, usize) {
    let docs = documents(file);
    if let [(line, doc)] = docs.as_slice() {
        return (doc.clone(), *line);
    }
    let want = |pointer: &str| compiled.at(pointer).and_then(Value::as_str);
    docs.into_iter()
        .find(|(_, doc)| {
            let parsed: Value = serde_saphyr::from_str(doc).unwrap_or(Value::Null);
            let name = parsed.at("/metadata/name").and_then(Value::as_str);
            parsed.get("kind").and_then(Value::as_str) == want("/kind")
                && (name.is_none() || name == want("/metadata/name"))
        })
        .map(|(line, doc)| (doc, line))
        .unwrap_or_default()
}

/// The server's state.
struct Sources {
    env: SharedEnv,
    config: Config,
    argocd: Client,
    cache: Mutex<Cache>,
    /// The platform, when templates are asked for.
    platform: Option<Client>,
    /// `namespace/name` → (when asked, the answer).
    templates: Mutex<BTreeMap<String, (Duration, VersionSource)>>,
}

impl Sources {
    async fn argocd(&self, path: String) -> Result<Value, CallError> {
        self.argocd.get(path, Some(&self.config.argocd_token)).await
    }

    /// The fork's manifests answer, built from Argo CD's rendering and the raw files.
    async fn manifests(&self, name: &str, ns: &str, revision: &str) -> Result<Value, Unanswered> {
        let app = self
            .argocd(format!(
                "/api/v1/applications/{}?appNamespace={}",
                q(name),
                q(ns)
            ))
            .await?;
        let app_path = app
            .at("/spec/source/path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let query = format!("appNamespace={}&revision={}", q(ns), q(revision));
        let rendered = self
            .argocd(format!(
                "/api/v1/applications/{}/manifests?{query}",
                q(name)
            ))
            .await?;
        let files = self
            .argocd(format!("/api/v1/applications/{}/files?{query}", q(name)))
            .await?;
        // An answer without files is not "no versions": it is not an answer.
        let files: BTreeMap<String, String> = files
            .get("files")
            .and_then(Value::as_object)
            .map(|f| {
                f.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .ok_or_else(|| {
                Unanswered::Unavailable(format!(
                    "the repo-server's files of {name} at {revision} came without files"
                ))
            })?;
        let manifests: Vec<Value> = rendered
            .get("manifests")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|m| {
                let compiled_text = m.get("compiledManifest").and_then(Value::as_str).unwrap_or("");
                let compiled: Value = serde_json::from_str(compiled_text).unwrap_or(Value::Null);
                let path = m.get("path").and_then(Value::as_str).unwrap_or("");
                let (raw, line) = files
                    .get(path)
                    .map(|text| raw_document(text, &compiled))
                    .unwrap_or_default();
                json!({"compiledManifest": compiled_text, "rawManifest": raw, "path": path, "line": line})
            })
            .collect();
        let source = self.version_source(&app, name, ns).await?;
        let versions = version::application_versions(&files, &app_path, &source)?;
        Ok(json!({
            "manifests": manifests,
            "revision": rendered.get("revision").cloned().unwrap_or(json!(revision)),
            "applicationVersions": versions,
        }))
    }

    /// Where `app`'s version is read: the configured source, or the platform's answer for
    /// it (kept for the lookup's ttl; the last one when the platform cannot answer).
    async fn version_source(
        &self,
        app: &Value,
        name: &str,
        ns: &str,
    ) -> Result<VersionSource, Unanswered> {
        let (Some(lookup), Some(platform)) = (&self.config.templates, &self.platform) else {
            return Ok(self.config.version_source.clone());
        };
        let key = format!("{ns}/{name}");
        let now = self.env.elapsed();
        let kept = self
            .templates
            .lock()
            .expect("templates lock poisoned")
            .get(&key)
            .cloned();
        if let Some((at, source)) = &kept {
            if now.saturating_sub(*at) < lookup.ttl {
                return Ok(source.clone());
            }
        }
        let metadata = app.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let metadata: serde_json::Map<String, Value> =
            ["name", "namespace", "labels", "annotations"]
                .into_iter()
                .filter_map(|field| Some((field.to_string(), metadata.get(field)?.clone())))
                .collect();
        let body = json!({"query": TEMPLATE_QUERY, "variables": {"applicationMetadata": metadata}});
        let asked = platform
            .send(
                http::Method::POST,
                "/2.0/api/graphql".into(),
                Some(&lookup.token),
                Some(&body),
            )
            .await
            .map_err(|e| e.to_string())
            .and_then(|answer| template_of(&answer));
        match asked {
            Ok(answer) => {
                let source = answer.clone().unwrap_or_default();
                self.env.observe(
                    SourcesEvent::Template {
                        app: key.clone(),
                        file: answer.as_ref().map(|s| s.file.clone()).unwrap_or_default(),
                        json_path: answer.map(|s| s.json_path).unwrap_or_default(),
                    }
                    .into(),
                );
                self.templates
                    .lock()
                    .expect("templates lock poisoned")
                    .insert(key, (now, source.clone()));
                Ok(source)
            }
            Err(_) if kept.is_some() => Ok(kept.map(|(_, s)| s).unwrap_or_default()),
            Err(e) => Err(Unanswered::Unavailable(format!(
                "the platform's promotion template of {key}: {e}"
            ))),
        }
    }

    async fn metadata(&self, name: &str, ns: &str, revision: &str) -> Result<Value, Unanswered> {
        let meta = self
            .argocd(format!(
                "/api/v1/applications/{}/revisions/{}/metadata?appNamespace={}",
                q(name),
                q(revision),
                q(ns)
            ))
            .await?;
        Ok(json!({"author": meta["author"], "date": meta["date"], "message": meta["message"]}))
    }

    /// Answers one request: from the cache when the revision is a SHA and the answer is
    /// there, else from upstream (kept when the revision is a SHA).
    async fn answer(
        &self,
        what: &'static str,
        name: &str,
        ns: &str,
        revision: &str,
    ) -> Response<Body> {
        let app = format!("{ns}/{name}");
        let key: Key = (what, app.clone(), revision.to_string());
        let pinned = is_sha(revision);
        let cached = if pinned {
            self.cache.lock().expect("cache lock poisoned").get(&key)
        } else {
            None
        };
        let (result, from_cache) = match cached {
            Some(answer) => (Ok(answer), true),
            None => {
                let result = match what {
                    "manifests" => self.manifests(name, ns, revision).await,
                    _ => self.metadata(name, ns, revision).await,
                };
                (result, false)
            }
        };
        match result {
            Ok(answer) => {
                if pinned && !from_cache {
                    self.cache.lock().expect("cache lock poisoned").put(
                        key,
                        answer.clone(),
                        self.config.cache_entries,
                    );
                }
                self.env.observe(
                    SourcesEvent::Served {
                        what: what.into(),
                        app,
                        revision: revision.into(),
                        cached: from_cache,
                    }
                    .into(),
                );
                json(StatusCode::OK, &answer)
            }
            Err(e) => {
                let status = match e {
                    Unanswered::NotFound(_) => StatusCode::NOT_FOUND,
                    Unanswered::Version(_) => StatusCode::UNPROCESSABLE_ENTITY,
                    Unanswered::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                };
                self.env.observe(
                    SourcesEvent::Unavailable {
                        what: what.into(),
                        app,
                        revision: revision.into(),
                        error: e.to_string(),
                    }
                    .into(),
                );
                json(
                    status,
                    &json!({"error": e.to_string(), "message": e.to_string()}),
                )
            }
        }
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path().to_string();
        if req.method() != http::Method::GET {
            return json(
                StatusCode::METHOD_NOT_ALLOWED,
                &json!({"error": format!("{} {path}: only GET is served", req.method())}),
            );
        }
        if path == "/healthz" {
            return json(StatusCode::OK, &json!({"status": "ok"}));
        }
        let params = crate::env::http::query(req.uri());
        let ns = params.get("appNamespace").cloned().unwrap_or_default();
        let revision = params.get("revision").cloned().unwrap_or_default();
        let decoded: Vec<String> = path
            .trim_matches('/')
            .split('/')
            .map(crate::env::http::path_segment)
            .collect();
        let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
        match segments.as_slice() {
            ["api", "v1", "applications", name, "manifests"] if !revision.is_empty() => {
                self.answer("manifests", name, &ns, &revision).await
            }
            ["api", "v1", "applications", _, "manifests"] => json(
                StatusCode::BAD_REQUEST,
                &json!({"error": "manifests: the revision query parameter is required"}),
            ),
            ["api", "v1", "applications", _, "revisions", "", "metadata"] => json(
                StatusCode::BAD_REQUEST,
                &json!({"error": "metadata: the revision path segment is empty"}),
            ),
            ["api", "v1", "applications", name, "revisions", rev, "metadata"] => {
                self.answer("metadata", name, &ns, rev).await
            }
            _ => json(
                StatusCode::NOT_FOUND,
                &json!({"error": format!("unknown route {path}")}),
            ),
        }
    }
}

/// The `versionSource` a `promotionTemplateByRuntime` answer names: `None` when no template
/// applies or it names none; an error for a GraphQL error or an answer of another shape.
fn template_of(answer: &Value) -> Result<Option<VersionSource>, String> {
    if let Some(errors) = answer.get("errors").filter(|e| !e.is_null()) {
        let first = errors
            .get(0)
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("an error without a message");
        return Err(format!("promotionTemplateByRuntime: {first}"));
    }
    let template = answer
        .at("/data/promotionTemplateByRuntime")
        .ok_or("promotionTemplateByRuntime: the answer has no data")?;
    let Some(source) = template.get("versionSource").filter(|s| !s.is_null()) else {
        return Ok(None);
    };
    let text = |key: &str| {
        source
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| {
                format!("promotionTemplateByRuntime: versionSource.{key} is not a string")
            })
    };
    Ok(Some(VersionSource {
        file: text("file")?,
        json_path: text("jsonPath")?,
    }))
}

/// Runs the source server until its listener fails.
pub async fn run(env: SharedEnv, config: Config) -> std::io::Result<()> {
    let listener = env.listen(&config.listen).await?;
    env.observe(
        SourcesEvent::Start {
            host: env.identity().host.clone(),
        }
        .into(),
    );
    let sources = Arc::new(Sources {
        argocd: Client::new(env.clone(), &config.argocd_addr, config.call_timeout),
        cache: Mutex::new(Cache::default()),
        platform: config
            .templates
            .as_ref()
            .map(|t| Client::new(env.clone(), &t.platform_addr, config.call_timeout)),
        templates: Mutex::new(BTreeMap::new()),
        env,
        config,
    });
    crate::env::http::serve(listener, move |req, _peer| {
        let sources = sources.clone();
        async move { sources.handle(req).await }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_answer_names_the_file_or_none_and_a_bad_one_is_an_error() {
        let answer = |template: Value| json!({"data": {"promotionTemplateByRuntime": template}});
        assert_eq!(
            template_of(&answer(
                json!({"versionSource": {"file": "values.yaml", "jsonPath": "$.image.tag"}})
            )),
            Ok(Some(VersionSource {
                file: "values.yaml".into(),
                json_path: "$.image.tag".into()
            }))
        );
        assert_eq!(
            template_of(&answer(Value::Null)),
            Ok(None),
            "no template applies"
        );
        assert_eq!(
            template_of(&answer(json!({"versionSource": null}))),
            Ok(None),
            "a template without a versionSource"
        );
        let refused = json!({"data": null, "errors": [{"message": "promotionTemplateByRuntime answers a runtime's token, not a user's"}]});
        assert!(template_of(&refused)
            .unwrap_err()
            .contains("a runtime's token"));
        assert!(template_of(&answer(json!({"versionSource": {"file": 3}})))
            .unwrap_err()
            .contains("versionSource.file is not a string"));
        assert!(template_of(&json!({})).unwrap_err().contains("no data"));
    }

    #[test]
    fn documents_start_at_their_first_line() {
        let text = "# header\n---\na: 1\n---\n\nkind: Service\nb: 2\n---\n---\nkind: Deployment\nmetadata: {name: web}\n---\nkind: Deployment\nmetadata: {name: api}\nspec: {scaleTargetRef: {kind: Role}}\n";
        assert_eq!(
            documents(text),
            vec![
                (3, "a: 1\n".to_string()),
                (6, "kind: Service\nb: 2\n".to_string()),
                (10, "kind: Deployment\nmetadata: {name: web}\n".to_string()),
                (
                    13,
                    "kind: Deployment\nmetadata: {name: api}\nspec: {scaleTargetRef: {kind: Role}}\n"
                        .to_string()
                ),
            ],
            "comment-only documents are left out"
        );
        let object = |kind: &str, name: &str| json!({"kind": kind, "metadata": {"name": name}});
        assert_eq!(
            raw_document(text, &object("Deployment", "api")).1,
            13,
            "kind and name"
        );
        assert_eq!(raw_document(text, &object("Deployment", "web")).1, 10);
        assert_eq!(
            raw_document(text, &object("Service", "x")).1,
            6,
            "no name: by kind"
        );
        assert_eq!(
            raw_document(text, &object("Role", "x")),
            (String::new(), 0),
            "nested kinds do not count; no match, no line"
        );
        let single = "# values\nreplicas: 2\n";
        assert_eq!(
            raw_document(single, &object("Deployment", "web")),
            (single.to_string(), 1),
            "a file's only document, its comments included"
        );
    }

    #[test]
    fn the_cache_keeps_the_newest_answers() {
        let mut cache = Cache::default();
        let key = |i: u8| ("metadata", "ns/a".to_string(), format!("{i}"));
        for i in 0..5 {
            cache.put(key(i), json!(i), 3);
        }
        assert_eq!(cache.get(&key(1)), None);
        assert_eq!(cache.get(&key(4)), Some(json!(4)));
        assert_eq!(cache.answers.len(), 3);
        assert!(is_sha(&"a".repeat(40)) && !is_sha("main") && !is_sha(&"g".repeat(40)));
    }
}
