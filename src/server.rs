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
mod probe;

pub use config::{ServerConfig, ServerEvent, MAX_PENDING_GREETERS, MAX_PENDING_PER_SOURCE};
use events::EventSender;
use figures::{close_session, free_session, server_result};

use crate::auth;
use crate::control::session::{
    Greeting, Request, ServerSession, SessionError, CLIENT_RESULTS_WITHIN,
};
use crate::control::{self, Channel, ControlError, Message};
use crate::engine::{receive, Ceiling, Received, StreamNames};
use crate::family::IpFamily;
use crate::interval::MeterMsg;
use crate::latency_probe::phases::PhaseReport;
use crate::limits::{StopReason, TestWatch, Watchdog};
use crate::pending::{PendingCaps, PendingSlot, WaitTurn};
use crate::results::SideResult;
use crate::sessions::{SessionGuard, Sessions};
use crate::settings::Settings;
use crate::stream::Timeout;
use crate::transport::settings::TransportSettings;
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
    let log = ClientLog {
        events,
        peer: crate::stream::canonical(peer).to_string(),
    };
    let mut control = match Control::greeting(sock, active.parallel() > 1, config) {
        Ok(Some(control)) => control,
        Ok(None) => return,
        Err(e) => return log.error(e.to_string()),
    };
    // Until it is identified the connection has one deadline for all its steps.
    let arrived = Instant::now();
    loop {
        let identified = match control.recv_greeting(arrived, config.control_timeout) {
            Ok(Greeting::Continue) => false,
            Ok(Greeting::Identified) => true,
            Ok(Greeting::DataConnection {
                session,
                stream,
                socket,
            }) => {
                let sock = control.chan.into_socket();
                let conn = DataConn {
                    stream,
                    socket,
                    sock,
                    accepted: arrived,
                };
                return hand_on_data(conn, session, active, config, &log);
            }
            Ok(Greeting::Conf) => return control.answer_conf(),
            Err(e) => return control.refuse(&e, config, &log),
        };
        // Whatever the handshake's last step queued (`AuthConfirm`) goes before `Welcome`.
        if let Err(e) = control.flush() {
            return log.error(e.to_string());
        }
        if identified {
            break;
        }
    }
    drop(pending);
    let session = match control.session.welcome_drawn(random_u64().ok()) {
        Ok(session) => session,
        Err(e) => return control.refuse(&e, config, &log),
    };
    if control.session.asks_for_probe_echo() {
        return probe::serve(control, peer, active, config, &log);
    }
    let (tx, rx) = mpsc::channel();
    let registered = match active.open(session, tx.clone()) {
        Ok(guard) => guard,
        Err(busy) => return control.refuse(&SessionError::Refused(busy), config, &log),
    };
    registered.client_at(peer.ip());
    // Dropped last, once everything of the test was sent.
    let _ended = active.end_mark();
    match run_session(&mut control, &registered, rx, tx, config, events) {
        Ok(Served::Mesh { client, server }) => {
            send_mesh_results(&mut control, registered, (client, server), events, &log)
        }
        Ok(Served::MeshUnderLoad(phases)) => {
            // Free before the coordinator hears: its next pair may come at once.
            close_session(registered, events);
            control.session.mesh_under_load_results(phases);
            if let Err(e) = control.flush() {
                log.error(SessionError::MeshResultsUnsent(e).to_string());
            }
        }
        Ok(Served::Test(result)) => {
            exchange_results(&mut control, registered, result, active, events, &log)
        }
        Err(e) => {
            let e = SessionError::TestFailed(format!("{e:#}"));
            log.error(e.to_string());
            close_session(registered, events);
            control.say_why(&e);
        }
    }
}

/// Logs what went wrong with one client, naming it.
struct ClientLog<'a> {
    events: &'a EventSender,
    peer: String,
}

impl ClientLog<'_> {
    fn error(&self, error: String) {
        self.events.client_error(self.peer.clone(), error);
    }
}

