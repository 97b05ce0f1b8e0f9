//! Exploration beyond the gate's seeds: which situations a run reached ([`reach`]), a failing
//! run cut down to a minimal scenario ([`shrink`]), and the seed farm that runs new seeds for
//! a budget, remembers them and files every failure ([`farm`]).

pub mod farm;
pub mod reach;
pub mod shrink;
