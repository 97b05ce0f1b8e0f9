//! Sharded sweeps: one slice of a sweep's seeds per machine (or per pod of a Kubernetes
//! Indexed Job), each writing its runs' result lines to a results file, and the merge that
//! checks the shards add up to the whole sweep before a report is made of them.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use orrery_sim::exit::Exit;
use orrery_sim::scenario::{Outcome, Scenario, Variant};

use crate::common::Fail;
use crate::jobs::JobResult;

/// The environment variable a Kubernetes Indexed Job sets to each pod's index.
pub const INDEX_VAR: &str = "JOB_COMPLETION_INDEX";

/// Which slice of a sweep's seeds to run: `I/N`, or `env/N` (I from [`INDEX_VAR`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The slice's index, when given on the command line.
    index: Option<u64>,
    /// How many slices.
    count: u64,
}

/// Parses `I/N` or `env/N`.
pub fn parse(text: &str) -> Result<Shard, String> {
    let bad = || format!("{text:?}: expected I/N (0 <= I < N) or env/N");
    let (index, count) = text.split_once('/').ok_or_else(bad)?;
    let count: u64 = count.trim().parse().map_err(|_| bad())?;
    if count == 0 {
        return Err(format!("{text:?}: N must be at least 1"));
    }
    let index = match index.trim() {
        "env" => None,
        i => {
            let i: u64 = i.parse().map_err(|_| bad())?;
            if i >= count {
                return Err(format!("{text:?}: I must be below N (shards are 0-based)"));
            }
            Some(i)
        }
    };
    Ok(Shard { index, count })
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            Some(i) => write!(f, "{i}/{}", self.count),
            None => write!(f, "env/{}", self.count),
        }
    }
}

impl Shard {
    /// The slice's index: given, or read from [`INDEX_VAR`].
    fn index(&self) -> Result<u64, Fail> {
        if let Some(i) = self.index {
            return Ok(i);
        }
        let text = std::env::var(INDEX_VAR).map_err(|_| {
            Fail::usage(format!(
                "--shard env/{}: {INDEX_VAR} is not set (it is set in the pods of a Kubernetes Indexed Job)",
                self.count
            ))
        })?;
        match text.trim().parse::<u64>() {
            Ok(i) if i < self.count => Ok(i),
            _ => Err(Fail::usage(format!(
                "--shard env/{}: {INDEX_VAR}={text:?} is not an index below {}",
                self.count, self.count
            ))),
        }
    }

    /// (I, N): the index given or read from [`INDEX_VAR`], and the count.
    pub fn resolve(&self) -> Result<(u64, u64), Fail> {
        Ok((self.index()?, self.count))
    }

    /// This shard's seeds: the I-th of N contiguous slices of `seeds`, the first ones one
    /// seed longer when N does not divide them (a slice may be empty when N exceeds them).
    pub fn slice(&self, seeds: &std::ops::Range<u64>) -> Result<std::ops::Range<u64>, Fail> {
        let index = self.index()?;
        let len = seeds.end - seeds.start;
        let (base, extra) = (len / self.count, len % self.count);
        let start = seeds.start + index * base + index.min(extra);
        let end = start + base + u64::from(index < extra);
        Ok(start..end)
    }
}

/// The first line of a results file: what the runs after it belong to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The scenario file, as given to `sweep`.
    pub scenario_file: String,
    /// FNV-1a 64 of its bytes (a merge refuses a file that changed).
    pub scenario_fnv: String,
    /// The whole sweep's seeds (`A..B`), not only this shard's.
    pub seeds: String,
    /// `I/N` or `env/N`; absent for an unsharded sweep.
    #[serde(default)]
    pub shard: Option<String>,
    /// The variants swept.
    pub variants: Vec<String>,
}

/// The header line's key.
const HEADER_KEY: &str = "orrery_sweep";

/// FNV-1a 64 of a scenario file's text, as reports and results files name it.
pub use orrery_sim::report::scenario_fnv as fnv;

/// Appends result lines to a results file, one per finished run.
pub struct ResultsWriter {
    file: std::fs::File,
    path: PathBuf,
}

impl ResultsWriter {
    /// Creates (or truncates) `path` and writes the header.
    pub fn create(path: &Path, header: &Header) -> Result<ResultsWriter, Fail> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Fail::usage(format!("{}: {e}", dir.display())))?;
        }
        let file = std::fs::File::create(path)
            .map_err(|e| Fail::usage(format!("{}: cannot create: {e}", path.display())))?;
        let mut writer = ResultsWriter {
            file,
            path: path.to_path_buf(),
        };
        writer.append(&serde_json::json!({ HEADER_KEY: header }))?;
        Ok(writer)
    }

    /// Appends one line and flushes it, so an interrupted shard keeps what it ran.
    pub fn append(&mut self, line: &serde_json::Value) -> Result<(), Fail> {
        writeln!(self.file, "{line}")
            .and_then(|()| self.file.flush())
            .map_err(|e| Fail::usage(format!("{}: cannot write: {e}", self.path.display())))
    }
}

/// The runs of every results file of one sweep.
pub struct Merged {
    /// The sweep they belong to (shard left out).
    pub header: Header,
    /// (variant name, seed) → the run's result line, and the file it came from.
    runs: BTreeMap<(String, u64), (serde_json::Value, PathBuf)>,
}

