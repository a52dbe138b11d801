//! Bulk data from the server to the client (`--reverse`, iperf3's `-R`): the same flags
//! and figures, each end reporting its own side.

use super::{Behaviour, WorkloadError};
use crate::transport::settings::{Protocol, TransportSettings};
use crate::transport::shape::RunShape;

/// The reverse workload.
pub struct Reverse;

impl Behaviour for Reverse {
    fn flag(&self) -> &'static str {
        "--reverse"
    }

    fn server_sends_on(&self, _stream: u32, _nstreams: u32) -> bool {
        true
    }

    fn check(&self, _run: &RunShape, transport: &TransportSettings) -> Result<(), WorkloadError> {
        match transport.protocol() {
            Protocol::Rdma => Err(WorkloadError::ReverseUnsupported(Protocol::Rdma.name())),
            Protocol::Tcp | Protocol::Udp => Ok(()),
        }
    }

    fn label(&self, _nstreams: u32) -> String {
        " reverse (the server sends)".to_string()
    }
}
