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
            for element in text.lines().filter(|l| l.starts_with("<polyline ")) {
                let series = attribute(element, "data-series").unwrap();
                let variant = attribute(element, "data-variant").unwrap();
                let report = &variants[variant];
                let expected = report_points(report, series)
                    .unwrap_or_else(|| panic!("{name}/{file}: {variant} has no {series}"));
                let drawn: usize = attribute(element, "data-points").unwrap().parse().unwrap();
                assert_eq!(drawn, expected, "{name}/{file} {variant}: points drawn");
                let vertices = attribute(element, "points").unwrap().split(' ').count();
                assert_eq!(
                    vertices,
                    svg::vertices(kind(report, series), expected),
                    "{name}/{file} {variant}: vertices for {expected} points"
                );
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
                bars += 1;
            }
        }
        // Every series and histogram of either variant is charted.
        for (variant, report) in &variants {
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
    let key = twice["violation"]["details"]["idempotency_key"].as_str().unwrap();
    assert_eq!(twice["violation"]["subject"], key);
    let tail = twice["violation"]["trace_tail"].as_array().unwrap();
    assert!(tail.iter().all(|e| e["detail"]["key"] == key), "{tail:?}");
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
