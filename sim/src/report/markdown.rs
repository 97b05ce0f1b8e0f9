//! Markdown rendering of a report, for people reading CI artefacts.

use std::fmt::Write as _;

use super::Report;

/// Renders one report.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {} — {} (seed {})\n", r.scenario, r.variant, r.seed);
    let _ = writeln!(out, "{}\n", r.description);
    let mark = if r.as_expected { "as expected" } else { "**NOT as expected**" };
    let _ = writeln!(out, "**Result:** `{}` (expected `{}`: {mark})\n", r.result, r.expected_result);
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

    let _ = writeln!(out, "## Invariants\n\n| invariant | verdict | first seen | host |\n|---|---|---|---|");
    for i in &r.invariants {
        match &i.violation {
            Some(v) => {
                let _ = writeln!(out, "| `{}` | **violated** | {:.3} s | {} |", i.name, v.violation.at_ms as f64 / 1000.0, v.violation.host);
            }
            None => {
                let _ = writeln!(out, "| `{}` | held | | |", i.name);
            }
        }
    }
    for i in r.invariants.iter().filter(|i| i.violation.is_some()) {
        let v = i.violation.as_ref().expect("filtered");
        let _ = writeln!(out, "\n### `{}` violated\n\n```json\n{}\n```\n", i.name, serde_json::to_string_pretty(&v.violation.details).unwrap_or_default());
        let _ = writeln!(out, "Last {} trace events before it:\n\n```", v.trace_tail.len());
        for e in &v.trace_tail {
            let _ = writeln!(out, "{}", e.line());
        }
        let _ = writeln!(out, "```");
    }

    let _ = writeln!(out, "\n## Faults injected\n\n| at | action | detail |\n|---|---|---|");
    for f in &r.faults {
        let _ = writeln!(out, "| {:.3} s | {} | `{}` |", f.at_ms as f64 / 1000.0, f.action, f.detail);
    }

    let _ = writeln!(out, "\n## Metrics\n\n| histogram | count | p50 | p99 | max |\n|---|---|---|---|---|");
    for (name, h) in &r.metrics.histograms {
        let _ = writeln!(out, "| {name} | {} | {} {} | {} {} | {} {} |", h.count, h.p50, h.unit, h.p99, h.unit, h.max, h.unit);
    }
    for (name, h) in &r.metrics.histograms {
        let _ = writeln!(out, "\n`{name}` buckets:\n\n| bucket | samples |\n|---|---|");
        for (label, count) in &h.buckets {
            let _ = writeln!(out, "| {label} | {count} |");
        }
    }
    let _ = writeln!(out, "\n| counter | value |\n|---|---|");
    for (name, value) in &r.metrics.counters {
        let _ = writeln!(out, "| {name} | {value} |");
    }
    let _ = writeln!(
        out,
        "\n## Resolved configuration\n\n```yaml\n{}```",
        serde_yaml::to_string(&r.config).unwrap_or_default()
    );
    out
}
