//! The scenario pages `make reports` writes: every scenario has one, it links every chart it
//! has, and every chart draws exactly the points of the report it came from.
//!
//! These read the committed reports; `make test` regenerates them and fails when they differ,
//! so what is checked here is what this commit's code writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use orrery_sim::harness::metrics::SeriesKind;
use orrery_sim::report::svg;

fn reports_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports")
}

/// The value of `name="…"` in one SVG element's text.
fn attribute<'a>(element: &'a str, name: &str) -> Option<&'a str> {
    let start = element.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = element[start..].find('"')?;
    Some(&element[start..start + len])
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The points of `series` in a variant's report: a metrics series, or the ownership
/// changes' orphaned / doubly-owned counts.
fn report_points(report: &serde_json::Value, series: &str) -> Option<usize> {
    let metrics = &report["metrics"];
    match series.strip_prefix("ownership.") {
        Some(_) => metrics["ownership"]["changes"].as_array().map(Vec::len),
        None => metrics["series"][series].as_array().map(Vec::len),
    }
}

fn kind(report: &serde_json::Value, series: &str) -> SeriesKind {
    match report["metrics"]["series_kinds"][series].as_str() {
        Some("count") => SeriesKind::Count,
        Some("sample") => SeriesKind::Sample,
        _ => SeriesKind::Level,
    }
}

/// The report's points of a series: a metrics series, or the ownership changes' counts.
fn points_of(report: &serde_json::Value, series: &str) -> Vec<(u64, u64)> {
    let metrics = &report["metrics"];
    let pair = |p: &serde_json::Value| (p[0].as_u64().unwrap(), p[1].as_u64().unwrap());
    match series {
        "ownership.orphaned" | "ownership.doubly_owned" => {
            let field = series.trim_start_matches("ownership.");
            metrics["ownership"]["changes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["at_ms"].as_u64().unwrap() / 1000,
                        c[field].as_u64().unwrap(),
                    )
                })
                .collect()
        }
        _ => metrics["series"][series]
            .as_array()
            .unwrap()
            .iter()
            .map(pair)
            .collect(),
    }
}

/// The chart layout, written out again here (not taken from the renderer): the plot spans
/// x 64..704 and y 36..240 of a 720x280 picture.
fn pixel(t: u64, v: u64, end: u64, y_max: u64) -> (f64, f64) {
    (
        64.0 + 640.0 * t.min(end) as f64 / end as f64,
        240.0 - 204.0 * v as f64 / y_max as f64,
    )
}

/// The (t, v) vertices a series' points must be drawn with, per kind: a level as steps held
/// to the end, a count as a spike in its second, a sample as a line through its points.
fn expected_vertices(points: &[(u64, u64)], kind: SeriesKind, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for (i, (t, v)) in points.iter().enumerate() {
        match kind {
            SeriesKind::Level => {
                if i > 0 {
                    out.push((*t, points[i - 1].1));
                }
                out.push((*t, *v));
            }
            SeriesKind::Count => out.extend([(*t, 0), (*t, *v), (*t, 0)]),
            SeriesKind::Sample => out.push((*t, *v)),
        }
    }
    if let (SeriesKind::Level, Some((_, v))) = (kind, points.last()) {
        out.push((end, *v));
    }
    out
}

