//! What each end measured, as it travels in `Results`, `ClientResults`, `Interval` and
//! `MeshResult`, and a machine's facts as they travel in `Facts` and in the results.
//!
//! Every value a peer sends fits the report types, so both conversions are `From`. Text
//! a peer wrote (addresses, names) is made printable as it is read.

use crate::percentiles::{self, BoundedList};
use crate::results as report;
use crate::stats;
use crate::stats::datagrams::DatagramCounts;
use crate::sysinfo;
use crate::transport::figures::{TransportFigures, TransportInForce};
use crate::transport::tcp::facts::TcpInForce;
use crate::transport::udp::facts::UdpFacts;
use serde::{Deserialize, Serialize};

/// Which end produced a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Client,
    Server,
}

/// Everything one end measured in a run (see [`report::SideResult`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    pub role: Role,
    pub total: Figures,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_total: Option<Figures>,
    pub streams: Vec<StreamResult>,
    #[serde(default)]
    pub system: Option<SystemFacts>,
    #[serde(default)]
    pub cpu: Option<CpuUsage>,
    #[serde(default)]
    pub intervals: Vec<IntervalResult>,
}

/// The figures of one stream, or of all streams together (see [`report::Figures`]).
/// What a transport reports of its own travels as the transport's type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub duration_ns: u64,
    pub send_latency: Option<LatencySummary>,
    pub recv_latency: Option<LatencySummary>,
    pub submit_latency: Option<LatencySummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_latency: Option<LatencySummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_latency: Option<LatencySummary>,
    pub retries: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagrams: Option<DatagramCounts>,
    /// The transports' own figures, each under its own key (`tcp`).
    #[serde(flatten)]
    pub transport: TransportFigures,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_ns: Option<u64>,
}

/// The figures of one latency distribution, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
    /// At most [`percentiles::MAX_PERCENTILES`]: a longer list is refused while
    /// decoding.
    pub percentiles: BoundedList<PercentileValue>,
}

/// A distribution's figure at one percentile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PercentileValue {
    pub percentile: f64,
    pub ns: u64,
}

/// One stream as an end saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    pub index: u32,
    #[serde(deserialize_with = "crate::peer_text::deserialize")]
    pub local: String,
    #[serde(deserialize_with = "crate::peer_text::deserialize")]
    pub peer: String,
    #[serde(default, deserialize_with = "crate::peer_text::deserialize_option")]
    pub congestion: Option<String>,
    #[serde(default)]
    pub rcvlowat: Option<u32>,
    #[serde(default)]
    pub rx_nap_us: Option<u32>,
    pub figures: Figures,
}

/// One side's figures for one interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntervalResult {
    pub index: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub omitted: bool,
    pub total: Figures,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_total: Option<Figures>,
    pub streams: Vec<StreamInterval>,
    pub cpu: Option<CpuUsage>,
}

/// One stream's figures in an interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamInterval {
    pub index: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub figures: Figures,
}

/// CPU time an end's process used, in microseconds, and what else the kernel counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuUsage {
    pub user_us: u64,
    pub system_us: u64,
    pub counts: Option<UsageCounts>,
}

/// What `getrusage` counts besides CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageCounts {
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub max_rss_kib: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
}

/// One end's machine; `None` where the system does not say.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemFacts {
    #[serde(default, deserialize_with = "crate::peer_text::deserialize_option")]
    pub hostname: Option<String>,
    #[serde(default, deserialize_with = "crate::peer_text::deserialize_option")]
    pub cpu_model: Option<String>,
    pub cpu_cores: Option<u32>,
    #[serde(default, deserialize_with = "crate::peer_text::deserialize_option")]
    pub kernel: Option<String>,
    #[serde(deserialize_with = "crate::peer_text::deserialize")]
    pub arch: String,
    #[serde(deserialize_with = "crate::peer_text::deserialize")]
    pub fperf_version: String,
}

impl From<crate::transport::Role> for Role {
    fn from(role: crate::transport::Role) -> Role {
        match role {
            crate::transport::Role::Client => Role::Client,
            crate::transport::Role::Server => Role::Server,
        }
    }
}

impl From<Role> for crate::transport::Role {
    fn from(role: Role) -> crate::transport::Role {
        match role {
            Role::Client => crate::transport::Role::Client,
            Role::Server => crate::transport::Role::Server,
        }
    }
}

impl From<report::SideResult> for SideResult {
    fn from(r: report::SideResult) -> SideResult {
        SideResult {
            role: r.role.into(),
            total: r.total.into(),
            reverse_total: r.reverse_total.map(Figures::from),
            streams: r.streams.into_iter().map(StreamResult::from).collect(),
            system: r.system.map(SystemFacts::from),
            cpu: r.cpu.map(CpuUsage::from),
            intervals: r.intervals.into_iter().map(IntervalResult::from).collect(),
        }
    }
}

