//! The settings of one run: chosen by the client, sent to the server over the control
//! stream, and validated on both ends by the same code. They are the fields every
//! transport shares plus one value of the transport's own ([`TransportSettings`]), which
//! holds that transport's options, their checks and its tuning.
//!
//! Invariant: a [`Settings`] value that passed [`Settings::validate`] is safe to act on;
//! nothing past validation re-checks a field.

pub mod options;

use crate::options::Feature;
use crate::percentiles::{Percentiles, PercentilesError};
use crate::stream::sender::QueueKind;
use crate::stream::{DEFAULT_PKTSIZE, MAX_PKTSIZE};
use crate::transport::rdma::settings::RdmaSettingsError;
use crate::transport::rdma::RdmaTransport;
use crate::transport::settings::{Protocol, TransportSettings};
use crate::transport::shape::{RunShape, MAX_FOOTPRINT};
use crate::transport::stream::StreamOptions;
use crate::transport::tcp::crr::CrrTransport;
use crate::transport::tcp::settings::{TcpSettings, TcpSettingsError};
use crate::transport::tcp::TcpTransport;
use crate::transport::udp::settings::{UdpSettingsError, MAX_RETRIES};
use crate::transport::udp::UdpTransport;
use crate::transport::{StreamPlan, Transport};
use crate::workload::{Reply, Workload, WorkloadError};
use serde::Serialize;
use thiserror::Error;

/// Default base port: data stream `i` uses `DEFAULT_PORT + i`.
pub const DEFAULT_PORT: u16 = 28444;
/// Default bytes per request of `-r`, `--echo` and `--crr`: 1, as qperf's `tcp_lat`,
/// netperf's `TCP_RR` and neper's `tcp_rr` send (docs/tuning.md).
pub const DEFAULT_REQUEST_SIZE: u32 = 1;
/// Default UDP datagram over IPv4: a 1500-byte Ethernet MTU less the IPv4 (20) and UDP
/// (8) headers, so that no datagram is sent in fragments.
pub const UDP_DATAGRAM_IPV4: u32 = 1472;
/// Default UDP datagram over IPv6: the MTU less the IPv6 (40) and UDP (8) headers.
pub const UDP_DATAGRAM_IPV6: u32 = 1452;
/// MB (2^20 B) per stream that a run bounded by volume sends when `-m` is not given
/// (a sweep of `mb` sets it for each run).
pub const DEFAULT_MB: u64 = 10240;
/// How long a run lasts when neither `-m`, `--time` nor `--transactions` bounds it.
pub const DEFAULT_TIME_MS: u64 = 10_000;
/// A sweep without a bound shares [`DEFAULT_TIME_MS`] out among its runs, each at least
/// this long (shorter runs would measure their start more than their rate)...
pub const SWEEP_RUN_MIN_MS: u64 = 200;
/// ...and at most this long.
pub const SWEEP_RUN_MAX_MS: u64 = 2_000;
/// Most sockets one STREAM may hold.
pub const MAX_NSOCKETS: u32 = 100;
/// Most data streams one run may open.
pub const MAX_NSTREAMS: u32 = 256;
/// Most connections one run may multiplex over its threads (`--flows`).
pub const MAX_FLOWS: u32 = 10_000;
/// Largest run size accepted: 2^40 MB would overflow byte counters' headroom.
pub const MAX_MB: u64 = 1 << 30;
/// Bytes in one "MB" as fperf counts it.
pub const MB: u64 = 1 << 20;
/// Shortest reporting interval (`-i`), in ms.
pub const MIN_INTERVAL_MS: u64 = 10;
/// Shortest reporting interval per stream, in ms: every stream sends each end's
/// collector a sample every interval, so a run's samples come at most 500 a second
/// however many streams it has, which the collector keeps up with (docs/limits.md has
/// the memory this bounds).
pub const MIN_INTERVAL_PER_STREAM_MS: u64 = 2;
/// Longest time-bounded run, reporting interval or warm-up (`--time`, `-i`, `--omit`):
/// one week, in ms.
pub const MAX_TIME_MS: u64 = 7 * 24 * 3600 * 1000;

/// The scheduling policy of both ends' data threads (`--sched`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "sched")]
#[serde(rename_all = "lowercase")]
pub enum SchedPolicy {
    /// `SCHED_BATCH` for an unpaced bulk test unless its streams about match the CPUs;
    /// the normal policy for the others.
    #[default]
    Auto,
    /// The normal policy for every test.
    Normal,
    /// `SCHED_BATCH` for every test.
    Batch,
}

impl SchedPolicy {
    fn is_auto(&self) -> bool {
        *self == SchedPolicy::Auto
    }
}

/// The bytes per send when `-l` is not given: small requests for a request/response
/// workload (`mprtt`), as its peers send; for UDP bulk data a datagram that fits a
/// 1500-byte MTU unfragmented (over IPv6 if `ipv6`); else [`DEFAULT_PKTSIZE`].
pub fn default_pktsize(protocol: Protocol, mprtt: bool, ipv6: bool) -> u32 {
    match (protocol, mprtt, ipv6) {
        (_, true, _) => DEFAULT_REQUEST_SIZE,
        (Protocol::Udp, false, false) => UDP_DATAGRAM_IPV4,
        (Protocol::Udp, false, true) => UDP_DATAGRAM_IPV6,
        _ => DEFAULT_PKTSIZE,
    }
}

/// How long each of a sweep's `runs` runs lasts when nothing bounds them: the default
/// run's time shared out, within [`SWEEP_RUN_MIN_MS`]..=[`SWEEP_RUN_MAX_MS`].
pub fn sweep_run_ms(runs: usize) -> u64 {
    let runs = u64::try_from(runs.max(1)).unwrap_or(u64::MAX);
    (DEFAULT_TIME_MS / runs).clamp(SWEEP_RUN_MIN_MS, SWEEP_RUN_MAX_MS)
}