#[test]
fn every_scenario_has_a_side_by_side_page_whose_charts_draw_its_reports_points() {
    let scenarios: Vec<PathBuf> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
    assert!(scenarios.len() >= 10);
    let (mut lines, mut bars) = (0, 0);
    for file in scenarios {
        let name = file.file_stem().unwrap().to_str().unwrap();
        let dir = reports_dir().join(name);
        let page = std::fs::read_to_string(dir.join("README.md"))
            .unwrap_or_else(|e| panic!("{name}: no page: {e}"));
        let mut variants = BTreeMap::new();
        for variant in ["faithful", "hardened"] {
            if dir.join(format!("{variant}.json")).exists() {
                assert!(
                    page.contains(&format!("[{variant}]({variant}.md)")),
                    "{name}: the page links the {variant} report"
                );
                variants.insert(variant, json(&dir.join(format!("{variant}.json"))));
            }
        }
        assert_eq!(variants.len(), 2, "{name}: both variants side by side");
        assert!(
            page.contains("|  | faithful | hardened |"),
            "{name}: verdicts side by side"
        );
        let charts: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "svg"))
            .collect();
        for chart in &charts {
            let file = chart.file_name().unwrap().to_str().unwrap();
            assert!(
                page.contains(&format!("]({file})")),
                "{name}: the page shows {file}"
            );
            let text = std::fs::read_to_string(chart).unwrap();
            assert!(
                text.starts_with("<svg ") && text.ends_with("</svg>\n"),
                "{name}/{file}"
            );
            let root = text.lines().next().unwrap();
            let y_max: u64 = attribute(root, "data-y-max").unwrap().parse().unwrap();
            for element in text.lines().filter(|l| l.starts_with("<polyline ")) {
                let series = attribute(element, "data-series").unwrap();
                let variant = attribute(element, "data-variant").unwrap();
                let report = &variants[variant];
                let expected = report_points(report, series)
                    .unwrap_or_else(|| panic!("{name}/{file}: {variant} has no {series}"));
                let drawn: usize = attribute(element, "data-points").unwrap().parse().unwrap();
                assert_eq!(drawn, expected, "{name}/{file} {variant}: points drawn");
                let end: u64 = attribute(root, "data-end").unwrap().parse().unwrap();
                let vertices: Vec<(f64, f64)> = attribute(element, "points")
                    .unwrap()
                    .split_whitespace()
                    .map(|xy| {
                        let (x, y) = xy.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect();
                let kind = kind(report, series);
                assert_eq!(
                    vertices.len(),
                    svg::vertices(kind, expected),
                    "{name}/{file} {variant}: vertices for {expected} points"
                );
                let want = expected_vertices(&points_of(report, series), kind, end);
                for (i, ((x, y), (t, v))) in vertices.iter().zip(&want).enumerate() {
                    let (wx, wy) = pixel(*t, *v, end, y_max);
                    assert!(
                        (x - wx).abs() < 0.06 && (y - wy).abs() < 0.06,
                        "{name}/{file} {variant} vertex {i}: drawn ({x}, {y}), the report's ({t} s, {v}) is at ({wx:.2}, {wy:.2})"
                    );
                }
                lines += 1;
            }
            for element in text
                .lines()
                .filter(|l| l.starts_with("<rect data-histogram"))
            {
                let histogram = attribute(element, "data-histogram").unwrap();
                let variant = attribute(element, "data-variant").unwrap();
                let bucket = attribute(element, "data-bucket")
                    .unwrap()
                    .replace("&gt;", ">")
                    .replace("&lt;", "<")
                    .replace("&amp;", "&");
                if histogram == "cost_per_change" {
                    // A share of faithful's figure: the report's headline figures, divided.
                    let (figure, _) = orrery_sim::report::page::COST_FIGURES
                        .into_iter()
                        .find(|(_, label)| *label == bucket)
                        .unwrap_or_else(|| panic!("{name}/{file}: no cost figure {bucket}"));
                    let value = |v: &str| variants[v]["headline"][figure].as_f64().unwrap_or(0.0);
                    let share = (value(variant) * 100.0 / value("faithful")).round() as u64;
                    assert!(
                        element.contains(&format!("<title>{variant}: {share} (faithful = 100): ")),
                        "{name}/{file} {variant} {bucket}: the bar's share is the report's"
                    );
                    let height: f64 = attribute(element, "height").unwrap().parse().unwrap();
                    let want = 204.0 * share as f64 / y_max as f64;
                    assert!(
                        (height - want).abs() < 0.06,
                        "{name}/{file} {variant} {bucket}"
                    );
                    bars += 1;
                    continue;
                }
                let buckets = variants[variant]["metrics"]["histograms"][histogram]["buckets"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{name}/{file}: {variant} has no {histogram}"));
                let count = buckets
                    .iter()
                    .find(|b| b[0] == bucket)
                    .and_then(|b| b[1].as_u64())
                    .unwrap_or_else(|| panic!("{name}/{file}: no bucket {bucket}"));
                assert!(
                    element.contains(&format!("<title>{variant}: {count} samples in ")),
                    "{name}/{file} {variant} {bucket}: the bar's count is the report's"
                );
                let height: f64 = attribute(element, "height").unwrap().parse().unwrap();
                let want = 204.0 * count as f64 / y_max as f64;
                assert!(
                    (height - want).abs() < 0.06,
                    "{name}/{file} {variant} {bucket}: a bar {height} high for {count} of {y_max}"
                );
                bars += 1;
            }
        }
        // Every charted series and every histogram of either variant has its chart, and the
        // cost figures theirs where faithful has them.
        if let Some(faithful) = variants.get("faithful") {
            let costed = ["argocd_requests_per_change", "platform_bytes_per_change"]
                .iter()
                .any(|f| faithful["headline"][f].as_f64().is_some_and(|v| v > 0.0));
            assert_eq!(
                costed,
                charts.iter().any(|c| c.ends_with("cost_per_change.svg")),
                "{name}: the cost figures are charted where faithful has them"
            );
        }
        for (variant, report) in &variants {
            for (series, _) in orrery_sim::report::page::CHARTED_SERIES {
                let has = report["metrics"]["series"][series]
                    .as_array()
                    .is_some_and(|p| !p.is_empty());
                assert!(
                    !has || charts.iter().any(|c| c.ends_with(format!("{series}.svg"))),
                    "{name}: {variant}'s {series} is charted"
                );
            }
            if report["metrics"]["ownership"].is_object() {
                assert!(
                    charts.iter().any(|c| c.ends_with("ownership.orphaned.svg")),
                    "{name}: {variant}'s ownership is charted"
                );
            }
            for histogram in report["metrics"]["histograms"].as_object().unwrap().keys() {
                assert!(
                    charts
                        .iter()
                        .any(|c| c.ends_with(format!("histogram.{histogram}.svg"))),
                    "{name}: {variant}'s {histogram} is charted"
                );
            }
        }
    }
    assert!(
        lines > 20 && bars > 100,
        "{lines} lines, {bars} bars checked"
    );
}

#[test]
fn report_windows_end_at_the_run_end_and_aggregate_by_kind() {
    use orrery_sim::report::markdown::window_value;
    let points = [(0, 5), (40, 2), (95, 9)];
    // A level carries in from before its window and shows the window's highest.
    assert_eq!(window_value(&points, SeriesKind::Level, 30, 60), Some(5));
    assert_eq!(window_value(&points, SeriesKind::Level, 60, 90), Some(2));
    // A count is the window's total, zero without points, never carried.
    let counts = [(3, 1), (4, 2), (70, 1)];
    assert_eq!(window_value(&counts, SeriesKind::Count, 0, 30), Some(3));
    assert_eq!(window_value(&counts, SeriesKind::Count, 30, 60), Some(0));
    // A sample is the window's lowest, nothing without one.
    assert_eq!(window_value(&points, SeriesKind::Sample, 30, 60), Some(2));
    assert_eq!(window_value(&points, SeriesKind::Sample, 60, 90), None);
    // The committed reports: no window runs past the run's end.
    let report = std::fs::read_to_string(reports_dir().join("tunnel-drop/faithful.md")).unwrap();
    assert!(
        report.contains("| 360–390 s |") && !report.contains("–420 s |"),
        "390 s run"
    );
    let storm = std::fs::read_to_string(reports_dir().join("reconnect-storm/faithful.md")).unwrap();
    assert!(storm.contains("registrations_per_s (total)"));
}

#[test]
fn a_violations_trace_tail_shows_the_events_about_its_subject() {
    let report = json(&reports_dir().join("tunnel-drop/faithful.json"));
    let twice = report["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "executed_at_most_once")
        .unwrap();
    let key = twice["violation"]["details"]["idempotency_key"]
        .as_str()
        .unwrap();
    assert_eq!(twice["violation"]["subject"], key);
    let tail = twice["violation"]["trace_tail"].as_array().unwrap();
    // The runtime executes the key the gateway scoped to the client's user (`<user>/<key>`);
    // the client's own requests carry the key it sent.
    let (_, client_key) = key.split_once('/').expect("a user-scoped key");
    assert!(
        tail.iter()
            .all(|e| e["detail"]["key"] == key || e["detail"]["key"] == client_key),
        "{tail:?}"
    );
    assert!(
        tail.iter().any(|e| e["detail"]["key"] == client_key),
        "{tail:?}"
    );
    // The story of the key: executed, then its retries, then executed again.
    let executions = tail
        .iter()
        .filter(|e| e["kind"] == "runtime.execute")
        .count();
    assert_eq!(executions, 2, "both executions of {key} are shown");
    // A violation that lists examples is about its first example's app.
    let report = json(&reports_dir().join("queue-overflow/faithful.json"));
    let stale = &report["invariants"][0]["violation"];
    let app = stale["details"]["examples"][0]["app"].as_str().unwrap();
    assert_eq!(stale["subject"], app);
    let name = app.rsplit('/').next().unwrap();
    let tail = stale["trace_tail"].as_array().unwrap();
    assert!(!tail.is_empty());
    for event in tail {
        assert_ne!(event["kind"], "harness.stale_apps");
        assert!(event.to_string().contains(name), "{event} is about {app}");
    }
}
