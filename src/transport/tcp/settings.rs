//! TCP's own options: what the client asked for, their checks, what a report header says
//! of them, and the tuning each end derives from them (the receive low-water mark and
//! the reads' nap while data flows).

use crate::options::Feature;
use crate::transport::labels::{HeaderLabels, Sample, Samples};
use crate::transport::shape::RunShape;
use crate::transport::sockets::{SocketSettings, SocketSettingsError};
use crate::transport::tcp::zerocopy::ZeroCopy;
use crate::units::bit_rate;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use thiserror::Error;

/// The least receive low-water mark of an unpaced stream with a core to spare (see
/// [`TcpSettings::rcvlowat_bytes`]); docs/tuning.md has the measurements behind it.
pub const BULK_RCVLOWAT: u32 = 128 << 10;
/// The receiving end's nap while data flows (see [`TcpSettings::rx_nap`]);
/// docs/tuning.md has the measurements behind it.
pub const RX_NAP: Duration = Duration::from_micros(20);
/// `--rcvlowat`'s ceiling; the kernel caps the mark lower, at half of `tcp_rmem`'s
/// maximum (or half of a `-w` buffer).
pub const MAX_RCVLOWAT: u32 = 64 << 20;
/// The smallest read buffer a bulk receiver uses: one that keeps up with the sender
/// reads what has arrived in one call instead of one per packet (fewer system calls per
/// byte). 128 KiB, as iperf3 reads: with 128 KiB packets, 256 KiB reads moved 3% less
/// over loopback under BBR (docs/tuning.md).
pub const RECV_CHUNK: usize = 128 * 1024;
/// Longest congestion control name the kernel takes (`TCP_CA_NAME_MAX` less the NUL).
pub const MAX_CONGESTION_NAME: usize = 15;
/// The range of segment sizes `TCP_MAXSEG` takes (the kernel's `TCP_MIN_MSS` and
/// `MAX_TCP_WINDOW`).
pub const MSS_RANGE: std::ops::RangeInclusive<u32> = 88..=32767;
/// `--notsent-lowat`'s ceiling: past it the mark holds back nothing a test sends.
pub const MAX_NOTSENT_LOWAT: u32 = 64 << 20;
/// IPv6 flow labels: 20 bits, 0 meaning none.
pub const FLOW_LABELS: std::ops::RangeInclusive<u32> = 1..=0xFFFFF;

/// What `-M` needs of the peer.
pub const MSS: Feature = Feature::new("mss", "-M");
/// What `--fq-rate` needs of the peer.
pub const FQ_RATE: Feature = Feature::new("fq_rate", "--fq-rate");
/// What `-L` needs of the peer.
pub const FLOWLABEL: Feature = Feature::new("flowlabel", "--flowlabel");
/// What `--notsent-lowat` needs of the peer: peers of the protocol's first minor, and
/// releases that announce no such feature, would leave the mark out unsaid.
pub const NOTSENT_LOWAT: Feature = Feature::new("notsent_lowat", "--notsent-lowat").since(2);
/// Every feature TCP's options may need of the peer (see [`crate::features`]).
pub const FEATURES: [Feature; 4] = [MSS, FQ_RATE, FLOWLABEL, NOTSENT_LOWAT];

