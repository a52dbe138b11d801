//! The STREAM: fperf's core abstraction, also usable as a library.
//!
//! A STREAM is one end of a channel between two hosts. Both ends have the same type:
//! a passive end is made by binding and accepting, an active end by connecting, and once
//! connected both read and write alike. A STREAM holds `nsockets` sockets:
//! - [`Stream::send`] is synchronous and uses socket 0 only;
//! - [`Stream::send_submit`] queues a request for the sender threads (one per socket),
//!   and [`Stream::sender_drain`] waits until every submitted request is sent;
//! - [`Stream::recv`] uses no extra thread: it multiplexes all sockets with `poll()`.
//!
//! With more than one socket the byte stream may arrive out of order (the sender threads
//! race); order is kept when `nsockets` is 1 or only `send()` is used.
//!
//! A call that must wait sleeps either in the kernel (TCP's blocking-mode sockets, the
//! wait bounded by socket time-outs) or in `poll()` after a read or write returned
//! `EAGAIN`, never both. Every blocking call takes a [`Timeout`].
//!
//! With MPRTT (`mprtt`), every packet is answered by a 1-byte ACK: the sending side's
//! `send()` returns once the ACK is read, and the receiving side's `recv()` writes the
//! ACK once a whole packet (`pktsize` bytes) has arrived on a socket. With `echo`, the
//! reply is the packet itself, as ping-pong tools do; with `response_size`, that many
//! bytes.

pub mod affinity;
pub mod buffer;
pub(crate) mod epoll;
pub mod sender;
pub mod socket_calls;
pub(crate) mod sys;

use crate::stats::StreamStats;
use crate::transport::tcp::stream_options::TcpOptions;
use bytes::Bytes;
use sender::QueueKind;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use sys::allow_forced_buffers;

/// Plain `std::io` over a socket STREAM, as a library user expects of a socket: a read is
/// [`Stream::recv`] and a write [`Stream::send`], each blocking without a time-out (a
/// time-out set with the socket's own options still applies); `flush()` waits for what
/// [`Stream::send_submit`] queued. The raw fd is socket 0's. Over UDP each write is one
/// datagram whose first [`crate::transport::udp::wire::HEADER_LEN`] bytes carry fperf's
/// header (sequence, stream, send time), as in every UDP run; the bytes after them arrive
/// as written.
macro_rules! impl_std_io {
    ($stream:ty) => {
        impl std::io::Read for $stream {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if buf.is_empty() {
                    return Ok(0);
                }
                $crate::stream::Stream::recv(self, buf, $crate::stream::Timeout::Forever)
            }
        }

        impl std::io::Write for $stream {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if buf.is_empty() {
                    return Ok(0);
                }
                $crate::stream::Stream::send(self, buf, $crate::stream::Timeout::Forever)
            }

            fn flush(&mut self) -> std::io::Result<()> {
                $crate::stream::Stream::sender_drain(self, $crate::stream::Timeout::Forever)
            }
        }

        impl std::os::fd::AsRawFd for $stream {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                self.sockets[0].sock.as_raw_fd()
            }
        }
    };
}
pub(crate) use impl_std_io;

/// Default bytes per send of bulk TCP and RDMA.
pub const DEFAULT_PKTSIZE: u32 = 32768;
/// Largest bytes-per-send accepted (a buffer of this size is allocated per socket).
pub const MAX_PKTSIZE: u32 = 64 << 20;

/// How long a STREAM call may block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// Do not block: fail with `WouldBlock` if the call cannot proceed at once.
    NonBlocking,
    /// Block until done or failed.
    Forever,
    /// Block at most this many milliseconds, then fail with `TimedOut`.
    Millis(u32),
}

impl Timeout {
    /// The original design's convention: 0 = do not block, negative = block forever, N = N ms.
    pub fn from_millis(ms: i64) -> Self {
        match ms {
            0 => Timeout::NonBlocking,
            m if m < 0 => Timeout::Forever,
            m => Timeout::Millis(u32::try_from(m).unwrap_or(u32::MAX)),
        }
    }

    /// Converts to a [`Deadline`] starting now.
    pub fn deadline(self) -> Deadline {
        self.deadline_from(Instant::now)
    }

