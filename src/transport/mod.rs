//! Transports: how the data STREAMs of one protocol are set up between the two ends.
//!
//! The server and client drive every protocol through [`Transport`]; the only place
//! that maps a protocol's settings (or a workload such as `--crr`) to code is
//! [`for_settings`]. A new transport is a new folder: its options and their checks
//! (`settings.rs`, one [`TransportSettings`] variant) and its set-up implementing the
//! trait (its STREAM lives under [`crate::stream`]).

pub mod facts;
pub mod figures;
pub mod labels;
pub mod rdma;
pub mod settings;
pub mod shape;
pub mod sockets;
pub mod stream;
pub mod tcp;
pub mod udp;

use crate::settings::Settings;
use crate::transport::stream::{Stream, StreamOptions};
use crate::workload::Workload;
use anyhow::{bail, Result};
use settings::TransportSettings;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

/// A data connection that arrived on a TCP port of the server and named itself (with a
/// `DataHello` frame, or an iperf3 cookie).
pub struct DataConn {
    pub stream: u32,
    pub socket: u32,
    pub sock: std::net::TcpStream,
    /// When the server accepted it: connections that name no stream (an iperf3
    /// client's) take their stream from the order they were accepted in.
    pub accepted: std::time::Instant,
}

/// A connection a transport's own listener refused: who, and why (one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub peer: String,
    pub error: String,
}

/// Where refusals go: the server passes them on to its operator.
pub type RefusalReport = Arc<dyn Fn(Refusal) + Send + Sync>;

/// What the server side of a transport knows about the session being set up.
pub struct ServerCtx {
    pub settings: Settings,
    pub session: u64,
    /// The address the client reached the control port on; data listeners use its IP.
    pub local: SocketAddr,
    /// The client's end of the control connection.
    pub client: SocketAddr,
    /// Base port: stream `i` uses `port + i`.
    pub port: u16,
    /// Data connections arriving on the base port (routed by the server's accept loop).
    pub routed: Receiver<DataConn>,
    /// Where a transport's own listeners forward the data connections they accept.
    pub routed_tx: Sender<DataConn>,
    /// Where a transport's own listeners report connections they refused.
    pub refused: RefusalReport,
    /// How long connecting the data streams may take.
    pub setup_timeout: Duration,
    pub abort: Arc<AtomicBool>,
    /// The buffer, each way, each TCP data socket is held to so that the kernel's part
    /// stays within `--max-memory` ([`crate::limits::Limits::socket_buffer_cap`]).
    pub socket_buffer_cap: Option<u64>,
}

/// Where a client's socket sends from: `-B`'s address, `--cport`'s port and
/// `--bind-dev`'s network interface, each the kernel's choice where `None`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalEnd<'a> {
    pub ip: Option<IpAddr>,
    pub port: Option<u16>,
    pub device: Option<&'a str>,
}

/// What the client side of a transport knows.
pub struct ClientCtx {
    pub settings: Settings,
    pub session: u64,
    /// The server's control address; stream `i` connects to its IP at `port + i`.
    pub server: SocketAddr,
    /// Local address to bind data sockets to (`-B`).
    pub bind: Option<IpAddr>,
    /// The local port of the first data socket (`--cport`); the others follow it.
    pub cport: Option<u16>,
    /// The network interface every socket sends through (`--bind-dev`).
    pub bind_device: Option<String>,
    pub setup_timeout: Duration,
    /// Longest a data connection may leave sent data unacknowledged before it fails
    /// (`TCP_USER_TIMEOUT` for TCP): bounds how long a vanished server can stall sends.
    pub stall_timeout: Duration,
    pub abort: Arc<AtomicBool>,
}

/// The server side of a transport once its listeners are bound.
pub trait Acceptor: Send {
    /// Waits for the client's data streams, in stream order.
    fn accept(self: Box<Self>, ctx: &ServerCtx) -> Result<Vec<Box<dyn Stream>>>;
}

