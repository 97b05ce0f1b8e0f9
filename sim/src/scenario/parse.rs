//! Strict scenario parsing: errors name the file, line, column and field.

use std::path::Path;

use super::model::{validate_invariant, FaultStep, Role, Scenario};
use super::spans::{Field, Spans};

/// A scenario that could not be read, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: cannot read scenario: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The workload trace `workload.replay` names could not be read or is not a trace.
    #[error("{path}: workload.replay: {trace}: {reason}")]
    Replay {
        /// The scenario file.
        path: String,
        /// The trace file, as resolved.
        trace: String,
        /// What is wrong (with the trace's line).
        reason: String,
    },
    /// The file `restricted_sources.resources` names could not be read or is malformed.
    #[error("{path}: restricted_sources.resources: {file}: {reason}")]
    RestrictedSources {
        /// The scenario file.
        path: String,
        /// The resources file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The objects `promotions.resources` names could not be read or planned.
    #[error("{path}: promotions.resources: {file}: {reason}")]
    Promotions {
        /// The scenario file.
        path: String,
        /// The resources file, as resolved.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// YAML syntax, an unknown field or a value of the wrong type.
    #[error("{path}:{line}:{column}: {field}{message}")]
    Syntax {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The dotted path of the field, followed by `: ` (empty at the top level).
        field: String,
        /// The parser's message, which names the field or value.
        message: String,
    },
    /// A value that parses but makes no sense (unknown host, two actions in one step…).
    #[error("{path}:{line}:{column}: {field}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// 1-based line of the value.
        line: usize,
        /// 1-based column of the value.
        column: usize,
        /// Dotted path of the field, e.g. `faults[2].partition[1]`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// Reads and validates a scenario file.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let mut scenario = parse(&path.display().to_string(), &text)?;
    if let Some(replay) = scenario.workload.replay.clone() {
        let file = path.parent().unwrap_or(Path::new(".")).join(&replay);
        let failed = |reason: String| ScenarioError::Replay {
            path: path.display().to_string(),
            trace: file.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(&file).map_err(|e| failed(e.to_string()))?;
        let trace = super::trace::Trace::parse(&text).map_err(|e| failed(e.to_string()))?;
        scenario.workload.applications = trace.initial_apps().len();
        use super::trace::Kind;
        for (kind, section) in [
            (Kind::Rollout, scenario.workload.rollouts.is_some()),
            (Kind::Workflow, scenario.workload.workflows.is_some()),
        ] {
            if trace.has(kind) && !section {
                return Err(failed(format!(
                    "it replays {}s: the scenario needs workload.{}s (where and how they run)",
                    kind.name(),
                    kind.name().to_lowercase()
                )));
            }
        }
        scenario.workload.trace = Some(std::sync::Arc::new(trace));
    }
    if let Some(restricted) = scenario.restricted_sources.as_mut() {
        let file = path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&restricted.resources);
        let failed = |reason: String| ScenarioError::RestrictedSources {
            path: path.display().to_string(),
            file: file.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(&file).map_err(|e| failed(e.to_string()))?;
        let (sources, repositories) =
            crate::world::restricted::read_resources(&text).map_err(failed)?;
        restricted.sources = sources;
        restricted.repositories = repositories;
        crate::world::restricted::check_changes(restricted).map_err(failed)?;
    }
    if let Some(promotions) = scenario.promotions.as_mut() {
        let file = path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&promotions.resources);
        let failed = |reason: String| ScenarioError::Promotions {
            path: path.display().to_string(),
            file: file.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(&file).map_err(|e| failed(e.to_string()))?;
        let mut objects = Vec::new();
        for (i, document) in serde_saphyr::from_multiple::<serde_json::Value>(&text)
            .map_err(|e| failed(e.to_string()))?
            .into_iter()
            .enumerate()
        {
            if !document.is_object() {
                return Err(failed(format!("document {}: not an object", i + 1)));
            }
            objects.push(document);
        }
        promotions.objects = objects;
        crate::world::promotions::Planned::of(promotions).map_err(failed)?;
    }
    Ok(scenario)
}

/// Deserialises `text`; a failure names the serde path of the field (`faults[1].partiton`),
/// its line and column, and the parser's message.
fn from_str_with_path<T: serde::de::DeserializeOwned>(
    path: &str,
    text: &str,
) -> Result<T, ScenarioError> {
    orrery_system::core::yaml::from_str(text).map_err(|e| ScenarioError::Syntax {
        path: path.to_string(),
        line: e.line,
        column: e.column,
        field: e.field,
        message: e.message,
    })
}

/// Parses and validates scenario text; `path` is only used in messages.
pub fn parse(path: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let scenario: Scenario = from_str_with_path(path, text)?;
    validate(path, &Spans::parse(text), &scenario)?;
    Ok(scenario)
}

/// The checks that need more than types, each naming the exact value it is about.
struct Validator<'a> {
    path: &'a str,
    spans: &'a Spans,
}

impl Validator<'_> {
    fn invalid(&self, field: &Field, message: impl Into<String>) -> ScenarioError {
        let (line, column) = self.spans.locate(field);
        ScenarioError::Invalid {
            path: self.path.to_string(),
            line,
            column,
            field: field.to_string(),
            message: message.into(),
        }
    }

    fn check(
        &self,
        ok: bool,
        field: &Field,
        message: impl Into<String>,
    ) -> Result<(), ScenarioError> {
        if ok {
            Ok(())
        } else {
            Err(self.invalid(field, message))
        }
    }
}

fn validate(path: &str, spans: &Spans, s: &Scenario) -> Result<(), ScenarioError> {
    let v = Validator { path, spans };
    validate_roles(&v, s)?;
    validate_hosted(&v, s)?;
    validate_invariants(&v, s)?;
    validate_workload(&v, s)?;
    validate_reporter(&v, s)?;
    validate_argocd(&v, s)?;
    validate_schedule(&v, s)?;
    if let Some(swarm) = &s.swarm {
        let reporters = s
            .topology
            .hosts
            .iter()
            .filter(|h| h.has(super::model::Role::Reporter))
            .count() as u32;
        let hosts: Vec<&str> = s.topology.hosts.iter().map(|h| h.name.as_str()).collect();
        validate_swarm(&v, s, &hosts, reporters, swarm, s.duration)?;
    }
    Ok(())
}

