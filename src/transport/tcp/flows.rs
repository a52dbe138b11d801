//! `--flows`: many connections (flows) driven by one thread, as neper's `-F` flows over
//! `-T` threads. The sending end of a STREAM holds one [`Flows`] over its sockets and
//! waits for all of them in one epoll set of its own; the receiving end reads whichever
//! socket has data, as a STREAM of several sockets always does.
//!
//! - Bulk: packets go to one flow until the kernel takes no more from it, then to the
//!   next, as a thread per connection writes its own until it blocks: the receiver then
//!   reads long runs from one socket instead of a packet from each in turn, which costs
//!   less CPU per byte (docs/tuning.md). When no flow takes more, the thread waits in
//!   the epoll set for one that can.
//! - Request/response: every flow has a request of its own outstanding, as neper's
//!   flows do, so a thread keeps as many round trips in flight as it has flows. A new
//!   request goes out on a flow whose reply has come; each reply's round trip is one
//!   latency sample.

use crate::stats::StreamStats;
use crate::stream::epoll::Epoll;
use crate::stream::{check_abort, Deadline};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// One connection of a set of flows, as [`Flows`] drives it.
pub(crate) trait FlowSocket {
    fn fd(&self) -> RawFd;
    /// One `send()` that does not wait: `Ok(None)` when the socket takes nothing now.
    fn send_nowait(&self, buf: &[u8]) -> io::Result<Option<usize>>;
    /// One `recv()` that does not wait: `Ok(None)` when nothing is there,
    /// `Ok(Some(0))` at end of stream.
    fn recv_nowait(&self, buf: &mut [u8]) -> io::Result<Option<usize>>;
}

/// The sending side of a STREAM's flows.
pub(crate) struct Flows {
    /// Per flow: when its outstanding request started, while its reply is awaited.
    awaiting: Vec<Option<Instant>>,
    /// Per flow: bytes of the awaited reply still to come.
    reply_left: Vec<usize>,
    /// Flows with no request outstanding (request/response).
    idle: Vec<usize>,
    /// Flows the last wait found ready and not yet served.
    ready: Vec<usize>,
    /// The flow bulk packets go to until it takes no more.
    current: usize,
    /// Every flow, with the events the last wait asked for.
    pollfds: Vec<libc::pollfd>,
    epoll: Epoll,
    /// Where reply bytes are read to (only their count matters).
    scratch: Vec<u8>,
}

impl Flows {
    /// Flows over the sockets whose descriptors are `fds`; replies of up to `reply_max`
    /// bytes.
    pub(crate) fn new(fds: &[RawFd], reply_max: usize) -> Flows {
        let n = fds.len();
        Flows {
            awaiting: vec![None; n],
            reply_left: vec![0; n],
            // Popped from the end: flow 0 goes first.
            idle: (0..n).rev().collect(),
            ready: Vec::with_capacity(n),
            current: 0,
            pollfds: fds
                .iter()
                .map(|&fd| libc::pollfd {
                    fd,
                    events: 0,
                    revents: 0,
                })
                .collect(),
            epoll: Epoll::new(),
            scratch: vec![0u8; reply_max.max(1)],
        }
    }

    /// Requests still awaiting their replies.
    pub(crate) fn outstanding(&self) -> usize {
        self.awaiting.len() - self.idle.len()
    }

    /// Bulk: hands all of `buf` to the flows: to the current one while it takes it, then
    /// to the next.
    pub(crate) fn send_bulk<S: FlowSocket>(
        &mut self,
        socks: &[S],
        mut buf: &[u8],
        deadline: Deadline,
        abort: &AtomicBool,
    ) -> io::Result<()> {
        while !buf.is_empty() {
            match socks[self.current].send_nowait(buf)? {
                Some(0) => return Err(io::ErrorKind::WriteZero.into()),
                Some(sent) => buf = &buf[sent..],
                // Full: on to a flow the last wait found writable, or wait for one.
                None => match self.ready.pop() {
                    Some(k) => self.current = k,
                    None => self.wait(libc::POLLOUT, deadline, abort)?,
                },
            }
        }
        Ok(())
    }

    /// Request/response: sends `request` on a flow with no request outstanding, first
    /// taking in replies until one is free. A reply of `reply_len` bytes will answer it;
    /// each reply taken in is a round trip in `stats`.
    pub(crate) fn send_request<S: FlowSocket>(
        &mut self,
        socks: &[S],
        request: &[u8],
        reply_len: usize,
        deadline: Deadline,
        abort: &AtomicBool,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        while self.idle.is_empty() {
            self.take_reply(socks, deadline, abort, stats)?;
        }
        let Some(k) = self.idle.pop() else {
            return Ok(());
        };
        let start = Instant::now();
        write_all(&socks[k], request, deadline, abort)?;
        stats.bytes_sent += request.len() as u64;
        self.awaiting[k] = Some(start);
        self.reply_left[k] = reply_len.clamp(1, self.scratch.len());
        Ok(())
    }

