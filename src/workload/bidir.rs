//! Bulk data both ways at once (`--bidir`, iperf3's `--bidir`): the first half of the
//! streams carry the client's data, the second half the server's, and each end reports
//! each direction over its own time.

use super::{Behaviour, WorkloadError};
use crate::transport::settings::{Protocol, TransportSettings};
use crate::transport::shape::RunShape;

/// The bidir workload.
pub struct Bidir;

impl Behaviour for Bidir {
    fn flag(&self) -> &'static str {
        "--bidir"
    }

    fn first_server_stream(&self, nstreams: u32) -> Option<u32> {
        Some(nstreams / 2)
    }

    fn check(&self, run: &RunShape, transport: &TransportSettings) -> Result<(), WorkloadError> {
        let protocol = transport.protocol();
        if !matches!(protocol, Protocol::Tcp | Protocol::Udp) {
            return Err(WorkloadError::BidirUnsupported(protocol.name()));
        }
        if run.nstreams % 2 != 0 {
            return Err(WorkloadError::BidirOddStreams(run.nstreams));
        }
        Ok(())
    }

    fn label(&self, nstreams: u32) -> String {
        let first = nstreams / 2;
        let streams = |from: u32, to: u32| {
            if from == to {
                format!("stream {from}")
            } else {
                format!("streams {from}-{to}")
            }
        };
        format!(
            " bidir (the client sends on {}, the server on {})",
            streams(0, first.saturating_sub(1)),
            streams(first, nstreams.saturating_sub(1))
        )
    }
}
