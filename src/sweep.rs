//! `--sweep NAME=LO..HI[:STEP]`: one measurement per value of a numeric option against
//! the same server, one row per value (sfnt-pingpong's table).
//!
//! The spec is parsed here without I/O. `STEP` is `*K` (multiply, K ≥ 2; the default is
//! `*2`) or `+K` (add, K ≥ 1); the values run from `LO` while they do not exceed `HI`.
//! `NAME=V1,V2,...` lists the values instead. Numbers may end in `K`, `M` or `G`
//! (binary: `64K` = 65536).
//!
//! `--tests bw,rr,echo` runs several tests at each value, as qperf runs `tcp_bw tcp_lat`
//! over one `-oo msg_size:...`: one row per value with a column group per test.

use crate::results::Figures;
use crate::settings::Settings;
use crate::stats::LatencySummary;
use crate::transport::Role;
use crate::units;
use crate::workload::{Reply, Workload};
use anyhow::Context;
use thiserror::Error;

/// Most values one sweep may hold.
pub const MAX_SWEEP_VALUES: usize = 1000;

/// The options a sweep can vary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepParam {
    PktSize,
    NSockets,
    NStreams,
    Mb,
}

impl SweepParam {
    /// Every option a sweep can vary.
    pub const ALL: [SweepParam; 4] = [
        SweepParam::PktSize,
        SweepParam::NSockets,
        SweepParam::NStreams,
        SweepParam::Mb,
    ];

    fn from_name(name: &str) -> Option<SweepParam> {
        match name {
            "pktsize" | "l" => Some(SweepParam::PktSize),
            "nsockets" | "n" => Some(SweepParam::NSockets),
            "nstreams" | "t" => Some(SweepParam::NStreams),
            "mb" | "m" => Some(SweepParam::Mb),
            _ => None,
        }
    }

    /// The option's name.
    pub fn name(self) -> &'static str {
        match self {
            SweepParam::PktSize => "pktsize",
            SweepParam::NSockets => "nsockets",
            SweepParam::NStreams => "nstreams",
            SweepParam::Mb => "mb",
        }
    }

    /// The first column's title in the table.
    pub fn column(self) -> &'static str {
        match self {
            SweepParam::PktSize => "size",
            other => other.name(),
        }
    }

    /// `base` with this option set to `value` (not yet validated).
    pub fn apply(self, base: &Settings, value: u64) -> Settings {
        let small = u32::try_from(value).unwrap_or(u32::MAX);
        let mut s = base.clone();
        match self {
            SweepParam::PktSize => s.pktsize = small,
            SweepParam::NSockets => s.nsockets = small,
            SweepParam::NStreams => s.nstreams = small,
            SweepParam::Mb => s.mb = value,
        }
        s
    }
}

/// One test of `--tests`: the workload each value runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepTest {
    /// Bulk data from the client (qperf's `tcp_bw`).
    Bw,
    /// Each packet answered by a 1-byte ACK (`-r`).
    Rr,
    /// Each packet answered by its echo (`--echo`, qperf's `tcp_lat`).
    Echo,
}

impl SweepTest {
    /// Every test of `--tests`.
    pub const ALL: [SweepTest; 3] = [SweepTest::Bw, SweepTest::Rr, SweepTest::Echo];

    /// Its name in `--tests`, in the table's column titles and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            SweepTest::Bw => "bw",
            SweepTest::Rr => "rr",
            SweepTest::Echo => "echo",
        }
    }

    /// Whether it times round trips (else it moves bulk data).
    pub fn mprtt(self) -> bool {
        self.workload().mprtt()
    }

    fn workload(self) -> Workload {
        match self {
            SweepTest::Bw => Workload::Bulk,
            SweepTest::Rr => Workload::RoundTrip(Reply::Ack),
            SweepTest::Echo => Workload::RoundTrip(Reply::Echo),
        }
    }

    /// `base` running this test.
    pub fn apply(self, base: &Settings) -> Settings {
        Settings {
            workload: self.workload(),
            ..base.clone()
        }
    }
}

