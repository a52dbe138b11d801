//! The asynchronous sending half of a STREAM: a queue of send requests and one sender
//! thread per socket that drains it.
//!
//! Two queues, as in the original design:
//! - the mutex queue holds up to [`MUTEX_QUEUE_CAPACITY`] requests and may feed many
//!   sender threads;
//! - the lock-free queue is a single-producer single-consumer ring (the `rtrb` crate),
//!   so it feeds exactly one sender thread.
//!
//! A transport supplies a [`PacketSink`] per socket; everything else here is shared by
//! all transports. Each sender thread records into its own [`StreamStats`], returned
//! when the thread stops, so the hot path takes no lock for statistics. While threads
//! run, [`Senders::stats`] asks them for a snapshot (a generation counter each thread
//! reads with one relaxed load per packet) and each publishes a copy into its own slot;
//! byte counts are also kept in per-thread atomics (one relaxed store per packet), so
//! they are current even when a thread busy in a long send answers late.

use super::{check_abort, Deadline, Timeout};
use crate::stats::{LatencyStats, StreamStats};
use bytes::Bytes;
use serde::Serialize;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The queue that hands each stream's packets to its sender threads (`-q`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "queue")]
#[serde(rename_all = "lowercase")]
pub enum QueueKind {
    /// A mutex-protected queue holding up to 10000 requests (`-q 1`, the default).
    Mutex,
    /// A lock-free single-producer single-consumer queue (`-q 0`); forces nsockets to 1.
    LockFree,
}

impl QueueKind {
    /// Maps the original `-q` values: 1 = mutex queue, 0 = lock-free queue.
    pub fn from_qtype(q: u8) -> Option<Self> {
        match q {
            1 => Some(QueueKind::Mutex),
            0 => Some(QueueKind::LockFree),
            _ => None,
        }
    }
}

/// Requests the mutex queue holds before `send_submit()` blocks.
pub const MUTEX_QUEUE_CAPACITY: usize = 10_000;
/// Slots of the lock-free ring.
pub const LOCKFREE_QUEUE_CAPACITY: usize = 10_000;
/// Longest a waiting thread sleeps before it looks at the abort flag again.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// Longest [`Senders::stats`] waits for running threads' snapshots; a thread stuck in
/// one long send is represented by its previous snapshot.
const SNAPSHOT_WAIT: Duration = Duration::from_millis(100);

/// Sends whole packets on one socket; implemented by each transport.
pub trait PacketSink: Send + 'static {
    /// Sends all of `buf` (with MPRTT: and waits for its ACK), recording the send latency
    /// and byte counts into `stats`.
    fn send_packet(
        &mut self,
        buf: &[u8],
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()>;

    /// [`PacketSink::send_packet`] of queued, immutable bytes, which a transport that
    /// sends from memory of its own may keep there and send again without a copy.
    fn send_shared(
        &mut self,
        buf: &Bytes,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        self.send_packet(buf, deadline, stats)
    }
}

/// State shared by the submitting thread and the sender threads.
struct Shared {
    abort: Arc<AtomicBool>,
    /// Set once a sender thread failed; `error` holds why.
    failed: AtomicBool,
    error: Mutex<Option<(io::ErrorKind, String)>>,
    /// Requests completed by sender threads (lock-free queue only).
    completed: AtomicU64,
    /// Set when the queue is closed and sender threads should stop once it is empty.
    closed: AtomicBool,
    /// Set when the `Senders` is dropped: stop without sending what is queued.
    cancelled: AtomicBool,
    /// Snapshot generation last asked for by [`Senders::stats`].
    snapshot_wanted: AtomicU64,
    /// Each sender thread's latest snapshot and the generation it answers.
    snapshots: Vec<Mutex<(u64, StreamStats)>>,
    /// Each sender thread's byte counts as of its last packet.
    live: Vec<LiveBytes>,
}

/// A sender thread's byte counts, on a cache line of their own.
#[repr(align(64))]
#[derive(Default)]
struct LiveBytes {
    sent: AtomicU64,
    received: AtomicU64,
}

impl Shared {
    fn fail(&self, err: &io::Error) {
        if let Ok(mut slot) = self.error.lock() {
            if slot.is_none() {
                *slot = Some((err.kind(), err.to_string()));
            }
        }
        self.failed.store(true, Ordering::Release);
    }

    /// Whether sender threads should stop now, queued requests or not.
    fn stopping(&self) -> bool {
        self.abort.load(Ordering::Relaxed) || self.cancelled.load(Ordering::Relaxed)
    }

