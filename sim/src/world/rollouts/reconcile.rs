//! One reconcile of one Rollout, as a pure function: from the Rollout, the ReplicaSets and
//! AnalysisRuns it owns and the time, the writes the controller makes next — ReplicaSets
//! to create or scale, AnalysisRuns to create or terminate, and the new status. Follows
//! argo-rollouts v1.8 (`rollout/canary.go`, `bluegreen.go`, `analysis.go`, `pause.go`,
//! `sync.go`, `utils/rollout/rolloututil.go`); simplifications are marked *simplified*.
//!
//! Each reconcile takes at most one step forward (a step completes, then the next
//! reconcile acts on the next one), as the real controller re-queues after a change.

use serde_json::Value;

use super::canary::{self, Counts};
use super::model::*;
use orrery_system::core::time::{parse_rfc3339, rfc3339};

/// Default `progressDeadlineSeconds`.
pub const PROGRESS_DEADLINE_SECONDS: i64 = 600;
/// Default blue-green `scaleDownDelaySeconds` and `abortScaleDownDelaySeconds`.
pub const SCALE_DOWN_DELAY_SECONDS: i64 = 30;

/// A ReplicaSet to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewReplicaSet {
    /// `<rollout>-<hash>`.
    pub name: String,
    /// Pod-template hash.
    pub hash: String,
    /// Revision (max of the others + 1).
    pub revision: u64,
    /// Initial `spec.replicas`.
    pub replicas: i32,
}

/// Which analysis an AnalysisRun is for (its `rollout-type` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    /// A canary step's analysis (`Step`, with `step-index`).
    Step(i32),
    /// Blue-green pre-promotion (`PrePromotion`, name suffix `pre`).
    PrePromotion,
    /// Blue-green post-promotion (`PostPromotion`, name suffix `post`).
    PostPromotion,
}

/// An AnalysisRun to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRun {
    /// `<rollout>-<hash>-<revision>-<step index | pre | post>`.
    pub name: String,
    /// Pod-template hash it analyses.
    pub hash: String,
    /// Why it runs.
    pub kind: RunKind,
    /// The step's or promotion's `analysis` (templates, args), kept on the run.
    pub analysis: Value,
}

/// The writes of one reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The ReplicaSet of the current template, if it does not exist yet.
    pub create: Option<NewReplicaSet>,
    /// `spec.replicas` changes of existing ReplicaSets, by name.
    pub scale: Vec<(String, i32)>,
    /// `scale-down-deadline` annotations to set (`Some`) or remove (`None`), by name.
    pub deadlines: Vec<(String, Option<String>)>,
    /// AnalysisRuns to create.
    pub runs: Vec<NewRun>,
    /// AnalysisRuns to stop (`spec.terminate: true`).
    pub terminate: Vec<String>,
    /// The status to write.
    pub status: RolloutStatus,
}

/// What the reconcile sees of one ReplicaSet: its counts, or zero for one being created.
fn counts(rs: Option<&ReplicaSet>) -> Counts {
    rs.map_or(Counts::default(), |rs| Counts {
        spec: rs.replicas,
        available: rs.available,
    })
}

/// The weight of the canary at step `index` (the last `setWeight` at or before it).
fn weight_at(steps: &[Step], index: usize) -> i32 {
    steps[..index.min(steps.len())]
        .iter()
        .chain(steps.get(index))
        .filter_map(|s| s.set_weight)
        .next_back()
        .unwrap_or(0)
        .clamp(0, 100)
}

/// Reconciles `rollout` at `now_ms` given the ReplicaSets and AnalysisRuns it owns.
pub fn reconcile(
    rollout: &Rollout,
    replica_sets: &[ReplicaSet],
    runs: &[AnalysisRun],
    now_ms: u64,
) -> Plan {
    reconcile_hashed(rollout, &Hashes::of(rollout), replica_sets, runs, now_ms)
}

/// The hashes a reconcile compares, worked out once per version of a Rollout: the
/// controller reconciles every Rollout every tick, and hashing the pod template each time
/// was a tenth of a rollout-storm seed.
#[derive(Clone, Debug)]
pub struct Hashes {
    /// `pod_template_hash` of `spec.template`.
    pub template: String,
    /// `pod_template_hash` of the canary steps (`currentStepHash`).
    pub steps: String,
}

