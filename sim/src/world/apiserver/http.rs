//! REST routing for the simulated API server: paths, verbs, content types, query
//! parameters, and the request-level fault knobs (latency, 429 with Retry-After).
//!
//! Authentication is not modelled: a caller is [`ADMIN_USER`] (allowed everything, like
//! `system:masters`) unless it sends `Impersonate-User`, as an admin may. Authorization is
//! two rules: an impersonated user has no RBAC grants (every resource request is 403, as
//! for a fresh user on a real cluster), and the `forbidden` knob revokes resources from
//! the admin too (the fault "the runtime's RBAC binding was removed"). The check runs
//! before the body is read or the object looked up, as kube-apiserver's filter chain does;
//! a path naming no resource is still 404 first (upstream would authorize it too).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};

use orrery_system::core::json::Pointer as _;
use orrery_system::env::http::{channel, full, json, Body};
use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;

use super::discovery;
use super::error::ApiError;
use super::events_v1;
use super::openapi;
use super::protobuf;
use super::resources::ResourceKind;
use super::selector::{FieldSelector, LabelSelector};
use super::store::{Filter, Written};
use super::table::{self, Include};
use super::watch::{self, WatchRequest};
use super::ApiServer;

/// Who a caller that impersonates nobody is (the conformance token's user name).
pub const ADMIN_USER: &str = "orrery-admin";

/// The RBAC verb of a request, as kube-apiserver's request-info resolver names it.
fn verb_of(method: &Method, target: &Target, params: &BTreeMap<String, String>) -> &'static str {
    let watching = matches!(params.get("watch").map(String::as_str), Some("true" | "1"));
    match (method.as_str(), target.name.is_some()) {
        ("GET", _) if watching => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

/// Refuses a request its caller may not make (see the module doc for the rules).
fn authorize(
    req: &Request<Incoming>,
    target: &Target,
    verb: &str,
    knobs: &super::Knobs,
) -> Result<(), ApiError> {
    let impersonated = req
        .headers()
        .get("impersonate-user")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let revoked = knobs.forbidden.contains(&target.kind.plural);
    if impersonated.is_none() && !revoked {
        return Ok(());
    }
    let user = impersonated.as_deref().unwrap_or(ADMIN_USER);
    let subresource = if target.scale {
        Some("scale")
    } else {
        target.status.then_some("status")
    };
    Err(ApiError::forbidden(
        &target.kind,
        subresource,
        target.name.as_deref(),
        target.namespace.as_deref(),
        user,
        verb,
    ))
}

/// A request header as text (empty when absent or not text).
fn header(req: &Request<Incoming>, name: &str) -> String {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// Whether a client that sent `accept` takes a JSON answer: no header, a wildcard, or a
/// JSON type among those it lists. Only protobuf (or only YAML) is 406 here; the real server
/// answers protobuf for built-in types and YAML for every type, and 406 protobuf for custom
/// resources, as here.
fn answers_json(accept: &str) -> bool {
    accept.trim().is_empty()
        || accept.split(',').any(|media| {
            let media = media.split(';').next().unwrap_or("").trim();
            matches!(media, "*/*" | "application/*" | "") || media.starts_with("application/json")
        })
}

/// Largest accepted request body (kube-apiserver's limit is 3 MiB).
pub const BODY_LIMIT_BYTES: usize = 3 * 1024 * 1024;

/// A parsed resource path.
#[derive(Clone, Debug, PartialEq)]
struct Target {
    kind: ResourceKind,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
    /// `…/<name>/scale` of a type whose CRD declares it.
    scale: bool,
    /// `/api/v1/namespaces/<name>/finalize`.
    finalize: bool,
}

/// Handles requests for one server; cheap to clone per connection.
#[derive(Clone)]
pub struct Handler {
    env: SharedEnv,
    server: Arc<ApiServer>,
}

/// The options type a write method's query parameters belong to (`None`: not a write).
fn options_of(method: &Method) -> Option<&'static str> {
    match *method {
        Method::POST => Some("CreateOptions"),
        Method::PUT => Some("UpdateOptions"),
        Method::PATCH => Some("PatchOptions"),
        Method::DELETE => Some("DeleteOptions"),
        _ => None,
    }
}

/// A write's answer: the stored object's JSON, the bytes its watchers send too.
fn written(status: StatusCode, written: &Written) -> Response<Body> {
    json_text(status, written.json.clone())
}

/// A JSON answer whose text is already made.
fn json_text(status: StatusCode, text: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(text))
        .expect("static response parts are valid")
}

fn error_response(error: &ApiError) -> Response<Body> {
    let code = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(code, &error.to_status())
}

impl Handler {
    /// A handler over `server`, drawing fault decisions from `env`.
    pub fn new(env: SharedEnv, server: Arc<ApiServer>) -> Self {
        Handler { env, server }
    }

