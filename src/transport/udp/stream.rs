//! The UDP STREAM.
//!
//! `nsockets` connected UDP sockets between the same two hosts, plus one reliable TCP
//! connection, the stream's *control connection*, that carries what UDP cannot: the end
//! of the data. One `send()` is one datagram of exactly the bytes given, starting with
//! the header of [`super::wire`] (sequence number, stream index, send time).
//!
//! Sockets are non-blocking; `poll()` (with `--epoll`, `epoll_wait()`: see
//! [`crate::stream::epoll`]) runs only after `EAGAIN`. Sequence numbers are
//! drawn from one counter per STREAM, so datagrams of several sockets interleave and
//! the receiver sees (and counts) them out of order.
//!
//! End of data: [`Stream::finish_sending`] sends a `UdpFinished` frame with the number
//! of datagrams and bytes sent over the control connection. The receiving end's
//! [`Stream::recv`] then keeps reading until every datagram arrived, or the sockets were
//! quiet for [`DRAIN_QUIET`] (at most [`DRAIN_MAX`] in all), and returns `Ok(0)`. Only
//! then is the loss known.
//!
//! MPRTT: every datagram is answered by one reply datagram (see [`super::wire`]):
//! by default a 1-byte ACK holding the low byte of its sequence number (so a late ACK
//! of an earlier packet is not taken for the current one), with `--response-size` that
//! many bytes starting with the sequence number, with `--echo` the datagram itself. The
//! sender resends a datagram whose reply does not come within the ACK time-out, at most
//! [`MAX_RETRIES`] times, then fails naming the packet. The receiver answers every copy
//! it reads, duplicates included, and both ends count every byte.
//!
//! Latency is timed as for TCP: a send from the first write to its return (with MPRTT
//! to the ACK, retries included); a receive from the call to the read that returns a
//! datagram (with MPRTT, to the ACK written).
//!
//! Batching (see [`super::batch`]), without MPRTT: `send()` queues the datagram
//! (header written, payload copied into the batch buffer) and every `batch` datagrams
//! one `sendmmsg()` hands them to the kernel (with GSO, as few messages); a datagram is
//! counted as sent only then, and the batch takes one send-latency sample (the
//! `sendmmsg()` calls). `finish_sending()` sends what is queued before it reports the
//! count. `recv()` reads with `recvmmsg()` (with GRO, splitting coalesced buffers) and
//! returns queued datagrams one per call: the batch takes one receive-latency sample
//! (from the call that read it to the read), its other datagrams none, since they
//! waited for no read of their own; their arrival time is the batch's (jitter then
//! includes the batching). Reports say a sample is per batch. While datagrams flow and the
//! sockets run dry, the receiver naps [`BATCH_NAP`] instead of sleeping in `poll()`, so
//! the sender is not charged a wake-up per datagram.
//!
//! `--flows`: each socket is a flow. Bulk sends each datagram (batched: each batch) on
//! the next flow in turn; with MPRTT every flow keeps a request in flight (see
//! [`super::flows`]). The receiving end reads whichever socket has data, as with
//! several sockets, waiting in one epoll set.
//!
//! MPRTT without `busy_poll` or `epoll`: the sockets block (in [`BLOCK_SLICE`] slices),
//! so each wait is a single `recv()`; with `busy_poll` every wait is a spin that yields
//! the CPU.

use super::batch::{gro_slots, RecvBatch, SendBatch, Sent};
use super::cmsg::{enable_rx_timestamps, recv_with_control, rx_timestamp_ns, ControlBuffer};
use super::flows::{unacknowledged, DatagramFlow, UdpFlows};
use super::wire::{decode, Arrival, Header, ReplyDatagram, SeqTracker, HEADER_LEN};
use crate::stats::buffer_grant::BufferGrant;
use crate::stats::{span_ns, StreamStats};
use crate::stream::epoll::{poll_many, poll_one, Epoll};
use crate::stream::reply::Reply;
use crate::stream::sender::{LazySenders, PacketSink, Senders};
use crate::stream::sys::{set_int_opt, set_tos, set_window, size_buffer, Direction};
use crate::stream::{check_abort, Deadline, Timeout};
use crate::transport::setup::{FrameError, SetupFrames, SetupMessage};
use crate::transport::stream::{SocketBuffers, SocketFacts, Stream, StreamOptions};
use crate::transport::udp::settings::{socket_buffer, MAX_RETRIES};
use bytes::Bytes;
use socket2::SockRef;
use std::io::{self, IoSlice};
use std::net;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Largest UDP payload over IPv4: 65535 - 20 (IP header) - 8 (UDP header).
pub const MAX_DATAGRAM_V4: u32 = 65_507;
/// Largest UDP payload over IPv6 without jumbograms: 65535 - 8 (UDP header).
pub const MAX_DATAGRAM_V6: u32 = 65_527;
/// After the sender finished: stop once no datagram came for this long.
pub const DRAIN_QUIET: Duration = Duration::from_millis(300);
/// After the sender finished: stop after this long whatever arrives.
pub const DRAIN_MAX: Duration = Duration::from_secs(3);
/// Longest a control frame may take to arrive once it began, or to be written.
pub const CONTROL_IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest single wait for socket space when sending a reply.
const ACK_POLL_MS: i32 = 100;

/// Datagrams up to this size are copied whole into one stack buffer and sent with
/// `send()`; larger ones go as header + payload with `sendmsg()`.
const SMALL_DATAGRAM: usize = 256;
/// Empty polls between two looks at the control connection while busy-polling.
const BUSY_SPINS_PER_POLL: u32 = 64;
/// MPRTT without busy-polling: the sockets block, and a blocked read gives up after
/// this long (at most the ACK time-out) to look at the abort flag, the control
/// connection and the deadline. A run's end is noticed this much late at most.
pub const BLOCK_SLICE: Duration = Duration::from_millis(10);
/// Batched receiving: how long to nap when datagrams were flowing and the socket ran
/// dry, before reading again (the kernel's timer slack adds up to 50 µs). A 16 MiB
/// receive buffer holds thousands of datagrams, far more than arrive meanwhile.
pub const BATCH_NAP: Duration = Duration::from_micros(50);

/// What a UDP STREAM needs beyond [`StreamOptions`].
#[derive(Clone, Debug)]
pub struct UdpOptions {
    /// The stream index carried in every datagram header.
    pub stream: u32,
    /// MPRTT: how long to wait for an ACK before sending the datagram again.
    pub ack_timeout: Duration,
    /// Datagrams per `sendmmsg()`/`recvmmsg()`; 1: one `send()`/`recv()` each. The
    /// synchronous `send()` and `recv()` batch; the sender threads of `send_submit()`
    /// send one datagram per call. Not with MPRTT.
    pub batch: usize,
    /// Send batches as UDP GSO messages (needs `batch` > 1).
    pub gso: bool,
    /// Receive with UDP GRO.
    pub gro: bool,
    /// Read each datagram's kernel receive time (`--rx-timestamps`).
    pub rx_timestamps: bool,
    /// Datagrams are never fragmented (`--dont-fragment`); one larger than the path's
    /// MTU fails the run.
    pub dont_fragment: bool,
    /// The most the kernel may hold for each socket's buffer, each way, where no window
    /// is asked for: a server's share of `--max-memory`. `None`: the STREAM's own size.
    pub buffer_cap: Option<u64>,
}

impl UdpOptions {
    /// Options of stream `stream`, unbatched.
    pub fn new(stream: u32, ack_timeout: Duration) -> UdpOptions {
        UdpOptions {
            stream,
            ack_timeout,
            batch: 1,
            gso: false,
            gro: false,
            rx_timestamps: false,
            dont_fragment: false,
            buffer_cap: None,
        }
    }
}