    /// [`Timeout::deadline`] starting at the time `now` gives, asked only when the timeout
    /// needs a clock: a call that has just read the clock for its latency passes that
    /// reading instead of reading again.
    pub fn deadline_from(self, now: impl FnOnce() -> Instant) -> Deadline {
        match self {
            Timeout::NonBlocking => Deadline::Now,
            Timeout::Forever => Deadline::Never,
            Timeout::Millis(ms) => Deadline::At(now() + Duration::from_millis(u64::from(ms))),
        }
    }
}

/// A point in time after which a blocking call gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    Now,
    Never,
    At(Instant),
}

/// Longest single sleep in `poll()`, so that blocked calls notice an abort in time.
const POLL_SLICE_MS: i32 = 100;

impl Deadline {
    /// The `poll()` timeout for the next wait, or the error to return if none is left.
    pub(crate) fn poll_ms(self) -> io::Result<i32> {
        self.poll_ms_from(Instant::now)
    }

    /// [`Deadline::poll_ms`] as of the time `now` gives, asked only for `At`.
    pub(crate) fn poll_ms_from(self, now: impl FnOnce() -> Instant) -> io::Result<i32> {
        match self {
            Deadline::Now => Err(io::ErrorKind::WouldBlock.into()),
            Deadline::Never => Ok(POLL_SLICE_MS),
            Deadline::At(t) => {
                let left = t.saturating_duration_since(now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                let ms = left.as_millis().min(POLL_SLICE_MS as u128) as i32;
                Ok(ms.max(1))
            }
        }
    }

    /// Whether the deadline has passed (never true for `Never`).
    pub fn expired(self) -> bool {
        match self {
            Deadline::Now => true,
            Deadline::Never => false,
            Deadline::At(t) => Instant::now() >= t,
        }
    }
}

/// Options fixed when a STREAM is created. Both ends of a STREAM must use the same
/// `nsockets`, `pktsize`, `mprtt`, `echo` and `response_size`.
#[derive(Clone, Debug)]
pub struct StreamOptions {
    /// Sockets inside the STREAM (and sender threads).
    pub nsockets: usize,
    /// Queue between `send_submit()` and the sender threads.
    pub queue: QueueKind,
    /// Bytes per packet: the unit an MPRTT ACK answers (and the size of buffers).
    pub pktsize: usize,
    /// Answer / wait for a 1-byte ACK per packet.
    pub mprtt: bool,
    /// With `mprtt`: the reply echoes the packet (as many bytes) instead of a 1-byte
    /// ACK.
    pub echo: bool,
    /// With `mprtt` and without `echo`: bytes of each reply (1: the ACK).
    pub response_size: usize,
    /// Set to make every blocked call of this STREAM fail with `Interrupted` soon.
    pub abort: Arc<AtomicBool>,
    /// Spin on non-blocking calls instead of sleeping in `poll()` (burns a core per
    /// waiting thread, saves the wake-up).
    pub busy_poll: bool,
    /// CPU the STREAM's sender threads are pinned to (see [`affinity`]).
    pub cpu: Option<usize>,
    /// TCP and UDP: both socket buffers of every data socket, in bytes (`--window`);
    /// `None`: the kernel's autotuning (TCP) or the STREAM's own size (UDP).
    pub window: Option<usize>,
    /// TCP and UDP: the IP TOS byte (IPv6 traffic class) of every data socket.
    pub tos: Option<u8>,
    /// TCP and UDP: sockets never block; each thread waits for them in an epoll
    /// instance of its own (see [`epoll`]) instead of in the call or in `poll()`.
    pub epoll: bool,
    /// `--flows`: the sending side drives each socket as a flow of its own (see
    /// [`crate::transport::tcp::flows`]); sockets never block (as with `epoll`).
    pub flows: bool,
    /// The TCP STREAM's own options; other STREAMs leave them at their defaults.
    pub tcp: TcpOptions,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            nsockets: 1,
            queue: QueueKind::Mutex,
            pktsize: DEFAULT_PKTSIZE as usize,
            mprtt: false,
            echo: false,
            response_size: 1,
            abort: Arc::new(AtomicBool::new(false)),
            busy_poll: false,
            cpu: None,
            window: None,
            tos: None,
            epoll: false,
            flows: false,
            tcp: TcpOptions::default(),
        }
    }
}

