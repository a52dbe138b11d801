//! UDP's own figures: what the STREAM counted of its datagrams, and with
//! `--rx-timestamps` the two halves of each datagram's receive latency.

use crate::percentiles::Percentiles;
use crate::stats::datagrams::DatagramCounts;
use crate::stats::latency_doc::{finite, LatencyDoc};
use crate::stats::{LatencySummary, StreamStats};
use crate::transport::facts::{Amount, Entry, Facts, Metric, Shown};
use serde::Serialize;
use std::fmt::Write as _;

/// UDP's figures of a stream, or of streams together; empty for other transports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UdpFacts {
    /// Datagram accounting.
    pub datagrams: Option<DatagramCounts>,
    /// `--rx-timestamps`: each datagram's time from its send to the kernel's receipt.
    pub network_latency: Option<LatencySummary>,
    /// `--rx-timestamps`: each datagram's time from the kernel's receipt to its read.
    pub app_latency: Option<LatencySummary>,
}

impl UdpFacts {
    /// What the STREAMs of `stats` counted, their latencies at `percentiles`.
    pub fn counted(stats: &StreamStats, percentiles: &Percentiles) -> UdpFacts {
        UdpFacts {
            datagrams: (!stats.datagrams.is_empty()).then_some(stats.datagrams),
            network_latency: stats.network_latency.summary(percentiles),
            app_latency: stats.app_latency.summary(percentiles),
        }
    }

    /// What makes these figures, as a peer sent them, impossible, if anything: more
    /// datagrams lost, duplicated or reordered than there were, or a latency's least
    /// above its most.
    pub fn impossible(&self) -> Option<String> {
        if let Some(d) = &self.datagrams {
            if d.lost > d.peer_sent || d.duplicates > d.received || d.out_of_order > d.received {
                return Some(format!(
                    "{} datagrams lost of {} sent, {} duplicated and {} out of order of {} received",
                    d.lost, d.peer_sent, d.duplicates, d.out_of_order, d.received
                ));
            }
        }
        [&self.network_latency, &self.app_latency]
            .into_iter()
            .flatten()
            .find_map(LatencySummary::impossible)
    }

    /// Combines the figures of two disjoint sets of streams. A latency's summary
    /// cannot be added to another's: where both have one, `self`'s stands (totals
    /// summarize the merged samples instead, see [`UdpFacts::counted`]).
    pub fn merge(&mut self, other: &UdpFacts) {
        match (&mut self.datagrams, &other.datagrams) {
            (Some(a), Some(b)) => a.merge(b),
            (a @ None, Some(b)) => *a = Some(*b),
            _ => {}
        }
        self.network_latency = self.network_latency.or(other.network_latency);
        self.app_latency = self.app_latency.or(other.app_latency);
    }

    /// The figures of a span that began at `earlier`: counts since then, latencies as
    /// now.
    pub fn since(&self, earlier: &UdpFacts) -> UdpFacts {
        UdpFacts {
            datagrams: match (&self.datagrams, &earlier.datagrams) {
                (Some(now), Some(then)) => Some(now.since(then)),
                (now, _) => *now,
            },
            ..self.clone()
        }
    }
}

/// UDP's figures as the JSON documents write them, under the keys they have always
/// had beside the other figures.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct UdpFactsDoc {
    /// `--rx-timestamps`, a receiving UDP end only (absent elsewhere): each datagram's
    /// time from the send time in its header to the kernel's receipt here; one way, so
    /// the two hosts' clocks must agree.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "LatencyDoc")]
    pub network_latency: Option<LatencyDoc>,
    /// `--rx-timestamps`, a receiving UDP end only (absent elsewhere): each datagram's
    /// time from the kernel's receipt to the read that returned it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "LatencyDoc")]
    pub app_latency: Option<LatencyDoc>,
    /// UDP datagram accounting; `None` for stream transports.
    pub datagrams: Option<DatagramCounts>,
}

impl UdpFacts {
    /// These figures as the JSON documents write them.
    pub fn doc(&self) -> UdpFactsDoc {
        UdpFactsDoc {
            network_latency: self.network_latency.as_ref().map(LatencyDoc::new),
            app_latency: self.app_latency.as_ref().map(LatencyDoc::new),
            datagrams: self.datagrams.map(|d| DatagramCounts {
                jitter_ns: d.jitter_ns.map(finite),
                ..d
            }),
        }
    }
}

impl Facts for UdpFacts {
    fn title(&self) -> &'static str {
        "datagrams"
    }

    /// The loss of datagrams sent to this end, where the sender's count is known.
    fn entries(&self) -> Vec<Entry> {
        let Some(d) = self.datagrams.filter(|d| d.peer_sent > 0) else {
            return Vec::new();
        };
        vec![
            Entry {
                key: "lost",
                label: "lost",
                amount: Amount::Count(d.lost),
                shown: Shown::default(),
                metric: Some(Metric {
                    name: "fperf_lost_datagrams",
                    help: "Datagrams sent to the end that never arrived.",
                }),
            },
            Entry {
                key: "loss_ratio",
                label: "loss",
                amount: Amount::Ratio(d.lost as f64 / d.peer_sent as f64),
                shown: Shown::default(),
                metric: Some(Metric {
                    name: "fperf_loss_ratio",
                    help: "Share of the datagrams sent to the end that never arrived (0 to 1).",
                }),
            },
        ]
    }

    /// The datagrams this end received: an end that only sent has none to count.
    fn summary_clause(&self) -> Option<String> {
        let d = (self.datagrams.as_ref()).filter(|d| d.received > 0 || d.peer_sent > 0)?;
        let mut clause = format!(
            "lost {} of {} ({:.2}%), {} duplicated, {} out of order",
            d.lost,
            d.peer_sent,
            d.loss_percent(),
            d.duplicates,
            d.out_of_order
        );
        if let Some(j) = d.jitter_ns {
            let _ = write!(clause, ", jitter {:.2}us", j / 1000.0);
        }
        Some(clause)
    }

    /// The datagrams lost of those sent in the span, where the sender's count is known,
    /// and the jitter.
    fn receiver_columns(&self) -> String {
        let Some(d) = self.datagrams.filter(|d| d.peer_sent > 0) else {
            return String::new();
        };
        let mut columns = format!(
            "  lost: {}/{} ({:.2}%)",
            d.lost,
            d.peer_sent,
            d.loss_percent()
        );
        if let Some(j) = d.jitter_ns {
            let _ = write!(columns, "  jitter: {:.2}us", j / 1000.0);
        }
        columns
    }

    fn latencies(&self) -> Vec<(&'static str, &LatencySummary)> {
        let named = [
            ("network", &self.network_latency),
            ("app wait", &self.app_latency),
        ];
        (named.into_iter())
            .filter_map(|(name, l)| Some((name, l.as_ref()?)))
            .collect()
    }

    fn datagrams(&self) -> Option<&DatagramCounts> {
        self.datagrams.as_ref()
    }

    fn report_lines(&self, width: usize) -> String {
        (self.datagrams.as_ref()).map_or_else(String::new, |d| d.report_lines(width))
    }
}
