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
//! With MPRTT (a `reply`), every packet is answered ([`Reply`]): the sending side's
//! `send()` returns once the whole reply is read, and the receiving side's `recv()`
//! writes the reply once a whole packet (`pktsize` bytes) has arrived on a socket: the
//! original design's 1-byte ACK, `--response-size` bytes, or the packet itself, as
//! ping-pong tools do.

use crate::stats::StreamStats;
use crate::stream::reply::Reply;
use crate::stream::sender::QueueKind;
use crate::stream::{check_abort, Timeout, DEFAULT_PKTSIZE};
use crate::transport::tcp::stream_options::TcpOptions;
use bytes::Bytes;
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

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
                $crate::transport::stream::Stream::recv(self, buf, $crate::stream::Timeout::Forever)
            }
        }

        impl std::io::Write for $stream {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if buf.is_empty() {
                    return Ok(0);
                }
                $crate::transport::stream::Stream::send(self, buf, $crate::stream::Timeout::Forever)
            }

            fn flush(&mut self) -> std::io::Result<()> {
                $crate::transport::stream::Stream::sender_drain(
                    self,
                    $crate::stream::Timeout::Forever,
                )
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

/// Options fixed when a STREAM is created. Both ends of a STREAM must use the same
/// `nsockets`, `pktsize` and `reply`.
#[derive(Clone, Debug)]
pub struct StreamOptions {
    /// Sockets inside the STREAM (and sender threads).
    pub nsockets: usize,
    /// Queue between `send_submit()` and the sender threads.
    pub queue: QueueKind,
    /// Bytes per packet: the unit an MPRTT reply answers (and the size of buffers).
    pub pktsize: usize,
    /// MPRTT: what answers each packet (the sending side waits for it); `None`: bulk.
    pub reply: Option<Reply>,
    /// Set to make every blocked call of this STREAM fail with `Interrupted` soon.
    pub abort: Arc<AtomicBool>,
    /// Spin on non-blocking calls instead of sleeping in `poll()` (burns a core per
    /// waiting thread, saves the wake-up).
    pub busy_poll: bool,
    /// CPU the STREAM's sender threads are pinned to (see [`crate::stream::affinity`]).
    pub cpu: Option<usize>,
    /// TCP and UDP: both socket buffers of every data socket, in bytes (`--window`);
    /// `None`: the kernel's autotuning (TCP) or the STREAM's own size (UDP).
    pub window: Option<usize>,
    /// TCP and UDP: the IP TOS byte (IPv6 traffic class) of every data socket.
    pub tos: Option<u8>,
    /// TCP and UDP: sockets never block; each thread waits for them in an epoll
    /// instance of its own (see [`crate::stream::epoll`]) instead of in the call or in `poll()`.
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
            reply: None,
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
    /// What the sockets ended up with, as the kernel reported it.
    pub in_force: crate::transport::figures::TransportInForce,
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
