//! Runtime components (customer cluster).
//!
//! - [`app_reporter`]: the application event reporter, `faithful` and `hardened`.
//! - [`cache`]: the dedup store shared by reporter replicas (Redis in the real runtime).

pub mod app_proxy;
pub mod app_reporter;
pub mod cache;
pub mod router;
pub mod tunnel_client;
