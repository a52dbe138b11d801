//! The client role: connects the control stream, sends the settings, connects the data
//! streams, drives one thread per stream, and collects the server's figures.
//!
//! The client's clock for a stream runs from its first send until the server confirms
//! it has received everything (the `Results` message), so bytes still sitting in the
//! client's socket buffers are never counted as sent.

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
    // Fails at once when this host lacks what the transport needs (e.g. RDMA).
    let cfg = &ClientConfig {
        settings: transport::prepare(&cfg.settings)?,
        ..cfg.clone()
    };
    let server = resolve(&cfg.host, cfg.port)?;
    let transport = transport::for_protocol(cfg.settings.protocol)?;
    transport.check(&cfg.settings, server)?;
    let sock = connect(server, cfg.bind, cfg.control_timeout)
        .with_context(|| format!("cannot connect to the fperf server at {server}"))?;
    let mut chan = Channel::new(sock, cfg.control_timeout)?;
    chan.send(&Message::Hello {
        version: PROTOCOL_VERSION,
        software: format!("fperf {}", crate::VERSION),
    })?;
    let session = match chan.recv(cfg.control_timeout)? {
        Message::Welcome {
            version, session, ..
        } => {
            control::check_version(version)?;
            session
        }
        other => return Err(ControlError::unexpected("welcome", &other).into()),
    };
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
        abort: abort.clone(),
    };
    let streams = transport.connect(&ctx)?;
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
    for (i, w) in workers.into_iter().enumerate() {
        let driven = w
            .join()
            .map_err(|_| anyhow!("stream {i}: sender panicked"))?;
        let driven = driven.with_context(|| format!("stream {i}"))?;
        interrupted |= driven.interrupted;
        sent.push(driven);
    }
    let server_result = match chan.recv(cfg.results_timeout) {
        Ok(Message::Results { result }) => *result,
        Ok(other) => return Err(ControlError::unexpected("results", &other).into()),
        Err(ControlError::Timeout) => bail!(
            "the server did not confirm the end of the test within {}s",
            cfg.results_timeout.as_secs()
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