/// Reads and counts the datagrams queued on `sock` when a STREAM is made of it: they
/// arrived before its peer was told to send (a server's socket is bound before it is
/// connected to the client), so none is the peer's. Bounded: a connected socket takes
/// no more from anyone else, and the queue holds at most its receive buffer.
fn drain_stale(sock: &net::UdpSocket) -> io::Result<u64> {
    let sock = SockRef::from(sock);
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
    let mut stale = 0;
    for _ in 0..MAX_STALE_READS {
        match sock.recv_with_flags(&mut buf, libc::MSG_DONTWAIT) {
            Ok(_) => stale += 1,
            // A stranger's ICMP error, or a signal: the queue may hold more.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::Interrupted
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(stale)
}

/// Most datagrams [`drain_stale`] reads from one socket.
const MAX_STALE_READS: usize = 1 << 20;

/// Nanoseconds since the Unix epoch from the monotonic clock: one clock read gives
/// both a datagram's send time for its header and the start of its latency sample.
/// Only differences of header times are used (jitter), so the two hosts' clocks need
/// not agree, and a wall clock step during the run does not show up as jitter.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EpochClock {
    base: Instant,
    base_ns: u64,
}

impl EpochClock {
    pub(crate) fn new() -> EpochClock {
        let base = Instant::now();
        let base_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        EpochClock { base, base_ns }
    }

    /// `at` in ns since the Unix epoch.
    #[inline]
    pub(crate) fn ns(&self, at: Instant) -> u64 {
        let since =
            u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        self.base_ns.saturating_add(since)
    }
}

/// One socket of a UDP STREAM, shared by the receiving path and a sender thread.
#[derive(Clone)]
struct Socket {
    sock: Arc<net::UdpSocket>,
    /// MPRTT: what answers each datagram.
    reply: Option<Reply>,
    /// MPRTT, sending: where replies are read to (a sender thread's clone has its own).
    reply_buf: Vec<u8>,
    stream: u32,
    ack_timeout: Duration,
    /// The STREAM's sequence counter, shared by all its sockets.
    next_seq: Arc<AtomicU64>,
    abort: Arc<AtomicBool>,
    busy_poll: bool,
    /// MPRTT: the socket blocks (with [`BLOCK_SLICE`] time-outs), so waiting for the
    /// next datagram or ACK is one `recv()` instead of `poll()` + `recv()`.
    blocking: bool,
    /// `--epoll`: where this socket's thread waits for it (else `poll()`); a clone for
    /// a sender thread waits in an instance of its own.
    epoll: Option<Epoll>,
    clock: EpochClock,
}

fn port_closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionRefused,
        "the peer's UDP port is closed (ICMP port unreachable)",
    )
}

impl Socket {
    /// `recv()`; `wait` false: without blocking even on a blocking socket.
    fn recv_flags(&self, buf: &mut [u8], wait: bool) -> io::Result<usize> {
        self.recv_with(buf, if wait { 0 } else { libc::MSG_DONTWAIT })
    }

