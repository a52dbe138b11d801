//! The control protocol's encoding, pinned per protocol version.
//!
//! `tests/wire/v{MAJOR}.{MINOR}.json` holds one frame body of every message, every
//! optional field present, as that protocol version (and so the release that brought
//! it) writes them; `v{N}.json` are the versions from before the major/minor split.
//! - The current version's file must decode and encode again to the same JSON: a change
//!   to a type that travels in a message (settings, results, intervals, system facts)
//!   changes it and fails here, so the protocol cannot change by accident. Such a change
//!   comes with a new `PROTOCOL_MINOR` (or, if older peers could not survive it, a new
//!   `PROTOCOL_MAJOR`), and `FPERF_BLESS_WIRE=1 cargo test --test wire` records the new
//!   version's file; it never overwrites an existing version's.
//! - Every earlier minor's file of the same major must still decode, keeping every field
//!   it has: a peer of that release is understood in full.
//! - Other majors' hellos are refused, naming both versions.

use fperf::control::{self, Message, PROTOCOL_MAJOR, PROTOCOL_MINOR};
use fperf::latency_probe::phases::{PhaseKind, PhasePlan, PhaseReport, RttFigures};
use fperf::results::{Figures, IntervalResult, SideResult, StreamInterval, StreamResult};
use fperf::settings::{SchedPolicy, Settings};
use fperf::stats::buffer_grant::BufferGrant;
use fperf::stats::datagrams::DatagramCounts;
use fperf::stats::LatencySummary;
use fperf::stream::sender::QueueKind;
use fperf::sysinfo::{CpuUsage, SystemFacts, UsageCounts};
use fperf::transport::figures::{TransportFigures, TransportInForce};
use fperf::transport::rdma::settings::{RdmaApi, RdmaSettings};
use fperf::transport::settings::TransportSettings;
use fperf::transport::sockets::SocketSettings;
use fperf::transport::tcp::facts::TcpInForce;
use fperf::transport::tcp::settings::TcpSettings;
use fperf::transport::tcp::zerocopy::ZeroCopy;
use fperf::transport::udp::facts::UdpFacts;
use fperf::transport::udp::settings::UdpSettings;
use fperf::transport::Role;
use fperf::workload::{Reply, Workload};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

fn wire_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/wire")
}

fn golden_path() -> PathBuf {
    wire_dir().join(format!("v{PROTOCOL_MAJOR}.{PROTOCOL_MINOR}.json"))
}

/// The recorded files: (major, minor, path); minor `None` for the versions from before
/// the split.
fn recorded() -> Vec<(u32, Option<u32>, PathBuf)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(wire_dir()).expect("tests/wire") {
        let path = entry.expect("entry").path();
        let name = path.file_stem().and_then(|n| n.to_str()).unwrap_or("");
        let Some(version) = name.strip_prefix('v') else {
            continue;
        };
        let (major, minor) = match version.split_once('.') {
            Some((a, b)) => (a.parse().expect("major"), Some(b.parse().expect("minor"))),
            None => (version.parse().expect("version"), None),
        };
        out.push((major, minor, path));
    }
    out.sort();
    out
}

fn read_golden(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("golden file");
    serde_json::from_str(&text).expect("golden JSON")
}

fn latency() -> LatencySummary {
    LatencySummary {
        count: 3,
        min_ns: 1,
        max_ns: 9,
        mean_ns: 4.5,
        stddev_ns: 0.25,
        percentiles: serde_json::from_str(
            r#"[{"percentile": 50.0, "ns": 4}, {"percentile": 99.99, "ns": 9}]"#,
        )
        .expect("a short list"),
    }
}

fn figures() -> Figures {
    Figures {
        bytes_sent: 1 << 40,
        bytes_received: 12345,
        duration_ns: 1_000_000_007,
        send_latency: Some(latency()),
        recv_latency: Some(latency()),
        submit_latency: Some(latency()),
        retries: 2,
        transport: TransportFigures {
            // Every figure this version sends; an earlier version's file lacks those
            // added since, and a later one's adds its own.
            tcp: serde_json::from_value(serde_json::json!({
                "sockets": 1,
                "retransmits": 5,
                "cwnd_bytes": 65536,
                "srtt_us": 20,
                "rttvar_us": 3,
                "snd_wnd_bytes": 131072,
                "mss": 1448,
                "pmtu": 1500,
                "min_rtt": 15,
                "pacing_rate": 250_000_000,
                "delivery_rate": 120_000_000,
                "busy_time": 1_000_000,
                "rwnd_limited": 600_000,
                "sndbuf_limited": 100_000,
            }))
            .expect("tcp_info"),
            udp: UdpFacts {
                datagrams: Some(DatagramCounts {
                    sent: 10,
                    peer_sent: 11,
                    received: 9,
                    duplicates: 1,
                    out_of_order: 2,
                    lost: 3,
                    numbered: 0,
                    foreign: 4,
                    jitter_ns: Some(12.5),
                    rcvbuf: BufferGrant {
                        requested: 16,
                        granted: 8,
                    },
                    sndbuf: BufferGrant {
                        requested: 16,
                        granted: 16,
                    },
                }),
                network_latency: Some(latency()),
                app_latency: Some(latency()),
            },
        },
        drain_ns: Some(300_000_001),
    }
}

