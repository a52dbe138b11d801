//! The client role: connects the control stream, sends the settings, connects the data
//! streams, drives one thread per stream, and collects the server's figures.
//!
//! The client's clock for a stream runs from its first send until the server confirms
//! it has received everything (the `Results` message), so bytes still sitting in the
//! client's socket buffers are never counted as sent.

use crate::auth::{self, AuthKey};
use crate::control::{self, Channel, ControlError, Message, PROTOCOL_VERSION};
use crate::report::{Figures, Role, SideResult, StreamResult};
use crate::settings::Settings;
use crate::stats::StreamStats;
use crate::stream::{Stream, Timeout};
use crate::transport::{self, tcp::connect, ClientCtx};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
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
    pub settings: Settings,
    /// Longest wait for the server during setup.
    pub control_timeout: Duration,
    /// Longest wait for the server's figures once everything was sent.
    pub results_timeout: Duration,
    /// Longest sent data may stay unacknowledged before the server counts as gone.
    pub stall_timeout: Duration,
    /// The shared key to prove to the server, if any.
    pub auth: Option<AuthKey>,
}

impl ClientConfig {
    /// A configuration with default time-outs.
    pub fn new(host: impl Into<String>, port: u16, settings: Settings) -> ClientConfig {
        ClientConfig {
            host: host.into(),
            port,
            bind: None,
            settings,
            control_timeout: Duration::from_secs(10),
            results_timeout: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(10),
            auth: None,
        }
    }
}

/// One stream as the client connected it.
#[derive(Clone, Debug)]
pub struct StreamInfo {
    pub index: u32,
    pub local: String,
    pub peer: String,
}

/// The outcome of a client run.
#[derive(Clone, Debug)]
pub struct ClientOutcome {
    pub client: SideResult,
    pub server: SideResult,
    /// The run was cut short by the abort flag (Ctrl-C).
    pub interrupted: bool,
}

/// Runs one test. `on_connected` is called once the data streams are connected (for the
/// report header); `abort` cuts the run short, still collecting the server's figures.
pub fn run(
    cfg: &ClientConfig,
    abort: Arc<AtomicBool>,
    on_connected: &mut dyn FnMut(&[StreamInfo]),
) -> Result<ClientOutcome> {
    cfg.settings.validate()?;
    let server = resolve(&cfg.host, cfg.port)?;
    let sock = connect(server, cfg.bind, cfg.control_timeout)
        .with_context(|| format!("cannot connect to the fperf server at {server}"))?;
    crate::limits::set_user_timeout(&sock, cfg.stall_timeout)?;
    let mut chan = Channel::new(sock, cfg.control_timeout)?;
    chan.send(&Message::Hello {
        version: PROTOCOL_VERSION,
        software: format!("fperf {}", crate::VERSION),
    })?;
    let session = handshake(&mut chan, cfg)?;
    chan.send(&Message::Settings {
        settings: cfg.settings.clone(),
    })?;
    match chan.recv(cfg.control_timeout)? {
        Message::Ready => {}
        other => return Err(ControlError::unexpected("ready", &other).into()),
    }
    let ctx = ClientCtx {
        settings: cfg.settings.clone(),
        session,
        server,
        bind: cfg.bind,
        setup_timeout: cfg.control_timeout,
        stall_timeout: cfg.stall_timeout,
        abort: abort.clone(),
    };
    let streams = transport::for_protocol(cfg.settings.protocol)?.connect(&ctx)?;
    let infos: Vec<StreamInfo> = streams
        .iter()
        .enumerate()
        .map(|(i, s)| StreamInfo {
            index: i as u32,
            local: s.local_addr(),
            peer: s.peer_addr(),
        })
        .collect();
    on_connected(&infos);

    let settings = cfg.settings.clone();
    let workers: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, stream)| {
            let settings = settings.clone();
            std::thread::Builder::new()
                .name(format!("fperf-send-{i}"))
                .spawn(move || drive(stream, &settings))
        })
        .collect::<io::Result<_>>()?;
    let mut sent = Vec::with_capacity(workers.len());
    let mut interrupted = false;
    let mut failure = None;
    for (i, w) in workers.into_iter().enumerate() {
        match w.join() {
            Ok(Ok(driven)) => {
                interrupted |= driven.interrupted;
                sent.push(driven);
            }
            Ok(Err(e)) => {
                failure.get_or_insert((i, e));
            }
            Err(_) => bail!("stream {i}: sender panicked"),
        }
    }
    if let Some((i, e)) = failure {
        return Err(lost_server(&mut chan, i, &e, cfg.stall_timeout));
    }
    let server_result = match chan.recv(cfg.results_timeout) {
        Ok(Message::Results { result }) => *result,
        Ok(other) => return Err(ControlError::unexpected("results", &other).into()),
        Err(ControlError::Timeout) => bail!(
            "the server did not confirm the end of the test within {}s",
            cfg.results_timeout.as_secs()
        ),
        Err(ControlError::Closed) => bail!(
            "the server closed the control connection before sending its results \
             (it stopped or was killed)"
        ),
        Err(e) => return Err(e.into()),
    };
    let end = Instant::now();

    let mut total = StreamStats::default();
    let mut first_start = end;
    let streams = sent
        .iter()
        .zip(&infos)
        .map(|(d, info)| {
            total.merge(&d.stats);
            first_start = first_start.min(d.start);
            StreamResult {
                index: info.index,
                local: info.local.clone(),
                peer: info.peer.clone(),
                figures: Figures::new(&d.stats, end.duration_since(d.start)),
            }
        })
        .collect();
    let client = SideResult {
        role: Role::Client,
        total: Figures::new(&total, end.duration_since(first_start)),
        streams,
    };
    Ok(ClientOutcome {
        client,
        server: server_result,
        interrupted,
    })
}

