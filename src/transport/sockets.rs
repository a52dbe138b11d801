//! The options that TCP and UDP share because both move data through kernel sockets:
//! how a thread waits for its sockets, and how large their buffers are.

use crate::options::{Feature, Iperf3, Mesh, Takes, TestOption};
use crate::transport::labels::HeaderLabels;
use crate::units::pkt_size;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Largest `--window`: a bandwidth-delay product of 100 Gbit/s over 20 ms, and a bound
/// on the kernel memory a client can ask a server to let one socket hold.
pub const MAX_WINDOW: u32 = 256 << 20;

/// The socket options of a TCP or UDP run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
#[schemars(rename = "socket_settings")]
pub struct SocketSettings {
    /// Spin on non-blocking calls instead of sleeping in `poll()` (`--busy-poll`).
    #[serde(default)]
    pub busy_poll: bool,
    /// Both ends' sockets never block; each thread waits for them in an epoll instance
    /// of its own (`--epoll`).
    #[serde(default)]
    pub epoll: bool,
    /// Both socket buffers (`SO_SNDBUF`, `SO_RCVBUF`) of every data socket on both
    /// ends, in bytes (`-w`); `None`: the kernel's autotuning (TCP) or UDP's own size.
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_WINDOW))]
    pub window: Option<u32>,
    /// The IP TOS byte (IPv6 traffic class) every data socket of both ends marks its
    /// packets with (`--tos`, `--dscp`); `None`: the kernel's, 0.
    #[serde(default)]
    pub tos: Option<u8>,
}

/// The options TCP and UDP share, each declared once (see [`crate::options`]), in the
/// order the help lists them.
pub static OPTIONS: [TestOption<SocketSettings>; 5] = [
    TestOption {
        id: "window",
        long: "window",
        short: Some('w'),
        alias: None,
        takes: Takes::Value("BYTES"),
        choices: &[],
        conflicts: &[],
        help: "Socket buffer size, SO_SNDBUF and SO_RCVBUF of every data socket on both \
               ends, as iperf3's -w (K, M suffixes; at most 256M). For TCP it replaces the \
               kernel's autotuning and bounds the window; the client sets it before \
               connecting. fperf asks past net.core.{r,w}mem_max when root; if the kernel \
               grants less, the run stops with an error. Default: TCP autotuning; UDP 16 MiB \
               each way.",
        mesh: Mesh::Help(
            "Socket buffer size of every test's data sockets on both hosts (SO_SNDBUF and \
             SO_RCVBUF), as a client's -w (K, M suffixes; at most 256M). Default: TCP \
             autotuning; UDP 16 MiB each way.",
        ),
        probe: Some("window"),
        // 0 is refused, as a window of no bytes.
        iperf3: Iperf3::Count("window"),
        what: "a number of bytes",
        set: |sockets, text| {
            sockets.window = Some(crate::units::parse_bytes_u32(text)?);
            Ok(())
        },
    },
    TestOption {
        id: "tos",
        long: "tos",
        short: None,
        alias: None,
        takes: Takes::Value("TOS"),
        choices: &[],
        conflicts: &[],
        help: "Mark every data packet of both ends with this IP TOS byte (IPv6 traffic \
               class), as iperf3's -S: decimal, 0x hex or 0 octal, e.g. 0x10.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::Count("TOS"),
        what: "a TOS byte",
        set: |sockets, text| {
            sockets.tos = Some(parse_tos(text)?);
            Ok(())
        },
    },
    TestOption {
        id: "dscp",
        long: "dscp",
        short: None,
        alias: None,
        takes: Takes::Value("DSCP"),
        choices: &[],
        conflicts: &["tos"],
        help: "Mark every data packet of both ends with this DSCP: 0 to 63, or a name such \
               as EF, AF41 or CS1 (the TOS byte's upper six bits), as iperf3's --dscp.",
        mesh: Mesh::No,
        probe: None,
        // iperf3 sends a DSCP as its TOS byte.
        iperf3: Iperf3::No,
        what: "a DSCP",
        set: |sockets, text| {
            sockets.tos = Some(parse_dscp(text)?);
            Ok(())
        },
    },
    TestOption {
        id: "busy_poll",
        long: "busy-poll",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "Spin on non-blocking reads and writes instead of sleeping in poll(): lower \
               latency, one busy core per waiting thread.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |sockets, _| {
            sockets.busy_poll = true;
            Ok(())
        },
    },
    TestOption {
        id: "epoll",
        long: "epoll",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &["busy_poll", "io_uring"],
        help: "Both ends' data sockets never block; each thread waits for them in \
               epoll_wait() on an epoll instance of its own (its sockets registered once), \
               as event-driven servers and sockperf's default -F epoll do, instead of \
               sleeping in recv()/send() or poll(). A ping-pong turn then costs one more \
               system call. Not with --busy-poll, --io-uring, --crr or rsockets.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |sockets, _| {
            sockets.epoll = true;
            Ok(())
        },
    },
];

