//! The outputs of a `--under-load` run: the text table (one row per phase), the
//! `--json` document, `--json-stream`'s lines, `--csv`'s rows and `--plot`'s picture.

use crate::output::json_document::{rpm_method, UnderLoadEvent, UnderLoadRunDoc};
use crate::output::svg::{self, PhaseSpan};
use crate::results::nanos;
use crate::under_load::UnderLoadRun;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;

fn ms(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e6)
}

fn opt_ms(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".into(), ms)
}

fn mbps(bps: f64) -> String {
    if bps > 0.0 {
        format!("{:.1}", bps / 1e6)
    } else {
        "-".into()
    }
}

/// The human report: a header, one row per phase, and what the columns mean.
pub fn text(run: &UnderLoadRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Latency under load: {} → {} ({}), UDP probes every {} ms, {} TCP flow(s) per loaded \
         direction{}",
        run.client_addr,
        run.server_addr,
        run.server,
        run.probe_interval.as_secs_f64() * 1000.0,
        run.flows,
        run.congestion
            .as_deref()
            .map_or(String::new(), |c| format!(" ({c})"))
    );
    let _ =
        writeln!(
        out,
        "{:<9} {:>5} {:>6} | {:>8} {:>8} {:>8} {:>8} {:>8} | {:>8} | {:>9} {:>9} | {:>6} | {:>9}",
        "phase", "time", "loss", "min", "p50", "p90", "p99", "max", "added", "up", "down",
        "RPM", "TCP RTT"
    );
    let _ = writeln!(
        out,
        "{:<9} {:>5} {:>6} | {:>44} | {:>8} | {:>19} | {:>6} | {:>9}",
        "", "s", "probes", "probe round trip, ms", "ms", "Mbit/s", "", "p50, ms"
    );
    for p in &run.phases {
        let rtt = p.rtt.as_ref();
        let at = |q: f64| rtt.and_then(|r| r.at(q));
        let _ = writeln!(
            out,
            "{:<9} {:>5.1} {:>5.1}% | {:>8} {:>8} {:>8} {:>8} {:>8} | {:>8} | {:>9} {:>9} | {:>6} | {:>9}",
            p.kind.name(),
            p.window.1.saturating_sub(p.window.0).as_secs_f64(),
            p.loss() * 100.0,
            opt_ms(rtt.map(|r| r.min_ns)),
            opt_ms(at(50.0)),
            opt_ms(at(90.0)),
            opt_ms(at(99.0)),
            opt_ms(rtt.map(|r| r.max_ns)),
            p.added_delay_ns
                .map_or_else(|| "-".into(), |ns| format!("{:+.2}", ns as f64 / 1e6)),
            mbps(p.up_bps),
            mbps(p.down_bps),
            p.rpm.map_or_else(|| "-".into(), |r| format!("{r:.0}")),
            opt_ms(p.loaded_rtt.as_ref().and_then(|r| r.at(50.0))),
        );
    }
    let _ = writeln!(
        out,
        "loss: probes with no echo; added: the phase's p50 less the idle phase's; TCP RTT: \
         the round trip TCP measured on the loaded connection (TCP_INFO), p50 of its samples"
    );
    let _ = writeln!(out, "RPM per {}", rpm_method());
    let _ = writeln!(out, "{}", one_way_text(run));
    if run.interrupted {
        let _ = writeln!(out, "interrupted: the phases run until then");
    }
    out
}

/// What the report says of one-way delays: each phase's where the clocks are known to
/// agree well enough, and why not otherwise.
fn one_way_text(run: &UnderLoadRun) -> String {
    let clocks = match &run.clocks {
        None => return "one-way delays: none (no probe came back)".into(),
        Some(c) if c.same_host => "both ends on this host, one clock".to_string(),
        Some(c) => format!(
            "server clock {:+.3} ms from the client's, ±{:.3} ms (NTP-style, from the \
             fastest probe)",
            c.offset_ns as f64 / 1e6,
            c.bound_ns as f64 / 1e6
        ),
    };
    let shown: Vec<String> = run
        .phases
        .iter()
        .filter_map(|p| {
            p.one_way.map(|w| {
                format!(
                    "{} {} up / {} down",
                    p.kind.name(),
                    ms(w.up_ns),
                    ms(w.down_ns)
                )
            })
        })
        .collect();
    if shown.is_empty() {
        format!(
            "one-way delays: not shown, the clocks' offset is not known well enough against \
             the delays ({clocks})"
        )
    } else {
        format!(
            "one-way p50, ms: {} ({clocks}; shown where the offset's uncertainty is under a \
             tenth of the delays)",
            shown.join(", ")
        )
    }
}

