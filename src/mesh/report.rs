//! A mesh's figures: the N×N matrix (senders as rows, receivers as columns), its
//! outliers, and the matrix as text, JSON and CSV.
//!
//! Under load, a matrix of the delay each loaded phase added; the headline one (the
//! JSON's `matrix`, the heatmap and the outliers) is the bidir phase's where it ran,
//! else download's, else upload's.

use super::{MeshConfig, PairFigures, PairResult};
use crate::latency_probe::phases::{PhaseKind, PhaseReport};
use crate::results::SideResult;
use serde_json::{json, Value};
use std::fmt::Write;
use std::time::Duration;

/// Two directions of a pair that differ by more than this share are an outlier.
pub const ASYMMETRY: f64 = 0.2;
/// An added delay stands out only by at least this much, in ns: below a millisecond,
/// the differences between idle paths are noise.
const ADDED_DELAY_FLOOR: f64 = 1e6;

/// What a mesh's matrix holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatrixKind {
    /// The bits per second the receivers received.
    Received,
    /// The senders' median round trip, in ns (`-r`, `--echo`).
    RoundTrip,
    /// The delay a phase's load added to the idle round trip, in ns (`--under-load`).
    AddedDelay(PhaseKind),
}

/// A pair that stands out, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Outlier {
    pub from: usize,
    pub to: usize,
    pub reason: String,
}

/// The figures of a whole mesh.
#[derive(Debug)]
pub struct MeshReport {
    pub hosts: Vec<String>,
    pub kind: MatrixKind,
    pub rounds: usize,
    /// Each test's length (under load, all its phases').
    pub test_time: Duration,
    /// The whole mesh's wall time.
    pub elapsed: Duration,
    pub pairs: Vec<PairResult>,
    /// Per sender and receiver: received bit/s, the median round trip in ns, or the
    /// headline phase's added delay in ns.
    pub matrix: Vec<Vec<Option<f64>>>,
    /// Under load: each loaded phase's added delays, in ns, in the phases' order.
    pub phase_matrices: Vec<(PhaseKind, Vec<Vec<Option<f64>>>)>,
    pub outliers: Vec<Outlier>,
}

impl MeshReport {
    pub(super) fn new(
        config: &MeshConfig,
        rounds: usize,
        pairs: Vec<PairResult>,
        elapsed: Duration,
    ) -> MeshReport {
        let n = config.hosts.len();
        let loaded: Vec<PhaseKind> = config
            .under_load
            .iter()
            .flat_map(|plan| {
                plan.phases
                    .iter()
                    .map(|(kind, _)| *kind)
                    .filter(|&kind| kind != PhaseKind::Idle)
            })
            .collect();
        let headline = [PhaseKind::Bidir, PhaseKind::Download, PhaseKind::Upload]
            .into_iter()
            .find(|kind| loaded.contains(kind));
        let kind = match headline {
            Some(phase) => MatrixKind::AddedDelay(phase),
            None if config.settings.workload.mprtt() => MatrixKind::RoundTrip,
            None => MatrixKind::Received,
        };
        let matrix_of = |cell: &dyn Fn(&PairFigures) -> Option<f64>| {
            let mut matrix = vec![vec![None; n]; n];
            for pair in &pairs {
                if let Ok(figures) = &pair.outcome {
                    matrix[pair.from][pair.to] = cell(figures);
                }
            }
            matrix
        };
        let matrix = matrix_of(&|figures| value(kind, figures));
        let phase_matrices = loaded
            .iter()
            .map(|&phase| (phase, matrix_of(&|figures| added_delay(phase, figures))))
            .collect();
        let test_time = match &config.under_load {
            Some(plan) => plan.total(),
            None => Duration::from_millis(config.settings.time_ms.unwrap_or(0)),
        };
        let mut report = MeshReport {
            hosts: config.hosts.iter().map(|h| h.name.clone()).collect(),
            kind,
            rounds,
            test_time,
            elapsed,
            pairs,
            matrix,
            phase_matrices,
            outliers: Vec::new(),
        };
        report.outliers = report.find_outliers(config.outlier_below);
        report
    }

