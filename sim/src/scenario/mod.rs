//! Scenarios: the YAML files in `scenarios/`, their model and their parser.

pub mod duration;
