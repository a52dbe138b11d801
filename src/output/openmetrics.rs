//! A run's figures as Prometheus metrics, in the text exposition format that Prometheus
//! scrapes (what `fperf exporter` answers a probe with).
//!
//! Each figure is a gauge: a probe is one run, so every value describes that run, as the
//! blackbox exporter's do. Names carry their unit in Prometheus's base units (bytes,
//! seconds); `end` says which end measured a figure.

use super::{RunEnd, Sink};
use crate::percentiles;
use crate::results::{Figures, SideResult};
use crate::transport::figures::TransportFigures;
use crate::units;
use anyhow::{Context, Result};
use prometheus::{Encoder, Gauge, GaugeVec, Opts, Registry, TextEncoder};
use std::cell::RefCell;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// The media type of what [`encode`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Records the run's figures into a registry when it ends; [`encode`] writes them out.
pub struct OpenMetrics {
    registry: Registry,
}

impl OpenMetrics {
    /// A sink that records into `registry` (a handle: clones share the metrics).
    pub fn new(registry: Registry) -> OpenMetrics {
        OpenMetrics { registry }
    }
}

impl Sink for OpenMetrics {
    fn end(&mut self, run: &RunEnd) -> Result<()> {
        let outcome = run.outcome;
        let metrics = RunMetrics::register(&self.registry)?;
        for side in [&outcome.client, &outcome.server] {
            metrics.record_side(side)?;
        }
        if run.settings.workload.mprtt() {
            // The client times each round trip: its send latency under MPRTT.
            if let Some(rtt) = outcome.client.total.send_latency {
                let round_trip = gauge_vec(
                    &self.registry,
                    "fperf_round_trip_seconds",
                    "Round-trip time of one request and its response, at the percentile given.",
                    &["percentile"],
                )?;
                // The run's percentiles, then the maximum as the 100th unless it was one.
                let mut points: Vec<(String, u64)> = rtt
                    .percentiles
                    .as_slice()
                    .iter()
                    .map(|v| (percentiles::name(v.percentile), v.ns))
                    .collect();
                if rtt.at(100.0).is_none() {
                    points.push(("100".into(), rtt.max_ns));
                }
                for (percentile, ns) in points {
                    round_trip
                        .with_label_values(&[&percentile])
                        .set(ns as f64 / 1e9);
                }
                gauge(
                    &self.registry,
                    "fperf_round_trip_mean_seconds",
                    "Mean round-trip time of one request and its response.",
                )?
                .set(rtt.mean_ns / 1e9);
                let per_second = units::rate(rtt.count, outcome.client.total.secs());
                gauge(
                    &self.registry,
                    "fperf_transactions_per_second",
                    "Requests answered per second.",
                )?
                .set(per_second);
            }
        }
        Ok(())
    }
}

/// The per-end gauges of one run.
struct RunMetrics {
    test_seconds: GaugeVec,
    sent_bytes: GaugeVec,
    received_bytes: GaugeVec,
    sent_rate: GaugeVec,
    received_rate: GaugeVec,
    cpu_seconds: GaugeVec,
    context_switches: GaugeVec,
    page_faults: GaugeVec,
    max_rss: GaugeVec,
    /// The transports' own figures that have gauges, registered as they first come.
    facts: RefCell<BTreeMap<&'static str, GaugeVec>>,
    registry: Registry,
}

impl RunMetrics {
    fn register(registry: &Registry) -> Result<RunMetrics> {
        let end = |name: &str, help: &str| gauge_vec(registry, name, help, &["end"]);
        Ok(RunMetrics {
            test_seconds: end(
                "fperf_test_duration_seconds",
                "Time the end's figures cover, from its first byte to its last.",
            )?,
            sent_bytes: end("fperf_sent_bytes", "Payload bytes the end sent.")?,
            received_bytes: end("fperf_received_bytes", "Payload bytes the end received.")?,
            sent_rate: end(
                "fperf_sent_bytes_per_second",
                "Payload bytes the end sent per second of the test.",
            )?,
            received_rate: end(
                "fperf_received_bytes_per_second",
                "Payload bytes the end received per second of the test.",
            )?,
            cpu_seconds: gauge_vec(
                registry,
                "fperf_cpu_seconds",
                "CPU time the end's process spent during the test, in user or system mode.",
                &["end", "mode"],
            )?,
            context_switches: gauge_vec(
                registry,
                "fperf_context_switches",
                "Context switches of the end's process during the test: voluntary (waiting) \
                 or involuntary (preempted).",
                &["end", "kind"],
            )?,
            page_faults: gauge_vec(
                registry,
                "fperf_page_faults",
                "Page faults of the end's process during the test: minor (no I/O) or major.",
                &["end", "kind"],
            )?,
            max_rss: end(
                "fperf_max_resident_memory_bytes",
                "Peak resident memory of the end's process since it started.",
            )?,
            facts: RefCell::default(),
            registry: registry.clone(),
        })
    }