/// The options of a TCP run, both ends' alike.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
#[schemars(rename = "tcp_settings")]
pub struct TcpSettings {
    /// TCP_NODELAY on both ends (`-d`).
    #[serde(default)]
    pub nodelay: bool,
    /// TCP_QUICKACK on both ends, re-armed after every receive (`-a`).
    #[serde(default)]
    pub quickack: bool,
    /// Zero-copy sending (`--zerocopy`).
    #[serde(default)]
    pub zerocopy: ZeroCopy,
    /// The congestion control algorithm both ends set on their data sockets (`-C`);
    /// `None`: the kernel's default (`net.ipv4.tcp_congestion_control`).
    #[serde(default)]
    pub congestion: Option<String>,
    /// The receiving end's `SO_RCVLOWAT` (`--rcvlowat`), the bytes that must have
    /// arrived before a read wakes; `None`: the server's default by its cores (with two
    /// per stream and no rate, 128 KiB or one packet if larger, at most half the
    /// window; with one per stream or a rate, one packet; else the kernel's 1, as with
    /// `-r`).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_RCVLOWAT))]
    pub rcvlowat: Option<u32>,
    /// The receiving end's reads discard the bytes in the kernel (`MSG_TRUNC`) instead
    /// of copying them out (`--skip-rx-copy`).
    #[serde(default)]
    pub skip_rx_copy: bool,
    /// Every data `send()`/`recv()` goes through an io_uring of the calling thread
    /// (`--io-uring`).
    #[serde(default)]
    pub io_uring: bool,
    /// The largest segment the client's data connections send and announce in their
    /// handshake, so the server's segments keep to it too (`-M`, `TCP_MAXSEG`);
    /// `None`: the path's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u32")]
    #[schemars(range(min = *MSS_RANGE.start(), max = *MSS_RANGE.end()))]
    pub mss: Option<u32>,
    /// Both ends' data sockets: the kernel paces each one's sends to this many bits per
    /// second (`--fq-rate`, `SO_MAX_PACING_RATE`); `None`: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    #[schemars(range(min = 8))]
    pub fq_rate: Option<u64>,
    /// The IPv6 flow label of the client's data connections (`-L`); `None`: the
    /// kernel's (none, unless it makes them up itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u32")]
    #[schemars(range(min = *FLOW_LABELS.start(), max = *FLOW_LABELS.end()))]
    pub flowlabel: Option<u32>,
    /// The unsent bytes each data socket of both ends holds before a write waits
    /// (`--notsent-lowat`, `TCP_NOTSENT_LOWAT`); `None`: the kernel's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u32")]
    #[schemars(range(min = 1, max = MAX_NOTSENT_LOWAT))]
    pub notsent_lowat: Option<u32>,
    #[serde(flatten)]
    pub sockets: SocketSettings,
}

/// Why [`TcpSettings`] were refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TcpSettingsError {
    #[error(transparent)]
    Sockets(#[from] SocketSettingsError),
    #[error("--io-uring and --zerocopy are two ways to send; choose one")]
    IoUringZeroCopy,
    #[error(
        "--congestion takes an algorithm name of 1 to {MAX_CONGESTION_NAME} letters, digits, '_' or '-' (e.g. cubic, bbr, reno)"
    )]
    CongestionName,
    #[error("--rcvlowat must be between 1 byte and {MAX_RCVLOWAT} bytes (64M), not {0}")]
    Rcvlowat(u32),
    #[error("-M/--set-mss must be between 88 and 32767 bytes (the kernel's range), not {0}")]
    Mss(u32),
    #[error("--fq-rate must be at least 8 bits/s (one byte a second), not {0}")]
    FqRate(u64),
    #[error("-L/--flowlabel must be between 1 and 1048575 (20 bits), not {0}")]
    FlowLabel(u32),
    #[error("--notsent-lowat must be between 1 byte and {MAX_NOTSENT_LOWAT} bytes (64M), not {0}")]
    NotsentLowat(u32),
    #[error(
        "--fq-rate bounds the unsent bytes itself (50 ms of its rate): leave --notsent-lowat out"
    )]
    NotsentLowatFqRate,
    #[error(
        "--rcvlowat is for bulk receiving; with -r the server answers each packet as it arrives"
    )]
    RcvlowatMprtt,
    #[error(
        "--skip-rx-copy is for bulk receiving; with -r the server reads each packet to answer it"
    )]
    SkipRxCopyMprtt,
    #[error("--flows drives its connections with plain non-blocking calls from one epoll set per thread: it cannot be used {0}")]
    FlowsConflict(&'static str),
}

/// What a sample of a TCP byte stream's receive latency covers (see
/// [`TcpSettings::samples`]); rsocket's streams read the same way.
pub fn read_sample(run: &RunShape) -> Sample {
    if !run.mprtt && run.pktsize < RECV_CHUNK as u32 {
        Sample::Read {
            bytes: RECV_CHUNK as u32,
        }
    } else {
        Sample::Packet
    }
}

impl TcpSettings {
    /// The features of the peer these options need (see [`crate::features`]).
    pub fn features(&self, out: &mut Vec<Feature>) {
        if self.mss.is_some() {
            out.push(MSS);
        }
        if self.fq_rate.is_some() {
            out.push(FQ_RATE);
        }
        if self.flowlabel.is_some() {
            out.push(FLOWLABEL);
        }
        if self.notsent_lowat.is_some() {
            out.push(NOTSENT_LOWAT);
        }
        self.sockets.features(out);
    }

