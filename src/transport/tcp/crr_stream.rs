//! The connect-request-response STREAM (`--crr`, netperf's TCP_CRR, neper's tcp_crr):
//! every packet is one whole TCP connection.
//!
//! The client's [`Stream::send`] connects, writes a 16-byte header and the packet in
//! one call, reads the server's 1-byte reply and the end of the connection, and closes;
//! its mprtt is that whole life of a connection. The server's [`Stream::recv`] accepts,
//! reads the header and the packet, writes the reply and closes first, so the
//! `TIME_WAIT` state lands on the server and the client's ephemeral ports are free again
//! at once (a client closing first would run out of them within seconds).
//!
//! The header is the session id (as a `DataHello` carries it: with a shared secret, one
//! only key holders can derive), the stream index and the packet's length, all little
//! endian; length 0 ends the stream. A connection from another host than the client's,
//! or whose header is wrong, is closed unanswered and counts for nothing.
//!
//! With `--flows`, a client thread keeps its share of the flows' connections in flight
//! at once (`crr_flows.rs`), each counted when its reply and close are in, and
//! the server's thread serves as many at once from one epoll set; without, one. A
//! silent connection holds its place for `REQUEST_TIMEOUT` at most, and the server
//! takes no more connections off its listen queue than it has places for.

use super::crr_flows::{connect_nowait, Flights};
use crate::stats::{span_ns, StreamStats};
use crate::stream::epoll::Epoll;
use crate::stream::{addr_text, check_abort, Timeout};
use crate::transport::stream::StreamOptions;
use bytes::Bytes;
use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Bytes of the header that opens each connection.
pub const HEADER_LEN: usize = 16;
/// How long the server waits for an accepted connection's header and packet: a silent
/// connection holds the stream up no longer than this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

fn header(session: u64, stream: u32, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&session.to_le_bytes());
    h[8..12].copy_from_slice(&stream.to_le_bytes());
    h[12..].copy_from_slice(&len.to_le_bytes());
    h
}

/// The client's end: a new connection per [`Stream::send`].
pub struct CrrClient {
    server: SocketAddr,
    bind: Option<IpAddr>,
    /// The network interface the connections go through (`--bind-dev`).
    device: Option<String>,
    session: u64,
    stream: u32,
    /// Longest a connect or a read of the reply may take before the server is gone.
    stall: Duration,
    opts: StreamOptions,
    stats: StreamStats,
    last_send_end: Option<Instant>,
    /// `--flows`: this thread's connections in flight at once.
    flights: Option<Flights>,
}

impl CrrClient {
    /// The client's end of stream `stream`, whose connections go to `server`.
    pub fn new(
        server: SocketAddr,
        bind: Option<IpAddr>,
        session: u64,
        stream: u32,
        stall: Duration,
        opts: StreamOptions,
    ) -> CrrClient {
        CrrClient {
            server,
            bind,
            device: None,
            session,
            stream,
            stall,
            stats: StreamStats::default(),
            last_send_end: None,
            flights: opts.flows.then(|| Flights::new(opts.nsockets.max(1))),
            opts,
        }
    }

    /// Its connections go through the network interface `device` (`--bind-dev`).
    pub fn through(self, device: Option<String>) -> CrrClient {
        CrrClient { device, ..self }
    }

    fn open(&self) -> io::Result<TcpStream> {
        let handshake = super::stream::HandshakeOptions {
            bind: self.bind,
            congestion: self.opts.tcp.congestion.as_deref(),
            window: None,
            tos: self.opts.tos,
            mss: self.opts.tcp.mss,
            local_port: None,
            device: self.device.as_deref(),
            flowlabel: self.opts.tcp.flowlabel,
        };
        let sock = handshake.connect(self.server, Some(self.stall))?;
        if self.opts.tcp.nodelay {
            sock.set_nodelay(true)?;
        }
        // A server that vanished mid-transaction fails the read, not the run's clock.
        sock.set_read_timeout(Some(self.stall))?;
        Ok(sock)
    }