/// Parses `--tests`: a comma-separated list of `bw`, `rr` and `echo`, each once.
pub fn parse_tests(list: &str) -> Result<Vec<SweepTest>, SweepError> {
    let mut tests = Vec::new();
    for name in list.split(',').map(str::trim) {
        let test = match name.to_ascii_lowercase().as_str() {
            "bw" => SweepTest::Bw,
            "rr" => SweepTest::Rr,
            "echo" => SweepTest::Echo,
            _ => return Err(SweepError::Test(name.to_string())),
        };
        if tests.contains(&test) {
            return Err(SweepError::Test(name.to_string()));
        }
        tests.push(test);
    }
    Ok(tests)
}

/// A parsed `--sweep`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep {
    pub param: SweepParam,
    pub values: Vec<u64>,
    /// `--tests`: the tests each value runs; empty, the run's own workload alone.
    pub tests: Vec<SweepTest>,
}

impl Sweep {
    /// The tests each value runs: those of `--tests`, or without it the run's own
    /// workload alone (`None`).
    pub fn tests_per_value(&self) -> Vec<Option<SweepTest>> {
        if self.tests.is_empty() {
            vec![None]
        } else {
            self.tests.iter().copied().map(Some).collect()
        }
    }

    /// `base` as the run of `value` and `test` (the run's own workload if `None`),
    /// checked as any run's settings are.
    pub fn run_settings(
        &self,
        base: &Settings,
        value: u64,
        test: Option<SweepTest>,
    ) -> anyhow::Result<Settings> {
        let mut settings = self.param.apply(base, value);
        if let Some(test) = test {
            settings = test.apply(&settings);
        }
        let name = test.map_or(String::new(), |t| format!(" {}", t.name()));
        settings
            .validate()
            .with_context(|| format!("--sweep {}={value}{name}", self.param.name()))?;
        Ok(settings)
    }

    /// Checks every run before the first starts: a value or test that cannot run (an
    /// echo's buffers over the bound, too many streams, or what `also` refuses) is
    /// refused as a flag is, not after the table has begun.
    pub fn check(
        &self,
        base: &Settings,
        also: impl Fn(&Settings) -> Result<(), String>,
    ) -> anyhow::Result<()> {
        let tests = self.tests_per_value();
        for &value in &self.values {
            for &test in &tests {
                let settings = self.run_settings(base, value, test)?;
                also(&settings)
                    .map_err(|e| anyhow::anyhow!("--sweep {}={value}: {e}", self.param.name()))?;
            }
        }
        Ok(())
    }
}

/// Why a `--sweep` spec was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SweepError {
    #[error("--sweep wants NAME=LO..HI[:*K|:+K] or NAME=V1,V2,..., not '{0}'")]
    Syntax(String),
    #[error("--sweep can vary pktsize, nsockets, nstreams or mb, not '{0}'")]
    Name(String),
    #[error("--sweep: '{0}' is not a number")]
    Number(String),
    #[error("--sweep: the range {0}..{1} is empty")]
    Empty(u64, u64),
    #[error("--sweep: a step must be *K with K >= 2 or +K with K >= 1, not '{0}'")]
    Step(String),
    #[error("--sweep: a range that multiplies (:*{0}) cannot start at 0, which stays 0: start at 1, or add with :+K")]
    ZeroStart(u64),
    #[error("--sweep: more than {MAX_SWEEP_VALUES} values")]
    TooMany,
    #[error("--tests takes bw, rr and echo, each once, not '{0}'")]
    Test(String),
}

fn number(text: &str) -> Result<u64, SweepError> {
    units::parse_bytes(text).ok_or_else(|| SweepError::Number(text.to_string()))
}

