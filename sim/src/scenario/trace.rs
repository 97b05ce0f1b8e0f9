//! Workload traces: the Application, Rollout and Workflow changes of a real cluster,
//! recorded by `orrery record` and replayed by a scenario's `workload: {replay: FILE,
//! speed: N}`. One JSON object per line: a header, then one record per change in time
//! order. A change is what the world can reproduce with its own Git, Argo CD, Argo Rollouts,
//! Argo Workflows and workload:
//!
//! - an Application (`kind` absent) added or deleted, a new synced revision (replayed as a
//!   commit to the app's path), a health change (replayed as the app's workload turning that
//!   health), a refresh request;
//! - a Rollout (`"kind":"rollout"`) added or deleted, a new pod template (`revision`: its
//!   pod-template hash; replayed as a new version, whose analysis fails when a phase
//!   recorded right after it, before the Rollout's next other change, is `Degraded`), its `status.phase` (`phase`: recorded first as it is
//!   seen, then as it changes; the world's controller makes its own phases);
//! - a Workflow (`"kind":"workflow"`) submitted (`added`) or deleted, its `status.phase`
//!   (replayed as a one-step workflow whose pod runs until the recorded end, `Succeeded` or
//!   failed).

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

/// What kind of object a record is about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// An Argo CD Application (the default: traces before Rollouts and Workflows name none).
    #[default]
    Application,
    /// An Argo Rollouts Rollout.
    Rollout,
    /// An Argo Workflows Workflow.
    Workflow,
}

impl Kind {
    /// Whether this is the default kind (left out of a record's JSON).
    pub fn is_application(&self) -> bool {
        *self == Kind::Application
    }

    /// The kind's name in messages.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Application => "Application",
            Kind::Rollout => "Rollout",
            Kind::Workflow => "Workflow",
        }
    }
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
    /// A Rollout's or Workflow's `status.phase` (as first seen, then each change).
    Phase {
        /// `Healthy`, `Progressing`, `Paused`, `Degraded` (Rollout); `Pending`, `Running`,
        /// `Succeeded`, `Failed`, `Error` (Workflow).
        phase: String,
    },
}

impl Change {
    /// Whether an object of `kind` can have this change.
    fn fits(&self, kind: Kind) -> bool {
        match self {
            Change::Added | Change::Deleted => true,
            Change::Revision { .. } => kind != Kind::Workflow,
            Change::Health { .. } | Change::Refresh => kind == Kind::Application,
            Change::Phase { .. } => kind != Kind::Application,
        }
    }
}

/// One change of one app.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// When, from the start of the recording.
    pub at_ms: u64,
    /// What kind of object (absent: an Application).
    #[serde(default, skip_serializing_if = "Kind::is_application")]
    pub kind: Kind,
    /// The object's `namespace/name`, or its hash (named `app` since traces began with
    /// Applications only).
    pub app: String,
    /// What changed.
    #[serde(flatten)]
    pub change: Change,
}

