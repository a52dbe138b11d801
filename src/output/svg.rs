//! `--plot FILE`: SVG pictures of what a run measured, as the peers' users draw them.
//!
//! A run draws its latency distribution as HdrHistogram's plotter does: latency
//! against percentile, the percentile axis spread by its nines (90%, 99%, 99.9%, ...)
//! so the tail is as wide as the body, and the latency axis logarithmic so a long tail
//! does not flatten the median. A sweep draws one line per figure against the swept
//! value (latency percentiles with `-r`, bandwidth otherwise).

use crate::sweep::{SweepParam, SweepRow, SweepTest};
use anyhow::{anyhow, Context, Result};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;

const SIZE: (u32, u32) = (900, 540);
const COLORS: [RGBColor; 6] = [
    RGBColor(0, 90, 181),
    RGBColor(220, 50, 32),
    RGBColor(60, 60, 60),
    RGBColor(26, 133, 255),
    RGBColor(212, 17, 89),
    RGBColor(153, 153, 153),
];

/// One line of a chart: its legend and its (x, y) points, x already on the chart's axis.
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
}

/// How far along the percentile axis quantile `q` lies: its nines (0 at 0%, 1 at 90%,
/// 2 at 99%, ...). The maximum (q = 1) goes to the nines `count` samples resolve.
fn nines(q: f64, count: u64) -> f64 {
    let resolved = (count.max(10) as f64).log10();
    if q >= 1.0 {
        resolved
    } else {
        (-(1.0 - q).log10()).min(resolved)
    }
}

/// The percentile a point `x` nines along the axis stands for, as a label.
fn percentile_label(x: &f64) -> String {
    let x = *x;
    let p = 100.0 * (1.0 - 10f64.powf(-x));
    let decimals = (x.round() as usize).saturating_sub(2);
    format!("{p:.decimals$}%")
}

/// Where the percentile axis up to `end` nines is labelled: the median, then each nine.
fn percentile_ticks(end: f64) -> Vec<f64> {
    let mut ticks = vec![0.0, nines(0.5, u64::MAX)];
    ticks.extend((1..=end.floor() as u32).map(f64::from));
    ticks
}

