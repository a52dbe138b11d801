//! What a datagram transport (UDP) counts of the datagrams one end sent and read: part
//! of a stream's figures, merged over streams and reported like the rest of them.

use crate::stats::buffer_grant::BufferGrant;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Datagram figures of one end (or of several streams merged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, schemars::JsonSchema, Deserialize)]
#[schemars(rename = "datagrams")]
#[schemars(deny_unknown_fields)]
pub struct DatagramCounts {
    /// Datagrams this end sent (each packet once, retransmissions not included).
    pub sent: u64,
    /// Datagrams the peer said it sent (known once it finished).
    pub peer_sent: u64,
    /// Datagrams read, duplicates included.
    pub received: u64,
    /// Datagrams that arrived more than once (counted again in `received`).
    pub duplicates: u64,
    /// Datagrams that arrived after one sent later.
    pub out_of_order: u64,
    /// `peer_sent - (received - duplicates)`, never negative.
    pub lost: u64,
    /// Sequence numbers up to the highest one received: what the sender had sent as
    /// far as the numbers tell, before its own count arrives. This end's alone: not
    /// in the peer's results or the JSON.
    #[serde(skip)]
    pub numbered: u64,
    /// Datagrams that were empty, named another stream, or were queued before the peer
    /// was told to send (a stranger's).
    pub foreign: u64,
    /// Interarrival jitter (RFC 3550), ns; the largest of merged streams. `None`
    /// when no datagram carried a send time (datagrams too short to hold one).
    pub jitter_ns: Option<f64>,
    /// Socket buffer sizes asked for and granted by the kernel (smallest when merged).
    pub rcvbuf: BufferGrant,
    /// The send buffer's, as `rcvbuf`.
    pub sndbuf: BufferGrant,
}

impl DatagramCounts {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &DatagramCounts) {
        self.sent += other.sent;
        self.peer_sent += other.peer_sent;
        self.received += other.received;
        self.duplicates += other.duplicates;
        self.out_of_order += other.out_of_order;
        self.lost += other.lost;
        self.numbered += other.numbered;
        self.foreign += other.foreign;
        self.jitter_ns = match (self.jitter_ns, other.jitter_ns) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.rcvbuf.merge(&other.rcvbuf);
        self.sndbuf.merge(&other.sndbuf);
    }

    /// The counts accrued after `earlier` (an older snapshot of the same stream); the
    /// jitter and buffer sizes are the current ones.
    pub fn since(&self, earlier: &DatagramCounts) -> DatagramCounts {
        DatagramCounts {
            sent: self.sent.saturating_sub(earlier.sent),
            peer_sent: self.peer_sent.saturating_sub(earlier.peer_sent),
            received: self.received.saturating_sub(earlier.received),
            duplicates: self.duplicates.saturating_sub(earlier.duplicates),
            out_of_order: self.out_of_order.saturating_sub(earlier.out_of_order),
            lost: self.lost.saturating_sub(earlier.lost),
            numbered: self.numbered.saturating_sub(earlier.numbered),
            foreign: self.foreign.saturating_sub(earlier.foreign),
            ..*self
        }
    }

    /// These counts with what was sent and lost as the numbers tell it, where the
    /// sender's own count is not known yet (a snapshot taken while data flows, such as
    /// the end of a warm-up): the counts after such a snapshot then leave its datagrams
    /// out of what was sent and lost, as they do of what was received.
    pub fn by_numbers(&self) -> DatagramCounts {
        if self.peer_sent > 0 || self.numbered == 0 {
            return *self;
        }
        DatagramCounts {
            peer_sent: self.numbered,
            lost: self
                .numbered
                .saturating_sub(self.received.saturating_sub(self.duplicates)),
            ..*self
        }
    }

    /// Whether anything datagram-related was recorded (false for stream transports).
    pub fn is_empty(&self) -> bool {
        *self == DatagramCounts::default()
    }

    /// Lost datagrams as a percentage of those the peer sent.
    pub fn loss_percent(&self) -> f64 {
        if self.peer_sent == 0 {
            0.0
        } else {
            100.0 * self.lost as f64 / self.peer_sent as f64
        }
    }

    /// The report lines for these figures, labels padded to `width`.
    pub fn report_lines(&self, width: usize) -> String {
        let mut out = String::new();
        if self.received > 0 || self.peer_sent > 0 {
            // A run cut short before the sender's count arrived: the loss is not known.
            let (sent, lost) = if self.peer_sent == 0 {
                (
                    "unknown".to_string(),
                    "unknown (the sender's count never arrived)".to_string(),
                )
            } else {
                (
                    self.peer_sent.to_string(),
                    format!("{} ({:.2}%)", self.lost, self.loss_percent()),
                )
            };
            let _ = writeln!(
                out,
                "{:<width$}: sent={sent}  received={}  lost={lost}  duplicated={}  out-of-order={}  jitter={}",
                "datagrams",
                self.received,
                self.duplicates,
                self.out_of_order,
                self.jitter_ns.map_or_else(
                    || "n/a (datagrams too short to carry a send time)".to_string(),
                    |j| format!("{:.2}us", j / 1000.0)
                ),
            );
            if self.foreign > 0 {
                let _ = writeln!(
                    out,
                    "{:<width$}: {} datagrams were empty or of another stream",
                    "foreign", self.foreign
                );
            }
        } else if self.sent > 0 {
            let _ = writeln!(out, "{:<width$}: sent={}", "datagrams", self.sent);
        }
        for (name, b) in [("SO_RCVBUF", self.rcvbuf), ("SO_SNDBUF", self.sndbuf)] {
            if b.capped() {
                let _ = writeln!(
                    out,
                    "{:<width$}: the kernel capped {name} at {}B of the {}B asked for (raise net.core.{}_max or run as root)",
                    "sockbuf",
                    b.granted,
                    b.requested,
                    if name == "SO_RCVBUF" { "rmem" } else { "wmem" },
                );
            }
        }
        out
    }
}
