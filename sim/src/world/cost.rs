//! What the components ask of the world, counted beside the trace rather than in it: the
//! requests Argo CD's API answers (by route) and the lines and bytes the API server's watches
//! carry. The per-change cost figures of the reports (issue 54) divide these by the
//! application changes; keeping them out of the trace leaves every trace hash as it was.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Counts shared by the simulated services of one run (sums only: the order in which tasks
/// add to them never shows).
#[derive(Debug, Default)]
pub struct Cost {
    argocd: Mutex<BTreeMap<&'static str, u64>>,
    watch_lines: AtomicU64,
    watch_bytes: AtomicU64,
}

impl Cost {
    /// One request Argo CD's API answered on `route` (`manifests`, `resource-tree`, …).
    pub fn argocd_request(&self, route: &'static str) {
        *self
            .argocd
            .lock()
            .expect("cost lock poisoned")
            .entry(route)
            .or_default() += 1;
    }

    /// One watch line of `bytes` sent to a watcher.
    pub fn watch_line(&self, bytes: usize) {
        self.watch_lines.fetch_add(1, Ordering::Relaxed);
        self.watch_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The counts as named counters (`argocd.requests.<route>`, `apiserver.watch_lines`,
    /// `apiserver.watch_bytes`); zero counts are left out.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = self
            .argocd
            .lock()
            .expect("cost lock poisoned")
            .iter()
            .map(|(route, n)| (format!("argocd.requests.{route}"), *n))
            .collect();
        for (name, n) in [
            ("apiserver.watch_lines", &self.watch_lines),
            ("apiserver.watch_bytes", &self.watch_bytes),
        ] {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                out.insert(name.into(), n);
            }
        }
        out
    }
}