    /// Writes the header and `payload` (one system call unless the socket takes less).
    fn write_request(sock: &mut TcpStream, head: &[u8], payload: &[u8]) -> io::Result<()> {
        let total = head.len() + payload.len();
        let mut done = 0;
        while done < total {
            let n = if done < head.len() {
                sock.write_vectored(&[IoSlice::new(&head[done..]), IoSlice::new(payload)])?
            } else {
                sock.write(&payload[done - head.len()..])?
            };
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            done += n;
        }
        Ok(())
    }

    /// Reads what the server sends until it closes; returns how many bytes that was.
    fn read_to_close(sock: &mut TcpStream) -> io::Result<usize> {
        let mut reply = [0u8; 2];
        let mut got = 0;
        loop {
            match sock.read(&mut reply) {
                Ok(0) => return Ok(got),
                Ok(n) if got + n > 1 => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the server answered a crr request with more than 1 byte",
                    ))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl crate::transport::stream::Stream for CrrClient {
    fn nsockets(&self) -> usize {
        self.flights.as_ref().map_or(1, |_| self.opts.nsockets)
    }

    fn local_addr(&self) -> String {
        let ip = self
            .bind
            .map_or_else(|| "*".to_string(), |ip| ip.to_canonical().to_string());
        format!("{ip}:(new port per connection)")
    }

    fn peer_addr(&self) -> String {
        crate::stream::canonical(self.server).to_string()
    }

    /// One transaction: connect, request, 1-byte reply, the server's close, close.
    fn send(&mut self, buf: &[u8], _timeout: Timeout) -> io::Result<usize> {
        check_abort(&self.opts.abort)?;
        let len = u32::try_from(buf.len())
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "crr packet size"))?;
        let head = header(self.session, self.stream, len);
        if let Some(flights) = &mut self.flights {
            let handshake = super::stream::HandshakeOptions {
                bind: self.bind,
                congestion: self.opts.tcp.congestion.as_deref(),
                window: None,
                tos: self.opts.tos,
                mss: self.opts.tcp.mss,
                local_port: None,
                device: self.device.as_deref(),
                flowlabel: self.opts.tcp.flowlabel,
            };
            let (server, nodelay) = (self.server, self.opts.tcp.nodelay);
            let open = || {
                let sock = handshake.socket(server)?;
                if nodelay {
                    sock.set_nodelay(true)?;
                }
                connect_nowait(sock, server)
            };
            let abort = &*self.opts.abort;
            flights.start(open, &head, buf, self.stall, abort, &mut self.stats)?;
            self.last_send_end = Some(Instant::now());
            return Ok(buf.len());
        }
        let start = Instant::now();
        let mut sock = self.open()?;
        Self::write_request(&mut sock, &head, buf)?;
        if Self::read_to_close(&mut sock)? != 1 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed a crr connection without its 1-byte reply",
            ));
        }
        drop(sock);
        let end = self.stats.send_latency.record_since(start);
        self.last_send_end = Some(end);
        self.stats.bytes_sent += buf.len() as u64;
        self.stats.bytes_received += 1;
        Ok(buf.len())
    }

    fn send_submit(&mut self, buf: Bytes, timeout: Timeout) -> io::Result<()> {
        self.send(&buf, timeout).map(|_| ())
    }

    fn sender_drain(&mut self, _timeout: Timeout) -> io::Result<()> {
        Ok(())
    }

    fn recv(&mut self, _buf: &mut [u8], _timeout: Timeout) -> io::Result<usize> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the client's end of a crr stream only sends",
        ))
    }

    fn last_send_end(&self) -> Option<Instant> {
        self.last_send_end
    }

    fn ack_partial(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// A last connection whose header announces no packet ends the stream. Made after
    /// an abort (Ctrl-C) too, so the server ends the test at once with what was done.
    /// With `--flows`, the connections in flight finish first (their replies counted):
    /// the server has answered every one before it sees the end. After an abort too,
    /// so that both ends count the same; the stall timeout bounds that wait.
    fn finish_sending(&mut self, _timeout: Timeout) -> io::Result<()> {
        let mut drained = Ok(());
        if let Some(flights) = &mut self.flights {
            let finish_anyway = std::sync::atomic::AtomicBool::new(false);
            drained = flights.drain(self.stall, &finish_anyway, &mut self.stats);
        }
        let mut sock = self.open()?;
        sock.write_all(&header(self.session, self.stream, 0))?;
        Self::read_to_close(&mut sock)?;
        drained
    }

    fn stats(&self) -> StreamStats {
        self.stats.clone()
    }
}

