//! The request routing service (internal router): one front door for everything the
//! platform sends into the runtime, reached from the tunnel client or directly (ingress).
//!
//! - `/app-proxy…` → the app-proxy (path kept);
//! - `/workflows/…` → the Argo Workflows server, prefix stripped;
//! - `/webhooks/<ns>/<name>` → that Argo Events event source;
//! - `/healthz`, `/readyz` → 200; anything else → 404.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;

use crate::env::http::{full, json, Body, Client};
use crate::env::SharedEnv;

/// Where each route goes (`host:port` upstreams).
#[derive(Clone, Debug, Default)]
pub struct Routes {
    /// The app-proxy.
    pub app_proxy: String,
    /// The Argo Workflows server.
    pub workflows: String,
    /// Event sources by `namespace/name`.
    pub event_sources: BTreeMap<String, String>,
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
        if let Some(rest) = path.strip_prefix("/webhooks/") {
            let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
            return match parts.as_slice() {
                [ns, name] => match self.event_sources.get(&format!("{ns}/{name}")) {
                    Some(upstream) => Route::Upstream {
                        upstream: upstream.clone(),
                        path: format!("/{ns}/{name}{query}"),
                    },
                    None => Route::NotFound(format!("no event source {ns}/{name}")),
                },
                _ => Route::NotFound("webhook paths are /webhooks/<namespace>/<name>".into()),
            };
        }
        Route::NotFound(format!("no route for {path}"))
    }
}

/// The router: routes plus an HTTP client dialling through the environment.
pub struct Router {
    routes: Routes,
    client: Client<Body>,
}

impl Router {
    /// A router over `routes`; upstream reads idle longer than 30 s fail.
    pub fn new(env: SharedEnv, routes: Routes) -> Arc<Self> {
        Arc::new(Router {
            routes,
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
        match self.routes.route(&path) {
            Route::Health => Response::new(full("ok")),
            Route::NotFound(reason) => json(StatusCode::NOT_FOUND, &json!({"error": reason})),
            Route::Upstream { upstream, path } => {
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
                let forwarded =
                    Request::from_parts(parts, body.map_err(std::io::Error::other).boxed());
                match self.client.request(forwarded).await {
                    Ok(response) => response.map(|b| b.map_err(std::io::Error::other).boxed()),
                    Err(error) => json(
                        StatusCode::BAD_GATEWAY,
                        &json!({"error": format!("upstream {upstream} failed: {error}")}),
                    ),
                }
            }
        }
    }
}

/// Ingress mode: serves the router directly on `addr`.
pub async fn run(env: SharedEnv, routes: Routes, addr: &str) -> std::io::Result<()> {
    let router = Router::new(env.clone(), routes);
    let listener = env.listen(addr).await?;
    crate::env::http::serve(listener, move |request, _peer| {
        let router = router.clone();
        async move { router.handle(request).await }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Routes {
        Routes {
            app_proxy: "app-proxy:3017".into(),
            workflows: "workflows:2746".into(),
            event_sources: [(
                "argo-events/github".to_string(),
                "github-es:12000".to_string(),
            )]
            .into_iter()
            .collect(),
        }
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
        assert_eq!(
            r.route("/webhooks/argo-events/github"),
            Route::Upstream {
                upstream: "github-es:12000".into(),
                path: "/argo-events/github".into()
            }
        );
        assert!(matches!(
            r.route("/webhooks/argo-events/missing"),
            Route::NotFound(_)
        ));
        assert!(matches!(r.route("/webhooks/only-one"), Route::NotFound(_)));
        assert!(matches!(r.route("/app-proxyX"), Route::NotFound(_)));
        assert!(matches!(r.route("/"), Route::NotFound(_)));
    }
}