/// Hosts are unique and every role, section and invariant has the hosts it needs.
fn validate_roles(v: &Validator<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let hosts_field = Field::root("topology").key("hosts");
    // The calm phase resets knobs to these, so a revoked resource could never converge.
    v.check(
        s.apiserver.forbidden.is_empty(),
        &Field::root("apiserver").key("forbidden"),
        "forbidden revokes access for good here; revoke it in a fault step instead",
    )?;
    let hosts: Vec<&str> = s.topology.hosts.iter().map(|h| h.name.as_str()).collect();
    for (i, host) in s.topology.hosts.iter().enumerate() {
        v.check(
            !hosts[..i].contains(&host.name.as_str()),
            &hosts_field.index(i).key("name"),
            format!("host {:?} is declared twice", host.name),
        )?;
    }
    let count = |role: Role| s.topology.hosts.iter().filter(|h| h.has(role)).count();
    // The Kubernetes world (API server, Argo CD, workload) is needed by probes and reporters.
    let kube_world = count(Role::Probe) + count(Role::Reporter) > 0;
    for role in [Role::Apiserver, Role::Argocd, Role::Workload] {
        v.check(
            !((kube_world && count(role) != 1) || count(role) > 1),
            &hosts_field,
            format!(
                "exactly one host must have role {role:?} (found {})",
                count(role)
            ),
        )?;
    }
    let tunnel_world = count(Role::Runtime) + count(Role::Client) > 0;
    v.check(
        !tunnel_world || count(Role::Gateway) == 1,
        &hosts_field,
        "runtimes and clients need exactly one host with role gateway",
    )?;
    let argo_world = count(Role::Rollouts) + count(Role::Workflows) > 0;
    v.check(
        !argo_world || count(Role::Apiserver) == 1,
        &hosts_field,
        "rollouts and workflows hosts need exactly one host with role apiserver",
    )?;
    v.check(
        count(Role::Resources) == 0
            || (count(Role::Apiserver) == 1
                && count(Role::Platform) == 1
                && count(Role::Eventbus) == 1),
        &hosts_field,
        "a resources host needs exactly one host with role apiserver, one with role platform and one with role eventbus (faithful publishes to it; hardened leaves it idle)",
    )?;
    v.check(
        s.runner.is_none()
            || (count(Role::Runner) >= 1
                && count(Role::Platform) == 1
                && count(Role::Apiserver) == 1),
        &Field::root("runner"),
        "the runner needs at least one host with role runner (its agents), one with role platform (its builds API) and one with role apiserver (the cluster its builds run in)",
    )?;
    v.check(
        count(Role::Runner) == 0 || s.runner.is_some(),
        &hosts_field,
        "a runner host needs a `runner:` section (its builds)",
    )?;
    let crons = s.runner.as_ref().and_then(|r| r.cron.as_ref());
    v.check(
        crons.is_none() || count(Role::Cron) >= 1,
        &Field::root("runner").key("cron"),
        "cron triggers need at least one host with role cron (a cronus replica)",
    )?;
    v.check(
        count(Role::Cron) == 0 || crons.is_some(),
        &hosts_field,
        "a cron host needs a `runner.cron` section (its triggers)",
    )?;
    if let Some(runner) = &s.runner {
        let field = Field::root("runner");
        for (ok, key, why) in [
            (
                runner.lost_requests <= 100,
                "lost_requests",
                "lost_requests is a percentage (0-100)",
            ),
            (
                runner.lost_answers <= 100,
                "lost_answers",
                "lost_answers is a percentage (0-100)",
            ),
            (
                !runner.every.is_zero(),
                "every",
                "every must be longer than 0 s",
            ),
            (
                !runner.redeliver_after.is_zero(),
                "redeliver_after",
                "redeliver_after must be longer than 0 s",
            ),
            (runner.burst >= 1, "burst", "burst must be at least 1"),
            (
                runner.steps.iter().all(|st| {
                    st.lines <= orrery_system::platform::runner::queue::MAX_STEP_LINES
                        && st.line_bytes <= orrery_system::platform::runner::queue::MAX_LINE_BYTES
                }),
                "steps",
                "a step writes at most 1000000 lines of at most 65536 bytes",
            ),
            (
                runner.engine_memory_mib.is_none_or(|m| (1..=1 << 20).contains(&m)),
                "engine_memory_mib",
                "engine_memory_mib must be 1 to 1048576 (MiB)",
            ),
            (
                runner
                    .proxy
                    .as_ref()
                    .is_none_or(|p| p.requests >= 1 && !p.every.is_zero()),
                "proxy",
                "proxy.requests must be at least 1 and proxy.every more than 0",
            ),
            (
                runner.proxy.is_none() || count(Role::Git) == 1,
                "proxy",
                "runner.proxy needs exactly one host with role git (the provider the requests go to)",
            ),
            (
                runner.branch_concurrency != Some(0),
                "branch_concurrency",
                "branch_concurrency must be at least 1 (leave it out: unlimited)",
            ),
            (
                runner.trigger_concurrency != Some(0),
                "trigger_concurrency",
                "trigger_concurrency must be at least 1 (leave it out: unlimited)",
            ),
            (
                runner.trigger_concurrency.is_none()
                    || runner.triggers > 0
                    || runner.cron.is_some(),
                "trigger_concurrency",
                "trigger_concurrency holds only builds a trigger started: give triggers (the builds' triggers) or cron",
            ),
            (
                runner.replicas >= 1 && count(Role::Runner) % runner.replicas as usize == 0,
                "replicas",
                "replicas must be at least 1 and divide the number of hosts with role runner (every `replicas` of them, in order, are one agent's pods)",
            ),
            (
                (1..=100).contains(&runner.pipelines),
                "pipelines",
                "pipelines must be 1 to 100",
            ),
            (
                crate::world::runner::pipeline(runner).check().is_ok(),
                "terminate_branch_pattern",
                "terminate_branch_pattern must be a regular expression of at most 1024 bytes",
            ),
            (
                runner.branches >= 1,
                "branches",
                "branches must be at least 1",
            ),
            (
                runner.webhook.as_ref().is_none_or(|w| w.attempts >= 1),
                "webhook",
                "webhook.attempts must be at least 1",
            ),
            (
                runner.webhook.as_ref().is_none_or(|w| !w.timeout.is_zero()),
                "webhook",
                "webhook.timeout must be longer than 0 s",
            ),
            (
                runner
                    .cron
                    .as_ref()
                    .is_none_or(|c| c.every >= std::time::Duration::from_secs(60)),
                "cron",
                "cron.every must be at least 60 s (cronus' minimum period, its LIMIT)",
            ),
            (
                runner.cron.as_ref().is_none_or(|c| c.triggers >= 1),
                "cron",
                "cron.triggers must be at least 1",
            ),
            (
                runner
                    .webhook
                    .as_ref()
                    .is_none_or(|w| w.delay < orrery_system::platform::runner::queue::CLAIM_TTL),
                "webhook",
                "webhook.delay must be under 60 s: hardened takes a delivery claimed longer ago than that, with no build yet, for one whose hermes died",
            ),
            (
                runner.cron.is_none()
                    || s.calm
                        >= std::time::Duration::from_secs(60)
                            + runner.webhook.as_ref().map_or(std::time::Duration::ZERO, |w| w.delay),
                "cron",
                "with cron triggers the calm phase must last at least 60 s (plus webhook.delay): a tick due as it starts is owed, and a new cronus leader needs up to its 15 s lease and a 10 s call to fire it",
            ),
            (
                runner.volumes.as_ref().is_none_or(|v| v.node_gib >= 16),
                "volumes",
                "volumes.node_gib must be at least 16 (one build's 16Gi volume)",
            ),
            (
                runner
                    .volumes
                    .as_ref()
                    .is_none_or(|v| (1..=100).contains(&v.threshold_pct)),
                "volumes",
                "volumes.threshold_pct is a percentage (1-100)",
            ),
            (
                runner
                    .volumes
                    .as_ref()
                    .is_none_or(|v| v.retention >= std::time::Duration::from_secs(60)),
                "volumes",
                "volumes.retention must be at least 60 s",
            ),
        ] {
            v.check(ok, &field.key(key), why)?;
        }
    }
    v.check(
        count(Role::Acr) == 0 || (count(Role::Apiserver) == 1 && count(Role::Argocd) == 1),
        &hosts_field,
        "an acr host needs exactly one host with role apiserver and one with role argocd",
    )?;
    v.check(
        s.restricted_sources.is_none()
            || (count(Role::Operator) >= 1
                && count(Role::Argocd) == 1
                && count(Role::Git) == 1
                && count(Role::Workload) == 1
                && s.argocd.projects),
        &Field::root("restricted_sources"),
        "restricted sources need at least one host with role operator, one argocd, one git, one workload, and argocd.projects: true",
    )?;
    v.check(
        s.promotions.is_none()
            || (count(Role::Promotions) == 1
                && count(Role::Operator) >= 1
                && count(Role::Appproxy) == 1
                && count(Role::Gateway) == 1
                && count(Role::Workflows) == 1
                && count(Role::Workload) == 1),
        &hosts_field,
        "promotions need one host with role promotions, one with appproxy (and runtime), one gateway, one workflows, one workload and at least one operator",
    )?;
    v.check(
        count(Role::Appproxy) == 0
            || s.topology
                .hosts
                .iter()
                .filter(|h| h.has(Role::Appproxy))
                .all(|h| h.has(Role::Runtime)),
        &hosts_field,
        "an appproxy host must also have role runtime (its tunnel and router reach it)",
    )?;
    v.check(
        s.tenants.is_none()
            || (count(Role::Gateway) == 1
                && count(Role::Platform) == 1
                && count(Role::Runtime) >= 2
                && count(Role::Appproxy) == 0),
        &Field::root("tenants"),
        "tenants need one host with role gateway, one with role platform and at least two runtime hosts (each an account), without appproxy",
    )?;
    v.check(
        s.platform.anti_entropy_every.is_none_or(|every| !every.is_zero())
            && (s.platform.anti_entropy_every.is_none()
                || (count(Role::Gateway) == 1
                    && s.topology
                        .hosts
                        .iter()
                        .any(|h| h.has(Role::Gateway) && h.has(Role::Platform))
                    && count(Role::Appproxy) >= 1)),
        &Field::root("platform").key("anti_entropy_every"),
        "the anti-entropy job needs a period above 0, one gateway host that also has role platform (the job sends what it finds through that host's events path), and a runtime host with role appproxy to list",
    )?;
    v.check(
        count(Role::Database) == 0 || (count(Role::Database) == 1 && count(Role::Gateway) == 1),
        &hosts_field,
        "a database host keeps one gateway host's registry and audit log: at most one host with role database, and then exactly one with role gateway",
    )?;
    v.check(
        !s.invariants.iter().any(|i| i.name == "no_acknowledged_write_lost")
            || (count(Role::Database) == 1
                && s.tenants.as_ref().is_some_and(|t| t.register_every.is_some())),
        &Field::root("invariants"),
        "no_acknowledged_write_lost needs a host with role database and tenants.register_every (registrations to check)",
    )?;
    v.check(
        s.tenants
            .as_ref()
            .and_then(|t| t.register_every)
            .is_none_or(|every| every >= std::time::Duration::from_millis(10)),
        &Field::root("tenants"),
        "tenants.register_every must be at least 10ms",
    )?;
    v.check(
        count(Role::Vcluster) == 0 || (s.hosted.is_some() && count(Role::Apiserver) == 1),
        &hosts_field,
        "a vcluster host needs the hosted section and exactly one host with role apiserver (the shared host cluster)",
    )?;
    v.check(
        s.hosted.is_none() || count(Role::Vcluster) >= 1,
        &Field::root("hosted"),
        "the hosted section needs at least one host with role vcluster",
    )?;
    v.check(
        !s.invariants
            .iter()
            .any(|i| i.name == "hosted_runtimes_converge")
            || s.hosted.as_ref().is_some_and(|h| h.runs_runtimes()),
        &Field::root("invariants"),
        "hosted_runtimes_converge needs hosted runtimes: role vcluster hosts and a hosted section with applications above 0",
    )?;
    v.check(
        !s.hosted.as_ref().is_some_and(|h| h.runs_runtimes())
            || !s.topology.hosts.iter().any(|h| {
                h.has(Role::Vcluster)
                    && [Role::Reporter, Role::Argocd, Role::Workload, Role::Cache]
                        .into_iter()
                        .any(|r| h.has(r))
            }),
        &hosts_field,
        "a vcluster host runs its tenant's hosted runtime (hosted.applications above 0): it cannot also have role reporter, argocd, workload or cache",
    )?;
    v.check(
        !s.invariants.iter().any(|i| i.name == "vcluster_isolation") || count(Role::Vcluster) >= 1,
        &Field::root("invariants"),
        "vcluster_isolation needs at least one host with role vcluster",
    )?;
    Ok(())
}

