//! An fperf server's iperf3 port: unmodified iperf3 clients run their TCP tests against
//! fperf's STREAMs, data loops, limits and reports.
//!
//! A connection on the iperf3 port opens with a cookie. A cookie of a test that is
//! setting up its streams makes it one of that test's data connections, routed through
//! the same registry as fperf's own; any other cookie opens a test, or is told "busy"
//! (iperf3's `ACCESS_DENIED`) while the server runs as many as it allows. A test then
//! goes as iperf3's protocol has it: parameters, streams, start, the client's
//! `TEST_END`, the results exchange (the client's figures, then the server's), done.

use crate::control::session::IDENTIFY_WITHIN;
use crate::engine::{drive, receive, Received, StreamNames};
use crate::interval::Meter;
use crate::iperf3::params::{self, Iperf3Test};
use crate::iperf3::results::{self, StreamFigures};
use crate::iperf3::udp;
use crate::iperf3::wire::{self, Cookie, ErrorCode, State, COOKIE_LEN};
use crate::limits::{LimitError, StopReason, TestWatch, Watchdog};
use crate::pending::PendingSlot;
use crate::results::SideResult;
use crate::server::config::{ServerConfig, ServerEvent};
use crate::server::events::EventSender;
use crate::server::figures::{close_session, server_result};
use crate::sessions::{SessionGuard, Sessions};
use crate::settings::Settings;
use crate::transport::settings::Protocol;
use crate::transport::stream::Stream;
use crate::transport::DataConn;
use crate::transport::Role;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the session looks at the control connection and the watchdog while data
/// flows.
const TICK: Duration = Duration::from_millis(20);

/// Reads the cookie of a new connection on the iperf3 port and acts on it. `pending`
/// counts the connection as unidentified until its cookie is read.
pub(crate) fn greet(
    mut sock: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    pending: PendingSlot,
    active: &Arc<Sessions>,
    events: &EventSender,
    config: &ServerConfig,
) {
    let client_error = |error: String| {
        events.client_error(
            crate::stream::canonical(peer).to_string(),
            format!("iperf3 client: {error}"),
        );
    };
    let mut bytes = [0u8; COOKIE_LEN];
    let deadline = Instant::now() + IDENTIFY_WITHIN;
    if let Err(e) = wire::read_exact_by(&mut sock, &mut bytes, deadline) {
        return client_error(format!("no cookie within {IDENTIFY_WITHIN:?}: {e}"));
    }
    let Some(cookie) = Cookie::parse(bytes) else {
        return client_error("the connection did not open with an iperf3 cookie".into());
    };
    let id = cookie.session_id();
    if active.knows(id) {
        let conn = DataConn {
            stream: 0,
            socket: 0,
            sock,
            accepted,
        };
        if let Err((why, mut conn)) = active.deliver(id, conn) {
            // As iperf3 answers a data connection it does not expect.
            let _ = wire::write_state(&mut conn.sock, State::AccessDenied);
            client_error(why.into());
        }
        return;
    }
    drop(pending);
    let (tx, rx) = mpsc::channel();
    let registered = match active.open(id, tx) {
        Ok(guard) => guard,
        Err(busy) => {
            let _ = wire::write_state(&mut sock, State::AccessDenied);
            return client_error(format!("refused: {busy}"));
        }
    };
    registered.client_at(peer.ip());
    // Dropped last, once everything of the test was sent.
    let _ended = active.end_mark();
    let outcome = run_test(&mut sock, peer, &registered, rx, config, events);
    if let Err(e) = &outcome {
        client_error(format!("{e:#}"));
    }
    close_session(registered, events);
    if outcome.is_ok() {
        // The client says it is done, or closes; either way the test is over.
        let mut done = [0u8; 1];
        let _ = wire::read_exact_by(
            &mut sock,
            &mut done,
            Instant::now() + config.control_timeout,
        );
    }
}

/// Tells a connection beyond the pending caps that the server is busy, as iperf3 does,
/// without ever blocking the accept loop.
pub(crate) fn refuse_flood(mut sock: TcpStream) {
    if sock.set_nonblocking(true).is_ok() {
        let _ = wire::write_state(&mut sock, State::AccessDenied);
    }
}