/// Parses a `--sweep` spec.
pub fn parse(spec: &str) -> Result<Sweep, SweepError> {
    let (name, range) = spec
        .split_once('=')
        .ok_or_else(|| SweepError::Syntax(spec.to_string()))?;
    let param = SweepParam::from_name(name.trim().to_ascii_lowercase().as_str())
        .ok_or_else(|| SweepError::Name(name.to_string()))?;
    let values = if let Some((lo, rest)) = range.split_once("..") {
        let (hi, step) = rest.split_once(':').unwrap_or((rest, "*2"));
        let (lo, hi) = (number(lo)?, number(hi)?);
        if lo > hi {
            return Err(SweepError::Empty(lo, hi));
        }
        let step = step.trim();
        let k = step
            .get(1..)
            .map(number)
            .transpose()?
            .ok_or_else(|| SweepError::Step(step.to_string()))?;
        let next: Box<dyn Fn(u64) -> Option<u64>> = match step.as_bytes().first() {
            Some(b'*') if k >= 2 && lo == 0 => return Err(SweepError::ZeroStart(k)),
            Some(b'*') if k >= 2 => Box::new(move |v: u64| v.checked_mul(k)),
            Some(b'+') if k >= 1 => Box::new(move |v: u64| v.checked_add(k)),
            _ => return Err(SweepError::Step(step.to_string())),
        };
        let mut values = Vec::new();
        let mut v = Some(lo);
        while let Some(x) = v.filter(|&x| x <= hi) {
            if values.len() == MAX_SWEEP_VALUES {
                return Err(SweepError::TooMany);
            }
            values.push(x);
            v = next(x);
        }
        values
    } else {
        let values = range
            .split(',')
            .map(number)
            .collect::<Result<Vec<_>, _>>()?;
        if values.len() > MAX_SWEEP_VALUES {
            return Err(SweepError::TooMany);
        }
        values
    };
    if values.is_empty() {
        return Err(SweepError::Syntax(spec.to_string()));
    }
    Ok(Sweep {
        param,
        values,
        tests: Vec::new(),
    })
}

/// What one sweep value measured (the client's figures).
#[derive(Clone, Debug, PartialEq)]
pub struct SweepRow {
    pub value: u64,
    /// Payload bits per second the client sent (received, with `--reverse`).
    pub bits_per_second: f64,
    /// The client's send latency (the MPRTT round trip with `-r`; with `--reverse` its
    /// receive latency).
    pub latency: Option<LatencySummary>,
    /// Sends (receives) timed.
    pub iterations: u64,
    /// With `-r`, round trips per second ([`crate::results::Figures::transactions_per_second`]).
    pub transactions_per_second: Option<f64>,
}

impl SweepRow {
    /// The client's figures of the run of `settings` at `value` (`total`: the client's).
    pub fn new(value: u64, settings: &Settings, total: &Figures) -> SweepRow {
        let secs = total.duration_ns as f64 / 1e9;
        // The client's own end: the receiving one with --reverse.
        let (bytes, latency) = if Role::Client.sends(settings) {
            (total.bytes_sent, total.send_latency)
        } else {
            (total.bytes_received, total.recv_latency)
        };
        SweepRow {
            value,
            bits_per_second: if secs > 0.0 {
                bytes as f64 * 8.0 / secs
            } else {
                0.0
            },
            latency,
            iterations: latency.map_or(0, |l| l.count),
            transactions_per_second: total.transactions_per_second(settings, Role::Client),
        }
    }
}

/// The width of a column of the `--tests` table: room for `echo_trans/s` and a space.
const TEST_COLUMN: usize = 14;

/// The columns of one test in the `--tests` table: bandwidth for a bulk test; round
/// trips per second, the round trip's mean, min, p50, p99 and max, and round trips
/// timed for a request/response one.
fn test_columns(test: SweepTest) -> &'static [&'static str] {
    if test.mprtt() {
        &[
            "trans/s", "mean_us", "min_us", "p50_us", "p99_us", "max_us", "iter",
        ]
    } else {
        &["Gbit/s"]
    }
}

