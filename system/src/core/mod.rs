//! Types shared by the runtime and the platform, with no IO: wire formats and variants.

pub mod event;
pub mod time;
pub mod variant;

pub use variant::Variant;
