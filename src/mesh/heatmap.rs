//! `fperf mesh --plot FILE.svg`: the matrix as a heatmap, senders as rows and receivers
//! as columns, each cell shaded by its value and labelled with it, with a colour scale
//! beside it and a title that names fperf's version, the test and the hosts.

use super::report::{MatrixKind, MeshReport};
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

const CELL: i32 = 64;
/// Above the matrix: the title's two lines.
const TOP: i32 = 74;
/// Left of the row labels: the "senders" axis title.
const AXIS_TITLE: i32 = 30;
/// Right of the matrix: the colour scale, its values and its unit.
const LEGEND: i32 = 150;
const LEGEND_BAR: i32 = 18;
/// Pixels per character of the 13-pixel labels, a generous average.
const CHAR: i32 = 7;
const FONT: &str = "sans-serif";

/// Draws `report`'s matrix into an SVG file at `path`. The best cells are the darkest:
/// the highest bandwidth, or the shortest round trip.
pub fn draw(path: &Path, report: &MeshReport) -> Result<()> {
    let n = report.hosts.len() as i32;
    let longest = report.hosts.iter().map(|h| h.chars().count()).max();
    let labels = (longest.unwrap_or(0) as i32 * CHAR + 16).clamp(60, 320);
    let left = AXIS_TITLE + labels;
    let side = n * CELL;
    let width = (left + side + LEGEND).max(720);
    let height = TOP + side.max(200) + labels + 40;
    let root = SVGBackend::new(path, (width as u32, height as u32)).into_drawing_area();
    let failed = |e: &dyn std::fmt::Display| anyhow!("--plot {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let values: Vec<f64> = report.matrix.iter().flatten().flatten().copied().collect();
    let range = values.iter().fold(None, |acc: Option<(f64, f64)>, &v| {
        Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
    });
    let title = ("sans-serif", 16).into_font();
    let small = (FONT, 13).into_font();
    for (line, text) in title_lines(report, width).iter().enumerate() {
        let at = (10, 22 + 22 * line as i32);
        root.draw(&Text::new(text.as_str(), at, title.clone()))
            .map_err(|e| failed(&e))?;
    }
    let centred = |pos: Pos| small.clone().into_text_style(&root).pos(pos);
    let middle = Pos::new(HPos::Center, VPos::Center);
    // The axis titles: "senders" up the left side, "receivers" under the column labels.
    let rotated = small
        .clone()
        .transform(FontTransform::Rotate270)
        .into_text_style(&root)
        .pos(middle);
    root.draw(&Text::new(
        "senders",
        (AXIS_TITLE / 2, TOP + side / 2),
        rotated,
    ))
    .map_err(|e| failed(&e))?;
    root.draw(&Text::new(
        "receivers",
        (left + side / 2, TOP + side + labels + 20),
        centred(middle),
    ))
    .map_err(|e| failed(&e))?;
    let column = small
        .clone()
        .transform(FontTransform::Rotate270)
        .into_text_style(&root)
        .pos(Pos::new(HPos::Right, VPos::Center));
    let row = small
        .clone()
        .into_text_style(&root)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, host) in report.hosts.iter().enumerate() {
        let i = i as i32;
        let at_row = (AXIS_TITLE, TOP + i * CELL + CELL / 2);
        root.draw(&Text::new(host.as_str(), at_row, row.clone()))
            .map_err(|e| failed(&e))?;
        let at_column = (left + i * CELL + CELL / 2, TOP + side + 8);
        root.draw(&Text::new(host.as_str(), at_column, column.clone()))
            .map_err(|e| failed(&e))?;
    }
    for (from, cells) in report.matrix.iter().enumerate() {
        for (to, cell) in cells.iter().enumerate() {
            let x = left + to as i32 * CELL;
            let y = TOP + from as i32 * CELL;
            let corners = [(x, y), (x + CELL - 2, y + CELL - 2)];
            let (fill, text) = match (cell, range) {
                _ if from == to => (RGBColor(235, 235, 235), String::new()),
                (Some(v), Some(range)) => {
                    (shade(goodness(report, range, *v)), value_text(report, *v))
                }
                _ => (FAILED, "x".to_owned()),
            };
            root.draw(&Rectangle::new(corners, fill.filled()))
                .map_err(|e| failed(&e))?;
            let ink = if fill.1 < 120 { WHITE } else { BLACK };
            let centre = (x + CELL / 2, y + CELL / 2);
            root.draw(&Text::new(text, centre, centred(middle).color(&ink)))
                .map_err(|e| failed(&e))?;
        }
    }
    draw_scale(&root, report, range, (left + side + 30, TOP)).map_err(|e| failed(&e))?;
    root.present().map_err(|e| failed(&e))?;
    Ok(())
}