impl StreamOptions {
    /// Fails with `Interrupted` once the abort flag is set.
    #[inline]
    pub(crate) fn check_abort(&self) -> io::Result<()> {
        check_abort(&self.abort)
    }
}

/// Fails with `Interrupted` once `flag` is set.
#[inline]
pub(crate) fn check_abort(flag: &AtomicBool) -> io::Result<()> {
    if flag.load(Ordering::Relaxed) {
        Err(io::Error::new(io::ErrorKind::Interrupted, "stream aborted"))
    } else {
        Ok(())
    }
}

/// `addr` with an IPv4-mapped IPv6 address (from a dual-stack socket) shown as IPv4.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// A socket address for reports: canonical, or `?` when the socket cannot say.
pub(crate) fn addr_text(addr: io::Result<SocketAddr>) -> String {
    addr.map_or_else(|_| "?".into(), |a| canonical(a).to_string())
}

/// One end of a STREAM. Implemented once per transport (TCP, UDP, RDMA); nothing
/// outside a transport asks which transport it is.
pub trait Stream: Send {
    /// Number of sockets (or queue pairs) inside the STREAM.
    fn nsockets(&self) -> usize;

    /// Local address of socket 0, for reports.
    fn local_addr(&self) -> String;

    /// Peer address of socket 0, for reports.
    fn peer_addr(&self) -> String;

    /// Sends `buf` synchronously on socket 0 (with MPRTT: until its ACK is read).
    /// Returns the number of payload bytes sent, always `buf.len()` on success.
    fn send(&mut self, buf: &[u8], timeout: Timeout) -> io::Result<usize>;

    /// [`Stream::send`] of immutable shared bytes. A caller that sends one buffer again
    /// and again (a bulk sender) uses it so that a transport sending from registered
    /// memory of its own (RDMA) may keep the bytes there instead of copying them in for
    /// every packet.
    fn send_shared(&mut self, buf: &Bytes, timeout: Timeout) -> io::Result<usize> {
        self.send(buf, timeout)
    }

    /// Queues `buf` for the sender threads, waiting at most `timeout` for queue space.
    fn send_submit(&mut self, buf: Bytes, timeout: Timeout) -> io::Result<()>;

    /// Waits until every submitted request has been sent; reports a sender's failure.
    fn sender_drain(&mut self, timeout: Timeout) -> io::Result<()>;

    /// How large a buffer a receiving loop should pass to [`Stream::recv`] for
    /// packets of `pktsize` bytes: `pktsize` unless the transport reads better in
    /// larger pieces (TCP: a byte stream, read in fewer, larger system calls).
    fn recv_len(&self, pktsize: usize) -> usize {
        pktsize
    }

