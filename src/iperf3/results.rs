//! One end's half of iperf3's results exchange: the message each end sends the other
//! once the test ended, in iperf3's layout, from fperf's figures.

use super::wire;
use crate::settings::Protocol;
use crate::stats::StreamStats;
use crate::sysinfo::{CpuUsage, TcpInfo};
use serde_json::{json, Value};
use std::time::Duration;

/// One stream's figures, as the results message carries them.
pub struct StreamFigures<'a> {
    /// fperf's stream index (iperf3's id follows from it).
    pub index: u32,
    /// This end sends on the stream.
    pub sending: bool,
    pub stats: &'a StreamStats,
    pub tcp: Option<TcpInfo>,
    /// The time the figures cover.
    pub seconds: f64,
}

/// The results message of one end: its CPU use over `wall`, whether its sending
/// streams know their retransmits, its congestion control, and each stream's bytes
/// (and for UDP datagrams, loss and jitter).
pub fn message<'a>(
    protocol: Protocol,
    streams: impl Iterator<Item = StreamFigures<'a>>,
    cpu: Option<CpuUsage>,
    wall: Duration,
    congestion: Option<String>,
) -> Value {
    let percent = |us: u64| 100.0 * us as f64 / wall.as_micros().max(1) as f64;
    let (user, system) = cpu.map_or((0.0, 0.0), |c| (percent(c.user_us), percent(c.system_us)));
    let mut sends = false;
    let streams: Vec<Value> = streams
        .map(|s| {
            sends |= s.sending;
            let d = &s.stats.datagrams;
            let (bytes, retransmits, packets, errors, jitter) = if s.sending {
                let retransmits = s
                    .tcp
                    .map_or(-1, |t| i64::try_from(t.retransmits).unwrap_or(-1));
                (s.stats.bytes_sent, retransmits, d.sent, 0, 0.0)
            } else {
                // A receiver's packets: what the sender sent, as far as it knows.
                let jitter = d.jitter_ns.map_or(0.0, |ns| ns / 1e9);
                (s.stats.bytes_received, -1, d.peer_sent, d.lost, jitter)
            };
            json!({
                "id": wire::stream_id(s.index),
                "bytes": bytes,
                "retransmits": retransmits,
                "jitter": jitter,
                "errors": errors,
                "packets": packets,
                // fperf's figures leave the warm-up (-O) out already; iperf3 3.13 and
                // later take a missing count as "all omitted".
                "omitted_errors": 0,
                "omitted_packets": 0,
                "start_time": 0,
                "end_time": s.seconds,
            })
        })
        .collect();
    let mut doc = json!({
        "cpu_util_total": user + system,
        "cpu_util_user": user,
        "cpu_util_system": system,
        // Known for a TCP sender; UDP has none; a receiver says -1.
        "sender_has_retransmits": match (sends, protocol) {
            (false, _) => -1,
            (true, Protocol::Tcp) => 1,
            (true, _) => 0,
        },
        "streams": streams,
    });
    if let Some(cc) = congestion {
        doc["congestion_used"] = Value::String(cc);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_udp_receivers_message_carries_its_loss_and_jitter_and_a_senders_its_count() {
        let mut received = StreamStats {
            bytes_received: 9000,
            ..StreamStats::default()
        };
        received.datagrams.peer_sent = 10;
        received.datagrams.lost = 1;
        received.datagrams.jitter_ns = Some(2_000_000.0);
        let mut sent = StreamStats {
            bytes_sent: 5000,
            ..StreamStats::default()
        };
        sent.datagrams.sent = 5;
        let figures = [
            StreamFigures {
                index: 0,
                sending: false,
                stats: &received,
                tcp: None,
                seconds: 1.0,
            },
            StreamFigures {
                index: 1,
                sending: true,
                stats: &sent,
                tcp: None,
                seconds: 1.0,
            },
        ];
        let wall = Duration::from_secs(1);
        let doc = message(Protocol::Udp, figures.into_iter(), None, wall, None);
        let streams = doc["streams"].as_array().expect("streams");
        assert_eq!(streams[0]["id"], 1);
        assert_eq!(
            (streams[0]["packets"].clone(), streams[0]["errors"].clone()),
            (json!(10), json!(1))
        );
        assert_eq!(streams[0]["jitter"], 0.002);
        assert_eq!(streams[1]["id"], 3);
        assert_eq!(streams[1]["packets"], 5);
        assert_eq!(
            doc["sender_has_retransmits"], 0,
            "a UDP sender has no retransmits"
        );
        assert!(doc.get("congestion_used").is_none());
    }
}
