//! The human-readable report: headers, end-of-run figures and interval lines, rendered
//! from the typed results of [`crate::results`].

use crate::percentiles::{self, Percentiles};
use crate::results::{Figures, IntervalResult, SideResult, StreamInterval};
use crate::settings::Settings;
use crate::stats::{LatencySummary, StreamStats};
use crate::transport::facts::{Amount, OnHeader, OnInterval};
use crate::transport::figures::TransportInForce;
use crate::transport::labels::Sample;
use crate::transport::Role;
use crate::units::{
    bit_rate, bit_rate_over, byte_rate, pkt_size, rate, rate_unmeasured, size, size_triplet,
};
use std::fmt::Write as _;
use std::time::Duration;

/// `p50=X  p99.9=Y` for each percentile of `l`, each figure written by `fmt`.
fn percentile_columns(l: &LatencySummary, fmt: impl Fn(u64) -> String) -> String {
    let columns: Vec<String> = l
        .percentiles
        .as_slice()
        .iter()
        .map(|v| format!("p{}={}", percentiles::name(v.percentile), fmt(v.ns)))
        .collect();
    columns.join("  ")
}

fn latency_line(label: &str, width: usize, l: &LatencySummary) -> String {
    let us = |ns: f64| format!("{:.2}us", ns / 1000.0);
    format!(
        "{label:<width$}: avg={}  min={}  max={}  {}  stddev={}\n",
        us(l.mean_ns),
        us(l.min_ns as f64),
        us(l.max_ns as f64),
        percentile_columns(l, |ns| us(ns as f64)),
        us(l.stddev_ns),
    )
}

fn submit_line(label: &str, width: usize, l: &LatencySummary) -> String {
    format!(
        "{label:<width$}: avg={:.0}ns  min={}ns  max={}ns  {}  stddev={:.0}ns\n",
        l.mean_ns,
        l.min_ns,
        l.max_ns,
        percentile_columns(l, |ns| format!("{ns}ns")),
        l.stddev_ns
    )
}

fn volume_line(label: &str, width: usize, bytes: u64, secs: f64) -> String {
    let r = rate(bytes, secs);
    let bw = if rate_unmeasured(bytes, secs) {
        "n/a".to_string()
    } else {
        format!("{} {}", byte_rate(r), bit_rate(r))
    };
    format!(
        "{label:<width$}: {} in {secs:.2}s. (bw: {bw})\n",
        size_triplet(bytes)
    )
}

/// The name of a send-latency figure: `mprtt` with MPRTT, else `latency`.
pub fn latency_label(settings: &Settings) -> &'static str {
    if settings.workload.mprtt() {
        "mprtt"
    } else {
        "latency"
    }
}

/// What a report header adds when the data threads run under `SCHED_BATCH`
/// ([`Settings::batch_threads`]).
fn sched_label(settings: &Settings) -> &'static str {
    if settings.batch_threads() {
        " sched=batch"
    } else {
        ""
    }
}

/// What a report header adds of the transport's facts: of what the sockets ended up
/// with (TCP's congestion control, and on the server its receive low-water mark and
/// nap), then of what the transport set up (RDMA's API and device), those `role`'s
/// header shows.
fn facts_label(settings: &Settings, in_force: Option<&TransportInForce>, role: Role) -> String {
    let mut out = String::new();
    let sockets = in_force.into_iter().flat_map(TransportInForce::each);
    for facts in sockets.chain(settings.transport.facts()) {
        for e in facts.entries() {
            let shown = match e.shown.header {
                Some(OnHeader::EveryEnd) => true,
                Some(OnHeader::Server) => role == Role::Server,
                None => false,
            };
            if shown {
                let _ = write!(out, " {}={}", e.label, header_amount(&e.amount));
            }
        }
    }
    out
}

/// A setting as a header line has it: sizes as `pkt_size` has them.
fn header_amount(amount: &Amount) -> String {
    match amount {
        Amount::Bytes(n) => u32::try_from(*n).map_or_else(|_| exact(amount), pkt_size),
        other => exact(other),
    }
}