    /// Notes thread `i`'s byte counts after a packet.
    #[inline]
    fn count(&self, i: usize, stats: &StreamStats) {
        if let Some(live) = self.live.get(i) {
            live.sent.store(stats.bytes_sent, Ordering::Relaxed);
            live.received.store(stats.bytes_received, Ordering::Relaxed);
        }
    }

    /// Publishes `stats` into thread `i`'s slot if a snapshot newer than `*answered`
    /// was asked for. Costs one relaxed load when none was.
    #[inline]
    fn maybe_publish(&self, i: usize, answered: &mut u64, stats: &StreamStats) {
        let wanted = self.snapshot_wanted.load(Ordering::Relaxed);
        if wanted == *answered {
            return;
        }
        *answered = wanted;
        if let Some(Ok(mut slot)) = self.snapshots.get(i).map(Mutex::lock) {
            // An idle thread's figures are unchanged: skip copying its histograms.
            let old = &slot.1;
            let unchanged = old.bytes_sent == stats.bytes_sent
                && old.bytes_received == stats.bytes_received
                && old.retries == stats.retries
                && old.send_latency.count() == stats.send_latency.count()
                && old.recv_latency.count() == stats.recv_latency.count()
                && old.submit_latency.count() == stats.submit_latency.count();
            if !unchanged {
                slot.1.clone_from(stats);
            }
            slot.0 = wanted;
        }
    }

    fn check(&self) -> io::Result<()> {
        check_abort(&self.abort)?;
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let (kind, msg) = self
            .error
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .unwrap_or((io::ErrorKind::Other, "sender thread failed".into()));
        Err(io::Error::new(kind, format!("sender thread: {msg}")))
    }
}

struct MutexState {
    items: VecDeque<Bytes>,
    /// Requests queued or being sent.
    in_flight: usize,
    consumers_waiting: usize,
    producer_waiting: bool,
    drainer_waiting: bool,
}

/// The mutex queue. Condition variables are signalled only when someone waits, so an
/// uncontended submit costs one lock and no system call.
struct MutexQueue {
    state: Mutex<MutexState>,
    not_empty: Condvar,
    not_full: Condvar,
    drained: Condvar,
}

impl MutexQueue {
    fn lock(&self) -> io::Result<MutexGuard<'_, MutexState>> {
        self.state
            .lock()
            .map_err(|_| io::Error::other("send queue poisoned by a panicked sender"))
    }
}

enum Producer {
    Mutex(Arc<MutexQueue>),
    LockFree {
        ring: rtrb::Producer<Bytes>,
        submitted: u64,
    },
}

/// The queue and the sender threads of one STREAM.
pub struct Senders {
    producer: Producer,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<StreamStats>>,
    /// `send_submit()` latency, recorded by the submitting thread.
    submit_latency: LatencyStats,
    /// Figures of sender threads that have stopped.
    finished: StreamStats,
}

impl Senders {
    /// Starts one sender thread per sink. The lock-free queue takes exactly one sink.
    pub fn start<S: PacketSink>(
        queue: QueueKind,
        sinks: Vec<S>,
        abort: Arc<AtomicBool>,
    ) -> io::Result<Senders> {
        Senders::start_pinned(queue, sinks, abort, None)
    }

