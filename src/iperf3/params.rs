//! What an iperf3 client asks for (its parameter message), checked and turned into the
//! fperf settings the server runs it with.
//!
//! iperf3 sends flags by presence (`"reverse": true`, never `false`) and numbers as
//! integers. Keys this server does not know are ignored, as iperf3's own server does;
//! options it knows but does not carry out are refused by name.

use super::wire::ErrorCode;
use crate::options::{Iperf3Refusal, TestOption};
use crate::peer_text::printable;
use crate::settings::options::{
    GivenTime, WorkloadFlags, OMIT_OPTION, OPTIONS as TEST_OPTIONS, TIME_OPTION, WORKLOAD_OPTIONS,
};
use crate::settings::{Settings, MAX_NSTREAMS, MB};
use crate::transport::settings::TransportSettings;
use crate::transport::sockets::OPTIONS as SOCKET_OPTIONS;
use crate::transport::tcp::options::OPTIONS as TCP_OPTIONS;
use crate::transport::tcp::settings::TcpSettings;
use crate::transport::udp::options::OPTIONS as UDP_OPTIONS;
use crate::transport::udp::settings::UdpSettings;
use crate::workload::Workload;
use serde_json::{Map, Value};
use thiserror::Error;

/// iperf3's default TCP block size.
const DEFAULT_TCP_LEN: u32 = 128 << 10;
/// iperf3's UDP block size when it cannot learn the path's MSS.
const DEFAULT_UDP_LEN: u32 = 1460;
/// The longest test an iperf3 client may ask for, in seconds.
const MAX_TIME_SECS: u64 = 7 * 24 * 3600;
/// The longest warm-up an iperf3 client may ask to leave out, in seconds.
const MAX_OMIT_SECS: u64 = 3600;
/// How long past its announced end a timed test may run before the server's limits
/// treat it as overdue: iperf3's own server allows 40 s.
const GRACE_SECS: u64 = 40;
/// How long a test bounded by bytes or blocks may run at most, unless `--max-time` says
/// less: the client ends it, and the idle time-out catches one that stops.
const UNTIMED_SECS: u64 = 24 * 3600;

/// One iperf3 test as the server runs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Iperf3Test {
    /// The settings the server checks against its limits: the announced duration, or
    /// for a test bounded by bytes its volume.
    pub announced: Settings,
    /// The settings the server runs with: the client ends the test, so the server
    /// sends (with `-R`) until it does.
    pub run: Settings,
    /// Streams per direction (`-P`).
    pub parallel: u32,
    /// The client's version, as it says (`client_version`), made printable.
    pub client_version: Option<String>,
    /// UDP packet numbers are 64-bit (`--udp-counters-64bit`).
    pub wide_counters: bool,
    /// With `-n` or `-k`: the bytes the server sends over all its sending streams
    /// (`-R`, or `--bidir`'s server half), exactly, as iperf3's own server does.
    pub volume: Option<u64>,
}

/// Why a parameter message cannot be served.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ParamsError {
    #[error("iperf3's {0} is not supported by this server")]
    Unsupported(&'static str),
    #[error("SCTP is not supported")]
    Sctp,
    #[error("no protocol named (tcp or udp)")]
    NoProtocol,
    #[error("parameter {key} must be {what}, not {value}")]
    Invalid {
        key: &'static str,
        what: &'static str,
        value: String,
    },
    #[error("{0}")]
    Settings(String),
}

impl ParamsError {
    /// The iperf3 error code that tells an iperf3 client the most.
    pub fn code(&self) -> ErrorCode {
        match self {
            ParamsError::Sctp => ErrorCode::NoSctp,
            ParamsError::Unsupported(_) => ErrorCode::Unimplemented,
            ParamsError::NoProtocol | ParamsError::Invalid { .. } | ParamsError::Settings(_) => {
                ErrorCode::RecvParams
            }
        }
    }
}

/// Options iperf3 sends that this server does not carry out, with the flag a user
/// typed for each. (`flowlabel` is served as iperf3's own server serves it: the client
/// labels its packets, and the server's stay unlabelled.)
const UNSUPPORTED: [(&str, &str); 4] = [
    ("burst", "-b RATE/BURST"),
    ("authtoken", "--username (RSA authentication)"),
    ("server_affinity", "-A (server affinity)"),
    ("mptcp", "--mptcp"),
];