/// The server's end: serves the connections to its own listener, as many at once as
/// the client keeps in flight (one, or with `--flows` the thread's share of them).
pub struct CrrServer {
    listener: TcpListener,
    /// The client's IP (of its control connection): the only one served.
    client: IpAddr,
    session: u64,
    stream: u32,
    pktsize: usize,
    /// Most connections served at once: what is held stays bounded whatever connects.
    room: usize,
    /// Accepted connections whose request is not whole yet.
    pending: Vec<Pending>,
    /// Indices into `pending` the last wait found readable, in increasing order.
    ready: Vec<usize>,
    pollfds: Vec<libc::pollfd>,
    epoll: Epoll,
    opts: StreamOptions,
    stats: StreamStats,
    last_peer: Option<SocketAddr>,
    last_recv_end: Option<Instant>,
}

/// An accepted connection on its way to a whole request.
struct Pending {
    sock: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    head: [u8; HEADER_LEN],
    /// Bytes read so far, the header's included.
    got: usize,
}

/// What one accepted connection turned out to be.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// Not whole yet: its socket has no more for now.
    Partial,
    /// A packet of this many bytes, read and answered.
    Packet(usize),
    /// The client's end of the stream.
    End,
    /// Not this stream's (wrong header, or gone before its packet was whole): dropped.
    Foreign,
}

impl CrrServer {
    /// The server's end of stream `stream` of `session`, on `listener` (non-blocking),
    /// for the client at `client`.
    pub fn new(
        listener: TcpListener,
        client: IpAddr,
        session: u64,
        stream: u32,
        opts: StreamOptions,
    ) -> CrrServer {
        let room = if opts.flows { opts.nsockets.max(1) } else { 1 };
        CrrServer {
            listener,
            client,
            session,
            stream,
            pktsize: opts.pktsize,
            room,
            pending: Vec::with_capacity(room),
            ready: Vec::with_capacity(room),
            pollfds: Vec::with_capacity(room + 1),
            epoll: Epoll::new(),
            opts,
            stats: StreamStats::default(),
            last_peer: None,
            last_recv_end: None,
        }
    }

