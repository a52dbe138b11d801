//! Connect-request-response (`--crr`), as netperf's TCP_CRR and neper's tcp_crr: every
//! request is a connection of its own (connect, the request, a 1-byte reply, close), and
//! mprtt is that whole life of a connection. Its transport is TCP's connection per
//! packet ([`crate::transport::tcp::crr`]).

use super::{Behaviour, WorkloadError};
use crate::transport::settings::TransportSettings;
use crate::transport::shape::RunShape;

/// The crr workload.
pub struct Crr;

impl Behaviour for Crr {
    fn flag(&self) -> &'static str {
        "--crr"
    }

    /// A connection per packet from the stream's own thread (with `--flows`, several in
    /// flight at once), with the kernel's socket defaults.
    fn check(&self, run: &RunShape, transport: &TransportSettings) -> Result<(), WorkloadError> {
        let TransportSettings::Tcp(tcp) = transport else {
            return Err(WorkloadError::CrrTcpOnly(transport.protocol().name()));
        };
        let conflict = [
            (run.nsockets != 1 && !run.flows, "with -n above 1"),
            (run.lock_free, "with -q 0"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
        .or_else(|| tcp.crr_conflict());
        match conflict {
            Some(flag) => Err(WorkloadError::CrrConflict(flag)),
            None => Ok(()),
        }
    }

    fn label(&self, _nstreams: u32) -> String {
        " workload=crr (mprtt = connect + request + 1-byte reply + close)".to_string()
    }
}
