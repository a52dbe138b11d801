//! The TCP STREAM.
//!
//! `nsockets` TCP connections between the same two hosts. Writes and reads are
//! non-blocking; `poll()` runs only after `EAGAIN`. Latency is timed as the seed
//! defines it: a send from the write() start to its return (poll waits included, and
//! with MPRTT to the ACK read); a receive from the start of the call to the read() that
//! returns data (and with MPRTT, the ACK written).

use super::sender::{PacketSink, Senders};
use super::sys::{poll_many, poll_one, tcp_info, tcp_quickack};
use super::zerocopy::ZeroCopyWriter;
use super::{Deadline, Stream, StreamOptions, Timeout};
use crate::settings::ZeroCopy;
use crate::stats::StreamStats;
use bytes::Bytes;
use std::io::{self, Read, Write};
use std::net::{self, Shutdown, SocketAddr, TcpListener, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// One socket of a TCP STREAM. The receiving path and each sender thread hold their own
/// `Socket` for the same connection (see [`Socket::for_sender`]).
struct Socket {
    sock: Arc<net::TcpStream>,
    mprtt: bool,
    quickack: bool,
    busy_poll: bool,
    abort: Arc<AtomicBool>,
    /// `--zerocopy`: this thread's zero-copy writer; payload goes through it.
    zerocopy: Option<ZeroCopyWriter>,
}

impl Socket {
    /// Another handle on the same connection for a sender thread, with its own
    /// zero-copy writer (a writer's state belongs to one thread).
    fn for_sender(&self, mode: ZeroCopy) -> io::Result<Socket> {
        Ok(Socket {
            sock: self.sock.clone(),
            mprtt: self.mprtt,
            quickack: self.quickack,
            busy_poll: self.busy_poll,
            abort: self.abort.clone(),
            zerocopy: ZeroCopyWriter::new(mode, &*self.sock)?,
        })
    }

    /// Writes all of `buf` (zero-copy if so configured), waiting after EAGAIN.
    fn write_payload(&mut self, buf: &[u8], deadline: Deadline) -> io::Result<()> {
        let Some(zc) = &mut self.zerocopy else {
            return self.write_all(buf, deadline);
        };
        let fd = self.sock.as_raw_fd();
        let (abort, busy) = (&*self.abort, self.busy_poll);
        zc.write_all(fd, buf, &mut || {
            wait_ready(fd, libc::POLLOUT, deadline, abort, busy)
        })
    }

    /// Writes all of `buf` with plain `write()`, waiting after EAGAIN.
    fn write_all(&self, mut buf: &[u8], deadline: Deadline) -> io::Result<()> {
        while !buf.is_empty() {
            match (&*self.sock).write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLOUT, deadline)?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads the 1-byte MPRTT ACK.
    fn read_ack(&self, deadline: Deadline) -> io::Result<()> {
        let mut ack = [0u8; 1];
        // The ACK needs the peer to wake and answer, so right after the write it is
        // never there yet: sleeping in poll() first saves a read() that would only
        // return EAGAIN (one system call per round trip). Spinning and non-blocking
        // calls still try the read first.
        if !self.busy_poll && deadline != Deadline::Now {
            self.wait(libc::POLLIN, deadline)?;
        }
        loop {
            match (&*self.sock).read(&mut ack) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed the connection while an ACK was awaited",
                    ))
                }
                Ok(_) => {
                    if self.quickack {
                        tcp_quickack(&*self.sock)?;
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLIN, deadline)?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn wait(&self, events: libc::c_short, deadline: Deadline) -> io::Result<()> {
        wait_ready(
            self.sock.as_raw_fd(),
            events,
            deadline,
            &self.abort,
            self.busy_poll,
        )
    }
}

/// Waits until `fd` may be ready for `events`: sleeps in `poll()`, or with `busy_poll`
/// returns at once so the caller retries its non-blocking call (a spin). Fails once
/// `abort` is set or `deadline` passed.
///
/// The spin yields the CPU to other runnable threads on each turn: on a machine with
/// fewer free cores than spinning threads (both ends of a loopback run spin), a pure
/// spin would keep the peer that must answer from running.
fn wait_ready(
    fd: RawFd,
    events: libc::c_short,
    deadline: Deadline,
    abort: &AtomicBool,
    busy_poll: bool,
) -> io::Result<()> {
    super::check_abort(abort)?;
    let ms = deadline.poll_ms()?;
    if busy_poll {
        std::thread::yield_now();
    } else {
        poll_one(fd, events, ms)?;
    }
    Ok(())
}

impl PacketSink for Socket {
    fn send_packet(
        &mut self,
        buf: &[u8],
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        let start = Instant::now();
        self.write_payload(buf, deadline)?;
        if self.mprtt {
            self.read_ack(deadline)?;
            stats.bytes_received += 1;
        }
        stats.send_latency.record_since(start);
        stats.bytes_sent += buf.len() as u64;
        Ok(())
    }
}

/// One end of a TCP STREAM.
pub struct TcpStream {
    sockets: Vec<Socket>,
    opts: StreamOptions,
    senders: Option<Senders>,
    /// Figures of `send()` and `recv()` (the calling thread's).
    stats: StreamStats,
    /// Sockets that reached end of stream.
    eof: Vec<bool>,
    open: usize,
    /// Sockets the last `poll()` found readable and not yet read.
    ready: Vec<usize>,
    /// Socket read last; tried first next time.
    cursor: usize,
    /// MPRTT: bytes of the current packet received per socket.
    partial: Vec<usize>,
    /// MPRTT: an ACK was just written for a whole packet, so the next packet cannot be
    /// there before the peer has read the ACK: the next `recv()` polls before reading.
    acked: bool,
    pollfds: Vec<libc::pollfd>,
}

impl TcpStream {
    /// Active end: connects `opts.nsockets` sockets to `addr`.
    pub fn connect(addr: impl ToSocketAddrs, opts: StreamOptions) -> io::Result<TcpStream> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
        let socks = (0..opts.nsockets)
            .map(|_| net::TcpStream::connect(addr))
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

    /// Builds a STREAM from connected sockets (socket 0 first); sets them non-blocking,
    /// applies the TCP options and starts one sender thread per socket.
    pub fn from_sockets(socks: Vec<net::TcpStream>, opts: StreamOptions) -> io::Result<TcpStream> {
        if socks.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a STREAM needs a socket",
            ));
        }
        let mut sockets = Vec::with_capacity(socks.len());
        for s in socks {
            s.set_nonblocking(true)?;
            if opts.nodelay {
                s.set_nodelay(true)?;
            }
            if opts.quickack {
                tcp_quickack(&s)?;
            }
            let sock = Arc::new(s);
            sockets.push(Socket {
                zerocopy: ZeroCopyWriter::new(opts.zerocopy, &*sock)?,
                sock,
                mprtt: opts.mprtt,
                quickack: opts.quickack,
                busy_poll: opts.busy_poll,
                abort: opts.abort.clone(),
            });
        }
        let n = sockets.len();
        let sinks = sockets
            .iter()
            .map(|s| s.for_sender(opts.zerocopy))
            .collect::<io::Result<Vec<_>>>()?;
        let senders = Senders::start_pinned(opts.queue, sinks, opts.abort.clone(), opts.cpu)?;
        let pollfds = sockets
            .iter()
            .map(|s| libc::pollfd {
                fd: s.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        Ok(TcpStream {
            sockets,
            opts,
            senders: Some(senders),
            stats: StreamStats::default(),
            eof: vec![false; n],
            open: n,
            ready: Vec::with_capacity(n),
            cursor: 0,
            partial: vec![0; n],
            acked: false,
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

    /// Reads once from socket `k`. `Ok(None)` is EAGAIN.
    fn read_from(&mut self, k: usize, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            return match (&*self.sockets[k].sock).read(buf) {
                Ok(0) => {
                    self.eof[k] = true;
                    self.open -= 1;
                    Ok(Some(0))
                }
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
        }
    }

    /// After `n` bytes arrived on socket `k`: re-arm QUICKACK, send MPRTT ACKs.
    fn after_read(&mut self, k: usize, n: usize) -> io::Result<()> {
        let sock = &self.sockets[k];
        if self.opts.quickack {
            tcp_quickack(&*sock.sock)?;
        }
        if self.opts.mprtt {
            self.partial[k] += n;
            let pkt = self.opts.pktsize.max(1);
            while self.partial[k] >= pkt {
                self.partial[k] -= pkt;
                sock.write_all(&[1u8], Deadline::Never)?;
                self.stats.bytes_sent += 1;
            }
            self.acked = self.partial[k] == 0 && self.sockets.len() == 1;
        }
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
        for (p, &eof) in self.pollfds.iter_mut().zip(&self.eof) {
            // A negative fd makes poll() skip the entry.
            p.fd = if eof { -1 } else { p.fd.abs() };
            p.revents = 0;
        }
        if poll_many(&mut self.pollfds, ms)? > 0 {
            self.ready.extend(
                self.pollfds
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.fd >= 0 && p.revents != 0)
                    .map(|(k, _)| k),
            );
        }
        Ok(())
    }
}

impl Stream for TcpStream {
    fn nsockets(&self) -> usize {
        self.sockets.len()
    }

    fn local_addr(&self) -> String {
        super::addr_text(self.sockets[0].sock.local_addr())
    }

    fn peer_addr(&self) -> String {
        super::addr_text(self.sockets[0].sock.peer_addr())
    }

    fn send(&mut self, buf: &[u8], timeout: Timeout) -> io::Result<usize> {
        self.opts.check_abort()?;
        self.sockets[0].send_packet(buf, timeout.deadline(), &mut self.stats)?;
        Ok(buf.len())
    }

    fn send_submit(&mut self, buf: Bytes, timeout: Timeout) -> io::Result<()> {
        super::sender::submit_if_running(&mut self.senders, buf, timeout)
    }

    fn sender_drain(&mut self, timeout: Timeout) -> io::Result<()> {
        super::sender::drain_if_running(&mut self.senders, timeout)
    }

    fn recv(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize> {
        let start = Instant::now();
        let deadline = timeout.deadline();
        if std::mem::take(&mut self.acked)
            && !self.opts.busy_poll
            && deadline != Deadline::Now
            && self.open > 0
        {
            // See `acked`: skip the read() that would only return EAGAIN.
            self.poll_open(deadline)?;
        }
        loop {
            if self.open == 0 {
                return Ok(0);
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
            match self.read_from(k, buf)? {
                Some(0) => continue,
                Some(n) => {
                    self.cursor = k;
                    self.after_read(k, n)?;
                    let now = Instant::now();
                    self.stats
                        .recv_latency
                        .record(crate::stats::elapsed_ns(start));
                    self.stats.bytes_received += n as u64;
                    self.stats.mark_recv(now);
                    return Ok(n);
                }
                None => {
                    if self.ready.is_empty() {
                        self.poll_open(deadline)?;
                    }
                }
            }
        }
    }

    fn ack_partial(&mut self) -> io::Result<()> {
        if !self.opts.mprtt {
            return Ok(());
        }
        for k in 0..self.sockets.len() {
            if self.partial[k] > 0 {
                self.partial[k] = 0;
                self.sockets[k].write_all(&[1u8], Deadline::Never)?;
                self.stats.bytes_sent += 1;
            }
        }
        Ok(())
    }

    fn finish_sending(&mut self, timeout: Timeout) -> io::Result<()> {
        let result = match &mut self.senders {
            Some(s) => s.stop(timeout),
            None => Ok(()),
        };
        for s in &self.sockets {
            // The peer may already have closed; end of stream is what we want anyway.
            let _ = s.sock.shutdown(Shutdown::Write);
        }
        result
    }

    fn stats(&self) -> StreamStats {
        let mut s = self.stats.clone();
        if let Some(senders) = &self.senders {
            s.merge(&senders.stats());
        }
        s
    }

    fn tcp_info(&self) -> Option<crate::sysinfo::TcpInfo> {
        let mut total: Option<crate::sysinfo::TcpInfo> = None;
        for s in &self.sockets {
            // A socket the kernel cannot describe (already torn down) adds nothing.
            if let Ok((retransmits, cwnd_bytes, srtt_us, rttvar_us)) = tcp_info(&*s.sock) {
                let one = crate::sysinfo::TcpInfo {
                    sockets: 1,
                    retransmits,
                    cwnd_bytes,
                    srtt_us,
                    rttvar_us,
                };
                crate::sysinfo::TcpInfo::merge_opt(&mut total, Some(&one));
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn pair(opts: StreamOptions) -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let o = opts.clone();
        let t = thread::spawn(move || TcpStream::connect(addr, o).expect("connect"));
        let server = TcpStream::accept(&listener, opts).expect("accept");
        (t.join().expect("join"), server)
    }

    fn drain_all(server: &mut TcpStream, bufsize: usize) -> u64 {
        let mut buf = vec![0u8; bufsize];
        let mut total = 0;
        loop {
            match server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv")
            {
                0 => return total,
                n => total += n as u64,
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
        loop {
            let n = server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let want: Vec<u8> = (0..1000u32).flat_map(|i| i.to_be_bytes()).collect();
        assert_eq!(got, want);
        let cs = t.join().expect("join");
        assert_eq!(cs.bytes_sent, 4000);
        assert_eq!(cs.send_latency.count(), 1000);
        assert_eq!(server.stats().bytes_received, 4000);
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
            mprtt: true,
            pktsize: 1000,
            ..StreamOptions::default()
        };
        let (mut client, mut server) = pair(opts);
        let t = thread::spawn(move || {
            let buf = vec![1u8; 1000];
            for _ in 0..50 {
                client.send(&buf, Timeout::Forever).expect("send");
            }
            client
                .send(&buf[..10], Timeout::Forever)
                .expect("send short");
            client.finish_sending(Timeout::Forever).expect("finish");
            client.stats()
        });
        let mut buf = vec![0u8; 1000];
        let mut total = 0;
        while total < 50_010 {
            total += server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            if total == 50_010 {
                server.ack_partial().expect("ack");
            }
        }
        let cs = t.join().expect("join");
        assert_eq!(cs.bytes_received, 51, "one ACK byte per packet");
        assert_eq!(server.stats().bytes_sent, 51);
        assert_eq!(
            server.recv(&mut buf, Timeout::Millis(10_000)).expect("eof"),
            0
        );
    }

    #[test]
    fn recv_timeouts_follow_the_seed_convention() {
        let (_client, mut server) = pair(StreamOptions::default());
        let mut buf = [0u8; 16];
        let e = server
            .recv(&mut buf, Timeout::from_millis(0))
            .expect_err("no data");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let t0 = Instant::now();
        let e = server
            .recv(&mut buf, Timeout::from_millis(150))
            .expect_err("no data");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() >= std::time::Duration::from_millis(140));
    }
}
