//! Each phase's figures from the probes and the load's results: the probes' round trip
//! and loss, the delay the load added, RPM, and one-way delays where the two clocks are
//! known to agree well enough.

use super::prober::ProbeRecord;
use super::spec::PhaseKind;
use crate::latency_probe::phases::{PhaseReport, RttFigures};
use crate::percentiles::Percentiles;
use crate::stats::{LatencyStats, LatencySummary};
use std::time::Duration;

/// The revision of the IETF draft whose RPM the figures follow.
pub const RPM_DRAFT: &str = "draft-ietf-ippm-responsiveness-08";

/// The share of round trips the draft's trimmed mean keeps: the largest 5% are left out.
const TRIMMED_MEAN_KEEPS: f64 = 0.95;

/// One-way delays are shown only where the clocks' offset is known this many times
/// better than the delays themselves.
const ONE_WAY_MARGIN: u64 = 10;

/// What was measured of one phase.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseFigures {
    pub kind: PhaseKind,
    /// When the phase's load ran (the whole phase when idle), since the run began:
    /// the probes sent within it are the phase's.
    pub window: (Duration, Duration),
    /// The round trips of the phase's probes that came back.
    pub rtt: Option<LatencySummary>,
    /// Probes sent within the window, and of them, those that never came back.
    pub sent: u64,
    pub lost: u64,
    /// The delay the load added: this phase's median round trip less the idle phase's,
    /// in ns (absent without an idle phase).
    pub added_delay_ns: Option<i64>,
    /// Throughput client → server and server → client, in bits per second, as each
    /// receiving end counted it over its own time.
    pub up_bps: f64,
    pub down_bps: f64,
    /// Round trips per minute ([`RPM_DRAFT`]) from the same probes.
    pub rpm: Option<f64>,
    /// The round trip TCP measured on the loaded connections (`TCP_INFO`'s smoothed
    /// RTT of the sending ends, sampled as the phase ran).
    pub loaded_rtt: Option<LatencySummary>,
    /// Median one-way delays, where the clocks are known to agree well enough.
    pub one_way: Option<OneWay>,
}

impl PhaseFigures {
    /// The share of the phase's probes lost, 0 to 1.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.lost as f64 / self.sent as f64
        }
    }

    /// The probes' median round trip, in ns.
    pub fn p50_ns(&self) -> Option<u64> {
        self.rtt.as_ref().and_then(|r| r.at(50.0))
    }

    /// The figures a mesh server reports of the phase.
    pub fn report(&self) -> PhaseReport {
        let rtt = self.rtt.as_ref().map(|r| {
            let at = |p: f64| r.at(p).unwrap_or(r.max_ns).clamp(r.min_ns, r.max_ns);
            RttFigures {
                min_ns: r.min_ns,
                p50_ns: at(50.0),
                p90_ns: at(90.0),
                p99_ns: at(99.0),
                max_ns: r.max_ns,
            }
        });
        PhaseReport {
            kind: self.kind,
            rtt,
            probes_sent: self.sent,
            probes_lost: self.lost,
            added_delay_ns: self.added_delay_ns,
            // No flows that way add up to -0.0, which reads as a sign.
            up_bps: self.up_bps + 0.0,
            down_bps: self.down_bps + 0.0,
            rpm: self.rpm,
        }
    }
}

/// Median one-way delays of a phase's probes, in ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OneWay {
    pub up_ns: u64,
    pub down_ns: u64,
}

/// How the two clocks compare: the server's clock less the client's, estimated as NTP
/// does from the probe with the least round trip, and how far off that estimate may be
/// (half that probe's time on the network). On one host the clocks are one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockOffset {
    pub offset_ns: i64,
    pub bound_ns: u64,
    pub same_host: bool,
}

