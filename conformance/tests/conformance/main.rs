//! Conformance tests. The suites that need a real cluster are `#[ignore]`d so plain
//! `cargo test` reports them as ignored (never as passed); `make conformance-apiserver`
//! and `make conformance` run them with `--include-ignored` and a `KUBECONFIG`.

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
mod runtime;
mod sources;
mod support;
mod workflows;
