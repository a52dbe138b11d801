//! The control protocol: typed messages in length-prefixed frames over TCP.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of JSON encoding
//! one [`Message`]. Frames larger than [`MAX_FRAME`] are refused before anything is
//! allocated for them. The first frame of every connection to the server's base port
//! says what the connection is: [`Message::Hello`] opens a control session,
//! [`Message::DataHello`] attaches a data socket to a running session (so a default run
//! needs only the one TCP port).
//!
//! A [`Message`] holds the values fperf works with; what a frame encodes is its
//! [`wire`] form, types of their own that change only on purpose ([`wire`] says how).
//! [`encode`] and [`decode`] convert between the two.
//!
//! The codec ([`encode`], [`frame_len`], [`decode`]) and the session's state machines
//! ([`session`]) do no I/O and are tested in memory; [`Channel`] carries frames over a
//! socket with time-outs.

pub mod keepalive;
pub mod script;
pub mod session;
pub mod wire;

use crate::latency_probe::phases::{PhasePlan, PhaseReport};
use crate::peer_text::printable;
use crate::results::{IntervalResult, SideResult};
use crate::settings::Settings;
use crate::transport::setup::{FrameError, SetupFrames, SetupMessage};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Major version of the control protocol: peers of the same major talk, whatever their
/// minors, and a peer of another major is refused by name. Until the major/minor split,
/// every change bumped this one number (2: `reverse`, `crr`, `bidir`; 6: the client's
/// own figures; 8: mesh tests; 10: `flows`, `percentiles`, `response_size`; 11:
/// `rx_timestamps`; 16: RDMA WRITEs end in a trailer; and so on). 16.0 is the first
/// protocol negotiated by minor and features.
pub const PROTOCOL_MAJOR: u32 = 16;
/// Minor version: adding an optional field or message raises it. A field that changes
/// what is measured also comes with a [`crate::features::Feature`], so that an older
/// peer refuses the test instead of ignoring the field. 1: `Hello` and `Welcome` carry
/// the minor and the features; 2: `notsent_lowat` and TCP's new figures; 3: latency
/// probe sessions and a mesh's latency under load.
pub const PROTOCOL_MINOR: u32 = 3;
/// Most features one `Hello` or `Welcome` may list, and the longest name of one.
pub const MAX_FEATURES: usize = 64;
const MAX_FEATURE_NAME: usize = 64;
/// Largest frame body accepted, in bytes.
pub const MAX_FRAME: usize = 1 << 20;
/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// Every message of the control protocol, as fperf works with it (its encoding is
/// [`wire::Message`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// Client → server, first frame of a control connection: the protocol's major
    /// version, then (from minor 1 on) its minor and the features the test needs.
    Hello {
        version: u32,
        software: String,
        minor: u32,
        features: Option<Vec<String>>,
    },
    /// Client → server, first frame of a data connection.
    DataHello {
        version: u32,
        session: u64,
        stream: u32,
        socket: u32,
    },
    /// Server → client: the session is open. From minor 1 on it says the server's minor
    /// and every feature it supports; a server that lists none supports those of minor 0.
    Welcome {
        version: u32,
        software: String,
        session: u64,
        minor: u32,
        features: Option<Vec<String>>,
    },
    /// Client → server: what to run.
    Settings { settings: Settings },
    /// Server → client: the data streams are ready to be connected.
    Ready,
    /// Server → client: the server's figures, sent once every data stream ended.
    Results { result: Box<SideResult> },
    /// Client → server, after `Results`: the client's own figures, for the server's
    /// report (what the other end saw).
    ClientResults { result: Box<SideResult> },
    /// Either way: why the other end is giving up.
    Error { message: String },
    /// UDP client → server, on a UDP stream's control connection: the addresses of the
    /// stream's UDP sockets, socket 0 first.
    UdpSockets { addrs: Vec<SocketAddr> },
    /// On a UDP stream's control connection: the sender sent everything it will send.
    UdpFinished { datagrams: u64, bytes: u64 },
    /// Server → client: every stream carrying the client's data has read its last byte
    /// (the end of the client's sending time; with `--bidir` the server's own streams
    /// may still be sending).
    ClientDataReceived,
    /// Server → client, during a run with `-i`: the server's figures of one interval.
    Interval { result: Box<IntervalResult> },
    /// Client → server, first frame of a connection that only asks for the server's
    /// system facts (`--conf`).
    Conf { version: u32 },
    /// Server → client: the answer to `Conf`.
    Facts { facts: crate::sysinfo::SystemFacts },
    /// Server → client, instead of `Welcome`, when the server requires a shared key:
    /// a fresh random nonce (hex) the client's proof must cover.
    AuthChallenge { nonce: String },
    /// Client → server: the client's own nonce and its HMAC over both nonces (hex).
    AuthResponse { nonce: String, mac: String },
    /// Server → client: the server's HMAC over both nonces, proving it holds the key
    /// too; `Welcome` follows.
    AuthConfirm { mac: String },
    /// Mesh coordinator → server, after `Welcome` and instead of `Settings`: run this
    /// test as a client towards the fperf server at `peer` (`HOST:PORT`).
    MeshTest { peer: String, settings: Settings },
    /// Server → mesh coordinator: both ends' figures of the test asked for, this
    /// server's (the client's) first.
    MeshResult {
        client: Box<SideResult>,
        server: Box<SideResult>,
    },
    /// Client → server, after `Welcome` and instead of `Settings` (`--under-load`): echo
    /// latency probes for `seconds`, on a UDP socket of the session's own.
    ProbeEcho { seconds: u32 },
    /// Server → client: the answer to `ProbeEcho`: the UDP port the probes go to, and
    /// the random token each must carry. The echo ends when the control connection
    /// closes, or the time asked for is over.
    ProbeEchoing { port: u16, token: u64 },
    /// Mesh coordinator → server, after `Welcome` and instead of `Settings` (`fperf mesh
    /// --under-load`): run `plan`'s phases of latency under load as the client towards
    /// the fperf server at `peer` (`HOST:PORT`), each loaded phase's test with
    /// `settings`' options.
    MeshUnderLoad {
        peer: String,
        settings: Settings,
        plan: PhasePlan,
    },
    /// Server → mesh coordinator: each phase's figures, in the plan's order.
    MeshUnderLoadResult { phases: Vec<PhaseReport> },
}

