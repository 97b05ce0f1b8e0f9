//! Deterministic SVG charts for the scenario pages: the variants on one axis.
//!
//! Written by hand rather than through a plotting library: plotting libraries measure text
//! with the machine's fonts, and a gated chart must be byte-identical on every machine. Text
//! is laid out with fixed metrics (a monospace advance per character) and every coordinate is
//! printed with one decimal, so the same figures always give the same bytes.
//!
//! Each drawn series is a `<polyline>` carrying `data-series`, `data-variant` and
//! `data-points` (how many of the report's points it draws), so a test can hold a chart to the
//! report it came from.

use std::fmt::Write as _;

use super::escape_markup as escape;
use crate::harness::metrics::SeriesKind;

/// Chart size and margins, in SVG user units.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 280.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 40.0;
/// Fixed text metrics: 11-unit monospace, 6.6 units per character.
const FONT: &str = "font-family=\"DejaVu Sans Mono,Menlo,Consolas,monospace\" font-size=\"11\"";
const ADVANCE: f64 = 6.6;

/// A variant's colour: the same on every chart, so a reader learns it once.
pub fn colour(variant: &str) -> &'static str {
    match variant {
        "faithful" => "#c0392b",
        "hardened" => "#1f5fa8",
        _ => "#555555",
    }
}

/// One variant's points of one series.
pub struct Line<'a> {
    /// The variant it belongs to (colour and legend).
    pub variant: &'a str,
    /// (simulated second, value), as in the report.
    pub points: &'a [(u64, u64)],
}

/// A time chart: one series, each variant a line, over the run's seconds.
pub struct TimeChart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// The series' name in the report (`data-series`).
    pub series: &'a str,
    /// How its values are drawn: a level as steps, a count as spikes in its second, a
    /// per-window sample as a line through the samples.
    pub kind: SeriesKind,
    /// The last second on the axis (the run's end).
    pub end_s: u64,
    /// Seconds at which faults were injected (dashed verticals, the action as tooltip).
    pub faults: &'a [(u64, String)],
    /// The variants' lines.
    pub lines: Vec<Line<'a>>,
}

/// A bar chart of a histogram's buckets, the variants side by side in each bucket.
pub struct BarChart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// The histogram's name in the report (`data-histogram`).
    pub histogram: &'a str,
    /// Bucket labels, in order.
    pub buckets: Vec<&'a str>,
    /// Per variant: its samples per bucket (same order as `buckets`).
    pub bars: Vec<(&'a str, Vec<usize>)>,
    /// How a bar's tooltip joins its count to its bucket ("samples in", "at seed").
    pub joins: &'a str,
}

/// The vertices a series of `n` points is drawn with (what the chart test checks).
pub fn vertices(kind: SeriesKind, n: usize) -> usize {
    match kind {
        SeriesKind::Level => 2 * n,
        SeriesKind::Count => 3 * n,
        SeriesKind::Sample => n,
    }
}

/// A "nice" axis maximum and tick step (1, 2 or 5 times a power of ten) for values up to `max`.
fn nice_axis(max: u64) -> (u64, u64) {
    let max = max.max(1);
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            let s = step * m;
            if max.div_ceil(s) <= 5 {
                return (max.div_ceil(s) * s, s);
            }
        }
        step *= 10;
    }
}

/// The frame every chart shares: background, title, plot border. The root element carries
/// the axes' extent (`data-y-max`, and `data-end` in seconds for a time chart), so a reader
/// of the file can turn coordinates back into values.
fn open(out: &mut String, title: &str, axes: &str) {
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" {axes} aria-label=\"{t}\">\n<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#ffffff\"/>\n<text x=\"{LEFT}\" y=\"20\" {FONT} font-weight=\"bold\" fill=\"#222\">{t}</text>",
        t = escape(title)
    );
}

/// The legend at the top right: one swatch per variant.
fn legend(out: &mut String, variants: &[&str]) {
    let mut x = WIDTH - RIGHT;
    for variant in variants.iter().rev() {
        x -= variant.chars().count() as f64 * ADVANCE + 26.0;
        let _ = writeln!(
            out,
            "<rect x=\"{x:.1}\" y=\"12\" width=\"14\" height=\"4\" fill=\"{}\"/><text x=\"{:.1}\" y=\"18\" {FONT} fill=\"#222\">{}</text>",
            colour(variant),
            x + 18.0,
            escape(variant)
        );
    }
}