    fn route(&self, path: &str) -> Result<Target, ApiError> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, version, rest) = match segments.as_slice() {
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return Err(ApiError::no_such_path(path)),
        };
        let (namespace, rest) = match rest {
            // A Namespace's own subresources, not a resource in it.
            ["namespaces", _, "status" | "finalize"] if group.is_empty() => (None, rest),
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
            rest => (None, rest),
        };
        let (plural, name, sub) = match rest {
            [plural] => (*plural, None, None),
            [plural, name] => (*plural, Some(name.to_string()), None),
            [plural, name, sub] => (*plural, Some(name.to_string()), Some(*sub)),
            _ => return Err(ApiError::no_such_path(path)),
        };
        let kind = self
            .server
            .kinds()
            .iter()
            .find(|k| k.group == group && k.version == version && k.plural == plural)
            .cloned()
            .ok_or_else(|| ApiError::no_such_path(path))?;
        let scale = sub == Some("scale") && kind.scale.is_some() && name.is_some();
        let finalize = sub == Some("finalize") && super::store::is_namespace(&kind);
        let status = match sub {
            None => false,
            Some("scale") if scale => false,
            Some("finalize") if finalize => false,
            Some("status") if kind.status_subresource => true,
            // kube-apiserver answers a missing subresource of a named object as if the object were missing.
            Some("status") => {
                return Err(ApiError::not_found(&kind, name.as_deref().unwrap_or("")))
            }
            // A custom resource's undeclared subresource (scale without the CRD's): the same.
            Some(_) if kind.custom && name.is_some() => {
                return Err(ApiError::not_found(&kind, name.as_deref().unwrap_or("")))
            }
            Some(other) => return Err(ApiError::no_such_path(&format!("{plural}/{other}"))),
        };
        if kind.namespaced && name.is_some() && namespace.is_none() {
            return Err(ApiError::bad_request(
                "namespaced objects are addressed under /namespaces/<ns>/",
            ));
        }
        Ok(Target {
            kind,
            namespace,
            name,
            status,
            scale,
            finalize,
        })
    }

    /// Answers a discovery request (`/api`, `/apis`, a group, a group version), if `path` is one.
    fn discovery(&self, req: &Request<Incoming>, path: &str) -> Option<Response<Body>> {
        let kinds = self.server.kinds();
        let accept = header(req, "accept");
        let aggregated = |core: bool| {
            let mut response = json(StatusCode::OK, &discovery::aggregated(kinds, core));
            response.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static(discovery::AGGREGATED_V2),
            );
            response
        };
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let missing = || ApiError::no_such_path(path);
        let document_path = matches!(
            segments.as_slice(),
            ["api"] | ["apis"] | ["apis", _] | ["api", _] | ["apis", _, _] | ["openapi", ..]
        );
        if document_path && req.method() != Method::GET {
            return Some(error_response(&ApiError::method_not_allowed(
                req.method().as_str(),
            )));
        }
        let text = |content_type: &'static str, body: &'static str| {
            let mut response = Response::new(full(body));
            response
                .headers_mut()
                .insert("content-type", http::HeaderValue::from_static(content_type));
            Some(response)
        };
        match segments.as_slice() {
            // The real server words its root's type as text, though it is JSON.
            ["openapi", "v3"] => {
                let mut response = json(StatusCode::OK, &openapi::root());
                response.headers_mut().insert(
                    "content-type",
                    http::HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                return Some(response);
            }
            ["openapi", "v3", rest @ ..] => {
                return match openapi::v3(&rest.join("/")) {
                    Some(document) => text("application/json", document),
                    None => Some(error_response(&missing())),
                }
            }
            ["openapi", "v2"] if accept.contains("protobuf") && !accept.contains("json") => {
                return Some(error_response(&ApiError::not_acceptable()));
            }
            ["openapi", "v2"] => return text("application/json", openapi::v2()),
            _ => {}
        }
        let document = match segments.as_slice() {
            ["api"] if discovery::wants_aggregated(&accept) => return Some(aggregated(true)),
            ["apis"] if discovery::wants_aggregated(&accept) => return Some(aggregated(false)),
            ["api"] => Ok(discovery::core_versions(&header(req, "host"))),
            ["apis"] => Ok(discovery::group_list(kinds)),
            ["apis", group] => discovery::group(kinds, group).ok_or_else(missing),
            ["api", version] => discovery::resource_list(kinds, "", version).ok_or_else(missing),
            ["apis", group, version] => {
                discovery::resource_list(kinds, group, version).ok_or_else(missing)
            }
            _ => return None,
        };
        Some(match document {
            Ok(document) => json(StatusCode::OK, &document),
            Err(error) => error_response(&error),
        })
    }

    /// Answers one request; never panics on bad input.
    pub async fn handle(&self, req: Request<Incoming>, _peer: String) -> Response<Body> {
        let knobs = self.server.knobs();
        if !knobs.latency.is_zero() {
            self.env.sleep(knobs.latency).await;
        }
        let path = req.uri().path().to_string();
        match path.as_str() {
            "/version" => {
                return json(
                    StatusCode::OK,
                    &json!({"major": "1", "minor": "36", "gitVersion": "v1.36.3-orrery-sim", "platform": "orrery/sim"}),
                )
            }
            "/healthz" | "/readyz" | "/livez" => return Response::new(full("ok")),
            _ => {}
        }
        if let Some(answer) = self.discovery(&req, &path) {
            return answer;
        }
        if knobs.throttle_rate > 0.0
            && self.env.random_u64() % 1_000_000 < (knobs.throttle_rate * 1e6) as u64
        {
            let mut response = error_response(&ApiError::too_many_requests());
            response
                .headers_mut()
                .insert("retry-after", knobs.retry_after_seconds.into());
            return response;
        }
        // events.k8s.io/v1 is core/v1's store in another version: answers are converted.
        let events_v1 = path.starts_with("/apis/events.k8s.io/");
        match self.dispatch(req, &path, &knobs).await {
            Ok(response) if events_v1 => events_v1_answer(response).await,
            Ok(response) => response,
            Err(error) if events_v1 => error_response(&events_v1::regroup(error)),
            Err(error) => error_response(&error),
        }
    }

    async fn dispatch(
        &self,
        req: Request<Incoming>,
        path: &str,
        knobs: &super::Knobs,
    ) -> Result<Response<Body>, ApiError> {
        let target = self.route(path)?;
        let params = orrery_system::env::http::query(req.uri());
        let method = req.method().clone();
        authorize(&req, &target, verb_of(&method, &target, &params), knobs)?;
        // events.k8s.io/v1 reads and writes core/v1's stored Events ([`events_v1`]).
        let events_v1 = events_v1::is_events_v1(&target.kind);
        let target = if events_v1 {
            Target {
                kind: self.server.event_kind().clone(),
                ..target
            }
        } else {
            target
        };
        let content_type = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let dry_run = match (
            params.get("dryRun").map(String::as_str),
            options_of(&method),
        ) {
            (None, _) | (Some(_), None) => false,
            (Some("All"), Some(_)) => true,
            (Some(other), Some(options)) => {
                return Err(ApiError::dry_run_unsupported(options, other))
            }
        };
        let namespace = target.namespace.clone().unwrap_or_default();
        let now = self.env.elapsed();
        let unix_millis = self.env.unix_millis();
        if !answers_json(&header(&req, "accept")) {
            return Err(ApiError::not_acceptable());
        }
        if target.scale {
            return self
                .scale(req, &target, &method, &content_type, dry_run, now)
                .await;
        }
        if target.finalize {
            if method != Method::PUT {
                return Err(ApiError::verb_not_served());
            }
            let name = target.name.clone().unwrap_or_default();
            let body = read_json(req, &content_type, &target.kind).await?;
            let finalized = self.write("finalize", &target, dry_run, |store| {
                store.finalize_namespace(&target.kind, &name, &body, now)
            })?;
            return Ok(written(StatusCode::OK, &finalized));
        }
        // `kubectl get` asks for a server-side table; other clients for the objects.
        let as_table = (method == Method::GET && table::wanted(&header(&req, "accept")))
            .then(|| Include::parse(params.get("includeObject").map(String::as_str)))
            .transpose()?;
        match (&method, &target.name) {
            (&Method::GET, None) => {
                let filter = filter(&target, &params, events_v1)?;
                if matches!(params.get("watch").map(String::as_str), Some("true" | "1")) {
                    return self.watch(target.kind, filter, &params, as_table, events_v1);
                }
                let limit = params
                    .get("limit")
                    .map(|l| {
                        l.parse::<usize>()
                            .map_err(|_| ApiError::bad_request(&format!("invalid limit {l:?}")))
                    })
                    .transpose()?;
                // resourceVersion=0 may be served from a lagging watch cache (the knob).
                let from_cache = params.get("resourceVersion").map(String::as_str) == Some("0");
                let page = self.server.store().list_lagging(
                    &target.kind,
                    &filter,
                    limit,
                    params
                        .get("continue")
                        .map(String::as_str)
                        .filter(|c| !c.is_empty()),
                    if from_cache { knobs.stale_list_lag } else { 0 },
                )?;
                let mut metadata = json!({"resourceVersion": page.rv.to_string()});
                match page.continue_token {
                    Some(token) => metadata["continue"] = json!(token),
                    // Unstructured (custom resource) lists always carry the field; typed lists omit it.
                    None if target.kind.custom => metadata["continue"] = json!(""),
                    None => {}
                }
                if let Some(remaining) = page.remaining {
                    metadata["remainingItemCount"] = json!(remaining);
                }
                if let Some(include) = as_table {
                    if metadata["continue"] == "" {
                        metadata.as_object_mut().map(|m| m.remove("continue"));
                    }
                    let rows = page
                        .items
                        .iter()
                        .map(|item| table::row(&target.kind, item, unix_millis, include))
                        .collect();
                    return Ok(json(
                        StatusCode::OK,
                        &table::table(&target.kind, metadata, rows, true),
                    ));
                }
                // Items of built-in lists carry no apiVersion/kind (typed Go lists); custom
                // resource lists are unstructured and keep them. Each item's text is the
                // object's own, made once while it lives (`encoded`), not again per list.
                let mut encoded = self.server.encoded();
                let items: Vec<Bytes> = page
                    .items
                    .iter()
                    .map(|item| encoded.text(item, !target.kind.custom))
                    .collect();
                drop(encoded);
                let list = list_body(
                    &target.kind.api_version(),
                    &format!("{}List", target.kind.kind),
                    &metadata,
                    &items,
                );
                Ok(json_text(StatusCode::OK, list))
            }
            (&Method::GET, Some(name)) => {
                let object = self
                    .server
                    .store()
                    .get_shared(&target.kind, &namespace, name)
                    .or_else(|error| self.implicit_namespace(&target.kind, name).ok_or(error))?;
                match as_table {
                    Some(include) => {
                        let metadata =
                            json!({"resourceVersion": object["metadata"]["resourceVersion"]});
                        let row = table::row(&target.kind, &object, unix_millis, include);
                        Ok(json(
                            StatusCode::OK,
                            &table::table(&target.kind, metadata, vec![row], true),
                        ))
                    }
                    None => {
                        let text = self.server.encoded().text(&object, false);
                        Ok(json_text(StatusCode::OK, text))
                    }
                }
            }
            (&Method::POST, None) => {
                let mut body = read_json(req, &content_type, &target.kind).await?;
                if events_v1 {
                    body = events_v1::to_stored(&body)?;
                    let name = body["metadata"]["name"].as_str().unwrap_or_default();
                    events_v1::check_create(&target.kind, name, &namespace, &body)?;
                }
                check_body_namespace(&target, &body)?;
                self.admit_create(&target, &namespace, &body)?;
                let created = self.write("create", &target, dry_run, |store| {
                    store.create(&target.kind, &namespace, body, now, unix_millis)
                })?;
                Ok(written(StatusCode::CREATED, &created))
            }
            (&Method::PUT, Some(name)) => {
                let mut body = read_json(req, &content_type, &target.kind).await?;
                if events_v1 {
                    body = events_v1::to_stored(&body)?;
                    // An Event may be created by an update (its strategy allows it).
                    match self.server.store().get(&target.kind, &namespace, name) {
                        Ok(old) => {
                            events_v1::check_update(&target.kind, name, &namespace, &body, &old)?
                        }
                        Err(_) => events_v1::check_create(&target.kind, name, &namespace, &body)?,
                    }
                }
                check_body_namespace(&target, &body)?;
                let replaced = self.write("replace", &target, dry_run, |store| {
                    store.replace(&target.kind, &namespace, name, body, target.status, now)
                })?;
                Ok(written(StatusCode::OK, &replaced))
            }
            (&Method::PATCH, Some(name)) => {
                let media = content_type
                    .split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string();
                let patched = match media.as_str() {
                    "application/merge-patch+json" => {
                        let patch = read_json(req, "application/json", &target.kind).await?;
                        self.write("merge_patch", &target, dry_run, |store| {
                            store.patch_with(
                                &target.kind,
                                &namespace,
                                name,
                                &patch,
                                target.status,
                                now,
                                |object, patch| {
                                    patched(events_v1, &target.kind, object, |shown| {
                                        super::mergepatch::merge_patch(shown, patch);
                                        Ok(())
                                    })
                                },
                            )
                        })?
                    }
                    "application/strategic-merge-patch+json" if !target.kind.custom => {
                        let patch = read_json(req, "application/json", &target.kind).await?;
                        let schema = openapi::schema_of(&target.kind);
                        self.write("strategic_merge_patch", &target, dry_run, |store| {
                            store.patch_with(
                                &target.kind,
                                &namespace,
                                name,
                                &patch,
                                target.status,
                                now,
                                |object, patch| {
                                    patched(events_v1, &target.kind, object, |shown| {
                                        super::strategic::apply(shown, patch, schema)
                                    })
                                },
                            )
                        })?
                    }
                    "application/apply-patch+yaml" => {
                        let manager = params
                            .get("fieldManager")
                            .filter(|m| !m.is_empty())
                            .cloned()
                            .ok_or_else(ApiError::field_manager_required)?;
                        let force = params.get("force").is_some_and(|f| f == "true");
                        let mut applied = read_yaml(req).await?;
                        if events_v1 {
                            // Managed fields are recorded under core/v1's names and the
                            // stricter rules of this version are not applied (a declared gap).
                            applied = events_v1::to_stored(&applied)?;
                        }
                        check_body_namespace(&target, &applied)?;
                        let existed = self
                            .server
                            .store()
                            .get(&target.kind, &namespace, name)
                            .is_ok();
                        if !existed {
                            self.admit_create(&target, &namespace, &applied)?;
                        }
                        let applied = self.write("apply", &target, dry_run, |store| {
                            store.apply(
                                &target.kind,
                                &namespace,
                                name,
                                applied,
                                &manager,
                                force,
                                target.status,
                                now,
                                unix_millis,
                            )
                        })?;
                        // An apply that creates answers 201, as a POST would.
                        return Ok(written(
                            if existed {
                                StatusCode::OK
                            } else {
                                StatusCode::CREATED
                            },
                            &applied,
                        ));
                    }
                    "application/strategic-merge-patch+json" => {
                        return Err(ApiError::unsupported_patch_type(target.kind.custom))
                    }
                    "application/json-patch+json" => {
                        let patch = read_json(req, "application/json", &target.kind).await?;
                        self.write("json_patch", &target, dry_run, |store| {
                            store.patch_with(
                                &target.kind,
                                &namespace,
                                name,
                                &serde_json::json!({}),
                                target.status,
                                now,
                                |object, _| {
                                    let before = object["metadata"]["resourceVersion"].clone();
                                    patched(events_v1, &target.kind, object, |shown| {
                                        super::jsonpatch::apply(shown, &patch)
                                    })?;
                                    // A resourceVersion the patch sets is a precondition.
                                    match &object["metadata"]["resourceVersion"] {
                                        Value::String(rv)
                                            if Value::String(rv.clone()) != before =>
                                        {
                                            Err(ApiError::conflict(&target.kind, name))
                                        }
                                        _ => Ok(()),
                                    }
                                },
                            )
                        })?
                    }
                    other => return Err(ApiError::unsupported_media_type(other)),
                };
                Ok(written(StatusCode::OK, &patched))
            }
            (&Method::DELETE, Some(name)) if super::store::is_namespace(&target.kind) => {
                let before = self.namespace_phase(name);
                let deleted = self.write("delete", &target, dry_run, |store| {
                    store.delete(&target.kind, &namespace, name, now, unix_millis)
                })?;
                let after = super::namespaces::phase_of(Some(&deleted));
                if !dry_run
                    && before == super::namespaces::Phase::Active
                    && after == super::namespaces::Phase::Terminating
                {
                    // The namespace controller's stand-in empties it, then finalizes it.
                    self.server.finish_namespace(&self.env, name);
                }
                // The namespace registry answers with the object, even once it is gone.
                Ok(written(StatusCode::OK, &deleted))
            }
            (&Method::DELETE, Some(name)) => {
                let deleted = self.write("delete", &target, dry_run, |store| {
                    store.delete(&target.kind, &namespace, name, now, unix_millis)
                })?;
                // An object its finalizers keep is answered as it now is (marked for deletion).
                if super::store::has_finalizers(&deleted) {
                    return Ok(written(StatusCode::OK, &deleted));
                }
                // kube-apiserver answers an immediate deletion with a `Status`, not the object.
                Ok(json(
                    StatusCode::OK,
                    &ApiError::deleted_status(&target.kind, name, &deleted["metadata"]["uid"]),
                ))
            }
            (method, _) => Err(ApiError::method_not_allowed(method.as_str())),
        }
    }

    /// `GET`, `PUT` or `PATCH` of a custom resource's `/scale` ([`super::scale`]): the
    /// Scale is read from the object; a write updates the object's replicas path.
    async fn scale(
        &self,
        req: Request<Incoming>,
        target: &Target,
        method: &Method,
        content_type: &str,
        dry_run: bool,
        now: Duration,
    ) -> Result<Response<Body>, ApiError> {
        let (Some(paths), Some(name)) = (target.kind.scale.clone(), target.name.as_deref()) else {
            return Err(ApiError::not_found(&target.kind, ""));
        };
        let namespace = target.namespace.clone().unwrap_or_default();
        let current = self.server.store().get(&target.kind, &namespace, name)?;
        let media = content_type.split(';').next().unwrap_or("").trim();
        let written = match *method {
            Method::GET => return Ok(json(StatusCode::OK, &super::scale::of(&current, &paths))),
            Method::PUT => read_json(req, content_type, &super::scale::kind()).await?,
            Method::PATCH => {
                let patch = read_json(req, "application/json", &super::scale::kind()).await?;
                let mut scale = super::scale::of(&current, &paths);
                match media {
                    // A Scale has no lists: a strategic merge patch is a merge patch.
                    "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                        super::mergepatch::merge_patch(&mut scale, &patch)
                    }
                    "application/json-patch+json" => super::jsonpatch::apply(&mut scale, &patch)?,
                    other => return Err(ApiError::unsupported_media_type(other)),
                }
                scale
            }
            ref other => return Err(ApiError::method_not_allowed(other.as_str())),
        };
        let patch = super::scale::update(&target.kind, name, &written, &paths)?;
        let updated = self.write("scale", target, dry_run, |store| {
            store.patch_merge(&target.kind, &namespace, name, &patch, false, now)
        })?;
        Ok(json(
            StatusCode::OK,
            &super::scale::of(&updated.object, &paths),
        ))
    }

    /// The phase of namespace `name` as stored (Missing when no object).
    fn namespace_phase(&self, name: &str) -> super::namespaces::Phase {
        let object = self
            .server
            .store()
            .get_shared(self.server.namespace_kind(), "", name)
            .ok();
        super::namespaces::phase_of(object.as_deref())
    }

    /// NamespaceLifecycle for a create of a namespaced object: 404 when its namespace is
    /// missing (or, with implicit namespaces, not a valid name), 403 while it terminates.
    fn admit_create(&self, target: &Target, namespace: &str, body: &Value) -> Result<(), ApiError> {
        use super::namespaces::{Mode, Phase};
        if !target.kind.namespaced {
            return Ok(());
        }
        match self.namespace_phase(namespace) {
            Phase::Active => Ok(()),
            Phase::Missing
                if self.server.namespace_mode() == Mode::Implicit
                    && super::validation::namespace_name(namespace) =>
            {
                Ok(())
            }
            Phase::Missing => Err(ApiError::namespace_not_found(namespace)),
            Phase::Terminating => {
                let meta = &body["metadata"];
                let name = meta["name"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .or_else(|| meta["generateName"].as_str())
                    .unwrap_or_default();
                Err(ApiError::namespace_terminating(
                    &target.kind,
                    name,
                    namespace,
                ))
            }
        }
    }

    /// With implicit namespaces, a valid name with no Namespace object reads as an active
    /// namespace (kubectl reads one to word a NotFound for an object in it).
    fn implicit_namespace(&self, kind: &ResourceKind, name: &str) -> Option<Arc<Value>> {
        let implicit = self.server.namespace_mode() == super::namespaces::Mode::Implicit;
        (implicit && super::store::is_namespace(kind) && super::validation::namespace_name(name))
            .then(|| {
                let mut namespace =
                    json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": name}});
                super::namespaces::prepare_create(&mut namespace);
                Arc::new(namespace)
            })
    }

    /// Runs a write under the store lock, compacts, wakes watches and records it.
    fn write(
        &self,
        verb: &str,
        target: &Target,
        dry_run: bool,
        op: impl FnOnce(&mut super::Store) -> Result<Written, ApiError>,
    ) -> Result<Written, ApiError> {
        if dry_run {
            return self.dry_run(target, op);
        }
        let window = self.server.knobs().compaction_window;
        let (result, rv, wrote) = {
            let mut store = self.server.store();
            let before = store.rv();
            let result = op(&mut store);
            store.compact(self.env.elapsed(), window);
            (result, store.rv(), store.rv() != before)
        };
        let object = result?;
        if !wrote {
            return Ok(object); // a no-op update: nothing stored, nothing to tell
        }
        self.server.notify(rv);
        let text = |field: &str| {
            object["metadata"][field]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        let still_stored = verb != "delete" || super::store::has_finalizers(&object);
        if super::events::is_event(&target.kind) && still_stored {
            // Every stored change of an Event sets its lease again (`--event-ttl`), a DELETE
            // that only marks it for its finalizers too.
            self.server
                .event_written(&self.env, &text("namespace"), &text("name"));
        }
        self.env.observe(
            WorldEvent::ApiWrite {
                verb: verb.to_string(),
                resource: target.kind.plural.clone(),
                name: text("name"),
                rv: text("resourceVersion"),
            }
            .into(),
        );
        Ok(object)
    }

    /// A write with `dryRun=All`: validated and answered as the write would be, against a
    /// copy of the store that is then thrown away — no new resourceVersion, no watch event,
    /// nothing in the trace. The answer carries the object's stored resourceVersion (none
    /// for a create), as kube-apiserver's `DryRunnableStorage` answers.
    fn dry_run(
        &self,
        target: &Target,
        op: impl FnOnce(&mut super::Store) -> Result<Written, ApiError>,
    ) -> Result<Written, ApiError> {
        let mut scratch = self.server.store().clone();
        let before = scratch.rv();
        let result = op(&mut scratch);
        self.server.store().skip_uids(scratch.uid_counter());
        let answer = result?;
        if scratch.rv() == before {
            return Ok(answer); // nothing would be written: the stored object as it is
        }
        let mut object = (*answer.object).clone();
        let stored = self.server.store().get(
            &target.kind,
            object["metadata"]["namespace"].as_str().unwrap_or(""),
            object["metadata"]["name"].as_str().unwrap_or(""),
        );
        if let Some(meta) = object["metadata"].as_object_mut() {
            match stored
                .ok()
                .and_then(|s| s["metadata"].get("resourceVersion").cloned())
            {
                Some(rv) => {
                    meta.insert("resourceVersion".into(), rv);
                }
                None => {
                    meta.shift_remove("resourceVersion");
                }
            }
        }
        Ok(Written::of(std::sync::Arc::new(object)))
    }

    fn watch(
        &self,
        kind: ResourceKind,
        filter: Filter,
        params: &BTreeMap<String, String>,
        as_table: Option<Include>,
        events_v1: bool,
    ) -> Result<Response<Body>, ApiError> {
        let resource_version =
            match params.get("resourceVersion").map(String::as_str) {
                None | Some("") => None,
                Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(&format!("invalid resourceVersion {rv:?}"))
                })?),
            };
        let timeout = match params.get("timeoutSeconds") {
            Some(t) => Duration::from_secs(
                t.parse()
                    .map_err(|_| ApiError::bad_request(&format!("invalid timeoutSeconds {t:?}")))?,
            ),
            None => Duration::from_secs(1800),
        };
        let request = WatchRequest {
            kind,
            filter,
            resource_version,
            timeout,
            bookmarks: params
                .get("allowWatchBookmarks")
                .is_some_and(|b| b == "true"),
            send_initial_events: params.get("sendInitialEvents").is_some_and(|b| b == "true"),
            as_table,
            events_v1,
        };
        let (tx, body) = channel(self.server.knobs().watch_buffer);
        tokio::spawn(watch::serve(
            self.env.clone(),
            self.server.clone(),
            request,
            tx,
        ));
        Ok(Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .header("transfer-encoding", "chunked")
            .body(body)
            .expect("static response parts are valid"))
    }
}

