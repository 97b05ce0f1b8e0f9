//! The farm's results database: append-only JSON lines.
//!
//! Why JSON lines and not SQLite: every record is written once and never updated, so an
//! append with a flush is the whole transaction — a farm killed mid-run loses at most the
//! line being written (a torn last line is skipped on load, with a warning). Shards merge by
//! concatenation (duplicates are dropped by key), the file is greppable and diffable, and it
//! needs no C library in the build. The farm reads it whole at start: at ~400 bytes a run,
//! a million runs is 400 MB, beyond what one machine's farm makes in a month.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One line of the database.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A finished run.
    Run(Run),
    /// A failure shrunk (or found known, or left unshrunk) after an unexpected run.
    Shrunk(Shrunk),
    /// A farm run's start and end: its budget, shard and totals.
    Session(Session),
}

/// Where a run's scenario came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "origin", rename_all = "snake_case")]
pub enum Origin {
    /// The scenario file at a seed.
    Seed,
    /// A mutant of a parent run's concrete scenario (coverage-guided).
    Mutant {
        /// The parent's seed (the mutant runs at it too).
        parent_seed: u64,
        /// Which child of that parent (0-based).
        child: u32,
        /// What the mutation changed.
        changes: String,
        /// The mutant's scenario file.
        file: String,
    },
}

/// A finished run: what the database holds per seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The farm run (session) that made it.
    pub session: String,
    /// The scenario's name.
    pub scenario: String,
    /// The scenario file, as the farm was given it.
    pub file: String,
    /// FNV-1a 64 of the file's bytes: a changed file is another scenario.
    pub scenario_fnv: String,
    /// The binary that ran it (`<version>+<FNV-1a of the executable>`).
    pub binary: String,
    /// The seed.
    pub seed: u64,
    /// `faithful` or `hardened`.
    pub variant: String,
    /// A seed of the file, or a mutant.
    #[serde(flatten)]
    pub origin: Origin,
    /// The result class.
    pub result: String,
    /// Whether it met the declared verdict.
    pub expected: bool,
    /// Invariants broken, in time order.
    pub violations: Vec<String>,
    /// The invariant its result stands for.
    #[serde(default)]
    pub failure: Option<String>,
    /// Reach conditions reached.
    pub reached: Vec<String>,
    /// Fault points fired, and how often.
    pub fault_points: BTreeMap<String, u64>,
    /// CPU seconds (the child's wall time: a simulation is single-threaded).
    pub cpu_seconds: f64,
    /// The trace hash.
    pub trace_hash: String,
}

/// AFL's hit-count class of a count (its technical whitepaper, "hit counts").
fn bucket(n: u64) -> &'static str {
    match n {
        0 => "0",
        1 => "1",
        2 => "2",
        3 => "3",
        4..=7 => "4-7",
        8..=15 => "8-15",
        16..=31 => "16-31",
        32..=127 => "32-127",
        _ => "128+",
    }
}

impl Run {
    /// What identifies a run across shards and sessions.
    pub fn key(&self) -> (String, String, u64, Origin) {
        (
            self.scenario_fnv.clone(),
            self.variant.clone(),
            self.seed,
            self.origin.clone(),
        )
    }

    /// The coverage features it reached: its reach conditions, `point:<name>` for each
    /// fault point that fired, and `point:<name>#<bucket>` for how often it fired.
    ///
    /// The buckets are AFL's hit-count classes (1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+): a
    /// family's reach conditions and fault points are each reached by a tenth of its seeds or
    /// more (they are drawn to be), so without counts no feature is rare and mutation has no
    /// parent; a point that fired unusually often or seldom is where rare schedules show.
    pub fn features(&self) -> Vec<String> {
        let mut features = self.reached.clone();
        for (point, fired) in &self.fault_points {
            features.push(format!("point:{point}"));
            features.push(format!("point:{point}#{}", bucket(*fired)));
        }
        features
    }

    /// The file a repro runs: the scenario's, or the mutant's.
    pub fn repro_file(&self) -> &str {
        match &self.origin {
            Origin::Seed => &self.file,
            Origin::Mutant { file, .. } => file,
        }
    }
}

/// A failure after shrinking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shrunk {
    /// The farm run that shrank it.
    pub session: String,
    /// The scenario's name.
    pub scenario: String,
    /// FNV-1a of the scenario file.
    pub scenario_fnv: String,
    /// The failing seed.
    pub seed: u64,
    /// The variant.
    pub variant: String,
    /// The failing run's origin.
    #[serde(flatten)]
    pub origin: Origin,
    /// The run's result class.
    pub result: String,
    /// The invariant kept broken.
    pub invariant: String,
    /// FNV-1a of the minimal scenario's shape (its fault kinds and targets, fault points
    /// and the invariant — not times, not counts): a failure with a known shape is known.
    pub shape: String,
    /// The regression scenario written, if the failure was new.
    pub regression: Option<String>,
    /// The command that replays it.
    pub replay: String,
    /// True when an earlier failure had the same scenario, invariant and shape.
    pub known: bool,
    /// What the shrink took away, or why it could not run.
    pub note: String,
}