/// Routes a data connection that came to the base port to the running test it names,
/// or tells it why not.
fn hand_on_data(
    conn: DataConn,
    session: u64,
    active: &ActiveSession,
    config: &ServerConfig,
    log: &ClientLog,
) {
    if let Err((e, conn)) = active.deliver(session, conn) {
        if let Ok(mut chan) = Channel::new(conn.sock, config.control_timeout) {
            chan.send_error(e);
        }
        log.error(e.into());
    }
}

/// Sends a mesh coordinator both ends' figures of its test.
fn send_mesh_results(
    control: &mut Control,
    registered: SessionGuard,
    (client, server): (Box<SideResult>, Box<SideResult>),
    events: &EventSender,
    log: &ClientLog,
) {
    // Free before the coordinator hears: its next round may come at once.
    close_session(registered, events);
    control.session.mesh_results(client, server);
    if let Err(e) = control.flush() {
        log.error(SessionError::MeshResultsUnsent(e).to_string());
    }
}

/// Sends the client the server's figures of its test, and reports the client's own,
/// which answer them.
fn exchange_results(
    control: &mut Control,
    registered: SessionGuard,
    result: Box<SideResult>,
    active: &ActiveSession,
    events: &EventSender,
    log: &ClientLog,
) {
    // The client's figures come after its results: `Listening` waits for them, and the
    // next test's report for `Listening` (its client may connect as soon as the slot is
    // free, see `run_session`).
    let _in_order = active.report_lock();
    free_session(registered);
    control.session.results(result);
    if let Err(e) = control.flush() {
        log.error(SessionError::ResultsUnsent(e).to_string());
        events.report(ServerEvent::Listening);
        return;
    }
    // The client answers with its own figures at once; the test's slot is free
    // already, so a client that does not only holds this thread a while.
    let answer = control.chan.recv_message(CLIENT_RESULTS_WITHIN);
    match control.session.on_client_answer(answer) {
        Ok(Some((settings, result))) => {
            events.report(ServerEvent::ClientFigures { settings, result })
        }
        Ok(None) => {}
        Err(e) => log.error(e.to_string()),
    }
    events.report(ServerEvent::Listening);
}

/// A control connection driven by its session: what the session queues is sent.
struct Control {
    chan: Channel,
    session: ServerSession,
}

impl Control {
    /// A new connection's control, its session challenging the client with a fresh
    /// nonce when the server has a key; `Ok(None)` when the socket cannot be used.
    fn greeting(
        sock: std::net::TcpStream,
        parallel: bool,
        config: &ServerConfig,
    ) -> Result<Option<Control>, auth::AuthError> {
        let Ok(chan) = Channel::new(sock, config.control_timeout) else {
            return Ok(None);
        };
        let auth = match &config.auth {
            Some(key) => Some((key.clone(), auth::nonce()?)),
            None => None,
        };
        let session = ServerSession::new(config.limits.clone(), auth).in_parallel(parallel);
        let session = if config.allow_mesh {
            session.allowing_mesh()
        } else {
            session
        };
        Ok(Some(Control { chan, session }))
    }

    /// Sends what the session queued.
    fn flush(&mut self) -> Result<(), ControlError> {
        for msg in self.session.take_outbox() {
            self.chan.send(&msg)?;
        }
        Ok(())
    }

    /// Reads and feeds a new connection's next message, within what is left of its
    /// deadline (see [`ServerSession::next_wait`]), `arrived` being when it came.
    fn recv_greeting(
        &mut self,
        arrived: Instant,
        control_timeout: Duration,
    ) -> Result<Greeting, SessionError> {
        let wait = self.session.next_wait(arrived.elapsed(), control_timeout)?;
        let msg = match self.chan.recv_message(wait) {
            Err(ControlError::Timeout) => return Err(self.session.timed_out()),
            other => other?,
        };
        self.session.on_greeting(msg)
    }