/// A patch of a stored object: of an Event seen in events.k8s.io/v1 (`events_v1`), applied
/// to it in that version and checked by that version's update rules; otherwise as it is.
fn patched(
    events_v1: bool,
    kind: &ResourceKind,
    object: &mut Value,
    patch: impl FnOnce(&mut Value) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    if !events_v1 {
        return patch(object);
    }
    let mut shown = events_v1::to_v1(object, false);
    patch(&mut shown)?;
    let stored = events_v1::to_stored(&shown)?;
    let meta = |field: &str| {
        object["metadata"][field]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    events_v1::check_update(kind, &meta("name"), &meta("namespace"), &stored, object)?;
    *object = stored;
    Ok(())
}

/// A converted answer for a request in events.k8s.io/v1 (a watch converts its own lines).
async fn events_v1_answer(response: Response<Body>) -> Response<Body> {
    if response.headers().contains_key("transfer-encoding") {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    parts.headers.remove("content-length");
    let Ok(collected) = body.collect().await else {
        return Response::from_parts(parts, full(Bytes::new()));
    };
    let bytes = collected.to_bytes();
    let converted = serde_json::from_slice::<Value>(&bytes).ok().map(|value| {
        Bytes::from(serde_json::to_vec(&events_v1::answer(value)).unwrap_or_default())
    });
    Response::from_parts(parts, full(converted.unwrap_or(bytes)))
}

fn filter(
    target: &Target,
    params: &BTreeMap<String, String>,
    events_v1: bool,
) -> Result<Filter, ApiError> {
    Ok(Filter {
        namespace: target.namespace.clone(),
        labels: LabelSelector::parse(
            params
                .get("labelSelector")
                .map(String::as_str)
                .unwrap_or(""),
        )
        .map_err(|e| ApiError::bad_request(&e))?,
        fields: FieldSelector::parse_labelled(
            if target.kind.custom {
                ""
            } else {
                &target.kind.kind
            },
            params
                .get("fieldSelector")
                .map(String::as_str)
                .unwrap_or(""),
            |label| {
                if events_v1 {
                    events_v1::field_label(label)
                } else {
                    Ok(label.to_string())
                }
            },
        )
        .map_err(|e| ApiError::bad_request(&e))?,
    })
}

fn check_body_namespace(target: &Target, body: &Value) -> Result<(), ApiError> {
    match (
        body.at("/metadata/namespace").and_then(Value::as_str),
        &target.namespace,
    ) {
        (Some(body_ns), Some(path_ns)) if body_ns != path_ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => Ok(()),
    }
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(req.into_body(), BODY_LIMIT_BYTES);
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(ApiError::too_large(BODY_LIMIT_BYTES))
        }
        Err(e) => Err(ApiError::bad_request(&format!(
            "reading the request body failed: {e}"
        ))),
    }
}

