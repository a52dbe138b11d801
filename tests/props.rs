//! Property tests of everything a peer's bytes reach before a test starts: the frame
//! reader and decoder, settings validation and the server's limits. (The cargo-fuzz
//! target in `fuzz/` covers the same code with coverage guidance; this runs in CI.)

use fperf::control::{self, ControlError, Message, HEADER_LEN, MAX_FRAME};
use fperf::limits::Limits;
use fperf::settings::{Settings, MAX_MB, MAX_NSOCKETS, MAX_NSTREAMS, MB};
use fperf::stream::sender::QueueKind;
use fperf::stream::MAX_PKTSIZE;
use fperf::transport::rdma::settings::RdmaSettings;
use fperf::transport::settings::TransportSettings;
use fperf::transport::shape::MAX_FOOTPRINT;
use fperf::transport::tcp::settings::TcpSettings;
use fperf::transport::udp::settings::UdpSettings;
use fperf::workload::{Reply, Workload};
use proptest::prelude::*;

/// Any transport, with some of its own options set.
fn transport() -> impl Strategy<Value = TransportSettings> {
    prop_oneof![
        (any::<bool>(), any::<bool>()).prop_map(|(nodelay, quickack)| {
            TransportSettings::Tcp(TcpSettings {
                nodelay,
                quickack,
                ..TcpSettings::default()
            })
        }),
        prop_oneof![0u32..=3, any::<u32>()].prop_map(|ack_timeout_ms| {
            TransportSettings::Udp(UdpSettings {
                ack_timeout_ms,
                ..UdpSettings::default()
            })
        }),
        Just(TransportSettings::Rdma(RdmaSettings::default()))
    ]
}

fn workload() -> impl Strategy<Value = Workload> {
    prop_oneof![
        Just(Workload::Bulk),
        Just(Workload::RoundTrip(Reply::Ack)),
        Just(Workload::RoundTrip(Reply::Echo)),
        Just(Workload::Crr),
        Just(Workload::Reverse),
        Just(Workload::Bidir)
    ]
}

fn queue() -> impl Strategy<Value = QueueKind> {
    prop_oneof![Just(QueueKind::Mutex), Just(QueueKind::LockFree)]
}

/// Any settings at all, edge values made likely.
fn settings() -> impl Strategy<Value = Settings> {
    let u32s = || {
        prop_oneof![
            0u32..=3,
            Just(MAX_NSOCKETS),
            Just(MAX_NSTREAMS),
            Just(MAX_PKTSIZE),
            Just(u32::MAX),
            any::<u32>()
        ]
    };
    let u64s = prop_oneof![
        0u64..=3,
        Just(MAX_MB),
        Just(MAX_MB + 1),
        Just(u64::MAX),
        any::<u64>()
    ];
    (
        (
            transport(),
            u32s(),
            u32s(),
            u64s,
            u32s(),
            workload(),
            queue(),
        ),
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
        ),
    )
        .prop_map(
            |(
                (transport, nstreams, nsockets, mb, pktsize, workload, queue),
                (time_ms, interval_ms, omit_ms),
            )| {
                Settings {
                    transport,
                    nstreams,
                    nsockets,
                    mb,
                    pktsize,
                    workload,
                    queue,
                    time_ms,
                    interval_ms,
                    omit_ms,
                    ..Settings::default()
                }
            },
        )
}

