//! Statistics recorded on the hot path: latency histograms and byte/message counters.
//!
//! Each thread that moves data owns its [`StreamStats`] (no locks, no allocation per
//! record); the owners merge them once a run or an interval ends. Latency keeps exact
//! count/min/max/sum next to an HDR histogram, so `avg/min/max` are exact and the
//! percentiles are within the histogram's 3 significant digits.
//!
//! A sample first goes into a short staging array and enters the histogram when the
//! array is full: between two samples the kernel copies a packet, which evicts the
//! histogram's counters from the cache, and loading one before the next system call
//! stalled the loop (1.2-1.6% of all CPU samples in a 4-stream TCP profile). Storing
//! into the array does not wait, and the loads of a flush do not depend on each other,
//! so their misses overlap.

pub mod buffer_grant;
pub mod datagrams;
pub mod latency_doc;

use crate::percentiles::{quantile, PercentileValue, PercentileValues, Percentiles};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::borrow::Cow;
use std::time::Instant;

/// Highest latency the histogram resolves, in ns (one hour); larger values are clamped.
const HIST_MAX_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits of the histogram.
const HIST_SIGFIG: u8 = 3;

/// Samples staged before they enter the histogram.
const STAGED: usize = 32;

/// A latency distribution in nanoseconds.
#[derive(Debug)]
pub struct LatencyStats {
    hist: Option<Histogram<u64>>,
    /// Samples held as (bucket value, count) pairs instead of in `hist`: an interval's
    /// samples on their way to the collector take a few KiB this way, not the 264 KiB
    /// of a histogram (see [`LatencyStats::compacted`]).
    buckets: Vec<(u64, u64)>,
    /// Samples not yet in `hist`: the first `staged_len`.
    staged: [u64; STAGED],
    staged_len: usize,
    count: u64,
    sum_ns: u128,
    sum_sq_ns: f64,
    min_ns: u64,
    max_ns: u64,
}

impl Default for LatencyStats {
    fn default() -> Self {
        LatencyStats {
            hist: None,
            buckets: Vec::new(),
            staged: [0; STAGED],
            staged_len: 0,
            count: 0,
            sum_ns: 0,
            sum_sq_ns: 0.0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts; failure would be a bug here.
    Histogram::new_with_bounds(1, HIST_MAX_NS, HIST_SIGFIG)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

/// Bytes one distribution's histogram takes once it records (its counts).
pub fn histogram_bytes() -> u64 {
    static BYTES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        let counts = new_histogram().distinct_values() as u64;
        counts * std::mem::size_of::<u64>() as u64
    })
}

impl LatencyStats {
    /// A distribution whose histogram is allocated up front, so that the first sample
    /// recorded on a hot path does not allocate.
    pub fn preallocated() -> LatencyStats {
        LatencyStats {
            hist: Some(new_histogram()),
            ..LatencyStats::default()
        }
    }

    /// Records one latency sample.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        if let Some(slot) = self.staged.get_mut(self.staged_len) {
            *slot = ns;
            self.staged_len += 1;
        }
        if self.staged_len == STAGED {
            self.flush_staged();
        }
        self.count += 1;
        self.sum_ns += u128::from(ns);
        let f = ns as f64;
        self.sum_sq_ns += f * f;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Moves the staged samples into the histogram.
    #[inline(never)]
    fn flush_staged(&mut self) {
        let hist = self.hist.get_or_insert_with(new_histogram);
        record_all(hist, &self.staged[..self.staged_len]);
        self.staged_len = 0;
    }

