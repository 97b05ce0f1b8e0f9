//! orrery's system: the GitOps runtime and its control plane, written once against an
//! injected environment so the same code runs for real (tokio, OS sockets) and inside
//! the deterministic simulator (turmoil, in the `orrery-sim` crate).
//!
//! # Layout
//! - [`env`]: the seam. Network (listen/dial), time, randomness, identity and
//!   observations come from an [`env::Env`]; [`env::RealEnv`] is the tokio implementation,
//!   the simulator provides its own. Also the HTTP and kube-rs glue every component shares.
//! - [`core`]: wire types and variants, no IO.
//! - [`observe`]: typed observations, one enum per component, shared by emitters and checkers.
//! - [`runtime`]: components that run in the customer's cluster (the application event
//!   reporter, the shared dedup cache).
//! - [`platform`]: control-plane components (the events path).
//!
//! Each component is one module with one entry point `run(env, …)`.

pub mod core;
pub mod env;
pub mod observe;
pub mod platform;
pub mod runtime;
pub mod tunnel;
