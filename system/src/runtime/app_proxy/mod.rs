//! The app-proxy: the runtime's API for clients (reached through the request routing
//! service). Every call is authenticated and authorised with the caller's permissions,
//! fetched from the platform and cached for a TTL.
//!
//! | route | operation | does |
//! |---|---|---|
//! | `GET /app-proxy/api/repositories` | `repositories:list` | lists the Git provider's repositories |
//! | `POST /app-proxy/api/applications/commit` `{"repo","path","content","message"}` | `applications:commit` | commits a GitOps-controlled file (e.g. an Application manifest) |
//! | `POST /app-proxy/api/workflows/<ns>/<name>/terminate` | `workflows:terminate` | sets `spec.shutdown: Terminate` on the Argo Workflow through the Kubernetes API |
//! | `POST /app-proxy/api/applications/<ns>/<name>/sync` `{"revision"?}` | `applications:sync` | sets the Application's `operation` (a sync, initiated by the user), as `argocd app sync` does |
//! | `POST /app-proxy/api/applications/<ns>/<name>/refresh` | `applications:refresh` | sets the `argocd.argoproj.io/refresh: normal` annotation |
//! | `GET /app-proxy/api/applications?limit=N&continue=T` | `applications:read` | one page (default 500, at most 1000) of the Applications in the runtime's namespace — `{"namespace", "resourceVersion", "continue", "omitted", "items"}`, each item the Application as the API server holds it — left out (counted in `omitted`): apps whose destination namespace the caller may not read; every page reflects the first page's `resourceVersion` (what the platform's anti-entropy job reads) |
//! | `GET /app-proxy/api/applications/<ns>/<name>/manifests?revision=R` | `applications:read` | the app's raw and rendered manifests and app version at a revision, from the source server |
//! | `POST /app-proxy/api/promotion-tasks` `{"metadata": {"name"}, "spec": {...}}` | `promotions:write` | creates the PromotionTask in the runtime's namespace (the platform's promotion orchestrator); 201, or 200 with `"existing": true` when one of that name exists (a retried create) |
//! | `GET /app-proxy/api/promotion-tasks/<name>` | `promotions:read` | `{"name", "status"}` of the PromotionTask |
//! | `POST /app-proxy/api/promotion-tasks/<name>/terminate` | `promotions:write` | sets the PromotionTask's `status.phase` to `Terminated` (the operator stops at its next look; 404 when there is none) |
//! | `GET /app-proxy/healthz` | — | 200 |
//!
//! Operations are judged by the platform's rules as `GET /api/permissions` answers them
//! (cached for a TTL): limited to named runtimes (this one's name is
//! [`Config::runtime`]) and to namespaces — a workflow's, an application's destination.
//!
//! Errors: 401 without or with an unknown token, 403 for an operation the user may not do
//! (an app they may neither act on nor read is answered 404, as a missing one),
//! 400 for a malformed body (with the reason), 404 for an unknown route or workflow,
//! 502/503 when the Git provider, the source server or the platform cannot be reached
//! (the source server's own 404 and 503 answers are passed on with its message).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

use crate::core::json::Pointer as _;
use crate::env::http::{json, Body, Client};
use crate::env::kube::KubeTarget;
use crate::env::SharedEnv;

/// Largest request body accepted by default (`app-proxy.body`).
pub const BODY_LIMIT: usize = crate::env::limits::Limits::DEFAULT.app_proxy_body;

/// App-proxy settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The platform's client API (`host:port`), for permissions.
    pub platform_addr: String,
    /// The Git provider's API (`host:port`).
    pub git_addr: String,
    /// The source server (`host:port`), for manifests and app versions; `None`: those
    /// routes answer 503.
    pub sources_addr: Option<String>,
    /// The Kubernetes API server.
    pub kube: KubeTarget,
    /// How long fetched permissions are trusted.
    pub permissions_ttl: Duration,
    /// This runtime's name within its account (what permission rules name); empty: a rule
    /// limited to named runtimes never grants here.
    pub runtime: String,
    /// This runtime's account: a caller the platform places in another account (or in
    /// none) is refused with 403, whatever their rules say — every account has a runtime
    /// `prod`. Empty: not checked (a runtime that does not know its account relies on the
    /// gateway alone, which an ingress-mode runtime cannot).
    pub account: String,
    /// Address to listen on.
    pub listen: String,
}