    /// The histogram of every sample, staged and compacted ones included.
    fn histogram(&self) -> Option<Cow<'_, Histogram<u64>>> {
        let staged = &self.staged[..self.staged_len];
        if staged.is_empty() && self.buckets.is_empty() {
            return self.hist.as_ref().map(Cow::Borrowed);
        }
        let mut hist = self.hist.clone().unwrap_or_else(new_histogram);
        record_all(&mut hist, staged);
        record_buckets(&mut hist, &self.buckets);
        Some(Cow::Owned(hist))
    }

    /// The same distribution with its histogram held as its recorded buckets only,
    /// when that is smaller: for figures that are kept or queued rather than recorded
    /// into (an interval's sample). Percentiles come out the same.
    pub fn compacted(mut self) -> LatencyStats {
        if let Some(hist) = &self.hist {
            let buckets: Vec<(u64, u64)> = hist
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect();
            if buckets.len() * std::mem::size_of::<(u64, u64)>() < hist.distinct_values() * 8 {
                self.buckets.extend(buckets);
                self.hist = None;
            }
        }
        self
    }

    /// Records the time elapsed since `start`; returns the clock it read (the end).
    #[inline]
    pub fn record_since(&mut self, start: Instant) -> Instant {
        let end = Instant::now();
        self.record(span_ns(start, end));
        end
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyStats) {
        if other.count == 0 {
            return;
        }
        let hist = self.hist.get_or_insert_with(new_histogram);
        if let Some(oh) = &other.hist {
            // Same bounds on both sides, so adding cannot fail.
            let _ = hist.add(oh);
        }
        // Straight into this histogram: no copy of `other`'s to fold them into first.
        record_all(hist, &other.staged[..other.staged_len]);
        record_buckets(hist, &other.buckets);
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.sum_sq_ns += other.sum_sq_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// The samples recorded after `earlier`, an older snapshot of this same distribution.
    ///
    /// Counts, sums and the histogram are exact differences; min and max come from the
    /// difference histogram, so they are within its precision rather than exact.
    pub fn since(&self, earlier: &LatencyStats) -> LatencyStats {
        if earlier.count == 0 {
            return self.clone();
        }
        let count = self.count.saturating_sub(earlier.count);
        if count == 0 {
            return LatencyStats::default();
        }
        let mut hist = self.histogram().map_or_else(new_histogram, Cow::into_owned);
        if let Some(old) = earlier.histogram() {
            // `earlier` is a prefix of `self` with the same bounds: nothing can underflow.
            let _ = hist.subtract(&*old);
        }
        let (min_ns, max_ns) = if hist.is_empty() {
            (self.min_ns, self.max_ns)
        } else {
            (
                hist.min().max(self.min_ns),
                hist.highest_equivalent(hist.max()).min(self.max_ns),
            )
        };
        LatencyStats {
            hist: Some(hist),
            buckets: Vec::new(),
            staged: [0; STAGED],
            staged_len: 0,
            count,
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
            sum_sq_ns: (self.sum_sq_ns - earlier.sum_sq_ns).max(0.0),
            min_ns,
            max_ns,
        }
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The distribution as (quantile, ns) points, from the minimum (quantile 0) to the
    /// maximum (quantile 1), denser toward the tail (the HDR histogram's quantile
    /// iteration, each half of what is left in 4 steps); empty when nothing was
    /// recorded. Values are within the histogram's precision, clamped to the exact
    /// min and max.
    pub fn quantile_curve(&self) -> Vec<(f64, u64)> {
        let Some(hist) = self.histogram().filter(|_| self.count > 0) else {
            return Vec::new();
        };
        let mut curve = vec![(0.0, self.min_ns)];
        curve.extend(hist.iter_quantiles(4).map(|v| {
            let ns = hist.highest_equivalent(v.value_iterated_to());
            (v.quantile_iterated_to(), ns.clamp(self.min_ns, self.max_ns))
        }));
        curve.push((1.0, self.max_ns));
        curve
    }

    /// The figures a report shows, read at each of `percentiles`; `None` when nothing
    /// was recorded.
    pub fn summary(&self, percentiles: &Percentiles) -> Option<LatencySummary> {
        if self.count == 0 {
            return None;
        }
        let mean = self.sum_ns as f64 / self.count as f64;
        let variance = (self.sum_sq_ns / self.count as f64 - mean * mean).max(0.0);
        let hist = self.histogram();
        let mut values = PercentileValues::new();
        for &percentile in percentiles.as_slice() {
            let ns = hist
                .as_ref()
                .map_or(0, |h| h.value_at_quantile(quantile(percentile)))
                .clamp(self.min_ns, self.max_ns);
            // As many as `percentiles` holds, which has the same capacity.
            values.push(PercentileValue { percentile, ns });
        }
        Some(LatencySummary {
            count: self.count,
            min_ns: self.min_ns,
            max_ns: self.max_ns,
            mean_ns: mean,
            stddev_ns: variance.sqrt(),
            percentiles: values,
        })
    }
}

impl Clone for LatencyStats {
    /// The copy holds every sample in its histogram, none staged.
    fn clone(&self) -> Self {
        LatencyStats {
            hist: self.histogram().map(Cow::into_owned),
            buckets: Vec::new(),
            staged: [0; STAGED],
            staged_len: 0,
            count: self.count,
            sum_ns: self.sum_ns,
            sum_sq_ns: self.sum_sq_ns,
            min_ns: self.min_ns,
            max_ns: self.max_ns,
        }
    }
}

fn record_all(hist: &mut Histogram<u64>, samples: &[u64]) {
    for &ns in samples {
        hist.saturating_record(ns.clamp(1, HIST_MAX_NS));
    }
}

/// Records (bucket value, count) pairs taken from a histogram of the same bounds.
fn record_buckets(hist: &mut Histogram<u64>, buckets: &[(u64, u64)]) {
    for &(ns, n) in buckets {
        hist.saturating_record_n(ns.clamp(1, HIST_MAX_NS), n);
    }
}

/// Nanoseconds from `start` to `end` (0 if `end` is earlier), saturating.
#[inline]
pub fn span_ns(start: Instant, end: Instant) -> u64 {
    u64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}

/// The reported figures of one latency distribution, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
    /// The figure at each percentile the run asked for, in its order.
    pub percentiles: PercentileValues,
}