impl From<SideResult> for report::SideResult {
    fn from(r: SideResult) -> report::SideResult {
        report::SideResult {
            role: r.role.into(),
            total: r.total.into(),
            reverse_total: r.reverse_total.map(report::Figures::from),
            streams: r
                .streams
                .into_iter()
                .map(report::StreamResult::from)
                .collect(),
            system: r.system.map(sysinfo::SystemFacts::from),
            cpu: r.cpu.map(sysinfo::CpuUsage::from),
            intervals: (r.intervals.into_iter())
                .map(report::IntervalResult::from)
                .collect(),
        }
    }
}

impl From<report::Figures> for Figures {
    fn from(f: report::Figures) -> Figures {
        let latency = |l: Option<stats::LatencySummary>| l.map(LatencySummary::from);
        // UDP's figures travel in fields of their own.
        let mut transport = f.transport;
        let udp = std::mem::take(&mut transport.udp);
        Figures {
            bytes_sent: f.bytes_sent,
            bytes_received: f.bytes_received,
            duration_ns: f.duration_ns,
            send_latency: latency(f.send_latency),
            recv_latency: latency(f.recv_latency),
            submit_latency: latency(f.submit_latency),
            network_latency: latency(udp.network_latency),
            app_latency: latency(udp.app_latency),
            retries: f.retries,
            datagrams: udp.datagrams,
            transport,
            drain_ns: f.drain_ns,
        }
    }
}

impl From<Figures> for report::Figures {
    fn from(f: Figures) -> report::Figures {
        let latency = |l: Option<LatencySummary>| l.map(stats::LatencySummary::from);
        report::Figures {
            bytes_sent: f.bytes_sent,
            bytes_received: f.bytes_received,
            duration_ns: f.duration_ns,
            send_latency: latency(f.send_latency),
            recv_latency: latency(f.recv_latency),
            submit_latency: latency(f.submit_latency),
            retries: f.retries,
            transport: TransportFigures {
                udp: UdpFacts {
                    datagrams: f.datagrams,
                    network_latency: latency(f.network_latency),
                    app_latency: latency(f.app_latency),
                },
                ..f.transport
            },
            drain_ns: f.drain_ns,
        }
    }
}

impl From<stats::LatencySummary> for LatencySummary {
    fn from(l: stats::LatencySummary) -> LatencySummary {
        LatencySummary {
            count: l.count,
            min_ns: l.min_ns,
            max_ns: l.max_ns,
            mean_ns: l.mean_ns,
            stddev_ns: l.stddev_ns,
            percentiles: l.percentiles.map(|v| PercentileValue {
                percentile: v.percentile,
                ns: v.ns,
            }),
        }
    }
}

impl From<LatencySummary> for stats::LatencySummary {
    fn from(l: LatencySummary) -> stats::LatencySummary {
        stats::LatencySummary {
            count: l.count,
            min_ns: l.min_ns,
            max_ns: l.max_ns,
            mean_ns: l.mean_ns,
            stddev_ns: l.stddev_ns,
            percentiles: l.percentiles.map(|v| percentiles::PercentileValue {
                percentile: v.percentile,
                ns: v.ns,
            }),
        }
    }
}

impl From<report::StreamResult> for StreamResult {
    fn from(s: report::StreamResult) -> StreamResult {
        StreamResult {
            index: s.index,
            local: s.local,
            peer: s.peer,
            congestion: s.in_force.tcp.congestion,
            rcvlowat: s.in_force.tcp.rcvlowat,
            rx_nap_us: s.in_force.tcp.rx_nap_us,
            figures: s.figures.into(),
        }
    }
}

impl From<StreamResult> for report::StreamResult {
    fn from(s: StreamResult) -> report::StreamResult {
        report::StreamResult {
            index: s.index,
            local: s.local,
            peer: s.peer,
            in_force: TransportInForce {
                tcp: TcpInForce {
                    congestion: s.congestion,
                    rcvlowat: s.rcvlowat,
                    rx_nap_us: s.rx_nap_us,
                },
                ..TransportInForce::default()
            },
            figures: s.figures.into(),
        }
    }
}

impl From<report::IntervalResult> for IntervalResult {
    fn from(i: report::IntervalResult) -> IntervalResult {
        IntervalResult {
            index: i.index,
            start_ns: i.start_ns,
            end_ns: i.end_ns,
            omitted: i.omitted,
            total: i.total.into(),
            reverse_total: i.reverse_total.map(Figures::from),
            streams: i.streams.into_iter().map(StreamInterval::from).collect(),
            cpu: i.cpu.map(CpuUsage::from),
        }
    }
}