impl Hashes {
    /// `rollout`'s hashes.
    pub fn of(rollout: &Rollout) -> Hashes {
        let steps: &[Step] = rollout
            .spec
            .strategy
            .canary
            .as_ref()
            .map_or(&[], |c| c.steps.as_slice());
        Hashes {
            template: pod_template_hash(&rollout.spec.template, None),
            steps: pod_template_hash(&serde_json::to_value(steps).unwrap_or(Value::Null), None),
        }
    }
}

/// [`reconcile`] with `rollout`'s [`Hashes`] already worked out.
pub fn reconcile_hashed(
    rollout: &Rollout,
    hashes: &Hashes,
    replica_sets: &[ReplicaSet],
    runs: &[AnalysisRun],
    now_ms: u64,
) -> Plan {
    let spec = &rollout.spec;
    let now = rfc3339(now_ms);
    let hash = hashes.template.clone();
    let steps_hash = hashes.steps.clone();
    let steps: &[Step] = spec
        .strategy
        .canary
        .as_ref()
        .map_or(&[], |c| c.steps.as_slice());
    let mut plan = Plan {
        status: rollout.status.clone(),
        ..Plan::default()
    };
    let st = &mut plan.status;
    st.observed_generation = Some(rollout.generation.to_string());

    // The ReplicaSet of the current template (created at 0 and scaled below).
    let revision = replica_sets
        .iter()
        .find(|rs| rs.hash == hash)
        .map(|rs| rs.revision)
        .unwrap_or_else(|| {
            replica_sets
                .iter()
                .map(|rs| rs.revision)
                .max()
                .unwrap_or(0)
                .saturating_add(1)
        });
    let name = format!("{}-{hash}", rollout.name);
    let new_rs = replica_sets.iter().find(|rs| rs.hash == hash);
    if new_rs.is_none() {
        plan.create = Some(NewReplicaSet {
            name: name.clone(),
            hash: hash.clone(),
            revision,
            replicas: 0,
        });
    }

    // A new template or new steps start the update over (`resetRolloutStatus`).
    let canary_steps_changed =
        spec.strategy.canary.is_some() && st.current_step_hash.as_deref() != Some(&steps_hash);
    if st.current_pod_hash.as_deref() != Some(&hash) || canary_steps_changed {
        if st.current_pod_hash.is_some() {
            st.current_step_index = spec.strategy.canary.as_ref().map(|_| 0);
            st.pause_conditions.clear();
            st.controller_pause = false;
            st.abort = false;
            st.aborted_at = None;
            st.promote_full = false;
            st.canary = CanaryStatus::default();
            st.blue_green.pre_promotion_analysis_run_status = None;
            st.blue_green.post_promotion_analysis_run_status = None;
        }
        st.current_pod_hash = Some(hash.clone());
        if spec.strategy.canary.is_some() {
            st.current_step_hash = Some(steps_hash);
        }
    }
    // `promote --full` of an aborted rollout lifts the abort and promotes.
    if st.promote_full && st.abort {
        st.abort = false;
    }
    // `retry`: the abort was lifted; the update starts over with fresh AnalysisRuns (the
    // failed ones stay, so the new ones get a collision suffix, `<name>.1`).
    if !st.abort && st.aborted_at.is_some() {
        st.aborted_at = None;
        st.canary.current_step_analysis_run_status = None;
        st.blue_green.pre_promotion_analysis_run_status = None;
        st.blue_green.post_promotion_analysis_run_status = None;
        if spec.strategy.canary.is_some() {
            st.current_step_index = Some(0);
        }
    }
    // The first template ever deployed is promoted at once ("Initial deploy"), and so is
    // the current one when the stable ReplicaSet is gone (upstream's `shouldFullPromote`
    // with no stable ReplicaSet). The controller reconciles only once its ReplicaSet
    // reflector has listed, so "gone" is not "not listed yet".
    let stable_gone = st
        .stable_rs
        .as_ref()
        .is_some_and(|stable| *stable != hash && !replica_sets.iter().any(|rs| &rs.hash == stable));
    if st.stable_rs.is_none() || stable_gone {
        st.stable_rs = Some(hash.clone());
        st.current_step_index = spec.strategy.canary.as_ref().map(|_| steps.len() as i32);
    }
    let stable_hash = st.stable_rs.clone().unwrap_or_default();
    let stable_rs = replica_sets
        .iter()
        .find(|rs| rs.hash == stable_hash && stable_hash != hash);
    let old: Vec<&ReplicaSet> = replica_sets
        .iter()
        .filter(|rs| rs.hash != hash && rs.hash != stable_hash)
        .collect();
    let mut abort_message = None;

    if let Some(blue_green) = spec.strategy.blue_green.clone() {
        // Promoted by a user while the controller paused (the condition was removed).
        let promoted = plan.status.controller_pause && plan.status.pause_conditions.is_empty();
        // The blue-green AnalysisRuns' results first: a failed one aborts this reconcile.
        blue_green_runs(&mut plan, runs, &mut abort_message, &now, promoted);
        blue_green_step(
            &mut plan,
            &blue_green,
            promoted,
            rollout,
            (&hash, &name, revision),
            new_rs,
            stable_rs,
            &old,
            runs,
            (now_ms, &now),
        );
    } else {
        let canary = spec.strategy.canary.clone().unwrap_or_default();
        canary_step(
            &mut plan,
            &canary,
            rollout,
            (&hash, &name, revision),
            new_rs,
            stable_rs,
            &old,
            runs,
            &now,
            &mut abort_message,
        );
    }
    finish_status(
        &mut plan,
        rollout,
        replica_sets,
        &hash,
        revision,
        now_ms,
        abort_message,
    );
    plan
}

