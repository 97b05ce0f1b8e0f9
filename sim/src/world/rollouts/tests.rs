//! The Rollouts controller's logic over an in-memory world: the same pure reconcile and
//! measurement functions the controller runs, with ReplicaSet pods that become ready one
//! tick after a scale-up (never for a `CrashLoop` version) and the plugin's status patches
//! applied by hand.

use serde_json::{json, Value};

use super::analysis::{self, Verdict};
use super::model::*;
use super::reconcile::reconcile;

const T0: u64 = 1_767_225_600_000;

/// One Rollout and what it owns, advanced one second per tick.
struct Bench {
    rollout: Rollout,
    sets: Vec<ReplicaSet>,
    runs: Vec<(AnalysisRun, Value)>,
    verdict: Verdict,
    now_ms: u64,
    /// Every (phase, message) the status went through, without repeats.
    phases: Vec<(String, String)>,
}

impl Bench {
    fn new(spec: Value) -> Bench {
        let mut bench = Bench {
            rollout: Rollout {
                name: "web".into(),
                namespace: "shop".into(),
                uid: "uid-web".into(),
                generation: 1,
                spec: serde_json::from_value(spec).expect("a valid spec"),
                status: RolloutStatus::default(),
            },
            sets: Vec::new(),
            runs: Vec::new(),
            verdict: Verdict::Good,
            now_ms: T0,
            phases: Vec::new(),
        };
        bench.run_for(10);
        bench
    }

    fn tick(&mut self) {
        self.now_ms += 1000;
        // Pods: the ReplicaSet controller's part (ready one tick after a scale-up).
        for rs in &mut self.sets {
            let crashing = self.verdict == Verdict::CrashLoop
                && Some(&rs.hash) == self.rollout.status.current_pod_hash.as_ref()
                && Some(&rs.hash) != self.rollout.status.stable_rs.as_ref();
            rs.ready = if crashing {
                0
            } else {
                rs.status_replicas.min(rs.replicas)
            };
            rs.available = rs.ready;
            rs.status_replicas = rs.replicas;
        }
        for (run, status) in &mut self.runs {
            if let Some(next) = analysis::measure(status, run.terminate, self.verdict, self.now_ms)
            {
                run.phase = next["phase"].as_str().unwrap_or("").into();
                run.message = next["message"].as_str().map(str::to_string);
                *status = next;
            }
        }
        let runs: Vec<AnalysisRun> = self.runs.iter().map(|(r, _)| r.clone()).collect();
        let plan = reconcile(&self.rollout, &self.sets, &runs, self.now_ms);
        if let Some(new) = plan.create {
            self.sets.push(ReplicaSet {
                name: new.name,
                hash: new.hash,
                revision: new.revision,
                replicas: new.replicas,
                ..ReplicaSet::default()
            });
        }
        for (name, replicas) in plan.scale {
            self.set(&name).replicas = replicas;
        }
        for (name, deadline) in plan.deadlines {
            self.set(&name).scale_down_deadline = deadline;
        }
        for run in plan.runs {
            if !self.runs.iter().any(|(r, _)| r.name == run.name) {
                self.runs.push((
                    AnalysisRun {
                        name: run.name,
                        phase: "Pending".into(),
                        ..AnalysisRun::default()
                    },
                    Value::Null,
                ));
            }
        }
        for name in plan.terminate {
            if let Some((run, _)) = self.runs.iter_mut().find(|(r, _)| r.name == name) {
                run.terminate = true;
            }
        }
        self.rollout.status = plan.status;
        let now = (
            self.rollout.status.phase.clone().unwrap_or_default(),
            self.rollout.status.message.clone().unwrap_or_default(),
        );
        if self.phases.last() != Some(&now) {
            self.phases.push(now);
        }
    }

    fn run_for(&mut self, seconds: u64) {
        for _ in 0..seconds {
            self.tick();
        }
    }

