//! The simulated world around the system, each piece a turmoil host:
//!
//! - [`apiserver`]: the Kubernetes API server.
//! - [`argocd`]: Argo CD's application controller and server.
//! - [`git`]: the Git provider.
//! - [`cost`]: what the components ask of the world (requests, watch lines), counted
//!   beside the trace.
//! - [`database`]: the platform's database (registry and audit log), whose crashes keep
//!   what it committed.
//! - [`workload`]: commits, app churn, health flaps and refreshes, drawn from the seed.
//! - [`probe`]: a kube-rs reflector whose view checkers compare with the API server.
//! - [`promotions`]: a Product's apps and releases, and its orchestrator's configuration.
//! - [`restricted`]: tenants' Restricted Git Sources and repositories, and a monitor of
//!   what Argo CD deployed and refused.
//! - [`runner`]: the Codefresh Runner's builds: the platform's queue, the agent, the engine
//!   stand-in and the trigger that makes builds.
//! - [`tunnel`]: the tunnel world's app-proxy stand-in and clients.
//! - [`hosted`]: hosted runtimes' virtual clusters (their API servers and tenants) on the
//!   shared host cluster.
//! - [`tenants`]: a multi-tenant platform's accounts, their reporters, and adversaries.
//! - [`placement`]: which of the product's assemblies (runtime, control plane) each host
//!   runs, and with what configuration.

pub mod addresses;
pub mod apiserver;
pub mod argocd;
pub mod cost;
pub mod database;
pub mod git;
pub mod hosted;
pub mod placement;
pub mod probe;
pub mod promotions;
pub mod restricted;
pub mod rollouts;
pub mod runner;
pub mod tenants;
pub mod tunnel;
pub mod workflows;
pub mod workload;