/// Whether `SCHED_BATCH` suits an unpaced bulk test of `streams` data threads on a
/// machine of `cpus` CPUs (`--sched auto`). It costs where the threads about match the
/// CPUs: measured on loopback (both ends' threads on one machine), 16 streams on 16
/// CPUs, 8 on 8, 4 on 4 and 2 on 2 moved 6-22% less under it, while 1, 4 and 8 streams
/// on 16 CPUs and 16 on 8 were level, and 1 on 2, 1 on 1, 2 on 1 and 4 on 2 moved up to
/// 1.6x more (docs/tuning.md). So: the normal policy where `cpus / 2 < streams <= cpus`
/// with at least 2 streams, batch otherwise.
pub fn batch_suits(streams: u32, cpus: usize) -> bool {
    let streams = streams as usize;
    let about_one_per_cpu = streams >= 2 && streams * 2 > cpus && streams <= cpus;
    !about_one_per_cpu
}

/// The CPUs this process may run on (its affinity mask and CPU quota), 1 if unknown.
fn usable_cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Everything both ends must agree on for one run.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "settings", deny_unknown_fields)]
pub struct Settings {
    /// Data streams, each driven by its own thread; stream i uses the server's port
    /// plus i.
    pub nstreams: u32,
    /// Sockets inside each stream.
    pub nsockets: u32,
    /// MB (2^20 B) to send per stream.
    pub mb: u64,
    /// Bytes per send.
    pub pktsize: u32,
    /// What the run does with its streams: bulk one way or both, or request/response.
    #[serde(flatten)]
    pub workload: Workload,
    pub queue: QueueKind,
    /// `--time`: each stream sends for this many ms instead of `mb` MB.
    #[serde(default)]
    pub time_ms: Option<u64>,
    /// `--transactions`: with a request/response workload, each stream ends after this
    /// many round trips instead of `mb` MB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub transactions: Option<u64>,
    /// `--response-size`: with `-r`, the server answers each request with this many
    /// bytes instead of the 1-byte ACK (with `--echo` it may only name the request's
    /// own size). `None`: the workload's own reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u32")]
    pub response_size: Option<u32>,
    /// `-i`: both ends report figures every this many ms while the run goes on.
    #[serde(default)]
    pub interval_ms: Option<u64>,
    /// `--omit`: the first this many ms are left out of the totals (warm-up).
    #[serde(default)]
    pub omit_ms: Option<u64>,
    /// `-b`: each stream sends no faster than this many bits/s (paced by the sender).
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// CPUs the client's data threads are pinned to (`--cpu`); stream i uses entry
    /// i mod len. Empty: not pinned.
    #[serde(default)]
    pub client_cpus: Vec<u32>,
    /// CPUs the server's data threads are pinned to (`--server-cpu`), as above.
    #[serde(default)]
    pub server_cpus: Vec<u32>,
    /// `--flows`: each of a stream's `nsockets` sockets is a flow of its own (a
    /// connection with its own requests), all driven by the stream's one thread from
    /// one epoll set, on both ends; `nstreams` is then the number of threads.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flows: bool,
    /// `--sched`: the policy both ends' data threads run under, for every test; absent
    /// with the default (`SCHED_BATCH` for an unpaced bulk test, the normal policy
    /// otherwise).
    #[serde(default, skip_serializing_if = "SchedPolicy::is_auto")]
    pub sched: SchedPolicy,
    /// `--percentiles`: the percentiles of every latency both ends report.
    #[serde(default)]
    pub percentiles: Percentiles,
    /// The protocol, and the options only it has.
    #[serde(flatten)]
    pub transport: TransportSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            nstreams: 1,
            nsockets: 1,
            mb: DEFAULT_MB,
            pktsize: DEFAULT_PKTSIZE,
            workload: Workload::Bulk,
            queue: QueueKind::Mutex,
            time_ms: None,
            transactions: None,
            response_size: None,
            interval_ms: None,
            omit_ms: None,
            rate_bps: None,
            client_cpus: Vec::new(),
            server_cpus: Vec::new(),
            flows: false,
            sched: SchedPolicy::Auto,
            percentiles: Percentiles::default(),
            transport: TransportSettings::Tcp(TcpSettings::default()),
        }
    }
}