    /// Request/response: takes in every outstanding reply.
    pub(crate) fn drain<S: FlowSocket>(
        &mut self,
        socks: &[S],
        deadline: Deadline,
        abort: &AtomicBool,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        while self.outstanding() > 0 {
            self.take_reply(socks, deadline, abort, stats)?;
        }
        Ok(())
    }

    /// Reads reply bytes until one reply is whole, and records its round trip.
    fn take_reply<S: FlowSocket>(
        &mut self,
        socks: &[S],
        deadline: Deadline,
        abort: &AtomicBool,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        loop {
            let Some(k) = self.ready.pop() else {
                self.wait(libc::POLLIN, deadline, abort)?;
                continue;
            };
            let Some(start) = self.awaiting[k] else {
                // Nothing was asked on this flow: only its end or an error may be there.
                return match socks[k].recv_nowait(&mut self.scratch)? {
                    None => continue,
                    Some(0) => Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed a flow that had a request to send",
                    )),
                    Some(_) => Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the peer sent data on a flow that had no request outstanding",
                    )),
                };
            };
            let want = self.reply_left[k];
            match socks[k].recv_nowait(&mut self.scratch[..want])? {
                None => {}
                Some(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed the connection while a reply was awaited",
                    ))
                }
                Some(got) => {
                    stats.bytes_received += got as u64;
                    self.reply_left[k] -= got;
                    if self.reply_left[k] > 0 {
                        // More of it may already be there.
                        self.ready.push(k);
                        continue;
                    }
                    stats.send_latency.record_since(start);
                    self.awaiting[k] = None;
                    self.idle.push(k);
                    return Ok(());
                }
            }
        }
    }

    /// Waits until a flow is ready for `events`; fills `ready`.
    fn wait(
        &mut self,
        events: libc::c_short,
        deadline: Deadline,
        abort: &AtomicBool,
    ) -> io::Result<()> {
        check_abort(abort)?;
        let ms = deadline.poll_ms()?;
        for p in &mut self.pollfds {
            p.events = events;
        }
        self.epoll
            .poll_ready(&mut self.pollfds, ms, &mut self.ready)
    }
}

