//! Time inside a run: the `--time` bound, reporting intervals (`-i`) and the warm-up
//! left out of the totals (`--omit`), for every transport alike.
//!
//! The thread that owns a STREAM (the client's driver, the server's receiver) owns a
//! [`Meter`]. It already reads the clock per operation; when [`Meter::due`] says an
//! interval boundary or the end of the warm-up passed, [`Meter::tick`] snapshots the
//! stream's cumulative figures ([`crate::transport::stream::Stream::stats`]), ships the difference
//! to the previous snapshot as a [`Sample`] through a channel, and goes on. Nothing is
//! locked or allocated per operation; one snapshot per interval is.
//!
//! One [`Collector`] per side gathers the samples of all streams and turns interval `k`
//! into an [`IntervalResult`] once every stream has reported it (or has ended).
//!
//! Invariants: interval `k` starts at the run's start + `k × interval` (the first
//! snapshot at or after that instant); the samples of one stream add up to everything it
//! did; a time-bounded run has no boundary that would leave a last piece shorter than half
//! an interval, so `--time 3 -i 1` gives exactly three intervals per side.

use crate::percentiles::Percentiles;
use crate::results::{Figures, IntervalResult, SideTotals, StreamInterval};
use crate::settings::Settings;
use crate::stats::datagrams::DatagramCounts;
use crate::stats::StreamStats;
use crate::sysinfo::CpuUsage;
use crate::transport::figures::TransportFigures;
use crate::transport::stream::Stream;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, Instant};

/// When one side's boundaries fall.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// The side's start: interval 0 begins here.
    pub start: Instant,
    /// Length of a reporting interval.
    pub interval: Option<Duration>,
    /// Warm-up left out of the totals.
    pub omit: Option<Duration>,
    /// The run's time bound.
    pub time: Option<Duration>,
}

impl Schedule {
    /// The schedule `settings` ask for, starting at `start`.
    pub fn new(settings: &Settings, start: Instant) -> Schedule {
        let ms = |v: Option<u64>| v.map(Duration::from_millis);
        Schedule {
            start,
            interval: ms(settings.interval_ms),
            omit: ms(settings.omit_ms).filter(|d| !d.is_zero()),
            time: ms(settings.time_ms),
        }
    }

    /// When a time-bounded run stops sending.
    pub fn deadline(&self) -> Option<Instant> {
        self.time.map(|t| self.start + t)
    }

    /// Boundary `k` (k ≥ 1), or `None` if the run has no intervals or the boundary would
    /// leave a last piece shorter than half an interval before the time bound.
    fn boundary(&self, k: u32) -> Option<Instant> {
        let every = self.interval?;
        let offset = every.checked_mul(k)?;
        if let Some(time) = self.time {
            if offset + every / 2 > time {
                return None;
            }
        }
        Some(self.start + offset)
    }

    /// The interval `now` falls in.
    fn index_at(&self, now: Instant) -> u32 {
        match self.interval {
            Some(every) if !every.is_zero() => {
                let k = now.saturating_duration_since(self.start).as_nanos() / every.as_nanos();
                u32::try_from(k).unwrap_or(u32::MAX)
            }
            _ => 0,
        }
    }
}

/// What an owning thread sends to its side's [`Collector`].
#[derive(Debug)]
pub enum MeterMsg {
    /// One stream's figures for one interval.
    Sample(Box<Sample>),
    /// The stream ended: no more samples from it.
    Done(u32),
}

/// One stream's figures for one interval.
#[derive(Debug)]
pub struct Sample {
    pub stream: u32,
    /// Interval index: the interval this sample's start falls in.
    pub index: u32,
    pub start: Instant,
    pub end: Instant,
    /// The interval began inside the warm-up (`--omit`).
    pub omitted: bool,
    pub stats: StreamStats,
    pub transport: TransportFigures,
}

