//! The STREAM shape shared by the RDMA transports (libfabric and verbs): a STREAM is a
//! set of endpoints (one per socket, `-n`), each with its own registered rings,
//! completion queue and peer; a sender thread per endpoint; receives round-robin over
//! the endpoints until every one has seen the peer's FIN.
//!
//! A transport implements [`RingEndpoint`] for one endpoint; [`EndpointStream`] does
//! the rest. Waiting for completions goes through [`Backoff`]: spin, then yield, then
//! nap, checking the TCP connection the two ends swapped their details over, which
//! stays open for the run, so a vanished peer ends a wait instead of stalling it.

use super::ring::Packet;
use crate::stats::StreamStats;
use crate::stream::sender::{LazySenders, PacketSink, Senders};
use crate::stream::{Deadline, Timeout};
use crate::transport::stream::{Stream, StreamOptions};
use bytes::Bytes;
use std::io;
use std::net::TcpStream;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a wait naps without progress before it checks that the peer is still there.
const LIVENESS_IDLE: Duration = Duration::from_secs(1);
/// How often it checks then.
const LIVENESS_EVERY: Duration = Duration::from_millis(100);
/// Idle steps spent spinning, then yielding, before a wait naps.
const SPINS: u32 = 200;
const YIELDS: u32 = 20_000;
/// One nap of an idle wait.
const NAP: Duration = Duration::from_micros(50);
/// While spinning and yielding, a wait reads the clock for its deadline only every so
/// many idle steps: where reading the clock is a system call (a guest whose clock
/// source is not the TSC), a read per step would slow how soon a completion is seen.
const DEADLINE_EVERY: u32 = 32;

/// Calls made while waiting for a completion: spin first, then yield, then nap, so
/// an idle wait does not hog a CPU. It reads the clock only once it naps: most waits
/// end within a few polls, and one is begun for every message.
pub struct Backoff {
    spins: u32,
    /// When the first nap began, and when the peer was last checked.
    napping_since: Option<Instant>,
    last_check: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new()
    }
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff {
            spins: 0,
            napping_since: None,
            last_check: None,
        }
    }

    /// One idle step of a wait. After [`LIVENESS_IDLE`] of naps, `watch` (the
    /// TCP connection the ends swapped their details over, kept open for the run) is
    /// checked: end of file means the peer stopped, and the wait fails with
    /// `ConnectionAborted` rather than waiting for completions that will never come.
    #[inline]
    pub fn wait(
        &mut self,
        deadline: Deadline,
        abort: &AtomicBool,
        watch: Option<&TcpStream>,
    ) -> io::Result<()> {
        // The first steps only spin: they stay inline in the polling loop, so that a
        // completion that lands while spinning is seen a few instructions later.
        if self.spins % DEADLINE_EVERY != 0 && self.spins < SPINS {
            self.spins += 1;
            return crate::stream::check_abort(abort);
        }
        self.idle_step(deadline, abort, watch)
    }

    /// The rest of [`Backoff::wait`]: the deadline, then yielding, then napping.
    #[inline(never)]
    fn idle_step(
        &mut self,
        deadline: Deadline,
        abort: &AtomicBool,
        watch: Option<&TcpStream>,
    ) -> io::Result<()> {
        crate::stream::check_abort(abort)?;
        let clock_due = self.spins % DEADLINE_EVERY == 0 || self.spins > YIELDS;
        match deadline {
            Deadline::Now => return Err(io::ErrorKind::WouldBlock.into()),
            Deadline::At(t) if clock_due && Instant::now() >= t => {
                return Err(io::ErrorKind::TimedOut.into())
            }
            _ => {}
        }
        self.spins = self.spins.saturating_add(1);
        if self.spins > YIELDS {
            std::thread::sleep(NAP);
            let now = Instant::now();
            let since = *self.napping_since.get_or_insert(now);
            if let Some(sock) = watch {
                let checked_long_ago = self
                    .last_check
                    .map_or(true, |t| now.duration_since(t) >= LIVENESS_EVERY);
                if now.duration_since(since) >= LIVENESS_IDLE && checked_long_ago {
                    self.last_check = Some(now);
                    peer_alive(sock)?;
                }
            }
        } else if self.spins > SPINS {
            std::thread::yield_now();
        }
        Ok(())
    }
}

/// Fails with `ConnectionAborted` once the peer closed `sock` (it stopped or failed).
pub fn peer_alive(sock: &TcpStream) -> io::Result<()> {
    let mut byte = [0u8; 1];
    match sock.peek(&mut byte) {
        Ok(0) => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the peer closed its connection: it stopped or failed",
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("the peer's connection failed: {e}"),
        )),
    }
}

