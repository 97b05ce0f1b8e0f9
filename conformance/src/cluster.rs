//! The API servers a script runs against: real (from `KUBECONFIG`) or simulated.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;

use orrery_sim::world::apiserver::{self, ApiServer, Knobs};
use orrery_system::env::kube::{client, KubeTarget};
use orrery_system::env::{RealEnv, SharedEnv};

/// Which server answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// kube-apiserver (kind, or built from source).
    Real,
    /// orrery's simulated API server, in-process on loopback.
    Simulated,
}

impl Flavour {
    /// `real` or `simulated`, as printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Real => "real",
            Flavour::Simulated => "simulated",
        }
    }
}

/// Why a cluster could not be reached or prepared.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// `KUBECONFIG` (or in-cluster config) could not be read.
    #[error("no usable kubeconfig (set KUBECONFIG): {0}")]
    Kubeconfig(String),
    /// The kube client could not be built (TLS material, auth).
    #[error(transparent)]
    Client(#[from] orrery_system::env::kube::ClientError),
    /// A request failed at the transport level.
    #[error("{method} {path}: {reason}")]
    Transport {
        /// HTTP method.
        method: String,
        /// Request path.
        path: String,
        /// What failed.
        reason: String,
    },
    /// Setup (namespace, CRDs) was answered with an unexpected status.
    #[error("setup step {step} failed: HTTP {status}: {body}")]
    Setup {
        /// Which setup step.
        step: String,
        /// HTTP status.
        status: u16,
        /// Response body.
        body: String,
    },
    /// The simulated server could not bind loopback.
    #[error("cannot start the simulated API server: {0}")]
    Bind(std::io::Error),
}

/// A raw HTTP answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// HTTP status code.
    pub status: u16,
    /// The body as received.
    pub body: Bytes,
}

impl Answer {
    /// The body parsed as JSON, or `null` when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// A connection to one API server, with the requests scripts need.
pub struct Cluster {
    flavour: Flavour,
    client: kube::Client,
    address: Option<String>,
    /// Keeps the in-process simulated server alive.
    _server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

/// How long any single request (including a watch with its server-side timeout) may take.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(30);

impl Cluster {
    /// The cluster `KUBECONFIG` points to (kube's usual inference: env, `~/.kube/config`, in-cluster).
    pub async fn real() -> Result<Cluster, ClusterError> {
        let config = kube::Config::infer()
            .await
            .map_err(|e| ClusterError::Kubeconfig(e.to_string()))?;
        let target = KubeTarget::real(config, "default");
        let client = orrery_system::env::kube::real_client(&target)?
            .expect("a real target has a kubeconfig");
        Ok(Cluster {
            flavour: Flavour::Real,
            client,
            address: None,
            _server: None,
        })
    }

    /// A fresh simulated API server on a loopback port, driven through the same kube client code.
    pub async fn simulated() -> Result<Cluster, ClusterError> {
        let env: SharedEnv = Arc::new(RealEnv::new("conformance"));
        let listener = env
            .listen("127.0.0.1:0")
            .await
            .map_err(ClusterError::Bind)?;
        let addr = listener.local_addr().map_err(ClusterError::Bind)?;
        let server = tokio::spawn(apiserver::serve(
            env.clone(),
            ApiServer::requiring_namespaces(Knobs::default(), env.elapsed(), env.unix_millis()),
            listener,
        ));
        let client = client(env, &KubeTarget::new(addr.clone()));
        Ok(Cluster {
            flavour: Flavour::Simulated,
            client,
            address: Some(addr),
            _server: Some(server),
        })
    }

    /// Where the simulated server listens (plain HTTP on loopback); `None` for a real one.
    pub fn address(&self) -> Option<&str> {
        self.address.as_deref()
    }

    /// Real or simulated.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// The kube client (for suites that use typed APIs rather than raw scripts).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Sends one request and reads the whole answer (a watch ends at its `timeoutSeconds`).
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ClusterError> {
        self.send_as(None, method, path, content_type, body).await
    }