/// The totals of a stream once its warm-up is left out.
#[derive(Debug)]
pub struct Totals {
    /// Figures after the warm-up (everything without `--omit`).
    pub stats: StreamStats,
    /// Where those figures begin: the side's start, or the end of the warm-up.
    pub from: Instant,
    /// The transport's figures: counts after the warm-up, the rest as at the end.
    pub transport: TransportFigures,
    /// Datagrams of the warm-up (all of them for a run that ended inside it; none
    /// without `--omit`): iperf3's ends count packets from the start of a test and
    /// say how many of them the warm-up took.
    pub warm_up: DatagramCounts,
}

/// Samples each stream may have on their way to the side's collector. A collector
/// that falls behind (its connection to the peer blocked) holds the streams' threads
/// back at their next interval boundary instead of queueing without bound.
const METER_QUEUE_PER_STREAM: usize = 1;

/// The channel from `streams` streams' meters to their side's collector.
pub fn meter_channel(streams: usize) -> (SyncSender<MeterMsg>, Receiver<MeterMsg>) {
    std::sync::mpsc::sync_channel(METER_QUEUE_PER_STREAM * streams.max(1))
}

/// The owning thread's view of the schedule for one stream.
pub struct Meter {
    stream: u32,
    schedule: Schedule,
    tx: Option<SyncSender<MeterMsg>>,
    index: u32,
    interval_start: Instant,
    next_interval: Option<Instant>,
    /// End of the warm-up, while it has not passed.
    omit_pending: Option<Instant>,
    omit_end: Option<Instant>,
    next_due: Option<Instant>,
    /// Cumulative figures at `interval_start`.
    prev: StreamStats,
    prev_transport: TransportFigures,
    /// Cumulative figures at the end of the warm-up.
    omit_base: Option<(Instant, StreamStats, TransportFigures)>,
    done_sent: bool,
}

impl Meter {
    /// A meter for stream `stream`; samples go to `tx` when the run has intervals.
    pub fn new(stream: u32, schedule: Schedule, tx: Option<SyncSender<MeterMsg>>) -> Meter {
        let omit_end = schedule.omit.map(|d| schedule.start + d);
        let mut m = Meter {
            stream,
            schedule,
            tx,
            index: 0,
            interval_start: schedule.start,
            next_interval: schedule.boundary(1),
            omit_pending: omit_end,
            omit_end,
            next_due: None,
            prev: StreamStats::default(),
            prev_transport: TransportFigures::default(),
            omit_base: None,
            done_sent: false,
        };
        m.next_due = m.compute_next_due();
        m
    }