    /// Answers a `Conf` connection with this host's facts.
    fn answer_conf(mut self) {
        self.session.facts(crate::sysinfo::SystemFacts::collect());
        let _ = self.flush();
    }

    /// Reads the welcomed client's request, once `Welcome` is sent (and the control
    /// connection's keepalive is on).
    fn recv_request(&mut self, config: &ServerConfig) -> Result<Request> {
        if let Some(keepalive) = config.control_keepalive {
            keepalive.apply(self.chan.socket())?;
        }
        self.flush()?;
        let msg = self.chan.recv_message(config.control_timeout)?;
        Ok(self.session.on_request(msg)?)
    }

    /// Tells the client why the session ends, if the session has something to say.
    fn say_why(&mut self, e: &SessionError) {
        if let Some(why) = e.to_peer() {
            self.chan.send_error(&why);
        }
    }

    /// Refuses the connection for `e`: tells the client why, and logs it.
    fn refuse(mut self, e: &SessionError, config: &ServerConfig, log: &ClientLog) {
        self.say_why(e);
        log.error(iperf3_client_hint(e, config).unwrap_or(e.to_string()));
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
    /// A mesh coordinator's phases of latency under load towards another server: each
    /// phase's figures, for the caller to send.
    MeshUnderLoad(Vec<PhaseReport>),
}

/// Runs one test on a welcomed control connection (`Welcome` queued) and returns the
/// server's figures for the caller to send, once every socket of the test is closed.
/// A test's settings as this server carries them out: with its own `--xdp`, a UDP
/// test's datagrams move through AF_XDP, one latency sample each, which its reports say.
fn served_by(config: &ServerConfig, mut settings: Settings) -> Settings {
    if let TransportSettings::Udp(udp) = &mut settings.transport {
        udp.xdp = udp.xdp.take().or_else(|| config.xdp.clone());
    }
    settings
}

/// Data connections must present the registered session id.
fn run_session(
    control: &mut Control,
    registered: &SessionGuard,
    routed: Receiver<DataConn>,
    routed_tx: Sender<DataConn>,
    config: &ServerConfig,
    events: &EventSender,
) -> Result<Served> {
    let settings = match control.recv_request(config)? {
        Request::Test(settings) => served_by(config, *settings),
        Request::Mesh {
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
        Request::MeshUnderLoad {
            host,
            port,
            settings,
            plan,
        } => {
            registered.streams_connected_from(&routed);
            drop(routed);
            let phases = mesh::run_under_load(
                control,
                registered,
                (&host, port),
                *settings,
                &plan,
                config,
                events,
            )?;
            return Ok(Served::MeshUnderLoad(phases));
        }
        // Probe sessions are served apart (see `greet`): this one did not announce it.
        Request::ProbeEcho { .. } => return Err(SessionError::ProbeSessionOnly.into()),
    };
    let test = TestScope {
        settings: &settings,
        config,
        events,
        abort: Arc::new(AtomicBool::new(false)),
    };
    // The routes live as long as the test: data connections that name it come to them.
    let (_ctx, streams) = open_streams(control, registered, (routed, routed_tx), &test)?;
    let opened = Opened::of(&streams);
    if !control.session.reports_in_one_piece() {
        events.report(opened.started(&settings));
    }
    let clock = (Instant::now(), crate::sysinfo::CpuUsage::now());
    let per_stream = run_streams(control, streams, &opened.from, clock, &test)?;
    let result = finish(control, registered, &per_stream, &opened, clock.1, &test);
    Ok(Served::Test(Box::new(result)))
}

/// What every phase of a server's test reads.
struct TestScope<'a> {
    settings: &'a Settings,
    config: &'a ServerConfig,
    events: &'a EventSender,
    /// Stops the test's streams.
    abort: Arc<AtomicBool>,
}

/// Where the test's streams come from, and the facts of the first, for the report's
/// header.
struct Opened {
    from: String,
    facts: crate::transport::stream::SocketFacts,
}

impl Opened {
    fn of(streams: &[Box<dyn Stream>]) -> Opened {
        Opened {
            from: streams.first().map_or_else(String::new, |s| s.peer_addr()),
            facts: streams.first().map(|s| s.facts()).unwrap_or_default(),
        }
    }