/// One protocol's way of setting up data STREAMs.
pub trait Transport: Send + Sync {
    /// Client: refuses settings this transport cannot carry to `server`, before anything
    /// is sent (e.g. a UDP datagram too large for the IP version).
    fn check(&self, _settings: &Settings, _server: SocketAddr) -> Result<()> {
        Ok(())
    }
    /// Server: binds what the data streams need, before the client is told `Ready`.
    fn listen(&self, ctx: &ServerCtx) -> Result<Box<dyn Acceptor>>;
    /// Client: connects the data streams, in stream order.
    fn connect(&self, ctx: &ClientCtx) -> Result<Vec<Box<dyn Stream>>>;
}

/// The transport that carries `settings`, with its own options: its protocol's, or
/// TCP's `--crr`.
pub fn for_settings(settings: &Settings) -> Box<dyn Transport> {
    match &settings.transport {
        TransportSettings::Tcp(tcp) if settings.workload == Workload::Crr => {
            Box::new(tcp::crr::CrrTransport(tcp.clone()))
        }
        TransportSettings::Tcp(tcp) => Box::new(tcp::TcpTransport(tcp.clone())),
        TransportSettings::Udp(udp) => Box::new(udp::UdpTransport(udp.clone())),
        TransportSettings::Rdma(rdma) => Box::new(rdma::RdmaTransport(rdma.clone())),
    }
}

/// Client, before contacting the server: checks this host can run the settings'
/// transport (RDMA: library, device, provider) and pins what the server must match.
pub fn prepare(settings: &Settings) -> Result<Settings> {
    rdma::prepare(settings)
}

/// The STREAM options both ends derive from the run's settings; a transport adds its
/// own.
pub fn stream_options(settings: &Settings, abort: Arc<AtomicBool>) -> StreamOptions {
    let sockets = settings.transport.sockets().cloned().unwrap_or_default();
    StreamOptions {
        nsockets: settings.nsockets as usize,
        queue: settings.queue,
        pktsize: settings.pktsize as usize,
        mprtt: settings.workload.mprtt(),
        echo: settings.workload.echo(),
        response_size: settings.response_size.map_or(1, |n| n as usize),
        abort,
        busy_poll: sockets.busy_poll,
        cpu: None,
        window: sockets.window.map(|w| w as usize),
        tos: sockets.tos,
        // The flows' sockets never block, and the receiving end waits for them in one
        // epoll set.
        epoll: sockets.epoll || settings.flows,
        flows: settings.flows,
        ..StreamOptions::default()
    }
}

impl ClientCtx {
    /// The local port of data socket `socket` of stream `stream`: with `--cport`,
    /// consecutive from it, stream by stream (as iperf3 numbers its streams); `None`:
    /// the kernel's choice.
    pub fn client_port(&self, stream: u32, socket: u32) -> Result<Option<u16>> {
        let k = u64::from(stream) * u64::from(self.settings.nsockets) + u64::from(socket);
        nth_client_port(self.cport, k)
    }
}

/// With `--cport FIRST`, the local port of the run's data socket `k`: FIRST + k;
/// `None` without it.
pub fn nth_client_port(cport: Option<u16>, k: u64) -> Result<Option<u16>> {
    let Some(first) = cport else {
        return Ok(None);
    };
    let port = u64::from(first) + k;
    match u16::try_from(port) {
        Ok(port) => Ok(Some(port)),
        Err(_) => bail!("--cport {first}: data socket {k} needs port {port}, beyond 65535"),
    }
}

/// `addr` with its port moved up by `offset`.
pub fn port_offset(addr: SocketAddr, base: u16, offset: u32) -> Result<SocketAddr> {
    let port = u32::from(base) + offset;
    let Ok(port) = u16::try_from(port) else {
        bail!("a stream needs port {port}, beyond 65535: lower --port or --nstreams");
    };
    Ok(SocketAddr::new(addr.ip(), port))
}
