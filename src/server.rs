//! The server role: one accept loop on the base port that serves one test at a time,
//! forever.
//!
//! The accept loop never blocks on a peer: each new connection gets a greeter thread
//! that reads its first frame with a time-out. A `Hello` starts a session (or gets a
//! "server busy" error while one runs); a `DataHello` is routed to the running session.
//! The session thread runs the test and reports through [`ServerEvent`]s, which the
//! accept loop hands to the caller, so the library itself prints nothing. With
//! `--allow-mesh`, a session may instead be a mesh coordinator's test, which this server
//! runs as a client towards another server (`mesh.rs`).

pub(crate) mod config;
pub(crate) mod events;
pub(crate) mod figures;
pub(crate) mod iperf3;
mod mesh;

pub use config::{ServerConfig, ServerEvent, MAX_PENDING_GREETERS, MAX_PENDING_PER_SOURCE};
use events::EventSender;
use figures::{close_session, free_session, server_result};

use crate::auth;
use crate::control::session::{ServerSession, ServerStep, SessionError};
use crate::control::{self, Channel, ControlError, Message};
use crate::engine::{receive, Ceiling, Received, StreamNames};
use crate::family::IpFamily;
use crate::interval::MeterMsg;
use crate::limits::{TestWatch, Watchdog};
use crate::pending::{PendingCaps, PendingSlot, WaitTurn};
use crate::results::SideResult;
use crate::sessions::{SessionGuard, Sessions};
use crate::settings::Settings;
use crate::stream::Timeout;
use crate::transport::stream::Stream;
use crate::transport::Role;
use crate::transport::{self, DataConn, ServerCtx};
use anyhow::{anyhow, bail, Context, Result};
use socket2::{Domain, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tests that are running: their ids and where their data connections go.
type ActiveSession = Arc<Sessions>;

/// A bound fperf server.
pub struct Server {
    listener: TcpListener,
    /// The iperf3 port's listener (`--iperf3-port`).
    iperf3: Option<TcpListener>,
    config: ServerConfig,
}

impl Server {
    /// Binds the base port.
    pub fn bind(config: ServerConfig) -> Result<Server> {
        if config.iperf3_port.is_some() && config.auth.is_some() {
            bail!(
                "--iperf3-port cannot be used with --auth-key: iperf3 clients cannot prove \
                 they hold the key"
            );
        }
        let listener = listen_on(config.bind, config.family, config.port)?;
        // Port 0 asks the kernel for one; data ports count from the one it gave.
        let port = listener.local_addr()?.port();
        let iperf3 = config
            .iperf3_port
            .map(|p| {
                listen_on(config.bind, config.family, p).context("the iperf3 port (--iperf3-port)")
            })
            .transpose()?;
        Ok(Server {
            listener,
            iperf3,
            config: ServerConfig { port, ..config },
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The address the iperf3 port is bound to, if the server has one.
    pub fn iperf3_addr(&self) -> Option<io::Result<SocketAddr>> {
        self.iperf3.as_ref().map(TcpListener::local_addr)
    }

    /// Serves clients until `stop` is set (or, one-off, until a test has ended), calling
    /// `on_event` from this thread.
    pub fn run(&self, stop: &AtomicBool, on_event: &mut dyn FnMut(ServerEvent)) -> Result<()> {
        let active: ActiveSession = Sessions::new(self.config.parallel);
        let pending = PendingCaps::letting_wait(
            MAX_PENDING_PER_SOURCE,
            MAX_PENDING_GREETERS,
            MOST_WAITING_FOR_A_PLACE,
        );
        let (events_tx, events_rx) = events::channel();
        on_event(ServerEvent::Listening);
        // The listeners, fperf's own and iperf3's, each with its poll entry.
        let listeners: Vec<(&TcpListener, Front)> = [(&self.listener, Front::Fperf)]
            .into_iter()
            .chain(self.iperf3.iter().map(|l| (l, Front::Iperf3)))
            .collect();
        let mut pfds: Vec<libc::pollfd> = listeners
            .iter()
            .map(|(l, _)| libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let done = || self.config.one_off && active.ended() > 0;
        while !stop.load(Ordering::Relaxed) && !done() {
            // While events still wait, the listeners are only looked at, not waited on.
            let wait_ms = if events_rx.hand_on(on_event) { 0 } else { 50 };
            for pfd in &mut pfds {
                pfd.revents = 0;
            }
            // SAFETY: `pfds` is a valid array of pollfds of the length given.
            let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, wait_ms) };
            if rc <= 0 {
                continue;
            }
            for ((listener, front), pfd) in listeners.iter().zip(&pfds) {
                if pfd.revents != 0 {
                    self.accept_one(listener, *front, &active, &pending, &events_tx, on_event);
                }
            }
        }
        while events_rx.hand_on(on_event) {}
        Ok(())
    }

    /// Accepts one connection from `listener` and hands it to a greeter thread of its
    /// front end.
    fn accept_one(
        &self,
        listener: &TcpListener,
        front: Front,
        active: &ActiveSession,
        pending: &Arc<PendingCaps>,
        events_tx: &EventSender,
        on_event: &mut dyn FnMut(ServerEvent),
    ) {
        match listener.accept() {
            Ok((sock, peer)) => {
                // A running test's own client may open its connections faster than they
                // are identified (hundreds of sockets): those beyond the caps wait for a
                // place in their greeter's thread. Anyone else's are refused at once.
                let place = pending.claim(peer.ip()).map(Place::Now).or_else(|crowded| {
                    if active.connecting_from(peer.ip()) {
                        pending.wait_turn(peer.ip(), crowded).map(Place::Turn)
                    } else {
                        Err(crowded)
                    }
                });
                let place = match place {
                    Ok(place) => place,
                    Err(crowded) => {
                        refuse_crowded(sock, front);
                        on_event(ServerEvent::ClientError {
                            peer: crate::stream::canonical(peer).to_string(),
                            error: format!("refused: {crowded}"),
                        });
                        return;
                    }
                };
                let accepted = Instant::now();
                let (active, events, config) =
                    (active.clone(), events_tx.clone(), self.config.clone());
                let _ = std::thread::Builder::new()
                    .name("fperf-greeter".into())
                    .spawn(move || {
                        let slot = match place {
                            Place::Now(slot) => slot,
                            Place::Turn(turn) => {
                                let until = accepted + config.control_timeout;
                                match turn.wait(until, || active.connecting_from(peer.ip())) {
                                    Ok(slot) => slot,
                                    Err(crowded) => {
                                        refuse_crowded(sock, front);
                                        return events.client_error(
                                            crate::stream::canonical(peer).to_string(),
                                            format!("refused: {crowded}"),
                                        );
                                    }
                                }
                            }
                        };
                        match front {
                            Front::Fperf => greet(sock, peer, slot, &active, &events, &config),
                            Front::Iperf3 => {
                                iperf3::greet(sock, peer, accepted, slot, &active, &events, &config)
                            }
                        }
                    });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Running out of descriptors must not end the server: wait and retry.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Most connections of running tests' clients waiting at once for a place among the
/// pending ones: as many as a test may have sockets.
const MOST_WAITING_FOR_A_PLACE: usize = 1024;

/// A new connection's place among the pending ones: now, or its turn to wait for one.
enum Place {
    Now(PendingSlot),
    Turn(WaitTurn),
}

/// Tells a connection beyond the pending caps why it is dropped, in its front's words.
fn refuse_crowded(sock: std::net::TcpStream, front: Front) {
    match front {
        Front::Fperf => refuse_flood(sock),
        Front::Iperf3 => iperf3::refuse_flood(sock),
    }
}

/// Which protocol a listener speaks.
#[derive(Clone, Copy)]
enum Front {
    Fperf,
    Iperf3,
}

/// A listener on `port` of `bind`, or of every address of `family`.
fn listen_on(bind: Option<IpAddr>, family: IpFamily, port: u16) -> Result<TcpListener> {
    let every_v4 = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port);
    let every_v6 = SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port);
    let listener = match (bind, family) {
        (Some(ip), _) => listen(SocketAddr::new(ip, port), false),
        (None, IpFamily::V4) => listen(every_v4, false),
        (None, IpFamily::V6) => listen(every_v6, false),
        // One dual-stack socket serves IPv6 and IPv4 clients.
        (None, IpFamily::Any) => listen(every_v6, true).or_else(|_| listen(every_v4, false)),
    }
    .with_context(|| format!("cannot listen on port {port}"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn listen(addr: SocketAddr, dual_stack: bool) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    if addr.is_ipv6() {
        sock.set_only_v6(!dual_stack)?;
    }
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())?;
    sock.listen(128)?;
    Ok(sock.into())
}

/// Tells a connection beyond the pending caps why it is dropped, without ever blocking
/// the accept loop.
fn refuse_flood(sock: std::net::TcpStream) {
    if sock.set_nonblocking(true).is_ok() {
        let mut sock = sock;
        let _ = control::write_frame(
            &mut sock,
            &Message::Error {
                message: "server busy: too many connections at once, try again later".into(),
            },
        );
    }
}

/// What to log when an iperf3 client came to fperf's own port: its cookie's first four
/// bytes, read as a frame's length, are far too large, and all cookie characters.
fn iperf3_client_hint(e: &SessionError, config: &ServerConfig) -> Option<String> {
    let SessionError::Control(ControlError::FrameTooLarge(len)) = e else {
        return None;
    };
    let header = u32::try_from(*len).ok()?.to_be_bytes();
    crate::iperf3::wire::cookie_chars(&header).then(|| {
        let serving = match config.iperf3_port {
            Some(port) => format!("this server serves them on port {port} (--iperf3-port)"),
            None => "serve them with fperf -s --iperf3-port PORT".to_string(),
        };
        format!("an iperf3 client came to fperf's own port: {serving}")
    })
}

/// Reads the first frame of a new connection and acts on it. `pending` counts the
/// connection as unidentified until it has said what it is (and, with a key, proved it).
fn greet(
    sock: std::net::TcpStream,
    peer: SocketAddr,
    pending: PendingSlot,
    active: &ActiveSession,
    events: &EventSender,
    config: &ServerConfig,
) {
    let client_error = |error: String| {
        events.client_error(crate::stream::canonical(peer).to_string(), error);
    };
    let Ok(chan) = Channel::new(sock, config.control_timeout) else {
        return;
    };
    let auth = match &config.auth {
        Some(key) => match auth::nonce() {
            Ok(nonce) => Some((key.clone(), nonce)),
            Err(e) => return client_error(e.to_string()),
        },
        None => None,
    };
    let mut control = Control {
        chan,
        session: if config.allow_mesh {
            ServerSession::new(config.limits.clone(), auth).allowing_mesh()
        } else {
            ServerSession::new(config.limits.clone(), auth)
        },
    };
    // Until it is identified the connection has one deadline for all its steps.
    let arrived = Instant::now();
    loop {
        let step = control
            .session
            .wait_limit(arrived.elapsed())
            .and_then(|limit| {
                let wait = limit.unwrap_or(config.control_timeout);
                match control.chan.recv_message(wait) {
                    Err(ControlError::Timeout) => Err(control.session.timed_out()),
                    other => Ok(other?),
                }
            })
            .and_then(|msg| control.session.on_message(msg));
        match step {
            Ok(ServerStep::Continue) => {
                if let Err(e) = control.flush() {
                    return client_error(e.to_string());
                }
            }
            Ok(ServerStep::Identified) => break,
            Ok(ServerStep::DataConnection {
                session,
                stream,
                socket,
            }) => {
                if stream != 0 {
                    let e = "data connection for another stream's port";
                    control.chan.send_error(e);
                    return client_error(e.into());
                }
                let conn = DataConn {
                    stream,
                    socket,
                    sock: control.chan.into_socket(),
                    accepted: arrived,
                };
                if let Err((e, conn)) = active.deliver(session, conn) {
                    if let Ok(mut chan) = Channel::new(conn.sock, config.control_timeout) {
                        chan.send_error(e);
                    }
                    client_error(e.into());
                }
                return;
            }
            Ok(ServerStep::Conf) => {
                control
                    .session
                    .facts(crate::sysinfo::SystemFacts::collect());
                let _ = control.flush();
                return;
            }
            // Settings come only after `Welcome`, and figures only after a test.
            Ok(ServerStep::Test(_) | ServerStep::MeshTest { .. }) => {
                return client_error("settings before welcome".into())
            }
            Ok(ServerStep::ClientResults(_)) => {
                return client_error("figures before a test".into())
            }
            Err(e) => {
                if let Some(why) = e.to_peer() {
                    control.chan.send_error(&why);
                }
                return client_error(iperf3_client_hint(&e, config).unwrap_or(e.to_string()));
            }
        }
    }
    // Whatever the handshake's last step queued (`AuthConfirm`) goes before `Welcome`.
    if let Err(e) = control.flush() {
        return client_error(e.to_string());
    }
    drop(pending);
    let Ok(public_session) = random_u64() else {
        control.chan.send_error("server cannot draw a session id");
        return client_error("no entropy for a session id".into());
    };
    let Some(session) = control.session.welcome(public_session) else {
        return client_error("the session is not ready for a welcome".into());
    };
    let (tx, rx) = mpsc::channel();
    let registered = match active.open(session, tx.clone()) {
        Ok(guard) => guard,
        Err(busy) => {
            control.chan.send_error(&busy);
            return client_error(format!("refused: {busy}"));
        }
    };
    registered.client_at(peer.ip());
    // Dropped last, once everything of the test was sent.
    let _ended = active.end_mark();
    let outcome = run_session(&mut control, &registered, rx, tx, config, events);
    match outcome {
        Ok(Served::Mesh { client, server }) => {
            // Free before the coordinator hears: its next round may come at once.
            close_session(registered, events);
            control.session.mesh_results(client, server);
            if let Err(e) = control.flush() {
                client_error(format!("cannot send the mesh test's results: {e}"));
            }
        }
        Ok(Served::Test(result)) => {
            // The client's figures come after its results: `Listening` waits for them,
            // and the next test's report for `Listening` (its client may connect as
            // soon as the slot is free, see `run_session`).
            let _in_order = active.report_lock();
            free_session(registered);
            control.session.results(result);
            if let Err(e) = control.flush() {
                client_error(format!("cannot send the results: {e}"));
                events.report(ServerEvent::Listening);
                return;
            }
            // The client answers with its own figures at once; the test's slot is
            // free already, so a client that does not only holds this thread a while.
            let answer = control
                .chan
                .recv_message(CLIENT_RESULTS_WITHIN)
                .map_err(SessionError::from)
                .and_then(|m| control.session.on_message(m));
            match (answer, control.session.test()) {
                (Ok(ServerStep::ClientResults(result)), Some(settings)) => {
                    events.report(ServerEvent::ClientFigures {
                        settings: settings.clone(),
                        result,
                    });
                }
                // A client that closed, or said something else, leaves no figures.
                (Err(SessionError::Control(ControlError::Closed)), _) | (Ok(_), _) => {}
                (Err(e), _) => client_error(format!("its figures: {e}")),
            }
            events.report(ServerEvent::Listening);
        }
        Err(e) => {
            client_error(format!("{e:#}"));
            close_session(registered, events);
            control.chan.send_error(&format!("server: {e:#}"));
        }
    }
}

/// How long a server waits for the client's figures after sending its own.
const CLIENT_RESULTS_WITHIN: Duration = Duration::from_secs(5);

/// A control connection driven by its session: what the session queues is sent.
struct Control {
    chan: Channel,
    session: ServerSession,
}

impl Control {
    /// Sends what the session queued.
    fn flush(&mut self) -> Result<(), ControlError> {
        for msg in self.session.take_outbox() {
            self.chan.send(&msg)?;
        }
        Ok(())
    }
}

/// What a welcomed control connection was for.
enum Served {
    /// The client's own test: the server's figures, for the caller to send.
    Test(Box<SideResult>),
    /// A mesh coordinator's test towards another server: both ends' figures, for the
    /// caller to send.
    Mesh {
        client: Box<SideResult>,
        server: Box<SideResult>,
    },
}

/// Runs one test on a welcomed control connection (`Welcome` queued) and returns the
/// server's figures for the caller to send, once every socket of the test is closed.
/// Data connections must present the registered session id.
fn run_session(
    control: &mut Control,
    registered: &SessionGuard,
    routed: Receiver<DataConn>,
    routed_tx: Sender<DataConn>,
    config: &ServerConfig,
    events: &EventSender,
) -> Result<Served> {
    if let Some(keepalive) = config.control_keepalive {
        keepalive.apply(control.chan.socket())?;
    }
    control.flush()?;
    let msg = control.chan.recv_message(config.control_timeout)?;
    let settings = match control.session.on_message(msg)? {
        ServerStep::Test(settings) => *settings,
        ServerStep::MeshTest {
            host,
            port,
            settings,
        } => {
            // A mesh test takes no data connections here: any that names it closes.
            registered.streams_connected_from(&routed);
            drop(routed);
            let (client, server) =
                mesh::run_test(control, registered, &host, port, *settings, config, events)?;
            return Ok(Served::Mesh {
                client: Box::new(client),
                server: Box::new(server),
            });
        }
        other => bail!("the session took an unexpected step: {other:?}"),
    };
    let parallel = registered.sessions().parallel() > 1;
    if parallel && settings.listens_past_base_port() {
        registered.claim_alone().map_err(|e| anyhow!(e))?;
    }
    let session = registered.id();
    let abort = Arc::new(AtomicBool::new(false));
    let ctx = ServerCtx {
        plan: settings.stream_plan(),
        frames: &crate::control::ControlFrames,
        session,
        local: control.chan.local_addr()?,
        client: control.chan.peer_addr()?,
        port: config.port,
        routed,
        routed_tx,
        refused: {
            let events = events.clone();
            Arc::new(move |r: transport::Refusal| {
                events.client_error(r.peer, r.error);
            })
        },
        setup_timeout: config.control_timeout,
        abort: abort.clone(),
        socket_buffer_cap: config.limits.socket_buffer_cap(&settings),
    };
    let transport = settings.data_transport();
    let acceptor = transport.listen(&ctx)?;
    if !parallel {
        // This test's report begins only once the previous test's has ended, which
        // waits at most for that test's client to send its figures.
        drop(registered.sessions().report_lock());
    }
    control.session.ready();
    control.flush()?;
    let streams = acceptor.accept(&ctx)?;
    registered.streams_connected_from(&ctx.routed);
    let from = streams.first().map_or_else(String::new, |s| s.peer_addr());
    let facts = streams.first().map(|s| s.facts()).unwrap_or_default();
    let (congestion, rcvlowat, rx_nap) = (facts.congestion, facts.rcvlowat, facts.rx_nap);
    // With tests in parallel, each report is sent in one piece at the end.
    if !parallel {
        events.report(ServerEvent::Started {
            settings: settings.clone(),
            from: from.clone(),
            congestion: congestion.clone(),
            rcvlowat,
            rx_nap,
        });
    }

    let expected = settings.byte_limit();
    let ceiling = expected.map(|announced| Ceiling::new(&settings, announced));
    let idle = config.idle_timeout;
    let start = std::time::Instant::now();
    let cpu_start = crate::sysinfo::CpuUsage::now();
    let schedule = crate::interval::Schedule::new(&settings, start);
    let (meter_tx, meter_rx) = crate::interval::meter_channel(streams.len());
    let mut collector = crate::interval::Collector::new(start, streams.len(), cpu_start, &settings);
    let watch = Arc::new(TestWatch::new(
        streams.len(),
        config.limits.max_rate,
        abort.clone(),
    ));
    let workers: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, stream)| {
            let sending = Role::Server.sends_on(&settings, i as u32);
            let pkt = settings.pktsize as usize;
            let meter = crate::interval::Meter::new(i as u32, schedule, Some(meter_tx.clone()));
            let (watch, abort) = (watch.clone(), abort.clone());
            let settings = settings.clone();
            let cpu = crate::stream::affinity::cpu_for(&settings.server_cpus, i as u32);
            std::thread::Builder::new()
                .name(format!(
                    "fperf-{}-{i}",
                    if sending { "send" } else { "recv" }
                ))
                .spawn(move || {
                    let batch = settings.batch_threads();
                    crate::stream::affinity::place_current_thread(cpu, batch)?;
                    if sending {
                        send_back(stream, &settings, meter, idle, &abort, (&watch, i))
                    } else {
                        receive(stream, pkt, ceiling, idle, meter, (&watch, i))
                    }
                })
        })
        .collect::<io::Result<_>>()?;
    drop(meter_tx);
    // The watchdog stops a test that stalls (even with a receiver blocked writing), runs
    // past --max-time or moves more than --max-mb; the receivers then fail with
    // `Interrupted`. Meanwhile intervals are passed on as they end, until every receiver
    // ended (and dropped its meter).
    let max_mb = settings.time_ms.and(config.limits.max_mb);
    let mut watchdog = Watchdog::new(&watch, idle, config.limits.max_time, max_mb);
    let mut stopped = None;
    // The streams carrying the client's data that have not ended yet. When the last
    // ends, the client hears so at once: its sending time ends there, not after this
    // end has joined its threads and gathered its figures. Streams a stopped test ended
    // did not read all of it: the client then hears why instead.
    let mut client_data_open = settings.client_data_streams();
    loop {
        match meter_rx.recv_timeout(Duration::from_millis(20)) {
            Ok(msg) => {
                if let MeterMsg::Done(stream) = &msg {
                    if client_data_open > 0 && !Role::Server.sends_on(&settings, *stream) {
                        client_data_open -= 1;
                        if client_data_open == 0 && !abort.load(Ordering::Relaxed) {
                            // The client's sending time ends here (with --bidir, this
                            // end's streams go on).
                            control.session.client_data_received();
                            let _ = control.flush();
                        }
                    }
                }
                for result in collector.push(msg) {
                    let result = Box::new(result);
                    control.session.interval(result.clone());
                    if control.flush().is_err() {
                        abort.store(true, Ordering::Relaxed);
                    }
                    events.interval(&settings, parallel.then_some(from.as_str()), result);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if stopped.is_none() {
            stopped = watchdog.check();
            if stopped.is_some() {
                abort.store(true, Ordering::Relaxed);
            }
        }
    }
    let mut per_stream = Vec::with_capacity(workers.len());
    let mut failure = None;
    for (i, w) in workers.into_iter().enumerate() {
        match w.join() {
            Ok(Ok(r)) if r.interrupted => {
                abort.store(true, Ordering::Relaxed);
                failure.get_or_insert(anyhow!("stream {i}: stopped"));
            }
            Ok(Ok(r)) => per_stream.push((i as u32, r)),
            Ok(Err(e)) => {
                abort.store(true, Ordering::Relaxed);
                failure.get_or_insert(anyhow!("stream {i}: {e}"));
            }
            Err(_) => {
                abort.store(true, Ordering::Relaxed);
                failure.get_or_insert(anyhow!("stream {i}: its thread panicked"));
            }
        }
    }
    if let Some(reason) = stopped {
        return Err(anyhow!("{reason}"));
    }
    if let Some(e) = failure {
        return Err(e);
    }
    // Datagrams the network lost were sent all the same: they do not make a test short.
    let lost_bytes: u64 = per_stream
        .iter()
        .map(|(_, r)| {
            r.stats
                .datagrams
                .lost
                .saturating_mul(u64::from(settings.pktsize))
        })
        .sum();
    let got = per_stream
        .iter()
        .map(|(i, r)| {
            if Role::Server.sends_on(&settings, *i) {
                r.stats.bytes_sent
            } else {
                r.stats.bytes_received
            }
        })
        .fold(lost_bytes, u64::saturating_add);
    let moved = Role::Server.moved(&settings);
    let want = expected.map(|e| e.saturating_mul(per_stream.len() as u64));
    if let Some(want) = want.filter(|&w| got < w) {
        // Ctrl-C on the client, or a client that died, ends its data early.
        events.client_error(
            from.clone(),
            format!(
                "the client ended the test early: {got} of {want} bytes {moved} \
                 (interrupted or gone); figures cover what was {moved}"
            ),
        );
    }
    let mut result = server_result(&settings, &per_stream);
    result.system = Some(crate::sysinfo::SystemFacts::collect());
    result.cpu = crate::sysinfo::CpuUsage::now()
        .zip(cpu_start)
        .map(|(now, then)| now.since(then));
    let report_lock = registered.sessions().report_lock();
    if parallel {
        events.report(ServerEvent::Started {
            settings: settings.clone(),
            from: from.clone(),
            congestion: congestion.clone(),
            rcvlowat,
            rx_nap,
        });
    }
    events.report(ServerEvent::Finished {
        settings,
        result: Box::new(result.clone()),
    });
    drop(report_lock);
    Ok(Served::Test(Box::new(result)))
}

/// `--reverse`: sends the stream's bytes to the client as the client otherwise does,
/// then waits for the client to close the stream, which it does once it has read every
/// byte: the figures' time runs to that confirmation.
fn send_back(
    mut stream: Box<dyn Stream>,
    settings: &Settings,
    meter: crate::interval::Meter,
    idle: Duration,
    abort: &AtomicBool,
    watch: (&TestWatch, usize),
) -> io::Result<Received> {
    let names = StreamNames::of(&*stream);
    let driven = crate::engine::drive(
        &mut *stream,
        settings,
        meter,
        abort,
        watch,
        Role::Server,
        None,
    )?;
    let idle_ms = u32::try_from(idle.as_millis()).unwrap_or(u32::MAX).max(1);
    let mut scratch = [0u8; 64];
    let confirmed = if driven.peer_closed {
        std::time::Instant::now()
    } else {
        match stream.recv(&mut scratch, Timeout::Millis(idle_ms)) {
            Ok(0) => std::time::Instant::now(),
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the client sent data on a --reverse stream",
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                let secs = idle.as_secs_f64();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client did not confirm the end of the stream in {secs}s (--idle-timeout)"),
                ));
            }
            Err(e) => return Err(e),
        }
    };
    Ok(Received::sent(driven, names, confirmed))
}

/// A session id no other client can guess.
fn random_u64() -> Result<u64, getrandom::Error> {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b)?;
    Ok(u64::from_le_bytes(b))
}
