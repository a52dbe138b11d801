//! `--json=iperf3`: the run as one JSON document in the layout of `iperf3 -J`, so that
//! what reads iperf3's JSON reads fperf's (docs/json.md has the mapping). Keys, units
//! and `sender` flags are iperf3's, seen from the client: `start`, `intervals` (each
//! with `streams` and `sum`) and `end`. fperf's own document goes under the one extra
//! key `fperf`.
//!
//! Where iperf3 takes a figure from a socket (`snd_cwnd`, `rtt`, `pmtu`...), fperf
//! takes it from the same `TCP_INFO` field of the end that sends. A figure that end
//! could not read (an iperf3 server does not send them) is 0, as iperf3 writes it.

use super::{RunEnd, RunStart, Sink};
use crate::client::StreamInfo;
use crate::output::json_document::{DocLabels, RunDoc};
use crate::results::{Figures, IntervalResult, SideResult, StreamResult};
use crate::settings::Settings;
use crate::stats::datagrams::DatagramCounts;
use crate::transport::figures::TransportFigures;
use crate::transport::settings::{Protocol, TransportSettings};
use crate::transport::Role;
use anyhow::{bail, Result};
use serde_json::{json, Map, Value};
use std::io::Write;
use std::net::SocketAddr;

/// The iperf3-layout document, written to `out` when the run ends.
pub struct Iperf3Json<W: Write> {
    out: W,
    /// The server as given on the command line, and its port.
    host: String,
    port: u16,
    streams: Vec<StreamInfo>,
    /// `title` and `extra_data`, top-level keys as in iperf3's document.
    labels: DocLabels,
}

impl<W: Write> Iperf3Json<W> {
    pub fn new(out: W, host: String, port: u16, labels: DocLabels) -> Iperf3Json<W> {
        Iperf3Json {
            out,
            host,
            port,
            streams: Vec::new(),
            labels,
        }
    }
}

/// Whether iperf3's layout can describe a run of `settings`: bulk data over TCP or UDP,
/// one way or both. Else the reason it cannot.
pub fn check(settings: &Settings) -> Result<()> {
    if !matches!(settings.protocol(), Protocol::Tcp | Protocol::Udp) {
        bail!(
            "--json=iperf3 describes TCP and UDP runs only, as iperf3 has no {}",
            settings.protocol().name()
        );
    }
    if settings.workload.mprtt() || settings.workload == crate::workload::Workload::Crr {
        bail!("--json=iperf3 describes bulk runs only (iperf3 has no -r, --echo or --crr)");
    }
    Ok(())
}

impl<W: Write> Sink for Iperf3Json<W> {
    fn start(&mut self, run: &RunStart) -> Result<()> {
        self.streams = run.streams.to_vec();
        Ok(())
    }

    fn end(&mut self, run: &RunEnd) -> Result<()> {
        let view = View {
            settings: run.settings,
            client: &run.outcome.client,
            server: &run.outcome.server,
        };
        let mut doc = Map::new();
        doc.insert("start".into(), self.start_section(run, &view));
        doc.insert(
            "intervals".into(),
            run.outcome
                .client
                .intervals
                .iter()
                .map(|i| view.interval(i))
                .collect(),
        );
        doc.insert("end".into(), view.end_section());
        if let Value::Object(labels) = serde_json::to_value(&self.labels)? {
            doc.extend(labels);
        }
        let fperf = RunDoc::new(run.settings, run.start.clone(), run.outcome);
        doc.insert("fperf".into(), serde_json::to_value(fperf)?);
        serde_json::to_writer_pretty(&mut self.out, &Value::Object(doc))?;
        writeln!(self.out)?;
        Ok(self.out.flush()?)
    }
}