/// What the platform said about a token (its `GET /api/permissions` answer), and when.
#[derive(Clone)]
struct Grant {
    user: String,
    answer: Value,
    fetched: Duration,
}

/// The app-proxy's state.
pub struct AppProxy {
    env: SharedEnv,
    config: Config,
    http: Client<Full<Bytes>>,
    kube: kube::Client,
    grants: Mutex<BTreeMap<String, Grant>>,
}

/// The Argo Workflows `Workflow` type.
pub fn workflow_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Workflow"),
        "workflows",
    )
}

/// Whether a permissions answer grants `applications:read` anywhere at all.
fn readable_anywhere(answer: &Value) -> bool {
    let named = |v: &Value| {
        v.as_array()
            .is_some_and(|a| a.iter().any(|o| o == "applications:read"))
    };
    named(&answer["allow"])
        || answer["rules"]
            .as_array()
            .is_some_and(|rules| rules.iter().any(|rule| named(&rule["actions"])))
}

/// A request's JSON body (at most `limit` bytes, `app-proxy.body`), or the 4xx answer naming
/// what is wrong.
async fn json_body(request: Request<Incoming>, limit: usize) -> Result<Value, Response<Body>> {
    let body = crate::env::http::read_body(request.into_body(), limit)
        .await
        .map_err(|e| error(e.status(), e.to_string()))?;
    serde_json::from_slice(&body).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {e}"),
        )
    })
}

/// The 400 naming which is not a Kubernetes name, unless `namespace` is a DNS-1123 label and
/// `name` a DNS-1123 subdomain.
fn refuse_unless_kube_names(namespace: &str, name: &str) -> Option<Response<Body>> {
    if !crate::core::names::dns_label(namespace) {
        return Some(error(
            StatusCode::BAD_REQUEST,
            format!("namespace {namespace:?} in the path is not a Kubernetes namespace name"),
        ));
    }
    if !crate::core::names::dns_subdomain(name) {
        return Some(error(
            StatusCode::BAD_REQUEST,
            format!("name {name:?} in the path is not a Kubernetes object name"),
        ));
    }
    None
}

fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    json(status, &json!({"error": message.into()}))
}

impl AppProxy {
    /// An app-proxy over `config`.
    pub fn new(env: SharedEnv, config: Config) -> Arc<Self> {
        let kube = crate::env::kube::client(env.clone(), &config.kube);
        let http = crate::env::http::client(env.clone(), Duration::from_secs(30));
        Arc::new(AppProxy {
            env,
            config,
            http,
            kube,
            grants: Mutex::default(),
        })
    }

