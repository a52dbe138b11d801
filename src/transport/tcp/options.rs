//! TCP's options, each declared once (see [`crate::options`]): the command line, `fperf
//! mesh`, the exporter's probe and the iperf3 front end take them from [`OPTIONS`].

use super::settings::TcpSettings;
use super::zerocopy::ZeroCopy;
use crate::options::{whole_number, Iperf3, Mesh, Takes, TestOption};

/// Every TCP option, in the order the help lists them.
pub static OPTIONS: [TestOption<TcpSettings>; 11] = [
    TestOption {
        id: "nodelay",
        long: "nodelay",
        short: Some('d'),
        alias: Some("no-delay"),
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "Set TCP_NODELAY (disable Nagle's algorithm) on both ends.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::Present("nodelay"),
        what: "a flag",
        set: |tcp, _| {
            tcp.nodelay = true;
            Ok(())
        },
    },
    TestOption {
        id: "quickack",
        long: "quickack",
        short: Some('a'),
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "Set TCP_QUICKACK (disable delayed ACKs) on both ends.\n\n\
               It is re-armed after every receive, since Linux clears it.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |tcp, _| {
            tcp.quickack = true;
            Ok(())
        },
    },
    TestOption {
        id: "congestion",
        long: "congestion",
        short: Some('C'),
        alias: None,
        takes: Takes::Value("ALGO"),
        choices: &[],
        conflicts: &[],
        help: "Congestion control algorithm for both ends' data sockets (TCP_CONGESTION), \
               e.g. cubic, bbr, reno; the kernel's list is \
               net.ipv4.tcp_available_congestion_control. Default: the kernel's default on \
               each end. Reports name the algorithm in use.",
        mesh: Mesh::Help(
            "Congestion control algorithm of every test's data sockets (TCP_CONGESTION), \
             e.g. cubic, bbr, reno; each host must have it. Default: each host's own.",
        ),
        probe: Some("congestion"),
        iperf3: Iperf3::Text("congestion"),
        what: "a name",
        set: |tcp, text| {
            tcp.congestion = Some(text.to_owned());
            Ok(())
        },
    },
    TestOption {
        id: "set_mss",
        long: "set-mss",
        short: Some('M'),
        alias: None,
        takes: Takes::Value("BYTES"),
        choices: &[],
        conflicts: &[],
        help: "Largest TCP segment, in bytes (TCP_MAXSEG, 88 to 32767), as iperf3's -M: the \
               client sets it on its data connections before connecting, and their handshake \
               announces it, so the server's segments keep to it too. The report's tcp_info \
               shows the segment size in force (mss). Default: the path's.",
        mesh: Mesh::Help(
            "Largest TCP segment of every test's data connections, in bytes (TCP_MAXSEG, 88 \
             to 32767), as a client's -M. Default: the path's.",
        ),
        probe: Some("mss"),
        iperf3: Iperf3::Number("MSS"),
        what: "a number of bytes",
        set: |tcp, text| {
            let bytes = whole_number(text, 0, u32::MAX.into())?;
            tcp.mss = u32::try_from(bytes).ok();
            Ok(())
        },
    },
    TestOption {
        id: "flowlabel",
        long: "flowlabel",
        short: Some('L'),
        alias: None,
        takes: Takes::Value("N"),
        choices: &[],
        conflicts: &[],
        help: "IPv6 flow label (1 to 1048575) of the client's data packets, as iperf3's -L: \
               the client's data connections send with it (network gear may hash flows by \
               it, e.g. ECMP). Needs an IPv6 server address.",
        mesh: Mesh::No,
        probe: None,
        // iperf3's own server leaves its packets unlabelled, and so does this one.
        iperf3: Iperf3::No,
        what: "a flow label",
        set: |tcp, text| {
            let label = whole_number(text, 1, 0xFFFFF)?;
            tcp.flowlabel = u32::try_from(label).ok();
            Ok(())
        },
    },
    TestOption {
        id: "fq_rate",
        long: "fq-rate",
        short: None,
        alias: None,
        takes: Takes::Value("RATE"),
        choices: &[],
        conflicts: &[],
        help: "Cap each data connection's sending rate at RATE bits/s (e.g. 100M, 2.5G; \
               K/M/G/T = 10^3..10^12), as iperf3's --fq-rate: both ends set \
               SO_MAX_PACING_RATE on their data sockets and the kernel spaces the segments \
               out (TCP's own pacing, or the fq qdisc's where it runs). The sender keeps at \
               most 50 ms of the rate queued unsent, so the test ends on time (at low rates, \
               use a small -l: a packet still takes its time to leave). Unlike -b, which \
               sends whole packets on a timer, it paces every segment; both may be given. \
               Not with --crr.",
        mesh: Mesh::Help(
            "Cap each data connection's sending rate at RATE bits/s (SO_MAX_PACING_RATE), as \
             a client's --fq-rate: the kernel paces every segment.",
        ),
        probe: Some("fq_rate"),
        iperf3: Iperf3::Number("fqrate"),
        what: "a rate in bits/s (e.g. 100M, 2.5G)",
        set: |tcp, text| {
            // 0, as for -b: no cap.
            let bits = crate::units::parse_target_rate(text)?;
            tcp.fq_rate = (bits > 0).then_some(bits);
            Ok(())
        },
    },
    TestOption {
        id: "notsent_lowat",
        long: "notsent-lowat",
        short: None,
        alias: None,
        takes: Takes::Value("BYTES"),
        choices: &[],
        conflicts: &[],
        help: "Bytes each data connection may hold unsent in the kernel before a write \
               waits (TCP_NOTSENT_LOWAT), on both ends, 1 to 64M (K, M suffixes). A small \
               mark (e.g. 16K) keeps the sending socket's queue short, so what is written \
               leaves soon after: lower latency under load, for more wake-ups of the sender. \
               Default: the kernel's (net.ipv4.tcp_notsent_lowat). Not with --fq-rate, which \
               sets its own, --flows or --crr.",
        mesh: Mesh::AsClient,
        probe: Some("notsent_lowat"),
        iperf3: Iperf3::No,
        what: "a number of bytes",
        set: |tcp, text| {
            tcp.notsent_lowat = Some(crate::units::parse_bytes_u32(text)?);
            Ok(())
        },
    },
    TestOption {
        id: "rcvlowat",
        long: "rcvlowat",
        short: None,
        alias: None,
        takes: Takes::Value("BYTES"),
        choices: &[],
        conflicts: &[],
        help: "Bytes that must have arrived before the server's read wakes (SO_RCVLOWAT), 1 \
               to 64M. Default, by how idle the server's cores are: with two cores per \
               stream and no -b, 128K or one packet if larger (at most half of -w); with a \
               core per stream or -b, one packet; with more streams than cores, 1. Fewer \
               wake-ups leave the sender's core more time to copy. With the 128K default the \
               reads also nap 20 us while data flows (header: rx_nap=20us) instead of \
               waiting to be woken; giving --rcvlowat turns that off. 1 is the kernel's \
               default (iperf3's reads). Not with -r, where the server answers each packet \
               as it arrives.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a number of bytes",
        set: |tcp, text| {
            tcp.rcvlowat = Some(crate::units::parse_bytes_u32(text)?);
            Ok(())
        },
    },
    TestOption {
        id: "skip_rx_copy",
        long: "skip-rx-copy",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "The server's reads discard the received bytes in the kernel (recv with \
               MSG_TRUNC) instead of copying them to its buffer, as neper's --skip-rx-copy: \
               measures the network and TCP stack without the receiver's copy, so it is not \
               like-for-like with iperf3's figures. Not with -r.",
        mesh: Mesh::No,
        probe: None,
        // The receiving end's reads discard the bytes in the kernel, as iperf3's.
        iperf3: Iperf3::Flag("skip_rx_copy"),
        what: "a flag",
        set: |tcp, _| {
            tcp.skip_rx_copy = true;
            Ok(())
        },
    },
    TestOption {
        id: "zerocopy",
        long: "zerocopy",
        short: None,
        alias: None,
        takes: Takes::OptionalValue {
            name: "MODE",
            missing: "splice",
        },
        choices: &["splice", "msg"],
        conflicts: &[],
        help: "Zero-copy sending. `splice` (the default) moves the buffer with \
               vmsplice()+splice(); `msg` uses send(MSG_ZEROCOPY) (on loopback the kernel \
               copies anyway). docs/tuning.md has what each buys.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "splice or msg",
        set: |tcp, text| {
            tcp.zerocopy = match text {
                "msg" => ZeroCopy::Msg,
                "splice" => ZeroCopy::Splice,
                other => return Err(format!("'{other}' is not splice or msg")),
            };
            Ok(())
        },
    },
    TestOption {
        id: "io_uring",
        long: "io-uring",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "Both ends move data through io_uring instead of send()/recv() system calls: \
               one ring per thread, one submission and completion per call (a wait is \
               bounded by a linked time-out). Measures io_uring's socket path against the \
               system calls (docs/tuning.md). Not with --zerocopy, --crr or rsockets.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |tcp, _| {
            tcp.io_uring = true;
            Ok(())
        },
    },
];
