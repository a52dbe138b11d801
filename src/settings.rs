//! The settings of one run: chosen by the client, sent to the server over the control
//! stream, and validated on both ends by the same code.
//!
//! Invariant: a [`Settings`] value that passed [`Settings::validate`] is safe to act on;
//! nothing past validation re-checks a field.

use serde::{Deserialize, Serialize};
use std::time::Duration;
use thiserror::Error;

/// Default base port: data stream `i` uses `DEFAULT_PORT + i`.
pub const DEFAULT_PORT: u16 = 28444;
/// Default bytes per send.
pub const DEFAULT_PKTSIZE: u32 = 32768;
/// Default MB (2^20 B) to send per stream.
pub const DEFAULT_MB: u64 = 10240;
/// Most sockets one STREAM may hold.
pub const MAX_NSOCKETS: u32 = 100;
/// Most data streams one run may open.
pub const MAX_NSTREAMS: u32 = 256;
/// Largest bytes-per-send accepted (a buffer of this size is allocated per socket).
pub const MAX_PKTSIZE: u32 = 64 << 20;
/// Largest run size accepted: 2^40 MB would overflow byte counters' headroom.
pub const MAX_MB: u64 = 1 << 30;
/// Largest `nstreams × nsockets × pktsize` accepted: a bound on the packet buffers a run
/// may make either end allocate, whatever each field says alone.
pub const MAX_FOOTPRINT: u64 = 2 << 30;
/// Bytes in one "MB" as fperf counts it.
pub const MB: u64 = 1 << 20;
/// Largest `--window`: a bandwidth-delay product of 100 Gbit/s over 20 ms, and a bound
/// on the kernel memory a client can ask a server to let one socket hold.
pub const MAX_WINDOW: u32 = 256 << 20;
/// The least receive low-water mark of an unpaced stream with a core to spare (see
/// [`Settings::rcvlowat_bytes`]): on a 2-core VM one 32 KiB stream gained 24% over a
/// one-packet mark; 256 KiB gained no more.
pub const BULK_RCVLOWAT: u32 = 128 << 10;
/// The receiving end's nap while data flows (see [`Settings::rx_nap`]). On a 2-core VM
/// one stream under cubic moved 75-77 Gbit/s with it against 54-58 without (32 KiB
/// packets) and 66-89 against 60-68 (128 KiB); 50 us gained no more (docs/tuning.md).
pub const RX_NAP: Duration = Duration::from_micros(20);
/// `--rcvlowat`'s ceiling; the kernel caps the mark lower, at half of `tcp_rmem`'s
/// maximum (or half of a `-w` buffer).
pub const MAX_RCVLOWAT: u32 = 64 << 20;
/// UDP with MPRTT: default wait for an ACK before a datagram is sent again, in ms.
pub const DEFAULT_ACK_TIMEOUT_MS: u32 = 100;
/// Longest ACK time-out accepted, in ms.
pub const MAX_ACK_TIMEOUT_MS: u32 = 60_000;
/// Largest UDP payload over any IP version (IPv6: 65535 - 8; IPv4 allows 20 fewer,
/// which the UDP transport checks once it knows the server's address).
pub const MAX_UDP_PKTSIZE: u32 = 65_527;
/// UDP: datagrams per `sendmmsg()`/`recvmmsg()` when `--udp-batch` is not given.
pub const DEFAULT_UDP_BATCH: u32 = 64;
/// UDP: most datagrams per `sendmmsg()`/`recvmmsg()` (the kernel's `UIO_MAXIOV`).
pub const MAX_UDP_BATCH: u32 = 1024;
/// Shortest reporting interval (`-i`), in ms.
pub const MIN_INTERVAL_MS: u64 = 10;
/// Longest time-bounded run, reporting interval or warm-up (`--time`, `-i`, `--omit`):
/// one week, in ms.
pub const MAX_TIME_MS: u64 = 7 * 24 * 3600 * 1000;

/// The transport of the data streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
    Rdma,
}

impl Protocol {
    /// The name used in reports ("TCP", "UDP", "RDMA").
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Rdma => "RDMA",
        }
    }
}

/// Which RDMA programming interface `-R` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RdmaApi {
    /// Raw verbs (libibverbs), the original default.
    #[default]
    Ibverbs,
    /// rdma_cm connection management (librdmacm).
    Cm,
    /// rsocket (librdmacm's socket-like calls).
    Rsocket,
    /// libfabric (OFI), any provider: verbs, efa, tcp, ...
    Ofi,
}

impl RdmaApi {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            RdmaApi::Ibverbs => "ibverbs",
            RdmaApi::Cm => "cm",
            RdmaApi::Rsocket => "rsocket",
            RdmaApi::Ofi => "ofi",
        }
    }
}

/// Longest RDMA device or libfabric provider name accepted.
pub const MAX_RDMA_NAME: usize = 128;

/// Longest congestion control name the kernel takes (`TCP_CA_NAME_MAX` less the NUL).
pub const MAX_CONGESTION_NAME: usize = 15;

/// The queue between `send_submit()` and a STREAM's sender threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueKind {
    /// A mutex-protected queue holding up to 10000 requests (`-q 1`, the default).
    Mutex,
    /// A lock-free single-producer single-consumer queue (`-q 0`); forces nsockets to 1.
    LockFree,
}

impl QueueKind {
    /// Maps the original `-q` values: 1 = mutex queue, 0 = lock-free queue.
    pub fn from_qtype(q: u8) -> Option<Self> {
        match q {
            1 => Some(QueueKind::Mutex),
            0 => Some(QueueKind::LockFree),
            _ => None,
        }
    }
}

/// How a TCP sender hands bytes to the kernel (`--zerocopy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ZeroCopy {
    /// Plain `write()`: the kernel copies the buffer.
    #[default]
    Off,
    /// `send(MSG_ZEROCOPY)`, completions reaped from the socket's error queue.
    Msg,
    /// `vmsplice()` the buffer into a pipe, then `splice()` the pipe into the socket.
    Splice,
}