impl<W: Write> Iperf3Json<W> {
    fn start_section(&self, run: &RunEnd, view: &View) -> Value {
        let settings = run.settings;
        let connected: Vec<Value> = self
            .streams
            .iter()
            .map(|s| {
                let (local_host, local_port) = host_port(&s.local);
                let (remote_host, remote_port) = host_port(&s.peer);
                json!({
                    "socket": s.index,
                    "local_host": local_host,
                    "local_port": local_port,
                    "remote_host": remote_host,
                    "remote_port": remote_port,
                })
            })
            .collect();
        let secs = run.start.unix_ns / 1_000_000_000;
        let buffers = self.streams.first().and_then(|s| s.buffers);
        let per_direction = settings.first_server_stream().unwrap_or(settings.nstreams);
        let fq_rate = settings.tcp().and_then(|t| t.fq_rate).unwrap_or(0);
        let mut start = json!({
            "connected": connected,
            "version": format!("fperf {}", crate::VERSION),
            "system_info": system_info(view.client),
            "timestamp": {
                "time": crate::output::json_document::http_date(secs),
                "timesecs": secs,
            },
            "connecting_to": {"host": self.host, "port": self.port},
            "cookie": run.outcome.test_id,
            "target_bitrate": settings.rate_bps.unwrap_or(0),
            "sock_bufsize": socket_window(settings).unwrap_or(0),
            "sndbuf_actual": buffers.map_or(0, |b| b.send),
            "rcvbuf_actual": buffers.map_or(0, |b| b.receive),
            "fq_rate": fq_rate,
            "test_start": {
                "protocol": settings.protocol().name(),
                "num_streams": per_direction,
                "blksize": settings.pktsize,
                "omit": settings.omit_ms.unwrap_or(0) / 1000,
                "duration": settings.time_ms.unwrap_or(0) / 1000,
                "bytes": settings
                    .byte_limit()
                    .map_or(0, |b| b.saturating_mul(u64::from(settings.nstreams))),
                "blocks": 0,
                "reverse": u8::from(settings.workload == crate::workload::Workload::Reverse),
                "bidir": u8::from(settings.first_server_stream().is_some()),
                "tos": settings.transport.sockets().and_then(|s| s.tos).unwrap_or(0),
                "target_bitrate": settings.rate_bps.unwrap_or(0),
                "fqrate": fq_rate,
                "interval": settings.interval_ms.unwrap_or(0) as f64 / 1000.0,
            },
        });
        if view.tcp() {
            // iperf3 reads its control connection's MSS; the data connections' is the
            // one that shapes the test.
            let mss = view
                .client
                .streams
                .first()
                .and_then(|s| s.figures.transport.figure("mss"));
            start["tcp_mss_default"] = json!(mss.unwrap_or(0));
        }
        start
    }
}

/// Both ends' results, read as iperf3 reads its own.
struct View<'a> {
    settings: &'a Settings,
    client: &'a SideResult,
    server: &'a SideResult,
}