/// The canary strategy's scaling and step logic.
#[allow(clippy::too_many_arguments)]
fn canary_step(
    plan: &mut Plan,
    canary: &Canary,
    rollout: &Rollout,
    (hash, name, revision): (&str, &str, u64),
    new_rs: Option<&ReplicaSet>,
    stable_rs: Option<&ReplicaSet>,
    old: &[&ReplicaSet],
    runs: &[AnalysisRun],
    now: &str,
    abort_message: &mut Option<String>,
) {
    let spec = &rollout.spec;
    let replicas = spec.replicas();
    let steps = &canary.steps;
    let new_rs = counts(new_rs);
    let st = &mut plan.status;
    let index = st.current_step_index.unwrap_or(0).max(0) as usize;
    let updating = stable_rs.is_some();
    let weight = if !updating || st.promote_full || index >= steps.len() {
        100
    } else if st.abort {
        0
    } else {
        weight_at(steps, index)
    };
    let limits = canary::fenceposts(
        canary.max_surge.as_ref(),
        canary.max_unavailable.as_ref(),
        replicas,
    );
    let stable_counts = stable_rs.map(|rs| counts(Some(rs)));
    let old_pods: i32 = old.iter().map(|rs| rs.replicas).sum();
    let (want_new, want_stable) = canary::next_counts(
        replicas,
        weight,
        limits,
        Some(new_rs),
        stable_counts,
        old_pods,
    );
    scale(plan, name, new_rs.spec, want_new);
    if let Some(rs) = stable_rs {
        scale(plan, &rs.name, rs.replicas, want_stable);
    }
    // *Simplified*: older ReplicaSets go to 0 at once (upstream limits this by
    // maxUnavailable).
    for rs in old {
        scale(plan, &rs.name, rs.replicas, 0);
    }
    let st = &mut plan.status;
    if st.abort {
        // An aborted update: back to the start, every analysis stopped.
        abort(st, now);
        st.current_step_index = Some(if updating { 0 } else { steps.len() as i32 });
        terminate_running(plan, runs);
        return;
    }
    if !updating {
        st.current_step_index = Some(steps.len() as i32);
        return;
    }
    if spec.paused {
        return; // manually paused: nothing moves
    }
    // Where the desired counts are reached (`AtDesiredReplicaCountsForCanary`).
    let (desired_new, desired_stable) = canary::approximate(replicas, weight, limits.0);
    let at_desired = new_rs.spec == desired_new
        && new_rs.available == desired_new
        && stable_rs
            .is_none_or(|rs| rs.replicas == desired_stable && rs.status_replicas == desired_stable)
        && old.iter().all(|rs| rs.available == 0);
    if st.promote_full || index >= steps.len() {
        // Every step done: promote once the new pods are all available.
        if new_rs.available == replicas && new_rs.spec == replicas {
            promote_stable(st, hash);
            st.current_step_index = Some(steps.len() as i32);
        }
        return;
    }
    let step = &steps[index];
    if step.analysis.is_none() {
        // Moved past an analysis step (promoted while it ran): that run is cancelled.
        if let Some(stale) = st.canary.current_step_analysis_run_status.take() {
            if let Some(run) = runs.iter().find(|r| r.name == stale.name && !r.completed()) {
                plan.terminate.push(run.name.clone());
            }
        }
    }
    let st = &mut plan.status;
    if step.set_weight.is_some() {
        if at_desired {
            st.current_step_index = Some(index as i32 + 1);
        }
    } else if let Some(pause) = &step.pause {
        let ours = st
            .pause_conditions
            .iter()
            .find(|c| c.reason == "CanaryPauseStep")
            .cloned();
        match ours {
            None if !st.controller_pause => add_pause(st, "CanaryPauseStep", now),
            // Promoted: the condition was removed while the controller had paused.
            None => complete_step(st, index),
            Some(condition) => {
                if let Some(seconds) = pause.seconds() {
                    if elapsed_since(&condition.start_time, now) >= seconds {
                        complete_step(st, index);
                    }
                }
            }
        }
    } else if let Some(analysis) = &step.analysis {
        let base = format!("{}-{hash}-{revision}-{index}", rollout.name);
        let current = current_run(
            st.canary.current_step_analysis_run_status.as_ref(),
            &base,
            runs,
        );
        match current {
            None => {
                let run_name = free_name(
                    &base,
                    runs,
                    st.canary.current_step_analysis_run_status.as_ref(),
                );
                if st.pause_conditions.is_empty() {
                    plan.runs.push(NewRun {
                        name: run_name.clone(),
                        hash: hash.to_string(),
                        kind: RunKind::Step(index as i32),
                        analysis: analysis.clone(),
                    });
                }
                plan.status.canary.current_step_analysis_run_status = Some(RunStatus {
                    name: run_name,
                    status: "Pending".into(),
                    message: None,
                });
            }
            Some(run) => {
                st.canary.current_step_analysis_run_status = Some(RunStatus {
                    name: run.name.clone(),
                    status: run.phase.clone(),
                    message: run.message.clone(),
                });
                match run.phase.as_str() {
                    "Successful" => complete_step(st, index),
                    "Failed" | "Error" => {
                        abort(st, now);
                        *abort_message = run.message.clone();
                    }
                    "Inconclusive" => add_pause(st, "InconclusiveAnalysisRun", now),
                    _ => {}
                }
            }
        }
    } else {
        complete_step(st, index); // a step kind the stand-in does not model is skipped
    }
}

