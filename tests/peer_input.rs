//! Property tests of the readers that face the network beyond fperf's own control
//! protocol: an iperf3 peer's messages, the exporter's requests and a mesh
//! coordinator's request, fed arbitrary text (wide characters, escapes and line breaks
//! at every place) and arbitrary bytes. None may panic, and whatever they quote of
//! their input shows as one printable line. (The cargo-fuzz targets in `fuzz/` drive
//! the same functions with coverage guidance; these run on every host.)

use fperf::control::{self, session::mesh_peer, Message};
use fperf::exporter::{read_request, Allow, ExporterConfig};
use fperf::peer_text::{printable, CUT, MAX_CHARS};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Text made of pieces a hostile peer likes: wide characters, escapes, line breaks,
/// percent signs, quotes, and anything at all.
fn hostile_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("\u{e9}".to_owned()),
        Just("\u{1f600}".to_owned()),
        Just("\n".to_owned()),
        Just("\r\n".to_owned()),
        Just("\u{1b}[2J".to_owned()),
        Just("\u{202e}".to_owned()),
        Just("%".to_owned()),
        Just("%0A".to_owned()),
        Just("\"".to_owned()),
        Just(":".to_owned()),
        Just("[".to_owned()),
        "[a-z0-9.]{0,70}",
        any::<String>(),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

/// A JSON value of any kind, its strings hostile.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (0u64..300).prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        hostile_text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec(("[a-z_]{1,12}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Keys an iperf3 client sends, and some it does not.
const PARAM_KEYS: [&str; 22] = [
    "tcp",
    "udp",
    "time",
    "omit",
    "num",
    "blockcount",
    "parallel",
    "len",
    "window",
    "bandwidth",
    "congestion",
    "client_version",
    "bidirectional",
    "reverse",
    "TOS",
    "fqrate",
    "MSS",
    "nodelay",
    "skip_rx_copy",
    "dont_fragment",
    "udp_counters_64bit",
    "title",
];

/// A parameter message: mostly served, its values hostile.
fn params() -> impl Strategy<Value = Map<String, Value>> {
    let protocol = prop_oneof![Just("tcp"), Just("udp")];
    (
        protocol,
        prop::collection::vec((prop::sample::select(&PARAM_KEYS[..]), value()), 0..8),
    )
        .prop_map(|(protocol, pairs)| {
            let mut map = Map::new();
            map.insert(protocol.to_owned(), Value::Bool(true));
            for (key, value) in pairs {
                if key != "tcp" && key != "udp" {
                    map.insert(key.to_owned(), value);
                }
            }
            map
        })
}

/// A results message: streams with ids near the test's, their figures any value.
fn results() -> impl Strategy<Value = Value> {
    let stream = prop::collection::vec(
        (
            prop::sample::select(
                &[
                    "id",
                    "bytes",
                    "packets",
                    "omitted_packets",
                    "errors",
                    "omitted_errors",
                    "jitter",
                    "start_time",
                    "end_time",
                    "retransmits",
                ][..],
            ),
            prop_oneof![(0u64..8).prop_map(Value::from), value()],
        ),
        0..10,
    )
    .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()));
    (
        prop::collection::vec(stream, 0..6),
        value(),
        hostile_text(),
    )
        .prop_map(|(streams, cpu, congestion)| {
            json!({"streams": streams, "cpu_util_user": cpu, "congestion_used": congestion})
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn peer_text_is_one_bounded_printable_line(text in hostile_text()) {
        let shown = printable(&text);
        prop_assert!(!shown.chars().any(char::is_control), "{shown:?}");
        prop_assert!(!shown.contains('\u{202e}'), "{shown:?}");
        // Each character shown takes at most an escape's ten.
        prop_assert!(shown.chars().count() <= MAX_CHARS * 10 + CUT.len());
        if text.chars().count() > MAX_CHARS {
            prop_assert!(shown.ends_with(CUT));
        }
    }

    #[test]
    fn iperf3_parameters_and_results_never_panic(asked in params(), theirs in results()) {
        let asked = serde_json::to_vec(&asked).expect("JSON");
        let theirs = serde_json::to_vec(&theirs).expect("JSON");
        match fperf::iperf3::read_messages(&asked, &theirs) {
            Ok(test) => {
                if let Some(version) = test.client_version {
                    prop_assert!(!version.chars().any(char::is_control), "{version:?}");
                }
            }
            Err(why) => prop_assert!(!why.contains('\n') && !why.contains('\u{1b}'), "{why:?}"),
        }
    }

    #[test]
    fn iperf3_messages_of_any_bytes_never_panic(
        asked in prop::collection::vec(any::<u8>(), 0..300),
        theirs in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let _ = fperf::iperf3::read_messages(&asked, &theirs);
    }

    #[test]
    fn exporter_requests_never_panic_and_quote_their_input_on_one_line(
        name in hostile_text(),
        value in hostile_text(),
        host in hostile_text(),
        origin in hostile_text(),
        raw in prop::collection::vec(any::<u8>(), 0..400),
    ) {
        let open = ExporterConfig {
            listen: "0.0.0.0:9579".parse().expect("address"),
            host_names: vec!["metrics.example".into()],
            ..ExporterConfig::default()
        };
        let listed = ExporterConfig {
            allow: Allow::Only(vec![("127.0.0.1".into(), None)]),
            ..ExporterConfig::default()
        };
        let encode = |text: &str| form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
        let query = format!("target=127.0.0.1:5201&{}={}", encode(&name), encode(&value));
        let raw_query = format!("target={value}&{name}=1");
        let heads = [
            format!("GET /probe?{query} HTTP/1.1\r\nHost: 127.0.0.1:9579\r\n\r\n"),
            format!("GET /probe?{raw_query} HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n\r\n"),
            format!("GET /probe?target={} HTTP/1.1\r\nHost: {}\r\n\r\n", encode(&value), encode(&host)),
        ];
        for config in [&open, &listed] {
            for head in heads.iter().map(|h| h.as_bytes()).chain([&raw[..]]) {
                if let Some(Err((_, text))) = read_request(head, config) {
                    let line = text.trim_end_matches('\n');
                    prop_assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{text:?}");
                }
            }
        }
    }

    #[test]
    fn mesh_requests_never_panic_and_name_a_plausible_peer(
        peer in hostile_text(),
        raw in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let body = json!({"type": "mesh_test", "peer": peer, "settings": {"protocol": "tcp",
            "nstreams": 1, "nsockets": 1, "mb": 1, "pktsize": 1000, "mprtt": false,
            "queue": "mutex", "nodelay": false, "quickack": false}}).to_string();
        for bytes in [body.as_bytes(), &raw[..]] {
            if let Ok(Message::MeshTest { peer, .. }) = control::decode(bytes) {
                match mesh_peer(&peer) {
                    Ok((host, port)) => {
                        prop_assert!(port > 0);
                        prop_assert!(host.chars().all(|c| c.is_ascii_graphic()), "{host:?}");
                    }
                    Err(why) => prop_assert!(!why.contains('\n') && !why.contains('\u{1b}'), "{why:?}"),
                }
            }
        }
        let _ = mesh_peer(&String::from_utf8_lossy(&raw));
    }
}
