//! iperf3's UDP streams: a STREAM over one connected UDP socket whose datagrams carry
//! iperf3's header (send time in seconds and microseconds, then a 32- or 64-bit packet
//! number from 1, all big-endian), and the connect datagrams that set each one up.
//!
//! The receiving end counts datagrams as fperf's own UDP STREAM does (lost, duplicated,
//! out of order, RFC 3550 jitter); the sending end numbers and stamps them.

use crate::stats::{span_ns, StreamStats};
use crate::stream::{check_abort, Deadline, Timeout};
use crate::transport::stream::{SocketBuffers, SocketFacts, Stream};
use crate::transport::udp::wire::{Arrival, SeqTracker};
use bytes::Bytes;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What an iperf3 client sends to set up a UDP stream (3.12's, as on a little-endian
/// host), and what older clients send; a server reads neither's content.
pub const CONNECT_MSG: [u8; 4] = [0x39, 0x38, 0x37, 0x36];
/// The server's answer (3.12's, as on a little-endian host).
pub const CONNECT_REPLY: [u8; 4] = [0x36, 0x37, 0x38, 0x39];
/// The answer of servers before 3.12 (987654321 on a little-endian host).
const LEGACY_CONNECT_REPLY: [u8; 4] = [0xb1, 0x68, 0xde, 0x3a];
/// Bytes of the send time: seconds and microseconds.
const TIME_LEN: usize = 8;
/// Receive and send buffers of a stream's socket: room for bursts at high rates.
const SOCKET_BUFFER: usize = 4 << 20;

/// One end of an iperf3 UDP stream.
pub struct Iperf3UdpStream {
    sock: UdpSocket,
    /// Packet numbers are 64-bit (`--udp-counters-64bit`), else 32-bit.
    wide: bool,
    abort: Arc<AtomicBool>,
    /// The clock send times are read from (and arrivals, for jitter).
    epoch: Instant,
    /// The next packet number to send.
    next: u64,
    /// The datagram being sent: header then filler, kept from one send to the next.
    scratch: Vec<u8>,
    tracker: SeqTracker,
    stats: StreamStats,
}

impl Iperf3UdpStream {
    /// A stream over `sock`, connected to its peer.
    pub fn new(sock: UdpSocket, wide: bool, abort: Arc<AtomicBool>) -> io::Result<Self> {
        sock.set_nonblocking(true)?;
        let s = socket2::SockRef::from(&sock);
        // Best effort: the kernel caps these at its own maximum.
        let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = s.set_send_buffer_size(SOCKET_BUFFER);
        Ok(Iperf3UdpStream {
            sock,
            wide,
            abort,
            epoch: Instant::now(),
            next: 1,
            scratch: Vec::new(),
            tracker: SeqTracker::new(0),
            stats: StreamStats::default(),
        })
    }

    /// Marks the stream's datagrams with the TOS byte `tos` (`--tos`, iperf3's `-S`).
    pub fn mark(&self, tos: Option<u8>) -> io::Result<()> {
        match tos {
            Some(tos) => crate::stream::sys::set_tos(&self.sock, tos),
            None => Ok(()),
        }
    }

    /// Forbids fragmenting the stream's datagrams (`--dont-fragment`), refusing
    /// `len`-byte ones if the path's MTU cannot carry them whole.
    pub fn forbid_fragments(&self, len: usize) -> io::Result<()> {
        crate::transport::udp::stream::forbid_fragments(&self.sock, len, "-l")
    }

    fn header_len(&self) -> usize {
        TIME_LEN + if self.wide { 8 } else { 4 }
    }

    /// Waits until the socket is ready for `events`, or the deadline passes.
    fn wait(&self, events: libc::c_short, deadline: Deadline) -> io::Result<()> {
        check_abort(&self.abort)?;
        let ms = deadline.poll_ms()?;
        crate::stream::epoll::poll_one(None, self.sock.as_raw_fd(), events, ms)?;
        Ok(())
    }

    /// The packet number and send time (ns on the sender's clock) of `datagram`, if it
    /// is long enough to carry them.
    fn decode(&self, datagram: &[u8]) -> Option<(u64, u64)> {
        let header = datagram.get(..self.header_len())?;
        let word = |at: usize| {
            u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
        };
        let sent_ns = u64::from(word(0)) * 1_000_000_000 + u64::from(word(4)) * 1000;
        let seq = if self.wide {
            (u64::from(word(8)) << 32) | u64::from(word(12))
        } else {
            u64::from(word(8))
        };
        Some((seq, sent_ns))
    }
}

impl Stream for Iperf3UdpStream {
    fn nsockets(&self) -> usize {
        1
    }

    fn local_addr(&self) -> String {
        crate::stream::addr_text(self.sock.local_addr())
    }

    fn peer_addr(&self) -> String {
        crate::stream::addr_text(self.sock.peer_addr())
    }

    fn send(&mut self, buf: &[u8], timeout: Timeout) -> io::Result<usize> {
        // A paced sender may never wait on its socket: the end of the test is seen here.
        check_abort(&self.abort)?;
        let start = Instant::now();
        let deadline = timeout.deadline_from(|| start);
        // The datagram is the header and filler to the packet's length (iperf3 reads
        // nothing after the header), so only the header is written per datagram.
        let len = buf.len().max(self.header_len());
        if self.scratch.len() != len {
            self.scratch.clear();
            self.scratch.extend_from_slice(buf);
            self.scratch.resize(len, 0);
        }
        let now = self.epoch.elapsed();
        let secs = u32::try_from(now.as_secs()).unwrap_or(u32::MAX);
        self.scratch[..4].copy_from_slice(&secs.to_be_bytes());
        self.scratch[4..8].copy_from_slice(&now.subsec_micros().to_be_bytes());
        if self.wide {
            self.scratch[8..16].copy_from_slice(&self.next.to_be_bytes());
        } else {
            let low = (self.next & u64::from(u32::MAX)) as u32;
            self.scratch[8..12].copy_from_slice(&low.to_be_bytes());
        }
        loop {
            match self.sock.send(&self.scratch) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLOUT, deadline)?
                }
                // A datagram the peer's closed port refused: the peer is gone.
                Err(e) => return Err(e),
            }
        }
        self.next += 1;
        let end = Instant::now();
        self.stats.send_latency.record(span_ns(start, end));
        self.stats.bytes_sent += len as u64;
        self.stats.datagrams.sent += 1;
        Ok(buf.len())
    }

    fn send_submit(&mut self, _buf: Bytes, _timeout: Timeout) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "an iperf3 UDP stream sends one datagram per call",
        ))
    }

    fn sender_drain(&mut self, _timeout: Timeout) -> io::Result<()> {
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize> {
        let start = Instant::now();
        let deadline = timeout.deadline_from(|| start);
        loop {
            match self.sock.recv(buf) {
                Ok(n) => {
                    let now = Instant::now();
                    let arrival_ns = now.saturating_duration_since(self.epoch).as_nanos();
                    match self.decode(&buf[..n]) {
                        Some((seq, sent_ns)) => {
                            let transit = i128::try_from(arrival_ns).unwrap_or(i128::MAX)
                                - i128::from(sent_ns);
                            if self.tracker.on_numbered(seq, Some(transit)) == Arrival::Duplicate {
                                continue;
                            }
                        }
                        None => {
                            self.tracker.on_foreign(1);
                            continue;
                        }
                    }
                    self.stats.recv_latency.record(span_ns(start, now));
                    self.stats.bytes_received += n as u64;
                    self.stats.mark_recv(now);
                    // At least a header long, so never 0: the test ends with the
                    // client's TEST_END on the control connection, not here.
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLIN, deadline)?
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn ack_partial(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn finish_sending(&mut self, _timeout: Timeout) -> io::Result<()> {
        // iperf3 has no end-of-stream datagram: the client's TEST_END ends the test.
        Ok(())
    }

    /// A receiving end's loss is counted as iperf3 counts it, from the numbers: the
    /// highest one received is what the sender had sent, less those missing below it.
    /// The sender's own count, once known, makes it exact.
    fn stats(&self) -> StreamStats {
        let mut s = self.stats.clone();
        let sent = s.datagrams.sent;
        s.datagrams = self.tracker.counts();
        s.datagrams.sent = sent;
        if let Some(highest) = self.tracker.highest() {
            s.datagrams.peer_sent = highest;
            s.datagrams.lost = highest.saturating_sub(self.tracker.unique());
        }
        s
    }

    fn facts(&self) -> SocketFacts {
        SocketFacts {
            buffers: SocketBuffers::of(&self.sock),
            ..SocketFacts::default()
        }
    }
}

/// A UDP socket bound to `addr` that other sockets may bind too (each stream's socket
/// is bound to the port before it is connected to its client).
pub fn bind_shared(addr: SocketAddr) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        let _ = sock.set_only_v6(false);
    }
    sock.bind(&SockAddr::from(addr))?;
    Ok(sock.into())
}

/// Server: accepts `n` UDP streams on `listener` (bound to `addr` with
/// [`bind_shared`]) from `client`, one connect datagram each, in the order they come,
/// within `within`. A datagram from any other address is ignored: only the client's
/// own sockets become its streams.
pub fn accept_streams(
    mut listener: UdpSocket,
    addr: SocketAddr,
    client: IpAddr,
    n: u32,
    wide: bool,
    within: Duration,
    abort: &Arc<AtomicBool>,
) -> io::Result<Vec<Iperf3UdpStream>> {
    let deadline = Instant::now() + within;
    let mut streams = Vec::with_capacity(n as usize);
    while streams.len() < n as usize {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} of {n} UDP streams connected in time", streams.len()),
            ));
        }
        listener.set_read_timeout(Some(left))?;
        let mut msg = [0u8; 64];
        let (_, from) = match listener.recv_from(&mut msg) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        if from.ip().to_canonical() != client.to_canonical() {
            continue;
        }
        // The next stream's socket is bound before this one answers: the client opens
        // its next stream on the answer, and a datagram finding no socket on the port
        // would be refused.
        let next = bind_shared(addr)?;
        listener.connect(from)?;
        listener.set_read_timeout(None)?;
        listener.send(&CONNECT_REPLY)?;
        let connected = std::mem::replace(&mut listener, next);
        streams.push(Iperf3UdpStream::new(connected, wide, abort.clone())?);
    }
    Ok(streams)
}