/// The iperf3 error code and errno that tell an iperf3 client why a limit refused its
/// test.
fn limit_code(e: &LimitError) -> (ErrorCode, i32) {
    match e {
        LimitError::Streams { .. } | LimitError::Sockets { .. } => (ErrorCode::NumStreams, 0),
        LimitError::Time { .. } => (ErrorCode::Duration, 0),
        LimitError::Rate { .. } => (ErrorCode::TotalRate, 0),
        LimitError::Mb { .. } => (ErrorCode::RecvParams, libc::EFBIG),
        LimitError::Memory { .. } => (ErrorCode::RecvParams, libc::ENOMEM),
    }
}

/// Tells the client why its test failed (as far as iperf3's codes can), and returns
/// the server's own reason.
fn refuse(sock: &mut TcpStream, code: ErrorCode, errno: i32, why: anyhow::Error) -> anyhow::Error {
    let _ = wire::write_error(sock, code, errno);
    why
}

/// Runs one iperf3 test on its control connection, up to and including
/// `DISPLAY_RESULTS`.
fn run_test(
    sock: &mut TcpStream,
    peer: SocketAddr,
    registered: &SessionGuard,
    routed: Receiver<DataConn>,
    config: &ServerConfig,
    events: &EventSender,
) -> Result<()> {
    sock.set_nodelay(true)?;
    if let Some(keepalive) = config.control_keepalive {
        keepalive.apply(sock)?;
    }
    wire::write_state(sock, State::ParamExchange)?;
    let deadline = Instant::now() + config.control_timeout;
    let params = match wire::read_json(sock, wire::MAX_PARAMS_BYTES, deadline) {
        Ok(p) => p,
        Err(wire::MessageError::Io(e)) => return Err(anyhow!("reading its parameters: {e}")),
        Err(e) => {
            let why = anyhow!("its parameters: {e}");
            return Err(refuse(sock, ErrorCode::RecvParams, libc::EINVAL, why));
        }
    };
    let test =
        params::parse(&params).map_err(|e| refuse(sock, e.code(), libc::EINVAL, anyhow!("{e}")))?;
    if let Err(e) = config.limits.check(&test.announced) {
        let (code, errno) = limit_code(&e);
        return Err(refuse(sock, code, errno, anyhow!("{e}")));
    }
    let abort = Arc::new(AtomicBool::new(false));
    let streams = match test.run.protocol() {
        Protocol::Udp => {
            let streams = udp_streams(sock, peer, &test, registered, &abort, config)?;
            // A UDP test takes no connections: any with its cookie closes at once.
            registered.streams_connected_from(&routed);
            streams
        }
        _ => {
            wire::write_state(sock, State::CreateStreams)?;
            let conns = collect_streams(&routed, test.run.nstreams, config.control_timeout)
                .map_err(|e| refuse(sock, ErrorCode::StreamAccept, libc::ETIMEDOUT, e))?;
            // Connections with the test's cookie beyond its streams close at once.
            registered.streams_connected_from(&routed);
            crate::transport::tcp::streams_over(
                &test.run.stream_plan(),
                Role::Server,
                conns,
                abort.clone(),
            )
            .map_err(|e| refuse(sock, ErrorCode::SetCongestion, 0, e))?
        }
    };
    let from = format!(
        "{} (iperf3 {} client)",
        streams
            .first()
            .map_or_else(|| peer.to_string(), |s| s.peer_addr()),
        test.client_version.as_deref().unwrap_or("?")
    );
    let parallel = registered.sessions().parallel() > 1;
    let facts = streams.first().map(|s| s.facts()).unwrap_or_default();
    let started = ServerEvent::Started {
        settings: test.announced.clone(),
        from,
        in_force: facts.in_force,
    };
    // With tests in parallel, each report is sent in one piece at the end.
    let started = if parallel {
        Some(started)
    } else {
        events.report(started);
        None
    };
    let cpu_start = crate::sysinfo::CpuUsage::now();
    let start = Instant::now();
    let watch = Arc::new(TestWatch::new(
        streams.len(),
        config.limits.max_rate,
        abort.clone(),
    ));
    let budget = Arc::new(AtomicU64::new(test.volume.unwrap_or(u64::MAX)));
    let workers = start_workers(
        &test.run,
        streams,
        (&watch, &abort),
        test.volume.map(|_| budget),
        config.idle_timeout,
    )?;
    wire::write_state(sock, State::TestStart)?;
    wire::write_state(sock, State::TestRunning)?;
    let ended = wait_for_end(sock, &watch, &workers, config);
    let ended_at = Instant::now();
    abort.store(true, Ordering::Relaxed);
    let per_stream = join(workers);
    let wall = start.elapsed();
    let (ended, per_stream) = match (ended, per_stream) {
        (Ok(ended), Ok(per_stream)) => (ended, per_stream),
        (Err(stop), _) => {
            let code = match stop {
                Stop::Watchdog(StopReason::MaxTime(_)) => ErrorCode::Duration,
                _ => ErrorCode::StreamAccept,
            };
            return Err(refuse(sock, code, 0, anyhow!("{stop}")));
        }
        (Ok(_), Err(e)) => return Err(refuse(sock, ErrorCode::StreamAccept, libc::EIO, e)),
    };
    if ended == Ended::ClientTerminated {
        report(
            events,
            registered,
            started,
            &test,
            &side_result(&test.run, &per_stream, cpu_start),
        );
        bail!("the client stopped the test (Ctrl-C); the figures above cover what it moved");
    }
    wire::write_state(sock, State::ExchangeResults)?;
    let deadline = Instant::now() + config.control_timeout;
    let theirs = wire::read_json(sock, wire::MAX_RESULTS_BYTES, deadline)
        .map_err(|e| anyhow!("reading its results: {e}"))?;
    let mut per_stream = per_stream;
    if test.run.protocol() == Protocol::Udp {
        let received = per_stream
            .iter_mut()
            .map(|(i, r)| (*i, &mut r.stats, &r.warm_up));
        results::count_losses(&test.run, received, &theirs);
    }
    let result = side_result(&test.run, &per_stream, cpu_start);
    report(events, registered, started, &test, &result);
    let seconds = results::test_seconds(&test.run, start, ended_at);
    wire::write_json(
        sock,
        &results_json(&test.run, &per_stream, &result, (seconds, wall)),
    )?;
    wire::write_state(sock, State::DisplayResults)?;
    Ok(())
}

