//! `--under-load`: latency under load (the bufferbloat question): how much the
//! network's queues add to the round trip when the link is busy.
//!
//! A client-side orchestrator of ordinary tests: it opens a probe session with the
//! server (UDP latency probes on a connection of their own, see
//! [`crate::latency_probe`]), then runs each phase in turn while the probes go: an idle
//! phase just waits; a loaded phase is one ordinary test through
//! [`crate::client::run_observed`] (upload: `--load-flows` streams to the server,
//! download: as many with `--reverse`, bidir: twice as many with `--bidir`), each as
//! long as its phase. The probes sent while a phase's load ran are that phase's.
//! The same function serves the command line, `fperf mesh` and the exporter.

pub mod figures;
pub mod prober;
pub mod spec;

use crate::client::{self, ClientConfig, RunObserver, StreamInfo};
use crate::latency_probe::MAX_ECHO_SECS;
use crate::results::{IntervalResult, SideResult};
use crate::settings::{Settings, MIN_INTERVAL_PER_STREAM_MS};
use crate::transport::Role;
use crate::workload::Workload;
use anyhow::{bail, Result};
use figures::{ClockOffset, LoadFigures, PhaseFigures};
use prober::{ProbeRecord, Prober};
use spec::{PhaseKind, UnderLoadSpec, MAX_PROBES};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a loaded phase's tests report, for the throughput over time and TCP's
/// round trip on the loaded connections.
const LOAD_INTERVAL_MS: u64 = 100;
/// The pause between two phases, so that one phase's queue has drained before the
/// next begins; the probes sent in it belong to no phase.
const BETWEEN_PHASES: Duration = Duration::from_millis(500);
/// How long the last probes' echoes are waited for once the last phase is over.
const LAST_ECHOES: Duration = Duration::from_secs(1);
/// What a loaded phase takes beyond its length (connecting, the results), counted in
/// the echo asked of the server.
const PHASE_OVERHEAD_SECS: u64 = 5;

/// One sample of the load's throughput over time, as the client counted it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThroughputSample {
    pub phase: PhaseKind,
    /// The end of the sample's interval, since the run began.
    pub at: Duration,
    pub up_bps: f64,
    pub down_bps: f64,
}

/// What a `--under-load` run measured.
#[derive(Clone, Debug)]
pub struct UnderLoadRun {
    /// The server as given, and the addresses the probes went between.
    pub server: String,
    pub client_addr: SocketAddr,
    pub server_addr: SocketAddr,
    /// The phases in the order run.
    pub phases: Vec<PhaseFigures>,
    /// Every probe, in the order sent.
    pub probes: Vec<ProbeRecord>,
    pub throughput: Vec<ThroughputSample>,
    /// The probes' interval and the load's flows per direction.
    pub probe_interval: Duration,
    pub flows: u32,
    /// The load's congestion control, as the kernel reported it for the client's
    /// sockets.
    pub congestion: Option<String>,
    pub clocks: Option<ClockOffset>,
    /// The run was cut short (Ctrl-C): the phases run so far.
    pub interrupted: bool,
}

/// Runs `spec`'s phases against the server of `cfg`, whose settings (TCP options,
/// `--tos`, `--fq-rate`, ...) every loaded phase's test takes.
pub fn run(
    cfg: &ClientConfig,
    spec: &UnderLoadSpec,
    abort: Arc<AtomicBool>,
) -> Result<UnderLoadRun> {
    run_noting(cfg, spec, abort, &AtomicBool::new(false))
}

/// [`run`], setting `answered` once the server proved its key (if asked to) and opened
/// the probe session: a mesh server tells failures before that from those after.
pub fn run_noting(
    cfg: &ClientConfig,
    spec: &UnderLoadSpec,
    abort: Arc<AtomicBool>,
    answered: &AtomicBool,
) -> Result<UnderLoadRun> {
    spec.check().map_err(anyhow::Error::msg)?;
    let phases = spec.phases();
    if phases.is_empty() {
        bail!("--under-load needs at least one phase");
    }
    let echo_secs = spec.total().as_secs() + 1 + PHASE_OVERHEAD_SECS * phases.len() as u64;
    let echo_secs = u32::try_from(echo_secs.min(u64::from(MAX_ECHO_SECS))).unwrap_or(MAX_ECHO_SECS);
    let session = client::probe_echo(cfg, echo_secs)?;
    answered.store(true, Ordering::Relaxed);
    let epoch = Instant::now();
    let prober = Prober::start(
        session.local,
        session.echo,
        session.token,
        spec.probe_interval,
        MAX_PROBES,
        epoch,
    )?;
    let mut ran = Vec::new();
    let mut throughput = Vec::new();
    let mut congestion = None;
    let mut interrupted = false;
    for (i, &(kind, length)) in phases.iter().enumerate() {
        if i > 0 {
            interrupted |= pause(BETWEEN_PHASES, &abort);
        }
        if interrupted {
            break;
        }
        let (window, load) = match kind {
            PhaseKind::Idle => {
                let start = epoch.elapsed();
                interrupted |= pause(length, &abort);
                ((start, epoch.elapsed()), LoadFigures::default())
            }
            _ => {
                let settings = phase_settings(&cfg.settings, kind, spec.flows, length);
                let mut observer = PhaseObserver::new(&settings, kind, epoch);
                let phase_cfg = ClientConfig {
                    settings: settings.clone(),
                    ..cfg.clone()
                };
                let called = Instant::now();
                let outcome = client::run_observed(&phase_cfg, abort.clone(), &mut observer)?;
                let returned = Instant::now();
                let started = observer.started.unwrap_or(called);
                let end = (started + length).min(returned);
                congestion = congestion.or(observer.congestion.take());
                interrupted |= outcome.interrupted;
                throughput.append(&mut observer.throughput);
                let load = LoadFigures {
                    up_bps: received_bps(&outcome.server, &settings, Role::Server),
                    down_bps: received_bps(&outcome.client, &settings, Role::Client),
                    tcp_rtt_ns: observer.tcp_rtt_ns,
                };
                let since = |t: Instant| t.saturating_duration_since(epoch);
                ((since(started), since(end)), load)
            }
        };
        ran.push((kind, window, load));
    }
    let probes = prober.finish(LAST_ECHOES);
    // The echo ends as the control connection closes.
    drop(session.control);
    let same_host = session.local.ip().to_canonical() == session.echo.ip().to_canonical()
        || session.echo.ip().is_loopback();
    let clocks = ClockOffset::estimate(&probes, same_host);
    let mut figures: Vec<PhaseFigures> = ran
        .iter()
        .map(|(kind, window, load)| {
            figures::phase_figures(*kind, *window, &probes, load, clocks.as_ref())
        })
        .collect();
    figures::add_delays(&mut figures);
    Ok(UnderLoadRun {
        server: cfg.host.clone(),
        client_addr: session.local,
        server_addr: session.echo,
        phases: figures,
        probes,
        throughput,
        probe_interval: spec.probe_interval,
        flows: spec.flows,
        congestion,
        clocks,
        interrupted,
    })
}