fn cpu() -> CpuUsage {
    CpuUsage {
        user_us: 7,
        system_us: 8,
        counts: Some(UsageCounts {
            voluntary_switches: 9,
            involuntary_switches: 10,
            max_rss_kib: 11,
            minor_faults: 12,
            major_faults: 13,
        }),
    }
}

fn interval() -> IntervalResult {
    IntervalResult {
        index: 1,
        start_ns: 1_000_000_000,
        end_ns: 2_000_000_000,
        omitted: true,
        total: figures(),
        reverse_total: Some(figures()),
        streams: vec![StreamInterval {
            index: 0,
            start_ns: 1_000_000_000,
            end_ns: 2_000_000_000,
            figures: figures(),
        }],
        cpu: Some(cpu()),
    }
}

fn facts() -> SystemFacts {
    SystemFacts {
        hostname: Some("host".into()),
        cpu_model: Some("cpu".into()),
        cpu_cores: Some(2),
        kernel: Some("6.1".into()),
        arch: "x86_64".into(),
        fperf_version: "0.1.0".into(),
    }
}

/// Every field set, TCP's options included (validity does not matter to the encoding).
fn settings() -> Settings {
    Settings {
        nstreams: 2,
        workload: Workload::RoundTrip(Reply::Echo),
        queue: QueueKind::LockFree,
        time_ms: Some(1000),
        transactions: Some(77),
        response_size: Some(4096),
        interval_ms: Some(100),
        omit_ms: Some(10),
        rate_bps: Some(1_000_000),
        client_cpus: vec![0, 1],
        server_cpus: vec![1],
        sched: SchedPolicy::Normal,
        percentiles: "50,99.99".parse().expect("a valid list"),
        transport: TransportSettings::Tcp(TcpSettings {
            nodelay: true,
            quickack: true,
            zerocopy: ZeroCopy::Splice,
            congestion: Some("cubic".into()),
            rcvlowat: Some(4096),
            skip_rx_copy: true,
            io_uring: true,
            mss: Some(1400),
            fq_rate: Some(250_000_000),
            flowlabel: Some(0x12345),
            notsent_lowat: Some(16384),
            sockets: sockets(),
        }),
        ..Settings::default()
    }
}

fn sockets() -> SocketSettings {
    SocketSettings {
        busy_poll: true,
        epoll: true,
        window: Some(1 << 20),
        tos: Some(0xb8),
    }
}

/// The settings of a UDP run, every UDP option set.
fn udp_settings() -> Settings {
    Settings {
        workload: Workload::Reverse,
        transport: TransportSettings::Udp(UdpSettings {
            batch: Some(8),
            gso: true,
            gro: true,
            ack_timeout_ms: 5,
            rx_timestamps: true,
            dont_fragment: true,
            sockets: sockets(),
            // The client's own: never on the wire.
            xdp: None,
        }),
        ..Settings::default()
    }
}

/// The settings of an RDMA run, every RDMA option set.
fn rdma_settings() -> Settings {
    Settings {
        workload: Workload::RoundTrip(Reply::Ack),
        transport: TransportSettings::Rdma(RdmaSettings {
            api: RdmaApi::Ofi,
            device: Some("rxe0".into()),
            ofi_provider: Some("tcp".into()),
            write: true,
        }),
        ..Settings::default()
    }
}

