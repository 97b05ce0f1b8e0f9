//! Fuzz targets for every network entry point orrery serves and every file users hand
//! in, run by AFL++ (`make fuzz`) and replayed from their corpora by `make test`.
//!
//! The servers are the production ones, booted unchanged through their `run`/`serve`
//! functions on an in-memory network ([`memory`], [`world`]); an input is a request a
//! client could send ([`request`]). See docs/fuzzing.md.

pub mod memory;
pub mod report;
pub mod request;
pub mod targets;
pub mod world;

/// One fuzz target: a name (its corpus folder and `make fuzz`'s argument) and its function.
pub struct Target {
    /// Name, as in `fuzz/corpus/<name>/`.
    pub name: &'static str,
    /// What it reaches, one line.
    pub about: &'static str,
    /// Runs one input; panics on a finding.
    pub run: fn(&[u8]),
}

/// Every target, in the order `make fuzz` runs them.
pub const TARGETS: &[Target] = &[
    Target { name: "apiserver", about: "simulated Kubernetes API server: bodies (JSON, YAML, protobuf), queries, patches, apply, watches", run: targets::apiserver },
    Target { name: "gateway", about: "platform gateway: REST, webhooks, path normalisation, forwarding", run: targets::gateway },
    Target { name: "graphql", about: "GitOps API: GraphQL documents, variables, operation names", run: targets::graphql },
    Target { name: "events", about: "events API: gzip and JSON events", run: targets::events },
    Target { name: "runner", about: "Runner builds and agent task API", run: targets::runner },
    Target { name: "tunnel", about: "tunnel server: WebSocket upgrade, frames, the HTTP/2 multiplexer", run: targets::tunnel },
    Target { name: "app_proxy", about: "runtime app-proxy REST API", run: targets::app_proxy },
    Target { name: "router", about: "runtime router: routes and webhook paths", run: targets::router },
    Target { name: "resp", about: "runtime cache: RESP commands", run: targets::resp },
    Target { name: "scenario", about: "scenario files", run: targets::scenario },
    Target { name: "policy", about: "--policy files", run: targets::policy },
    Target { name: "promotions", about: "--promotions files", run: targets::promotions },
    Target { name: "trace", about: "recorded workload traces", run: targets::trace },
    Target { name: "values", about: "Helm values edited by promotions (edit, then read back)", run: targets::values },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
