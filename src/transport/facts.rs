//! What a transport measures of its own, beyond the bytes and latencies every STREAM
//! counts, and how the outputs learn of it without knowing the transport.
//!
//! Each transport keeps its figures in a type of its own folder (TCP's `TCP_INFO` in
//! [`super::tcp::facts`], UDP's datagram counts in [`super::udp::facts`]).
//! [`super::figures::TransportFigures`] carries whichever a run has, in results and on
//! the wire; the renderers ask it for [`Facts`] and list their
//! [`Entry`]s, so a new figure is added in the transport's folder alone.

use crate::stats::datagrams::DatagramCounts;
use crate::stats::LatencySummary;

/// A transport's figures as the outputs render them.
pub trait Facts {
    /// What the text report calls the group, e.g. `tcp_info`.
    fn title(&self) -> &'static str;

    /// Every figure, in the order reports list them.
    fn entries(&self) -> Vec<Entry>;

    /// What the figures say in words that a reader should know (the text report prints
    /// each on a line of its own); none by default.
    fn sentences(&self) -> Vec<String> {
        Vec::new()
    }

    /// What an end's one-line summary says of these figures (UDP: the datagrams it
    /// received); nothing by default.
    fn summary_clause(&self) -> Option<String> {
        None
    }

    /// Latency distributions of its own, each with the name the text report gives it
    /// (UDP's `--rx-timestamps`: the way through the network, the wait for the read);
    /// none by default.
    fn latencies(&self) -> Vec<(&'static str, &LatencySummary)> {
        Vec::new()
    }

    /// Columns of its own on the interval lines of an end receiving bulk data, each
    /// after two spaces (UDP: the datagrams lost and the jitter, as iperf3's columns);
    /// none by default.
    fn receiver_columns(&self) -> String {
        String::new()
    }

    /// Its datagram accounting, for a transport that moves datagrams (UDP, over the
    /// kernel or AF_XDP); none by default.
    fn datagrams(&self) -> Option<&DatagramCounts> {
        None
    }

    /// Lines of its own in the text report, labels padded to `width` (UDP's datagram
    /// accounting); none by default.
    fn report_lines(&self, _width: usize) -> String {
        String::new()
    }
}

/// One figure of a transport.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Its name in machine-read outputs.
    pub key: &'static str,
    /// Its name in the text report.
    pub label: &'static str,
    pub amount: Amount,
    /// Where the text report shows it.
    pub shown: Shown,
    /// Its OpenMetrics gauge, if it has one.
    pub metric: Option<Metric>,
}

/// A figure's value and what it counts.
#[derive(Clone, Debug, PartialEq)]
pub enum Amount {
    /// Things counted: segments, sockets.
    Count(u64),
    /// A size in bytes.
    Bytes(u64),
    /// A span of time, in microseconds.
    Micros(u64),
    /// A rate in bytes per second.
    BytesPerSecond(u64),
    /// A share of a whole, 0 to 1.
    Ratio(f64),
    Text(String),
}

impl Amount {
    /// The value as the whole number it holds (bytes, µs, ...); `None` for a ratio or
    /// text.
    pub fn whole(&self) -> Option<u64> {
        match self {
            Amount::Count(n) | Amount::Bytes(n) | Amount::Micros(n) | Amount::BytesPerSecond(n) => {
                Some(*n)
            }
            Amount::Ratio(_) | Amount::Text(_) => None,
        }
    }

    /// The text it holds, if it is text.
    pub fn text(&self) -> Option<&str> {
        match self {
            Amount::Text(t) => Some(t),
            _ => None,
        }
    }

    /// The value in the base unit of OpenMetrics (bytes, seconds, bytes per second);
    /// `None` for text.
    pub fn base_unit(&self) -> Option<f64> {
        match self {
            Amount::Count(n) | Amount::Bytes(n) | Amount::BytesPerSecond(n) => Some(*n as f64),
            Amount::Micros(us) => Some(*us as f64 / 1e6),
            Amount::Ratio(r) => Some(*r),
            Amount::Text(_) => None,
        }
    }
}

/// Where the text report shows a figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shown {
    /// On the end's summary line of the transport's figures.
    pub summary: bool,
    /// On interval lines, and on which.
    pub interval: Option<OnInterval>,
    /// On the header line of the test, and of which ends.
    pub header: Option<OnHeader>,
}

/// Which interval lines show a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnInterval {
    /// The totals' line of any end; a stream's line where the stream sends.
    Always,
    /// Only where the end (or stream) sends.
    Sending,
}

/// Which ends' header lines show a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnHeader {
    EveryEnd,
    /// Only the server's: what it picks of its own.
    Server,
}

/// An OpenMetrics gauge, labelled by the end that measured it; the value is in the
/// name's base unit ([`Amount::base_unit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
}

/// The entry of key `key` among `facts`' entries, if one has it.
pub fn entry<'a>(facts: impl IntoIterator<Item = &'a dyn Facts>, key: &str) -> Option<Entry> {
    facts
        .into_iter()
        .find_map(|f| f.entries().into_iter().find(|e| e.key == key))
}