/// The hosted section's rates and sizes.
fn validate_hosted(v: &Validator<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let hosts_field = Field::root("topology").key("hosts");
    let count = |role: Role| s.topology.hosts.iter().filter(|h| h.has(role)).count();
    if let Some(hosted) = &s.hosted {
        v.check(
            hosted.write_every >= std::time::Duration::from_millis(10),
            &Field::root("hosted").key("write_every"),
            "hosted.write_every must be at least 10ms",
        )?;
        v.check(
            (1..=50).contains(&hosted.names),
            &Field::root("hosted").key("names"),
            format!("hosted.names must be 1..=50, not {}", hosted.names),
        )?;
        v.check(
            hosted.applications <= 500,
            &Field::root("hosted").key("applications"),
            format!(
                "hosted.applications must be 0..=500, not {}",
                hosted.applications
            ),
        )?;
        v.check(
            !hosted.runs_runtimes() || count(Role::Platform) == 1,
            &Field::root("hosted").key("applications"),
            "hosted runtimes (hosted.applications above 0) report to the platform: exactly one host with role platform",
        )?;
    }
    v.check(
        count(Role::Adversary) == 0 || s.tenants.is_some(),
        &hosts_field,
        "an adversary host needs the tenants section",
    )?;
    v.check(
        s.tenants
            .as_ref()
            .is_none_or(|t| t.apps_per_runtime >= 1 && t.apps_per_runtime <= 100),
        &Field::root("tenants"),
        "tenants.apps_per_runtime must be 1..=100",
    )?;
    v.check(
        count(Role::Promotions) == 0 || s.promotions.is_some(),
        &hosts_field,
        "a promotions host needs the promotions section",
    )?;
    v.check(
        count(Role::Operator) == 0
            || (count(Role::Apiserver) == 1 && count(Role::Argocd) == 1 && count(Role::Git) == 1),
        &hosts_field,
        "an operator host needs exactly one host with role apiserver, one with role argocd and one with role git",
    )?;
    v.check(
        count(Role::Sources) == 0 || count(Role::Argocd) == 1,
        &hosts_field,
        "a sources host needs exactly one host with role argocd",
    )?;
    if count(Role::Acr) > 0 {
        v.check(
            s.argocd.history_limit >= 2,
            &Field::root("argocd").key("history_limit"),
            format!(
                "with an acr host history_limit must be at least 2 (a finished sync is judged against the entry before it), not {}",
                s.argocd.history_limit
            ),
        )?;
    }
    Ok(())
}