    /// [`Cluster::send`] on behalf of `user` (`Impersonate-User`), or as the admin for `None`.
    pub async fn send_as(
        &self,
        user: Option<&str>,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ClusterError> {
        let transport = |reason: String| ClusterError::Transport {
            method: method.to_string(),
            path: path.to_string(),
            reason,
        };
        let method_value =
            Method::from_bytes(method.as_bytes()).map_err(|e| transport(e.to_string()))?;
        let mut builder = Request::builder().method(method_value).uri(path);
        if let Some(content_type) = content_type {
            builder = builder.header("content-type", content_type);
        }
        if let Some(user) = user {
            builder = builder.header("impersonate-user", user);
        }
        let request = builder
            .body(kube::client::Body::from(body.unwrap_or_default()))
            .map_err(|e| transport(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .send(request)
                .await
                .map_err(|e| transport(e.to_string()))?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| transport(e.to_string()))?
                .to_bytes();
            Ok::<Answer, ClusterError>(Answer { status, body })
        };
        tokio::time::timeout(REQUEST_DEADLINE, exchange)
            .await
            .map_err(|_| transport(format!("no complete answer within {REQUEST_DEADLINE:?}")))?
    }

    /// `gitVersion` from `/version`.
    pub async fn version(&self) -> Result<String, ClusterError> {
        let answer = self.send("GET", "/version", None, None).await?;
        Ok(answer.json()["gitVersion"]
            .as_str()
            .unwrap_or("unknown")
            .to_string())
    }

    /// Makes `namespace` and the fixture CRDs exist. The simulated server serves the fixture
    /// CRDs from start; it requires namespaces as the real one does.
    pub async fn prepare(&self, namespace: &str) -> Result<(), ClusterError> {
        if self.flavour == Flavour::Real {
            self.install_crds().await?;
        }
        let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {"orrery.dev/conformance": "true"}}});
        let answer = self
            .send(
                "POST",
                "/api/v1/namespaces",
                Some("application/json"),
                Some(body.to_string().into_bytes()),
            )
            .await?;
        match StatusCode::from_u16(answer.status) {
            Ok(StatusCode::CREATED) | Ok(StatusCode::CONFLICT) => Ok(()),
            _ => Err(setup_error(
                format!("create namespace {namespace}"),
                &answer,
            )),
        }
    }

    /// Deletes `namespace` (real clusters only). On a bare kube-apiserver without the
    /// namespace controller the namespace stays `Terminating`; kind removes it.
    pub async fn cleanup(&self, namespace: &str) -> Result<(), ClusterError> {
        if self.flavour == Flavour::Simulated {
            return Ok(());
        }
        let answer = self
            .send(
                "DELETE",
                &format!("/api/v1/namespaces/{namespace}"),
                None,
                None,
            )
            .await?;
        match answer.status {
            200 | 202 | 404 => Ok(()),
            _ => Err(setup_error(
                format!("delete namespace {namespace}"),
                &answer,
            )),
        }
    }

    /// Server-side applies `fixtures/crds/*.yaml` and waits until each is established and served.
    pub async fn install_crds(&self) -> Result<(), ClusterError> {
        for (file, text) in fixture_crds() {
            let crd: Value = serde_saphyr::from_str(&text).map_err(|e| ClusterError::Setup {
                step: format!("parse {file}"),
                status: 0,
                body: e.to_string(),
            })?;
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}?fieldManager=orrery-conformance&force=true");
            let answer = self
                .send(
                    "PATCH",
                    &path,
                    Some("application/apply-patch+yaml"),
                    Some(text.into_bytes()),
                )
                .await?;
            if answer.status != 200 && answer.status != 201 {
                return Err(setup_error(format!("apply {file}"), &answer));
            }
            let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
            let group = crd["spec"]["group"].as_str().unwrap_or_default();
            let version = crd["spec"]["versions"][0]["name"]
                .as_str()
                .unwrap_or_default();
            let probe = format!("/apis/{group}/{version}/{plural}?limit=1");
            let mut last = None;
            for _ in 0..100 {
                let answer = self.send("GET", &probe, None, None).await?;
                if answer.status == 200 {
                    last = None;
                    break;
                }
                last = Some(answer);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if let Some(answer) = last {
                return Err(setup_error(format!("wait until {name} is served"), &answer));
            }
        }
        Ok(())
    }
}

fn setup_error(step: String, answer: &Answer) -> ClusterError {
    ClusterError::Setup {
        step,
        status: answer.status,
        body: String::from_utf8_lossy(&answer.body).into_owned(),
    }
}

/// The fixture CRDs as `(file name, YAML text)`, read from `fixtures/crds/`, sorted by name.
pub fn fixture_crds() -> Vec<(String, String)> {
    let dir = crate::repo_root().join("fixtures/crds");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                .filter_map(|p| {
                    Some((
                        p.file_name()?.to_string_lossy().into_owned(),
                        std::fs::read_to_string(&p).ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}