    fn set(&mut self, name: &str) -> &mut ReplicaSet {
        self.sets
            .iter_mut()
            .find(|rs| rs.name == name)
            .expect("a known ReplicaSet")
    }

    fn deploy(&mut self, image: &str) {
        self.rollout.spec.template = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": image}]}});
        self.rollout.generation += 1;
    }

    fn phase(&self) -> (String, String) {
        self.phases.last().cloned().unwrap_or_default()
    }

    /// (spec replicas) of the current and of the stable ReplicaSet.
    fn split(&self) -> (i32, i32) {
        let of = |hash: &Option<String>| {
            self.sets
                .iter()
                .find(|rs| Some(&rs.hash) == hash.as_ref())
                .map_or(0, |rs| rs.replicas)
        };
        let st = &self.rollout.status;
        if st.current_pod_hash == st.stable_rs {
            (of(&st.current_pod_hash), 0)
        } else {
            (of(&st.current_pod_hash), of(&st.stable_rs))
        }
    }

    /// `kubectl argo rollouts promote`: the plugin's own status patch, merged in.
    fn promote(&mut self) {
        if let Some(patch) = super::plugin::status_patch(&self.rollout, false) {
            let mut status = serde_json::to_value(&self.rollout.status).expect("a status");
            crate::world::apiserver::store::merge_patch(&mut status, &patch);
            self.rollout.status = serde_json::from_value(status).expect("a status");
        }
    }
}

fn canary(steps: Value) -> Value {
    json!({
        "replicas": 5,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web:v1"}]}},
        "strategy": {"canary": {"steps": steps}},
    })
}

fn steps() -> Value {
    json!([{"setWeight": 20}, {"pause": {}}, {"setWeight": 60}, {"pause": {"duration": "10s"}}, {"analysis": {"templates": [{"templateName": "success-rate"}]}}])
}

#[test]
fn the_first_template_is_promoted_at_once_without_steps() {
    let bench = Bench::new(canary(steps()));
    let st = &bench.rollout.status;
    assert_eq!(bench.phase(), ("Healthy".into(), String::new()));
    assert_eq!(st.stable_rs, st.current_pod_hash);
    assert_eq!(st.current_step_index, Some(5));
    assert_eq!(bench.split(), (5, 0));
    assert_eq!(st.observed_generation.as_deref(), Some("1"));
    assert_eq!(
        bench.sets[0].name,
        format!("web-{}", st.stable_rs.clone().unwrap())
    );
    assert_eq!(bench.sets[0].revision, 1);
}

#[test]
fn a_canary_walks_its_steps_pauses_until_promoted_and_becomes_stable_after_analysis() {
    let mut bench = Bench::new(canary(steps()));
    let v1 = bench.rollout.status.stable_rs.clone();
    bench.deploy("web:v2");
    bench.run_for(5);
    // 20 % of 5 pods: one canary pod, then paused with no duration.
    assert_eq!(bench.phase(), ("Paused".into(), "CanaryPauseStep".into()));
    assert_eq!(bench.rollout.status.current_step_index, Some(1));
    assert_eq!(bench.split(), (1, 4));
    assert!(bench.rollout.status.controller_pause);
    bench.run_for(60);
    assert_eq!(
        bench.rollout.status.current_step_index,
        Some(1),
        "a pause without duration waits"
    );
    bench.promote();
    bench.run_for(6);
    // 60 %: three canary pods, then a 10 s pause.
    assert_eq!(bench.split(), (3, 2));
    assert_eq!(bench.rollout.status.current_step_index, Some(3));
    assert_eq!(bench.phase(), ("Paused".into(), "CanaryPauseStep".into()));
    bench.run_for(12);
    // The analysis step: one run named <rollout>-<hash>-<revision>-<step>.
    let hash = bench.rollout.status.current_pod_hash.clone().unwrap();
    assert_eq!(bench.runs.len(), 1);
    assert_eq!(bench.runs[0].0.name, format!("web-{hash}-2-4"));
    bench.run_for(40);
    let st = &bench.rollout.status;
    assert_eq!(bench.runs[0].0.phase, "Successful");
    assert_eq!(bench.phase(), ("Healthy".into(), String::new()));
    assert_eq!(st.stable_rs.as_deref(), Some(hash.as_str()));
    assert_ne!(st.stable_rs, v1);
    assert_eq!(st.current_step_index, Some(5));
    assert_eq!(bench.split(), (5, 0));
    assert!(bench
        .sets
        .iter()
        .filter(|rs| rs.hash != hash)
        .all(|rs| rs.replicas == 0));
    assert!(st.canary.current_step_analysis_run_status.is_none());
    // On the way: progressing between steps, paused at each pause.
    assert!(bench.phases.contains(&(
        "Progressing".into(),
        "more replicas need to be updated".into()
    )));
}