/// The blue-green strategy: preview at full size, then (analysis, pause) the switch, then
/// (analysis) promotion; the old ReplicaSet scaled down after a delay.
#[allow(clippy::too_many_arguments)]
fn blue_green_step(
    plan: &mut Plan,
    bg: &BlueGreen,
    promoted: bool,
    rollout: &Rollout,
    (hash, name, revision): (&str, &str, u64),
    new_rs: Option<&ReplicaSet>,
    stable_rs: Option<&ReplicaSet>,
    old: &[&ReplicaSet],
    runs: &[AnalysisRun],
    (now_ms, now): (u64, &str),
) {
    let replicas = rollout.spec.replicas();
    let current = new_rs;
    let new_rs = counts(new_rs);
    let delay = bg
        .scale_down_delay_seconds
        .unwrap_or(SCALE_DOWN_DELAY_SECONDS);
    let st = &mut plan.status;
    // `promote --full`: no pause, no analysis.
    let full = st.promote_full;
    if bg.preview_service.is_some() {
        st.blue_green.preview_selector = Some(hash.to_string());
    }
    // A retried update's ReplicaSet loses the deadline its abort gave it.
    if let Some(rs) = current.filter(|rs| rs.scale_down_deadline.is_some() && !st.abort) {
        plan.deadlines.push((rs.name.clone(), None));
    }
    let Some(stable) = stable_rs else {
        // Steady: the stable is the current template; everything else winds down.
        st.blue_green.active_selector = Some(hash.to_string());
        scale(plan, name, new_rs.spec, replicas);
        for rs in old {
            wind_down(plan, rs, delay, now_ms);
        }
        return;
    };
    if st.abort {
        // The active service stays on the stable; the preview is scaled down after
        // `abortScaleDownDelaySeconds`.
        abort(st, now);
        st.blue_green.active_selector = Some(stable.hash.clone());
        scale(plan, &stable.name, stable.replicas, replicas);
        if let Some(current) = current {
            wind_down(plan, current, SCALE_DOWN_DELAY_SECONDS, now_ms);
        }
        for rs in old {
            wind_down(plan, rs, delay, now_ms);
        }
        return;
    }
    scale(plan, name, new_rs.spec, replicas);
    scale(plan, &stable.name, stable.replicas, replicas);
    for rs in old {
        wind_down(plan, rs, delay, now_ms);
    }
    let st = &mut plan.status;
    let switched = st.blue_green.active_selector.as_deref() == Some(hash);
    if !switched {
        st.blue_green.active_selector = Some(stable.hash.clone());
        if new_rs.available < replicas || rollout.spec.paused {
            return;
        }
        if let Some(analysis) = bg.pre_promotion_analysis.as_ref().filter(|_| !full) {
            let base = format!("{}-{hash}-{revision}-pre", rollout.name);
            let kind = RunKind::PrePromotion;
            if !promotion_analysis(plan, kind, base, hash, analysis, runs, promoted) {
                return;
            }
        }
        let st = &mut plan.status;
        // A pause only when auto-promotion is off or delayed (`needsBlueGreenControllerPause`).
        let seconds = bg.auto_promotion_seconds.unwrap_or(0);
        if !full && (bg.auto_promotion_enabled == Some(false) || seconds > 0) {
            let ours = st
                .pause_conditions
                .iter()
                .find(|c| c.reason == "BlueGreenPause")
                .cloned();
            let done = match ours {
                None if !st.controller_pause => {
                    add_pause(st, "BlueGreenPause", now);
                    false
                }
                None => true,
                Some(c) => {
                    bg.auto_promotion_enabled != Some(false)
                        && seconds > 0
                        && elapsed_since(&c.start_time, now) >= seconds
                }
            };
            if !done {
                return;
            }
            st.pause_conditions.retain(|c| c.reason != "BlueGreenPause");
            st.controller_pause = !st.pause_conditions.is_empty();
        }
        st.blue_green.active_selector = Some(hash.to_string());
        return;
    }
    // Switched: post-promotion analysis, then the new ReplicaSet is the stable.
    if let Some(analysis) = bg.post_promotion_analysis.as_ref().filter(|_| !full) {
        let base = format!("{}-{hash}-{revision}-post", rollout.name);
        let kind = RunKind::PostPromotion;
        if !promotion_analysis(plan, kind, base, hash, analysis, runs, promoted) {
            return;
        }
    }
    promote_stable(&mut plan.status, hash);
    wind_down(plan, stable, delay, now_ms);
}

