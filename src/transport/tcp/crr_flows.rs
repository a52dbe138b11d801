//! `--crr --flows`: a client thread keeps up to its share of the flows' connections in
//! flight at once, as neper's tcp_crr does with `-F` flows over `-T` threads. Each
//! flight is one transaction: a non-blocking connect, the header and packet written,
//! the 1-byte reply and the server's close read, then close; a free slot takes the
//! next packet. One epoll set per thread waits for all of them.

use crate::stats::StreamStats;
use crate::stream::epoll::Epoll;
use crate::stream::{check_abort, Deadline};
use socket2::Socket;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Starts connecting `sock` to `server` without waiting for the handshake: the first
/// write to it waits for, or fails with, the connect.
pub(crate) fn connect_nowait(sock: Socket, server: SocketAddr) -> io::Result<Socket> {
    sock.set_nonblocking(true)?;
    match sock.connect(&server.into()) {
        Ok(()) => Ok(sock),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(sock),
        Err(e) => Err(e),
    }
}

/// Where a connection in flight is.
struct Flight {
    sock: Socket,
    start: Instant,
    /// Bytes of the request (its slot's buffer) written so far.
    written: usize,
    /// Bytes of the packet, counted once the transaction is whole.
    payload: usize,
    /// Reply bytes read so far (the reply is 1 byte).
    reply: usize,
}

/// The connections of one client thread.
pub(crate) struct Flights {
    slots: Vec<Option<Flight>>,
    /// Per slot: the request (header and packet) its flight writes; kept for the next.
    requests: Vec<Vec<u8>>,
    /// Slots with no connection in flight.
    free: Vec<usize>,
    pollfds: Vec<libc::pollfd>,
    epoll: Epoll,
}

impl Flights {
    /// Room for `n` connections in flight.
    pub(crate) fn new(n: usize) -> Flights {
        Flights {
            slots: (0..n).map(|_| None).collect(),
            requests: vec![Vec::new(); n],
            free: (0..n).rev().collect(),
            pollfds: Vec::with_capacity(n),
            epoll: Epoll::new(),
        }
    }

    /// Connections still in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Starts a connection on the socket `open` connects (see [`connect_nowait`]) that
    /// writes `head` and `payload`, first completing flights until a slot is free.
    pub(crate) fn start(
        &mut self,
        open: impl FnOnce() -> io::Result<Socket>,
        head: &[u8],
        payload: &[u8],
        stall: Duration,
        abort: &AtomicBool,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        while self.free.is_empty() {
            self.step(stall, abort, stats)?;
        }
        let sock = open()?;
        let Some(k) = self.free.pop() else {
            return Ok(());
        };
        let request = &mut self.requests[k];
        request.clear();
        request.extend_from_slice(head);
        request.extend_from_slice(payload);
        self.slots[k] = Some(Flight {
            sock,
            start: Instant::now(),
            written: 0,
            payload: payload.len(),
            reply: 0,
        });
        Ok(())
    }

    /// Completes every flight.
    pub(crate) fn drain(
        &mut self,
        stall: Duration,
        abort: &AtomicBool,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        while self.in_flight() > 0 {
            self.step(stall, abort, stats)?;
        }
        Ok(())
    }

