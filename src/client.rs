//! The client role: connects the control stream, sends the settings, connects the data
//! streams, drives one thread per stream, and collects the server's figures.
//!
//! The client's clock for a stream runs from its first send until the server confirms
//! it has received everything (the `Results` message), so bytes still sitting in the
//! client's socket buffers are never counted as sent.

pub mod iperf3;

use crate::auth::{self, AuthKey};
use crate::control::keepalive::ControlKeepalive;
use crate::control::session::{ClientRun, ClientSession, ClientStep, SERVER_REASON_WITHIN};
use crate::control::{Channel, ControlError, Message, PROTOCOL_MAJOR};
use crate::engine::{drive, receive, sending_end, Ceiling, Driven, Received};
use crate::family::IpFamily;
use crate::interval::{Collector, Meter, Schedule};
use crate::latency_probe::phases::{PhasePlan, PhaseReport};
use crate::limits::TestWatch;
use crate::results::{nanos, Figures, IntervalResult, SideResult, SideTotals, StreamResult};
use crate::settings::Settings;
use crate::stats::datagrams::DatagramCounts;
use crate::stats::{LatencyStats, StreamStats};
use crate::stream::affinity::{cpu_for, place_current_thread};
use crate::sysinfo::{CpuUsage, SystemFacts};
use crate::transport::figures::{TransportFigures, TransportInForce};
use crate::transport::stream::SocketBuffers;
use crate::transport::Role;
use crate::transport::{self, tcp::connect, ClientCtx, LocalEnd};
use anyhow::{anyhow, bail, Context, Result};
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where and how the client runs.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Server name or address.
    pub host: String,
    /// The server's base port.
    pub port: u16,
    /// Local address to bind to (`-B`).
    pub bind: Option<IpAddr>,
    /// The local port of the first data socket (`--cport`).
    pub cport: Option<u16>,
    /// The network interface every socket sends through (`--bind-dev`,
    /// `SO_BINDTODEVICE`).
    pub bind_device: Option<String>,
    /// The family of the server's address to take (`-4`, `-6`).
    pub family: IpFamily,
    pub settings: Settings,
    /// Longest wait for the server to answer the connection that opens a test
    /// (`--connect-timeout`).
    pub connect_timeout: Duration,
    /// TCP keepalive on the control connection (`--cntl-ka`), if asked for.
    pub control_keepalive: Option<ControlKeepalive>,
    /// Longest wait for the server during setup.
    pub control_timeout: Duration,
    /// Longest wait for the server's figures once everything was sent.
    pub results_timeout: Duration,
    /// Longest sent data may stay unacknowledged before the server counts as gone.
    pub stall_timeout: Duration,
    /// The shared key to prove to the server, if any.
    pub auth: Option<AuthKey>,
    /// The UDP datagram size is the default for IPv4: once the server's address is
    /// known to be IPv6, it becomes IPv6's, so that no datagram goes in fragments.
    pub datagram_for_family: bool,
}

impl ClientConfig {
    /// A configuration with default time-outs.
    pub fn new(host: impl Into<String>, port: u16, settings: Settings) -> ClientConfig {
        ClientConfig {
            host: host.into(),
            port,
            bind: None,
            cport: None,
            bind_device: None,
            family: IpFamily::Any,
            settings,
            connect_timeout: Duration::from_secs(10),
            control_keepalive: None,
            control_timeout: Duration::from_secs(10),
            results_timeout: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(10),
            auth: None,
            datagram_for_family: false,
        }
    }
}

/// One stream as the client connected it.
#[derive(Clone, Debug)]
pub struct StreamInfo {
    pub index: u32,
    pub local: String,
    pub peer: String,
    /// What the stream's sockets ended up with, as the kernel reported it.
    pub in_force: TransportInForce,
    /// The first socket's buffers (TCP and UDP).
    pub buffers: Option<SocketBuffers>,
}

/// The outcome of a client run.
#[derive(Clone, Debug)]
pub struct ClientOutcome {
    /// What the server knows the test by: fperf's session number, or the cookie of
    /// iperf3's protocol.
    pub test_id: String,
    pub client: SideResult,
    pub server: SideResult,
    /// The run was cut short by the abort flag (Ctrl-C).
    pub interrupted: bool,
    /// The client's send latency (with `-r` the round trip) over all streams, every
    /// sample in its histogram (for `--plot`).
    pub send_latency: LatencyStats,
}

