//! The resource types this server serves: see [`crate::scenario::kinds`], where they live
//! as world configuration that scenarios name.

pub use crate::scenario::kinds::*;
