//! AnalysisRuns: what the stand-in creates for a step or promotion, and how it measures
//! and assesses one (argo-rollouts v1.8 `analysis/analysis.go`: `assessMetricStatus`,
//! `assessRunStatus`). The metric provider is the world's [`Verdicts`]: what a real run
//! would read from Prometheus, the workload decides per Rollout and template hash.
//!
//! *Simplified*: AnalysisTemplates are not objects here — every step's or promotion's
//! analysis runs one metric, `success-rate`, measured every [`INTERVAL_SECONDS`] up to
//! [`COUNT`] times with `failureLimit` and `inconclusiveLimit` 0 and
//! `consecutiveErrorLimit` 4 (upstream's default).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use orrery_system::core::time::{parse_rfc3339, rfc3339};

/// Seconds between two measurements.
pub const INTERVAL_SECONDS: u64 = 10;
/// Measurements of a successful run.
pub const COUNT: u64 = 3;
/// Upstream's default `consecutiveErrorLimit`.
pub const CONSECUTIVE_ERROR_LIMIT: u64 = 4;
/// The metric's name.
pub const METRIC: &str = "success-rate";

/// What measuring a version's success rate gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Verdict {
    /// 0.99: above `successCondition`.
    #[default]
    Good,
    /// 0.50: below `failureCondition`.
    Bad,
    /// 0.92: between the two conditions.
    Unsure,
    /// The provider does not answer (an `Error` measurement).
    Unreachable,
    /// The version's pods never become ready (no measurement reaches them: the
    /// ReplicaSet controller reads this too).
    CrashLoop,
}

/// The metric provider of the simulated world: the verdict for each (`namespace/rollout`,
/// pod-template hash), set by the workload when it deploys a version. Absent: `Good`.
#[derive(Clone, Debug, Default)]
pub struct Verdicts(Arc<Mutex<BTreeMap<(String, String), Verdict>>>);

impl Verdicts {
    /// The provider will answer `verdict` for this version of `rollout` (`namespace/name`).
    pub fn set(&self, rollout: &str, hash: &str, verdict: Verdict) {
        self.0
            .lock()
            .expect("verdicts lock poisoned")
            .insert((rollout.to_string(), hash.to_string()), verdict);
    }

    /// The verdict for this version of `rollout`.
    pub fn get(&self, rollout: &str, hash: &str) -> Verdict {
        self.0
            .lock()
            .expect("verdicts lock poisoned")
            .get(&(rollout.to_string(), hash.to_string()))
            .copied()
            .unwrap_or_default()
    }
}

/// The `spec` of a new AnalysisRun: the step's analysis (templates, args) kept as given,
/// and the one metric the stand-in measures.
pub fn run_spec(analysis: &Value) -> Value {
    json!({
        "args": analysis.get("args").cloned().unwrap_or(json!([])),
        "metrics": [{
            "name": METRIC,
            "interval": format!("{INTERVAL_SECONDS}s"),
            "count": COUNT,
            "failureLimit": 0,
            "inconclusiveLimit": 0,
            "consecutiveErrorLimit": CONSECUTIVE_ERROR_LIMIT,
            "successCondition": "result[0] >= 0.95",
            "failureCondition": "result[0] < 0.90",
            "provider": {"prometheus": {"address": "http://prometheus.monitoring:9090", "query": "sum(rate(http_requests_total{code!~\"5..\"}[1m])) / sum(rate(http_requests_total[1m]))"}},
        }],
    })
}

/// One metric's running tally (`status.metricResults[0]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Tally {
    count: u64,
    successful: u64,
    failed: u64,
    inconclusive: u64,
    error: u64,
    consecutive_error: u64,
}

impl Tally {
    fn of(result: Option<&Value>) -> Tally {
        let n = |k: &str| result.and_then(|r| r[k].as_u64()).unwrap_or(0);
        Tally {
            count: n("count"),
            successful: n("successful"),
            failed: n("failed"),
            inconclusive: n("inconclusive"),
            error: n("error"),
            consecutive_error: n("consecutiveError"),
        }
    }

    /// `assessMetricStatus` with this stand-in's limits: (phase, message).
    fn assess(&self) -> (&'static str, Option<String>) {
        let why = |phase: &str, reason: String| {
            Some(format!(
                "Metric \"{METRIC}\" assessed {phase} due to {reason}"
            ))
        };
        if self.failed > 0 {
            (
                "Failed",
                why(
                    "Failed",
                    format!("failed ({}) > failureLimit (0)", self.failed),
                ),
            )
        } else if self.inconclusive > 0 {
            (
                "Inconclusive",
                why(
                    "Inconclusive",
                    format!(
                        "inconclusive ({}) > inconclusiveLimit (0)",
                        self.inconclusive
                    ),
                ),
            )
        } else if self.consecutive_error > CONSECUTIVE_ERROR_LIMIT {
            (
                "Error",
                why(
                    "Error",
                    format!(
                        "consecutiveErrors ({}) > consecutiveErrorLimit ({CONSECUTIVE_ERROR_LIMIT})",
                        self.consecutive_error
                    ),
                ),
            )
        } else if self.successful >= COUNT {
            ("Successful", None)
        } else {
            ("Running", None)
        }
    }
}

