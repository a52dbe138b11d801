//! The TCP STREAM.
//!
//! `nsockets` TCP connections between the same two hosts. Latency is timed as the original design
//! defines it: a send from the write() start to its return (waits included, and with
//! MPRTT to the reply read); a receive from the start of the call to the read() that
//! returns data (and with MPRTT, the reply written).
//!
//! How calls wait. By default sockets are in blocking mode and a call sleeps in the
//! kernel: one `recv()` or `send()` per packet, as blocking tools do, instead of a
//! non-blocking try, `EAGAIN`, `poll()` and a retry (three system calls on every
//! ping-pong turn). The [`Timeout`] still holds: the socket's `SO_RCVTIMEO` /
//! `SO_SNDTIMEO` is set to what is left of the deadline, at most one poll slice (so an
//! abort is noticed as soon), and only when that value changes, which is rarely.
//! `Timeout::NonBlocking` calls pass `MSG_DONTWAIT`. Sockets stay non-blocking, with
//! `poll()` only after `EAGAIN`, where waiting must not happen in the kernel: with
//! `--busy-poll` (which spins), `--zerocopy` (whose writers wait themselves) and
//! `--epoll` (whose waits are `epoll_wait()`, see [`crate::stream::epoll`]). A STREAM of
//! several sockets multiplexes its receives with `poll()` (or `epoll_wait()`) either way.
//!
//! The receiving end may set a low-water mark (`SO_RCVLOWAT`, one packet by default on
//! the server): a sleeping read or `poll()` then wakes once that much has arrived
//! rather than on every segment. Reads still return less at end of stream, and after a
//! poll slice (see `poll_open`).
//!
//! MPRTT replies: a 1-byte ACK per packet, `--response-size` bytes per packet, or with
//! `echo` the packet's own bytes. A request's reply may arrive in pieces: the sender
//! reads until all of it is there, then times the round trip.
//!
//! Every read, write, option and `poll()` of a data socket goes through its
//! [`DataSocket`]'s table of calls (zero-copy writers aside): libc's for TCP,
//! librdmacm's for `--rdma-api rsocket` (see [`crate::stream::socket_calls`]).
//! rsockets have no kernel time-outs, so they always run in non-blocking mode.

use super::flows::{FlowSocket, Flows};
use super::uring::{no_wait, Ring};
use super::zerocopy::{ZeroCopy, ZeroCopyWriter};
use crate::stats::{span_ns, StreamStats};
use crate::stream::epoll::Epoll;
use crate::stream::reply::{Reply, ReplyCursor};
use crate::stream::sender::{LazySenders, PacketSink, Senders};
use crate::stream::socket_calls::DataSocket;
use crate::stream::sys::{
    bound_paced_backlog, set_max_pacing_rate, set_tos, set_window, tcp_quickack,
};
use crate::stream::{Deadline, Timeout};
use crate::transport::figures::{TransportFigures, TransportInForce};
use crate::transport::stream::{SocketBuffers, SocketFacts, Stream, StreamOptions};
use crate::transport::tcp::facts::{receive_window_short_of, TcpInForce, TcpInfo};
use crate::transport::tcp::settings::RECV_CHUNK;
use bytes::Bytes;
use socket2::SockRef;
use std::cell::RefCell;
use std::io;
use std::net::{self, IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The kernel time-outs a blocking-mode socket has, in ms (0: not set yet), kept so
/// that they are set only when they change. Shared by every handle on the connection.
#[derive(Default)]
struct KernelTimeouts {
    recv_ms: AtomicU32,
    send_ms: AtomicU32,
}

/// One socket of a TCP STREAM. The receiving path and each sender thread hold their own
/// `Socket` for the same connection (see [`Socket::for_sender`]).
struct Socket {
    sock: Arc<DataSocket>,
    /// MPRTT: what answers each packet sent.
    reply_due: Option<Reply>,
    quickack: bool,
    busy_poll: bool,
    /// Calls sleep in the kernel (see the module doc); else `poll()` after `EAGAIN`.
    blocking: bool,
    timeouts: Arc<KernelTimeouts>,
    abort: Arc<AtomicBool>,
    /// `--zerocopy`: this thread's zero-copy writer; payload goes through it.
    zerocopy: Option<ZeroCopyWriter>,
    /// Where MPRTT replies are read to (allocated once: a reply, or a packet with echo).
    reply: Vec<u8>,
    /// Flags every `recv()` adds: `MSG_TRUNC` with `--skip-rx-copy`, else none.
    recv_flags: libc::c_int,
    /// `--io-uring`: this thread's ring, through which the data calls go.
    ring: Option<RefCell<Ring>>,
    /// `--epoll`: where this thread waits for the socket (else `poll()`).
    epoll: Option<Epoll>,
}

/// A ring for a thread's data calls if `--io-uring` asks for one.
fn new_ring(io_uring: bool) -> io::Result<Option<RefCell<Ring>>> {
    io_uring.then(|| Ring::new().map(RefCell::new)).transpose()
}

/// Whether a kernel time-out applies to reading or writing.
#[derive(Clone, Copy)]
enum Direction {
    Recv,
    Send,
}

impl Socket {
    fn new(sock: Arc<DataSocket>, opts: &StreamOptions, blocking: bool) -> io::Result<Socket> {
        Ok(Socket {
            zerocopy: ZeroCopyWriter::new(opts.tcp.zerocopy, &*sock)?,
            sock,
            reply_due: opts.reply,
            quickack: opts.tcp.quickack,
            busy_poll: opts.busy_poll,
            blocking,
            timeouts: Arc::default(),
            abort: opts.abort.clone(),
            reply: vec![0u8; opts.reply.map_or(1, |r| r.max_len(opts.pktsize)).max(1)],
            recv_flags: if opts.tcp.skip_rx_copy {
                libc::MSG_TRUNC
            } else {
                0
            },
            ring: new_ring(opts.tcp.io_uring)?,
            epoll: opts.epoll.then(Epoll::new),
        })
    }

    /// Another handle on the same connection for a sender thread, with its own
    /// zero-copy writer (a writer's state belongs to one thread) and reply buffer.
    fn for_sender(&self, mode: ZeroCopy) -> io::Result<Socket> {
        Ok(Socket {
            sock: self.sock.clone(),
            reply_due: self.reply_due,
            quickack: self.quickack,
            busy_poll: self.busy_poll,
            blocking: self.blocking,
            timeouts: self.timeouts.clone(),
            abort: self.abort.clone(),
            zerocopy: ZeroCopyWriter::new(mode, &*self.sock)?,
            reply: vec![0u8; self.reply.len()],
            recv_flags: self.recv_flags,
            ring: new_ring(self.ring.is_some())?,
            epoll: self.epoll.clone(),
        })
    }

    /// One `recv()`: waits at most `wait` ms (the kernel time-out [`Socket::arm`] set,
    /// or the ring's linked one), or with `None` not at all (`MSG_DONTWAIT`).
    fn recv_raw(&self, buf: &mut [u8], wait: Option<u32>) -> io::Result<usize> {
        if let Some(ring) = &self.ring {
            let fd = self.sock.as_raw_fd();
            return ring.borrow_mut().recv(fd, buf, self.recv_flags, wait);
        }
        let flags = self.recv_flags | no_wait(wait);
        self.sock.recv(buf, flags)
    }

    /// One `send()` (never raising SIGPIPE), waiting as [`Socket::recv_raw`] does.
    fn send_raw(&self, buf: &[u8], wait: Option<u32>) -> io::Result<usize> {
        if let Some(ring) = &self.ring {
            let fd = self.sock.as_raw_fd();
            return ring.borrow_mut().send(fd, buf, libc::MSG_NOSIGNAL, wait);
        }
        let flags = libc::MSG_NOSIGNAL | no_wait(wait);
        self.sock.send(buf, flags)
    }

    /// Blocking mode, before a call that may sleep: fails on abort or a passed
    /// deadline, else returns how long the call may sleep in ms (what is left, at most
    /// one slice; `None` for `Deadline::Now`) and, without a ring, makes that the
    /// kernel time-out. `now`: the caller's clock reading from just before, if any.
    fn arm(
        &self,
        dir: Direction,
        deadline: Deadline,
        now: Option<Instant>,
    ) -> io::Result<Option<u32>> {
        self.check_abort()?;
        if deadline == Deadline::Now {
            return Ok(None);
        }
        let ms = deadline.poll_ms_from(|| now.unwrap_or_else(Instant::now))? as u32;
        if self.ring.is_some() {
            return Ok(Some(ms));
        }
        let (cached, name) = match dir {
            Direction::Recv => (&self.timeouts.recv_ms, libc::SO_RCVTIMEO),
            Direction::Send => (&self.timeouts.send_ms, libc::SO_SNDTIMEO),
        };
        if cached.load(Ordering::Relaxed) != ms {
            self.sock
                .set_timeout_opt(name, Duration::from_millis(u64::from(ms)))?;
            cached.store(ms, Ordering::Relaxed);
        }
        Ok(Some(ms))
    }

    fn check_abort(&self) -> io::Result<()> {
        crate::stream::check_abort(&self.abort)
    }

    /// Reads once without waiting. `Ok(None)` is EAGAIN; `Ok(Some(0))` end of stream.
    fn read_nowait(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            return match self.recv_raw(buf, None) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
        }
    }

    /// Reads once, waiting for data until `deadline`. `Ok(0)` is end of stream. `start`:
    /// the caller's clock reading from just before, which serves the first attempt.
    fn read_some(
        &self,
        buf: &mut [u8],
        deadline: Deadline,
        start: Option<Instant>,
    ) -> io::Result<usize> {
        let mut now = start;
        loop {
            let sleep = if self.blocking {
                self.arm(Direction::Recv, deadline, now.take())?
            } else {
                None
            };
            match self.recv_raw(buf, sleep) {
                Ok(n) => return Ok(n),
                // Blocking: the kernel time-out (one slice) passed; `arm` decides.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && sleep.is_some() => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLIN, deadline)?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes all of `buf` (zero-copy if so configured), waiting until `deadline`.
    fn write_payload(&mut self, buf: &[u8], deadline: Deadline) -> io::Result<()> {
        let Some(zc) = &mut self.zerocopy else {
            return self.write_all(buf, deadline);
        };
        let sock = &*self.sock;
        let (abort, busy, epoll) = (&*self.abort, self.busy_poll, self.epoll.as_ref());
        zc.write_all(sock.as_raw_fd(), buf, &mut || {
            wait_ready(sock, libc::POLLOUT, deadline, abort, busy, epoll)
        })
    }

    /// Writes all of `buf` with plain `send()`, waiting until `deadline`.
    fn write_all(&self, mut buf: &[u8], deadline: Deadline) -> io::Result<()> {
        while !buf.is_empty() {
            let sleep = if self.blocking {
                self.arm(Direction::Send, deadline, None)?
            } else {
                None
            };
            match self.send_raw(buf, sleep) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && sleep.is_some() => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLOUT, deadline)?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads `reply`, the MPRTT reply to a packet of `sent` bytes. Returns the bytes
    /// read.
    fn read_reply(&mut self, reply: Reply, sent: usize, deadline: Deadline) -> io::Result<usize> {
        let want = reply.len(sent);
        // Non-blocking mode: the reply needs the peer to wake and answer, so right after
        // the write it is never there yet; sleeping in poll() first saves a read() that
        // would only return EAGAIN. Spinning and non-blocking calls try the read first.
        if !self.blocking && !self.busy_poll && deadline != Deadline::Now {
            self.wait(libc::POLLIN, deadline)?;
        }
        let mut got = 0;
        while got < want {
            let chunk = (want - got).min(self.reply.len());
            let mut reply = std::mem::take(&mut self.reply);
            let read = self.read_some(&mut reply[..chunk], deadline, None);
            self.reply = reply;
            match read? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed the connection while a reply was awaited",
                    ))
                }
                n => got += n,
            }
        }
        if self.quickack {
            tcp_quickack(&*self.sock)?;
        }
        Ok(got)
    }

    fn wait(&self, events: libc::c_short, deadline: Deadline) -> io::Result<()> {
        let epoll = self.epoll.as_ref();
        wait_ready(
            &self.sock,
            events,
            deadline,
            &self.abort,
            self.busy_poll,
            epoll,
        )
    }
}

