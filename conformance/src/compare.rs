//! Step-by-step comparison of two normalised transcripts under the known-deviation list
//! (`conformance/deviations.yaml`).

use serde::Deserialize;

use crate::normalise::NormalisedStep;

/// One accepted difference between the real and the simulated API server.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Deviation {
    /// Script name.
    pub script: String,
    /// Steps (0-based) allowed to differ; empty means every step.
    #[serde(default)]
    pub steps: Vec<usize>,
    /// Why the simulator differs here, and why that is acceptable.
    pub reason: String,
}

/// Why the deviation list could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DeviationError {
    /// The file is missing or unreadable.
    #[error("{path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The YAML is invalid (the parser names line and column).
    #[error("{path}: {source}")]
    Parse {
        /// File path.
        path: String,
        /// The parse error.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// An entry names a script that does not exist.
    #[error("{path}: deviation for unknown script {script:?}")]
    UnknownScript {
        /// File path.
        path: String,
        /// The script name.
        script: String,
    },
}

/// Reads and checks the deviation list against the known script names.
pub fn load_deviations(scripts: &[&str]) -> Result<Vec<Deviation>, DeviationError> {
    let path = crate::repo_root().join("conformance/deviations.yaml");
    let display = "conformance/deviations.yaml".to_string();
    let text = std::fs::read_to_string(&path).map_err(|source| DeviationError::Read {
        path: display.clone(),
        source,
    })?;
    let list: Vec<Deviation> = serde_saphyr::from_str::<Option<Vec<Deviation>>>(&text)
        .map_err(|source| DeviationError::Parse {
            path: display.clone(),
            source: Box::new(source),
        })?
        .unwrap_or_default();
    if let Some(bad) = list.iter().find(|d| !scripts.contains(&d.script.as_str())) {
        return Err(DeviationError::UnknownScript {
            path: display,
            script: bad.script.clone(),
        });
    }
    Ok(list)
}

/// The outcome of comparing one script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every step matched.
    Identical,
    /// Only listed steps differ.
    KnownDeviation {
        /// The differing steps.
        steps: Vec<usize>,
    },
    /// Unlisted differences: a fidelity bug (or a deviation to list with its reason).
    Different {
        /// The differing steps with a readable diff of each.
        diffs: Vec<(usize, String)>,
    },
    /// A listed deviation no longer occurs: remove it from the list.
    StaleDeviation {
        /// Listed steps that now match.
        steps: Vec<usize>,
    },
}

impl Verdict {
    /// Whether the suite passes with this verdict.
    pub fn ok(&self) -> bool {
        matches!(self, Verdict::Identical | Verdict::KnownDeviation { .. })
    }

    /// A short label for reports.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Identical => "identical",
            Verdict::KnownDeviation { .. } => "known deviation",
            Verdict::Different { .. } => "DIFFERENT",
            Verdict::StaleDeviation { .. } => "STALE DEVIATION",
        }
    }
}

fn diff(expected: &str, actual: &str) -> String {
    // A longest-common-subsequence line diff: transcripts are short, so O(n·m) is fine.
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("  simulated | {}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("  real      | {}\n", a[i]));
            i += 1;
        }
    }
    out
}

/// Compares `simulated` against `real` for `script`.
pub fn compare(
    script: &str,
    real: &[NormalisedStep],
    simulated: &[NormalisedStep],
    deviations: &[Deviation],
) -> Verdict {
    let listed = |step: usize| {
        deviations
            .iter()
            .any(|d| d.script == script && (d.steps.is_empty() || d.steps.contains(&step)))
    };
    let whole_script_listed = deviations
        .iter()
        .any(|d| d.script == script && d.steps.is_empty());
    let mut known = Vec::new();
    let mut diffs = Vec::new();
    let empty = NormalisedStep {
        request: "<missing step>".into(),
        text: String::new(),
    };
    for step in 0..real.len().max(simulated.len()) {
        let r = real.get(step).unwrap_or(&empty);
        let s = simulated.get(step).unwrap_or(&empty);
        if r == s {
            continue;
        }
        if listed(step) {
            known.push(step);
        } else {
            let header = if r.request != s.request {
                format!("  request: {} vs {}\n", r.request, s.request)
            } else {
                format!("  {}\n", r.request)
            };
            diffs.push((step, header + &diff(&r.text, &s.text)));
        }
    }
    if !diffs.is_empty() {
        return Verdict::Different { diffs };
    }
    let stale: Vec<usize> = deviations
        .iter()
        .filter(|d| d.script == script)
        .flat_map(|d| d.steps.iter().copied())
        .filter(|s| !known.contains(s))
        .collect();
    if !stale.is_empty() || (whole_script_listed && known.is_empty()) {
        return Verdict::StaleDeviation { steps: stale };
    }
    if known.is_empty() {
        Verdict::Identical
    } else {
        Verdict::KnownDeviation { steps: known }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(text: &str) -> NormalisedStep {
        NormalisedStep {
            request: "GET /x".into(),
            text: text.into(),
        }
    }

    fn deviation(steps: Vec<usize>) -> Deviation {
        Deviation {
            script: "s".into(),
            steps,
            reason: "r".into(),
        }
    }

    #[test]
    fn unlisted_differences_fail_listed_ones_pass_and_stale_ones_fail() {
        let real = [step("a\n"), step("b\n")];
        let sim = [step("a\n"), step("c\n")];
        assert!(matches!(
            compare("s", &real, &sim, &[]),
            Verdict::Different { .. }
        ));
        assert_eq!(
            compare("s", &real, &sim, &[deviation(vec![1])]),
            Verdict::KnownDeviation { steps: vec![1] }
        );
        assert_eq!(
            compare("s", &real, &real, &[deviation(vec![1])]),
            Verdict::StaleDeviation { steps: vec![1] }
        );
        assert_eq!(compare("s", &real, &real, &[]), Verdict::Identical);
    }

    #[test]
    fn a_diff_shows_both_sides_of_each_differing_line() {
        let real = [step("status: 409\n")];
        let sim = [step("status: 422\n")];
        let Verdict::Different { diffs } = compare("s", &real, &sim, &[]) else {
            panic!("expected a difference")
        };
        assert!(
            diffs[0].1.contains("real      | status: 409")
                && diffs[0].1.contains("simulated | status: 422"),
            "{}",
            diffs[0].1
        );
    }
}
