//! One end's half of iperf3's results exchange: the message each end sends the other
//! once the test ended, in iperf3's layout, from fperf's figures; and what a server
//! takes from the client's.

use super::wire;
use crate::results::{Figures, SideResult, SideTotals, StreamResult};
use crate::settings::Settings;
use crate::stats::datagrams::DatagramCounts;
use crate::stats::StreamStats;
use crate::sysinfo::CpuUsage;
use crate::transport::figures::TransportInForce;
use crate::transport::settings::Protocol;
use crate::transport::tcp::facts::{TcpInForce, TcpInfo};
use crate::transport::Role;
use anyhow::{anyhow, Result};
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

/// One stream's figures, as the results message carries them.
pub struct StreamFigures<'a> {
    /// fperf's stream index (iperf3's id follows from it).
    pub index: u32,
    /// This end sends on the stream.
    pub sending: bool,
    /// Its figures after the warm-up (`-O`).
    pub stats: &'a StreamStats,
    /// Its datagrams in the warm-up.
    pub warm_up: &'a DatagramCounts,
    pub tcp: Option<TcpInfo>,
    /// The time the figures cover ([`test_seconds`]).
    pub seconds: f64,
}

/// The time an iperf3 end reports every stream's figures over: from the test's start,
/// after its warm-up (`-O`), to its end (`TEST_END`), however the data came within it.
/// A paced stream of a few packets then shows its rate, as iperf3's own ends report
/// it, where fperf's reports span its first byte to its last.
pub fn test_seconds(settings: &Settings, started: Instant, ended: Instant) -> f64 {
    let omitted = Duration::from_millis(settings.omit_ms.unwrap_or(0));
    ended
        .saturating_duration_since(started)
        .saturating_sub(omitted)
        .as_secs_f64()
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
            let (d, warm) = (&s.stats.datagrams, s.warm_up);
            // Packets count from the start of the test, warm-up included, as iperf3's
            // ends count them: 3.13 and later take off the warm-up's count sent here,
            // 3.12 its own. The lost ones are those after the warm-up alone, as both
            // versions take them.
            let (bytes, retransmits, packets, omitted, errors, jitter) = if s.sending {
                let retransmits = s
                    .tcp
                    .map_or(-1, |t| i64::try_from(t.retransmits).unwrap_or(-1));
                (s.stats.bytes_sent, retransmits, d.sent, warm.sent, 0, 0.0)
            } else {
                // A receiver's packets: what the sender sent, as far as it knows.
                let jitter = d.jitter_ns.map_or(0.0, |ns| ns / 1e9);
                let bytes = s.stats.bytes_received;
                (bytes, -1, d.peer_sent, warm.peer_sent, d.lost, jitter)
            };
            json!({
                "id": wire::stream_id(s.index),
                "bytes": bytes,
                "retransmits": retransmits,
                "jitter": jitter,
                "errors": errors,
                "packets": packets.saturating_add(omitted),
                "omitted_errors": 0,
                "omitted_packets": omitted,
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

/// Server, UDP: the datagrams the client says it sent on each stream the server
/// received (`received`: by stream index, its figures after the warm-up and the
/// warm-up's), from the client's results (`theirs`), make the loss exact (sent less
/// received once); a count no run can have is left out. The client counts from the
/// start of the test: its warm-up's count (`-O`) comes off, as it says it (3.13 and
/// later) or as the server saw it by the packets' numbers (3.12).
pub fn count_losses<'a>(
    settings: &Settings,
    received: impl Iterator<Item = (u32, &'a mut StreamStats, &'a DatagramCounts)>,
    theirs: &Map<String, Value>,
) {
    let most = settings.most_bytes() / u64::from(settings.pktsize.max(1));
    let Some(streams) = theirs.get("streams").and_then(Value::as_array) else {
        return;
    };
    for (index, stats, warm_up) in received {
        if settings.server_sends_on(index) {
            continue;
        }
        let id = u64::from(wire::stream_id(index));
        let Some(theirs) = streams
            .iter()
            .find(|s| s.get("id").and_then(Value::as_u64) == Some(id))
        else {
            continue;
        };
        let count = |key: &str| theirs.get(key).and_then(Value::as_u64);
        let warm_up = count("omitted_packets").unwrap_or(warm_up.peer_sent);
        let sent = count("packets")
            .map(|p| p.saturating_sub(warm_up))
            .filter(|&p| p <= most);
        if let Some(sent) = sent {
            let d = &mut stats.datagrams;
            let unique = d.received.saturating_sub(d.duplicates);
            d.peer_sent = sent;
            d.lost = sent.saturating_sub(unique);
        }
    }
}

/// The iperf3 server's figures, as fperf reports a server's, from its results message:
/// checked as any peer's figures are. Its packet counts run from the start of the
/// test: the warm-up's (`-O`) come off, as it says them (3.13 and later) or as this
/// end counted them (`warm_ups`, by stream). With them, by stream, the datagrams it
/// says it sent from the start of the test, where it sent on that stream.
pub fn server_result(
    settings: &Settings,
    theirs: &Map<String, Value>,
    warm_ups: &[DatagramCounts],
) -> Result<(SideResult, Vec<Option<u64>>)> {
    let impossible = |why: String| anyhow!("the iperf3 server sent impossible figures: {why}");
    let streams = theirs
        .get("streams")
        .and_then(Value::as_array)
        .ok_or_else(|| impossible("no streams".into()))?;
    if streams.len() > settings.nstreams as usize {
        return Err(impossible(format!(
            "{} streams in a test of {}",
            streams.len(),
            settings.nstreams
        )));
    }
    let base = Instant::now();
    let mut totals = SideTotals::new(settings.first_server_stream());
    let mut results = Vec::with_capacity(streams.len());
    let mut seen = vec![false; settings.nstreams as usize];
    let mut sent_in_all = vec![None; settings.nstreams as usize];
    for stream in streams {
        let id = stream.get("id").and_then(Value::as_u64).unwrap_or(0);
        let index = (0..settings.nstreams)
            .find(|&i| u64::from(wire::stream_id(i)) == id)
            .ok_or_else(|| impossible(format!("a stream with id {id}")))?;
        if std::mem::replace(&mut seen[index as usize], true) {
            return Err(impossible(format!("stream id {id} twice")));
        }
        let bytes = stream.get("bytes").and_then(Value::as_u64).unwrap_or(0);
        let seconds = stream
            .get("end_time")
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
            - stream
                .get("start_time")
                .and_then(Value::as_f64)
                .unwrap_or(0.0);
        if !(0.0..=1e7).contains(&seconds) {
            return Err(impossible(format!("a stream that ran {seconds} s")));
        }
        let duration = Duration::from_secs_f64(seconds);
        let sending = settings.server_sends_on(index);
        let mut stats = StreamStats::default();
        if sending {
            stats.bytes_sent = bytes;
        } else {
            stats.bytes_received = bytes;
        }
        if settings.protocol() == Protocol::Udp {
            let given = |key: &str| stream.get(key).and_then(Value::as_u64);
            let count = |key: &str| given(key).unwrap_or(0);
            let warm_up = warm_ups.get(index as usize).copied().unwrap_or_default();
            let d = &mut stats.datagrams;
            if sending {
                let omitted = given("omitted_packets").unwrap_or(warm_up.peer_sent);
                d.sent = count("packets").saturating_sub(omitted);
                sent_in_all[index as usize] = given("packets");
            } else {
                // iperf3's receiver: the highest number seen, and those missing below.
                let omitted = given("omitted_packets").unwrap_or(warm_up.sent);
                let packets = count("packets").saturating_sub(omitted);
                let errors = count("errors").saturating_sub(count("omitted_errors"));
                d.peer_sent = packets;
                d.lost = errors.min(packets);
                d.received = packets - d.lost;
                d.jitter_ns = stream
                    .get("jitter")
                    .and_then(Value::as_f64)
                    .filter(|j| (0.0..1e3).contains(j))
                    .map(|j| j * 1e9);
            }
        }
        let mut figures = Figures::new(&stats, duration, &settings.percentiles);
        if let Some(why) = figures.impossible(settings) {
            return Err(impossible(why));
        }
        // iperf3 3.12 writes -1 as 2^64 - 1: only a count below 2^63 is one.
        let retransmits = stream
            .get("retransmits")
            .and_then(Value::as_u64)
            .filter(|&r| sending && r < 1 << 63);
        figures.transport.tcp = retransmits.map(|r| TcpInfo {
            sockets: 1,
            retransmits: r,
            ..TcpInfo::default()
        });
        totals.add(
            index,
            &stats,
            &figures.transport,
            Some((base, base + duration)),
        );
        results.push(StreamResult {
            index,
            local: String::new(),
            peer: String::new(),
            in_force: TransportInForce {
                tcp: TcpInForce {
                    congestion: theirs
                        .get("congestion_used")
                        .and_then(Value::as_str)
                        .map(|s| {
                            crate::peer_text::printable(&s.chars().take(16).collect::<String>())
                        }),
                    ..TcpInForce::default()
                },
                ..TransportInForce::default()
            },
            figures,
        });
    }
    results.sort_by_key(|r| r.index);
    let (total, reverse_total) = totals.figures(&settings.percentiles);
    let percent = |key: &str| {
        theirs
            .get(key)
            .and_then(Value::as_f64)
            .filter(|p| (0.0..=1e5).contains(p))
            .unwrap_or(0.0)
    };
    let wall = total.duration_ns;
    let cpu_us = |p: f64| (p / 100.0 * wall as f64 / 1000.0) as u64;
    let server = SideResult {
        role: Role::Server,
        total,
        reverse_total,
        streams: results,
        system: None,
        cpu: Some(CpuUsage {
            user_us: cpu_us(percent("cpu_util_user")),
            system_us: cpu_us(percent("cpu_util_system")),
            counts: None,
        }),
        intervals: Vec::new(),
    };
    Ok((server, sent_in_all))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of a UDP test whose stream 0 received and stream 1 sent, each with
    /// its figures after the warm-up and its warm-up's datagrams, over 1 s.
    fn udp_message(
        (received, received_warm): (&StreamStats, &DatagramCounts),
        (sent, sent_warm): (&StreamStats, &DatagramCounts),
    ) -> Value {
        let figures = [
            StreamFigures {
                index: 0,
                sending: false,
                stats: received,
                warm_up: received_warm,
                tcp: None,
                seconds: 1.0,
            },
            StreamFigures {
                index: 1,
                sending: true,
                stats: sent,
                warm_up: sent_warm,
                tcp: None,
                seconds: 1.0,
            },
        ];
        let wall = Duration::from_secs(1);
        message(Protocol::Udp, figures.into_iter(), None, wall, None)
    }

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
        let none = DatagramCounts::default();
        let doc = udp_message((&received, &none), (&sent, &none));
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
        assert_eq!(
            (
                streams[0]["omitted_packets"].clone(),
                streams[1]["omitted_packets"].clone()
            ),
            (json!(0), json!(0))
        );
    }

    #[test]
    fn packets_count_from_the_start_with_the_warm_ups_said_apart_and_its_loss_left_out() {
        // After the warm-up: 8 numbered datagrams seen, 2 of them lost; 4 sent.
        let mut received = StreamStats::default();
        received.datagrams.peer_sent = 8;
        received.datagrams.lost = 2;
        let mut sent = StreamStats::default();
        sent.datagrams.sent = 4;
        // In the warm-up: 12 received of which 1 lost; 6 sent.
        let received_warm = DatagramCounts {
            peer_sent: 12,
            lost: 1,
            ..DatagramCounts::default()
        };
        let sent_warm = DatagramCounts {
            sent: 6,
            ..DatagramCounts::default()
        };
        let doc = udp_message((&received, &received_warm), (&sent, &sent_warm));
        let streams = doc["streams"].as_array().expect("streams");
        let field = |i: usize, key: &str| streams[i][key].as_u64().expect(key);
        assert_eq!(field(0, "packets"), 20);
        assert_eq!(field(0, "omitted_packets"), 12);
        assert_eq!(field(0, "errors"), 2);
        assert_eq!(field(0, "omitted_errors"), 0);
        assert_eq!(field(1, "packets"), 10);
        assert_eq!(field(1, "omitted_packets"), 6);
    }
}