impl LatencySummary {
    /// The figure at `percentile`, if the run asked for it.
    pub fn at(&self, percentile: f64) -> Option<u64> {
        self.percentiles
            .as_slice()
            .iter()
            .find(|v| v.percentile == percentile)
            .map(|v| v.ns)
    }

    /// What makes this summary, as a peer sent it, impossible, if anything: its least
    /// above its most.
    pub fn impossible(&self) -> Option<String> {
        (self.min_ns > self.max_ns).then(|| {
            format!(
                "a latency whose least, {} ns, is above its most, {} ns",
                self.min_ns, self.max_ns
            )
        })
    }
}

/// What one end of a STREAM measured.
#[derive(Clone, Debug, Default)]
pub struct StreamStats {
    /// Payload bytes written to the peer.
    pub bytes_sent: u64,
    /// Payload bytes read from the peer (MPRTT ACK bytes on the sending side).
    pub bytes_received: u64,
    /// Per-send latency: write() start to return, or to the ACK read with MPRTT.
    pub send_latency: LatencyStats,
    /// Per-receive latency: poll() start to the read() that returns data (and, with
    /// MPRTT, the ACK written).
    pub recv_latency: LatencyStats,
    /// `send_submit()` called to request accepted by the queue.
    pub submit_latency: LatencyStats,
    /// `--rx-timestamps` (UDP): per datagram, from the sender's send time in its header
    /// to the kernel's receive time (one way: the hosts' clocks must agree).
    pub network_latency: LatencyStats,
    /// `--rx-timestamps` (UDP): per datagram, from the kernel's receive time to the
    /// read that returned it (the wait in the socket, and the read).
    pub app_latency: LatencyStats,
    /// MPRTT retransmissions (UDP).
    pub retries: u64,
    /// Datagram accounting (UDP); empty for stream transports.
    pub datagrams: datagrams::DatagramCounts,
    /// When the first payload byte arrived.
    pub first_recv: Option<Instant>,
    /// When the last payload byte arrived.
    pub last_recv: Option<Instant>,
}