/// Each invariant's hosts and settings.
fn validate_invariants(v: &Validator<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let count = |role: Role| s.topology.hosts.iter().filter(|h| h.has(role)).count();
    for (i, invariant) in s.invariants.iter().enumerate() {
        if matches!(
            invariant.name.as_str(),
            "app_version_reported" | "change_revision_reported"
        ) {
            v.check(
                count(Role::Platform) == 1 && count(Role::Reporter) > 0,
                &Field::root("invariants").index(i).key("name"),
                format!(
                    "{} needs a host with role platform and at least one with role reporter",
                    invariant.name
                ),
            )?;
        }
        if invariant.name.starts_with("restricted_") {
            v.check(
                s.restricted_sources.is_some(),
                &Field::root("invariants").index(i).key("name"),
                format!("{} needs the restricted_sources section", invariant.name),
            )?;
        }
        if invariant.name.starts_with("promotion_") {
            v.check(
                s.promotions.is_some(),
                &Field::root("invariants").index(i).key("name"),
                format!("{} needs the promotions section", invariant.name),
            )?;
        }
        if matches!(
            invariant.name.as_str(),
            "change_revision_correct" | "no_spurious_change"
        ) {
            v.check(
                count(Role::Acr) == 1 && !s.argocd.sync_duration.is_zero(),
                &Field::root("invariants").index(i).key("name"),
                format!(
                    "{} needs a host with role acr and argocd.sync_duration above 0 (without visible sync operations nothing is judged)",
                    invariant.name
                ),
            )?;
        }
    }
    if s.workload.replay.is_some() {
        v.check(
            s.workload.speed.is_finite() && s.workload.speed > 0.0,
            &Field::root("workload").key("speed"),
            format!("speed must be above 0, not {}", s.workload.speed),
        )?;
        v.check(
            s.workload.monorepo.is_none() && s.workload.app_of_apps.is_none(),
            &Field::root("workload").key("replay"),
            "a replayed workload cannot also be a monorepo or an app-of-apps",
        )?;
    }
    Ok(())
}

/// The workload: a monorepo, the Rollouts and Workflows loads, and what they need.
fn validate_workload(v: &Validator<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let hosts_field = Field::root("topology").key("hosts");
    let count = |role: Role| s.topology.hosts.iter().filter(|h| h.has(role)).count();
    if let Some(monorepo) = &s.workload.monorepo {
        let field = Field::root("workload").key("monorepo");
        v.check(
            s.workload.repositories == 1,
            &Field::root("workload").key("repositories"),
            format!(
                "a monorepo is one repository: repositories must be 1, not {}",
                s.workload.repositories
            ),
        )?;
        v.check(
            (1..=10_000).contains(&monorepo.paths),
            &field.key("paths"),
            "paths must be between 1 and 10000",
        )?;
        v.check(
            (1..=monorepo.paths).contains(&monorepo.touch),
            &field.key("touch"),
            format!("touch must be between 1 and paths ({})", monorepo.paths),
        )?;
        v.check(
            s.workload.app_of_apps.is_none(),
            &field,
            "a monorepo workload cannot also be an app-of-apps",
        )?;
    }
    for (load, role, present) in [
        ("rollouts", Role::Rollouts, s.workload.rollouts.is_some()),
        ("workflows", Role::Workflows, s.workload.workflows.is_some()),
    ] {
        v.check(
            !present || (count(role) == 1 && count(Role::Workload) == 1),
            &Field::root("workload").key(load),
            format!("a {load} load needs one host with role {role:?} and one with role workload"),
        )?;
    }
    for (load, namespace) in [
        (
            "rollouts",
            s.workload.rollouts.as_ref().map(|l| &l.namespace),
        ),
        (
            "workflows",
            s.workload.workflows.as_ref().map(|l| &l.namespace),
        ),
    ] {
        if let Some(namespace) = namespace {
            v.check(
                namespace_label(namespace),
                &Field::root("workload").key(load).key("namespace"),
                format!("`{namespace}` is not a namespace name (DNS-1123 label)"),
            )?;
        }
    }
    if let Some(load) = &s.workload.rollouts {
        let field = Field::root("workload").key("rollouts");
        v.check(
            (0..=10_000).contains(&load.replicas),
            &field.key("replicas"),
            "replicas must be between 0 and 10000",
        )?;
    }
    if let Some(load) = &s.workload.workflows {
        let field = Field::root("workload").key("workflows");
        for (key, ok, why) in [
            (
                "retry_limit",
                load.retry_limit <= 10,
                "retry_limit must be at most 10",
            ),
            ("steps", load.steps <= 50, "steps must be at most 50"),
            (
                "fail_percent",
                load.fail_percent <= 100,
                "fail_percent must be at most 100",
            ),
            (
                "max_step_seconds",
                load.max_step_seconds <= 86_400,
                "max_step_seconds must be at most 86400 (a day)",
            ),
            (
                "ttl_seconds",
                load.ttl_seconds <= 31_536_000,
                "ttl_seconds must be at most 31536000 (a year)",
            ),
        ] {
            v.check(ok, &field.key(key), why)?;
        }
    }
    for role in [
        Role::Probe,
        Role::Platform,
        Role::Cache,
        Role::Gateway,
        Role::Rollouts,
        Role::Workflows,
        Role::Resources,
        Role::Eventbus,
        Role::Acr,
        Role::Sources,
        Role::Git,
        Role::Appproxy,
        Role::Promotions,
    ] {
        v.check(
            count(role) <= 1,
            &hosts_field,
            format!(
                "at most one host may have role {role:?} (found {})",
                count(role)
            ),
        )?;
    }
    Ok(())
}