/// The server's figures of a test, with this host's facts and CPU time since
/// `cpu_start`.
fn side_result(
    settings: &Settings,
    per_stream: &[(u32, Received)],
    cpu_start: Option<crate::sysinfo::CpuUsage>,
) -> SideResult {
    let mut result = server_result(settings, per_stream);
    result.system = Some(crate::sysinfo::SystemFacts::collect());
    result.cpu = crate::sysinfo::CpuUsage::now()
        .zip(cpu_start)
        .map(|(now, then)| now.since(then));
    result
}

/// UDP: binds the iperf3 port for datagrams before the client is told to make its
/// streams, then takes one connect datagram per stream from the client's address. The
/// port is the server's alone while it does, so with `--parallel` the test needs the
/// server to itself.
fn udp_streams(
    sock: &mut TcpStream,
    peer: SocketAddr,
    test: &Iperf3Test,
    registered: &SessionGuard,
    abort: &Arc<AtomicBool>,
    config: &ServerConfig,
) -> Result<Vec<Box<dyn Stream>>> {
    if registered.sessions().parallel() > 1 {
        registered
            .claim_alone()
            .map_err(|e| refuse(sock, ErrorCode::StreamAccept, libc::EBUSY, anyhow!(e)))?;
    }
    let addr = sock.local_addr()?;
    let listener = udp::bind_shared(addr).map_err(|e| {
        refuse(
            sock,
            ErrorCode::StreamListen,
            e.raw_os_error().unwrap_or(0),
            e.into(),
        )
    })?;
    wire::write_state(sock, State::CreateStreams)?;
    let (n, wide, within) = (
        test.run.nstreams,
        test.wide_counters,
        config.control_timeout,
    );
    let streams =
        udp::accept_streams(listener, addr, peer.ip(), n, wide, within, abort).map_err(|e| {
            refuse(
                sock,
                ErrorCode::StreamAccept,
                e.raw_os_error().unwrap_or(0),
                e.into(),
            )
        })?;
    let tos = test.run.transport.sockets().and_then(|s| s.tos);
    for s in &streams {
        s.mark(tos)?;
    }
    if test.run.dont_fragment() {
        for (i, s) in (0..).zip(&streams) {
            // Only this end's own sends can fail: the client checks its own.
            let len = match test.run.server_sends_on(i) {
                true => test.run.pktsize as usize,
                false => 0,
            };
            s.forbid_fragments(len).map_err(|e| {
                // Datagrams too large to go whole fail as iperf3's own sends would.
                let (code, errno) = match e.kind() {
                    io::ErrorKind::InvalidInput => (ErrorCode::StreamWrite, libc::EMSGSIZE),
                    _ => (ErrorCode::SetDontFragment, e.raw_os_error().unwrap_or(0)),
                };
                refuse(sock, code, errno, e.into())
            })?;
        }
    }
    registered.streams_connected();
    Ok(streams
        .into_iter()
        .map(|s| Box::new(s) as Box<dyn Stream>)
        .collect())
}