/// `--json-stream`'s lines of `run`, in time order, the document last.
pub fn stream_events(run: &UnderLoadRun, doc: UnderLoadRunDoc) -> Vec<UnderLoadEvent> {
    let phase_at = |t: std::time::Duration| {
        run.phases
            .iter()
            .find(|p| t >= p.window.0 && t < p.window.1)
            .map(|p| p.kind.name())
    };
    let mut timed: Vec<(u64, UnderLoadEvent)> = run
        .probes
        .iter()
        .enumerate()
        .map(|(seq, p)| {
            (
                nanos(p.sent),
                UnderLoadEvent::Probe {
                    phase: phase_at(p.sent),
                    seq: seq as u64,
                    sent_ns: nanos(p.sent),
                    rtt_ns: p.rtt.map(nanos),
                },
            )
        })
        .chain(run.throughput.iter().map(|t| {
            (
                nanos(t.at),
                UnderLoadEvent::Throughput {
                    phase: t.phase.name(),
                    at_ns: nanos(t.at),
                    up_bits_per_second: t.up_bps,
                    down_bits_per_second: t.down_bps,
                },
            )
        }))
        .collect();
    timed.sort_by_key(|(at, _)| *at);
    timed
        .into_iter()
        .map(|(_, e)| e)
        .chain([UnderLoadEvent::End {
            result: Box::new(doc),
        }])
        .collect()
}

/// `--csv`'s header and one row per phase.
pub fn csv(run: &UnderLoadRun) -> String {
    let mut out = String::from(
        "phase,start_s,end_s,probes_sent,probes_lost,probe_loss,rtt_min_ms,rtt_p50_ms,\
         rtt_p90_ms,rtt_p99_ms,rtt_max_ms,added_delay_ms,up_bits_per_second,\
         down_bits_per_second,rpm,loaded_connection_rtt_p50_ms\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    let ms = |ns: Option<u64>| opt(ns.map(|ns| ns as f64 / 1e6));
    for p in &run.phases {
        let rtt = p.rtt.as_ref();
        let at = |q: f64| rtt.and_then(|r| r.at(q));
        let _ = writeln!(
            out,
            "{},{:.3},{:.3},{},{},{:.4},{},{},{},{},{},{},{:.0},{:.0},{},{}",
            p.kind.name(),
            p.window.0.as_secs_f64(),
            p.window.1.as_secs_f64(),
            p.sent,
            p.lost,
            p.loss(),
            ms(rtt.map(|r| r.min_ns)),
            ms(at(50.0)),
            ms(at(90.0)),
            ms(at(99.0)),
            ms(rtt.map(|r| r.max_ns)),
            opt(p.added_delay_ns.map(|ns| ns as f64 / 1e6)),
            p.up_bps,
            p.down_bps,
            opt(p.rpm),
            ms(p.loaded_rtt.as_ref().and_then(|r| r.at(50.0))),
        );
    }
    out
}

/// Writes `--csv`'s file.
pub fn write_csv(path: &Path, run: &UnderLoadRun) -> Result<()> {
    std::fs::write(path, csv(run))
        .with_context(|| format!("cannot write --csv file {}", path.display()))
}

/// Draws `--plot`'s picture: round trips and throughput over time, the phases marked;
/// its title names the hosts and fperf's version.
pub fn plot(path: &Path, run: &UnderLoadRun) -> Result<()> {
    let secs = |d: std::time::Duration| d.as_secs_f64();
    let rtt: Vec<(f64, f64)> = run
        .probes
        .iter()
        .filter_map(|p| p.rtt.map(|rtt| (secs(p.sent), rtt.as_secs_f64() * 1e3)))
        .collect();
    let up: Vec<(f64, f64)> = run
        .throughput
        .iter()
        .map(|t| (secs(t.at), t.up_bps / 1e6))
        .collect();
    let down: Vec<(f64, f64)> = run
        .throughput
        .iter()
        .map(|t| (secs(t.at), t.down_bps / 1e6))
        .collect();
    let phases: Vec<PhaseSpan> = run
        .phases
        .iter()
        .map(|p| PhaseSpan {
            name: p.kind.name(),
            start: secs(p.window.0),
            end: secs(p.window.1),
        })
        .collect();
    let title = format!(
        "fperf {}, {} → {} ({}): latency under load",
        crate::VERSION,
        run.client_addr.ip(),
        run.server_addr.ip(),
        run.server
    );
    svg::under_load(path, &title, &rtt, &up, &down, &phases)
}