impl ClockOffset {
    /// The offset the probes' stamps show; `same_host` when both ends are this host.
    pub fn estimate(probes: &[ProbeRecord], same_host: bool) -> Option<ClockOffset> {
        if same_host {
            return Some(ClockOffset {
                offset_ns: 0,
                bound_ns: 0,
                same_host,
            });
        }
        let best = probes
            .iter()
            .filter_map(|p| p.rtt.zip(p.stamps))
            .min_by_key(|(rtt, _)| *rtt)?;
        let [t1, t2, t3, t4] = best.1.map(i128::from);
        let offset = ((t2 - t1) + (t3 - t4)) / 2;
        let on_network = (t4 - t1) - (t3 - t2);
        Some(ClockOffset {
            offset_ns: i64::try_from(offset).ok()?,
            bound_ns: u64::try_from(on_network.max(0) / 2).ok()?,
            same_host,
        })
    }

    /// The median one-way delays of `probes` by these clocks, if the offset is known
    /// well enough for them.
    fn one_way(&self, probes: &[&ProbeRecord]) -> Option<OneWay> {
        let offset = i128::from(self.offset_ns);
        let (mut up, mut down): (Vec<i128>, Vec<i128>) = probes
            .iter()
            .filter_map(|p| p.stamps)
            .map(|stamps| {
                let [t1, t2, t3, t4] = stamps.map(i128::from);
                (t2 - t1 - offset, t4 - t3 + offset)
            })
            .unzip();
        let median = |v: &mut Vec<i128>| {
            v.sort_unstable();
            v.get(v.len() / 2)
                .and_then(|&m| u64::try_from(m.max(0)).ok())
        };
        let (up_ns, down_ns) = (median(&mut up)?, median(&mut down)?);
        let known =
            self.same_host || self.bound_ns.saturating_mul(ONE_WAY_MARGIN) <= up_ns.min(down_ns);
        known.then_some(OneWay { up_ns, down_ns })
    }
}

/// What the load's test of a phase measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadFigures {
    pub up_bps: f64,
    pub down_bps: f64,
    /// The sending ends' smoothed round trips, in ns, as sampled.
    pub tcp_rtt_ns: Vec<u64>,
}

/// The figures of a phase of `kind` whose load ran within `window`, from every probe
/// of the run.
pub fn phase_figures(
    kind: PhaseKind,
    window: (Duration, Duration),
    probes: &[ProbeRecord],
    load: &LoadFigures,
    clocks: Option<&ClockOffset>,
) -> PhaseFigures {
    let mine: Vec<&ProbeRecord> = probes
        .iter()
        .filter(|p| p.sent >= window.0 && p.sent < window.1)
        .collect();
    let mut rtts: Vec<u64> = mine
        .iter()
        .filter_map(|p| p.rtt)
        .map(crate::results::nanos)
        .collect();
    let sent = mine.len() as u64;
    let lost = sent - rtts.len() as u64;
    PhaseFigures {
        kind,
        window,
        rtt: summary(&rtts),
        sent,
        lost,
        added_delay_ns: None,
        up_bps: load.up_bps,
        down_bps: load.down_bps,
        rpm: rpm(&mut rtts),
        loaded_rtt: summary(&load.tcp_rtt_ns),
        one_way: clocks.and_then(|c| c.one_way(&mine)),
    }
}

/// Sets each phase's added delay against the first idle phase's median.
pub fn add_delays(phases: &mut [PhaseFigures]) {
    let idle = phases
        .iter()
        .find(|p| p.kind == PhaseKind::Idle)
        .and_then(PhaseFigures::p50_ns);
    for phase in phases {
        phase.added_delay_ns = idle.zip(phase.p50_ns()).map(|(idle, p50)| {
            i64::try_from(i128::from(p50) - i128::from(idle)).unwrap_or(i64::MAX)
        });
    }
}

/// The distribution of `samples_ns` at the default percentiles.
fn summary(samples_ns: &[u64]) -> Option<LatencySummary> {
    let mut stats = LatencyStats::preallocated();
    for &ns in samples_ns {
        stats.record(ns);
    }
    stats.summary(&Percentiles::default())
}