    /// As [`Senders::start`], with every sender thread pinned to `cpu` (if given).
    pub fn start_pinned<S: PacketSink>(
        queue: QueueKind,
        sinks: Vec<S>,
        abort: Arc<AtomicBool>,
        cpu: Option<usize>,
    ) -> io::Result<Senders> {
        let shared = Arc::new(Shared {
            abort,
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            completed: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            snapshot_wanted: AtomicU64::new(0),
            snapshots: (0..sinks.len())
                .map(|_| Mutex::new((0, StreamStats::default())))
                .collect(),
            live: (0..sinks.len()).map(|_| LiveBytes::default()).collect(),
        });
        let mut threads = Vec::with_capacity(sinks.len());
        let producer = match queue {
            QueueKind::Mutex => {
                let q = Arc::new(MutexQueue {
                    state: Mutex::new(MutexState {
                        items: VecDeque::with_capacity(MUTEX_QUEUE_CAPACITY),
                        in_flight: 0,
                        consumers_waiting: 0,
                        producer_waiting: false,
                        drainer_waiting: false,
                    }),
                    not_empty: Condvar::new(),
                    not_full: Condvar::new(),
                    drained: Condvar::new(),
                });
                for (i, sink) in sinks.into_iter().enumerate() {
                    let (q, shared) = (q.clone(), shared.clone());
                    threads.push(spawn(i, cpu, &shared, move |shared| {
                        mutex_consumer(i, sink, &q, shared)
                    })?);
                }
                Producer::Mutex(q)
            }
            QueueKind::LockFree => {
                if sinks.len() != 1 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the lock-free queue has exactly one consumer: use one socket",
                    ));
                }
                let (ring, consumer) = rtrb::RingBuffer::new(LOCKFREE_QUEUE_CAPACITY);
                if let Some(sink) = sinks.into_iter().next() {
                    threads.push(spawn(0, cpu, &shared, move |shared| {
                        lockfree_consumer(0, sink, consumer, shared)
                    })?);
                }
                Producer::LockFree { ring, submitted: 0 }
            }
        };
        Ok(Senders {
            producer,
            shared,
            threads,
            submit_latency: LatencyStats::preallocated(),
            finished: StreamStats::default(),
        })
    }

    /// Queues `buf`, waiting for space until `timeout`; records the submit latency.
    pub fn submit(&mut self, buf: Bytes, timeout: Timeout) -> io::Result<()> {
        let start = Instant::now();
        self.shared.check()?;
        if self.threads.is_empty() {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "senders stopped"));
        }
        let deadline = timeout.deadline();
        match &mut self.producer {
            Producer::Mutex(q) => {
                let mut st = q.lock()?;
                while st.items.len() >= MUTEX_QUEUE_CAPACITY {
                    self.shared.check()?;
                    let wait = wait_slice(deadline)?;
                    st.producer_waiting = true;
                    st = q
                        .not_full
                        .wait_timeout(st, wait)
                        .map_err(|_| io::Error::other("send queue poisoned"))?
                        .0;
                }
                st.producer_waiting = false;
                st.items.push_back(buf);
                st.in_flight += 1;
                let wake = st.consumers_waiting > 0;
                drop(st);
                if wake {
                    q.not_empty.notify_one();
                }
            }
            Producer::LockFree { ring, submitted } => {
                let mut item = buf;
                let mut backoff = Backoff::default();
                loop {
                    match ring.push(item) {
                        Ok(()) => break,
                        Err(rtrb::PushError::Full(back)) => {
                            item = back;
                            self.shared.check()?;
                            if deadline.expired() {
                                return Err(timeout_error(deadline));
                            }
                            backoff.snooze();
                        }
                    }
                }
                *submitted += 1;
            }
        }
        self.submit_latency.record_since(start);
        Ok(())
    }

    /// Waits until every queued request was sent, or a sender failed.
    pub fn drain(&mut self, timeout: Timeout) -> io::Result<()> {
        let deadline = timeout.deadline();
        match &self.producer {
            Producer::Mutex(q) => {
                let mut st = q.lock()?;
                while st.in_flight > 0 {
                    self.shared.check()?;
                    let wait = wait_slice(deadline)?;
                    st.drainer_waiting = true;
                    st = q
                        .drained
                        .wait_timeout(st, wait)
                        .map_err(|_| io::Error::other("send queue poisoned"))?
                        .0;
                }
                st.drainer_waiting = false;
            }
            Producer::LockFree { submitted, .. } => {
                let mut backoff = Backoff::default();
                while self.shared.completed.load(Ordering::Acquire) < *submitted {
                    self.shared.check()?;
                    if deadline.expired() {
                        return Err(timeout_error(deadline));
                    }
                    backoff.snooze();
                }
            }
        }
        self.shared.check()
    }

    /// Drains, stops the sender threads and keeps their figures.
    pub fn stop(&mut self, timeout: Timeout) -> io::Result<()> {
        let drained = self.drain(timeout);
        // Set `closed` under the queue's lock: a consumer checks it and starts waiting
        // under that lock, so the notification below cannot fall between the two (which
        // cost a whole wait slice).
        let guard = match &self.producer {
            Producer::Mutex(q) => Some(q.lock()?),
            Producer::LockFree { .. } => None,
        };
        self.shared.closed.store(true, Ordering::Release);
        drop(guard);
        if let Producer::Mutex(q) = &self.producer {
            q.not_empty.notify_all();
        }
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(stats) => self.finished.merge(&stats),
                Err(_) => return Err(io::Error::other("a sender thread panicked")),
            }
        }
        drained
    }

    /// Figures of the sender threads plus the submit latency: exact once they stopped;
    /// while they run, as of a snapshot each takes on request (waiting at most
    /// [`SNAPSHOT_WAIT`] for them).
    pub fn stats(&self) -> StreamStats {
        let mut s = self.finished.clone();
        s.submit_latency.merge(&self.submit_latency);
        if !self.threads.is_empty() {
            let wanted = self.shared.snapshot_wanted.fetch_add(1, Ordering::Relaxed) + 1;
            if let Producer::Mutex(q) = &self.producer {
                // Notify under the lock: a consumer about to wait has either seen the
                // new generation or is already waiting and gets the wake-up.
                let _guard = q.lock();
                q.not_empty.notify_all();
            }
            let give_up = Instant::now() + SNAPSHOT_WAIT;
            let answered =
                |slot: &Mutex<(u64, StreamStats)>| slot.lock().map_or(true, |g| g.0 >= wanted);
            while !self.shared.snapshots.iter().all(answered)
                && Instant::now() < give_up
                && !self.threads.iter().all(JoinHandle::is_finished)
            {
                std::thread::sleep(Duration::from_micros(200));
            }
            for (slot, live) in self.shared.snapshots.iter().zip(&self.shared.live) {
                if let Ok(g) = slot.lock() {
                    s.merge(&g.1);
                    // A late snapshot's byte counts are brought up to date.
                    let sent = live.sent.load(Ordering::Relaxed);
                    let received = live.received.load(Ordering::Relaxed);
                    s.bytes_sent += sent.saturating_sub(g.1.bytes_sent);
                    s.bytes_received += received.saturating_sub(g.1.bytes_received);
                }
            }
        }
        s
    }
}