    /// Waits once for the flights and moves each ready one on; a flight older than
    /// `stall` means the server is gone.
    fn step(
        &mut self,
        stall: Duration,
        abort: &AtomicBool,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        check_abort(abort)?;
        self.pollfds.clear();
        for (k, slot) in self.slots.iter().enumerate() {
            let (fd, events) = match slot {
                Some(f) if f.written < self.requests[k].len() => {
                    (f.sock.as_raw_fd(), libc::POLLOUT)
                }
                Some(f) => (f.sock.as_raw_fd(), libc::POLLIN),
                None => (-1, 0),
            };
            self.pollfds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            });
        }
        let ms = Deadline::Never.poll_ms()?;
        if self.epoll.poll_many(&mut self.pollfds, ms)? > 0 {
            for k in 0..self.slots.len() {
                if self.pollfds[k].revents != 0 {
                    self.advance(k, stats)?;
                }
            }
        }
        let now = Instant::now();
        if (self.slots.iter().flatten()).any(|f| now.duration_since(f.start) > stall) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "a crr connection stalled: the server is gone",
            ));
        }
        Ok(())
    }

    /// Moves flight `k` on as far as its socket allows without waiting.
    fn advance(&mut self, k: usize, stats: &mut StreamStats) -> io::Result<()> {
        let Some(f) = &mut self.slots[k] else {
            return Ok(());
        };
        let request = &self.requests[k];
        while f.written < request.len() {
            // A failed connect shows here, as the write's error.
            match f.sock.send(&request[f.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => f.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let mut reply = [std::mem::MaybeUninit::<u8>::uninit(); 2];
        loop {
            match f.sock.recv(&mut reply) {
                Ok(0) => break,
                Ok(n) => {
                    f.reply += n;
                    if f.reply > 1 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "the server answered a crr request with more than 1 byte",
                        ));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if f.reply != 1 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed a crr connection without its 1-byte reply",
            ));
        }
        stats.send_latency.record_since(f.start);
        stats.bytes_sent += f.payload as u64;
        stats.bytes_received += 1;
        self.epoll.forget(f.sock.as_raw_fd());
        self.slots[k] = None;
        self.free.push(k);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// What `start` connects to `addr`.
    fn to(addr: SocketAddr) -> impl FnOnce() -> io::Result<Socket> {
        move || {
            let sock = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            connect_nowait(sock, addr)
        }
    }

    const STALL: Duration = Duration::from_secs(10);

    /// A server that answers `n` connections in the order they come, each with the
    /// bytes `reply` gives for its request's length; returns the lengths.
    fn answering(
        n: usize,
        reply: fn(usize) -> Vec<u8>,
    ) -> (SocketAddr, std::thread::JoinHandle<Vec<usize>>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let served = std::thread::spawn(move || {
            (0..n)
                .map(|_| {
                    let (mut s, _) = listener.accept().expect("accept");
                    let mut head = [0u8; 4];
                    s.read_exact(&mut head).expect("head");
                    let len = u32::from_le_bytes(head) as usize;
                    s.read_exact(&mut vec![0u8; len]).expect("packet");
                    s.write_all(&reply(len)).expect("reply");
                    len
                })
                .collect()
        });
        (addr, served)
    }

    #[test]
    fn flights_fill_their_slots_and_each_whole_one_is_a_transaction() {
        let (addr, served) = answering(20, |_| vec![1]);
        let mut flights = Flights::new(4);
        let abort = AtomicBool::new(false);
        let mut stats = StreamStats::default();
        for k in 0..20u32 {
            let len = 10 + k as usize;
            let head = (len as u32).to_le_bytes();
            (flights.start(to(addr), &head, &vec![7; len], STALL, &abort, &mut stats))
                .expect("start");
            assert!((1..=4).contains(&flights.in_flight()));
        }
        flights.drain(STALL, &abort, &mut stats).expect("drain");
        assert_eq!(flights.in_flight(), 0);
        let lens = served.join().expect("server");
        assert_eq!(lens.iter().sum::<usize>(), (10..30).sum::<usize>());
        assert_eq!(stats.send_latency.count(), 20);
        assert_eq!(stats.bytes_sent, (10..30).sum::<usize>() as u64);
        assert_eq!(stats.bytes_received, 20);
    }

    #[test]
    fn a_reply_of_other_than_one_byte_fails_the_flight() {
        for (reply, kind) in [
            (vec![], io::ErrorKind::UnexpectedEof),
            (vec![1, 2], io::ErrorKind::InvalidData),
        ] {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = listener.local_addr().expect("addr");
            let answer = std::thread::spawn(move || {
                let (mut s, _) = listener.accept().expect("accept");
                s.read_exact(&mut [0u8; 5]).expect("request");
                s.write_all(&reply).expect("reply");
            });
            let mut flights = Flights::new(2);
            let abort = AtomicBool::new(false);
            let mut stats = StreamStats::default();
            (flights.start(
                to(addr),
                &1u32.to_le_bytes(),
                &[9],
                STALL,
                &abort,
                &mut stats,
            ))
            .expect("start");
            let e = flights
                .drain(STALL, &abort, &mut stats)
                .expect_err("bad reply");
            assert_eq!(e.kind(), kind);
            answer.join().expect("server");
            assert_eq!(stats.send_latency.count(), 0);
        }
    }

    #[test]
    fn a_silent_server_stalls_the_flights_and_an_abort_ends_the_wait() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut flights = Flights::new(1);
        let abort = AtomicBool::new(false);
        let mut stats = StreamStats::default();
        let short = Duration::from_millis(200);
        (flights.start(
            to(addr),
            &1u32.to_le_bytes(),
            &[9],
            short,
            &abort,
            &mut stats,
        ))
        .expect("start");
        let e = flights.drain(short, &abort, &mut stats).expect_err("stall");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        abort.store(true, std::sync::atomic::Ordering::Relaxed);
        let e = flights.drain(STALL, &abort, &mut stats).expect_err("abort");
        assert_eq!(e.kind(), io::ErrorKind::Interrupted);
        drop(listener);
    }
}