impl View<'_> {
    fn tcp(&self) -> bool {
        self.settings.protocol() == Protocol::Tcp
    }

    /// Whether the client sends on stream `index`.
    fn client_sends(&self, index: u32) -> bool {
        Role::Client.sends_on(self.settings, index)
    }

    /// The end that sends on stream `index`, and the end that receives.
    fn ends(&self, index: u32) -> (&SideResult, &SideResult) {
        if self.client_sends(index) {
            (self.client, self.server)
        } else {
            (self.server, self.client)
        }
    }

    /// One interval as the client saw it: a line per stream and their sums, one per
    /// direction (`sum`, and with `--bidir` `sum_bidir_reverse` for the server's data).
    fn interval(&self, r: &IntervalResult) -> Value {
        let mut streams = Vec::new();
        let mut sums = [Sum::default(), Sum::default()];
        for s in &r.streams {
            let sender = self.client_sends(s.index);
            let mut line = socket_first(
                s.index,
                period(s.start_ns, s.end_ns, bytes_moved(&s.figures, sender)),
            );
            let sum = &mut sums[usize::from(!sender && self.bidir())];
            sum.add(&s.figures, sender);
            line.insert("omitted".into(), json!(r.omitted));
            if sender && self.tcp() {
                for (name, key) in SENDER_FIGURES {
                    if let Some(value) = s.figures.transport.figure(key) {
                        line.insert(name.into(), json!(value));
                    }
                }
            }
            if !self.tcp() {
                let counts = s.figures.transport.datagrams().unwrap_or_default();
                datagram_fields(&mut line, &counts, sender);
            }
            line.insert("sender".into(), json!(sender));
            streams.push(Value::Object(line));
        }
        let mut interval = Map::new();
        interval.insert("streams".into(), Value::Array(streams));
        let [forward, reverse] = sums;
        let forward_sender = !self.reverse();
        interval.insert(
            "sum".into(),
            forward.interval(r, forward_sender, self.tcp()),
        );
        if self.bidir() {
            interval.insert(
                "sum_bidir_reverse".into(),
                reverse.interval(r, false, self.tcp()),
            );
        }
        Value::Object(interval)
    }

    fn reverse(&self) -> bool {
        self.settings.workload == crate::workload::Workload::Reverse
    }

    fn bidir(&self) -> bool {
        self.settings.first_server_stream().is_some()
    }

    fn end_section(&self) -> Value {
        let mut end = Map::new();
        let indexes: Vec<u32> = (0..self.settings.nstreams).collect();
        let (forward, reverse): (Vec<u32>, Vec<u32>) = indexes
            .iter()
            .partition(|&&i| !self.bidir() || self.client_sends(i));
        if self.tcp() {
            let streams: Vec<Value> = indexes.iter().map(|&i| self.tcp_stream_end(i)).collect();
            end.insert("streams".into(), Value::Array(streams));
            let sender = !self.reverse();
            end.insert("sum_sent".into(), self.tcp_sum(&forward, true, sender));
            end.insert("sum_received".into(), self.tcp_sum(&forward, false, sender));
            if self.bidir() {
                end.insert(
                    "sum_sent_bidir_reverse".into(),
                    self.tcp_sum(&reverse, true, false),
                );
                end.insert(
                    "sum_received_bidir_reverse".into(),
                    self.tcp_sum(&reverse, false, false),
                );
            }
        } else {
            let streams: Vec<Value> = indexes
                .iter()
                .map(|&i| json!({"udp": self.udp_stream_end(i)}))
                .collect();
            end.insert("streams".into(), Value::Array(streams));
            let sender = !self.reverse();
            // iperf3 flags UDP's sums by what they count, whoever sent.
            end.insert("sum".into(), self.udp_sum(&forward, true, sender));
            end.insert("sum_sent".into(), self.udp_sum(&forward, true, true));
            end.insert("sum_received".into(), self.udp_sum(&forward, false, false));
            if self.bidir() {
                end.insert(
                    "sum_bidir_reverse".into(),
                    self.udp_sum(&reverse, true, false),
                );
                end.insert(
                    "sum_sent_bidir_reverse".into(),
                    self.udp_sum(&reverse, true, true),
                );
                end.insert(
                    "sum_received_bidir_reverse".into(),
                    self.udp_sum(&reverse, false, false),
                );
            }
        }
        end.insert("cpu_utilization_percent".into(), self.cpu());
        if self.tcp() {
            let congestion = |side: &SideResult| {
                side.streams
                    .iter()
                    .find_map(|s| s.in_force.text("congestion"))
                    .map(Value::String)
            };
            let (sender, receiver) = if self.reverse() {
                (self.server, self.client)
            } else {
                (self.client, self.server)
            };
            if let Some(c) = congestion(sender) {
                end.insert("sender_tcp_congestion".into(), c);
            }
            if let Some(c) = congestion(receiver) {
                end.insert("receiver_tcp_congestion".into(), c);
            }
        }
        Value::Object(end)
    }

    fn stream(side: &SideResult, index: u32) -> Option<&StreamResult> {
        side.streams.iter().find(|s| s.index == index)
    }

    /// A TCP stream's `sender` and `receiver` entries.
    fn tcp_stream_end(&self, index: u32) -> Value {
        let (sending, receiving) = self.ends(index);
        let client_sends = self.client_sends(index);
        let sent = Self::stream(sending, index).map(|s| &s.figures);
        let received = Self::stream(receiving, index).map(|s| &s.figures);
        let mut sender = socket_first(index, whole_run(sent, true));
        let last = sent.map(|f| &f.transport);
        let rtt = RttSpan::over(sending, index, last);
        let retransmits = last.and_then(|t| t.figure("retransmits"));
        sender.insert("retransmits".into(), json!(retransmits.unwrap_or(0)));
        sender.insert("max_snd_cwnd".into(), json!(rtt.max_cwnd));
        sender.insert("max_snd_wnd".into(), json!(rtt.max_wnd));
        sender.insert("max_rtt".into(), json!(rtt.max));
        sender.insert("min_rtt".into(), json!(rtt.min));
        sender.insert("mean_rtt".into(), json!(rtt.mean));
        sender.insert("sender".into(), json!(client_sends));
        let mut receiver = socket_first(index, whole_run(received, false));
        receiver.insert("sender".into(), json!(client_sends));
        json!({"sender": sender, "receiver": receiver})
    }

    /// `streams` summed as their senders counted them, and as their receivers did.
    fn sums(&self, streams: &[u32]) -> (Sum, Sum) {
        let (mut sent, mut received) = (Sum::default(), Sum::default());
        for &i in streams {
            let (sending, receiving) = self.ends(i);
            if let Some(s) = Self::stream(sending, i) {
                sent.add(&s.figures, true);
            }
            if let Some(s) = Self::stream(receiving, i) {
                received.add(&s.figures, false);
            }
        }
        (sent, received)
    }

    /// Sums over `streams` as their senders (`as_sent`) or receivers counted them.
    fn tcp_sum(&self, streams: &[u32], as_sent: bool, sender_flag: bool) -> Value {
        let (sent, received) = self.sums(streams);
        let mut line = if as_sent {
            sent.period()
        } else {
            received.period()
        };
        if as_sent {
            line.insert("retransmits".into(), json!(sent.retransmits));
        }
        line.insert("sender".into(), json!(sender_flag));
        Value::Object(line)
    }

    /// A UDP stream's entry: bytes and packets as sent, loss and jitter as received.
    fn udp_stream_end(&self, index: u32) -> Value {
        let (sending, receiving) = self.ends(index);
        let sent = Self::stream(sending, index).map(|s| &s.figures);
        let received = Self::stream(receiving, index).and_then(|s| s.figures.transport.datagrams());
        let mut line = socket_first(index, whole_run(sent, true));
        let sent_packets = sent
            .and_then(|f| f.transport.datagrams())
            .map_or(0, |d| d.sent);
        udp_end_fields(&mut line, received.as_ref(), sent_packets);
        line.insert("sender".into(), json!(self.client_sends(index)));
        Value::Object(line)
    }

    /// UDP sums over `streams`: bytes as sent or as received, with the receivers' loss
    /// and jitter.
    fn udp_sum(&self, streams: &[u32], as_sent: bool, sender_flag: bool) -> Value {
        let (sent, received) = self.sums(streams);
        let mut line = if as_sent {
            sent.period()
        } else {
            received.period()
        };
        udp_end_fields(&mut line, Some(&received.received), sent.sent_packets);
        line.remove("out_of_order");
        line.insert("sender".into(), json!(sender_flag));
        Value::Object(line)
    }

    /// CPU time over the run's wall time, per end, in percent.
    fn cpu(&self) -> Value {
        let percent = |side: &SideResult| {
            let secs = side
                .total
                .secs()
                .max(side.reverse_total.as_ref().map_or(0.0, |f| f.secs()));
            match side.cpu.filter(|_| secs > 0.0) {
                Some(c) => {
                    let user = c.user_secs() / secs * 100.0;
                    let system = c.system_secs() / secs * 100.0;
                    (user + system, user, system)
                }
                None => (0.0, 0.0, 0.0),
            }
        };
        let (host_total, host_user, host_system) = percent(self.client);
        let (remote_total, remote_user, remote_system) = percent(self.server);
        json!({
            "host_total": host_total,
            "host_user": host_user,
            "host_system": host_system,
            "remote_total": remote_total,
            "remote_user": remote_user,
            "remote_system": remote_system,
        })
    }
}

