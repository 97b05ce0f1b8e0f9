//! What the journal holds: the audit log's entries and the registry's runtime records.
//!
//! Defined here, below the store, because both the store (which journals them) and the
//! components that write them (`platform::audit`, `platform::registry`, which re-export
//! them) need them, and the store must not depend on its writers.

use serde::{Deserialize, Serialize};

// --- The audit log (`platform::audit`). ---

/// Whether the request went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Handled (forwarded, registered); `status` is the answer the client got.
    Allowed,
    /// Refused before it reached anything: a missing or unknown token, another account's
    /// runtime, a malformed path, a runtime's own refusal (401/403) passed back.
    Denied,
}

/// Who made a request, as far as the gateway could tell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Actor {
    /// No credentials, or credentials the platform does not know.
    Anonymous,
    /// The platform's admin token.
    Admin,
    /// An account's user.
    User {
        /// The user's name.
        name: String,
    },
    /// The platform itself: a periodic job of the cron executor.
    Platform,
}

/// One audited request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the log, from 1.
    pub seq: u64,
    /// When, RFC 3339 UTC (simulated time in the simulator).
    pub at: String,
    /// Who.
    pub actor: Actor,
    /// The account the request acted in (the user's; for a registration, the registered
    /// runtime's); empty when none is known.
    pub account: String,
    /// Method and normalised path (the raw path when it could not be normalised).
    pub action: String,
    /// The runtime the request was for, when it named one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub runtime: String,
    /// Allowed or denied.
    pub outcome: Outcome,
    /// The HTTP status the client got.
    pub status: u16,
    /// Why, for a denial (the error the client got); what else happened, for an allowed
    /// request that did more than it says (a registration that rotated a token).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

// --- The runtime registry (`platform::registry`). ---

/// Where a runtime's components run: the customer's cluster, or the platform's shared
/// infrastructure (research §2: hybrid and hosted runtimes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// In the customer's cluster.
    #[default]
    Hybrid,
    /// On the platform's infrastructure, one virtual cluster per tenant.
    Hosted,
}

/// How the platform reaches a runtime (research §2: `global.runtime.ingress.enabled`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessMode {
    /// Through the tunnel the runtime opens (the default).
    #[default]
    Tunnel,
    /// Through the runtime's own ingress URL.
    Ingress,
}

/// What the platform knows of a runtime besides its identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Info {
    /// Hybrid or hosted.
    pub kind: Kind,
    /// Tunnel or ingress.
    pub access_mode: AccessMode,
    /// The runtime's version (its chart's `appVersion`), as it registered.
    pub version: String,
    /// The cluster it runs in (`in-cluster` unless told).
    pub cluster: String,
    /// Its ingress host (`host:port`), for [`AccessMode::Ingress`].
    pub ingress_host: String,
}

// --- The Runner's builds and task queue (`platform::runner`). ---

/// Which of the Runner's objects a stored row is: each kind is kept whole, by key, as JSON
/// (the queue's own serde form), so a restarted control plane rebuilds the queue from them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunnerKind {
    /// A build, by id.
    Build,
    /// An agent task, by id.
    Task,
    /// A pipeline's admission settings, by name.
    Pipeline,
    /// hardened: a claimed webhook delivery id or cron tick key, by key.
    Claim,
    /// A cron trigger's ledger entry, by name.
    Cron,
    /// The ticks reported missed (one row, key `""`).
    Missed,
    /// The cronus lease (one row, key `""`).
    Lease,
    /// The ids made so far (one row, key `""`): ids are never given out twice.
    Counters,
    /// When an agent last sent a heartbeat, by agent id.
    Heartbeat,
}

impl RunnerKind {
    /// Every kind, in the order a queue is rebuilt from them.
    pub const ALL: [RunnerKind; 9] = [
        RunnerKind::Counters,
        RunnerKind::Pipeline,
        RunnerKind::Build,
        RunnerKind::Task,
        RunnerKind::Claim,
        RunnerKind::Cron,
        RunnerKind::Missed,
        RunnerKind::Lease,
        RunnerKind::Heartbeat,
    ];

    /// The name in the `runner_objects` table's `kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            RunnerKind::Build => "build",
            RunnerKind::Task => "task",
            RunnerKind::Pipeline => "pipeline",
            RunnerKind::Claim => "claim",
            RunnerKind::Cron => "cron",
            RunnerKind::Missed => "missed",
            RunnerKind::Lease => "lease",
            RunnerKind::Counters => "counters",
            RunnerKind::Heartbeat => "heartbeat",
        }
    }

    /// The kind named `name` in the table (`None`: a kind this build does not know).
    pub fn parse(name: &str) -> Option<RunnerKind> {
        RunnerKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// One stored Runner object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunnerObject {
    /// What it is.
    pub kind: RunnerKind,
    /// Its key within its kind.
    pub key: String,
    /// Its state, whole.
    pub value: serde_json::Value,
}

/// One build's stored log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunnerLog {
    /// The build.
    pub build: String,
    /// Its lines, in order.
    pub lines: Vec<String>,
}