/// Turns an iperf3 client's parameters into the test the server runs.
pub fn parse(params: &Map<String, Value>) -> Result<Iperf3Test, ParamsError> {
    if params.contains_key("sctp") {
        return Err(ParamsError::Sctp);
    }
    if let Some((_, flag)) = UNSUPPORTED
        .iter()
        .find(|(key, _)| params.contains_key(*key))
    {
        return Err(ParamsError::Unsupported(flag));
    }
    let udp = match (params.contains_key("tcp"), params.contains_key("udp")) {
        (true, false) => false,
        (false, true) => true,
        _ => return Err(ParamsError::NoProtocol),
    };
    let num = number(params, "num", 0, u64::MAX)?;
    let blockcount = number(params, "blockcount", 0, u64::MAX)?;
    // The test-wide options, as they declare them; absent, len is iperf3's default.
    let refused = |(key, what, value): Iperf3Refusal| invalid(key, what, &value);
    let mut declared = Settings {
        pktsize: if udp {
            DEFAULT_UDP_LEN
        } else {
            DEFAULT_TCP_LEN
        },
        ..Settings::default()
    };
    crate::options::apply_iperf3(&TEST_OPTIONS, params, &mut declared).map_err(refused)?;
    let len = u64::from(declared.pktsize);
    // Whole seconds, as iperf3 sends them: the test within a week, its warm-up within
    // an hour.
    let time = whole_seconds(&TIME_OPTION, params, MAX_TIME_SECS)?;
    let omit = whole_seconds(&OMIT_OPTION, params, MAX_OMIT_SECS)?;
    let client_version = match params.get("client_version") {
        Some(Value::String(v)) => Some(printable(&v.chars().take(32).collect::<String>())),
        _ => None,
    };
    let mut flags = WorkloadFlags::default();
    crate::options::apply_iperf3(&WORKLOAD_OPTIONS, params, &mut flags).map_err(refused)?;
    let (bidir, reverse) = (flags.bidir, flags.reverse);
    let workload = match (bidir, reverse) {
        (true, _) => Workload::Bidir,
        (false, true) => Workload::Reverse,
        (false, false) => Workload::Bulk,
    };
    // -P streams, as -t's: with --bidir, each way.
    let parallel = declared.nstreams;
    let nstreams = match bidir {
        true if parallel > MAX_NSTREAMS / 2 => {
            return Err(invalid(
                "parallel",
                "at most 128 with --bidir",
                params.get("parallel").unwrap_or(&Value::Null),
            ))
        }
        true => 2 * parallel,
        false => parallel,
    };
    // The socket options and TCP's, as they declare them; with UDP, TCP's to refuse
    // those that change the test.
    let mut tcp = TcpSettings::default();
    crate::options::apply_iperf3(&SOCKET_OPTIONS, params, &mut tcp.sockets).map_err(refused)?;
    crate::options::apply_iperf3(&TCP_OPTIONS, params, &mut tcp).map_err(refused)?;
    let transport = if udp {
        if tcp.congestion.is_some() {
            return Err(ParamsError::Settings("-C is a TCP option".into()));
        }
        // iperf3's own server paces only TCP, and would run this test unpaced.
        if tcp.fq_rate.is_some() {
            return Err(ParamsError::Settings(
                "--fq-rate paces TCP connections; for UDP use -b".into(),
            ));
        }
        let mut udp = UdpSettings {
            sockets: tcp.sockets,
            ..UdpSettings::default()
        };
        crate::options::apply_iperf3(&UDP_OPTIONS, params, &mut udp).map_err(refused)?;
        TransportSettings::Udp(udp)
    } else {
        // The client sets its `-M` on its own sockets before connecting, and their
        // handshake announces it: this server's segments keep to it with no more done.
        TransportSettings::Tcp(tcp)
    };
    // A test bounded by bytes (`-n`) or blocks (`-k`) moves that much over all its
    // streams (each direction with `--bidir`).
    let volume = if num > 0 {
        Some(num)
    } else if blockcount > 0 {
        Some(blockcount.saturating_mul(len))
    } else {
        None
    };
    let base = Settings {
        nstreams,
        workload,
        omit_ms: (omit > 0).then_some(omit * 1000),
        transport,
        ..declared
    };
    let announced = match volume {
        Some(bytes) => Settings {
            mb: bytes
                .div_ceil(MB)
                .div_ceil(u64::from(parallel))
                .clamp(1, crate::settings::MAX_MB),
            time_ms: None,
            ..base.clone()
        },
        None => Settings {
            time_ms: Some((time + omit).max(1) * 1000),
            ..base.clone()
        },
    };
    let run_secs = match volume {
        Some(_) => UNTIMED_SECS,
        None => time + omit + GRACE_SECS,
    };
    let run = Settings {
        time_ms: Some(run_secs * 1000),
        ..base
    };
    for settings in [&announced, &run] {
        settings
            .validate()
            .map_err(|e| ParamsError::Settings(e.to_string()))?;
    }
    Ok(Iperf3Test {
        announced,
        run,
        parallel,
        client_version,
        wide_counters: params.contains_key("udp_counters_64bit"),
        volume,
    })
}

