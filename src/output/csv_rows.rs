//! `--csv FILE`: per-interval samples, one row per stream per interval, with neper's
//! columns; without `-i`, one row per stream for the whole run.
//!
//! Columns: `time` (seconds from the start of the run to the end of the interval),
//! `stream`, `bytes` (sent by the client, received by the server; the other way round
//! with `--reverse` and on `--bidir`'s second half of the streams), `transactions`
//! (sends or receives timed), the latency figures in seconds (`latency_min`,
//! `latency_mean`, `latency_max`, `latency_stddev`, then one column per percentile of
//! `--percentiles` named after it: `latency_p50`, `latency_p90`, `latency_p99`,
//! `latency_p99.9` by default; empty when nothing was timed), and `utime`/`stime`, the
//! CPU seconds the process used from the start of the run to the end of the interval.

use crate::percentiles::{self, Percentiles};
use crate::results::IntervalResult;
use crate::settings::Settings;
use crate::transport::Role;
use std::fmt::Write as _;

/// The header row of a run reporting `percentiles`.
pub fn header(percentiles: &Percentiles) -> String {
    let mut columns = String::from(
        "time,stream,bytes,transactions,latency_min,latency_mean,latency_max,latency_stddev",
    );
    for &p in percentiles.as_slice() {
        let _ = write!(columns, ",latency_p{}", percentiles::name(p));
    }
    columns + ",utime,stime"
}

/// The rows of one interval of `role`'s side, one per stream, each ending in a newline.
pub fn rows(role: Role, settings: &Settings, r: &IntervalResult) -> String {
    let secs = |ns: f64| format!("{:.9}", ns / 1e9);
    let mut out = String::new();
    for s in &r.streams {
        let f = &s.figures;
        let (bytes, lat) = if role.sends_on(settings, s.index) {
            (f.bytes_sent, f.send_latency.as_ref())
        } else {
            (f.bytes_received, f.recv_latency.as_ref())
        };
        let latency = lat.map_or_else(
            // One empty cell per latency column.
            || ",".repeat(3 + settings.percentiles.as_slice().len()),
            |l| {
                let exact = [l.min_ns as f64, l.mean_ns, l.max_ns as f64, l.stddev_ns];
                let at = l.percentiles.as_slice().iter().map(|v| v.ns as f64);
                exact
                    .into_iter()
                    .chain(at)
                    .map(secs)
                    .collect::<Vec<_>>()
                    .join(",")
            },
        );
        let (utime, stime) = r.cpu.map_or((String::new(), String::new()), |c| {
            (
                format!("{:.6}", c.user_secs()),
                format!("{:.6}", c.system_secs()),
            )
        });
        let _ = writeln!(
            out,
            "{},{},{bytes},{},{latency},{utime},{stime}",
            secs(r.end_ns as f64),
            s.index,
            lat.map_or(0, |l| l.count),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Figures, StreamInterval};
    use crate::stats::LatencyStats;
    use crate::sysinfo::CpuUsage;
    use crate::workload::Workload;

    #[test]
    fn one_row_per_stream_with_every_column() {
        let mut lat = LatencyStats::default();
        lat.record(2_000);
        lat.record(4_000);
        let figures = |bytes| Figures {
            bytes_sent: bytes,
            bytes_received: 0,
            duration_ns: 1_000_000_000,
            send_latency: lat.summary(&Percentiles::default()),
            recv_latency: None,
            submit_latency: None,
            retries: 0,
            transport: Default::default(),
            drain_ns: None,
        };
        let r = IntervalResult {
            index: 1,
            start_ns: 1_000_000_000,
            end_ns: 2_000_000_000,
            omitted: false,
            total: figures(300),
            reverse_total: None,
            streams: vec![
                StreamInterval {
                    index: 0,
                    start_ns: 1_000_000_000,
                    end_ns: 2_000_000_000,
                    figures: figures(100),
                },
                StreamInterval {
                    index: 1,
                    start_ns: 1_000_000_000,
                    end_ns: 2_000_000_000,
                    figures: figures(200),
                },
            ],
            cpu: Some(CpuUsage {
                user_us: 1_500_000,
                system_us: 250_000,
                counts: None,
            }),
        };
        let text = rows(Role::Client, &Settings::default(), &r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let columns = header(&Percentiles::default()).split(',').count();
        for l in &lines {
            assert_eq!(l.split(',').count(), columns, "{l}");
        }
        assert_eq!(
            lines[1],
            "2.000000000,1,200,2,0.000002000,0.000003000,0.000004000,0.000001000,0.000002000,0.000004000,0.000004000,0.000004000,1.500000,0.250000"
        );
        // The server side has no receive latency here: empty latency cells.
        let server = rows(Role::Server, &Settings::default(), &r);
        assert!(
            server.starts_with("2.000000000,0,0,0,,,,,,,,,1.500000,0.250000\n"),
            "{server}"
        );
        // With --reverse the client is the receiving end, the server the sending one.
        let reverse = Settings {
            workload: Workload::Reverse,
            ..Settings::default()
        };
        assert_eq!(rows(Role::Client, &reverse, &r), server);
        assert_eq!(rows(Role::Server, &reverse, &r), text);
        // With --bidir each stream's row follows its own direction: the client sends on
        // stream 0 and receives on stream 1.
        let bidir = Settings {
            workload: Workload::Bidir,
            nstreams: 2,
            ..Settings::default()
        };
        let both = rows(Role::Client, &bidir, &r);
        let both: Vec<&str> = both.lines().collect();
        assert_eq!(both[0], lines[0]);
        assert_eq!(both[1], server.lines().nth(1).unwrap_or_default());
    }

    #[test]
    fn the_header_and_empty_cells_follow_the_percentiles() {
        let asked: Percentiles = "50,99.99,99.999".parse().expect("a valid list");
        assert_eq!(
            header(&asked),
            "time,stream,bytes,transactions,latency_min,latency_mean,latency_max,latency_stddev,latency_p50,latency_p99.99,latency_p99.999,utime,stime"
        );
        let settings = Settings {
            percentiles: asked,
            ..Settings::default()
        };
        let r = IntervalResult {
            index: 0,
            start_ns: 0,
            end_ns: 1,
            omitted: false,
            total: Figures::new(&Default::default(), Default::default(), &asked),
            reverse_total: None,
            streams: vec![StreamInterval {
                index: 0,
                start_ns: 0,
                end_ns: 1,
                figures: Figures::new(&Default::default(), Default::default(), &asked),
            }],
            cpu: None,
        };
        let row = rows(Role::Client, &settings, &r);
        assert_eq!(row, "0.000000001,0,0,0,,,,,,,,,\n");
        assert_eq!(row.split(',').count(), header(&asked).split(',').count());
    }
}
