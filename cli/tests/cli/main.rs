//! The command line's integration tests, one binary: the `orrery` binary run as a user runs
//! it (every scenario's declared verdicts, sweeps, shrink, the farm, real mode, the
//! PostgreSQL store, `orrery serve git` against real Git), and the docs' command lines and
//! links checked against the current CLI.

mod cli;
mod docs;
mod farm;
mod git;
mod graphql_client;
mod house;
mod postgres;
mod real_mode;
mod runner;
mod scenarios;
mod secrets;
mod shrink;
// Shared with the simulator's tests (one file, two binaries); this one uses part of it.
#[allow(dead_code)]
#[path = "../../../sim/tests/sim/support.rs"]
mod support;
mod swarm;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