impl From<IntervalResult> for report::IntervalResult {
    fn from(i: IntervalResult) -> report::IntervalResult {
        report::IntervalResult {
            index: i.index,
            start_ns: i.start_ns,
            end_ns: i.end_ns,
            omitted: i.omitted,
            total: i.total.into(),
            reverse_total: i.reverse_total.map(report::Figures::from),
            streams: (i.streams.into_iter())
                .map(report::StreamInterval::from)
                .collect(),
            cpu: i.cpu.map(sysinfo::CpuUsage::from),
        }
    }
}

impl From<report::StreamInterval> for StreamInterval {
    fn from(s: report::StreamInterval) -> StreamInterval {
        StreamInterval {
            index: s.index,
            start_ns: s.start_ns,
            end_ns: s.end_ns,
            figures: s.figures.into(),
        }
    }
}

impl From<StreamInterval> for report::StreamInterval {
    fn from(s: StreamInterval) -> report::StreamInterval {
        report::StreamInterval {
            index: s.index,
            start_ns: s.start_ns,
            end_ns: s.end_ns,
            figures: s.figures.into(),
        }
    }
}

impl From<sysinfo::CpuUsage> for CpuUsage {
    fn from(c: sysinfo::CpuUsage) -> CpuUsage {
        CpuUsage {
            user_us: c.user_us,
            system_us: c.system_us,
            counts: c.counts.map(|n| UsageCounts {
                voluntary_switches: n.voluntary_switches,
                involuntary_switches: n.involuntary_switches,
                max_rss_kib: n.max_rss_kib,
                minor_faults: n.minor_faults,
                major_faults: n.major_faults,
            }),
        }
    }
}

impl From<CpuUsage> for sysinfo::CpuUsage {
    fn from(c: CpuUsage) -> sysinfo::CpuUsage {
        sysinfo::CpuUsage {
            user_us: c.user_us,
            system_us: c.system_us,
            counts: c.counts.map(|n| sysinfo::UsageCounts {
                voluntary_switches: n.voluntary_switches,
                involuntary_switches: n.involuntary_switches,
                max_rss_kib: n.max_rss_kib,
                minor_faults: n.minor_faults,
                major_faults: n.major_faults,
            }),
        }
    }
}

impl From<sysinfo::SystemFacts> for SystemFacts {
    fn from(f: sysinfo::SystemFacts) -> SystemFacts {
        SystemFacts {
            hostname: f.hostname,
            cpu_model: f.cpu_model,
            cpu_cores: f.cpu_cores,
            kernel: f.kernel,
            arch: f.arch,
            fperf_version: f.fperf_version,
        }
    }
}

