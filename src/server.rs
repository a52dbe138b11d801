//! The server role: one accept loop on the base port that serves one test at a time,
//! forever.
//!
//! The accept loop never blocks on a peer: each new connection gets a greeter thread
//! that reads its first frame with a time-out. A `Hello` starts a session (or gets a
//! "server busy" error while one runs); a `DataHello` is routed to the running session.
//! The session thread runs the test and reports through [`ServerEvent`]s, which the
//! accept loop hands to the caller, so the library itself prints nothing.

use crate::control::{self, Channel, ControlError, Message, PROTOCOL_VERSION};
use crate::report::{Figures, Role, SideResult, StreamResult};
use crate::settings::Settings;
use crate::stats::StreamStats;
use crate::stream::{Stream, Timeout};
use crate::transport::{self, DataConn, ServerCtx};
use anyhow::{anyhow, Context, Result};
use socket2::{Domain, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the server listens and how patient it is.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on; `None` listens on every IPv6 and IPv4 address.
    pub bind: Option<IpAddr>,
    /// Base port: control and stream 0; stream `i` uses `port + i`.
    pub port: u16,
    /// Longest wait for a client's next control message during setup.
    pub control_timeout: Duration,
    /// Longest silence on the data streams before the test is abandoned.
    pub idle_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: None,
            port: crate::settings::DEFAULT_PORT,
            control_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(10),
        }
    }
}

/// What the server tells its caller.
#[derive(Debug)]
pub enum ServerEvent {
    /// Waiting for the next client (`Server listening ....`).
    Listening,
    /// A test was set up: its settings and the client's data address.
    Started { settings: Settings, from: String },
    /// A test ended; the server's figures.
    Finished {
        settings: Settings,
        result: Box<SideResult>,
    },
    /// A client or test failed; the server goes on.
    ClientError { peer: String, error: String },
}

/// The session that is running, if any: its id and where its data connections go.
type ActiveSession = Arc<Mutex<Option<(u64, Sender<DataConn>)>>>;

/// A bound fperf server.
pub struct Server {
    listener: TcpListener,
    config: ServerConfig,
}

