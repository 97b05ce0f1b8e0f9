//! One operation on one Workflow, as a pure function (argo-workflows v3.6
//! `workflow/controller/operator.go` `operate`, `steps.go`, `gccontroller`): from the
//! Workflow and the time, its next status and labels, or its deletion once its TTL ran out.
//!
//! Supported templates: `container` (one Pod node; its outcome and duration come from the
//! world's [`super::Jobs`]), `steps` (groups run in order, the steps of a group in
//! parallel) and `retryStrategy` (`limit`, `retryPolicy`; no backoff) on container
//! templates; `spec.shutdown`, `activeDeadlineSeconds`, `ttlStrategy`. *Not modelled*: DAGs,
//! loops, suspend, exit handlers, outputs and artifacts, compression or offloading of nodes.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use orrery_system::core::time::{parse_rfc3339, rfc3339};

use super::{Job, Jobs};

/// Deepest nesting of templates (upstream's `maxAllowedStackDepth`).
const MAX_DEPTH: usize = 100;

/// Label with the workflow's phase.
pub const PHASE_LABEL: &str = "workflows.argoproj.io/phase";
/// Label `"true"` once the workflow finished (`"false"` before, since v3.5.3).
pub const COMPLETED_LABEL: &str = "workflows.argoproj.io/completed";

/// What the controller does with a Workflow now.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing changed.
    Unchanged,
    /// Write these labels and this status.
    Write {
        /// The phase and completed labels.
        labels: BTreeMap<String, String>,
        /// The whole new status.
        status: Value,
    },
    /// Its TTL ran out: delete it.
    Delete,
}

/// `Workflow.NodeID`: the workflow's name for the root, else `<wf>-<fnv32a(name)>` in decimal.
pub fn node_id(workflow: &str, name: &str) -> String {
    if name == workflow {
        return workflow.to_string();
    }
    let mut hash: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{workflow}-{hash}")
}

/// What is left of a node's name after its boundary's: without a leading `[i].` or `.`.
fn display_name(rest: &str) -> &str {
    if let Some(after) = rest.strip_prefix('[') {
        if let Some((index, tail)) = after.split_once("].") {
            if index.bytes().all(|b| b.is_ascii_digit()) {
                return tail;
            }
        }
    }
    rest.strip_prefix('.').unwrap_or(rest)
}

fn finished(phase: &str) -> bool {
    matches!(
        phase,
        "Succeeded" | "Failed" | "Error" | "Skipped" | "Omitted"
    )
}

/// The state of one operation: the nodes as they are and will be, and the inputs.
struct Op<'a> {
    workflow: &'a str,
    key: String,
    templates: BTreeMap<String, &'a Value>,
    nodes: BTreeMap<String, Value>,
    jobs: &'a Jobs,
    now_ms: u64,
    now: String,
    /// Why pods stop now (shutdown or the deadline), with the messages for running and for
    /// not yet created pods.
    stopping: Option<(String, String)>,
    /// Why a retry node ends without retrying (`Stopped with strategy '<s>'`, `retry
    /// exceeded workflow deadline <t>`).
    retry_stop: Option<String>,
}

