//! The transports' own figures together: what results, the wire and the outputs carry
//! without knowing which transport measured them (see [`super::facts`]).

use super::facts::Facts;
use super::tcp::facts::TcpInfo;
use serde::{Deserialize, Serialize};

/// The transports' own figures of a stream, or of streams together: each transport's
/// where it has some. Flattened into the figures that hold it, so each keeps the key
/// it has always had in JSON documents and on the wire.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TransportFigures {
    /// TCP's own figures for the sockets (`TCP_INFO`); `null` for other transports.
    #[serde(default)]
    pub tcp: Option<TcpInfo>,
}

impl TransportFigures {
    /// Combines the figures of two disjoint sets of sockets.
    pub fn merge(&mut self, other: &TransportFigures) {
        match (&mut self.tcp, &other.tcp) {
            (Some(a), Some(b)) => a.merge(b),
            (a @ None, Some(b)) => *a = Some(*b),
            _ => {}
        }
    }

    /// The figures of a span that began at `earlier`: counts since then, the rest as
    /// now. `self.since(self)` keeps the state and clears the counts.
    pub fn since(&self, earlier: &TransportFigures) -> TransportFigures {
        TransportFigures {
            tcp: match (&self.tcp, &earlier.tcp) {
                (Some(now), Some(then)) => Some(now.since(then)),
                (now, _) => *now,
            },
        }
    }

    /// The figures there are, each as the outputs read them.
    pub fn each(&self) -> impl Iterator<Item = &dyn Facts> {
        self.tcp.iter().map(|t| t as &dyn Facts)
    }
}