    async fn call(
        &self,
        method: &str,
        url: String,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let mut request = Request::builder().method(method).uri(url);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let request = request
            .header("content-type", "application/json")
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    /// Who the caller is and whether they may do `operation` (nowhere in particular):
    /// `Ok(user)` or the error answer.
    async fn authorise(
        &self,
        request: &Request<Incoming>,
        operation: &str,
    ) -> Result<String, Response<Body>> {
        self.authorise_in(request, operation, None).await
    }

    /// As [`AppProxy::authorise`], for an operation in `namespace`: the platform's rules
    /// may limit an operation to runtimes and namespaces
    /// ([`crate::platform::permissions::answer_allows`]).
    async fn authorise_in(
        &self,
        request: &Request<Incoming>,
        operation: &str,
        namespace: Option<&str>,
    ) -> Result<String, Response<Body>> {
        let grant = self.grant(request).await?;
        if !crate::platform::permissions::answer_allows(
            &grant.answer,
            operation,
            &self.config.runtime,
            namespace,
        ) {
            let place = namespace
                .map(|n| format!(" in namespace {n}"))
                .unwrap_or_default();
            return Err(error(
                StatusCode::FORBIDDEN,
                format!("user {} may not {operation}{place}", grant.user),
            ));
        }
        Ok(grant.user)
    }

    /// Who the caller is: their permissions, fetched from the platform (or cached), or the
    /// 401/503 answer.
    async fn grant(&self, request: &Request<Incoming>) -> Result<Grant, Response<Body>> {
        let token = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or("");
        if token.is_empty() {
            return Err(error(
                StatusCode::UNAUTHORIZED,
                "missing user token (Authorization: Bearer <token>)",
            ));
        }
        let now = self.env.elapsed();
        let wall_ms = self.env.unix_millis();
        // A cached answer lives for the TTL, and never past its token's expiry.
        let cached = self
            .grants
            .lock()
            .expect("grants lock")
            .get(token)
            .filter(|g| now.saturating_sub(g.fetched) < self.config.permissions_ttl)
            .filter(|g| g.answer["expiresAt"].as_u64().is_none_or(|at| wall_ms < at))
            .cloned();
        let grant = match cached {
            Some(grant) => grant,
            None => {
                let url = format!("http://{}/api/permissions", self.config.platform_addr);
                let (status, answer) = self
                    .call(
                        "GET",
                        url,
                        &[("authorization", &format!("Bearer {token}"))],
                        None,
                    )
                    .await
                    .map_err(|e| {
                        error(
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("cannot reach the platform for permissions: {e}"),
                        )
                    })?;
                match status {
                    200 => {}
                    401 => {
                        // The platform's reason (unknown, or expired when) is the caller's.
                        let why = answer["error"].as_str().unwrap_or("unknown user token");
                        return Err(error(StatusCode::UNAUTHORIZED, why.to_string()));
                    }
                    other => {
                        return Err(error(
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("the platform answered {other} for permissions"),
                        ))
                    }
                }
                let grant = Grant {
                    user: answer["user"].as_str().unwrap_or("").to_string(),
                    answer,
                    fetched: now,
                };
                let mut grants = self.grants.lock().expect("grants lock");
                // Answers past their TTL or their token's expiry are never used again (the
                // platform's anti-entropy job brings a new token every pass).
                grants.retain(|_, g| {
                    now.saturating_sub(g.fetched) < self.config.permissions_ttl
                        && g.answer["expiresAt"].as_u64().is_none_or(|at| wall_ms < at)
                });
                grants.insert(token.to_string(), grant.clone());
                grant
            }
        };
        let account = grant.answer["account"].as_str().unwrap_or("");
        if !self.config.account.is_empty() && account != self.config.account {
            return Err(error(
                StatusCode::FORBIDDEN,
                format!(
                    "user {} is not of this runtime's account {}",
                    grant.user, self.config.account
                ),
            ));
        }
        Ok(grant)
    }

    /// Answers one request.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path().trim_end_matches('/').to_string();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        // A namespace and a name from the path go into the API server's URLs and the
        // permission check as they are: anything but Kubernetes names (`..`, `%2F`) is a 400.
        if let ["app-proxy", "api", "applications" | "workflows", namespace, name, _] =
            segments.as_slice()
        {
            if let Some(refusal) = refuse_unless_kube_names(namespace, name) {
                return refusal;
            }
        }
        match (request.method().as_str(), segments.as_slice()) {
            ("GET", ["app-proxy", "healthz"]) => json(StatusCode::OK, &json!({"status": "ok"})),
            ("GET", ["app-proxy", "api", "repositories"]) => {
                if let Err(refusal) = self.authorise(&request, "repositories:list").await {
                    return refusal;
                }
                match self
                    .call(
                        "GET",
                        format!("http://{}/api/repos", self.config.git_addr),
                        &[],
                        None,
                    )
                    .await
                {
                    Ok((200, answer)) => json(StatusCode::OK, &answer),
                    other => bad_gateway("Git provider", other),
                }
            }
            ("POST", ["app-proxy", "api", "applications", "commit"]) => {
                let user = match self.authorise(&request, "applications:commit").await {
                    Ok(user) => user,
                    Err(refusal) => return refusal,
                };
                let parsed = match json_body(request, self.env.limits().app_proxy_body).await {
                    Ok(parsed) => parsed,
                    Err(refusal) => return refusal,
                };
                let field = |name: &str| {
                    parsed[name]
                        .as_str()
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                };
                let (Some(repo), Some(path), Some(content)) =
                    (field("repo"), field("path"), field("content"))
                else {
                    return error(StatusCode::BAD_REQUEST, "want {\"repo\", \"path\", \"content\", \"message\"} with non-empty repo, path and content");
                };
                let commit = json!({"repo": repo, "path": path, "content": content, "message": field("message").unwrap_or_else(|| format!("update {path}")), "author": user});
                match self
                    .call(
                        "POST",
                        format!("http://{}/api/commits", self.config.git_addr),
                        &[],
                        Some(commit),
                    )
                    .await
                {
                    Ok((201, answer)) => json(StatusCode::CREATED, &answer),
                    other => bad_gateway("Git provider", other),
                }
            }
            ("POST", ["app-proxy", "api", "promotion-tasks"]) => {
                if let Err(refusal) = self.authorise(&request, "promotions:write").await {
                    return refusal;
                }
                let parsed = match json_body(request, self.env.limits().app_proxy_body).await {
                    Ok(parsed) => parsed,
                    Err(refusal) => return refusal,
                };
                let Some(name) = parsed
                    .at("/metadata/name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                else {
                    return error(StatusCode::BAD_REQUEST, "want metadata.name");
                };
                if !parsed["spec"].is_object() {
                    return error(StatusCode::BAD_REQUEST, "want spec (an object)");
                }
                let resource = crate::runtime::gitops_operator::promotion_task_resource();
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.kube.clone(), &self.config.kube.namespace, &resource);
                let mut task = DynamicObject::new(name, &resource);
                task.data = json!({"spec": parsed["spec"]});
                match api.create(&kube::api::PostParams::default(), &task).await {
                    Ok(_) => json(StatusCode::CREATED, &json!({"name": name})),
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        json(StatusCode::OK, &json!({"name": name, "existing": true}))
                    }
                    Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
                        error(StatusCode::UNPROCESSABLE_ENTITY, e.message)
                    }
                    Err(e) => error(StatusCode::BAD_GATEWAY, format!("the Kubernetes API: {e}")),
                }
            }
            ("POST", ["app-proxy", "api", "promotion-tasks", name, "terminate"]) => {
                if let Err(refusal) = self.authorise(&request, "promotions:write").await {
                    return refusal;
                }
                let api: Api<DynamicObject> = Api::namespaced_with(
                    self.kube.clone(),
                    &self.config.kube.namespace,
                    &crate::runtime::gitops_operator::promotion_task_resource(),
                );
                let patch = json!({"status": {"phase": "Terminated"}});
                match api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => json(
                        StatusCode::OK,
                        &json!({"name": name, "phase": "Terminated"}),
                    ),
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        error(StatusCode::NOT_FOUND, format!("no promotion task {name}"))
                    }
                    Err(e) => error(StatusCode::BAD_GATEWAY, format!("the Kubernetes API: {e}")),
                }
            }
            ("GET", ["app-proxy", "api", "promotion-tasks", name]) => {
                if let Err(refusal) = self.authorise(&request, "promotions:read").await {
                    return refusal;
                }
                let api: Api<DynamicObject> = Api::namespaced_with(
                    self.kube.clone(),
                    &self.config.kube.namespace,
                    &crate::runtime::gitops_operator::promotion_task_resource(),
                );
                match api.get_opt(name).await {
                    Ok(Some(task)) => json(
                        StatusCode::OK,
                        &json!({"name": name, "status": task.data.get("status").cloned().unwrap_or(Value::Null)}),
                    ),
                    Ok(None) => error(StatusCode::NOT_FOUND, format!("no promotion task {name}")),
                    Err(e) => error(StatusCode::BAD_GATEWAY, format!("the Kubernetes API: {e}")),
                }
            }
            ("GET", ["app-proxy", "api", "applications"]) => self.list_applications(request).await,
            ("GET", ["app-proxy", "api", "applications", namespace, name, "manifests"]) => {
                if let Err(refusal) = self.authorise(&request, "applications:read").await {
                    return refusal;
                }
                let Some(sources) = self.config.sources_addr.as_deref() else {
                    return error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "no source server is configured for this runtime",
                    );
                };
                let revision = crate::env::http::query(request.uri())
                    .remove("revision")
                    .unwrap_or_default();
                let q = crate::env::http::query_escape;
                let url = format!(
                    "http://{sources}/api/v1/applications/{}/manifests?appNamespace={}&revision={}",
                    q(name),
                    q(namespace),
                    q(&revision)
                );
                match self.call("GET", url, &[], None).await {
                    Ok((200, answer)) => json(StatusCode::OK, &answer),
                    Ok((status @ (400 | 404 | 503), answer)) => json(
                        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                        &json!({"error": answer["error"].as_str().unwrap_or("the source server refused")}),
                    ),
                    other => bad_gateway("source server", other),
                }
            }
            (
                "POST",
                ["app-proxy", "api", "applications", namespace, name, action @ ("sync" | "refresh")],
            ) => self.sync_or_refresh(request, namespace, name, action).await,
            ("POST", ["app-proxy", "api", "workflows", namespace, name, "terminate"]) => {
                if let Err(refusal) = self
                    .authorise_in(&request, "workflows:terminate", Some(namespace))
                    .await
                {
                    return refusal;
                }
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.kube.clone(), namespace, &workflow_resource());
                let patch = json!({"spec": {"shutdown": "Terminate"}});
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => json(
                        StatusCode::OK,
                        &json!({"workflow": format!("{namespace}/{name}"), "shutdown": "Terminate"}),
                    ),
                    Err(kube::Error::Api(status)) if status.code == 404 => error(
                        StatusCode::NOT_FOUND,
                        format!("no workflow {namespace}/{name}"),
                    ),
                    Err(e) => error(
                        StatusCode::BAD_GATEWAY,
                        format!("the Kubernetes API refused the patch: {e}"),
                    ),
                }
            }
            _ => error(
                StatusCode::NOT_FOUND,
                format!("no app-proxy route for {path}"),
            ),
        }
    }
}

