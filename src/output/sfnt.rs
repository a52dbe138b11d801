//! `--table sfnt`: a ping-pong sweep (`-r`, `--echo`, `--crr`) in sfnt-pingpong's
//! layout: a preamble of `# key: value` lines (command line, version, date, host, kernel,
//! CPU), then one tab-separated row per value in nanoseconds. sfnt-pingpong prints half
//! round trips; each column here says which it is: `half_*` is half the round trip
//! (sfnt-pingpong's figure), `rtt_*` the whole one, so neither is mistaken for the other.

use super::plot::run_label;
use super::{RunEnd, Sink};
use crate::stats::LatencySummary;
use crate::sweep::SweepParam;
use anyhow::{Context, Result};
use std::io::Write;

/// The figures of each half: sfnt-pingpong's, with three percentiles for its one.
const FIGURES: [&str; 8] = [
    "mean", "min", "median", "max", "p90", "p99", "p99.9", "stddev",
];

/// What the preamble names that a run does not know: how fperf was started, and the
/// server it ran against.
pub struct Preamble {
    pub command_line: String,
    pub server: String,
}

/// One row of the table (after the preamble and column titles, for the sweep's first
/// value), written to `out` when the run of `value` ends.
pub struct Sfnt<W: Write> {
    out: W,
    param: SweepParam,
    value: u64,
    preamble: Option<Preamble>,
}

impl<W: Write> Sfnt<W> {
    pub fn new(out: W, param: SweepParam, value: u64, preamble: Option<Preamble>) -> Sfnt<W> {
        Sfnt {
            out,
            param,
            value,
            preamble,
        }
    }
}

impl<W: Write> Sink for Sfnt<W> {
    fn end(&mut self, run: &RunEnd) -> Result<()> {
        let mut text = String::new();
        if let Some(p) = self.preamble.take() {
            let facts = run.outcome.client.system.as_ref();
            let fact = |f: Option<&String>| f.map_or("unknown", String::as_str).to_string();
            let uname = match facts {
                Some(f) => format!("{} {}", fact(f.kernel.as_ref()), f.arch),
                None => "unknown".into(),
            };
            let lines = [
                ("cmdline", p.command_line),
                ("version", crate::VERSION.to_string()),
                ("date", run.start.utc.clone()),
                ("host", fact(facts.and_then(|f| f.hostname.as_ref()))),
                ("uname", uname),
                ("cpu", fact(facts.and_then(|f| f.cpu_model.as_ref()))),
                ("server", p.server),
                ("test", run_label(run.settings, Some(self.param))),
                (
                    "units",
                    "ns; half_* is half a round trip (sfnt-pingpong's figure), \
                     rtt_* the whole round trip; iter counts round trips"
                        .to_string(),
                ),
            ];
            for (key, value) in lines {
                text += &format!("# {key}: {value}\n");
            }
            text += "#\n";
            text += &header(self.param);
            text.push('\n');
        }
        text += &row(self.value, run.outcome.client.total.send_latency.as_ref());
        text.push('\n');
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .context("cannot write the sweep's table")
    }
}

/// The column titles: the swept value, each figure as half and as whole round trip,
/// the round trips timed.
pub fn header(param: SweepParam) -> String {
    let mut cols = vec![param.column().to_string()];
    for half in ["half", "rtt"] {
        cols.extend(FIGURES.iter().map(|f| format!("{half}_{f}")));
    }
    cols.push("iter".into());
    format!("#\t{}", cols.join("\t"))
}

/// The row of `value`: its round trip `latency` halved, then whole, in ns.
pub fn row(value: u64, latency: Option<&LatencySummary>) -> String {
    let mut cols = vec![value.to_string()];
    match latency {
        Some(l) => {
            // In FIGURES' order; the percentiles are the default ones, as `--percentiles`
            // does not go with a sweep.
            let at = |p: f64| l.at(p).map(|ns| ns as f64);
            let rtt = [
                Some(l.mean_ns),
                Some(l.min_ns as f64),
                at(50.0),
                Some(l.max_ns as f64),
                at(90.0),
                at(99.0),
                at(99.9),
                Some(l.stddev_ns),
            ];
            for divisor in [2.0, 1.0] {
                cols.extend(rtt.iter().map(|ns| {
                    ns.map_or_else(|| "-".to_string(), |ns| format!("{:.0}", ns / divisor))
                }));
            }
            cols.push(l.count.to_string());
        }
        None => {
            cols.extend(std::iter::repeat("-".to_string()).take(2 * FIGURES.len()));
            cols.push("0".into());
        }
    }
    format!("\t{}", cols.join("\t"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::percentiles::{PercentileValue, PercentileValues};

    #[test]
    fn a_row_has_a_column_per_title_and_halves_the_round_trip() {
        let mut percentiles = PercentileValues::new();
        for (percentile, ns) in [(50.0, 2000), (90.0, 4000), (99.0, 8000), (99.9, 8800)] {
            percentiles.push(PercentileValue { percentile, ns });
        }
        let l = LatencySummary {
            count: 7,
            min_ns: 1001,
            max_ns: 9000,
            mean_ns: 2500.0,
            stddev_ns: 300.0,
            percentiles,
        };
        let h = header(SweepParam::PktSize);
        let r = row(64, Some(&l));
        let titles: Vec<&str> = h.split('\t').collect();
        let cells: Vec<&str> = r.split('\t').collect();
        assert_eq!(titles.len(), cells.len(), "{h}\n{r}");
        assert_eq!(titles[..3], ["#", "size", "half_mean"]);
        let cell = |name: &str| {
            let i = titles.iter().position(|t| *t == name).expect(name);
            cells[i]
        };
        assert_eq!(cell("size"), "64");
        assert_eq!(cell("half_mean"), "1250");
        assert_eq!(cell("rtt_min"), "1001");
        // 1001 / 2 rounds to even.
        assert!(["500", "501"].contains(&cell("half_min")));
        assert_eq!(cell("half_median"), "1000");
        assert_eq!(cell("half_max"), "4500");
        assert_eq!(cell("rtt_p90"), "4000");
        assert_eq!(cell("half_p99"), "4000");
        assert_eq!(cell("half_p99.9"), "4400");
        assert_eq!(cell("half_stddev"), "150");
        assert_eq!(cell("iter"), "7");
        let empty = row(64, None);
        assert_eq!(empty.split('\t').count(), titles.len());
    }
}