/// What the header says of a latency figure whose samples are not one per packet:
/// ` latency=per-batch(64)`, ` latency=per-read(128KB)`, for the directions `role`'s
/// end reports (with `--bidir` both, each once).
fn sample_label(settings: &Settings, role: Role) -> String {
    let samples = settings.transport.samples(&settings.shape());
    let mine = if settings.first_server_stream().is_some() {
        vec![samples.send, samples.recv]
    } else if role.sends(settings) {
        vec![samples.send]
    } else {
        vec![samples.recv]
    };
    let mut out = String::new();
    for (i, s) in mine.iter().enumerate() {
        if mine[..i].contains(s) {
            continue;
        }
        match s {
            Sample::Packet => {}
            Sample::Batch { datagrams } => {
                let _ = write!(out, " latency=per-batch({datagrams})");
            }
            Sample::Read { bytes } => {
                let _ = write!(out, " latency=per-read({})", pkt_size(*bytes));
            }
        }
    }
    out
}

/// The client's header line(s): one line for a single stream, one per stream else.
/// `in_force`: what the client's sockets ended up with; `length`: how long the run
/// lasts, where it was given no length.
pub fn client_header(
    settings: &Settings,
    streams: &[(u32, String, String)],
    in_force: Option<&TransportInForce>,
    length: Option<&str>,
) -> String {
    let proto = settings.protocol().name();
    let own = settings.transport.labels();
    let tail = format!(
        "pkt_size={}B {} {}={}{}{}{}{}{}{}{}{}",
        settings.pktsize,
        settings.mode_label(),
        // With --flows each stream is a thread, and its sockets its flows.
        if settings.flows { "flows" } else { "nsockets" },
        settings.nsockets,
        own.engine,
        facts_label(settings, in_force, Role::Client),
        own.setup,
        settings.workload_label(),
        sched_label(settings),
        sample_label(settings, Role::Client),
        own.caveat,
        length.map_or_else(String::new, |l| format!(" {l}")),
    );
    let mut out = String::new();
    if let [(_, _, peer)] = streams {
        let _ = writeln!(out, "{proto} CLIENT => {peer} {tail}");
    } else {
        for (i, local, peer) in streams {
            let arrow = arrow(Role::Client, settings, *i);
            let _ = writeln!(out, "{proto} STREAM {i} {local} {arrow} {peer} {tail}");
        }
    }
    out
}

/// Which way stream `stream`'s data flows, seen from `role`'s end.
fn arrow(role: Role, settings: &Settings, stream: u32) -> &'static str {
    if role.sends_on(settings, stream) {
        "=>"
    } else {
        "<="
    }
}

/// The figures of whichever end `r` is, one direction at a time: with `--bidir` the
/// client's data streams, a blank line, then the server's, each rendered as the one-way
/// run of its streams would be (the CPU time goes with the first).
fn direction_lines(settings: &Settings, r: &SideResult, width: usize) -> String {
    if settings.first_server_stream().is_none() {
        return end_lines(settings, r, width);
    }
    let one_way = |reverse: bool, total: Figures, cpu| {
        let streams = (r.streams.iter())
            .filter(|s| settings.server_sends_on(s.index) == reverse)
            .cloned()
            .collect();
        let side = SideResult {
            role: r.role,
            total,
            reverse_total: None,
            streams,
            system: None,
            cpu,
            intervals: Vec::new(),
        };
        end_lines(&settings.one_way(reverse), &side, width)
    };
    let server_data = (r.reverse_total.clone()).unwrap_or_else(|| {
        Figures::new(
            &StreamStats::default(),
            Duration::ZERO,
            &settings.percentiles,
        )
    });
    format!(
        "{}\n{}",
        one_way(false, r.total.clone(), r.cpu),
        one_way(true, server_data, None)
    )
}

/// The client's report body (after the header): the sending end's figures, with
/// `--reverse` the receiving end's, with `--bidir` both.
pub fn client_body(settings: &Settings, r: &SideResult) -> String {
    const W: usize = 10;
    let mut out = String::new();
    if r.streams.len() > 1 {
        out.push('\n');
    }
    out + &direction_lines(settings, r, W)
}

