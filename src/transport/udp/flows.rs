//! `--flows` over UDP, request/response: each flow (a connected UDP socket of the STREAM)
//! keeps one request datagram of its own in flight, as TCP flows do (see
//! [`crate::transport::tcp::flows`]), and the thread waits for every flow's reply in one
//! epoll set. What UDP adds: a request whose reply does not come within the ACK time-out
//! is sent again, at most [`MAX_RETRIES`] times, and a reply is taken only if it answers
//! the flow's request (its sequence number, and with echo its content); anything else
//! that arrives is counted and dropped.
//!
//! Bulk needs none of this: the UDP STREAM sends each datagram, or batch, on the next
//! flow.

use crate::stats::StreamStats;
use crate::stream::epoll::Epoll;
use crate::stream::{check_abort, Deadline};
use crate::transport::udp::settings::MAX_RETRIES;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// One socket of a set of UDP flows, as [`UdpFlows`] drives it.
pub(crate) trait DatagramFlow {
    fn fd(&self) -> RawFd;
    /// Sends `request` as datagram `seq`, stamped as sent at `sent`.
    fn send_request(
        &self,
        request: &[u8],
        seq: u64,
        sent: Instant,
        deadline: Deadline,
    ) -> io::Result<()>;
    /// One `recv()` that does not wait: the datagram's whole length (of which `buf`
    /// holds what fits), `Ok(None)` when nothing is there.
    fn recv_nowait(&self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Whether `reply`, the first bytes of a datagram of `len` bytes, answers
    /// `request`, sent as datagram `seq`.
    fn answers(&self, reply: &[u8], len: usize, request: &[u8], seq: u64) -> bool;
}

/// The request a flow has in flight.
#[derive(Clone, Copy)]
struct InFlight {
    seq: u64,
    /// The first send: the round trip is timed from it, resends included.
    start: Instant,
    /// When to send it again if no reply came.
    due: Instant,
    resends: u32,
}

/// The sending side of a UDP STREAM's request/response flows.
pub(crate) struct UdpFlows {
    in_flight: Vec<Option<InFlight>>,
    /// Per flow: its request as sent, to send again and to check an echo against.
    requests: Vec<Vec<u8>>,
    /// Flows with no request in flight.
    idle: Vec<usize>,
    /// Flows the last wait found readable and not yet read dry.
    ready: Vec<usize>,
    pollfds: Vec<libc::pollfd>,
    epoll: Epoll,
    /// Where replies are read to: one byte more than the largest reply, so a longer
    /// datagram shows as such.
    reply: Vec<u8>,
    ack_timeout: Duration,
    /// No request is due to be sent again before this (it may be early: a flow whose
    /// reply came is looked at for nothing).
    next_due: Option<Instant>,
    stream: u32,
}

impl UdpFlows {
    /// Flows over the sockets whose descriptors are `fds`, of stream `stream`, whose
    /// replies have at most `reply_max` bytes.
    pub(crate) fn new(
        fds: &[RawFd],
        reply_max: usize,
        ack_timeout: Duration,
        stream: u32,
    ) -> UdpFlows {
        let n = fds.len();
        UdpFlows {
            in_flight: vec![None; n],
            requests: vec![Vec::new(); n],
            // Popped from the end: flow 0 goes first.
            idle: (0..n).rev().collect(),
            ready: Vec::with_capacity(n),
            pollfds: fds
                .iter()
                .map(|&fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
            epoll: Epoll::new(),
            reply: vec![0u8; reply_max + 1],
            ack_timeout,
            next_due: None,
            stream,
        }
    }

    /// Requests still awaiting their replies.
    pub(crate) fn outstanding(&self) -> usize {
        self.in_flight.len() - self.idle.len()
    }

    /// Sends `request` as datagram `seq` on a flow with no request in flight, first
    /// taking in replies until one is free. Each reply taken in is a round trip in
    /// `stats`; the request counts as sent now.
    pub(crate) fn send_request<S: DatagramFlow>(
        &mut self,
        socks: &[S],
        request: &[u8],
        seq: u64,
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
        socks[k].send_request(request, seq, start, deadline)?;
        self.requests[k].clear();
        self.requests[k].extend_from_slice(request);
        let due = start + self.ack_timeout;
        self.in_flight[k] = Some(InFlight {
            seq,
            start,
            due,
            resends: 0,
        });
        self.next_due = Some(self.next_due.map_or(due, |d| d.min(due)));
        stats.bytes_sent += request.len() as u64;
        stats.datagrams.sent += 1;
        Ok(())
    }

    /// Takes in every outstanding reply.
    pub(crate) fn drain<S: DatagramFlow>(
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

    /// Reads datagrams until one is the reply a flow waits for, and records its round
    /// trip; sends again the requests whose time-out passed meanwhile.
    fn take_reply<S: DatagramFlow>(
        &mut self,
        socks: &[S],
        deadline: Deadline,
        abort: &AtomicBool,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        loop {
            self.resend_due(socks, deadline, stats)?;
            let Some(&k) = self.ready.last() else {
                self.wait(deadline, abort)?;
                continue;
            };
            let Some(len) = socks[k].recv_nowait(&mut self.reply)? else {
                self.ready.pop();
                continue;
            };
            stats.bytes_received += len as u64;
            let Some(flight) = self.in_flight[k] else {
                // A late copy of a reply already taken (its request was sent twice).
                continue;
            };
            let held = &self.reply[..len.min(self.reply.len())];
            if !socks[k].answers(held, len, &self.requests[k], flight.seq) {
                continue;
            }
            stats.send_latency.record_since(flight.start);
            self.in_flight[k] = None;
            self.idle.push(k);
            return Ok(());
        }
    }

    /// Sends again every request whose reply is overdue; fails naming a request sent
    /// [`MAX_RETRIES`] times more without a reply.
    fn resend_due<S: DatagramFlow>(
        &mut self,
        socks: &[S],
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        let now = Instant::now();
        if !self.next_due.is_some_and(|due| due <= now) {
            return Ok(());
        }
        let mut next_due: Option<Instant> = None;
        for (k, slot) in self.in_flight.iter_mut().enumerate() {
            let Some(flight) = slot else { continue };
            if flight.due <= now {
                if flight.resends == MAX_RETRIES {
                    return Err(unacknowledged(
                        self.stream,
                        flight.seq,
                        self.requests[k].len(),
                        flight.start.elapsed(),
                        self.ack_timeout,
                    ));
                }
                socks[k].send_request(&self.requests[k], flight.seq, now, deadline)?;
                flight.resends += 1;
                flight.due = now + self.ack_timeout;
                stats.retries += 1;
            }
            next_due = Some(next_due.map_or(flight.due, |d| d.min(flight.due)));
        }
        self.next_due = next_due;
        Ok(())
    }

    /// Waits until a flow is readable, the deadline passes or a request falls due;
    /// fills `ready`.
    fn wait(&mut self, deadline: Deadline, abort: &AtomicBool) -> io::Result<()> {
        check_abort(abort)?;
        let mut ms = deadline.poll_ms()?;
        if let Some(due) = self.next_due {
            let left = due.saturating_duration_since(Instant::now());
            ms = ms.min(
                i32::try_from(left.as_millis())
                    .unwrap_or(i32::MAX)
                    .saturating_add(1),
            );
        }
        self.epoll
            .poll_ready(&mut self.pollfds, ms, &mut self.ready)
    }
}

/// The error of a request datagram that was never answered: sent `MAX_RETRIES` + 1
/// times, `ack_timeout` apart, `waited` since the first.
pub(crate) fn unacknowledged(
    stream: u32,
    seq: u64,
    len: usize,
    waited: Duration,
    ack_timeout: Duration,
) -> io::Error {
    // The time waited as the clock read it, not retries × time-out: the first send is
    // waited for too, and each wait may overrun.
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "UDP stream {stream}: packet seq={seq} ({len} bytes) was not acknowledged in {:.2}s (sent {} times, waiting {} ms for its ACK each time: --ack-timeout)",
            waited.as_secs_f64(),
            MAX_RETRIES + 1,
            ack_timeout.as_millis()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// A flow whose datagrams start with their sequence number; a reply answers when it
    /// echoes the request with that number.
    impl DatagramFlow for UdpSocket {
        fn fd(&self) -> RawFd {
            self.as_raw_fd()
        }
        fn send_request(
            &self,
            request: &[u8],
            seq: u64,
            _: Instant,
            _: Deadline,
        ) -> io::Result<()> {
            let mut datagram = request.to_vec();
            datagram[..8].copy_from_slice(&seq.to_le_bytes());
            self.send(&datagram).map(drop)
        }
        fn recv_nowait(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            match self.recv(buf) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e),
            }
        }
        fn answers(&self, reply: &[u8], len: usize, request: &[u8], seq: u64) -> bool {
            len == request.len() && reply[..8] == seq.to_le_bytes() && reply[8..] == request[8..]
        }
    }

