//! Runtime components (customer cluster).
//!
//! - [`app_reporter`]: the application event reporter, `faithful` and `hardened`.
//! - [`resource_reporter`]: the resource event reporter (Rollouts, Workflows), `faithful`
//!   (Argo Events' EventSource → EventBus → Sensor) and `hardened`.
//! - [`webhook_source`]: a Git webhook EventSource (push deliveries → event bus).
//! - [`cache`]: the dedup store shared by reporter replicas (Redis in the real runtime).
//! - [`tunnel_client`]: the runtime's end of the tunnel to the platform.
//! - [`router`]: the request routing service (tunnel or ingress → app-proxy, workflows, webhooks).
//! - [`app_proxy`]: the runtime's REST API (repositories, commits, workflows, manifests).
//! - [`acr`]: the change-revision controller (monorepos: which commit really changed an app).
//! - [`gitops_operator`]: executes the platform's PromotionTasks (workflows, promotion
//!   commits and pull requests, app verification), one leader at a time.
//! - [`source_server`]: Git manifests, revision metadata and app versions for the reporters
//!   and the app-proxy, cached.
//! - [`heartbeat`]: tells the platform, through the events path, that the runtime is alive.
//! - [`assembly`]: the whole runtime, one config and one `run` — what `orrery serve runtime`
//!   and the simulated world start.

pub mod acr;
pub mod app_proxy;
pub mod app_reporter;
pub mod assembly;
pub mod cache;
pub mod gitops_operator;
pub mod heartbeat;
pub mod resource_reporter;
pub mod router;
pub mod runner;
pub mod source_server;
pub mod tunnel_client;
pub mod upstream;
pub mod webhook_source;