/// What the other end saw, in one line for this end's report (labelled `width` wide):
/// the peer's volume and rate each way it moved data, and for UDP its datagram counts.
pub fn peer_line(settings: &Settings, peer: &SideResult, width: usize) -> String {
    let part = |verb: &str, bytes: u64, secs: f64| {
        format!(
            "{verb} {} in {secs:.2}s ({})",
            size_triplet(bytes),
            bit_rate_over(bytes, secs)
        )
    };
    let t = &peer.total;
    let mut parts = Vec::new();
    match (&peer.reverse_total, peer.role) {
        // --bidir: the client's data, then the server's own.
        (Some(back), Role::Server) => {
            parts.push(part("received", t.bytes_received, t.secs()));
            parts.push(part("sent", back.bytes_sent, back.secs()));
        }
        (Some(back), Role::Client) => {
            parts.push(part("sent", t.bytes_sent, t.secs()));
            parts.push(part("received", back.bytes_received, back.secs()));
        }
        (None, _) if peer.role.sends(settings) => parts.push(part("sent", t.bytes_sent, t.secs())),
        (None, _) => parts.push(part("received", t.bytes_received, t.secs())),
    }
    parts.extend(
        t.transport
            .each()
            .filter_map(|facts| facts.summary_clause()),
    );
    // --rx-timestamps: the two halves of its receive latency, by their medians.
    let medians: Vec<String> = (t.transport.each())
        .flat_map(|facts| facts.latencies())
        .filter_map(|(name, l)| {
            let ns = l.at(50.0)?;
            Some(format!("{name} p50 {:.2}us", ns as f64 / 1000.0))
        })
        .collect();
    if !medians.is_empty() {
        parts.push(medians.join(", "));
    }
    let label = match peer.role {
        Role::Server => "server",
        Role::Client => "client",
    };
    format!("{label:<width$}: {}\n", parts.join("; "))
}

/// The figures of whichever end `r` is, sending or receiving, labelled `width` wide.
fn end_lines(settings: &Settings, r: &SideResult, width: usize) -> String {
    if r.role.sends(settings) {
        sender_lines(settings, r, width)
    } else {
        receiver_lines(settings, r, width)
    }
}

/// The sending end's figures.
fn sender_lines(settings: &Settings, r: &SideResult, width: usize) -> String {
    let t = &r.total;
    let mut out = volume_line("sent", width, t.bytes_sent, t.secs());
    if let Some(ns) = t.drain_ns {
        let peer = match r.role {
            Role::Client => "server",
            Role::Server => "client",
        };
        let _ = writeln!(
            out,
            "{:<width$}: {:.2}s from the last send to the {peer}'s confirmation (not in the sent time)",
            "drain",
            ns as f64 / 1e9
        );
    }
    if settings.workload.mprtt() {
        let _ = writeln!(
            out,
            "{:<width$}: {}",
            "received",
            size_triplet(t.bytes_received)
        );
    }
    if t.retries > 0
        || (settings.workload.mprtt()
            && settings.protocol() == crate::transport::settings::Protocol::Udp)
    {
        let _ = writeln!(out, "{:<width$}: {}", "retries", t.retries);
    }
    if let Some(l) = &t.send_latency {
        out += &latency_line(latency_label(settings), width, l);
    }
    if let Some(tps) = t.transactions_per_second(settings, r.role) {
        let transactions = t.send_latency.map_or(0, |l| l.count);
        let _ = writeln!(
            out,
            "{:<width$}: {tps:.0}/s ({transactions} transactions in {:.2}s)",
            "tps",
            t.secs()
        );
    }
    if settings.asynchronous() {
        if let Some(l) = &t.submit_latency {
            out += &submit_line("lat_submit", width, l);
        }
    }
    out += &own_lines(t, width);
    out += &facts_lines(width, r);
    if r.streams.len() > 1 {
        out += &per_stream_block(r, "sent", |f| (f.send_latency.as_ref(), f.bytes_sent));
    }
    out
}

/// The transports' lines of their own (UDP's datagram accounting).
fn own_lines(t: &Figures, width: usize) -> String {
    (t.transport.each())
        .map(|facts| facts.report_lines(width))
        .collect()
}

/// The CPU time and TCP_INFO lines, for what was measured: `ctxsw=` voluntary/involuntary
/// context switches, `faults=` minor/major page faults.
fn facts_lines(width: usize, r: &SideResult) -> String {
    let mut out = String::new();
    if let Some(c) = &r.cpu {
        let _ = write!(
            out,
            "{:<width$}: user={:.2}s  sys={:.2}s",
            "cpu",
            c.user_secs(),
            c.system_secs()
        );
        if let Some(n) = &c.counts {
            let _ = write!(
                out,
                "  ctxsw={}/{}  maxrss={}  faults={}/{}",
                n.voluntary_switches,
                n.involuntary_switches,
                size(n.max_rss_kib as f64 * 1024.0),
                n.minor_faults,
                n.major_faults
            );
        }
        out.push('\n');
    }
    for facts in r.total.transport.each() {
        let figures: Vec<String> = facts
            .entries()
            .into_iter()
            .filter(|e| e.shown.summary)
            .map(|e| format!("{}={}", e.label, exact(&e.amount)))
            .collect();
        let sentences = facts.sentences();
        // A transport whose summary shows nothing has no line.
        if figures.is_empty() && sentences.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{:<width$}: {}", facts.title(), figures.join("  "));
        for sentence in sentences {
            let _ = writeln!(out, "{:<width$}  {sentence}", "");
        }
    }
    out
}

