//! Workload traces: the Application changes of a real cluster, recorded by `orrery record`
//! and replayed by a scenario's `workload: {replay: FILE, speed: N}`. One JSON object per
//! line: a header, then one record per change in time order. A change is what the world
//! can reproduce with its own Git, Argo CD and workload: an app added or deleted, a new
//! synced revision (replayed as a commit to the app's path), a health change (replayed as
//! the app's workload turning that health), a refresh request.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The header's `format`.
pub const FORMAT: &str = "orrery-workload-trace/1";

/// The first line of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// How long the recording ran, in ms.
    pub duration_ms: u64,
    /// Whether app names were replaced by hashes.
    pub hashed: bool,
}

/// What changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case", deny_unknown_fields)]
pub enum Change {
    /// The app appeared (at 0 ms: it existed when the recording started).
    Added,
    /// The app was deleted.
    Deleted,
    /// Argo CD synced a new revision.
    Revision {
        /// The revision (recorded, not replayed: the world's commit makes its own).
        revision: String,
    },
    /// The app's health changed.
    Health {
        /// `Healthy`, `Degraded`, `Progressing`, …
        health: String,
    },
    /// Someone asked for a refresh (the `argocd.argoproj.io/refresh` annotation).
    Refresh,
}

/// One change of one app.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// When, from the start of the recording.
    pub at_ms: u64,
    /// `namespace/name`, or its hash.
    pub app: String,
    /// What changed.
    #[serde(flatten)]
    pub change: Change,
}

/// A whole trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The header.
    pub header: Header,
    /// The changes, in time order.
    pub records: Vec<Record>,
}

/// Why a trace could not be read; `line` is 1-based.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file is empty.
    #[error("the trace is empty (its first line must be the header)")]
    Empty,
    /// A line is not the JSON it must be.
    #[error("line {line}: {message}")]
    Line {
        /// Where.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl Trace {
    /// Parses a trace, checking the header, the time order, and that every change is to an
    /// app that exists at that point.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, first) = lines.next().ok_or(TraceError::Empty)?;
        let at = |line: usize, message: String| TraceError::Line {
            line: line + 1,
            message,
        };
        let header: Header =
            serde_json::from_str(first).map_err(|e| at(0, format!("not a trace header: {e}")))?;
        if header.format != FORMAT {
            return Err(at(
                0,
                format!("format {:?} is not {FORMAT:?}", header.format),
            ));
        }
        let mut records = Vec::new();
        let mut live = BTreeSet::new();
        let mut last = 0;
        for (index, text) in lines {
            let record: Record = serde_json::from_str(text)
                .map_err(|e| at(index, format!("not a trace record: {e}")))?;
            if record.at_ms < last {
                return Err(at(
                    index,
                    format!(
                        "at_ms {} is before the previous record's {last}",
                        record.at_ms
                    ),
                ));
            }
            last = record.at_ms;
            let known = live.contains(&record.app);
            match (&record.change, known) {
                (Change::Added, true) => {
                    return Err(at(index, format!("{} is added twice", record.app)))
                }
                (Change::Added, false) => {
                    live.insert(record.app.clone());
                }
                (_, false) => {
                    return Err(at(
                        index,
                        format!("{} changes before it is added", record.app),
                    ))
                }
                (Change::Deleted, true) => {
                    live.remove(&record.app);
                }
                _ => {}
            }
            records.push(record);
        }
        Ok(Trace { header, records })
    }

    /// The trace as its file's text.
    pub fn to_text(&self) -> String {
        let mut out = serde_json::to_string(&self.header).expect("a header serialises") + "\n";
        for record in &self.records {
            out.push_str(&serde_json::to_string(record).expect("a record serialises"));
            out.push('\n');
        }
        out
    }

    /// The apps that exist when the recording starts (added at 0 ms), in trace order.
    pub fn initial_apps(&self) -> Vec<&str> {
        self.records
            .iter()
            .take_while(|r| r.at_ms == 0 && r.change == Change::Added)
            .map(|r| r.app.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = r#"{"format":"orrery-workload-trace/1","duration_ms":60000,"hashed":false}
{"at_ms":0,"app":"argocd/a","change":"added"}
{"at_ms":0,"app":"argocd/b","change":"added"}
{"at_ms":1500,"app":"argocd/a","change":"revision","revision":"abc"}
{"at_ms":2000,"app":"argocd/b","change":"health","health":"Degraded"}
{"at_ms":3000,"app":"argocd/c","change":"added"}
{"at_ms":4000,"app":"argocd/b","change":"deleted"}
"#;

    #[test]
    fn a_trace_round_trips_and_names_its_initial_apps() {
        let trace = Trace::parse(TRACE).unwrap();
        assert_eq!(trace.records.len(), 6);
        assert_eq!(trace.initial_apps(), ["argocd/a", "argocd/b"]);
        assert_eq!(Trace::parse(&trace.to_text()).unwrap(), trace);
    }

    #[test]
    fn bad_traces_name_the_line_and_the_problem() {
        let line = |text: &str| match Trace::parse(text) {
            Err(TraceError::Line { line, message }) => (line, message),
            other => panic!("{other:?}"),
        };
        assert!(matches!(Trace::parse(""), Err(TraceError::Empty)));
        assert_eq!(line("{}").0, 1);
        assert!(line(&TRACE.replace("trace/1", "trace/9"))
            .1
            .contains("format"));
        let backwards = TRACE.replace("\"at_ms\":2000", "\"at_ms\":1000");
        assert_eq!(
            line(&backwards),
            (5, "at_ms 1000 is before the previous record's 1500".into())
        );
        let unknown = TRACE.replace(
            "argocd/b\",\"change\":\"deleted",
            "argocd/z\",\"change\":\"deleted",
        );
        assert_eq!(line(&unknown).0, 7);
        let twice =
            format!("{TRACE}{{\"at_ms\":5000,\"app\":\"argocd/a\",\"change\":\"added\"}}\n");
        assert!(line(&twice).1.contains("added twice"));
        let junk =
            format!("{TRACE}{{\"at_ms\":6000,\"app\":\"argocd/a\",\"change\":\"exploded\"}}\n");
        assert_eq!(line(&junk).0, 8);
    }
}