/// Longest the control reader waits for the server's next message during a run (the
/// run's own length is bounded elsewhere: by `--time`, by `-m` and by the idle time-outs).
const CONTROL_READ_LIMIT: Duration = Duration::from_secs(30 * 24 * 3600);
/// How often the client looks for the server's interval messages while its streams run.
const CONTROL_POLL: Duration = Duration::from_millis(50);
/// Most server messages waiting for the client to take them: at the shortest interval
/// (10 ms) a poll finds five.
const CONTROL_QUEUE: usize = 64;

/// What a run tells its caller while it goes on.
pub trait RunObserver {
    /// The data streams are connected (for the report header).
    fn connected(&mut self, streams: &[StreamInfo]);
    /// A reporting interval of one side ended (`-i`).
    fn interval(&mut self, _role: Role, _result: &IntervalResult) {}
    /// The data streams started: `watch` counts the bytes each one moved so far (for a
    /// progress indicator).
    fn started(&mut self, _watch: &Arc<TestWatch>) {}
}

impl<F: FnMut(&[StreamInfo])> RunObserver for F {
    fn connected(&mut self, streams: &[StreamInfo]) {
        self(streams)
    }
}

/// Runs one test. `on_connected` is called once the data streams are connected (for the
/// report header); `abort` cuts the run short, still collecting the server's figures.
pub fn run(
    cfg: &ClientConfig,
    abort: Arc<AtomicBool>,
    on_connected: &mut dyn FnMut(&[StreamInfo]),
) -> Result<ClientOutcome> {
    run_observed(cfg, abort, &mut |s: &[StreamInfo]| on_connected(s))
}

/// Runs one test, telling `observer` about connected streams and ended intervals.
pub fn run_observed(
    cfg: &ClientConfig,
    abort: Arc<AtomicBool>,
    observer: &mut dyn RunObserver,
) -> Result<ClientOutcome> {
    let (cfg, server) = &prepare(cfg)?;
    let transport = cfg.settings.data_transport();
    transport.check(&cfg.settings.shape(), *server)?;
    let sock = connect_control(cfg, *server, "fperf")?;
    crate::stream::sys::set_user_timeout(&sock, cfg.stall_timeout)?;
    // The run stops on the caller's abort, and on its own when the server misbehaves,
    // without stopping the caller's next run.
    let stop = RunStop::linked_to(abort)?;
    let abort = stop.flag.clone();
    let (chan, control, session) = open_control(sock, cfg, *server)?;
    let streams = transport.connect(&client_ctx(cfg, session, *server, &abort))?;
    let infos = stream_infos(&streams);
    observer.connected(&infos);
    let (control_sock, ctrl_rx) = start_control_reader(chan, cfg.control_timeout)?;
    let mut run = ClientRun::new(control, Instant::now());
    let ran = run_streams(cfg, streams, &abort, (&mut run, &ctrl_rx), observer)?;
    let (end, server_result) = await_results(&mut run, &ctrl_rx, cfg.results_timeout, observer)?;
    let (client, send_latency) = client_result(
        &cfg.settings,
        &ran.sent,
        &infos,
        (end, run.client_data_received()),
        ran.cpu,
        ran.intervals,
    );
    send_client_results(&control_sock, &mut run, &client, cfg.control_timeout);
    drop(control_sock);
    Ok(ClientOutcome {
        test_id: format!("{session:016x}"),
        client,
        server: server_result,
        interrupted: ran.interrupted,
        send_latency,
    })
}

/// The configuration a run goes by, and the server's address: the settings checked,
/// their datagram sized for the server's address family, and prepared for the transport
/// (which fails at once when this host lacks what the transport needs, e.g. RDMA).
fn prepare(cfg: &ClientConfig) -> Result<(ClientConfig, SocketAddr)> {
    cfg.settings.validate()?;
    let server = resolve(&cfg.host, cfg.port, cfg.family)?;
    let mut settings = cfg.settings.clone();
    if cfg.datagram_for_family && server.is_ipv6() {
        settings.pktsize = crate::settings::UDP_DATAGRAM_IPV6;
    }
    let cfg = ClientConfig {
        settings: Settings {
            transport: transport::prepare(&settings.transport)?,
            ..settings
        },
        ..cfg.clone()
    };
    Ok((cfg, server))
}

/// Opens the control session on `sock` up to the server's `Ready`: the channel, the
/// session, and the session id data connections must present.
fn open_control(
    sock: std::net::TcpStream,
    cfg: &ClientConfig,
    server: SocketAddr,
) -> Result<(Channel, ClientSession, u64)> {
    let mut chan = Channel::new(sock, cfg.control_timeout)?;
    let auth = match &cfg.auth {
        Some(key) => Some((key.clone(), auth::nonce()?)),
        None => None,
    };
    let mut control = ClientSession::new(cfg.settings.clone(), auth);
    let session = open_session(&mut chan, &mut control, server, cfg.control_timeout)?;
    Ok((chan, control, session))
}