/// A transport's figure as its summary line has it: the exact number and its unit.
fn exact(amount: &Amount) -> String {
    match amount {
        Amount::Count(n) => n.to_string(),
        Amount::Bytes(n) => format!("{n}B"),
        Amount::Micros(us) => format!("{us}us"),
        Amount::BytesPerSecond(n) => bit_rate(*n as f64),
        Amount::Ratio(r) => format!("{:.2}%", r * 100.0),
        Amount::Text(t) => t.clone(),
    }
}

/// A transport's figure as interval lines have it: sizes in KB, MB or GB.
fn rounded(amount: &Amount) -> String {
    match amount {
        Amount::Bytes(n) => size(*n as f64),
        other => exact(other),
    }
}

/// The transport's figures an interval line shows: on a line of what an end (or
/// stream) sent, every one that interval lines show; otherwise the ones shown always.
fn interval_facts(f: &Figures, sends: bool) -> String {
    let mut out = String::new();
    for facts in f.transport.each() {
        for e in facts.entries() {
            let shown = match e.shown.interval {
                Some(OnInterval::Always) => true,
                Some(OnInterval::Sending) => sends,
                None => false,
            };
            if shown {
                let _ = write!(out, "  {}: {}", e.label, rounded(&e.amount));
            }
        }
    }
    out
}

/// The `Per Stream:` block: each stream's latency, volume and rate in the direction
/// `pick` chooses (labelled `label`).
fn per_stream_block(
    r: &SideResult,
    label: &str,
    pick: fn(&Figures) -> (Option<&LatencySummary>, u64),
) -> String {
    let mut out = String::from("\nPer Stream:\n");
    for s in &r.streams {
        let (lat, bytes) = pick(&s.figures);
        let lat = lat.map_or_else(String::new, short_latency);
        let _ = writeln!(
            out,
            "  stream {} : {lat} {label}: {}  bw: {}",
            s.index,
            size_triplet(bytes),
            bit_rate_over(bytes, s.figures.secs())
        );
    }
    out
}

fn short_latency(l: &LatencySummary) -> String {
    let line = latency_line("", 0, l);
    line.trim_start_matches(": ").trim_end().to_string()
}

/// The server's connection line, after `Server listening on ...`. `in_force`: what
/// the server's sockets ended up with.
pub fn server_header(settings: &Settings, from: &str, in_force: &TransportInForce) -> String {
    let own = settings.transport.labels();
    format!(
        " new {} connection from {from}. pkt_size({}){}{}{}{}{}{}{}\n",
        settings.protocol().name(),
        pkt_size(settings.pktsize),
        own.engine,
        facts_label(settings, Some(in_force), Role::Server),
        own.setup,
        settings.workload_label(),
        sched_label(settings),
        sample_label(settings, Role::Server),
        own.caveat,
    )
}

/// The server's report body: the receiving end's figures, with `--reverse` the
/// sending end's, with `--bidir` both.
pub fn server_body(settings: &Settings, r: &SideResult) -> String {
    const W: usize = 9;
    let mut out = String::new();
    if r.streams.len() > 1 {
        for s in &r.streams {
            let _ = writeln!(
                out,
                "{} STREAM {} {} {} {}",
                settings.protocol().name(),
                s.index,
                s.local,
                arrow(r.role, settings, s.index),
                s.peer
            );
        }
    }
    out + &direction_lines(settings, r, W)
}

/// The receiving end's figures.
fn receiver_lines(settings: &Settings, r: &SideResult, width: usize) -> String {
    let t = &r.total;
    let mut out = volume_line("received", width, t.bytes_received, t.secs());
    if settings.workload.mprtt() {
        let _ = writeln!(out, "{:<width$}: {}", "sent", size_triplet(t.bytes_sent));
    }
    if let Some(l) = &t.recv_latency {
        out += &latency_line(latency_label(settings), width, l);
    }
    for facts in t.transport.each() {
        for (name, l) in facts.latencies() {
            out += &latency_line(name, width, l);
        }
    }
    out += &own_lines(t, width);
    out += &facts_lines(width, r);
    if r.streams.len() > 1 {
        out += &per_stream_block(r, "received", |f| {
            (f.recv_latency.as_ref(), f.bytes_received)
        });
    }
    out
}

