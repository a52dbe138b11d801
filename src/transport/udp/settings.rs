//! UDP's own options: datagrams per system call (and GSO/GRO), the ACK time-out of
//! MPRTT, their checks, and the batch size each end derives from them.

use crate::options::Feature;
use crate::transport::labels::{HeaderLabels, Sample, Samples};
use crate::transport::shape::{RunShape, MAX_FOOTPRINT};
use crate::transport::sockets::{SocketSettings, SocketSettingsError};
use crate::transport::udp::batch::{gro_slots, GRO_SLOT_BYTES};
use crate::transport::xdp::XdpDevice;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// With MPRTT: default wait for an ACK before a datagram is sent again, in ms.
pub const DEFAULT_ACK_TIMEOUT_MS: u32 = 100;
/// Longest ACK time-out accepted, in ms.
pub const MAX_ACK_TIMEOUT_MS: u32 = 60_000;
/// Largest UDP payload over any IP version (IPv6: 65535 - 8; IPv4 allows 20 fewer,
/// which the UDP transport checks once it knows the server's address).
pub const MAX_UDP_PKTSIZE: u32 = 65_527;
/// Datagrams per `sendmmsg()`/`recvmmsg()` when `--udp-batch` is not given.
pub const DEFAULT_UDP_BATCH: u32 = 64;
/// Bytes of batch buffers a run's default batch size keeps within, over all its
/// streams: a quarter of what a server lets one test hold by default.
pub const DEFAULT_BATCH_BYTES: u64 = 64 << 20;
/// Most datagrams per `sendmmsg()`/`recvmmsg()` (the kernel's `UIO_MAXIOV`).
pub const MAX_UDP_BATCH: u32 = 1024;
/// MPRTT: how many times a datagram is sent again before the run fails.
pub const MAX_RETRIES: u32 = 10;
/// Socket buffer asked for, each way, unless `--window` says: enough that a loopback
/// run at full speed is not limited by it (the kernel's default of ~200 KB holds a
/// handful of 32 KB datagrams).
pub const SOCKET_BUFFER: usize = 16 << 20;
/// With `--flows`, the least buffer a socket asks for, each way (about what a socket
/// of the kernel's defaults holds).
pub const FLOW_SOCKET_BUFFER_MIN: usize = 256 << 10;

/// Each socket's buffer, each way, unless `--window` says; with `--flows`, given the
/// flows a thread drives: they share [`SOCKET_BUFFER`], down to
/// [`FLOW_SOCKET_BUFFER_MIN`] each, since a thousand flows of 16 MiB could hold
/// gigabytes of datagrams in flight.
pub fn socket_buffer(flows: Option<usize>) -> usize {
    match flows {
        Some(n) => (SOCKET_BUFFER / n.max(1)).max(FLOW_SOCKET_BUFFER_MIN),
        None => SOCKET_BUFFER,
    }
}

/// The options of a UDP run, both ends' alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
#[schemars(rename = "udp_settings")]
pub struct UdpSettings {
    /// Datagrams per `sendmmsg()`/`recvmmsg()` (`--udp-batch`); `None`: 1 with `-r` or
    /// `-b`, else as many as fit fperf's bound on batch buffers.
    #[serde(default, rename = "udp_batch")]
    pub batch: Option<u32>,
    /// The sender hands the kernel runs of datagrams as one UDP GSO message (`--gso`).
    #[serde(default)]
    pub gso: bool,
    /// The receiver takes coalesced datagrams with UDP GRO (`--gro`).
    #[serde(default)]
    pub gro: bool,
    /// Request/response (`-r`): ms to wait for an ACK before sending a datagram again
    /// (`--ack-timeout`).
    #[serde(default = "default_ack_timeout_ms")]
    pub ack_timeout_ms: u32,
    /// The receiving end reads each datagram's kernel receive time and splits its
    /// latency into network and application time (`--rx-timestamps`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rx_timestamps: bool,
    /// Both ends' datagrams are never fragmented (`--dont-fragment`): IPv4's DF bit,
    /// and a datagram larger than the path's MTU fails the run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dont_fragment: bool,
    #[serde(flatten)]
    pub sockets: SocketSettings,
    /// This end's datagrams go through an AF_XDP socket on this interface and queue
    /// (`--xdp`). The client's own: it stays off the wire, since the server's
    /// interfaces are its own.
    #[serde(skip)]
    #[schemars(skip)]
    pub xdp: Option<XdpDevice>,
}