impl From<SystemFacts> for sysinfo::SystemFacts {
    fn from(f: SystemFacts) -> sysinfo::SystemFacts {
        sysinfo::SystemFacts {
            hostname: f.hostname,
            cpu_model: f.cpu_model,
            cpu_cores: f.cpu_cores,
            kernel: f.kernel,
            arch: f.arch,
            fperf_version: f.fperf_version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{self, Message as Domain};
    use crate::stats::buffer_grant::BufferGrant;
    use crate::transport::tcp::facts::TcpInfo;

    fn latency(count: u64) -> stats::LatencySummary {
        let mut percentiles = BoundedList::new();
        for (percentile, ns) in [(50.0, count), (99.999, count + 1)] {
            percentiles.push(percentiles::PercentileValue { percentile, ns });
        }
        stats::LatencySummary {
            count,
            min_ns: 1,
            max_ns: count + 2,
            mean_ns: 2.5,
            stddev_ns: 0.125,
            percentiles,
        }
    }

    /// Every field set, each to a value of its own.
    fn figures(n: u64) -> report::Figures {
        report::Figures {
            bytes_sent: n,
            bytes_received: n + 1,
            duration_ns: n + 2,
            send_latency: Some(latency(n + 3)),
            recv_latency: Some(latency(n + 4)),
            submit_latency: Some(latency(n + 5)),
            retries: n + 8,
            transport: TransportFigures {
                tcp: Some(TcpInfo {
                    sockets: 2,
                    retransmits: n + 12,
                    ..TcpInfo::default()
                }),
                udp: UdpFacts {
                    datagrams: Some(DatagramCounts {
                        sent: n + 9,
                        peer_sent: n + 10,
                        received: n + 11,
                        jitter_ns: Some(0.5),
                        rcvbuf: BufferGrant {
                            requested: 8,
                            granted: 4,
                        },
                        // This end's alone: it does not travel.
                        numbered: 0,
                        ..DatagramCounts::default()
                    }),
                    network_latency: Some(latency(n + 6)),
                    app_latency: Some(latency(n + 7)),
                },
            },
            drain_ns: Some(n + 13),
        }
    }

    fn cpu(n: u64) -> sysinfo::CpuUsage {
        sysinfo::CpuUsage {
            user_us: n,
            system_us: n + 1,
            counts: Some(sysinfo::UsageCounts {
                voluntary_switches: n + 2,
                involuntary_switches: n + 3,
                max_rss_kib: n + 4,
                minor_faults: n + 5,
                major_faults: n + 6,
            }),
        }
    }

    fn interval(n: u32) -> report::IntervalResult {
        report::IntervalResult {
            index: n,
            start_ns: 10,
            end_ns: 20,
            omitted: true,
            total: figures(100),
            reverse_total: Some(figures(200)),
            streams: vec![report::StreamInterval {
                index: 1,
                start_ns: 11,
                end_ns: 19,
                figures: figures(300),
            }],
            cpu: Some(cpu(400)),
        }
    }

    fn side(role: crate::transport::Role) -> report::SideResult {
        report::SideResult {
            role,
            total: figures(1),
            reverse_total: Some(figures(2)),
            streams: vec![report::StreamResult {
                index: 3,
                local: "[::1]:1".into(),
                peer: "[::1]:2".into(),
                in_force: TransportInForce {
                    tcp: TcpInForce {
                        congestion: Some("bbr".into()),
                        rcvlowat: Some(5),
                        rx_nap_us: Some(6),
                    },
                    ..TransportInForce::default()
                },
                figures: figures(7),
            }],
            system: Some(sysinfo::SystemFacts {
                hostname: Some("h".into()),
                cpu_model: Some("c".into()),
                cpu_cores: Some(8),
                kernel: Some("k".into()),
                arch: "a".into(),
                fperf_version: "v".into(),
            }),
            cpu: Some(cpu(9)),
            intervals: vec![interval(0), interval(1)],
        }
    }

    /// `msg` encoded as a frame's body and decoded again.
    fn through_the_codec(msg: &Domain) -> Domain {
        let frame = control::encode(msg).expect("encodes");
        control::decode(&frame[control::HEADER_LEN..]).expect("decodes")
    }

    #[test]
    fn results_keep_every_field_through_the_wire() {
        for role in [
            crate::transport::Role::Client,
            crate::transport::Role::Server,
        ] {
            let result = side(role);
            let back = report::SideResult::from(SideResult::from(result.clone()));
            assert_eq!(back, result);
            for msg in [
                Domain::Results {
                    result: Box::new(result.clone()),
                },
                Domain::ClientResults {
                    result: Box::new(result.clone()),
                },
                Domain::MeshResult {
                    client: Box::new(result.clone()),
                    server: Box::new(side(crate::transport::Role::Server)),
                },
                Domain::Interval {
                    result: Box::new(interval(7)),
                },
                Domain::Facts {
                    facts: result.system.clone().expect("facts"),
                },
            ] {
                assert_eq!(through_the_codec(&msg), msg);
            }
        }
    }

    #[test]
    fn a_peers_text_is_made_printable_as_it_is_read() {
        let mut json = serde_json::to_value(SideResult::from(side(crate::transport::Role::Server)))
            .expect("encodes");
        json["streams"][0]["peer"] = "x\u{1b}[2J".into();
        json["streams"][0]["congestion"] = "bbr\n".into();
        json["system"]["hostname"] = "h\r".into();
        json["system"]["arch"] = "\u{202e}a".into();
        let read: SideResult = serde_json::from_value(json).expect("decodes");
        let shown = [
            read.streams[0].peer.clone(),
            read.streams[0].congestion.clone().unwrap_or_default(),
            read.system
                .as_ref()
                .and_then(|s| s.hostname.clone())
                .unwrap_or_default(),
            read.system.map(|s| s.arch).unwrap_or_default(),
        ];
        for text in shown {
            assert!(!text.chars().any(char::is_control), "{text:?}");
            assert!(!text.contains('\u{202e}'), "{text:?}");
        }
    }

    #[test]
    fn a_latency_holds_a_short_list_of_percentiles() {
        let mut json = serde_json::to_value(LatencySummary::from(latency(1))).expect("encodes");
        let most =
            vec![serde_json::json!({"percentile": 50.0, "ns": 1}); percentiles::MAX_PERCENTILES];
        json["percentiles"] = most.clone().into();
        assert!(serde_json::from_value::<LatencySummary>(json.clone()).is_ok());
        let mut long = most;
        long.push(serde_json::json!({"percentile": 50.0, "ns": 1}));
        json["percentiles"] = long.into();
        assert!(serde_json::from_value::<LatencySummary>(json.clone()).is_err());
        json["percentiles"] = serde_json::json!([{"percentile": 1}]);
        assert!(serde_json::from_value::<LatencySummary>(json).is_err());
    }
}