/// Opens the session after `Hello`: answers the server's challenge if it has one, and
/// returns the session id data connections must present.
fn handshake(chan: &mut Channel, cfg: &ClientConfig) -> Result<u64> {
    let mut exchange = None;
    let mut reply = chan.recv(cfg.control_timeout)?;
    if let Message::AuthChallenge { nonce } = &reply {
        let Some(key) = &cfg.auth else {
            chan.send_error("authentication failed: the client has no key");
            bail!(
                "the server requires authentication: give --auth-key FILE or set {}",
                auth::KEY_ENV
            );
        };
        match auth::client_handshake(chan, key, nonce, cfg.control_timeout) {
            Ok(x) => exchange = Some((key, x)),
            Err(auth::AuthError::Control(ControlError::Peer(msg))) => bail!("server: {msg}"),
            Err(e) => {
                chan.send_error(&e.to_string());
                return Err(e.into());
            }
        }
        reply = chan.recv(cfg.control_timeout)?;
    } else if cfg.auth.is_some() {
        chan.send_error("authentication failed: the server has no key but the client has one");
        bail!(
            "this client has a key but the server does not ask for one; refusing to run \
             unauthenticated (start the server with --auth-key)"
        );
    }
    match reply {
        Message::Welcome {
            version, session, ..
        } => {
            control::check_version(version)?;
            Ok(match exchange {
                Some((key, x)) => auth::bind_session(key, &x, session),
                None => session,
            })
        }
        other => Err(ControlError::unexpected("welcome", &other).into()),
    }
}

/// The error for a stream that failed mid-test: the server's own reason if it sent one
/// (e.g. a limit), else what the failure says about the server or the network.
fn lost_server(chan: &mut Channel, i: usize, e: &io::Error, stall: Duration) -> anyhow::Error {
    if let Err(ControlError::Peer(msg)) = chan.recv(Duration::from_secs(2)) {
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

/// What driving one stream produced.
struct Driven {
    start: Instant,
    stats: StreamStats,
    interrupted: bool,
}

/// Sends the stream's bytes: with `send()` for one socket and the mutex queue, with
/// `send_submit()` otherwise (as the seed's tool does). The buffer is allocated once.
fn drive(mut stream: Box<dyn Stream>, settings: &Settings) -> io::Result<Driven> {
    let pkt = settings.pktsize as usize;
    let mut left = settings.bytes_per_stream();
    let payload = Bytes::from(vec![0xa5u8; pkt]);
    let start = Instant::now();
    let mut result = Ok(());
    if settings.asynchronous() {
        while left > 0 {
            let n = left.min(pkt as u64) as usize;
            if let Err(e) = stream.send_submit(payload.slice(..n), Timeout::Forever) {
                result = Err(e);
                break;
            }
            left -= n as u64;
        }
    } else {
        while left > 0 {
            let n = left.min(pkt as u64) as usize;
            if let Err(e) = stream.send(&payload[..n], Timeout::Forever) {
                result = Err(e);
                break;
            }
            left -= n as u64;
        }
    }
    let finished = stream.finish_sending(Timeout::Forever);
    let interrupted = matches!(&result, Err(e) if e.kind() == io::ErrorKind::Interrupted)
        || matches!(&finished, Err(e) if e.kind() == io::ErrorKind::Interrupted);
    if !interrupted {
        result?;
        finished?;
    }
    Ok(Driven {
        start,
        stats: stream.stats(),
        interrupted,
    })
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    // A bare IPv6 literal ("::1") needs no brackets on the command line.
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => (host, port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve server name '{host}'"))?
            .collect(),
    };
    addrs
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("server name '{host}' has no address"))
}