/// Everything both ends must agree on for one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub protocol: Protocol,
    /// Data STREAMs, each driven by its own thread; stream `i` uses port `port + i`.
    pub nstreams: u32,
    /// Sockets inside each STREAM.
    pub nsockets: u32,
    /// MB (2^20 B) to send per stream.
    pub mb: u64,
    /// Bytes per send.
    pub pktsize: u32,
    /// Wait for a 1-byte ACK after each packet.
    pub mprtt: bool,
    /// TCP with MPRTT (`--echo`): the reply is the packet itself, as many bytes as
    /// were sent, instead of a 1-byte ACK.
    #[serde(default)]
    pub echo: bool,
    /// TCP with MPRTT (`--crr`): every packet is a connection of its own (connect,
    /// request, 1-byte reply, close), as netperf's TCP_CRR.
    #[serde(default)]
    pub crr: bool,
    /// TCP or UDP bulk (`--reverse`, iperf3's `-R`): the server sends and the client
    /// receives.
    #[serde(default)]
    pub reverse: bool,
    /// TCP bulk both ways at once (`--bidir`, iperf3's `--bidir`): the first half of the
    /// `nstreams` streams carry the client's data, the second half the server's.
    #[serde(default)]
    pub bidir: bool,
    pub queue: QueueKind,
    /// TCP only: TCP_NODELAY on both ends.
    pub nodelay: bool,
    /// TCP only: TCP_QUICKACK on both ends, re-armed after every receive.
    pub quickack: bool,
    /// RDMA only: the programming interface (`--rdma-api`).
    #[serde(default)]
    pub rdma_api: RdmaApi,
    /// RDMA only: the device (`-D`); for libfabric, the domain name.
    #[serde(default)]
    pub rdma_device: Option<String>,
    /// `--rdma-api ofi` only: the libfabric provider; the client resolves it to the one
    /// libfabric picks (e.g. `tcp` to `tcp;ofi_rxm`) before the server sees it.
    #[serde(default)]
    pub ofi_provider: Option<String>,
    /// RDMA only: move data with RDMA WRITEs into the receiver's ring (`--rdma-write`)
    /// instead of SEND/RECV.
    #[serde(default)]
    pub rdma_write: bool,
    /// UDP with MPRTT: ms to wait for an ACK before sending a datagram again.
    #[serde(default = "default_ack_timeout_ms")]
    pub ack_timeout_ms: u32,
    /// `--time`: each stream sends for this many ms instead of `mb` MB.
    #[serde(default)]
    pub time_ms: Option<u64>,
    /// `-i`: both ends report figures every this many ms while the run goes on.
    #[serde(default)]
    pub interval_ms: Option<u64>,
    /// `--omit`: the first this many ms are left out of the totals (warm-up).
    #[serde(default)]
    pub omit_ms: Option<u64>,
    /// `-b`: each stream sends no faster than this many bits/s (paced by the sender).
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// TCP only: zero-copy sending (`--zerocopy`).
    #[serde(default)]
    pub zerocopy: ZeroCopy,
    /// Spin on non-blocking calls instead of sleeping in `poll()` (`--busy-poll`).
    #[serde(default)]
    pub busy_poll: bool,
    /// CPUs the client's data threads are pinned to (`--cpu`); stream i uses entry
    /// i mod len. Empty: not pinned.
    #[serde(default)]
    pub client_cpus: Vec<u32>,
    /// CPUs the server's data threads are pinned to (`--server-cpu`), as above.
    #[serde(default)]
    pub server_cpus: Vec<u32>,
    /// UDP: datagrams per `sendmmsg()`/`recvmmsg()` (`--udp-batch`); `None`: see
    /// [`Settings::udp_batch_size`].
    #[serde(default)]
    pub udp_batch: Option<u32>,
    /// UDP: the sender hands the kernel runs of datagrams as one UDP GSO message
    /// (`--gso`).
    #[serde(default)]
    pub gso: bool,
    /// UDP: the receiver takes coalesced datagrams with UDP GRO (`--gro`).
    #[serde(default)]
    pub gro: bool,
    /// TCP only: the congestion control algorithm both ends set on their data sockets
    /// (`-C`); `None`: the kernel's default (`net.ipv4.tcp_congestion_control`).
    #[serde(default)]
    pub congestion: Option<String>,
    /// TCP only: the receiving end's `SO_RCVLOWAT` (`--rcvlowat`), the bytes that must
    /// have arrived before a read wakes; `None`: see [`Settings::rcvlowat_bytes`].
    #[serde(default)]
    pub rcvlowat: Option<u32>,
    /// TCP only: the server's reads discard the bytes in the kernel (`MSG_TRUNC`)
    /// instead of copying them out (`--skip-rx-copy`).
    #[serde(default)]
    pub skip_rx_copy: bool,
    /// TCP only: every data `send()`/`recv()` goes through an io_uring of the calling
    /// thread (`--io-uring`).
    #[serde(default)]
    pub io_uring: bool,
    /// TCP and UDP: both ends' sockets never block; each thread waits for them in an
    /// epoll instance of its own (`--epoll`).
    #[serde(default)]
    pub epoll: bool,
    /// TCP and UDP: both socket buffers (`SO_SNDBUF`, `SO_RCVBUF`) of every data socket
    /// on both ends, in bytes (`-w`); `None`: the kernel's autotuning (TCP) or the UDP
    /// STREAM's own size.
    #[serde(default)]
    pub window: Option<u32>,
}

fn default_ack_timeout_ms() -> u32 {
    DEFAULT_ACK_TIMEOUT_MS
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            protocol: Protocol::Tcp,
            nstreams: 1,
            nsockets: 1,
            mb: DEFAULT_MB,
            pktsize: DEFAULT_PKTSIZE,
            mprtt: false,
            echo: false,
            crr: false,
            reverse: false,
            bidir: false,
            queue: QueueKind::Mutex,
            nodelay: false,
            quickack: false,
            rdma_api: RdmaApi::default(),
            rdma_device: None,
            ofi_provider: None,
            rdma_write: false,
            ack_timeout_ms: DEFAULT_ACK_TIMEOUT_MS,
            time_ms: None,
            interval_ms: None,
            omit_ms: None,
            rate_bps: None,
            zerocopy: ZeroCopy::Off,
            busy_poll: false,
            client_cpus: Vec::new(),
            server_cpus: Vec::new(),
            udp_batch: None,
            gso: false,
            gro: false,
            congestion: None,
            rcvlowat: None,
            skip_rx_copy: false,
            io_uring: false,
            epoll: false,
            window: None,
        }
    }
}

