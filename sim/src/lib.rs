//! orrery's simulator: the world, the faults, the checkers, the harness and the reports,
//! each in its own room.
//!
//! # Layout
//! Data flows one way: scenario → world/faults → trace → checkers → harness → report.
//! - [`scenario`]: the YAML scenario model, its knob types and its strict parser.
//! - [`env`]: `SimEnv`, the turmoil implementation of `orrery_system::env::Env`.
//! - [`world`]: simulated dependencies (API server, Argo CD, Git) and test components.
//! - [`faults`]: the `Fault` enum (partition, crash, latency, knob changes, scale…) and its
//!   one `apply`.
//! - [`trace`]: the typed, ordered log of a run (component observations and harness events)
//!   and its hash.
//! - [`checkers`]: invariants, fed by the trace and the final state.
//! - [`reach`]: reach conditions ("sometimes" assertions) over the trace, and fault-point
//!   counts, for sweeps to prove what they explored.
//! - [`harness`]: runs a scenario seed by seed; the trace and its hash.
//! - [`report`]: gated JSON/Markdown reports, the perf file, the one-line summary.
//! - [`farm`]: the seed farm's database, policy, mutation and report (`orrery farm`).
//! - [`shrink`]: `orrery shrink`, delta-debugging a failing run to a minimal scenario.
//! - [`exit`]: exit codes per result class (0 expected … 6 reach condition never reached).
//! - [`bench`]: `orrery bench`, the reporter's hot path in real mode (ungated perf).
//! - [`bench_sim`]: `orrery bench-sim`, what one simulated HTTP request and one idle step
//!   cost (ungated perf).
//! - [`real_git`]: real mode, local Git repositories behind the Git provider's HTTP API
//!   (`orrery serve git`).

pub mod bench;
pub mod bench_apiserver;
pub mod bench_sim;
pub mod checkers;
pub mod env;
pub mod exit;
pub mod farm;
pub mod faults;
pub mod harness;
pub mod profile_split;
pub mod reach;
pub mod real_git;
pub mod record;
pub mod report;
pub mod scenario;
pub mod shrink;
pub mod trace;
pub mod world;