/// The human line of one interval: bytes, bandwidth, latency p50/p99 and, for TCP,
/// retransmits. With `--bidir`, a line for each direction.
pub fn interval_line(role: Role, settings: &Settings, r: &IntervalResult) -> String {
    // With several streams a way, a line for each first (as iperf3's), then their sum.
    let per_direction = settings.first_server_stream().unwrap_or(settings.nstreams);
    let mut lines: Vec<String> = if per_direction > 1 && r.streams.len() > 1 {
        r.streams
            .iter()
            .map(|s| stream_line(role, settings, s))
            .collect()
    } else {
        Vec::new()
    };
    match (&r.reverse_total, settings.first_server_stream().is_some()) {
        (Some(server_data), true) => {
            lines.push(direction_line(role, &settings.one_way(false), r, &r.total));
            lines.push(direction_line(
                role,
                &settings.one_way(true),
                r,
                server_data,
            ));
        }
        _ => lines.push(direction_line(role, settings, r, &r.total)),
    }
    lines.join("\n")
}

/// One stream's line of an interval: what it moved, and for a TCP sender its
/// retransmits and congestion window, as iperf3's columns have them.
fn stream_line(role: Role, settings: &Settings, s: &StreamInterval) -> String {
    let sends = role.sends_on(settings, s.index);
    let who = format!("stream {} ", s.index);
    let mut line = moved_columns(settings, sends, &s.figures, (s.start_ns, s.end_ns), &who);
    if sends {
        line += &interval_facts(&s.figures, sends);
    }
    line
}

/// The columns every interval line begins with: `[ START- ENDs] WHO`, what `f` sent (or
/// received), its rate over the span, and its latency's p50 and p99 (every percentile
/// of `--percentiles` when it was given); for a receiver of bulk data, the transport's
/// own columns (UDP's datagrams lost and jitter).
fn moved_columns(
    settings: &Settings,
    sends: bool,
    f: &Figures,
    (start_ns, end_ns): (u64, u64),
    who: &str,
) -> String {
    let (label, bytes, lat) = if sends {
        ("sent", f.bytes_sent, f.send_latency.as_ref())
    } else {
        ("received", f.bytes_received, f.recv_latency.as_ref())
    };
    // The server's intervals arrive from the network: never trust their order.
    let secs = end_ns.saturating_sub(start_ns) as f64 / 1e9;
    let mut line = format!(
        "[{:>7.2}-{:>7.2}s] {who}{label}: {}  bw: {}",
        start_ns as f64 / 1e9,
        end_ns as f64 / 1e9,
        size_triplet(bytes),
        bit_rate_over(bytes, secs),
    );
    if let Some(l) = lat {
        // The default list is longer than an interval line has room for.
        let shown = l.percentiles.as_slice().iter().filter(|v| {
            settings.percentiles != Percentiles::default() || [50.0, 99.0].contains(&v.percentile)
        });
        line += &format!("  {}:", latency_label(settings));
        for v in shown {
            line += &format!(
                " p{}={:.2}us",
                percentiles::name(v.percentile),
                v.ns as f64 / 1000.0
            );
        }
    }
    if !sends && !settings.workload.mprtt() {
        for facts in f.transport.each() {
            line += &facts.receiver_columns();
        }
    }
    line
}

