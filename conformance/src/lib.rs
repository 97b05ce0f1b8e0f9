//! Conformance suites for orrery against real Kubernetes.
//!
//! The simulator is only worth as much as its fidelity, so this crate keeps it honest:
//!
//! - [`cluster`]: the two API servers a script can run against — a real one from
//!   `KUBECONFIG` (kind, the built-from-source kube-apiserver of `make conformance-apiserver`)
//!   and the simulated one, started in-process on loopback.
//! - [`script`]: API scripts as data (requests, watches, references to earlier answers)
//!   and the runner that records a raw transcript.
//! - [`normalise`]: maps what legitimately differs between two servers (uids, timestamps,
//!   resourceVersion values, continue tokens, namespace names) to stable placeholders.
//! - [`library`]: the fidelity scripts themselves.
//! - [`compare`]: step-by-step comparison under the checked-in known-deviation list.
//! - [`openapi`]: cuts the real server's OpenAPI documents down to the served types.
//! - [`report`]: writes `reports/conformance.md`.
//! - [`resp`]: raw RESP over TCP, to compare the simulated cache with a real redis-server.

pub mod cluster;
pub mod compare;
pub mod fidelity;
pub mod library;
pub mod normalise;
pub mod openapi;
pub mod report;
pub mod resp;
pub mod script;

/// The repository root (this crate lives in `conformance/`).
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("conformance/ has a parent")
        .to_path_buf()
}