/// Why a control exchange failed.
#[derive(Debug, Error)]
pub enum ControlError {
    #[error("control connection: {0}")]
    Io(#[from] io::Error),
    #[error("control connection timed out waiting for the peer")]
    Timeout,
    #[error("control connection closed by the peer")]
    Closed,
    #[error("control frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    FrameTooLarge(usize),
    #[error("malformed control frame: {0}")]
    Malformed(String),
    #[error(
        "protocol version mismatch: this fperf speaks protocol {ours}.{PROTOCOL_MINOR}, the \
         peer {theirs}.x; peers talk only within one major version: upgrade the older end"
    )]
    VersionMismatch { ours: u32, theirs: u32 },
    #[error("the peer listed more than {MAX_FEATURES} features, or a name over 64 bytes")]
    TooManyFeatures,
    #[error("{0}")]
    Peer(String),
    #[error("unexpected control message: expected {expected}, got {got}")]
    Unexpected { expected: &'static str, got: String },
}

/// Encodes `msg` as one frame.
pub fn encode(msg: &Message) -> Result<Vec<u8>, ControlError> {
    let body = serde_json::to_vec(&wire::Message::from(msg))
        .map_err(|e| ControlError::Malformed(e.to_string()))?;
    if body.len() > MAX_FRAME {
        return Err(ControlError::FrameTooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// The body length a frame header announces, checked against [`MAX_FRAME`].
pub fn frame_len(header: [u8; HEADER_LEN]) -> Result<usize, ControlError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(ControlError::FrameTooLarge(len));
    }
    Ok(len)
}

/// Decodes a frame body.
pub fn decode(body: &[u8]) -> Result<Message, ControlError> {
    // Both errors may quote the peer's input (e.g. an unknown message type).
    let malformed = |e: &dyn std::fmt::Display| ControlError::Malformed(printable(&e.to_string()));
    let msg: wire::Message = serde_json::from_slice(body).map_err(|e| malformed(&e))?;
    Message::try_from(msg).map_err(|e| malformed(&e))
}

/// Checks a peer's protocol major version.
pub fn check_version(theirs: u32) -> Result<(), ControlError> {
    if theirs == PROTOCOL_MAJOR {
        Ok(())
    } else {
        Err(ControlError::VersionMismatch {
            ours: PROTOCOL_MAJOR,
            theirs,
        })
    }
}

/// Checks the size of a peer's feature list: a frame is bounded, but what is kept of it
/// is bounded further.
pub fn check_features(features: Option<&[String]>) -> Result<(), ControlError> {
    match features {
        Some(f) if f.len() > MAX_FEATURES || f.iter().any(|n| n.len() > MAX_FEATURE_NAME) => {
            Err(ControlError::TooManyFeatures)
        }
        _ => Ok(()),
    }
}

/// The protocol version a peer announced, as `MAJOR.MINOR`.
pub fn protocol_text(major: u32, minor: u32) -> String {
    format!("{major}.{minor}")
}

/// A short name of a message, for errors.
pub fn kind(msg: &Message) -> String {
    match msg {
        Message::Hello { .. } => "hello",
        Message::DataHello { .. } => "data_hello",
        Message::Welcome { .. } => "welcome",
        Message::Settings { .. } => "settings",
        Message::Ready => "ready",
        Message::Results { .. } => "results",
        Message::ClientResults { .. } => "client_results",
        Message::Error { .. } => "error",
        Message::UdpSockets { .. } => "udp_sockets",
        Message::UdpFinished { .. } => "udp_finished",
        Message::Interval { .. } => "interval",
        Message::ClientDataReceived => "client_data_received",
        Message::Conf { .. } => "conf",
        Message::Facts { .. } => "facts",
        Message::AuthChallenge { .. } => "auth_challenge",
        Message::AuthResponse { .. } => "auth_response",
        Message::AuthConfirm { .. } => "auth_confirm",
        Message::MeshTest { .. } => "mesh_test",
        Message::MeshResult { .. } => "mesh_result",
        Message::ProbeEcho { .. } => "probe_echo",
        Message::ProbeEchoing { .. } => "probe_echoing",
        Message::MeshUnderLoad { .. } => "mesh_under_load",
        Message::MeshUnderLoadResult { .. } => "mesh_under_load_result",
    }
    .to_string()
}

/// How long [`Channel::send_error`] keeps reading a peer's input after the error frame.
const LINGER: Duration = Duration::from_millis(200);
/// How much input [`Channel::send_error`] reads and drops at most.
const LINGER_BYTES: usize = 256 << 10;

/// Bytes reserved for a frame body before any of it arrived: a peer that announces a
/// large frame and sends nothing costs no more than this.
const INITIAL_BODY_CAPACITY: usize = 4096;

/// Reads one frame from `r` (blocking, subject to the socket's read time-out). The body
/// buffer grows with the bytes that actually arrive, not with the announced length.
pub fn read_frame(r: &mut impl Read) -> Result<Message, ControlError> {
    let mut header = [0u8; HEADER_LEN];
    read_exact(r, &mut header)?;
    let len = frame_len(header)?;
    let mut body = Vec::with_capacity(len.min(INITIAL_BODY_CAPACITY));
    r.take(len as u64)
        .read_to_end(&mut body)
        .map_err(read_error)?;
    if body.len() < len {
        return Err(ControlError::Closed);
    }
    decode(&body)
}

/// Reads one frame from `sock`, giving up once `timeout` has passed since the call
/// began, however slowly the peer trickles bytes in.
pub fn read_frame_within(sock: &TcpStream, timeout: Duration) -> Result<Message, ControlError> {
    let mut r = DeadlineReader {
        sock,
        deadline: Instant::now() + timeout,
    };
    read_frame(&mut r)
}

/// A socket reader whose every read waits only for what is left of one deadline.
struct DeadlineReader<'a> {
    sock: &'a TcpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.sock.set_read_timeout(Some(left))?;
        let mut sock = self.sock;
        sock.read(buf)
    }
}