/// What the transport needs to connect the data streams of `session`.
fn client_ctx(
    cfg: &ClientConfig,
    session: u64,
    server: SocketAddr,
    abort: &Arc<AtomicBool>,
) -> ClientCtx {
    ClientCtx {
        plan: cfg.settings.stream_plan(),
        frames: &crate::control::ControlFrames,
        session,
        server,
        bind: cfg.bind,
        cport: cfg.cport,
        bind_device: cfg.bind_device.clone(),
        setup_timeout: cfg.control_timeout,
        stall_timeout: cfg.stall_timeout,
        abort: abort.clone(),
    }
}

/// One of the server's messages during a run, as the control reader read it, and when.
type ServerWord = (Instant, Result<Message, ControlError>);

/// Hands the control connection to a reader thread, which passes the server's messages
/// on until its last word: the server may send interval figures at any time and must
/// never block on a client busy sending. Returns the connection, shut down when
/// dropped, and the messages.
fn start_control_reader(
    chan: Channel,
    timeout: Duration,
) -> Result<(ShutdownOnDrop, mpsc::Receiver<ServerWord>)> {
    let control_sock = ShutdownOnDrop(chan.into_socket());
    let mut reader = Channel::new(control_sock.0.try_clone()?, timeout)?;
    // Bounded: a server that sends faster than this end takes its messages waits, held
    // back by TCP, instead of filling this end's memory.
    let (ctrl_tx, ctrl_rx) = mpsc::sync_channel::<ServerWord>(CONTROL_QUEUE);
    std::thread::Builder::new()
        .name("fperf-control".into())
        .spawn(move || loop {
            let msg = reader.recv(CONTROL_READ_LIMIT);
            let more = ClientSession::more_follows(&msg);
            if ctrl_tx.send((Instant::now(), msg)).is_err() || !more {
                return;
            }
        })?;
    Ok((control_sock, ctrl_rx))
}

/// What the client's streams moved, once every one ended.
struct Ran {
    sent: Vec<Moved>,
    /// The run was cut short by the abort flag.
    interrupted: bool,
    intervals: Vec<IntervalResult>,
    cpu: Option<CpuUsage>,
}

/// The data phase: one thread per stream, the client's intervals and the server's
/// messages passed on as they come, until every stream ended.
fn run_streams(
    cfg: &ClientConfig,
    streams: Vec<Box<dyn crate::transport::stream::Stream>>,
    abort: &Arc<AtomicBool>,
    (run, ctrl_rx): (&mut ClientRun, &mpsc::Receiver<ServerWord>),
    observer: &mut dyn RunObserver,
) -> Result<Ran> {
    let settings = &cfg.settings;
    let start = run.started();
    let cpu_start = CpuUsage::now();
    let schedule = Schedule::new(settings, start);
    let (meter_tx, meter_rx) = crate::interval::meter_channel(streams.len());
    let mut collector = Collector::new(start, streams.len(), cpu_start, settings);
    // Each stream's bytes so far, sent or received (no rate cap here).
    let watch = Arc::new(TestWatch::new(streams.len(), None, abort.clone()));
    let meters = (schedule, &meter_tx);
    let workers = start_streams(
        settings,
        streams,
        meters,
        (abort, &watch),
        cfg.stall_timeout,
        true,
    )?;
    observer.started(&watch);
    drop(meter_tx);
    let mut intervals = Vec::new();
    let words = (&mut *run, ctrl_rx);
    pass_on_while_running(
        meter_rx,
        &mut collector,
        &mut intervals,
        words,
        abort,
        observer,
    );
    // A server that misbehaved ended the run at once: its streams' figures mean nothing.
    if let Some(e) = run.take_misbehaviour() {
        for w in workers {
            let _ = w.join();
        }
        return Err(e.into());
    }
    for r in collector.flush() {
        observer.interval(Role::Client, &r);
        intervals.push(r);
    }
    let (sent, interrupted) = join_streams(workers, run, ctrl_rx, cfg.stall_timeout)?;
    let cpu = CpuUsage::now().zip(cpu_start).map(|(n, s)| n.since(s));
    Ok(Ran {
        sent,
        interrupted,
        intervals,
        cpu,
    })
}

