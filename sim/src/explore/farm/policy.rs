//! What the farm runs next.
//!
//! An *arm* is one scenario file and one variant it declares. Each arm runs new seeds beyond
//! its file's `seeds:` list (and beyond every seed the database already holds for that file's
//! content), so every farm run explores seeds no earlier one ran.
//!
//! The adaptive policy, in two phases:
//! 1. **Floors.** Every arm first gets its floor of seeds in this farm run (default 200; half
//!    for an arm whose seeds cost more than four times the median arm's — queue-overflow and
//!    shard-rebalance today). The arm furthest below its floor, relative to its weight, runs
//!    next.
//! 2. **Beyond the floors**, the arm with the most weight per CPU second spent runs next:
//!    `weight / ((runs + 1) × cost per seed)`, so cheap arms get more seeds and every arm
//!    gets about the same CPU unless its weight says otherwise.
//!
//! An arm's weight is 1, plus 3 when one of its last 20 runs was not as declared (failures
//! cluster: look again where one was found), plus 2 when one of its declared reach
//! conditions is rare (reached by under 5 % of its runs, or never, after 20 runs).
//!
//! The uniform policy runs the arms in turn, a fixed number of seeds each: the baseline that
//! mutation is measured against, and a deterministic plan for tests and shards.

use std::collections::{BTreeMap, VecDeque};

use crate::scenario::{Outcome, Scenario, Variant};

use super::db::{Db, Origin, Run};

/// Runs an arm remembers for "failed recently".
const RECENT: usize = 20;

/// One scenario file and one variant.
#[derive(Clone, Debug)]
pub struct Arm {
    /// The file, as given.
    pub file: String,
    /// Its parsed scenario.
    pub scenario: Scenario,
    /// FNV-1a of its bytes.
    pub fnv: String,
    /// The variant.
    pub variant: Variant,
    /// The next seed to consider.
    pub next_seed: u64,
    /// Seeds considered in this farm run (a shard considers the others' too, and skips
    /// them: the uniform policy's window is counted in seeds considered).
    pub considered: u64,
    /// What the database and this farm run know about it.
    pub stats: Stats,
}

/// An arm's record.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Runs of its seeds in the database (every session).
    pub runs: u64,
    /// Runs in this farm run.
    pub session_runs: u64,
    /// CPU seconds of the runs in the database.
    pub cpu: f64,
    /// How many runs reached each coverage feature.
    pub features: BTreeMap<String, u64>,
    /// Whether each of the last runs was as declared.
    pub recent: VecDeque<bool>,
}

impl Stats {
    fn add(&mut self, run: &Run, this_session: bool) {
        self.runs += 1;
        self.session_runs += u64::from(this_session);
        self.cpu += run.cpu_seconds;
        for feature in run.features() {
            *self.features.entry(feature).or_default() += 1;
        }
        self.recent.push_back(run.expected);
        if self.recent.len() > RECENT {
            self.recent.pop_front();
        }
    }

    /// Mean CPU seconds per seed, if any ran.
    pub fn cost(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.cpu / self.runs as f64)
    }
}

/// Which policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Floors, then weight per CPU second (see the module's doc).
    Adaptive,
    /// Arms in turn.
    Uniform,
}

/// A shard: this farm runs the seeds `s` with `s % count == index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 0-based.
    pub index: u64,
    /// How many.
    pub count: u64,
}

/// The arms and the choice of what runs next.
pub struct Plan {
    /// Every arm, in file then variant order.
    pub arms: Vec<Arm>,
    policy: Policy,
    floor: u64,
    shard: Option<Shard>,
    /// With the uniform policy: seeds considered per arm, then the arm is done.
    per_arm: Option<u64>,
}

impl Plan {
    /// Arms for `files` (path, parsed scenario, FNV) and each declared variant, their
    /// records from `db`; `session` names this farm run.
    pub fn new(
        files: Vec<(String, Scenario, String)>,
        db: &Db,
        policy: Policy,
        floor: u64,
        shard: Option<Shard>,
        per_arm: Option<u64>,
        session: &str,
    ) -> Plan {
        let mut arms = Vec::new();
        for (file, scenario, fnv) in files {
            for variant in scenario.expect.keys().copied() {
                let listed = scenario.seeds.iter().max().copied().unwrap_or(0);
                let mut stats = Stats::default();
                let mut last = listed;
                for run in db.runs().filter(|r| {
                    r.scenario_fnv == fnv
                        && r.variant == variant.as_str()
                        && r.origin == Origin::Seed
                }) {
                    stats.add(run, run.session == session);
                    last = last.max(run.seed);
                }
                arms.push(Arm {
                    file: file.clone(),
                    scenario: scenario.clone(),
                    fnv: fnv.clone(),
                    variant,
                    next_seed: last + 1,
                    considered: 0,
                    stats,
                });
            }
        }
        Plan {
            arms,
            policy,
            floor,
            shard,
            per_arm,
        }
    }