/// A blue-green promotion's analysis (`PrePromotion` or `PostPromotion`, run `base` or a
/// collision-suffixed one): whether it succeeded; if none runs yet, or the last one was
/// inconclusive and the user promoted (`needsNewAnalysisRun`), a new one is planned.
fn promotion_analysis(
    plan: &mut Plan,
    kind: RunKind,
    base: String,
    hash: &str,
    analysis: &Value,
    runs: &[AnalysisRun],
    promoted: bool,
) -> bool {
    let bg = &mut plan.status.blue_green;
    let slot = match kind {
        RunKind::PrePromotion => &mut bg.pre_promotion_analysis_run_status,
        _ => &mut bg.post_promotion_analysis_run_status,
    };
    let current = slot.as_ref().filter(|run| is_named(&run.name, &base));
    match current {
        Some(run) if !(promoted && run.status == "Inconclusive") => {
            run.status == "Successful" // else running, or paused/aborted
        }
        _ => {
            let name = free_name(&base, runs, None);
            *slot = Some(RunStatus {
                name: name.clone(),
                status: "Pending".into(),
                message: None,
            });
            plan.runs.push(NewRun {
                name,
                hash: hash.to_string(),
                kind,
                analysis: analysis.clone(),
            });
            false
        }
    }
}

/// Folds the blue-green AnalysisRuns' phases into the status: Failed/Error abort,
/// Inconclusive pauses (`setPauseOrAbort`).
fn blue_green_runs(
    plan: &mut Plan,
    runs: &[AnalysisRun],
    abort_message: &mut Option<String>,
    now: &str,
    promoted: bool,
) {
    let st = &mut plan.status;
    let mut outcome = None;
    for slot in [
        &mut st.blue_green.pre_promotion_analysis_run_status,
        &mut st.blue_green.post_promotion_analysis_run_status,
    ] {
        let Some(status) = slot.as_mut() else {
            continue;
        };
        if let Some(run) = runs.iter().find(|r| r.name == status.name) {
            status.status = run.phase.clone();
            status.message = run.message.clone();
            if matches!(run.phase.as_str(), "Failed" | "Error" | "Inconclusive") {
                outcome = Some((run.phase.clone(), run.message.clone()));
            }
        }
    }
    match outcome {
        // Paused until promoted; a promotion starts a new run (`promotion_analysis`).
        Some((phase, _)) if phase == "Inconclusive" && !st.abort && !promoted => {
            add_pause(st, "InconclusiveAnalysisRun", now);
        }
        Some((phase, _)) if phase == "Inconclusive" => {} // aborted stays aborted
        Some((_, message)) if !st.abort => {
            abort(st, now);
            *abort_message = message;
        }
        _ => {}
    }
    if st.abort {
        terminate_running(plan, runs);
    }
}