fn default_ack_timeout_ms() -> u32 {
    DEFAULT_ACK_TIMEOUT_MS
}

impl Default for UdpSettings {
    fn default() -> Self {
        UdpSettings {
            batch: None,
            gso: false,
            gro: false,
            ack_timeout_ms: DEFAULT_ACK_TIMEOUT_MS,
            rx_timestamps: false,
            dont_fragment: false,
            sockets: SocketSettings::default(),
            xdp: None,
        }
    }
}

/// Why [`UdpSettings`] were refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum UdpSettingsError {
    #[error(transparent)]
    Sockets(#[from] SocketSettingsError),
    #[error("--pktsize {0} does not fit in one UDP datagram (at most {MAX_UDP_PKTSIZE} bytes over IPv6, 65507 over IPv4)")]
    PktSize(u32),
    #[error("--response-size {0} does not fit in one UDP datagram (at most {MAX_UDP_PKTSIZE} bytes over IPv6, 65507 over IPv4)")]
    ResponseSize(u32),
    #[error("--ack-timeout must be between 1 and {MAX_ACK_TIMEOUT_MS} ms, not {0}")]
    AckTimeout(u32),
    #[error(
        "--nstreams × --udp-batch × --pktsize (64 KiB with --gro) is {0} bytes; at most \
         {MAX_FOOTPRINT} bytes of batch buffers are allowed"
    )]
    BatchFootprint(u64),
    #[error("--udp-batch must be between 1 and {MAX_UDP_BATCH}, not {0}")]
    Batch(u32),
    #[error("-r sends one datagram and waits for its reply: it cannot be batched (--udp-batch above 1, --gso, --gro)")]
    BatchMprtt,
    #[error("--gso needs several datagrams per call: with -b the batch is 1 unless --udp-batch N (N >= 2) is given")]
    GsoNeedsBatch,
    #[error("--gso batches the synchronous sender: it cannot be used with -n above 1 or -q 0, whose sender threads send one datagram per call")]
    GsoAsync,
    #[error("--flows waits for its sockets in one epoll set per thread: it cannot be used with --busy-poll")]
    FlowsBusyPoll,
}

/// What `--rx-timestamps` needs of the peer.
pub const RX_TIMESTAMPS: Feature = Feature::new("rx_timestamps", "--rx-timestamps");
/// What `--dont-fragment` needs of the peer.
pub const DONT_FRAGMENT: Feature = Feature::new("dont_fragment", "--dont-fragment");
/// Every feature UDP's options may need of the peer (see [`crate::features`]).
pub const FEATURES: [Feature; 2] = [RX_TIMESTAMPS, DONT_FRAGMENT];

impl UdpSettings {
    /// The features of the peer these options need (see [`crate::features`]).
    pub fn features(&self, out: &mut Vec<Feature>) {
        if self.rx_timestamps {
            out.push(RX_TIMESTAMPS);
        }
        if self.dont_fragment {
            out.push(DONT_FRAGMENT);
        }
        self.sockets.features(out);
    }

    /// Checks every option, against each other and against the run.
    pub fn validate(&self, run: &RunShape) -> Result<(), UdpSettingsError> {
        self.sockets.validate()?;
        if run.pktsize > MAX_UDP_PKTSIZE {
            return Err(UdpSettingsError::PktSize(run.pktsize));
        }
        if let Some(size) = run.response_size.filter(|&s| s > MAX_UDP_PKTSIZE) {
            return Err(UdpSettingsError::ResponseSize(size));
        }
        if !(1..=MAX_ACK_TIMEOUT_MS).contains(&self.ack_timeout_ms) {
            return Err(UdpSettingsError::AckTimeout(self.ack_timeout_ms));
        }
        let batch = self.batch_size(run);
        if !(1..=MAX_UDP_BATCH).contains(&batch) {
            return Err(UdpSettingsError::Batch(batch));
        }
        if run.mprtt && (batch > 1 || self.gso || self.gro) {
            return Err(UdpSettingsError::BatchMprtt);
        }
        if self.gso && batch < 2 {
            return Err(UdpSettingsError::GsoNeedsBatch);
        }
        if self.gso && run.asynchronous() {
            return Err(UdpSettingsError::GsoAsync);
        }
        if run.flows && self.sockets.busy_poll {
            return Err(UdpSettingsError::FlowsBusyPoll);
        }
        let batched = self.batch_bytes(run, batch);
        if batched > MAX_FOOTPRINT {
            return Err(UdpSettingsError::BatchFootprint(batched));
        }
        Ok(())
    }