/// One connected endpoint of an RDMA STREAM.
pub trait RingEndpoint: Send + 'static {
    /// Sends one packet (as many messages as slots it fills); with MPRTT waits for the
    /// ACK of each. Counts bytes and per-operation latency into `stats`. Returns when
    /// the last reply arrived, as read for its round trip (`None` without replies).
    fn send_packet(
        &mut self,
        packet: Packet<'_>,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<Option<Instant>>;
    /// Waits until every posted send completed, then tells the peer the stream ended.
    fn finish(&mut self, deadline: Deadline, stats: &mut StreamStats) -> io::Result<()>;
    /// Whether the peer ended the stream and every message it sent was consumed.
    fn at_eof(&self) -> bool;
    /// Takes received data, at most `buf.len()` bytes, if there is some, without
    /// waiting; with MPRTT answers each new message with an ACK. The data is copied
    /// into `buf` if `copy_out`; a caller that only counts bytes leaves it in the ring.
    fn try_recv(
        &mut self,
        buf: &mut [u8],
        copy_out: bool,
        stats: &mut StreamStats,
    ) -> io::Result<Option<usize>>;
    /// This endpoint, readable (for reports).
    fn local_addr(&self) -> String;
    /// The peer's endpoint, readable.
    fn peer_addr(&self) -> String;
    /// The TCP connection to the peer kept open for the run, if any.
    fn watch(&self) -> Option<Arc<TcpStream>>;
}

/// An endpoint shared by the receiving path and a sender thread.
pub struct SharedEndpoint<E>(Arc<Mutex<E>>);

impl<E> Clone for SharedEndpoint<E> {
    fn clone(&self) -> Self {
        SharedEndpoint(self.0.clone())
    }
}

impl<E: RingEndpoint> SharedEndpoint<E> {
    fn lock(&self) -> io::Result<MutexGuard<'_, E>> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("endpoint poisoned by a panicked thread"))
    }
}

impl<E: RingEndpoint> PacketSink for SharedEndpoint<E> {
    fn send_packet(
        &mut self,
        buf: &[u8],
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        self.lock()?
            .send_packet(Packet::borrowed(buf), deadline, stats)
            .map(drop)
    }

    fn send_shared(
        &mut self,
        buf: &Bytes,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        self.lock()?
            .send_packet(Packet::shared(buf), deadline, stats)
            .map(drop)
    }
}

/// A STREAM's endpoints: owned while only the STREAM's own thread uses them, and
/// shared (each behind a lock) once sender threads start, which send on them too. A
/// synchronous round trip takes no lock, so it pays no atomic operations for one.
enum Endpoints<E> {
    Owned(Vec<E>),
    Shared(Vec<SharedEndpoint<E>>),
}

impl<E: RingEndpoint> Endpoints<E> {
    fn len(&self) -> usize {
        match self {
            Endpoints::Owned(v) => v.len(),
            Endpoints::Shared(v) => v.len(),
        }
    }

    /// Runs `f` on endpoint `k`, locked if it is shared.
    fn with<R>(&mut self, k: usize, f: impl FnOnce(&mut E) -> io::Result<R>) -> io::Result<R> {
        match self {
            Endpoints::Owned(v) => f(&mut v[k]),
            Endpoints::Shared(v) => f(&mut *v[k].lock()?),
        }
    }

    /// Handles to the endpoints, which stay shared from now on.
    fn share(&mut self) -> Vec<SharedEndpoint<E>> {
        let shared: Vec<SharedEndpoint<E>> =
            match std::mem::replace(self, Endpoints::Owned(Vec::new())) {
                Endpoints::Owned(v) => v
                    .into_iter()
                    .map(|e| SharedEndpoint(Arc::new(Mutex::new(e))))
                    .collect(),
                Endpoints::Shared(v) => v,
            };
        *self = Endpoints::Shared(shared.clone());
        shared
    }
}

/// One end of an RDMA STREAM over endpoints of type `E`.
pub struct EndpointStream<E: RingEndpoint> {
    endpoints: Endpoints<E>,
    opts: StreamOptions,
    senders: LazySenders,
    stats: StreamStats,
    cursor: usize,
    local: String,
    peer: String,
    watch: Option<Arc<TcpStream>>,
    /// When the last synchronous send's last reply arrived ([`Stream::last_send_end`]).
    last_send_end: Option<Instant>,
}

impl<E: RingEndpoint> EndpointStream<E> {
    /// Sends `packet` synchronously on endpoint 0.
    fn send_now(&mut self, packet: Packet<'_>, timeout: Timeout) -> io::Result<usize> {
        self.opts.check_abort()?;
        let n = packet.len();
        // A failed send leaves no end behind.
        self.last_send_end = None;
        let stats = &mut self.stats;
        self.last_send_end = self
            .endpoints
            .with(0, |ep| ep.send_packet(packet, timeout.deadline(), stats))?;
        Ok(n)
    }