impl StreamStats {
    /// Notes that payload arrived now.
    #[inline]
    pub fn mark_recv(&mut self, now: Instant) {
        if self.first_recv.is_none() {
            self.first_recv = Some(now);
        }
        self.last_recv = Some(now);
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &StreamStats) {
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
        self.send_latency.merge(&other.send_latency);
        self.recv_latency.merge(&other.recv_latency);
        self.submit_latency.merge(&other.submit_latency);
        self.network_latency.merge(&other.network_latency);
        self.app_latency.merge(&other.app_latency);
        self.retries += other.retries;
        self.datagrams.merge(&other.datagrams);
        self.first_recv = min_opt(self.first_recv, other.first_recv);
        self.last_recv = max_opt(self.last_recv, other.last_recv);
    }
}

impl StreamStats {
    /// The same figures with their latency histograms held compactly (see
    /// [`LatencyStats::compacted`]).
    pub fn compacted(self) -> StreamStats {
        StreamStats {
            send_latency: self.send_latency.compacted(),
            recv_latency: self.recv_latency.compacted(),
            submit_latency: self.submit_latency.compacted(),
            network_latency: self.network_latency.compacted(),
            app_latency: self.app_latency.compacted(),
            ..self
        }
    }

    /// What happened after `earlier` (an older snapshot of the same stream) was taken at
    /// `at`: counters and latencies are differences, and the receive span starts no
    /// earlier than `at`.
    pub fn since(&self, earlier: &StreamStats, at: Instant) -> StreamStats {
        let received = self.bytes_received > earlier.bytes_received;
        StreamStats {
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
            send_latency: self.send_latency.since(&earlier.send_latency),
            recv_latency: self.recv_latency.since(&earlier.recv_latency),
            submit_latency: self.submit_latency.since(&earlier.submit_latency),
            network_latency: self.network_latency.since(&earlier.network_latency),
            app_latency: self.app_latency.since(&earlier.app_latency),
            retries: self.retries.saturating_sub(earlier.retries),
            datagrams: self.datagrams.since(&earlier.datagrams),
            first_recv: if received {
                max_opt(self.first_recv, Some(at))
            } else {
                None
            },
            last_recv: if received { self.last_recv } else { None },
        }
    }
}