    fn record_side(&self, side: &SideResult) -> Result<()> {
        let end = match side.role {
            crate::transport::Role::Client => "client",
            crate::transport::Role::Server => "server",
        };
        // With both directions at once, an end's figures come in two parts.
        let parts: Vec<&Figures> = std::iter::once(&side.total)
            .chain(side.reverse_total.as_ref())
            .collect();
        let sent: u64 = parts.iter().map(|f| f.bytes_sent).sum();
        let received: u64 = parts.iter().map(|f| f.bytes_received).sum();
        let secs = parts.iter().map(|f| f.secs()).fold(0.0, f64::max);
        self.test_seconds.with_label_values(&[end]).set(secs);
        self.sent_bytes.with_label_values(&[end]).set(sent as f64);
        self.received_bytes
            .with_label_values(&[end])
            .set(received as f64);
        self.sent_rate
            .with_label_values(&[end])
            .set(units::rate(sent, secs));
        self.received_rate
            .with_label_values(&[end])
            .set(units::rate(received, secs));
        if let Some(cpu) = &side.cpu {
            for (mode, us) in [("user", cpu.user_us), ("system", cpu.system_us)] {
                self.cpu_seconds
                    .with_label_values(&[end, mode])
                    .set(us as f64 / 1e6);
            }
            if let Some(counts) = &cpu.counts {
                let switches = [
                    ("voluntary", counts.voluntary_switches),
                    ("involuntary", counts.involuntary_switches),
                ];
                for (kind, n) in switches {
                    self.context_switches
                        .with_label_values(&[end, kind])
                        .set(n as f64);
                }
                for (kind, n) in [
                    ("minor", counts.minor_faults),
                    ("major", counts.major_faults),
                ] {
                    self.page_faults
                        .with_label_values(&[end, kind])
                        .set(n as f64);
                }
                self.max_rss
                    .with_label_values(&[end])
                    .set(counts.max_rss_kib as f64 * 1024.0);
            }
        }
        let mut transport = TransportFigures::default();
        for f in &parts {
            transport.merge(&f.transport);
        }
        let mut gauges = self.facts.borrow_mut();
        for facts in transport.each() {
            for e in facts.entries() {
                let (Some(metric), Some(value)) = (e.metric, e.amount.base_unit()) else {
                    continue;
                };
                let gauge = match gauges.entry(metric.name) {
                    Entry::Occupied(g) => g.into_mut(),
                    Entry::Vacant(v) => v.insert(gauge_vec(
                        &self.registry,
                        metric.name,
                        metric.help,
                        &["end"],
                    )?),
                };
                gauge.with_label_values(&[end]).set(value);
            }
        }
        Ok(())
    }
}

/// A gauge registered in `registry`.
pub fn gauge(registry: &Registry, name: &str, help: &str) -> Result<Gauge> {
    let gauge = Gauge::new(name, help).with_context(|| format!("metric {name}"))?;
    registry
        .register(Box::new(gauge.clone()))
        .with_context(|| format!("metric {name}"))?;
    Ok(gauge)
}

/// A `--under-load` run's figures, each phase's under its `phase` label: the probes'
/// round trip (p50 and p99), their loss, the delay the load added and RPM.
pub fn record_under_load(registry: &Registry, run: &crate::under_load::UnderLoadRun) -> Result<()> {
    let per_phase = |name: &str, help: &str| gauge_vec(registry, name, help, &["phase"]);
    let rtt = gauge_vec(
        registry,
        "fperf_under_load_round_trip_seconds",
        "Round trip of the latency probes in each phase, at the percentile given.",
        &["phase", "percentile"],
    )?;
    let added = per_phase(
        "fperf_under_load_added_delay_seconds",
        "The delay the phase's load added: its median probe round trip less the idle phase's.",
    )?;
    let rpm = per_phase(
        "fperf_under_load_rpm",
        "Round trips per minute in the phase (IETF draft-ietf-ippm-responsiveness-08, from the probes).",
    )?;
    let loss = per_phase(
        "fperf_under_load_probe_loss_ratio",
        "The share of the phase's latency probes that did not come back.",
    )?;
    let throughput = gauge_vec(
        registry,
        "fperf_under_load_bits_per_second",
        "The phase's throughput in each direction (up: client to server).",
        &["phase", "direction"],
    )?;
    for phase in &run.phases {
        let name = phase.kind.name();
        if let Some(r) = &phase.rtt {
            for (percentile, ns) in [("50", r.at(50.0)), ("99", r.at(99.0))] {
                if let Some(ns) = ns {
                    rtt.with_label_values(&[name, percentile])
                        .set(ns as f64 / 1e9);
                }
            }
        }
        if let Some(ns) = phase.added_delay_ns {
            added.with_label_values(&[name]).set(ns as f64 / 1e9);
        }
        if let Some(r) = phase.rpm {
            rpm.with_label_values(&[name]).set(r);
        }
        loss.with_label_values(&[name]).set(phase.loss());
        throughput
            .with_label_values(&[name, "up"])
            .set(phase.up_bps);
        throughput
            .with_label_values(&[name, "down"])
            .set(phase.down_bps);
    }
    Ok(())
}

/// A gauge with `labels`, registered in `registry`.
pub fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<GaugeVec> {
    let gauges =
        GaugeVec::new(Opts::new(name, help), labels).with_context(|| format!("metric {name}"))?;
    registry
        .register(Box::new(gauges.clone()))
        .with_context(|| format!("metric {name}"))?;
    Ok(gauges)
}

/// The registry's metrics in the text exposition format ([`CONTENT_TYPE`]).
pub fn encode(registry: &Registry) -> Result<Vec<u8>> {
    let mut text = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut text)
        .context("encoding metrics")?;
    Ok(text)
}