/// Writes all of `buf` to one flow, waiting for that socket alone when it is full (a
/// request is rarely larger than what a socket takes at once).
fn write_all<S: FlowSocket>(
    sock: &S,
    mut buf: &[u8],
    deadline: Deadline,
    abort: &AtomicBool,
) -> io::Result<()> {
    while !buf.is_empty() {
        match sock.send_nowait(buf)? {
            Some(0) => return Err(io::ErrorKind::WriteZero.into()),
            Some(sent) => buf = &buf[sent..],
            None => {
                check_abort(abort)?;
                crate::stream::sys::poll_one(sock.fd(), libc::POLLOUT, deadline.poll_ms()?)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    impl FlowSocket for TcpStream {
        fn fd(&self) -> RawFd {
            self.as_raw_fd()
        }
        fn send_nowait(&self, buf: &[u8]) -> io::Result<Option<usize>> {
            match (&*self).write(buf) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e),
            }
        }
        fn recv_nowait(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            match (&*self).read(buf) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e),
            }
        }
    }

    /// `n` connected pairs over loopback: the client ends non-blocking.
    fn pairs(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut clients = Vec::new();
        let mut servers = Vec::new();
        for _ in 0..n {
            let c = TcpStream::connect(addr).expect("connect");
            c.set_nonblocking(true).expect("nonblocking");
            clients.push(c);
            servers.push(listener.accept().expect("accept").0);
        }
        (clients, servers)
    }

    fn fds(socks: &[TcpStream]) -> Vec<RawFd> {
        socks.iter().map(AsRawFd::as_raw_fd).collect()
    }

    const SOON: std::time::Duration = std::time::Duration::from_secs(10);

    /// A flow that takes at most `room` bytes and then none (a full socket), waited for
    /// on a real descriptor.
    struct FullingFlow {
        fd: RawFd,
        room: usize,
        taken: std::cell::Cell<usize>,
    }

    impl FlowSocket for FullingFlow {
        fn fd(&self) -> RawFd {
            self.fd
        }
        fn send_nowait(&self, buf: &[u8]) -> io::Result<Option<usize>> {
            let n = buf.len().min(self.room - self.taken.get());
            self.taken.set(self.taken.get() + n);
            Ok((n > 0).then_some(n))
        }
        fn recv_nowait(&self, _: &mut [u8]) -> io::Result<Option<usize>> {
            Ok(None)
        }
    }

    #[test]
    fn bulk_fills_one_flow_until_it_takes_no_more_then_the_next() {
        let (clients, _servers) = pairs(4);
        let flows: Vec<FullingFlow> = fds(&clients)
            .into_iter()
            .map(|fd| FullingFlow {
                fd,
                room: 2500,
                taken: 0.into(),
            })
            .collect();
        let mut sending = Flows::new(&fds(&clients), 1);
        let abort = AtomicBool::new(false);
        let deadline = Deadline::At(Instant::now() + SOON);
        for _ in 0..8 {
            sending
                .send_bulk(&flows, &[7u8; 1000], deadline, &abort)
                .expect("send");
        }
        // Three flows full, the rest in the fourth: a packet the current flow takes
        // only part of goes on in the next one.
        let mut taken: Vec<usize> = flows.iter().map(|f| f.taken.get()).collect();
        assert_eq!(taken[0], 2500, "the first flow is filled first");
        taken.sort_unstable();
        assert_eq!(taken, [500, 2500, 2500, 2500]);
    }

    #[test]
    fn bulk_over_real_flows_loses_no_byte() {
        let (clients, servers) = pairs(8);
        let readers: Vec<_> = servers
            .into_iter()
            .map(|mut s| {
                std::thread::spawn(move || {
                    let mut all = Vec::new();
                    s.read_to_end(&mut all).expect("read");
                    assert!(all.iter().all(|&b| b == 7));
                    all.len()
                })
            })
            .collect();
        let mut flows = Flows::new(&fds(&clients), 1);
        let abort = AtomicBool::new(false);
        let packet = [7u8; 100_000];
        let deadline = Deadline::At(Instant::now() + SOON);
        for _ in 0..200 {
            flows
                .send_bulk(&clients, &packet, deadline, &abort)
                .expect("send");
        }
        drop(clients);
        let got: usize = readers.into_iter().map(|r| r.join().expect("join")).sum();
        assert_eq!(got, 20_000_000);
    }

    #[test]
    fn every_flow_keeps_a_request_in_flight_and_each_reply_is_one_round_trip() {
        let (clients, servers) = pairs(4);
        // Each server end answers every 100-byte request with 3 bytes.
        let answering: Vec<_> = servers
            .into_iter()
            .map(|mut s| {
                std::thread::spawn(move || {
                    let mut req = [0u8; 100];
                    let mut answered = 0u64;
                    while s.read_exact(&mut req).is_ok() {
                        s.write_all(&[1, 2, 3]).expect("reply");
                        answered += 1;
                    }
                    answered
                })
            })
            .collect();
        let mut flows = Flows::new(&fds(&clients), 3);
        let abort = AtomicBool::new(false);
        let mut stats = StreamStats::default();
        let deadline = Deadline::At(Instant::now() + SOON);
        for _ in 0..1000 {
            (flows.send_request(&clients, &[9u8; 100], 3, deadline, &abort, &mut stats))
                .expect("request");
            assert!(flows.outstanding() >= 1);
        }
        flows
            .drain(&clients, deadline, &abort, &mut stats)
            .expect("drain");
        assert_eq!(flows.outstanding(), 0);
        drop(clients);
        let answered: Vec<u64> = answering
            .into_iter()
            .map(|t| t.join().expect("server"))
            .collect();
        assert_eq!(answered.iter().sum::<u64>(), 1000);
        assert!(answered.iter().all(|&n| n > 0), "{answered:?}");
        assert_eq!(stats.bytes_sent, 100_000);
        assert_eq!(stats.bytes_received, 3000);
        assert_eq!(stats.send_latency.count(), 1000);
    }

    #[test]
    fn a_reply_on_a_flow_that_asked_nothing_is_refused() {
        let (clients, mut servers) = pairs(2);
        let mut flows = Flows::new(&fds(&clients), 1);
        let abort = AtomicBool::new(false);
        let mut stats = StreamStats::default();
        let deadline = Deadline::At(Instant::now() + SOON);
        // Flow 0 asks; flow 1 receives bytes nobody asked for.
        flows
            .send_request(&clients, &[1u8; 10], 1, deadline, &abort, &mut stats)
            .expect("request");
        servers[1].write_all(b"junk").expect("junk");
        let err = flows
            .drain(&clients, deadline, &abort, &mut stats)
            .expect_err("unasked data");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