    /// Takes in the connections waiting on the listener while there is room; those
    /// from another host than the client's are closed at once.
    fn accept_some(&mut self) -> io::Result<()> {
        while self.pending.len() < self.room {
            let (sock, peer) = match self.listener.accept() {
                Ok(conn) => conn,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if peer.ip().to_canonical() != self.client {
                continue;
            }
            // Linux's accept() leaves the listener's O_NONBLOCK behind.
            sock.set_nonblocking(true)?;
            if self.opts.tcp.nodelay {
                sock.set_nodelay(true)?;
            }
            // Its request may be there already.
            self.ready.push(self.pending.len());
            self.pending.push(Pending {
                sock,
                peer,
                accepted: Instant::now(),
                head: [0; HEADER_LEN],
                got: 0,
            });
        }
        Ok(())
    }

    /// Drops the connections silent for `REQUEST_TIMEOUT`, then waits within
    /// `deadline` for the listener (while there is room) and the others; fills `ready`.
    fn wait(&mut self, deadline: crate::stream::Deadline) -> io::Result<()> {
        let now = Instant::now();
        let epoll = &self.epoll;
        self.pending.retain(|p| {
            let live = now.duration_since(p.accepted) < REQUEST_TIMEOUT;
            if !live {
                epoll.forget(p.sock.as_raw_fd());
            }
            live
        });
        // Sliced, so that an abort is seen within 100 ms.
        let ms = deadline.poll_ms()?;
        let listening = self.pending.len() < self.room;
        self.pollfds.clear();
        self.pollfds.push(libc::pollfd {
            fd: if listening {
                self.listener.as_raw_fd()
            } else {
                -1
            },
            events: libc::POLLIN,
            revents: 0,
        });
        self.pollfds
            .extend(self.pending.iter().map(|p| libc::pollfd {
                fd: p.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }));
        if self.epoll.poll_many(&mut self.pollfds, ms)? > 0 {
            // The listener's entry is not one of them: the next accept_some() looks.
            self.ready.extend(
                (self.pollfds[1..].iter().enumerate())
                    .filter(|(_, p)| p.revents != 0)
                    .map(|(k, _)| k),
            );
        }
        Ok(())
    }
}

impl Pending {
    /// Reads what the connection has of its header and packet (the packet into `buf`:
    /// with several connections at once, only its length matters) and answers it once
    /// it is whole. `pktsize` bounds the packet a header may announce.
    fn serve(
        &mut self,
        buf: &mut [u8],
        session: u64,
        stream: u32,
        pktsize: usize,
    ) -> io::Result<Request> {
        let mut sock = &self.sock;
        loop {
            let read = if self.got < HEADER_LEN {
                sock.read(&mut self.head[self.got..])
            } else {
                let len = match announced(&self.head, session, stream) {
                    Some(0) => return Ok(Request::End),
                    Some(len) if len <= pktsize && len <= buf.len() => len,
                    _ => return Ok(Request::Foreign),
                };
                let done = self.got - HEADER_LEN;
                if done == len {
                    // One byte into an empty send buffer: it never waits.
                    return Ok(match sock.write(&[0u8]) {
                        Ok(1) => Request::Packet(len),
                        _ => Request::Foreign,
                    });
                }
                sock.read(&mut buf[done..len])
            };
            match read {
                Ok(0) => return Ok(Request::Foreign),
                Ok(n) => self.got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Request::Partial),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Ok(Request::Foreign)
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The packet length a header announces, if it is for `stream` of `session`.
fn announced(head: &[u8; HEADER_LEN], session: u64, stream: u32) -> Option<usize> {
    let field = |range: std::ops::Range<usize>| {
        let mut b = [0u8; 8];
        b[..range.len()].copy_from_slice(&head[range]);
        u64::from_le_bytes(b)
    };
    (field(0..8) == session && field(8..12) == u64::from(stream)).then(|| field(12..16) as usize)
}

impl crate::transport::stream::Stream for CrrServer {
    fn nsockets(&self) -> usize {
        self.room
    }

    fn local_addr(&self) -> String {
        addr_text(self.listener.local_addr())
    }

    /// The client's address as of its last packet (its port changes with each one).
    fn peer_addr(&self) -> String {
        self.last_peer.map_or_else(
            || format!("{}:(new port per connection)", self.client),
            |p| crate::stream::canonical(p).to_string(),
        )
    }

    fn send(&mut self, _buf: &[u8], _timeout: Timeout) -> io::Result<usize> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the server's end of a crr stream only receives",
        ))
    }

    fn send_submit(&mut self, buf: Bytes, timeout: Timeout) -> io::Result<()> {
        self.send(&buf, timeout).map(|_| ())
    }

    fn sender_drain(&mut self, _timeout: Timeout) -> io::Result<()> {
        Ok(())
    }