/// Waits for the test's `nstreams` data connections and puts them in the order they
/// were accepted (iperf3 opens them one after another, a `--bidir` test's sending
/// streams first, as fperf numbers them); their cookies may be read in another order.
fn collect_streams(
    routed: &Receiver<DataConn>,
    nstreams: u32,
    within: Duration,
) -> Result<Vec<TcpStream>> {
    let deadline = Instant::now() + within;
    let mut conns = Vec::with_capacity(nstreams as usize);
    while conns.len() < nstreams as usize {
        let left = deadline.saturating_duration_since(Instant::now());
        match routed.recv_timeout(left) {
            Ok(conn) => conns.push(conn),
            Err(_) => bail!(
                "{} of its {nstreams} data connections arrived within {within:?}",
                conns.len()
            ),
        }
    }
    conns.sort_by_key(|c| c.accepted);
    Ok(conns.into_iter().map(|c| c.sock).collect())
}

type Worker = JoinHandle<io::Result<Received>>;

/// One thread per stream: receiving, or with `-R` and on `--bidir`'s second half
/// sending until the client ends the test, and with `budget` (`-n`, `-k`) no more than
/// its bytes, all sending streams together.
fn start_workers(
    settings: &Settings,
    streams: Vec<Box<dyn Stream>>,
    (watch, abort): (&Arc<TestWatch>, &Arc<AtomicBool>),
    budget: Option<Arc<AtomicU64>>,
    idle: Duration,
) -> Result<Vec<Worker>> {
    let schedule = crate::interval::Schedule::new(settings, Instant::now());
    streams
        .into_iter()
        .enumerate()
        .map(|(i, stream)| {
            let sending = Role::Server.sends_on(settings, i as u32);
            let meter = Meter::new(i as u32, schedule, None);
            let (watch, abort, settings) = (watch.clone(), abort.clone(), settings.clone());
            let budget = budget.clone();
            std::thread::Builder::new()
                .name(format!("fperf-iperf3-{i}"))
                .spawn(move || {
                    crate::stream::affinity::place_current_thread(None, settings.batch_threads())?;
                    if sending {
                        let budget = budget.as_deref();
                        send_until_end(stream, &settings, meter, &abort, (&watch, i), budget)
                    } else {
                        let pkt = settings.pktsize as usize;
                        receive(stream, pkt, None, idle, meter, (&watch, i))
                    }
                })
                .context("cannot start a stream's thread")
        })
        .collect()
}

/// Sends on a stream until the client ends the test (the abort flag), as an iperf3
/// server does with `-R`: the client, not the server, knows when the test is over.
/// With `budget`, the bytes are taken from it (see [`drive`]).
fn send_until_end(
    mut stream: Box<dyn Stream>,
    settings: &Settings,
    meter: Meter,
    abort: &AtomicBool,
    watch: (&TestWatch, usize),
    budget: Option<&AtomicU64>,
) -> io::Result<Received> {
    let names = StreamNames::of(&*stream);
    let driven = drive(
        &mut *stream,
        settings,
        meter,
        abort,
        watch,
        Role::Server,
        budget,
    )?;
    Ok(Received::sent(driven, names, Instant::now()))
}

