//! The TCP STREAM's own options. A file of their own: the shared [`StreamOptions`]
//! carries them, and that must not make the STREAM abstraction depend on the TCP
//! STREAM's code.
//!
//! [`StreamOptions`]: crate::transport::stream::StreamOptions

use super::zerocopy::ZeroCopy;
use std::time::Duration;

/// The TCP STREAM's own options, as one end applies them
/// ([`crate::transport::stream::StreamOptions::tcp`]).
#[derive(Clone, Debug, Default)]
pub struct TcpOptions {
    /// Set TCP_NODELAY.
    pub nodelay: bool,
    /// Set TCP_QUICKACK, re-armed after every read.
    pub quickack: bool,
    /// Zero-copy sending (see [`super::zerocopy`]).
    pub zerocopy: ZeroCopy,
    /// The congestion control algorithm to set (`TCP_CONGESTION`); `None`: the
    /// kernel's default.
    pub congestion: Option<String>,
    /// The receiving end: `SO_RCVLOWAT` on the data sockets, the bytes a read waits
    /// for (it returns less at end of stream or when its time-out passes); `None`:
    /// the kernel's (1).
    pub rcvlowat: Option<usize>,
    /// The receiving end: reads pass `MSG_TRUNC`, so the kernel consumes the bytes
    /// without copying them into the buffer (which keeps whatever it held).
    pub skip_rx_copy: bool,
    /// The receiving end of one blocking socket: while data flows, a read that finds
    /// none naps this long and reads once more before it sleeps on the socket, so the
    /// sender does not wake it.
    pub rx_nap: Option<Duration>,
    /// Data calls go through an io_uring per thread (see [`super::uring`]).
    pub io_uring: bool,
    /// The connecting end: `TCP_MAXSEG` before the handshake; `None`: the path's.
    pub mss: Option<u32>,
    /// Both ends: the kernel paces each socket's sends to this many bits per second
    /// (`SO_MAX_PACING_RATE`); `None`: no cap.
    pub fq_rate: Option<u64>,
    /// The connecting end: the IPv6 flow label its packets carry (`-L`).
    pub flowlabel: Option<u32>,
}