    /// Most bytes of packet buffers either end of the run allocates: each stream's
    /// read buffer, and `copies` packets per socket to send from (or to echo).
    pub fn buffer_bytes(&self, run: &RunShape, copies: u64) -> u64 {
        let read = u64::from(run.pktsize).max(RECV_CHUNK as u64);
        let per_stream = read + u64::from(run.nsockets) * u64::from(run.pktsize) * copies;
        u64::from(run.nstreams) * per_stream
    }

    /// A bulk receiver reads up to [`RECV_CHUNK`] at once, so a sample of its latency
    /// covers a read of several packets when they are smaller; with MPRTT one packet is
    /// on its way at a time.
    pub fn samples(&self, run: &RunShape) -> Samples {
        Samples {
            send: Sample::Packet,
            recv: read_sample(run),
        }
    }

    /// Checks every option, against each other and against the run.
    pub fn validate(&self, run: &RunShape) -> Result<(), TcpSettingsError> {
        self.sockets.validate()?;
        if self.io_uring && self.zerocopy != ZeroCopy::Off {
            return Err(TcpSettingsError::IoUringZeroCopy);
        }
        if self.io_uring && self.sockets.epoll {
            return Err(SocketSettingsError::EpollConflict("--io-uring").into());
        }
        if let Some(name) = &self.congestion {
            let valid = (1..=MAX_CONGESTION_NAME).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                return Err(TcpSettingsError::CongestionName);
            }
        }
        if let Some(value) = self.rcvlowat {
            if run.mprtt {
                return Err(TcpSettingsError::RcvlowatMprtt);
            }
            if !(1..=MAX_RCVLOWAT).contains(&value) {
                return Err(TcpSettingsError::Rcvlowat(value));
            }
        }
        if self.skip_rx_copy && run.mprtt {
            return Err(TcpSettingsError::SkipRxCopyMprtt);
        }
        if let Some(mss) = self.mss.filter(|m| !MSS_RANGE.contains(m)) {
            return Err(TcpSettingsError::Mss(mss));
        }
        if let Some(bits) = self.fq_rate.filter(|&b| b < 8) {
            return Err(TcpSettingsError::FqRate(bits));
        }
        if let Some(label) = self.flowlabel.filter(|l| !FLOW_LABELS.contains(l)) {
            return Err(TcpSettingsError::FlowLabel(label));
        }
        if let Some(bytes) = self.notsent_lowat {
            if !(1..=MAX_NOTSENT_LOWAT).contains(&bytes) {
                return Err(TcpSettingsError::NotsentLowat(bytes));
            }
            if self.fq_rate.is_some() {
                return Err(TcpSettingsError::NotsentLowatFqRate);
            }
        }
        if run.flows {
            let conflict = [
                (self.zerocopy != ZeroCopy::Off, "with --zerocopy"),
                (self.io_uring, "with --io-uring"),
                (self.sockets.busy_poll, "with --busy-poll"),
                (self.notsent_lowat.is_some(), "with --notsent-lowat"),
            ]
            .into_iter()
            .find(|(given, _)| *given);
            if let Some((_, with)) = conflict {
                return Err(TcpSettingsError::FlowsConflict(with));
            }
        }
        Ok(())
    }

    /// The first of these options that a connection per packet (`--crr`) cannot have:
    /// it connects from the stream's own thread with the kernel's socket defaults.
    pub fn crr_conflict(&self) -> Option<&'static str> {
        [
            (self.zerocopy != ZeroCopy::Off, "with --zerocopy"),
            (self.sockets.busy_poll, "with --busy-poll"),
            (self.sockets.window.is_some(), "with -w"),
            (self.quickack, "with --quickack"),
            (self.io_uring, "with --io-uring"),
            (self.sockets.epoll, "with --epoll"),
            (self.fq_rate.is_some(), "with --fq-rate"),
            (self.notsent_lowat.is_some(), "with --notsent-lowat"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }

    /// What a report header says of these options: the socket options', io_uring as
    /// the engine, and whether the receiver skipped its copy (its figures are then not
    /// like-for-like with a tool that reads the bytes).
    pub fn labels(&self) -> HeaderLabels {
        let mut sockets = self.sockets.labels();
        if let Some(mss) = self.mss {
            sockets.setup += &format!(" mss={mss}");
        }
        if let Some(bits) = self.fq_rate {
            sockets.setup += &format!(" fq_rate={}", bit_rate(bits as f64 / 8.0));
        }
        if let Some(label) = self.flowlabel {
            sockets.setup += &format!(" flowlabel={label}");
        }
        if let Some(bytes) = self.notsent_lowat {
            sockets.setup += &format!(" notsent_lowat={}", crate::units::pkt_size(bytes));
        }
        HeaderLabels {
            engine: if self.io_uring {
                " engine=io_uring"
            } else {
                sockets.engine
            },
            caveat: if self.skip_rx_copy {
                " rx_copy=skipped (the receiving end's reads discard the bytes in the kernel)"
            } else {
                ""
            },
            ..sockets
        }
    }

    /// The receiving end's `SO_RCVLOWAT`, on a host with `cores` CPUs. `--rcvlowat` if
    /// given; else the mark grows with how idle the receiving cores are, since it saves
    /// wake-ups, each an inter-processor interrupt on the sender's core:
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
    pub fn rcvlowat_bytes(&self, run: &RunShape, cores: usize) -> Option<u32> {
        if run.mprtt {
            return None;
        }
        match self.rcvlowat {
            Some(bytes) => Some(bytes),
            None if run.nstreams as usize > cores => None,
            None if !run.spare_core_per_stream(cores) => Some(run.pktsize),
            None => {
                let bulk =
                    (self.sockets.window).map_or(BULK_RCVLOWAT, |w| (w / 2).min(BULK_RCVLOWAT));
                Some(bulk.max(run.pktsize))
            }
        }
    }

    /// How long the receiving end's reader naps, while data flows, when a read finds
    /// none, before it tries once more and only then sleeps on the socket ([`RX_NAP`]).
    /// Where [`TcpSettings::rcvlowat_bytes`] gives the bulk mark (a core to spare beside
    /// each stream, unpaced, no `--rcvlowat`, no MPRTT): a reader woken by the data is
    /// woken from the sender's core, an inter-processor interrupt per wake-up; a
    /// napping one wakes on its own core's timer. `None` otherwise.
    pub fn rx_nap(&self, run: &RunShape, cores: usize) -> Option<Duration> {
        (!run.mprtt && self.rcvlowat.is_none() && run.spare_core_per_stream(cores))
            .then_some(RX_NAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BULK: RunShape = RunShape {
        nstreams: 1,
        pktsize: 32768,
        mprtt: false,
        response_size: None,
        paced: false,
        nsockets: 1,
        lock_free: false,
        flows: false,
    };

    #[test]
    fn the_receive_low_water_mark_follows_how_idle_the_receiving_cores_are() {
        let tcp = TcpSettings::default();
        assert_eq!(
            tcp.rcvlowat_bytes(&BULK, 2),
            Some(BULK_RCVLOWAT),
            "a core to spare"
        );
        let big_packets = RunShape {
            pktsize: 1 << 20,
            ..BULK
        };
        assert_eq!(
            tcp.rcvlowat_bytes(&big_packets, 2),
            Some(1 << 20),
            "never below a packet"
        );
        let windowed = |window| TcpSettings {
            sockets: SocketSettings {
                window: Some(window),
                ..SocketSettings::default()
            },
            ..TcpSettings::default()
        };
        assert_eq!(windowed(128 << 10).rcvlowat_bytes(&BULK, 2), Some(64 << 10));
        assert_eq!(windowed(16 << 10).rcvlowat_bytes(&BULK, 2), Some(32768));
        assert_eq!(
            windowed(64 << 20).rcvlowat_bytes(&BULK, 2),
            Some(BULK_RCVLOWAT)
        );
        let paced = RunShape {
            paced: true,
            ..BULK
        };
        assert_eq!(
            tcp.rcvlowat_bytes(&paced, 2),
            Some(32768),
            "a paced packet is read whole"
        );
        let streams = |nstreams| RunShape { nstreams, ..BULK };
        assert_eq!(
            tcp.rcvlowat_bytes(&streams(2), 2),
            Some(32768),
            "a core per stream"
        );
        assert_eq!(tcp.rcvlowat_bytes(&streams(2), 4), Some(BULK_RCVLOWAT));
        assert_eq!(
            tcp.rcvlowat_bytes(&streams(4), 2),
            None,
            "more streams than cores"
        );
        assert_eq!(tcp.rcvlowat_bytes(&streams(4), 4), Some(32768));
        let mprtt = RunShape {
            mprtt: true,
            ..BULK
        };
        assert_eq!(tcp.rcvlowat_bytes(&mprtt, 2), None);

        // The reads nap exactly where the bulk mark is the default.
        assert_eq!(tcp.rx_nap(&BULK, 2), Some(RX_NAP), "a core to spare");
        assert_eq!(tcp.rx_nap(&streams(2), 4), Some(RX_NAP));
        assert_eq!(tcp.rx_nap(&streams(2), 2), None, "a core per stream");
        assert_eq!(tcp.rx_nap(&streams(4), 2), None, "more streams than cores");
        assert_eq!(tcp.rx_nap(&paced, 2), None, "paced");
        assert_eq!(tcp.rx_nap(&mprtt, 2), None, "MPRTT");
        let given = |v| TcpSettings {
            rcvlowat: Some(v),
            ..TcpSettings::default()
        };
        assert_eq!(
            given(BULK_RCVLOWAT).rx_nap(&BULK, 2),
            None,
            "--rcvlowat: reads as the mark says"
        );
        assert_eq!(
            given(1).validate(&mprtt),
            Err(TcpSettingsError::RcvlowatMprtt)
        );
        assert_eq!(given(1).rcvlowat_bytes(&BULK, 2), Some(1));
        assert_eq!(given(4096).rcvlowat_bytes(&streams(4), 2), Some(4096));
        for valid in [1, 32769, MAX_RCVLOWAT] {
            assert_eq!(given(valid).validate(&BULK), Ok(()));
        }
        for value in [0, MAX_RCVLOWAT + 1] {
            assert_eq!(
                given(value).validate(&BULK),
                Err(TcpSettingsError::Rcvlowat(value))
            );
        }
    }

    #[test]
    fn skip_rx_copy_is_for_bulk_runs() {
        let skip = TcpSettings {
            skip_rx_copy: true,
            ..TcpSettings::default()
        };
        assert_eq!(skip.validate(&BULK), Ok(()));
        let mprtt = RunShape {
            mprtt: true,
            ..BULK
        };
        assert_eq!(
            skip.validate(&mprtt),
            Err(TcpSettingsError::SkipRxCopyMprtt)
        );
    }

    #[test]
    fn one_way_to_send_and_one_way_to_wait() {
        let uring = TcpSettings {
            io_uring: true,
            ..TcpSettings::default()
        };
        assert_eq!(uring.validate(&BULK), Ok(()));
        assert_eq!(uring.labels().engine, " engine=io_uring");
        let zerocopy = TcpSettings {
            zerocopy: ZeroCopy::Splice,
            ..uring.clone()
        };
        assert_eq!(
            zerocopy.validate(&BULK),
            Err(TcpSettingsError::IoUringZeroCopy)
        );
        // What a hostile client may send despite the CLI's refusals.
        let epoll = TcpSettings {
            sockets: SocketSettings {
                epoll: true,
                ..SocketSettings::default()
            },
            ..uring
        };
        assert_eq!(
            epoll.validate(&BULK),
            Err(SocketSettingsError::EpollConflict("--io-uring").into())
        );
        assert_eq!(epoll.crr_conflict(), Some("with --io-uring"));
        assert_eq!(TcpSettings::default().crr_conflict(), None);
    }

    #[test]
    fn congestion_names_are_what_the_kernel_takes() {
        for (name, ok) in [
            ("cubic", true),
            ("bbr", true),
            ("a-b_c", true),
            ("", false),
            ("x y", false),
            ("sixteen-letters!", false),
        ] {
            let s = TcpSettings {
                congestion: Some(name.to_string()),
                ..TcpSettings::default()
            };
            assert_eq!(s.validate(&BULK).is_ok(), ok, "{name:?}");
        }
    }
}