/// The interval line of one direction, whose streams together moved `t`.
fn direction_line(role: Role, settings: &Settings, r: &IntervalResult, t: &Figures) -> String {
    let span = (r.start_ns, r.end_ns);
    let mut line = moved_columns(settings, role.sends(settings), t, span, "");
    if let Some(tps) = t.transactions_per_second(settings, role) {
        line += &format!("  tps: {tps:.0}/s");
    }
    line += &interval_facts(t, role.sends(settings));
    if r.omitted {
        line += "  (omitted)";
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{SideTotals, StreamResult};
    use crate::stats::LatencyStats;
    use crate::transport::settings::TransportSettings;
    use crate::transport::sockets::SocketSettings;
    use crate::transport::tcp::settings::TcpSettings;
    use crate::workload::{Reply, Workload};
    use std::time::Instant;

    /// TCP's sockets ended up with `congestion`, `rcvlowat` and a nap of `rx_nap_us`.
    fn in_force(
        congestion: Option<&str>,
        rcvlowat: Option<u32>,
        rx_nap_us: Option<u32>,
    ) -> TransportInForce {
        TransportInForce {
            tcp: crate::transport::tcp::facts::TcpInForce {
                congestion: congestion.map(str::to_owned),
                rcvlowat,
                rx_nap_us,
            },
            ..TransportInForce::default()
        }
    }

    fn side(bytes: u64, secs: f64, nstreams: u32) -> SideResult {
        let mut lat = LatencyStats::default();
        for ns in [5_090u64, 8_000, 74_840] {
            lat.record(ns);
        }
        let figures = Figures {
            bytes_sent: bytes,
            bytes_received: 0,
            duration_ns: (secs * 1e9) as u64,
            send_latency: lat.summary(&Percentiles::default()),
            recv_latency: lat.summary(&Percentiles::default()),
            submit_latency: None,
            retries: 0,
            transport: Default::default(),
            drain_ns: None,
        };
        SideResult {
            role: Role::Client,
            total: figures.clone(),
            reverse_total: None,
            streams: (0..nstreams)
                .map(|index| StreamResult {
                    index,
                    local: "127.0.0.1:1".into(),
                    peer: "127.0.0.1:28444".into(),
                    in_force: Default::default(),
                    figures: figures.clone(),
                })
                .collect(),
            system: None,
            cpu: None,
            intervals: Vec::new(),
        }
    }

    #[test]
    fn client_report_has_the_seed_layout() {
        let s = Settings::default();
        let streams = [(0, "127.0.0.1:1".into(), "127.0.0.1:28444".into())];
        assert_eq!(
            client_header(&s, &streams, None, None),
            "TCP CLIENT => 127.0.0.1:28444 pkt_size=32768B sync(no-queue) nsockets=1 sched=batch\n"
        );
        assert_eq!(
            client_header(
                &s,
                &streams,
                Some(&in_force(Some("cubic"), None, None)),
                None
            ),
            "TCP CLIENT => 127.0.0.1:28444 pkt_size=32768B sync(no-queue) nsockets=1 cc=cubic \
             sched=batch\n"
        );
        let body = client_body(&s, &side(10_737_418_240, 2.83, 1));
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(
            lines[0],
            "sent      : 10240MB(10.00GB 10737418240B) in 2.83s. (bw: 3.53GB/s 30.4Gbit/s)"
        );
        assert!(lines[1].starts_with("latency   : avg=29.31us  min=5.09us  max=74.84us  p50="));
        assert!(lines[1].contains(" p99.9=") && lines[1].contains(" stddev="));
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn bytes_in_no_measurable_time_have_no_rate_rather_than_zero() {
        assert_eq!(
            volume_line("received", 9, 32768, 0.0),
            "received : 32.0KB(32768B) in 0.00s. (bw: n/a)\n"
        );
        assert_eq!(
            volume_line("received", 9, 0, 0.0),
            "received : 0B in 0.00s. (bw: 0.00B/s 0.00bit/s)\n"
        );
        assert_eq!(bit_rate_over(32768, 0.0), "n/a");
        assert_eq!(bit_rate_over(125_000, 1.0), "1.00Mbit/s");
    }

    #[test]
    fn latency_lines_show_the_percentiles_asked_for() {
        let mut lat = LatencyStats::default();
        for ns in 1..=10_000u64 {
            lat.record(ns * 1000);
        }
        let asked: Percentiles = "50,99.99".parse().expect("a valid list");
        let s = Settings {
            percentiles: asked,
            ..Settings::default()
        };
        let mut r = side(1 << 20, 1.0, 1);
        r.total.send_latency = lat.summary(&asked);
        let us = |p: f64| {
            let ns = r.total.send_latency.and_then(|l| l.at(p)).unwrap_or(0);
            format!("{:.2}us", ns as f64 / 1000.0)
        };
        let body = client_body(&s, &r);
        let line = body.lines().nth(1).unwrap_or_default();
        assert!(line.starts_with("latency   : avg="), "{body}");
        let shown = format!("  p50={}  p99.99={}  stddev=", us(50.0), us(99.99));
        assert!(line.contains(&shown), "{line}");
        assert!(!line.contains("p90") && !line.contains("p99="), "{line}");
        // Interval lines show the list when one was asked for, else p50 and p99.
        let mut interval = IntervalResult {
            index: 0,
            start_ns: 0,
            end_ns: 1_000_000_000,
            omitted: false,
            total: r.total.clone(),
            reverse_total: None,
            streams: Vec::new(),
            cpu: None,
        };
        let line = interval_line(Role::Client, &s, &interval);
        let shown = format!("  latency: p50={} p99.99={}", us(50.0), us(99.99));
        assert!(line.ends_with(&shown), "{line}");
        interval.total.send_latency = lat.summary(&Percentiles::default());
        let line = interval_line(Role::Client, &Settings::default(), &interval);
        let at = |p: f64| {
            interval
                .total
                .send_latency
                .and_then(|l| l.at(p))
                .unwrap_or(0)
        };
        let shown = format!(
            "  latency: p50={:.2}us p99={:.2}us",
            at(50.0) as f64 / 1000.0,
            at(99.0) as f64 / 1000.0
        );
        assert!(line.ends_with(&shown), "{line}");
    }

    #[test]
    fn server_report_has_the_seed_layout() {
        let s = Settings::default();
        assert_eq!(
            server_header(&s, "127.0.0.1:50384", &in_force(None, None, None)),
            " new TCP connection from 127.0.0.1:50384. pkt_size(32KB) sched=batch latency=per-read(128KB)\n"
        );
        assert_eq!(
            server_header(&s, "127.0.0.1:50384", &in_force(Some("bbr"), Some(1), None)),
            " new TCP connection from 127.0.0.1:50384. pkt_size(32KB) cc=bbr sched=batch latency=per-read(128KB)\n"
        );
        assert_eq!(
            server_header(
                &s,
                "127.0.0.1:50384",
                &in_force(Some("bbr"), Some(128 << 10), None)
            ),
            " new TCP connection from 127.0.0.1:50384. pkt_size(32KB) cc=bbr rcvlowat=128KB \
             sched=batch latency=per-read(128KB)\n"
        );
        let nap = Some(20);
        assert_eq!(
            server_header(
                &s,
                "127.0.0.1:50384",
                &in_force(Some("cubic"), Some(128 << 10), nap)
            ),
            " new TCP connection from 127.0.0.1:50384. pkt_size(32KB) cc=cubic rcvlowat=128KB \
             rx_nap=20us sched=batch latency=per-read(128KB)\n"
        );
        let tcp = |options| Settings {
            transport: TransportSettings::Tcp(options),
            ..Settings::default()
        };
        let skip = tcp(TcpSettings {
            skip_rx_copy: true,
            ..TcpSettings::default()
        });
        assert_eq!(
            server_header(&skip, "127.0.0.1:50384", &in_force(Some("bbr"), None, None)),
            " new TCP connection from 127.0.0.1:50384. pkt_size(32KB) cc=bbr sched=batch latency=per-read(128KB) rx_copy=skipped \
             (the receiving end's reads discard the bytes in the kernel)\n"
        );
        let window = tcp(TcpSettings {
            sockets: SocketSettings {
                window: Some(256 << 10),
                ..SocketSettings::default()
            },
            ..TcpSettings::default()
        });
        assert_eq!(
            server_header(
                &window,
                "127.0.0.1:50384",
                &in_force(Some("cubic"), None, None)
            ),
            " new TCP connection from 127.0.0.1:50384. pkt_size(32KB) cc=cubic window=256KB \
             sched=batch latency=per-read(128KB)\n"
        );
        // Reads of a packet or more are one packet each: no label.
        let big = Settings {
            pktsize: 128 << 10,
            ..Settings::default()
        };
        assert!(!server_header(&big, "x", &in_force(None, None, None)).contains("latency="));
        let round_trips = Settings {
            workload: Workload::RoundTrip(Reply::Ack),
            ..Settings::default()
        };
        assert_eq!(
            server_header(&round_trips, "127.0.0.1:50384", &in_force(None, None, None)),
            " new TCP connection from 127.0.0.1:50384. pkt_size(32KB)\n"
        );
        let mut r = side(10_737_418_240, 2.83, 1);
        r.role = Role::Server;
        r.total.bytes_received = r.total.bytes_sent;
        let body = server_body(&s, &r);
        assert!(body.starts_with("received : 10240MB(10.00GB 10737418240B) in 2.83s. (bw: 3.53GB/s 30.4Gbit/s)\nlatency  : avg="));
    }

    #[test]
    fn multi_stream_reports_list_each_stream() {
        let s = Settings {
            nstreams: 2,
            workload: Workload::RoundTrip(Reply::Ack),
            ..Settings::default()
        };
        let body = client_body(&s, &side(1 << 30, 1.0, 2));
        assert!(body.contains("\nmprtt     : avg="));
        assert!(body.contains("received  : "));
        assert!(body.contains("Per Stream:\n  stream 0 : avg="));
        assert!(body.contains("  stream 1 : avg="));
    }

    #[test]
    fn a_bidir_report_gives_each_direction_over_its_own_time() {
        let bidir = Settings {
            workload: Workload::Bidir,
            nstreams: 4,
            ..Settings::default()
        };
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let stats = |sent: u64, received: u64| StreamStats {
            bytes_sent: sent,
            bytes_received: received,
            ..StreamStats::default()
        };
        // The client sends on streams 0 and 1 (done at 1 s) and receives on 2 and 3
        // (done at 2 s); each direction's time is its own streams' span.
        let mut totals = SideTotals::new(bidir.first_server_stream());
        totals.add(
            0,
            &stats(1 << 30, 0),
            &Default::default(),
            Some((at(0), at(900))),
        );
        totals.add(
            1,
            &stats(1 << 30, 0),
            &Default::default(),
            Some((at(10), at(1000))),
        );
        totals.add(
            2,
            &stats(0, 1 << 29),
            &Default::default(),
            Some((at(0), at(2000))),
        );
        totals.add(
            3,
            &stats(0, 1 << 29),
            &Default::default(),
            Some((at(5), at(1500))),
        );
        assert_eq!(totals.span(), Some((at(0), at(2000))));
        let (total, reverse_total) = totals.figures(&Percentiles::default());
        assert_eq!(
            (total.bytes_sent, total.duration_ns),
            (2 << 30, 1_000_000_000)
        );
        let back = reverse_total.expect("the server's data");
        assert_eq!(
            (back.bytes_received, back.duration_ns),
            (1 << 30, 2_000_000_000)
        );
        let mut r = side(0, 1.0, 4);
        r.total = total;
        r.reverse_total = Some(back);
        let body = client_body(&bidir, &r);
        assert!(
            body.contains(
                "\nsent      : 2048MB(2.00GB 2147483648B) in 1.00s. (bw: 2.00GB/s 17.2Gbit/s)\n"
            ),
            "{body}"
        );
        assert!(
            body.contains(
                "\nreceived  : 1024MB(1.00GB 1073741824B) in 2.00s. (bw: 512MB/s 4.29Gbit/s)\n"
            ),
            "{body}"
        );
        // Each direction lists its own two streams.
        let sent_block = body.find("sent      :").unwrap_or_default();
        let received_block = body.find("received  :").unwrap_or_default();
        assert!(sent_block < received_block, "{body}");
        assert!(
            body[sent_block..received_block].contains("  stream 1 : "),
            "{body}"
        );
        assert!(
            !body[sent_block..received_block].contains("  stream 2 : "),
            "{body}"
        );
        assert!(body[received_block..].contains("  stream 3 : "), "{body}");
        // The server lists which way each stream ran.
        r.role = Role::Server;
        let server = server_body(&bidir, &r);
        assert!(
            server.contains("TCP STREAM 1 127.0.0.1:1 <= 127.0.0.1:28444\n"),
            "{server}"
        );
        assert!(
            server.contains("TCP STREAM 2 127.0.0.1:1 => 127.0.0.1:28444\n"),
            "{server}"
        );
    }

    #[test]
    fn only_the_client_of_a_round_trip_run_reports_transactions() {
        let rr = Settings {
            workload: Workload::RoundTrip(Reply::Ack),
            ..Settings::default()
        };
        // Three round trips timed over half a second.
        let r = side(3, 0.5, 1);
        assert_eq!(
            r.total.transactions_per_second(&rr, Role::Client),
            Some(6.0)
        );
        assert_eq!(r.total.transactions_per_second(&rr, Role::Server), None);
        let bulk = Settings::default();
        assert_eq!(r.total.transactions_per_second(&bulk, Role::Client), None);
        assert!(client_body(&rr, &r).contains("\ntps       : 6/s (3 transactions in 0.50s)\n"));
        assert!(!client_body(&bulk, &r).contains("tps"));
        let mut instant = r.total.clone();
        instant.duration_ns = 0;
        assert_eq!(
            instant.transactions_per_second(&rr, Role::Client),
            Some(0.0)
        );
    }
}