/// The y axis: gridlines and labels at each tick up to `y_max`.
fn y_axis(out: &mut String, y_max: u64, step: u64, y: &dyn Fn(u64) -> f64) {
    let mut v = 0;
    while v <= y_max {
        let at = y(v);
        let label = v.to_string();
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{at:.1}\" x2=\"{:.1}\" y2=\"{at:.1}\" stroke=\"#e3e3e3\"/><text x=\"{:.1}\" y=\"{:.1}\" {FONT} fill=\"#555\">{label}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0 - label.len() as f64 * ADVANCE,
            at + 4.0
        );
        v += step;
    }
}

impl TimeChart<'_> {
    /// The chart as SVG text.
    pub fn render(&self) -> String {
        self.render_over("s", "simulated time")
    }

    /// The chart as SVG text, its x axis in another unit than simulated seconds (the seed
    /// farm's coverage over runs): `unit` after each tick's number, `title` under the axis.
    pub fn render_over(&self, unit: &str, title: &str) -> String {
        let end = self.end_s.max(1);
        let max = self
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|(_, v)| *v))
            .max()
            .unwrap_or(0);
        let (y_max, step) = nice_axis(max);
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let x = |t: u64| LEFT + plot_w * t.min(end) as f64 / end as f64;
        let y = |v: u64| TOP + plot_h - plot_h * v as f64 / y_max as f64;
        let mut out = String::new();
        open(
            &mut out,
            self.title,
            &format!("data-end=\"{end}\" data-y-max=\"{y_max}\""),
        );
        legend(
            &mut out,
            &self.lines.iter().map(|l| l.variant).collect::<Vec<_>>(),
        );
        y_axis(&mut out, y_max, step, &y);
        // x ticks: a nice step in seconds, about six of them.
        let (_, x_step) = nice_axis(end.div_ceil(2));
        let mut t = 0;
        while t <= end {
            let label = format!("{t} {unit}");
            let _ = writeln!(
                out,
                "<line x1=\"{at:.1}\" y1=\"{:.1}\" x2=\"{at:.1}\" y2=\"{:.1}\" stroke=\"#999\"/><text x=\"{:.1}\" y=\"{:.1}\" {FONT} fill=\"#555\">{label}</text>",
                TOP + plot_h,
                TOP + plot_h + 4.0,
                x(t) - label.len() as f64 * ADVANCE / 2.0,
                TOP + plot_h + 16.0,
                at = x(t)
            );
            t += x_step;
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} fill=\"#555\">{}</text>",
            LEFT + plot_w / 2.0 - title.chars().count() as f64 / 2.0 * ADVANCE,
            HEIGHT - 6.0,
            escape(title)
        );
        for (at, action) in self.faults {
            let _ = writeln!(
                out,
                "<line x1=\"{p:.1}\" y1=\"{TOP:.1}\" x2=\"{p:.1}\" y2=\"{:.1}\" stroke=\"#888\" stroke-dasharray=\"3,3\"><title>{}</title></line>",
                TOP + plot_h,
                escape(&format!("{at} s: {action}")),
                p = x(*at)
            );
        }
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w:.1}\" height=\"{plot_h:.1}\" fill=\"none\" stroke=\"#999\"/>"
        );
        for line in self.lines.iter().filter(|l| !l.points.is_empty()) {
            let mut coords: Vec<(f64, f64)> = Vec::new();
            for (i, (t, v)) in line.points.iter().enumerate() {
                match self.kind {
                    // A level steps at each point and holds to the end of the run.
                    SeriesKind::Level => {
                        if i > 0 {
                            coords.push((x(*t), y(line.points[i - 1].1)));
                        }
                        coords.push((x(*t), y(*v)));
                        if i + 1 == line.points.len() {
                            coords.push((x(end), y(*v)));
                        }
                    }
                    SeriesKind::Count => {
                        coords.push((x(*t), y(0)));
                        coords.push((x(*t), y(*v)));
                        coords.push((x(*t), y(0)));
                    }
                    SeriesKind::Sample => coords.push((x(*t), y(*v))),
                }
            }
            let text: Vec<String> = coords
                .iter()
                .map(|(a, b)| format!("{a:.1},{b:.1}"))
                .collect();
            let _ = writeln!(
                out,
                "<polyline data-series=\"{}\" data-variant=\"{}\" data-points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>",
                escape(self.series),
                escape(line.variant),
                line.points.len(),
                colour(line.variant),
                text.join(" ")
            );
        }
        out.push_str("</svg>\n");
        out
    }
}