/// Reads results files and checks they belong to one sweep and never run a seed twice.
pub fn read_all(files: &[PathBuf]) -> Result<Merged, Fail> {
    let mut header: Option<(Header, PathBuf)> = None;
    let mut runs: BTreeMap<(String, u64), (serde_json::Value, PathBuf)> = BTreeMap::new();
    for file in files {
        let shown = file.display();
        let text = std::fs::read_to_string(file)
            .map_err(|e| Fail::usage(format!("{shown}: cannot read: {e}")))?;
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let first = lines
            .next()
            .map(|(_, l)| l)
            .ok_or_else(|| Fail::usage(format!("{shown}: empty, not a results file")))?;
        let mine: Header = serde_json::from_str::<serde_json::Value>(first)
            .ok()
            .and_then(|v| serde_json::from_value(v.get(HEADER_KEY)?.clone()).ok())
            .ok_or_else(|| {
                Fail::usage(format!(
                    "{shown}:1: not a results file (its first line is not a sweep header; write one with `orrery sweep --results FILE`)"
                ))
            })?;
        let mine = Header {
            shard: None,
            ..mine
        };
        match &header {
            None => header = Some((mine, file.clone())),
            Some((first, from)) if *first != mine => {
                return Err(Fail::usage(format!(
                    "{shown}: from another sweep than {} ({:?} vs {:?})",
                    from.display(),
                    mine,
                    first
                )))
            }
            Some(_) => {}
        }
        for (i, line) in lines {
            let value: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| Fail::usage(format!("{shown}:{}: not a JSON line: {e}", i + 1)))?;
            let (Some(variant), Some(seed)) = (value["variant"].as_str(), value["seed"].as_u64())
            else {
                return Err(Fail::usage(format!(
                    "{shown}:{}: not a run's result line (no variant or seed)",
                    i + 1
                )));
            };
            let key = (variant.to_string(), seed);
            if let Some((_, earlier)) = runs.get(&key) {
                return Err(Fail::usage(format!(
                    "{shown}:{}: {variant} seed {seed} ran twice (also in {}): shards must be disjoint",
                    i + 1,
                    earlier.display()
                )));
            }
            runs.insert(key, (value, file.clone()));
        }
    }
    let (header, _) = header.ok_or_else(|| Fail::usage("no results file given".to_string()))?;
    Ok(Merged { header, runs })
}

impl Merged {
    /// Every run of the sweep as a job result, in (variant, seed) order; fails naming the
    /// runs no file holds (a shard not merged, or interrupted).
    pub fn results(
        &self,
        scenario: &Scenario,
        seeds: &std::ops::Range<u64>,
    ) -> Result<Vec<(Variant, u64, JobResult)>, Fail> {
        let mut results = Vec::new();
        let mut missing = Vec::new();
        for name in &self.header.variants {
            let variant = Variant::parse(name).map_err(Fail::usage)?;
            let expected = orrery_sim::report::expected(scenario, variant);
            for seed in seeds.clone() {
                let Some((line, _)) = self.runs.get(&(name.clone(), seed)) else {
                    missing.push(format!("{name} {seed}"));
                    continue;
                };
                let result: Outcome = serde_json::from_value(line["result"].clone())
                    .map_err(|e| Fail::usage(format!("{name} seed {seed}: bad result: {e}")))?;
                results.push((
                    variant,
                    seed,
                    JobResult {
                        line: line.clone(),
                        exit: Exit::of(result, expected),
                    },
                ));
            }
        }
        if !missing.is_empty() {
            let shown: Vec<&str> = missing.iter().take(10).map(String::as_str).collect();
            return Err(Fail::usage(format!(
                "{} run(s) of the sweep are in no results file (a shard missing or interrupted): {}{}",
                missing.len(),
                shown.join(", "),
                if missing.len() > 10 { ", …" } else { "" }
            )));
        }
        if results.len() != self.runs.len() {
            return Err(Fail::usage(format!(
                "the results files hold {} runs outside the sweep's seeds {} or variants",
                self.runs.len() - results.len(),
                self.header.seeds
            )));
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_disjoint_contiguous_and_cover_the_seeds() {
        for (len, n) in [(20u64, 2u64), (21, 4), (3, 5), (1, 1)] {
            let seeds = 1..1 + len;
            let mut covered = Vec::new();
            for i in 0..n {
                let slice = parse(&format!("{i}/{n}")).unwrap().slice(&seeds).unwrap();
                covered.extend(slice);
            }
            assert_eq!(covered, seeds.collect::<Vec<_>>(), "{len} seeds over {n}");
        }
        assert_eq!(parse("1/4").unwrap().slice(&(1..22)).unwrap(), 7..12);
    }

    #[test]
    fn bad_shards_say_what_is_wrong() {
        assert!(parse("2/2").unwrap_err().contains("below N"));
        assert!(parse("0/0").unwrap_err().contains("at least 1"));
        assert!(parse("x").unwrap_err().contains("expected I/N"));
        assert!(parse("a/3").unwrap_err().contains("expected I/N"));
        assert_eq!(parse("env/3").unwrap().to_string(), "env/3");
    }
}