    /// Serves connections until one carries a packet (returned, answered and closed) or
    /// ends the stream (`Ok(0)`). The latency runs from the call to the reply written.
    fn recv(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize> {
        let start = Instant::now();
        let deadline = timeout.deadline_from(|| start);
        loop {
            check_abort(&self.opts.abort)?;
            // Highest index first: removing one moves only an entry already looked at.
            while let Some(k) = self.ready.pop() {
                let (session, stream, pktsize) = (self.session, self.stream, self.pktsize);
                let request = self.pending[k].serve(buf, session, stream, pktsize)?;
                if request == Request::Partial {
                    continue;
                }
                // Closing first leaves TIME_WAIT here, not on the client.
                let done = self.pending.swap_remove(k);
                self.epoll.forget(done.sock.as_raw_fd());
                drop(done.sock);
                match request {
                    Request::Packet(n) => {
                        let now = Instant::now();
                        self.stats.recv_latency.record(span_ns(start, now));
                        self.stats.bytes_received += n as u64;
                        self.stats.bytes_sent += 1;
                        self.stats.mark_recv(now);
                        self.last_peer = Some(done.peer);
                        self.last_recv_end = Some(now);
                        return Ok(n);
                    }
                    Request::End => return Ok(0),
                    Request::Foreign | Request::Partial => {}
                }
            }
            self.accept_some()?;
            if self.ready.is_empty() {
                self.wait(deadline)?;
            }
        }
    }

    fn last_recv_end(&self) -> Option<Instant> {
        self.last_recv_end
    }

    fn ack_partial(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn finish_sending(&mut self, _timeout: Timeout) -> io::Result<()> {
        Ok(())
    }

    fn stats(&self) -> StreamStats {
        self.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::reply::Reply;
    use crate::transport::stream::Stream;
    use std::collections::BTreeSet;

    const SESSION: u64 = 0x5eed_0123_4567_89ab;

    fn pair(pktsize: usize) -> (CrrClient, CrrServer) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let opts = StreamOptions {
            pktsize,
            reply: Some(Reply::Ack),
            ..StreamOptions::default()
        };
        let client = CrrClient::new(addr, None, SESSION, 3, Duration::from_secs(5), opts.clone());
        let ip = addr.ip();
        (client, CrrServer::new(listener, ip, SESSION, 3, opts))
    }

    #[test]
    fn each_packet_is_a_connection_of_its_own_and_the_last_one_ends_the_stream() {
        let (mut client, mut server) = pair(100);
        let served = std::thread::spawn(move || {
            let mut buf = vec![0u8; 100];
            let mut sizes = Vec::new();
            let mut peers = BTreeSet::new();
            loop {
                match server
                    .recv(&mut buf, Timeout::Millis(10_000))
                    .expect("recv")
                {
                    0 => break,
                    n => {
                        sizes.push((n, buf[0]));
                        peers.insert(server.peer_addr());
                    }
                }
            }
            (sizes, peers, server.stats())
        });
        for k in 0..5u8 {
            let len = 60 + usize::from(k) * 10;
            assert_eq!(
                client.send(&vec![k; len], Timeout::Forever).expect("send"),
                len
            );
        }
        client.finish_sending(Timeout::Forever).expect("finish");
        let (sizes, peers, stats) = served.join().expect("server thread");
        assert_eq!(sizes, [(60, 0), (70, 1), (80, 2), (90, 3), (100, 4)]);
        assert_eq!(peers.len(), 5, "a new client port per packet: {peers:?}");
        assert_eq!(stats.bytes_received, 400);
        assert_eq!(stats.bytes_sent, 5, "one reply byte per packet");
        assert_eq!(stats.recv_latency.count(), 5);
        let c = client.stats();
        assert_eq!((c.bytes_sent, c.bytes_received), (400, 5));
        assert_eq!(c.send_latency.count(), 5);
    }

    #[test]
    fn connections_that_are_not_the_streams_are_dropped_unanswered() {
        let (mut client, mut server) = pair(64);
        let addr = server.listener.local_addr().expect("addr");
        let served = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64];
            let first = server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            (first, server.stats())
        });
        // What a connection from `from` that sends `head` and `payload` is answered.
        let answer = |from: [u8; 4], head: [u8; HEADER_LEN], payload: &[u8]| {
            let handshake = super::super::stream::HandshakeOptions {
                bind: Some(IpAddr::from(from)),
                congestion: None,
                window: None,
                tos: None,
                mss: None,
                local_port: None,
                device: None,
                flowlabel: None,
            };
            let mut s = handshake.connect(addr, None).expect("connect");
            // One write: the server may close as soon as it has read the header.
            s.write_all(&[&head[..], payload].concat()).expect("write");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            got
        };
        let client_ip = [127, 0, 0, 1];
        // Another session, another stream, a packet larger than -l, a short header.
        assert!(answer(client_ip, header(SESSION + 1, 3, 8), &[1; 8]).is_empty());
        assert!(answer(client_ip, header(SESSION, 4, 8), &[1; 8]).is_empty());
        assert!(answer(client_ip, header(SESSION, 3, 65), &[1; 65]).is_empty());
        assert!(answer(client_ip, [0; HEADER_LEN], &[]).is_empty());
        // The right header from another address than the client's.
        let stranger = [127, 0, 0, 2];
        assert!(answer(stranger, header(SESSION, 3, 8), &[1; 8]).is_empty());
        let mut short = TcpStream::connect(addr).expect("connect");
        short.write_all(&[1, 2, 3]).expect("write");
        drop(short);
        // The stream's own packet is still served.
        client.send(&[7; 64], Timeout::Forever).expect("send");
        let (first, stats) = served.join().expect("server thread");
        assert_eq!(first, 64);
        assert_eq!(stats.bytes_received, 64);
        assert_eq!(stats.recv_latency.count(), 1);
    }

