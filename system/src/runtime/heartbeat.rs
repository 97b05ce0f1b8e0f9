//! Heartbeats: the runtime tells the platform it is alive through the events path
//! (`POST /2.0/api/heartbeat` with its runtime token), the way its reporters reach it. The
//! runtime monitor shows a runtime whose heartbeats stop as `Unable to communicate` even
//! while its tunnel still answers, and healthy again once they resume
//! (`crate::platform::monitor`). The route, the interval and the timeout are orrery's
//! (inferred: how the real runtime monitor learns of a runtime is not public beyond probing
//! its URL, `codefresh-research.md` §3.4); both variants send them alike.

use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::BodyExt;

use crate::env::SharedEnv;

/// How often a runtime sends a heartbeat by default.
pub const EVERY: Duration = Duration::from_secs(10);

/// The platform's heartbeat route on the events API.
pub const PATH: &str = "/2.0/api/heartbeat";

/// One runtime's heartbeats.
#[derive(Clone, Debug)]
pub struct Config {
    /// The platform's events API, `host:port`.
    pub platform_api: String,
    /// The runtime's token (the one its reporters send events with).
    pub token: String,
    /// Interval. Default [`EVERY`].
    pub every: Duration,
}

impl Config {
    /// Heartbeats to `platform_api` with `token`, every [`EVERY`].
    pub fn new(platform_api: &str, token: &str) -> Self {
        Config {
            platform_api: platform_api.into(),
            token: token.into(),
            every: EVERY,
        }
    }
}

/// Sends a heartbeat every `config.every` until the process stops. A heartbeat that fails
/// is not retried: the next one is due soon, and the platform judges silence, not one miss.
pub async fn run(env: SharedEnv, config: Config) {
    let http = crate::env::http::client(env.clone(), config.every);
    let url = format!("http://{}{PATH}", config.platform_api);
    loop {
        env.sleep(config.every).await;
        let request = Request::post(&url)
            .header("authorization", config.token.as_str())
            .body(crate::env::http::full(""))
            .expect("a heartbeat request is valid");
        let status = match http.request(request).await {
            Ok(response) => {
                let status = response.status();
                let _ = response.into_body().collect().await;
                status
            }
            Err(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        if !status.is_success() {
            tracing::debug!("heartbeat to {}: {status}", config.platform_api);
        }
    }
}
