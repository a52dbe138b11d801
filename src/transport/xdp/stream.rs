//! The UDP STREAM over AF_XDP: the same datagrams as the kernel's UDP STREAM (the
//! header, loss accounting and replies of [`crate::transport::udp::wire`]), and the same
//! control connection carrying the end of the data, but each datagram built into and
//! read from a frame of the AF_XDP socket's UMEM, past the kernel's network stack.
//!
//! One socket per STREAM, on one queue. Bulk: `send()` puts a frame on the TX ring and
//! tells the kernel to send every `batch` frames (and when it runs out of free frames);
//! `finish_sending()` waits until the kernel has sent every frame, then reports the
//! count on the control connection. MPRTT: the request goes at once, and its reply is
//! waited for as over the kernel's UDP (sent again after the ACK time-out, at most
//! [`MAX_RETRIES`] times). The receiving end reads the RX ring; while it is empty it
//! sleeps in `poll()` on the socket and the control connection, or with busy polling
//! spins on `recvfrom()`, which lets the kernel poll the device queue.

use super::facts::XdpInForce;
use super::frame::{Flow, Refused};
use super::program::Attached;
use super::socket::{XskSocket, FRAME_SIZE};
use crate::stats::{span_ns, StreamStats};
use crate::stream::reply::Reply;
use crate::stream::{check_abort, Deadline, Timeout};
use crate::transport::figures::TransportInForce;
use crate::transport::setup::{SetupFrames, SetupMessage};
use crate::transport::stream::{SocketFacts, Stream, StreamOptions};
use crate::transport::udp::settings::MAX_RETRIES;
use crate::transport::udp::stream::{EpochClock, PeerSending, CONTROL_IO_TIMEOUT, DRAIN_QUIET};
use crate::transport::udp::wire::{Arrival, Header, ReplyDatagram, SeqTracker, HEADER_LEN};
use bytes::Bytes;
use std::io;
use std::net;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Empty looks at the RX ring between two looks at the control connection while
/// busy-polling.
const BUSY_SPINS_PER_POLL: u32 = 64;
/// Longest a sleep in `poll()` lasts, so that an abort or a run's end is noticed.
const POLL_SLICE_MS: i32 = 10;

/// What an XDP STREAM is made of, beside its control connection.
pub struct XdpParts {
    pub xsk: XskSocket,
    pub flow: Flow,
    /// The program steering the flow to the socket; detached when the STREAM drops.
    pub attached: Attached,
    /// The kernel's UDP socket of the flow's local end: it holds the port, so no other
    /// program takes it while the test runs.
    pub port: net::UdpSocket,
    /// What the report header says of the socket.
    pub in_force: XdpInForce,
    /// The stream index carried in every datagram header.
    pub stream: u32,
    pub ack_timeout: Duration,
    /// Frames put on the TX ring between two wake-ups of the kernel (bulk).
    pub batch: usize,
}

/// One end of a UDP STREAM over AF_XDP.
pub struct XdpStream {
    p: XdpParts,
    control: net::TcpStream,
    frames: &'static dyn SetupFrames,
    opts: StreamOptions,
    /// MPRTT: what answers each datagram.
    reply: Option<Reply>,
    /// MPRTT with sized replies: the reply written for each datagram.
    response: Vec<u8>,
    /// MPRTT, sending: where replies are read to, one byte longer than the reply so a
    /// longer datagram shows as such, and the request as an echo must repeat it.
    reply_buf: Vec<u8>,
    request: Vec<u8>,
    next_seq: u64,
    ident: u16,
    stats: StreamStats,
    tracker: SeqTracker,
    peer: PeerSending,
    finish_sent: bool,
    clock: EpochClock,
    /// Frames received that were not good datagrams of the flow (bad checksums).
    refused: u64,
    pollfds: [libc::pollfd; 2],
}

fn unacknowledged(stream: u32, seq: u64, len: usize, ack_timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "stream {stream}: datagram {seq} ({len} bytes) was not answered after {} sends \
             {} ms apart",
            MAX_RETRIES + 1,
            ack_timeout.as_millis()
        ),
    )
}