impl Op<'_> {
    /// The node named `name`, created with `init` if absent; returns its id.
    fn node(
        &mut self,
        name: &str,
        kind: &str,
        template: &str,
        boundary: Option<&str>,
        phase: &str,
    ) -> String {
        let id = node_id(self.workflow, name);
        if !self.nodes.contains_key(&id) {
            let display = match boundary
                .and_then(|b| self.nodes.get(b))
                .and_then(|b| b["name"].as_str())
            {
                Some(prefix) => name
                    .strip_prefix(prefix)
                    .map(display_name)
                    .unwrap_or(name)
                    .to_string(),
                None => name.to_string(),
            };
            let mut node = json!({"id": id, "name": name, "displayName": display, "type": kind, "templateName": template, "phase": phase, "startedAt": self.now});
            if let Some(boundary) = boundary {
                node["boundaryID"] = json!(boundary);
            }
            self.nodes.insert(id.clone(), node);
        }
        id
    }

    fn add_child(&mut self, parent: &str, child: &str) {
        if let Some(node) = self.nodes.get_mut(parent) {
            let children = node["children"].as_array_mut();
            match children {
                Some(list) if list.iter().any(|c| c == child) => {}
                Some(list) => list.push(json!(child)),
                None => node["children"] = json!([child]),
            }
        }
    }

    fn phase(&self, id: &str) -> String {
        self.nodes
            .get(id)
            .and_then(|n| n["phase"].as_str())
            .unwrap_or("")
            .to_string()
    }

    fn mark(&mut self, id: &str, phase: &str, message: Option<&str>) {
        let now = self.now.clone();
        if let Some(node) = self.nodes.get_mut(id) {
            if node["phase"] == phase && message.is_none_or(|m| node["message"] == m) {
                return;
            }
            node["phase"] = json!(phase);
            if let Some(message) = message {
                node["message"] = json!(message);
            }
            if finished(phase) && node.get("finishedAt").is_none() {
                node["finishedAt"] = json!(now);
            }
        }
    }

    /// Runs template `template` as node `name`; returns the node's id.
    fn execute(
        &mut self,
        name: &str,
        template: &str,
        boundary: Option<&str>,
        depth: usize,
    ) -> String {
        let spec = self
            .templates
            .get(template)
            .copied()
            .cloned()
            .unwrap_or(Value::Null);
        if depth > MAX_DEPTH {
            // A template that calls itself without end (upstream errors the node).
            let id = self.node(name, "Steps", template, boundary, "Error");
            self.mark(&id, "Error", Some("Maximum recursion depth exceeded"));
            return id;
        }
        if let Some(groups) = spec["steps"].as_array() {
            return self.steps(name, template, groups, boundary, depth);
        }
        match spec.get("retryStrategy") {
            Some(retry) => self.retry(name, template, retry, boundary),
            None => self.pod(name, template, boundary, 0),
        }
    }

    fn steps(
        &mut self,
        name: &str,
        template: &str,
        groups: &[Value],
        boundary: Option<&str>,
        depth: usize,
    ) -> String {
        let id = self.node(name, "Steps", template, boundary, "Running");
        if finished(&self.phase(&id)) {
            return id;
        }
        for (i, group) in groups.iter().enumerate() {
            let group_name = format!("{name}[{i}]");
            let group_id = self.node(&group_name, "StepGroup", "", Some(&id), "Running");
            self.add_child(&id, &group_id);
            let mut failed = None;
            let mut running = false;
            for step in group.as_array().into_iter().flatten() {
                let step_name = format!("{group_name}.{}", step["name"].as_str().unwrap_or(""));
                let child = self.execute(
                    &step_name,
                    step["template"].as_str().unwrap_or(""),
                    Some(&id),
                    depth + 1,
                );
                self.add_child(&group_id, &child);
                match self.phase(&child).as_str() {
                    "Failed" | "Error" => failed = failed.or(Some(child)),
                    p if !finished(p) => running = true,
                    _ => {}
                }
            }
            if running {
                return id;
            }
            if let Some(child) = failed {
                let message = format!("child '{child}' failed");
                self.mark(&group_id, "Failed", Some(&message));
                self.mark(&id, "Failed", Some(&message));
                return id;
            }
            self.mark(&group_id, "Succeeded", None);
        }
        self.mark(&id, "Succeeded", None);
        id
    }

    fn retry(
        &mut self,
        name: &str,
        template: &str,
        retry: &Value,
        boundary: Option<&str>,
    ) -> String {
        let id = self.node(name, "Retry", template, boundary, "Running");
        if finished(&self.phase(&id)) {
            return id;
        }
        let limit = retry["limit"]
            .as_u64()
            .or_else(|| retry["limit"].as_str().and_then(|s| s.parse().ok()))
            .unwrap_or(0) as usize;
        let policy = retry["retryPolicy"].as_str().unwrap_or("OnFailure");
        let mut attempt = 0;
        loop {
            let child = self.pod(&format!("{name}({attempt})"), template, boundary, attempt);
            self.add_child(&id, &child);
            if let Some(node) = self.nodes.get_mut(&child) {
                node["nodeFlag"] = json!({"retried": true});
            }
            let phase = self.phase(&child);
            let message = self.nodes[&child]["message"].as_str().map(str::to_string);
            if !finished(&phase) {
                return id;
            }
            if phase == "Succeeded" {
                self.mark(&id, "Succeeded", None);
                return id;
            }
            let retries = match policy {
                "Always" => true,
                "OnError" => phase == "Error",
                _ => phase == "Failed", // OnFailure (the default)
            };
            if let Some(why) = self.retry_stop.clone() {
                self.mark(&id, &phase, Some(&why));
                return id;
            }
            if !retries {
                self.mark(&id, &phase, message.as_deref());
                return id;
            }
            if attempt + 1 > limit {
                self.mark(&id, &phase, Some("No more retries left"));
                return id;
            }
            attempt += 1;
        }
    }

    /// A Pod node: Pending, Running a second later, finished as its job says.
    fn pod(
        &mut self,
        name: &str,
        template: &str,
        boundary: Option<&str>,
        attempt: usize,
    ) -> String {
        let id = node_id(self.workflow, name);
        if !self.nodes.contains_key(&id) {
            if let Some((_, not_created)) = self.stopping.clone() {
                self.node(name, "Pod", template, boundary, "Failed");
                self.mark(&id, "Failed", Some(&not_created));
                if let Some(node) = self.nodes.get_mut(&id) {
                    node["finishedAt"] = node["startedAt"].clone();
                }
                return id;
            }
            self.node(name, "Pod", template, boundary, "Pending");
        }
        let phase = self.phase(&id);
        if finished(&phase) {
            return id;
        }
        if let Some((running, _)) = self.stopping.clone() {
            self.mark(&id, "Failed", Some(&running));
            return id;
        }
        let started = self.nodes[&id]["startedAt"]
            .as_str()
            .and_then(parse_rfc3339)
            .unwrap_or(self.now_ms);
        let base = name.split('(').next().unwrap_or(name);
        let job: Job = self.jobs.get(&self.key, base, template, attempt);
        let elapsed = self.now_ms.saturating_sub(started);
        if elapsed >= job.seconds.saturating_mul(1000).saturating_add(1000) {
            let message = match job.phase {
                "Failed" => Some("Error (exit code 1)"),
                "Error" => Some("pod deleted"),
                _ => None,
            };
            self.mark(&id, job.phase, message);
        } else if elapsed >= 1000 {
            self.mark(&id, "Running", None);
        }
        id
    }
}