/// How a running test ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// `TEST_END`: the client's time, bytes or blocks are done.
    TestEnd,
    /// `CLIENT_TERMINATE`: the client was interrupted.
    ClientTerminated,
}

/// Why the server ended a running test.
#[derive(Debug)]
enum Stop {
    Watchdog(StopReason),
    ControlClosed,
    Unexpected(u8),
    StreamsEnded,
    Io(io::Error),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Watchdog(reason) => write!(f, "{reason}"),
            Stop::ControlClosed => write!(f, "the client closed its control connection"),
            Stop::Unexpected(b) => write!(f, "unexpected control message {b} during the test"),
            Stop::StreamsEnded => write!(f, "its data streams ended before the test did"),
            Stop::Io(e) => write!(f, "control connection: {e}"),
        }
    }
}

/// Watches the control connection for the client's end of the test, and the test for
/// the server's limits, until one of them ends it.
fn wait_for_end(
    sock: &mut TcpStream,
    watch: &TestWatch,
    workers: &[Worker],
    config: &ServerConfig,
) -> Result<Ended, Stop> {
    let limits = &config.limits;
    let mut watchdog = Watchdog::new(watch, config.idle_timeout, limits.max_time, limits.max_mb);
    sock.set_read_timeout(Some(TICK)).map_err(Stop::Io)?;
    loop {
        let mut byte = [0u8; 1];
        match sock.read(&mut byte) {
            Ok(0) => return Err(Stop::ControlClosed),
            Ok(_) => {
                return match State::from_byte(byte[0]) {
                    Some(State::TestEnd) => Ok(Ended::TestEnd),
                    Some(State::ClientTerminate) => Ok(Ended::ClientTerminated),
                    _ => Err(Stop::Unexpected(byte[0])),
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Stop::Io(e)),
        }
        if let Some(reason) = watchdog.check() {
            return Err(Stop::Watchdog(reason));
        }
        if workers.iter().all(|w| w.is_finished()) {
            return Err(Stop::StreamsEnded);
        }
    }
}

/// Joins the stream threads: their figures in stream order, or the first failure.
fn join(workers: Vec<Worker>) -> Result<Vec<(u32, Received)>> {
    let mut per_stream = Vec::with_capacity(workers.len());
    let mut failure = None;
    for (i, w) in workers.into_iter().enumerate() {
        match w.join() {
            Ok(Ok(r)) => per_stream.push((i as u32, r)),
            Ok(Err(e)) => {
                failure.get_or_insert(anyhow!("stream {i}: {e}"));
            }
            Err(_) => {
                failure.get_or_insert(anyhow!("stream {i}: its thread panicked"));
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(per_stream),
    }
}

/// Sends the test's report events, in one piece.
fn report(
    events: &EventSender,
    registered: &SessionGuard,
    started: Option<ServerEvent>,
    test: &Iperf3Test,
    result: &SideResult,
) {
    let _in_order = registered.sessions().report_lock();
    if let Some(started) = started {
        events.report(started);
    }
    events.report(ServerEvent::Finished {
        settings: test.announced.clone(),
        result: Box::new(result.clone()),
    });
}

/// The server's half of the results exchange, in iperf3's layout: what the client's
/// receiver lines (and with `-R` its sender lines) come from. `seconds`: the test's
/// ([`results::test_seconds`]); `wall`: the time its CPU use is a share of.
fn results_json(
    settings: &Settings,
    per_stream: &[(u32, Received)],
    result: &SideResult,
    (seconds, wall): (f64, Duration),
) -> Value {
    let streams = per_stream.iter().map(|(i, r)| StreamFigures {
        index: *i,
        sending: settings.server_sends_on(*i),
        stats: &r.stats,
        warm_up: &r.warm_up,
        tcp: r.transport.tcp,
        seconds,
    });
    let congestion = (per_stream.first()).and_then(|(_, r)| r.in_force.tcp.congestion.clone());
    results::message(settings.protocol(), streams, result.cpu, wall, congestion)
}
