//! Request/response: each packet waits for its reply before the next is sent, and its
//! round trip is timed as mprtt. The reply is the original design's 1-byte ACK (`-r`),
//! `--response-size` bytes (`-r --response-size N`, as neper's request and response
//! sizes), or the packet's own bytes (`--echo`, as sockperf's and qperf's ping-pong).

use super::{Behaviour, Reply, WorkloadError};
use crate::settings::shape::RunShape;
use crate::settings::transport::TransportSettings;
use crate::transport::rdma::settings::RdmaApi;

/// The request/response workload, with its reply.
pub struct RoundTrip(pub Reply);

impl Behaviour for RoundTrip {
    fn flag(&self) -> &'static str {
        match self.0 {
            Reply::Ack => "-r",
            Reply::Echo => "--echo",
        }
    }

    fn reply(&self) -> Option<Reply> {
        Some(self.0)
    }

    fn sized_replies(&self) -> bool {
        true
    }

    fn buffer_copies(&self) -> u64 {
        // An echo also holds the packet being echoed (server) or read back (client).
        match self.0 {
            Reply::Ack => 1,
            Reply::Echo => 2,
        }
    }

    /// RDMA replies are 1-byte ACKs, except over rsockets, a byte stream that the TCP
    /// STREAM carries; an echo's size is its request's. (UDP checks that a sized reply
    /// fits in a datagram.)
    fn check(&self, run: &RunShape, transport: &TransportSettings) -> Result<(), WorkloadError> {
        let ack_only = match transport {
            TransportSettings::Rdma(rdma) if rdma.api != RdmaApi::Rsocket => Some(rdma.api.name()),
            _ => None,
        };
        if let (Reply::Echo, Some(api)) = (self.0, ack_only) {
            return Err(WorkloadError::EchoUnsupported(api));
        }
        let Some(size) = run.response_size else {
            return Ok(());
        };
        if let Some(api) = ack_only {
            return Err(WorkloadError::ResponseSizeUnsupported(api));
        }
        if self.0 == Reply::Echo && size != run.pktsize {
            return Err(WorkloadError::ResponseSizeEcho {
                asked: size,
                pktsize: run.pktsize,
            });
        }
        Ok(())
    }

    fn label(&self, _nstreams: u32) -> String {
        match self.0 {
            Reply::Ack => String::new(),
            Reply::Echo => " reply=echo (mprtt = request + echo of pkt_size bytes)".to_string(),
        }
    }
}
