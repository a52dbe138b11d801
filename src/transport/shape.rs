//! The few facts of a run that a transport's own settings and a workload are checked
//! and tuned against. A leaf: they read it without naming the whole run.

/// What a transport's settings and a workload know of the run around them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunShape {
    /// Data streams of the run.
    pub nstreams: u32,
    /// Sockets inside each stream.
    pub nsockets: u32,
    /// Bytes per send.
    pub pktsize: u32,
    /// Each packet waits for its reply (`-r`, `--echo`, `--crr`).
    pub mprtt: bool,
    /// `--response-size`: bytes of each reply, where the run sets them.
    pub response_size: Option<u32>,
    /// The sender paces its packets (`-b`).
    pub paced: bool,
    /// The lock-free queue feeds the sender thread (`-q 0`).
    pub lock_free: bool,
    /// Each socket is a flow driven by the stream's one thread (`--flows`).
    pub flows: bool,
}

impl RunShape {
    /// Whether sender threads send, one packet per call (`-n` above 1 or `-q 0`; never
    /// with `--flows`, whose thread drives every socket itself).
    pub fn asynchronous(&self) -> bool {
        (self.nsockets > 1 && !self.flows) || self.lock_free
    }

    /// An unpaced test with two of the receiving host's `cores` per stream: one to
    /// receive on, one idle beside it.
    pub fn spare_core_per_stream(&self, cores: usize) -> bool {
        !self.paced && 2 * self.nstreams as usize <= cores
    }
}

/// Largest number of bytes of packet buffers a run may make either end allocate, over
/// all its streams and sockets, whatever each field says alone.
pub const MAX_FOOTPRINT: u64 = 2 << 30;
