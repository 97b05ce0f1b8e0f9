//! Conformance tests: the suites against real software. This test target is not built by a
//! plain `cargo test` (`test = false`); `make conformance` runs it with `--include-ignored`,
//! a `KUBECONFIG` and the real servers its scripts start. (The check against the recorded
//! transcripts, which needs no server, is the `recorded` target that `make test` runs.)

mod acr;
mod argocd;
mod deploy;
mod fidelity;
mod frp;
mod hosted;
mod kubectl;
mod operator;
mod redis;
mod replay;
mod resources;
mod rollouts;
mod runner;
mod runtime;
mod sources;
mod support;
mod workflows;