    /// Receives from whichever endpoint has data, copying it into `buf` if `copy_out`.
    fn receive(&mut self, buf: &mut [u8], timeout: Timeout, copy_out: bool) -> io::Result<usize> {
        let start = Instant::now();
        let deadline = timeout.deadline_from(|| start);
        let n_eps = self.endpoints.len();
        let mut backoff = Backoff::new();
        loop {
            let mut open = 0;
            for step in 0..n_eps {
                let k = (self.cursor + step) % n_eps;
                let stats = &mut self.stats;
                let got = self.endpoints.with(k, |ep| {
                    if ep.at_eof() {
                        return Ok(None);
                    }
                    open += 1;
                    ep.try_recv(buf, copy_out, stats)
                })?;
                if let Some(n) = got {
                    self.cursor = k;
                    let now = Instant::now();
                    self.stats
                        .recv_latency
                        .record(crate::stats::span_ns(start, now));
                    self.stats.bytes_received += n as u64;
                    self.stats.mark_recv(now);
                    return Ok(n);
                }
            }
            if open == 0 {
                return Ok(0);
            }
            backoff.wait(deadline, &self.opts.abort, self.watch.as_deref())?;
        }
    }

    /// Builds a STREAM from connected endpoints (endpoint 0 first) and starts one sender
    /// thread per endpoint.
    pub fn from_endpoints(endpoints: Vec<E>, opts: StreamOptions) -> io::Result<Self> {
        let (local, peer, watch) = match endpoints.first() {
            Some(e) => (e.local_addr(), e.peer_addr(), e.watch()),
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a STREAM needs an endpoint",
                ))
            }
        };
        Ok(EndpointStream {
            endpoints: Endpoints::Owned(endpoints),
            opts,
            senders: LazySenders::NotStarted,
            stats: StreamStats::default(),
            cursor: 0,
            local,
            peer,
            watch,
            last_send_end: None,
        })
    }
}

impl<E: RingEndpoint> Stream for EndpointStream<E> {
    fn nsockets(&self) -> usize {
        self.endpoints.len()
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }

    fn peer_addr(&self) -> String {
        self.peer.clone()
    }

    fn send(&mut self, buf: &[u8], timeout: Timeout) -> io::Result<usize> {
        self.send_now(Packet::borrowed(buf), timeout)
    }

    fn send_shared(&mut self, buf: &Bytes, timeout: Timeout) -> io::Result<usize> {
        self.send_now(Packet::shared(buf), timeout)
    }

    fn send_submit(&mut self, buf: Bytes, timeout: Timeout) -> io::Result<()> {
        let (endpoints, opts) = (&mut self.endpoints, &self.opts);
        self.senders
            .get_or_start(|| Senders::start(opts.queue, endpoints.share(), opts.abort.clone()))?
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

    fn last_send_end(&self) -> Option<Instant> {
        self.last_send_end
    }

    fn last_recv_end(&self) -> Option<Instant> {
        self.stats.last_recv
    }

    fn ack_partial(&mut self) -> io::Result<()> {
        // Every message, short or not, is acknowledged when it arrives.
        Ok(())
    }

    fn finish_sending(&mut self, timeout: Timeout) -> io::Result<()> {
        let mut result = self.senders.finish(timeout, &mut self.stats);
        let deadline = timeout.deadline();
        for k in 0..self.endpoints.len() {
            let stats = &mut self.stats;
            let finished = self.endpoints.with(k, |ep| ep.finish(deadline, stats));
            if result.is_ok() {
                result = finished;
            }
        }
        result
    }

    fn stats(&self) -> StreamStats {
        self.senders.with_figures(&self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Waits (as a completion poll would, with nothing arriving) until `backoff` fails
    /// or `limit` passes; returns the error and how long it took.
    fn idle_wait(watch: &TcpStream, limit: Duration) -> (Option<io::Error>, Duration) {
        let abort = AtomicBool::new(false);
        let mut backoff = Backoff::new();
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Err(e) = backoff.wait(Deadline::Never, &abort, Some(watch)) {
                return (Some(e), start.elapsed());
            }
        }
        (None, start.elapsed())
    }

    #[test]
    fn an_idle_wait_notices_a_vanished_peer_after_a_second_of_naps_and_not_before() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let watch = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (peer, _) = listener.accept().expect("accept");
        watch.set_nonblocking(true).expect("nonblocking");
        // A peer that is still there: no failure.
        let (e, _) = idle_wait(&watch, Duration::from_millis(1500));
        assert!(e.is_none(), "{e:?}");
        drop(peer);
        let (e, took) = idle_wait(&watch, Duration::from_secs(10));
        let e = e.expect("the vanished peer is noticed");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted, "{e}");
        assert!(took >= LIVENESS_IDLE, "checked after {took:?}");
    }

    #[test]
    fn a_wait_ends_at_its_deadline_though_it_reads_the_clock_only_now_and_then() {
        let abort = AtomicBool::new(false);
        let mut backoff = Backoff::new();
        let deadline = Deadline::At(Instant::now() + Duration::from_millis(20));
        let start = Instant::now();
        let e = loop {
            if let Err(e) = backoff.wait(deadline, &abort, None) {
                break e;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "never ended");
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(20));
    }
}