    /// Datagrams per `sendmmsg()`/`recvmmsg()`. `--udp-batch` if given; else 1 with `-r`
    /// (one datagram per round trip) or `-b` (paced datagram by datagram), else
    /// [`DEFAULT_UDP_BATCH`], lowered so the batch buffers stay within
    /// [`DEFAULT_BATCH_BYTES`], and with `--flows` so that a batch, which goes to one
    /// flow, fills at most a quarter of its socket's buffer (more would be lost on
    /// arrival at a receiver that had not read since).
    pub fn batch_size(&self, run: &RunShape) -> u32 {
        match self.batch {
            Some(n) => n,
            None if run.mprtt || run.paced => 1,
            None => {
                let mut fits = DEFAULT_BATCH_BYTES / self.batch_bytes(run, 1).max(1);
                if run.flows {
                    let buffer = socket_buffer(Some(run.nsockets as usize)) as u64;
                    fits = fits.min(buffer / 4 / u64::from(run.pktsize.max(1)));
                }
                u32::try_from(fits.clamp(1, u64::from(DEFAULT_UDP_BATCH))).unwrap_or(1)
            }
        }
    }

    /// A batch shares one sample: the synchronous sender's `sendmmsg()` (sender
    /// threads send one datagram per call), and the receiver's `recvmmsg()` (with GRO,
    /// of buffers that each hold up to 64 KiB of datagrams).
    pub fn samples(&self, run: &RunShape) -> Samples {
        if self.xdp.is_some() {
            // AF_XDP takes each datagram on its own (see crate::transport::xdp::stream).
            return Samples {
                send: Sample::Packet,
                recv: Sample::Packet,
            };
        }
        let batch = self.batch_size(run);
        let batched = batch > 1 && !run.mprtt;
        let send = if batched && !run.asynchronous() {
            Sample::Batch { datagrams: batch }
        } else {
            Sample::Packet
        };
        let recv = if self.gro {
            let per_slot = (GRO_SLOT_BYTES as u32 / run.pktsize.max(1)).clamp(1, 64);
            Sample::Batch {
                datagrams: gro_slots(batch as usize) as u32 * per_slot,
            }
        } else if batched {
            Sample::Batch { datagrams: batch }
        } else {
            Sample::Packet
        };
        Samples { send, recv }
    }

    /// What the kernel may hold for each of a socket's buffers, each way, where no
    /// window is asked for: the size fperf sets itself ([`socket_buffer`], with
    /// `--flows` shared among a thread's `flows`), which the kernel doubles.
    pub fn own_buffer_in_kernel(&self, flows: Option<usize>) -> u64 {
        2 * socket_buffer(flows) as u64
    }

    /// Most bytes of packet buffers either end of the run allocates: each stream's
    /// batch, and `copies` packets per socket to send from.
    pub fn buffer_bytes(&self, run: &RunShape, copies: u64) -> u64 {
        let packets = u64::from(run.nstreams) * u64::from(run.nsockets) * u64::from(run.pktsize);
        self.batch_bytes(run, self.batch_size(run)) + packets * copies
    }

    /// Bytes of batch buffers a batch of `batch` datagrams takes, over all streams
    /// (one sending or receiving batch per stream; with GRO each slot holds 64 KiB).
    fn batch_bytes(&self, run: &RunShape, batch: u32) -> u64 {
        let slot = if self.gro {
            GRO_SLOT_BYTES as u64
        } else {
            u64::from(run.pktsize)
        };
        u64::from(run.nstreams) * slot * u64::from(batch)
    }