/// Passes the client's intervals (kept in `intervals`) and the server's messages on
/// while the streams run, until every stream ended (and dropped its meter); a server
/// that misbehaved stops them at once.
fn pass_on_while_running(
    meter_rx: mpsc::Receiver<crate::interval::MeterMsg>,
    collector: &mut Collector,
    intervals: &mut Vec<IntervalResult>,
    (run, ctrl_rx): (&mut ClientRun, &mpsc::Receiver<ServerWord>),
    abort: &AtomicBool,
    observer: &mut dyn RunObserver,
) {
    loop {
        let msgs = match meter_rx.recv_timeout(CONTROL_POLL) {
            Ok(msg) => collector.push(msg),
            Err(mpsc::RecvTimeoutError::Timeout) => Vec::new(),
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        for r in msgs {
            observer.interval(Role::Client, &r);
            intervals.push(r);
        }
        while let Ok(word) = ctrl_rx.try_recv() {
            pass_on(run, word, observer);
        }
        if run.server_misbehaved() {
            abort.store(true, Ordering::Relaxed);
        }
    }
}

/// Takes one of the server's messages into the run, passing its interval on.
fn pass_on(run: &mut ClientRun, (at, msg): ServerWord, observer: &mut dyn RunObserver) {
    if let Some(interval) = run.take(at, msg) {
        observer.interval(Role::Server, interval);
    }
}

/// What each stream moved, and whether any was cut short; a stream that failed fails
/// the run, with the server's own reason if it gives one in time.
fn join_streams(
    workers: Vec<StreamThread>,
    run: &mut ClientRun,
    ctrl_rx: &mpsc::Receiver<ServerWord>,
    stall: Duration,
) -> Result<(Vec<Moved>, bool)> {
    let mut sent = Vec::with_capacity(workers.len());
    let mut interrupted = false;
    let mut failure = None;
    for (i, w) in workers.into_iter().enumerate() {
        match w.join() {
            Ok(Ok(moved)) => {
                interrupted |= moved.interrupted;
                sent.push(moved);
            }
            Ok(Err(e)) => {
                failure.get_or_insert((i, e));
            }
            Err(_) => bail!("stream {i}: its thread panicked"),
        }
    }
    let Some((i, e)) = failure else {
        return Ok((sent, interrupted));
    };
    // The server may have said why (e.g. a limit): the control reader passes it on,
    // perhaps already while the streams were still running.
    let give_up = Instant::now() + SERVER_REASON_WITHIN;
    let reason = run.take_servers_reason().or_else(|| loop {
        let left = give_up.saturating_duration_since(Instant::now());
        match ctrl_rx.recv_timeout(left) {
            Ok((_, Err(ControlError::Peer(msg)))) => break Some(msg),
            Ok((_, msg)) if ClientSession::more_follows(&msg) => continue,
            _ => break None,
        }
    });
    Err(lost_server(reason, i, &e, stall))
}

/// Waits up to `within` for the server's figures of the test (with its intervals), and
/// when they came.
fn await_results(
    run: &mut ClientRun,
    ctrl_rx: &mpsc::Receiver<ServerWord>,
    within: Duration,
    observer: &mut dyn RunObserver,
) -> Result<(Instant, SideResult)> {
    let give_up = Instant::now() + within;
    while !run.has_last_word() {
        let left = give_up.saturating_duration_since(Instant::now());
        match ctrl_rx.recv_timeout(left) {
            Ok(word) => pass_on(run, word, observer),
            Err(_) => break,
        }
    }
    Ok(run.results(within)?)
}

/// Answers the server's figures with the client's own, for its report. A server gone
/// by now misses nothing else.
fn send_client_results(
    control_sock: &ShutdownOnDrop,
    run: &mut ClientRun,
    client: &SideResult,
    timeout: Duration,
) {
    let answer = run.answer(client);
    if let Ok(mut chan) = control_sock
        .0
        .try_clone()
        .and_then(|s| Channel::new(s, timeout))
    {
        for msg in answer {
            let _ = chan.send(&msg);
        }
    }
}

/// The thread that drives one stream of the client's.
pub(crate) type StreamThread = std::thread::JoinHandle<io::Result<Moved>>;

/// One thread per stream, sending or receiving as the client does on it, each
/// reporting its intervals to `meters` and receiving with `watch`; a receiver gives up
/// after `stall` without data, and with `held_to_announced` a size-bounded one fails
/// on more bytes than the settings announce.
pub(crate) fn start_streams(
    settings: &Settings,
    streams: Vec<Box<dyn crate::transport::stream::Stream>>,
    meters: (Schedule, &mpsc::SyncSender<crate::interval::MeterMsg>),
    (abort, watch): (&Arc<AtomicBool>, &Arc<TestWatch>),
    stall: Duration,
    held_to_announced: bool,
) -> io::Result<Vec<StreamThread>> {
    let (schedule, meter_tx) = meters;
    streams
        .into_iter()
        .enumerate()
        .map(|(i, mut stream)| {
            let settings = settings.clone();
            let meter = Meter::new(i as u32, schedule, Some(meter_tx.clone()));
            let cpu = cpu_for(&settings.client_cpus, i as u32);
            let (abort, watch) = (abort.clone(), watch.clone());
            let sending = Role::Client.sends_on(&settings, i as u32);
            std::thread::Builder::new()
                .name(format!(
                    "fperf-{}-{i}",
                    if sending { "send" } else { "recv" }
                ))
                .spawn(move || {
                    place_current_thread(cpu, settings.batch_threads())?;
                    if sending {
                        let progress = (&*watch, i);
                        drive(
                            &mut *stream,
                            &settings,
                            meter,
                            &abort,
                            progress,
                            Role::Client,
                            None,
                        )
                        .map(Moved::from)
                    } else {
                        let pkt = settings.pktsize as usize;
                        let ceiling = settings
                            .byte_limit()
                            .filter(|_| held_to_announced)
                            .map(|b| Ceiling::new(&settings, b));
                        receive(stream, pkt, ceiling, stall, meter, (&watch, i)).map(Moved::from)
                    }
                })
        })
        .collect()
}

/// What the report header says of each connected stream.
pub(crate) fn stream_infos(
    streams: &[Box<dyn crate::transport::stream::Stream>],
) -> Vec<StreamInfo> {
    streams
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let facts = s.facts();
            StreamInfo {
                index: i as u32,
                local: s.local_addr(),
                peer: s.peer_addr(),
                in_force: facts.in_force,
                buffers: facts.buffers,
            }
        })
        .collect()
}