#[test]
fn a_failed_analysis_aborts_to_the_stable_and_retry_starts_the_steps_over() {
    let mut bench = Bench::new(canary(
        json!([{"setWeight": 40}, {"analysis": {"templates": [{"templateName": "success-rate"}]}}]),
    ));
    bench.verdict = Verdict::Bad;
    bench.deploy("web:v2");
    bench.run_for(20);
    let st = &bench.rollout.status;
    assert!(st.abort);
    assert_eq!(
        bench.phase(),
        (
            "Degraded".into(),
            "RolloutAborted: Rollout aborted update to revision 2: Metric \"success-rate\" assessed Failed due to failed (1) > failureLimit (0)".into()
        )
    );
    assert_eq!(st.current_step_index, Some(0));
    assert_eq!(
        bench.split(),
        (0, 5),
        "the canary is scaled away, the stable back to full"
    );
    // `kubectl argo rollouts retry rollout` with a healthy provider this time.
    bench.verdict = Verdict::Good;
    bench.rollout.status.abort = false;
    bench.run_for(60);
    assert_eq!(bench.phase(), ("Healthy".into(), String::new()));
    assert_eq!(
        bench.rollout.status.stable_rs,
        bench.rollout.status.current_pod_hash
    );
    // The failed run stays; the retry's run has upstream's collision suffix.
    let hash = bench.rollout.status.current_pod_hash.clone().unwrap();
    let phases: Vec<(String, String)> = bench
        .runs
        .iter()
        .map(|(r, _)| (r.name.clone(), r.phase.clone()))
        .collect();
    assert_eq!(
        phases,
        [
            (format!("web-{hash}-2-1"), "Failed".to_string()),
            (format!("web-{hash}-2-1.1"), "Successful".to_string())
        ]
    );
}

#[test]
fn an_inconclusive_analysis_pauses_and_promote_skips_the_step() {
    let mut bench = Bench::new(canary(
        json!([{"setWeight": 40}, {"analysis": {"templates": [{"templateName": "success-rate"}]}}, {"setWeight": 80}]),
    ));
    bench.verdict = Verdict::Unsure;
    bench.deploy("web:v2");
    bench.run_for(15);
    assert_eq!(
        bench.phase(),
        ("Paused".into(), "InconclusiveAnalysisRun".into())
    );
    assert_eq!(bench.rollout.status.current_step_index, Some(1));
    bench.promote();
    bench.run_for(20);
    assert_eq!(bench.phase(), ("Healthy".into(), String::new()));
}

#[test]
fn a_manual_abort_degrades_and_keeps_the_stable_serving() {
    let mut bench = Bench::new(canary(steps()));
    bench.deploy("web:v2");
    bench.run_for(5);
    bench.rollout.status.abort = true; // `kubectl argo rollouts abort`
    bench.run_for(10);
    assert_eq!(
        bench.phase(),
        (
            "Degraded".into(),
            "RolloutAborted: Rollout aborted update to revision 2".into()
        )
    );
    assert_eq!(bench.split(), (0, 5));
    assert!(bench.rollout.status.aborted_at.is_some());
}