/// The bytes of `figures` that moved the stream's way: sent by its sender, received by
/// its receiver.
fn bytes_moved(figures: &Figures, sender: bool) -> u64 {
    if sender {
        figures.bytes_sent
    } else {
        figures.bytes_received
    }
}

/// `fields` after a `socket` key, as iperf3 writes a stream's (fperf's stream number
/// stands for iperf3's socket number).
fn socket_first(index: u32, fields: Map<String, Value>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("socket".into(), json!(index));
    m.extend(fields);
    m
}

/// `start`, `end`, `seconds`, `bytes` and `bits_per_second` of a span of the run.
fn period(start_ns: u64, end_ns: u64, bytes: u64) -> Map<String, Value> {
    let seconds = end_ns.saturating_sub(start_ns) as f64 / 1e9;
    let mut m = Map::new();
    m.insert("start".into(), json!(start_ns as f64 / 1e9));
    m.insert("end".into(), json!(end_ns as f64 / 1e9));
    m.insert("seconds".into(), json!(seconds));
    m.insert("bytes".into(), json!(bytes));
    m.insert(
        "bits_per_second".into(),
        json!(bits_per_second(bytes, seconds)),
    );
    m
}

fn bits_per_second(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

/// The whole run of one stream at one end (zeros where that end sent no figures).
fn whole_run(figures: Option<&Figures>, sent: bool) -> Map<String, Value> {
    match figures {
        Some(f) => period(0, f.duration_ns, bytes_moved(f, sent)),
        None => period(0, 0, 0),
    }
}

/// A UDP interval line's datagram fields: packets sent, or as received with the loss.
fn datagram_fields(line: &mut Map<String, Value>, d: &DatagramCounts, sender: bool) {
    if sender {
        line.insert("packets".into(), json!(d.sent));
        return;
    }
    let unique = d.received.saturating_sub(d.duplicates);
    let packets = unique + d.lost;
    line.insert("jitter_ms".into(), json!(d.jitter_ns.unwrap_or(0.0) / 1e6));
    line.insert("lost_packets".into(), json!(d.lost));
    line.insert("packets".into(), json!(packets));
    line.insert("lost_percent".into(), json!(percent(d.lost, packets)));
}

/// A UDP end entry's fields: the receiver's jitter and loss, `sent_packets` as sent.
fn udp_end_fields(line: &mut Map<String, Value>, received: Option<&DatagramCounts>, sent: u64) {
    let r = received.copied().unwrap_or_default();
    line.insert("jitter_ms".into(), json!(r.jitter_ns.unwrap_or(0.0) / 1e6));
    line.insert("lost_packets".into(), json!(r.lost));
    line.insert("packets".into(), json!(sent));
    line.insert("lost_percent".into(), json!(percent(r.lost, sent)));
    line.insert("out_of_order".into(), json!(r.out_of_order));
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// iperf3's names for a sending TCP stream's figures in an interval, and the keys the
/// transport gives them.
const SENDER_FIGURES: [(&str, &str); 6] = [
    ("retransmits", "retransmits"),
    ("snd_cwnd", "cwnd_bytes"),
    ("snd_wnd", "snd_wnd_bytes"),
    ("rtt", "srtt_us"),
    ("rttvar", "rttvar_us"),
    ("pmtu", "pmtu"),
];

/// Streams' figures added up for a sum line.
#[derive(Default)]
struct Sum {
    bytes: u64,
    /// The longest of the streams' times.
    duration_ns: u64,
    retransmits: u64,
    received: DatagramCounts,
    sent_packets: u64,
}

impl Sum {
    fn add(&mut self, f: &Figures, sent: bool) {
        self.bytes += bytes_moved(f, sent);
        self.duration_ns = self.duration_ns.max(f.duration_ns);
        self.retransmits += f.transport.figure("retransmits").unwrap_or(0);
        if let Some(d) = f.transport.datagrams() {
            if sent {
                self.sent_packets += d.sent;
            } else {
                self.received.merge(&d);
            }
        }
    }

    /// The sum over the whole run.
    fn period(&self) -> Map<String, Value> {
        period(0, self.duration_ns, self.bytes)
    }

    /// The sum line of interval `r`, over streams the client sends on (`sender`) or
    /// receives on.
    fn interval(&self, r: &IntervalResult, sender: bool, tcp: bool) -> Value {
        let mut line = period(r.start_ns, r.end_ns, self.bytes);
        match (tcp, sender) {
            (true, true) => {
                line.insert("retransmits".into(), json!(self.retransmits));
            }
            (true, false) => {}
            (false, true) => {
                line.insert("packets".into(), json!(self.sent_packets));
            }
            (false, false) => datagram_fields(&mut line, &self.received, false),
        }
        line.insert("omitted".into(), json!(r.omitted));
        line.insert("sender".into(), json!(sender));
        Value::Object(line)
    }
}

/// The congestion window, send window and round-trip time of a sending stream over
/// its intervals, as iperf3 keeps them (µs and bytes); the end's own figures when the
/// run had no intervals at that end. Read from the transport's figures by their keys.
struct RttSpan {
    max_cwnd: u64,
    max_wnd: u64,
    max: u64,
    min: u64,
    mean: u64,
}

impl RttSpan {
    fn over(side: &SideResult, index: u32, last: Option<&TransportFigures>) -> RttSpan {
        let timed = |t: &&TransportFigures| t.figure("srtt_us").is_some();
        let mut samples: Vec<&TransportFigures> = side
            .intervals
            .iter()
            .flat_map(|r| r.streams.iter())
            .filter(|s| s.index == index)
            .map(|s| &s.figures.transport)
            .filter(timed)
            .collect();
        if samples.is_empty() {
            samples.extend(last.filter(timed));
        }
        let each = |key: &'static str| samples.iter().filter_map(move |t| t.figure(key));
        let count = samples.len() as u64;
        RttSpan {
            max_cwnd: each("cwnd_bytes").max().unwrap_or(0),
            max_wnd: each("snd_wnd_bytes").max().unwrap_or(0),
            max: each("srtt_us").max().unwrap_or(0),
            min: each("srtt_us").min().unwrap_or(0),
            mean: each("srtt_us").sum::<u64>().checked_div(count).unwrap_or(0),
        }
    }
}

/// The socket window asked for (`--window`), TCP or UDP.
fn socket_window(settings: &Settings) -> Option<u32> {
    match &settings.transport {
        TransportSettings::Tcp(t) => t.sockets.window,
        TransportSettings::Udp(u) => u.sockets.window,
        TransportSettings::Rdma(_) => None,
    }
}

/// `uname -a`'s first fields, as iperf3's `system_info` has them.
fn system_info(side: &SideResult) -> String {
    let Some(facts) = &side.system else {
        return String::new();
    };
    let kernel = facts.kernel.as_deref().unwrap_or("");
    let (system, release) = kernel.split_once(' ').unwrap_or((kernel, ""));
    [
        system,
        facts.hostname.as_deref().unwrap_or(""),
        release,
        &facts.arch,
    ]
    .iter()
    .filter(|s| !s.is_empty())
    .copied()
    .collect::<Vec<_>>()
    .join(" ")
}

/// An address as reports write it (`1.2.3.4:5`, `[::1]:5`), split for iperf3's keys.
fn host_port(addr: &str) -> (String, u16) {
    match addr.parse::<SocketAddr>() {
        Ok(a) => (a.ip().to_string(), a.port()),
        Err(_) => (addr.to_owned(), 0),
    }
}
