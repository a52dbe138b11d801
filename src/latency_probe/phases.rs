//! The phases of a latency-under-load run, as values the control protocol carries for
//! `fperf mesh`: what a phase is, the plan a coordinator asks a server to run, and each
//! phase's figures that come back. No I/O; the run itself is `crate::under_load`'s.
//!
//! The figures come from another host, so [`impossible`] says why a report cannot be
//! true of the plan it answers, before anything is shown of it.

use std::time::Duration;

/// One phase of a run: what loads the path while the probes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PhaseKind {
    /// No load: the path's own round trip.
    Idle,
    /// TCP flows from the server to the client.
    Download,
    /// TCP flows from the client to the server.
    Upload,
    /// Both at once.
    Bidir,
}

impl PhaseKind {
    pub const ALL: [PhaseKind; 4] = [
        PhaseKind::Idle,
        PhaseKind::Download,
        PhaseKind::Upload,
        PhaseKind::Bidir,
    ];

    /// Its name in `--phases` and in every output.
    pub fn name(self) -> &'static str {
        match self {
            PhaseKind::Idle => "idle",
            PhaseKind::Download => "download",
            PhaseKind::Upload => "upload",
            PhaseKind::Bidir => "bidir",
        }
    }

    /// The phase of that name.
    pub fn from_name(name: &str) -> Option<PhaseKind> {
        PhaseKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether data goes from the client to the server.
    pub fn loads_up(self) -> bool {
        matches!(self, PhaseKind::Upload | PhaseKind::Bidir)
    }

    /// Whether data goes from the server to the client.
    pub fn loads_down(self) -> bool {
        matches!(self, PhaseKind::Download | PhaseKind::Bidir)
    }

    /// The streams of the phase's test with `flows` flows per loaded direction.
    pub fn streams(self, flows: u32) -> u32 {
        match self {
            PhaseKind::Bidir => flows.saturating_mul(2),
            _ => flows,
        }
    }
}

/// The most flows per direction (a bidir phase runs twice as many streams).
pub const MAX_FLOWS: u32 = 64;
/// The shortest and the longest phase.
pub const MIN_PHASE: Duration = Duration::from_millis(100);
pub const MAX_PHASE: Duration = Duration::from_secs(600);
/// The most probes one run sends: each is kept for the figures and the plot.
pub const MAX_PROBES: u64 = 1 << 20;
/// The shortest and the longest time between two probes.
pub const MIN_PROBE_INTERVAL: Duration = Duration::from_millis(1);
pub const MAX_PROBE_INTERVAL: Duration = Duration::from_millis(1000);
/// Most phases of a mesh's run: each kind once.
pub const MOST_PHASES: usize = PhaseKind::ALL.len();
/// The longest round trip a report may hold: no probe is waited for this long.
const MOST_RTT: Duration = Duration::from_secs(3600);
/// The most throughput a report may hold, in bits per second (a petabit).
const MOST_BITS_PER_SECOND: f64 = 1e15;

/// What a mesh coordinator asks a server to run towards another: the phases in order,
/// each kind at most once, the load's flows per direction and the probes' interval.
#[derive(Clone, Debug, PartialEq)]
pub struct PhasePlan {
    pub phases: Vec<(PhaseKind, Duration)>,
    pub flows: u32,
    pub probe_interval: Duration,
}

impl PhasePlan {
    /// An idle and a download phase, a second each, with 2 flows and a probe every
    /// 10 ms.
    #[cfg(test)]
    pub fn example() -> PhasePlan {
        PhasePlan {
            phases: vec![
                (PhaseKind::Idle, Duration::from_secs(1)),
                (PhaseKind::Download, Duration::from_secs(1)),
            ],
            flows: 2,
            probe_interval: Duration::from_millis(10),
        }
    }