/// Client: connects a UDP stream to `server` from each of `ports` (`None`: the
/// kernel's choice), one after another, each waiting for the server's answer to its
/// connect datagram. `from`: the address (`-B`) and network interface (`--bind-dev`) to
/// send from, if given.
pub fn connect_streams(
    server: SocketAddr,
    (bind, device): (Option<IpAddr>, Option<&str>),
    ports: &[Option<u16>],
    wide: bool,
    within: Duration,
    abort: &Arc<AtomicBool>,
) -> io::Result<Vec<Iperf3UdpStream>> {
    ports
        .iter()
        .map(|port| {
            let port = port.unwrap_or(0);
            let local = match (bind, server) {
                (Some(ip), _) => SocketAddr::new(ip, port),
                (None, SocketAddr::V4(_)) => SocketAddr::from(([0, 0, 0, 0], port)),
                (None, SocketAddr::V6(_)) => {
                    SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))
                }
            };
            let sock = Socket::new(Domain::for_address(local), Type::DGRAM, None)?;
            if let Some(name) = device {
                crate::stream::sys::bind_device(&sock, name)?;
            }
            sock.bind(&local.into())?;
            let sock = UdpSocket::from(sock);
            sock.connect(server)?;
            sock.set_read_timeout(Some(within))?;
            sock.send(&CONNECT_MSG)?;
            let mut reply = [0u8; 4];
            let n = sock.recv(&mut reply).map_err(|e| {
                io::Error::new(e.kind(), format!("the iperf3 server did not answer a UDP stream's connect datagram: {e}"))
            })?;
            if n != 4 || (reply != CONNECT_REPLY && reply != LEGACY_CONNECT_REPLY) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the iperf3 server answered a UDP stream's connect datagram with something else",
                ));
            }
            Iperf3UdpStream::new(sock, wide, abort.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(wide: bool) -> (Iperf3UdpStream, Iperf3UdpStream) {
        let abort = Arc::new(AtomicBool::new(false));
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let listener = bind_shared(addr).expect("bind");
        let server_addr = listener.local_addr().expect("addr");
        let a = std::thread::spawn({
            let abort = abort.clone();
            let client = "127.0.0.1".parse().expect("ip");
            let within = Duration::from_secs(5);
            move || accept_streams(listener, server_addr, client, 1, wide, within, &abort)
        });
        let mut client = connect_streams(
            server_addr,
            (None, None),
            &[None],
            wide,
            Duration::from_secs(5),
            &abort,
        )
        .expect("connect");
        let mut server = a.join().expect("join").expect("accept");
        (client.remove(0), server.remove(0))
    }

    #[test]
    fn datagrams_are_numbered_from_one_and_counted_with_their_gaps() {
        for wide in [false, true] {
            let (mut client, mut server) = pair(wide);
            let payload = vec![7u8; 100];
            for _ in 0..10 {
                client.send(&payload, Timeout::Forever).expect("send");
            }
            // Two the network "lost": numbers 11 and 12 never sent, 13 arrives.
            client.next += 2;
            client.send(&payload, Timeout::Forever).expect("send");
            let mut buf = vec![0u8; 2048];
            let mut got = 0;
            while got < 11 {
                let n = server.recv(&mut buf, Timeout::Millis(2000)).expect("recv");
                assert_eq!(n, 100);
                got += 1;
            }
            // The last datagram's number, big-endian after the send time.
            let last = if wide {
                u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes"))
            } else {
                u64::from(u32::from_be_bytes(buf[8..12].try_into().expect("4 bytes")))
            };
            assert_eq!(last, 13);
            let s = server.stats();
            assert_eq!(
                (s.datagrams.peer_sent, s.datagrams.lost),
                (13, 2),
                "the highest number and those missing below it, as iperf3 counts them"
            );
            assert_eq!(s.datagrams.received, 11);
            assert_eq!(s.bytes_received, 1100);
            assert!(s.datagrams.jitter_ns.is_some());
            assert_eq!(client.stats().datagrams.sent, 11);
        }
    }

    #[test]
    fn a_strangers_connect_datagram_makes_no_stream() {
        let abort = Arc::new(AtomicBool::new(false));
        let listener = bind_shared("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accept = std::thread::spawn({
            let abort = abort.clone();
            let client = "127.0.0.1".parse().expect("ip");
            move || {
                accept_streams(
                    listener,
                    addr,
                    client,
                    1,
                    false,
                    Duration::from_secs(5),
                    &abort,
                )
            }
        });
        // Another loopback address is another host to the server.
        let stranger = UdpSocket::bind("127.0.0.2:0").expect("bind a stranger");
        stranger.send_to(&CONNECT_MSG, addr).expect("send");
        stranger
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        assert!(
            stranger.recv(&mut [0u8; 4]).is_err(),
            "the stranger got an answer"
        );
        let mut client = connect_streams(
            addr,
            (None, None),
            &[None],
            false,
            Duration::from_secs(5),
            &abort,
        )
        .expect("the client's own stream");
        let server = accept.join().expect("join").expect("accept");
        assert_eq!(server.len(), 1);
        assert_eq!(
            server[0].sock.peer_addr().expect("peer"),
            client.remove(0).sock.local_addr().expect("local")
        );
    }

    #[test]
    fn short_or_foreign_datagrams_are_not_test_data() {
        let (client, mut server) = pair(false);
        client.sock.send(&[1, 2, 3]).expect("send a short one");
        let err = server
            .recv(&mut [0u8; 64], Timeout::Millis(200))
            .expect_err("nothing counted");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(server.stats().datagrams.foreign, 1);
        assert_eq!(server.stats().datagrams.received, 0);
    }
}