/// Waits until `sock` may be ready for `events`: sleeps in `poll()` (or in `epoll`), or
/// with `busy_poll` returns at once so the caller retries its non-blocking call (a
/// spin). Fails once `abort` is set or `deadline` passed.
///
/// The spin yields the CPU to other runnable threads on each turn: on a machine with
/// fewer free cores than spinning threads (both ends of a loopback run spin), a pure
/// spin would keep the peer that must answer from running.
fn wait_ready(
    sock: &DataSocket,
    events: libc::c_short,
    deadline: Deadline,
    abort: &AtomicBool,
    busy_poll: bool,
    epoll: Option<&Epoll>,
) -> io::Result<()> {
    crate::stream::check_abort(abort)?;
    let ms = deadline.poll_ms()?;
    if busy_poll {
        std::thread::yield_now();
    } else if let Some(epoll) = epoll {
        epoll.poll_one(sock.as_raw_fd(), events, ms)?;
    } else {
        sock.poll_one(events, ms)?;
    }
    Ok(())
}

impl FlowSocket for Socket {
    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn send_nowait(&self, buf: &[u8]) -> io::Result<Option<usize>> {
        loop {
            return match self.send_raw(buf, None) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
        }
    }

    fn recv_nowait(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.read_nowait(buf)
    }
}

impl Socket {
    /// Sends one packet (and with MPRTT reads its reply), accounting for it in `stats`;
    /// returns the clock read that ended its latency.
    fn send_timed(
        &mut self,
        buf: &[u8],
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<Instant> {
        let start = Instant::now();
        self.write_payload(buf, deadline)?;
        if let Some(reply) = self.reply_due {
            stats.bytes_received += self.read_reply(reply, buf.len(), deadline)? as u64;
        }
        let end = stats.send_latency.record_since(start);
        stats.bytes_sent += buf.len() as u64;
        Ok(end)
    }
}

impl PacketSink for Socket {
    fn send_packet(
        &mut self,
        buf: &[u8],
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        self.send_timed(buf, deadline, stats).map(drop)
    }
}

/// The sender threads of a STREAM: started at the first `send_submit()`, so a STREAM
/// driven with `send()` only (the default) or only receiving runs none.
/// One end of a TCP STREAM.
pub struct TcpStream {
    sockets: Vec<Socket>,
    opts: StreamOptions,
    senders: LazySenders,
    /// Figures of `send()` and `recv()` (the calling thread's).
    stats: StreamStats,
    /// When the last `send()` returned ([`Stream::last_send_end`]).
    last_send_end: Option<Instant>,
    /// Sockets that reached end of stream.
    eof: Vec<bool>,
    open: usize,
    /// Sockets the last `poll()` found readable and not yet read.
    ready: Vec<usize>,
    /// Socket read last; tried first next time.
    cursor: usize,
    /// MPRTT: per socket, where the packet arriving stands and what it is owed.
    owed: Vec<ReplyCursor>,
    /// MPRTT: a reply was just written for a whole packet, so the next packet cannot be
    /// there before the peer has read it: in non-blocking mode the next `recv()` polls
    /// before reading.
    acked: bool,
    /// The last read returned data: with [`StreamOptions::rx_nap`], the next one naps
    /// rather than sleeps if it finds none.
    flowing: bool,
    pollfds: Vec<libc::pollfd>,
    /// `--epoll`: where the receiving path waits for several sockets (else `poll()`).
    epoll: Option<Epoll>,
    /// `--flows`: the sending side's flows, one per socket, made at the first send (the
    /// receiving end needs none, nor their reply buffer).
    flows: Option<Flows>,
    /// What the kernel reports of the settings in force, read once they are all set.
    in_force: InForce,
}

/// Socket 0's settings as the kernel reports them once the STREAM has set them; they
/// do not change for the life of the sockets, so reports read them from here rather
/// than asking the kernel at every interval.
struct InForce {
    congestion: Option<String>,
    rcvlowat: Option<u32>,
}

impl InForce {
    fn read(sock: &DataSocket) -> InForce {
        // rsockets have no congestion control or low-water mark of the kernel's to name.
        if !sock.calls().kernel {
            return InForce {
                congestion: None,
                rcvlowat: None,
            };
        }
        let mark = sock.int_opt(libc::SOL_SOCKET, libc::SO_RCVLOWAT).ok();
        InForce {
            congestion: congestion_of(sock).ok(),
            rcvlowat: mark.and_then(|m| u32::try_from(m).ok()),
        }
    }
}

impl TcpStream {
    /// Active end: connects `opts.nsockets` sockets to `addr`.
    pub fn connect(addr: impl ToSocketAddrs, opts: StreamOptions) -> io::Result<TcpStream> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
        let handshake = HandshakeOptions {
            bind: None,
            congestion: opts.tcp.congestion.as_deref(),
            window: opts.window,
            tos: opts.tos,
            mss: opts.tcp.mss,
            local_port: None,
            device: None,
            flowlabel: None,
        };
        let socks = (0..opts.nsockets)
            .map(|_| handshake.connect(addr, None))
            .collect::<io::Result<Vec<_>>>()?;
        TcpStream::from_sockets(socks, opts)
    }