    /// Why the plan cannot be run, if it cannot: a mesh reports each loaded phase's
    /// delay added to the idle one, so it needs an idle phase and a loaded one, each
    /// kind once.
    pub fn check(&self) -> Result<(), String> {
        let kinds: Vec<PhaseKind> = self.phases.iter().map(|(k, _)| *k).collect();
        if kinds.len() > MOST_PHASES
            || kinds
                .iter()
                .enumerate()
                .any(|(i, k)| kinds[..i].contains(k))
        {
            return Err("each phase (idle, download, upload, bidir) runs at most once".into());
        }
        if !kinds.contains(&PhaseKind::Idle) || kinds.iter().all(|&k| k == PhaseKind::Idle) {
            return Err(
                "the phases need an idle one, which the added delay is measured against, \
                 and a loaded one (download, upload or bidir)"
                    .into(),
            );
        }
        if let Some((kind, len)) = self
            .phases
            .iter()
            .find(|(_, len)| !(MIN_PHASE..=MAX_PHASE).contains(len))
        {
            return Err(format!(
                "a phase lasts {} to {} s, and {} lasts {} s",
                MIN_PHASE.as_secs_f64(),
                MAX_PHASE.as_secs(),
                kind.name(),
                len.as_secs_f64()
            ));
        }
        if !(1..=MAX_FLOWS).contains(&self.flows) {
            return Err(format!(
                "the load runs 1 to {MAX_FLOWS} flows per direction, not {}",
                self.flows
            ));
        }
        if !(MIN_PROBE_INTERVAL..=MAX_PROBE_INTERVAL).contains(&self.probe_interval) {
            return Err(format!(
                "the probes go every 1 to 1000 ms, not every {} ms",
                self.probe_interval.as_secs_f64() * 1000.0
            ));
        }
        let probes = self.total().as_nanos() / self.probe_interval.as_nanos().max(1);
        if probes > u128::from(MAX_PROBES) {
            return Err(format!(
                "the phases would send {probes} probes, at most {MAX_PROBES}"
            ));
        }
        Ok(())
    }

    /// The phases' lengths added up.
    pub fn total(&self) -> Duration {
        self.phases.iter().map(|(_, len)| *len).sum()
    }

    /// The most streams one phase's test runs.
    pub fn most_streams(&self) -> u32 {
        let streams = self.phases.iter().map(|(k, _)| k.streams(self.flows));
        streams.max().unwrap_or(0)
    }
}

/// A phase's probes' round trips, in ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttFigures {
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// What one phase measured, as a mesh server reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseReport {
    pub kind: PhaseKind,
    /// Of the probes that came back; none when none did.
    pub rtt: Option<RttFigures>,
    pub probes_sent: u64,
    pub probes_lost: u64,
    /// The phase's median round trip less the idle phase's.
    pub added_delay_ns: Option<i64>,
    /// Throughput client → server and server → client.
    pub up_bps: f64,
    pub down_bps: f64,
    /// Round trips per minute, from the same probes.
    pub rpm: Option<f64>,
}

impl PhaseReport {
    /// The share of the phase's probes lost, 0 to 1.
    pub fn loss(&self) -> f64 {
        if self.probes_sent == 0 {
            0.0
        } else {
            self.probes_lost as f64 / self.probes_sent as f64
        }
    }
}

/// Why `phases`, a server's report of running `plan`, cannot be true, if they cannot:
/// other phases than asked for, more probes lost than sent, round trips out of order,
/// an added delay that is not the medians' difference, throughput that is not a
/// number or runs the wrong way, an RPM that the round trips rule out.
pub fn impossible(plan: &PhasePlan, phases: &[PhaseReport]) -> Option<String> {
    let asked: Vec<PhaseKind> = plan.phases.iter().map(|(k, _)| *k).collect();
    let got: Vec<PhaseKind> = phases.iter().map(|p| p.kind).collect();
    if asked != got {
        let names = |kinds: &[PhaseKind]| -> Vec<&str> { kinds.iter().map(|k| k.name()).collect() };
        return Some(format!(
            "the phases {:?} for the phases {:?} asked for",
            names(&got),
            names(&asked)
        ));
    }
    let idle_p50 = phases
        .iter()
        .find(|p| p.kind == PhaseKind::Idle)
        .and_then(|p| p.rtt)
        .map(|r| r.p50_ns);
    phases
        .iter()
        .find_map(|p| impossible_phase(p, idle_p50).map(|why| format!("{}: {why}", p.kind.name())))
}

