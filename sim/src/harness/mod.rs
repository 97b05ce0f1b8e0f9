//! The harness: builds a world from a scenario, runs the fault and calm phases, keeps the
//! trace, and hands verdicts to the reporter.

pub mod trace;
