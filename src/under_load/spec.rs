//! What a `--under-load` run is asked to do: its phases and their lengths, the load's
//! flows and the probes' pace, each option declared once for every front end.

use crate::options::{Iperf3, Mesh, Takes, TestOption};
use std::time::Duration;

use crate::latency_probe::phases::PhasePlan;
pub use crate::latency_probe::phases::{PhaseKind, MAX_FLOWS, MAX_PHASE, MAX_PROBES};

/// A phase's length unless `--phase-time` or `--phases` says otherwise.
pub const DEFAULT_PHASE: Duration = Duration::from_secs(5);
/// The load's TCP flows per direction unless `--load-flows` says otherwise.
pub const DEFAULT_FLOWS: u32 = 4;
/// The probes' interval unless `--probe-interval` says otherwise.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(10);

/// A `--under-load` run's own options, as given.
#[derive(Clone, Debug, PartialEq)]
pub struct UnderLoadSpec {
    /// `--under-load`: measure latency under load instead of one test.
    pub enabled: bool,
    /// `--phases`: the phases in order, each with its own length where given.
    pub phases: Vec<(PhaseKind, Option<Duration>)>,
    /// `--phase-time`: each phase's length where `--phases` gives none.
    pub phase_time: Duration,
    /// `--load-flows`: TCP flows per loaded direction.
    pub flows: u32,
    /// `--probe-interval`: the time between two probes.
    pub probe_interval: Duration,
}

impl Default for UnderLoadSpec {
    fn default() -> Self {
        UnderLoadSpec {
            enabled: false,
            phases: PhaseKind::ALL.iter().map(|&k| (k, None)).collect(),
            phase_time: DEFAULT_PHASE,
            flows: DEFAULT_FLOWS,
            probe_interval: DEFAULT_PROBE_INTERVAL,
        }
    }
}

impl UnderLoadSpec {
    /// The phases in order, each with its length.
    pub fn phases(&self) -> Vec<(PhaseKind, Duration)> {
        self.phases
            .iter()
            .map(|&(kind, len)| (kind, len.unwrap_or(self.phase_time)))
            .collect()
    }

    /// The phases' lengths added up.
    pub fn total(&self) -> Duration {
        self.phases().iter().map(|(_, len)| *len).sum()
    }

    /// The run as a mesh coordinator asks a server for it.
    pub fn plan(&self) -> PhasePlan {
        PhasePlan {
            phases: self.phases(),
            flows: self.flows,
            probe_interval: self.probe_interval,
        }
    }

    /// The run a mesh coordinator asked for.
    pub fn from_plan(plan: &PhasePlan) -> UnderLoadSpec {
        UnderLoadSpec {
            enabled: true,
            phases: plan.phases.iter().map(|&(k, len)| (k, Some(len))).collect(),
            phase_time: DEFAULT_PHASE,
            flows: plan.flows,
            probe_interval: plan.probe_interval,
        }
    }

    /// Refuses a run that would keep more probes than [`MAX_PROBES`].
    pub fn check(&self) -> Result<(), String> {
        let probes = self.total().as_nanos() / self.probe_interval.as_nanos().max(1);
        if probes > u128::from(MAX_PROBES) {
            return Err(format!(
                "--under-load would send {probes} probes (the phases' {} s at one every {} ms); \
                 at most {MAX_PROBES}: shorten the phases or lengthen --probe-interval",
                self.total().as_secs_f64(),
                self.probe_interval.as_secs_f64() * 1000.0
            ));
        }
        Ok(())
    }
}

/// `--phases`: `idle,download,upload,bidir`, each name with an optional `:SECS`.
fn parse_phases(text: &str) -> Result<Vec<(PhaseKind, Option<Duration>)>, String> {
    let mut phases = Vec::new();
    for item in text.split(',') {
        let (name, secs) = match item.split_once(':') {
            Some((name, secs)) => (name, Some(secs)),
            None => (item, None),
        };
        let kind = PhaseKind::from_name(name.trim()).ok_or_else(|| {
            format!("unknown phase {name:?}: the phases are idle, download, upload and bidir")
        })?;
        let len = secs.map(phase_length).transpose()?;
        if phases.len() >= 16 {
            return Err("at most 16 phases".into());
        }
        phases.push((kind, len));
    }
    Ok(phases)
}

/// A phase's length: seconds, or a number with a unit (as --time's).
fn phase_length(text: &str) -> Result<Duration, String> {
    let secs = crate::units::parse_seconds(text)?;
    let len = Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())?;
    if len < Duration::from_millis(100) || len > MAX_PHASE {
        return Err(format!(
            "a phase lasts 0.1 to {} s, not {secs} s",
            MAX_PHASE.as_secs()
        ));
    }
    Ok(len)
}

