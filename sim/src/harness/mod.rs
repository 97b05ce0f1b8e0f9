//! The harness: builds a world from a scenario, runs the fault and calm phases, keeps the
//! trace, and hands verdicts to the reporter.
//!
//! - [`runner`]: one seed, one variant → a [`runner::RunOutcome`].
//! - [`trace`]: re-exports [`crate::trace`], the ordered observation log and its hash.
//! - [`metrics`]: figures derived from the trace (latencies, relists, histograms).

pub mod metrics;
pub mod runner;
pub use crate::trace;
