//! orrery's simulator: the world, the faults, the checkers, the harness, exploration and the
//! reports, each in its own room. The `orrery` command line is a crate of its own (`cli/`).
//!
//! # Layout
//! Data flows one way: scenario → world/faults → trace → checkers → harness → explore →
//! report.
//! - [`scenario`]: the YAML scenario model, its knob types, reach conditions' names, a swarm
//!   family's drawing, and its strict parser.
//! - [`env`]: `SimEnv`, the turmoil implementation of `orrery_system::env::Env`.
//! - [`world`]: simulated dependencies (API server, Argo CD, Git) and test components.
//! - [`faults`]: the `Fault` enum (partition, crash, latency, knob changes, scale…) and its
//!   one `apply`.
//! - [`trace`]: the typed, ordered log of a run (component observations and harness events)
//!   and its hash.
//! - [`checkers`]: invariants, fed by the trace and the final state.
//! - [`harness`]: runs a scenario seed by seed; the trace and its hash.
//! - [`explore`]: reach conditions ("sometimes" assertions) over a trace, shrinking a failing
//!   run, and the seed farm's database, policy, mutation and report.
//! - [`report`]: gated JSON/Markdown reports, the perf file, the one-line summary.
//! - [`exit`]: exit codes per result class (0 expected … 6 reach condition never reached).

pub mod checkers;
pub mod env;
pub mod exit;
pub mod explore;
pub mod faults;
pub mod harness;
pub mod report;
pub mod scenario;
pub mod trace;
pub mod world;