/// The options of `--under-load`, declared once for the command line, `fperf mesh`
/// and the exporter's probe query.
pub static OPTIONS: [TestOption<UnderLoadSpec>; 5] = [
    TestOption {
        id: "under_load",
        long: "under-load",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[
            "sweep", "mprtt", "echo", "crr", "reverse", "bidir", "udp", "rdma",
        ],
        help: "Measure latency under load (bufferbloat): how much the network's queues add \
               to the round trip when the link is busy.\n\n\
               UDP probes (one every --probe-interval) go to the server and back on a \
               connection of their own through phases: idle, download (TCP flows from the \
               server), upload (to the server) and bidir (both), each 5 s (--phases, \
               --phase-time), with --load-flows flows per direction that take the usual \
               TCP options (-C, --fq-rate, --tos). Each phase reports the probes' round \
               trip (min, p50, p90, p99, max), their loss, the throughput each way, the \
               delay added to the idle phase's p50, and RPM (round trips per minute, as in \
               the IETF draft \"Responsiveness under Working Conditions\"); also the round \
               trip TCP measured on the loaded connections. An older server that cannot \
               echo the probes refuses the run before it starts.",
        mesh: Mesh::Help(
            "Measure latency under load between each pair: the sending host's server runs \
             the phases towards the receiving host's, one pair at a time, and the matrix is \
             the delay each loaded phase added to the idle round trip, in ms.\n\n\
             It takes the same options as fperf -c HOST --under-load (--phases, \
             --phase-time, --load-flows, --probe-interval) and TCP's (-C, --fq-rate); the \
             phases need an idle one and each phase runs once. A server older than this \
             coordinator cannot run them: its pairs fail, naming both versions.",
        ),
        probe: Some("under_load"),
        iperf3: Iperf3::No,
        what: "0 or 1",
        set: |spec, text| {
            spec.enabled = match text {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => return Err("0 or 1".into()),
            };
            Ok(())
        },
    },
    TestOption {
        id: "phases",
        long: "phases",
        short: None,
        alias: None,
        takes: Takes::Value("LIST"),
        choices: &[],
        conflicts: &[],
        help: "With --under-load: the phases, in order [default: idle,download,upload,bidir].\n\n\
               Each is idle, download, upload or bidir, with its own length after a colon \
               if it differs from --phase-time's (e.g. idle:2,download:10). The added delay \
               needs an idle phase.",
        mesh: Mesh::AsClient,
        probe: Some("phases"),
        iperf3: Iperf3::No,
        what: "",
        set: |spec, text| {
            spec.phases = parse_phases(text)?;
            Ok(())
        },
    },
    TestOption {
        id: "phase_time",
        long: "phase-time",
        short: None,
        alias: None,
        takes: Takes::Value("SECS"),
        choices: &[],
        conflicts: &[],
        help: "With --under-load: each phase's length [default: 5 s] (or with a unit: \
               500ms, 2s, 1m).",
        mesh: Mesh::AsClient,
        probe: Some("phase_time"),
        iperf3: Iperf3::No,
        what: "a number of seconds",
        set: |spec, text| {
            spec.phase_time = phase_length(text)?;
            Ok(())
        },
    },
    TestOption {
        id: "load_flows",
        long: "load-flows",
        short: None,
        alias: None,
        takes: Takes::Value("N"),
        choices: &[],
        conflicts: &[],
        help: "With --under-load: TCP flows per loaded direction [default: 4] (a bidir \
               phase runs N each way).",
        mesh: Mesh::AsClient,
        probe: Some("load_flows"),
        iperf3: Iperf3::No,
        what: "",
        set: |spec, text| {
            let n = crate::options::whole_number(text, 1, i64::from(MAX_FLOWS))?;
            spec.flows = u32::try_from(n).map_err(|e| e.to_string())?;
            Ok(())
        },
    },
    TestOption {
        id: "probe_interval",
        long: "probe-interval",
        short: None,
        alias: None,
        takes: Takes::Value("MS"),
        choices: &[],
        conflicts: &[],
        help: "With --under-load: the time between two latency probes, in ms, 1 to 1000 \
               [default: 10].",
        mesh: Mesh::AsClient,
        probe: Some("probe_interval"),
        iperf3: Iperf3::No,
        what: "",
        set: |spec, text| {
            let ms = crate::options::whole_number(text, 1, 1000)?;
            spec.probe_interval = Duration::from_millis(ms.unsigned_abs());
            Ok(())
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn given(id: &str, text: &str) -> Result<UnderLoadSpec, String> {
        let mut spec = UnderLoadSpec::default();
        let option = OPTIONS.iter().find(|o| o.id == id).expect("declared");
        (option.set)(&mut spec, text)?;
        Ok(spec)
    }

    #[test]
    fn phases_take_names_and_their_own_lengths() {
        let spec = given("phases", "idle:2,download,bidir:500ms").expect("valid");
        assert_eq!(
            spec.phases(),
            [
                (PhaseKind::Idle, Duration::from_secs(2)),
                (PhaseKind::Download, DEFAULT_PHASE),
                (PhaseKind::Bidir, Duration::from_millis(500)),
            ]
        );
        assert!(given("phases", "idle,sideways").is_err());
        assert!(given("phases", "idle:0").is_err());
        assert_eq!(UnderLoadSpec::default().total(), Duration::from_secs(20));
    }

    #[test]
    fn too_many_probes_are_refused() {
        let mut spec = given("probe_interval", "1").expect("valid");
        spec.phase_time = MAX_PHASE;
        assert!(spec.check().is_err());
        assert!(UnderLoadSpec::default().check().is_ok());
        assert!(given("probe_interval", "0").is_err());
        assert!(given("load_flows", "65").is_err());
    }
}