async fn read_json(
    req: Request<Incoming>,
    content_type: &str,
    kind: &ResourceKind,
) -> Result<Value, ApiError> {
    if content_type.starts_with(protobuf::MEDIA_TYPE) {
        let bytes = read_body(req).await?;
        return protobuf::read(&bytes, content_type, &kind.kind, kind.custom);
    }
    let kind = &kind.kind;
    if !content_type.is_empty()
        && !content_type.starts_with("application/json")
        && !content_type.contains("json")
    {
        return Err(ApiError::unsupported_media_type(content_type));
    }
    let bytes = read_body(req).await?;
    serde_json::from_slice(&bytes).map_err(|e| {
        // Worded as kube-apiserver words it; the parser's own detail (serde_json here, Go's
        // encoding/json there) necessarily differs.
        let excerpt: String = String::from_utf8_lossy(&bytes).chars().take(64).collect();
        ApiError::bad_request(&format!(
            "the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: {e} ({excerpt})"
        ))
    })
}

async fn read_yaml(req: Request<Incoming>) -> Result<Value, ApiError> {
    let bytes = read_body(req).await?;
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(value) => value,
        Err(_) => serde_saphyr::from_slice(&bytes).map_err(|e| {
            ApiError::bad_request(&format!("the apply body is not valid YAML: {e}"))
        })?,
    };
    // kube-apiserver decodes the body into an object: a scalar or a list is refused (found by
    // fuzzing: a YAML string reached the apply code, which indexes it as an object).
    if !value.is_object() {
        let what = match &value {
            Value::Array(_) => "array",
            Value::String(_) => "string",
            Value::Number(_) => "number",
            Value::Bool(_) => "bool",
            _ => "null",
        };
        return Err(ApiError::bad_request(&format!(
            "error decoding YAML: cannot unmarshal {what} into Go value of type map[string]interface {{}}"
        )));
    }
    Ok(value)
}

