//! Headline figures: the few numbers a reader compares first, per run. One definition feeds
//! the scenario page (variants side by side), the run's final JSON line (`figures`) and the
//! sweep report (their distribution across seeds).
//!
//! A figure is present only when the run has what it measures (a run without reporters has
//! no queue depth); its name carries its unit (`_ms`, `_pct`, or a count).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::harness::metrics::Metrics;

/// Every headline figure, in reading order: (name, what it is).
pub const FIGURES: [(&str, &str); 82] = [
    ("stale_apps_at_end", "stale or missing apps at the end"),
    ("stale_rollouts_at_end", "stale rollouts at the end"),
    (
        "stale_workflows_at_end",
        "workflows in another phase at the end",
    ),
    ("events_dropped", "events dropped by the reporters"),
    ("peak_queue_depth", "highest queue depth (all replicas)"),
    ("write_to_platform_p99_ms", "write → platform latency p99"),
    (
        "longest_orphan_window_ms",
        "longest window an app had no live owner",
    ),
    ("apps_ever_orphaned", "apps ever without a live owner"),
    (
        "argocd_requests_per_change",
        "requests to Argo CD's API per application change",
    ),
    (
        "argocd_requests_per_app_event",
        "requests to Argo CD's API per app event delivered",
    ),
    (
        "platform_bytes_per_change",
        "bytes posted to the platform per application change",
    ),
    (
        "platform_read_bytes_per_change",
        "bytes read from the platform per application change",
    ),
    (
        "watch_lines_per_change",
        "watch lines per application change",
    ),
    (
        "requests_2xx_pct",
        "requests answered 2xx through the tunnel",
    ),
    ("duplicate_executions", "writes executed twice"),
    (
        "tunnel_back_after_repair_max_ms",
        "tunnel back after a repair (longest)",
    ),
    (
        "fleet_back_after_restart_max_ms",
        "fleet back after a server restart (slowest)",
    ),
    ("peak_registrations_per_s", "peak registrations per second"),
    (
        "wrong_change_revisions_at_end",
        "apps left with a wrong change revision",
    ),
    (
        "apps_without_version",
        "apps shown without their app version",
    ),
    ("resource_states_lost", "resource states lost"),
    (
        "releases_succeeded",
        "releases that reached every environment",
    ),
    (
        "duplicate_promotion_commits",
        "promotion commits made twice",
    ),
    (
        "promotion_duplicates_prevented",
        "promotion commits found made, not repeated",
    ),
    (
        "lead_time_to_production_max_ms",
        "commit → last environment verified (slowest)",
    ),
    (
        "deployments_outside_source",
        "apps deployed outside their RestrictedGitSource",
    ),
    ("apps_refused", "apps Argo CD refused for their project"),
    (
        "source_change_to_project_max_ms",
        "RestrictedGitSource change → AppProject (slowest)",
    ),
    (
        "drops_shown_unable",
        "runtime drops the platform showed as Unable to communicate",
    ),
    (
        "drop_to_unable_max_ms",
        "drop → shown Unable to communicate (slowest)",
    ),
    (
        "tunnel_up_to_healthy_max_ms",
        "tunnel back → shown Healthy (slowest)",
    ),
    (
        "acknowledged_events_lost",
        "events answered 2xx that never reached the read model",
    ),
    (
        "events_redelivered",
        "events handled again after a platform restart",
    ),
    ("tenant_probes", "adversarial requests across accounts"),
    ("tenant_probes_refused", "of them refused (400/401/403/404)"),
    (
        "tenant_leaks",
        "answers that carried another account's data",
    ),
    (
        "tenant_foreign_reached",
        "requests that reached another account's runtime",
    ),
    ("tenant_denials_audited", "denials in the audit log"),
    (
        "registrations_answered",
        "registrations answered with a token",
    ),
    ("registrations_rotated", "of them replacing a token"),
    (
        "store_unavailable",
        "requests answered 503 (store could not keep them)",
    ),
    ("store_commits", "database transactions committed"),
    (
        "store_opens",
        "control-plane starts that loaded the database",
    ),
    (
        "store_fenced",
        "commits refused from a process that no longer held it",
    ),
    (
        "anti_entropy_passes",
        "runtimes the platform's anti-entropy job listed or tried",
    ),
    (
        "anti_entropy_updated",
        "apps it sent again (stale or missing in the read model)",
    ),
    (
        "anti_entropy_tombstoned",
        "apps it showed deleted (gone from the runtime)",
    ),
    (
        "vcluster_copies_synced",
        "host copies the vcluster syncers created, updated or deleted",
    ),
    (
        "vcluster_conflicts",
        "another object's copy found at an object's host name",
    ),
    (
        "vcluster_foreign_mounts",
        "objects whose host name holds another object's copy at the end",
    ),
    (
        "hosted_runtime_apps",
        "apps in the hosted runtimes' virtual clusters at the end",
    ),
    (
        "hosted_runtime_stale_apps",
        "hosted runtimes' apps the platform shows otherwise, or shows though gone",
    ),
    (
        "runner_builds_succeeded",
        "Runner builds that ended as their steps did",
    ),
    (
        "runner_builds_errored",
        "Runner builds the platform failed (error or terminated)",
    ),
    (
        "runner_tasks_executed_again",
        "Runner tasks an agent executed a second time",
    ),
    (
        "runner_tasks_on_two_pods",
        "Runner tasks two replicas of one agent both executed",
    ),
    (
        "runner_orphans_at_end",
        "pods and volume claims of ended builds left at the end",
    ),
    (
        "runner_creates_after_end",
        "pods and volume claims made for a build after it ended",
    ),
    (
        "runner_task_round_trip_p99_ms",
        "Runner task handed out → its status accepted, p99",
    ),
    (
        "runner_admission_latency_p99_ms",
        "Runner build made → admitted, p99",
    ),
    (
        "runner_peak_admitted",
        "most Runner builds of the pipeline admitted at once",
    ),
    (
        "runner_duplicate_builds",
        "Runner builds beyond the first that one webhook delivery started",
    ),
    (
        "runner_cron_ticks_due",
        "cron ticks due before the calm phase",
    ),
    (
        "runner_cron_duplicate_builds",
        "Runner builds beyond the first that one cron tick started",
    ),
    (
        "runner_cron_lost_ticks",
        "cron ticks due that started no build and were not reported missed",
    ),
    (
        "runner_cron_missed_ticks",
        "cron ticks reported missed (past the catch-up window)",
    ),
    (
        "runner_volumes_created",
        "dind volumes the provisioner created",
    ),
    ("runner_proxy_tasks", "proxy agent tasks the UI asked for"),
    (
        "runner_proxy_reported_success",
        "proxy tasks the platform holds as done with Success",
    ),
    (
        "runner_proxy_reported_error",
        "proxy tasks the platform holds as done with Error (the target's refusal named)",
    ),
    (
        "runner_proxy_false_success",
        "proxy tasks reported Success whose request did not take effect",
    ),
    (
        "runner_proxy_tries",
        "HTTP tries the agents made for proxy tasks (retries included)",
    ),
    (
        "runner_proxy_duplicate_commits",
        "commits beyond the first one proxy request made (a POST retried after its answer was lost)",
    ),
    ("runner_log_lines", "log lines the builds' engines wrote"),
    (
        "runner_log_requests_per_100_lines",
        "log requests the engines sent per 100 lines the platform took",
    ),
    (
        "runner_log_peak_mib",
        "most unsent log lines one engine held at once, MiB",
    ),
    (
        "runner_log_lines_lost",
        "log lines written by an engine killed before it sent them",
    ),
    (
        "runner_engines_oom_killed",
        "engines killed for the memory their unsent log lines took",
    ),
    (
        "runner_volumes_reused",
        "builds whose claim was bound to a volume an earlier build left (its cache)",
    ),
    (
        "runner_volumes_marked",
        "dind volumes the local volumes cleaner marked for deletion",
    ),
    (
        "runner_volumes_removed_in_use",
        "dind volume directories removed while a build's claim held them",
    ),
    (
        "runner_volumes_expired",
        "released dind volumes the external cleaner deleted past their retention",
    ),
];