#[test]
fn pods_that_never_become_ready_exceed_the_progress_deadline() {
    let mut spec = canary(json!([{"setWeight": 40}, {"pause": {"duration": 5}}]));
    spec["progressDeadlineSeconds"] = json!(30);
    let mut bench = Bench::new(spec);
    bench.verdict = Verdict::CrashLoop;
    bench.deploy("web:v2");
    bench.run_for(20);
    assert_eq!(bench.phase().0, "Progressing");
    bench.run_for(20);
    let (phase, message) = bench.phase();
    assert_eq!(phase, "Degraded");
    let hash = bench.rollout.status.current_pod_hash.clone().unwrap();
    assert_eq!(
        message,
        format!("ProgressDeadlineExceeded: ReplicaSet \"web-{hash}\" has timed out progressing.")
    );
}

fn blue_green(extra: Value) -> Value {
    let mut strategy = json!({"activeService": "web-active", "previewService": "web-preview"});
    for (k, v) in extra.as_object().into_iter().flatten() {
        strategy[k] = v.clone();
    }
    json!({
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web:v1"}]}},
        "strategy": {"blueGreen": strategy},
    })
}

#[test]
fn blue_green_previews_pauses_until_promoted_then_switches_and_scales_the_old_down_later() {
    let mut bench = Bench::new(blue_green(json!({"autoPromotionEnabled": false})));
    let v1 = bench.rollout.status.stable_rs.clone().unwrap();
    assert_eq!(
        bench.rollout.status.blue_green.active_selector.as_deref(),
        Some(v1.as_str())
    );
    bench.deploy("web:v2");
    bench.run_for(5);
    let v2 = bench.rollout.status.current_pod_hash.clone().unwrap();
    let st = &bench.rollout.status;
    assert_eq!(bench.phase(), ("Paused".into(), "BlueGreenPause".into()));
    assert_eq!(st.blue_green.preview_selector.as_deref(), Some(v2.as_str()));
    assert_eq!(st.blue_green.active_selector.as_deref(), Some(v1.as_str()));
    assert_eq!(
        bench.split(),
        (3, 3),
        "the preview runs at full size next to the active"
    );
    assert_eq!(
        st.selector.as_deref(),
        Some(format!("app=web,rollouts-pod-template-hash={v1}").as_str())
    );
    bench.run_for(60);
    assert_eq!(bench.phase().0, "Paused", "no auto-promotion");
    bench.promote();
    bench.run_for(3);
    let st = &bench.rollout.status;
    assert_eq!(st.blue_green.active_selector.as_deref(), Some(v2.as_str()));
    assert_eq!(st.stable_rs.as_deref(), Some(v2.as_str()));
    assert_eq!(bench.phase(), ("Healthy".into(), String::new()));
    let old = bench.sets.iter().find(|rs| rs.hash == v1).unwrap();
    assert_eq!(
        old.replicas, 3,
        "the old one stays up for scaleDownDelaySeconds"
    );
    assert!(old.scale_down_deadline.is_some());
    bench.run_for(31);
    let old = bench.sets.iter().find(|rs| rs.hash == v1).unwrap();
    assert_eq!(old.replicas, 0);
}

#[test]
fn blue_green_with_a_failing_pre_promotion_analysis_never_switches() {
    let mut bench = Bench::new(blue_green(
        json!({"prePromotionAnalysis": {"templates": [{"templateName": "success-rate"}]}}),
    ));
    let v1 = bench.rollout.status.stable_rs.clone().unwrap();
    bench.verdict = Verdict::Bad;
    bench.deploy("web:v2");
    bench.run_for(10);
    let st = &bench.rollout.status;
    assert!(st.abort);
    assert_eq!(st.blue_green.active_selector.as_deref(), Some(v1.as_str()));
    assert_eq!(bench.phase().0, "Degraded");
    let run = &bench.runs[0].0;
    assert!(run.name.ends_with("-2-pre"), "{}", run.name);
    // The preview is scaled down after abortScaleDownDelaySeconds.
    bench.run_for(35);
    let hash = bench.rollout.status.current_pod_hash.clone().unwrap();
    assert_eq!(
        bench
            .sets
            .iter()
            .find(|rs| rs.hash == hash)
            .unwrap()
            .replicas,
        0
    );
}