/// The header of the `--tests` table: the swept value, then each test's columns named
/// `TEST_COLUMN` (e.g. `bw_Gbit/s`, `rr_p50_us`).
pub fn tests_header(param: SweepParam, tests: &[SweepTest]) -> String {
    let mut line = format!("#{:>11}", param.column());
    for &test in tests {
        for col in test_columns(test) {
            let title = format!("{}_{col}", test.name());
            line += &format!("{title:>TEST_COLUMN$}");
        }
    }
    line
}

/// One row of the `--tests` table: `rows` holds each test's figures, in `--tests` order.
pub fn tests_row(value: u64, tests: &[SweepTest], rows: &[SweepRow]) -> String {
    let mut line = format!("{value:>12}");
    for (&test, r) in tests.iter().zip(rows) {
        if !test.mprtt() {
            line += &format!("{:>TEST_COLUMN$.3}", r.bits_per_second / 1e9);
            continue;
        }
        line += &format!(
            "{:>TEST_COLUMN$.0}",
            r.transactions_per_second.unwrap_or(0.0)
        );
        match r.latency {
            Some(l) => {
                for ns in fixed_columns(&l).into_iter().take(5) {
                    line += &us_column(ns, TEST_COLUMN);
                }
            }
            None => line += &format!("{:>TEST_COLUMN$}", "-").repeat(5),
        }
        line += &format!("{:>TEST_COLUMN$}", r.iterations);
    }
    line
}

/// The latency columns of the sweep tables, in ns: mean, min, p50, p99, max, stddev.
/// The columns are fixed (`--percentiles` does not go with `--sweep`); a percentile the
/// run did not report is `None`.
fn fixed_columns(l: &LatencySummary) -> [Option<f64>; 6] {
    let at = |p: f64| l.at(p).map(|ns| ns as f64);
    [
        Some(l.mean_ns),
        Some(l.min_ns as f64),
        at(50.0),
        at(99.0),
        Some(l.max_ns as f64),
        Some(l.stddev_ns),
    ]
}

/// `ns` in us in a column `width` wide; `-` where there is no figure.
fn us_column(ns: Option<f64>, width: usize) -> String {
    match ns {
        Some(ns) => format!("{:>width$.2}", ns / 1000.0),
        None => format!("{:>width$}", "-"),
    }
}

/// The table's header: for `-r` runs transactions per second, bandwidth otherwise,
/// then the latency columns.
pub fn header(param: SweepParam, mprtt: bool) -> String {
    let rate = if mprtt { "trans/s" } else { "bw_Gbit/s" };
    let cols = format!("{rate} mean_us min_us p50_us p99_us max_us stddev_us iter");
    let cols: Vec<String> = cols.split(' ').map(|c| format!("{c:>12}")).collect();
    format!("#{:>11}{}", param.column(), cols.join(""))
}