/// Why one phase's figures cannot be true, if they cannot.
fn impossible_phase(p: &PhaseReport, idle_p50: Option<u64>) -> Option<String> {
    if p.probes_sent > MAX_PROBES || p.probes_lost > p.probes_sent {
        return Some(format!(
            "{} of {} probes lost",
            p.probes_lost, p.probes_sent
        ));
    }
    if p.rtt.is_some() != (p.probes_lost < p.probes_sent) {
        return Some("round trips without probes that came back, or none with them".into());
    }
    if let Some(r) = p.rtt {
        let order = [r.min_ns, r.p50_ns, r.p90_ns, r.p99_ns, r.max_ns];
        let most = u64::try_from(MOST_RTT.as_nanos()).unwrap_or(u64::MAX);
        if order.windows(2).any(|w| w[0] > w[1]) || r.max_ns > most {
            return Some(format!(
                "round trips out of order or too long: {order:?} ns"
            ));
        }
    }
    let median_gap = p
        .rtt
        .zip(idle_p50)
        .map(|(r, idle)| i128::from(r.p50_ns) - i128::from(idle));
    if p.added_delay_ns.map(i128::from) != median_gap {
        return Some(format!(
            "an added delay of {:?} ns where the medians differ by {median_gap:?} ns",
            p.added_delay_ns
        ));
    }
    for (bps, loaded, way) in [
        (p.up_bps, p.kind.loads_up(), "up"),
        (p.down_bps, p.kind.loads_down(), "down"),
    ] {
        let possible = bps.is_finite()
            && (0.0..=MOST_BITS_PER_SECOND).contains(&bps)
            && (loaded || bps == 0.0);
        if !possible {
            return Some(format!("{bps} bit/s {way}"));
        }
    }
    match (p.rpm, p.rtt) {
        // No RPM of round trips that all took no time.
        (None, None) => None,
        (None, Some(r)) if r.max_ns == 0 => None,
        (Some(rpm), Some(r)) => {
            // The trimmed mean lies between the least and the most round trip.
            let per_minute = |ns: u64| 60e9 / ns as f64;
            let (low, high) = (per_minute(r.max_ns), per_minute(r.min_ns));
            let slack = 1e-9 * high.min(f64::MAX);
            let possible = rpm.is_finite() && rpm >= low - slack && rpm <= high + slack;
            (!possible).then(|| format!("an RPM of {rpm} from round trips of {r:?}"))
        }
        (rpm, _) => Some(format!(
            "an RPM of {rpm:?} without round trips, or none with them"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> PhaseReport {
        PhaseReport {
            kind: PhaseKind::Idle,
            rtt: Some(RttFigures {
                min_ns: 50_000,
                p50_ns: 60_000,
                p90_ns: 70_000,
                p99_ns: 80_000,
                max_ns: 90_000,
            }),
            probes_sent: 100,
            probes_lost: 0,
            added_delay_ns: Some(0),
            up_bps: 0.0,
            down_bps: 0.0,
            rpm: Some(60e9 / 61_000.0),
        }
    }

    fn download() -> PhaseReport {
        PhaseReport {
            kind: PhaseKind::Download,
            rtt: Some(RttFigures {
                min_ns: 1_000_000,
                p50_ns: 2_060_000,
                p90_ns: 3_000_000,
                p99_ns: 4_000_000,
                max_ns: 5_000_000,
            }),
            probes_sent: 100,
            probes_lost: 1,
            added_delay_ns: Some(2_000_000),
            up_bps: 0.0,
            down_bps: 9.4e9,
            rpm: Some(25_000.0),
        }
    }

    #[test]
    fn a_plan_runs_each_kind_once_with_an_idle_and_a_loaded_phase() {
        assert_eq!(PhasePlan::example().check(), Ok(()));
        assert_eq!(PhasePlan::example().most_streams(), 2);
        let with = |phases: &[(PhaseKind, u64)]| PhasePlan {
            phases: phases
                .iter()
                .map(|&(k, ms)| (k, Duration::from_millis(ms)))
                .collect(),
            ..PhasePlan::example()
        };
        let bidir = with(&[(PhaseKind::Idle, 500), (PhaseKind::Bidir, 500)]);
        assert_eq!(bidir.most_streams(), 4);
        for refused in [
            with(&[(PhaseKind::Idle, 500), (PhaseKind::Idle, 500)]),
            with(&[(PhaseKind::Download, 500)]),
            with(&[(PhaseKind::Idle, 500)]),
            with(&[(PhaseKind::Idle, 50), (PhaseKind::Upload, 500)]),
            PhasePlan {
                flows: 0,
                ..PhasePlan::example()
            },
            PhasePlan {
                probe_interval: Duration::ZERO,
                ..PhasePlan::example()
            },
        ] {
            assert!(refused.check().is_err(), "{refused:?}");
        }
    }

    #[test]
    fn figures_that_cannot_be_true_are_refused() {
        assert_eq!(
            impossible(&PhasePlan::example(), &[idle(), download()]),
            None
        );
        assert!(
            impossible(&PhasePlan::example(), &[idle()]).is_some(),
            "a phase missing"
        );
        assert!(
            impossible(&PhasePlan::example(), &[download(), idle()]).is_some(),
            "order"
        );
        let broken: [fn(&mut PhaseReport); 8] = [
            |p| p.probes_lost = 101,
            |p| p.rtt = None,
            |p| {
                if let Some(r) = &mut p.rtt {
                    r.p90_ns = 1;
                }
            },
            |p| p.added_delay_ns = Some(7),
            |p| p.down_bps = f64::NAN,
            |p| p.up_bps = 1e9,
            |p| p.rpm = Some(1e12),
            |p| p.rpm = None,
        ];
        for (i, breaking) in broken.iter().enumerate() {
            let mut bad = download();
            breaking(&mut bad);
            assert!(
                impossible(&PhasePlan::example(), &[idle(), bad]).is_some(),
                "case {i}"
            );
        }
        assert!((download().loss() - 0.01).abs() < 1e-12);
    }
}
