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
    /// Lists at `resourceVersion=0` (kube-rs's and client-go's default first list) come from
    /// a watch cache this many resource versions behind the store, as from an API server of
    /// an HA control plane whose cache lags (kubernetes#59848, "stale reads"); a reflector
    /// that relists there sees objects older than it already saw. Default 0: never stale.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stale_list_lag: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
            stale_list_lag: 0,
        }
    }
}

/// A fault step's change to the API server's knobs: only the knobs it names
/// (`{at: 30s, apiserver: {cut_stream_rate: 0.01}}`); an unknown knob is a parse error.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiServerPatch {
    /// See [`ApiServerKnobs::compaction_window`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::duration::option"
    )]
    pub compaction_window: Option<Duration>,
    /// See [`ApiServerKnobs::bookmark_interval`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::duration::option"
    )]
    pub bookmark_interval: Option<Duration>,
    /// See [`ApiServerKnobs::watch_buffer`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_buffer: Option<usize>,
    /// See [`ApiServerKnobs::drop_slow_watchers`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_slow_watchers: Option<bool>,
    /// See [`ApiServerKnobs::cut_stream_rate`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_stream_rate: Option<f64>,
    /// See [`ApiServerKnobs::throttle_rate`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_rate: Option<f64>,
    /// See [`ApiServerKnobs::retry_after_seconds`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// See [`ApiServerKnobs::latency`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::duration::option"
    )]
    pub latency: Option<Duration>,
    /// See [`ApiServerKnobs::forbidden`] (replaces the list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forbidden: Option<Vec<String>>,
    /// See [`ApiServerKnobs::stale_list_lag`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_list_lag: Option<u64>,
}

impl ApiServerPatch {
    /// `base` with the knobs this patch names changed.
    pub fn apply(&self, base: &ApiServerKnobs) -> ApiServerKnobs {
        let mut knobs = base.clone();
        if let Some(v) = self.compaction_window {
            knobs.compaction_window = v;
        }
        if let Some(v) = self.bookmark_interval {
            knobs.bookmark_interval = v;
        }
        if let Some(v) = self.latency {
            knobs.latency = v;
        }
        if let Some(v) = self.watch_buffer {
            knobs.watch_buffer = v;
        }
        if let Some(v) = self.drop_slow_watchers {
            knobs.drop_slow_watchers = v;
        }
        if let Some(v) = self.cut_stream_rate {
            knobs.cut_stream_rate = v;
        }
        if let Some(v) = self.stale_list_lag {
            knobs.stale_list_lag = v;
        }
        if let Some(v) = self.throttle_rate {
            knobs.throttle_rate = v;
        }
        if let Some(v) = self.retry_after_seconds {
            knobs.retry_after_seconds = v;
        }
        if let Some(v) = &self.forbidden {
            knobs.forbidden = v.clone();
        }
        knobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_changes_only_the_knobs_it_names() {
        let patch: ApiServerPatch =
            serde_saphyr::from_str("{throttle_rate: 0.5, latency: 250ms}").unwrap();
        let knobs = patch.apply(&ApiServerKnobs::default());
        assert_eq!(knobs.throttle_rate, 0.5);
        assert_eq!(knobs.latency, Duration::from_millis(250));
        assert_eq!(knobs.compaction_window, Duration::from_secs(300));
        assert!(serde_saphyr::from_str::<ApiServerPatch>("{cut_rate: 0.5}").is_err());
    }
}