/// A microsecond figure as an axis label: no more digits than its value needs.
fn micros_label(us: &f64) -> String {
    let text = format!("{us:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

/// The whole decades around `lo..hi` (both above 0): a log axis over them has a label at
/// each end at least.
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let floor = 10f64.powf(lo.log10().floor());
    let ceil = 10f64.powf(hi.log10().ceil());
    (floor, if ceil > floor { ceil } else { floor * 10.0 })
}

/// Draws the distribution `curve` ((quantile, ns) points of `count` samples, see
/// [`crate::stats::LatencyStats::quantile_curve`]) of the latency named `label`.
pub fn latency_distribution(
    path: &Path,
    title: &str,
    label: &str,
    curve: &[(f64, u64)],
    count: u64,
) -> Result<()> {
    if curve.is_empty() {
        return Err(anyhow!("--plot: the run timed no {label} to draw"));
    }
    let line = Line {
        label: format!("{label} (client, {count} samples)"),
        points: curve
            .iter()
            .map(|&(q, ns)| (nines(q, count), ns as f64 / 1000.0))
            .collect(),
    };
    let x_end = nines(1.0, count);
    let x = Axis {
        desc: "percentile",
        label: &percentile_label,
        range: 0.0..x_end,
        ticks: percentile_ticks(x_end),
    };
    let y_desc = format!("{label} (us, log scale)");
    draw(path, title, &x, &[(&y_desc, Scale::Log, &[line])])
}

/// One test's figures in a sweep's picture: a row per value.
pub struct Series {
    /// The `--tests` test, which names its lines; `None` for a sweep of one workload.
    pub test: Option<SweepTest>,
    /// It timed round trips (else it moved bulk data).
    pub mprtt: bool,
    pub rows: Vec<SweepRow>,
}

/// Draws a sweep: the p50, p99 and mean round trip of each series that timed round
/// trips (`-r`) against the value (on a log axis), and the bandwidth of each bulk one.
/// Bandwidth and round trips together get a panel each, one above the other, on the
/// same x axis. A size swept over a wide range goes on a log2 axis.
pub fn sweep(path: &Path, title: &str, param: SweepParam, series: &[Series]) -> Result<()> {
    let mut values: Vec<u64> = series
        .iter()
        .flat_map(|s| s.rows.iter().map(|r| r.value))
        .collect();
    values.sort_unstable();
    values.dedup();
    let (Some(&lo), Some(&hi)) = (values.first(), values.last()) else {
        return Err(anyhow!("--plot: the sweep has no values to draw"));
    };
    let log2 = lo > 0 && hi / lo >= 4;
    let x_of = |v: u64| if log2 { (v as f64).log2() } else { v as f64 };
    let us = |ns: f64| ns / 1000.0;
    let mut bandwidth = Vec::new();
    let mut round_trips = Vec::new();
    for s in series {
        // A series' lines are named by its test when there are several.
        let prefix = s.test.map_or(String::new(), |t| format!("{} ", t.name()));
        let line = |label: &str, y: &dyn Fn(&SweepRow) -> Option<f64>| Line {
            label: format!("{prefix}{label}"),
            points: s
                .rows
                .iter()
                .filter_map(|r| y(r).map(|y| (x_of(r.value), y)))
                .collect(),
        };
        if s.mprtt {
            // A sweep reports the default percentiles (`--percentiles` goes without it).
            let at = |p: f64| {
                move |r: &SweepRow| r.latency.and_then(|l| l.at(p)).map(|ns| us(ns as f64))
            };
            round_trips.push(line("p50", &at(50.0)));
            round_trips.push(line("p99", &at(99.0)));
            round_trips.push(line("mean", &|r| r.latency.map(|l| us(l.mean_ns))));
        } else {
            bandwidth.push(line("bandwidth", &|r| Some(r.bits_per_second / 1e9)));
        }
    }
    let label = |x: &f64| {
        let v = if log2 { x.exp2() } else { *x };
        format!("{}", v.round() as u64)
    };
    let (x0, x1) = (x_of(lo), x_of(hi));
    // One value still needs a range to draw in.
    let range = if x1 > x0 { x0..x1 } else { x0 - 1.0..x1 + 1.0 };
    let ticks: Vec<f64> = if log2 {
        (x0.ceil() as i64..=x1.floor() as i64)
            .map(|p| p as f64)
            .collect()
    } else {
        // Every value, or every k-th of many, so that at most 12 are labelled.
        let step = values.len().div_ceil(12).max(1);
        values.iter().step_by(step).map(|&v| x_of(v)).collect()
    };
    let x = Axis {
        desc: param.column(),
        label: &label,
        range,
        ticks,
    };
    // Round trips on a log axis, so that a tail's spike leaves the medians readable.
    let panels: Vec<(&str, Scale, &[Line])> = [
        ("Gbit/s", Scale::FromZero, &bandwidth),
        ("round trip (us, log scale)", Scale::Log, &round_trips),
    ]
    .into_iter()
    .filter(|(_, _, lines)| !lines.is_empty())
    .map(|(y, scale, lines)| (y, scale, lines.as_slice()))
    .collect();
    draw(path, title, &x, &panels)
}

/// One phase of a latency-under-load picture: its name and when it ran, in seconds.
pub struct PhaseSpan {
    pub name: &'static str,
    pub start: f64,
    pub end: f64,
}

/// Draws a `--under-load` run over time: the probes' round trips (ms) in one panel and
/// the load's throughput each way (Mbit/s) in the other, the x axis (seconds) marked
/// where each phase's load began.
pub fn under_load(
    path: &Path,
    title: &str,
    rtt_ms: &[(f64, f64)],
    up_mbps: &[(f64, f64)],
    down_mbps: &[(f64, f64)],
    phases: &[PhaseSpan],
) -> Result<()> {
    let end = rtt_ms
        .iter()
        .chain(up_mbps)
        .chain(down_mbps)
        .map(|p| p.0)
        .chain(phases.iter().map(|p| p.end))
        .fold(0.0f64, f64::max);
    if end <= 0.0 {
        return Err(anyhow!("--plot: the run has nothing to draw"));
    }
    let label = |x: &f64| match phases.iter().find(|p| (p.start - x).abs() < 1e-9) {
        Some(phase) => format!("{} {:.1}", phase.name, x),
        None => format!("{x:.1}"),
    };
    let x = Axis {
        desc: "seconds (each phase's name where its load began)",
        label: &label,
        range: 0.0..end,
        ticks: phases.iter().map(|p| p.start).collect(),
    };
    let rtt = [Line {
        label: "probe round trip".into(),
        points: rtt_ms.to_vec(),
    }];
    let throughput = [
        Line {
            label: "up (client to server)".into(),
            points: up_mbps.to_vec(),
        },
        Line {
            label: "down (server to client)".into(),
            points: down_mbps.to_vec(),
        },
    ];
    draw(
        path,
        title,
        &x,
        &[
            ("round trip (ms)", Scale::FromZero, &rtt),
            ("Mbit/s", Scale::FromZero, &throughput),
        ],
    )
}

/// The x axis: its name, its label for a position, its range and where it is labelled.
struct Axis<'a> {
    desc: &'a str,
    label: &'a dyn Fn(&f64) -> String,
    range: std::ops::Range<f64>,
    ticks: Vec<f64>,
}