    /// Failed pairs, pairs off the median by more than `share`, and the worse
    /// direction of pairs whose two directions differ by more than [`ASYMMETRY`].
    fn find_outliers(&self, share: f64) -> Vec<Outlier> {
        let mut outliers = Vec::new();
        for pair in &self.pairs {
            if let Err(why) = &pair.outcome {
                outliers.push(Outlier {
                    from: pair.from,
                    to: pair.to,
                    reason: format!("failed: {why}"),
                });
            }
        }
        let mut values: Vec<f64> = self.matrix.iter().flatten().flatten().copied().collect();
        values.sort_by(f64::total_cmp);
        let Some(&median) = values.get(values.len() / 2) else {
            return outliers;
        };
        let n = self.hosts.len();
        let cell = |a: usize, b: usize| self.matrix[a][b];
        for (from, to) in (0..n).flat_map(|a| (0..n).map(move |b| (a, b))) {
            let Some(v) = cell(from, to) else { continue };
            let floor = self.outlier_floor();
            let off_median = if self.lower_is_better() {
                (v * share > median && v - median >= floor).then(|| {
                    format!(
                        "{} is above the median {} over {share}",
                        self.figure(v),
                        self.figure(median)
                    )
                })
            } else {
                (v < median * share).then(|| {
                    format!(
                        "{} is below {share} of the median {}",
                        self.figure(v),
                        self.figure(median)
                    )
                })
            };
            // The worse of two directions that differ by more than ASYMMETRY.
            let asymmetric = cell(to, from).and_then(|back| {
                let (low, high) = (v.min(back), v.max(back));
                let worse = if self.lower_is_better() {
                    v > back
                } else {
                    v < back
                };
                let apart = high > 0.0 && (high - low) / high > ASYMMETRY && high - low >= floor;
                (apart && worse).then(|| {
                    format!(
                        "{} is {:.0}% off the other direction's {}",
                        self.figure(v),
                        100.0 * (high - low) / high,
                        self.figure(back)
                    )
                })
            });
            if let Some(reason) = off_median.or(asymmetric) {
                outliers.push(Outlier { from, to, reason });
            }
        }
        outliers.sort_by_key(|o| (o.from, o.to));
        outliers
    }

    /// Whether the lower a cell, the better: round trips and delays.
    pub fn lower_is_better(&self) -> bool {
        self.kind != MatrixKind::Received
    }

    /// How much a cell must stand out by to be an outlier, in its own unit.
    fn outlier_floor(&self) -> f64 {
        match self.kind {
            MatrixKind::AddedDelay(_) => ADDED_DELAY_FLOOR,
            _ => 0.0,
        }
    }

