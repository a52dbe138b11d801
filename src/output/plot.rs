//! `--plot` of a single run: the client's send latency (mprtt with `-r`) by
//! percentile, drawn as an SVG picture when the run ends.

use super::{RunEnd, Sink};
use crate::report::latency_label;
use crate::settings::Settings;
use crate::sweep::SweepParam;
use anyhow::Result;
use std::path::PathBuf;

/// The latency distribution, drawn into the file at `path`.
pub struct Plot {
    path: PathBuf,
}

impl Plot {
    pub fn new(path: PathBuf) -> Plot {
        Plot { path }
    }
}

impl Sink for Plot {
    fn end(&mut self, run: &RunEnd) -> Result<()> {
        let label = latency_label(run.settings);
        let count = run.outcome.client.total.send_latency.map_or(0, |l| l.count);
        let title = format!(
            "fperf {}: {label} by percentile",
            run_label(run.settings, None)
        );
        let curve = run.outcome.send_latency.quantile_curve();
        crate::plot::latency_distribution(&self.path, &title, label, &curve, count)
    }
}

/// What a picture's title says the run was: protocol, workload, packet size, streams
/// (less what a sweep varies).
pub fn run_label(settings: &Settings, swept: Option<SweepParam>) -> String {
    let mut label = settings.protocol().name().to_string();
    // Request/response workloads name themselves; a bulk one's direction does not
    // change the picture.
    if settings.workload.mprtt() {
        label = label + " " + settings.workload.behaviour().flag();
    }
    if swept != Some(SweepParam::PktSize) {
        label += &format!(", {} B packets", settings.pktsize);
    }
    if swept != Some(SweepParam::NStreams) {
        label += &format!(", {} stream(s)", settings.nstreams);
    }
    label
}