/// Whether `name` is `base` or `base.<n>` (a collision-suffixed run of the same analysis).
fn is_named(name: &str, base: &str) -> bool {
    name.strip_prefix(base).is_some_and(|rest| {
        rest.is_empty()
            || rest
                .strip_prefix('.')
                .is_some_and(|n| n.parse::<u32>().is_ok())
    })
}

/// The run the status points at for this analysis, as the controller sees it.
fn current_run<'a>(
    slot: Option<&RunStatus>,
    base: &str,
    runs: &'a [AnalysisRun],
) -> Option<&'a AnalysisRun> {
    let name = &slot.filter(|s| is_named(&s.name, base))?.name;
    runs.iter().find(|r| &r.name == name)
}

/// The name for a new run of `base`: the one the status already points at (created,
/// not yet seen), else `base`, else the first free `base.<n>` (`CreateWithCollisionCounter`).
fn free_name(base: &str, runs: &[AnalysisRun], pending: Option<&RunStatus>) -> String {
    if let Some(pending) = pending.filter(|p| is_named(&p.name, base)) {
        return pending.name.clone();
    }
    let taken = |name: &str| runs.iter().any(|r| r.name == name);
    if !taken(base) {
        return base.to_string();
    }
    (1..)
        .map(|n| format!("{base}.{n}"))
        .find(|name| !taken(name))
        .unwrap_or_default()
}

/// Sets `spec.replicas` of `name` to `want` if it differs from `current`.
fn scale(plan: &mut Plan, name: &str, current: i32, want: i32) {
    if let Some(create) = plan.create.as_mut().filter(|c| c.name == name) {
        create.replicas = want;
        return;
    }
    if current != want {
        plan.scale.retain(|(n, _)| n != name);
        plan.scale.push((name.to_string(), want));
    }
}

/// Scales an old blue-green ReplicaSet down once its `scale-down-deadline` passed,
/// setting the deadline first.
/// The annotation goes once the ReplicaSet is at 0, so a failed scale-down is simply
/// tried again at the next reconcile.
fn wind_down(plan: &mut Plan, rs: &ReplicaSet, delay_seconds: i64, now_ms: u64) {
    match rs.scale_down_deadline.as_deref() {
        Some(_) if rs.replicas == 0 => plan.deadlines.push((rs.name.clone(), None)),
        _ if rs.replicas == 0 => {}
        None => plan.deadlines.push((
            rs.name.clone(),
            Some(rfc3339(now_ms.saturating_add(
                (delay_seconds.max(0) as u64).saturating_mul(1000),
            ))),
        )),
        Some(deadline) if deadline <= rfc3339(now_ms).as_str() => {
            scale(plan, &rs.name, rs.replicas, 0);
        }
        Some(_) => {}
    }
}

/// Adds a pause condition of `reason` unless one is there.
fn add_pause(st: &mut RolloutStatus, reason: &str, now: &str) {
    if !st.pause_conditions.iter().any(|c| c.reason == reason) {
        st.pause_conditions.push(PauseCondition {
            reason: reason.into(),
            start_time: now.to_string(),
        });
    }
}

fn complete_step(st: &mut RolloutStatus, index: usize) {
    st.current_step_index = Some(index as i32 + 1);
    st.pause_conditions
        .retain(|c| c.reason != "CanaryPauseStep");
    st.controller_pause = !st.pause_conditions.is_empty();
    st.canary.current_step_analysis_run_status = None;
}

/// Aborted: no pause is left (`CalculatePauseStatus` returns early while aborted).
fn abort(st: &mut RolloutStatus, now: &str) {
    st.abort = true;
    st.pause_conditions.clear();
    st.controller_pause = false;
    if st.aborted_at.is_none() {
        st.aborted_at = Some(now.to_string());
    }
}

/// `promoteStable`: the current template becomes the stable; pauses, abort and
/// `promoteFull` are cleared.
fn promote_stable(st: &mut RolloutStatus, hash: &str) {
    st.stable_rs = Some(hash.to_string());
    st.pause_conditions.clear();
    st.controller_pause = false;
    st.abort = false;
    st.aborted_at = None;
    st.promote_full = false;
    st.canary.current_step_analysis_run_status = None;
}