/// The next step for a Workflow (`namespace/name` = `key`) with `spec`, `status` and
/// `labels`, at `now_ms`.
pub fn operate(
    key: &str,
    name: &str,
    spec: &Value,
    status: &Value,
    labels: &BTreeMap<String, String>,
    jobs: &Jobs,
    now_ms: u64,
) -> Step {
    let now = rfc3339(now_ms);
    if labels.get(COMPLETED_LABEL).map(String::as_str) == Some("true") {
        // The TTL controller's part: expiry = finishedAt + the TTL for its phase.
        let ttl = &spec["ttlStrategy"];
        let seconds = match status["phase"].as_str() {
            Some("Failed") => ttl["secondsAfterFailure"].as_u64(),
            Some("Succeeded") => ttl["secondsAfterSuccess"].as_u64(),
            _ => None,
        }
        .or_else(|| ttl["secondsAfterCompletion"].as_u64());
        let finished_at = status["finishedAt"].as_str().and_then(parse_rfc3339);
        return match (seconds, finished_at) {
            (Some(s), Some(at))
                if now_ms
                    >= at
                        .saturating_add(s.saturating_mul(1000))
                        .saturating_add(1000) =>
            {
                Step::Delete
            }
            _ => Step::Unchanged,
        };
    }
    let mut next = if status.is_object() {
        status.clone()
    } else {
        json!({})
    };
    if matches!(next["phase"].as_str().unwrap_or(""), "" | "Pending") {
        next["phase"] = json!("Running");
        next["startedAt"] = json!(now);
    }
    let started = next["startedAt"]
        .as_str()
        .and_then(parse_rfc3339)
        .unwrap_or(now_ms)
        / 1000
        * 1000;
    let shutdown = spec["shutdown"].as_str().filter(|s| !s.is_empty());
    let past_deadline = spec["activeDeadlineSeconds"]
        .as_u64()
        .is_some_and(|s| now_ms >= started.saturating_add(s.saturating_mul(1000)));
    let retry_stop = match (shutdown, past_deadline) {
        (Some(strategy), _) => Some(format!("Stopped with strategy '{strategy}'")),
        (None, true) => Some(format!(
            "retry exceeded workflow deadline {}",
            spec["activeDeadlineSeconds"]
                .as_u64()
                .map(|s| rfc3339(started.saturating_add(s.saturating_mul(1000))))
                .unwrap_or_default()
        )),
        (None, false) => None,
    };
    let stopping = match (shutdown, past_deadline) {
        (Some(strategy), _) => Some((
            format!("workflow shutdown with strategy:  {strategy}"),
            format!("workflow shutdown with strategy: {strategy}"),
        )),
        (None, true) => Some((
            "Step exceeded its deadline".to_string(),
            "Step exceeded its deadline".to_string(),
        )),
        (None, false) => None,
    };
    let templates = spec["templates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["name"].as_str()?.to_string(), t)))
        .collect();
    let nodes = next["nodes"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let mut op = Op {
        workflow: name,
        key: key.to_string(),
        templates,
        nodes,
        jobs,
        now_ms,
        now: now.clone(),
        stopping,
        retry_stop,
    };
    let entry = spec["entrypoint"].as_str().unwrap_or("");
    let root = op.execute(name, entry, None, 0);
    let root_phase = op.phase(&root);
    let pods: Vec<&Value> = op.nodes.values().filter(|n| n["type"] == "Pod").collect();
    let done = pods
        .iter()
        .filter(|n| {
            matches!(
                n["phase"].as_str(),
                Some("Succeeded" | "Skipped" | "Omitted")
            )
        })
        .count();
    let running = pods.iter().any(|n| n["phase"] == "Running");
    next["progress"] = json!(format!("{done}/{}", pods.len()));
    let mut conditions =
        vec![json!({"type": "PodRunning", "status": if running { "True" } else { "False" }})];
    let mut next_labels = BTreeMap::from([(COMPLETED_LABEL.to_string(), "false".to_string())]);
    if finished(&root_phase) {
        let phase = match root_phase.as_str() {
            "Failed" => "Failed",
            "Error" => "Error",
            _ => "Succeeded",
        };
        next["phase"] = json!(phase);
        let message = match (shutdown, phase) {
            (Some(strategy), "Failed" | "Error") => {
                next["phase"] = json!("Failed");
                Some(format!("Stopped with strategy '{strategy}'"))
            }
            _ => op.nodes[&root]["message"].as_str().map(str::to_string),
        };
        if let Some(message) = message {
            next["message"] = json!(message);
        }
        if next.get("finishedAt").is_none() {
            next["finishedAt"] = json!(now);
        }
        conditions.push(json!({"type": "Completed", "status": "True"}));
        next_labels.insert(COMPLETED_LABEL.into(), "true".into());
    }
    next["conditions"] = Value::Array(conditions);
    next["nodes"] = Value::Object(op.nodes.into_iter().collect());
    next_labels.insert(
        PHASE_LABEL.into(),
        next["phase"].as_str().unwrap_or("").to_string(),
    );
    let labelled = next_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
    if &next == status && labelled {
        return Step::Unchanged;
    }
    Step::Write {
        labels: next_labels,
        status: next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_767_225_600_000;

    fn workflow(extra: Value) -> Value {
        let mut spec = json!({
            "entrypoint": "main",
            "templates": [
                {"name": "main", "steps": [[{"name": "build", "template": "job"}], [{"name": "test", "template": "job"}, {"name": "lint", "template": "job"}]]},
                {"name": "job", "container": {"image": "alpine", "command": ["true"]}},
                {"name": "flaky", "container": {"image": "alpine"}, "retryStrategy": {"limit": 2}},
            ],
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        spec
    }

    /// Operates on `spec` every second for `seconds`; returns the last status and labels,
    /// and when (seconds after start) it was deleted, if it was.
    fn run(
        spec: &Value,
        jobs: &Jobs,
        seconds: u64,
    ) -> (Value, BTreeMap<String, String>, Option<u64>) {
        let (mut status, mut labels) = (Value::Null, BTreeMap::new());
        for s in 0..seconds {
            match operate("ci/wf", "wf", spec, &status, &labels, jobs, T0 + s * 1000) {
                Step::Unchanged => {}
                Step::Write {
                    labels: l,
                    status: st,
                } => {
                    labels = l;
                    status = st;
                }
                Step::Delete => return (status, labels, Some(s)),
            }
        }
        (status, labels, None)
    }

    #[test]
    fn node_ids_are_the_workflow_name_and_fnv32a_in_decimal() {
        assert_eq!(node_id("wf", "wf"), "wf");
        // FNV-1a 32 of "a" is 0xe40c292c.
        assert_eq!(node_id("wf", "a"), format!("wf-{}", 0xe40c_292c_u32));
    }

    #[test]
    fn steps_run_group_by_group_and_the_workflow_succeeds() {
        let jobs = Jobs::default();
        let (status, labels, _) = run(&workflow(json!({})), &jobs, 4);
        assert_eq!(status["phase"], "Running");
        assert_eq!(
            status["progress"], "0/1",
            "only the first group's pod exists"
        );
        assert_eq!(
            labels.get(COMPLETED_LABEL).map(String::as_str),
            Some("false")
        );
        let (status, labels, _) = run(&workflow(json!({})), &jobs, 20);
        assert_eq!(status["phase"], "Succeeded");
        assert_eq!(status["progress"], "3/3");
        assert!(status["finishedAt"].is_string());
        assert_eq!(
            labels.get(COMPLETED_LABEL).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels.get(PHASE_LABEL).map(String::as_str),
            Some("Succeeded")
        );
        let root = &status["nodes"]["wf"];
        assert_eq!(
            (root["type"].as_str(), root["displayName"].as_str()),
            (Some("Steps"), Some("wf"))
        );
        let test = &status["nodes"][node_id("wf", "wf[1].test")];
        assert_eq!(test["displayName"], "test");
        assert_eq!(test["type"], "Pod");
        assert_eq!(test["boundaryID"], "wf");
        assert_eq!(
            status["nodes"][node_id("wf", "wf[1]")]["displayName"],
            "[1]"
        );
        assert_eq!(
            root["children"],
            json!([node_id("wf", "wf[0]"), node_id("wf", "wf[1]")])
        );
    }

    #[test]
    fn a_failed_step_fails_its_group_and_the_workflow_with_upstreams_message() {
        let jobs = Jobs::default();
        jobs.set(
            "ci/wf",
            "wf[1].lint",
            vec![Job {
                phase: "Failed",
                seconds: 2,
            }],
        );
        let (status, _, _) = run(&workflow(json!({})), &jobs, 30);
        let lint = node_id("wf", "wf[1].lint");
        assert_eq!(status["phase"], "Failed");
        assert_eq!(status["message"], format!("child '{lint}' failed"));
        assert_eq!(status["nodes"][&lint]["message"], "Error (exit code 1)");
        assert_eq!(status["progress"], "2/3");
    }

    #[test]
    fn retries_run_new_attempts_until_the_limit() {
        let spec = workflow(json!({"templates": [
            {"name": "main", "steps": [[{"name": "build", "template": "flaky"}]]},
            {"name": "flaky", "container": {"image": "alpine"}, "retryStrategy": {"limit": 2}},
        ]}));
        let jobs = Jobs::default();
        let fail = Job {
            phase: "Failed",
            seconds: 1,
        };
        jobs.set("ci/wf", "wf[0].build", vec![fail, fail, Job::default()]);
        let (status, _, _) = run(&spec, &jobs, 30);
        assert_eq!(status["phase"], "Succeeded");
        let retry = &status["nodes"][node_id("wf", "wf[0].build")];
        assert_eq!(retry["type"], "Retry");
        assert_eq!(retry["children"].as_array().map(Vec::len), Some(3));
        assert_eq!(
            status["nodes"][node_id("wf", "wf[0].build(1)")]["phase"],
            "Failed"
        );
        assert_eq!(status["progress"], "1/3", "each failed attempt counts 0/1");
        jobs.set("ci/wf", "wf[0].build", vec![fail]);
        let (status, _, _) = run(&spec, &jobs, 30);
        assert_eq!(status["phase"], "Failed");
        assert_eq!(
            status["nodes"][node_id("wf", "wf[0].build")]["message"],
            "No more retries left"
        );
        // An Error is not retried under the default policy (OnFailure).
        jobs.set(
            "ci/wf",
            "wf[0].build",
            vec![
                Job {
                    phase: "Error",
                    seconds: 1,
                },
                Job::default(),
            ],
        );
        let (status, _, _) = run(&spec, &jobs, 30);
        assert_eq!(status["phase"], "Failed");
        assert_eq!(
            status["nodes"][node_id("wf", "wf[0].build")]["children"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
    }

    #[test]
    fn shutdown_and_the_deadline_fail_running_pods_and_the_workflow() {
        let jobs = Jobs::default();
        let spec = workflow(json!({"shutdown": "Terminate"}));
        let (status, _, _) = run(&spec, &jobs, 5);
        assert_eq!(status["phase"], "Failed");
        assert_eq!(status["message"], "Stopped with strategy 'Terminate'");
        assert_eq!(
            status["nodes"][node_id("wf", "wf[0].build")]["message"],
            "workflow shutdown with strategy: Terminate"
        );
        // Shut down while a pod runs: the two-space message of applyExecutionControl.
        let (running, labels, _) = run(&workflow(json!({})), &jobs, 3);
        let next = operate("ci/wf", "wf", &spec, &running, &labels, &jobs, T0 + 3000);
        let Step::Write { status, .. } = next else {
            panic!("a write")
        };
        assert_eq!(
            status["nodes"][node_id("wf", "wf[0].build")]["message"],
            "workflow shutdown with strategy:  Terminate"
        );
        assert_eq!(status["message"], "Stopped with strategy 'Terminate'");
        jobs.set(
            "ci/wf",
            "wf[0].build",
            vec![Job {
                phase: "Succeeded",
                seconds: 100,
            }],
        );
        let (status, _, _) = run(&workflow(json!({"activeDeadlineSeconds": 10})), &jobs, 15);
        assert_eq!(status["phase"], "Failed");
        assert_eq!(
            status["nodes"][node_id("wf", "wf[0].build")]["message"],
            "Step exceeded its deadline"
        );
    }

    #[test]
    fn a_finished_workflow_is_deleted_when_its_ttl_runs_out() {
        let jobs = Jobs::default();
        let spec = workflow(
            json!({"ttlStrategy": {"secondsAfterSuccess": 30, "secondsAfterFailure": 300}}),
        );
        let (status, _, deleted) = run(&spec, &jobs, 100);
        let finished = status["finishedAt"]
            .as_str()
            .and_then(parse_rfc3339)
            .unwrap();
        let deleted = deleted.expect("deleted after its TTL");
        assert_eq!(T0 + deleted * 1000, finished + 31_000);
        let (_, _, kept) = run(&workflow(json!({})), &jobs, 100);
        assert_eq!(kept, None, "no TTL: kept");
    }

    #[test]
    fn a_template_that_calls_itself_errors_instead_of_recursing_forever() {
        let spec = json!({"entrypoint": "main", "templates": [{"name": "main", "steps": [[{"name": "again", "template": "main"}]]}]});
        let (status, _, _) = run(&spec, &Jobs::default(), 3);
        assert_eq!(status["phase"], "Failed");
        assert!(status["nodes"]
            .as_object()
            .unwrap()
            .values()
            .any(|n| n["message"] == "Maximum recursion depth exceeded"));
    }
}