/// Applications one `GET /app-proxy/api/applications` page holds unless it asks for
/// fewer, and the most it may ask for.
pub const LIST_PAGE: (u32, u32) = (500, 1000);

impl AppProxy {
    /// `GET /app-proxy/api/applications?limit=N&continue=T`: one page of the Applications in
    /// the runtime's namespace, as a Kubernetes list pages them (one snapshot: every page
    /// is as of the first page's `resourceVersion`; an expired `continue` is 410, as the
    /// API server answers it), without the apps whose destination namespace the caller may
    /// not read. 400 for a `limit` that is not 1..=1000.
    async fn list_applications(&self, request: Request<Incoming>) -> Response<Body> {
        let grant = match self.grant(&request).await {
            Ok(grant) => grant,
            Err(refusal) => return refusal,
        };
        if !readable_anywhere(&grant.answer) {
            return error(
                StatusCode::FORBIDDEN,
                format!("user {} may not applications:read", grant.user),
            );
        }
        let mut query = crate::env::http::query(request.uri());
        let limit = match query.remove("limit") {
            None => LIST_PAGE.0,
            Some(text) => match text.parse::<u32>() {
                Ok(n @ 1..) if n <= LIST_PAGE.1 => n,
                _ => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("limit {text:?} is not a number from 1 to {}", LIST_PAGE.1),
                    )
                }
            },
        };
        let mut params = kube::api::ListParams::default().limit(limit);
        if let Some(token) = query.remove("continue").filter(|t| !t.is_empty()) {
            params = params.continue_token(&token);
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.kube.clone(),
            &self.config.kube.namespace,
            &crate::runtime::app_reporter::application_resource(),
        );
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(kube::Error::Api(e)) if e.code == 410 => {
                return error(
                    StatusCode::GONE,
                    format!(
                        "the list's continue token expired, start again: {}",
                        e.message
                    ),
                )
            }
            Err(e) => return error(StatusCode::BAD_GATEWAY, format!("the Kubernetes API: {e}")),
        };
        let readable = |app: &DynamicObject| {
            let destination = app
                .data
                .at("/spec/destination/namespace")
                .and_then(Value::as_str);
            crate::platform::permissions::answer_allows(
                &grant.answer,
                "applications:read",
                &self.config.runtime,
                destination,
            )
        };
        let omitted = page.items.iter().filter(|app| !readable(app)).count();
        let items: Vec<Value> = page
            .items
            .iter()
            .filter(|app| readable(app))
            .map(|app| {
                let mut item = serde_json::to_value(app).unwrap_or(Value::Null);
                item["apiVersion"] = json!("argoproj.io/v1alpha1");
                item["kind"] = json!("Application");
                item
            })
            .collect();
        json(
            StatusCode::OK,
            &json!({
                "namespace": self.config.kube.namespace,
                "resourceVersion": page.metadata.resource_version.unwrap_or_default(),
                "continue": page.metadata.continue_.unwrap_or_default(),
                "omitted": omitted,
                "items": items,
            }),
        )
    }

    /// `POST …/applications/<ns>/<name>/sync` (`{"revision"?}`: sets the Application's
    /// `operation`, as `argocd app sync` does) or `…/refresh` (sets the
    /// `argocd.argoproj.io/refresh: normal` annotation). The caller's rules are judged
    /// against the app's destination namespace, so the app is read first.
    async fn sync_or_refresh(
        &self,
        request: Request<Incoming>,
        namespace: &str,
        name: &str,
        action: &str,
    ) -> Response<Body> {
        let operation = format!("applications:{action}");
        // Authenticate before touching anything.
        let grant = match self.grant(&request).await {
            Ok(grant) => grant,
            Err(refusal) => return refusal,
        };
        let missing = || {
            error(
                StatusCode::NOT_FOUND,
                format!("no application {namespace}/{name}"),
            )
        };
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.kube.clone(),
            namespace,
            &crate::runtime::app_reporter::application_resource(),
        );
        let app = match api.get_opt(name).await {
            Ok(Some(app)) => app,
            Ok(None) => return missing(),
            Err(e) => return error(StatusCode::BAD_GATEWAY, format!("the Kubernetes API: {e}")),
        };
        let destination = app
            .data
            .at("/spec/destination/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let allows = |operation: &str| {
            crate::platform::permissions::answer_allows(
                &grant.answer,
                operation,
                &self.config.runtime,
                Some(&destination),
            )
        };
        if !allows(&operation) {
            // An app the caller may neither act on nor read is answered as a missing one:
            // a 403 would tell them it exists (the GitOps API answers the same).
            if !allows("applications:read") {
                return missing();
            }
            return error(
                StatusCode::FORBIDDEN,
                format!(
                    "user {} may not {operation} in namespace {destination}",
                    grant.user
                ),
            );
        }
        let user = grant.user;
        let patch = if action == "sync" {
            let revision = match json_body(request, self.env.limits().app_proxy_body).await {
                Ok(body) => body["revision"].as_str().map(str::to_string),
                Err(refusal) => return refusal,
            };
            let mut sync = json!({});
            if let Some(revision) = revision.filter(|r| !r.is_empty()) {
                sync["revision"] = json!(revision);
            }
            json!({"operation": {"sync": sync, "initiatedBy": {"username": user}}})
        } else {
            json!({"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}})
        };
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => json(
                StatusCode::OK,
                &json!({"application": format!("{namespace}/{name}"), "action": action}),
            ),
            Err(kube::Error::Api(status)) if status.code == 404 => error(
                StatusCode::NOT_FOUND,
                format!("no application {namespace}/{name}"),
            ),
            Err(e) => error(
                StatusCode::BAD_GATEWAY,
                format!("the Kubernetes API refused the patch: {e}"),
            ),
        }
    }
}