    fn compute_next_due(&self) -> Option<Instant> {
        match (self.next_interval, self.omit_pending) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When a time-bounded run stops sending.
    pub fn deadline(&self) -> Option<Instant> {
        self.schedule.deadline()
    }

    /// Whether the meter needs the clock at all (intervals, warm-up or a time bound).
    #[inline]
    pub fn active(&self) -> bool {
        self.next_due.is_some() || self.schedule.time.is_some()
    }

    /// Whether a boundary passed and [`Meter::tick`] should run.
    #[inline]
    pub fn due(&self, now: Instant) -> bool {
        matches!(self.next_due, Some(t) if now >= t)
    }

    /// How long a blocking call may wait before the next boundary (at least 1 ms).
    pub fn until_due(&self, now: Instant) -> Option<Duration> {
        self.next_due.map(|t| {
            t.saturating_duration_since(now)
                .max(Duration::from_millis(1))
        })
    }

    /// Acts on every boundary that passed by `now`: ships the interval's figures and
    /// notes the end of the warm-up. Called once per packet: the check is inlined, the
    /// work is not.
    #[inline]
    pub fn tick(&mut self, now: Instant, stream: &dyn Stream) {
        if self.due(now) {
            self.pass_boundaries(now, stream);
        }
    }

    #[inline(never)]
    fn pass_boundaries(&mut self, now: Instant, stream: &dyn Stream) {
        let snap = stream.stats();
        let transport = stream.facts().figures;
        if matches!(self.omit_pending, Some(t) if now >= t) {
            self.omit_pending = None;
            self.omit_base = Some((now, snap.clone(), transport.clone()));
        }
        if matches!(self.next_interval, Some(t) if now >= t) {
            self.ship(now, &snap, &transport);
            self.prev = snap;
            self.prev_transport = transport;
            self.index = self.schedule.index_at(now);
            self.interval_start = now;
            self.next_interval = self
                .index
                .checked_add(1)
                .and_then(|k| self.schedule.boundary(k));
        }
        self.next_due = self.compute_next_due();
    }

    fn ship(&mut self, now: Instant, snap: &StreamStats, transport: &TransportFigures) {
        let Some(tx) = &self.tx else { return };
        let mut stats = snap.since(&self.prev, self.interval_start);
        // While data flows a receiver knows what was sent only by the numbers; the
        // sender's own count, at the end, covers the whole run, not the last interval.
        stats.datagrams = snap
            .datagrams
            .by_numbers()
            .since(&self.prev.datagrams.by_numbers());
        let sample = Sample {
            stream: self.stream,
            index: self.index,
            start: self.interval_start,
            end: now,
            omitted: matches!(self.omit_end, Some(t) if self.interval_start < t),
            // Compact: it may wait in the queue and then for the other streams.
            stats: stats.compacted(),
            transport: transport.since(&self.prev_transport),
        };
        // The collector is gone only when its side gave up; nothing to report to then.
        let _ = tx.send(MeterMsg::Sample(Box::new(sample)));
    }

    /// Ends the stream at `now`: ships the last interval (if the run has intervals) and
    /// returns the totals with the warm-up left out.
    pub fn finish(&mut self, now: Instant, stream: &dyn Stream) -> Totals {
        let snap = stream.stats();
        let transport = stream.facts().figures;
        if self.schedule.interval.is_some() && !self.done_sent {
            self.ship(now, &snap, &transport);
        }
        self.send_done();
        match (&self.omit_base, self.omit_pending) {
            (Some((at, base, base_transport)), _) => {
                // The sender's count of datagrams, known only at the end, includes the
                // warm-up's: they come off as the numbers told at its end.
                let warm_up = base.datagrams.by_numbers();
                let mut stats = snap.since(base, *at);
                stats.datagrams = snap.datagrams.since(&warm_up);
                Totals {
                    stats,
                    from: *at,
                    transport: transport.since(base_transport),
                    warm_up,
                }
            }
            // The run ended inside the warm-up: nothing is left to count.
            (None, Some(_)) => Totals {
                warm_up: snap.datagrams,
                stats: StreamStats::default(),
                from: now,
                transport: transport.since(&transport),
            },
            (None, None) => Totals {
                stats: snap,
                from: self.schedule.start,
                transport,
                warm_up: DatagramCounts::default(),
            },
        }
    }

    fn send_done(&mut self) {
        if !self.done_sent {
            self.done_sent = true;
            if let Some(tx) = &self.tx {
                let _ = tx.send(MeterMsg::Done(self.stream));
            }
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        // A stream that failed still tells the collector not to wait for it.
        self.send_done();
    }
}

/// Gathers the samples of one side's streams into whole intervals, in order.
pub struct Collector {
    start: Instant,
    /// Highest interval index each stream has reported.
    seen: Vec<Option<u32>>,
    done: Vec<bool>,
    pending: BTreeMap<u32, Vec<Sample>>,
    cpu_start: Option<CpuUsage>,
    /// With `--bidir`, the first stream the server sends on: the streams from there on
    /// are totalled apart.
    first_server_stream: Option<u32>,
    /// Where each interval's latencies are read.
    percentiles: Percentiles,
}

impl Collector {
    /// A collector for `nstreams` streams of a side that started at `start`, whose
    /// process had used `cpu_start` by then.
    pub fn new(
        start: Instant,
        nstreams: usize,
        cpu_start: Option<CpuUsage>,
        settings: &Settings,
    ) -> Collector {
        Collector {
            start,
            seen: vec![None; nstreams],
            done: vec![false; nstreams],
            pending: BTreeMap::new(),
            cpu_start,
            first_server_stream: settings.first_server_stream(),
            percentiles: settings.percentiles,
        }
    }

    /// Takes one message; returns the intervals it completed, in order.
    pub fn push(&mut self, msg: MeterMsg) -> Vec<IntervalResult> {
        match msg {
            MeterMsg::Sample(s) => {
                if let Some(seen) = self.seen.get_mut(s.stream as usize) {
                    *seen = Some(seen.map_or(s.index, |k| k.max(s.index)));
                    self.pending.entry(s.index).or_default().push(*s);
                }
            }
            MeterMsg::Done(stream) => {
                if let Some(d) = self.done.get_mut(stream as usize) {
                    *d = true;
                }
            }
        }
        let mut out = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            let k = *entry.key();
            let complete = self
                .seen
                .iter()
                .zip(&self.done)
                .all(|(seen, &done)| done || seen.is_some_and(|s| s >= k));
            if !complete {
                break;
            }
            let samples = entry.remove();
            out.push(self.build(k, samples));
        }
        out
    }

    /// Whether every stream has ended.
    pub fn all_done(&self) -> bool {
        self.done.iter().all(|&d| d)
    }

    /// Every interval still held back (when the side stops waiting for its streams).
    pub fn flush(&mut self) -> Vec<IntervalResult> {
        let pending = std::mem::take(&mut self.pending);
        pending
            .into_iter()
            .map(|(k, samples)| self.build(k, samples))
            .collect()
    }

    fn build(&self, index: u32, mut samples: Vec<Sample>) -> IntervalResult {
        samples.sort_by_key(|s| s.stream);
        let ns = |t: Instant| {
            u64::try_from(t.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
        };
        let mut totals = SideTotals::new(self.first_server_stream);
        let mut omitted = false;
        let streams = samples
            .iter()
            .map(|s| {
                totals.add(s.stream, &s.stats, &s.transport, Some((s.start, s.end)));
                omitted |= s.omitted;
                let mut figures = Figures::new(
                    &s.stats,
                    s.end.saturating_duration_since(s.start),
                    &self.percentiles,
                );
                figures.transport.merge(&s.transport);
                StreamInterval {
                    index: s.stream,
                    start_ns: ns(s.start),
                    end_ns: ns(s.end),
                    figures,
                }
            })
            .collect();
        let (start, end) = totals.span().map_or((0, 0), |(a, b)| (ns(a), ns(b)));
        let (total, reverse_total) = totals.figures(&self.percentiles);
        IntervalResult {
            index,
            start_ns: start,
            end_ns: end,
            omitted,
            total,
            reverse_total,
            streams,
            cpu: match (CpuUsage::now(), self.cpu_start) {
                (Some(now), Some(start)) => Some(now.since(start)),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::report::interval_line;
    use crate::transport::Role;
    use crate::workload::Workload;

    fn sample(stream: u32, index: u32, bytes: u64, start: Instant) -> MeterMsg {
        let mut stats = StreamStats {
            bytes_sent: bytes,
            ..StreamStats::default()
        };
        stats.send_latency.record(1000 * u64::from(stream + 1));
        let s = start + Duration::from_secs(u64::from(index));
        MeterMsg::Sample(Box::new(Sample {
            stream,
            index,
            start: s,
            end: s + Duration::from_secs(1),
            omitted: index == 0,
            stats,
            transport: TransportFigures::default(),
        }))
    }

    #[test]
    fn boundaries_leave_no_short_last_piece_in_a_timed_run() {
        let start = Instant::now();
        let s = Schedule {
            start,
            interval: Some(Duration::from_secs(1)),
            omit: None,
            time: Some(Duration::from_secs(3)),
        };
        assert_eq!(s.boundary(1), Some(start + Duration::from_secs(1)));
        assert_eq!(s.boundary(2), Some(start + Duration::from_secs(2)));
        assert_eq!(s.boundary(3), None, "the deadline is no boundary");
        let s = Schedule {
            time: Some(Duration::from_millis(2500)),
            ..s
        };
        assert!(s.boundary(2).is_some(), "a half-interval piece is kept");
        let s = Schedule { time: None, ..s };
        assert!(s.boundary(1000).is_some());
        assert_eq!(s.index_at(start + Duration::from_millis(2999)), 2);
        assert_eq!(s.index_at(start + Duration::from_millis(3000)), 3);
    }

    #[test]
    fn collector_emits_an_interval_once_every_stream_reported_it() {
        let start = Instant::now();
        let mut c = Collector::new(start, 2, None, &Settings::default());
        assert!(c.push(sample(0, 0, 100, start)).is_empty());
        assert!(c.push(sample(0, 1, 100, start)).is_empty());
        let out = c.push(sample(1, 0, 50, start));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].index, 0);
        assert_eq!(out[0].total.bytes_sent, 150);
        assert_eq!(out[0].streams.len(), 2);
        assert!(out[0].omitted);
        assert_eq!(out[0].total.send_latency.map(|l| l.count), Some(2));
        assert_eq!((out[0].start_ns, out[0].end_ns), (0, 1_000_000_000));
        // Stream 1 ends: interval 1 no longer waits for it.
        let out = c.push(MeterMsg::Done(1));
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].index, out[0].total.bytes_sent), (1, 100));
        assert!(!out[0].omitted);
        assert!(!c.all_done());
        assert!(c.push(MeterMsg::Done(0)).is_empty());
        assert!(c.all_done());
    }

