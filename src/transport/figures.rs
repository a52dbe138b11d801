//! The transports' own figures together: what results, the wire and the outputs carry
//! without knowing which transport measured them (see [`super::facts`]).

use super::facts::Facts;
use super::tcp::facts::{TcpInForce, TcpInfo};
use super::udp::facts::{UdpFacts, UdpFactsDoc};
use super::xdp::facts::XdpInForce;
use crate::percentiles::Percentiles;
use crate::stats::datagrams::DatagramCounts;
use crate::stats::StreamStats;
use serde::{Deserialize, Serialize};

/// The transports' own figures of a stream, or of streams together: each transport's
/// where it has some. Flattened into the figures that hold it, so each keeps the key
/// it has always had in JSON documents and on the wire.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TransportFigures {
    /// TCP's own figures for the sockets (`TCP_INFO`); `null` for other transports.
    #[serde(default)]
    pub tcp: Option<TcpInfo>,
    /// UDP's own figures, empty for other transports. The wire and the JSON documents
    /// write them in forms of their own (latencies as each writes them), under the
    /// keys they have always had.
    #[serde(skip)]
    pub udp: UdpFacts,
}

impl TransportFigures {
    /// What the STREAMs of `stats` counted of their own (UDP's datagrams), latencies
    /// at `percentiles`; no socket's figures yet (see [`TransportFigures::merge`]).
    pub fn counted(stats: &StreamStats, percentiles: &Percentiles) -> TransportFigures {
        TransportFigures {
            tcp: None,
            udp: UdpFacts::counted(stats, percentiles),
        }
    }

    /// What the sockets said, without what the STREAMs counted (see
    /// [`TransportFigures::counted`]): what totals add beside the streams' stats.
    pub fn sockets(&self) -> TransportFigures {
        TransportFigures {
            tcp: self.tcp,
            udp: UdpFacts::default(),
        }
    }

    /// What makes these figures, as a peer sent them, impossible, if anything.
    pub fn impossible(&self) -> Option<String> {
        self.udp.impossible()
    }

    /// Combines the figures of two disjoint sets of sockets.
    pub fn merge(&mut self, other: &TransportFigures) {
        match (&mut self.tcp, &other.tcp) {
            (Some(a), Some(b)) => a.merge(b),
            (a @ None, Some(b)) => *a = Some(*b),
            _ => {}
        }
        self.udp.merge(&other.udp);
    }

    /// The figures of a span that began at `earlier`: counts since then, the rest as
    /// now. `self.since(self)` keeps the state and clears the counts.
    pub fn since(&self, earlier: &TransportFigures) -> TransportFigures {
        TransportFigures {
            tcp: match (&self.tcp, &earlier.tcp) {
                (Some(now), Some(then)) => Some(now.since(then)),
                (now, _) => *now,
            },
            udp: self.udp.since(&earlier.udp),
        }
    }

    /// These figures as the JSON documents write them.
    pub fn doc(&self) -> TransportFiguresDoc {
        TransportFiguresDoc {
            tcp: self.tcp,
            udp: self.udp.doc(),
        }
    }

    /// The figures there are, each as the outputs read them.
    pub fn each(&self) -> impl Iterator<Item = &dyn Facts> {
        let tcp = self.tcp.iter().map(|t| t as &dyn Facts);
        tcp.chain(std::iter::once(&self.udp as &dyn Facts))
    }

    /// The figure of key `key` as a whole number, whichever transport has it.
    pub fn figure(&self, key: &str) -> Option<u64> {
        super::facts::entry(self.each(), key).and_then(|e| e.amount.whole())
    }

    /// The datagram accounting of a datagram transport, if the figures have one.
    pub fn datagrams(&self) -> Option<DatagramCounts> {
        self.each().find_map(|f| f.datagrams().copied())
    }
}

/// The transports' own figures as the JSON documents write them: each transport's in
/// its own form, flattened into the figures that hold them.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct TransportFiguresDoc {
    /// TCP's own figures for the sockets (`TCP_INFO`); `null` for other transports.
    pub tcp: Option<TcpInfo>,
    #[serde(flatten)]
    pub udp: UdpFactsDoc,
}

/// What the transports' sockets of a stream ended up with, as the kernel reported it:
/// settings, unlike [`TransportFigures`], that hold for the life of the sockets. Each
/// transport's, empty where it has none; flattened into what holds it, so each keeps
/// its key in JSON documents.
#[derive(Clone, Debug, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TransportInForce {
    #[serde(flatten)]
    pub tcp: TcpInForce,
    #[serde(flatten)]
    pub xdp: XdpInForce,
}

impl TransportInForce {
    /// What a sending stream reports of these.
    pub fn sending(&self) -> TransportInForce {
        TransportInForce {
            tcp: self.tcp.sending(),
            xdp: self.xdp.sending(),
        }
    }

    /// The settings there are, each as the outputs read them.
    pub fn each(&self) -> impl Iterator<Item = &dyn Facts> {
        [&self.tcp as &dyn Facts, &self.xdp as &dyn Facts].into_iter()
    }

    /// The setting of key `key` as text, whichever transport has it.
    pub fn text(&self, key: &str) -> Option<String> {
        super::facts::entry(self.each(), key).and_then(|e| e.amount.text().map(str::to_owned))
    }
}