/// A STREAM's sender threads, started by its first `send_submit()`: a STREAM that only
/// receives (the server's, in most tests) never holds their threads or their queue.
pub(crate) enum LazySenders {
    NotStarted,
    Running(Box<Senders>),
    Finished,
}

impl LazySenders {
    /// The running sender threads, started with `start` if none were.
    pub fn get_or_start(
        &mut self,
        start: impl FnOnce() -> io::Result<Senders>,
    ) -> io::Result<&mut Senders> {
        if let LazySenders::NotStarted = self {
            *self = LazySenders::Running(Box::new(start()?));
        }
        match self {
            LazySenders::Running(s) => Ok(s),
            _ => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "sending finished",
            )),
        }
    }

    /// `sender_drain()`: nothing is pending where nothing was submitted or sending
    /// finished.
    pub fn drain(&mut self, timeout: Timeout) -> io::Result<()> {
        match self {
            LazySenders::Running(s) => s.drain(timeout),
            LazySenders::NotStarted | LazySenders::Finished => Ok(()),
        }
    }

    /// Stops the threads once what is queued is sent, and adds their figures to `stats`.
    pub fn finish(&mut self, timeout: Timeout, stats: &mut StreamStats) -> io::Result<()> {
        match std::mem::replace(self, LazySenders::Finished) {
            LazySenders::Running(mut s) => {
                let stopped = s.stop(timeout);
                stats.merge(&s.stats());
                stopped
            }
            LazySenders::NotStarted | LazySenders::Finished => Ok(()),
        }
    }

    /// `stats` with the running threads' figures added.
    pub fn with_figures(&self, stats: &StreamStats) -> StreamStats {
        let mut s = stats.clone();
        if let LazySenders::Running(senders) = self {
            s.merge(&senders.stats());
        }
        s
    }
}