    #[test]
    fn with_bidir_each_direction_has_its_own_interval_total_and_line() {
        let start = Instant::now();
        let bidir = Settings {
            workload: Workload::Bidir,
            nstreams: 2,
            ..Settings::default()
        };
        let mut c = Collector::new(start, 2, None, &bidir);
        assert!(c.push(sample(0, 0, 100, start)).is_empty());
        // Stream 1 carries the server's data: on the client, bytes received.
        let mut stats = StreamStats {
            bytes_received: 4096,
            ..StreamStats::default()
        };
        stats.recv_latency.record(2_000);
        let received = MeterMsg::Sample(Box::new(Sample {
            stream: 1,
            index: 0,
            start,
            end: start + Duration::from_millis(500),
            omitted: false,
            stats,
            transport: TransportFigures::default(),
        }));
        let out = c.push(received);
        assert_eq!(out.len(), 1);
        let r = &out[0];
        assert_eq!((r.total.bytes_sent, r.total.bytes_received), (100, 0));
        let back = r
            .reverse_total
            .as_ref()
            .expect("a total for the server's data");
        assert_eq!((back.bytes_sent, back.bytes_received), (0, 4096));
        assert_eq!(back.duration_ns, 500_000_000);
        let text = interval_line(Role::Client, &bidir, r);
        // One stream each way: its direction's line is its own.
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains("] sent: 100B"), "{text}");
        assert!(lines[1].contains("] received: 4.0KB(4096B)"), "{text}");
        assert!(lines[1].contains("latency: p50=2.00us"), "{text}");
        // Without --bidir one total covers both streams, on one line.
        let mut one = Collector::new(start, 1, None, &Settings::default());
        let r = &one.push(sample(0, 0, 100, start))[0];
        assert!(r.reverse_total.is_none());
        assert_eq!(
            interval_line(Role::Client, &Settings::default(), r)
                .lines()
                .count(),
            1
        );
    }

    #[test]
    fn a_stream_that_skipped_intervals_does_not_hold_the_others_back() {
        let start = Instant::now();
        let mut c = Collector::new(start, 2, None, &Settings::default());
        c.push(sample(0, 1, 1, start));
        c.push(sample(0, 2, 1, start));
        // Stream 1 was blocked across boundary 1 and reports its next sample as 2.
        let out = c.push(sample(1, 2, 1, start));
        assert_eq!(out.iter().map(|r| r.index).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(out[0].streams.len(), 1);
        assert!(c.flush().is_empty());
    }

    use crate::stream::Timeout;
    use crate::transport::stream::Stream;
    use std::cell::Cell;
    /// A stream whose cumulative byte count the test sets.
    struct Fake(Cell<u64>);
    impl Stream for Fake {
        fn nsockets(&self) -> usize {
            1
        }
        fn local_addr(&self) -> String {
            String::new()
        }
        fn peer_addr(&self) -> String {
            String::new()
        }
        fn send(&mut self, b: &[u8], _: Timeout) -> std::io::Result<usize> {
            Ok(b.len())
        }
        fn send_submit(&mut self, _: bytes::Bytes, _: Timeout) -> std::io::Result<()> {
            Ok(())
        }
        fn sender_drain(&mut self, _: Timeout) -> std::io::Result<()> {
            Ok(())
        }
        fn recv(&mut self, _: &mut [u8], _: Timeout) -> std::io::Result<usize> {
            Ok(0)
        }
        fn ack_partial(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn finish_sending(&mut self, _: Timeout) -> std::io::Result<()> {
            Ok(())
        }
        fn stats(&self) -> StreamStats {
            StreamStats {
                bytes_sent: self.0.get(),
                ..StreamStats::default()
            }
        }
    }

    #[test]
    fn a_timed_run_gives_one_interval_per_second() {
        let start = Instant::now();
        let schedule = Schedule {
            start,
            interval: Some(Duration::from_secs(1)),
            omit: None,
            time: Some(Duration::from_secs(3)),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(64);
        let mut m = Meter::new(0, schedule, Some(tx));
        assert_eq!(m.deadline(), Some(start + Duration::from_secs(3)));
        let fake = Fake(Cell::new(0));
        let at = |ms: u64| start + Duration::from_millis(ms);
        for (ms, bytes) in [(400, 10), (1001, 20), (1500, 30), (2003, 40), (3000, 50)] {
            fake.0.set(bytes);
            m.tick(at(ms), &fake);
        }
        fake.0.set(55);
        let totals = m.finish(at(3010), &fake);
        assert_eq!((totals.stats.bytes_sent, totals.from), (55, start));
        drop(m);
        let mut c = Collector::new(start, 1, None, &Settings::default());
        let all: Vec<_> = rx.try_iter().flat_map(|msg| c.push(msg)).collect();
        let got: Vec<_> = all
            .iter()
            .map(|r| {
                (
                    r.index,
                    r.start_ns / 1_000_000,
                    r.end_ns / 1_000_000,
                    r.total.bytes_sent,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![(0, 0, 1001, 20), (1, 1001, 2003, 20), (2, 2003, 3010, 15)]
        );
    }

    #[test]
    fn meter_slices_a_stream_into_intervals_that_add_up() {
        let start = Instant::now();
        let schedule = Schedule {
            start,
            interval: Some(Duration::from_secs(1)),
            omit: Some(Duration::from_secs(1)),
            time: None,
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(64);
        let mut m = Meter::new(0, schedule, Some(tx));
        let fake = Fake(Cell::new(0));
        let at = |ms: u64| start + Duration::from_millis(ms);
        fake.0.set(100);
        assert!(!m.due(at(999)));
        assert!(m.due(at(1000)));
        m.tick(at(1000), &fake);
        fake.0.set(250);
        // Blocked across two boundaries: one sample covers both.
        m.tick(at(3100), &fake);
        assert_eq!(m.until_due(at(3100)), Some(Duration::from_millis(900)));
        fake.0.set(260);
        let totals = m.finish(at(3500), &fake);
        assert_eq!(totals.stats.bytes_sent, 160, "warm-up left out");
        assert_eq!(totals.from, at(1000));
        drop(m);
        let mut c = Collector::new(start, 1, None, &Settings::default());
        let mut all = Vec::new();
        for msg in rx.try_iter() {
            all.extend(c.push(msg));
        }
        let got: Vec<_> = all
            .iter()
            .map(|r| (r.index, r.total.bytes_sent, r.omitted))
            .collect();
        assert_eq!(got, vec![(0, 100, true), (1, 150, false), (3, 10, false)]);
        assert_eq!(all[1].end_ns, 3_100_000_000);
    }
}