    /// Passive end: accepts `opts.nsockets` connections on `listener`.
    pub fn accept(listener: &TcpListener, opts: StreamOptions) -> io::Result<TcpStream> {
        let socks = (0..opts.nsockets)
            .map(|_| listener.accept().map(|(s, _)| s))
            .collect::<io::Result<Vec<_>>>()?;
        TcpStream::from_sockets(socks, opts)
    }

    /// Builds a STREAM from connected sockets (socket 0 first): sets their mode (see the
    /// module doc) and the TCP options.
    pub fn from_sockets(socks: Vec<net::TcpStream>, opts: StreamOptions) -> io::Result<TcpStream> {
        TcpStream::from_data_sockets(socks.into_iter().map(DataSocket::from).collect(), opts)
    }

    /// Builds a STREAM from connected sockets of one kind (kernel TCP or rsockets),
    /// socket 0 first. Options only kernel sockets have are refused for others.
    pub fn from_data_sockets(socks: Vec<DataSocket>, opts: StreamOptions) -> io::Result<TcpStream> {
        let Some(first) = socks.first() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a STREAM needs a socket",
            ));
        };
        let kernel = first.calls().kernel;
        if !kernel {
            let unsupported = [
                (opts.busy_poll, "--busy-poll"),
                (opts.tcp.zerocopy != ZeroCopy::Off, "--zerocopy"),
                (opts.tcp.quickack, "--quickack"),
                (opts.tcp.congestion.is_some(), "--congestion"),
                (opts.tcp.rcvlowat.is_some(), "--rcvlowat"),
                (opts.tcp.skip_rx_copy, "--skip-rx-copy"),
                (opts.window.is_some(), "--window"),
                (opts.tcp.io_uring, "--io-uring"),
                (opts.epoll, "--epoll"),
                (opts.tcp.fq_rate.is_some(), "--fq-rate"),
            ];
            if let Some((_, flag)) = unsupported.iter().find(|(on, _)| *on) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("{flag} is not available over {}", first.calls().name),
                ));
            }
        }
        if opts.tcp.skip_rx_copy && opts.reply.is_some() {
            // MPRTT reads replies (and echoes) whose bytes matter.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--skip-rx-copy is for bulk receiving, not MPRTT",
            ));
        }
        // rsockets have no kernel time-outs to bound a sleeping call: non-blocking.
        let blocking =
            kernel && !opts.busy_poll && opts.tcp.zerocopy == ZeroCopy::Off && !opts.epoll;
        let mut sockets = Vec::with_capacity(socks.len());
        for s in socks {
            s.set_nonblocking(!blocking)?;
            if opts.tcp.nodelay {
                s.set_nodelay(true)?;
            }
            if opts.tcp.quickack {
                tcp_quickack(&s)?;
            }
            // A client's sockets already have these (set before connecting, so the
            // handshake runs with them); the server's get them here.
            if let Some(name) = &opts.tcp.congestion {
                set_congestion(SockRef::from(&s), name)?;
            }
            if let Some(tos) = opts.tos {
                set_tos(&s, tos)?;
            }
            if let Some(bits) = opts.tcp.fq_rate {
                let rate = (bits / 8).max(1);
                set_max_pacing_rate(&s, rate)?;
                bound_paced_backlog(&s, rate)?;
            }
            if let Some(bytes) = opts.window {
                set_window(&s, bytes)?;
                // A larger buffer cannot widen what the handshake's window scale allows:
                // the run would measure a smaller window than the one it names.
                if let Some(limit) = receive_window_short_of(&s, bytes as u64)? {
                    return Err(io::Error::other(format!(
                        "the window scale agreed in this connection's handshake caps its \
                         receive window at {limit}B, below the {bytes}B --window asks for \
                         (it must be set before the handshake, and window scaling be on at \
                         both hosts: net.ipv4.tcp_window_scaling)"
                    )));
                }
            }
            if let Some(bytes) = opts.tcp.rcvlowat {
                // The kernel caps it at half of tcp_rmem's maximum.
                let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
                s.set_int_opt(libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes)?;
            }
            sockets.push(Socket::new(Arc::new(s), &opts, blocking)?);
        }
        let n = sockets.len();
        let pollfds = sockets
            .iter()
            .map(|s| libc::pollfd {
                fd: s.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let owed = match opts.reply {
            Some(reply) => (0..n)
                .map(|_| ReplyCursor::new(reply, opts.pktsize))
                .collect(),
            None => Vec::new(),
        };
        let in_force = InForce::read(&sockets[0].sock);
        Ok(TcpStream {
            in_force,
            flows: None,
            sockets,
            epoll: opts.epoll.then(Epoll::new),
            opts,
            senders: LazySenders::NotStarted,
            stats: StreamStats::default(),
            last_send_end: None,
            eof: vec![false; n],
            open: n,
            ready: Vec::with_capacity(n),
            cursor: 0,
            owed,
            acked: false,
            flowing: false,
            pollfds,
        })
    }

    /// The local and peer addresses of every socket.
    pub fn addrs(&self) -> Vec<(Option<SocketAddr>, Option<SocketAddr>)> {
        self.sockets
            .iter()
            .map(|s| (s.sock.local_addr().ok(), s.sock.peer_addr().ok()))
            .collect()
    }

    /// The sender threads, started on first use (one per socket).
    fn senders(&mut self) -> io::Result<&mut Senders> {
        let (sockets, opts) = (&self.sockets, &self.opts);
        self.senders.get_or_start(|| {
            let sinks = sockets
                .iter()
                .map(|s| s.for_sender(opts.tcp.zerocopy))
                .collect::<io::Result<Vec<_>>>()?;
            Senders::start_pinned(opts.queue, sinks, opts.abort.clone(), opts.cpu)
        })
    }

    /// Notes that socket `k` reached end of stream.
    fn mark_eof(&mut self, k: usize) {
        if !self.eof[k] {
            self.eof[k] = true;
            self.open -= 1;
        }
    }

    /// After `data` arrived on socket `k`: re-arm QUICKACK, send MPRTT replies.
    fn after_read(&mut self, k: usize, data: &[u8]) -> io::Result<()> {
        let sock = &self.sockets[k];
        if self.opts.tcp.quickack {
            tcp_quickack(&*sock.sock)?;
        }
        let Some(owed) = self.owed.get_mut(k) else {
            return Ok(());
        };
        let sent = &mut self.stats.bytes_sent;
        owed.take(data, |reply| {
            sock.write_all(reply, Deadline::Never)?;
            *sent += reply.len() as u64;
            Ok::<(), io::Error>(())
        })?;
        self.acked = owed.between_packets() && self.sockets.len() == 1;
        Ok(())
    }

    /// Polls the open sockets; fills `ready`.
    fn poll_open(&mut self, deadline: Deadline) -> io::Result<()> {
        self.opts.check_abort()?;
        let ms = deadline.poll_ms()?;
        if self.opts.busy_poll {
            // Spin: try every open socket again instead of sleeping until one is ready
            // (yielding, as `wait_ready` explains).
            std::thread::yield_now();
            self.ready
                .extend((0..self.eof.len()).filter(|&k| !self.eof[k]));
            return Ok(());
        }
        let sock = &self.sockets[0].sock;
        if !sock.calls().kernel {
            // rpoll() cannot skip a negative fd: poll the open sockets only.
            let (mut open, ks): (Vec<libc::pollfd>, Vec<usize>) = self
                .pollfds
                .iter()
                .enumerate()
                .filter(|&(k, _)| !self.eof[k])
                .map(|(k, p)| (libc::pollfd { revents: 0, ..*p }, k))
                .unzip();
            if sock.poll(&mut open, ms)? > 0 {
                self.ready.extend(
                    open.iter()
                        .zip(ks)
                        .filter(|(p, _)| p.revents != 0)
                        .map(|(_, k)| k),
                );
            }
            return Ok(());
        }
        for (p, &eof) in self.pollfds.iter_mut().zip(&self.eof) {
            // A negative fd makes poll() skip the entry.
            p.fd = if eof { -1 } else { p.fd.abs() };
            p.revents = 0;
        }
        let ready = match &self.epoll {
            Some(epoll) => epoll.poll_many(&mut self.pollfds, ms)?,
            None => sock.poll(&mut self.pollfds, ms)?,
        };
        if ready > 0 {
            self.ready.extend(
                self.pollfds
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.fd >= 0 && p.revents != 0)
                    .map(|(k, _)| k),
            );
        } else if self.opts.tcp.rcvlowat.is_some() {
            // poll() does not report data below the low-water mark (a short packet):
            // once a slice passes quietly, read each socket, as a blocking read's
            // time-out would.
            self.ready
                .extend((0..self.eof.len()).filter(|&k| !self.eof[k]));
        }
        Ok(())
    }

    /// One socket: reads once, waiting until `deadline`. `Ok(0)` is end of stream.
    fn recv_single(
        &mut self,
        buf: &mut [u8],
        deadline: Deadline,
        start: Instant,
    ) -> io::Result<usize> {
        if self.eof[0] {
            return Ok(0);
        }
        let sock = &self.sockets[0];
        // The caller's clock reading serves the read's time-out unless a wait came first.
        let mut now = Some(start);
        if std::mem::take(&mut self.acked)
            && !sock.blocking
            && !sock.busy_poll
            && deadline != Deadline::Now
        {
            // See `acked`: skip the read() that would only return EAGAIN.
            sock.wait(libc::POLLIN, deadline)?;
            now = None;
        }
        let mut read = None;
        let nap = self
            .rx_nap()
            .filter(|_| self.flowing && deadline != Deadline::Now);
        if let Some(nap) = nap {
            // Data is flowing: nap off the socket's wait queue once if none is there, so
            // the sender's core does not pay for waking this thread, then read again.
            read = sock.read_nowait(buf)?;
            if read.is_none() {
                std::thread::sleep(nap);
                read = sock.read_nowait(buf)?;
                now = None;
            }
        }
        let n = match read {
            Some(n) => n,
            None => sock.read_some(buf, deadline, now)?,
        };
        self.flowing = n > 0;
        if n == 0 {
            self.mark_eof(0);
        }
        Ok(n)
    }

    /// Several sockets: reads from whichever has data. Returns the socket and the
    /// bytes read; `Ok((_, 0))` once every socket reached end of stream.
    fn recv_any(&mut self, buf: &mut [u8], deadline: Deadline) -> io::Result<(usize, usize)> {
        loop {
            if self.open == 0 {
                return Ok((0, 0));
            }
            let k = match self.ready.pop() {
                Some(k) => k,
                None if !self.eof[self.cursor] => self.cursor,
                None => {
                    self.poll_open(deadline)?;
                    continue;
                }
            };
            if self.eof[k] {
                continue;
            }
            match self.sockets[k].read_nowait(buf)? {
                Some(0) => self.mark_eof(k),
                Some(n) => {
                    self.cursor = k;
                    return Ok((k, n));
                }
                None => {
                    if self.ready.is_empty() {
                        self.poll_open(deadline)?;
                    }
                }
            }
        }
    }
}