/// A farm run: its settings and, at the end, its totals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Its id (start time, UTC, and the shard).
    pub session: String,
    /// `start` or `end`.
    pub phase: String,
    /// The budget as given.
    pub budget: String,
    /// `I/N`, when sharded.
    #[serde(default)]
    pub shard: Option<String>,
    /// Runs at a time.
    pub jobs: usize,
    /// Wall seconds from start (0 at start).
    pub wall_seconds: f64,
    /// Runs finished in this session.
    pub runs: u64,
    /// True when a SIGINT stopped it before its budget ran out.
    pub interrupted: bool,
}

/// The database: every record read, and the file appended to.
#[derive(Debug)]
pub struct Db {
    path: PathBuf,
    /// Every record, in file order (duplicate runs dropped).
    pub records: Vec<Record>,
    /// Lines that were not records (a torn last line after a kill), with their numbers.
    pub skipped: Vec<usize>,
}

/// A database that cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct DbError {
    /// The file.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

fn fail(path: &Path, message: impl std::fmt::Display) -> DbError {
    DbError {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

impl Db {
    /// Reads `path` (an absent file is an empty database).
    pub fn open(path: &Path) -> Result<Db, DbError> {
        let mut db = Db {
            path: path.to_path_buf(),
            records: Vec::new(),
            skipped: Vec::new(),
        };
        if path.exists() {
            db.read(path)?;
        }
        Ok(db)
    }

    /// Reads another database's records into this one (a shard's), dropping runs already
    /// held; returns how many records were new.
    pub fn read(&mut self, path: &Path) -> Result<usize, DbError> {
        let text = std::fs::read_to_string(path).map_err(|e| fail(path, e))?;
        let mut seen: std::collections::BTreeSet<_> = self.runs().map(Run::key).collect();
        let mut added = 0;
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Record>(line) {
                Ok(Record::Run(run)) => {
                    if seen.insert(run.key()) {
                        self.records.push(Record::Run(run));
                        added += 1;
                    }
                }
                Ok(record) => {
                    if !self.records.contains(&record) {
                        self.records.push(record);
                        added += 1;
                    }
                }
                // A torn last line (the farm was killed while writing it) is skipped; a bad
                // line elsewhere means the file is not a farm database.
                Err(_) if i + 1 == lines.len() => self.skipped.push(i + 1),
                Err(e) => {
                    return Err(fail(
                        path,
                        format!("line {}: not a farm database record: {e}", i + 1),
                    ))
                }
            }
        }
        Ok(added)
    }

    /// Appends a record to the file (and flushes it) and keeps it.
    pub fn append(&mut self, record: Record) -> Result<(), DbError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| fail(&self.path, e))?;
        let line = serde_json::to_string(&record).expect("records serialise");
        writeln!(file, "{line}")
            .and_then(|()| file.flush())
            .map_err(|e| fail(&self.path, e))?;
        self.records.push(record);
        Ok(())
    }

    /// Writes every record to `path` (a merged database), runs in key order.
    pub fn write_all(&self, path: &Path) -> Result<(), DbError> {
        let mut text = String::new();
        for record in &self.records {
            text.push_str(&serde_json::to_string(record).expect("records serialise"));
            text.push('\n');
        }
        std::fs::write(path, text).map_err(|e| fail(path, e))
    }

    /// Every run.
    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.records.iter().filter_map(|r| match r {
            Record::Run(run) => Some(run),
            _ => None,
        })
    }

    /// Every shrunk failure.
    pub fn shrunk(&self) -> impl Iterator<Item = &Shrunk> {
        self.records.iter().filter_map(|r| match r {
            Record::Shrunk(s) => Some(s),
            _ => None,
        })
    }

    /// Every session record.
    pub fn sessions(&self) -> impl Iterator<Item = &Session> {
        self.records.iter().filter_map(|r| match r {
            Record::Session(s) => Some(s),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seed: u64) -> Run {
        Run {
            session: "s".into(),
            scenario: "x".into(),
            file: "scenarios/x.yaml".into(),
            scenario_fnv: "f".into(),
            binary: "b".into(),
            seed,
            variant: "hardened".into(),
            origin: Origin::Seed,
            result: "pass".into(),
            expected: true,
            violations: vec![],
            failure: None,
            reached: vec!["a".into()],
            fault_points: BTreeMap::from([("p".to_string(), 2)]),
            cpu_seconds: 0.5,
            trace_hash: "h".into(),
        }
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_duplicates_merge_away() {
        let dir = std::env::temp_dir().join(format!("orrery-db-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut db = Db::open(&path).unwrap();
        db.append(Record::Run(run(1))).unwrap();
        db.append(Record::Run(run(2))).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"kind\":\"run\",\"sess");
        std::fs::write(&path, &text).unwrap();
        let db = Db::open(&path).unwrap();
        assert_eq!(db.runs().count(), 2);
        assert_eq!(db.skipped, vec![3]);
        // The same runs again (a shard merged twice) add nothing.
        let mut merged = Db::open(&dir.join("none.jsonl")).unwrap();
        assert_eq!(merged.read(&path).unwrap(), 2);
        assert_eq!(merged.read(&path).unwrap(), 0);
        assert_eq!(
            merged.runs().next().unwrap().features(),
            ["a", "point:p", "point:p#2"]
        );
        // A bad line that is not the last is an error naming the file and line.
        std::fs::write(&path, "nonsense\n{}\n").unwrap();
        let e = Db::open(&path).unwrap_err().to_string();
        assert!(e.contains("a.jsonl") && e.contains("line 1"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
