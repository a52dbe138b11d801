//! Scripted peers for the session machines: a byte string read as a peer's messages, and
//! the machines' invariants checked over any such script. The fuzz target (`fuzz/`) and
//! the property tests (`tests/props.rs`) share both, so CI exercises what the fuzzer
//! explores even without a nightly toolchain.

use super::session::{ClientSession, ClientStep, ServerSession, ServerStep};
use super::{decode, Message, PROTOCOL_MAJOR};
use crate::auth::{self, AuthKey, NONCE_LEN};
use crate::limits::Limits;
use crate::percentiles::Percentiles;
use crate::results::{Figures, IntervalResult, SideResult};
use crate::settings::Settings;
use crate::stats::datagrams::DatagramCounts;
use crate::stats::StreamStats;
use crate::stream::sender::QueueKind;
use crate::transport::settings::TransportSettings;
use crate::transport::udp::settings::UdpSettings;
use crate::transport::Role;
use crate::workload::{Reply, Workload};
use std::time::Duration;

/// Most messages one step of a machine may queue: a session's outbox never grows with
/// what the peer sends.
const MOST_QUEUED_PER_STEP: usize = 2;

/// The bytes of a script, read front to back; past the end every read gives zero.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl Cursor<'_> {
    fn u8(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// A number near the edges more often than not: 0, 1, small, the largest, or any.
    fn edgy(&mut self) -> u64 {
        match self.u8() % 5 {
            0 => 0,
            1 => 1,
            2 => u64::from(self.u8()),
            3 => u64::MAX,
            _ => self.u64(),
        }
    }

    fn text(&mut self) -> String {
        let len = usize::from(self.u8() % 80);
        (0..len).map(|_| char::from(self.u8())).collect()
    }

    fn hex(&mut self) -> String {
        match self.u8() % 3 {
            0 => auth::to_hex(&[self.u8(); NONCE_LEN]),
            1 => self.text(),
            _ => "00".repeat(NONCE_LEN),
        }
    }

    fn version(&mut self) -> u32 {
        match self.u8() % 4 {
            0 => PROTOCOL_MAJOR - 1,
            1 => self.u32(),
            _ => PROTOCOL_MAJOR,
        }
    }

    /// No list (a minor-0 peer), this build's own, or made-up names, as many as a peer
    /// may list or one more.
    fn features(&mut self) -> Option<Vec<String>> {
        match self.u8() % 4 {
            0 => None,
            1 => Some(crate::features::supported_names()),
            2 => Some((0..=super::MAX_FEATURES).map(|_| self.text()).collect()),
            _ => Some((0..self.u8() % 4).map(|_| self.text()).collect()),
        }
    }

    fn figures(&mut self) -> Figures {
        let mut f = Figures::new(
            &StreamStats::default(),
            Duration::from_nanos(self.edgy()),
            &Percentiles::default(),
        );
        f.bytes_sent = self.edgy();
        f.bytes_received = self.edgy();
        if self.u8() % 2 == 0 {
            f.transport.udp.datagrams = Some(DatagramCounts {
                peer_sent: self.edgy(),
                received: self.edgy(),
                lost: self.edgy(),
                duplicates: self.edgy(),
                ..DatagramCounts::default()
            });
        }
        f
    }

    fn interval(&mut self) -> IntervalResult {
        IntervalResult {
            index: self.u32() % 8,
            start_ns: self.edgy(),
            end_ns: self.edgy(),
            omitted: self.u8() % 2 == 0,
            total: self.figures(),
            reverse_total: (self.u8() % 4 == 0).then(|| self.figures()),
            streams: Vec::new(),
            cpu: None,
        }
    }

    fn settings(&mut self) -> Settings {
        let workload = match self.u8() % 6 {
            0 => Workload::Bulk,
            1 => Workload::RoundTrip(Reply::Ack),
            2 => Workload::RoundTrip(Reply::Echo),
            3 => Workload::Crr,
            4 => Workload::Reverse,
            _ => Workload::Bidir,
        };
        let transport = match self.u8() % 3 {
            0 => TransportSettings::default_for(crate::transport::settings::Protocol::Tcp),
            1 => TransportSettings::Udp(UdpSettings {
                batch: (self.u8() % 2 == 0).then(|| self.u32()),
                ack_timeout_ms: self.u32(),
                ..UdpSettings::default()
            }),
            _ => TransportSettings::default_for(crate::transport::settings::Protocol::Rdma),
        };
        Settings {
            nstreams: self.u32() % 300,
            nsockets: self.u32() % 120,
            mb: self.edgy(),
            pktsize: self.u32(),
            workload,
            queue: if self.u8() % 2 == 0 {
                QueueKind::Mutex
            } else {
                QueueKind::LockFree
            },
            interval_ms: (self.u8() % 2 == 0).then(|| self.edgy()),
            time_ms: (self.u8() % 2 == 0).then(|| self.edgy()),
            server_cpus: vec![0; usize::from(self.u8())],
            flows: self.u8() % 4 == 0,
            transport,
            ..Settings::default()
        }
    }

    /// One end's figures, with a few intervals if `intervals`.
    fn side(&mut self, role: Role, intervals: bool) -> Box<SideResult> {
        Box::new(SideResult {
            role,
            total: self.figures(),
            reverse_total: None,
            streams: Vec::new(),
            system: None,
            cpu: None,
            intervals: if intervals {
                (0..self.u8() % 3).map(|_| self.interval()).collect()
            } else {
                Vec::new()
            },
        })
    }

    fn message(&mut self) -> Message {
        match self.u8() % 21 {
            0 => Message::Hello {
                version: self.version(),
                software: self.text(),
                minor: self.u32(),
                features: self.features(),
            },
            1 => Message::DataHello {
                version: self.version(),
                session: self.u64(),
                stream: self.u32(),
                socket: self.u32(),
            },
            2 => Message::Welcome {
                version: self.version(),
                software: self.text(),
                session: self.u64(),
                minor: self.u32(),
                features: self.features(),
            },
            3 => Message::Settings {
                settings: self.settings(),
            },
            4 => Message::Ready,
            5 => Message::Results {
                result: self.side(Role::Server, true),
            },
            6 => Message::Error {
                message: self.text(),
            },
            7 => Message::UdpFinished {
                datagrams: self.u64(),
                bytes: self.u64(),
            },
            8 => Message::ClientDataReceived,
            9 => Message::Interval {
                result: Box::new(self.interval()),
            },
            10 => Message::Conf {
                version: self.version(),
            },
            11 => Message::AuthChallenge { nonce: self.hex() },
            12 => Message::AuthResponse {
                nonce: self.hex(),
                mac: self.hex(),
            },
            13 => Message::AuthConfirm { mac: self.hex() },
            14 => Message::ClientResults {
                result: self.side(Role::Client, false),
            },
            15 => Message::MeshTest {
                peer: self.text(),
                settings: self.settings(),
            },
            16 => Message::MeshResult {
                client: self.side(Role::Client, false),
                server: self.side(Role::Server, false),
            },
            17 => Message::ProbeEcho {
                seconds: self.u32(),
            },
            18 => Message::ProbeEchoing {
                port: self.u32() as u16,
                token: self.u64(),
            },
            // The rest as raw bytes a peer could send, decoded as the reader would.
            _ => {
                let len = usize::from(self.u8());
                let raw: Vec<u8> = (0..len).map(|_| self.u8()).collect();
                decode(&raw).unwrap_or(Message::Ready)
            }
        }
    }
}