/// A list response, fields in the real server's order, around its items' texts: byte for
/// byte what `serde_json` writes for `{"apiVersion", "kind", "metadata", "items"}`.
fn list_body(api_version: &str, kind: &str, metadata: &Value, items: &[Bytes]) -> Vec<u8> {
    let size = items.iter().map(|i| i.len() + 1).sum::<usize>() + 256;
    let mut body = Vec::with_capacity(size);
    body.extend_from_slice(b"{\"apiVersion\":");
    write_json(&mut body, api_version);
    body.extend_from_slice(b",\"kind\":");
    write_json(&mut body, kind);
    body.extend_from_slice(b",\"metadata\":");
    write_json(&mut body, metadata);
    body.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.extend_from_slice(b"]}");
    body
}

fn write_json(into: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    serde_json::to_writer(into, value).expect("JSON values serialise");
}

#[cfg(test)]
mod tests {
    use super::answers_json;

    #[test]
    fn a_list_body_is_what_serde_json_writes_for_the_list() {
        use super::super::encoded::TypedItem;
        use serde_json::json;
        let items = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "\u{e9}\"\n"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
        ];
        let metadata = json!({"resourceVersion": "12", "continue": ""});
        for typed in [false, true] {
            let texts: Vec<bytes::Bytes> = items
                .iter()
                .map(|i| {
                    let text = if typed {
                        serde_json::to_vec(&TypedItem(i))
                    } else {
                        serde_json::to_vec(i)
                    };
                    bytes::Bytes::from(text.unwrap())
                })
                .collect();
            let listed: Vec<serde_json::Value> = texts
                .iter()
                .map(|t| serde_json::from_slice(t).unwrap())
                .collect();
            let expected = serde_json::to_vec(&json!({
                "apiVersion": "v1", "kind": "ConfigMapList", "metadata": metadata, "items": listed,
            }))
            .unwrap();
            let body = super::list_body("v1", "ConfigMapList", &metadata, &texts);
            assert_eq!(
                String::from_utf8(body).unwrap(),
                String::from_utf8(expected).unwrap()
            );
        }
        let empty = super::list_body("v1", "ConfigMapList", &metadata, &[]);
        assert_eq!(
            &empty[..],
            &br#"{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"12","continue":""},"items":[]}"#[..]
        );
    }

    #[test]
    fn only_clients_that_take_json_are_answered() {
        assert!(answers_json(""));
        assert!(answers_json(
            "application/vnd.kubernetes.protobuf,application/json"
        ));
        assert!(answers_json(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(answers_json("*/*"));
        assert!(!answers_json("application/vnd.kubernetes.protobuf"));
        assert!(!answers_json("application/yaml"));
    }
}
