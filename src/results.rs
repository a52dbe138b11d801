//! Typed results of a run: what each end measured, as a whole and per interval.
//!
//! Both ends turn their merged [`StreamStats`] into a [`SideResult`]; the server's
//! travels to the client over the control stream, in its wire form
//! ([`crate::control::wire::SideResult`]). Renderers (the human report, JSON,
//! CSV, plots) read these types and never change them; exact integers (bytes,
//! nanoseconds) are kept next to derived rates.

use crate::percentiles::Percentiles;
use crate::settings::Settings;
use crate::stats::{LatencyStats, LatencySummary, StreamStats};
use crate::sysinfo::{CpuUsage, SystemFacts};
use crate::transport::figures::{TransportFigures, TransportInForce};
use crate::transport::Role;
use serde::Serialize;
use std::time::{Duration, Instant};

/// What the run's settings make of each end.
impl Role {
    /// Whether this end sends the test's data: the client, unless `--reverse` (with
    /// `--bidir`, what stream 0 carries: the client's).
    pub fn sends(self, settings: &Settings) -> bool {
        self.sends_on(settings, 0)
    }

    /// What this end's data did, for messages: `sent`, `received`, or when both ends
    /// send (`--bidir`), `moved`.
    pub fn moved(self, settings: &Settings) -> &'static str {
        match (settings.first_server_stream(), self.sends(settings)) {
            (Some(_), _) => "moved",
            (None, true) => "sent",
            (None, false) => "received",
        }
    }

    /// Whether this end sends on stream `stream`, as the workload has it.
    pub fn sends_on(self, settings: &Settings, stream: u32) -> bool {
        (self == Role::Client) != settings.server_sends_on(stream)
    }
}

/// The figures of one stream, or of all streams together.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figures {
    /// Payload bytes this end sent (ACK bytes on a receiving end with MPRTT).
    pub bytes_sent: u64,
    /// Payload bytes this end received (ACK bytes on a sending end with MPRTT).
    pub bytes_received: u64,
    /// The time the figures cover, in nanoseconds.
    pub duration_ns: u64,
    /// Latency of each send (write, or with MPRTT the round trip).
    pub send_latency: Option<LatencySummary>,
    /// Latency of each receive.
    pub recv_latency: Option<LatencySummary>,
    /// Latency of each `send_submit()`.
    pub submit_latency: Option<LatencySummary>,
    /// MPRTT retransmissions.
    pub retries: u64,
    /// The transport's own figures: what its sockets said, or what its STREAM counted.
    #[serde(flatten)]
    pub transport: TransportFigures,
    /// A sender whose time ends at its last send (UDP, see
    /// [`crate::transport::stream::Stream::sent_on_handover`]): how long the peer then took to
    /// confirm it had everything (waiting out datagrams lost on the way), in ns; not
    /// part of `duration_ns`. The longest of merged streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_ns: Option<u64>,
}

/// `d` in whole nanoseconds (saturating: 584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Figures {
    /// Summarizes `stats` over `duration`, its latencies at `percentiles`.
    pub fn new(stats: &StreamStats, duration: Duration, percentiles: &Percentiles) -> Figures {
        Figures {
            bytes_sent: stats.bytes_sent,
            bytes_received: stats.bytes_received,
            duration_ns: nanos(duration),
            send_latency: stats.send_latency.summary(percentiles),
            recv_latency: stats.recv_latency.summary(percentiles),
            submit_latency: stats.submit_latency.summary(percentiles),
            retries: stats.retries,
            transport: TransportFigures::counted(stats, percentiles),
            drain_ns: None,
        }
    }

    /// What makes these figures, as a peer sent them, impossible in a run with
    /// `settings`, if anything: more bytes than the run can move, or more datagrams
    /// lost, duplicated or reordered than there were.
    pub fn impossible(&self, settings: &Settings) -> Option<String> {
        let most = settings.most_bytes();
        let bytes = self.bytes_sent.max(self.bytes_received);
        if bytes > most {
            return Some(format!(
                "{bytes} bytes in a run that can move at most {most}"
            ));
        }
        if let Some(why) = self.transport.impossible() {
            return Some(why);
        }
        let latencies = [&self.send_latency, &self.recv_latency, &self.submit_latency];
        latencies
            .into_iter()
            .flatten()
            .find_map(LatencySummary::impossible)
    }

    /// Duration in seconds.
    pub fn secs(&self) -> f64 {
        self.duration_ns as f64 / 1e9
    }

    /// Request/response transactions per second, as netperf's and neper's `*_RR`
    /// report them: on the client of an `-r` run, round trips completed (each one
    /// timed as mprtt, so the count is the latency's) over the figures' time; 0 over
    /// zero time. `None` anywhere else: a server's receive count would include UDP's
    /// retransmitted requests.
    pub fn transactions_per_second(&self, settings: &Settings, role: Role) -> Option<f64> {
        if !settings.workload.mprtt() || role != Role::Client {
            return None;
        }
        let count = self.send_latency.map_or(0, |l| l.count);
        Some(if self.duration_ns == 0 {
            0.0
        } else {
            count as f64 / self.secs()
        })
    }
}