/// The client's figures: each stream over its span (a sending stream's ends when the
/// server confirmed its data, `confirmed.1`, or else at `confirmed.0`, the server's
/// last word; or at its last send, where that ends its time: see [`sending_end`]), and
/// with them the send latency over all streams (for `--plot`).
pub(crate) fn client_result(
    settings: &Settings,
    moved: &[Moved],
    infos: &[StreamInfo],
    confirmed: (Instant, Option<Instant>),
    cpu: Option<CpuUsage>,
    intervals: Vec<IntervalResult>,
) -> (SideResult, LatencyStats) {
    let (end, data_received) = confirmed;
    let mut totals = SideTotals::new(settings.first_server_stream());
    let streams = moved
        .iter()
        .zip(infos)
        .map(|(m, info)| {
            let (from, to) = m.span.unwrap_or((end, end));
            let (to, drain) = if Role::Client.sends_on(settings, info.index) {
                sending_end(m.handed_over, data_received.unwrap_or(end))
            } else {
                (to, None)
            };
            totals.add(info.index, &m.stats, &m.transport, Some((from, to)));
            if let Some(d) = drain {
                totals.add_drain(info.index, d);
            }
            let mut figures = Figures::new(
                &m.stats,
                to.saturating_duration_since(from),
                &settings.percentiles,
            );
            figures.transport.merge(&m.transport);
            figures.drain_ns = drain.map(nanos);
            StreamResult {
                index: info.index,
                local: info.local.clone(),
                peer: info.peer.clone(),
                in_force: (m.in_force.clone()).unwrap_or_else(|| info.in_force.sending()),
                figures,
            }
        })
        .collect();
    let (total, reverse_total) = totals.figures(&settings.percentiles);
    let client = SideResult {
        role: Role::Client,
        total,
        reverse_total,
        streams,
        system: Some(SystemFacts::collect()),
        cpu,
        intervals,
    };
    (client, totals.client_data_send_latency().clone())
}

/// One run's stop flag, set when the caller's abort flag is (polled by a small thread
/// while the run lasts) or by the run itself.
struct RunStop {
    flag: Arc<AtomicBool>,
    ended: Arc<AtomicBool>,
}

impl RunStop {
    /// How soon the caller's abort reaches the run.
    const POLL: Duration = Duration::from_millis(20);

    fn linked_to(abort: Arc<AtomicBool>) -> io::Result<RunStop> {
        let flag = Arc::new(AtomicBool::new(abort.load(Ordering::Relaxed)));
        let ended = Arc::new(AtomicBool::new(false));
        let (f, e) = (flag.clone(), ended.clone());
        std::thread::Builder::new()
            .name("fperf-abort".into())
            .spawn(move || {
                while !e.load(Ordering::Relaxed) {
                    if abort.load(Ordering::Relaxed) {
                        f.store(true, Ordering::Relaxed);
                        return;
                    }
                    std::thread::sleep(Self::POLL);
                }
            })?;
        Ok(RunStop { flag, ended })
    }
}