    /// The report's header of a test of `settings`.
    fn started(&self, settings: &Settings) -> ServerEvent {
        ServerEvent::Started {
            settings: settings.clone(),
            from: self.from.clone(),
            in_force: self.facts.in_force.clone(),
        }
    }
}

/// Sets up the test's data streams: listens, tells the client `Ready`, and accepts its
/// connections, which come through `routes` where they reach the base port.
fn open_streams(
    control: &mut Control,
    registered: &SessionGuard,
    (routed, routed_tx): (Receiver<DataConn>, Sender<DataConn>),
    test: &TestScope,
) -> Result<(ServerCtx, Vec<Box<dyn Stream>>)> {
    let (settings, config) = (test.settings, test.config);
    if control.session.needs_server_alone() {
        registered.claim_alone().map_err(|e| anyhow!(e))?;
    }
    let ctx = ServerCtx {
        plan: settings.stream_plan(),
        frames: &crate::control::ControlFrames,
        session: registered.id(),
        local: control.chan.local_addr()?,
        client: control.chan.peer_addr()?,
        port: config.port,
        routed,
        routed_tx,
        refused: {
            let events = test.events.clone();
            Arc::new(move |r: transport::Refusal| {
                events.client_error(r.peer, r.error);
            })
        },
        setup_timeout: config.control_timeout,
        abort: test.abort.clone(),
        socket_buffer_cap: config.limits.socket_buffer_cap(settings),
        xdp: config.xdp.clone(),
    };
    let acceptor = settings.data_transport().listen(&ctx)?;
    if !control.session.reports_in_one_piece() {
        // This test's report begins only once the previous test's has ended, which
        // waits at most for that test's client to send its figures.
        drop(registered.sessions().report_lock());
    }
    control.session.ready();
    control.flush()?;
    let streams = acceptor.accept(&ctx)?;
    registered.streams_connected_from(&ctx.routed);
    Ok((ctx, streams))
}

/// The thread that drives one stream of the server's.
type StreamThread = std::thread::JoinHandle<io::Result<Received>>;

/// The test's data phase: one thread per stream, watched, its intervals passed on as
/// they end; returns each stream's figures once every one ended. `clock` is when it
/// starts, and the CPU's time then.
fn run_streams(
    control: &mut Control,
    streams: Vec<Box<dyn Stream>>,
    from: &str,
    clock: (Instant, Option<crate::sysinfo::CpuUsage>),
    test: &TestScope,
) -> Result<Vec<(u32, Received)>> {
    let (start, cpu_start) = clock;
    let schedule = crate::interval::Schedule::new(test.settings, start);
    let (meter_tx, meter_rx) = crate::interval::meter_channel(streams.len());
    let collector = crate::interval::Collector::new(start, streams.len(), cpu_start, test.settings);
    let watch = Arc::new(TestWatch::new(
        streams.len(),
        test.config.limits.max_rate,
        test.abort.clone(),
    ));
    let workers = start_streams(streams, schedule, &meter_tx, &watch, test)?;
    drop(meter_tx);
    let stopped = pass_on_intervals(control, meter_rx, collector, &watch, from, test);
    let joined = join_streams(workers, &test.abort);
    if let Some(reason) = stopped {
        return Err(anyhow!("{reason}"));
    }
    joined
}

/// One thread per stream, receiving the client's data or sending this end's, each
/// reporting its intervals to `meter_tx` and its progress to `watch`.
fn start_streams(
    streams: Vec<Box<dyn Stream>>,
    schedule: crate::interval::Schedule,
    meter_tx: &mpsc::SyncSender<MeterMsg>,
    watch: &Arc<TestWatch>,
    test: &TestScope,
) -> io::Result<Vec<StreamThread>> {
    let settings = test.settings;
    let ceiling = settings
        .byte_limit()
        .map(|announced| Ceiling::new(settings, announced));
    let idle = test.config.idle_timeout;
    streams
        .into_iter()
        .enumerate()
        .map(|(i, stream)| {
            let sending = Role::Server.sends_on(settings, i as u32);
            let pkt = settings.pktsize as usize;
            let meter = crate::interval::Meter::new(i as u32, schedule, Some(meter_tx.clone()));
            let (watch, abort) = (watch.clone(), test.abort.clone());
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
        .collect()
}

/// Passes the test's intervals on as they end, to the client and the log, until every
/// stream ended (and dropped its meter). Meanwhile the watchdog stops a test that
/// stalls (even with a receiver blocked writing), runs past --max-time or moves more
/// than --max-mb; the receivers then fail with `Interrupted`. Returns why it stopped
/// the test, if it did.
fn pass_on_intervals(
    control: &mut Control,
    meter_rx: Receiver<MeterMsg>,
    mut collector: crate::interval::Collector,
    watch: &TestWatch,
    from: &str,
    test: &TestScope,
) -> Option<StopReason> {
    let (settings, limits) = (test.settings, &test.config.limits);
    let max_mb = settings.time_ms.and(limits.max_mb);
    let mut watchdog = Watchdog::new(watch, test.config.idle_timeout, limits.max_time, max_mb);
    let client = control.session.reports_in_one_piece().then_some(from);
    let mut stopped = None;
    loop {
        match meter_rx.recv_timeout(Duration::from_millis(20)) {
            Ok(msg) => {
                if let MeterMsg::Done(stream) = &msg {
                    let aborted = test.abort.load(Ordering::Relaxed);
                    control.session.stream_ended(*stream, aborted);
                    let _ = control.flush();
                }
                for result in collector.push(msg) {
                    let result = Box::new(result);
                    control.session.interval(result.clone());
                    if control.flush().is_err() {
                        test.abort.store(true, Ordering::Relaxed);
                    }
                    test.events.interval(settings, client, result);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return stopped,
        }
        if stopped.is_none() {
            stopped = watchdog.check();
            if stopped.is_some() {
                test.abort.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// Each stream's figures, once every thread ended; the first stream that stopped or
/// failed stops the others and fails the test.
fn join_streams(workers: Vec<StreamThread>, abort: &AtomicBool) -> Result<Vec<(u32, Received)>> {
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
    match failure {
        Some(e) => Err(e),
        None => Ok(per_stream),
    }
}

/// The server's figures of the ended test, reported (after the report's header, when
/// the report goes out in one piece); says so when the client ended it early.
fn finish(
    control: &Control,
    registered: &SessionGuard,
    per_stream: &[(u32, Received)],
    opened: &Opened,
    cpu_start: Option<crate::sysinfo::CpuUsage>,
    test: &TestScope,
) -> SideResult {
    let (settings, events) = (test.settings, test.events);
    let streams = per_stream.iter().map(|(i, r)| (*i, &r.stats));
    if let Some(early) = control.session.ended_early(streams) {
        events.client_error(opened.from.clone(), early);
    }
    let mut result = server_result(settings, per_stream);
    result.system = Some(crate::sysinfo::SystemFacts::collect());
    result.cpu = crate::sysinfo::CpuUsage::now()
        .zip(cpu_start)
        .map(|(now, then)| now.since(then));
    let report_lock = registered.sessions().report_lock();
    if control.session.reports_in_one_piece() {
        events.report(opened.started(settings));
    }
    events.report(ServerEvent::Finished {
        settings: settings.clone(),
        result: Box::new(result.clone()),
    });
    drop(report_lock);
    result
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