impl Stream for TcpStream {
    fn nsockets(&self) -> usize {
        self.sockets.len()
    }

    fn local_addr(&self) -> String {
        crate::stream::addr_text(self.sockets[0].sock.local_addr())
    }

    fn peer_addr(&self) -> String {
        crate::stream::addr_text(self.sockets[0].sock.peer_addr())
    }

    fn send(&mut self, buf: &[u8], timeout: Timeout) -> io::Result<usize> {
        self.opts.check_abort()?;
        if self.opts.flows {
            let (sockets, opts) = (&self.sockets, &self.opts);
            let flows = self.flows.get_or_insert_with(|| new_flows(sockets, opts));
            self.last_send_end = Some(send_on_flows(
                flows,
                &self.sockets,
                buf,
                timeout.deadline(),
                &self.opts,
                &mut self.stats,
            )?);
            return Ok(buf.len());
        }
        let end = self.sockets[0].send_timed(buf, timeout.deadline(), &mut self.stats)?;
        self.last_send_end = Some(end);
        Ok(buf.len())
    }

    fn last_send_end(&self) -> Option<Instant> {
        self.last_send_end
    }

    fn last_recv_end(&self) -> Option<Instant> {
        self.stats.last_recv
    }

    fn send_submit(&mut self, buf: Bytes, timeout: Timeout) -> io::Result<()> {
        self.senders()?.submit(buf, timeout)
    }

    fn sender_drain(&mut self, timeout: Timeout) -> io::Result<()> {
        self.senders.drain(timeout)
    }

    fn recv_len(&self, pktsize: usize) -> usize {
        pktsize.max(RECV_CHUNK)
    }

    fn recv(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize> {
        // One clock reading starts the latency, the deadline and the first time-out: the
        // latency definitions need two reads per call, and this path adds none.
        let start = Instant::now();
        let deadline = timeout.deadline_from(|| start);
        let (k, n) = if self.sockets.len() == 1 {
            (0, self.recv_single(buf, deadline, start)?)
        } else {
            self.recv_any(buf, deadline)?
        };
        if n == 0 {
            return Ok(0);
        }
        self.after_read(k, &buf[..n])?;
        let now = Instant::now();
        self.stats.recv_latency.record(span_ns(start, now));
        self.stats.bytes_received += n as u64;
        self.stats.mark_recv(now);
        Ok(n)
    }

    fn ack_partial(&mut self) -> io::Result<()> {
        for (sock, owed) in self.sockets.iter().zip(&mut self.owed) {
            let sent = &mut self.stats.bytes_sent;
            owed.finish(|reply| {
                sock.write_all(reply, Deadline::Never)?;
                *sent += reply.len() as u64;
                Ok::<(), io::Error>(())
            })?;
        }
        Ok(())
    }

    fn finish_sending(&mut self, timeout: Timeout) -> io::Result<()> {
        if let Some(flows) = &mut self.flows {
            let abort = &*self.opts.abort;
            flows.drain(&self.sockets, timeout.deadline(), abort, &mut self.stats)?;
        }
        let result = self.senders.finish(timeout, &mut self.stats);
        for s in &self.sockets {
            // The peer may already have closed; end of stream is what we want anyway.
            let _ = s.sock.shutdown_write();
        }
        result
    }

    fn stats(&self) -> StreamStats {
        self.senders.with_figures(&self.stats)
    }

    fn facts(&self) -> SocketFacts {
        SocketFacts {
            figures: TransportFigures {
                tcp: self.tcp_info(),
                ..TransportFigures::default()
            },
            in_force: TransportInForce {
                tcp: TcpInForce {
                    congestion: self.in_force.congestion.clone(),
                    rcvlowat: self.in_force.rcvlowat,
                    rx_nap_us: (self.rx_nap()).and_then(|nap| u32::try_from(nap.as_micros()).ok()),
                },
                ..TransportInForce::default()
            },
            // rsockets are not kernel sockets.
            buffers: self
                .sockets
                .iter()
                .find(|s| s.sock.calls().kernel)
                .and_then(|s| SocketBuffers::of(&*s.sock)),
        }
    }
}

/// `--flows`: the sending side's flows over `sockets`, with room for a whole reply.
fn new_flows(sockets: &[Socket], opts: &StreamOptions) -> Flows {
    let fds: Vec<RawFd> = sockets.iter().map(FlowSocket::fd).collect();
    let reply_max = opts.reply.map_or(1, |r| r.max_len(opts.pktsize));
    Flows::new(&fds, reply_max)
}

/// `--flows`: one packet handed to the flows (bulk), or one request sent on a free
/// flow (request/response); returns when it was.
fn send_on_flows(
    flows: &mut Flows,
    sockets: &[Socket],
    buf: &[u8],
    deadline: Deadline,
    opts: &StreamOptions,
    stats: &mut StreamStats,
) -> io::Result<Instant> {
    let abort = &*opts.abort;
    let Some(reply) = opts.reply else {
        let start = Instant::now();
        flows.send_bulk(sockets, buf, deadline, abort)?;
        stats.bytes_sent += buf.len() as u64;
        return Ok(stats.send_latency.record_since(start));
    };
    flows.send_request(sockets, buf, reply.len(buf.len()), deadline, abort, stats)?;
    Ok(Instant::now())
}

impl TcpStream {
    /// `TCP_INFO` over the kernel sockets.
    fn tcp_info(&self) -> Option<TcpInfo> {
        let mut total: Option<TcpInfo> = None;
        // rsockets have no TCP_INFO: no figures rather than made-up ones.
        for s in self.sockets.iter().filter(|s| s.sock.calls().kernel) {
            // A socket the kernel cannot describe (already torn down) adds nothing.
            if let Ok(one) = TcpInfo::read(&*s.sock) {
                match &mut total {
                    Some(t) => t.merge(&one),
                    None => total = Some(one),
                }
            }
        }
        total
    }