/// Waits `length`, or less when `abort` is set: whether it was.
fn pause(length: Duration, abort: &AtomicBool) -> bool {
    let until = Instant::now() + length;
    loop {
        if abort.load(Ordering::Relaxed) {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// The test of a loaded phase: `base`'s options with the phase's streams, direction and
/// length.
fn phase_settings(base: &Settings, kind: PhaseKind, flows: u32, length: Duration) -> Settings {
    let workload = match kind {
        PhaseKind::Upload | PhaseKind::Idle => Workload::Bulk,
        PhaseKind::Download => Workload::Reverse,
        PhaseKind::Bidir => Workload::Bidir,
    };
    let nstreams = kind.streams(flows);
    Settings {
        nstreams,
        workload,
        time_ms: Some(u64::try_from(length.as_millis()).unwrap_or(u64::MAX)),
        transactions: None,
        // Every stream reports every interval: many streams need a longer one.
        interval_ms: Some(LOAD_INTERVAL_MS.max(MIN_INTERVAL_PER_STREAM_MS * u64::from(nstreams))),
        omit_ms: None,
        ..base.clone()
    }
}

/// The bits per second `side` received, each stream's bytes over its own time, added
/// up over the streams that carried data towards it.
fn received_bps(side: &SideResult, settings: &Settings, role: Role) -> f64 {
    side.streams
        .iter()
        .filter(|s| !role.sends_on(settings, s.index))
        .map(|s| {
            let secs = s.figures.secs();
            if secs > 0.0 {
                s.figures.bytes_received as f64 * 8.0 / secs
            } else {
                0.0
            }
        })
        .sum()
}

/// What a loaded phase's test tells as it runs: when its data started, the
/// throughput of each interval and TCP's round trip on the sending ends.
struct PhaseObserver {
    settings: Settings,
    kind: PhaseKind,
    epoch: Instant,
    started: Option<Instant>,
    congestion: Option<String>,
    throughput: Vec<ThroughputSample>,
    tcp_rtt_ns: Vec<u64>,
}

impl PhaseObserver {
    fn new(settings: &Settings, kind: PhaseKind, epoch: Instant) -> Self {
        PhaseObserver {
            settings: settings.clone(),
            kind,
            epoch,
            started: None,
            congestion: None,
            throughput: Vec::new(),
            tcp_rtt_ns: Vec::new(),
        }
    }
}

impl RunObserver for PhaseObserver {
    fn connected(&mut self, streams: &[StreamInfo]) {
        self.congestion = streams
            .iter()
            .find_map(|s| s.in_force.tcp.congestion.clone());
    }

    fn started(&mut self, _watch: &Arc<crate::limits::TestWatch>) {
        self.started = Some(Instant::now());
    }

    fn interval(&mut self, role: Role, result: &IntervalResult) {
        for stream in &result.streams {
            if !role.sends_on(&self.settings, stream.index) {
                continue;
            }
            if let Some(tcp) = stream.figures.transport.tcp.filter(|t| t.sockets > 0) {
                if tcp.srtt_us > 0 {
                    self.tcp_rtt_ns.push(u64::from(tcp.srtt_us) * 1000);
                }
            }
        }
        let (Role::Client, Some(started)) = (role, self.started) else {
            return;
        };
        let secs = result.end_ns.saturating_sub(result.start_ns) as f64 / 1e9;
        if secs <= 0.0 {
            return;
        }
        let (sent, received) = result.streams.iter().fold((0u64, 0u64), |(s, r), st| {
            (
                s.saturating_add(st.figures.bytes_sent),
                r.saturating_add(st.figures.bytes_received),
            )
        });
        let at =
            (started + Duration::from_nanos(result.end_ns)).saturating_duration_since(self.epoch);
        self.throughput.push(ThroughputSample {
            phase: self.kind,
            at,
            up_bps: sent as f64 * 8.0 / secs,
            down_bps: received as f64 * 8.0 / secs,
        });
    }
}