    /// The unit of the matrix's cells in text.
    pub fn unit(&self) -> &'static str {
        match self.kind {
            MatrixKind::Received => "Gbit/s",
            MatrixKind::RoundTrip => "us",
            MatrixKind::AddedDelay(_) => "ms",
        }
    }

    /// A cell's value in the text's unit.
    pub fn scaled(&self, v: f64) -> f64 {
        match self.kind {
            MatrixKind::Received => v / 1e9,
            MatrixKind::RoundTrip => v / 1e3,
            MatrixKind::AddedDelay(_) => v / 1e6,
        }
    }

    /// What the matrix holds, with its unit, for titles.
    pub fn what(&self) -> String {
        match self.kind {
            MatrixKind::Received => "received bandwidth (Gbit/s)".into(),
            MatrixKind::RoundTrip => "median round trip (us)".into(),
            MatrixKind::AddedDelay(phase) => {
                format!("delay added under {} load (ms)", phase.name())
            }
        }
    }

    /// A value with its unit, for messages.
    fn figure(&self, v: f64) -> String {
        format!("{:.2} {}", self.scaled(v), self.unit())
    }

    /// The human report: the matrix (under load, each loaded phase's), then the
    /// outliers.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let how = if self.phase_matrices.is_empty() {
            format!(
                "in {} rounds of {:.1} s",
                self.rounds,
                self.test_time.as_secs_f64()
            )
        } else {
            format!(
                "one at a time, {:.1} s of phases each",
                self.test_time.as_secs_f64()
            )
        };
        let tables: Vec<(String, &Vec<Vec<Option<f64>>>)> = if self.phase_matrices.is_empty() {
            let what = match self.kind {
                MatrixKind::RoundTrip => "Median round trip (us)",
                _ => "Received (Gbit/s)",
            };
            vec![(what.to_owned(), &self.matrix)]
        } else {
            self.phase_matrices
                .iter()
                .map(|(phase, matrix)| {
                    (
                        format!("Delay added under {} load (ms)", phase.name()),
                        matrix,
                    )
                })
                .collect()
        };
        for (what, matrix) in tables {
            let _ = writeln!(
                out,
                "{what}, senders as rows, receivers as columns; {} pairs {how}, {:.1} s in all",
                self.pairs.len(),
                self.elapsed.as_secs_f64()
            );
            self.write_matrix(&mut out, matrix);
        }
        if !self.outliers.is_empty() {
            let _ = writeln!(out, "Outliers:");
            for o in &self.outliers {
                let _ = writeln!(
                    out,
                    "  {} -> {}: {}",
                    self.hosts[o.from], self.hosts[o.to], o.reason
                );
            }
        }
        out
    }

    /// `matrix` as text, a row per sender.
    fn write_matrix(&self, out: &mut String, matrix: &[Vec<Option<f64>>]) {
        let width = self.hosts.iter().map(String::len).max().unwrap_or(0).max(8);
        let _ = write!(out, "{:width$}", "");
        for host in &self.hosts {
            let _ = write!(out, "  {host:>width$}");
        }
        let _ = writeln!(out);
        for (from, row) in matrix.iter().enumerate() {
            let _ = write!(out, "{:width$}", self.hosts[from]);
            for (to, cell) in row.iter().enumerate() {
                let text = match cell {
                    _ if from == to => "-".to_owned(),
                    Some(v) => format!("{:.2}", self.scaled(*v)),
                    None if self.failed(from, to) => "failed".to_owned(),
                    None => String::new(),
                };
                let _ = write!(out, "  {text:>width$}");
            }
            let _ = writeln!(out);
        }
    }

    fn failed(&self, from: usize, to: usize) -> bool {
        self.pairs
            .iter()
            .any(|p| p.from == from && p.to == to && p.outcome.is_err())
    }

    /// The JSON document: `hosts`, `matrix` (received bit/s, or the median round trip in
    /// ns; `null` on the diagonal and for pairs not measured), `pairs` (each one's
    /// figures at both ends, or its error) and `outliers`.
    pub fn json(&self) -> Value {
        let pairs: Vec<Value> = self
            .pairs
            .iter()
            .map(|p| {
                let mut doc = json!({
                    "from": self.hosts[p.from],
                    "to": self.hosts[p.to],
                });
                match &p.outcome {
                    Ok(PairFigures::Test { client, server }) => {
                        doc["client"] = json!(client);
                        doc["server"] = json!(server);
                    }
                    Ok(PairFigures::UnderLoad(phases)) => {
                        doc["phases"] = phases.iter().map(phase_json).collect();
                    }
                    Err(why) => doc["error"] = json!(why),
                }
                doc
            })
            .collect();
        let outliers: Vec<Value> = self
            .outliers
            .iter()
            .map(
                |o| json!({"from": self.hosts[o.from], "to": self.hosts[o.to], "reason": o.reason}),
            )
            .collect();
        let unit = match self.kind {
            MatrixKind::Received => "bit/s (received)".to_owned(),
            MatrixKind::RoundTrip => "ns (median round trip)".to_owned(),
            MatrixKind::AddedDelay(phase) => {
                format!("ns (delay added under {} load)", phase.name())
            }
        };
        let mut doc = json!({
            "hosts": self.hosts,
            "unit": unit,
            "rounds": self.rounds,
            "test_seconds": self.test_time.as_secs_f64(),
            "elapsed_seconds": self.elapsed.as_secs_f64(),
            "matrix": self.matrix,
            "pairs": pairs,
            "outliers": outliers,
        });
        if let MatrixKind::AddedDelay(phase) = self.kind {
            doc["phase"] = json!(phase.name());
            doc["added_delay"] = self
                .phase_matrices
                .iter()
                .map(|(phase, matrix)| (phase.name().to_owned(), json!(matrix)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        doc
    }

    /// A row per pair measured or failed: from, to, the value and its unit, the error;
    /// under load, a row per pair and phase.
    pub fn csv(&self) -> String {
        if !self.phase_matrices.is_empty() {
            return self.phases_csv();
        }
        let unit = if self.lower_is_better() {
            "ns"
        } else {
            "bit/s"
        };
        let mut out = String::from("from,to,value,unit,error\n");
        for p in &self.pairs {
            let value = self.matrix[p.from][p.to].map_or(String::new(), |v| format!("{v:.0}"));
            let error = p
                .outcome
                .as_ref()
                .err()
                .map_or(String::new(), |e| format!("\"{}\"", e.replace('"', "\"\"")));
            let _ = writeln!(
                out,
                "{},{},{value},{unit},{error}",
                csv_field(&self.hosts[p.from]),
                csv_field(&self.hosts[p.to])
            );
        }
        out
    }
}

/// Each pair's phases of latency under load, a row each; a failed pair's row names
/// no phase.
impl MeshReport {
    fn phases_csv(&self) -> String {
        let mut out = String::from(
            "from,to,phase,rtt_p50_ns,rtt_p99_ns,added_delay_ns,probe_loss,\
             up_bits_per_second,down_bits_per_second,rpm,error\n",
        );
        let text = |v: Option<String>| v.unwrap_or_default();
        for p in &self.pairs {
            let (from, to) = (csv_field(&self.hosts[p.from]), csv_field(&self.hosts[p.to]));
            match &p.outcome {
                Ok(PairFigures::UnderLoad(phases)) => {
                    for phase in phases {
                        let _ = writeln!(
                            out,
                            "{from},{to},{},{},{},{},{},{:.0},{:.0},{},",
                            phase.kind.name(),
                            text(phase.rtt.map(|r| r.p50_ns.to_string())),
                            text(phase.rtt.map(|r| r.p99_ns.to_string())),
                            text(phase.added_delay_ns.map(|d| d.to_string())),
                            phase.loss(),
                            phase.up_bps,
                            phase.down_bps,
                            text(phase.rpm.map(|r| format!("{r:.0}"))),
                        );
                    }
                }
                Ok(PairFigures::Test { .. }) => {}
                Err(why) => {
                    let _ = writeln!(out, "{from},{to},,,,,,,,,\"{}\"", why.replace('"', "\"\""));
                }
            }
        }
        out
    }
}

/// One phase of a pair's latency under load, as the mesh's JSON writes it.
fn phase_json(p: &PhaseReport) -> Value {
    json!({
        "name": p.kind.name(),
        "rtt": p.rtt.map(|r| json!({
            "min_ns": r.min_ns,
            "p50_ns": r.p50_ns,
            "p90_ns": r.p90_ns,
            "p99_ns": r.p99_ns,
            "max_ns": r.max_ns,
        })),
        "probes_sent": p.probes_sent,
        "probes_lost": p.probes_lost,
        "probe_loss": p.loss(),
        "added_delay_ns": p.added_delay_ns,
        "up_bits_per_second": p.up_bps,
        "down_bits_per_second": p.down_bps,
        "rpm": p.rpm,
    })
}

/// A pair's cell in a matrix of `kind`: the receiver's rate in bit/s, the sender's
/// median round trip in ns, or the phase's added delay in ns.
fn value(kind: MatrixKind, figures: &PairFigures) -> Option<f64> {
    match (kind, figures) {
        (MatrixKind::AddedDelay(phase), figures) => added_delay(phase, figures),
        (kind, PairFigures::Test { client, server }) => {
            Some(test_value(kind == MatrixKind::RoundTrip, client, server))
        }
        (_, PairFigures::UnderLoad(_)) => None,
    }
}

/// The delay `phase` added, in ns, if the pair ran it.
fn added_delay(phase: PhaseKind, figures: &PairFigures) -> Option<f64> {
    match figures {
        PairFigures::UnderLoad(phases) => phases
            .iter()
            .find(|p| p.kind == phase)
            .and_then(|p| p.added_delay_ns)
            .map(|ns| ns as f64),
        PairFigures::Test { .. } => None,
    }
}

/// A test's cell: the receiver's rate in bit/s, or the sender's median round trip in
/// ns.
fn test_value(latency: bool, client: &SideResult, server: &SideResult) -> f64 {
    if latency {
        // A mesh reports the default percentiles, the median among them.
        client
            .total
            .send_latency
            .and_then(|l| l.at(50.0))
            .map_or(0.0, |ns| ns as f64)
    } else {
        crate::units::rate(server.total.bytes_received, server.total.secs()) * 8.0
    }
}

/// `text` as one CSV field, quoted when it must be.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{MeshHost, Pattern};
    use crate::percentiles::Percentiles;
    use crate::results::Figures;
    use crate::settings::Settings;
    use crate::stats::StreamStats;
    use crate::transport::Role;

    fn side(role: Role, received: u64) -> SideResult {
        SideResult {
            role,
            total: Figures {
                bytes_received: received,
                ..Figures::new(
                    &StreamStats::default(),
                    Duration::from_secs(1),
                    &Percentiles::default(),
                )
            },
            reverse_total: None,
            streams: Vec::new(),
            system: None,
            cpu: None,
            intervals: Vec::new(),
        }
    }

    /// A report of `n` hosts where pair (a, b) received `rate(a, b)` bytes in 1 s, or
    /// failed where it gives `None`.
    fn report(n: usize, rate: impl Fn(usize, usize) -> Option<u64>) -> MeshReport {
        let config = MeshConfig {
            hosts: (0..n)
                .map(|i| MeshHost::parse(&format!("h{i}"), 1).expect("host"))
                .collect(),
            pattern: Pattern::AllPairs,
            settings: Settings {
                time_ms: Some(1000),
                ..Settings::default()
            },
            auth: None,
            control_timeout: Duration::from_secs(1),
            family: crate::family::IpFamily::Any,
            outlier_below: 0.8,
            under_load: None,
        };
        let pairs = (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|(a, b)| a != b)
            .map(|(from, to)| PairResult {
                from,
                to,
                outcome: rate(from, to)
                    .map(|r| PairFigures::Test {
                        client: Box::new(side(Role::Client, 0)),
                        server: Box::new(side(Role::Server, r)),
                    })
                    .ok_or_else(|| "connection refused".to_owned()),
            })
            .collect();
        MeshReport::new(&config, 2, pairs, Duration::from_secs(3))
    }

    #[test]
    fn a_slow_host_and_a_failed_pair_are_the_outliers() {
        // 1.25 GB/s (10 Gbit/s) everywhere but out of h2 (a quarter), and h3 -> h0 fails.
        let r = report(4, |a, b| match (a, b) {
            (3, 0) => None,
            (2, _) => Some(1_250_000_000 / 4),
            _ => Some(1_250_000_000),
        });
        assert_eq!(r.matrix[0][1], Some(10e9));
        assert_eq!(r.matrix[2][0], Some(2.5e9));
        assert_eq!(r.matrix[3][0], None);
        assert_eq!(r.matrix[1][1], None);
        let flagged: Vec<(usize, usize)> = r.outliers.iter().map(|o| (o.from, o.to)).collect();
        assert_eq!(flagged, vec![(2, 0), (2, 1), (2, 3), (3, 0)]);
        assert!(r.outliers[0]
            .reason
            .contains("below 0.8 of the median 10.00 Gbit/s"));
        assert!(r.outliers[3]
            .reason
            .starts_with("failed: connection refused"));
        let text = r.text();
        assert!(text.contains("failed"), "{text}");
        assert!(text.contains("h2 -> h0: 2.50 Gbit/s"), "{text}");
        let doc = r.json();
        assert_eq!(doc["hosts"][3], "h3");
        assert!(doc["matrix"][0][0].is_null() && doc["matrix"][3][0].is_null());
        assert_eq!(doc["matrix"][0][1], 10e9);
        assert_eq!(doc["pairs"].as_array().map(Vec::len), Some(12));
        assert_eq!(doc["outliers"][0]["from"], "h2");
        assert!(r.csv().contains("h3,h0,,bit/s,\"connection refused\""));
    }

    #[test]
    fn the_worse_of_two_directions_apart_by_more_than_a_fifth_is_an_outlier() {
        // h0 -> h1 at 9 Gbit/s, the other way at 12.5: off by 28%, yet above 0.8 of the
        // median (10).
        let r = report(3, |a, b| {
            Some(match (a, b) {
                (0, 1) => 1_125_000_000,
                (1, 0) => 1_562_500_000,
                _ => 1_250_000_000,
            })
        });
        assert_eq!(r.outliers.len(), 1, "{:?}", r.outliers);
        assert_eq!((r.outliers[0].from, r.outliers[0].to), (0, 1));
        assert!(r.outliers[0].reason.contains("28% off"), "{:?}", r.outliers);
    }

    /// A report of 3 hosts under load (idle and download) where pair (a, b) added
    /// `added(a, b)` ns.
    fn under_load(added: impl Fn(usize, usize) -> i64) -> MeshReport {
        use crate::latency_probe::phases::{PhasePlan, PhaseReport};
        let plan = PhasePlan {
            phases: vec![
                (PhaseKind::Idle, Duration::from_secs(1)),
                (PhaseKind::Download, Duration::from_secs(1)),
            ],
            flows: 1,
            probe_interval: Duration::from_millis(10),
        };
        let config = MeshConfig {
            hosts: (0..3)
                .map(|i| MeshHost::parse(&format!("h{i}"), 1).expect("host"))
                .collect(),
            pattern: Pattern::AllPairs,
            settings: Settings::default(),
            auth: None,
            control_timeout: Duration::from_secs(1),
            family: crate::family::IpFamily::Any,
            outlier_below: 0.8,
            under_load: Some(plan),
        };
        let phase = |kind, added_delay_ns| PhaseReport {
            kind,
            rtt: None,
            probes_sent: 0,
            probes_lost: 0,
            added_delay_ns: Some(added_delay_ns),
            up_bps: 0.0,
            down_bps: 0.0,
            rpm: None,
        };
        let pairs = (0..3)
            .flat_map(|a| (0..3).map(move |b| (a, b)))
            .filter(|(a, b)| a != b)
            .map(|(from, to)| PairResult {
                from,
                to,
                outcome: Ok(PairFigures::UnderLoad(vec![
                    phase(PhaseKind::Idle, 0),
                    phase(PhaseKind::Download, added(from, to)),
                ])),
            })
            .collect();
        MeshReport::new(&config, 6, pairs, Duration::from_secs(20))
    }

    #[test]
    fn under_load_a_pair_whose_added_delay_stands_out_by_a_millisecond_is_an_outlier() {
        let r = under_load(|a, b| {
            if (a, b) == (0, 1) {
                15_000_000
            } else {
                2_000_000
            }
        });
        assert_eq!(r.kind, MatrixKind::AddedDelay(PhaseKind::Download));
        assert_eq!(r.matrix[0][1], Some(15e6));
        assert_eq!(r.phase_matrices.len(), 1);
        let flagged: Vec<(usize, usize)> = r.outliers.iter().map(|o| (o.from, o.to)).collect();
        assert_eq!(flagged, vec![(0, 1)], "{:?}", r.outliers);
        assert!(r.outliers[0]
            .reason
            .contains("15.00 ms is above the median 2.00 ms"));
        assert!(r.text().starts_with("Delay added under download load (ms)"));
        assert_eq!(r.json()["added_delay"]["download"][0][1], 15e6);
        assert_eq!(r.csv().lines().count(), 1 + 6 * 2);
        // Tenths of a millisecond apart are noise, however many times the median.
        let quiet = under_load(|a, b| if (a, b) == (0, 1) { 400_000 } else { 20_000 });
        assert!(quiet.outliers.is_empty(), "{:?}", quiet.outliers);
    }
}