/// How a panel's y axis runs.
#[derive(Clone, Copy)]
enum Scale {
    /// Linear, from 0 to the highest point.
    FromZero,
    /// Logarithmic, over the whole decades the points span.
    Log,
}

/// A linear axis labelled at the positions given, not at plotters' round numbers.
struct Ticked {
    linear: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.linear.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // The labelled positions get the grid's bold lines; no light ones between.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.linear.range()
    }
}

/// Draws `panels` (each its y axis's name, scale and lines) one above the other, all on
/// the x axis `x`, under `title`.
fn draw(path: &Path, title: &str, x: &Axis<'_>, panels: &[(&str, Scale, &[Line])]) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| anyhow!("{e}");
    let height = SIZE.1 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let root = root
        .titled(title, ("sans-serif", 16))
        .map_err(|e| fail(&e))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for ((y_desc, scale, lines), area) in panels.iter().zip(&areas) {
        draw_panel(area, x, y_desc, *scale, lines).map_err(|e| fail(&e))?;
    }
    root.present()
        .with_context(|| format!("cannot write --plot file {}", path.display()))
}

type Panel<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type PanelError = DrawingAreaErrorKind<std::io::Error>;

/// One chart: `lines` against the x axis `x` and a y axis named `y_desc`.
fn draw_panel(
    area: &Panel<'_>,
    x: &Axis<'_>,
    y_desc: &str,
    scale: Scale,
    lines: &[Line],
) -> std::result::Result<(), PanelError> {
    let ys = || lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let y_max = ys().fold(0.0f64, f64::max);
    let x_coord = Ticked {
        linear: x.range.clone().into(),
        ticks: x.ticks.clone(),
    };
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(12)
        // Room for the last x label, centred on the axis's end.
        .margin_right(36)
        .x_label_area_size(44)
        .y_label_area_size(70);
    match scale {
        Scale::FromZero => {
            let y_range = 0.0..(y_max * 1.05).max(f64::MIN_POSITIVE);
            let chart = builder.build_cartesian_2d(x_coord, y_range)?;
            finish_panel(chart, x, y_desc, lines, 0.0)
        }
        Scale::Log => {
            // A zero latency (below the clock's resolution) sits on the axis's floor.
            let y_min = ys().filter(|&y| y > 0.0).fold(f64::MAX, f64::min);
            let (lo, hi) = if y_min <= y_max {
                decades(y_min, y_max)
            } else {
                (1.0, 10.0)
            };
            let chart = builder.build_cartesian_2d(x_coord, (lo..hi).log_scale())?;
            finish_panel(chart, x, y_desc, lines, lo)
        }
    }
}