    /// An arm's floor in this farm run: half for one whose seeds cost over four times the
    /// median arm's.
    pub fn floor(&self, arm: usize) -> u64 {
        let mut costs: Vec<f64> = self.arms.iter().filter_map(|a| a.stats.cost()).collect();
        costs.sort_by(f64::total_cmp);
        let median = costs.get(costs.len() / 2).copied();
        match (self.arms[arm].stats.cost(), median) {
            (Some(cost), Some(median)) if cost > 4.0 * median => self.floor.div_ceil(2),
            _ => self.floor,
        }
    }

    /// An arm's weight (see the module's doc).
    pub fn weight(&self, arm: usize) -> f64 {
        let a = &self.arms[arm];
        let failed = a.stats.recent.iter().any(|expected| !expected);
        let rare = a.stats.runs >= 20
            && a.scenario
                .reach
                .iter()
                .filter(|r| r.applies_to(a.variant))
                .any(|r| {
                    let name = serde_json::to_value(r.condition)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    let hits = a.stats.features.get(&name).copied().unwrap_or(0);
                    (hits as f64) < 0.05 * a.stats.runs as f64
                });
        1.0 + if failed { 3.0 } else { 0.0 } + if rare { 2.0 } else { 0.0 }
    }

    fn cost(&self, arm: usize) -> f64 {
        self.arms[arm].stats.cost().unwrap_or(1.0).max(0.01)
    }

    fn ours(&self, seed: u64) -> bool {
        self.shard.is_none_or(|s| seed % s.count == s.index)
    }

    fn exhausted(&self, arm: usize) -> bool {
        self.per_arm.is_some_and(|n| self.arms[arm].considered >= n)
    }

    /// The next (arm, seed) to run, or None when every arm is done (uniform policy with a
    /// per-arm count). Takes the seed: the arm moves on.
    pub fn next_run(&mut self) -> Option<(usize, u64)> {
        let open: Vec<usize> = (0..self.arms.len())
            .filter(|a| !self.exhausted(*a))
            .collect();
        let arm = match self.policy {
            Policy::Uniform => open
                .iter()
                .copied()
                .min_by_key(|a| (self.arms[*a].considered, *a))?,
            Policy::Adaptive => {
                let below: Vec<usize> = open
                    .iter()
                    .copied()
                    .filter(|a| self.arms[*a].stats.session_runs < self.floor(*a))
                    .collect();
                if below.is_empty() {
                    open.iter().copied().max_by(|a, b| {
                        let score = |i: usize| {
                            self.weight(i)
                                / ((self.arms[i].stats.session_runs + 1) as f64 * self.cost(i))
                        };
                        score(*a).total_cmp(&score(*b)).then(b.cmp(a))
                    })?
                } else {
                    below.iter().copied().min_by(|a, b| {
                        let need = |i: usize| {
                            self.arms[i].stats.session_runs as f64
                                / (self.floor(i) as f64 * self.weight(i))
                        };
                        need(*a).total_cmp(&need(*b)).then(a.cmp(b))
                    })?
                }
            }
        };
        loop {
            if self.exhausted(arm) {
                return self.next_run();
            }
            let seed = self.arms[arm].next_seed;
            self.arms[arm].next_seed += 1;
            self.arms[arm].considered += 1;
            if self.ours(seed) {
                return Some((arm, seed));
            }
        }
    }

    /// Counts a finished run of an arm's seed.
    pub fn record(&mut self, arm: usize, run: &Run) {
        self.arms[arm].stats.add(run, true);
    }

    /// The features of `run` that are rare in its arm: reached by under 1 % of the arm's
    /// runs, once the arm has run at least 100 seeds (below that, 1 % cannot be told).
    pub fn rare(&self, arm: usize, run: &Run) -> Vec<String> {
        let stats = &self.arms[arm].stats;
        if stats.runs < 100 {
            return Vec::new();
        }
        run.features()
            .into_iter()
            .filter(|f| {
                let hits = stats.features.get(f).copied().unwrap_or(0);
                (hits as f64) < 0.01 * stats.runs as f64
            })
            .collect()
    }