/// Reads `bytes` as a peer's messages, at most `most` of them: each picks a kind from
/// one byte and its fields from the bytes after, with values at and beyond their limits.
pub fn messages(bytes: &[u8], most: usize) -> Vec<Message> {
    let mut cursor = Cursor { bytes };
    let mut out = Vec::new();
    while !cursor.bytes.is_empty() && out.len() < most {
        out.push(cursor.message());
    }
    out
}

/// Feeds `script` to a server's session (as if from a client) and a client's (as if from
/// a server), each driven as the real drivers do, and checks what every session must
/// keep to whatever it is sent: no step queues more than two messages, a failed session
/// stays failed, and a timed-out or late wait ends it. The first broken rule is
/// returned; any panic is a finding too.
pub fn check_sessions(script: &[Message], keyed: bool) -> Result<(), String> {
    let key = || {
        AuthKey::new(b"scripted", "script")
            .ok()
            .map(|k| (k, [3; NONCE_LEN]))
    };
    let auth = if keyed { key() } else { None };
    let mut server = ServerSession::new(Limits::default(), auth.clone());
    let mut server_failed = false;
    for (i, msg) in script.iter().enumerate() {
        let elapsed = Duration::from_millis(i as u64 * 700);
        let waited = server.wait_limit(elapsed);
        let step = match waited {
            Err(_) => Err(()),
            Ok(_) => server.on_message(msg.clone()).map_err(|_| ()),
        };
        match step {
            Ok(_) if server_failed => return Err(format!("server: message {i} after a failure")),
            Ok(ServerStep::Identified) => {
                let _ = server.welcome(i as u64);
            }
            Ok(ServerStep::Test(_)) => server.ready(),
            Ok(_) => {}
            Err(()) => server_failed = true,
        }
        let queued = server.take_outbox().len();
        if queued > MOST_QUEUED_PER_STEP {
            return Err(format!("server: {queued} messages queued at message {i}"));
        }
    }

    let settings = Settings {
        interval_ms: Some(10),
        ..Settings::default()
    };
    let mut client = ClientSession::new(settings, auth);
    client.take_outbox();
    let mut client_failed = false;
    for (i, msg) in script.iter().enumerate() {
        let step = client.on_message(msg.clone()).and_then(|s| {
            client
                .check_pace(Duration::from_millis(i as u64))
                .map(|()| s)
        });
        match step {
            Ok(_) if client_failed => return Err(format!("client: message {i} after a failure")),
            Ok(ClientStep::Results(_)) => client_failed = true,
            Ok(_) => {}
            Err(_) => client_failed = true,
        }
        let queued = client.take_outbox().len();
        if queued > MOST_QUEUED_PER_STEP {
            return Err(format!("client: {queued} messages queued at message {i}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_reads_every_kind_of_message() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let bytes: Vec<u8> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let script = messages(&bytes, 1000);
        assert!(script.len() > 100);
        let kinds: std::collections::BTreeSet<String> =
            script.iter().map(super::super::kind).collect();
        assert!(kinds.len() >= 14, "{kinds:?}");
        assert_eq!(check_sessions(&script, false), Ok(()));
        assert_eq!(check_sessions(&script, true), Ok(()));
    }
}