    /// The nap applies to one socket that would otherwise sleep in its reads.
    fn rx_nap(&self) -> Option<Duration> {
        let single = self.sockets.len() == 1 && self.sockets[0].blocking;
        self.opts.tcp.rx_nap.filter(|_| single)
    }
}

/// What a data connection's socket must have before its handshake.
#[derive(Clone, Copy, Debug, Default)]
pub struct HandshakeOptions<'a> {
    /// Local address to connect from; `None` lets the kernel choose.
    pub bind: Option<IpAddr>,
    /// `--congestion`: so the kernel's default algorithm never runs on the socket (see
    /// [`set_congestion`]).
    pub congestion: Option<&'a str>,
    /// `--window`: the window scale offered in the SYN follows the receive buffer, and
    /// is fixed for the connection's life.
    pub window: Option<usize>,
    /// `--tos`: the handshake is marked too.
    pub tos: Option<u8>,
    /// `-M`: the handshake announces it, which holds the peer's segments to it too.
    pub mss: Option<u32>,
    /// `--cport`: the local port to connect from; `None`: the kernel's choice.
    pub local_port: Option<u16>,
    /// `--bind-dev`: the network interface to send through; `None`: the route's.
    pub device: Option<&'a str>,
    /// `-L`: the IPv6 flow label the connection's packets carry.
    pub flowlabel: Option<u32>,
}

impl HandshakeOptions<'_> {
    /// Connects to `addr` with these options in place, within `timeout` if given.
    pub fn connect(
        &self,
        addr: SocketAddr,
        timeout: Option<Duration>,
    ) -> io::Result<net::TcpStream> {
        let sock = self.socket(addr)?;
        let addr = match self.flowlabel {
            Some(label) => labelled(&sock, addr, label)?,
            None => addr,
        };
        match timeout {
            Some(t) => sock.connect_timeout(&addr.into(), t)?,
            None => sock.connect(&addr.into())?,
        }
        Ok(sock.into())
    }

    /// A socket for `addr` with these options in place, not yet connected.
    pub fn socket(&self, addr: SocketAddr) -> io::Result<socket2::Socket> {
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        if let Some(name) = self.device {
            crate::stream::sys::bind_device(&sock, name)?;
        }
        if self.bind.is_some() || self.local_port.is_some() {
            let ip = self.bind.unwrap_or(match addr {
                SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
                SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
            });
            let port = self.local_port.unwrap_or(0);
            if port != 0 {
                // The port may still hold a closed connection of an earlier run.
                sock.set_reuse_address(true)?;
            }
            sock.bind(&SocketAddr::new(ip, port).into())
                .map_err(|e| match port {
                    0 => e,
                    _ => io::Error::new(
                        e.kind(),
                        format!("cannot send from port {port} (--cport): {e}"),
                    ),
                })?;
        }
        if let Some(name) = self.congestion {
            set_congestion(SockRef::from(&sock), name)?;
        }
        if let Some(bytes) = self.window {
            set_window(&sock, bytes)?;
        }
        if let Some(tos) = self.tos {
            set_tos(&sock, tos)?;
        }
        if let Some(mss) = self.mss {
            sock.set_mss(mss).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot set TCP_MAXSEG to {mss} (-M): {e}"),
                )
            })?;
        }
        Ok(sock)
    }
}

/// `addr` with the flow label `label`, which `sock` (not yet connected) is set to send
/// (`IPV6_FLOWLABEL_MGR`, `IPV6_FLOWINFO_SEND`): the kernel sends the label an address
/// carries only once the socket holds it.
fn labelled(sock: &socket2::Socket, addr: SocketAddr, label: u32) -> io::Result<SocketAddr> {
    let SocketAddr::V6(v6) = addr else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            flowlabel_over_ipv4(addr.ip()),
        ));
    };
    crate::stream::sys::take_flow_label(sock, *v6.ip(), label)?;
    // `sin6_flowinfo` is in network order, and the address is copied into it as is.
    let flowinfo = (label & 0xFFFFF).to_be();
    Ok(SocketAddr::V6(std::net::SocketAddrV6::new(
        *v6.ip(),
        v6.port(),
        flowinfo,
        v6.scope_id(),
    )))
}

/// Why `-L` cannot label packets to the IPv4 address `server`.
pub fn flowlabel_over_ipv4(server: IpAddr) -> String {
    format!(
        "-L/--flowlabel is IPv6's, and the server's address {server} is IPv4 (use -6, or an \
         IPv6 address)"
    )
}

/// Sets the congestion control algorithm `name` on a kernel socket; an error names
/// what this kernel offers.
///
/// Set it before `connect()` where possible: BBR, if it is the kernel's default, turns
/// on TCP's internal pacing when the connection opens, and the kernel keeps pacing
/// after a switch to another algorithm (costly timers on every send).
pub(crate) fn set_congestion(sock: SockRef<'_>, name: &str) -> io::Result<()> {
    sock.set_tcp_congestion(name.as_bytes()).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::ENOENT) => "not available in this kernel".to_string(),
            Some(libc::EPERM) => {
                "not allowed here (net.ipv4.tcp_allowed_congestion_control)".to_string()
            }
            _ => format!("refused: {e}"),
        };
        let available = std::fs::read_to_string(AVAILABLE_CONGESTION)
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_string());
        io::Error::new(
            e.kind(),
            format!("TCP congestion control '{name}' is {why} (available: {available})"),
        )
    })
}

/// The kernel's list of congestion control algorithms a socket may take.
const AVAILABLE_CONGESTION: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// The congestion control algorithm a kernel socket uses.
fn congestion_of(sock: &DataSocket) -> io::Result<String> {
    let raw = SockRef::from(sock).tcp_congestion()?;
    // The kernel pads the name with NULs to its fixed length.
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    Ok(String::from_utf8_lossy(&raw[..end]).into_owned())
}

crate::transport::stream::impl_std_io!(TcpStream);

#[cfg(test)]
mod tests {
    use super::super::stream_options::TcpOptions;
    use super::*;
    use std::net::Shutdown;
    use std::thread;