    /// `recv()` with `flags`; with `MSG_TRUNC` it returns the datagram's whole length,
    /// even when `buf` holds less of it.
    fn recv_with(&self, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
        // SAFETY: `buf` is exclusively borrowed for the call and its length is passed;
        // the fd is open for the life of `self.sock`.
        let rc = unsafe {
            libc::recv(
                self.sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                flags,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }

    /// Sends `buf` as one datagram whose first bytes are the header of `seq`, sent at
    /// `sent` (read by the caller, who also times the send from it).
    fn send_datagram(
        &self,
        buf: &[u8],
        seq: u64,
        sent: Instant,
        deadline: Deadline,
    ) -> io::Result<()> {
        // A small datagram is assembled on the stack and sent with send(), which the
        // kernel takes more cheaply than sendmsg()'s I/O vector (ping-pong sizes).
        let mut small = [0u8; SMALL_DATAGRAM];
        let n = Header {
            seq,
            stream: self.stream,
            sent_ns: self.clock.ns(sent),
        }
        .encode(&mut small[..buf.len().min(HEADER_LEN)]);
        let whole = buf.len() <= SMALL_DATAGRAM;
        if whole {
            small[n..buf.len()].copy_from_slice(&buf[n..]);
        }
        let iov = [IoSlice::new(&small[..n]), IoSlice::new(&buf[n..])];
        let sock = SockRef::from(&*self.sock);
        loop {
            let result = if whole {
                self.sock.send(&small[..buf.len()])
            } else {
                sock.send_vectored(&iov)
            };
            match result {
                Ok(sent) if sent == buf.len() => return Ok(()),
                Ok(sent) => {
                    return Err(io::Error::other(format!(
                        "UDP sent {sent} of a {}-byte datagram",
                        buf.len()
                    )))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLOUT, deadline)?
                }
                // A local firewall dropped it: lost as if on the wire, and accounted
                // for as such by the receiver (and with MPRTT, sent again).
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => return Ok(()),
                // The device queue is full: poll() cannot tell when it drains.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    check_abort(&self.abort)?;
                    deadline.poll_ms()?;
                    std::thread::yield_now();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Err(port_closed()),
                Err(e) => return Err(e),
            }
        }
    }

    /// `sendmmsg()` of `hdrs` on this socket, waiting for room (or with `busy_poll`,
    /// spinning) while it has none.
    fn send_messages(&self, hdrs: &mut [libc::mmsghdr], deadline: Deadline) -> io::Result<Sent> {
        let count = libc::c_uint::try_from(hdrs.len()).unwrap_or(libc::c_uint::MAX);
        loop {
            // SAFETY: `hdrs` is an exclusively borrowed slice of `count` mmsghdrs whose
            // iovecs and control messages point into the live send batch; the fd is
            // open for the life of `self.sock`.
            let rc = unsafe { libc::sendmmsg(self.sock.as_raw_fd(), hdrs.as_mut_ptr(), count, 0) };
            if rc >= 0 {
                return Ok(Sent::Messages(rc as usize));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => self.wait(libc::POLLOUT, deadline)?,
                // A local firewall dropped it: lost as if on the wire.
                Some(libc::EPERM) => return Ok(Sent::FirstDropped),
                // The device queue is full: poll() cannot tell when it drains.
                Some(libc::ENOBUFS) => {
                    check_abort(&self.abort)?;
                    deadline.poll_ms()?;
                    std::thread::yield_now();
                }
                Some(libc::EINTR) => {}
                Some(libc::ECONNREFUSED) => return Err(port_closed()),
                _ => return Err(e),
            }
        }
    }

    /// `recvmmsg()` into `hdrs` on this socket without waiting; `Ok(None)` is EAGAIN.
    fn recv_messages(&self, hdrs: &mut [libc::mmsghdr]) -> io::Result<Option<usize>> {
        let count = libc::c_uint::try_from(hdrs.len()).unwrap_or(libc::c_uint::MAX);
        loop {
            // SAFETY: `hdrs` is an exclusively borrowed slice of `count` mmsghdrs whose
            // iovecs and control buffers point into the live receive batch; a null
            // timeout is allowed.
            let rc = unsafe {
                libc::recvmmsg(
                    self.sock.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    count,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc >= 0 {
                return Ok(Some(rc as usize));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(None),
                // EINTR; or an ICMP error from an earlier ACK (the sender's port
                // closed): the end of data comes over the control link.
                Some(libc::EINTR | libc::ECONNREFUSED) => {}
                _ => return Err(e),
            }
        }
    }

    /// Waits until `until` for the reply to `request`, sent as datagram `seq`, reading
    /// replies into `buf`. `Ok(false)`: it did not come in time. Every reply byte read
    /// is counted, stale replies (to earlier packets) and wrong ones too.
    ///
    /// The reply cannot be there the moment the datagram left, so (unless busy-polling)
    /// this sleeps in `poll()` before the first read instead of paying for a read
    /// that returns `EAGAIN`.
    fn await_reply(
        &self,
        buf: &mut [u8],
        request: &[u8],
        seq: u64,
        until: Instant,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<bool> {
        // Blocking reads only without a deadline: a blocked read may overrun it.
        let block = self.blocking && deadline == Deadline::Never;
        if !self.busy_poll && !block && deadline != Deadline::Now {
            check_abort(&self.abort)?;
            let ms = deadline
                .poll_ms()?
                .min(self.ack_timeout.as_millis() as i32 + 1);
            poll_one(self.epoll.as_ref(), self.sock.as_raw_fd(), libc::POLLIN, ms)?;
        }
        let flags = libc::MSG_TRUNC | if block { 0 } else { libc::MSG_DONTWAIT };
        loop {
            match self.recv_with(buf, flags) {
                Ok(0) => {}
                Ok(n) => {
                    stats.bytes_received += n as u64;
                    let held = &buf[..n.min(buf.len())];
                    if self.reply.is_some_and(|kind| {
                        ReplyDatagram::answers(kind, held, n, request, seq, self.stream)
                    }) {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    check_abort(&self.abort)?;
                    let Ok(attempt_ms) = Deadline::At(until).poll_ms() else {
                        return Ok(false);
                    };
                    let ms = attempt_ms.min(deadline.poll_ms()?);
                    if block {
                        // The read itself waited a slice: read again.
                    } else if self.busy_poll {
                        std::thread::yield_now();
                    } else {
                        poll_one(self.epoll.as_ref(), self.sock.as_raw_fd(), libc::POLLIN, ms)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Err(port_closed()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until the socket may be ready for `events`: sleeps in `poll()`, or with
    /// `busy_poll` yields the CPU once so the caller retries at once.
    fn wait(&self, events: libc::c_short, deadline: Deadline) -> io::Result<()> {
        check_abort(&self.abort)?;
        let ms = deadline.poll_ms()?;
        if self.busy_poll {
            std::thread::yield_now();
        } else {
            poll_one(self.epoll.as_ref(), self.sock.as_raw_fd(), events, ms)?;
        }
        Ok(())
    }

    /// Sends an MPRTT reply datagram. A peer that is gone needs no reply.
    fn send_reply(&self, reply: &[u8]) -> io::Result<bool> {
        loop {
            match self.sock.send(reply) {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    check_abort(&self.abort)?;
                    let fd = self.sock.as_raw_fd();
                    poll_one(self.epoll.as_ref(), fd, libc::POLLOUT, ACK_POLL_MS)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // No room in the device queue, or a local firewall dropped it: the reply
                // is lost as if on the wire, and the sender will send the datagram again.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EPERM)) => {
                    return Ok(false)
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }
}

impl PacketSink for Socket {
    fn send_packet(
        &mut self,
        buf: &[u8],
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        self.send_datagram(buf, seq, start, deadline)?;
        if self.reply.is_some() {
            let mut reply = std::mem::take(&mut self.reply_buf);
            let answered = self.round_trip(&mut reply, buf, seq, start, deadline, stats);
            self.reply_buf = reply;
            answered?;
        }
        stats.send_latency.record_since(start);
        stats.bytes_sent += buf.len() as u64;
        stats.datagrams.sent += 1;
        Ok(())
    }
}

impl Socket {
    /// MPRTT, after datagram `seq` (`buf`, first sent at `start`) left: waits for its
    /// reply, sending it again each time the ACK time-out passes without one.
    fn round_trip(
        &self,
        reply: &mut [u8],
        buf: &[u8],
        seq: u64,
        start: Instant,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        let mut retries = 0;
        loop {
            let until = Instant::now() + self.ack_timeout;
            if self.await_reply(reply, buf, seq, until, deadline, stats)? {
                return Ok(());
            }
            if retries == MAX_RETRIES {
                return Err(unacknowledged(
                    self.stream,
                    seq,
                    buf.len(),
                    start.elapsed(),
                    self.ack_timeout,
                ));
            }
            retries += 1;
            stats.retries += 1;
            self.send_datagram(buf, seq, Instant::now(), deadline)?;
        }
    }
}

impl DatagramFlow for Socket {
    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn send_request(
        &self,
        request: &[u8],
        seq: u64,
        sent: Instant,
        deadline: Deadline,
    ) -> io::Result<()> {
        self.send_datagram(request, seq, sent, deadline)
    }

    fn recv_nowait(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            return match self.recv_with(buf, libc::MSG_TRUNC | libc::MSG_DONTWAIT) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Err(port_closed()),
                Err(e) => Err(e),
            };
        }
    }

    fn answers(&self, reply: &[u8], len: usize, request: &[u8], seq: u64) -> bool {
        self.reply
            .is_some_and(|kind| ReplyDatagram::answers(kind, reply, len, request, seq, self.stream))
    }
}

/// `--rx-timestamps`: records a data datagram's time from its send (its header's time)
/// to the kernel's receipt (`kernel_ns`), and from that to its read (`read_ns`). A
/// negative span (the sender's clock ahead, or a clock step) is not a sample.
fn record_stamps(stats: &mut StreamStats, datagram: &[u8], kernel_ns: Option<u64>, read_ns: u64) {
    let Some(kernel_ns) = kernel_ns else {
        return;
    };
    if let Some(app) = read_ns.checked_sub(kernel_ns) {
        stats.app_latency.record(app);
    }
    let sent_ns = decode(datagram).and_then(|d| d.sent_ns);
    if let Some(network) = sent_ns.and_then(|sent| kernel_ns.checked_sub(sent)) {
        stats.network_latency.record(network);
    }
}

/// Where the peer's sending stands, as the control connection told us.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PeerSending {
    /// Still sending (or not yet told otherwise).
    Running,
    /// Finished: reading what is still on its way.
    Draining {
        since: Instant,
        last_arrival: Instant,
        datagrams: u64,
    },
    /// Finished and drained: `recv()` returns end of stream.
    Done,
}

impl PeerSending {
    /// Whether the peer finished and everything that will arrive has, as `tracker`
    /// counted it: all it sent, or nothing for a quiet while, or the longest drain;
    /// then the tracker is told how many were sent, and the peer is done.
    pub(crate) fn drained(&mut self, tracker: &mut SeqTracker) -> bool {
        match *self {
            PeerSending::Running => false,
            PeerSending::Done => true,
            PeerSending::Draining {
                since,
                last_arrival,
                datagrams,
            } => {
                let now = Instant::now();
                if tracker.unique() >= datagrams
                    || now.duration_since(last_arrival) >= DRAIN_QUIET
                    || now.duration_since(since) >= DRAIN_MAX
                {
                    tracker.finish(datagrams);
                    *self = PeerSending::Done;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// Where the peer's sending stands once `read` is what its control connection said,
    /// this end having told it it finished if `finish_sent`.
    pub(crate) fn told(
        read: Result<SetupMessage, FrameError>,
        finish_sent: bool,
    ) -> io::Result<PeerSending> {
        match read {
            Ok(SetupMessage::UdpFinished { datagrams, .. }) => {
                let now = Instant::now();
                Ok(PeerSending::Draining {
                    since: now,
                    last_arrival: now,
                    datagrams,
                })
            }
            Ok(other) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "unexpected {} on the UDP stream's control connection",
                    other.kind()
                ),
            )),
            // The receiving end of a `--reverse` run closes once it has drained what this
            // end sent: the end of the stream, as EOF is for TCP.
            Err(e) if e.closed && finish_sent => Ok(PeerSending::Done),
            Err(e) if e.closed => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the UDP stream's control connection before it finished sending",
            )),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
        }
    }
}

/// One end of a UDP STREAM.
pub struct UdpStream {
    sockets: Vec<Socket>,
    /// The reliable control connection (blocking, with I/O time-outs).
    control: net::TcpStream,
    /// How messages are framed on it.
    frames: &'static dyn SetupFrames,
    opts: StreamOptions,
    senders: LazySenders,
    /// Figures of `send()` and `recv()` (the calling thread's).
    stats: StreamStats,
    tracker: SeqTracker,
    rcvbuf: BufferGrant,
    sndbuf: BufferGrant,
    peer: PeerSending,
    /// Whether our `UdpFinished` was sent.
    finish_sent: bool,
    /// Sockets the last `poll()` found readable and not yet read.
    ready: Vec<usize>,
    /// Socket read last; tried first next time.
    cursor: usize,
    /// One entry per socket, then the control connection.
    pollfds: Vec<libc::pollfd>,
    /// `--epoll`: where the receiving path waits for its sockets (else `poll()`).
    epoll: Option<Epoll>,
    /// Datagrams of `send()` not yet handed to the kernel (batching only).
    send_batch: Option<SendBatch>,
    /// Datagrams read by `recv()` and not yet returned (batching or GRO only).
    recv_batch: Option<RecvBatch>,
    /// When the datagrams in `recv_batch` were read.
    batch_read_at: Instant,
    /// The last batch read found datagrams: on the next `EAGAIN`, nap instead of
    /// sleeping in `poll()`.
    flowing: bool,
    /// An ACK was just sent: with MPRTT the next datagram cannot be there yet, so the
    /// next `recv()` polls before it reads.
    acked: bool,
    /// MPRTT with sized replies: the reply written for each datagram (its sequence
    /// number goes in first), allocated once.
    response: Vec<u8>,
    clock: EpochClock,
    /// `--flows`: the socket the next datagram (or batch) of bulk goes to.
    next_flow: usize,
    /// `--flows` with MPRTT: the sending side's flows, made at the first send (the
    /// receiving end needs none).
    flows: Option<UdpFlows>,
    /// `--rx-timestamps`: where a single read's control messages go (batches have
    /// their own); `None` without.
    rx_control: Option<Box<ControlBuffer>>,
}

/// With `--dont-fragment`: forbids fragmenting the datagrams of the connected socket
/// `sock`, and refuses `largest`-byte datagrams (the size `flag` gave) if the path's MTU
/// cannot carry them whole.
pub(crate) fn forbid_fragments(
    sock: &net::UdpSocket,
    largest: usize,
    flag: &str,
) -> io::Result<()> {
    let fits = crate::stream::sys::forbid_fragments(sock)?;
    if largest > fits {
        let to = sock
            .peer_addr()
            .map(|a| format!(" to {a}"))
            .unwrap_or_default();
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "--dont-fragment: {largest}-byte datagrams ({flag}) do not fit the path's \
                 MTU{to}, which carries at most {fits} bytes of UDP payload"
            ),
        ));
    }
    Ok(())
}

impl UdpStream {
    /// Builds a STREAM from connected UDP sockets (socket 0 first) and the stream's
    /// control connection, whose messages `frames` encodes; sizes the socket buffers,
    /// sets the sockets non-blocking and starts one sender thread per socket.
    pub fn from_sockets(
        socks: Vec<net::UdpSocket>,
        control: net::TcpStream,
        frames: &'static dyn SetupFrames,
        opts: StreamOptions,
        udp: UdpOptions,
    ) -> io::Result<UdpStream> {
        if socks.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a STREAM needs a socket",
            ));
        }
        control.set_nonblocking(false)?;
        control.set_nodelay(true)?;
        control.set_read_timeout(Some(CONTROL_IO_TIMEOUT))?;
        control.set_write_timeout(Some(CONTROL_IO_TIMEOUT))?;
        let next_seq = Arc::new(AtomicU64::new(0));
        let clock = EpochClock::new();
        let blocking = opts.reply.is_some() && !opts.busy_poll && !opts.epoll;
        let slice = BLOCK_SLICE
            .min(udp.ack_timeout)
            .max(Duration::from_millis(1));
        // Batching holds datagrams back; MPRTT waits for each one's ACK.
        let batched = udp.batch > 1 && opts.reply.is_none();
        // Replies to read (an echo's length is the request's) and to write.
        let (reply_buf, response) = match opts.reply {
            None => (Vec::new(), Vec::new()),
            Some(Reply::Echo) => (vec![0u8; opts.pktsize.max(1)], Vec::new()),
            Some(sized) => {
                let n = sized.len(opts.pktsize);
                (vec![0u8; n], vec![0u8; n])
            }
        };
        let mut default_buffer = socket_buffer(opts.flows.then_some(socks.len()));
        if let Some(cap) = udp.buffer_cap {
            // The kernel keeps twice what is set.
            default_buffer = default_buffer.min(usize::try_from(cap / 2).unwrap_or(usize::MAX));
        }
        let (mut rcvbuf, mut sndbuf) = (BufferGrant::default(), BufferGrant::default());
        let mut sockets = Vec::with_capacity(socks.len());
        for s in socks {
            s.set_nonblocking(!blocking)?;
            if blocking {
                s.set_read_timeout(Some(slice))?;
                s.set_write_timeout(Some(slice))?;
            }
            if let Some(tos) = opts.tos {
                set_tos(&s, tos)?;
            }
            if udp.dont_fragment {
                // The packets, and with MPRTT their replies.
                let reply = match opts.reply {
                    Some(Reply::Echo) | None => 0,
                    Some(sized) => sized.len(opts.pktsize),
                };
                let (largest, flag) = match reply > opts.pktsize {
                    true => (reply, "--response-size"),
                    false => (opts.pktsize, "-l"),
                };
                forbid_fragments(&s, largest, flag)?;
            }
            let (r, w) = match opts.window {
                Some(size) => set_window(&s, size)?,
                // The STREAM's own size, not a peer's request: as root past the host's
                // maximum, on either end.
                None => (
                    size_buffer(&s, Direction::Receive, default_buffer, true)?,
                    size_buffer(&s, Direction::Send, default_buffer, true)?,
                ),
            };
            if sockets.is_empty() || r.granted < rcvbuf.granted {
                rcvbuf = r;
            }
            if sockets.is_empty() || w.granted < sndbuf.granted {
                sndbuf = w;
            }
            if udp.rx_timestamps {
                enable_rx_timestamps(&s)?;
            }
            if udp.gro {
                set_int_opt(&s, libc::SOL_UDP, libc::UDP_GRO, 1).map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot enable UDP_GRO (--gro): {e}"))
                })?;
            }
            sockets.push(Socket {
                sock: Arc::new(s),
                reply: opts.reply,
                reply_buf: reply_buf.clone(),
                stream: udp.stream,
                ack_timeout: udp.ack_timeout,
                next_seq: next_seq.clone(),
                abort: opts.abort.clone(),
                busy_poll: opts.busy_poll,
                blocking,
                epoll: opts.epoll.then(Epoll::new),
                clock,
            });
        }
        // What is queued already came before any peer of this STREAM could send.
        let mut tracker = SeqTracker::new(udp.stream);
        for s in &sockets {
            tracker.on_foreign(drain_stale(&s.sock)?);
        }
        let pollfds = sockets
            .iter()
            .map(|s| s.sock.as_raw_fd())
            .chain([control.as_raw_fd()])
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        Ok(UdpStream {
            ready: Vec::with_capacity(sockets.len() + 1),
            sockets,
            control,
            frames,
            senders: LazySenders::NotStarted,
            stats: StreamStats::default(),
            tracker,
            rcvbuf,
            sndbuf,
            peer: PeerSending::Running,
            finish_sent: false,
            cursor: 0,
            pollfds,
            epoll: opts.epoll.then(Epoll::new),
            send_batch: batched
                .then(|| SendBatch::new(udp.batch, opts.pktsize, udp.gso))
                .transpose()?,
            recv_batch: (batched || udp.gro)
                .then(|| {
                    let slots = if udp.gro {
                        gro_slots(udp.batch)
                    } else {
                        udp.batch
                    };
                    RecvBatch::new(slots, opts.pktsize, udp.gro, udp.rx_timestamps)
                })
                .transpose()?,
            batch_read_at: Instant::now(),
            flowing: false,
            acked: false,
            response,
            clock,
            next_flow: 0,
            flows: None,
            rx_control: udp.rx_timestamps.then(Box::default),
            opts,
        })
    }

    /// Queues `buf` as the next datagram of the send batch; sends the batch once full.
    fn send_batched(&mut self, buf: &[u8], deadline: Deadline) -> io::Result<()> {
        let Some(batch) = &mut self.send_batch else {
            return Ok(());
        };
        let sock = &self.sockets[0];
        let start = Instant::now();
        let seq = sock.next_seq.fetch_add(1, Ordering::Relaxed);
        let slot = batch.next_slot(buf.len());
        let n = Header {
            seq,
            stream: sock.stream,
            sent_ns: self.clock.ns(start),
        }
        .encode(slot);
        slot[n..].copy_from_slice(&buf[n..]);
        batch.push(buf.len());
        if batch.is_full() {
            self.flush_batch(deadline)?;
        }
        Ok(())
    }

    /// Hands every datagram of the send batch to the kernel, counting each as sent
    /// once the kernel took it; the batch takes one latency sample, from the first
    /// `sendmmsg()` to the return of the last (a wait for buffer space counts).
    fn flush_batch(&mut self, deadline: Deadline) -> io::Result<()> {
        let Some(batch) = &mut self.send_batch else {
            return Ok(());
        };
        if batch.is_empty() {
            return Ok(());
        }
        let sock = &self.sockets[self.next_flow];
        if self.opts.flows {
            self.next_flow = (self.next_flow + 1) % self.sockets.len();
        }
        let stats = &mut self.stats;
        let start = Instant::now();
        batch.flush(
            |hdrs| sock.send_messages(hdrs, deadline),
            |len| {
                stats.bytes_sent += len as u64;
                stats.datagrams.sent += 1;
            },
        )?;
        stats.send_latency.record_since(start);
        Ok(())
    }

    /// `--flows` with MPRTT: sends `buf` as the next request on a flow with none in
    /// flight (see [`UdpFlows`]).
    fn send_on_flows(&mut self, buf: &[u8], deadline: Deadline) -> io::Result<()> {
        let (sockets, opts) = (&self.sockets, &self.opts);
        let flows = self.flows.get_or_insert_with(|| {
            let fds: Vec<RawFd> = sockets.iter().map(DatagramFlow::fd).collect();
            let reply_max = opts.reply.map_or(1, |r| r.max_len(opts.pktsize));
            UdpFlows::new(&fds, reply_max, sockets[0].ack_timeout, sockets[0].stream)
        });
        let seq = sockets[0].next_seq.fetch_add(1, Ordering::Relaxed);
        let abort = &*opts.abort;
        flows.send_request(sockets, buf, seq, deadline, abort, &mut self.stats)
    }

    /// Reads a batch from socket `k`; `Ok(false)` is EAGAIN.
    fn read_batch(&mut self, k: usize) -> io::Result<bool> {
        let Some(batch) = &mut self.recv_batch else {
            return Ok(false);
        };
        let sock = &self.sockets[k];
        let got = batch.fill(|hdrs| sock.recv_messages(hdrs))?;
        if got {
            self.batch_read_at = Instant::now();
            self.flowing = true;
        }
        Ok(got)
    }

    /// Hands out the next datagram of the receive batch (copied into `buf` if `copy`),
    /// accounting for it, with `latency_ns` as the batch's receive latency when it was
    /// just read; `None` once the batch is used up. Empty datagrams are accounted (as
    /// foreign) and skipped.
    fn take_buffered(
        &mut self,
        buf: &mut [u8],
        copy: bool,
        latency_ns: Option<u64>,
    ) -> Option<usize> {
        let batch = self.recv_batch.as_mut()?;
        let at = self.batch_read_at;
        loop {
            let (d, stamp) = batch.next_datagram()?;
            let n = d.len().min(buf.len());
            if copy {
                buf[..n].copy_from_slice(&d[..n]);
            }
            let read_ns = self.clock.ns(at);
            let (kind, _) = self.tracker.on_datagram(&d[..n], stamp.unwrap_or(read_ns));
            if kind != Arrival::Foreign {
                record_stamps(&mut self.stats, &d[..n], stamp, read_ns);
            }
            if n == 0 {
                continue;
            }
            if let PeerSending::Draining { last_arrival, .. } = &mut self.peer {
                *last_arrival = at;
            }
            if let Some(ns) = latency_ns {
                self.stats.recv_latency.record(ns);
            }
            self.stats.bytes_received += n as u64;
            self.stats.mark_recv(at);
            return Some(n);
        }
    }

    /// `recv()`; with `copy` false, a datagram already read by `recvmmsg()` is not
    /// copied into `buf`.
    ///
    /// A datagram already read is returned without I/O or clock read, and without a
    /// latency sample of its own: its batch's read took the one sample of the batch,
    /// and it arrived when its batch was read.
    fn receive(&mut self, buf: &mut [u8], timeout: Timeout, copy: bool) -> io::Result<usize> {
        if let Some(n) = self.take_buffered(buf, copy, None) {
            return Ok(n);
        }
        let start = Instant::now();
        let deadline = timeout.deadline_from(|| start);
        let mut spins = 0;
        // One socket that blocks, no deadline to keep: the read itself waits.
        let block = self.sockets.len() == 1
            && self.sockets[0].blocking
            && matches!(self.peer, PeerSending::Running)
            && deadline != Deadline::Now;
        if std::mem::take(&mut self.acked)
            && self.ready.is_empty()
            && !self.opts.busy_poll
            && !block
        {
            self.wait_readable(deadline, &mut spins)?;
        }
        loop {
            if self.drained() {
                return Ok(0);
            }
            let k = self.ready.pop().unwrap_or(self.cursor);
            if self.recv_batch.is_some() {
                if self.read_batch(k)? {
                    self.cursor = k;
                    let latency = span_ns(start, self.batch_read_at);
                    if let Some(n) = self.take_buffered(buf, copy, Some(latency)) {
                        return Ok(n);
                    }
                    continue;
                }
            } else if let Some((n, stamp)) = self.read_from(k, buf, block)? {
                self.cursor = k;
                let now = Instant::now();
                if let PeerSending::Draining { last_arrival, .. } = &mut self.peer {
                    *last_arrival = now;
                }
                let read_ns = self.clock.ns(now);
                let (kind, seq) = self
                    .tracker
                    .on_datagram(&buf[..n], stamp.unwrap_or(read_ns));
                if kind != Arrival::Foreign {
                    record_stamps(&mut self.stats, &buf[..n], stamp, read_ns);
                }
                if n == 0 {
                    // An empty datagram cannot be returned: Ok(0) means end of stream.
                    continue;
                }
                if self.opts.reply.is_some()
                    && kind != Arrival::Foreign
                    && self.answer(k, &buf[..n], seq)?
                {
                    self.acked = true;
                }
                self.stats.recv_latency.record(span_ns(start, now));
                self.stats.bytes_received += n as u64;
                self.stats.mark_recv(now);
                return Ok(n);
            }
            if block {
                // A slice passed: look at the control connection without sleeping.
                self.poll_all(deadline, false)?;
            } else if self.ready.is_empty() {
                self.wait_readable(deadline, &mut spins)?;
            }
        }
    }

    /// Answers `datagram`, numbered `seq`, on socket `k` (MPRTT), counting the reply's
    /// bytes as sent; `Ok(false)` if the reply could not leave.
    fn answer(&mut self, k: usize, datagram: &[u8], seq: u64) -> io::Result<bool> {
        let reply = match self.sockets[k].reply {
            Some(Reply::Echo) => datagram,
            Some(Reply::Ack | Reply::Sized(_)) | None => {
                ReplyDatagram::encode_sized(seq, &mut self.response);
                &self.response
            }
        };
        let sent = self.sockets[k].send_reply(reply)?;
        if sent {
            self.stats.bytes_sent += reply.len() as u64;
        }
        Ok(sent)
    }

    /// Waits for a socket to become readable after all came up empty: sleeps in
    /// `poll()`, or busy-polling, yields once (looking at the control connection and
    /// the other sockets every [`BUSY_SPINS_PER_POLL`] turns).
    fn wait_readable(&mut self, deadline: Deadline, spins: &mut u32) -> io::Result<()> {
        if std::mem::take(&mut self.flowing) && !self.opts.busy_poll && !deadline.expired() {
            // Datagrams are flowing: nap off the socket's wait queue, so the sender
            // does not pay for waking us per datagram, then read what gathered.
            std::thread::sleep(BATCH_NAP);
            return Ok(());
        }
        if !self.opts.busy_poll || deadline == Deadline::Now {
            return self.poll_all(deadline, true);
        }
        self.opts.check_abort()?;
        if deadline.expired() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        *spins += 1;
        if *spins % BUSY_SPINS_PER_POLL == 0 || self.sockets.len() > 1 {
            self.poll_all(deadline, false)?;
        }
        if self.ready.is_empty() {
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Reads one datagram from socket `k`, with its kernel receive time if
    /// `--rx-timestamps` asked for it. `Ok(None)` is EAGAIN (with `wait`, after a
    /// blocking read's [`BLOCK_SLICE`]).
    fn read_from(
        &mut self,
        k: usize,
        buf: &mut [u8],
        wait: bool,
    ) -> io::Result<Option<(usize, Option<u64>)>> {
        loop {
            let read = match &mut self.rx_control {
                None => self.sockets[k].recv_flags(buf, wait).map(|n| (n, None)),
                Some(control) => {
                    let fd = self.sockets[k].sock.as_raw_fd();
                    let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
                    recv_with_control(fd, buf, control, flags)
                        .map(|(n, used)| (n.min(buf.len()), rx_timestamp_ns(&control.0[..used])))
                }
            };
            return match read {
                Ok(got) => Ok(Some(got)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error from an earlier ACK (the sender's port closed): it is
                // reported once; the sender's end of data comes over the control link.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => Err(e),
            };
        }
    }

    /// Whether the peer finished and everything that will arrive has; moves to `Done`
    /// (working out the loss) when it just became so.
    fn drained(&mut self) -> bool {
        self.peer.drained(&mut self.tracker)
    }

    /// Reads the frame the peer sent on the control connection.
    fn read_control(&mut self) -> io::Result<()> {
        let read = self.frames.read(&mut self.control);
        self.peer = PeerSending::told(read, self.finish_sent)?;
        Ok(())
    }

    /// Polls the sockets (and the control connection until the peer finished); fills
    /// `ready`. With a non-blocking call, polls once and fails with `WouldBlock` if
    /// nothing is ready.
    ///
    /// `sleep` false: polls without waiting (busy-polling).
    fn poll_all(&mut self, deadline: Deadline, sleep: bool) -> io::Result<()> {
        self.opts.check_abort()?;
        let (mut ms, once) = match deadline.poll_ms() {
            Ok(ms) if sleep => (ms, false),
            Ok(_) => (0, false),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => (0, true),
            Err(e) => return Err(e),
        };
        if let PeerSending::Draining { last_arrival, .. } = self.peer {
            let left = DRAIN_QUIET.saturating_sub(last_arrival.elapsed());
            ms = ms.min(left.as_millis() as i32 + 1);
        }
        let control = self.sockets.len();
        let listen_control = matches!(self.peer, PeerSending::Running);
        for (k, p) in self.pollfds.iter_mut().enumerate() {
            // A negative fd makes poll() skip the entry.
            p.fd = if k == control && !listen_control {
                -p.fd.abs()
            } else {
                p.fd.abs()
            };
            p.revents = 0;
        }
        if poll_many(self.epoll.as_ref(), &mut self.pollfds, ms)? > 0 {
            let control_ready = self.pollfds[control].fd >= 0 && self.pollfds[control].revents != 0;
            self.ready.extend(
                self.pollfds[..control]
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.revents != 0)
                    .map(|(k, _)| k),
            );
            if control_ready {
                self.read_control()?;
            }
        }
        if once && self.ready.is_empty() && !self.drained() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    }
}

impl Stream for UdpStream {
    fn nsockets(&self) -> usize {
        self.sockets.len()
    }

    fn local_addr(&self) -> String {
        crate::stream::addr_text(self.sockets[0].sock.local_addr())
    }

    fn facts(&self) -> SocketFacts {
        SocketFacts {
            buffers: SocketBuffers::of(&*self.sockets[0].sock),
            ..SocketFacts::default()
        }
    }

    fn peer_addr(&self) -> String {
        crate::stream::addr_text(self.sockets[0].sock.peer_addr())
    }

    fn send(&mut self, buf: &[u8], timeout: Timeout) -> io::Result<usize> {
        self.opts.check_abort()?;
        if self.opts.flows && self.opts.reply.is_some() {
            self.send_on_flows(buf, timeout.deadline())?;
        } else if self.send_batch.is_some() && buf.len() <= self.opts.pktsize {
            self.send_batched(buf, timeout.deadline())?;
        } else {
            // Larger than a batch slot: what is queued goes first, to keep the order.
            self.flush_batch(timeout.deadline())?;
            let k = self.next_flow;
            if self.opts.flows {
                self.next_flow = (k + 1) % self.sockets.len();
            }
            self.sockets[k].send_packet(buf, timeout.deadline(), &mut self.stats)?;
        }
        Ok(buf.len())
    }

    fn send_submit(&mut self, buf: Bytes, timeout: Timeout) -> io::Result<()> {
        let (sockets, opts) = (&self.sockets, &self.opts);
        self.senders
            .get_or_start(|| Senders::start(opts.queue, sockets.clone(), opts.abort.clone()))?
            .submit(buf, timeout)
    }

    fn sender_drain(&mut self, timeout: Timeout) -> io::Result<()> {
        self.senders.drain(timeout)
    }

    fn recv(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize> {
        self.receive(buf, timeout, true)
    }

    fn recv_counted(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize> {
        self.receive(buf, timeout, false)
    }

    fn last_recv_end(&self) -> Option<Instant> {
        self.stats.last_recv
    }

    fn ack_partial(&mut self) -> io::Result<()> {
        // Every datagram is whole and acknowledged as it arrives.
        Ok(())
    }

    fn sent_on_handover(&self) -> bool {
        true
    }

    fn finish_sending(&mut self, timeout: Timeout) -> io::Result<()> {
        if let Some(flows) = &mut self.flows {
            let abort = &*self.opts.abort;
            flows.drain(&self.sockets, timeout.deadline(), abort, &mut self.stats)?;
        }
        let flushed = self.flush_batch(timeout.deadline());
        let stopped = self.senders.finish(timeout, &mut self.stats);
        let result = flushed.and(stopped);
        if self.finish_sent {
            return result;
        }
        self.finish_sent = true;
        let sent = self.stats();
        let told = self
            .frames
            .write(
                &mut self.control,
                &SetupMessage::UdpFinished {
                    datagrams: sent.datagrams.sent,
                    bytes: sent.bytes_sent,
                },
            )
            .map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, e.to_string()));
        // A sender's failure says more than the failure to report it.
        result.and(told)
    }

    fn stats(&self) -> StreamStats {
        let mut s = self.senders.with_figures(&self.stats);
        let mut d = self.tracker.counts();
        d.rcvbuf = self.rcvbuf;
        d.sndbuf = self.sndbuf;
        s.datagrams.merge(&d);
        s
    }
}

crate::transport::stream::impl_std_io!(UdpStream);

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    /// Two connected STREAM ends on loopback, joined by a real control connection.
    fn pair(opts: StreamOptions, ack_timeout: Duration) -> (UdpStream, UdpStream) {
        let n = opts.nsockets;
        let listener = net::TcpListener::bind("127.0.0.1:0").expect("tcp bind");
        let ctl_a = net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (ctl_b, _) = listener.accept().expect("accept");
        let mut a_socks = Vec::new();
        let mut b_socks = Vec::new();
        for _ in 0..n {
            let a = net::UdpSocket::bind("127.0.0.1:0").expect("bind");
            let b = net::UdpSocket::bind("127.0.0.1:0").expect("bind");
            a.connect(b.local_addr().expect("addr")).expect("connect");
            b.connect(a.local_addr().expect("addr")).expect("connect");
            a_socks.push(a);
            b_socks.push(b);
        }
        let udp = UdpOptions::new(0, ack_timeout);
        (
            UdpStream::from_sockets(
                a_socks,
                ctl_a,
                &crate::control::ControlFrames,
                opts.clone(),
                udp.clone(),
            )
            .expect("a"),
            UdpStream::from_sockets(b_socks, ctl_b, &crate::control::ControlFrames, opts, udp)
                .expect("b"),
        )
    }

    fn receive_all(r: &mut UdpStream, size: usize) -> u64 {
        let mut buf = vec![0u8; size];
        let mut total = 0;
        loop {
            match r.recv(&mut buf, Timeout::Millis(10_000)).expect("recv") {
                0 => return total,
                n => total += n as u64,
            }
        }
    }

    #[test]
    fn datagrams_queued_before_the_stream_are_foreign_not_data() {
        let listener = net::TcpListener::bind("127.0.0.1:0").expect("tcp bind");
        let ctl_a = net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (ctl_b, _) = listener.accept().expect("accept");
        // A server's socket bound before it knows the client, and a stranger who finds it.
        let b = net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let stranger = net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        for seq in 0..5u8 {
            stranger
                .send_to(&[seq; 100], b.local_addr().expect("addr"))
                .expect("send");
        }
        let a = net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        a.connect(b.local_addr().expect("addr")).expect("connect");
        b.connect(a.local_addr().expect("addr")).expect("connect");
        let udp = UdpOptions::new(0, Duration::from_millis(100));
        let opts = StreamOptions::default();
        let mut client = UdpStream::from_sockets(
            vec![a],
            ctl_a,
            &crate::control::ControlFrames,
            opts.clone(),
            udp.clone(),
        )
        .expect("a");
        let mut server =
            UdpStream::from_sockets(vec![b], ctl_b, &crate::control::ControlFrames, opts, udp)
                .expect("b");
        let t = thread::spawn(move || {
            for _ in 0..10 {
                client.send(&[0x5a; 500], Timeout::Forever).expect("send");
            }
            client.finish_sending(Timeout::Forever).expect("finish");
        });
        assert_eq!(receive_all(&mut server, 500), 5000);
        t.join().expect("join");
        let d = server.stats().datagrams;
        assert_eq!(
            (d.received, d.foreign, d.lost, d.out_of_order),
            (10, 5, 0, 0)
        );
    }

    #[test]
    fn plain_read_and_write_move_datagrams_and_the_fd_is_the_first_sockets() {
        use std::io::{Read, Write};
        let (mut client, mut server) = pair(StreamOptions::default(), Duration::from_millis(100));
        assert_eq!(
            crate::stream::tests::bound_addr(&client),
            client.local_addr()
        );
        // Each write is one datagram, whose first HEADER_LEN bytes carry the header.
        let datagram: Vec<u8> = (0..64u8).collect();
        assert_eq!(client.write(&datagram).expect("write"), 64);
        assert_eq!(client.write(&[]).expect("empty write"), 0);
        client.flush().expect("flush");
        let mut buf = [0u8; 128];
        assert_eq!(server.read(&mut []).expect("empty read"), 0);
        let n = server.read(&mut buf).expect("read");
        assert_eq!(n, 64);
        assert_eq!(&buf[HEADER_LEN..n], &datagram[HEADER_LEN..]);
        client
            .finish_sending(Timeout::Millis(5_000))
            .expect("finish");
        assert_eq!(server.read(&mut buf).expect("end"), 0);
    }

    #[test]
    fn sync_sends_arrive_counted_and_end_over_the_control_connection() {
        let (mut client, mut server) = pair(StreamOptions::default(), Duration::from_millis(100));
        let started = Instant::now();
        let t = thread::spawn(move || {
            let buf = vec![7u8; 1000];
            for _ in 0..500 {
                client.send(&buf, Timeout::Forever).expect("send");
            }
            client.send(&buf[..5], Timeout::Forever).expect("short");
            client.finish_sending(Timeout::Forever).expect("finish");
            client.stats()
        });
        assert_eq!(receive_all(&mut server, 1000), 500_005);
        // The last datagram's arrival, which the server's loop takes as "now".
        let last = server.last_recv_end().expect("a receive's end");
        assert!(started <= last && last <= Instant::now());
        let cs = t.join().expect("join");
        assert_eq!(cs.bytes_sent, 500_005);
        assert_eq!(cs.datagrams.sent, 501);
        let d = server.stats().datagrams;
        assert_eq!(
            (d.peer_sent, d.received, d.lost, d.duplicates),
            (501, 501, 0, 0)
        );
        assert_eq!(d.out_of_order, 0, "one socket, one sender: in order");
    }

    #[test]
    fn four_sockets_through_the_queue() {
        let opts = StreamOptions {
            nsockets: 4,
            ..StreamOptions::default()
        };
        let (mut client, mut server) = pair(opts, Duration::from_millis(100));
        let t = thread::spawn(move || {
            let buf = Bytes::from(vec![1u8; 8192]);
            for _ in 0..1000 {
                client
                    .send_submit(buf.clone(), Timeout::Forever)
                    .expect("submit");
            }
            client.sender_drain(Timeout::Forever).expect("drain");
            client.finish_sending(Timeout::Forever).expect("finish");
            client.stats()
        });
        let got = receive_all(&mut server, 8192);
        let cs = t.join().expect("join");
        assert!(
            matches!(server.senders, LazySenders::NotStarted),
            "a receiving STREAM starts no sender threads"
        );
        assert_eq!(cs.datagrams.sent, 1000);
        let d = server.stats().datagrams;
        assert_eq!(d.peer_sent, 1000);
        assert_eq!(d.received - d.duplicates + d.lost, 1000);
        assert_eq!(got, d.received * 8192);
    }

    /// MPRTT's waits: in blocking reads by default, in `epoll_wait()` with `--epoll`.
    fn mprtt_modes() -> [StreamOptions; 2] {
        let mprtt = StreamOptions {
            reply: Some(Reply::Ack),
            ..StreamOptions::default()
        };
        let epoll = StreamOptions {
            epoll: true,
            ..mprtt.clone()
        };
        [mprtt, epoll]
    }

    /// The seconds written as `N.NNs` right after `before` in `text`.
    fn secs_after(text: &str, before: &str) -> f64 {
        let (_, rest) = text.split_once(before).expect("the time");
        let (secs, _) = rest.split_once('s').expect("seconds");
        secs.parse().expect("a number")
    }

    #[test]
    fn an_echo_or_a_sized_reply_ends_the_round_trip_only_when_it_is_the_right_one() {
        for reply in [Reply::Echo, Reply::Sized(300)] {
            let listener = net::TcpListener::bind("127.0.0.1:0").expect("tcp bind");
            let control =
                net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
            let (_control_peer, _) = listener.accept().expect("accept");
            let ours = net::UdpSocket::bind("127.0.0.1:0").expect("bind");
            let peer = net::UdpSocket::bind("127.0.0.1:0").expect("bind");
            ours.connect(peer.local_addr().expect("addr"))
                .expect("connect");
            peer.connect(ours.local_addr().expect("addr"))
                .expect("connect");
            let opts = StreamOptions {
                reply: Some(reply),
                pktsize: 100,
                ..StreamOptions::default()
            };
            let udp = UdpOptions::new(0, Duration::from_secs(5));
            let mut client = UdpStream::from_sockets(
                vec![ours],
                control,
                &crate::control::ControlFrames,
                opts,
                udp,
            )
            .expect("stream");
            let t = thread::spawn(move || {
                let mut request = [0u8; 200];
                let n = peer.recv(&mut request).expect("the request");
                let right = match reply {
                    Reply::Echo => request[..n].to_vec(),
                    Reply::Ack | Reply::Sized(_) => {
                        let mut r = vec![0u8; reply.len(100)];
                        ReplyDatagram::encode_sized(0, &mut r);
                        r
                    }
                };
                let mut changed = right.clone();
                *changed.last_mut().expect("bytes") ^= 1;
                let mut late = right.clone();
                late[0] = 9;
                // Wrong ones first: cut short, changed (an echo's payload; a sized
                // reply's filler, which is not looked at), another packet's.
                for wrong in [&right[..50], &changed[..], &late[..]] {
                    peer.send(wrong).expect("send");
                }
                peer.send(&right).expect("send");
            });
            client
                .send(&[7u8; 100], Timeout::Forever)
                .expect("answered");
            t.join().expect("join");
            let cs = client.stats();
            assert_eq!(cs.retries, 0, "{reply:?}");
            assert_eq!(cs.send_latency.count(), 1, "{reply:?}");
            let len = reply.len(100) as u64;
            // Every reply byte read counts, whether it ended the round trip or not; a
            // sized reply's filler does not matter, so the changed one answers.
            let read = match reply {
                Reply::Echo => 50 + 3 * len,
                Reply::Ack | Reply::Sized(_) => 50 + len,
            };
            assert_eq!(cs.bytes_received, read, "{reply:?}");
        }
    }

    #[test]
    fn mprtt_resends_until_acknowledged_then_gives_up_naming_the_packet() {
        for opts in mprtt_modes() {
            let epoll = opts.epoll;
            let (mut client, mut server) = pair(opts, Duration::from_millis(20));
            // Nobody receives yet: the first packet is sent 1 + MAX_RETRIES times.
            let e = client
                .send(b"0123456789abcdefghijklmnop", Timeout::Forever)
                .expect_err("no ACK");
            assert_eq!(e.kind(), io::ErrorKind::TimedOut, "epoll {epoll}");
            assert!(e.to_string().contains("seq=0"), "{e}");
            // 11 sends, 20 ms each: the time waited is at least 0.22 s.
            let waited = secs_after(&e.to_string(), "was not acknowledged in ");
            assert!((0.22..2.0).contains(&waited), "{e}");
            assert!(
                e.to_string().contains(
                    "(sent 11 times, waiting 20 ms for its ACK each time: --ack-timeout)"
                ),
                "{e}"
            );
            assert_eq!(client.stats().retries, 10, "epoll {epoll}");
            // The receiver reads all 11 copies: one new, ten duplicates, each ACKed.
            let mut buf = [0u8; 64];
            for _ in 0..11 {
                server.recv(&mut buf, Timeout::Millis(5_000)).expect("copy");
            }
            let d = server.stats().datagrams;
            assert_eq!((d.received, d.duplicates), (11, 10), "epoll {epoll}");
            assert_eq!(server.stats().bytes_sent, 11, "every copy ACKed");
            assert_eq!(server.stats().bytes_received, 11 * 26);
            // Answered now: the next packet's ACK comes back.
            let t = thread::spawn(move || {
                let got = server.recv(&mut buf, Timeout::Millis(5_000)).expect("next");
                (got, server)
            });
            client.send(&[9u8; 30], Timeout::Forever).expect("ACKed");
            let (got, _server) = t.join().expect("join");
            assert_eq!(got, 30);
            assert_eq!(client.stats().retries, 10, "epoll {epoll}");
        }
    }

    #[test]
    fn a_finished_sender_hears_the_receivers_close_as_the_end_of_the_stream() {
        let (mut sender, mut receiver) = pair(StreamOptions::default(), Duration::from_millis(100));
        let mut buf = [0u8; 64];
        // Before the sender finished, a closed control connection is a failure.
        let (mut early, quitter) = pair(StreamOptions::default(), Duration::from_millis(100));
        drop(quitter);
        let e = early
            .recv(&mut buf, Timeout::Millis(5_000))
            .expect_err("the peer left early");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        // --reverse: the server sends, the client drains and closes.
        for _ in 0..3 {
            sender.send(&[7u8; 40], Timeout::Forever).expect("send");
        }
        sender.finish_sending(Timeout::Forever).expect("finish");
        assert_eq!(receive_all(&mut receiver, 64), 120);
        drop(receiver);
        assert_eq!(
            sender.recv(&mut buf, Timeout::Millis(5_000)).expect("end"),
            0
        );
    }

    #[test]
    fn recv_timeouts_follow_the_seed_convention() {
        let plain = StreamOptions::default();
        for opts in [
            plain.clone(),
            StreamOptions {
                epoll: true,
                ..plain
            },
        ] {
            let epoll = opts.epoll;
            let (_client, mut server) = pair(opts, Duration::from_millis(100));
            let mut buf = [0u8; 16];
            let e = server
                .recv(&mut buf, Timeout::from_millis(0))
                .expect_err("no data");
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "epoll {epoll}");
            let t0 = Instant::now();
            let e = server
                .recv(&mut buf, Timeout::from_millis(150))
                .expect_err("no data");
            assert_eq!(e.kind(), io::ErrorKind::TimedOut, "epoll {epoll}");
            assert!(t0.elapsed() >= Duration::from_millis(140), "epoll {epoll}");
        }
    }

    /// A pair whose ends batch `batch` datagrams, with GSO and GRO as given.
    fn batched_pair(batch: usize, gso: bool, gro: bool) -> (UdpStream, UdpStream) {
        let opts = StreamOptions {
            pktsize: 1000,
            ..StreamOptions::default()
        };
        let (a, b) = pair(opts.clone(), Duration::from_millis(100));
        let rebuild = |s: UdpStream| {
            let socks = s
                .sockets
                .iter()
                .map(|k| k.sock.try_clone().expect("clone"))
                .collect();
            let control = s.control.try_clone().expect("clone");
            let udp = UdpOptions {
                batch,
                gso,
                gro,
                ..UdpOptions::new(0, Duration::from_millis(100))
            };
            UdpStream::from_sockets(
                socks,
                control,
                &crate::control::ControlFrames,
                opts.clone(),
                udp,
            )
            .expect("stream")
        };
        (rebuild(a), rebuild(b))
    }

    /// Sends `n` datagrams of 1000 bytes (the last `last` bytes) and receives them all.
    fn batched_exchange(batch: usize, gso: bool, gro: bool, n: u64, last: usize) -> UdpStream {
        let (mut client, mut server) = batched_pair(batch, gso, gro);
        let t = thread::spawn(move || {
            let buf = vec![3u8; 1000];
            for _ in 1..n {
                client.send(&buf, Timeout::Forever).expect("send");
            }
            client.send(&buf[..last], Timeout::Forever).expect("send");
            client.finish_sending(Timeout::Forever).expect("finish");
            client.stats()
        });
        let got = receive_all(&mut server, 1000);
        let cs = t.join().expect("join");
        assert_eq!(cs.datagrams.sent, n);
        assert_eq!(cs.bytes_sent, (n - 1) * 1000 + last as u64);
        assert_eq!(got, cs.bytes_sent);
        let d = server.stats().datagrams;
        assert_eq!(
            (
                d.peer_sent,
                d.received,
                d.lost,
                d.duplicates,
                d.out_of_order
            ),
            (n, n, 0, 0, 0)
        );
        // One sample per sendmmsg() batch: every `batch` sends, and the rest at the end.
        assert_eq!(
            cs.send_latency.count(),
            n.div_ceil(batch as u64),
            "one send sample per batch"
        );
        // One sample per recvmmsg() batch, each a read that took time: no datagram is
        // recorded as having waited for nothing.
        let recv = server.stats().recv_latency;
        assert!((1..=n).contains(&recv.count()), "{}", recv.count());
        let min = recv
            .summary(&crate::percentiles::Percentiles::default())
            .map_or(0, |l| l.min_ns);
        assert!(min > 0, "a receive sample of 0 ns");
        server
    }

    #[test]
    fn batched_sends_count_each_datagram_once_the_kernel_took_it() {
        let server = batched_exchange(16, false, false, 1000, 1000);
        assert_eq!(
            server.recv_batch.as_ref().map(RecvBatch::coalesced),
            Some(0)
        );
        batched_exchange(7, false, false, 100, 13);
    }

    #[test]
    fn gso_and_gro_coalesce_on_loopback_and_every_segment_is_counted() {
        // Batches of 64 datagrams of 1000 bytes: one GSO message each, which loopback
        // delivers whole to the GRO socket; the short last datagram ends the last one.
        let server = batched_exchange(64, true, true, 1000, 999);
        let coalesced = server.recv_batch.as_ref().map_or(0, RecvBatch::coalesced);
        assert!(coalesced > 0, "GRO handed over no coalesced buffer");
    }

    #[test]
    fn a_lost_tail_is_loss_once_the_sender_finished() {
        let (mut client, mut server) = pair(StreamOptions::default(), Duration::from_millis(100));
        // Ten datagrams "sent", the last five lost on the way: the sender skips their
        // sequence numbers but counts them, as if the network had dropped them.
        for _ in 0..5 {
            client.send(&[0u8; 100], Timeout::Forever).expect("send");
        }
        client.sockets[0].next_seq.fetch_add(5, Ordering::Relaxed);
        client.stats.datagrams.sent += 5;
        client.finish_sending(Timeout::Forever).expect("finish");
        assert_eq!(receive_all(&mut server, 100), 500);
        let d = server.stats().datagrams;
        assert_eq!((d.peer_sent, d.received, d.lost), (10, 5, 5));
    }
}
