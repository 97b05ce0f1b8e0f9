//! Knob types of the simulated world: scenario settings that the fault schedule may change
//! while a run goes on. They live with the scenario model and the world reads them, not
//! the other way round.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The simulated API server's fault and behaviour knobs (scenario key `apiserver:`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiServerKnobs {
    /// History older than this is compacted; watches from an older RV get an in-stream 410.
    /// Default 300 s (kube-apiserver compacts etcd every 5 minutes).
    #[serde(with = "super::duration")]
    pub compaction_window: Duration,
    /// A bookmark goes to each bookmark-enabled watch this often. Default 60 s, as upstream.
    #[serde(with = "super::duration")]
    pub bookmark_interval: Duration,
    /// Lines buffered per watch before the watcher counts as slow. Default 256.
    pub watch_buffer: usize,
    /// Close a watch with no ERROR when its buffer is full (kube-apiserver drops slow watchers).
    pub drop_slow_watchers: bool,
    /// Probability per watch line that the stream is cut in the middle of that line.
    pub cut_stream_rate: f64,
    /// Probability per request of `429 TooManyRequests` with `Retry-After`.
    pub throttle_rate: f64,
    /// Seconds sent in `Retry-After` with a 429.
    pub retry_after_seconds: u64,
    /// Added before every response.
    #[serde(with = "super::duration")]
    pub latency: Duration,
    /// Resources (plural names, e.g. `applications`) the caller may no longer touch: every
    /// request for them is `403 Forbidden`, as after its RBAC binding is removed. Empty by
    /// default. See `world::apiserver::http` for who "the caller" is.
    pub forbidden: Vec<String>,
}

impl Default for ApiServerKnobs {
    fn default() -> Self {
        ApiServerKnobs {
            compaction_window: Duration::from_secs(300),
            bookmark_interval: Duration::from_secs(60),
            watch_buffer: 256,
            drop_slow_watchers: false,
            cut_stream_rate: 0.0,
            throttle_rate: 0.0,
            retry_after_seconds: 1,
            latency: Duration::ZERO,
            forbidden: Vec::new(),
        }
    }
}
