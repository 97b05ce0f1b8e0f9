//! Coverage-guided mutation: children of a run that reached a rare condition.
//!
//! A child is the parent's concrete scenario (what its seed ran, `--print-scenario`) with one
//! change: a fault step shifted by up to 30 s, one fault step removed, one more fault drawn
//! from the family's swarm kinds, or the family's knobs drawn again. It runs at the parent's
//! seed, so the rest of the world (latencies, fault points) follows the parent's path as far
//! as the change allows. Antithesis and AFL steer the same way: a run that got somewhere rare
//! is a better place to start from than a fresh seed.

use std::time::Duration;

use orrery_system::env::Rng;

use crate::scenario::{draw, Outcome, Scenario};

/// A mutant and what changed.
pub struct Mutant {
    /// The plain scenario to run at the parent's seed.
    pub scenario: Scenario,
    /// What the mutation did, e.g. `fault step 3 at 41.2s → 63.9s`.
    pub changes: String,
}

/// Child `child` of `family`'s run at `seed`: deterministic in (family, seed, child). Its
/// `expect:` keeps only the variants the family declares to pass; None when there are none
/// (nothing a mutant could be held to).
pub fn mutate(family: &Scenario, seed: u64, child: u32) -> Option<Mutant> {
    let parent = draw::concretize(family, seed);
    let mut rng = Rng::derive(seed, &format!("farm#mutant#{child}"));
    let mut scenario = parent.clone();
    scenario.expect.retain(|_, e| *e == Outcome::Pass);
    if scenario.expect.is_empty() {
        return None;
    }
    scenario.seeds = vec![seed];
    scenario.reach.clear();
    let mut changes = String::new();
    for _ in 0..8 {
        changes = match rng.below(4) {
            0 if !scenario.faults.is_empty() => {
                let i = rng.below(scenario.faults.len() as u64) as usize;
                let before = scenario.faults[i].at;
                let shift = Duration::from_millis(1_000 + rng.below(29_001));
                let after = if rng.chance(0.5) {
                    before.saturating_sub(shift)
                } else {
                    (before + shift).min(scenario.duration)
                };
                scenario.faults[i].at = Duration::from_millis(after.as_millis() as u64 / 10 * 10);
                scenario.faults.sort_by_key(|s| s.at);
                format!("fault step {} at {before:?} → {after:?}", i + 1)
            }
            1 if !scenario.faults.is_empty() => {
                let i = rng.below(scenario.faults.len() as u64) as usize;
                scenario.faults.remove(i);
                format!("without fault step {}", i + 1)
            }
            2 => {
                let steps = draw::draw_fault(family, &scenario, &mut rng);
                if steps.is_empty() {
                    continue;
                }
                let at = steps[0].at;
                scenario.faults.extend(steps);
                scenario.faults.sort_by_key(|s| s.at);
                format!("one more fault at {at:?}")
            }
            3 => {
                if !draw::redraw_knobs(family, &mut scenario, &mut rng) {
                    continue;
                }
                "knobs redrawn".to_string()
            }
            _ => continue,
        };
        if scenario != parent {
            break;
        }
    }
    if changes.is_empty() {
        return None;
    }
    scenario.name = format!("{}-mutant", family.name);
    scenario.description = format!(
        "{} seed {seed}, mutant {child}: {changes} (orrery farm, coverage-guided)",
        family.name
    );
    Some(Mutant { scenario, changes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_are_valid_plain_scenarios_that_differ_from_their_parent_deterministically() {
        let path = format!(
            "{}/../scenarios/swarm-tunnel.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let family = crate::scenario::load(std::path::Path::new(&path)).unwrap();
        let parent = draw::concretize(&family, 7);
        let mut kinds = std::collections::BTreeSet::new();
        for child in 0..16 {
            let m = mutate(&family, 7, child).expect("hardened declares pass");
            assert!(
                m.scenario.faults != parent.faults || m.scenario.tunnel != parent.tunnel,
                "child {child} changed nothing: {}",
                m.changes
            );
            let text = serde_saphyr::to_string(&m.scenario).unwrap();
            crate::scenario::parse::parse("mutant.yaml", &text)
                .unwrap_or_else(|e| panic!("child {child} ({}): {e}", m.changes));
            assert!(m.scenario.swarm.is_none());
            assert_eq!(m.scenario.expect.len(), 1, "faithful's `any` is dropped");
            assert_eq!(mutate(&family, 7, child).unwrap().scenario, m.scenario);
            kinds.insert(m.changes.split_whitespace().next().unwrap().to_string());
        }
        // Shifts, removals, added faults and redrawn knobs all occur.
        assert_eq!(kinds.len(), 4, "{kinds:?}");
    }
}