/// A TOS byte as iperf3's `-S` reads it: decimal, `0x` hex or `0` octal, 0 to 255.
pub fn parse_tos(text: &str) -> Result<u8, String> {
    let t = text.trim();
    let parsed = if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u8::from_str_radix(hex, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u8::from_str_radix(&t[1..], 8)
    } else {
        t.parse()
    };
    parsed.map_err(|_| format!("'{text}' is not a TOS byte (0 to 255; 0x10 and 020 work too)"))
}

/// A DSCP as a number (0 to 63) or a name (`EF`, `AF11`...`AF43`, `CS0`...`CS7`,
/// `VA`, `LE`), as the TOS byte that carries it (the DSCP shifted left by 2).
pub fn parse_dscp(text: &str) -> Result<u8, String> {
    let name = text.trim().to_ascii_uppercase();
    let dscp = match name.as_str() {
        "EF" => Some(46),
        "VA" => Some(44),
        "LE" => Some(1),
        _ => {
            let digits = |prefix: &str| name.strip_prefix(prefix).map(str::as_bytes);
            match (digits("CS"), digits("AF")) {
                (Some([c @ b'0'..=b'7']), _) => Some(8 * (c - b'0')),
                (_, Some([x @ b'1'..=b'4', y @ b'1'..=b'3'])) => {
                    Some(8 * (x - b'0') + 2 * (y - b'0'))
                }
                _ => name.parse::<u8>().ok().filter(|d| *d < 64),
            }
        }
    };
    dscp.map(|d| d << 2)
        .ok_or_else(|| format!("'{text}' is not a DSCP (0 to 63, or a name such as EF, AF41, CS1)"))
}

/// Why [`SocketSettings`] were refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SocketSettingsError {
    #[error("--epoll and {0} are two ways to wait for a socket; choose one")]
    EpollConflict(&'static str),
    #[error("--window must be between 1 byte and {MAX_WINDOW} bytes (256M), not {0}")]
    Window(u32),
}

/// What `--tos` and `--dscp` need of the peer.
pub const TOS: Feature = Feature::new("tos", "--tos");
/// Every feature the socket options may need of the peer (see [`crate::features`]).
pub const FEATURES: [Feature; 1] = [TOS];

impl SocketSettings {
    /// The features of the peer these options need (see [`crate::features`]).
    pub fn features(&self, out: &mut Vec<Feature>) {
        if self.tos.is_some() {
            out.push(TOS);
        }
    }

    /// Checks the options against each other.
    pub fn validate(&self) -> Result<(), SocketSettingsError> {
        if self.epoll && self.busy_poll {
            return Err(SocketSettingsError::EpollConflict("--busy-poll"));
        }
        match self.window {
            Some(bytes) if !(1..=MAX_WINDOW).contains(&bytes) => {
                Err(SocketSettingsError::Window(bytes))
            }
            _ => Ok(()),
        }
    }

    /// What a report header says of these options: `--epoll` (how the data calls
    /// waited) and `-w` (the socket buffers every data socket has: the kernel granted
    /// them, or the run would have stopped).
    pub fn labels(&self) -> HeaderLabels {
        HeaderLabels {
            engine: if self.epoll { " engine=epoll" } else { "" },
            setup: [
                (self.window).map(|w| format!(" window={}", pkt_size(w))),
                (self.tos).map(|t| format!(" tos=0x{t:02x}")),
            ]
            .into_iter()
            .flatten()
            .collect(),
            caveat: "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tos_and_dscp_read_as_iperf3_reads_them() {
        assert_eq!(parse_tos("16"), Ok(16));
        assert_eq!(parse_tos("0x10"), Ok(16));
        assert_eq!(parse_tos("020"), Ok(16));
        assert_eq!(parse_tos("0"), Ok(0));
        assert!(parse_tos("256").is_err() && parse_tos("0x").is_err());
        assert_eq!(parse_dscp("ef"), Ok(46 << 2));
        assert_eq!(parse_dscp("AF41"), Ok(34 << 2));
        assert_eq!(parse_dscp("cs1"), Ok(8 << 2));
        assert_eq!(parse_dscp("63"), Ok(63 << 2));
        for bad in ["64", "AF44", "CS8", "fast"] {
            assert!(parse_dscp(bad).is_err(), "{bad}");
        }
        let marked = SocketSettings {
            tos: Some(0xb8),
            ..SocketSettings::default()
        };
        assert_eq!(marked.labels().setup, " tos=0xb8");
    }

    #[test]
    fn the_window_is_bounded_and_epoll_is_one_way_of_waiting() {
        for window in [1, 64 << 10, MAX_WINDOW] {
            let s = SocketSettings {
                window: Some(window),
                ..SocketSettings::default()
            };
            assert_eq!(s.validate(), Ok(()), "{window}");
            assert!(s.labels().setup.starts_with(" window="));
        }
        for window in [0, MAX_WINDOW + 1] {
            let s = SocketSettings {
                window: Some(window),
                ..SocketSettings::default()
            };
            assert_eq!(s.validate(), Err(SocketSettingsError::Window(window)));
        }
        // What a hostile client may send despite the CLI's refusal.
        let both = SocketSettings {
            epoll: true,
            busy_poll: true,
            window: None,
            tos: None,
        };
        assert_eq!(
            both.validate(),
            Err(SocketSettingsError::EpollConflict("--busy-poll"))
        );
    }
}