fn terminate_running(plan: &mut Plan, runs: &[AnalysisRun]) {
    for run in runs {
        if !run.completed() && !run.terminate && !plan.terminate.contains(&run.name) {
            plan.terminate.push(run.name.clone());
        }
    }
}

/// Seconds from RFC 3339 `since` to `now` (both as this module writes them).
fn elapsed_since(since: &str, now: &str) -> i64 {
    let seconds = |t: &str| parse_rfc3339(t).map(|ms| ms / 1000);
    match (seconds(since), seconds(now)) {
        (Some(a), Some(b)) => b as i64 - a as i64,
        _ => 0,
    }
}

/// Counts, conditions, phase and message from the ReplicaSets as they will be.
fn finish_status(
    plan: &mut Plan,
    rollout: &Rollout,
    replica_sets: &[ReplicaSet],
    hash: &str,
    revision: u64,
    now_ms: u64,
    abort_message: Option<String>,
) {
    let spec = &rollout.spec;
    let replicas = spec.replicas();
    let now = rfc3339(now_ms);
    let st = &mut plan.status;
    st.controller_pause = st.controller_pause || !st.pause_conditions.is_empty();
    if st.pause_conditions.is_empty() && !st.abort {
        st.controller_pause = false;
    }
    let new = replica_sets.iter().find(|rs| rs.hash == hash);
    st.replicas = replica_sets.iter().map(|rs| rs.status_replicas).sum();
    st.updated_replicas = new.map_or(0, |rs| rs.status_replicas);
    if spec.strategy.blue_green.is_some() {
        let active = st.blue_green.active_selector.clone().unwrap_or_default();
        let active_rs = replica_sets.iter().find(|rs| rs.hash == active);
        st.ready_replicas = active_rs.map_or(0, |rs| rs.ready);
        st.available_replicas = active_rs.map_or(0, |rs| rs.available);
        st.hpa_replicas = active_rs.map_or(0, |rs| rs.status_replicas);
        let mut selector = spec.selector.format();
        if !active.is_empty() {
            if !selector.is_empty() {
                selector.push(',');
            }
            selector.push_str(&format!("{HASH_LABEL}={active}"));
        }
        st.selector = Some(selector);
    } else {
        st.ready_replicas = replica_sets.iter().map(|rs| rs.ready).sum();
        st.available_replicas = replica_sets.iter().map(|rs| rs.available).sum();
        st.hpa_replicas = st.replicas;
        st.selector = Some(spec.selector.format());
    }

    // Progressing: its reason, and when progress was last made (for the deadline).
    let complete = st.stable_rs.as_deref() == Some(hash)
        && st.updated_replicas == replicas
        && st.available_replicas >= replicas
        && st.replicas == st.updated_replicas;
    let previous = st.condition("Progressing").cloned();
    let (status, reason, message) = if st.abort {
        let message = match (abort_message, previous.as_ref()) {
            (Some(m), _) => format!("Rollout aborted update to revision {revision}: {m}"),
            (None, Some(p)) if p.reason == "RolloutAborted" => p.message.clone(),
            (None, _) => format!("Rollout aborted update to revision {revision}"),
        };
        ("False", "RolloutAborted", message)
    } else if !st.pause_conditions.is_empty() || spec.paused {
        ("Unknown", "RolloutPaused", "Rollout is paused".to_string())
    } else if complete {
        (
            "True",
            "NewReplicaSetAvailable",
            format!(
                "ReplicaSet \"{}-{hash}\" has successfully progressed.",
                rollout.name
            ),
        )
    } else {
        (
            "True",
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{}-{hash}\" is progressing.", rollout.name),
        )
    };
    let deadline = spec
        .progress_deadline_seconds
        .unwrap_or(PROGRESS_DEADLINE_SECONDS);
    let mut progressing = condition(
        "Progressing",
        status,
        reason,
        &message,
        &now,
        previous.as_ref(),
    );
    // Progress (a step, or pods updated or available) restarts the deadline's clock.
    let before = &rollout.status;
    let moved = before.current_step_index != st.current_step_index
        || before.updated_replicas != st.updated_replicas
        || before.available_replicas != st.available_replicas
        || before.replicas != st.replicas;
    if reason == "ReplicaSetUpdated" {
        let since = previous
            .as_ref()
            .filter(|p| {
                !moved
                    && matches!(
                        p.reason.as_str(),
                        "ReplicaSetUpdated" | "ProgressDeadlineExceeded"
                    )
            })
            .map(|p| p.last_update_time.clone());
        if let Some(since) = since {
            progressing.last_update_time = since;
        }
        // No deadline while an analysis runs or an old ReplicaSet waits for its
        // scale-down (upstream's `isWaitingForReplicaSetScaleDown`).
        let unfinished =
            |r: &Option<RunStatus>| r.as_ref().is_some_and(|r| r.status != "Successful");
        let analysing = st.canary.current_step_analysis_run_status.is_some()
            || unfinished(&st.blue_green.pre_promotion_analysis_run_status)
            || unfinished(&st.blue_green.post_promotion_analysis_run_status)
            || replica_sets
                .iter()
                .any(|rs| rs.scale_down_deadline.is_some() && rs.replicas > 0);
        if !analysing && elapsed_since(&progressing.last_update_time, &now) > deadline {
            progressing.status = "False".into();
            progressing.reason = "ProgressDeadlineExceeded".into();
            progressing.message = format!(
                "ReplicaSet \"{}-{hash}\" has timed out progressing.",
                rollout.name
            );
            progressing.last_transition_time = previous
                .as_ref()
                .filter(|p| p.status == "False")
                .map_or(now.clone(), |p| p.last_transition_time.clone());
        }
    }
    let available = st.available_replicas >= replicas;
    let available = condition(
        "Available",
        if available { "True" } else { "False" },
        "AvailableReason",
        if available {
            "Rollout has minimum availability"
        } else {
            "Rollout does not have minimum availability"
        },
        &now,
        st.condition("Available"),
    );
    st.conditions = vec![available, progressing];
    let (phase, message) = phase_of(spec, st);
    let healthy = phase == "Healthy";
    let healthy = condition(
        "Healthy",
        if healthy { "True" } else { "False" },
        "RolloutHealthy",
        if healthy {
            "Rollout is healthy"
        } else {
            "Rollout is not healthy"
        },
        &now,
        rollout.status.condition("Healthy"),
    );
    st.conditions.push(healthy);
    st.phase = Some(phase);
    st.message = (!message.is_empty()).then_some(message);
}