/// Round trips per minute as the draft aggregates them: 60000 over the single-sided
/// 95% trimmed mean of the round trips in ms (the largest 5% left out). With one kind
/// of probe every term of the draft's formula is this one trimmed mean.
pub fn rpm(rtts_ns: &mut [u64]) -> Option<f64> {
    if rtts_ns.is_empty() {
        return None;
    }
    rtts_ns.sort_unstable();
    let keep =
        ((rtts_ns.len() as f64 * TRIMMED_MEAN_KEEPS).ceil() as usize).clamp(1, rtts_ns.len());
    let kept = &rtts_ns[..keep];
    let mean_ms = kept.iter().map(|&ns| ns as f64).sum::<f64>() / kept.len() as f64 / 1e6;
    (mean_ms > 0.0).then(|| 60_000.0 / mean_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(sent_ms: u64, rtt_ms: Option<u64>) -> ProbeRecord {
        ProbeRecord {
            sent: Duration::from_millis(sent_ms),
            rtt: rtt_ms.map(Duration::from_millis),
            stamps: None,
        }
    }

    #[test]
    fn rpm_is_sixty_thousand_over_the_trimmed_mean_in_ms() {
        // 19 probes of 10 ms and one of 1 s: the trimmed mean leaves the slow one out.
        let mut rtts = vec![10_000_000u64; 19];
        rtts.push(1_000_000_000);
        let rpm = rpm(&mut rtts).expect("some");
        assert!((rpm - 6000.0).abs() < 1e-6, "{rpm}");
        assert_eq!(super::rpm(&mut []), None);
    }

    #[test]
    fn probes_go_to_the_phase_they_were_sent_in_and_lost_ones_are_counted() {
        let probes: Vec<ProbeRecord> = (0..100)
            .map(|i| probe(i * 10, (i % 20 != 0).then_some(if i < 50 { 1 } else { 41 })))
            .collect();
        let load = LoadFigures::default();
        let window = |a, b| (Duration::from_millis(a), Duration::from_millis(b));
        let mut phases = vec![
            phase_figures(PhaseKind::Idle, window(0, 500), &probes, &load, None),
            phase_figures(PhaseKind::Upload, window(500, 1000), &probes, &load, None),
        ];
        add_delays(&mut phases);
        assert_eq!((phases[0].sent, phases[0].lost), (50, 3));
        assert_eq!((phases[1].sent, phases[1].lost), (50, 2));
        let added = phases[1].added_delay_ns.expect("idle phase");
        assert!((39_900_000..=40_100_000).contains(&added), "{added}");
        assert!((phases[1].loss() - 0.04).abs() < 1e-9);
    }

    #[test]
    fn one_way_delays_need_clocks_known_better_than_the_delays() {
        // The server's clock is 1 s ahead; 1 ms each way at best, 30 ms up when loaded.
        let at = |t1: u64, up: u64, down: u64| ProbeRecord {
            sent: Duration::ZERO,
            rtt: Some(Duration::from_nanos(up + down)),
            stamps: Some([
                t1,
                t1 + up + 1_000_000_000,
                t1 + up + 1_000_000_000,
                t1 + up + down,
            ]),
        };
        let probes = [at(0, 1_000_000, 1_000_000), at(10, 30_000_000, 1_000_000)];
        let clocks = ClockOffset::estimate(&probes, false).expect("stamps");
        assert_eq!(clocks.offset_ns, 1_000_000_000);
        assert_eq!(clocks.bound_ns, 1_000_000);
        assert_eq!(clocks.one_way(&[&probes[0]]), None);
        let loaded_down = ProbeRecord {
            stamps: Some([0, 1_030_000_000, 1_030_000_000, 60_000_000]),
            ..probes[1]
        };
        assert_eq!(
            clocks.one_way(&[&loaded_down]),
            Some(OneWay {
                up_ns: 30_000_000,
                down_ns: 30_000_000
            })
        );
    }
}
