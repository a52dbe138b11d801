//! UDP's options, each declared once (see [`crate::options`]): the command line and the
//! iperf3 front end take them from [`OPTIONS`].

use super::settings::UdpSettings;
use crate::options::{whole_number, Iperf3, Mesh, Takes, TestOption};

/// Every UDP option, in the order the help lists them.
pub static OPTIONS: [TestOption<UdpSettings>; 6] = [
    TestOption {
        id: "udp_batch",
        long: "udp-batch",
        short: None,
        alias: None,
        takes: Takes::Value("N"),
        choices: &[],
        conflicts: &[],
        help: "Datagrams per sendmmsg()/recvmmsg() system call (sequence numbers, loss and \
               reordering stay counted per datagram; the sender threads of -n > 1 or -q 0 \
               send one per call) [default: 64; 1 with -r or -b, where a larger N sends \
               paced bursts of N; with --flows, as many as fill a quarter of a flow's socket \
               buffer].",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a number of datagrams",
        set: |udp, text| {
            udp.batch = u32::try_from(whole_number(text, 0, u32::MAX.into())?).ok();
            Ok(())
        },
    },
    TestOption {
        id: "gso",
        long: "gso",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "Send each batch as UDP GSO messages (UDP_SEGMENT): the kernel cuts them into \
               -l-byte datagrams, so one pass through the stack carries up to 64.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |udp, _| {
            udp.gso = true;
            Ok(())
        },
    },
    TestOption {
        id: "gro",
        long: "gro",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "The server reads with UDP GRO (UDP_GRO), taking datagrams that arrived back to \
               back in one buffer (each still counted on its own).",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |udp, _| {
            udp.gro = true;
            Ok(())
        },
    },
    TestOption {
        id: "ack_timeout",
        long: "ack-timeout",
        short: None,
        alias: None,
        takes: Takes::Value("MS"),
        choices: &[],
        conflicts: &[],
        help: "With -r or --echo: ms to wait for a datagram's reply before sending it again \
               (up to 10 times) [default: 100].",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a number of milliseconds",
        set: |udp, text| {
            let ms = whole_number(text, 0, u32::MAX.into())?;
            udp.ack_timeout_ms = u32::try_from(ms).map_err(|e| e.to_string())?;
            Ok(())
        },
    },
    TestOption {
        id: "rx_timestamps",
        long: "rx-timestamps",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "The receiving end reads each datagram's kernel receive time (SO_TIMESTAMPING, \
               software) and reports two more latencies: network, from the sender's send \
               time to the kernel's receipt (one way: the hosts' clocks must agree), and app \
               wait, from the kernel's receipt to the read that returned it.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |udp, _| {
            udp.rx_timestamps = true;
            Ok(())
        },
    },
    TestOption {
        id: "dont_fragment",
        long: "dont-fragment",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "Never fragment a datagram, as iperf3's --dont-fragment: both ends' datagrams \
               leave with IPv4's DF bit set (IPv6 ones whole), so they cross the path whole \
               or not at all. A packet (-l) larger than the path's MTU carries is refused, \
               with the largest that fits; without this flag the sending host fragments it.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::Flag("dont_fragment"),
        what: "a flag",
        set: |udp, _| {
            udp.dont_fragment = true;
            Ok(())
        },
    },
];