/// A condition, keeping its transition time while its status holds and its update time
/// while reason and message hold.
fn condition(
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
    previous: Option<&Condition>,
) -> Condition {
    let same_status = previous.filter(|p| p.status == status);
    let same_text = same_status.filter(|p| p.reason == reason && p.message == message);
    Condition {
        kind: kind.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_update_time: same_text.map_or(now.to_string(), |p| p.last_update_time.clone()),
        last_transition_time: same_status
            .map_or(now.to_string(), |p| p.last_transition_time.clone()),
    }
}

/// The phase and message (`CalculateRolloutPhase`), first match wins.
pub fn phase_of(spec: &RolloutSpec, st: &RolloutStatus) -> (String, String) {
    let progressing = |s: &str| ("Progressing".to_string(), s.to_string());
    if let Some(c) = st.condition("Progressing").filter(|c| {
        matches!(
            c.reason.as_str(),
            "RolloutAborted" | "ProgressDeadlineExceeded"
        )
    }) {
        return ("Degraded".into(), format!("{}: {}", c.reason, c.message));
    }
    if spec.paused {
        return ("Paused".into(), "manually paused".into());
    }
    if let Some(p) = st.pause_conditions.first() {
        return ("Paused".into(), p.reason.clone());
    }
    let current = st.current_pod_hash.as_deref().unwrap_or("");
    if st.updated_replicas < spec.replicas() {
        return progressing("more replicas need to be updated");
    }
    if st.available_replicas < st.updated_replicas {
        return progressing("updated replicas are still becoming available");
    }
    if spec.strategy.blue_green.is_some() {
        if st.blue_green.active_selector.as_deref() != Some(current) {
            return progressing("active service cutover pending");
        }
        if st.stable_rs.as_deref() != Some(current) {
            let analysed = st
                .blue_green
                .post_promotion_analysis_run_status
                .as_ref()
                .is_some_and(|r| r.status == "Successful");
            let analysis = spec
                .strategy
                .blue_green
                .as_ref()
                .is_some_and(|bg| bg.post_promotion_analysis.is_some());
            if analysis && !analysed {
                return progressing("waiting for analysis to complete");
            }
            return progressing("waiting for post-promotion verification to complete");
        }
    } else {
        if st.replicas > st.updated_replicas {
            return progressing("old replicas are pending termination");
        }
        if st.stable_rs.as_deref() != Some(current) {
            return progressing("waiting for all steps to complete");
        }
    }
    ("Healthy".into(), String::new())
}
