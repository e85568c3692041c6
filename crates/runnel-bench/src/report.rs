//! `runnel bench report`: SVG charts and a Markdown table from result
//! files, one line (or row) per system, with ratios against a reference
//! system.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::BenchError;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Result files written with --json.
    #[arg(required = true)]
    pub results: Vec<PathBuf>,
    /// Directory for the charts and results.md.
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
    /// System the ratio columns compare against.
    #[arg(long, default_value = "runnel")]
    pub reference: String,
}

/// The fields of a result file the report needs.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Row {
    pub workload: String,
    pub system: String,
    pub size: u64,
    pub throughput_per_sec: f64,
    pub latency: Latency,
    pub counts: Counts,
    pub bytes_received: u64,
    pub client_cpu_cores: f64,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct Counts {
    pub ok: u64,
    pub back_pressure: u64,
    pub error: u64,
}

/// A chart: workload, y-axis label, the value plotted, file name.
type Chart = (&'static str, &'static str, fn(&Row) -> f64, &'static str);

pub fn run(args: Args) -> Result<(), BenchError> {
    let mut rows = Vec::new();
    for path in &args.results {
        let text = std::fs::read_to_string(path)?;
        let row: Row = serde_json::from_str(&text).map_err(|e| {
            BenchError::Usage(format!("{}: not a result file: {e}", path.display()))
        })?;
        rows.push(row);
    }
    std::fs::create_dir_all(&args.out)?;
    let charts: [Chart; 5] = [
        (
            "multi-stream",
            "appends/s",
            |r| r.throughput_per_sec,
            "multi-stream-throughput.svg",
        ),
        (
            "multi-stream",
            "p99 ack latency (ms)",
            |r| r.latency.p99_ms,
            "multi-stream-p99.svg",
        ),
        (
            "fan-out",
            "p99 publish-to-receive (ms)",
            |r| r.latency.p99_ms,
            "fan-out-p99.svg",
        ),
        (
            "replay",
            "p99 time to full state (ms)",
            |r| r.latency.p99_ms,
            "replay-p99.svg",
        ),
        (
            "replay-state",
            "p99 time to full state (ms)",
            |r| r.latency.p99_ms,
            "replay-state-p99.svg",
        ),
    ];
    for (workload, y_label, value, file) in charts {
        let selected: Vec<&Row> = rows.iter().filter(|r| r.workload == workload).collect();
        if selected.is_empty() {
            continue;
        }
        let x_label = match workload {
            "multi-stream" => "streams",
            "fan-out" => "subscribers",
            _ => "clients",
        };
        let svg = line_chart(
            &format!("{workload}: {y_label}"),
            x_label,
            y_label,
            &selected,
            value,
        );
        std::fs::write(args.out.join(file), svg)?;
    }
    let table = markdown_table(&rows, &args.reference);
    std::fs::write(args.out.join("results.md"), &table)?;
    print!("{table}");
    Ok(())
}

/// A Markdown table with one row per result and ratios to `reference`.
pub fn markdown_table(rows: &[Row], reference: &str) -> String {
    let mut sorted: Vec<&Row> = rows.iter().collect();
    sorted.sort_by(|a, b| (&a.workload, a.size, &a.system).cmp(&(&b.workload, b.size, &b.system)));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| workload | size | system | ops/s | p50 ms | p99 ms | p99.9 ms | ok / back-pressure / errors | bytes per op | client cores | ops/s vs {reference} | p99 vs {reference} |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in sorted {
        let reference_row = rows
            .iter()
            .find(|o| o.workload == r.workload && o.size == r.size && o.system == reference);
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                format!("{:.2}x", a / b)
            } else {
                "-".into()
            }
        };
        let (tput_ratio, p99_ratio) = match reference_row {
            Some(base) => (
                ratio(r.throughput_per_sec, base.throughput_per_sec),
                ratio(r.latency.p99_ms, base.latency.p99_ms),
            ),
            None => ("-".into(), "-".into()),
        };
        let per_op = r.bytes_received.checked_div(r.counts.ok).unwrap_or(0);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} / {} / {} | {} | {:.2} | {} | {} |",
            r.workload,
            r.size,
            r.system,
            r.throughput_per_sec,
            r.latency.p50_ms,
            r.latency.p99_ms,
            r.latency.p999_ms,
            r.counts.ok,
            r.counts.back_pressure,
            r.counts.error,
            per_op,
            r.client_cpu_cores,
            tput_ratio,
            p99_ratio
        );
    }
    out
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// A line chart: sizes evenly spaced on x, one polyline per system.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    rows: &[&Row],
    value: fn(&Row) -> f64,
) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 420.0, 80.0, 160.0, 40.0, 50.0);
    let sizes: Vec<u64> = rows
        .iter()
        .map(|r| r.size)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut series: BTreeMap<&str, Vec<(u64, f64)>> = BTreeMap::new();
    for r in rows {
        series
            .entry(r.system.as_str())
            .or_default()
            .push((r.size, value(r)));
    }
    let y_max = rows
        .iter()
        .map(|r| value(r))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let x_at = |size: u64| {
        let i = sizes.iter().position(|s| *s == size).unwrap_or(0) as f64;
        let n = (sizes.len().max(2) - 1) as f64;
        left + if sizes.len() == 1 {
            plot_w / 2.0
        } else {
            plot_w * i / n
        }
    };
    let y_at = |v: f64| top + plot_h * (1.0 - v / y_max);

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        w / 2.0,
        escape(title)
    );
    // Axes, grid and ticks.
    for i in 0..=5 {
        let v = y_max * i as f64 / 5.0;
        let y = y_at(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + plot_w,
            left - 6.0,
            y + 4.0,
            tick(v)
        );
    }
    for s in &sizes {
        let x = x_at(*s);
        let _ = writeln!(
            svg,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{s}</text>"#,
            top + plot_h + 18.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/><line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="black"/>"#,
        top + plot_h,
        left + plot_w,
        top + plot_h,
        top + plot_h
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        left + plot_w / 2.0,
        h - 10.0,
        escape(x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + plot_h / 2.0,
        escape(y_label)
    );
    // One line per system, and the legend.
    for (i, (system, mut points)) in series.into_iter().enumerate() {
        points.sort_by_key(|p| p.0);
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(s, v)| format!("{:.1},{:.1}", x_at(*s), y_at(*v)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for (s, v) in &points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                x_at(*s),
                y_at(*v)
            );
        }
        let ly = top + 16.0 * i as f64 + 10.0;
        let lx = left + plot_w + 14.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            lx + 18.0,
            lx + 24.0,
            ly + 4.0,
            escape(system)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn tick(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 1_000.0 {
        format!("{:.1}k", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(system: &str, size: u64, tput: f64, p99: f64) -> Row {
        Row {
            workload: "multi-stream".into(),
            system: system.into(),
            size,
            throughput_per_sec: tput,
            latency: Latency {
                p50_ms: p99 / 2.0,
                p99_ms: p99,
                p999_ms: p99 * 2.0,
            },
            counts: Counts {
                ok: 10,
                back_pressure: 0,
                error: 0,
            },
            bytes_received: 0,
            client_cpu_cores: 0.5,
        }
    }

    #[test]
    fn table_shows_ratios_against_the_reference() {
        let rows = vec![
            row("runnel", 100, 20_000.0, 5.0),
            row("peer", 100, 5_000.0, 20.0),
        ];
        let table = markdown_table(&rows, "runnel");
        assert!(
            table.contains("| multi-stream | 100 | peer | 5000 |"),
            "{table}"
        );
        assert!(table.contains("| 0.25x | 4.00x |"), "{table}");
    }

    #[test]
    fn chart_has_a_line_per_system() {
        let rows = [
            row("runnel", 100, 1.0, 1.0),
            row("runnel", 500, 2.0, 1.0),
            row("peer", 100, 1.0, 1.0),
        ];
        let refs: Vec<&Row> = rows.iter().collect();
        let svg = line_chart("t", "streams", "appends/s", &refs, |r| r.throughput_per_sec);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}