impl XdpStream {
    /// The STREAM over `parts`, whose end of data goes over `control` in `frames`.
    pub fn new(
        parts: XdpParts,
        control: net::TcpStream,
        frames: &'static dyn SetupFrames,
        opts: StreamOptions,
    ) -> io::Result<XdpStream> {
        control.set_nonblocking(false)?;
        control.set_nodelay(true)?;
        control.set_read_timeout(Some(CONTROL_IO_TIMEOUT))?;
        control.set_write_timeout(Some(CONTROL_IO_TIMEOUT))?;
        let largest = parts.flow.headers_len()
            + opts
                .pktsize
                .max(opts.reply.map_or(0, |r| r.len(opts.pktsize)));
        if largest > FRAME_SIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "--xdp: a {largest}-byte frame does not fit the AF_XDP socket's {FRAME_SIZE}-byte frames: lower -l"
                ),
            ));
        }
        let reply = opts.reply;
        let response = match reply {
            Some(Reply::Echo) | None => Vec::new(),
            Some(sized) => vec![0u8; sized.len(opts.pktsize)],
        };
        let pollfds = [parts.xsk.fd(), control.as_raw_fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        Ok(XdpStream {
            reply_buf: Vec::with_capacity(reply.map_or(0, |r| r.len(opts.pktsize)) + 1),
            request: Vec::with_capacity(opts.pktsize),
            tracker: SeqTracker::new(parts.stream),
            p: parts,
            control,
            frames,
            opts,
            reply,
            response,
            next_seq: 0,
            ident: 0,
            stats: StreamStats::default(),
            peer: PeerSending::Running,
            finish_sent: false,
            clock: EpochClock::new(),
            refused: 0,
            pollfds,
        })
    }

    /// Puts one datagram on the TX ring: `head` then `body` as its payload (the header
    /// of a data datagram, then the rest of the caller's bytes). Waits for a free frame
    /// (taking back sent ones) while every one is in flight.
    fn put(&mut self, head: &[u8], body: &[u8], deadline: Deadline) -> io::Result<()> {
        let hdr = self.p.flow.headers_len();
        let len = head.len() + body.len();
        loop {
            if let Some((addr, frame)) = self.p.xsk.tx_frame() {
                frame[hdr..hdr + head.len()].copy_from_slice(head);
                frame[hdr + head.len()..hdr + len].copy_from_slice(body);
                self.ident = self.ident.wrapping_add(1);
                let n = self.p.flow.write_headers(frame, len, self.ident);
                if self.p.xsk.transmit(addr, n as u32) {
                    return Ok(());
                }
                self.p.xsk.unsend(addr);
            }
            // Every frame (or the ring) is taken: have the kernel send, then look again.
            self.p.xsk.kick();
            check_abort(&self.opts.abort)?;
            if deadline.expired() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            std::thread::yield_now();
        }
    }

    /// Sends `buf` as datagram `seq`, stamped as sent at `sent`.
    fn put_datagram(
        &mut self,
        buf: &[u8],
        seq: u64,
        sent: Instant,
        deadline: Deadline,
    ) -> io::Result<()> {
        let mut head = [0u8; HEADER_LEN];
        let n = Header {
            seq,
            stream: self.p.stream,
            sent_ns: self.clock.ns(sent),
        }
        .encode(&mut head[..buf.len().min(HEADER_LEN)]);
        self.put(&head[..n], &buf[n..], deadline)
    }

    /// The next datagram of the flow from the RX ring, copied into `buf` (what fits):
    /// its whole length. `None` if the ring is empty. Frames that are not good datagrams
    /// of the flow are counted and skipped.
    fn take(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            let (addr, len) = self.p.xsk.receive()?;
            let flow = self.p.flow;
            let frame = self.p.xsk.received_frame(addr, len);
            let got = flow.payload(frame).map(|range| {
                let n = range.len().min(buf.len());
                buf[..n].copy_from_slice(&frame[range.start..range.start + n]);
                range.len()
            });
            self.p.xsk.recycle(addr);
            match got {
                Ok(n) => return Some(n),
                Err(Refused::BadChecksum | Refused::Malformed) => self.refused += 1,
                Err(Refused::NotTheFlow) => self.tracker.on_foreign(1),
            }
        }
    }

    /// Waits until the RX ring may hold a frame or the control connection a frame:
    /// sleeps in `poll()` (a slice at most), or with busy polling, has the kernel poll
    /// the queue once and looks at the control connection now and then.
    fn wait(&mut self, deadline: Deadline, spins: &mut u32) -> io::Result<()> {
        check_abort(&self.opts.abort)?;
        let mut ms = match deadline.poll_ms() {
            Ok(ms) => ms.min(POLL_SLICE_MS),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        if let PeerSending::Draining { last_arrival, .. } = self.peer {
            let left = DRAIN_QUIET.saturating_sub(last_arrival.elapsed());
            ms = ms.min(left.as_millis() as i32 + 1);
        }
        let fd = self.p.xsk.fd();
        if self.opts.busy_poll {
            *spins += 1;
            // SAFETY: a zero-length, non-blocking read on the socket, which with
            // SO_PREFER_BUSY_POLL makes the kernel poll the device queue.
            unsafe {
                libc::recvfrom(
                    fd,
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            if *spins % BUSY_SPINS_PER_POLL != 0 {
                return Ok(());
            }
            ms = 0;
        }
        let listen_control = matches!(self.peer, PeerSending::Running);
        self.pollfds[1].fd = if listen_control {
            self.control.as_raw_fd()
        } else {
            -1
        };
        for p in &mut self.pollfds {
            p.revents = 0;
        }
        // SAFETY: `pollfds` is a live array of two pollfds, exclusively borrowed.
        let rc = unsafe { libc::poll(self.pollfds.as_mut_ptr(), 2, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        if listen_control && self.pollfds[1].revents != 0 {
            self.read_control()?;
        }
        Ok(())
    }

    /// Reads the frame the peer sent on the control connection.
    fn read_control(&mut self) -> io::Result<()> {
        let read = self.frames.read(&mut self.control);
        self.peer = PeerSending::told(read, self.finish_sent)?;
        Ok(())
    }

    /// Whether the peer finished and everything that will arrive has.
    fn drained(&mut self) -> bool {
        self.peer.drained(&mut self.tracker)
    }

    /// MPRTT: answers `datagram`, numbered `seq`, and counts the reply as sent.
    fn answer(&mut self, datagram_len: usize, buf: &[u8], seq: u64) -> io::Result<()> {
        let deadline = Deadline::At(Instant::now() + Duration::from_millis(100));
        let sent = match self.reply {
            Some(Reply::Echo) => {
                let n = datagram_len.min(buf.len());
                self.put(&[], &buf[..n], deadline).map(|()| n)
            }
            Some(Reply::Ack | Reply::Sized(_)) | None => {
                let mut response = std::mem::take(&mut self.response);
                ReplyDatagram::encode_sized(seq, &mut response);
                let r = self.put(&[], &response, deadline);
                let n = response.len();
                self.response = response;
                r.map(|()| n)
            }
        };
        match sent {
            Ok(n) => {
                self.p.xsk.kick();
                self.stats.bytes_sent += n as u64;
                Ok(())
            }
            // No frame free in time: the reply is lost as if on the wire.
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `recv()`: one datagram of the flow into `buf`.
    fn receive(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize> {
        let start = Instant::now();
        let deadline = timeout.deadline_from(|| start);
        let mut spins = 0;
        let mut looked = false;
        loop {
            if self.drained() {
                return Ok(0);
            }
            if let Some(len) = self.take(buf) {
                let now = Instant::now();
                if let PeerSending::Draining { last_arrival, .. } = &mut self.peer {
                    *last_arrival = now;
                }
                let n = len.min(buf.len());
                let (kind, seq) = self.tracker.on_datagram(&buf[..n], self.clock.ns(now));
                if n == 0 {
                    continue;
                }
                if self.opts.reply.is_some() && kind != Arrival::Foreign {
                    self.answer(len, buf, seq)?;
                }
                self.stats.recv_latency.record(span_ns(start, now));
                self.stats.bytes_received += n as u64;
                self.stats.mark_recv(now);
                return Ok(n);
            }
            if deadline == Deadline::Now {
                // One look at the control connection and the ring, then give up.
                if std::mem::replace(&mut looked, true) {
                    if self.drained() {
                        return Ok(0);
                    }
                    return Err(io::ErrorKind::WouldBlock.into());
                }
            }
            self.wait(deadline, &mut spins)?;
        }
    }

    /// MPRTT, after datagram `seq` (`buf`, first sent at `start`) left: waits for its
    /// reply, sending it again each time the ACK time-out passes without one.
    fn round_trip(&mut self, buf: &[u8], seq: u64, deadline: Deadline) -> io::Result<()> {
        let mut reply = std::mem::take(&mut self.reply_buf);
        reply.resize(self.reply.map_or(0, |r| r.len(buf.len())) + 1, 0);
        let mut request = std::mem::take(&mut self.request);
        request.clear();
        request.extend_from_slice(buf);
        let result = self.await_reply(buf, seq, deadline, &mut reply, &mut request);
        self.reply_buf = reply;
        self.request = request;
        result
    }

    /// [`XdpStream::round_trip`] with its buffers: `request` holds the request as sent.
    fn await_reply(
        &mut self,
        buf: &[u8],
        seq: u64,
        deadline: Deadline,
        reply: &mut [u8],
        request: &mut [u8],
    ) -> io::Result<()> {
        let mut retries = 0;
        let mut spins = 0;
        let mut until = Instant::now() + self.p.ack_timeout;
        // The request as sent, its header aside, which an echo must repeat.
        Header {
            seq,
            stream: self.p.stream,
            sent_ns: 0,
        }
        .encode(&mut request[..buf.len().min(HEADER_LEN)]);
        loop {
            while let Some(len) = self.take(reply) {
                self.stats.bytes_received += len as u64;
                let held = &reply[..len.min(reply.len())];
                if self.reply.is_some_and(|kind| {
                    ReplyDatagram::answers(kind, held, len, request, seq, self.p.stream)
                }) {
                    return Ok(());
                }
            }
            if Instant::now() >= until {
                if retries == MAX_RETRIES {
                    return Err(unacknowledged(
                        self.p.stream,
                        seq,
                        buf.len(),
                        self.p.ack_timeout,
                    ));
                }
                retries += 1;
                self.stats.retries += 1;
                self.put_datagram(buf, seq, Instant::now(), deadline)?;
                self.p.xsk.kick();
                until = Instant::now() + self.p.ack_timeout;
            }
            let left = Deadline::At(until.min(match deadline {
                Deadline::At(at) => at,
                _ => until,
            }));
            if deadline.expired() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            match self.wait(left, &mut spins) {
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                other => other?,
            }
        }
    }

    /// Waits until the kernel has sent every frame on the TX ring.
    fn flush(&mut self, deadline: Deadline) -> io::Result<()> {
        loop {
            self.p.xsk.kick();
            self.p.xsk.reclaim();
            if self.p.xsk.in_flight() == 0 {
                return Ok(());
            }
            check_abort(&self.opts.abort)?;
            if deadline.expired() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "--xdp: the kernel did not send every frame in time",
                ));
            }
            // Nudge the kernel even where it did not ask to be woken.
            self.p.xsk.force_kick();
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Stream for XdpStream {
    fn nsockets(&self) -> usize {
        1
    }

    fn local_addr(&self) -> String {
        self.p.flow.local.to_string()
    }

    fn peer_addr(&self) -> String {
        self.p.flow.remote.to_string()
    }

    fn send(&mut self, buf: &[u8], timeout: Timeout) -> io::Result<usize> {
        check_abort(&self.opts.abort)?;
        let deadline = timeout.deadline();
        let seq = self.next_seq;
        self.next_seq += 1;
        let start = Instant::now();
        self.put_datagram(buf, seq, start, deadline)?;
        if self.opts.reply.is_some() {
            self.p.xsk.kick();
            self.round_trip(buf, seq, deadline)?;
        } else if self.p.xsk.unkicked() as usize >= self.p.batch {
            self.p.xsk.kick();
        }
        self.stats.send_latency.record_since(start);
        self.stats.bytes_sent += buf.len() as u64;
        self.stats.datagrams.sent += 1;
        Ok(buf.len())
    }

    /// One socket, one thread: a submitted packet is sent at once.
    fn send_submit(&mut self, buf: Bytes, timeout: Timeout) -> io::Result<()> {
        self.send(&buf, timeout).map(drop)
    }

    fn sender_drain(&mut self, _timeout: Timeout) -> io::Result<()> {
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8], timeout: Timeout) -> io::Result<usize> {
        self.receive(buf, timeout)
    }

    fn last_recv_end(&self) -> Option<Instant> {
        self.stats.last_recv
    }

    fn ack_partial(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn sent_on_handover(&self) -> bool {
        true
    }

    /// The frames on the TX ring leave within moments, whatever the caller's time-out.
    fn finish_sending(&mut self, _timeout: Timeout) -> io::Result<()> {
        let flushed = self.flush(Deadline::At(Instant::now() + CONTROL_IO_TIMEOUT));
        if self.finish_sent {
            return flushed;
        }
        self.finish_sent = true;
        let told = self
            .frames
            .write(
                &mut self.control,
                &SetupMessage::UdpFinished {
                    datagrams: self.stats.datagrams.sent,
                    bytes: self.stats.bytes_sent,
                },
            )
            .map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, e.to_string()));
        flushed.and(told)
    }

    fn stats(&self) -> StreamStats {
        let mut s = self.stats.clone();
        s.datagrams.merge(&self.tracker.counts());
        s
    }

    fn facts(&self) -> SocketFacts {
        SocketFacts {
            in_force: TransportInForce {
                xdp: XdpInForce {
                    xdp_bad_checksums: Some(self.refused),
                    ..self.p.in_force.clone()
                },
                ..TransportInForce::default()
            },
            ..SocketFacts::default()
        }
    }
}

impl std::os::fd::AsRawFd for XdpStream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.p.xsk.fd()
    }
}
