//! What a transport's set-up says on TCP connections of its own: the first frame of a
//! data connection, a UDP stream's side connection, the side connection that RDMA's
//! connection details travel over. The frames are the control protocol's, which the
//! control layer encodes: it implements [`SetupFrames`], and the driver of each session
//! hands that codec to the transport in [`super::ServerCtx`] and [`super::ClientCtx`].

use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A message a transport sends or reads during set-up (and a UDP stream at its end).
#[derive(Clone, Debug, PartialEq)]
pub enum SetupMessage {
    /// Client → server, first frame of a data connection.
    DataHello {
        version: u32,
        session: u64,
        stream: u32,
        socket: u32,
    },
    /// Server → client: the stream is ready to be sent on.
    Ready,
    /// Either way: why the other end is giving up.
    Error { message: String },
    /// UDP client → server: the addresses of the stream's UDP sockets, socket 0 first.
    UdpSockets { addrs: Vec<SocketAddr> },
    /// On a UDP stream's side connection: the sender sent everything it will send.
    UdpFinished { datagrams: u64, bytes: u64 },
    /// Any other message of the protocol, read where a set-up message belongs: only its
    /// name, for errors. Never written.
    Other { kind: String },
}

impl SetupMessage {
    /// The message's name in the protocol, for errors.
    pub fn kind(&self) -> &str {
        match self {
            SetupMessage::DataHello { .. } => "data_hello",
            SetupMessage::Ready => "ready",
            SetupMessage::Error { .. } => "error",
            SetupMessage::UdpSockets { .. } => "udp_sockets",
            SetupMessage::UdpFinished { .. } => "udp_finished",
            SetupMessage::Other { kind } => kind,
        }
    }
}

/// Why a set-up frame could not be read or written, in the control protocol's words.
#[derive(Debug)]
pub struct FrameError {
    /// The peer closed the connection.
    pub closed: bool,
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl FrameError {
    /// `error`, which says whether the peer `closed` the connection.
    pub fn new(closed: bool, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        FrameError {
            closed,
            error: Box::new(error),
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

// Says what the protocol's own error says, with the same causes behind it.
impl std::error::Error for FrameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// The control protocol's frames, as a transport's set-up uses them.
pub trait SetupFrames: fmt::Debug + Send + Sync {
    /// Writes `msg` as one frame.
    fn write(&self, w: &mut dyn Write, msg: &SetupMessage) -> Result<(), FrameError>;
    /// Reads one frame (blocking, subject to the socket's read time-out).
    fn read(&self, r: &mut dyn Read) -> Result<SetupMessage, FrameError>;
    /// Reads one frame from `sock`, giving up once `timeout` has passed.
    fn read_within(&self, sock: &TcpStream, timeout: Duration) -> Result<SetupMessage, FrameError>;
    /// The protocol's major version, which a `DataHello` and RDMA's connection details
    /// carry.
    fn version(&self) -> u32;
    /// Checks a peer's protocol major version.
    fn check_version(&self, theirs: u32) -> Result<(), FrameError>;
    /// Largest frame body accepted, in bytes.
    fn max_frame(&self) -> usize;
    /// The body length a frame's 4-byte header announces, checked against
    /// [`SetupFrames::max_frame`].
    fn frame_len(&self, header: [u8; 4]) -> Result<usize, FrameError>;
}