/// One of every message.
fn messages() -> Vec<Message> {
    let side = SideResult {
        role: Role::Server,
        total: figures(),
        reverse_total: Some(figures()),
        streams: vec![StreamResult {
            index: 0,
            local: "127.0.0.1:1".into(),
            peer: "127.0.0.1:2".into(),
            in_force: TransportInForce {
                tcp: TcpInForce {
                    congestion: Some("bbr".into()),
                    rcvlowat: Some(131072),
                    rx_nap_us: Some(20),
                },
                ..TransportInForce::default()
            },
            figures: figures(),
        }],
        system: Some(facts()),
        cpu: Some(cpu()),
        intervals: vec![interval()],
    };
    vec![
        Message::Hello {
            version: PROTOCOL_MAJOR,
            software: "fperf".into(),
            minor: PROTOCOL_MINOR,
            features: Some(vec!["rx_timestamps".into(), "mss".into()]),
        },
        Message::DataHello {
            version: PROTOCOL_MAJOR,
            session: u64::MAX,
            stream: 1,
            socket: 2,
        },
        Message::Welcome {
            version: PROTOCOL_MAJOR,
            software: "fperf".into(),
            session: 7,
            minor: PROTOCOL_MINOR,
            features: Some(fperf::features::supported_names()),
        },
        Message::Settings {
            settings: settings(),
        },
        Message::Settings {
            settings: udp_settings(),
        },
        Message::Settings {
            settings: rdma_settings(),
        },
        Message::Settings {
            settings: Settings {
                workload: Workload::Crr,
                ..Settings::default()
            },
        },
        Message::Settings {
            settings: Settings {
                workload: Workload::Bidir,
                ..Settings::default()
            },
        },
        Message::Ready,
        Message::Results {
            result: Box::new(side.clone()),
        },
        Message::ClientResults {
            result: Box::new(SideResult {
                role: Role::Client,
                ..side.clone()
            }),
        },
        Message::Error {
            message: "why".into(),
        },
        Message::UdpSockets {
            addrs: vec!["127.0.0.1:5".parse().unwrap(), "[::1]:6".parse().unwrap()],
        },
        Message::UdpFinished {
            datagrams: 3,
            bytes: 4,
        },
        Message::ClientDataReceived,
        Message::Interval {
            result: Box::new(interval()),
        },
        Message::Conf {
            version: PROTOCOL_MAJOR,
        },
        Message::Facts { facts: facts() },
        Message::AuthChallenge {
            nonce: "00".repeat(32),
        },
        Message::AuthResponse {
            nonce: "11".repeat(32),
            mac: "22".repeat(32),
        },
        Message::AuthConfirm {
            mac: "33".repeat(32),
        },
        Message::MeshTest {
            peer: "[::1]:28444".into(),
            settings: Settings::default(),
        },
        Message::MeshResult {
            client: Box::new(SideResult {
                role: Role::Client,
                ..side.clone()
            }),
            server: Box::new(side),
        },
        Message::ProbeEcho { seconds: 25 },
        Message::ProbeEchoing {
            port: 40000,
            token: u64::MAX - 7,
        },
        Message::MeshUnderLoad {
            peer: "10.0.0.2:28444".into(),
            settings: Settings::default(),
            plan: PhasePlan {
                phases: vec![
                    (PhaseKind::Idle, Duration::from_millis(2500)),
                    (PhaseKind::Download, Duration::from_secs(5)),
                    (PhaseKind::Upload, Duration::from_secs(5)),
                    (PhaseKind::Bidir, Duration::from_secs(5)),
                ],
                flows: 4,
                probe_interval: Duration::from_millis(10),
            },
        },
        Message::MeshUnderLoadResult {
            phases: vec![
                PhaseReport {
                    kind: PhaseKind::Idle,
                    rtt: Some(RttFigures {
                        min_ns: 50_000,
                        p50_ns: 60_000,
                        p90_ns: 70_000,
                        p99_ns: 80_000,
                        max_ns: 90_000,
                    }),
                    probes_sent: 250,
                    probes_lost: 0,
                    added_delay_ns: None,
                    up_bps: 0.0,
                    down_bps: 0.0,
                    rpm: Some(900_000.0),
                },
                PhaseReport {
                    kind: PhaseKind::Bidir,
                    rtt: None,
                    probes_sent: 500,
                    probes_lost: 500,
                    added_delay_ns: Some(-3_000),
                    up_bps: 43.5e6,
                    down_bps: 47.25e6,
                    rpm: None,
                },
            ],
        },
    ]
}

/// A frame's body as JSON.
fn body(msg: &Message) -> Value {
    let frame = control::encode(msg).expect("encode");
    serde_json::from_slice(&frame[control::HEADER_LEN..]).expect("json")
}

#[test]
fn every_message_encodes_as_this_protocol_version_recorded() {
    let path = golden_path();
    if std::env::var_os("FPERF_BLESS_WIRE").is_some() && !path.exists() {
        let all: Vec<Value> = messages().iter().map(body).collect();
        let text = serde_json::to_string_pretty(&all).expect("json") + "\n";
        std::fs::write(&path, text).expect("write the golden file");
    }
    assert!(
        path.exists(),
        "{}: a new protocol version needs its encoding recorded: \
         FPERF_BLESS_WIRE=1 cargo test --test wire",
        path.display()
    );
    let golden = read_golden(&path);
    let kinds: Vec<String> = messages().iter().map(control::kind).collect();
    let golden_kinds: Vec<String> = golden
        .iter()
        .map(|v| v["type"].as_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(
        golden_kinds, kinds,
        "the messages of protocol {PROTOCOL_MAJOR}.{PROTOCOL_MINOR} changed: raise PROTOCOL_MINOR"
    );
    for recorded in golden {
        let decoded = control::decode(&serde_json::to_vec(&recorded).expect("bytes"))
            .unwrap_or_else(|e| panic!("{recorded} no longer decodes: {e}; raise PROTOCOL_MINOR"));
        assert_eq!(
            body(&decoded),
            recorded,
            "the encoding of a protocol {PROTOCOL_MAJOR}.{PROTOCOL_MINOR} message changed: \
             raise PROTOCOL_MINOR"
        );
    }
}

/// Whether every field of `recorded` is in `again` with the same value.
fn keeps_every_field(recorded: &Value, again: &Value) -> bool {
    match (recorded, again) {
        (Value::Object(r), Value::Object(a)) => r
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|w| keeps_every_field(v, w))),
        (Value::Array(r), Value::Array(a)) => {
            r.len() == a.len() && r.iter().zip(a).all(|(v, w)| keeps_every_field(v, w))
        }
        (r, a) => r == a,
    }
}