    /// What a report header says of these options: the socket options', and whether
    /// datagrams carry the kernel's receive time.
    pub fn labels(&self) -> HeaderLabels {
        let mut labels = self.sockets.labels();
        if self.rx_timestamps {
            labels.setup += " rx_timestamps=kernel";
        }
        if self.dont_fragment {
            labels.setup += " dont_fragment";
        }
        labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BULK: RunShape = RunShape {
        nstreams: 1,
        pktsize: 1472,
        mprtt: false,
        response_size: None,
        paced: false,
        nsockets: 1,
        lock_free: false,
        flows: false,
    };

    #[test]
    fn datagram_sizes_are_accepted_up_to_the_ipv6_limit() {
        let udp = UdpSettings::default();
        for pktsize in [1, 20, 1472, 65_507, MAX_UDP_PKTSIZE] {
            assert_eq!(
                udp.validate(&RunShape { pktsize, ..BULK }),
                Ok(()),
                "{pktsize}"
            );
        }
        let too_big = RunShape {
            pktsize: MAX_UDP_PKTSIZE + 1,
            ..BULK
        };
        assert_eq!(
            udp.validate(&too_big),
            Err(UdpSettingsError::PktSize(MAX_UDP_PKTSIZE + 1))
        );
        let replies = |size| RunShape {
            mprtt: true,
            response_size: Some(size),
            ..BULK
        };
        assert_eq!(udp.validate(&replies(MAX_UDP_PKTSIZE)), Ok(()));
        assert_eq!(
            udp.validate(&replies(MAX_UDP_PKTSIZE + 1)),
            Err(UdpSettingsError::ResponseSize(MAX_UDP_PKTSIZE + 1))
        );
        let no_wait = UdpSettings {
            ack_timeout_ms: 0,
            ..UdpSettings::default()
        };
        assert_eq!(
            no_wait.validate(&BULK),
            Err(UdpSettingsError::AckTimeout(0))
        );
    }

    #[test]
    fn the_automatic_batch_follows_the_mode_and_fits_the_buffer_limit() {
        let udp = UdpSettings::default();
        assert_eq!(udp.batch_size(&BULK), DEFAULT_UDP_BATCH);
        for run in [
            RunShape {
                mprtt: true,
                ..BULK
            },
            RunShape {
                paced: true,
                ..BULK
            },
        ] {
            assert_eq!((udp.batch_size(&run), udp.validate(&run)), (1, Ok(())));
        }
        // 256 streams of the largest datagrams batch 4, within the default's 64 MiB; an
        // explicit batch beyond the 2 GiB limit is refused.
        let big = RunShape {
            nstreams: 256,
            pktsize: 65_527,
            ..BULK
        };
        assert_eq!((udp.batch_size(&big), udp.validate(&big)), (4, Ok(())));
        assert!(udp.batch_bytes(&big, 4) <= DEFAULT_BATCH_BYTES);
        assert!(udp.batch_bytes(&big, 5) > DEFAULT_BATCH_BYTES);
        let too_big = UdpSettings {
            batch: Some(1024),
            ..UdpSettings::default()
        };
        assert!(matches!(
            too_big.validate(&big),
            Err(UdpSettingsError::BatchFootprint(_))
        ));
    }

    #[test]
    fn flows_share_the_socket_buffer_and_batch_within_it() {
        let flows = |nsockets, pktsize| RunShape {
            nsockets,
            pktsize,
            flows: true,
            ..BULK
        };
        let udp = UdpSettings::default();
        // 500 flows share 16 MiB: 256 KiB each, a quarter of it 2 datagrams of 32 KiB.
        assert_eq!(socket_buffer(Some(500)), FLOW_SOCKET_BUFFER_MIN);
        assert_eq!(udp.batch_size(&flows(500, 32_768)), 2);
        assert_eq!(udp.batch_size(&flows(500, 1472)), 44);
        assert_eq!(socket_buffer(Some(4)), 4 << 20);
        assert_eq!(udp.batch_size(&flows(4, 1472)), DEFAULT_UDP_BATCH);
        assert_eq!(udp.batch_size(&flows(500, 65_527)), 1);
        assert_eq!(socket_buffer(None), SOCKET_BUFFER);
        let busy = UdpSettings {
            sockets: SocketSettings {
                busy_poll: true,
                ..SocketSettings::default()
            },
            ..UdpSettings::default()
        };
        assert_eq!(busy.validate(&BULK), Ok(()));
        assert_eq!(
            busy.validate(&flows(10, 1472)),
            Err(UdpSettingsError::FlowsBusyPoll)
        );
    }

    #[test]
    fn gso_needs_a_batch_from_the_synchronous_sender() {
        let gso = UdpSettings {
            gso: true,
            ..UdpSettings::default()
        };
        assert_eq!(gso.validate(&BULK), Ok(()));
        let paced = RunShape {
            paced: true,
            ..BULK
        };
        assert_eq!(gso.validate(&paced), Err(UdpSettingsError::GsoNeedsBatch));
        let threads = RunShape {
            nsockets: 2,
            ..BULK
        };
        assert_eq!(gso.validate(&threads), Err(UdpSettingsError::GsoAsync));
        let mprtt = RunShape {
            mprtt: true,
            ..BULK
        };
        assert_eq!(gso.validate(&mprtt), Err(UdpSettingsError::BatchMprtt));
    }
}
