//! What a report header says of a transport's own options, in the header's order. A
//! leaf: each transport's settings fill it in without naming the report.

/// A transport's part of a report header, each part empty or starting with a space.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderLabels {
    /// How the data calls were made or waited for (`engine=io_uring`, `engine=epoll`).
    pub engine: &'static str,
    /// The transport's set-up: socket buffers (`window=`).
    pub setup: String,
    /// What makes the figures unlike another tool's, last (`rx_copy=skipped`).
    pub caveat: &'static str,
}

/// What one latency sample covers: one packet; one system call over a batch of up to
/// `datagrams` datagrams (UDP); or one read of up to `bytes` bytes, which may hold
/// several packets (TCP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[schemars(rename = "sample")]
#[serde(tag = "per", rename_all = "snake_case")]
pub enum Sample {
    /// One packet: one send of it, or one receive that returns it.
    #[default]
    Packet,
    /// One system call over a batch of up to `datagrams` datagrams (`sendmmsg()`,
    /// `recvmmsg()`): the datagrams of a batch share its one sample.
    Batch { datagrams: u32 },
    /// One read of up to `bytes` bytes, which may hold several packets or parts of them.
    Read { bytes: u32 },
}

/// What a sample of each latency figure covers in a run (see [`Sample`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Samples {
    /// The sending end's `latency`.
    pub send: Sample,
    /// The receiving end's `latency`.
    pub recv: Sample,
}
