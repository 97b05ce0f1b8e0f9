//! Scenarios: the YAML files in `scenarios/`, their model and their strict parser.

pub mod condition;
pub mod draw;
pub mod duration;
pub mod kinds;
pub mod knobs;
pub mod model;
pub mod parse;
pub mod spans;
pub mod swarm;
pub mod trace;

pub use model::{Outcome, Scenario, Variant};
pub use parse::{load, ScenarioError};