/// The pairs that failed.
const FAILED: RGBColor = RGBColor(250, 200, 200);

/// The title: what the matrix holds and fperf's version, then the hosts, as many as fit
/// in `width` pixels.
fn title_lines(report: &MeshReport, width: i32) -> [String; 2] {
    let test = report.what();
    let first = format!(
        "fperf {} mesh: {test}, {:.1} s per pair, senders as rows",
        crate::VERSION,
        report.test_time.as_secs_f64()
    );
    let room = (width as usize).saturating_sub(20) / 9;
    let mut hosts = format!("{} hosts:", report.hosts.len());
    for (i, host) in report.hosts.iter().enumerate() {
        let more = format!(" and {} more", report.hosts.len() - i);
        if hosts.len() + host.len() + 2 + more.len() > room && i + 1 < report.hosts.len() {
            hosts += &more;
            break;
        }
        hosts += if i == 0 { " " } else { ", " };
        hosts += host;
    }
    [first, hosts]
}

/// How good `v` is within `range` (lowest, highest): 0 the worst, 1 the best.
fn goodness(report: &MeshReport, (low, high): (f64, f64), v: f64) -> f64 {
    let span = (high - low).max(f64::MIN_POSITIVE);
    if report.lower_is_better() {
        (high - v) / span
    } else {
        (v - low) / span
    }
}

/// The colour scale at `(x, y)`: a bar from the best value (top, darkest) to the worst,
/// labelled with values in the matrix's unit, and the colour of a failed pair.
fn draw_scale(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    report: &MeshReport,
    range: Option<(f64, f64)>,
    (x, y): (i32, i32),
) -> std::result::Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let font = (FONT, 13).into_font();
    let unit = report.unit();
    root.draw(&Text::new(unit, (x, y), font.clone()))?;
    let bar = 160;
    let top = y + 24;
    if let Some((low, high)) = range {
        for step in 0..bar {
            let good = 1.0 - f64::from(step) / f64::from(bar - 1);
            let corners = [(x, top + step), (x + LEGEND_BAR, top + step + 1)];
            root.draw(&Rectangle::new(corners, shade(good).filled()))?;
        }
        root.draw(&Rectangle::new(
            [(x, top), (x + LEGEND_BAR, top + bar)],
            BLACK.stroke_width(1),
        ))?;
        // The best value at the top, the worst at the bottom, and between them.
        let (best, worst) = if report.lower_is_better() {
            (low, high)
        } else {
            (high, low)
        };
        let tick = font
            .clone()
            .into_text_style(root)
            .pos(Pos::new(HPos::Left, VPos::Center));
        // Enough decimals that neighbouring labels differ, however close the values.
        let unit_step = report.scaled((worst - best).abs() / 4.0);
        let needed = (-unit_step.log10()).ceil().clamp(0.0, 4.0) as usize;
        let decimals = needed.max(least_decimals(report));
        for k in 0..=4 {
            let v = best + (worst - best) * f64::from(k) / 4.0;
            let at = top + (bar - 1) * k / 4;
            root.draw(&PathElement::new(
                vec![(x + LEGEND_BAR, at), (x + LEGEND_BAR + 4, at)],
                BLACK,
            ))?;
            root.draw(&Text::new(
                scale_text(report, v, decimals),
                (x + LEGEND_BAR + 8, at),
                tick.clone(),
            ))?;
        }
    }
    let key = top + bar + 20;
    root.draw(&Rectangle::new(
        [(x, key), (x + LEGEND_BAR, key + LEGEND_BAR)],
        FAILED.filled(),
    ))?;
    let label = font
        .into_text_style(root)
        .pos(Pos::new(HPos::Left, VPos::Center));
    root.draw(&Text::new(
        "x failed",
        (x + LEGEND_BAR + 8, key + LEGEND_BAR / 2),
        label,
    ))?;
    Ok(())
}

/// From pale (0) to deep blue (1).
fn shade(good: f64) -> RGBColor {
    let g = good.clamp(0.0, 1.0);
    let mix = |pale: f64, deep: f64| (pale + (deep - pale) * g).round() as u8;
    RGBColor(mix(222.0, 8.0), mix(235.0, 48.0), mix(247.0, 107.0))
}

/// A matrix value in the picture's unit: us for round trips (given in ns), Gbit/s for
/// bandwidth (given in bit/s).
fn value_text(report: &MeshReport, v: f64) -> String {
    scale_text(report, v, least_decimals(report))
}

