//! `--plot` of a single run: the client's send latency (mprtt with `-r`) by
//! percentile, drawn as an SVG picture when the run ends.

use super::{RunEnd, Sink};
use crate::client::ClientOutcome;
use crate::output::report::latency_label;
use crate::settings::Settings;
use crate::sweep::SweepParam;
use anyhow::Result;
use std::path::PathBuf;

/// The latency distribution, drawn into the file at `path`.
pub struct Plot {
    path: PathBuf,
    /// The server as the client was given it, `HOST:PORT`.
    server: String,
}

impl Plot {
    pub fn new(path: PathBuf, server: String) -> Plot {
        Plot { path, server }
    }
}

impl Sink for Plot {
    fn end(&mut self, run: &RunEnd) -> Result<()> {
        let label = latency_label(run.settings);
        let count = run.outcome.client.total.send_latency.map_or(0, |l| l.count);
        let title = plot_title(
            &hosts(run.outcome, &self.server),
            &run_label(run.settings, None),
            &format!("{label} by percentile"),
        );
        let curve = run.outcome.send_latency.quantile_curve();
        crate::output::svg::latency_distribution(&self.path, &title, label, &curve, count)
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

/// A picture's title: the fperf version, the hosts, the test and what is drawn.
pub fn plot_title(hosts: &str, test: &str, what: &str) -> String {
    format!("fperf {}, {hosts}: {test}: {what}", crate::VERSION)
}

/// The two ends of a run: the client's host name, and the server as the client was given
/// it (`server`, `HOST:PORT`), with its host name where that says more.
pub fn hosts(outcome: &ClientOutcome, server: &str) -> String {
    let name = |facts: &Option<crate::sysinfo::SystemFacts>| {
        facts.as_ref().and_then(|f| f.hostname.clone())
    };
    let client = name(&outcome.client.system).unwrap_or_else(|| "client".to_string());
    match name(&outcome.server.system) {
        Some(host) if !server.starts_with(&host) => format!("{client} to {server} ({host})"),
        _ => format!("{client} to {server}"),
    }
}