/// The headline figures of a run's metrics (integers, except percentages to one decimal).
pub fn of(metrics: &Metrics) -> BTreeMap<String, Value> {
    let mut figures = BTreeMap::new();
    let mut put = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            figures.insert(name.to_string(), value);
        }
    };
    let last = |series: &str| {
        metrics
            .series
            .get(series)
            .and_then(|p| p.last())
            .map(|(_, v)| json!(v))
    };
    let counter = |name: &str| metrics.counters.get(name).map(|v| json!(v));
    let max_if_any = |histogram: &str| {
        metrics
            .histograms
            .get(histogram)
            .filter(|h| h.count > 0)
            .map(|h| json!(h.max))
    };
    put("stale_apps_at_end", last("stale_apps"));
    put("stale_rollouts_at_end", last("stale_rollouts"));
    put("stale_workflows_at_end", last("stale_workflows"));
    put("events_dropped", last("dropped_events"));
    put(
        "peak_queue_depth",
        metrics
            .series
            .get("queue_depth")
            .and_then(|p| p.iter().map(|(_, v)| *v).max())
            .map(|v| json!(v)),
    );
    put(
        "write_to_platform_p99_ms",
        metrics
            .histograms
            .get("end_to_end_latency_write_to_platform")
            .map(|h| json!(h.p99)),
    );
    if let Some(o) = &metrics.ownership {
        put(
            "longest_orphan_window_ms",
            Some(json!(o.longest_orphan_window_ms)),
        );
        put("apps_ever_orphaned", Some(json!(o.apps_ever_orphaned)));
    }
    for (name, value) in per_change(metrics) {
        put(name, Some(json!(value)));
    }
    // The same requests per app event delivered: a variant that drops changes (faithful)
    // asks nothing for them, so per change alone flatters it.
    let sent_app = metrics
        .counters
        .get("reporter.events_sent.app")
        .copied()
        .unwrap_or(0);
    let asked = sum_of(&metrics.counters, "argocd.requests.");
    if sent_app > 0 && asked > 0 {
        let per_event = (asked as f64 * 100.0 / sent_app as f64).round() / 100.0;
        put("argocd_requests_per_app_event", Some(json!(per_event)));
    }
    let requests = sum_of(&metrics.counters, "client.requests.");
    if requests > 0 {
        let ok = metrics
            .counters
            .get("client.requests.2xx")
            .copied()
            .unwrap_or(0);
        let pct = (ok as f64 * 1000.0 / requests as f64).round() / 10.0;
        put("requests_2xx_pct", Some(json!(pct)));
    }
    put(
        "duplicate_executions",
        counter("runtime.duplicate_executions"),
    );
    put(
        "tunnel_back_after_repair_max_ms",
        max_if_any("tunnel_back_after_repair"),
    );
    put(
        "fleet_back_after_restart_max_ms",
        max_if_any("fleet_reconnect_after_restart"),
    );
    put(
        "peak_registrations_per_s",
        counter("tunnel.peak_registrations_per_s"),
    );
    put(
        "wrong_change_revisions_at_end",
        counter("acr.never_correct"),
    );
    put(
        "apps_without_version",
        counter("platform.apps_without_version"),
    );
    if metrics.counters.contains_key("runner.builds") {
        let n = |name: &str| metrics.counters.get(name).copied().unwrap_or(0);
        put(
            "runner_builds_succeeded",
            Some(json!(
                n("runner.builds.success") + n("runner.builds.failure")
            )),
        );
        put(
            "runner_builds_errored",
            Some(json!(
                n("runner.builds.error") + n("runner.builds.terminated")
            )),
        );
        put(
            "runner_tasks_executed_again",
            counter("runner.tasks_executed_again"),
        );
        if metrics.counters.contains_key("runner.tasks_on_two_pods") {
            put(
                "runner_tasks_on_two_pods",
                counter("runner.tasks_on_two_pods"),
            );
        }
        put("runner_orphans_at_end", counter("runner.orphans"));
        put(
            "runner_creates_after_end",
            counter("runner.creates_after_end"),
        );
        put("runner_peak_admitted", counter("runner.peak_admitted"));
        put(
            "runner_duplicate_builds",
            counter("runner.duplicate_builds"),
        );
        put("runner_cron_ticks_due", counter("runner.cron.due"));
        put(
            "runner_cron_duplicate_builds",
            counter("runner.cron.duplicate_builds"),
        );
        put("runner_cron_lost_ticks", counter("runner.cron.lost"));
        put("runner_cron_missed_ticks", counter("runner.cron.missed"));
        put("runner_volumes_created", counter("runner.volumes.created"));
        if metrics.counters.contains_key("runner.proxy.tasks") {
            put("runner_proxy_tasks", counter("runner.proxy.tasks"));
            put(
                "runner_proxy_reported_success",
                counter("runner.proxy.success"),
            );
            put("runner_proxy_reported_error", counter("runner.proxy.error"));
            put(
                "runner_proxy_false_success",
                counter("runner.proxy.false_success"),
            );
            put("runner_proxy_tries", counter("runner.proxy.tries"));
            put(
                "runner_proxy_duplicate_commits",
                counter("runner.proxy.duplicate_commits"),
            );
        }
        if let Some(&written) = metrics.counters.get("runner.logs.written") {
            put("runner_log_lines", Some(json!(written)));
            let requests = n("runner.logs.requests");
            let sent = written.saturating_sub(n("runner.logs.lost"));
            put(
                "runner_log_requests_per_100_lines",
                Some(json!(
                    (requests as f64 * 100.0 / sent.max(1) as f64 * 10.0).round() / 10.0
                )),
            );
            put(
                "runner_log_peak_mib",
                Some(json!(
                    (n("runner.logs.peak_bytes") as f64 / 1048576.0 * 100.0).round() / 100.0
                )),
            );
            put("runner_log_lines_lost", counter("runner.logs.lost"));
            put(
                "runner_engines_oom_killed",
                counter("runner.logs.oom_kills"),
            );
        }
        put("runner_volumes_reused", counter("runner.volumes.reused"));
        put("runner_volumes_marked", counter("runner.volumes.marked"));
        put(
            "runner_volumes_removed_in_use",
            counter("runner.volumes.removed_in_use"),
        );
        put("runner_volumes_expired", counter("runner.volumes.expired"));
        put(
            "runner_admission_latency_p99_ms",
            metrics
                .histograms
                .get("runner.admission_latency")
                .map(|h| json!(h.p99)),
        );
        put(
            "runner_task_round_trip_p99_ms",
            metrics
                .histograms
                .get("runner.task_round_trip")
                .map(|h| json!(h.p99)),
        );
    }
    if metrics.counters.contains_key("promotion.duplicate_commits") {
        put(
            "releases_succeeded",
            Some(json!(counter("promotion.releases.Succeeded")
                .and_then(|v| v.as_u64())
                .unwrap_or(0))),
        );
        put(
            "duplicate_promotion_commits",
            counter("promotion.duplicate_commits"),
        );
        put(
            "promotion_duplicates_prevented",
            counter("promotion.duplicates_prevented"),
        );
        put(
            "lead_time_to_production_max_ms",
            counter("promotion.lead_time_to_last_max_ms"),
        );
    }
    if metrics
        .counters
        .contains_key("restricted.deployments_outside")
    {
        put(
            "deployments_outside_source",
            counter("restricted.deployments_outside"),
        );
        put("apps_refused", counter("restricted.apps_refused"));
        put(
            "source_change_to_project_max_ms",
            counter("restricted.propagation_max_ms"),
        );
    }
    if metrics.counters.contains_key("monitor.drops_shown") {
        put("drops_shown_unable", counter("monitor.drops_shown"));
        put(
            "drop_to_unable_max_ms",
            counter("monitor.drop_to_unable_max_ms"),
        );
        put(
            "tunnel_up_to_healthy_max_ms",
            counter("monitor.up_to_healthy_max_ms"),
        );
    }
    if metrics.counters.contains_key("tenants.probes") {
        put("tenant_probes", counter("tenants.probes"));
        put("tenant_probes_refused", counter("tenants.refused"));
        put("tenant_leaks", counter("tenants.leaks"));
        put("tenant_foreign_reached", counter("tenants.reached_foreign"));
        put("tenant_denials_audited", counter("tenants.denials_audited"));
    }
    if metrics.counters.contains_key("store.commits") {
        put(
            "registrations_answered",
            counter("store.registrations_answered"),
        );
        put(
            "registrations_rotated",
            counter("store.registrations_rotated"),
        );
        put("store_unavailable", counter("store.unavailable"));
        put("store_commits", counter("store.commits"));
        put("store_opens", counter("store.opens"));
        put("store_fenced", counter("store.fenced"));
    }
    if metrics.counters.contains_key("anti_entropy.passes") {
        put("anti_entropy_passes", counter("anti_entropy.passes"));
        put("anti_entropy_updated", counter("anti_entropy.updated"));
        put(
            "anti_entropy_tombstoned",
            counter("anti_entropy.tombstoned"),
        );
    }
    if metrics.counters.contains_key("vcluster.objects") {
        put("vcluster_copies_synced", counter("vcluster.synced"));
        put("vcluster_conflicts", counter("vcluster.conflicts"));
        put(
            "vcluster_foreign_mounts",
            counter("vcluster.foreign_mounts"),
        );
    }
    if metrics.counters.contains_key("hosted.apps") {
        put("hosted_runtime_apps", counter("hosted.apps"));
        put("hosted_runtime_stale_apps", counter("hosted.stale"));
    }
    if metrics.counters.contains_key("bus.recoveries") {
        put(
            "acknowledged_events_lost",
            counter("bus.acknowledged_never_handled"),
        );
        put("events_redelivered", counter("bus.redelivered"));
    }
    let resources = metrics
        .counters
        .keys()
        .any(|k| k.starts_with("resources.delivered.") || k.starts_with("resources.lost."));
    if resources {
        let lost: u64 = metrics
            .counters
            .iter()
            .filter(|(k, _)| k.starts_with("resources.lost."))
            .map(|(_, v)| *v)
            .sum();
        put("resource_states_lost", Some(json!(lost)));
    }
    figures
}