fn min_opt(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

fn max_opt(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_holds_exactly_the_asked_percentiles() {
        // 1..=10_000 ns: the histogram holds every value below 2048 exactly, and each
        // above within 0.1%.
        let mut s = LatencyStats::default();
        let mut reference = new_histogram();
        for v in 1..=10_000u64 {
            s.record(v);
            reference
                .record(v)
                .expect("value within the histogram's bounds");
        }
        let asked: Percentiles = "99.99,50,1,100".parse().expect("a valid list");
        let sum = s.summary(&asked).expect("samples were recorded");
        let got: Vec<(f64, u64)> = sum
            .percentiles
            .as_slice()
            .iter()
            .map(|v| (v.percentile, v.ns))
            .collect();
        let read = |q: f64| reference.value_at_quantile(q);
        assert_eq!(
            got,
            [
                (99.99, read(0.9999)),
                (50.0, read(0.5)),
                (1.0, 100),
                (100.0, 10_000)
            ]
        );
        // The 5000th and 9999th of 10 000 samples, within the histogram's precision.
        assert!(
            (5_000..=5_003).contains(&sum.at(50.0).unwrap_or(0)),
            "{sum:?}"
        );
        assert!(
            (9_999..=10_000).contains(&sum.at(99.99).unwrap_or(0)),
            "{sum:?}"
        );
        assert_eq!(sum.at(90.0), None);
        // 99.9 reads quantile 0.999 as written: the 999th of 1000 samples, not the 1000th.
        let mut thousand = LatencyStats::default();
        for v in 1..=1000u64 {
            thousand.record(v);
        }
        let sum = thousand.summary(&Percentiles::default()).expect("samples");
        assert_eq!(sum.at(99.9), Some(999));
        assert_eq!(sum.at(50.0), Some(500));
    }

    #[test]
    fn exact_figures_and_percentiles_match_a_sorted_reference() {
        let mut s = LatencyStats::default();
        let mut values: Vec<u64> = (0..10_000u64).map(|i| (i * 7919) % 100_000 + 100).collect();
        for &v in &values {
            s.record(v);
        }
        values.sort_unstable();
        let sum = s
            .summary(&Percentiles::default())
            .expect("samples were recorded");
        assert_eq!(sum.count, 10_000);
        assert_eq!(sum.min_ns, values[0]);
        assert_eq!(sum.max_ns, values[9_999]);
        let mean = values.iter().sum::<u64>() as f64 / 10_000.0;
        assert!((sum.mean_ns - mean).abs() < 1e-6);
        for (p, got) in [
            (0.5, sum.at(50.0)),
            (0.99, sum.at(99.0)),
            (0.999, sum.at(99.9)),
        ] {
            let got = got.expect("a default percentile");
            let idx = ((p * 10_000.0) as usize).saturating_sub(1);
            let want = values[idx] as f64;
            assert!(
                (got as f64 - want).abs() / want < 0.002,
                "p{p}: got {got}, sorted reference {want}"
            );
        }
    }

    #[test]
    fn the_quantile_curve_follows_a_sorted_reference_from_min_to_max() {
        let mut s = LatencyStats::default();
        assert!(s.quantile_curve().is_empty());
        // Uneven values, with a few staged samples not yet in the histogram.
        let mut values: Vec<u64> = (0..10_005u64).map(|i| (i * 7919) % 100_000 + 100).collect();
        for &v in &values {
            s.record(v);
        }
        values.sort_unstable();
        let curve = s.quantile_curve();
        assert_eq!(curve.first(), Some(&(0.0, values[0])));
        assert_eq!(curve.last(), Some(&(1.0, values[values.len() - 1])));
        assert!(curve.len() > 20, "{}", curve.len());
        for pair in curve.windows(2) {
            assert!(pair[0].0 <= pair[1].0 && pair[0].1 <= pair[1].1, "{pair:?}");
        }
        for &(q, ns) in &curve[1..curve.len() - 1] {
            let idx = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
            let want = values[idx] as f64;
            assert!(
                (ns as f64 - want).abs() / want < 0.002,
                "quantile {q}: {ns} against the sorted reference's {want}"
            );
        }
    }

    #[test]
    fn merging_equals_recording_everything_in_one() {
        let mut a = LatencyStats::default();
        let mut b = LatencyStats::default();
        let mut all = LatencyStats::default();
        for v in 1..=1000u64 {
            if v % 3 == 0 {
                a.record(v * 10);
            } else {
                b.record(v * 10);
            }
            all.record(v * 10);
        }
        a.merge(&b);
        assert_eq!(
            a.summary(&Percentiles::default()),
            all.summary(&Percentiles::default())
        );
    }

    #[test]
    fn stddev_is_exact_for_a_known_set() {
        let mut s = LatencyStats::default();
        for v in [2u64, 4, 4, 4, 5, 5, 7, 9] {
            s.record(v);
        }
        let sum = s
            .summary(&Percentiles::default())
            .expect("samples were recorded");
        assert!((sum.stddev_ns - 2.0).abs() < 1e-9);
        assert!((sum.mean_ns - 5.0).abs() < 1e-9);
    }

    #[test]
    fn since_is_the_difference_of_two_snapshots() {
        let mut s = LatencyStats::default();
        for v in 1..=500u64 {
            s.record(v * 100);
        }
        let early = s.clone();
        let mut later_only = LatencyStats::default();
        for v in 501..=2000u64 {
            s.record(v * 100);
            later_only.record(v * 100);
        }
        let diff = s
            .since(&early)
            .summary(&Percentiles::default())
            .expect("samples");
        let want = later_only
            .summary(&Percentiles::default())
            .expect("samples");
        assert_eq!(diff.count, 1500);
        assert!((diff.mean_ns - want.mean_ns).abs() < 1e-6);
        assert!((diff.stddev_ns - want.stddev_ns).abs() / want.stddev_ns < 1e-6);
        for (got, exp) in [
            (diff.min_ns, want.min_ns),
            (diff.max_ns, want.max_ns),
            (diff.at(50.0).unwrap_or(0), want.at(50.0).unwrap_or(1)),
            (diff.at(99.0).unwrap_or(0), want.at(99.0).unwrap_or(1)),
        ] {
            assert!(
                (got as f64 - exp as f64).abs() / (exp as f64) < 0.002,
                "{got} vs {exp}"
            );
        }
        assert!(s.since(&s).summary(&Percentiles::default()).is_none());
    }

    #[test]
    fn staged_samples_count_in_every_figure() {
        // Sample counts around the staging size: some still staged, some flushed.
        for n in [1, 5, STAGED - 1, STAGED, STAGED + 3, 3 * STAGED + 7] {
            let mut s = LatencyStats::default();
            let mut reference = new_histogram();
            for i in 0..n as u64 {
                let v = 1_000 + (i * 7_919) % 50_000;
                s.record(v);
                reference
                    .record(v)
                    .expect("value within the histogram's bounds");
            }
            let sum = s
                .summary(&Percentiles::default())
                .expect("samples were recorded");
            assert_eq!(sum.count, n as u64, "n={n}");
            for (p, got) in [
                (0.5, sum.at(50.0)),
                (0.9, sum.at(90.0)),
                (0.99, sum.at(99.0)),
            ] {
                let got = got.expect("a default percentile");
                let want = reference.value_at_quantile(p).clamp(sum.min_ns, sum.max_ns);
                assert_eq!(got, want, "n={n} p{p}");
            }
            let mut merged = LatencyStats::default();
            merged.merge(&s);
            assert_eq!(
                merged.summary(&Percentiles::default()),
                Some(sum),
                "n={n}: merge"
            );
            assert_eq!(
                s.clone().summary(&Percentiles::default()),
                Some(sum),
                "n={n}: clone"
            );
        }
    }

    #[test]
    fn stream_since_subtracts_counters() {
        let t0 = Instant::now();
        let mut a = StreamStats {
            bytes_sent: 100,
            bytes_received: 10,
            ..StreamStats::default()
        };
        a.mark_recv(t0);
        let snap = a.clone();
        a.bytes_sent = 350;
        let later = t0 + std::time::Duration::from_millis(5);
        let d = a.since(&snap, later);
        assert_eq!((d.bytes_sent, d.bytes_received), (250, 0));
        assert_eq!(d.first_recv, None);
        a.bytes_received = 30;
        a.mark_recv(later + std::time::Duration::from_millis(1));
        let d = a.since(&snap, later);
        assert_eq!(d.bytes_received, 20);
        assert_eq!(d.first_recv, Some(later));
    }

    #[test]
    fn a_compacted_distribution_reports_and_merges_as_the_full_one() {
        let mut full = LatencyStats::default();
        for i in 0..10_000u64 {
            full.record(1_000 + (i * 7919) % 50_000);
        }
        let compact = full.clone().compacted();
        assert!(compact.hist.is_none() && !compact.buckets.is_empty());
        assert_eq!(
            compact.summary(&Percentiles::default()),
            full.summary(&Percentiles::default())
        );
        assert_eq!(compact.quantile_curve(), full.quantile_curve());
        let mut into_full = full.clone();
        into_full.merge(&full);
        let mut into_compact = full.clone();
        into_compact.merge(&compact);
        assert_eq!(
            into_compact.summary(&Percentiles::default()),
            into_full.summary(&Percentiles::default())
        );
        // Recording after compaction counts both.
        let mut more = full.clone().compacted();
        more.record(5);
        assert_eq!(more.count(), 10_001);
        assert_eq!(
            more.summary(&Percentiles::default()).map(|s| s.min_ns),
            Some(5)
        );
    }

    #[test]
    fn empty_has_no_summary() {
        assert!(LatencyStats::default()
            .summary(&Percentiles::default())
            .is_none());
    }
}
