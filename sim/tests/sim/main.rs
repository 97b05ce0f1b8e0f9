//! The simulator's integration tests, one binary: real kube-rs against the simulated API
//! server over turmoil TCP, and whole scenario runs.

mod app_proxy;
mod argo_world;
mod argocd_world;
mod assembly;
mod browser;
mod cache;
mod events_path;
mod hosted;
mod in_process;
mod invariants_fire;
mod k8s_events;
mod namespaces;
mod operator;
mod pages;
mod properties;
mod regressions;
mod replay;
mod reporter_model;
mod resources;
mod restricted;
mod rollouts;
mod support;
mod tunnel;
mod watcher_checklist;
mod webhooks;
mod workflows;

/// Same allocator as the `orrery` binary (simulations are allocation-heavy).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