/// The next `status` of an AnalysisRun at `now_ms`, or `None` when nothing is due: a
/// measurement every interval while it runs, then the assessed phase; a terminated run
/// ends with the phase reached so far (`Successful` if nothing failed) and "Run
/// Terminated". `status` is the run's current status (`null` for a new run).
pub fn measure(status: &Value, terminate: bool, verdict: Verdict, now_ms: u64) -> Option<Value> {
    let phase = status["phase"].as_str().unwrap_or("Pending");
    if matches!(phase, "Successful" | "Failed" | "Error" | "Inconclusive") {
        return None;
    }
    let now = rfc3339(now_ms);
    let result = status["metricResults"].get(0);
    let mut tally = Tally::of(result);
    let mut measurements: Vec<Value> = result
        .and_then(|r| r["measurements"].as_array())
        .cloned()
        .unwrap_or_default();
    let started = status["startedAt"].as_str().unwrap_or(&now).to_string();
    if terminate {
        let (assessed, _) = tally.assess();
        let phase = if assessed == "Running" {
            "Successful"
        } else {
            assessed
        };
        return Some(status_json(
            phase,
            Some("Run Terminated".into()),
            &started,
            &tally,
            measurements,
            Some(&now),
        ));
    }
    let last = measurements
        .last()
        .and_then(|m| m["finishedAt"].as_str())
        .and_then(parse_rfc3339);
    if last.is_some_and(|at| now_ms < at + INTERVAL_SECONDS * 1000) {
        return None;
    }
    let (outcome, value) = match verdict {
        Verdict::Good => ("Successful", Some("0.99")),
        Verdict::Bad => ("Failed", Some("0.50")),
        Verdict::Unsure => ("Inconclusive", Some("0.92")),
        // Nothing to measure: no pods serve this version, or the provider is down.
        Verdict::Unreachable | Verdict::CrashLoop => ("Error", None),
    };
    tally.count += 1;
    match outcome {
        "Successful" => tally.successful += 1,
        "Failed" => tally.failed += 1,
        "Inconclusive" => tally.inconclusive += 1,
        _ => tally.error += 1,
    }
    tally.consecutive_error = if outcome == "Error" {
        tally.consecutive_error + 1
    } else {
        0
    };
    let mut measurement = json!({"phase": outcome, "startedAt": now, "finishedAt": now});
    match value {
        Some(v) => measurement["value"] = json!(format!("[{v}]")),
        None => measurement["message"] = json!("Post \"http://prometheus.monitoring:9090/api/v1/query\": dial tcp: connect: connection refused"),
    }
    measurements.push(measurement);
    // Upstream keeps the last 10 measurements per metric.
    let excess = measurements.len().saturating_sub(10);
    measurements.drain(..excess);
    let (phase, message) = tally.assess();
    let completed = (phase != "Running").then_some(now.as_str());
    Some(status_json(
        phase,
        message,
        &started,
        &tally,
        measurements,
        completed,
    ))
}

fn status_json(
    phase: &str,
    message: Option<String>,
    started: &str,
    tally: &Tally,
    measurements: Vec<Value>,
    completed: Option<&str>,
) -> Value {
    let mut status = json!({
        "phase": phase,
        "startedAt": started,
        "metricResults": [{
            "name": METRIC,
            "phase": phase,
            "measurements": measurements,
            "count": tally.count,
            "successful": tally.successful,
            "failed": tally.failed,
            "inconclusive": tally.inconclusive,
            "error": tally.error,
            "consecutiveError": tally.consecutive_error,
        }],
        "runSummary": {
            "count": 1,
            "successful": u64::from(phase == "Successful"),
            "failed": u64::from(phase == "Failed"),
            "inconclusive": u64::from(phase == "Inconclusive"),
            "error": u64::from(phase == "Error"),
        },
    });
    if let Some(message) = message {
        status["message"] = json!(message);
        status["metricResults"][0]["message"] = json!(message);
    }
    if let Some(at) = completed {
        status["completedAt"] = json!(at);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_767_225_600_000;

    fn run(verdict: Verdict, steps: u64) -> Value {
        let mut status = Value::Null;
        for i in 0..steps {
            if let Some(next) = measure(&status, false, verdict, T0 + i * INTERVAL_SECONDS * 1000) {
                status = next;
            }
        }
        status
    }

    #[test]
    fn a_good_version_succeeds_after_three_measurements() {
        let status = run(Verdict::Good, 2);
        assert_eq!(status["phase"], "Running");
        let status = run(Verdict::Good, 3);
        assert_eq!(status["phase"], "Successful");
        assert_eq!(status["metricResults"][0]["successful"], 3);
        // Nothing more is measured once it ended.
        assert_eq!(measure(&status, false, Verdict::Bad, T0 + 60_000), None);
    }

    #[test]
    fn a_bad_version_fails_at_once_with_upstreams_message() {
        let status = run(Verdict::Bad, 1);
        assert_eq!(status["phase"], "Failed");
        assert_eq!(
            status["message"],
            "Metric \"success-rate\" assessed Failed due to failed (1) > failureLimit (0)"
        );
    }

    #[test]
    fn an_unsure_version_is_inconclusive_and_an_unreachable_provider_errors_after_five() {
        assert_eq!(run(Verdict::Unsure, 1)["phase"], "Inconclusive");
        assert_eq!(run(Verdict::Unreachable, 4)["phase"], "Running");
        let status = run(Verdict::Unreachable, 5);
        assert_eq!(status["phase"], "Error");
        assert_eq!(status["metricResults"][0]["consecutiveError"], 5);
    }

    #[test]
    fn measurements_wait_for_the_interval_and_terminate_ends_the_run() {
        let first = run(Verdict::Good, 1);
        assert_eq!(measure(&first, false, Verdict::Good, T0 + 5_000), None);
        let ended = measure(&first, true, Verdict::Good, T0 + 5_000).expect("terminated");
        assert_eq!(ended["phase"], "Successful");
        assert_eq!(ended["message"], "Run Terminated");
    }
}
