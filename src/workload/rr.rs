//! Request/response: each packet waits for its reply before the next is sent, and its
//! round trip is timed as mprtt. The reply is the original design's 1-byte ACK (`-r`),
//! `--response-size` bytes (`-r --response-size N`, as neper's request and response
//! sizes), or the packet's own bytes (`--echo`, as sockperf's and qperf's ping-pong).

use super::{Behaviour, WorkloadError};
use crate::transport::settings::TransportSettings;
use crate::transport::shape::RunShape;

/// The request/response workload: its replies echo the packet, or are the ACK (or
/// `--response-size` bytes).
pub struct RoundTrip {
    pub echo: bool,
}

impl Behaviour for RoundTrip {
    fn flag(&self) -> &'static str {
        match self.echo {
            false => "-r",
            true => "--echo",
        }
    }

    fn sized_replies(&self) -> bool {
        true
    }

    fn buffer_copies(&self) -> u64 {
        // An echo also holds the packet being echoed (server) or read back (client).
        match self.echo {
            false => 1,
            true => 2,
        }
    }

    /// An echo's size is its request's. (UDP checks that a sized reply fits in a
    /// datagram.)
    fn check(&self, run: &RunShape, _transport: &TransportSettings) -> Result<(), WorkloadError> {
        let Some(size) = run.response_size else {
            return Ok(());
        };
        if self.echo && size != run.pktsize {
            return Err(WorkloadError::ResponseSizeEcho {
                asked: size,
                pktsize: run.pktsize,
            });
        }
        Ok(())
    }

    fn label(&self, _nstreams: u32) -> String {
        match self.echo {
            false => String::new(),
            true => " reply=echo (mprtt = request + echo of pkt_size bytes)".to_string(),
        }
    }
}
