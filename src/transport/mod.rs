//! Transports: how the data STREAMs of one protocol are set up between the two ends.
//!
//! The server and client drive every protocol through [`Transport`]; the only place
//! that maps a run's settings (or a workload such as `--crr`) to code is
//! [`crate::settings::Settings::data_transport`]. A new transport is a new folder: its
//! options and their checks (`settings.rs`, one [`TransportSettings`] variant), its
//! set-up implementing the trait, and its STREAM. A transport's set-up reads the run
//! through a [`StreamPlan`], which the settings build, never the settings themselves.

pub mod facts;
pub mod figures;
pub mod labels;
pub mod rdma;
pub mod settings;
pub mod setup;
pub mod shape;
pub mod sockets;
pub mod stream;
pub mod tcp;
pub mod udp;
pub mod xdp;

use anyhow::{bail, Result};
use serde::Serialize;
use settings::TransportSettings;
use setup::SetupFrames;
use shape::RunShape;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;
use stream::{Stream, StreamOptions};

/// Which end of a run: the client or the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "role")]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Client,
    Server,
}

/// What a transport's set-up reads of the run, whichever end it is: built from the
/// run's settings ([`crate::settings::Settings::stream_plan`]), so that transports name
/// only what they use.
#[derive(Clone, Debug)]
pub struct StreamPlan {
    /// Streams, sockets per stream, bytes per send and the rest the run's shape says.
    pub shape: RunShape,
    /// The transport's own settings.
    pub transport: TransportSettings,
    /// The STREAM options both ends derive from the run's settings, but for the abort
    /// flag ([`StreamPlan::stream_options`] adds the session's); a transport adds its
    /// own.
    pub options: StreamOptions,
    /// CPUs the client's data threads are pinned to, stream by stream in turn.
    pub client_cpus: Vec<u32>,
    /// CPUs the server's data threads are pinned to, as the client's.
    pub server_cpus: Vec<u32>,
    /// For each stream in order, whether the server sends on it (as the workload has
    /// it).
    pub server_sends: Vec<bool>,
}

impl StreamPlan {
    /// The STREAM options of the run, stopped by `abort`.
    pub fn stream_options(&self, abort: Arc<AtomicBool>) -> StreamOptions {
        StreamOptions {
            abort,
            ..self.options.clone()
        }
    }

    /// Whether the server sends on stream `stream`.
    pub fn server_sends_on(&self, stream: u32) -> bool {
        self.server_sends
            .get(stream as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Whether `end` sends on stream `stream`.
    pub fn sends_on(&self, end: Role, stream: u32) -> bool {
        (end == Role::Client) != self.server_sends_on(stream)
    }

    /// The CPUs `end`'s data threads are pinned to.
    pub fn cpus(&self, end: Role) -> &[u32] {
        match end {
            Role::Client => &self.client_cpus,
            Role::Server => &self.server_cpus,
        }
    }
}

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
    pub plan: StreamPlan,
    /// How set-up messages are framed on the data connections.
    pub frames: &'static dyn SetupFrames,
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
    /// Where the server's UDP streams move their datagrams through AF_XDP (`fperf -s
    /// --xdp`), if anywhere.
    pub xdp: Option<xdp::XdpDevice>,
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
    pub plan: StreamPlan,
    /// How set-up messages are framed on the data connections.
    pub frames: &'static dyn SetupFrames,
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
    /// Client: refuses a run shaped `run` that this transport cannot carry to `server`,
    /// before anything is sent (e.g. a UDP datagram too large for the IP version).
    fn check(&self, _run: &RunShape, _server: SocketAddr) -> Result<()> {
        Ok(())
    }
    /// Server: binds what the data streams need, before the client is told `Ready`.
    fn listen(&self, ctx: &ServerCtx) -> Result<Box<dyn Acceptor>>;
    /// Client: connects the data streams, in stream order.
    fn connect(&self, ctx: &ClientCtx) -> Result<Vec<Box<dyn Stream>>>;
}

/// Client, before contacting the server: checks this host can run the transport of
/// `settings` (RDMA: library, device, provider) and pins what the server must match.
pub fn prepare(settings: &TransportSettings) -> Result<TransportSettings> {
    rdma::prepare(settings)
}

impl ClientCtx {
    /// The local port of data socket `socket` of stream `stream`: with `--cport`,
    /// consecutive from it, stream by stream (as iperf3 numbers its streams); `None`:
    /// the kernel's choice.
    pub fn client_port(&self, stream: u32, socket: u32) -> Result<Option<u16>> {
        let k = u64::from(stream) * u64::from(self.plan.shape.nsockets) + u64::from(socket);
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