impl Drop for RunStop {
    fn drop(&mut self) {
        self.ended.store(true, Ordering::Relaxed);
    }
}

struct ShutdownOnDrop(std::net::TcpStream);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

/// Drives the session from `Hello` to the server's `Ready`: sends what it queues,
/// feeds it the server's answers, and tells the server why when it gives up. Returns
/// the session id data connections must present.
fn open_session(
    chan: &mut Channel,
    session: &mut ClientSession,
    server: SocketAddr,
    timeout: Duration,
) -> Result<u64> {
    let mut first = true;
    loop {
        for msg in session.take_outbox() {
            chan.send(&msg)?;
        }
        if std::mem::take(&mut first) {
            answers_as_fperf(chan, server, timeout)?;
        }
        let msg = chan.recv_message(timeout)?;
        match session.on_message(msg) {
            Ok(ClientStep::Connect { session }) => return Ok(session),
            Ok(_) => {}
            Err(e) => {
                if let Some(why) = e.to_peer() {
                    chan.send_error(&why);
                }
                return Err(e.into());
            }
        }
    }
}

/// Tells another program's answer to the client's first message apart from an fperf
/// server's, whose frames begin with their length's high byte, always 0. An iperf3
/// server takes that message's first bytes for its cookie and answers with one state
/// byte; one that waits for more sends nothing.
fn answers_as_fperf(chan: &Channel, server: SocketAddr, timeout: Duration) -> Result<()> {
    match chan.peek_byte(timeout) {
        // Closed: the next read says so.
        Ok(Some(0) | None) => Ok(()),
        Ok(Some(byte)) if crate::iperf3::wire::opens_a_servers_answer(byte) => bail!(
            "the server at {server} is an iperf3 server (its answer says so): add --iperf3 \
             to run against it"
        ),
        Ok(Some(_)) => bail!(
            "the server at {server} does not speak fperf's protocol (another program on \
             that port?)"
        ),
        Err(ControlError::Timeout) => bail!(
            "the server at {server} took the connection but did not answer within {} s: is \
             it fperf -s? (against an iperf3 server, add --iperf3)",
            timeout.as_secs()
        ),
        Err(e) => Err(e.into()),
    }
}

/// The error for a stream that failed mid-test: the server's own reason if it sent one
/// (e.g. a limit), else what the failure says about the server or the network.
fn lost_server(reason: Option<String>, i: usize, e: &io::Error, stall: Duration) -> anyhow::Error {
    if let Some(msg) = reason {
        return anyhow!("{msg}");
    }
    let unreachable = matches!(
        e.raw_os_error(),
        Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ENETDOWN)
    );
    let why = match e.kind() {
        _ if unreachable => format!(
            "no acknowledgement from the server for {}s: the server or the network is gone",
            stall.as_secs_f64()
        ),
        // A time-out the stream measured itself names its own wait (UDP's ACKs); a bare
        // one is the kernel's, the stall time (TCP_USER_TIMEOUT).
        io::ErrorKind::TimedOut if e.get_ref().is_some() => {
            "the server stopped answering: the server or the network is gone".to_string()
        }
        io::ErrorKind::TimedOut => format!(
            "no acknowledgement from the server for {}s: the server or the network is gone",
            stall.as_secs_f64()
        ),
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionAborted => {
            "the server closed the connection mid-test (it stopped or was killed)".to_string()
        }
        _ => "the test failed mid-way".to_string(),
    };
    anyhow!("{why} (stream {i}: {e})")
}

/// What one stream's thread moved, sending or (`--reverse`) receiving.
pub(crate) struct Moved {
    /// When its counted figures begin and end: a sending stream's end is the server's
    /// confirmation, known only once every stream is done.
    pub(crate) span: Option<(Instant, Instant)>,
    pub(crate) stats: StreamStats,
    pub(crate) transport: TransportFigures,
    /// A receiving stream's sockets' settings, as the kernel reports them; `None` for
    /// a sending stream.
    in_force: Option<TransportInForce>,
    pub(crate) interrupted: bool,
    /// A sending stream's hand-over (see [`Driven::handed_over`]).
    pub(crate) handed_over: Option<Instant>,
    /// Datagrams of the warm-up ([`crate::interval::Totals::warm_up`]).
    pub(crate) warm_up: DatagramCounts,
}

