//! A latency summary as the JSON documents write it, in nanoseconds, and the rule that
//! every number in them is finite. Below the transports, so that each transport can
//! write its own latencies in the documents (see
//! [`crate::transport::figures::TransportFiguresDoc`]).

use crate::percentiles::PercentileValues;
use crate::stats::LatencySummary;
use serde::Serialize;

/// A value that must be finite in JSON.
pub fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// One latency distribution in nanoseconds: count, min, max, mean and stddev exact
/// (an interval's min and max within the histogram's 0.1%), percentiles from an HDR
/// histogram (3 significant digits). Each percentile the run reported is in
/// `percentiles`; the four reported by default are also under `p50_ns`, `p90_ns`,
/// `p99_ns` and `p999_ns`, which are left out when not reported.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "latency")]
#[schemars(deny_unknown_fields)]
pub struct LatencyDoc {
    /// Samples.
    pub count: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    #[schemars(range(min = 0.0))]
    pub mean_ns: f64,
    #[schemars(range(min = 0.0))]
    pub stddev_ns: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub p50_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub p90_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub p99_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub p999_ns: Option<u64>,
    /// Each percentile the run reported (`--percentiles`; by default 50, 90, 99 and
    /// 99.9), in the order asked, with its figure in ns.
    pub percentiles: PercentileValues,
}

impl LatencyDoc {
    pub fn new(l: &LatencySummary) -> LatencyDoc {
        LatencyDoc {
            count: l.count,
            min_ns: l.min_ns,
            max_ns: l.max_ns,
            mean_ns: finite(l.mean_ns),
            stddev_ns: finite(l.stddev_ns),
            p50_ns: l.at(50.0),
            p90_ns: l.at(90.0),
            p99_ns: l.at(99.0),
            p999_ns: l.at(99.9),
            percentiles: l.percentiles,
        }
    }
}