    /// `n` connected pairs of UDP sockets on loopback: the client ends non-blocking.
    fn pairs(n: usize) -> (Vec<UdpSocket>, Vec<UdpSocket>) {
        (0..n)
            .map(|_| {
                let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
                let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
                a.connect(b.local_addr().expect("addr")).expect("connect");
                b.connect(a.local_addr().expect("addr")).expect("connect");
                a.set_nonblocking(true).expect("nonblocking");
                b.set_read_timeout(Some(Duration::from_millis(500)))
                    .expect("timeout");
                (a, b)
            })
            .unzip()
    }

    fn fds(socks: &[UdpSocket]) -> Vec<RawFd> {
        socks.iter().map(AsRawFd::as_raw_fd).collect()
    }

    const SOON: Duration = Duration::from_secs(10);

    /// Answers on each server socket: every datagram whose copy number (counted per
    /// sequence number) is `answer_copy` gets first a wrong reply (another number), then
    /// an echo with a byte changed, then the right echo. Returns the datagrams read.
    fn answer(servers: Vec<UdpSocket>, answer_copy: u32) -> Vec<std::thread::JoinHandle<u32>> {
        servers
            .into_iter()
            .map(|s| {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 100];
                    let mut copies = std::collections::HashMap::new();
                    let mut read = 0;
                    while let Ok(n) = s.recv(&mut buf) {
                        read += 1;
                        let seq = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                        let copy = copies.entry(seq).or_insert(0u32);
                        *copy += 1;
                        if *copy != answer_copy {
                            continue;
                        }
                        let mut wrong = buf;
                        wrong[..8].copy_from_slice(&(seq + 1000).to_le_bytes());
                        s.send(&wrong[..n]).expect("send");
                        let mut changed = buf;
                        changed[n - 1] ^= 1;
                        s.send(&changed[..n]).expect("send");
                        s.send(&buf[..n]).expect("send");
                    }
                    read
                })
            })
            .collect()
    }

    #[test]
    fn every_flow_keeps_a_request_in_flight_and_only_its_own_reply_ends_it() {
        let (clients, servers) = pairs(4);
        let answering = answer(servers, 1);
        let mut flows = UdpFlows::new(&fds(&clients), 50, SOON, 0);
        let abort = AtomicBool::new(false);
        let mut stats = StreamStats::default();
        let deadline = Deadline::At(Instant::now() + SOON);
        let request = [9u8; 50];
        for seq in 0..40 {
            flows
                .send_request(&clients, &request, seq, deadline, &abort, &mut stats)
                .expect("request");
            assert!(flows.outstanding() <= 4);
        }
        flows
            .drain(&clients, deadline, &abort, &mut stats)
            .expect("drain");
        assert_eq!(flows.outstanding(), 0);
        assert_eq!(stats.send_latency.count(), 40);
        assert_eq!((stats.bytes_sent, stats.datagrams.sent), (40 * 50, 40));
        // Every reply read, the wrong ones too.
        assert_eq!(stats.bytes_received, 3 * 40 * 50);
        assert_eq!(stats.retries, 0);
        drop(clients);
        let read: u32 = answering.into_iter().map(|h| h.join().expect("join")).sum();
        assert_eq!(read, 40);
    }

    #[test]
    fn a_request_is_sent_again_until_answered_then_the_run_fails_naming_it() {
        // Each request is answered only when it arrives the second time.
        let (clients, servers) = pairs(2);
        let answering = answer(servers, 2);
        let timeout = Duration::from_millis(20);
        let mut flows = UdpFlows::new(&fds(&clients), 50, timeout, 3);
        let abort = AtomicBool::new(false);
        let mut stats = StreamStats::default();
        let deadline = Deadline::At(Instant::now() + SOON);
        let request = [1u8; 20];
        for seq in 0..6 {
            flows
                .send_request(&clients, &request, seq, deadline, &abort, &mut stats)
                .expect("request");
        }
        flows
            .drain(&clients, deadline, &abort, &mut stats)
            .expect("drain");
        assert_eq!((stats.send_latency.count(), stats.retries), (6, 6));
        let round_trips = stats
            .send_latency
            .summary(&Default::default())
            .expect("samples");
        assert!(round_trips.min_ns >= 20_000_000, "waited a time-out");
        drop(clients);
        let read: u32 = answering.into_iter().map(|h| h.join().expect("join")).sum();
        assert_eq!(read, 12);

        // Nobody answers: the request goes out 1 + MAX_RETRIES times.
        let (clients, servers) = pairs(1);
        let timeout = Duration::from_millis(2);
        let mut flows = UdpFlows::new(&fds(&clients), 50, timeout, 3);
        let mut stats = StreamStats::default();
        flows
            .send_request(&clients, &request, 77, deadline, &abort, &mut stats)
            .expect("request");
        let e = flows
            .drain(&clients, deadline, &abort, &mut stats)
            .expect_err("unanswered");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let text = e.to_string();
        assert!(
            text.starts_with("UDP stream 3: packet seq=77 (20 bytes)"),
            "{text}"
        );
        assert!(text.contains("sent 11 times, waiting 2 ms"), "{text}");
        assert_eq!(stats.retries, u64::from(MAX_RETRIES));
        let mut buf = [0u8; 64];
        let sent = std::iter::from_fn(|| servers[0].recv(&mut buf).ok()).count();
        assert_eq!(sent, 11);
    }
}
