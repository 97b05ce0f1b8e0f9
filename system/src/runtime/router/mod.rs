//! The request routing service (internal router): one front door for everything the
//! platform sends into the runtime, reached from the tunnel client or directly (ingress).
//!
//! - `/app-proxy…` → the app-proxy (path kept);
//! - `/workflows/…` → the Argo Workflows server, prefix stripped;
//! - `/webhooks/<ns>/<name>` → that Argo Events event source's Service,
//!   `<name>-eventsource-svc.<ns>.svc.cluster.local`, resolved per request (no fixed map);
//! - `/healthz`, `/readyz` → 200; anything else → 404.
//!
//! As the chart's nginx (`internal-router/_configmap.yaml` at gitops-runtime-helm
//! 33e7bb8a^: `location ~ /webhooks/([^/]+)/([^/]+)` → `proxy_pass
//! http://$2-eventsource-svc.$1.svc.cluster.local`, with a `resolver`): the webhook rule
//! is an unanchored regular expression, so it wins over the prefix routes wherever
//! `/webhooks/<a>/<b>` appears in a path, and the request URI is passed unchanged. A
//! name that does not resolve is a 502, as nginx answers. (nginx matches the normalised
//! path, with `%XX` decoded and `..` resolved; this router matches the path as sent.)

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;

use crate::core::names::dns_label;
use crate::env::http::{full, json, Body, Client};
use crate::env::SharedEnv;

/// Where each route goes (`host:port` upstreams).
#[derive(Clone, Debug)]
pub struct Routes {
    /// The app-proxy.
    pub app_proxy: String,
    /// The Argo Workflows server.
    pub workflows: String,
    /// The DNS suffix after `<name>-eventsource-svc.<ns>.` (the chart's
    /// `svc.cluster.local`).
    pub event_source_domain: String,
    /// The event source Services' port (80: nginx's default for `http://`).
    pub event_source_port: u16,
}

impl Default for Routes {
    /// No app-proxy or workflows server; event sources where the chart puts them.
    fn default() -> Routes {
        Routes::new("", "")
    }
}

impl Routes {
    /// Routes to `app_proxy` and `workflows`, event sources at
    /// `<name>-eventsource-svc.<ns>.svc.cluster.local:80`.
    pub fn new(app_proxy: impl Into<String>, workflows: impl Into<String>) -> Routes {
        Routes {
            app_proxy: app_proxy.into(),
            workflows: workflows.into(),
            event_source_domain: "svc.cluster.local".into(),
            event_source_port: 80,
        }
    }
}

/// The (namespace, name) of the first `/webhooks/<ns>/<name>` in `path`, as the chart's
/// unanchored `/webhooks/([^/]+)/([^/]+)` finds it.
fn webhook(path: &str) -> Option<(&str, &str)> {
    path.match_indices("/webhooks/").find_map(|(at, found)| {
        let rest = &path[at + found.len()..];
        let (ns, rest) = rest.split_once('/')?;
        let name = rest.split('/').next()?;
        (!ns.is_empty() && !name.is_empty()).then_some((ns, name))
    })
}

/// The routing decision for a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Answer 200 here.
    Health,
    /// Forward to `upstream` with `path`.
    Upstream {
        /// `host:port`.
        upstream: String,
        /// Path and query to send.
        path: String,
    },
    /// 404 with the reason.
    NotFound(String),
}

impl Routes {
    /// Decides where `path_and_query` goes.
    pub fn route(&self, path_and_query: &str) -> Route {
        let path = path_and_query.split('?').next().unwrap_or("");
        let query = path_and_query.strip_prefix(path).unwrap_or("");
        // The regular-expression location wins over every prefix location.
        if let Some((ns, name)) = webhook(path) {
            // The upstream's host is made of the path's text: anything but a Kubernetes name
            // there (`x@other-svc.other-ns`: userinfo, then another Service's host) would send
            // the request to a Service the caller chose. Found by fuzzing; nginx refuses such
            // a host too (inferred: its proxy_pass URL parser has no userinfo).
            if !dns_label(ns) || !dns_label(name) {
                return Route::NotFound(format!(
                    "no route for {path}: a webhook's namespace and event source are Kubernetes names"
                ));
            }
            return Route::Upstream {
                upstream: format!(
                    "{name}-eventsource-svc.{ns}.{}:{}",
                    self.event_source_domain, self.event_source_port
                ),
                path: path_and_query.to_string(),
            };
        }
        if path == "/healthz" || path == "/readyz" {
            return Route::Health;
        }
        if path == "/app-proxy" || path.starts_with("/app-proxy/") {
            return Route::Upstream {
                upstream: self.app_proxy.clone(),
                path: path_and_query.to_string(),
            };
        }
        if let Some(rest) = path.strip_prefix("/workflows/") {
            return Route::Upstream {
                upstream: self.workflows.clone(),
                path: format!("/{rest}{query}"),
            };
        }
        Route::NotFound(format!("no route for {path}"))
    }
}

/// The router: routes plus an HTTP client dialling through the environment.
pub struct Router {
    routes: Routes,
    /// Every request goes here, path kept, whatever the routes say (see [`Router::to_one`]).
    everything: Option<String>,
    client: Client<Body>,
}

impl Router {
    /// A router over `routes`; upstream reads idle longer than 30 s fail.
    pub fn new(env: SharedEnv, routes: Routes) -> Arc<Self> {
        Arc::new(Router {
            routes,
            everything: None,
            client: crate::env::http::client(env, Duration::from_secs(30)),
        })
    }