/// `v` in the picture's unit, with `decimals` decimals.
fn scale_text(report: &MeshReport, v: f64, decimals: usize) -> String {
    format!("{:.decimals$}", report.scaled(v))
}

/// The decimals a value gets at least: round trips in us need one, Gbit/s and ms two.
fn least_decimals(report: &MeshReport) -> usize {
    if report.kind == MatrixKind::RoundTrip {
        1
    } else {
        2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn report(latency: bool, matrix: Vec<Vec<Option<f64>>>) -> MeshReport {
        MeshReport {
            hosts: vec!["node-a".into(), "node-b".into(), "node-c".into()],
            kind: if latency {
                MatrixKind::RoundTrip
            } else {
                MatrixKind::Received
            },
            rounds: 6,
            test_time: Duration::from_secs(2),
            elapsed: Duration::from_secs(13),
            pairs: Vec::new(),
            matrix,
            phase_matrices: Vec::new(),
            outliers: Vec::new(),
        }
    }

    fn drawn(name: &str, report: &MeshReport) -> String {
        let dir = std::env::temp_dir().join(format!("fperf-heatmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        draw(&path, report).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        svg
    }

    /// Whether `svg` has a text element reading `text`.
    fn has_text(svg: &str, text: &str) -> bool {
        svg.contains(&format!(">{text}<")) || svg.contains(&format!(">\n{text}\n<"))
    }

    #[test]
    fn the_heatmap_has_axis_titles_a_colour_scale_and_a_title_naming_hosts_and_version() {
        let gbit = |g: f64| Some(g * 1e9);
        let matrix = vec![
            vec![None, gbit(9.4), gbit(9.0)],
            vec![gbit(9.2), None, None],
            vec![gbit(1.8), gbit(9.3), None],
        ];
        let svg = drawn("bw.svg", &report(false, matrix));
        let title = format!(
            "fperf {} mesh: received bandwidth (Gbit/s), 2.0 s per pair, senders as rows",
            crate::VERSION
        );
        assert!(has_text(&svg, &title), "{svg}");
        assert!(has_text(&svg, "3 hosts: node-a, node-b, node-c"), "{svg}");
        for text in ["senders", "receivers", "Gbit/s", "x failed", "node-a"] {
            assert!(has_text(&svg, text), "no {text}: {svg}");
        }
        // The scale runs from the best cell (9.40) to the worst (1.80), labelled in
        // between, and every cell is labelled with its own value.
        for tick in ["9.40", "7.50", "5.60", "3.70", "1.80"] {
            assert!(has_text(&svg, tick), "no scale label {tick}: {svg}");
        }
        for cell in ["9.00", "9.20", "9.30", "x"] {
            assert!(has_text(&svg, cell), "no cell {cell}: {svg}");
        }
    }

    #[test]
    fn a_latency_heatmap_scales_from_the_shortest_round_trip() {
        let us = |u: f64| Some(u * 1e3);
        let matrix = vec![
            vec![None, us(50.0), us(60.0)],
            vec![us(70.0), None, us(90.0)],
            vec![us(55.0), us(58.0), None],
        ];
        let svg = drawn("rtt.svg", &report(true, matrix));
        assert!(svg.contains("median round trip (us)"), "{svg}");
        assert!(has_text(&svg, "us"), "the scale's unit: {svg}");
        // The scale, from the shortest (50.0) to the longest (90.0): 80.0 is no cell's.
        assert!(has_text(&svg, "80.0"), "{svg}");
    }

    #[test]
    fn close_values_get_the_decimals_that_tell_them_apart() {
        let us = |u: f64| Some(u * 1e3);
        let matrix = vec![vec![None, us(13.70)], vec![us(13.90), None]];
        let mut r = report(true, matrix);
        r.hosts.truncate(2);
        let svg = drawn("close.svg", &r);
        for tick in ["13.70", "13.75", "13.80", "13.85", "13.90"] {
            assert!(has_text(&svg, tick), "no scale label {tick}: {svg}");
        }
    }

    #[test]
    fn a_title_with_many_hosts_says_how_many_more() {
        let mut r = report(false, Vec::new());
        r.hosts = (0..40)
            .map(|i| format!("host-{i:02}.example.net"))
            .collect();
        let [_, hosts] = title_lines(&r, 720);
        assert!(
            hosts.starts_with("40 hosts: host-00.example.net, "),
            "{hosts}"
        );
        assert!(hosts.ends_with(" more"), "{hosts}");
        assert!(hosts.len() <= 720 / 9, "{hosts}");
    }
}
