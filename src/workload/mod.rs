//! Workloads: what a run does with its data streams. Each is one file implementing
//! [`Behaviour`]: bulk data from the client ([`bulk`]), request/response answered by a
//! 1-byte ACK or by the request's echo ([`rr`]), a connection per request ([`crr`]),
//! bulk data from the server ([`reverse`]) and bulk both ways at once ([`bidir`]).
//!
//! Which one a run does is part of its settings ([`Workload`]). The engine and the
//! STREAMs carry it out: a workload says which end sends on each stream, what each
//! packet waits for ([`Reply`], the one spelling every STREAM answers, as the
//! original design defines MPRTT), which transports can run it, and what reports say of
//! it. A new workload is a new file and a variant here.

pub mod bidir;
pub mod bulk;
pub mod crr;
pub mod reverse;
pub mod rr;

use crate::transport::settings::TransportSettings;
use crate::transport::shape::RunShape;
use serde::Serialize;
use thiserror::Error;

pub use crate::stream::reply::Reply;

/// What a run does with its data streams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(into = "WorkloadFlags")]
// Only written, never read (the wire has its own flags), so both of the schema's forms
// are the flags.
#[schemars(from = "WorkloadFlags")]
pub enum Workload {
    /// The client sends, the server receives.
    #[default]
    Bulk,
    /// Each packet waits for its reply before the next is sent (MPRTT): the 1-byte ACK
    /// (`-r`) or the packet's echo (`--echo`). The settings' `--response-size` makes the
    /// ACK a reply of that size ([`crate::settings::Settings::reply`]).
    RoundTrip(Reply),
    /// Each packet is a connection of its own (`--crr`).
    Crr,
    /// The server sends, the client receives (`--reverse`).
    Reverse,
    /// Both send at once, on streams of their own (`--bidir`).
    Bidir,
}

/// One workload's rules.
pub trait Behaviour: Sync {
    /// How the command line asks for it (`-r`, `--echo`, ...); empty for bulk.
    fn flag(&self) -> &'static str;

    /// The first of `nstreams` streams the server sends on, when it sends on some only.
    fn first_server_stream(&self, _nstreams: u32) -> Option<u32> {
        None
    }

    /// Whether the server sends on stream `stream` of `nstreams`.
    fn server_sends_on(&self, stream: u32, nstreams: u32) -> bool {
        self.first_server_stream(nstreams)
            .is_some_and(|first| stream >= first)
    }

    /// Whether `--response-size` may set the size of its replies (others refuse it).
    fn sized_replies(&self) -> bool {
        false
    }

    /// Copies of a packet's buffer each socket holds (an echo keeps a second).
    fn buffer_copies(&self) -> u64 {
        1
    }

    /// Refuses a transport or a run this workload cannot have.
    fn check(&self, _run: &RunShape, _transport: &TransportSettings) -> Result<(), WorkloadError> {
        Ok(())
    }

    /// What a report header adds, starting with a space (or empty), for `nstreams`
    /// streams.
    fn label(&self, _nstreams: u32) -> String {
        String::new()
    }
}

impl Workload {
    /// Every workload a user can ask for, once each (with the ACK's reply; a sized one
    /// is the same workload).
    #[cfg(test)]
    pub const EVERY: [Workload; 6] = [
        Workload::Bulk,
        Workload::RoundTrip(Reply::Ack),
        Workload::RoundTrip(Reply::Echo),
        Workload::Crr,
        Workload::Reverse,
        Workload::Bidir,
    ];

    /// This workload's rules.
    pub fn behaviour(self) -> &'static dyn Behaviour {
        match self {
            Workload::Bulk => &bulk::Bulk,
            Workload::RoundTrip(Reply::Echo) => &rr::RoundTrip { echo: true },
            Workload::RoundTrip(Reply::Ack | Reply::Sized(_)) => &rr::RoundTrip { echo: false },
            Workload::Crr => &crr::Crr,
            Workload::Reverse => &reverse::Reverse,
            Workload::Bidir => &bidir::Bidir,
        }
    }

    /// What each packet waits for, if anything.
    pub fn reply(self) -> Option<Reply> {
        match self {
            Workload::RoundTrip(reply) => Some(reply),
            Workload::Crr => Some(Reply::Ack),
            Workload::Bulk | Workload::Reverse | Workload::Bidir => None,
        }
    }

    /// Whether each packet waits for a reply: MPRTT (`-r`, `--echo`, `--crr`).
    pub fn mprtt(self) -> bool {
        self.reply().is_some()
    }

    /// Whether each reply is the packet's echo.
    pub fn echo(self) -> bool {
        self.reply() == Some(Reply::Echo)
    }
}