/// A figure's value as a reader reads it: durations in seconds, percentages with `%`.
pub fn format(name: &str, value: &Value) -> String {
    let number = value.as_f64().unwrap_or(0.0);
    if name.ends_with("_ms") {
        format!("{:.1} s", number / 1000.0)
    } else if name.ends_with("_pct") {
        format!("{number:.1} %")
    } else if number.fract() == 0.0 {
        format!("{number:.0}")
    } else {
        format!("{number:.1}")
    }
}

/// The sum of the counters whose names start with `prefix`.
fn sum_of(counters: &BTreeMap<String, u64>, prefix: &str) -> u64 {
    counters
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| *v)
        .sum()
}

/// The per-change cost figures (issue 54): what the runtime asked of Argo CD, sent to and
/// read from the platform, and what the API server's watches carried, per application
/// change (a stored write to an Application), to two decimals. Present only where apps
/// changed and the run has what the figure counts (reporters, a platform).
pub fn per_change(metrics: &Metrics) -> Vec<(&'static str, f64)> {
    let counters = &metrics.counters;
    let changes = counters
        .get(crate::harness::metrics::APPLICATION_CHANGES)
        .copied()
        .unwrap_or(0);
    if changes == 0 {
        return Vec::new();
    }
    let sum = |prefix: &str| sum_of(counters, prefix);
    [
        ("argocd_requests_per_change", sum("argocd.requests.")),
        ("platform_bytes_per_change", sum("platform.event_bytes")),
        ("platform_read_bytes_per_change", sum("platform.read_bytes")),
        ("watch_lines_per_change", sum("apiserver.watch_lines")),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(name, n)| (name, (n as f64 * 100.0 / changes as f64).round() / 100.0))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::metrics::Histogram;

    #[test]
    fn figures_are_present_only_for_what_the_run_measured() {
        let mut metrics = Metrics::default();
        assert!(of(&metrics).is_empty());
        metrics
            .series
            .insert("stale_apps".into(), vec![(0, 9), (30, 2)]);
        metrics
            .series
            .insert("queue_depth".into(), vec![(0, 5), (10, 40), (20, 0)]);
        metrics.counters.insert("client.requests.2xx".into(), 2);
        metrics.counters.insert("client.requests.5xx".into(), 1);
        metrics.histograms.insert(
            "tunnel_back_after_repair".into(),
            Histogram::from_ms(vec![]),
        );
        let figures = of(&metrics);
        assert_eq!(figures["stale_apps_at_end"], json!(2));
        assert_eq!(figures["peak_queue_depth"], json!(40));
        assert_eq!(figures["requests_2xx_pct"], json!(66.7));
        assert!(
            !figures.contains_key("tunnel_back_after_repair_max_ms"),
            "no repair, no figure"
        );
        assert!(figures
            .keys()
            .all(|k| FIGURES.iter().any(|(name, _)| name == k)));
        assert_eq!(format("x_ms", &json!(1500)), "1.5 s");
        assert_eq!(format("x_pct", &json!(66.7)), "66.7 %");
        assert_eq!(format("x", &json!(3)), "3");
        assert_eq!(format("x", &json!(4.0)), "4", "a count across seeds");
        assert_eq!(format("x", &json!(2.5)), "2.5");
    }

    #[test]
    fn cost_figures_divide_by_the_application_changes_and_need_some() {
        let mut metrics = Metrics::default();
        metrics
            .counters
            .insert("argocd.requests.manifests".into(), 5);
        metrics
            .counters
            .insert("argocd.requests.resource".into(), 2);
        metrics.counters.insert("apiserver.watch_lines".into(), 9);
        assert!(per_change(&metrics).is_empty(), "no application changed");
        metrics
            .counters
            .insert(crate::harness::metrics::APPLICATION_CHANGES.into(), 3);
        let figures = of(&metrics);
        assert_eq!(figures["argocd_requests_per_change"], json!(2.33));
        assert_eq!(figures["watch_lines_per_change"], json!(3.0));
        assert!(
            !figures.contains_key("platform_bytes_per_change"),
            "nothing posted to a platform"
        );
        assert!(
            !figures.contains_key("argocd_requests_per_app_event"),
            "no reporter"
        );
        metrics
            .counters
            .insert("reporter.events_sent.app".into(), 2);
        assert_eq!(of(&metrics)["argocd_requests_per_app_event"], json!(3.5));
    }
}
