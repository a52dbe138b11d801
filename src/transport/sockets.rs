//! The options that TCP and UDP share because both move data through kernel sockets:
//! how a thread waits for its sockets, and how large their buffers are.

use crate::settings::labels::HeaderLabels;
use crate::units::pkt_size;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Largest `--window`: a bandwidth-delay product of 100 Gbit/s over 20 ms, and a bound
/// on the kernel memory a client can ask a server to let one socket hold.
pub const MAX_WINDOW: u32 = 256 << 20;

/// The socket options of a TCP or UDP run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketSettings {
    /// Spin on non-blocking calls instead of sleeping in `poll()` (`--busy-poll`).
    #[serde(default)]
    pub busy_poll: bool,
    /// Both ends' sockets never block; each thread waits for them in an epoll instance
    /// of its own (`--epoll`).
    #[serde(default)]
    pub epoll: bool,
    /// Both socket buffers (`SO_SNDBUF`, `SO_RCVBUF`) of every data socket on both
    /// ends, in bytes (`-w`); `None`: the kernel's autotuning (TCP) or the UDP STREAM's
    /// own size.
    #[serde(default)]
    pub window: Option<u32>,
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
            setup: (self.window).map_or_else(String::new, |w| format!(" window={}", pkt_size(w))),
            caveat: "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        assert_eq!(
            both.validate(),
            Err(SocketSettingsError::EpollConflict("--busy-poll"))
        );
    }
}
