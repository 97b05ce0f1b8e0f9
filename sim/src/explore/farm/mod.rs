//! The seed farm: exploration that runs for hours, remembers what it found and turns every
//! failure into a minimal regression scenario.
//!
//! The rooms, data flowing one way:
//! - [`db`]: the results database, append-only JSON lines (one run, shrink or session per
//!   line) that survives across farm runs and merges across shards.
//! - [`policy`]: what runs next — each scenario file's arms (one per declared variant), new
//!   seeds beyond its `seeds:` list, weighted by rarity, recent failures and cost per seed.
//! - [`mutate`]: coverage-guided children of a run that reached a rare condition.
//! - [`report`]: `reports/farm/` from the database.
//!
//! The processes themselves (children, budget, SIGINT, shrinks) are the command line's
//! (`orrery farm`).

pub mod db;
pub mod mutate;
pub mod policy;
pub mod report;