/// The reporters: replicas, rate limiter and the roles next to them.
fn validate_reporter(v: &Validator<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let hosts_field = Field::root("topology").key("hosts");
    let count = |role: Role| s.topology.hosts.iter().filter(|h| h.has(role)).count();
    let reporters = count(Role::Reporter);
    v.check(
        reporters == 0 || (count(Role::Platform) == 1 && count(Role::Cache) == 1),
        &hosts_field,
        "reporters need one host with role platform and one with role cache",
    )?;
    for (i, host) in s.topology.hosts.iter().enumerate() {
        let ordinal = orrery_system::env::Identity::from_host(host.name.as_str()).ordinal;
        v.check(
            !host.has(Role::Reporter) || ordinal.is_some(),
            &hosts_field.index(i).key("name"),
            format!(
                "reporter host {:?} needs an ordinal suffix like reporter-0",
                host.name
            ),
        )?;
    }
    if let Some(replicas) = s.reporter.replicas {
        v.check(
            replicas != 0 && replicas as usize <= reporters,
            &Field::root("reporter").key("replicas"),
            format!("replicas must be between 1 and the {reporters} reporter hosts declared"),
        )?;
    }
    if let Some(limiter) = &s.reporter.rate_limiter {
        let field = Field::root("reporter").key("rate_limiter");
        v.check(
            limiter.bucket_size > 0,
            &field.key("bucket_size"),
            "bucket_size must be at least 1 (each app gets that many events per period)",
        )?;
        v.check(
            !limiter.period.is_zero(),
            &field.key("period"),
            "period must be longer than 0s",
        )?;
    }
    v.check(
        s.argocd.k8s_client_qps > 0,
        &Field::root("argocd").key("k8s_client_qps"),
        "k8s_client_qps must be at least 1 (the controller's writes per second)",
    )?;
    v.check(
        s.reporter.resource_concurrency > 0,
        &Field::root("reporter").key("resource_concurrency"),
        "resource_concurrency must be at least 1",
    )?;
    v.check(
        !s.tick.is_zero() && s.tick <= std::time::Duration::from_secs(1),
        &Field::root("tick"),
        format!("tick must be between 1ms and 1s, got {:?}", s.tick),
    )?;
    v.check(
        !s.duration.is_zero(),
        &Field::root("duration"),
        "the fault phase must last longer than 0s",
    )?;
    v.check(
        !s.seeds.is_empty(),
        &Field::root("seeds"),
        "list at least one seed",
    )?;
    v.check(
        s.workload.repositories != 0,
        &Field::root("workload").key("repositories"),
        "at least one repository is needed",
    )?;
    Ok(())
}

/// App-of-apps trees and the application namespaces.
fn validate_argocd(v: &Validator<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    if let Some(tree) = &s.workload.app_of_apps {
        let field = Field::root("workload").key("app_of_apps");
        v.check(
            tree.parents > 0 && tree.children > 0,
            &field,
            "parents and children must both be at least 1",
        )?;
        v.check(
            tree.parents.saturating_mul(tree.children.saturating_add(1)) <= s.workload.applications,
            &field,
            format!(
                "{} parents with {} children each need {} apps, but workload.applications is {}",
                tree.parents,
                tree.children,
                tree.parents.saturating_mul(tree.children.saturating_add(1)),
                s.workload.applications
            ),
        )?;
    }
    for (i, namespace) in s.argocd.application_namespaces.iter().enumerate() {
        v.check(
            namespace_label(namespace) && namespace != "argocd",
            &Field::root("argocd").key("application_namespaces").index(i),
            format!("`{namespace}` is not a namespace name other than argocd (DNS-1123 label)"),
        )?;
    }
    Ok(())
}

/// Whether `name` is a namespace's name (a DNS-1123 label): the world creates the
/// namespaces a scenario names before its components write into them.
fn namespace_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// The fault schedule, the invariants' settings, the declared results and fault points.
fn validate_schedule(v: &Validator<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let count = |role: Role| s.topology.hosts.iter().filter(|h| h.has(role)).count();
    let hosts: Vec<&str> = s.topology.hosts.iter().map(|h| h.name.as_str()).collect();
    let reporters = count(Role::Reporter);
    for (i, step) in s.faults.iter().enumerate() {
        let clusters: Vec<&str> = s
            .topology
            .hosts
            .iter()
            .filter(|h| h.has(Role::Cluster))
            .map(|h| h.name.as_str())
            .collect();
        let caches: Vec<&str> = s
            .topology
            .hosts
            .iter()
            .filter(|h| h.has(Role::Cache))
            .map(|h| h.name.as_str())
            .collect();
        let argocds: Vec<&str> = s
            .topology
            .hosts
            .iter()
            .filter(|h| h.has(Role::Argocd))
            .map(|h| h.name.as_str())
            .collect();
        let existing = s.argocd.install == super::model::Install::Existing;
        validate_step(
            v,
            &hosts,
            (&caches, &clusters, (&argocds, existing)),
            reporters,
            i,
            step,
            s.duration,
        )?;
    }
    for (i, invariant) in s.invariants.iter().enumerate() {
        let field = Field::root("invariants").index(i);
        validate_invariant(invariant).map_err(|m| {
            let at = match invariant.params.keys().next() {
                Some(param) => field.key("params").key(param),
                None => field.key("name"),
            };
            v.invalid(&at, m)
        })?;
    }
    v.check(
        !s.invariants.is_empty(),
        &Field::root("invariants"),
        "a scenario must check at least one invariant",
    )?;
    v.check(
        !s.expect.is_empty(),
        &Field::root("expect"),
        "declare the expected result for faithful and/or hardened",
    )?;
    for (variant, expected) in &s.expect {
        v.check(
            *expected != super::model::Outcome::Any || s.swarm.is_some(),
            &Field::root("expect").key(variant.as_str()),
            "`any` is an expectation for swarm families only (a scenario with `swarm:`)",
        )?;
    }
    if let Some(buggify) = &s.buggify {
        v.check(
            (0.0..=1.0).contains(&buggify.probability),
            &Field::root("buggify").key("probability"),
            "probability is a chance between 0 and 1",
        )?;
    }
    Ok(())
}

