//! `fperf mesh --plot FILE.svg`: the matrix as a heatmap, senders as rows and receivers
//! as columns, each cell shaded by its value and labelled with it.

use super::report::MeshReport;
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

const CELL: u32 = 64;
const MARGIN: u32 = 140;
const TOP: u32 = 60;

/// Draws `report`'s matrix into an SVG file at `path`. The best cells are the darkest:
/// the highest bandwidth, or the shortest round trip.
pub fn draw(path: &Path, report: &MeshReport) -> Result<()> {
    let n = report.hosts.len() as u32;
    let size = (MARGIN + n * CELL + 20, TOP + MARGIN + n * CELL);
    let root = SVGBackend::new(path, size).into_drawing_area();
    let failed = |e: &dyn std::fmt::Display| anyhow!("--plot {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let values: Vec<f64> = report.matrix.iter().flatten().flatten().copied().collect();
    let (low, high) = values
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let title = if report.latency {
        "Median round trip (us), senders as rows"
    } else {
        "Received (Gbit/s), senders as rows"
    };
    let style = ("sans-serif", 16).into_font();
    root.draw(&Text::new(title, (10, 20), style.clone()))
        .map_err(|e| failed(&e))?;
    let label = ("sans-serif", 13).into_font();
    let centred = label
        .clone()
        .into_text_style(&root)
        .pos(Pos::new(HPos::Center, VPos::Center));
    for (i, host) in report.hosts.iter().enumerate() {
        let i = i as i32;
        let (cell, margin, top) = (CELL as i32, MARGIN as i32, TOP as i32);
        root.draw(&Text::new(
            host.as_str(),
            (10, top + i * cell + cell / 2),
            label.clone(),
        ))
        .map_err(|e| failed(&e))?;
        let column = label
            .clone()
            .transform(FontTransform::Rotate270)
            .into_text_style(&root)
            .pos(Pos::new(HPos::Left, VPos::Center));
        let bottom = top + (n as i32) * cell + 8;
        root.draw(&Text::new(
            host.as_str(),
            (margin + i * cell + cell / 2, bottom + 120),
            column,
        ))
        .map_err(|e| failed(&e))?;
    }
    for (from, row) in report.matrix.iter().enumerate() {
        for (to, cell) in row.iter().enumerate() {
            let x = (MARGIN + to as u32 * CELL) as i32;
            let y = (TOP + from as u32 * CELL) as i32;
            let corners = [(x, y), (x + CELL as i32 - 2, y + CELL as i32 - 2)];
            let (fill, text) = match cell {
                _ if from == to => (RGBColor(235, 235, 235), String::new()),
                Some(v) => {
                    let span = (high - low).max(f64::MIN_POSITIVE);
                    let good = if report.latency {
                        (high - v) / span
                    } else {
                        (v - low) / span
                    };
                    (shade(good), cell_text(report, *v))
                }
                None => (RGBColor(250, 200, 200), "x".to_owned()),
            };
            root.draw(&Rectangle::new(corners, fill.filled()))
                .map_err(|e| failed(&e))?;
            let ink = if fill.1 < 120 { WHITE } else { BLACK };
            let middle = (x + CELL as i32 / 2, y + CELL as i32 / 2);
            root.draw(&Text::new(text, middle, centred.clone().color(&ink)))
                .map_err(|e| failed(&e))?;
        }
    }
    root.present().map_err(|e| failed(&e))?;
    Ok(())
}

/// From pale (0) to deep blue (1).
fn shade(good: f64) -> RGBColor {
    let g = good.clamp(0.0, 1.0);
    let mix = |pale: f64, deep: f64| (pale + (deep - pale) * g).round() as u8;
    RGBColor(mix(222.0, 8.0), mix(235.0, 48.0), mix(247.0, 107.0))
}

fn cell_text(report: &MeshReport, v: f64) -> String {
    if report.latency {
        format!("{:.1}", v / 1e3)
    } else {
        format!("{:.2}", v / 1e9)
    }
}