impl From<Driven> for Moved {
    fn from(d: Driven) -> Moved {
        Moved {
            span: Some((d.start, d.start)),
            stats: d.stats,
            transport: d.transport,
            in_force: None,
            interrupted: d.interrupted,
            handed_over: d.handed_over,
            warm_up: d.warm_up,
        }
    }
}

impl From<Received> for Moved {
    fn from(r: Received) -> Moved {
        Moved {
            span: r.span,
            stats: r.stats,
            transport: r.transport,
            in_force: Some(r.in_force),
            interrupted: r.interrupted,
            handed_over: None,
            warm_up: r.warm_up,
        }
    }
}

/// Opens the control connection to the `kind` (fperf or iperf3) server at `server`,
/// within the configuration's `--connect-timeout`, with its `--cntl-ka`.
pub(crate) fn connect_control(
    cfg: &ClientConfig,
    server: SocketAddr,
    kind: &str,
) -> Result<std::net::TcpStream> {
    let from = LocalEnd {
        ip: cfg.bind,
        port: None,
        device: cfg.bind_device.as_deref(),
    };
    let sock = connect(server, from, None, cfg.connect_timeout).map_err(|e| match e.kind() {
        io::ErrorKind::TimedOut => anyhow!(
            "the {kind} server at {server} did not answer within {} ms (--connect-timeout)",
            cfg.connect_timeout.as_millis()
        ),
        _ => anyhow!(e).context(format!("cannot connect to the {kind} server at {server}")),
    })?;
    if let Some(keepalive) = cfg.control_keepalive {
        keepalive
            .apply(&sock)
            .context("cannot turn on the control connection's keepalive (--cntl-ka)")?;
    }
    Ok(sock)
}

/// Asks the server for its system facts (`--conf`) without running a test.
pub fn conf(cfg: &ClientConfig) -> Result<SystemFacts> {
    let server = resolve(&cfg.host, cfg.port, cfg.family)?;
    let sock = connect_control(cfg, server, "fperf")?;
    let mut chan = Channel::new(sock, cfg.control_timeout)?;
    chan.send(&Message::Conf {
        version: PROTOCOL_MAJOR,
    })?;
    answers_as_fperf(&chan, server, cfg.control_timeout)?;
    match chan.recv(cfg.control_timeout)? {
        Message::Facts { facts } => Ok(facts),
        other => Err(ControlError::unexpected("facts", &other).into()),
    }
}

/// An open probe session (`--under-load`'s latency probes): the server echoes probes
/// sent to `echo` that carry `token`, as long as `control` stays open.
pub struct ProbeSession {
    /// Held open: closing it ends the server's echo.
    pub control: Channel,
    /// Where the probes go: the server's address, the echo's UDP port.
    pub echo: SocketAddr,
    pub token: u64,
    /// This end's address on the control connection (the probes' source).
    pub local: SocketAddr,
}

/// Opens a probe session with the server of `cfg` for `seconds` of echo (refused before
/// any probe goes by a server that lacks the feature).
pub fn probe_echo(cfg: &ClientConfig, seconds: u32) -> Result<ProbeSession> {
    let server = resolve(&cfg.host, cfg.port, cfg.family)?;
    let sock = connect_control(cfg, server, "fperf")?;
    let local = sock.local_addr()?;
    let mut chan = Channel::new(sock, cfg.control_timeout)?;
    let auth = match &cfg.auth {
        Some(key) => Some((key.clone(), auth::nonce()?)),
        None => None,
    };
    let mut session = ClientSession::probe_echo(seconds, auth);
    let mut first = true;
    loop {
        for msg in session.take_outbox() {
            chan.send(&msg)?;
        }
        if std::mem::take(&mut first) {
            answers_as_fperf(&chan, server, cfg.control_timeout)?;
        }
        let msg = chan.recv_message(cfg.control_timeout)?;
        match session.on_message(msg) {
            Ok(ClientStep::ProbeEchoing { port, token }) => {
                return Ok(ProbeSession {
                    control: chan,
                    echo: SocketAddr::new(server.ip(), port),
                    token,
                    local,
                })
            }
            Ok(_) => {}
            Err(e) => {
                if let Some(why) = e.to_peer() {
                    chan.send_error(&why);
                }
                return Err(e.into());
            }
        }
    }
}