#[test]
fn promote_full_lifts_an_abort_and_promotes_a_canary() {
    let mut bench = Bench::new(canary(steps()));
    bench.deploy("web:v2");
    bench.run_for(5);
    bench.rollout.status.abort = true;
    bench.run_for(5);
    assert_eq!(bench.phase().0, "Degraded");
    bench.rollout.status.promote_full = true; // `promote --full`
    bench.run_for(15);
    assert_eq!(bench.phase(), ("Healthy".into(), String::new()));
    assert_eq!(
        bench.rollout.status.stable_rs,
        bench.rollout.status.current_pod_hash
    );
    assert!(!bench.rollout.status.abort);
}

#[test]
fn an_abort_during_a_pause_clears_it_and_a_retry_walks_the_steps_again() {
    let mut bench = Bench::new(canary(
        json!([{"setWeight": 20}, {"analysis": {"templates": [{"templateName": "success-rate"}]}}, {"pause": {}}]),
    ));
    bench.deploy("web:v2");
    bench.run_for(40);
    assert_eq!(bench.phase(), ("Paused".into(), "CanaryPauseStep".into()));
    bench.rollout.status.abort = true;
    bench.run_for(5);
    assert!(bench.rollout.status.pause_conditions.is_empty());
    assert!(!bench.rollout.status.controller_pause);
    bench.rollout.status.abort = false; // `retry`
    bench.run_for(40);
    // Back at the pause after a fresh analysis run (`.1`), not stuck before it.
    assert_eq!(bench.phase(), ("Paused".into(), "CanaryPauseStep".into()));
    assert_eq!(bench.rollout.status.current_step_index, Some(2));
    assert!(bench
        .runs
        .iter()
        .any(|(r, _)| r.name.ends_with("-1.1") && r.phase == "Successful"));
}

#[test]
fn a_rollout_whose_stable_replica_set_is_gone_promotes_the_current_one() {
    let mut bench = Bench::new(canary(steps()));
    bench.deploy("web:v2");
    bench.run_for(3);
    let stable = bench.rollout.status.stable_rs.clone().unwrap();
    bench.sets.retain(|rs| rs.hash != stable); // deleted by hand
    bench.run_for(10);
    assert_eq!(bench.phase(), ("Healthy".into(), String::new()));
    assert_eq!(
        bench.rollout.status.stable_rs,
        bench.rollout.status.current_pod_hash
    );
}

#[test]
fn blue_green_promote_full_skips_the_pause_and_an_inconclusive_analysis_runs_again_when_promoted() {
    let mut bench = Bench::new(blue_green(json!({"autoPromotionEnabled": false})));
    bench.deploy("web:v2");
    bench.run_for(5);
    assert_eq!(bench.phase().1, "BlueGreenPause");
    bench.rollout.status.promote_full = true;
    bench.run_for(3);
    assert_eq!(bench.phase(), ("Healthy".into(), String::new()));

    let mut bench = Bench::new(blue_green(
        json!({"prePromotionAnalysis": {"templates": [{"templateName": "success-rate"}]}}),
    ));
    bench.verdict = Verdict::Unsure;
    bench.deploy("web:v2");
    bench.run_for(5);
    assert_eq!(
        bench.phase(),
        ("Paused".into(), "InconclusiveAnalysisRun".into())
    );
    bench.verdict = Verdict::Good;
    bench.promote();
    bench.run_for(40);
    assert_eq!(bench.phase(), ("Healthy".into(), String::new()));
    let names: Vec<&str> = bench.runs.iter().map(|(r, _)| r.name.as_str()).collect();
    assert!(names.iter().any(|n| n.ends_with("-pre.1")), "{names:?}");
}
