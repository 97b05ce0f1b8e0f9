//! Markdown rendering of a report, for people reading CI artefacts.

use std::fmt::Write as _;

use super::Report;
use crate::harness::metrics::SeriesKind;

/// Renders one report.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {} — {} (seed {})\n", r.scenario, r.variant, r.seed);
    let _ = writeln!(out, "{}\n", r.description);
    let mark = if r.as_expected {
        "as expected"
    } else {
        "**NOT as expected**"
    };
    let _ = writeln!(
        out,
        "**Result:** `{}` (expected `{}`: {mark})\n",
        r.result, r.expected_result
    );
    if let Some(error) = &r.harness_error {
        let _ = writeln!(out, "**Harness error:** {error}\n");
    }
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| orrery | {} |", r.build.orrery_version);
    let _ = writeln!(out, "| scenario file FNV-1a | `{}` |", r.build.scenario_fnv);
    let _ = writeln!(out, "| simulated seconds | {} |", r.sim_seconds);
    let _ = writeln!(out, "| trace events | {} |", r.events);
    let _ = writeln!(out, "| trace hash | `{}` |", r.trace_hash);
    let _ = writeln!(out, "| reproduce | `{}` |\n", r.repro);

    let _ = writeln!(
        out,
        "## Invariants\n\n| invariant | verdict | first seen | host |\n|---|---|---|---|"
    );
    for i in &r.invariants {
        match &i.violation {
            Some(v) => {
                let _ = writeln!(
                    out,
                    "| `{}` | **violated** | {:.3} s | {} |",
                    i.name,
                    v.violation.at_ms as f64 / 1000.0,
                    v.violation.host
                );
            }
            None => {
                let _ = writeln!(out, "| `{}` | held | | |", i.name);
            }
        }
    }
    for i in r.invariants.iter().filter(|i| i.violation.is_some()) {
        let v = i.violation.as_ref().expect("filtered");
        let _ = writeln!(
            out,
            "\n### `{}` violated\n\n```json\n{}\n```\n",
            i.name,
            serde_json::to_string_pretty(&v.violation.details).unwrap_or_default()
        );
        match &v.subject {
            Some(subject) => {
                let _ = writeln!(
                    out,
                    "Last {} trace events about `{subject}` at or before it:\n\n```",
                    v.trace_tail.len()
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "Last {} trace events at or before it (the harness's periodic samples left out):\n\n```",
                    v.trace_tail.len()
                );
            }
        }
        for e in &v.trace_tail {
            let _ = writeln!(out, "{}", e.line());
        }
        let _ = writeln!(out, "```");
    }

    let _ = writeln!(
        out,
        "\n## Faults injected\n\n| at | action | detail |\n|---|---|---|"
    );
    for f in &r.faults {
        let _ = writeln!(
            out,
            "| {:.3} s | {} | `{}` |",
            f.at_ms as f64 / 1000.0,
            f.action,
            f.detail
        );
    }

    let _ = writeln!(
        out,
        "\n## Metrics\n\n| histogram | count | p50 | p99 | max |\n|---|---|---|---|---|"
    );
    for (name, h) in &r.metrics.histograms {
        let _ = writeln!(
            out,
            "| {name} | {} | {} {} | {} {} | {} {} |",
            h.count, h.p50, h.unit, h.p99, h.unit, h.max, h.unit
        );
    }
    for (name, h) in &r.metrics.histograms {
        let _ = writeln!(
            out,
            "\n`{name}` buckets (each holds the samples above its lower bound, up to and including its upper):\n\n| bucket | samples |\n|---|---|"
        );
        for (label, count) in &h.buckets {
            let _ = writeln!(out, "| {label} | {count} |");
        }
    }
    let _ = writeln!(out, "\n| counter | value |\n|---|---|");
    for (name, value) in &r.metrics.counters {
        let _ = writeln!(out, "| {name} | {value} |");
    }
    render_series(&mut out, r);
    if let Some(ownership) = &r.metrics.ownership {
        let _ = writeln!(
            out,
            "\n## Shard ownership\n\nLongest window an app had no live owner: **{:.1} s**; apps ever orphaned: **{}**.\n\n| at | cause | apps moved | orphaned | doubly owned |\n|---|---|---|---|---|",
            ownership.longest_orphan_window_ms as f64 / 1000.0,
            ownership.apps_ever_orphaned
        );
        for c in ownership
            .changes
            .iter()
            .filter(|c| c.moved_fraction > 0.0)
            .take(60)
        {
            let _ = writeln!(
                out,
                "| {:.1} s | {} | {:.1} % | {} | {} |",
                c.at_ms as f64 / 1000.0,
                c.cause,
                c.moved_fraction * 100.0,
                c.orphaned,
                c.doubly_owned
            );
        }
    }
    render_exploration(&mut out, r);
    let _ = writeln!(
        out,
        "\n## Resolved configuration\n\n```yaml\n{}```",
        serde_saphyr::to_string(&r.config).unwrap_or_default()
    );
    out
}