    /// The variants a mutant of an arm's scenario may run: those its file declares to pass
    /// (a declared failure belongs to its seeds' schedules; a pass must hold in every world).
    pub fn mutant_variants(scenario: &Scenario) -> Vec<Variant> {
        scenario
            .expect
            .iter()
            .filter(|(_, e)| **e == Outcome::Pass)
            .map(|(v, _)| *v)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explore::farm::db::Record;

    fn scenario(name: &str) -> Scenario {
        let path = format!("{}/../scenarios/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
        crate::scenario::load(std::path::Path::new(&path)).unwrap()
    }

    fn files() -> Vec<(String, Scenario, String)> {
        ["tunnel-drop", "swarm-tunnel"]
            .into_iter()
            .map(|n| (format!("{n}.yaml"), scenario(n), format!("fnv-{n}")))
            .collect()
    }

    fn run(fnv: &str, variant: &str, seed: u64, cpu: f64, reached: &[&str]) -> Run {
        Run {
            session: "old".into(),
            scenario: "x".into(),
            file: "x.yaml".into(),
            scenario_fnv: fnv.into(),
            binary: "b".into(),
            seed,
            variant: variant.into(),
            origin: Origin::Seed,
            result: "pass".into(),
            expected: true,
            violations: vec![],
            failure: None,
            reached: reached.iter().map(|s| s.to_string()).collect(),
            fault_points: BTreeMap::new(),
            cpu_seconds: cpu,
            trace_hash: String::new(),
        }
    }

    fn empty_db() -> Db {
        Db::open(std::path::Path::new("/nonexistent/orrery-farm-db.jsonl")).unwrap()
    }

    #[test]
    fn a_fault_point_that_fired_unusually_often_is_rare_though_the_point_is_not() {
        let mut plan = Plan::new(files(), &empty_db(), Policy::Adaptive, 200, None, None, "s");
        let fired = |seed: u64, n: u64| {
            let mut r = run(
                "fnv-swarm-tunnel",
                "hardened",
                seed,
                0.4,
                &["write_retried"],
            );
            r.fault_points = BTreeMap::from([("tunnel.frame_split".to_string(), n)]);
            r
        };
        for seed in 0..150 {
            plan.record(3, &fired(seed, 1 + seed % 3));
        }
        assert!(
            plan.rare(3, &fired(200, 2)).is_empty(),
            "every feature of a usual run is common"
        );
        assert_eq!(
            plan.rare(3, &fired(201, 20)),
            ["point:tunnel.frame_split#16-31"],
            "twenty firings where 1-3 is the rule"
        );
    }

    #[test]
    fn shards_split_each_arms_seeds_and_uniform_stops_after_its_window() {
        let mut seen = Vec::new();
        for index in 0..2 {
            let shard = Some(Shard { index, count: 2 });
            let mut plan = Plan::new(
                files(),
                &empty_db(),
                Policy::Uniform,
                200,
                shard,
                Some(4),
                "s",
            );
            while let Some((arm, seed)) = plan.next_run() {
                seen.push((arm, seed));
            }
        }
        seen.sort();
        let mut whole = Vec::new();
        let mut plan = Plan::new(
            files(),
            &empty_db(),
            Policy::Uniform,
            200,
            None,
            Some(4),
            "s",
        );
        while let Some(next) = plan.next_run() {
            whole.push(next);
        }
        whole.sort();
        assert_eq!(seen, whole);
        // 4 arms (two files × two variants), 4 seeds each, beyond each file's list.
        assert_eq!(whole.len(), 16);
        assert_eq!(
            whole[0],
            (0, 2),
            "tunnel-drop lists seed 1: the farm starts at 2"
        );
        assert!(
            whole.iter().any(|(a, s)| *a == 2 && *s == 21),
            "swarm-tunnel lists 1–20"
        );
    }

    #[test]
    fn the_database_moves_seeds_on_and_prices_the_arms() {
        let path = std::env::temp_dir().join(format!("orrery-policy-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut db = Db::open(&path).unwrap();
        // tunnel-drop faithful ran seeds 2..=30 at 10 s each; the other arms cost 1 s.
        for seed in 2..=30 {
            db.append(Record::Run(run(
                "fnv-tunnel-drop",
                "faithful",
                seed,
                10.0,
                &[],
            )))
            .unwrap();
            db.append(Record::Run(run(
                "fnv-tunnel-drop",
                "hardened",
                seed,
                1.0,
                &[],
            )))
            .unwrap();
            db.append(Record::Run(run(
                "fnv-swarm-tunnel",
                "faithful",
                seed + 20,
                1.0,
                &["write_retried"],
            )))
            .unwrap();
            db.append(Record::Run(run(
                "fnv-swarm-tunnel",
                "hardened",
                seed + 20,
                1.0,
                &[
                    "tunnel_dropped_mid_write",
                    "runtime_crashed_mid_write",
                    "write_retried",
                    "tunnel_reregistered",
                ],
            )))
            .unwrap();
        }
        let mut plan = Plan::new(files(), &db, Policy::Adaptive, 200, None, None, "new");
        assert_eq!(plan.arms[0].next_seed, 31, "after the database's last seed");
        assert_eq!(
            plan.floor(0),
            100,
            "ten times the median cost: half the floor"
        );
        assert_eq!(plan.floor(1), 200);
        // swarm-tunnel's tunnel_dropped_mid_write was never reached in 29 runs: rare, weight 3.
        assert_eq!(plan.weight(2), 3.0);
        assert_eq!(
            plan.weight(3),
            1.0,
            "hardened reached every declared condition"
        );
        assert_eq!(plan.weight(1), 1.0);
        // Below the floors, the arm furthest below relative to its weight goes first: at 0
        // runs every arm ties, and the first arm wins; then the others follow.
        let (first, _) = plan.next_run().unwrap();
        assert_eq!(first, 0);
        let _ = std::fs::remove_file(&path);
    }
}