/// One row of the table (under the header of `-r` runs if it has transactions).
pub fn row(r: &SweepRow) -> String {
    let lat = r.latency.map_or_else(
        || format!("{:>12}", "-").repeat(6),
        |l| fixed_columns(&l).map(|ns| us_column(ns, 12)).join(""),
    );
    let rate = match r.transactions_per_second {
        Some(tps) => format!("{tps:>12.0}"),
        None => format!("{:>12.3}", r.bits_per_second / 1e9),
    };
    format!("{:>12}{rate}{lat}{:>12}", r.value, r.iterations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_ranges_include_both_ends() {
        let s = parse("pktsize=1..65536:*2").expect("valid");
        assert_eq!(s.param, SweepParam::PktSize);
        assert_eq!(s.values.len(), 17);
        assert_eq!(s.values.first(), Some(&1));
        assert_eq!(s.values.last(), Some(&65536));
        assert_eq!(parse("pktsize=1..64K").expect("valid").values, s.values);
    }

    #[test]
    fn additive_steps_and_lists() {
        assert_eq!(
            parse("nsockets=1..10:+3").expect("valid").values,
            vec![1, 4, 7, 10]
        );
        assert_eq!(
            parse("nstreams=2..5:+1").expect("valid").values,
            vec![2, 3, 4, 5]
        );
        assert_eq!(parse("mb=1,2,8").expect("valid").values, vec![1, 2, 8]);
        assert_eq!(
            parse("l=100..1000:*3").expect("valid").values,
            vec![100, 300, 900]
        );
        assert_eq!(parse("mb=5..5").expect("valid").values, vec![5]);
    }

    #[test]
    fn bad_specs_are_refused_with_a_reason() {
        assert!(matches!(parse("pktsize"), Err(SweepError::Syntax(_))));
        assert!(matches!(parse("speed=1..2"), Err(SweepError::Name(_))));
        assert!(matches!(parse("pktsize=a..2"), Err(SweepError::Number(_))));
        assert!(matches!(
            parse("pktsize=9..2"),
            Err(SweepError::Empty(9, 2))
        ));
        assert!(matches!(parse("pktsize=1..8:*1"), Err(SweepError::Step(_))));
        assert_eq!(
            parse("mb=0..2").map(|s| s.values),
            Err(SweepError::ZeroStart(2))
        );
        assert_eq!(parse("mb=0..2:+1").map(|s| s.values), Ok(vec![0, 1, 2]));
        assert!(matches!(parse("pktsize=1..8:+0"), Err(SweepError::Step(_))));
        assert!(matches!(parse("pktsize=1..8:/2"), Err(SweepError::Step(_))));
        assert!(matches!(
            parse("pktsize=1..100000:+1"),
            Err(SweepError::TooMany)
        ));
        assert!(matches!(
            parse("mb=1..99999999999999999999"),
            Err(SweepError::Number(_))
        ));
    }

    #[test]
    fn values_apply_to_the_named_option() {
        let base = Settings::default();
        assert_eq!(SweepParam::PktSize.apply(&base, 64).pktsize, 64);
        assert_eq!(SweepParam::NSockets.apply(&base, 4).nsockets, 4);
        assert_eq!(SweepParam::Mb.apply(&base, 3).mb, 3);
        assert!(SweepParam::NStreams
            .apply(&base, 1 << 40)
            .validate()
            .is_err());
    }

    #[test]
    fn rows_line_up_with_the_header() {
        let r = SweepRow {
            value: 1024,
            bits_per_second: 1.5e9,
            latency: None,
            iterations: 10,
            transactions_per_second: None,
        };
        for mprtt in [false, true] {
            let h = header(SweepParam::PktSize, mprtt);
            let r = SweepRow {
                transactions_per_second: mprtt.then_some(20.0),
                ..r.clone()
            };
            let line = row(&r);
            assert_eq!(h.len(), line.len(), "{h}\n{line}");
            // The header's leading '#' is a token of its own.
            assert_eq!(
                h.split_whitespace().count(),
                line.split_whitespace().count() + 1
            );
        }
        let tests = parse_tests("bw,rr,echo").expect("valid");
        assert_eq!(tests, [SweepTest::Bw, SweepTest::Rr, SweepTest::Echo]);
        let rows = [
            r.clone(),
            SweepRow {
                transactions_per_second: Some(20.0),
                ..r.clone()
            },
            SweepRow {
                transactions_per_second: Some(20.0),
                ..r.clone()
            },
        ];
        let h = tests_header(SweepParam::PktSize, &tests);
        let line = tests_row(1024, &tests, &rows);
        assert_eq!(h.len(), line.len(), "{h}\n{line}");
        assert_eq!(
            h.split_whitespace().count(),
            line.split_whitespace().count() + 1
        );
        assert!(h.contains(" echo_trans/s") && h.ends_with(" echo_max_us     echo_iter"));
        assert!(matches!(parse_tests("bw,lat"), Err(SweepError::Test(_))));
        assert!(matches!(parse_tests("rr,rr"), Err(SweepError::Test(_))));
        assert!(header(SweepParam::PktSize, false).starts_with("#       size   bw_Gbit/s"));
        assert!(header(SweepParam::PktSize, true).starts_with("#       size     trans/s"));
    }
}