impl Drop for Senders {
    fn drop(&mut self) {
        // Stop the threads without waiting for queued requests to be sent.
        self.shared.cancelled.store(true, Ordering::Relaxed);
        self.shared.closed.store(true, Ordering::Release);
        if let Producer::Mutex(q) = &self.producer {
            q.not_empty.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts sender thread `i`, pinned to `cpu` if given; a thread that cannot be pinned
/// records the failure (reported by the next submit or drain) and stops.
fn spawn<F>(
    i: usize,
    cpu: Option<usize>,
    shared: &Arc<Shared>,
    f: F,
) -> io::Result<JoinHandle<StreamStats>>
where
    F: FnOnce(&Shared) -> StreamStats + Send + 'static,
{
    let shared = shared.clone();
    std::thread::Builder::new()
        .name(format!("fperf-sender-{i}"))
        .spawn(move || match super::affinity::pin_current_thread(cpu) {
            Ok(()) => f(&shared),
            Err(e) => {
                shared.fail(&e);
                StreamStats::default()
            }
        })
}

fn wait_slice(deadline: Deadline) -> io::Result<Duration> {
    match deadline {
        Deadline::Now => Err(io::ErrorKind::WouldBlock.into()),
        Deadline::Never => Ok(WAIT_SLICE),
        Deadline::At(t) => {
            let left = t.saturating_duration_since(Instant::now());
            if left.is_zero() {
                Err(io::ErrorKind::TimedOut.into())
            } else {
                Ok(left.min(WAIT_SLICE))
            }
        }
    }
}

fn timeout_error(deadline: Deadline) -> io::Error {
    match deadline {
        Deadline::Now => io::ErrorKind::WouldBlock.into(),
        _ => io::ErrorKind::TimedOut.into(),
    }
}

fn mutex_consumer<S: PacketSink>(
    index: usize,
    mut sink: S,
    q: &MutexQueue,
    shared: &Shared,
) -> StreamStats {
    // Sender threads record send latency only: its histogram is allocated up front.
    let mut stats = StreamStats {
        send_latency: LatencyStats::preallocated(),
        ..StreamStats::default()
    };
    let mut answered = 0;
    'requests: loop {
        shared.maybe_publish(index, &mut answered, &stats);
        let Ok(mut st) = q.lock() else { break };
        let buf = loop {
            if shared.stopping() {
                break None;
            }
            if let Some(b) = st.items.pop_front() {
                break Some(b);
            }
            if shared.closed.load(Ordering::Acquire) {
                break None;
            }
            if shared.snapshot_wanted.load(Ordering::Relaxed) != answered {
                // Publish without holding the queue lock.
                drop(st);
                continue 'requests;
            }
            st.consumers_waiting += 1;
            let Ok((g, _)) = q.not_empty.wait_timeout(st, WAIT_SLICE) else {
                return stats;
            };
            st = g;
            st.consumers_waiting -= 1;
        };
        let Some(buf) = buf else { break };
        let wake_producer = st.producer_waiting;
        drop(st);
        if wake_producer {
            q.not_full.notify_one();
        }
        let result = sink.send_shared(&buf, Deadline::Never, &mut stats);
        shared.count(index, &stats);
        // Record a failure before counting the request done, so a drainer that sees
        // the count also sees the failure.
        if let Err(e) = &result {
            shared.fail(e);
        }
        let Ok(mut st) = q.lock() else { break };
        st.in_flight -= 1;
        let wake_drainer = (st.in_flight == 0 || result.is_err()) && st.drainer_waiting;
        drop(st);
        if wake_drainer {
            q.drained.notify_all();
        }
        if result.is_err() {
            break;
        }
    }
    stats
}

fn lockfree_consumer<S: PacketSink>(
    index: usize,
    mut sink: S,
    mut ring: rtrb::Consumer<Bytes>,
    shared: &Shared,
) -> StreamStats {
    // Sender threads record send latency only: its histogram is allocated up front.
    let mut stats = StreamStats {
        send_latency: LatencyStats::preallocated(),
        ..StreamStats::default()
    };
    let mut backoff = Backoff::default();
    let mut answered = 0;
    while !shared.stopping() {
        shared.maybe_publish(index, &mut answered, &stats);
        match ring.pop() {
            Ok(buf) => {
                backoff = Backoff::default();
                let result = sink.send_shared(&buf, Deadline::Never, &mut stats);
                shared.count(index, &stats);
                // Record a failure before counting the request done, so a drainer
                // that sees the count also sees the failure.
                if let Err(e) = &result {
                    shared.fail(e);
                }
                shared.completed.fetch_add(1, Ordering::Release);
                if result.is_err() {
                    break;
                }
            }
            Err(_) => {
                if shared.closed.load(Ordering::Acquire) {
                    break;
                }
                backoff.snooze();
            }
        }
    }
    stats
}

/// Spin, then yield, then sleep briefly: the lock-free queue's wait, which busy-waits
/// while work is near and stops burning a core when it is not.
#[derive(Default)]
struct Backoff {
    step: u32,
}

impl Backoff {
    fn snooze(&mut self) {
        if self.step < 64 {
            std::hint::spin_loop();
        } else if self.step < 1024 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        self.step = self.step.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A sink that records what it was given.
    struct ChannelSink(mpsc::Sender<usize>);

    impl PacketSink for ChannelSink {
        fn send_packet(
            &mut self,
            buf: &[u8],
            _: Deadline,
            stats: &mut StreamStats,
        ) -> io::Result<()> {
            stats.bytes_sent += buf.len() as u64;
            stats.send_latency.record(1);
            self.0
                .send(buf.len())
                .map_err(|_| io::Error::other("closed"))
        }
    }

    struct FailingSink;

    impl PacketSink for FailingSink {
        fn send_packet(&mut self, _: &[u8], _: Deadline, _: &mut StreamStats) -> io::Result<()> {
            Err(io::Error::new(io::ErrorKind::BrokenPipe, "peer went away"))
        }
    }

    fn run(queue: QueueKind, nsinks: usize, packets: usize) {
        let (tx, rx) = mpsc::channel();
        let sinks = (0..nsinks).map(|_| ChannelSink(tx.clone())).collect();
        drop(tx);
        let mut s = Senders::start(queue, sinks, Arc::default()).expect("start");
        let buf = Bytes::from(vec![7u8; 100]);
        for _ in 0..packets {
            s.submit(buf.clone(), Timeout::Forever).expect("submit");
        }
        let live = s.stats();
        assert!(live.bytes_sent <= 100 * packets as u64);
        assert_eq!(live.submit_latency.count(), packets as u64);
        s.stop(Timeout::Millis(10_000)).expect("stop");
        let stats = s.stats();
        assert_eq!(stats.bytes_sent, 100 * packets as u64);
        assert_eq!(stats.send_latency.count(), packets as u64);
        assert_eq!(stats.submit_latency.count(), packets as u64);
        assert_eq!(rx.iter().count(), packets);
    }

    #[test]
    fn mutex_queue_delivers_every_request_once() {
        run(QueueKind::Mutex, 4, 25_000);
    }

    #[test]
    fn lockfree_queue_delivers_every_request_once() {
        run(QueueKind::LockFree, 1, 25_000);
    }

    #[test]
    fn running_senders_report_live_snapshots() {
        for (queue, nsinks) in [(QueueKind::Mutex, 3), (QueueKind::LockFree, 1)] {
            let (tx, rx) = mpsc::channel();
            let sinks = (0..nsinks).map(|_| ChannelSink(tx.clone())).collect();
            drop(tx);
            let mut s = Senders::start(queue, sinks, Arc::default()).expect("start");
            let buf = Bytes::from(vec![7u8; 10]);
            for _ in 0..1000 {
                s.submit(buf.clone(), Timeout::Forever).expect("submit");
            }
            s.drain(Timeout::Millis(10_000)).expect("drain");
            // Idle threads answer the request: every sent byte is in the snapshot.
            let live = s.stats();
            assert_eq!(live.bytes_sent, 10_000, "{queue:?}");
            assert_eq!(live.send_latency.count(), 1000, "{queue:?}");
            s.stop(Timeout::Millis(10_000)).expect("stop");
            assert_eq!(s.stats().bytes_sent, 10_000, "no double counting");
            assert_eq!(rx.iter().count(), 1000);
        }
    }

    #[test]
    fn lockfree_queue_refuses_several_consumers() {
        let (tx, _rx) = mpsc::channel();
        let sinks = vec![ChannelSink(tx.clone()), ChannelSink(tx)];
        assert!(Senders::start(QueueKind::LockFree, sinks, Arc::default()).is_err());
    }

    #[test]
    fn a_failing_sender_is_reported_by_drain() {
        for queue in [QueueKind::Mutex, QueueKind::LockFree] {
            let mut s = Senders::start(queue, vec![FailingSink], Arc::default()).expect("start");
            let _ = s.submit(Bytes::from_static(b"x"), Timeout::Forever);
            let err = s
                .drain(Timeout::Millis(5_000))
                .expect_err("drain must fail");
            assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
            assert!(s
                .submit(Bytes::from_static(b"x"), Timeout::Forever)
                .is_err());
        }
    }

    #[test]
    fn full_mutex_queue_times_out_submit() {
        struct Stuck;
        impl PacketSink for Stuck {
            fn send_packet(
                &mut self,
                _: &[u8],
                _: Deadline,
                _: &mut StreamStats,
            ) -> io::Result<()> {
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            }
        }
        let abort = Arc::new(AtomicBool::new(false));
        let mut s = Senders::start(QueueKind::Mutex, vec![Stuck], abort).expect("start");
        let b = Bytes::from_static(b"x");
        let mut result = Ok(());
        for _ in 0..=MUTEX_QUEUE_CAPACITY + 1 {
            result = s.submit(b.clone(), Timeout::NonBlocking);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(
            result.expect_err("queue must fill").kind(),
            io::ErrorKind::WouldBlock
        );
    }
}
