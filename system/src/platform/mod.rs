//! The control plane (platform) components.
//!
//! - [`events`]: events API → event bus → event handler → read model, plus the query endpoint;
//!   the bus ([`events::bus`]) keeps through a crash what it flushed, and hardened answers 2xx
//!   only once it has.
//! - [`tunnel`]: the tunnel server runtimes connect to.
//! - [`gateway`]: the client API (registration, forwarding into tunnels, permissions), with
//!   tenant checks and path normalisation before anything is forwarded.
//! - [`graphql`]: the GitOps API (GraphQL at `POST /2.0/api/graphql` on the gateway).
//! - [`audit`]: the append-only log of mutating requests and denials.
//! - [`monitor`]: the runtime monitor (`Healthy` / `Unable to communicate` per runtime).
//! - [`cron`]: the cron executor, the platform's periodic jobs (expired tokens; with
//!   [`anti_entropy`], hardened, each runtime's Applications listed and what the read
//!   model missed sent again).
//! - [`promotions`]: the promotion orchestrator (releases through a Product's flow, each
//!   environment a PromotionTask on its runtime) and its read model.
//! - [`runner`]: the Codefresh Runner's platform side: builds, the agent task queue the
//!   agents poll, the engine's reports and the platform's build limits.
//! - [`registry`], [`permissions`]: runtimes, their tokens, kinds and access modes; accounts'
//!   users, teams and rules (RBAC plus ABAC, deny by default).
//! - [`store`]: what a process must not lose, committed to PostgreSQL in real mode.
//! - [`vcluster`]: hosted runtimes' virtual clusters, each tenant's kept on the shared host
//!   cluster by a syncer (faithful: vcluster's naming, whose `-x-` collisions delete another
//!   object's copy; hardened: injective names, another's copy never touched).
//! - [`assembly`]: the whole control plane, one config and one `run` — what
//!   `orrery serve control-plane` and the simulated world start.

pub mod anti_entropy;
pub mod assembly;
pub mod audit;
pub mod cron;
pub mod events;
pub mod gateway;
pub mod graphql;
pub mod monitor;
pub mod permissions;
pub mod promotions;
pub mod registry;
pub mod runner;
pub mod sources;
pub mod store;
pub mod tunnel;
pub mod vcluster;