/// Reach conditions, fault points and (for a swarm seed) what it drew.
fn render_exploration(out: &mut String, r: &Report) {
    let e = &r.exploration;
    if e.declared.is_empty()
        && e.reached.is_empty()
        && e.fault_points.is_empty()
        && e.drawn.is_none()
    {
        return;
    }
    let _ = writeln!(out, "\n## Exploration\n");
    if !e.declared.is_empty() {
        let _ = writeln!(
            out,
            "| declared reach condition | reached in this run |\n|---|---|"
        );
        for (condition, reached) in &e.declared {
            let _ = writeln!(
                out,
                "| `{condition}` | {} |",
                if *reached { "yes" } else { "no" }
            );
        }
        let _ = writeln!(out);
    }
    if !e.reached.is_empty() {
        let names: Vec<String> = e.reached.iter().map(|c| format!("`{c}`")).collect();
        let _ = writeln!(out, "Conditions reached: {}.\n", names.join(", "));
    }
    if !e.fault_points.is_empty() {
        let _ = writeln!(out, "| fault point | fired |\n|---|---|");
        for (point, n) in &e.fault_points {
            let _ = writeln!(out, "| `{point}` | {n} |");
        }
        let _ = writeln!(out);
    }
    if let Some(drawn) = &e.drawn {
        let _ = writeln!(
            out,
            "Drawn for this seed (its faults are listed above):\n\n```yaml\n{}```",
            serde_saphyr::to_string(drawn).unwrap_or_default()
        );
    }
}

/// Width of a time-series window in the Markdown table.
const WINDOW_S: u64 = 30;

/// One series' cell for the window `[start, stop)`: a level's highest value (carried in from
/// before the window), a count's sum (a window without points had none), a sample's lowest
/// (blank when nothing was measured in it).
pub fn window_value(points: &[(u64, u64)], kind: SeriesKind, start: u64, stop: u64) -> Option<u64> {
    let inside = points
        .iter()
        .filter(|(t, _)| *t >= start && *t < stop)
        .map(|(_, v)| *v);
    match kind {
        SeriesKind::Level => {
            let carried = points.iter().take_while(|(t, _)| *t < start).last();
            carried.map(|(_, v)| *v).into_iter().chain(inside).max()
        }
        SeriesKind::Count => Some(inside.sum()),
        SeriesKind::Sample => inside.min(),
    }
}

/// Renders the series as a table per window, aggregated by kind (the JSON has every point);
/// the last window ends at the run's end.
fn render_series(out: &mut String, r: &Report) {
    let series = &r.metrics.series;
    if series.is_empty() {
        return;
    }
    let end = (r.sim_seconds.ceil() as u64).max(1);
    let kind = |name: &str| {
        r.metrics
            .series_kinds
            .get(name)
            .copied()
            .unwrap_or(SeriesKind::Level)
    };
    let names: Vec<&String> = series.keys().collect();
    let _ = writeln!(
        out,
        "\n## Time series per {WINDOW_S} s window\n\nLevels (queue depth, stale apps…) show the highest level in the window; counts (`…_per_s`) the total in the window; per-window samples (`…_per_10s`) the lowest in the window.\n"
    );
    let _ = writeln!(
        out,
        "| window | {} |",
        names
            .iter()
            .map(|n| match kind(n) {
                SeriesKind::Level => n.to_string(),
                SeriesKind::Count => format!("{n} (total)"),
                SeriesKind::Sample => format!("{n} (lowest)"),
            })
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(out, "|---|{}", "---|".repeat(names.len()));
    let mut start = 0;
    while start < end {
        let stop = (start + WINDOW_S).min(end);
        // The last window holds the run's last second too.
        let upper = if stop == end { end + 1 } else { stop };
        let cells: Vec<String> = names
            .iter()
            .map(|name| {
                window_value(&series[*name], kind(name), start, upper)
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            })
            .collect();
        let _ = writeln!(out, "| {start}–{stop} s | {} |", cells.join(" | "));
        start = stop;
    }
}