impl Record {
    /// Whether this adds an object that exists when the recording starts.
    pub fn is_initial(&self) -> bool {
        self.at_ms == 0 && self.change == Change::Added
    }
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
    /// Parses a trace, checking the header, the time order, that every change is to an
    /// object that exists at that point, and that its kind can have it.
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
            let kind = record.kind.name();
            if !record.change.fits(record.kind) {
                let change = serde_json::to_value(&record.change)
                    .ok()
                    .and_then(|v| v["change"].as_str().map(str::to_string))
                    .unwrap_or_default();
                return Err(at(
                    index,
                    format!("kind {kind} has no {change:?} change ({})", record.app),
                ));
            }
            let key = (record.kind, record.app.clone());
            let known = live.contains(&key);
            match (&record.change, known) {
                (Change::Added, true) => {
                    return Err(at(index, format!("{kind} {} is added twice", record.app)))
                }
                (Change::Added, false) => {
                    live.insert(key);
                }
                (_, false) => {
                    return Err(at(
                        index,
                        format!("{kind} {} changes before it is added", record.app),
                    ))
                }
                (Change::Deleted, true) => {
                    live.remove(&key);
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

    /// The records about objects of `kind`, in time order.
    pub fn of(&self, kind: Kind) -> impl Iterator<Item = &Record> {
        self.records.iter().filter(move |r| r.kind == kind)
    }

    /// The objects of `kind` that exist when the recording starts (added at 0 ms), in
    /// trace order.
    pub fn initial(&self, kind: Kind) -> Vec<&str> {
        self.of(kind)
            .filter(|r| r.is_initial())
            .map(|r| r.app.as_str())
            .collect()
    }

    /// The records about objects of `kind` after their initial adds, in time order: what a
    /// replay does once the initial objects exist.
    pub fn changes_of(&self, kind: Kind) -> impl Iterator<Item = &Record> {
        self.of(kind).filter(|r| !r.is_initial())
    }

    /// The apps that exist when the recording starts (added at 0 ms), in trace order.
    pub fn initial_apps(&self) -> Vec<&str> {
        self.initial(Kind::Application)
    }

    /// Whether the trace has any record about objects of `kind`.
    pub fn has(&self, kind: Kind) -> bool {
        self.of(kind).next().is_some()
    }
}

/// A trace being replayed, `speed` times faster than recorded.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The trace.
    pub trace: std::sync::Arc<Trace>,
    /// How many times faster than recorded.
    pub speed: f64,
}

impl Replay {
    /// When a record at `at_ms` is due, from the replay's start.
    pub fn offset(&self, at_ms: u64) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(at_ms as f64 / 1000.0 / self.speed)
            .unwrap_or(std::time::Duration::MAX)
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
    fn rollouts_and_workflows_are_records_of_their_own_kind() {
        let mixed = format!(
            "{TRACE}{}",
            r#"{"at_ms":4000,"kind":"rollout","app":"shop/web","change":"added"}
{"at_ms":4000,"kind":"rollout","app":"shop/web","change":"phase","phase":"Healthy"}
{"at_ms":4500,"kind":"workflow","app":"argocd/a","change":"added"}
{"at_ms":5000,"kind":"rollout","app":"shop/web","change":"revision","revision":"5d8f"}
{"at_ms":6000,"kind":"workflow","app":"argocd/a","change":"phase","phase":"Succeeded"}
"#
        );
        let trace = Trace::parse(&mixed).unwrap();
        assert_eq!(trace.initial_apps(), ["argocd/a", "argocd/b"]);
        // As `orrery record` writes them: each initial Rollout's phase right after its add.
        let recorded = Trace::parse(
            r#"{"format":"orrery-workload-trace/1","duration_ms":1000,"hashed":false}
{"at_ms":0,"kind":"rollout","app":"shop/a","change":"added"}
{"at_ms":0,"kind":"rollout","app":"shop/a","change":"phase","phase":"Healthy"}
{"at_ms":0,"kind":"rollout","app":"shop/b","change":"added"}
{"at_ms":0,"kind":"rollout","app":"shop/b","change":"phase","phase":"Paused"}
"#,
        )
        .unwrap();
        assert_eq!(recorded.initial(Kind::Rollout), ["shop/a", "shop/b"]);
        assert_eq!(recorded.changes_of(Kind::Rollout).count(), 2);
        assert!(
            trace.initial(Kind::Rollout).is_empty(),
            "added at 4 s, not 0"
        );
        assert_eq!(trace.of(Kind::Workflow).count(), 2);
        assert!(trace.has(Kind::Rollout) && !Trace::parse(TRACE).unwrap().has(Kind::Rollout));
        // Applications keep their old lines: no kind written.
        let text = trace.to_text();
        assert!(text.contains("{\"at_ms\":0,\"app\":\"argocd/a\",\"change\":\"added\"}"));
        assert_eq!(Trace::parse(&text).unwrap(), trace);
        let error = |text: String| match Trace::parse(&text) {
            Err(TraceError::Line { line, message }) => (line, message),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            error(mixed.replace(
                "\"phase\",\"phase\":\"Succeeded",
                "\"revision\",\"revision\":\"x"
            )),
            (
                12,
                "kind Workflow has no \"revision\" change (argocd/a)".into()
            )
        );
        assert_eq!(
            error(format!("{TRACE}{{\"at_ms\":5000,\"app\":\"argocd/a\",\"change\":\"phase\",\"phase\":\"Running\"}}\n")),
            (8, "kind Application has no \"phase\" change (argocd/a)".into())
        );
        assert!(error(mixed.replace(
            "\"kind\":\"rollout\",\"app\":\"shop/web\",\"change\":\"added\"",
            "\"kind\":\"rollout\",\"app\":\"shop/api\",\"change\":\"added\""
        ))
        .1
        .contains("Rollout shop/web changes before it is added"));
        assert!(error(mixed.replace(
            "\"kind\":\"workflow\",\"app\":\"argocd/a\",\"change\":\"added",
            "\"kind\":\"gizmo\",\"app\":\"argocd/a\",\"change\":\"added"
        ))
        .1
        .contains("not a trace record"));
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