impl BarChart<'_> {
    /// The chart as SVG text.
    pub fn render(&self) -> String {
        let max = self
            .bars
            .iter()
            .flat_map(|(_, counts)| counts.iter().copied())
            .max()
            .unwrap_or(0) as u64;
        let (y_max, step) = nice_axis(max);
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let y = |v: u64| TOP + plot_h - plot_h * v as f64 / y_max as f64;
        let mut out = String::new();
        open(&mut out, self.title, &format!("data-y-max=\"{y_max}\""));
        legend(
            &mut out,
            &self.bars.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        );
        y_axis(&mut out, y_max, step, &y);
        let slot = plot_w / self.buckets.len().max(1) as f64;
        let bar = (slot - 12.0) / self.bars.len().max(1) as f64;
        for (i, label) in self.buckets.iter().enumerate() {
            let left = LEFT + slot * i as f64;
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} fill=\"#555\">{}</text>",
                left + slot / 2.0 - label.chars().count() as f64 * ADVANCE / 2.0,
                TOP + plot_h + 16.0,
                escape(label)
            );
            for (j, (variant, counts)) in self.bars.iter().enumerate() {
                let count = counts.get(i).copied().unwrap_or(0) as u64;
                let top = y(count);
                let _ = writeln!(
                    out,
                    "<rect data-histogram=\"{}\" data-variant=\"{}\" data-bucket=\"{}\" x=\"{:.1}\" y=\"{top:.1}\" width=\"{bar:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                    escape(self.histogram),
                    escape(variant),
                    escape(label),
                    left + 6.0 + bar * j as f64,
                    TOP + plot_h - top,
                    colour(variant),
                    escape(&format!("{variant}: {count} {} {label}", self.joins))
                );
            }
        }
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w:.1}\" height=\"{plot_h:.1}\" fill=\"none\" stroke=\"#999\"/>"
        );
        out.push_str("</svg>\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn polyline_vertices(svg: &str, variant: &str) -> usize {
        let line = svg
            .lines()
            .find(|l| {
                l.starts_with("<polyline") && l.contains(&format!("data-variant=\"{variant}\""))
            })
            .expect("a line per variant");
        let points = line.split(" points=\"").nth(1).unwrap();
        points.trim_end_matches("\"/>").split(' ').count()
    }

    #[test]
    fn each_kind_draws_its_documented_vertices_and_the_same_bytes_twice() {
        let a = [(0, 3), (10, 7), (20, 0)];
        let b = [(5, 1)];
        for kind in [SeriesKind::Level, SeriesKind::Count, SeriesKind::Sample] {
            let chart = TimeChart {
                title: "t <&>",
                series: "s",
                kind,
                end_s: 30,
                faults: &[(15, "crash".into())],
                lines: vec![
                    Line {
                        variant: "faithful",
                        points: &a,
                    },
                    Line {
                        variant: "hardened",
                        points: &b,
                    },
                ],
            };
            let svg = chart.render();
            assert_eq!(svg, chart.render(), "deterministic");
            assert!(svg.contains("t &lt;&amp;&gt;"), "text is escaped");
            assert_eq!(polyline_vertices(&svg, "faithful"), vertices(kind, 3));
            assert_eq!(polyline_vertices(&svg, "hardened"), vertices(kind, 1));
        }
    }

    #[test]
    fn a_level_steps_and_runs_on_to_the_end() {
        let points = [(0, 2), (10, 4)];
        let svg = TimeChart {
            title: "t",
            series: "s",
            kind: SeriesKind::Level,
            end_s: 20,
            faults: &[],
            lines: vec![Line {
                variant: "hardened",
                points: &points,
            }],
        }
        .render();
        // y axis 0..4 over 204 units from 36: 2 → 138, 4 → 36; x 0..20 s over 640 from 64.
        assert!(
            svg.contains(" points=\"64.0,138.0 384.0,138.0 384.0,36.0 704.0,36.0\""),
            "{svg}"
        );
    }

    #[test]
    fn axes_round_up_to_one_two_or_five_steps() {
        assert_eq!(nice_axis(0), (1, 1));
        assert_eq!(nice_axis(7), (8, 2));
        assert_eq!(nice_axis(999), (1000, 200));
        assert_eq!(nice_axis(10_000), (10_000, 2_000));
    }
}