fn frame_of(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Random bytes read as a stream of frames: never a panic, and every frame read
    /// consumes input, so the loop ends.
    #[test]
    fn random_bytes_never_panic_the_frame_reader(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut r = &data[..];
        loop {
            let before = r.len();
            match control::read_frame(&mut r) {
                Ok(_) => prop_assert!(r.len() < before),
                Err(_) => break,
            }
        }
        let _ = control::decode(&data);
    }

    /// A length prefix beyond the limit is refused from the header alone.
    #[test]
    fn oversized_prefixes_are_refused(len in (MAX_FRAME as u32 + 1).., tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut data = len.to_be_bytes().to_vec();
        data.extend_from_slice(&tail);
        let mut r = &data[..];
        prop_assert!(matches!(control::read_frame(&mut r), Err(ControlError::FrameTooLarge(_))));
        prop_assert_eq!(r.len(), tail.len(), "nothing read past the header");
    }

    /// A frame cut anywhere reads as a closed connection; a frame announcing more than
    /// arrives does too, without allocating the announced size.
    #[test]
    fn truncated_frames_read_as_closed(s in settings(), cut in any::<proptest::sample::Index>()) {
        let frame = control::encode(&Message::Settings { settings: s }).expect("encode");
        let cut = cut.index(frame.len());
        let mut r = &frame[..cut];
        prop_assert!(matches!(control::read_frame(&mut r), Err(ControlError::Closed)));
        let mut lying = (MAX_FRAME as u32).to_be_bytes().to_vec();
        lying.extend_from_slice(&frame[HEADER_LEN..]);
        let mut r = &lying[..];
        prop_assert!(matches!(control::read_frame(&mut r), Err(ControlError::Closed)));
    }

    /// Whatever settings a peer sends decode, and validation decides without panicking;
    /// what passes is within every bound the rest of the code relies on.
    #[test]
    fn any_settings_validate_safely(s in settings(), max_mb in proptest::option::of(any::<u64>()), max_streams in proptest::option::of(any::<u32>()), max_sockets in any::<u32>()) {
        let frame = control::encode(&Message::Settings { settings: s.clone() }).expect("encode");
        let mut r = &frame[..];
        let decoded = control::read_frame(&mut r).expect("decode");
        prop_assert_eq!(&decoded, &Message::Settings { settings: s.clone() });
        let limits = Limits { max_mb, max_streams, max_sockets, ..Limits::default() };
        if s.validate().is_ok() {
            prop_assert!((1..=MAX_NSTREAMS).contains(&s.nstreams));
            prop_assert!((1..=MAX_NSOCKETS).contains(&s.nsockets));
            prop_assert!((1..=MAX_PKTSIZE).contains(&s.pktsize));
            prop_assert!((1..=MAX_MB).contains(&s.mb));
            prop_assert!(u64::from(s.nstreams) * u64::from(s.nsockets) * u64::from(s.pktsize) <= MAX_FOOTPRINT);
            prop_assert_eq!(s.bytes_per_stream(), s.mb * MB);
            prop_assert!(s.mb.checked_mul(MB).and_then(|b| b.checked_mul(u64::from(s.nstreams))).is_some());
            if let Err(e) = limits.check(&s) {
                prop_assert!(e.to_string().contains("(--max-"), "{}", e);
            }
        }
    }

    /// Settings with any field replaced by arbitrary JSON are refused or decode; never a
    /// panic.
    #[test]
    fn settings_fields_with_junk_values(field in 0usize..9, junk in prop_oneof![
        Just("-1".to_string()), Just("1e400".to_string()), Just("null".to_string()),
        Just("\"x\"".to_string()), Just("[1,2]".to_string()), Just("{}".to_string()),
        Just("18446744073709551616".to_string()), any::<i64>().prop_map(|n| n.to_string())
    ]) {
        let names = ["protocol", "nstreams", "nsockets", "mb", "pktsize", "mprtt", "queue", "nodelay", "quickack"];
        let mut v = serde_json::to_value(control::wire::Message::from(&Message::Settings { settings: Settings::default() })).expect("json");
        let parsed: serde_json::Value = serde_json::from_str(&junk).unwrap_or(serde_json::Value::Null);
        v["settings"][names[field]] = parsed;
        let body = serde_json::to_vec(&v).expect("json");
        let mut r = &frame_of(&body)[..];
        if let Ok(Message::Settings { settings }) = control::read_frame(&mut r) {
            let _ = settings.validate();
        }
    }

    /// Error text a peer controls never breaks a log line.
    #[test]
    fn peer_text_prints_on_one_line(text in any::<String>(), body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let shown = fperf::peer_text::printable(&text);
        prop_assert!(!shown.chars().any(char::is_control), "{:?}", shown);
        if let Err(e) = control::decode(&body) {
            prop_assert!(!e.to_string().chars().any(char::is_control), "{}", e);
        }
    }

    /// Both ends' sessions keep their rules whatever script of messages they are sent:
    /// the generator the cargo-fuzz target `session` explores, run here without nightly.
    #[test]
    fn sessions_keep_their_rules_under_any_script(bytes in proptest::collection::vec(any::<u8>(), 0..4096), keyed in any::<bool>()) {
        let script = control::script::messages(&bytes, 256);
        prop_assert_eq!(control::script::check_sessions(&script, keyed), Ok(()));
    }

    /// Hex used by the authentication messages round-trips and refuses wrong lengths.
    #[test]
    fn hex_roundtrips(b in any::<[u8; 32]>(), junk in ".{0,70}") {
        prop_assert_eq!(fperf::auth::from_hex::<32>(&fperf::auth::to_hex(&b)), Some(b));
        if let Some(x) = fperf::auth::from_hex::<32>(&junk) {
            prop_assert_eq!(fperf::auth::to_hex(&x), junk.to_ascii_lowercase());
        }
    }
}