/// Serves the app-proxy on `config.listen`.
pub async fn run(env: SharedEnv, config: Config) -> std::io::Result<()> {
    let listen = config.listen.clone();
    let proxy = AppProxy::new(env.clone(), config);
    let listener = env.listen(&listen).await?;
    let limits = env.limits().clone();
    crate::env::http::serve_limited(listener, &limits, move |request, _| {
        let proxy = proxy.clone();
        async move { proxy.handle(request).await }
    })
    .await
}

/// 502 naming `upstream`, for an answer a route does not pass on or for no answer at all.
fn bad_gateway(upstream: &str, outcome: Result<(u16, Value), String>) -> Response<Body> {
    match outcome {
        Ok((status, answer)) => error(
            StatusCode::BAD_GATEWAY,
            format!("the {upstream} answered {status}: {answer}"),
        ),
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            format!("cannot reach the {upstream}: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kubernetes_names_from_the_path_reach_the_api_server() {
        assert!(refuse_unless_kube_names("argocd", "guestbook.v2-1").is_none());
        for (namespace, name) in [
            ("..", "x"),
            ("argocd", ".."),
            ("argo%2Fcd", "x"),
            ("argocd", "a%2F..%2Fb"),
            ("Argocd", "x"),
            ("argocd", "-x"),
            ("a.b", "x"),
            ("", "x"),
        ] {
            assert!(
                refuse_unless_kube_names(namespace, name).is_some(),
                "{namespace}/{name}"
            );
        }
    }
}