    /// Forwards every request, path unchanged, to one `upstream`: frpc's
    /// `local_ip:local_port` with `locations = /`, what the chart's tunnel client does when
    /// the internal router runs in a pod of its own (`local_ip = internal-router`).
    pub fn to_one(env: SharedEnv, upstream: impl Into<String>) -> Arc<Self> {
        Arc::new(Router {
            routes: Routes::default(),
            everything: Some(upstream.into()),
            client: crate::env::http::client(env, Duration::from_secs(30)),
        })
    }

    /// Routes one request.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        if let Some(upstream) = &self.everything {
            return self.forward(upstream, &path, request).await;
        }
        match self.routes.route(&path) {
            Route::Health => Response::new(full("ok")),
            Route::NotFound(reason) => json(StatusCode::NOT_FOUND, &json!({"error": reason})),
            Route::Upstream { upstream, path } => self.forward(&upstream, &path, request).await,
        }
    }

    /// Sends `request` to `upstream` as `path`; a failure to reach it is a 502.
    async fn forward(
        &self,
        upstream: &str,
        path: &str,
        request: Request<Incoming>,
    ) -> Response<Body> {
        let (mut parts, body) = request.into_parts();
        let Ok(uri) = format!("http://{upstream}{path}").parse::<Uri>() else {
            return json(
                StatusCode::BAD_GATEWAY,
                &json!({"error": format!("bad upstream {upstream}")}),
            );
        };
        parts.uri = uri;
        // Requests arrive over HTTP/2 (the tunnel); upstreams speak HTTP/1.1.
        parts.version = http::Version::HTTP_11;
        parts.headers.remove("host");
        let forwarded = Request::from_parts(parts, body.map_err(std::io::Error::other).boxed());
        match self.client.request(forwarded).await {
            Ok(response) => response.map(|b| b.map_err(std::io::Error::other).boxed()),
            Err(error) => json(
                StatusCode::BAD_GATEWAY,
                &json!({"error": format!("upstream {upstream} failed: {error}")}),
            ),
        }
    }
}

/// Ingress mode: serves the router directly on `addr`.
pub async fn run(env: SharedEnv, routes: Routes, addr: &str) -> std::io::Result<()> {
    let router = Router::new(env.clone(), routes);
    let listener = env.listen(addr).await?;
    let limits = env.limits().clone();
    crate::env::http::serve_limited(listener, &limits, move |request, _peer| {
        let router = router.clone();
        async move { router.handle(request).await }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Routes {
        Routes::new("app-proxy:3017", "workflows:2746")
    }

    #[test]
    fn paths_route_as_the_real_router_does() {
        let r = routes();
        assert_eq!(r.route("/healthz"), Route::Health);
        assert_eq!(r.route("/readyz"), Route::Health);
        assert_eq!(
            r.route("/app-proxy/api/graphql?x=1"),
            Route::Upstream {
                upstream: "app-proxy:3017".into(),
                path: "/app-proxy/api/graphql?x=1".into()
            }
        );
        assert_eq!(
            r.route("/workflows/api/v1/workflows/ns?limit=2"),
            Route::Upstream {
                upstream: "workflows:2746".into(),
                path: "/api/v1/workflows/ns?limit=2".into()
            }
        );
        // Any event source, resolved by name; the request URI passed unchanged.
        assert_eq!(
            r.route("/webhooks/argo-events/github?x=1"),
            Route::Upstream {
                upstream: "github-eventsource-svc.argo-events.svc.cluster.local:80".into(),
                path: "/webhooks/argo-events/github?x=1".into()
            }
        );
        assert_eq!(
            r.route("/webhooks/ci/push/extra"),
            Route::Upstream {
                upstream: "push-eventsource-svc.ci.svc.cluster.local:80".into(),
                path: "/webhooks/ci/push/extra".into()
            }
        );
        // The unanchored expression wins over a prefix route, as in nginx.
        assert_eq!(
            r.route("/app-proxy/x/webhooks/ci/push"),
            Route::Upstream {
                upstream: "push-eventsource-svc.ci.svc.cluster.local:80".into(),
                path: "/app-proxy/x/webhooks/ci/push".into()
            }
        );
        assert!(matches!(r.route("/webhooks/only-one"), Route::NotFound(_)));
        assert!(matches!(r.route("/webhooks//name"), Route::NotFound(_)));
        assert!(matches!(r.route("/app-proxyX"), Route::NotFound(_)));
        assert!(matches!(r.route("/"), Route::NotFound(_)));
    }

    #[test]
    fn a_webhook_path_cannot_choose_another_service_as_upstream() {
        // Found by fuzzing: the host was made of the path's text, so `x@argocd-server.argocd`
        // made `argocd-server.argocd.svc.cluster.local` the upstream (userinfo before it).
        let r = routes();
        for path in [
            "/api/v1/session/webhooks/x@argocd-server.argocd/github",
            "/webhooks/ci/push@evil",
            "/webhooks/CI/push",
            "/webhooks/ci/push:8080",
            "/webhooks/-ci/push",
            "/webhooks/ci%2Fx/push",
        ] {
            assert!(matches!(r.route(path), Route::NotFound(_)), "{path}");
        }
        assert!(matches!(
            r.route("/webhooks/ci-2/push-1"),
            Route::Upstream { .. }
        ));
    }
}