/// The whole seconds an iperf3 client's parameters give `option` (0 when absent), at
/// most `most`.
fn whole_seconds(
    option: &'static TestOption<GivenTime>,
    params: &Map<String, Value>,
    most: u64,
) -> Result<u64, ParamsError> {
    let mut given = GivenTime::default();
    crate::options::apply_iperf3([option], params, &mut given)
        .map_err(|(key, what, value)| invalid(key, what, &value))?;
    match given.secs {
        None => Ok(0),
        Some(secs) if secs <= most as f64 => Ok(secs as u64),
        Some(_) => {
            let key = match option.iperf3 {
                crate::options::Iperf3::Number(key) => key,
                _ => option.long,
            };
            Err(invalid(
                key,
                "a whole number in range",
                params.get(key).unwrap_or(&Value::Null),
            ))
        }
    }
}

/// The non-negative integer under `key` (absent: `least`), within `least..=most`.
fn number(
    params: &Map<String, Value>,
    key: &'static str,
    least: u64,
    most: u64,
) -> Result<u64, ParamsError> {
    match params.get(key) {
        None => Ok(least),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if (least..=most).contains(&v) => Ok(v),
            _ => Err(invalid(
                key,
                "a whole number in range",
                &Value::Number(n.clone()),
            )),
        },
        Some(other) => Err(invalid(key, "a whole number", other)),
    }
}