/// As a mesh coordinator: asks the server of `cfg` to run `cfg.settings` as a client
/// towards the fperf server at `peer` (`HOST:PORT`), and returns both ends' figures
/// (the asked server's, then its peer's). `wait` bounds the wait for them.
pub fn mesh_test(
    cfg: &ClientConfig,
    peer: &str,
    wait: Duration,
) -> Result<(SideResult, SideResult)> {
    let session = ClientSession::mesh(peer.to_owned(), cfg.settings.clone(), mesh_auth(cfg)?);
    match mesh_exchange(cfg, session, wait)? {
        ClientStep::MeshResult { client, server } => Ok((*client, *server)),
        other => bail!("unexpected step of a mesh test: {other:?}"),
    }
}

/// As a mesh coordinator: asks the server of `cfg` to run `plan`'s phases of latency
/// under load as the client towards the fperf server at `peer` (`HOST:PORT`), each
/// loaded phase's test with `cfg.settings`' options, and returns each phase's figures.
/// `wait` bounds the wait for them.
pub fn mesh_under_load(
    cfg: &ClientConfig,
    peer: &str,
    plan: &PhasePlan,
    wait: Duration,
) -> Result<Vec<PhaseReport>> {
    let session = ClientSession::mesh_under_load(
        peer.to_owned(),
        cfg.settings.clone(),
        plan.clone(),
        mesh_auth(cfg)?,
    );
    match mesh_exchange(cfg, session, wait)? {
        ClientStep::MeshUnderLoadResult { phases } => Ok(phases),
        other => bail!("unexpected step of a mesh test: {other:?}"),
    }
}

/// The key `cfg` proves, with a fresh nonce.
fn mesh_auth(cfg: &ClientConfig) -> Result<Option<(AuthKey, [u8; auth::NONCE_LEN])>> {
    Ok(match &cfg.auth {
        Some(key) => Some((key.clone(), auth::nonce()?)),
        None => None,
    })
}

/// Drives a mesh coordinator's `session` with the server of `cfg` to its last step:
/// the figures asked for, waited for at most `wait` once asked.
fn mesh_exchange(
    cfg: &ClientConfig,
    mut session: ClientSession,
    wait: Duration,
) -> Result<ClientStep> {
    let server = resolve(&cfg.host, cfg.port, cfg.family)?;
    let sock = connect_control(cfg, server, "fperf")?;
    let mut chan = Channel::new(sock, cfg.control_timeout)?;
    let mut timeout = cfg.control_timeout;
    let mut first = true;
    loop {
        for msg in session.take_outbox() {
            chan.send(&msg)?;
            if matches!(
                msg,
                Message::MeshTest { .. } | Message::MeshUnderLoad { .. }
            ) {
                timeout = wait;
            }
        }
        if std::mem::take(&mut first) {
            answers_as_fperf(&chan, server, timeout)?;
        }
        let msg = chan.recv_message(timeout)?;
        match session.on_message(msg) {
            Ok(step @ (ClientStep::MeshResult { .. } | ClientStep::MeshUnderLoadResult { .. })) => {
                return Ok(step)
            }
            Ok(_) => {}
            Err(e) => {
                if let Some(why) = e.to_peer() {
                    chan.send_error(&why);
                }
                return Err(e.into());
            }
        }
    }
}

/// `host` and `port` as `HOST:PORT`, an IPv6 address in brackets: what
/// [`split_host_port`] reads.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `HOST`, `HOST:PORT`, `[IPv6]:PORT` or a bare IPv6 address, as host and port if
/// given (the targets of `fperf exporter` and the hosts of `fperf mesh`).
pub fn split_host_port(target: &str) -> Result<(String, Option<u16>), String> {
    let bad = || format!("target must be HOST, HOST:PORT or [IPv6]:PORT, not {target:?}");
    let (host, port) = if let Some(rest) = target.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match target.split_once(':') {
            Some((host, port)) if !port.contains(':') => (host, Some(port)),
            _ => (target, None),
        }
    };
    let port = match port {
        None => None,
        Some(text) => Some(
            text.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(bad)?,
        ),
    };
    let plausible = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_' | '%');
    if host.is_empty() || host.len() > 253 || !host.chars().all(plausible) {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}

/// The server's address: `host` itself, or the first address of `family` its name has.
pub(crate) fn resolve(host: &str, port: u16, family: IpFamily) -> Result<SocketAddr> {
    // A bare IPv6 literal ("::1") needs no brackets on the command line.
    if let Ok(ip) = host.parse::<IpAddr>() {
        family
            .check("the server's address", ip)
            .map_err(|e| anyhow!(e))?;
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve server name '{host}'"))?
        .find(|a| family.admits(a.ip()))
        .ok_or_else(|| match family.flag() {
            Some((flag, name)) => anyhow!("server name '{host}' has no {name} address ({flag})"),
            None => anyhow!("server name '{host}' has no address"),
        })
}