fn validate_swarm(
    v: &Validator<'_>,
    scenario: &Scenario,
    hosts: &[&str],
    reporters: u32,
    swarm: &super::swarm::Swarm,
    duration: std::time::Duration,
) -> Result<(), ScenarioError> {
    let field = Field::root("swarm");
    v.check(
        swarm.count[0] <= swarm.count[1],
        &field.key("count"),
        "count is [fewest, most] faults per seed",
    )?;
    v.check(
        swarm.window[0] <= swarm.window[1] && swarm.window[1].0 <= duration,
        &field.key("window"),
        format!("window is [earliest, latest] start, inside the fault phase ({duration:?})"),
    )?;
    v.check(
        (0.0..=1.0).contains(&swarm.keep),
        &field.key("keep"),
        "keep is a probability between 0 and 1",
    )?;
    v.check(
        !swarm.faults.is_empty(),
        &field.key("faults"),
        "list at least one fault kind to draw from",
    )?;
    if let Some(buggify) = &swarm.buggify {
        let at = field.key("buggify");
        v.check(
            (0.0..=1.0).contains(&buggify.keep),
            &at.key("keep"),
            "keep is a probability between 0 and 1",
        )?;
        let [low, high] = buggify.probability;
        v.check(
            0.0 <= low && low <= high && high <= 1.0,
            &at.key("probability"),
            "probability is [lowest, highest], each between 0 and 1",
        )?;
    }
    for (i, fault) in swarm.faults.iter().enumerate() {
        let at = field.key("faults").index(i);
        let kind = fault.kind().map_err(|m| v.invalid(&at, m))?;
        v.check(
            fault.weight > 0,
            &at.key("weight"),
            "weight must be at least 1",
        )?;
        v.check(
            fault.lasts[0] <= fault.lasts[1],
            &at.key("lasts"),
            "lasts is [shortest, longest]",
        )?;
        v.check(
            fault.max.is_none() || kind == "latency",
            &at.key("max"),
            "max goes with latency",
        )?;
        if let Some([low, high]) = fault.max {
            v.check(
                low <= high,
                &at.key("max"),
                "max is [lowest, highest] bound",
            )?;
        }
        let mut named: Vec<(Field, &str)> = Vec::new();
        for (name, links) in [("partition", &fault.partition), ("latency", &fault.latency)] {
            for (k, link) in links.iter().flatten().enumerate() {
                for (j, host) in link.iter().enumerate() {
                    named.push((at.key(name).index(k).index(j), host.as_str()));
                }
            }
        }
        for (k, host) in fault.crash.iter().flatten().enumerate() {
            named.push((at.key("crash").index(k), host.as_str()));
        }
        for (place, host) in named {
            let known = match host.strip_prefix("role:") {
                Some(_) => !super::draw::hosts_named(scenario, host).is_empty(),
                None => hosts.contains(&host),
            };
            v.check(
                known,
                &place,
                format!("unknown host {host:?}; hosts are {hosts:?}, or role:<role> for every host with a role the topology has"),
            )?;
        }
        for (knob, [low, high]) in fault.apiserver.iter().flatten() {
            let place = at.key("apiserver").key(knob);
            v.check(
                super::swarm::RATE_KNOBS.contains(&knob.as_str()),
                &place,
                format!(
                    "a swarm draws the rate knobs {:?}, not {knob:?}",
                    super::swarm::RATE_KNOBS
                ),
            )?;
            v.check(
                0.0 <= *low && low <= high && *high <= 1.0,
                &place,
                "a rate range is [low, high] within 0..1",
            )?;
        }
    }
    for (i, fault) in swarm.faults.iter().enumerate() {
        let at = field.key("faults").index(i);
        if let Some([low, high]) = fault.scale {
            v.check(
                1 <= low && low <= high && high <= reporters,
                &at.key("scale"),
                format!("scale is [fewest, most] replicas, within 1..={reporters} reporter hosts"),
            )?;
        }
        v.check(
            fault.every.is_none() || fault.scale.is_some(),
            &at.key("every"),
            "every goes with scale",
        )?;
        if let Some(p) = &fault.platform {
            check_spans(
                v,
                &at.key("platform"),
                &[
                    ("api_latency", p.api_latency),
                    ("handler_delay", p.handler_delay),
                ],
            )?;
        }
    }
    let knobs = field.key("knobs");
    if let Some(r) = &swarm.knobs.reporter {
        let at = knobs.key("reporter");
        if let Some([low, high]) = r.replicas {
            v.check(
                1 <= low && low <= high && high <= reporters,
                &at.key("replicas"),
                format!("replicas is [fewest, most], within 1..={reporters} reporter hosts"),
            )?;
        }
        for (name, range) in [("queue_capacity", r.queue_capacity), ("workers", r.workers)] {
            if let Some([low, high]) = range {
                v.check(
                    1 <= low && low <= high,
                    &at.key(name),
                    "a range is [low, high], at least 1",
                )?;
            }
        }
    }
    if let Some(w) = &swarm.knobs.workload {
        check_spans(
            v,
            &knobs.key("workload"),
            &[
                ("commit_every", w.commit_every),
                ("churn_every", w.churn_every),
                ("health_flap_every", w.health_flap_every),
            ],
        )?;
    }
    if let Some(p) = &swarm.knobs.platform {
        check_spans(
            v,
            &knobs.key("platform"),
            &[
                ("api_latency", p.api_latency),
                ("handler_delay", p.handler_delay),
            ],
        )?;
    }
    if let Some(t) = &swarm.knobs.tunnel {
        check_spans(
            v,
            &knobs.key("tunnel"),
            &[
                ("request_every", t.request_every),
                ("execute_delay", t.execute_delay),
                ("retry_after", t.retry_after),
            ],
        )?;
    }
    if let Some(ranges) = &swarm.knobs.apiserver {
        for (name, range) in [
            ("compaction_window", ranges.compaction_window),
            ("bookmark_interval", ranges.bookmark_interval),
        ] {
            if let Some([low, high]) = range {
                v.check(
                    low <= high,
                    &field.key("knobs").key("apiserver").key(name),
                    "a range is [low, high]",
                )?;
            }
        }
    }
    Ok(())
}