/// Why a [`Settings`] value was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SettingsError {
    #[error("--nstreams must be between 1 and {MAX_NSTREAMS}, not {0}")]
    NStreams(u32),
    #[error("--nsockets must be between 1 and {MAX_NSOCKETS}, not {0}")]
    NSockets(u32),
    #[error("--pktsize must be between 1 and {MAX_PKTSIZE} bytes, not {0}")]
    PktSize(u32),
    #[error("--mb must be between 1 and {MAX_MB}, not {0}")]
    Mb(u64),
    #[error("--nodelay and --quickack are TCP options; they cannot be used with {0}")]
    TcpOnly(&'static str),
    #[error("the lock-free queue (-q 0) drives a single socket; --nsockets must be 1, not {0}")]
    LockFreeSockets(u32),
    #[error("--{0} must be between {MIN_INTERVAL_MS} ms and one week, not {1} ms")]
    Timing(&'static str, u64),
    #[error("--omit ({0} ms) must be shorter than --time ({1} ms)")]
    OmitTooLong(u64, u64),
    #[error("--bitrate must be at least 1 bit/s")]
    RateZero,
    #[error(
        "--nstreams × --nsockets × --pktsize (× 2 with --echo) is {0} bytes; at most {MAX_FOOTPRINT} bytes of \
         packet buffers are allowed"
    )]
    Footprint(u64),
    #[error("--zerocopy is a TCP option; it cannot be used with {0}")]
    ZeroCopyTcpOnly(&'static str),
    #[error("--io-uring is a TCP option; it cannot be used with {0}")]
    IoUringTcpOnly(&'static str),
    #[error("--io-uring and --zerocopy are two ways to send; choose one")]
    IoUringZeroCopy,
    #[error("--epoll is a TCP and UDP option; it cannot be used with {0}")]
    EpollSocketsOnly(&'static str),
    #[error("--epoll and {0} are two ways to wait for a socket; choose one")]
    EpollConflict(&'static str),
    #[error(
        "--busy-poll is implemented for TCP and UDP only in this build; it cannot be used with {0}"
    )]
    BusyPollUnsupported(&'static str),
    #[error("--udp-batch, --gso and --gro are UDP options; they cannot be used with {0}")]
    UdpOnly(&'static str),
    #[error(
        "--nstreams × --udp-batch × --pktsize (64 KiB with --gro) is {0} bytes; at most \
         {MAX_FOOTPRINT} bytes of batch buffers are allowed"
    )]
    UdpBatchFootprint(u64),
    #[error("--udp-batch must be between 1 and {MAX_UDP_BATCH}, not {0}")]
    UdpBatch(u32),
    #[error("-r sends one datagram and waits for its ACK: it cannot be batched (--udp-batch above 1, --gso, --gro)")]
    UdpBatchMprtt,
    #[error("--gso needs several datagrams per call: with -b the batch is 1 unless --udp-batch N (N >= 2) is given")]
    GsoNeedsBatch,
    #[error("--gso batches the synchronous sender: it cannot be used with -n above 1 or -q 0, whose sender threads send one datagram per call")]
    GsoAsync,
    #[error("CPU numbers must be below {max}, not {0}", max = crate::stream::affinity::MAX_CPUS)]
    Cpu(u32),
    #[error("{0} must be 1 to {MAX_RDMA_NAME} printable characters")]
    RdmaName(&'static str),
    #[error("{0} is an RDMA option; it needs -R")]
    RdmaOnly(&'static str),
    #[error("--pktsize {0} does not fit in one UDP datagram (at most {MAX_UDP_PKTSIZE} bytes over IPv6, 65507 over IPv4)")]
    UdpPktSize(u32),
    #[error("--ack-timeout must be between 1 and {MAX_ACK_TIMEOUT_MS} ms, not {0}")]
    AckTimeout(u32),
    #[error("--echo is implemented for TCP only in this build; it cannot be used with {0}")]
    EchoTcpOnly(&'static str),
    #[error("--echo answers each packet with its echo: it needs MPRTT (-r)")]
    EchoNeedsMprtt,
    #[error(
        "--reverse is implemented for TCP and UDP only in this build; it cannot be used with {0}"
    )]
    ReverseUnsupported(&'static str),
    #[error("--reverse turns bulk sending around; -r, --echo and --crr time each packet from the client")]
    ReverseMprtt,
    #[error("--bidir is implemented for TCP only in this build; it cannot be used with {0}")]
    BidirTcpOnly(&'static str),
    #[error("--bidir runs bulk both ways; it cannot be used with {0}")]
    BidirConflict(&'static str),
    #[error("--bidir needs an even number of streams, half each way, not {0}")]
    BidirOddStreams(u32),
    #[error("--crr is a TCP workload; it cannot be used with {0}")]
    CrrTcpOnly(&'static str),
    #[error("--crr opens one connection per packet, answered by 1 byte, from the stream's own thread with the kernel's socket defaults: it cannot be used {0}")]
    CrrConflict(&'static str),
    #[error("--congestion is a TCP option; it cannot be used with {0}")]
    CongestionTcpOnly(&'static str),
    #[error(
        "--congestion takes an algorithm name of 1 to {MAX_CONGESTION_NAME} letters, digits, '_' or '-' (e.g. cubic, bbr, reno)"
    )]
    CongestionName,
    #[error("--rcvlowat is a TCP option; it cannot be used with {0}")]
    RcvlowatTcpOnly(&'static str),
    #[error("--rcvlowat must be between 1 byte and {MAX_RCVLOWAT} bytes (64M), not {0}")]
    Rcvlowat(u32),
    #[error(
        "--rcvlowat is for bulk receiving; with -r the server answers each packet as it arrives"
    )]
    RcvlowatMprtt,
    #[error("--skip-rx-copy is a TCP option; it cannot be used with {0}")]
    SkipRxCopyTcpOnly(&'static str),
    #[error(
        "--skip-rx-copy is for bulk receiving; with -r the server reads each packet to answer it"
    )]
    SkipRxCopyMprtt,
    #[error("--window sizes TCP and UDP socket buffers; it cannot be used with RDMA")]
    WindowRdma,
    #[error("--window must be between 1 byte and {MAX_WINDOW} bytes (256M), not {0}")]
    Window(u32),
}

impl Settings {
    /// TCP: the receiving end's `SO_RCVLOWAT`, on a host with `cores` CPUs. `--rcvlowat`
    /// if given; else the mark grows with how idle the receiving cores are, since it
    /// saves wake-ups, each an inter-processor interrupt on the sender's core:
    /// - a core to spare beside each stream (2 x streams <= cores) and unpaced: at least
    ///   [`BULK_RCVLOWAT`], so the receiver wakes once per several small packets;
    /// - a core per stream, or paced by `-b`: one packet, so it wakes per packet instead
    ///   of per segment, and a paced packet is read as soon as it is whole;
    /// - more streams than cores: `None` (the kernel's 1), since no core idles and
    ///   waiting only delays the reads.
    ///
    /// A `-w` window bounds the larger mark to half of it (never below one packet), so
    /// the sender can always fill it. `None` with MPRTT, where the server answers each
    /// packet as it completes and a short last packet must not wait. docs/tuning.md
    /// has what each buys.
    pub fn rcvlowat_bytes(&self, cores: usize) -> Option<u32> {
        if self.mprtt {
            return None;
        }
        let streams = self.nstreams as usize;
        match self.rcvlowat {
            Some(bytes) => Some(bytes),
            None if streams > cores => None,
            None if !self.spare_core_per_stream(cores) => Some(self.pktsize),
            None => {
                let bulk = self
                    .tcp_window()
                    .map_or(BULK_RCVLOWAT, |w| (w / 2).min(BULK_RCVLOWAT));
                Some(bulk.max(self.pktsize))
            }
        }
    }

    /// TCP: how long the receiving end's reader naps, while data flows, when a read
    /// finds none, before it tries once more and only then sleeps on the socket
    /// ([`RX_NAP`]). Where [`Settings::rcvlowat_bytes`] gives the bulk mark (a core to
    /// spare beside each stream, unpaced, no `--rcvlowat`, no MPRTT): a reader woken by
    /// the data is woken from the sender's core, an inter-processor interrupt per
    /// wake-up; a napping one wakes on its own core's timer. `None` otherwise.
    pub fn rx_nap(&self, cores: usize) -> Option<Duration> {
        (!self.mprtt && self.rcvlowat.is_none() && self.spare_core_per_stream(cores))
            .then_some(RX_NAP)
    }

    /// Whether each end runs its data threads under `SCHED_BATCH`: in an unpaced bulk
    /// test they are throughput work, so a thread woken on a core (a reader woken by
    /// data) does not preempt the one running there mid-write; it runs when that one
    /// blocks or at the next tick. Not with MPRTT (`-r`, `--echo`, `--crr`), whose
    /// round trips are the wake-ups being measured, nor with `-b`, whose packets are
    /// due at set times. docs/tuning.md has what it buys.
    pub fn batch_threads(&self) -> bool {
        !self.mprtt && self.rate_bps.is_none()
    }

    /// An unpaced test with two of the receiving host's `cores` per stream: one to
    /// receive on, one idle beside it.
    fn spare_core_per_stream(&self, cores: usize) -> bool {
        self.rate_bps.is_none() && 2 * self.nstreams as usize <= cores
    }

    /// UDP: datagrams per `sendmmsg()`/`recvmmsg()`. `--udp-batch` if given; else 1
    /// with `-r` (one datagram per round trip) or `-b` (paced datagram by datagram),
    /// else [`DEFAULT_UDP_BATCH`], lowered so the batch buffers stay within
    /// [`MAX_FOOTPRINT`].
    pub fn udp_batch_size(&self) -> u32 {
        match self.udp_batch {
            Some(n) => n,
            None if self.mprtt || self.rate_bps.is_some() => 1,
            None => {
                let fits = MAX_FOOTPRINT / self.udp_batch_bytes(1).max(1);
                u32::try_from(fits.clamp(1, u64::from(DEFAULT_UDP_BATCH))).unwrap_or(1)
            }
        }
    }

    /// Bytes of batch buffers a batch of `batch` datagrams takes, over all streams
    /// (one sending or receiving batch per stream; with GRO each slot holds 64 KiB).
    fn udp_batch_bytes(&self, batch: u32) -> u64 {
        let slot = if self.gro {
            crate::stream::udp_batch::GRO_SLOT_BYTES as u64
        } else {
            u64::from(self.pktsize)
        };
        u64::from(self.nstreams) * slot * u64::from(batch)
    }

    /// The UDP batching options' own checks.
    fn validate_udp_batching(&self) -> Result<(), SettingsError> {
        if self.protocol != Protocol::Udp {
            if self.udp_batch.is_some() || self.gso || self.gro {
                return Err(SettingsError::UdpOnly(self.protocol.name()));
            }
            return Ok(());
        }
        let batch = self.udp_batch_size();
        if !(1..=MAX_UDP_BATCH).contains(&batch) {
            return Err(SettingsError::UdpBatch(batch));
        }
        if self.mprtt && (batch > 1 || self.gso || self.gro) {
            return Err(SettingsError::UdpBatchMprtt);
        }
        if self.gso && batch < 2 {
            return Err(SettingsError::GsoNeedsBatch);
        }
        if self.gso && self.asynchronous() {
            return Err(SettingsError::GsoAsync);
        }
        let batched = self.udp_batch_bytes(batch);
        if batched > MAX_FOOTPRINT {
            return Err(SettingsError::UdpBatchFootprint(batched));
        }
        Ok(())
    }

    /// Checks every field; the first problem found is returned.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if !(1..=MAX_NSTREAMS).contains(&self.nstreams) {
            return Err(SettingsError::NStreams(self.nstreams));
        }
        if !(1..=MAX_NSOCKETS).contains(&self.nsockets) {
            return Err(SettingsError::NSockets(self.nsockets));
        }
        if !(1..=MAX_PKTSIZE).contains(&self.pktsize) {
            return Err(SettingsError::PktSize(self.pktsize));
        }
        if !(1..=MAX_MB).contains(&self.mb) {
            return Err(SettingsError::Mb(self.mb));
        }
        // With --echo each socket also holds a packet to echo (server) or an echo being
        // read (client): twice the buffers.
        let copies = if self.echo { 2 } else { 1 };
        let footprint =
            u64::from(self.nstreams) * u64::from(self.nsockets) * u64::from(self.pktsize) * copies;
        if footprint > MAX_FOOTPRINT {
            return Err(SettingsError::Footprint(footprint));
        }
        if self.protocol != Protocol::Tcp && (self.nodelay || self.quickack) {
            return Err(SettingsError::TcpOnly(self.protocol.name()));
        }
        if self.protocol != Protocol::Tcp && self.zerocopy != ZeroCopy::Off {
            return Err(SettingsError::ZeroCopyTcpOnly(self.protocol.name()));
        }
        if self.io_uring {
            if self.protocol != Protocol::Tcp {
                return Err(SettingsError::IoUringTcpOnly(self.protocol.name()));
            }
            if self.zerocopy != ZeroCopy::Off {
                return Err(SettingsError::IoUringZeroCopy);
            }
        }
        if self.epoll {
            if !matches!(self.protocol, Protocol::Tcp | Protocol::Udp) {
                return Err(SettingsError::EpollSocketsOnly(self.protocol.name()));
            }
            let other = [
                (self.busy_poll, "--busy-poll"),
                (self.io_uring, "--io-uring"),
            ]
            .into_iter()
            .find_map(|(set, flag)| set.then_some(flag));
            if let Some(flag) = other {
                return Err(SettingsError::EpollConflict(flag));
            }
        }
        if !matches!(self.protocol, Protocol::Tcp | Protocol::Udp) && self.busy_poll {
            return Err(SettingsError::BusyPollUnsupported(self.protocol.name()));
        }
        if self.echo && self.protocol != Protocol::Tcp {
            return Err(SettingsError::EchoTcpOnly(self.protocol.name()));
        }
        if self.echo && !self.mprtt {
            return Err(SettingsError::EchoNeedsMprtt);
        }
        if self.crr {
            self.validate_crr()?;
        }
        if self.reverse {
            if !matches!(self.protocol, Protocol::Tcp | Protocol::Udp) {
                return Err(SettingsError::ReverseUnsupported(self.protocol.name()));
            }
            if self.mprtt {
                return Err(SettingsError::ReverseMprtt);
            }
        }
        if self.bidir {
            self.validate_bidir()?;
        }
        if let Some(name) = &self.congestion {
            if self.protocol != Protocol::Tcp {
                return Err(SettingsError::CongestionTcpOnly(self.protocol.name()));
            }
            let valid = (1..=MAX_CONGESTION_NAME).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                return Err(SettingsError::CongestionName);
            }
        }
        if let Some(value) = self.rcvlowat {
            if self.protocol != Protocol::Tcp {
                return Err(SettingsError::RcvlowatTcpOnly(self.protocol.name()));
            }
            if self.mprtt {
                return Err(SettingsError::RcvlowatMprtt);
            }
            if !(1..=MAX_RCVLOWAT).contains(&value) {
                return Err(SettingsError::Rcvlowat(value));
            }
        }
        if self.skip_rx_copy {
            if self.protocol != Protocol::Tcp {
                return Err(SettingsError::SkipRxCopyTcpOnly(self.protocol.name()));
            }
            if self.mprtt {
                return Err(SettingsError::SkipRxCopyMprtt);
            }
        }
        if let Some(bytes) = self.window {
            if self.protocol == Protocol::Rdma {
                return Err(SettingsError::WindowRdma);
            }
            if !(1..=MAX_WINDOW).contains(&bytes) {
                return Err(SettingsError::Window(bytes));
            }
        }
        if let Some(&cpu) = self
            .client_cpus
            .iter()
            .chain(&self.server_cpus)
            .find(|&&c| c as usize >= crate::stream::affinity::MAX_CPUS)
        {
            return Err(SettingsError::Cpu(cpu));
        }
        self.validate_udp_batching()?;
        if self.queue == QueueKind::LockFree && self.nsockets != 1 {
            return Err(SettingsError::LockFreeSockets(self.nsockets));
        }
        for (name, value, min) in [
            ("time", self.time_ms, 1),
            ("interval", self.interval_ms, MIN_INTERVAL_MS),
            ("omit", self.omit_ms, 0),
        ] {
            if let Some(v) = value {
                if !(min..=MAX_TIME_MS).contains(&v) {
                    return Err(SettingsError::Timing(name, v));
                }
            }
        }
        if self.rate_bps == Some(0) {
            return Err(SettingsError::RateZero);
        }
        if let (Some(omit), Some(time)) = (self.omit_ms, self.time_ms) {
            if omit >= time {
                return Err(SettingsError::OmitTooLong(omit, time));
            }
        }

        if self.protocol == Protocol::Udp && self.pktsize > MAX_UDP_PKTSIZE {
            return Err(SettingsError::UdpPktSize(self.pktsize));
        }
        if !(1..=MAX_ACK_TIMEOUT_MS).contains(&self.ack_timeout_ms) {
            return Err(SettingsError::AckTimeout(self.ack_timeout_ms));
        }
        if self.rdma_write && self.protocol != Protocol::Rdma {
            return Err(SettingsError::RdmaOnly("--rdma-write"));
        }
        let names = [
            ("--rdmadev", &self.rdma_device),
            ("--ofi-provider", &self.ofi_provider),
        ];
        for (flag, name) in names {
            let Some(name) = name else { continue };
            if self.protocol != Protocol::Rdma {
                return Err(SettingsError::RdmaOnly(flag));
            }
            let printable = name.chars().all(|c| c.is_ascii_graphic());
            if name.is_empty() || name.len() > MAX_RDMA_NAME || !printable {
                return Err(SettingsError::RdmaName(flag));
            }
        }
        Ok(())
    }

    /// `--crr` opens a connection per packet from the stream's own thread, with the
    /// 1-byte reply of MPRTT and the kernel's socket defaults.
    fn validate_crr(&self) -> Result<(), SettingsError> {
        if self.protocol != Protocol::Tcp {
            return Err(SettingsError::CrrTcpOnly(self.protocol.name()));
        }
        let conflict = [
            (!self.mprtt, "without -r"),
            (self.echo, "with --echo"),
            (self.nsockets != 1, "with -n above 1"),
            (self.queue == QueueKind::LockFree, "with -q 0"),
            (self.zerocopy != ZeroCopy::Off, "with --zerocopy"),
            (self.busy_poll, "with --busy-poll"),
            (self.window.is_some(), "with -w"),
            (self.quickack, "with --quickack"),
            (self.io_uring, "with --io-uring"),
            (self.epoll, "with --epoll"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag));
        match conflict {
            Some(flag) => Err(SettingsError::CrrConflict(flag)),
            None => Ok(()),
        }
    }

    /// `--bidir` sends bulk both ways over TCP streams of their own, half in each
    /// direction; whatever times a packet from the client (MPRTT) cannot run both ways.
    fn validate_bidir(&self) -> Result<(), SettingsError> {
        if self.protocol != Protocol::Tcp {
            return Err(SettingsError::BidirTcpOnly(self.protocol.name()));
        }
        let conflict = [
            (self.reverse, "--reverse"),
            (self.crr, "--crr"),
            (self.echo, "--echo"),
            (self.mprtt, "-r"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag));
        if let Some(flag) = conflict {
            return Err(SettingsError::BidirConflict(flag));
        }
        if self.nstreams % 2 != 0 {
            return Err(SettingsError::BidirOddStreams(self.nstreams));
        }
        Ok(())
    }

    /// With `--bidir`, the first stream the server sends on (the streams before it
    /// carry the client's data).
    pub fn first_server_stream(&self) -> Option<u32> {
        self.bidir.then_some(self.nstreams / 2)
    }

    /// Whether the server sends on stream `stream`: with `--reverse` on all, with
    /// `--bidir` on the second half.
    pub fn server_sends_on(&self, stream: u32) -> bool {
        self.reverse
            || self
                .first_server_stream()
                .is_some_and(|first| stream >= first)
    }

    /// One direction of a `--bidir` run as a one-way run of its streams would be set:
    /// the server sending if `reverse`. Reports render each direction with these.
    pub fn one_way(&self, reverse: bool) -> Settings {
        Settings {
            bidir: false,
            reverse,
            nstreams: self.first_server_stream().unwrap_or(self.nstreams),
            ..self.clone()
        }
    }

    /// Whether the server listens on ports after its base port for this test: stream
    /// `i > 0` at `base + i`, and with a TCP `--window` stream 0 too, at `base + nstreams`
    /// (see [`crate::transport::tcp::data_port_offset`]); with `--crr` every stream, at
    /// `base + 1 + i`. Two such tests cannot run at once.
    pub fn listens_past_base_port(&self) -> bool {
        self.nstreams > 1 || self.tcp_window().is_some() || self.crr
    }

    /// `--window` when it sizes TCP data connections (UDP's apply to its datagram
    /// sockets).
    pub fn tcp_window(&self) -> Option<u32> {
        self.window.filter(|_| self.protocol == Protocol::Tcp)
    }

    /// Bytes each stream sends, or `None` when the run is bounded by time.
    pub fn byte_limit(&self) -> Option<u64> {
        match self.time_ms {
            Some(_) => None,
            None => Some(self.bytes_per_stream()),
        }
    }

    /// Bytes each stream sends.
    pub fn bytes_per_stream(&self) -> u64 {
        self.mb * MB
    }

    /// Whether the tool drives its streams with `send_submit()` (asynchronous) rather than
    /// `send()`: the original design uses `send()` only for one socket with the mutex queue.
    pub fn asynchronous(&self) -> bool {
        self.nsockets > 1 || self.queue == QueueKind::LockFree
    }

    /// The sending mode as the report header names it.
    pub fn mode_label(&self) -> &'static str {
        match (self.asynchronous(), self.queue) {
            (false, _) => "sync(no-queue)",
            (true, QueueKind::Mutex) => "async(mutex-queue)",
            (true, QueueKind::LockFree) => "async(lockfree-queue)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_seed() {
        let s = Settings::default();
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.bytes_per_stream(), 10_737_418_240);
        assert_eq!(s.mode_label(), "sync(no-queue)");
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let base = Settings::default();
        let cases = [
            Settings {
                nsockets: 0,
                ..base.clone()
            },
            Settings {
                nsockets: 101,
                ..base.clone()
            },
            Settings {
                nstreams: 0,
                ..base.clone()
            },
            Settings {
                pktsize: 0,
                ..base.clone()
            },
            Settings {
                mb: 0,
                ..base.clone()
            },
            Settings {
                queue: QueueKind::LockFree,
                nsockets: 2,
                ..base.clone()
            },
            Settings {
                protocol: Protocol::Udp,
                pktsize: MAX_UDP_PKTSIZE + 1,
                ..base.clone()
            },
            Settings {
                protocol: Protocol::Udp,
                nodelay: true,
                ..base.clone()
            },
            Settings {
                protocol: Protocol::Udp,
                quickack: true,
                ..base.clone()
            },
            Settings {
                ack_timeout_ms: 0,
                ..base.clone()
            },
            Settings {
                interval_ms: Some(1),
                ..base.clone()
            },
            Settings {
                time_ms: Some(0),
                ..base.clone()
            },
            Settings {
                time_ms: Some(1000),
                omit_ms: Some(1000),
                ..base.clone()
            },
        ];
        for c in cases {
            assert!(c.validate().is_err(), "{c:?} should be refused");
        }
    }

    #[test]
    fn rdma_options_need_rdma_and_sane_names() {
        let rdma = Settings {
            protocol: Protocol::Rdma,
            rdma_api: RdmaApi::Ofi,
            ofi_provider: Some("tcp;ofi_rxm".into()),
            rdma_device: Some("mlx5_0".into()),
            rdma_write: true,
            ..Settings::default()
        };
        assert_eq!(rdma.validate(), Ok(()));
        let tcp = Settings {
            protocol: Protocol::Tcp,
            ..rdma.clone()
        };
        assert!(matches!(tcp.validate(), Err(SettingsError::RdmaOnly(_))));
        for bad in ["", "a b", "x\0", &"p".repeat(MAX_RDMA_NAME + 1)] {
            let s = Settings {
                ofi_provider: Some(bad.to_string()),
                ..rdma.clone()
            };
            assert_eq!(
                s.validate(),
                Err(SettingsError::RdmaName("--ofi-provider")),
                "{bad:?}"
            );
        }
        // Settings from an older peer, without the RDMA fields, still decode.
        let old = r#"{"protocol":"tcp","nstreams":1,"nsockets":1,"mb":1,"pktsize":1,"mprtt":false,"queue":"mutex","nodelay":false,"quickack":false}"#;
        let s: Settings = serde_json::from_str(old).expect("decodes");
        assert_eq!(
            (s.rdma_api, s.ofi_provider, s.rdma_write),
            (RdmaApi::Ibverbs, None, false)
        );
    }

    #[test]
    fn udp_datagram_sizes_are_accepted_up_to_the_ipv6_limit() {
        for pktsize in [1, 20, 1472, 65_507, MAX_UDP_PKTSIZE] {
            let s = Settings {
                protocol: Protocol::Udp,
                pktsize,
                ..Settings::default()
            };
            assert_eq!(s.validate(), Ok(()), "{pktsize}");
        }
    }

    #[test]
    fn echo_is_tcp_mprtt_and_counts_its_buffers_twice() {
        let echo = Settings {
            mprtt: true,
            echo: true,
            ..Settings::default()
        };
        assert_eq!(echo.validate(), Ok(()));
        let no_mprtt = Settings {
            mprtt: false,
            ..echo.clone()
        };
        assert_eq!(no_mprtt.validate(), Err(SettingsError::EchoNeedsMprtt));
        let udp = Settings {
            protocol: Protocol::Udp,
            pktsize: 1000,
            ..echo.clone()
        };
        assert_eq!(udp.validate(), Err(SettingsError::EchoTcpOnly("UDP")));
        // 64 streams × 1 socket × 32 MiB fit the bound, but not twice over.
        let big = Settings {
            nstreams: 64,
            pktsize: 32 << 20,
            ..Settings::default()
        };
        assert_eq!(big.validate(), Ok(()));
        let big_echo = Settings {
            mprtt: true,
            echo: true,
            ..big
        };
        assert_eq!(
            big_echo.validate(),
            Err(SettingsError::Footprint(2 * 64 * (32 << 20)))
        );
    }

    #[test]
    fn modes_follow_the_seed() {
        let s = Settings {
            nsockets: 4,
            ..Settings::default()
        };
        assert_eq!(s.mode_label(), "async(mutex-queue)");
        let s = Settings {
            queue: QueueKind::LockFree,
            ..Settings::default()
        };
        assert_eq!(s.mode_label(), "async(lockfree-queue)");
        assert_eq!(QueueKind::from_qtype(2), None);
    }

    #[test]
    fn the_automatic_udp_batch_follows_the_mode_and_fits_the_buffer_limit() {
        let udp = Settings {
            protocol: Protocol::Udp,
            pktsize: 1472,
            ..Settings::default()
        };
        assert_eq!(udp.udp_batch_size(), DEFAULT_UDP_BATCH);
        let one = |s: Settings| (s.udp_batch_size(), s.validate());
        assert_eq!(
            one(Settings {
                mprtt: true,
                ..udp.clone()
            }),
            (1, Ok(()))
        );
        assert_eq!(
            one(Settings {
                rate_bps: Some(1_000_000),
                ..udp.clone()
            }),
            (1, Ok(()))
        );
        // 256 streams of the largest datagrams still batch 64 within the 2 GiB limit;
        // an explicit batch beyond it is refused.
        let big = Settings {
            nstreams: 256,
            pktsize: 65_527,
            ..udp.clone()
        };
        assert_eq!(one(big.clone()), (64, Ok(())));
        let too_big = Settings {
            udp_batch: Some(1024),
            ..big
        };
        assert!(matches!(
            too_big.validate(),
            Err(SettingsError::UdpBatchFootprint(_))
        ));
    }

    #[test]
    fn the_receive_low_water_mark_follows_how_idle_the_receiving_cores_are() {
        let tcp = Settings {
            pktsize: 32768,
            ..Settings::default()
        };
        assert_eq!(
            tcp.rcvlowat_bytes(2),
            Some(BULK_RCVLOWAT),
            "a core to spare"
        );
        let big_packets = Settings {
            pktsize: 1 << 20,
            ..tcp.clone()
        };
        assert_eq!(
            big_packets.rcvlowat_bytes(2),
            Some(1 << 20),
            "never below a packet"
        );
        let windowed = |window| Settings {
            window: Some(window),
            ..tcp.clone()
        };
        assert_eq!(windowed(128 << 10).rcvlowat_bytes(2), Some(64 << 10));
        assert_eq!(windowed(16 << 10).rcvlowat_bytes(2), Some(32768));
        assert_eq!(windowed(64 << 20).rcvlowat_bytes(2), Some(BULK_RCVLOWAT));
        let paced = Settings {
            rate_bps: Some(1_000_000),
            ..tcp.clone()
        };
        assert_eq!(
            paced.rcvlowat_bytes(2),
            Some(32768),
            "a paced packet is read whole"
        );
        let streams = |n| Settings {
            nstreams: n,
            ..tcp.clone()
        };
        assert_eq!(
            streams(2).rcvlowat_bytes(2),
            Some(32768),
            "a core per stream"
        );
        assert_eq!(streams(2).rcvlowat_bytes(4), Some(BULK_RCVLOWAT));
        assert_eq!(
            streams(4).rcvlowat_bytes(2),
            None,
            "more streams than cores"
        );
        assert_eq!(streams(4).rcvlowat_bytes(4), Some(32768));
        let mprtt = Settings {
            mprtt: true,
            ..tcp.clone()
        };
        assert_eq!(mprtt.rcvlowat_bytes(2), None);

        // The reads nap exactly where the bulk mark is the default.
        assert_eq!(tcp.rx_nap(2), Some(RX_NAP), "a core to spare");
        assert_eq!(streams(2).rx_nap(4), Some(RX_NAP));
        assert_eq!(streams(2).rx_nap(2), None, "a core per stream");
        assert_eq!(streams(4).rx_nap(2), None, "more streams than cores");
        assert_eq!(paced.rx_nap(2), None, "paced");
        assert_eq!(mprtt.rx_nap(2), None, "MPRTT");
        let marked = Settings {
            rcvlowat: Some(BULK_RCVLOWAT),
            ..tcp.clone()
        };
        assert_eq!(marked.rx_nap(2), None, "--rcvlowat: reads as the mark says");
        let mprtt_given = Settings {
            rcvlowat: Some(1),
            ..mprtt
        };
        assert_eq!(mprtt_given.validate(), Err(SettingsError::RcvlowatMprtt));
        let given = |v| Settings {
            rcvlowat: Some(v),
            ..tcp.clone()
        };
        assert_eq!(given(1).rcvlowat_bytes(2), Some(1));
        let given_to_many = Settings {
            nstreams: 4,
            ..given(4096)
        };
        assert_eq!(given_to_many.rcvlowat_bytes(2), Some(4096));
        for valid in [1, 32769, MAX_RCVLOWAT] {
            assert_eq!(given(valid).validate(), Ok(()));
        }
        for value in [0, MAX_RCVLOWAT + 1] {
            assert_eq!(given(value).validate(), Err(SettingsError::Rcvlowat(value)));
        }
        let udp = Settings {
            protocol: Protocol::Udp,
            pktsize: 1472,
            rcvlowat: Some(1),
            ..Settings::default()
        };
        assert_eq!(udp.validate(), Err(SettingsError::RcvlowatTcpOnly("UDP")));
    }

    #[test]
    fn bulk_data_threads_run_batch_and_round_trips_and_paced_ones_do_not() {
        let bulk = Settings::default();
        assert!(bulk.batch_threads());
        let udp = Settings {
            protocol: Protocol::Udp,
            pktsize: 1472,
            ..Settings::default()
        };
        assert!(udp.batch_threads());
        let mprtt = Settings {
            mprtt: true,
            ..Settings::default()
        };
        assert!(
            !mprtt.batch_threads(),
            "-r: round trips are the wake-ups measured"
        );
        let paced = Settings {
            rate_bps: Some(1_000_000),
            ..Settings::default()
        };
        assert!(!paced.batch_threads(), "-b: packets are due at set times");
    }

    #[test]
    fn window_is_for_socket_buffers_up_to_its_limit() {
        for protocol in [Protocol::Tcp, Protocol::Udp] {
            for window in [1, 64 << 10, MAX_WINDOW] {
                let s = Settings {
                    protocol,
                    pktsize: 1400,
                    window: Some(window),
                    ..Settings::default()
                };
                assert_eq!(s.validate(), Ok(()), "{protocol:?} {window}");
            }
        }
        for window in [0, MAX_WINDOW + 1] {
            let s = Settings {
                window: Some(window),
                ..Settings::default()
            };
            assert_eq!(s.validate(), Err(SettingsError::Window(window)));
        }
        let rdma = Settings {
            protocol: Protocol::Rdma,
            window: Some(64 << 10),
            ..Settings::default()
        };
        assert_eq!(rdma.validate(), Err(SettingsError::WindowRdma));
    }

    #[test]
    fn skip_rx_copy_is_for_tcp_bulk_runs() {
        let skip = Settings {
            skip_rx_copy: true,
            ..Settings::default()
        };
        assert_eq!(skip.validate(), Ok(()));
        let mprtt = Settings {
            mprtt: true,
            ..skip.clone()
        };
        assert_eq!(mprtt.validate(), Err(SettingsError::SkipRxCopyMprtt));
        let udp = Settings {
            protocol: Protocol::Udp,
            pktsize: 1472,
            ..skip
        };
        assert_eq!(udp.validate(), Err(SettingsError::SkipRxCopyTcpOnly("UDP")));
    }

    #[test]
    fn bidir_gives_the_server_the_second_half_of_the_streams() {
        let bidir = Settings {
            bidir: true,
            nstreams: 4,
            ..Settings::default()
        };
        assert_eq!(bidir.validate(), Ok(()));
        assert_eq!(bidir.first_server_stream(), Some(2));
        let server_sends: Vec<bool> = (0..4).map(|i| bidir.server_sends_on(i)).collect();
        assert_eq!(server_sends, [false, false, true, true]);
        // Each direction renders as the one-way run of its two streams.
        let back = bidir.one_way(true);
        assert!(back.reverse && !back.bidir && back.nstreams == 2);
        let forth = bidir.one_way(false);
        assert!(!forth.reverse && !forth.bidir && forth.nstreams == 2);
        // One-way runs: no split; --reverse gives the server every stream.
        let plain = Settings::default();
        assert_eq!(plain.first_server_stream(), None);
        assert!(!plain.server_sends_on(0));
        let reverse = Settings {
            reverse: true,
            ..plain
        };
        assert!(reverse.server_sends_on(0));
        assert_eq!(reverse.one_way(true), reverse);
    }

    #[test]
    fn epoll_is_for_sockets_and_one_way_of_waiting() {
        let epoll = Settings {
            epoll: true,
            ..Settings::default()
        };
        assert_eq!(epoll.validate(), Ok(()));
        let udp = Settings {
            protocol: Protocol::Udp,
            mprtt: true,
            pktsize: 1472,
            ..epoll.clone()
        };
        assert_eq!(udp.validate(), Ok(()));
        let rdma = Settings {
            protocol: Protocol::Rdma,
            ..epoll.clone()
        };
        assert_eq!(
            rdma.validate(),
            Err(SettingsError::EpollSocketsOnly("RDMA"))
        );
        // What a hostile client may send despite the CLI's refusals.
        for (busy_poll, io_uring, flag) in
            [(true, false, "--busy-poll"), (false, true, "--io-uring")]
        {
            let both = Settings {
                busy_poll,
                io_uring,
                ..epoll.clone()
            };
            assert_eq!(both.validate(), Err(SettingsError::EpollConflict(flag)));
        }
        let crr = Settings {
            crr: true,
            mprtt: true,
            ..epoll
        };
        assert_eq!(
            crr.validate(),
            Err(SettingsError::CrrConflict("with --epoll"))
        );
    }

    #[test]
    fn bidir_refuses_other_transports_one_way_workloads_and_odd_stream_counts() {
        let bidir = Settings {
            bidir: true,
            nstreams: 2,
            ..Settings::default()
        };
        let odd = Settings {
            nstreams: 3,
            ..bidir.clone()
        };
        assert_eq!(odd.validate(), Err(SettingsError::BidirOddStreams(3)));
        let udp = Settings {
            protocol: Protocol::Udp,
            pktsize: 1472,
            ..bidir.clone()
        };
        assert_eq!(udp.validate(), Err(SettingsError::BidirTcpOnly("UDP")));
        let reverse = Settings {
            reverse: true,
            ..bidir.clone()
        };
        assert_eq!(
            reverse.validate(),
            Err(SettingsError::BidirConflict("--reverse"))
        );
        let mprtt = Settings {
            mprtt: true,
            ..bidir
        };
        assert_eq!(mprtt.validate(), Err(SettingsError::BidirConflict("-r")));
    }
}