    /// Receives into `buf` from whichever socket has data. `Ok(0)` means every socket
    /// reached end of stream.
    fn recv(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize>;

    /// [`Stream::recv`] for a caller that only counts the bytes (bulk receivers):
    /// afterwards `buf` need not hold the data, so a transport that already has it in
    /// memory of its own (a batch read) may skip copying it. Accounting is the same.
    fn recv_counted(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize> {
        self.recv(buf, timeout)
    }

    /// When the last successful [`Stream::send`] returned, as read for its latency
    /// figure; `None` where the transport does not keep it. A loop that wants the time
    /// after every send takes it from here instead of reading the clock once more.
    fn last_send_end(&self) -> Option<Instant> {
        None
    }

    /// When the last [`Stream::recv`] (or `recv_counted`) that returned data read its
    /// data (its arrival time), as for [`Stream::last_send_end`].
    fn last_recv_end(&self) -> Option<Instant> {
        None
    }

    /// MPRTT: acknowledges packets that arrived only in part. Call when the sender is
    /// known to have finished with a short final packet.
    fn ack_partial(&mut self) -> io::Result<()>;

    /// Drains the senders, stops them and signals end of stream to the peer.
    fn finish_sending(&mut self, timeout: Timeout) -> io::Result<()>;

    /// Whether what the sends handed to the kernel is sent for good, so the sending
    /// time ends when [`Stream::finish_sending`] returns: nothing is resent, and the
    /// peer's confirmation may wait out datagrams lost on the way (UDP). Otherwise the
    /// time runs to the peer's confirmation, since bytes still in a socket buffer are
    /// not yet sent (TCP).
    fn sent_on_handover(&self) -> bool {
        false
    }

    /// What this end measured so far (running sender threads' figures as of their last
    /// snapshot, which this call asks for and briefly waits on).
    fn stats(&self) -> StreamStats;

    /// What the transport can tell of the STREAM's sockets for reports (see
    /// [`SocketFacts`]); nothing by default.
    fn facts(&self) -> SocketFacts {
        SocketFacts::default()
    }
}

/// What a transport can tell of a STREAM's sockets beyond the bytes and latencies every
/// STREAM counts: the kernel's own figures and the settings in force as the kernel
/// reports them. A transport fills what it has; the rest stays `None`, and reports show
/// what is there.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SocketFacts {
    /// The transport's own figures for the sockets, over all of them.
    pub figures: crate::transport::figures::TransportFigures,
    /// The congestion control algorithm in force.
    pub congestion: Option<String>,
    /// The receive low-water mark in force, which may be below the one asked for.
    pub rcvlowat: Option<u32>,
    /// How long a read naps while data flows (see [`StreamOptions::rx_nap`]).
    pub rx_nap: Option<Duration>,
    /// The first socket's buffers.
    pub buffers: Option<SocketBuffers>,
}

/// A socket's buffer sizes as `getsockopt` reports them: Linux reports twice what was
/// set, the extra half for its own bookkeeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketBuffers {
    pub send: u64,
    pub receive: u64,
}

impl SocketBuffers {
    /// The buffers of `sock`; `None` when the kernel cannot say.
    pub fn of(sock: &impl std::os::fd::AsFd) -> Option<SocketBuffers> {
        let s = socket2::SockRef::from(sock);
        Some(SocketBuffers {
            send: s.send_buffer_size().ok()? as u64,
            receive: s.recv_buffer_size().ok()? as u64,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The local address of the socket behind `stream`'s raw fd, as reports show one.
    pub(crate) fn bound_addr(stream: &impl std::os::fd::AsRawFd) -> String {
        // SAFETY: the fd stays open while `stream` lives; the SockRef does not close it.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(stream.as_raw_fd()) };
        let local = socket2::SockRef::from(&fd).local_addr().expect("local");
        canonical(local.as_socket().expect("inet")).to_string()
    }

    #[test]
    fn a_deadline_starts_at_the_reading_it_is_given_and_reads_no_clock_without_one() {
        let t0 = Instant::now();
        assert_eq!(
            Timeout::Millis(250).deadline_from(|| t0),
            Deadline::At(t0 + Duration::from_millis(250))
        );
        let no_clock = || -> Instant { panic!("a timeout without a deadline read the clock") };
        assert_eq!(Timeout::Forever.deadline_from(no_clock), Deadline::Never);
        assert_eq!(Timeout::NonBlocking.deadline_from(no_clock), Deadline::Now);
    }

    #[test]
    fn poll_time_is_what_is_left_as_of_the_reading_it_is_given() {
        let t0 = Instant::now();
        let deadline = Deadline::At(t0 + Duration::from_millis(250));
        // More than a slice left: one slice.
        assert_eq!(deadline.poll_ms_from(|| t0).unwrap(), POLL_SLICE_MS);
        assert_eq!(
            deadline
                .poll_ms_from(|| t0 + Duration::from_millis(240))
                .unwrap(),
            10
        );
        // Under a millisecond left still sleeps one (poll(0) would spin).
        assert_eq!(
            deadline
                .poll_ms_from(|| t0 + Duration::from_micros(249_500))
                .unwrap(),
            1
        );
        let passed = deadline.poll_ms_from(|| t0 + Duration::from_millis(250));
        assert_eq!(passed.unwrap_err().kind(), io::ErrorKind::TimedOut);
        let no_clock = || -> Instant { panic!("a deadline that is not a time read the clock") };
        assert_eq!(
            Deadline::Never.poll_ms_from(no_clock).unwrap(),
            POLL_SLICE_MS
        );
        let now = Deadline::Now.poll_ms_from(no_clock);
        assert_eq!(now.unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }
}