/// Each given duration range must be `[low, high]`.
fn check_spans(
    v: &Validator<'_>,
    at: &Field,
    ranges: &[(&str, Option<[super::duration::Span; 2]>)],
) -> Result<(), ScenarioError> {
    for (name, range) in ranges {
        if let Some([low, high]) = range {
            v.check(low <= high, &at.key(name), "a range is [low, high]")?;
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn validate_step(
    v: &Validator<'_>,
    hosts: &[&str],
    (caches, clusters, (argocds, existing)): (&[&str], &[&str], (&[&str], bool)),
    reporters: usize,
    i: usize,
    step: &FaultStep,
    duration: std::time::Duration,
) -> Result<(), ScenarioError> {
    let field = Field::root("faults").index(i);
    let actions = [
        step.partition.is_some(),
        step.repair.is_some(),
        step.crash.is_some(),
        step.restart.is_some(),
        step.latency.is_some(),
        step.apiserver.is_some(),
        step.scale.is_some(),
        step.platform.is_some(),
        step.flush.is_some(),
        step.unregister.is_some(),
        step.rotate_token.is_some(),
        step.git.is_some(),
    ];
    let set = actions.iter().filter(|a| **a).count();
    v.check(set == 1, &field, format!(
        "each fault step needs exactly one of partition, repair, crash, restart, latency, apiserver, scale, platform, flush, unregister, rotate_token, git (found {set})"
    ))?;
    if let Some(git) = &step.git {
        v.check(
            git.latency.is_some()
                || git.outage.is_some()
                || git.rate_limit.is_some()
                || git.hourly_limit.is_some()
                || git.lost_commit_answers.is_some(),
            &field.key("git"),
            "a git fault needs latency, outage, rate_limit, hourly_limit or lost_commit_answers",
        )?;
    }
    v.check(
        step.at <= duration,
        &field.key("at"),
        format!(
            "at {:?} is after the fault phase ends ({duration:?})",
            step.at
        ),
    )?;
    let mut named: Vec<(Field, &str)> = Vec::new();
    for (name, pair) in [("partition", &step.partition), ("repair", &step.repair)] {
        if let Some(pair) = pair {
            for (k, host) in pair.iter().enumerate() {
                named.push((field.key(name).index(k), host.as_str()));
            }
        }
    }
    for (name, host) in [
        ("crash", &step.crash),
        ("restart", &step.restart),
        ("flush", &step.flush),
        ("unregister", &step.unregister),
    ] {
        if let Some(host) = host {
            named.push((field.key(name), host.as_str()));
        }
    }
    if let Some(l) = &step.latency {
        for (k, host) in l.between.iter().enumerate() {
            named.push((field.key("latency").key("between").index(k), host.as_str()));
        }
        v.check(
            l.max >= std::time::Duration::from_millis(1),
            &field.key("latency").key("max"),
            "latency.max must be at least 1ms (every message takes 1 ms or more; 1ms restores a link)",
        )?;
    }
    for (at, host) in named {
        v.check(
            hosts.contains(&host),
            &at,
            format!("unknown host {host:?}; hosts are {hosts:?}"),
        )?;
    }
    // Actions that need a host of one role.
    for (action, host, role, allowed) in [
        ("unregister", &step.unregister, "cluster", clusters),
        ("flush", &step.flush, "cache", caches),
        (
            "rotate_token",
            &step.rotate_token.as_ref().map(|r| r.argocd.clone()),
            "argocd",
            argocds,
        ),
    ] {
        if let Some(host) = host {
            v.check(
                allowed.contains(&host.as_str()),
                &field.key(action),
                format!("{host:?} is not a {role} host; {role} hosts are {allowed:?}"),
            )?;
        }
    }
    if let Some(reject) = step.platform.as_ref().and_then(|p| p.reject.as_ref()) {
        let at = field.key("platform").key("reject");
        v.check(
            (400..=599).contains(&reject.status),
            &at.key("status"),
            format!(
                "status must be an HTTP error status (400-599), not {}",
                reject.status
            ),
        )?;
        v.check(
            reject.percent <= 100,
            &at.key("percent"),
            format!("percent must be at most 100, not {}", reject.percent),
        )?;
    }
    if step.rotate_token.is_some() {
        v.check(
            existing,
            &field.key("rotate_token"),
            "a token rotation needs `argocd: {install: existing}` (a bundled Argo CD's token is the runtime's own configuration)",
        )?;
    }
    if let Some(scale) = &step.scale {
        v.check(
            scale.replicas != 0 && scale.replicas as usize <= reporters,
            &field.key("scale").key("replicas"),
            format!(
                "scale to between 1 and the {reporters} reporter hosts declared, not {}",
                scale.replicas
            ),
        )?;
    }
    if let Some(forbidden) = step.apiserver.as_ref().and_then(|p| p.forbidden.as_ref()) {
        let served: Vec<String> = super::kinds::registry()
            .into_iter()
            .map(|k| k.plural)
            .collect();
        if let Some((k, unknown)) = forbidden
            .iter()
            .enumerate()
            .find(|(_, r)| !served.contains(r))
        {
            return Err(v.invalid(
                &field.key("apiserver").key("forbidden").index(k),
                format!(
                    "forbidden: {unknown:?} is not a served resource (one of: {})",
                    served.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name: t
description: d
topology:
  hosts:
    - {name: apiserver, role: apiserver}
    - {name: argocd, role: argocd}
    - {name: workload, role: workload}
    - {name: probe, role: probe}
faults:
  - at: 5s
    partition: [probe, apiserver]
duration: 10s
calm: 10s
invariants:
  - name: probe_matches_apiserver
expect:
  faithful: pass
";

    #[test]
    fn a_good_scenario_parses_with_defaults() {
        let s = parse("t.yaml", GOOD).unwrap();
        assert_eq!(s.seeds, vec![1]);
        assert_eq!(s.workload.applications, 50);
    }

    /// A scenario of one agent with this `runner:` section (flow style) and invariant.
    fn runner_scenario(runner: &str, invariant: &str) -> String {
        format!(
            "name: r
description: d
topology:
  hosts:
    - {{name: apiserver, role: apiserver}}
    - {{name: platform, role: platform}}
    - {{name: runner, role: runner}}
runner: {runner}
duration: 10s
calm: 10s
invariants:
  - name: {invariant}
expect:
  faithful: pass
"
        )
    }

    #[test]
    fn runner_volumes_refuse_a_node_smaller_than_a_volume_and_a_threshold_past_100() {
        let scenario = |volumes: &str| {
            runner_scenario(&format!("{{volumes: {volumes}}}"), "runner_volume_kept")
        };
        let ok = parse("v.yaml", &scenario("{node_gib: 48}")).unwrap();
        let volumes = ok.runner.unwrap().volumes.unwrap();
        assert_eq!((volumes.node_gib, volumes.threshold_pct), (48, 80));
        let err = parse("v.yaml", &scenario("{node_gib: 8}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("volumes.node_gib must be at least 16"),
            "{err}"
        );
        let err = parse("v.yaml", &scenario("{threshold_pct: 120}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("threshold_pct is a percentage"), "{err}");
    }

    #[test]
    fn a_trigger_limit_needs_builds_a_trigger_started_and_is_at_least_one() {
        let scenario = |runner: &str| runner_scenario(runner, "runner_concurrency_limit");
        let ok = parse("t.yaml", &scenario("{triggers: 2, trigger_concurrency: 1}")).unwrap();
        assert_eq!(ok.runner.unwrap().trigger_concurrency, Some(1));
        for (runner, says) in [
            ("{trigger_concurrency: 1}", "give triggers"),
            ("{triggers: 2, trigger_concurrency: 0}", "at least 1"),
        ] {
            let err = parse("t.yaml", &scenario(runner)).unwrap_err().to_string();
            assert!(
                err.contains("trigger_concurrency") && err.contains(says),
                "{runner}: {err}"
            );
        }
    }

    #[test]
    fn a_misspelt_field_names_file_line_column_and_field() {
        let bad = GOOD.replace(
            "    partition: [probe, apiserver]",
            "    partiton: [probe, apiserver]",
        );
        let err = parse("scenarios/t.yaml", &bad).unwrap_err().to_string();
        assert!(err.starts_with("scenarios/t.yaml:11:"), "{err}");
        assert!(err.contains("unknown field `partiton`"), "{err}");
    }

    #[test]
    fn an_unknown_host_in_a_fault_is_rejected_at_its_exact_line_and_column() {
        let bad = GOOD.replace("[probe, apiserver]", "[probe, apisrv]");
        let err = parse("t.yaml", &bad).unwrap_err().to_string();
        assert!(
            err.starts_with("t.yaml:11:24: faults[0].partition[1]: unknown host \"apisrv\""),
            "{err}"
        );
    }

    /// Hosted runtimes report to the platform; their invariant needs them.
    #[test]
    fn hosted_runtimes_need_a_platform_host_and_their_invariant_needs_them() {
        let hosted = "name: t
description: d
topology:
  hosts:
    - {name: apiserver, role: apiserver}
    - {name: acme, role: vcluster}
hosted:
  applications: 5
duration: 10s
calm: 10s
invariants:
  - name: vcluster_isolation
expect:
  hardened: pass
";
        let err = parse("t.yaml", hosted).unwrap_err().to_string();
        assert!(
            err.contains("hosted.applications: hosted runtimes (hosted.applications above 0) report to the platform: exactly one host with role platform"),
            "{err}"
        );
        let with_platform = hosted.replace(
            "    - {name: acme, role: vcluster}",
            "    - {name: acme, role: vcluster}\n    - {name: platform, role: platform}",
        );
        parse("t.yaml", &with_platform).unwrap();
        let too_many = with_platform.replace("applications: 5", "applications: 501");
        let err = parse("t.yaml", &too_many).unwrap_err().to_string();
        assert!(
            err.contains("hosted.applications must be 0..=500, not 501"),
            "{err}"
        );
        let without_runtimes = with_platform
            .replace("applications: 5", "applications: 0")
            .replace(
                "  - name: vcluster_isolation\n",
                "  - name: vcluster_isolation\n  - name: hosted_runtimes_converge\n",
            );
        let err = parse("t.yaml", &without_runtimes).unwrap_err().to_string();
        assert!(
            err.contains("hosted_runtimes_converge needs hosted runtimes: role vcluster hosts and a hosted section with applications above 0"),
            "{err}"
        );
        let doubled = with_platform.replace(
            "{name: acme, role: vcluster}",
            "{name: acme, role: vcluster, roles: [cache]}",
        );
        let err = parse("t.yaml", &doubled).unwrap_err().to_string();
        assert!(
            err.contains("topology.hosts: a vcluster host runs its tenant's hosted runtime (hosted.applications above 0): it cannot also have role reporter, argocd, workload or cache"),
            "{err}"
        );
    }

    #[test]
    fn change_revision_invariants_need_an_acr_host_and_visible_syncs() {
        let without_acr = GOOD.replace(
            "  - name: probe_matches_apiserver",
            "  - name: probe_matches_apiserver\n  - name: change_revision_correct",
        );
        let err = parse("t.yaml", &without_acr).unwrap_err().to_string();
        assert!(
            err.contains("invariants[1].name: change_revision_correct needs a host with role acr"),
            "{err}"
        );
        let with_acr = without_acr.replace(
            "    - {name: probe, role: probe}",
            "    - {name: probe, role: probe}\n    - {name: acr, role: acr}",
        );
        let err = parse("t.yaml", &with_acr).unwrap_err().to_string();
        assert!(err.contains("argocd.sync_duration above 0"), "{err}");
        let good = with_acr.replace(
            "duration: 10s",
            "argocd: {sync_duration: 2s}\nduration: 10s",
        );
        parse("t.yaml", &good).unwrap();
        let short = good.replace(
            "{sync_duration: 2s}",
            "{sync_duration: 2s, history_limit: 1}",
        );
        let err = parse("t.yaml", &short).unwrap_err().to_string();
        assert!(
            err.contains("argocd.history_limit: with an acr host history_limit must be at least 2"),
            "{err}"
        );
        let monorepo = good.replace(
            "duration: 10s",
            "workload: {repositories: 2, monorepo: {paths: 10}}\nduration: 10s",
        );
        let err = parse("t.yaml", &monorepo).unwrap_err().to_string();
        assert!(
            err.contains("workload.repositories: a monorepo is one repository"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_invariant_points_at_its_name_or_parameter() {
        let bad = GOOD.replace(
            "  - name: probe_matches_apiserver",
            "  - name: probe_matches",
        );
        let err = parse("t.yaml", &bad).unwrap_err().to_string();
        assert!(
            err.starts_with("t.yaml:15:11: invariants[0].name: unknown invariant"),
            "{err}"
        );
        let bad = GOOD.replace(
            "  - name: probe_matches_apiserver",
            "  - name: probe_matches_apiserver\n    params: {window: 5s}",
        );
        let err = parse("t.yaml", &bad).unwrap_err().to_string();
        assert!(
            err.starts_with("t.yaml:16:22: invariants[0].params.window: invariant"),
            "{err}"
        );
    }

    #[test]
    fn a_duplicate_host_points_at_the_second_declaration() {
        let bad = GOOD.replace("{name: probe, role: probe}", "{name: argocd, role: probe}");
        let err = parse("t.yaml", &bad).unwrap_err().to_string();
        assert!(
            err.starts_with("t.yaml:8:14: topology.hosts[3].name:"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_duration_and_a_bad_knob_are_rejected_where_they_are() {
        let err = parse("t.yaml", &GOOD.replace("calm: 10s", "calm: 10 parsecs"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.yaml:13:7: calm: ") && err.contains("unknown unit"),
            "{err}"
        );
        let knob = GOOD.replace(
            "    partition: [probe, apiserver]",
            "    apiserver: {cut_rate: 0.5}",
        );
        let err = parse("t.yaml", &knob).unwrap_err().to_string();
        assert!(
            err.starts_with("t.yaml:11:17: faults[0].apiserver.cut_rate: unknown field `cut_rate`"),
            "{err}"
        );
    }

    #[test]
    fn app_of_apps_and_application_namespaces_are_checked_where_they_are() {
        let tree = |parents, children| {
            GOOD.replace(
                "calm: 10s",
                &format!("calm: 10s\nworkload: {{applications: 20, app_of_apps: {{parents: {parents}, children: {children}}}}}"),
            )
        };
        assert!(
            parse("t.yaml", &tree(4, 4)).is_ok(),
            "4 parents + 16 children = 20 apps"
        );
        let err = parse("t.yaml", &tree(4, 5)).unwrap_err().to_string();
        assert!(
            err.starts_with("t.yaml:14:43: workload.app_of_apps:")
                && err.contains(
                    "4 parents with 5 children each need 24 apps, but workload.applications is 20"
                ),
            "{err}"
        );
        let err = parse("t.yaml", &tree(0, 5)).unwrap_err().to_string();
        assert!(
            err.contains("parents and children must both be at least 1"),
            "{err}"
        );
        let namespaces = GOOD.replace(
            "calm: 10s",
            "calm: 10s\nargocd: {application_namespaces: [team-a, Team_B]}",
        );
        let err = parse("t.yaml", &namespaces).unwrap_err().to_string();
        assert!(
            err.starts_with("t.yaml:14:43: argocd.application_namespaces[1]:")
                && err.contains("`Team_B` is not a namespace name"),
            "{err}"
        );
        // The world creates the loads' namespaces, so they are names too.
        let rollouts = GOOD
            .replace(
                "    - {name: probe, role: probe}",
                "    - {name: probe, role: probe}\n    - {name: r, role: rollouts}",
            )
            .replace(
                "calm: 10s",
                "calm: 10s\nworkload: {rollouts: {namespace: Roll}}",
            );
        let err = parse("t.yaml", &rollouts).unwrap_err().to_string();
        assert!(
            err.contains("workload.rollouts.namespace:")
                && err.contains("`Roll` is not a namespace name"),
            "{err}"
        );
    }

    #[test]
    fn a_forbidden_fault_must_name_served_resources() {
        let good = GOOD.replace(
            "    partition: [probe, apiserver]",
            "    apiserver: {forbidden: [applications, configmaps]}",
        );
        assert!(parse("t.yaml", &good).is_ok());
        let typo = GOOD.replace(
            "    partition: [probe, apiserver]",
            "    apiserver: {forbidden: [aplications]}",
        );
        let err = parse("t.yaml", &typo).unwrap_err().to_string();
        assert!(
            err.starts_with("t.yaml:11:29: faults[0].apiserver.forbidden[0]:")
                && err.contains("\"aplications\" is not a served resource"),
            "{err}"
        );
    }
}