/// Why a workload cannot run as asked.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WorkloadError {
    #[error("--response-size sets the size of each request's reply: use it with -r (or with --echo at the size of -l), not with {0}")]
    ResponseSizeWorkload(&'static str),
    #[error("--echo answers each request with itself, -l {pktsize} bytes: --response-size {asked} differs (use -r --response-size {asked} for a reply of another size)")]
    ResponseSizeEcho { asked: u32, pktsize: u32 },
    #[error(
        "--reverse is implemented for TCP and UDP only in this build; it cannot be used with {0}"
    )]
    ReverseUnsupported(&'static str),
    #[error("--reverse turns bulk sending around; -r, --echo and --crr time each packet from the client")]
    ReverseMprtt,
    #[error(
        "--bidir is implemented for TCP and UDP only in this build; it cannot be used with {0}"
    )]
    BidirUnsupported(&'static str),
    #[error("--bidir runs bulk both ways; it cannot be used with {0}")]
    BidirConflict(&'static str),
    #[error("--bidir needs an even number of streams, half each way, not {0}")]
    BidirOddStreams(u32),
    #[error("--crr is a TCP workload; it cannot be used with {0}")]
    CrrTcpOnly(&'static str),
    #[error("--crr opens one connection per packet, answered by 1 byte, from the stream's own thread with the kernel's socket defaults: it cannot be used {0}")]
    CrrConflict(&'static str),
}

/// How a workload appears in `--json`: one flag per workload, as the command line has
/// them (`mprtt` is set by every request/response workload).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
struct WorkloadFlags {
    /// Request/response (`-r`, `--echo`, `--crr`): each packet waited for its reply
    /// before the next was sent.
    mprtt: bool,
    /// `--echo`: the server answered each packet with the packet itself.
    #[serde(default)]
    echo: bool,
    /// `--crr`: every packet was a TCP connection of its own (connect, request, 1-byte
    /// reply, close); `send_latency` is that whole connection.
    #[serde(default)]
    crr: bool,
    /// `--reverse`: the server sent and the client received; each side's figures are
    /// its own end's.
    #[serde(default)]
    reverse: bool,
    /// `--bidir`: TCP bulk both ways at once; the first half of the streams carried the
    /// client's data and the rest the server's. Each side's `total` covers the client's
    /// data streams and `reverse_total` the server's.
    #[serde(default)]
    bidir: bool,
}

impl From<Workload> for WorkloadFlags {
    fn from(workload: Workload) -> Self {
        WorkloadFlags {
            mprtt: workload.mprtt(),
            echo: workload.echo(),
            crr: workload == Workload::Crr,
            reverse: workload == Workload::Reverse,
            bidir: workload == Workload::Bidir,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_appears_as_its_flags() {
        let flags = |w| serde_json::to_value(w).expect("encodes");
        assert_eq!(
            flags(Workload::Crr),
            serde_json::json!({"mprtt": true, "echo": false, "crr": true, "reverse": false, "bidir": false})
        );
        assert_eq!(
            flags(Workload::RoundTrip(Reply::Echo)),
            serde_json::json!({"mprtt": true, "echo": true, "crr": false, "reverse": false, "bidir": false})
        );
    }

    #[test]
    fn only_request_response_workloads_wait_for_replies() {
        let waits: Vec<bool> = Workload::EVERY.iter().map(|w| w.mprtt()).collect();
        assert_eq!(waits, [false, true, true, true, false, false]);
        let echoes: Vec<bool> = Workload::EVERY.iter().map(|w| w.echo()).collect();
        assert_eq!(echoes, [false, false, true, false, false, false]);
    }
}
