//! The options that TCP and UDP share because both move data through kernel sockets:
//! how a thread waits for its sockets, and how large their buffers are.

use crate::features::Feature;
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

impl SocketSettings {
    /// The features of the peer these options need (see [`crate::features`]).
    pub fn features(&self, out: &mut Vec<Feature>) {
        if self.tos.is_some() {
            out.push(Feature::Tos);
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
