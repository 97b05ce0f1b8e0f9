//! One module per command of `orrery`.

pub mod apiserver;
pub mod bench;
pub mod determinism;
pub mod farm;
pub mod record;
pub mod reports;
pub mod run;
pub mod serve;
pub mod shrink;
pub mod sweep;