    /// A server of stream 3 that serves up to `room` connections at once (`--flows`),
    /// answering in a thread of its own until `n` packets are served; the packet sizes.
    fn flows_server(room: usize, n: usize) -> (SocketAddr, std::thread::JoinHandle<Vec<usize>>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let opts = StreamOptions {
            pktsize: 100,
            reply: Some(Reply::Ack),
            flows: true,
            nsockets: room,
            ..StreamOptions::default()
        };
        let mut server = CrrServer::new(listener, addr.ip(), SESSION, 3, opts);
        let served = std::thread::spawn(move || {
            let mut buf = vec![0u8; 100];
            (0..n)
                .map(|_| (server.recv(&mut buf, Timeout::Millis(10_000))).expect("recv"))
                .collect()
        });
        (addr, served)
    }

    /// The reply to a request on `s`, up to the server's close.
    fn reply(s: &mut TcpStream) -> Vec<u8> {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("reply");
        got
    }

    #[test]
    fn a_flows_server_answers_whole_requests_while_others_are_partial() {
        let (addr, served) = flows_server(3, 3);
        let mut conns: Vec<TcpStream> = (0..3)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        // The first sends its header and part of its packet, then stops.
        conns[0]
            .write_all(&[&header(SESSION, 3, 50)[..], &[1; 20]].concat())
            .expect("write");
        for (k, len) in [(1, 10u32), (2, 30)] {
            let request = [&header(SESSION, 3, len)[..], &vec![2; len as usize]].concat();
            conns[k].write_all(&request).expect("write");
            assert_eq!(reply(&mut conns[k]), [0]);
        }
        conns[0].write_all(&[1; 30]).expect("write");
        assert_eq!(reply(&mut conns[0]), [0]);
        assert_eq!(served.join().expect("server"), [10, 30, 50]);
    }

    #[test]
    fn a_flows_server_holds_no_more_connections_than_its_room() {
        let (addr, served) = flows_server(2, 1);
        let silent: Vec<TcpStream> = (0..2)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let mut third = TcpStream::connect(addr).expect("connect");
        third
            .write_all(&[&header(SESSION, 3, 8)[..], &[3; 8]].concat())
            .expect("write");
        // Both places are taken: the third waits in the listen queue, unanswered.
        third
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let e = third.read(&mut [0u8; 1]).expect_err("no reply yet");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        // A silent one goes away: its place serves the third.
        drop(silent);
        assert_eq!(reply(&mut third), [0]);
        assert_eq!(served.join().expect("server"), [8]);
    }

    #[test]
    fn a_silent_connection_is_dropped_after_its_timeout() {
        let (addr, served) = flows_server(1, 1);
        let start = Instant::now();
        let mut silent = TcpStream::connect(addr).expect("connect");
        std::thread::sleep(Duration::from_millis(100));
        let mut next = TcpStream::connect(addr).expect("connect");
        next.write_all(&[&header(SESSION, 3, 8)[..], &[3; 8]].concat())
            .expect("write");
        assert_eq!(reply(&mut next), [0]);
        assert!(start.elapsed() >= REQUEST_TIMEOUT, "{:?}", start.elapsed());
        assert!(reply(&mut silent).is_empty(), "closed unanswered");
        assert_eq!(served.join().expect("server"), [8]);
    }

    #[test]
    fn a_server_without_connections_times_out_and_sees_an_abort() {
        let (_client, mut server) = pair(64);
        let mut buf = [0u8; 64];
        let e = server
            .recv(&mut buf, Timeout::Millis(50))
            .expect_err("timed out");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        server
            .opts
            .abort
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let e = server
            .recv(&mut buf, Timeout::Forever)
            .expect_err("aborted");
        assert_eq!(e.kind(), io::ErrorKind::Interrupted);
    }
}