/// Why a [`Settings`] value was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SettingsError {
    #[error("--nstreams must be between 1 and {MAX_NSTREAMS}, not {0}")]
    NStreams(u32),
    #[error("--nsockets must be between 1 and {MAX_NSOCKETS}, not {0}")]
    NSockets(u32),
    #[error("--pktsize must be between 1 and {MAX_PKTSIZE} bytes, not {0}")]
    PktSize(u32),
    #[error("--mb must be between 1 and {MAX_MB}, not {0}")]
    Mb(u64),
    #[error("the lock-free queue (-q 0) drives a single socket; --nsockets must be 1, not {0}")]
    LockFreeSockets(u32),
    #[error("--{flag} must be between {least} ms and one week, not {asked} ms")]
    Timing {
        flag: &'static str,
        least: u64,
        asked: u64,
    },
    #[error("-i must be at least {least} ms with {streams} streams (every stream reports every interval), not {asked} ms")]
    IntervalPerStream {
        asked: u64,
        least: u64,
        streams: u32,
    },
    #[error("--omit ({0} ms) must be shorter than --time ({1} ms)")]
    OmitTooLong(u64, u64),
    #[error("--bitrate must be at least 1 bit/s")]
    RateZero,
    #[error(
        "--transactions counts round trips: use it with -r, --echo or --crr, and without --time"
    )]
    TransactionsNeedRoundTrips,
    #[error("--transactions {0} × --pktsize (or --response-size, if larger) is more than one stream may send (2^50 bytes)")]
    Transactions(u64),
    #[error(
        "--nstreams × --nsockets × (--pktsize (× 2 with --echo) + 2 × --response-size) is {0} bytes; at most \
         {MAX_FOOTPRINT} bytes of packet buffers are allowed"
    )]
    Footprint(u64),
    #[error("--flows must be between --threads and {MAX_FLOWS}, not {0}")]
    Flows(u64),
    #[error("--flows multiplexes TCP connections and UDP sockets; it cannot be used with {0} in this build")]
    FlowsProtocol(&'static str),
    #[error("--flows runs bulk, -r, --echo and --crr; it cannot be used with {0}")]
    FlowsWorkload(&'static str),
    #[error(
        "--flows drives its connections from one thread each, unpaced: it cannot be used with {0}"
    )]
    FlowsConflict(&'static str),
    #[error("--response-size must be between 1 and {MAX_PKTSIZE} bytes, not {0}")]
    ResponseSize(u32),
    #[error("CPU numbers must be below {max}, not {0}", max = crate::stream::affinity::MAX_CPUS)]
    Cpu(u32),
    #[error("--cpu and --server-cpu name at most {MAX_NSTREAMS} CPUs (one per stream), not {0}")]
    CpuList(usize),
    #[error(transparent)]
    Percentiles(#[from] PercentilesError),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Tcp(#[from] TcpSettingsError),
    #[error(transparent)]
    Udp(#[from] UdpSettingsError),
    #[error(transparent)]
    Rdma(#[from] RdmaSettingsError),
}

/// The test's own features, beside its transport's (see [`crate::features`]).
pub const REVERSE: Feature = Feature::new("reverse", "--reverse");
pub const BIDIR: Feature = Feature::new("bidir", "--bidir");
pub const CRR: Feature = Feature::new("crr", "--crr");
pub const TRANSACTIONS: Feature = Feature::new("transactions", "--transactions");
pub const FLOWS: Feature = Feature::new("flows", "--flows");
pub const RESPONSE_SIZE: Feature = Feature::new("response_size", "--response-size");
pub const UDP_ECHO: Feature = Feature::new("udp_echo", "-u --echo");
pub const SCHED: Feature = Feature::new("sched", "--sched");
pub const PERCENTILES: Feature = Feature::new("percentiles", "--percentiles");
/// Every feature of the test's own.
pub const TEST_FEATURES: [Feature; 9] = [
    REVERSE,
    BIDIR,
    CRR,
    TRANSACTIONS,
    FLOWS,
    RESPONSE_SIZE,
    UDP_ECHO,
    SCHED,
    PERCENTILES,
];

impl Settings {
    /// The features of the peer this test needs beyond the protocol's major version
    /// (see [`crate::features`]), each once: the test's own, then its transport's.
    pub fn needed_features(&self) -> Vec<Feature> {
        let mut out = Vec::new();
        match self.workload {
            Workload::Reverse => out.push(REVERSE),
            Workload::Bidir => out.push(BIDIR),
            Workload::Crr => out.push(CRR),
            Workload::RoundTrip(Reply::Echo) if self.protocol() == Protocol::Udp => {
                out.push(UDP_ECHO)
            }
            Workload::Bulk | Workload::RoundTrip(_) => {}
        }
        if self.transactions.is_some() {
            out.push(TRANSACTIONS);
        }
        if self.response_size.is_some() {
            out.push(RESPONSE_SIZE);
        }
        if self.flows {
            out.push(FLOWS);
        }
        if !self.sched.is_auto() {
            out.push(SCHED);
        }
        if self.percentiles != Percentiles::default() {
            out.push(PERCENTILES);
        }
        match &self.transport {
            TransportSettings::Tcp(t) => t.features(&mut out),
            TransportSettings::Udp(u) => u.features(&mut out),
            TransportSettings::Rdma(r) => r.features(&mut out),
        }
        out
    }

    /// The protocol of the data streams.
    pub fn protocol(&self) -> Protocol {
        self.transport.protocol()
    }

    /// What a transport's set-up reads of this run (see [`StreamPlan`]).
    pub fn stream_plan(&self) -> StreamPlan {
        let sockets = self.transport.sockets().cloned().unwrap_or_default();
        StreamPlan {
            shape: self.shape(),
            transport: self.transport.clone(),
            options: StreamOptions {
                nsockets: self.nsockets as usize,
                queue: self.queue,
                pktsize: self.pktsize as usize,
                reply: self.reply(),
                busy_poll: sockets.busy_poll,
                cpu: None,
                window: sockets.window.map(|w| w as usize),
                tos: sockets.tos,
                // The flows' sockets never block, and the receiving end waits for them
                // in one epoll set.
                epoll: sockets.epoll || self.flows,
                flows: self.flows,
                ..StreamOptions::default()
            },
            client_cpus: self.client_cpus.clone(),
            server_cpus: self.server_cpus.clone(),
            server_sends: (0..self.nstreams)
                .map(|i| self.server_sends_on(i))
                .collect(),
        }
    }

    /// The transport that carries this run, with its own options: its protocol's, or
    /// TCP's `--crr`.
    pub fn data_transport(&self) -> Box<dyn Transport> {
        match &self.transport {
            TransportSettings::Tcp(tcp) if self.workload == Workload::Crr => {
                Box::new(CrrTransport(tcp.clone()))
            }
            TransportSettings::Tcp(tcp) => Box::new(TcpTransport(tcp.clone())),
            TransportSettings::Udp(udp) => Box::new(UdpTransport(udp.clone())),
            TransportSettings::Rdma(rdma) => Box::new(RdmaTransport(rdma.clone())),
        }
    }

    /// The facts of this run that the transport's own settings are checked and tuned
    /// against.
    pub fn shape(&self) -> RunShape {
        RunShape {
            nstreams: self.nstreams,
            nsockets: self.nsockets,
            pktsize: self.pktsize,
            mprtt: self.workload.mprtt(),
            response_size: self.response_size,
            paced: self.rate_bps.is_some(),
            lock_free: self.queue == QueueKind::LockFree,
            flows: self.flows,
        }
    }

    /// Whether each end runs its data threads under `SCHED_BATCH`: in an unpaced bulk
    /// test they are throughput work, so a thread woken on a core (a reader woken by
    /// data) does not preempt the one running there mid-write; it runs when that one
    /// blocks or at the next tick. Not with MPRTT (`-r`, `--echo`, `--crr`), whose
    /// round trips are the wake-ups being measured, nor with `-b`, whose packets are
    /// due at set times, nor where the streams about match this end's CPUs
    /// ([`batch_suits`]). `--sched normal` or `batch` decides for every test. Every
    /// transport's threads follow it. docs/tuning.md has what it buys.
    pub fn batch_threads(&self) -> bool {
        match self.sched {
            SchedPolicy::Auto => {
                !self.workload.mprtt()
                    && self.rate_bps.is_none()
                    && batch_suits(self.nstreams, usable_cpus())
            }
            SchedPolicy::Normal => false,
            SchedPolicy::Batch => true,
        }
    }

    /// `--flows`: how many, and what they can run with.
    fn check_flows(&self) -> Result<(), SettingsError> {
        let flows = u64::from(self.nstreams) * u64::from(self.nsockets);
        if self.nsockets == 0 || flows > u64::from(MAX_FLOWS) {
            return Err(SettingsError::Flows(flows));
        }
        if !matches!(self.protocol(), Protocol::Tcp | Protocol::Udp) {
            return Err(SettingsError::FlowsProtocol(self.protocol().name()));
        }
        if !matches!(
            self.workload,
            Workload::Bulk | Workload::RoundTrip(_) | Workload::Crr
        ) {
            return Err(SettingsError::FlowsWorkload(
                self.workload.behaviour().flag(),
            ));
        }
        if let Some((_, flag)) = [
            (self.rate_bps.is_some(), "-b"),
            (self.queue == QueueKind::LockFree, "-q 0"),
        ]
        .into_iter()
        .find(|(given, _)| *given)
        {
            return Err(SettingsError::FlowsConflict(flag));
        }
        Ok(())
    }

    /// Checks every field; the first problem found is returned.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if !(1..=MAX_NSTREAMS).contains(&self.nstreams) {
            return Err(SettingsError::NStreams(self.nstreams));
        }
        if self.flows {
            self.check_flows()?;
        } else if !(1..=MAX_NSOCKETS).contains(&self.nsockets) {
            return Err(SettingsError::NSockets(self.nsockets));
        }
        if !(1..=MAX_PKTSIZE).contains(&self.pktsize) {
            return Err(SettingsError::PktSize(self.pktsize));
        }
        if !(1..=MAX_MB).contains(&self.mb) {
            return Err(SettingsError::Mb(self.mb));
        }
        if let Some(n) = self.transactions {
            if !self.workload.mprtt() || self.time_ms.is_some() {
                return Err(SettingsError::TransactionsNeedRoundTrips);
            }
            let fits = n
                .checked_mul(u64::from(self.pktsize.max(self.response_size.unwrap_or(0))))
                .is_some_and(|b| b <= MAX_MB * MB);
            if n == 0 || !fits {
                return Err(SettingsError::Transactions(n));
            }
        }
        // The range first: it bounds what a peer's settings make either end allocate.
        if let Some(size) = self.response_size {
            if !(1..=MAX_PKTSIZE).contains(&size) {
                return Err(SettingsError::ResponseSize(size));
            }
            let behaviour = self.workload.behaviour();
            if !behaviour.sized_replies() {
                let workload = match behaviour.flag() {
                    "" => "a bulk run",
                    flag => flag,
                };
                return Err(WorkloadError::ResponseSizeWorkload(workload).into());
            }
        }
        let copies = self.workload.behaviour().buffer_copies();
        let per_socket = u64::from(self.pktsize) * copies + self.reply_buffer_bytes();
        let footprint = u64::from(self.nstreams) * u64::from(self.nsockets) * per_socket;
        if footprint > MAX_FOOTPRINT {
            return Err(SettingsError::Footprint(footprint));
        }
        self.percentiles.check()?;
        // Every stream's thread holds a copy of the settings: their lists stay short.
        if let Some(list) = [&self.client_cpus, &self.server_cpus]
            .into_iter()
            .find(|l| l.len() > MAX_NSTREAMS as usize)
        {
            return Err(SettingsError::CpuList(list.len()));
        }
        if let Some(&cpu) = self
            .client_cpus
            .iter()
            .chain(&self.server_cpus)
            .find(|&&c| c as usize >= crate::stream::affinity::MAX_CPUS)
        {
            return Err(SettingsError::Cpu(cpu));
        }
        if self.queue == QueueKind::LockFree && self.nsockets != 1 {
            return Err(SettingsError::LockFreeSockets(self.nsockets));
        }
        for (name, value, min) in [
            ("time", self.time_ms, 1),
            ("interval", self.interval_ms, MIN_INTERVAL_MS),
            ("omit", self.omit_ms, 0),
        ] {
            if let Some(v) = value {
                if !(min..=MAX_TIME_MS).contains(&v) {
                    return Err(SettingsError::Timing {
                        flag: name,
                        least: min,
                        asked: v,
                    });
                }
            }
        }
        if let Some(asked) = self.interval_ms {
            let least = u64::from(self.nstreams) * MIN_INTERVAL_PER_STREAM_MS;
            if asked < least {
                return Err(SettingsError::IntervalPerStream {
                    asked,
                    least,
                    streams: self.nstreams,
                });
            }
        }
        if self.rate_bps == Some(0) {
            return Err(SettingsError::RateZero);
        }
        if let (Some(omit), Some(time)) = (self.omit_ms, self.time_ms) {
            if omit >= time {
                return Err(SettingsError::OmitTooLong(omit, time));
            }
        }
        let run = self.shape();
        (self.workload.behaviour()).check(&run, &self.transport)?;
        match &self.transport {
            TransportSettings::Tcp(tcp) => tcp.validate(&run)?,
            TransportSettings::Udp(udp) => udp.validate(&run)?,
            TransportSettings::Rdma(rdma) => rdma.validate()?,
        }
        Ok(())
    }

    /// What answers each packet: the workload's reply, whose ACK `--response-size`
    /// makes a reply of that size. `None` without replies.
    pub fn reply(&self) -> Option<Reply> {
        match (self.workload.reply()?, self.response_size) {
            (Reply::Ack, Some(n)) => Some(Reply::Sized(n)),
            (reply, _) => Some(reply),
        }
    }

    /// Bytes of the reply to each request: `--response-size`, else the request's own
    /// (`--echo`) or the 1-byte ACK. `None` without replies.
    pub fn reply_size(&self) -> Option<u32> {
        u32::try_from(self.reply()?.len(self.pktsize as usize)).ok()
    }

    /// What a report header says of the workload, starting with a space (or empty):
    /// the workload's own words, or the size of a `--response-size` reply.
    pub fn workload_label(&self) -> String {
        match (self.workload, self.response_size) {
            (Workload::RoundTrip(Reply::Ack), Some(n)) => {
                format!(" reply={n}B (mprtt = request + reply of {n} bytes)")
            }
            _ => self.workload.behaviour().label(self.nstreams),
        }
    }

    /// With `--bidir`, the first stream the server sends on (the streams before it
    /// carry the client's data).
    pub fn first_server_stream(&self) -> Option<u32> {
        self.workload.behaviour().first_server_stream(self.nstreams)
    }

    /// How many streams carry the client's data: all but with `--reverse` (none) and
    /// `--bidir` (the first half).
    pub fn client_data_streams(&self) -> u32 {
        (0..self.nstreams)
            .filter(|&i| !self.server_sends_on(i))
            .count() as u32
    }

    /// Whether the server sends on stream `stream`: with `--reverse` on all, with
    /// `--bidir` on the second half.
    pub fn server_sends_on(&self, stream: u32) -> bool {
        (self.workload.behaviour()).server_sends_on(stream, self.nstreams)
    }

    /// One direction of a `--bidir` run as a one-way run of its streams would be set:
    /// the server sending if `reverse`. Reports render each direction with these.
    pub fn one_way(&self, reverse: bool) -> Settings {
        Settings {
            workload: if reverse {
                Workload::Reverse
            } else {
                Workload::Bulk
            },
            nstreams: self.first_server_stream().unwrap_or(self.nstreams),
            ..self.clone()
        }
    }

    /// Whether the server listens on ports after its base port for this test: stream
    /// `i > 0` at `base + i`, and with a TCP `--window` stream 0 too, at `base + nstreams`
    /// (see [`crate::transport::tcp::data_port_offset`]); with `--crr` every stream, at
    /// `base + 1 + i`. Two such tests cannot run at once.
    pub fn listens_past_base_port(&self) -> bool {
        self.nstreams > 1 || self.tcp_window().is_some() || self.workload == Workload::Crr
    }

    /// `--window` when it sizes TCP data connections (UDP's apply to its datagram
    /// sockets).
    pub fn tcp_window(&self) -> Option<u32> {
        self.transport.tcp_window()
    }

    /// Whether a UDP run's datagrams must go unfragmented (`--dont-fragment`).
    pub fn dont_fragment(&self) -> bool {
        matches!(&self.transport, TransportSettings::Udp(udp) if udp.dont_fragment)
    }

    /// TCP's own options, in a TCP run.
    pub fn tcp(&self) -> Option<&TcpSettings> {
        self.transport.tcp()
    }

    /// Bytes each stream sends, or `None` when the run is bounded by time.
    pub fn byte_limit(&self) -> Option<u64> {
        match self.time_ms {
            Some(_) => None,
            None => Some(self.bytes_per_stream()),
        }
    }

    /// The most payload bytes one end of this run can count, all streams together: the
    /// announced bytes (time-bounded: what 10 Tbit/s moves in the time) or their
    /// replies if those are larger, each perhaps sent again by MPRTT's retries. Figures
    /// beyond it cannot be true.
    pub fn most_bytes(&self) -> u64 {
        const BYTES_PER_MS_AT_10_TBIT: u64 = 1_250_000_000;
        let requests = match self.time_ms {
            Some(ms) => ms.saturating_mul(BYTES_PER_MS_AT_10_TBIT),
            None => self.bytes_per_stream(),
        };
        // Every request, the last one short or not, is answered in full.
        let replies = requests
            .div_ceil(u64::from(self.pktsize.max(1)))
            .saturating_mul(u64::from(self.reply_size().unwrap_or(0)));
        let per_stream = requests.max(replies);
        per_stream
            .saturating_mul(self.packet_copies())
            .saturating_mul(u64::from(self.nstreams))
    }

    /// Most bytes of packet buffers either end of this run allocates, all streams and
    /// sockets together.
    pub fn buffer_bytes(&self) -> u64 {
        let copies = self.workload.behaviour().buffer_copies();
        let replies =
            u64::from(self.nstreams) * u64::from(self.nsockets) * self.reply_buffer_bytes();
        (self.transport.buffer_bytes(&self.shape(), copies)).saturating_add(replies)
    }

    /// Bytes of `--response-size` buffers per socket, at most: each socket reads
    /// replies into one, and a sender thread's handle on it (client) or the stream's
    /// reply to write (server) is a second.
    fn reply_buffer_bytes(&self) -> u64 {
        2 * u64::from(self.response_size.unwrap_or(0))
    }

    /// How many times one packet may arrive: with MPRTT, once more per retry (UDP sends a
    /// datagram again when its ACK is late).
    pub fn packet_copies(&self) -> u64 {
        if self.workload.mprtt() {
            1 + u64::from(MAX_RETRIES)
        } else {
            1
        }
    }

    /// Bytes each stream sends: `--transactions` packets, or `mb` MB.
    pub fn bytes_per_stream(&self) -> u64 {
        match self.transactions {
            Some(n) => n.saturating_mul(u64::from(self.pktsize)),
            None => self.mb * MB,
        }
    }

    /// Whether the tool drives its streams with `send_submit()` (asynchronous) rather than
    /// `send()`: the original design uses `send()` only for one socket with the mutex queue.
    pub fn asynchronous(&self) -> bool {
        self.shape().asynchronous()
    }

    /// The sending mode as the report header names it.
    pub fn mode_label(&self) -> &'static str {
        match (self.asynchronous(), self.queue) {
            (false, _) if self.flows => "flows(epoll)",
            (false, _) => "sync(no-queue)",
            (true, QueueKind::Mutex) => "async(mutex-queue)",
            (true, QueueKind::LockFree) => "async(lockfree-queue)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::rdma::settings::RdmaSettings;
    use crate::transport::sockets::SocketSettings;
    use crate::transport::tcp::zerocopy::ZeroCopy;
    use crate::transport::udp::settings::UdpSettings;

    const ACK: Workload = Workload::RoundTrip(Reply::Ack);
    const ECHO: Workload = Workload::RoundTrip(Reply::Echo);

    fn udp() -> Settings {
        Settings {
            pktsize: 1472,
            transport: TransportSettings::default_for(Protocol::Udp),
            ..Settings::default()
        }
    }

    fn tcp(options: TcpSettings) -> Settings {
        Settings {
            transport: TransportSettings::Tcp(options),
            ..Settings::default()
        }
    }

    #[test]
    fn defaults_are_valid_and_match_the_original_design() {
        let s = Settings::default();
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.protocol(), Protocol::Tcp);
        assert_eq!(s.bytes_per_stream(), 10_737_418_240);
        assert_eq!(s.mode_label(), "sync(no-queue)");
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let base = Settings::default();
        let cases = [
            Settings {
                nsockets: 0,
                ..base.clone()
            },
            Settings {
                nsockets: 101,
                ..base.clone()
            },
            Settings {
                nstreams: 0,
                ..base.clone()
            },
            Settings {
                pktsize: 0,
                ..base.clone()
            },
            Settings {
                mb: 0,
                ..base.clone()
            },
            Settings {
                queue: QueueKind::LockFree,
                nsockets: 2,
                ..base.clone()
            },
            Settings {
                pktsize: 65_528,
                ..udp()
            },
            Settings {
                interval_ms: Some(1),
                ..base.clone()
            },
            Settings {
                time_ms: Some(0),
                ..base.clone()
            },
            Settings {
                time_ms: Some(1000),
                omit_ms: Some(1000),
                ..base.clone()
            },
            Settings {
                rate_bps: Some(0),
                ..base.clone()
            },
            Settings {
                nstreams: 64,
                interval_ms: Some(127),
                ..base.clone()
            },
            Settings {
                client_cpus: vec![u32::MAX],
                ..base.clone()
            },
            Settings {
                server_cpus: vec![0; MAX_NSTREAMS as usize + 1],
                ..base.clone()
            },
        ];
        for c in cases {
            assert!(c.validate().is_err(), "{c:?} should be refused");
        }
    }

    #[test]
    fn each_transport_checks_its_own_options_against_the_run() {
        let rcvlowat = Settings {
            workload: ACK,
            ..tcp(TcpSettings {
                rcvlowat: Some(1),
                ..TcpSettings::default()
            })
        };
        assert_eq!(
            rcvlowat.validate(),
            Err(TcpSettingsError::RcvlowatMprtt.into())
        );
        let batched = Settings {
            workload: ACK,
            transport: TransportSettings::Udp(UdpSettings {
                batch: Some(8),
                ..UdpSettings::default()
            }),
            ..udp()
        };
        assert_eq!(batched.validate(), Err(UdpSettingsError::BatchMprtt.into()));
        let rdma = Settings {
            transport: TransportSettings::Rdma(RdmaSettings {
                device: Some(String::new()),
                ..RdmaSettings::default()
            }),
            ..Settings::default()
        };
        assert_eq!(
            rdma.validate(),
            Err(RdmaSettingsError::Name("--rdmadev").into())
        );
    }

    #[test]
    fn echo_is_mprtt_over_every_transport_and_counts_its_buffers_twice() {
        let echo = Settings {
            workload: ECHO,
            ..Settings::default()
        };
        assert_eq!(echo.validate(), Ok(()));
        let over_udp = Settings {
            workload: ECHO,
            ..udp()
        };
        assert_eq!(over_udp.validate(), Ok(()));
        use crate::transport::rdma::settings::RdmaApi;
        for api in [
            RdmaApi::Ibverbs,
            RdmaApi::Cm,
            RdmaApi::Ofi,
            RdmaApi::Rsocket,
        ] {
            for write in [false, true] {
                let over_rdma = Settings {
                    workload: ECHO,
                    transport: TransportSettings::Rdma(RdmaSettings {
                        api,
                        write,
                        ..RdmaSettings::default()
                    }),
                    ..Settings::default()
                };
                assert_eq!(over_rdma.validate(), Ok(()), "{}", api.name());
            }
        }
        // 64 streams × 1 socket × 32 MiB fit the bound, but not twice over.
        let big = Settings {
            nstreams: 64,
            pktsize: 32 << 20,
            ..Settings::default()
        };
        assert_eq!(big.validate(), Ok(()));
        let big_echo = Settings {
            workload: ECHO,
            ..big
        };
        assert_eq!(
            big_echo.validate(),
            Err(SettingsError::Footprint(2 * 64 * (32 << 20)))
        );
    }

    #[test]
    fn a_response_size_answers_rr_requests_over_tcp_and_udp() {
        let sized = |workload, size, base: Settings| Settings {
            workload,
            response_size: Some(size),
            ..base
        };
        assert_eq!(sized(ACK, 4096, Settings::default()).validate(), Ok(()));
        assert_eq!(sized(ACK, 4096, udp()).validate(), Ok(()));
        assert_eq!(sized(ACK, 4096, udp()).reply_size(), Some(4096));
        assert_eq!(
            Settings {
                workload: ACK,
                ..udp()
            }
            .reply_size(),
            Some(1)
        );
        assert_eq!(
            Settings {
                workload: ECHO,
                ..udp()
            }
            .reply_size(),
            Some(1472)
        );
        assert_eq!(Settings::default().reply_size(), None);
        // --echo may name its own size only.
        assert_eq!(sized(ECHO, 1472, udp()).validate(), Ok(()));
        assert_eq!(
            sized(ECHO, 100, udp()).validate(),
            Err(WorkloadError::ResponseSizeEcho {
                asked: 100,
                pktsize: 1472
            }
            .into())
        );
        for (workload, flag) in [
            (Workload::Bulk, "a bulk run"),
            (Workload::Crr, "--crr"),
            (Workload::Reverse, "--reverse"),
        ] {
            assert_eq!(
                sized(workload, 64, Settings::default()).validate(),
                Err(WorkloadError::ResponseSizeWorkload(flag).into())
            );
        }
        for bad in [0, MAX_PKTSIZE + 1] {
            assert_eq!(
                sized(ACK, bad, Settings::default()).validate(),
                Err(SettingsError::ResponseSize(bad))
            );
        }
        assert_eq!(
            sized(ACK, 65_528, udp()).validate(),
            Err(UdpSettingsError::ResponseSize(65_528).into())
        );
        let rdma = Settings {
            transport: TransportSettings::default_for(Protocol::Rdma),
            pktsize: 100,
            ..Settings::default()
        };
        assert_eq!(sized(ACK, 64, rdma.clone()).validate(), Ok(()));
        // RDMA rings hold replies larger than a packet in slots of their size.
        let slots = crate::transport::rdma::ring::endpoint_bytes_at_most(MAX_PKTSIZE as usize);
        assert!(sized(ACK, MAX_PKTSIZE, rdma.clone()).buffer_bytes() >= slots);
        assert!(sized(ACK, 64, rdma).buffer_bytes() < slots);
    }

    #[test]
    fn large_replies_raise_what_a_run_may_move_and_hold() {
        let rr = Settings {
            workload: ACK,
            pktsize: 100,
            transactions: Some(10),
            ..Settings::default()
        };
        let sized = Settings {
            response_size: Some(4096),
            ..rr.clone()
        };
        let copies = 1 + u64::from(MAX_RETRIES);
        assert_eq!(rr.most_bytes(), 10 * 100 * copies);
        assert_eq!(sized.most_bytes(), 10 * 4096 * copies);
        assert_eq!(sized.buffer_bytes(), rr.buffer_bytes() + 2 * 4096);
        // The replies count against the bound on buffers, per socket.
        let big = Settings {
            nstreams: 64,
            pktsize: 32 << 20,
            response_size: Some(1),
            ..rr
        };
        assert_eq!(
            big.validate(),
            Err(SettingsError::Footprint(64 * ((32 << 20) + 2)))
        );
    }

    #[test]
    fn modes_follow_the_original_design() {
        let s = Settings {
            nsockets: 4,
            ..Settings::default()
        };
        assert_eq!(s.mode_label(), "async(mutex-queue)");
        let s = Settings {
            queue: QueueKind::LockFree,
            ..Settings::default()
        };
        assert_eq!(s.mode_label(), "async(lockfree-queue)");
        assert_eq!(QueueKind::from_qtype(2), None);
    }

    #[test]
    fn batch_is_left_out_where_the_streams_about_match_the_cpus() {
        // The many-core table's rows (16 CPUs) and the emulated smaller machines.
        for (streams, cpus, batch) in [
            (1, 16, true),
            (4, 16, true),
            (8, 16, true),
            (16, 16, false),
            (8, 8, false),
            (16, 8, true),
            (4, 4, false),
            (8, 4, true),
            (1, 2, true),
            (2, 2, false),
            (4, 2, true),
            (1, 1, true),
            (2, 1, true),
            (3, 4, false),
            (256, 1, true),
        ] {
            assert_eq!(batch_suits(streams, cpus), batch, "{streams} on {cpus}");
        }
    }

    #[test]
    fn defaults_fit_the_workload() {
        assert_eq!(default_pktsize(Protocol::Udp, false, false), 1472);
        assert_eq!(default_pktsize(Protocol::Udp, false, true), 1452);
        assert_eq!(default_pktsize(Protocol::Udp, true, false), 1);
        assert_eq!(default_pktsize(Protocol::Tcp, true, true), 1);
        assert_eq!(default_pktsize(Protocol::Tcp, false, false), 32768);
        assert_eq!(default_pktsize(Protocol::Rdma, false, false), 32768);
        assert_eq!(sweep_run_ms(1), 2000);
        assert_eq!(sweep_run_ms(34), 294);
        assert_eq!(sweep_run_ms(1000), 200);
    }

    #[test]
    fn bulk_data_threads_run_batch_and_round_trips_and_paced_ones_do_not() {
        let one_stream = batch_suits(1, usable_cpus());
        assert_eq!(Settings::default().batch_threads(), one_stream);
        assert_eq!(udp().batch_threads(), one_stream);
        let mprtt = Settings {
            workload: ACK,
            ..Settings::default()
        };
        assert!(
            !mprtt.batch_threads(),
            "-r: round trips are the wake-ups measured"
        );
        let paced = Settings {
            rate_bps: Some(1_000_000),
            ..Settings::default()
        };
        assert!(!paced.batch_threads(), "-b: packets are due at set times");
        let normal = Settings {
            sched: SchedPolicy::Normal,
            ..Settings::default()
        };
        assert!(!normal.batch_threads(), "--sched normal, even for bulk");
        let batch = Settings {
            sched: SchedPolicy::Batch,
            ..mprtt
        };
        assert!(batch.batch_threads(), "--sched batch, even for round trips");
    }

    #[test]
    fn only_a_tcp_window_gives_stream_0_a_port_of_its_own() {
        let window = SocketSettings {
            window: Some(64 << 10),
            ..SocketSettings::default()
        };
        let windowed = tcp(TcpSettings {
            sockets: window.clone(),
            ..TcpSettings::default()
        });
        assert_eq!(windowed.validate(), Ok(()));
        assert_eq!(windowed.tcp_window(), Some(64 << 10));
        assert!(windowed.listens_past_base_port());
        let udp_window = Settings {
            transport: TransportSettings::Udp(UdpSettings {
                sockets: window,
                ..UdpSettings::default()
            }),
            ..udp()
        };
        assert_eq!(udp_window.validate(), Ok(()));
        assert_eq!(udp_window.tcp_window(), None);
        assert!(!udp_window.listens_past_base_port());
    }

    #[test]
    fn bidir_gives_the_server_the_second_half_of_the_streams() {
        let bidir = Settings {
            workload: Workload::Bidir,
            nstreams: 4,
            ..Settings::default()
        };
        assert_eq!(bidir.validate(), Ok(()));
        assert_eq!(bidir.first_server_stream(), Some(2));
        let server_sends: Vec<bool> = (0..4).map(|i| bidir.server_sends_on(i)).collect();
        assert_eq!(server_sends, [false, false, true, true]);
        // Each direction renders as the one-way run of its two streams.
        let back = bidir.one_way(true);
        assert_eq!((back.workload, back.nstreams), (Workload::Reverse, 2));
        let forth = bidir.one_way(false);
        assert_eq!((forth.workload, forth.nstreams), (Workload::Bulk, 2));
        // One-way runs: no split; --reverse gives the server every stream.
        let plain = Settings::default();
        assert_eq!(plain.first_server_stream(), None);
        assert!(!plain.server_sends_on(0));
        let reverse = Settings {
            workload: Workload::Reverse,
            ..plain
        };
        assert!(reverse.server_sends_on(0));
        assert_eq!(reverse.one_way(true), reverse);
        let rdma = Settings {
            transport: TransportSettings::Rdma(RdmaSettings::default()),
            ..reverse
        };
        assert_eq!(
            rdma.validate(),
            Err(WorkloadError::ReverseUnsupported("RDMA").into())
        );
    }

    #[test]
    fn crr_is_tcp_mprtt_with_the_kernels_socket_defaults() {
        let crr = Settings {
            workload: Workload::Crr,
            ..Settings::default()
        };
        assert_eq!(crr.validate(), Ok(()));
        assert!(crr.listens_past_base_port());
        let epoll = Settings {
            transport: TransportSettings::Tcp(TcpSettings {
                sockets: SocketSettings {
                    epoll: true,
                    ..SocketSettings::default()
                },
                ..TcpSettings::default()
            }),
            ..crr.clone()
        };
        assert_eq!(
            epoll.validate(),
            Err(WorkloadError::CrrConflict("with --epoll").into())
        );
        let zerocopy = Settings {
            transport: TransportSettings::Tcp(TcpSettings {
                zerocopy: ZeroCopy::Msg,
                ..TcpSettings::default()
            }),
            ..crr.clone()
        };
        assert_eq!(
            zerocopy.validate(),
            Err(WorkloadError::CrrConflict("with --zerocopy").into())
        );
        let sockets = Settings {
            nsockets: 2,
            ..crr.clone()
        };
        assert_eq!(
            sockets.validate(),
            Err(WorkloadError::CrrConflict("with -n above 1").into())
        );
        // With --flows, a thread's sockets are its connections in flight.
        let flows = Settings {
            flows: true,
            nstreams: 2,
            nsockets: 50,
            ..crr.clone()
        };
        assert_eq!(flows.validate(), Ok(()));
        let over_udp = Settings {
            workload: Workload::Crr,
            ..udp()
        };
        assert_eq!(
            over_udp.validate(),
            Err(WorkloadError::CrrTcpOnly("UDP").into())
        );
    }

    #[test]
    fn bidir_refuses_rdma_and_odd_stream_counts() {
        let bidir = Settings {
            workload: Workload::Bidir,
            nstreams: 2,
            ..Settings::default()
        };
        let odd = Settings {
            nstreams: 3,
            ..bidir.clone()
        };
        assert_eq!(
            odd.validate(),
            Err(WorkloadError::BidirOddStreams(3).into())
        );
        let over_udp = Settings {
            workload: Workload::Bidir,
            nstreams: 2,
            ..udp()
        };
        assert_eq!(over_udp.validate(), Ok(()));
        let over_rdma = Settings {
            transport: TransportSettings::Rdma(RdmaSettings::default()),
            ..over_udp
        };
        assert_eq!(
            over_rdma.validate(),
            Err(WorkloadError::BidirUnsupported("RDMA").into())
        );
    }
}
