//! What a report header says of a transport's own options, in the header's order. A
//! leaf: each transport's settings fill it in without naming the report.

/// A transport's part of a report header, each part empty or starting with a space.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderLabels {
    /// How the data calls were made or waited for (`engine=io_uring`, `engine=epoll`).
    pub engine: &'static str,
    /// The transport's set-up: socket buffers (`window=`), or RDMA's API, operation and
    /// device.
    pub setup: String,
    /// What makes the figures unlike another tool's, last (`rx_copy=skipped`).
    pub caveat: &'static str,
}