    fn pair(opts: StreamOptions) -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let o = opts.clone();
        let t = thread::spawn(move || TcpStream::connect(addr, o).expect("connect"));
        let server = TcpStream::accept(&listener, opts).expect("accept");
        (t.join().expect("join"), server)
    }

    #[test]
    fn plain_read_and_write_carry_the_byte_stream_and_the_fd_is_the_first_sockets() {
        use std::io::{Read, Write};
        let (mut client, mut server) = pair(StreamOptions::default());
        assert_eq!(
            crate::stream::tests::bound_addr(&client),
            client.local_addr()
        );
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let reader = thread::spawn(move || {
            let mut got = Vec::new();
            server.read_to_end(&mut got).expect("read_to_end");
            got
        });
        client.write_all(&data).expect("write_all");
        assert_eq!(client.write(&[]).expect("empty write"), 0);
        client.flush().expect("flush");
        client
            .finish_sending(Timeout::Millis(5_000))
            .expect("finish");
        assert_eq!(reader.join().expect("reader"), data);
    }

    fn drain_all(server: &mut TcpStream, bufsize: usize) -> u64 {
        drain_into(server, &mut vec![0u8; bufsize])
    }

    /// Reads into `buf` until end of stream; returns the bytes read.
    fn drain_into(server: &mut TcpStream, buf: &mut [u8]) -> u64 {
        let mut total = 0;
        loop {
            match server.recv(buf, Timeout::Millis(10_000)).expect("recv") {
                0 => return total,
                n => total += n as u64,
            }
        }
    }

    /// Reads into `buf` until end of stream, appending every byte to `got`.
    fn read_to_end(server: &mut TcpStream, buf: &mut [u8], got: &mut Vec<u8>) {
        loop {
            match server.recv(buf, Timeout::Millis(10_000)).expect("recv") {
                0 => return,
                n => got.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[test]
    fn sync_send_keeps_order_and_counts() {
        let (mut client, mut server) = pair(StreamOptions::default());
        let t = thread::spawn(move || {
            for i in 0..1000u32 {
                client
                    .send(&i.to_be_bytes(), Timeout::Forever)
                    .expect("send");
            }
            client.finish_sending(Timeout::Forever).expect("finish");
            client.stats()
        });
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        read_to_end(&mut server, &mut buf, &mut got);
        let want: Vec<u8> = (0..1000u32).flat_map(|i| i.to_be_bytes()).collect();
        assert_eq!(got, want);
        let cs = t.join().expect("join");
        assert_eq!(cs.bytes_sent, 4000);
        assert_eq!(cs.send_latency.count(), 1000);
        assert_eq!(server.stats().bytes_received, 4000);
    }

    #[test]
    fn each_call_reports_when_it_returned() {
        let (mut client, mut server) = pair(StreamOptions::default());
        assert_eq!(
            (client.last_send_end(), server.last_recv_end()),
            (None, None)
        );
        let mut buf = [0u8; 64];
        for _ in 0..3 {
            let before = Instant::now();
            client.send(b"ping", Timeout::Forever).expect("send");
            let sent = client.last_send_end().expect("a send's end");
            assert!(before <= sent && sent <= Instant::now());
            let before_recv = Instant::now();
            let n = server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            assert_eq!(&buf[..n], b"ping");
            let read = server.last_recv_end().expect("a receive's end");
            assert!(before_recv <= read && read <= Instant::now());
        }
    }

    #[test]
    fn async_sends_over_four_sockets_arrive_in_full() {
        let opts = StreamOptions {
            nsockets: 4,
            ..StreamOptions::default()
        };
        let (mut client, mut server) = pair(opts);
        let t = thread::spawn(move || {
            let buf = Bytes::from(vec![0xabu8; 65536]);
            for _ in 0..256 {
                client
                    .send_submit(buf.clone(), Timeout::Forever)
                    .expect("submit");
            }
            client.sender_drain(Timeout::Forever).expect("drain");
            client.finish_sending(Timeout::Forever).expect("finish");
            client.stats()
        });
        assert_eq!(drain_all(&mut server, 65536), 256 * 65536);
        let cs = t.join().expect("join");
        assert_eq!(cs.bytes_sent, 256 * 65536);
        assert_eq!(cs.submit_latency.count(), 256);
    }

    #[test]
    fn mprtt_acks_every_packet_and_the_partial_last_one() {
        let opts = StreamOptions {
            reply: Some(Reply::Ack),
            pktsize: 1000,
            ..StreamOptions::default()
        };
        let (cs, mut server) = fifty_packets_and_a_short_one(opts, 1000, 1000);
        assert_eq!(cs.bytes_received, 51, "one ACK byte per packet");
        assert_eq!(server.stats().bytes_sent, 51);
        let mut buf = [0u8; 1000];
        assert_eq!(
            server.recv(&mut buf, Timeout::Millis(10_000)).expect("eof"),
            0
        );
    }

    /// Options for each way calls can wait: blocking mode, and the non-blocking modes
    /// (`poll()` after EAGAIN with zero-copy, `epoll_wait()` with epoll, spinning with
    /// busy-poll).
    fn each_mode(base: StreamOptions) -> Vec<(&'static str, StreamOptions)> {
        vec![
            ("blocking", base.clone()),
            (
                "epoll",
                StreamOptions {
                    epoll: true,
                    ..base.clone()
                },
            ),
            (
                "zerocopy",
                StreamOptions {
                    tcp: TcpOptions {
                        zerocopy: ZeroCopy::Splice,
                        ..TcpOptions::default()
                    },
                    ..base.clone()
                },
            ),
            (
                "io_uring",
                StreamOptions {
                    tcp: TcpOptions {
                        io_uring: true,
                        ..TcpOptions::default()
                    },
                    ..base.clone()
                },
            ),
            (
                "busy-poll",
                StreamOptions {
                    busy_poll: true,
                    ..base
                },
            ),
        ]
    }

    /// [`each_mode`] with one socket (a read with a time-out) and with two (`poll()`).
    fn each_mode_with_one_and_two_sockets() -> Vec<(&'static str, StreamOptions)> {
        [1, 2]
            .into_iter()
            .flat_map(|nsockets| {
                each_mode(StreamOptions {
                    nsockets,
                    ..StreamOptions::default()
                })
            })
            .collect()
    }

    #[test]
    fn a_window_the_handshake_did_not_scale_for_is_refused() {
        // A listener sized for 64 KiB: the window scale of its connections covers that.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        set_window(&listener, 64 << 10).expect("window");
        let addr = listener.local_addr().expect("addr");
        // Past what that scale covers, within net.core.{r,w}mem_max's default (a test's
        // buffers are never forced past it here).
        let opts = StreamOptions {
            window: Some(192 << 10),
            ..StreamOptions::default()
        };
        let o = opts.clone();
        // The client sizes its socket before connecting, so its SYN scales for it.
        let client = thread::spawn(move || TcpStream::connect(addr, o));
        let Err(refused) = TcpStream::accept(&listener, opts) else {
            panic!("a window the handshake scaled for 64 KiB was taken");
        };
        assert!(
            refused
                .to_string()
                .contains("window scale agreed in this connection's handshake"),
            "{refused}"
        );
        client.join().expect("join").expect("client end");
    }

    #[test]
    fn a_window_sizes_both_buffers_of_every_socket_on_both_ends() {
        // Within net.core.{r,w}mem_max's default, so it holds without root too.
        const WINDOW: usize = 96 << 10;
        let (mut client, mut server) = pair(StreamOptions {
            nsockets: 2,
            window: Some(WINDOW),
            ..StreamOptions::default()
        });
        for (end, stream) in [("client", &client), ("server", &server)] {
            for s in &stream.sockets {
                let sock = SockRef::from(&*s.sock);
                // Linux keeps (and reports) twice the size set.
                assert_eq!(
                    sock.recv_buffer_size().expect("rcvbuf"),
                    2 * WINDOW,
                    "{end}"
                );
                assert_eq!(
                    sock.send_buffer_size().expect("sndbuf"),
                    2 * WINDOW,
                    "{end}"
                );
            }
        }
        let sent = thread::spawn(move || {
            for _ in 0..64 {
                client.send(&[7u8; 16384], Timeout::Forever).expect("send");
            }
            client.finish_sending(Timeout::Forever).expect("finish");
        });
        assert_eq!(drain_all(&mut server, 65536), 64 * 16384);
        sent.join().expect("join");
    }

    #[test]
    fn a_receive_low_water_mark_holds_reads_until_a_packet_but_never_keeps_data() {
        // One socket (a read with a time-out) and two (poll(), which does not report
        // data below the mark).
        for (mode, opts) in each_mode_with_one_and_two_sockets() {
            let mode = format!("{mode}, {} socket(s)", opts.nsockets);
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = listener.local_addr().expect("addr");
            let client_opts = opts.clone();
            let t = thread::spawn(move || TcpStream::connect(addr, client_opts).expect("connect"));
            let server_opts = StreamOptions {
                tcp: TcpOptions {
                    rcvlowat: Some(4096),
                    ..opts.tcp
                },
                ..opts
            };
            let mut server = TcpStream::accept(&listener, server_opts).expect("accept");
            let mut client = t.join().expect("join");
            assert_eq!(server.facts().in_force.tcp.rcvlowat, Some(4096), "{mode}");
            assert_eq!(
                client.facts().in_force.tcp.rcvlowat,
                Some(1),
                "{mode}: the kernel's default"
            );

            let mut buf = vec![0u8; 8192];
            // Less than the mark, on the last socket (which the reader tries after the
            // first): the read still returns it, once a poll slice passes.
            let last = client.sockets.len() - 1;
            client.sockets[last]
                .write_all(&[1u8; 100], Deadline::Never)
                .expect("send");
            let n = server.recv(&mut buf, Timeout::Millis(2_000)).expect("recv");
            assert_eq!(n, 100, "{mode}");
            // A whole packet, then a short tail and end of stream: every byte arrives.
            client.send(&[2u8; 4096], Timeout::Forever).expect("send");
            client.send(&[3u8; 10], Timeout::Forever).expect("send");
            client.finish_sending(Timeout::Forever).expect("finish");
            drop(client);
            let total = drain_all(&mut server, 8192);
            assert_eq!(total, 4106, "{mode}");
            assert_eq!(server.stats().bytes_received, 4206, "{mode}");
        }
    }

    #[test]
    fn skip_rx_copy_counts_every_byte_but_leaves_the_buffer_untouched() {
        for (mode, opts) in each_mode_with_one_and_two_sockets() {
            for skip in [false, true] {
                let what = format!("{mode}, {} socket(s), skip {skip}", opts.nsockets);
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
                let addr = listener.local_addr().expect("addr");
                let client_opts = opts.clone();
                let t = thread::spawn(move || {
                    let mut client = TcpStream::connect(addr, client_opts).expect("connect");
                    for _ in 0..3 {
                        client.send(&[0x5a; 4096], Timeout::Forever).expect("send");
                    }
                    client.send(&[0x5a; 10], Timeout::Forever).expect("send");
                    client.finish_sending(Timeout::Forever).expect("finish");
                });
                let server_opts = StreamOptions {
                    tcp: TcpOptions {
                        skip_rx_copy: skip,
                        ..opts.tcp.clone()
                    },
                    ..opts.clone()
                };
                let mut server = TcpStream::accept(&listener, server_opts).expect("accept");
                let mut buf = vec![0xeeu8; 8192];
                let total = drain_into(&mut server, &mut buf);
                t.join().expect("join");
                assert_eq!(total, 3 * 4096 + 10, "{what}");
                assert_eq!(server.stats().bytes_received, 3 * 4096 + 10, "{what}");
                // The same reads without the flag copy the payload in: the check below
                // would see it.
                let copied = buf.contains(&0x5a);
                assert_eq!(copied, !skip, "{what}");
            }
        }
    }

    #[test]
    fn skip_rx_copy_is_refused_where_the_bytes_matter() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let t = thread::spawn(move || TcpStream::connect(addr, StreamOptions::default()));
        let opts = StreamOptions {
            reply: Some(Reply::Ack),
            tcp: TcpOptions {
                skip_rx_copy: true,
                ..TcpOptions::default()
            },
            ..StreamOptions::default()
        };
        let err = TcpStream::accept(&listener, opts)
            .err()
            .expect("MPRTT with --skip-rx-copy must be refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("--skip-rx-copy"), "{err}");
        drop(t.join().expect("join"));
    }

    /// A napping reader (the bulk default where a core is spare) reads every byte in
    /// order across pauses longer than its nap, in which it falls back to sleeping on
    /// the socket with the low-water mark; still sees the end of stream of a last short
    /// packet; and keeps its time-outs once data stopped flowing.
    #[test]
    fn a_napping_reader_reads_every_byte_across_pauses_and_keeps_its_time_outs() {
        let nap = Duration::from_micros(20);
        let opts = StreamOptions {
            tcp: TcpOptions {
                rcvlowat: Some(64 << 10),
                rx_nap: Some(nap),
                ..TcpOptions::default()
            },
            ..StreamOptions::default()
        };
        let (mut client, mut server) = pair(opts);
        assert_eq!(
            server.facts().in_force.tcp.rx_nap_us,
            u32::try_from(nap.as_micros()).ok()
        );
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let t = thread::spawn(move || {
            let mut next = 0u32;
            let mut packet = |words: u32| -> Vec<u8> {
                let p = (next..next + words).flat_map(u32::to_be_bytes).collect();
                next += words;
                p
            };
            for burst in 0..40 {
                for _ in 0..8 {
                    client.send(&packet(8192), Timeout::Forever).expect("send");
                }
                if burst % 8 == 7 {
                    thread::sleep(Duration::from_millis(5));
                }
            }
            // Nothing for longer than a time-out, then a short last packet.
            wait.recv().expect("go");
            client.send(&packet(250), Timeout::Forever).expect("send");
            client.finish_sending(Timeout::Forever).expect("finish");
            next
        });
        let bursts = 40 * 8 * 8192 * 4;
        let mut got = Vec::with_capacity(bursts + 1000);
        let mut buf = vec![0u8; 128 << 10];
        while got.len() < bursts {
            let n = server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            assert!(n > 0, "end of stream after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got.len(), bursts, "no byte of the last packet yet");
        let t0 = Instant::now();
        let e = server
            .recv(&mut buf, Timeout::from_millis(100))
            .expect_err("nothing sent");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(90));
        go.send(()).expect("go");
        read_to_end(&mut server, &mut buf, &mut got);
        let words = t.join().expect("join");
        let want: Vec<u8> = (0..words).flat_map(u32::to_be_bytes).collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "bytes out of order");
        assert_eq!(server.stats().bytes_received, want.len() as u64);
    }

    /// While data flows, a read returns what is there, below the mark, without waiting:
    /// a reader that sleeps on the socket would wait for the mark, or for a poll slice
    /// (100 ms) to pass.
    #[test]
    fn a_napping_reader_takes_what_is_there_while_data_flows() {
        let mark = 64 << 10;
        let opts = StreamOptions {
            tcp: TcpOptions {
                rcvlowat: Some(mark),
                rx_nap: Some(Duration::from_micros(20)),
                ..TcpOptions::default()
            },
            ..StreamOptions::default()
        };
        let (mut client, mut server) = pair(opts);
        let (sent_tx, sent) = std::sync::mpsc::channel::<()>();
        let (go, go_rx) = std::sync::mpsc::channel::<()>();
        let t = thread::spawn(move || {
            client
                .send(&vec![1u8; mark], Timeout::Forever)
                .expect("send");
            go_rx.recv().expect("go");
            // On loopback the bytes are in the reader's socket once send() returns.
            client.send(&[2u8; 1000], Timeout::Forever).expect("send");
            sent_tx.send(()).expect("sent");
            go_rx.recv().expect("go");
            client.finish_sending(Timeout::Forever).expect("finish");
        });
        let mut buf = vec![0u8; 128 << 10];
        let n = server
            .recv(&mut buf, Timeout::Millis(10_000))
            .expect("recv");
        assert_eq!(n, mark, "the first read waits for the mark");
        go.send(()).expect("go");
        sent.recv().expect("sent");
        let t0 = Instant::now();
        let n = server
            .recv(&mut buf, Timeout::Millis(10_000))
            .expect("recv");
        assert_eq!((n, buf[0]), (1000, 2));
        assert!(
            t0.elapsed() < Duration::from_millis(50),
            "waited {:?} for the mark or a slice",
            t0.elapsed()
        );
        go.send(()).expect("go");
        assert_eq!(
            server.recv(&mut buf, Timeout::Millis(10_000)).expect("eof"),
            0
        );
        t.join().expect("join");
    }

    #[test]
    fn recv_timeouts_follow_the_seed_convention() {
        for (mode, opts) in each_mode(StreamOptions::default()) {
            let (_client, mut server) = pair(opts);
            let mut buf = [0u8; 16];
            let e = server
                .recv(&mut buf, Timeout::from_millis(0))
                .expect_err("no data");
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{mode}");
            let t0 = Instant::now();
            let e = server
                .recv(&mut buf, Timeout::from_millis(150))
                .expect_err("no data");
            assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{mode}");
            assert!(t0.elapsed() >= Duration::from_millis(140), "{mode}");
        }
    }

    #[test]
    fn send_timeouts_follow_the_seed_convention() {
        for (mode, opts) in each_mode(StreamOptions::default()) {
            // The server never reads: the socket buffers fill, then sends must give up.
            let (mut client, _server) = pair(opts);
            let buf = vec![0u8; 1 << 20];
            let mut sent = 0u64;
            let e = loop {
                match client.send(&buf, Timeout::from_millis(0)) {
                    Ok(n) => sent += n as u64,
                    Err(e) => break e,
                }
                assert!(
                    sent < 1 << 30,
                    "{mode}: 1 GiB went into a socket nobody reads"
                );
            };
            // A non-blocking send that cannot finish its packet may have sent part of it.
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{mode}: {e}");
            let t0 = Instant::now();
            let e = client
                .send(&buf, Timeout::from_millis(150))
                .expect_err("buffers are full");
            assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{mode}: {e}");
            assert!(t0.elapsed() >= Duration::from_millis(140), "{mode}");
            assert_eq!(
                client.stats().bytes_sent,
                sent,
                "{mode}: whole packets only"
            );
        }
    }

    #[test]
    fn a_reply_that_never_comes_times_out() {
        let base = StreamOptions {
            reply: Some(Reply::Ack),
            pktsize: 100,
            ..StreamOptions::default()
        };
        for (mode, opts) in each_mode(base) {
            // The server never reads, so it never replies.
            let (mut client, _server) = pair(opts);
            let e = client
                .send(&[7u8; 100], Timeout::from_millis(150))
                .expect_err("no reply");
            assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{mode}: {e}");
            assert_eq!(client.stats().send_latency.count(), 0, "{mode}");
        }
    }

    #[test]
    fn abort_ends_a_receive_that_waits_forever() {
        for (mode, opts) in each_mode(StreamOptions::default()) {
            let abort = opts.abort.clone();
            let (_client, mut server) = pair(opts);
            let setter = thread::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                abort.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            let mut buf = [0u8; 16];
            let e = server
                .recv(&mut buf, Timeout::Forever)
                .expect_err("aborted");
            assert_eq!(e.kind(), io::ErrorKind::Interrupted, "{mode}: {e}");
            setter.join().expect("join");
        }
    }

    #[test]
    fn large_reads_count_every_byte_exactly() {
        let (mut client, mut server) = pair(StreamOptions {
            pktsize: 1000,
            ..StreamOptions::default()
        });
        assert!(
            server.recv_len(1000) > 1000,
            "TCP reads more than a packet at once"
        );
        let t = thread::spawn(move || {
            let buf: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
            for _ in 0..3001 {
                client.send(&buf, Timeout::Forever).expect("send");
            }
            client
                .send(&buf[..7], Timeout::Forever)
                .expect("send short");
            client.finish_sending(Timeout::Forever).expect("finish");
            client.stats()
        });
        let len = server.recv_len(1000);
        let got = drain_all(&mut server, len);
        let cs = t.join().expect("join");
        assert_eq!(got, 3_001_007);
        assert_eq!(cs.bytes_sent, 3_001_007);
        assert_eq!(cs.send_latency.count(), 3002);
        assert_eq!(server.stats().bytes_received, 3_001_007);
    }

    /// Sends 50 packets of `pkt` bytes and a 10-byte last one; the server reads them in
    /// `chunk`-byte reads and answers the short one once every byte is in. Returns the
    /// client's figures and the server's end.
    fn fifty_packets_and_a_short_one(
        opts: StreamOptions,
        pkt: usize,
        chunk: usize,
    ) -> (StreamStats, TcpStream) {
        let (mut client, mut server) = pair(opts);
        let t = thread::spawn(move || {
            let buf = vec![1u8; pkt];
            for _ in 0..50 {
                client.send(&buf, Timeout::Forever).expect("send");
            }
            client
                .send(&buf[..10], Timeout::Forever)
                .expect("send short");
            client.finish_sending(Timeout::Forever).expect("finish");
            client.stats()
        });
        let mut buf = vec![0u8; chunk];
        let (mut total, all) = (0, 50 * pkt + 10);
        while total < all {
            total += server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            if total == all {
                server.ack_partial().expect("answer the short packet");
            }
        }
        (t.join().expect("join"), server)
    }

    #[test]
    fn echo_returns_every_packet_and_the_partial_last_one() {
        let base = StreamOptions {
            reply: Some(Reply::Echo),
            pktsize: 1000,
            ..StreamOptions::default()
        };
        for (mode, opts) in each_mode(base) {
            // Reads smaller than a packet: the echo is still whole and sent once.
            let (cs, mut server) = fifty_packets_and_a_short_one(opts, 1000, 300);
            assert_eq!(cs.bytes_sent, 50_010, "{mode}");
            assert_eq!(cs.bytes_received, 50_010, "{mode}: every byte echoed");
            assert_eq!(
                cs.send_latency.count(),
                51,
                "{mode}: one round trip per packet"
            );
            assert_eq!(server.stats().bytes_sent, 50_010, "{mode}");
            let mut buf = [0u8; 300];
            assert_eq!(
                server.recv(&mut buf, Timeout::Millis(10_000)).expect("eof"),
                0,
                "{mode}"
            );
        }
    }

    #[test]
    fn echo_sends_back_the_packet_itself() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let opts = StreamOptions {
            reply: Some(Reply::Echo),
            pktsize: 5000,
            ..StreamOptions::default()
        };
        let t = thread::spawn(move || {
            let mut server = TcpStream::accept(&listener, opts).expect("accept");
            // Reads of 3000 bytes: each packet arrives in two pieces at least.
            let mut buf = vec![0u8; 3000];
            let mut total = 0u64;
            loop {
                match server
                    .recv(&mut buf, Timeout::Millis(10_000))
                    .expect("recv")
                {
                    0 => return (total, server.stats().bytes_sent),
                    n => total += n as u64,
                }
            }
        });
        let mut raw = net::TcpStream::connect(addr).expect("connect");
        for round in 0..20u32 {
            let packet: Vec<u8> = (0..5000u32).map(|i| (i * 7 + round) as u8).collect();
            // In two writes, so the server cannot see the packet in one read.
            io::Write::write_all(&mut raw, &packet[..1234]).expect("write");
            io::Write::write_all(&mut raw, &packet[1234..]).expect("write");
            let mut echo = vec![0u8; 5000];
            io::Read::read_exact(&mut raw, &mut echo).expect("echo");
            assert_eq!(echo, packet, "round {round}");
        }
        raw.shutdown(Shutdown::Write).expect("shutdown");
        let (received, sent) = t.join().expect("join");
        assert_eq!((received, sent), (100_000, 100_000));
    }

    #[test]
    fn a_response_size_answers_every_packet_and_the_partial_last_one_in_full() {
        let base = StreamOptions {
            reply: Some(Reply::Sized(4096)),
            pktsize: 100,
            ..StreamOptions::default()
        };
        for (mode, opts) in each_mode(base) {
            let (cs, server) = fifty_packets_and_a_short_one(opts, 100, 64);
            assert_eq!(cs.bytes_sent, 5_010, "{mode}");
            assert_eq!(cs.bytes_received, 51 * 4096, "{mode}: every reply whole");
            assert_eq!(cs.send_latency.count(), 51, "{mode}");
            assert_eq!(server.stats().bytes_sent, 51 * 4096, "{mode}");
        }
    }

    #[test]
    fn a_reply_in_pieces_is_read_whole_before_the_round_trip_ends() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let t = thread::spawn(move || {
            let (mut raw, _) = listener.accept().expect("accept");
            let mut request = [0u8; 100];
            for _ in 0..10 {
                io::Read::read_exact(&mut raw, &mut request).expect("request");
                // The reply in two writes, apart: the client must wait for the second.
                io::Write::write_all(&mut raw, &[2u8; 1000]).expect("write");
                thread::sleep(Duration::from_millis(2));
                io::Write::write_all(&mut raw, &[2u8; 3096]).expect("write");
            }
        });
        let opts = StreamOptions {
            reply: Some(Reply::Sized(4096)),
            pktsize: 100,
            ..StreamOptions::default()
        };
        let mut client = TcpStream::connect(addr, opts).expect("connect");
        for _ in 0..10 {
            client.send(&[1u8; 100], Timeout::Forever).expect("send");
        }
        t.join().expect("join");
        let cs = client.stats();
        assert_eq!((cs.bytes_sent, cs.bytes_received), (1000, 40_960));
        let fastest = (cs.send_latency)
            .summary(&crate::percentiles::Percentiles::default())
            .expect("samples")
            .min_ns;
        assert!(
            fastest >= 2_000_000,
            "every round trip waited for its whole reply"
        );
    }

    #[test]
    fn sender_threads_start_only_when_something_is_submitted() {
        let (mut client, mut server) = pair(StreamOptions::default());
        assert!(matches!(client.senders, LazySenders::NotStarted));
        client.send(b"sync", Timeout::Forever).expect("send");
        assert!(matches!(client.senders, LazySenders::NotStarted));
        client
            .send_submit(Bytes::from_static(b"queued"), Timeout::Forever)
            .expect("submit");
        assert!(matches!(client.senders, LazySenders::Running(_)));
        client.sender_drain(Timeout::Forever).expect("drain");
        client.finish_sending(Timeout::Forever).expect("finish");
        assert_eq!(drain_all(&mut server, 64), 10);
        let cs = client.stats();
        assert_eq!(cs.bytes_sent, 10);
        assert_eq!(cs.send_latency.count(), 2);
        assert_eq!(cs.submit_latency.count(), 1);
        assert!(client
            .send_submit(Bytes::from_static(b"late"), Timeout::Forever)
            .is_err());
    }
}