impl Server {
    /// Binds the base port.
    pub fn bind(config: ServerConfig) -> Result<Server> {
        let listener = match config.bind {
            Some(ip) => listen(SocketAddr::new(ip, config.port), false),
            // One dual-stack socket serves IPv6 and IPv4 clients.
            None => listen(
                SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), config.port),
                true,
            )
            .or_else(|_| {
                listen(
                    SocketAddr::new(IpAddr::from([0, 0, 0, 0]), config.port),
                    false,
                )
            }),
        }
        .with_context(|| format!("cannot listen on port {}", config.port))?;
        listener.set_nonblocking(true)?;
        Ok(Server { listener, config })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves clients until `stop` is set, calling `on_event` from this thread.
    pub fn run(&self, stop: &AtomicBool, on_event: &mut dyn FnMut(ServerEvent)) -> Result<()> {
        let active: ActiveSession = Arc::new(Mutex::new(None));
        let (events_tx, events_rx) = mpsc::channel::<ServerEvent>();
        on_event(ServerEvent::Listening);
        while !stop.load(Ordering::Relaxed) {
            while let Ok(ev) = events_rx.try_recv() {
                on_event(ev);
            }
            let mut pfd = libc::pollfd {
                fd: self.listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd on the stack, length 1.
            let rc = unsafe { libc::poll(&mut pfd, 1, 50) };
            if rc <= 0 {
                continue;
            }
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    let (active, events, config) =
                        (active.clone(), events_tx.clone(), self.config.clone());
                    let _ = std::thread::Builder::new()
                        .name("fperf-greeter".into())
                        .spawn(move || greet(sock, peer, &active, &events, &config));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Running out of descriptors must not end the server: wait and retry.
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        while let Ok(ev) = events_rx.try_recv() {
            on_event(ev);
        }
        Ok(())
    }
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

/// Reads the first frame of a new connection and acts on it.
fn greet(
    sock: std::net::TcpStream,
    peer: SocketAddr,
    active: &ActiveSession,
    events: &Sender<ServerEvent>,
    config: &ServerConfig,
) {
    let client_error = |error: String| {
        let _ = events.send(ServerEvent::ClientError {
            peer: crate::stream::canonical(peer).to_string(),
            error,
        });
    };
    let Ok(mut chan) = Channel::new(sock, config.control_timeout) else {
        return;
    };
    let first = match chan.recv(transport::tcp::HELLO_TIMEOUT) {
        Ok(m) => m,
        Err(e) => {
            chan.send_error(&e.to_string());
            return client_error(e.to_string());
        }
    };
    match first {
        Message::Hello { version, .. } => {
            if let Err(e) = control::check_version(version) {
                chan.send_error(&e.to_string());
                return client_error(e.to_string());
            }
            let Ok(session) = random_u64() else {
                chan.send_error("server cannot draw a session id");
                return client_error("no entropy for a session id".into());
            };
            let (tx, rx) = mpsc::channel();
            {
                let Ok(mut slot) = active.lock() else { return };
                if slot.is_some() {
                    chan.send_error("server busy: another test is running, try again later");
                    return client_error("refused: server busy".into());
                }
                *slot = Some((session, tx.clone()));
            }
            let outcome = run_session(&mut chan, session, rx, tx, config, events);
            if let Ok(mut slot) = active.lock() {
                *slot = None;
            }
            match outcome {
                Ok(()) => {}
                Err(e) => {
                    chan.send_error(&format!("server: {e:#}"));
                    client_error(format!("{e:#}"));
                }
            }
            let _ = events.send(ServerEvent::Listening);
        }
        Message::DataHello {
            version,
            session,
            stream,
            socket,
        } => {
            let route = active.lock().ok().and_then(|a| a.clone());
            match route {
                Some((id, tx)) if id == session && stream == 0 && version == PROTOCOL_VERSION => {
                    let _ = tx.send(DataConn {
                        stream,
                        socket,
                        sock: chan.into_socket(),
                    });
                }
                _ => chan.send_error("data connection for no running test"),
            }
        }
        other => {
            let e = format!("expected hello, got {}", control::kind(&other));
            chan.send_error(&e);
            client_error(e);
        }
    }
}

/// Runs one test on an accepted control channel.
fn run_session(
    chan: &mut Channel,
    session: u64,
    routed: Receiver<DataConn>,
    routed_tx: Sender<DataConn>,
    config: &ServerConfig,
    events: &Sender<ServerEvent>,
) -> Result<()> {
    chan.send(&Message::Welcome {
        version: PROTOCOL_VERSION,
        software: format!("fperf {}", crate::VERSION),
        session,
    })?;
    let settings = match chan.recv(config.control_timeout)? {
        Message::Settings { settings } => settings,
        other => return Err(ControlError::unexpected("settings", &other).into()),
    };
    settings.validate()?;
    let abort = Arc::new(AtomicBool::new(false));
    let ctx = ServerCtx {
        settings: settings.clone(),
        session,
        local: chan.local_addr()?,
        port: config.port,
        routed,
        routed_tx,
        setup_timeout: config.control_timeout,
        abort: abort.clone(),
    };
    let transport = transport::for_protocol(settings.protocol)?;
    let acceptor = transport.listen(&ctx)?;
    chan.send(&Message::Ready)?;
    let streams = acceptor.accept(&ctx)?;
    let from = streams.first().map_or_else(String::new, |s| s.peer_addr());
    let _ = events.send(ServerEvent::Started {
        settings: settings.clone(),
        from,
    });

    let expected = settings.bytes_per_stream();
    let idle = config.idle_timeout;
    let workers: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, stream)| {
            let pkt = settings.pktsize as usize;
            let cpu = crate::stream::affinity::cpu_for(&settings.server_cpus, i as u32);
            std::thread::Builder::new()
                .name(format!("fperf-recv-{i}"))
                .spawn(move || {
                    crate::stream::affinity::pin_current_thread(cpu)?;
                    receive(stream, pkt, expected, idle)
                })
        })
        .collect::<io::Result<_>>()?;
    let mut per_stream = Vec::with_capacity(workers.len());
    let mut failure = None;
    for (i, w) in workers.into_iter().enumerate() {
        match w.join() {
            Ok(Ok(r)) => per_stream.push((i as u32, r)),
            Ok(Err(e)) => {
                abort.store(true, Ordering::Relaxed);
                failure.get_or_insert(anyhow!("stream {i}: {e}"));
            }
            Err(_) => {
                abort.store(true, Ordering::Relaxed);
                failure.get_or_insert(anyhow!("stream {i}: receiver panicked"));
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let result = server_result(&per_stream);
    let _ = events.send(ServerEvent::Finished {
        settings,
        result: Box::new(result.clone()),
    });
    chan.send(&Message::Results {
        result: Box::new(result),
    })?;
    Ok(())
}

/// What a receiving thread hands back.
struct Received {
    stats: StreamStats,
    local: String,
    peer: String,
}

/// Receives on one stream until the client ends it.
fn receive(
    mut stream: Box<dyn Stream>,
    pktsize: usize,
    expected: u64,
    idle: Duration,
) -> io::Result<Received> {
    let mut buf = vec![0u8; pktsize.max(1)];
    let mut total = 0u64;
    let idle_ms = u32::try_from(idle.as_millis()).unwrap_or(u32::MAX);
    loop {
        match stream.recv(&mut buf, Timeout::Millis(idle_ms)) {
            Ok(0) => break,
            Ok(n) => {
                let before = total;
                total += n as u64;
                // The last packet of a run may be short: acknowledge it once it is whole.
                if before < expected && total >= expected {
                    stream.ack_partial()?;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no data from the client for {}s", idle.as_secs()),
                ))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Received {
        stats: stream.stats(),
        local: stream.local_addr(),
        peer: stream.peer_addr(),
    })
}

/// The server's figures: each stream from its first to its last byte, and the total
/// from the earliest first byte to the latest last byte.
fn server_result(per_stream: &[(u32, Received)]) -> SideResult {
    let span = |s: &StreamStats| match (s.first_recv, s.last_recv) {
        (Some(a), Some(b)) => b.duration_since(a),
        _ => Duration::ZERO,
    };
    let mut total = StreamStats::default();
    let streams = per_stream
        .iter()
        .map(|(index, r)| {
            total.merge(&r.stats);
            StreamResult {
                index: *index,
                local: r.local.clone(),
                peer: r.peer.clone(),
                figures: Figures::new(&r.stats, span(&r.stats)),
            }
        })
        .collect();
    SideResult {
        role: Role::Server,
        total: Figures::new(&total, span(&total)),
        streams,
    }
}

/// A session id no other client can guess.
fn random_u64() -> Result<u64, getrandom::Error> {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b)?;
    Ok(u64::from_le_bytes(b))
}