/// Draws the axes, `lines` (each point at least `floor` high) and their legend.
fn finish_panel<'a, Y>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<Ticked, Y>>,
    x: &Axis<'_>,
    y_desc: &str,
    lines: &[Line],
    floor: f64,
) -> std::result::Result<(), PanelError>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(x.desc)
        .y_desc(y_desc)
        .x_label_formatter(x.label)
        .y_label_formatter(&micros_label)
        .y_labels(12)
        .draw()?;
    for (line, color) in lines.iter().zip(COLORS.iter().cycle()) {
        chart
            .draw_series(LineSeries::new(
                line.points.iter().map(|&(x, y)| (x, y.max(floor))),
                color.stroke_width(2),
            ))?
            .label(line.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::percentiles::{PercentileValue, PercentileValues};
    use crate::stats::LatencySummary;

    /// The `points` of each data line (and legend stroke) in an SVG file, in order: the
    /// lines drawn 2 wide, not the axes' and ticks' 1.
    fn polylines(svg: &str) -> Vec<Vec<(f64, f64)>> {
        svg.split("<polyline")
            .skip(1)
            .filter(|el| el.contains("stroke-width=\"2\""))
            .map(|el| {
                let pts = el
                    .split("points=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                pts.split_whitespace()
                    .map(|xy| {
                        let (x, y) = xy.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_percentile_axis_counts_nines() {
        assert_eq!(nines(0.0, 1000), 0.0);
        assert!((nines(0.9, 1000) - 1.0).abs() < 1e-9);
        assert!((nines(0.999, 1000) - 3.0).abs() < 1e-9);
        assert!(
            (nines(0.99999, 1000) - 3.0).abs() < 1e-9,
            "capped at what 1000 resolve"
        );
        assert!((nines(1.0, 1000) - 3.0).abs() < 1e-9);
        assert_eq!(percentile_label(&0.0), "0%");
        assert_eq!(percentile_label(&2.0), "99%");
        assert_eq!(percentile_label(&4.0), "99.99%");
    }

    #[test]
    fn a_distribution_is_one_rising_line_from_min_to_max() {
        let dir = std::env::temp_dir().join(format!("fperf-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lat.svg");
        let curve = [
            (0.0, 10_000),
            (0.5, 20_000),
            (0.9, 30_000),
            (0.99, 80_000),
            (1.0, 200_000),
        ];
        latency_distribution(&path, "title: a run", "mprtt", &curve, 1000).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("title: a run"));
        assert!(svg.contains("mprtt (client, 1000 samples)") && svg.contains("99%"));
        // The data line, then the legend's sample stroke.
        let lines = polylines(&svg);
        assert_eq!(lines.len(), 2, "{svg}");
        let data = &lines[0];
        assert_eq!(data.len(), curve.len());
        for pair in data.windows(2) {
            // Right along the axis, and up (SVG's y grows downward).
            assert!(pair[1].0 > pair[0].0 && pair[1].1 < pair[0].1, "{pair:?}");
        }
        assert!(latency_distribution(&path, "t", "mprtt", &[], 0).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_long_tail_leaves_the_median_readable_on_a_log_latency_axis() {
        let dir = std::env::temp_dir().join(format!("fperf-plot-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tail.svg");
        // A 16 ms maximum over a body of tens of microseconds.
        let curve = [
            (0.0, 10_000),
            (0.5, 20_000),
            (0.9, 30_000),
            (0.99, 80_000),
            (0.999, 2_000_000),
            (1.0, 16_000_000),
        ];
        latency_distribution(&path, "tail", "latency", &curve, 100_000).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let text = |t: &str| svg.contains(&format!(">{t}<")) || svg.contains(&format!(">\n{t}\n<"));
        let labels = [
            "50%",
            "90%",
            "99%",
            "99.9%",
            "99.99%",
            "latency (us, log scale)",
        ];
        let decades = ["10", "100", "1000", "10000", "100000"];
        for label in labels.iter().chain(&decades) {
            assert!(text(label), "no label {label}: {svg}");
        }
        let data = &polylines(&svg)[0];
        // p50 (20 us) and p99 (80 us) lie far apart, not flat on the axis's floor.
        let (p50, p99) = (data[1].1, data[3].1);
        assert!(p50 - p99 > 40.0, "p50 at y={p50}, p99 at y={p99}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn axis_labels_read_as_figures() {
        assert_eq!(micros_label(&100.0), "100");
        assert_eq!(micros_label(&0.5), "0.5");
        assert_eq!(micros_label(&12.25), "12.25");
        assert_eq!(decades(3.0, 16_000.0), (1.0, 100_000.0));
        assert_eq!(decades(10.0, 10.0), (10.0, 100.0));
        let ticks = percentile_ticks(3.0);
        let labels: Vec<String> = ticks.iter().map(percentile_label).collect();
        assert_eq!(labels, ["0%", "50%", "90%", "99%", "99.9%"]);
    }

    #[test]
    fn a_sweep_draws_a_line_per_figure_with_a_point_per_value() {
        let dir = std::env::temp_dir().join(format!("fperf-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sweep.svg");
        let row = |value: u64, us: u64| SweepRow {
            value,
            bits_per_second: value as f64 * 1e6,
            latency: Some(LatencySummary {
                count: 10,
                min_ns: us * 900,
                max_ns: us * 3000,
                mean_ns: us as f64 * 1100.0,
                stddev_ns: 1.0,
                percentiles: {
                    let mut values = PercentileValues::new();
                    for (percentile, ns) in [(50.0, us * 1000), (99.0, us * 2000)] {
                        values.push(PercentileValue { percentile, ns });
                    }
                    values
                },
            }),
            iterations: 10,
            transactions_per_second: Some(1000.0),
        };
        let rows: Vec<SweepRow> = [1u64, 2, 4, 8].iter().map(|&k| row(k * 1024, k)).collect();
        let series = |test: Option<SweepTest>, mprtt: bool| Series {
            test,
            mprtt,
            rows: rows.clone(),
        };
        sweep(&path, "sweep", SweepParam::PktSize, &[series(None, true)]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let lines = polylines(&svg);
        // p50, p99 and mean, then their legend strokes.
        let sizes: Vec<usize> = lines.iter().map(Vec::len).collect();
        assert_eq!(sizes, [4, 4, 4, 2, 2, 2], "{svg}");
        for data in &lines[..3] {
            assert_eq!(data.len(), 4);
            // Sizes doubling are evenly spaced on the log2 axis.
            let gaps: Vec<f64> = data.windows(2).map(|p| p[1].0 - p[0].0).collect();
            assert!(gaps.iter().all(|g| (g - gaps[0]).abs() <= 1.0), "{gaps:?}");
        }
        assert!(
            svg.contains(">\n4096\n<") || svg.contains(">4096<"),
            "size labels"
        );
        sweep(&path, "bulk", SweepParam::PktSize, &[series(None, false)]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert_eq!(polylines(&svg).len(), 2);
        assert!(svg.contains("Gbit/s"));

        // bw and rr: the bandwidth panel above the round trips'.
        let both = [
            series(Some(SweepTest::Bw), false),
            series(Some(SweepTest::Rr), true),
        ];
        sweep(&path, "bw, rr", SweepParam::PktSize, &both).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let lines = polylines(&svg);
        let sizes: Vec<usize> = lines.iter().map(Vec::len).collect();
        assert_eq!(sizes, [4, 2, 4, 4, 4, 2, 2, 2], "{svg}");
        assert!(svg.contains("bw bandwidth") && svg.contains("rr p99"));
        assert!(svg.contains("Gbit/s") && svg.contains("round trip (us, log scale)"));
        let lowest = |l: &Vec<(f64, f64)>| l.iter().map(|p| p.1).fold(0.0, f64::max);
        let highest = |l: &Vec<(f64, f64)>| l.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        assert!(lowest(&lines[0]) < f64::from(SIZE.1), "{:?}", lines[0]);
        for rtt in &lines[2..5] {
            assert!(highest(rtt) > f64::from(SIZE.1), "{rtt:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