/// The error for a parameter's bad `value`, which is shown as JSON, made printable.
fn invalid(key: &'static str, what: &'static str, value: &Value) -> ParamsError {
    let value = printable(&value.to_string());
    ParamsError::Invalid { key, what, value }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn a_default_iperf3_client_runs_one_tcp_stream_for_its_time() {
        // What iperf3 3.12 sends for `iperf3 -c HOST -t 1`.
        let test = parse(&params(
            json!({"tcp":true,"omit":0,"time":1,"num":0,"blockcount":0,
            "parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.12"}),
        ))
        .expect("served");
        assert_eq!(test.announced.nstreams, 1);
        assert_eq!(test.announced.pktsize, 131_072);
        assert_eq!(test.announced.time_ms, Some(1000));
        assert_eq!(test.run.time_ms, Some(41_000), "the client ends the test");
        assert_eq!(test.announced.workload, Workload::Bulk);
        assert_eq!(test.client_version.as_deref(), Some("3.12"));
    }

    #[test]
    fn directions_streams_and_volumes_map_to_fperf_settings() {
        let bidir = parse(&params(json!({"tcp":true,"time":2,"parallel":3,
            "bidirectional":true,"window":262144,"congestion":"cubic","nodelay":true,"MSS":1400})))
        .expect("bidir");
        assert_eq!(bidir.run.nstreams, 6, "three each way");
        assert_eq!(bidir.run.workload, Workload::Bidir);
        let TransportSettings::Tcp(tcp) = &bidir.run.transport else {
            panic!("tcp")
        };
        assert_eq!(tcp.sockets.window, Some(262_144));
        assert_eq!(tcp.congestion.as_deref(), Some("cubic"));
        assert!(tcp.nodelay);
        assert_eq!(
            tcp.mss,
            Some(1400),
            "the client's -M, which its sockets carry"
        );
        let paced = parse(&params(
            json!({"tcp":true,"reverse":true,"fqrate":100000000,"skip_rx_copy":1}),
        ))
        .expect("paced");
        let TransportSettings::Tcp(tcp) = &paced.run.transport else {
            panic!("tcp")
        };
        assert_eq!(tcp.fq_rate, Some(100_000_000), "bits/s, as --fq-rate");
        assert!(tcp.skip_rx_copy);
        let reverse = parse(&params(json!({"tcp":true,"reverse":true,"num":10485760,
            "time":0,"parallel":2,"omit":1,"bandwidth":1000000})))
        .expect("reverse");
        assert_eq!(reverse.run.workload, Workload::Reverse);
        assert_eq!(reverse.announced.time_ms, None);
        assert_eq!(reverse.announced.mb, 5, "10 MiB over 2 streams");
        assert_eq!(reverse.run.omit_ms, Some(1000));
        assert_eq!(reverse.run.rate_bps, Some(1_000_000));
        let blocks =
            parse(&params(json!({"tcp":true,"blockcount":100,"len":1000}))).expect("blocks");
        assert_eq!(blocks.announced.mb, 1);
    }

    #[test]
    fn unsupported_or_malformed_parameters_are_refused_by_name() {
        for (p, want) in [
            (json!({"sctp":true}), "SCTP"),
            (json!({"udp":true,"fqrate":1000}), "--fq-rate paces TCP"),
            (json!({"tcp":true,"mptcp":1}), "--mptcp"),
            (json!({"tcp":true,"MSS":40}), "--set-mss"),
            (json!({"tcp":true,"authtoken":"x"}), "RSA"),
            (json!({"tcp":true,"TOS":256}), "TOS"),
            (json!({"udp":true,"len":70000}), "UDP datagram"),
            (json!({"udp":true,"congestion":"cubic"}), "-C"),
            (json!({"omit":0}), "no protocol"),
            (json!({"tcp":true,"udp":true}), "no protocol"),
            (json!({"tcp":true,"parallel":257}), "parallel"),
            (
                json!({"tcp":true,"parallel":129,"bidirectional":true}),
                "parallel",
            ),
            (json!({"tcp":true,"parallel":-1}), "parallel"),
            (json!({"tcp":true,"time":"10"}), "time"),
            (json!({"tcp":true,"len":0}), "len"),
            (json!({"tcp":true,"len":1e20}), "len"),
            (json!({"tcp":true,"congestion":7}), "congestion"),
            (json!({"tcp":true,"window":0}), "window"),
        ] {
            let e = parse(&params(p.clone())).expect_err(&p.to_string());
            assert!(e.to_string().contains(want), "{p}: {e}");
        }
    }

    #[test]
    fn udp_tests_run_at_the_clients_rate_with_its_counters() {
        let test = parse(&params(json!({"udp":true,"time":1,"len":1400,
            "bandwidth":1048576,"udp_counters_64bit":1,"reverse":true})))
        .expect("udp");
        assert_eq!(
            test.run.protocol(),
            crate::transport::settings::Protocol::Udp
        );
        assert_eq!(test.run.rate_bps, Some(1_048_576));
        assert_eq!(test.run.pktsize, 1400);
        assert!(test.wide_counters);
        let TransportSettings::Udp(udp) = &test.run.transport else {
            panic!("udp")
        };
        assert!(!udp.dont_fragment);
        for (flag, whole) in [(json!(1), true), (json!(0), false)] {
            let test = parse(&params(json!({"udp":true,"dont_fragment":flag}))).expect("udp");
            let TransportSettings::Udp(udp) = &test.run.transport else {
                panic!("udp")
            };
            assert_eq!(udp.dont_fragment, whole, "{flag}");
        }
    }

    #[test]
    fn a_bad_value_with_wide_characters_is_quoted_whole_and_printable() {
        // A cut on a byte index would fall inside the multi-byte characters.
        for pad in 0..8 {
            let value = format!(
                "{}{}",
                "a".repeat(pad),
                "\u{e9}\u{1f600}\n\u{1b}[2J".repeat(40)
            );
            let e = parse(&params(json!({"tcp":true,"time":value}))).expect_err("refused");
            let text = e.to_string();
            assert!(
                text.contains("parameter time must be a whole number"),
                "{text}"
            );
            assert!(!text.contains('\n') && !text.contains('\x1b'), "{text}");
        }
        let test = parse(&params(
            json!({"tcp":true,"client_version":"3.1\n\u{1b}[31mforged"}),
        ))
        .expect("served");
        assert_eq!(
            test.client_version.as_deref(),
            Some("3.1\\n\\u{1b}[31mforged")
        );
    }

    #[test]
    fn keys_this_server_does_not_know_are_ignored_as_iperf3_does() {
        let test = parse(&params(
            json!({"tcp":true,"time":1,"title":"x","extra_data":"y",
            "get_server_output":1,"repeating_payload":1,"some_future_key":[1,2]}),
        ));
        assert!(test.is_ok(), "{test:?}");
    }
}