#[test]
fn every_earlier_minor_of_this_major_is_understood_in_full() {
    let earlier: Vec<_> = recorded()
        .into_iter()
        .filter(|(major, minor, _)| {
            *major == PROTOCOL_MAJOR && minor.is_some_and(|m| m < PROTOCOL_MINOR)
        })
        .collect();
    assert!(!earlier.is_empty(), "the first minor's samples are kept");
    for (_, minor, path) in earlier {
        for recorded in read_golden(&path) {
            let decoded = control::decode(&serde_json::to_vec(&recorded).expect("bytes"))
                .unwrap_or_else(|e| panic!("16.{minor:?}'s {recorded} does not decode: {e}"));
            assert!(
                keeps_every_field(&recorded, &body(&decoded)),
                "a field of protocol {PROTOCOL_MAJOR}.{minor:?}'s {recorded} is lost: it would \
                 be ignored"
            );
        }
    }
}

#[test]
fn other_majors_hellos_are_refused_naming_both_versions() {
    let others: Vec<_> = recorded()
        .into_iter()
        .filter(|(major, _, _)| *major != PROTOCOL_MAJOR)
        .collect();
    assert!(others.len() >= 10, "the versions before the split are kept");
    for (major, _, path) in others {
        let hello = read_golden(&path)
            .into_iter()
            .find(|m| m["type"] == "hello")
            .expect("a hello");
        let Message::Hello { version, .. } =
            control::decode(&serde_json::to_vec(&hello).expect("bytes")).expect("hello decodes")
        else {
            panic!("not a hello");
        };
        assert_eq!(version, major);
        let e = control::check_version(version).expect_err("another major");
        let text = e.to_string();
        assert!(
            text.contains(&format!("protocol {PROTOCOL_MAJOR}."))
                && text.contains(&format!("peer {major}")),
            "{text}"
        );
    }
}

#[test]
fn unknown_informational_fields_from_a_newer_minor_are_ignored() {
    for msg in messages() {
        let mut v = body(&msg);
        v["from_a_newer_minor"] = Value::from(1);
        if let Some(settings) = v.get_mut("settings") {
            settings["a_newer_report_field"] = Value::from("x");
        }
        let decoded = control::decode(&serde_json::to_vec(&v).expect("bytes"))
            .unwrap_or_else(|e| panic!("{v} with unknown fields: {e}"));
        assert_eq!(decoded, msg);
    }
}

#[test]
fn a_peer_cannot_send_a_long_list_of_percentiles() {
    let settings = body(&Message::Settings {
        settings: settings(),
    });
    let mut long = settings.clone();
    long["settings"]["percentiles"] = Value::from(vec![50.0; 10_000]);
    let refused = control::decode(&serde_json::to_vec(&long).expect("bytes"));
    assert!(refused.is_err(), "{refused:?}");
    // Within the bound but out of range or repeated: decoded, then refused by the
    // checks the server runs on every client's settings.
    for bad in [vec![50.0, 50.0], vec![0.0], vec![101.0], vec![]] {
        let mut odd = settings.clone();
        odd["settings"]["percentiles"] = Value::from(bad.clone());
        let Ok(Message::Settings { settings }) =
            control::decode(&serde_json::to_vec(&odd).expect("bytes"))
        else {
            panic!("{bad:?} did not decode as settings");
        };
        assert!(settings.validate().is_err(), "{bad:?} was accepted");
    }
    // Each latency figure is bounded the same way.
    let mut results = body(
        &messages()
            .into_iter()
            .find(|m| matches!(m, Message::Results { .. }))
            .expect("a Results message"),
    );
    let many: Vec<Value> = (0..1000)
        .map(|i| serde_json::json!({"percentile": 50.0, "ns": i}))
        .collect();
    results["result"]["total"]["send_latency"]["percentiles"] = Value::from(many);
    assert!(control::decode(&serde_json::to_vec(&results).expect("bytes")).is_err());
}
