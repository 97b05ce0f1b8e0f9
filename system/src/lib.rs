//! orrery's system: the GitOps runtime and its control plane, written once against an
//! injected environment so the same code runs for real (tokio, OS sockets) and inside
//! the deterministic simulator (turmoil, in the `orrery-sim` crate).
//!
//! # Layout
//! - [`env`]: the seam. Network (listen/dial), time, randomness, identity and
//!   observations come from an [`env::Env`]; [`env::RealEnv`] is the tokio implementation,
//!   the simulator provides its own. Also the HTTP and kube-rs glue every component shares.
//!
//! Runtime and platform components arrive with their own issues; each will be one module
//! with one entry point `run(env, config)`.

pub mod env;