/// One stream as an end saw it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamResult {
    /// Stream index: the stream uses port `base + index`.
    pub index: u32,
    /// The addresses, as that end wrote them (a peer's made printable as read).
    pub local: String,
    pub peer: String,
    /// What this end's sockets ended up with, as the kernel reported it.
    #[serde(flatten)]
    pub in_force: TransportInForce,
    pub figures: Figures,
}

/// Everything one end measured in a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SideResult {
    pub role: Role,
    /// All streams together; with `--bidir` the streams that carry the client's data.
    pub total: Figures,
    /// With `--bidir`, the streams that carry the server's data together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverse_total: Option<Figures>,
    pub streams: Vec<StreamResult>,
    /// This end's machine.
    pub system: Option<SystemFacts>,
    /// CPU time this end's process spent during the run.
    pub cpu: Option<CpuUsage>,
    /// Figures of each reporting interval (`-i`), in order.
    pub intervals: Vec<IntervalResult>,
}

/// An end's totals, merged stream by stream: one over all streams or, with `--bidir`,
/// one per direction, each over its own span (the earliest start to the latest end).
pub struct SideTotals {
    /// With `--bidir`, the first stream the server sends on.
    first_server_stream: Option<u32>,
    /// The client's data streams (all streams but `--bidir`'s second half), then the
    /// server's.
    parts: [TotalPart; 2],
}

#[derive(Default)]
struct TotalPart {
    stats: StreamStats,
    transport: TransportFigures,
    span: Option<(Instant, Instant)>,
    drain: Option<Duration>,
}

impl SideTotals {
    /// Totals split at `first_server_stream` ([`Settings::first_server_stream`]).
    pub fn new(first_server_stream: Option<u32>) -> SideTotals {
        SideTotals {
            first_server_stream,
            parts: Default::default(),
        }
    }

    /// Adds stream `stream`'s figures, counted over `span`: what its STREAM counted
    /// (`stats`, UDP's datagrams among them) and what its sockets said (`transport`).
    pub fn add(
        &mut self,
        stream: u32,
        stats: &StreamStats,
        transport: &TransportFigures,
        span: Option<(Instant, Instant)>,
    ) {
        let part = &mut self.parts[usize::from(self.server_data(stream))];
        part.stats.merge(stats);
        // What the STREAM counted is in `stats` already.
        part.transport.merge(&transport.sockets());
        if let Some((from, to)) = span {
            part.span = Some(
                part.span
                    .map_or((from, to), |(a, b)| (a.min(from), b.max(to))),
            );
        }
    }

    /// Stream `stream`'s wait for its peer's confirmation after its last send (see
    /// [`Figures::drain_ns`]); the part's is the longest.
    pub fn add_drain(&mut self, stream: u32, drain: Duration) {
        let part = &mut self.parts[usize::from(self.server_data(stream))];
        part.drain = Some(part.drain.map_or(drain, |d| d.max(drain)));
    }

    fn server_data(&self, stream: u32) -> bool {
        self.first_server_stream
            .is_some_and(|first| stream >= first)
    }

    /// Send latency over the client's data streams, every sample (for `--plot`).
    pub fn client_data_send_latency(&self) -> &LatencyStats {
        &self.parts[0].stats.send_latency
    }

    /// The earliest start and latest end of every stream added.
    pub fn span(&self) -> Option<(Instant, Instant)> {
        let [a, b] = &self.parts;
        match (a.span, b.span) {
            (Some((s1, e1)), Some((s2, e2))) => Some((s1.min(s2), e1.max(e2))),
            (one, other) => one.or(other),
        }
    }

    /// `total` and, with `--bidir`, `reverse_total`, their latencies at `percentiles`.
    pub fn figures(&self, percentiles: &Percentiles) -> (Figures, Option<Figures>) {
        let figures = |p: &TotalPart| {
            let time = p
                .span
                .map_or(Duration::ZERO, |(a, b)| b.saturating_duration_since(a));
            let mut figures = Figures::new(&p.stats, time, percentiles);
            figures.transport.merge(&p.transport);
            figures.drain_ns = p.drain.map(nanos);
            figures
        };
        let [client_data, server_data] = &self.parts;
        let reverse = self.first_server_stream.map(|_| figures(server_data));
        (figures(client_data), reverse)
    }
}

/// One stream's figures in an interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamInterval {
    /// Stream index.
    pub index: u32,
    /// Since the side's start, in ns.
    pub start_ns: u64,
    pub end_ns: u64,
    pub figures: Figures,
}

/// One side's figures for one interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IntervalResult {
    /// Interval number, from 0.
    pub index: u32,
    /// Since the side's start, in ns: the earliest start and latest end of its streams.
    pub start_ns: u64,
    pub end_ns: u64,
    /// The interval began inside the warm-up, so the totals leave it out.
    pub omitted: bool,
    /// All streams together; with `--bidir` the streams that carry the client's data.
    pub total: Figures,
    /// With `--bidir`, the streams that carry the server's data together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverse_total: Option<Figures>,
    pub streams: Vec<StreamInterval>,
    /// CPU time the process used from the side's start to the end of this interval.
    pub cpu: Option<CpuUsage>,
}
