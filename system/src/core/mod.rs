//! Types shared by the runtime and the platform, with no IO: wire formats, variants, and
//! YAML read with positions.

pub mod buggify;
pub mod event;
pub mod json;
pub mod label_selector;
pub mod names;
pub mod runner;
pub mod secret;
pub mod time;
pub mod variant;
pub mod yaml;
pub mod yaml_edit;

pub use variant::Variant;
