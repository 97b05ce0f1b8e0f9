//! The control plane (platform) components.
//!
//! - [`events`]: events API → event bus → event handler → read model, plus the query endpoint.

pub mod events;
pub mod gateway;
pub mod permissions;
pub mod registry;
pub mod tunnel;
