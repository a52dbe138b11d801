//! The layout of one latency probe, as the client sends it and the server echoes it:
//! a fixed size, so that an echo is never larger than what asked for it.
//!
//! | bytes | field |
//! |-------|-------|
//! | 0..4  | magic `FPRB` |
//! | 4..12 | the session's token, drawn by the server |
//! | 12..20 | sequence number |
//! | 20..28 | client's send time (ns since the Unix epoch, the client's clock) |
//! | 28..36 | server's receive time (ns since the Unix epoch, the server's clock; 0 until echoed) |
//! | 36..44 | server's send time (likewise) |
//! | 44..48 | zero |
//!
//! Every number is big-endian.

use std::time::{SystemTime, UNIX_EPOCH};

/// The size of every probe and echo, in bytes.
pub const PROBE_LEN: usize = 48;

const MAGIC: [u8; 4] = *b"FPRB";

/// One probe's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub token: u64,
    pub seq: u64,
    /// The client's clock when it sent the probe, in ns since the Unix epoch.
    pub client_send_ns: u64,
    /// The server's clock when the probe arrived, in ns since the Unix epoch (0 in a
    /// probe not echoed yet).
    pub server_recv_ns: u64,
    /// The server's clock when it sent the echo back.
    pub server_send_ns: u64,
}

impl Probe {
    /// The datagram of this probe.
    pub fn encode(&self) -> [u8; PROBE_LEN] {
        let mut out = [0u8; PROBE_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4..12].copy_from_slice(&self.token.to_be_bytes());
        out[12..20].copy_from_slice(&self.seq.to_be_bytes());
        out[20..28].copy_from_slice(&self.client_send_ns.to_be_bytes());
        out[28..36].copy_from_slice(&self.server_recv_ns.to_be_bytes());
        out[36..44].copy_from_slice(&self.server_send_ns.to_be_bytes());
        out
    }

    /// The probe `bytes` hold, if they are one of session `token`: the right size,
    /// magic and token.
    pub fn decode(bytes: &[u8], token: u64) -> Option<Probe> {
        if bytes.len() != PROBE_LEN || bytes[0..4] != MAGIC {
            return None;
        }
        let field = |at: usize| {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(&bytes[at..at + 8]);
            u64::from_be_bytes(raw)
        };
        (field(4) == token).then(|| Probe {
            token,
            seq: field(12),
            client_send_ns: field(20),
            server_recv_ns: field(28),
            server_send_ns: field(36),
        })
    }
}

/// This host's clock, in ns since the Unix epoch (0 before it).
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_reads_back_only_with_its_token_and_size() {
        let probe = Probe {
            token: 0xfeed,
            seq: 7,
            client_send_ns: 1,
            server_recv_ns: 2,
            server_send_ns: 3,
        };
        let bytes = probe.encode();
        assert_eq!(Probe::decode(&bytes, 0xfeed), Some(probe));
        assert_eq!(Probe::decode(&bytes, 0xbeef), None);
        assert_eq!(Probe::decode(&bytes[..PROBE_LEN - 1], 0xfeed), None);
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert_eq!(Probe::decode(&longer, 0xfeed), None);
        let mut bad_magic = bytes;
        bad_magic[0] = b'X';
        assert_eq!(Probe::decode(&bad_magic, 0xfeed), None);
    }
}