fn read_error(e: io::Error) -> ControlError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => ControlError::Closed,
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ControlError::Timeout,
        _ => ControlError::Io(e),
    }
}

fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> Result<(), ControlError> {
    r.read_exact(buf).map_err(read_error)
}

/// Writes one frame to `w`.
pub fn write_frame(w: &mut impl Write, msg: &Message) -> Result<(), ControlError> {
    let frame = encode(msg)?;
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// The control protocol's frames for what a transport says during set-up: the codec
/// every session hands its transport.
#[derive(Debug)]
pub struct ControlFrames;

impl ControlFrames {
    fn setup_message(msg: Message) -> SetupMessage {
        match msg {
            Message::DataHello {
                version,
                session,
                stream,
                socket,
            } => SetupMessage::DataHello {
                version,
                session,
                stream,
                socket,
            },
            Message::Ready => SetupMessage::Ready,
            Message::Error { message } => SetupMessage::Error { message },
            Message::UdpSockets { addrs } => SetupMessage::UdpSockets { addrs },
            Message::UdpFinished { datagrams, bytes } => {
                SetupMessage::UdpFinished { datagrams, bytes }
            }
            other => SetupMessage::Other { kind: kind(&other) },
        }
    }
}

fn frame_error(e: ControlError) -> FrameError {
    FrameError::new(matches!(e, ControlError::Closed), e)
}

impl SetupFrames for ControlFrames {
    fn write(&self, w: &mut dyn Write, msg: &SetupMessage) -> Result<(), FrameError> {
        let msg = match msg.clone() {
            SetupMessage::DataHello {
                version,
                session,
                stream,
                socket,
            } => Message::DataHello {
                version,
                session,
                stream,
                socket,
            },
            SetupMessage::Ready => Message::Ready,
            SetupMessage::Error { message } => Message::Error { message },
            SetupMessage::UdpSockets { addrs } => Message::UdpSockets { addrs },
            SetupMessage::UdpFinished { datagrams, bytes } => {
                Message::UdpFinished { datagrams, bytes }
            }
            SetupMessage::Other { kind } => {
                return Err(frame_error(ControlError::Malformed(format!(
                    "{kind} is not a set-up message"
                ))))
            }
        };
        write_frame(&mut &mut *w, &msg).map_err(frame_error)
    }

    fn read(&self, r: &mut dyn Read) -> Result<SetupMessage, FrameError> {
        read_frame(&mut &mut *r)
            .map(ControlFrames::setup_message)
            .map_err(frame_error)
    }

    fn read_within(&self, sock: &TcpStream, timeout: Duration) -> Result<SetupMessage, FrameError> {
        read_frame_within(sock, timeout)
            .map(ControlFrames::setup_message)
            .map_err(frame_error)
    }

    fn version(&self) -> u32 {
        PROTOCOL_MAJOR
    }

    fn check_version(&self, theirs: u32) -> Result<(), FrameError> {
        check_version(theirs).map_err(frame_error)
    }

    fn max_frame(&self) -> usize {
        MAX_FRAME
    }

    fn frame_len(&self, header: [u8; 4]) -> Result<usize, FrameError> {
        frame_len(header).map_err(frame_error)
    }
}

/// A control connection: framed messages over a blocking TCP socket with time-outs.
pub struct Channel {
    sock: TcpStream,
}

impl Channel {
    /// Wraps a connected socket (made blocking; writes time out after `io_timeout`).
    pub fn new(sock: TcpStream, io_timeout: Duration) -> io::Result<Channel> {
        sock.set_nonblocking(false)?;
        sock.set_nodelay(true)?;
        sock.set_write_timeout(Some(io_timeout))?;
        Ok(Channel { sock })
    }

    /// Sends one message.
    pub fn send(&mut self, msg: &Message) -> Result<(), ControlError> {
        write_frame(&mut self.sock, msg)
    }

    /// Receives one message, waiting at most `timeout` for it to begin and complete.
    /// An [`Message::Error`] from the peer becomes [`ControlError::Peer`].
    pub fn recv(&mut self, timeout: Duration) -> Result<Message, ControlError> {
        match self.recv_message(timeout)? {
            Message::Error { message } => Err(ControlError::Peer(printable(&message))),
            m => Ok(m),
        }
    }

    /// [`Channel::recv`], the peer's [`Message::Error`] included, for a session machine
    /// to judge.
    pub fn recv_message(&mut self, timeout: Duration) -> Result<Message, ControlError> {
        read_frame_within(&self.sock, timeout.max(Duration::from_millis(1)))
    }

    /// Tells the peer why we give up (best effort: the peer may be gone), then ends our
    /// side. Input still arriving is read and dropped for a moment, because closing a
    /// socket with unread input resets the connection and may destroy the error frame
    /// before the peer reads it.
    pub fn send_error(&mut self, message: &str) {
        let _ = self.send(&Message::Error {
            message: message.to_string(),
        });
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
        let deadline = Instant::now() + LINGER;
        let mut sink = [0u8; 4096];
        let mut left = LINGER_BYTES;
        while left > 0 {
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() || self.sock.set_read_timeout(Some(wait)).is_err() {
                break;
            }
            match self.sock.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    }

    /// The first byte waiting on the connection, left there: waits up to `timeout` for
    /// it; `None` if the peer closed the connection.
    pub fn peek_byte(&self, timeout: Duration) -> Result<Option<u8>, ControlError> {
        let mut byte = [0u8; 1];
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        match self.sock.peek(&mut byte) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(byte[0])),
            Err(e) => Err(read_error(e)),
        }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// The socket, for options set after the connection is identified.
    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    /// Gives the socket back, e.g. when the connection turned out to carry data.
    pub fn into_socket(self) -> TcpStream {
        self.sock
    }
}

impl ControlError {
    /// A message arrived that the exchange did not expect at this point.
    pub fn unexpected(expected: &'static str, got: &Message) -> ControlError {
        ControlError::Unexpected {
            expected,
            got: kind(got),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(msg: Message) {
        let frame = encode(&msg).expect("encode");
        let mut r = &frame[..];
        assert_eq!(read_frame(&mut r).expect("decode"), msg);
        assert!(r.is_empty());
    }

    #[test]
    fn every_message_roundtrips() {
        roundtrip(Message::Hello {
            version: 1,
            software: "fperf 0.1".into(),
            minor: 0,
            features: None,
        });
        roundtrip(Message::Hello {
            version: 16,
            software: "fperf 0.2".into(),
            minor: 1,
            features: Some(vec!["rx_timestamps".into()]),
        });
        roundtrip(Message::DataHello {
            version: 1,
            session: 7,
            stream: 2,
            socket: 3,
        });
        roundtrip(Message::Welcome {
            version: 1,
            software: "x".into(),
            session: u64::MAX,
            minor: 7,
            features: Some(Vec::new()),
        });
        roundtrip(Message::Settings {
            settings: Settings::default(),
        });
        roundtrip(Message::Ready);
        roundtrip(Message::Conf { version: 1 });
        roundtrip(Message::Facts {
            facts: crate::sysinfo::SystemFacts::collect(),
        });
        roundtrip(Message::Error {
            message: "busy".into(),
        });
        roundtrip(Message::UdpSockets {
            addrs: vec!["127.0.0.1:5".parse().unwrap(), "[::1]:6".parse().unwrap()],
        });
        roundtrip(Message::UdpFinished {
            datagrams: 3,
            bytes: u64::MAX,
        });
    }

    #[test]
    fn truncated_frames_are_closed_not_panics() {
        let frame = encode(&Message::Ready).expect("encode");
        for cut in 0..frame.len() {
            let mut r = &frame[..cut];
            assert!(
                matches!(read_frame(&mut r), Err(ControlError::Closed)),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn oversized_length_is_refused_before_allocating() {
        let mut r: &[u8] = &[0xff, 0xff, 0xff, 0xff, b'{'];
        assert!(matches!(
            read_frame(&mut r),
            Err(ControlError::FrameTooLarge(_))
        ));
        assert!(frame_len(((MAX_FRAME + 1) as u32).to_be_bytes()).is_err());
        assert_eq!(
            frame_len((MAX_FRAME as u32).to_be_bytes()).expect("max ok"),
            MAX_FRAME
        );
    }

    #[test]
    fn malformed_bodies_are_errors() {
        for body in [
            &b"not json"[..],
            b"{}",
            b"{\"type\":\"nope\"}",
            b"{\"type\":\"hello\"}",
            b"\xff\xfe",
        ] {
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(body);
            let mut r = &frame[..];
            assert!(
                matches!(read_frame(&mut r), Err(ControlError::Malformed(_))),
                "{body:?}"
            );
        }
    }

    #[test]
    fn settings_with_hostile_values_decode_but_fail_validation() {
        let body = br#"{"type":"settings","settings":{"protocol":"tcp","nstreams":4294967295,"nsockets":0,"mb":1,"pktsize":1,"mprtt":false,"queue":"mutex","nodelay":false,"quickack":false}}"#;
        let Message::Settings { settings } = decode(body).expect("decodes") else {
            panic!("not settings")
        };
        assert!(settings.validate().is_err());
    }

    #[test]
    fn peer_text_is_made_printable() {
        let body = br#"{"type":"evil\n\u001b[31m"}"#;
        let e = decode(body).expect_err("unknown type").to_string();
        assert!(!e.contains('\n') && !e.contains('\x1b'), "{e}");
    }

    #[test]
    fn version_mismatch_is_named() {
        let e = check_version(PROTOCOL_MAJOR + 1).expect_err("mismatch");
        assert!(e.to_string().contains("version"), "{e}");
        assert!(check_version(PROTOCOL_MAJOR).is_ok());
    }
}
